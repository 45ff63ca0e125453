"""``PrecisionTimeCallback``: the whole fit's ETA in a Lightning progress bar, from before step one.

>>> import lightning as L
>>> from ptp_callback import PrecisionTimeCallback
>>> trainer = L.Trainer(max_epochs=3, callbacks=[PrecisionTimeCallback()])  # doctest: +SKIP

At ``on_fit_start`` (model moved and wrapped) it reads the fit's schedule, traces one training
step and one validation step of the LightningModule under the trainer's precision, and logs the
predicted fit before step one. While training, it measures batches (data-loader wait included),
validation runs and the sanity check, and turns the schedule's remaining work into an ETA shown in
the progress bar (TQDM or Rich) as ``eta 1:02:13 bf16-mixed``. At the end it compares the
prediction made before step one, the calibrated one and the actual fit time, and says when
another precision is predicted to be faster.

============================== =====================================================================
shown / logged                 meaning
============================== =====================================================================
bar ``eta``                    remaining time of the whole fit and the precision it runs at
``ptp/eta_s``                  remaining seconds (to the trainer's loggers, every ``log_every_n_steps``)
``ptp/step_s_predicted``       predicted seconds per optimizer step
``ptp/step_s_measured``        measured seconds per optimizer step (batches x accumulation)
============================== =====================================================================

It never breaks a fit: any failure inside becomes one warning and measured timing alone. Work
happens on every rank only where Lightning needs it (reading the schedule may run collectives);
tracing, printing and the bar are global-rank-zero only.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from ptp_callback.advisor import advice, compare_precisions
from ptp_callback.calibrate import StepStats, measure_op_classes
from ptp_callback.comm import ddp_exposed_seconds, fsdp_exposed_seconds
from ptp_callback.display import format_clock, format_duration
from ptp_callback.eta import FitPlan, FitPrediction, plan_fit, predict_fit, remaining_time
from ptp_callback.precision import PRECISIONS, PrecisionSpec
from ptp_callback.predict import StepPrediction, simulate
from ptp_callback.schedule import FitSchedule
from ptp_callback.step import resolve_device
from ptp_callback.tracer import trace_step

from .lightning_schedule import read_schedule

# A child of Lightning's logger: printed like Lightning's own info lines, configured with them.
log = logging.getLogger("lightning.pytorch.ptp_callback")


class PtpWarning(UserWarning):
    """A problem inside ptp_callback; the fit goes on with measured timing."""


# torch.save of weights and optimizer state to a local disk: an assumed 1 GB/s, not measured here.
_CHECKPOINT_BYTES_PER_S = 1.0e9
_SYNC_EVERY = 50  # batches between device synchronizations that keep measured intervals honest


class PrecisionTimeCallback(Callback):
    """Predict the whole fit before step one; show and log a precision-aware ETA while it runs.

    Args:
        device: predict for this GPU instead of the one the trainer runs on (a short name such as
            ``"h100-sxm"``, a ``torch.cuda.get_device_name()`` string or a ``DeviceSpec``); the ETA
            still calibrates on the real run.
        advise: predict the other precisions and say when one would be faster. ``"auto"``: only
            when it costs under 1% of the fit -- at fit start if it does there, else at fit end
            (advice for next time); ``True``: always (at fit start if cheap, else at fit end);
            ``False``: never.
        calibrate_ops: time the heaviest op classes of the step in isolation before training, to
            correct per-class costs (used for the advice); skipped when it would cost over 0.5%.
        warmup_batches: first training batches never used as measurements.
        refresh_s: how often the ETA text is recomputed.
        show_in_progress_bar: add ``eta`` to the progress bar's metrics.
        clock: seconds since an arbitrary origin; injectable for tests.
    """

    def __init__(
        self,
        device: Any = None,
        *,
        advise: bool | str = "auto",
        calibrate_ops: bool = True,
        warmup_batches: int = 3,
        refresh_s: float = 1.0,
        show_in_progress_bar: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.device = device
        self.advise = advise
        self.calibrate_ops = calibrate_ops
        self.refresh_s = refresh_s
        self.show_in_progress_bar = show_in_progress_bar
        self.clock = clock
        self.stats = StepStats(warmup_batches=warmup_batches)
        self.schedule: FitSchedule | None = None
        self.step_prediction: StepPrediction | None = None
        self.val_prediction: StepPrediction | None = None
        self.plan: FitPlan | None = None
        self.fit_prediction: FitPrediction | None = None  # made before step one
        self.calibrated_total_s: float | None = None
        self.corrections: dict[str, float] = {}
        self.precision_label = ""
        self.eta_text = ""
        self.last_remaining_s: float | None = None
        self.advice_text: str | None = None
        self._warned: set[str] = set()
        self._fit_t0 = 0.0
        self._elapsed_before = 0.0  # fit seconds of earlier runs (resume)
        self._last_refresh = -float("inf")
        self._val_t0: float | None = None
        self._val_batches = 0
        self._sanity_batch_t0: float | None = None
        self._sanity_batches: list[float] = []
        self._bar: Any = None
        self._example: tuple[Any, Any, Any] | None = None
        self._checkpoint_s = 0.0
        self._load_s = 0.0  # seconds one example batch took to build (data loading, collate)
        self.comm_s = 0.0  # predicted gradient communication per optimizer step
        self.sanity_extra_s: float | None = None
        self.initial_fit_s: float | None = None  # the fit-start prediction, when a later one replaced it
        self._trace: Any = None
        self._spec: Any = None
        self._coef: Any = None
        self.precision_options: list[Any] = []
        self.summary = ""

    # ------------------------------------------------------------------ failures never break a fit
    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"ptp: {message}", PtpWarning, stacklevel=3)

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - inside fit every failure becomes a warning
            self._warn(what, f"{what} failed ({type(exc).__name__}: {exc}); falling back to measured timing")

    @property
    def predicted_fit_s(self) -> float | None:
        """The whole fit's seconds as predicted before step one (``None`` if no prediction)."""
        if self.fit_prediction is None or self.fit_prediction.total_s is None:
            return None
        return self.fit_prediction.total_s + self._checkpoint_s

    # ------------------------------------------------------------------------------ fit start
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._fit_t0 = self.clock()
        with self._guard("reading the fit's schedule"):
            self.schedule = read_schedule(trainer)  # every rank: it may run collectives
        if not trainer.is_global_zero:
            return
        self.precision_label = _precision_label(trainer)
        with self._guard("predicting the fit"):
            self._predict_before_step_one(trainer, pl_module)
        if self.show_in_progress_bar:
            self._install_bar_metric(trainer)
        self._refresh(trainer, force=True)

    def _predict_before_step_one(self, trainer: Trainer, pl_module: LightningModule) -> None:
        precision = _precision_spec(trainer)
        if precision is None:
            self._warn("precision", f"precision {trainer.precision!r} is not modelled; ETA from measured timing only")
            return
        if not pl_module.automatic_optimization:
            self._warn("manual", "manual optimization is not traced; ETA from measured timing only")
            return
        device = self.device if self.device is not None else trainer.strategy.root_device
        spec, coef = resolve_device(device)
        loaded_at = time.perf_counter()
        train_batch = _example_batch(trainer, pl_module, trainer.train_dataloader)
        self._load_s = time.perf_counter() - loaded_at
        if train_batch is None:
            self._warn("batch", "no training batch to trace; ETA from measured timing only")
            return
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        target_type = "cpu" if spec.arch == "cpu" else "cuda"
        with _quiet_logging(pl_module):
            trace = trace_step(pl_module, train_batch, _training_step, optimizer, precision, target_type=target_type)
            self.step_prediction = simulate(trace, spec, coef)
            val_batch = _example_batch(trainer, pl_module, trainer.val_dataloaders) if _has_validation(trainer) else None
            if val_batch is not None:
                val_trace = trace_step(pl_module, val_batch, _validation_step, None, precision,
                                       target_type=target_type, train=False)
                self.val_prediction = simulate(val_trace, spec, coef)
        self._trace = trace
        self._spec, self._coef = spec, coef
        self._example = (train_batch, optimizer, precision)
        self.plan = self._plan(trainer, precision, spec.arch != "cpu")
        if self.schedule is not None:
            self.fit_prediction = predict_fit(self.schedule, self.plan)
            self._checkpoint_s = self._checkpoint_allowance(trainer)
            self._log_prediction(trainer, spec)
        self._maybe_advise_now(trainer, pl_module)

    def _plan(self, trainer: Trainer, precision: PrecisionSpec, on_gpu: bool) -> FitPlan:
        step = self.step_prediction
        assert step is not None
        self.comm_s = self._communication_s(trainer, step) if on_gpu else 0.0
        sanity = bool(self.schedule is not None and self.schedule.sanity_batches)
        return plan_fit(step, self.val_prediction, on_gpu=on_gpu, autocast=precision.autocast_dtype is not None,
                        sanity=sanity, data_wait_s=_data_wait(trainer.train_dataloader, self._load_s, step.step_s),
                        comm_s=self.comm_s)

    def _communication_s(self, trainer: Trainer, step: StepPrediction) -> float:
        """Gradient communication per optimizer step of DDP / FSDP across ``trainer.world_size`` GPUs."""
        link = getattr(self._spec, "interconnect_gbs", None)
        if trainer.world_size <= 1 or not link or self._trace is None:
            return 0.0
        strategy = type(trainer.strategy).__name__.lower()
        grad_bytes = sum(p.numel() * (4 if p.dtype == torch.float32 else p.element_size())
                         for p in trainer.lightning_module.parameters() if p.requires_grad)
        if "fsdp" in strategy:
            return fsdp_exposed_seconds(grad_bytes, step.step_s, world_size=trainer.world_size, link_gbs=link)
        if "ddp" in strategy:
            return ddp_exposed_seconds(grad_bytes, step.breakdown["phase"]["backward"], world_size=trainer.world_size,
                                       link_gbs=link)
        return 0.0

    def _checkpoint_allowance(self, trainer: Trainer) -> float:
        """Seconds of ModelCheckpoint saves: saves x (weights + optimizer state) / write speed."""
        from lightning.pytorch.callbacks import ModelCheckpoint

        schedule = self.schedule
        if schedule is None or schedule.total_batches is None:
            return 0.0
        saves = 0
        for cb in trainer.checkpoint_callbacks:
            if not isinstance(cb, ModelCheckpoint):
                continue
            steps = schedule.total_steps or 0
            if cb._every_n_train_steps:
                saves += max(0, steps - schedule.start_step) // cb._every_n_train_steps
            elif cb._every_n_epochs and schedule.batches_per_epoch:
                epochs = -(-(schedule.total_batches - schedule.start_batch) // schedule.batches_per_epoch)
                saves += max(1, epochs // cb._every_n_epochs)
        if not saves or self._trace is None:
            return 0.0
        state_bytes = self._trace.param_bytes * 3  # weights + two optimizer moments (Adam-like)
        return saves * state_bytes / _CHECKPOINT_BYTES_PER_S

    def _log_prediction(self, trainer: Trainer, spec: Any) -> None:
        fit = self.fit_prediction
        total = self.predicted_fit_s
        if fit is None or total is None:
            _print(trainer, f"ptp: predicted step "
                            f"{format_duration(self.step_prediction.step_s if self.step_prediction else None)} "
                            f"at {self.precision_label} on {spec.name} (fit length unbounded)")
            return
        parts = f"train {format_duration(fit.train_s)}, validation {format_duration(fit.val_s + fit.sanity_s)}"
        if self._checkpoint_s:
            parts += f", checkpoints {format_duration(self._checkpoint_s)}"
        if self.comm_s:
            parts += f"; gradient sync {format_duration(self.comm_s)} per step on {trainer.world_size} GPUs"
        capped = " (stopped by max_time)" if fit.capped_by_max_time else ""
        _print(trainer, f"ptp: predicted fit {format_duration(total)} ({parts}){capped} at {self.precision_label} "
                        f"on {spec.name}")

    # ----------------------------------------------------------------------- precision advice
    def _advice_cost_s(self) -> float:
        """Seconds the advice costs: a trace and a prediction per candidate precision."""
        return 6 * (self._trace.trace_s + 0.05) if self._trace is not None else float("inf")

    def _maybe_advise_now(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.advise or self.fit_prediction is None or self.fit_prediction.total_s is None:
            return
        if self._advice_cost_s() < 0.005 * self.fit_prediction.total_s:
            self._advise(trainer, pl_module, self.fit_prediction.total_s)
            self.advise = False  # done; not again at the end

    def _advise(self, trainer: Trainer, pl_module: LightningModule, fit_s: float | None,
                measured_step_s: float | None = None) -> None:
        if self._example is None:
            return
        batch, optimizer, precision = self._example
        with _quiet_logging(pl_module):
            options = compare_precisions(pl_module, batch, _training_step, optimizer, current=precision,
                                         device=self._spec, corrections=self.corrections or None,
                                         measured_step_s=measured_step_s)
        self.precision_options = options
        fixed_s = self._checkpoint_s
        if measured_step_s is None and self.plan is not None and self.step_prediction is not None and self.schedule:
            # Before any measurement: the predicted data-loader wait does not change with precision.
            wait = self.plan.train_batch_s - (self.step_prediction.step_s - self.plan.optimizer_step_s)
            fixed_s += max(0.0, wait) * ((self.schedule.total_batches or 0) - self.schedule.start_batch)
        text = advice(options, precision.label, fit_s, fixed_s=fixed_s)
        if text:
            self.advice_text = text
            _print(trainer, f"ptp: {text}")

    # ------------------------------------------------------------------------ measurements
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        with self._guard("refining the prediction with the sanity check"):
            self._refine_with_sanity_check(trainer)
        if not self.calibrate_ops or self.fit_prediction is None:
            return
        if self.fit_prediction.total_s is None or self.fit_prediction.total_s < 200.0:
            return  # a 1 s measurement would cost over 0.5% of a short fit
        with self._guard("timing op classes"):
            host = getattr(self._coef, "host_op_s", {}).get("optimizer", 0.0) if self._spec.arch == "cpu" else 0.0
            self.corrections = measure_op_classes(self._trace, self._spec, self._coef, trainer.strategy.root_device,
                                                  budget_s=1.0, host_overhead_s=host)

    def _refine_with_sanity_check(self, trainer: Trainer) -> None:
        """Still before step one: the sanity check ran real validation batches through the real
        loop. On a CPU (no warm-up to speak of) what a batch took beyond its predicted compute is
        the loop's own per-batch cost (hooks, logging, data fetch), which training batches pay too."""
        measured = self._sanity_val_batch_s()
        if measured is None or self.val_prediction is None or self.plan is None or self.schedule is None:
            return
        extra = max(0.0, measured - self.val_prediction.step_s)
        self.sanity_extra_s = extra
        self.plan = replace(self.plan, train_batch_s=self.plan.train_batch_s + extra, val_batch_s=measured)
        self.initial_fit_s = self.predicted_fit_s
        self.fit_prediction = predict_fit(self.schedule, self.plan)
        if self.fit_prediction.total_s is not None:
            _print(trainer, f"ptp: predicted fit {format_duration(self.predicted_fit_s)} after the sanity check "
                            f"(+{format_duration(extra)} per batch of loop overhead) at {self.precision_label}")

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if trainer.is_global_zero:
            self.stats.batch_start(self.clock())

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not trainer.is_global_zero:
            return
        if trainer.strategy.root_device.type == "cuda" and self.stats.batches_seen % _SYNC_EVERY == self.stats.warmup_batches:
            # Kernels run behind the host: without a sync now and then, early intervals would time
            # the host filling the launch queue. Once every _SYNC_EVERY batches costs a few us.
            torch.cuda.synchronize(trainer.strategy.root_device)
        now = self.clock()
        self.stats.batch_end(now)
        self._refresh(trainer)
        self._log_metrics(trainer)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._val_t0 = self.clock()
            self._val_batches = 0

    def on_validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking:
            self._sanity_batch_t0 = self.clock()

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking:
            if self._sanity_batch_t0 is not None:
                self._sanity_batches.append(self.clock() - self._sanity_batch_t0)
        else:
            self._val_batches += 1

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or self._val_t0 is None:
            return
        if trainer.state.fn == "fit":
            self.stats.validation(self._val_t0, self.clock(), self._val_batches)
        self._val_t0 = None
        self._refresh(trainer, force=True)

    # ------------------------------------------------------------------------------ the ETA
    def _batches_done(self, trainer: Trainer) -> int:
        return int(trainer.fit_loop.epoch_loop.batch_progress.total.ready)

    def remaining_s(self, trainer: Trainer) -> float | None:
        """Seconds left in the fit, from measurements once there are some, else the prediction."""
        if self.schedule is None:
            return None
        estimate = self.stats.batch
        measured = estimate.mean_s is not None
        if measured:
            batch_s = estimate.mean_s
        elif self.plan is not None:
            schedule = self.schedule
            steps_per_batch = (schedule.total_steps or 0) / max(1, (schedule.total_batches or 1))
            batch_s = self.plan.train_batch_s + steps_per_batch * self.plan.optimizer_step_s
        else:
            return None
        val_batch_s = self.stats.val_batch_s()
        if val_batch_s is None:
            val_batch_s = self._sanity_val_batch_s()
        if val_batch_s is None:
            val_batch_s = self.plan.val_batch_s if self.plan is not None else batch_s / 3
        elapsed = self._elapsed_before + self.clock() - self._fit_t0
        left = remaining_time(self.schedule, self._batches_done(trainer), batch_s=batch_s, val_batch_s=val_batch_s,
                              elapsed_s=elapsed, measured=measured, val_pending=trainer.state.stage == "train")
        if left.seconds is None:
            return None
        if self.schedule.total_batches and self.schedule.total_batches > self.schedule.start_batch:
            share_left = (left.train_batches or 0) / (self.schedule.total_batches - self.schedule.start_batch)
            return left.seconds + self._checkpoint_s * share_left
        return left.seconds

    def _sanity_val_batch_s(self) -> float | None:
        """A validation batch's time from the sanity check: the fastest of its batches after the
        first (which pays the first call's set-up), and only on a CPU: a GPU's first batches pay
        kernel loading and autotuning for seconds."""
        if getattr(self, "_spec", None) is None or self._spec.arch != "cpu" or len(self._sanity_batches) < 2:
            return None
        return min(self._sanity_batches[1:])

    def _refresh(self, trainer: Trainer, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_refresh < self.refresh_s:
            return
        self._last_refresh = now
        remaining = self.remaining_s(trainer)
        self.last_remaining_s = remaining
        self.eta_text = f"{format_clock(remaining)} {self.precision_label}".strip() if remaining is not None else ""
        estimate = self.stats.batch
        if self.calibrated_total_s is None and remaining is not None and estimate.samples >= 10:
            self.calibrated_total_s = now - self._fit_t0 + remaining  # this run, like the prediction

    def _log_metrics(self, trainer: Trainer) -> None:
        if not trainer.loggers or trainer.global_step == 0 or trainer.global_step % max(1, trainer.log_every_n_steps):
            return
        if getattr(self, "_logged_step", -1) == trainer.global_step:
            return
        self._logged_step = trainer.global_step
        metrics = {}
        if self.last_remaining_s is not None:
            metrics["ptp/eta_s"] = self.last_remaining_s
        if self.step_prediction is not None:
            metrics["ptp/step_s_predicted"] = self.step_prediction.step_s
        if self.stats.batch.mean_s is not None:
            metrics["ptp/step_s_measured"] = self.stats.batch.mean_s * trainer.accumulate_grad_batches
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    # -------------------------------------------------------------------------- progress bar
    def _install_bar_metric(self, trainer: Trainer) -> None:
        bar = trainer.progress_bar_callback
        if bar is None or not hasattr(bar, "get_metrics"):
            return
        original = bar.get_metrics

        def get_metrics(trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
            metrics = original(trainer, pl_module)
            if self.eta_text:
                metrics = {**metrics, "eta": self.eta_text}
            return metrics

        bar.get_metrics = get_metrics  # an instance attribute: removed again at fit end
        self._bar = bar

    def _remove_bar_metric(self) -> None:
        if self._bar is not None and "get_metrics" in vars(self._bar):
            del self._bar.get_metrics
        self._bar = None

    # ------------------------------------------------------------------------------ fit end
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._remove_bar_metric()
        if not trainer.is_global_zero:
            return
        actual = self.clock() - self._fit_t0  # this run: what the predictions were about
        parts = [f"ptp: fit took {format_duration(actual)}"]
        before = self.predicted_fit_s
        if self.initial_fit_s is not None:
            parts.append(f"predicted at fit start {format_duration(self.initial_fit_s)} ({_signed(self.initial_fit_s, actual)})")
        if before is not None:
            parts.append(f"predicted before step one {format_duration(before)} ({_signed(before, actual)})")
        if self.calibrated_total_s is not None:
            parts.append(f"calibrated {format_duration(self.calibrated_total_s)} ({_signed(self.calibrated_total_s, actual)})")
        self.summary = "; ".join(parts)
        _print(trainer, self.summary)
        affordable = self.advise is True or self._advice_cost_s() < 0.01 * actual
        if self.advise and affordable and self._example is not None and self.fit_prediction is not None:
            with self._guard("precision advice"):
                measured = self.stats.batch.mean_s
                step = measured * trainer.accumulate_grad_batches if measured else None
                self._advise(trainer, pl_module, actual, measured_step_s=step)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._remove_bar_metric()

    # ------------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        elapsed = self._elapsed_before + (self.clock() - self._fit_t0 if self._fit_t0 else 0.0)
        return {"stats": self.stats.state_dict(), "corrections": dict(self.corrections), "elapsed_s": elapsed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.stats.load_state_dict(state_dict.get("stats", {}))
        self.corrections = dict(state_dict.get("corrections", {}))
        self._elapsed_before = float(state_dict.get("elapsed_s", 0.0))


# ---------------------------------------------------------------------------------- helpers
def _signed(predicted: float, actual: float) -> str:
    return f"{100.0 * (predicted / actual - 1.0):+.1f}%" if actual > 0 else "?"


def _print(trainer: Trainer, text: str) -> None:
    if trainer.is_global_zero:
        log.info(text)


def _precision_label(trainer: Trainer) -> str:
    spec = _precision_spec(trainer)
    return spec.label if spec is not None else str(trainer.precision)


def _precision_spec(trainer: Trainer) -> PrecisionSpec | None:
    name = str(trainer.precision)
    if name not in PRECISIONS:
        return None
    spec = PrecisionSpec.from_setting(name)
    if trainer.strategy.root_device.type == "cpu":
        spec = spec.with_tf32(False, False)  # TF32 is a GPU matter
    return spec


def _training_step(module: LightningModule, batch: Any) -> Any:
    return module.training_step(batch, 0)


def _validation_step(module: LightningModule, batch: Any) -> Any:
    return module.validation_step(batch, 0)


def _has_validation(trainer: Trainer) -> bool:
    from lightning.pytorch.utilities.model_helpers import is_overridden

    return bool(trainer.enable_validation and is_overridden("validation_step", trainer.lightning_module))


@contextlib.contextmanager
def _quiet_logging(module: LightningModule) -> Iterator[None]:
    """``self.log`` needs the loop's result collection, which does not exist at fit start: while
    tracing, logging calls are no-ops."""
    saved = {name: module.__dict__.get(name) for name in ("log", "log_dict")}
    module.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    module.log_dict = lambda *args, **kwargs: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                module.__dict__.pop(name, None)
            else:
                module.__dict__[name] = value


@contextlib.contextmanager
def _rng_preserved() -> Iterator[None]:
    """Taking an example batch must not change the user's data order: restore every RNG after."""
    import random

    import numpy as np

    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    py_state = random.getstate()
    np_state = np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        random.setstate(py_state)
        np.random.set_state(np_state)


def _data_wait(loaders: Any, load_s: float, compute_s: float) -> float:
    """Seconds a training batch waits for data, from the time one example batch took to build.

    Without workers, loading runs in the training loop: every batch waits for all of it. With
    ``num_workers`` workers it overlaps training, and a batch waits only when the workers together
    are slower than the step: ``load_s / num_workers - compute_s``, if positive.
    """
    loader = _first_loader(loaders)
    workers = getattr(loader, "num_workers", 0) or 0
    return load_s if workers == 0 else max(0.0, load_s / workers - compute_s)


def _first_loader(loaders: Any) -> Any:
    if loaders is None:
        return None
    flattened = getattr(loaders, "flattened", None)
    if flattened:
        return flattened[0]
    if isinstance(loaders, (list, tuple)):
        return loaders[0] if loaders else None
    if isinstance(loaders, dict):
        return next(iter(loaders.values()), None)
    return loaders


def _example_batch(trainer: Trainer, module: LightningModule, loaders: Any) -> Any:
    """One batch shaped like the loader's, without touching the user's iterators or RNG.

    A map-style dataset with a batch size gives its first items collated directly (no workers, no
    sampler draw); anything else is read from a fresh iterator with all RNG states restored.
    """
    loader = _first_loader(loaders)
    if loader is None:
        return None
    with _rng_preserved():
        dataset = getattr(loader, "dataset", None)
        batch_size = getattr(loader, "batch_size", None)
        if batch_size and hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and len(dataset):
            items = [dataset[i] for i in range(min(batch_size, len(dataset)))]
            batch = loader.collate_fn(items)
        else:
            batch = next(iter(loader))
        with contextlib.suppress(Exception):  # user hooks written for the loop's state
            batch = module.on_before_batch_transfer(batch, 0)
            batch = module.on_after_batch_transfer(batch, 0)
    return batch
