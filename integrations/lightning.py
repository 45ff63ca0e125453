"""``PrecisionTimeCallback``: the whole fit's ETA in a Lightning progress bar, from before step one.

>>> import lightning as L
>>> from ptp_callback import PrecisionTimeCallback
>>> trainer = L.Trainer(max_epochs=3, callbacks=[PrecisionTimeCallback()])  # doctest: +SKIP

A translator: at ``on_fit_start`` it reads the fit's schedule and checkpoint saves from the trainer,
predicts the run (:func:`~ptp_callback.run_prediction.predict_run`: the training and validation
steps traced under the trainer's precision, the host's costs) and from then on feeds every hook to
a :class:`~ptp_callback.forecast.RunForecaster` as an event. The forecaster does the arithmetic;
this module only reads Lightning and shows the result.

What it shows and logs (the bar's ``eta``, ``ptp/eta_s`` and the step times to the loggers, the
plan at fit start, the report at fit end): ``docs/api.md``.

It never breaks a fit: any failure inside becomes one warning and measured timing alone. Reading
the schedule runs on every rank (it may run collectives); predicting, printing and the bar are
global-rank-zero only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from ptp_callback.arguments import check_callback_settings, lazy_modules
from ptp_callback.device_names import resolve_target
from ptp_callback.devices import DeviceSpec
from ptp_callback.forecast import RunForecaster
from ptp_callback.notices import OnceWarnings, PrecisionHazard
from ptp_callback.report import plan_line, report_line
from ptp_callback.run_prediction import RunPrediction
from ptp_callback.run_readouts import RunReadouts
from ptp_callback.training_parameters import TrainingParametersWatch

from .lightning_finetuning import expect_unfreezing, fit_parameters, retraced_step
from .lightning_module import (add_bar_metric, advise_precision, log_eta_metrics, logs_now, plan_notes,
                               precision_spec, predict_fit, time_op_classes)
from .lightning_schedule import announce_weights_only_saves, fit_forecaster, follow_epoch_start, time_limit_used

log = logging.getLogger("lightning.pytorch.ptp_callback")  # printed and configured like Lightning's own lines

def _nothing() -> None:
    """The bar metric's remover before one is added (a module function: the callback stays picklable)."""


_SYNC_EVERY = 100  # batches between device syncs that keep measured intervals honest (not the launch queue)


class PrecisionTimeCallback(RunReadouts, Callback):
    """Predict the whole fit before step one; show and log a precision-aware ETA while it runs.

    Args:
        device: predict for this GPU instead of the one the trainer runs on (a short name such as
            ``"h100-sxm"``, a ``torch.cuda.get_device_name()`` string or a ``DeviceSpec``); the ETA
            still follows the real run.
        advise: predict the other precisions and say when one would be faster. ``"auto"``: only
            when it costs under 1% of the fit (at fit start if it does there, else at fit end);
            ``True``: always; ``False``: never.
        calibrate_ops: time the heaviest op classes of the step in isolation before training (about a
            second, only for fits predicted to last over 200 s) to correct the precision advice.
            Off by default: on an H100 it left launch-bound training slower for the rest of the
            process; the ETA does not need it.
        warmup_batches: first training batches never used as steady measurements.
        refresh_s: the longest the ETA text goes without being recomputed (sooner early in the fit).
        show_in_progress_bar: add ``eta`` to the progress bar's metrics.
        clock: seconds since an arbitrary origin; injectable for tests.
    """

    def __init__(self, device: str | torch.device | DeviceSpec | None = None, *, advise: bool | str = "auto",
                 calibrate_ops: bool = False, warmup_batches: int = 3, refresh_s: float = 1.0,
                 show_in_progress_bar: bool = True, clock: Callable[[], float] = time.perf_counter) -> None:
        # "h100" -> h100-sxm; an unknown name fails here. The note waits for the fit: with
        # strategy="ddp" every rank builds the callback, and rank zero alone should say it.
        device, self._device_note = resolve_target(device)
        check_callback_settings("PrecisionTimeCallback", advise, warmup_batches, refresh_s, clock,
                                calibrate_ops=calibrate_ops, show_in_progress_bar=show_in_progress_bar)
        self.device, self.advise, self.calibrate_ops = device, advise, calibrate_ops
        self.warmup_batches = warmup_batches
        self.corrections: dict[str, float] = {}
        self.refresh_s, self.show_in_progress_bar, self.clock = refresh_s, show_in_progress_bar, clock
        self.forecaster: RunForecaster | None = None
        self.prediction: RunPrediction | None = None
        self.precision_label = self.summary = ""
        self.advice_text: str | None = None
        self._active = False
        self._restored: dict[str, Any] | None = None
        self._warnings = OnceWarnings()
        self._logged_step = -1
        self._remove_bar_metric: Callable[[], None] = _nothing
        self._forget_saves: Callable[[], None] = _nothing
        self._example: Any = None
        self._predict_at_train_start = False
        self._checkpoint: Any = None
        self._watch: TrainingParametersWatch | None = None  # the parameters that train

    @property
    def state_key(self) -> str:
        # two callbacks predicting for different GPUs may share a trainer: each keeps its own state
        return super().state_key if self.device is None else self._generate_state_key(device=str(self.device))

    def __getstate__(self) -> dict[str, Any]:
        """What a copy gets: ``strategy="ddp_spawn"`` pickles the trainer with its callbacks into each
        process it starts. The settings and a resumed fit's state go; a fit in progress (its
        forecaster holds the trainer, its bar metric a closure) does not."""
        state = self.__dict__.copy()
        state.update(forecaster=None, prediction=None, _example=None, _checkpoint=None, _active=False, _watch=None,
                     _remove_bar_metric=_nothing, _forget_saves=_nothing)
        return state

    # --------------------------------------------------------------------------- fit start
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._active, self._watch = False, None
        if trainer.fast_dev_run:  # a smoke test of the code: Lightning turns its checkpoints and loggers off too
            return
        started = self.clock()
        with self._warnings.guard("reading the fit's schedule"):
            # every rank: reading the schedule may run collectives (and starts the loader)
            self.forecaster, self._checkpoint = fit_forecaster(trainer, self.warmup_batches)
            self.forecaster.fit_start(started, limit_used_s=time_limit_used(trainer))
            if self._restored is not None:
                self.forecaster.load_state_dict(self._restored)
        self._active = trainer.is_global_zero and self.forecaster is not None
        if not self._active:
            return
        if self._device_note:
            self._warnings.warn("device name", self._device_note)
        self._forget_saves = announce_weights_only_saves(
            trainer, lambda: self.on_save_checkpoint(trainer, pl_module, {}))
        spec = precision_spec(trainer)
        self.precision_label = spec.label if spec is not None else str(trainer.precision)
        schedule = self.forecaster.schedule
        if schedule.total_batches is not None and schedule.total_batches <= schedule.start_batch:
            return  # limit_train_batches=0, a resume past its limits: nothing trains, nothing to predict
        if lazy_modules(pl_module):
            # Lazy modules get their shapes from the first real forward: the sanity check's, when
            # there is one. Predicted then, at train start, still before step one.
            self._predict_at_train_start = True
        else:
            self._predict(trainer, pl_module, spec)
        if self.show_in_progress_bar:
            self._remove_bar_metric = add_bar_metric(trainer, "eta", lambda: self.eta_text)
        self.refresh_eta(force=True)

    def _predict(self, trainer: Trainer, pl_module: LightningModule, spec: Any) -> None:
        """Predict the fit, install the plan, print it and the precision advice."""
        forecaster = self.forecaster
        assert forecaster is not None
        own = self.clock()
        with self._warnings.guard("predicting the fit"):
            self.prediction, self._example = predict_fit(trainer, pl_module, spec, self._checkpoint, self.device,
                                                         forecaster.schedule.sanity_batches or 0)
        if self.prediction is not None:
            self._watch = TrainingParametersWatch(self.prediction, forecaster, fit_parameters(trainer, pl_module))
            with self._warnings.guard("predicting the backbone's unfreezing", "it is priced when it happens"):
                expect_unfreezing(self._watch, trainer, pl_module, self._example)
        forecaster.own_work(self.clock() - own)
        if self.prediction is not None:
            now = self.clock()
            forecaster.set_plan(self.prediction.plan, now)
            line = plan_line(forecaster.initial_parts, forecaster.total_s(now), self.precision_label,
                             self.prediction.device.name, earlier_s=forecaster.elapsed_before_s)
            _print(trainer, "ptp: " + line + plan_notes(trainer, pl_module, self.prediction.device))
            for hazard in self.prediction.trace.hazards:
                self._warnings.warn(hazard, hazard, PrecisionHazard)
            if self._advice_cost_s() < 0.005 * (forecaster.predicted_total_s or 0.0):
                started = self.clock()
                self._advise(trainer, pl_module, forecaster.predicted_total_s)
                forecaster.own_work(self.clock() - started)  # its traces are the callback's, not start-up's

    # ----------------------------------------------------------------------- precision advice
    def _advise(self, trainer: Trainer, pl_module: LightningModule, fit_s: float | None,
                measured_step_s: float | None = None) -> None:
        if not self.advise or self.prediction is None or self.forecaster is None or self._example is None:
            return
        self.advise = False  # once per fit
        with self._warnings.guard("precision advice"):
            text = advise_precision(trainer, pl_module, self.prediction, self._example, self.forecaster.schedule,
                                    fit_s=fit_s, measured_step_s=measured_step_s, corrections=self.corrections or None)
            if text:
                self.advice_text = text
                _print(trainer, f"ptp: {text}")

    # ------------------------------------------------------------------------------ events
    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._active:
            self.forecaster.sanity_start(self.clock())

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._active:
            self.forecaster.sanity_end(self.clock())

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._active:
            return
        if self._predict_at_train_start:
            self._predict_at_train_start = False
            lazy = lazy_modules(pl_module)
            if lazy:  # no sanity check ran a forward: nothing has created them yet
                self._warnings.warn("lazy", f"{', '.join(lazy[:3])}: parameters not created before the first "
                                    "step (lazy modules, no sanity check): the ETA comes from measured batches alone")
            else:
                self._predict(trainer, pl_module, precision_spec(trainer))
        if self.calibrate_ops:
            with self._warnings.guard("timing op classes"):
                self.corrections = time_op_classes(trainer, self.prediction, self.forecaster, self.clock)
        self.forecaster.train_start(self.clock(), limit_used_s=time_limit_used(trainer))
        if getattr(trainer.fit_loop, "restarted_mid_epoch", False):  # Lightning skips on_train_epoch_start then
            self.forecaster.epoch_start(self.clock())

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._active:
            return
        self.forecaster.epoch_start(self.clock())
        with self._warnings.guard("following the reloaded train loader or new accumulation", "the ETA keeps the old"):
            follow_epoch_start(trainer, self.forecaster, self.clock)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if not self._active:
            return
        if batch_idx == 0:
            self._follow_parameters(trainer, pl_module)
        self.forecaster.batch_start(self.clock())

    def _follow_parameters(self, trainer: Trainer, pl_module: LightningModule, now: float | None = None) -> bool:
        """The batch's cost as the parameters that train now make it: at each epoch's first batch
        (after every callback's epoch start), and inside an epoch (``now``) when the ETA is
        recomputed, at most once a second; ``True`` when it changed."""
        if self._watch is None or now is not None and not self._watch.look_due(now):
            return False
        started, changed = self.clock(), False
        with self._warnings.guard("following the parameters that train", "the ETA keeps the batch's cost"):
            changed = self._watch.check(fit_parameters(trainer, pl_module), lambda: retraced_step(
                trainer, pl_module, self.prediction, self._example), trainer.accumulate_grad_batches)
        self.forecaster.own_work(self.clock() - started)
        return changed

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self._active:
            return
        forecaster = self.forecaster
        if forecaster.batches.seen % _SYNC_EVERY == self.warmup_batches and trainer.strategy.root_device.type == "cuda":
            # Kernels run behind the host: without a sync now and then, early intervals would time the
            # host filling the launch queue. One every _SYNC_EVERY batches costs a few microseconds each.
            torch.cuda.synchronize(trainer.strategy.root_device)
        now = self.clock()
        forecaster.batch_end(now)
        refreshed = self.refresh_eta(now)
        if refreshed and self._follow_parameters(trainer, pl_module, now):  # (a change inside an epoch)
            self.refresh_eta(force=True)
        if logs_now(trainer, self._logged_step):
            if not refreshed:
                self.refresh_eta(now, force=True)
            self._logged_step = log_eta_metrics(trainer, self.last_remaining_s,
                                                self._watch.step_s if self._watch is not None else None,
                                                forecaster.batches.mean_s())

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._active and not trainer.sanity_checking:
            self.forecaster.val_start(self.clock())

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._active:
            self.forecaster.val_batch_end(self.clock())

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._active and not trainer.sanity_checking:
            self.forecaster.val_end(self.clock())
            self.refresh_eta(force=True)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._active:
            self.forecaster.epoch_end(self.clock())

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._active and trainer.state.fn == "fit":
            self.forecaster.save_start(self.clock())  # the write follows; the next hook ends it

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._active:
            self.forecaster.train_end(self.clock())

    # ------------------------------------------------------------------------------- the ETA
    def remaining_s(self, trainer: Trainer | None = None) -> float | None:
        """Seconds left in the fit now (``None`` when its length is unknown)."""
        return self.forecaster.remaining_s(self.clock()) if self.forecaster is not None else None

    # ------------------------------------------------------------------------------ fit end
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._remove_bar_metric()
        self._forget_saves()
        forecaster = self.forecaster
        if not self._active or forecaster is None:
            return
        self._active = False  # a trainer.validate() after the fit is not part of it
        actual = self._report(trainer, forecaster)
        if self.advise is True or self.advise and self._advice_cost_s() < 0.01 * actual:
            measured = None if self._other_device(trainer.strategy.root_device) else forecaster.batches.mean_s()
            if measured and self._watch is not None:
                measured /= self._watch.factor  # the advice prices the step traced at fit start
            self._advise(trainer, pl_module, actual, measured * trainer.accumulate_grad_batches if measured else None)

    def _report(self, trainer: Trainer, forecaster: RunForecaster, stopped_by: str | None = None) -> float:
        """Print each part's prediction beside what it measured; the fit's length in seconds."""
        now = self.clock()
        forecaster.fit_end(now)
        actual = forecaster.elapsed_s(now)  # a resumed fit's earlier runs included, as in its predictions
        self.summary = "ptp: " + report_line(forecaster.initial_parts, forecaster.parts(now), actual,
                                             forecaster.before_step_one_s, stopped=forecaster.stopped_early,
                                             stopped_by=stopped_by, earlier_s=forecaster.elapsed_before_s,
                                             other_device=self._other_device(trainer.strategy.root_device))
        _print(trainer, self.summary)
        return actual

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._remove_bar_metric()
        self._forget_saves()
        forecaster = self.forecaster
        if not self._active or forecaster is None:
            return
        self._active = False
        # What ran, as a fit that ends early is reported ("fit stopped by KeyboardInterrupt after 40 of
        # 200 training batches"); the user's exception goes on unchanged.
        with self._warnings.guard("the report of the interrupted fit", then="no report"):
            self._report(trainer, forecaster, stopped_by=type(exception).__name__)

    # -------------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        return self.forecaster.state_dict(self.clock()) if self.forecaster is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict)
        if self.forecaster is not None:  # FSDP, DeepSpeed: restored after on_fit_start
            self.forecaster.load_state_dict(self._restored)


# ------------------------------------------------------------------------------------ helpers
def _print(trainer: Trainer, text: str) -> None:
    if trainer.is_global_zero:
        log.info(text)
