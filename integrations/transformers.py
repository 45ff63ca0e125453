"""``PrecisionTimeTrainerCallback``: the whole run's ETA for the Hugging Face ``Trainer``.

>>> from transformers import Trainer
>>> from ptp_callback.integrations.transformers import PrecisionTimeTrainerCallback
>>> trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,    # doctest: +SKIP
...                   callbacks=[PrecisionTimeTrainerCallback()])
>>> trainer.train()                                                                    # doctest: +SKIP

A translator: at ``on_train_begin`` it reads the run from the ``TrainingArguments`` and
``TrainerState``, predicts it (one training step of the model traced under the run's precision,
the host's costs) and from then on turns every hook into a
:class:`~ptp_callback.forecast.RunForecaster` event through a
:class:`~ptp_callback.tracker.RunTracker`. It holds no arithmetic of its own.

=================================== ===============================================================
read from the Trainer               used as
=================================== ===============================================================
``args.fp16`` / ``args.bf16``       ``16-mixed`` / ``bf16-mixed`` (else ``32-true``; a model loaded in
                                    bf16 or fp16 trains at ``bf16-true`` / ``16-true``)
``args.tf32``                       TF32 matmuls on or off (``None``: torch's flag)
``state.max_steps``, ``global_step`` the run's length and, on a resume, where it starts
``gradient_accumulation_steps``     micro-batches per optimizer step (each is timed)
``max_grad_norm``                   the gradients' clipping before each step, traced with it
``eval_strategy`` / ``eval_steps``  evaluations to come (``eval_delay`` and the final one included)
``get_eval_dataloader()``           each evaluation's batches and one batch traced (forward, no grad)
``save_strategy`` / ``save_steps``  checkpoint saves to come (the final one included; ``"best"``:
                                    every evaluation, an upper bound)
=================================== ===============================================================

=================================== ===============================================================
shown / logged                      meaning
=================================== ===============================================================
progress bar ``eta=``               remaining time of the whole run and its precision
``eta`` in each log line            the same, as the Trainer prints its logs
line at the start of training       the run predicted before step one, part by part
line at the end of training         each part's prediction beside what it measured
``PrecisionAdvice`` warning         another precision predicted to be faster (``advise``)
=================================== ===============================================================

Resuming: with ``TrainingArguments(restore_callback_states_from_checkpoint=True)`` the callback's
measurements are saved in each checkpoint and restored (the Trainer then replaces the callback
by a restored copy). Limits: the evaluation is predicted as its forward passes and loss
(``prediction_loss_only``); gathering predictions for ``compute_metrics`` is measured when the
first evaluation runs; ``ignore_data_skip=True`` resumes are laid out as if the skipped batches ran;
it predicts on the world's main process only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler, ExportableState, PrinterCallback, ProgressCallback

from ptp_callback.arguments import check_callback_settings
from ptp_callback.cadence import positions_every, with_evaluations
from ptp_callback.clipping import ClippedGradients
from ptp_callback.device_names import resolve_target
from ptp_callback.devices import DeviceSpec
from ptp_callback.host_costs import HF_TRAINER_LOOP
from ptp_callback.loaders import example_batch, loader_facts
from ptp_callback.module_state import stood_in
from ptp_callback.notices import warn
from ptp_callback.precision import PrecisionSpec, weights_precision
from ptp_callback.run_plan import LoaderFacts
from ptp_callback.run_prediction import CheckpointFacts
from ptp_callback.schedule import FitSchedule, FitStart, build_schedule
from ptp_callback.tracker import RunTracker, TraceInputs

from .accelerate import PRECISIONS, forward_without_autocast, loader_view, mode_as_run, unwrap_optimizer

__all__ = ["PrecisionTimeTrainerCallback", "evaluation_loaders", "loss_step", "precision_of", "read_schedule"]


def precision_of(args: Any, model: torch.nn.Module) -> PrecisionSpec:
    """The precision a ``Trainer`` with these arguments trains ``model`` at.

    ``bf16`` / ``fp16`` turn autocast on whatever the weights' dtype (a bf16 base model with fp32
    LoRA adapters trains under autocast, its adapters and their optimizer state in fp32), except
    ``fp16`` on a CPU, which Accelerate runs without autocast. Without autocast, weights all in
    bf16 or fp16 train at ``bf16-true`` / ``16-true``."""
    mode = mode_as_run("bf16" if args.bf16 else "fp16" if args.fp16 else "no", args.device)
    name = PRECISIONS[mode] if mode != "no" else weights_precision(model)
    spec = PrecisionSpec.from_setting(name, matmul_tf32=args.tf32)
    return spec.with_tf32(False, False) if torch.device(args.device).type != "cuda" else spec


def read_schedule(args: Any, state: Any, batches_per_epoch: int | None,
                  eval_batches: int | None = None) -> tuple[FitSchedule, tuple[int, ...]]:
    """The run's schedule (in micro-batches) and its save positions, by the Trainer's rules.

    ``Trainer._inner_training_loop``: ``len(train_dataloader)`` micro-batches an epoch, a step every
    ``gradient_accumulation_steps`` of them and on the epoch's last one, ``state.max_steps`` steps
    in all; a resume skips ``global_step`` steps (``_init_training_state``). ``DefaultFlowCallback``:
    evaluations and saves after steps that are multiples of ``eval_steps`` / ``save_steps`` (and
    after the last step) or at each epoch's end; ``eval_on_start``: one more before the first step.
    """
    accumulate = max(1, int(args.gradient_accumulation_steps))
    step = int(state.global_step)
    start = FitStart(step=step)
    if batches_per_epoch:
        per_epoch_steps = max(batches_per_epoch // accumulate + int(batches_per_epoch % accumulate > 0), 1)
        epoch = step // per_epoch_steps
        in_epoch = 0 if args.ignore_data_skip else (step % per_epoch_steps) * accumulate
        start = FitStart(position=epoch * batches_per_epoch + in_epoch, step=step, epoch=epoch, epochs_counted=epoch,
                         batch_in_epoch=in_epoch)
    base = build_schedule(batches_per_epoch=batches_per_epoch, accumulate=accumulate, max_epochs=None,
                          max_steps=int(state.max_steps), val_check_batch=None, check_val_every_n_epoch=1,
                          val_batches_per_run=0, start=start)
    evaluations = _positions(base, args.eval_strategy, state.eval_steps, delay=float(args.eval_delay or 0))
    strategy = _strategy(args.save_strategy)
    saves = evaluations if strategy == "best" else _positions(base, strategy, state.save_steps)
    if getattr(args, "eval_on_start", False):  # ``_inner_training_loop`` evaluates before the first step (no save)
        evaluations = (base.start_batch, *evaluations)
    return with_evaluations(base, evaluations, eval_batches), saves


def _strategy(value: Any) -> str:
    """``"steps"`` from ``IntervalStrategy.STEPS``, ``SaveStrategy.STEPS`` or ``"steps"``."""
    return str(getattr(value, "value", value)).lower()


def _positions(schedule: FitSchedule, strategy: Any, every_steps: Any, *, delay: float = 0.0) -> tuple[int, ...]:
    strategy = _strategy(strategy)
    if strategy == "steps" and every_steps:
        positions = positions_every(schedule, int(every_steps), final=True)
        if delay:
            positions = tuple(p for p in positions if _step(schedule, p) >= delay)
        return positions
    if strategy == "epoch":
        # ``eval_delay <= state.epoch`` at each epoch's end: a whole number there, and the fraction
        # done at the end of a run that stops mid-epoch (``max_steps``, ``num_train_epochs=2.5``).
        ends = positions_every(schedule, "epoch")
        per_epoch = schedule.batches_per_epoch
        return tuple(p for i, p in enumerate(ends)
                     if (p / per_epoch if per_epoch else schedule.start_epoch + i + 1) >= delay)
    return ()


def _step(schedule: FitSchedule, position: int) -> int:
    from ptp_callback.schedule import steps_at

    return steps_at(position, batches_per_epoch=schedule.batches_per_epoch, accumulate=schedule.accumulate,
                    start=schedule.start, step_on_epoch_end=schedule.step_on_epoch_end)


def _calling_trainer_parts() -> tuple[CallbackHandler | None, Any]:
    """The ``CallbackHandler`` running this hook (it holds the Trainer's callbacks: its bar shows
    the ETA) and the ``Trainer`` itself (whose evaluation loader predicts the evaluations), ``None``
    where not found.

    A callback is handed neither the Trainer nor its other callbacks. The ``CallbackHandler`` whose
    ``call_event`` is running this hook holds the callbacks, and the Trainer method that called the
    handler is the Trainer's: both are read from the calling frames. A hook called some other way
    finds neither (the ETA then shows in the logs only, and the first evaluation is measured).
    """
    from transformers import Trainer

    handler = trainer = None
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if handler is None and isinstance(owner, CallbackHandler):
            handler = owner
        elif isinstance(owner, Trainer):
            trainer = owner
            break
    return handler, trainer


def _before_the_log_printers(handler: CallbackHandler, callback: TrainerCallback) -> None:
    """Move ``callback`` before the Trainer's ``ProgressCallback`` / ``PrinterCallback``, which print
    each log line: the ETA it adds to a line must be in it by then. The Trainer adds them last, but
    a resume with ``restore_callback_states_from_checkpoint=True`` appends the restored copy of a
    callback after them."""
    callbacks = handler.callbacks
    printers = [i for i, cb in enumerate(callbacks) if isinstance(cb, (ProgressCallback, PrinterCallback))]
    if printers and callback in callbacks and callbacks.index(callback) > printers[0]:
        callbacks.remove(callback)
        callbacks.insert(printers[0], callback)


def loss_step(trainer: Any) -> Callable[[torch.nn.Module, Any], Any] | None:
    """The step function that computes the loss as the Trainer does, when that is not the model's
    own ``.loss``: a subclass's ``compute_loss`` (a loss of its own, batch keys the model does not
    take, two forward passes), a ``compute_loss_func`` or label smoothing. ``None``: the model's
    ``.loss`` (the default, and what a Trainer not found from the hook gets)."""
    from transformers import Trainer

    if trainer is None or (type(trainer).compute_loss is Trainer.compute_loss
                           and getattr(trainer, "compute_loss_func", None) is None
                           and getattr(trainer, "label_smoother", None) is None):
        return None

    def step(model: torch.nn.Module, batch: Any) -> Any:
        # a compute_loss that logs (self.log(...)) would write the trace's stand-in values into the
        # run's log history and its reporting integrations
        with stood_in(trainer, log=lambda *args, **kwargs: None):
            return trainer.compute_loss(model, batch)

    return step


def evaluation_loaders(trainer: Any, args: Any) -> list[Any]:
    """The loaders the Trainer's evaluations will run (one per evaluation dataset), built by its own
    ``get_eval_dataloader``; none when it will not evaluate or has no evaluation dataset."""
    if trainer is None or _strategy(args.eval_strategy) == "no" or trainer.eval_dataset is None:
        return []
    if isinstance(trainer.eval_dataset, dict):
        return [trainer.get_eval_dataloader(name) for name in trainer.eval_dataset]
    return [trainer.get_eval_dataloader()]


class PrecisionTimeTrainerCallback(TrainerCallback, ExportableState):
    """Predict a ``Trainer`` run before step one; show its ETA in the progress bar and the logs.

    Args:
        device: predict for this GPU (``"h100"``, ``"a100-sxm-80gb"``) instead of the one the Trainer
            runs on; the ETA still follows the real run.
        advise: predict the other precisions and warn (``PrecisionAdvice``) when one would be faster;
            ``"auto"``: only when that costs under 1% of the run.
        warmup_batches: first micro-batches never used as steady measurements.
        refresh_s: the longest the ETA text goes without being recomputed (sooner early in the fit).
    """

    def __init__(self, device: str | None = None, *, advise: bool | str = "auto", warmup_batches: int = 3,
                 refresh_s: float = 1.0, clock: Callable[[], float] = time.perf_counter) -> None:
        check_callback_settings("PrecisionTimeTrainerCallback", advise, warmup_batches, refresh_s, clock)
        self.target: str | DeviceSpec | None = None
        self.note: str | None = None
        if device is not None:
            self.target, self.note = resolve_target(str(device))  # "h100" -> h100-sxm; an unknown name fails here
        self.device, self.advise, self.warmup_batches, self.refresh_s, self.clock = \
            device, advise, warmup_batches, refresh_s, clock
        self.tracker: RunTracker | None = None
        self._restored: dict[str, Any] | None = None
        self._bar_owner: ProgressCallback | None = None
        self._last_t = 0.0
        self._in_eval = False
        self._epoch_began = False  # no step of the epoch that began has begun yet

    # ------------------------------------------------------------------------------ the start
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, eval_dataloader: Any = None, **kwargs: Any) -> None:
        now = self.clock()
        handler, trainer = _calling_trainer_parts()
        self._bar_owner = None
        if handler is not None:
            _before_the_log_printers(handler, self)
            self._bar_owner = next((cb for cb in handler.callbacks if isinstance(cb, ProgressCallback)), None)
        try:
            eval_loaders = [eval_dataloader] if eval_dataloader is not None else evaluation_loaders(trainer, args)
        except Exception:  # noqa: BLE001 - a Trainer that builds no evaluation loader now: the first evaluation is measured
            eval_loaders = []
        try:
            self._begin(now, args, state, model, optimizer, train_dataloader, eval_loaders, loss_step(trainer))
        except Exception as exc:  # noqa: BLE001 - never break a run
            self.tracker = None
            warn(f"reading the Trainer failed ({type(exc).__name__}: {exc}); no ETA for this run")

    def _begin(self, now: float, args: Any, state: Any, model: Any, optimizer: Any, train_dataloader: Any,
               eval_loaders: list[Any], step_fn: Callable[[torch.nn.Module, Any], Any] | None) -> None:
        try:
            batches = len(train_dataloader) if train_dataloader is not None else None
        except TypeError:
            batches = None
        sized = eval_loaders and all(hasattr(loader, "__len__") for loader in eval_loaders)
        eval_batches = sum(len(loader) for loader in eval_loaders) if sized else None
        schedule, saves = read_schedule(args, state, batches, eval_batches)
        spec = precision_of(args, model)
        main = bool(state.is_world_process_zero)
        tracker = self.tracker = RunTracker(
            schedule, saves=saves, precision_label=spec.label, advise=self.advise, bar=False, main_process=main,
            advice_as_warning=True, warmup_batches=self.warmup_batches, refresh_s=self.refresh_s, clock=self.clock)
        tracker.device_note = self.note
        if any(name.startswith("EarlyStopping") for name in getattr(state, "stateful_callbacks", None) or {}):
            tracker.plan_note = "; EarlyStoppingCallback may end it sooner"  # the plan runs to the limits
        if getattr(args, "torch_compile", False):
            tracker.plan_note += "; torch.compile's compilation is not in it (the eager step is predicted)"
        if getattr(args, "predict_with_generate", False) and eval_loaders:
            tracker.plan_note += "; evaluations predicted as forward passes, without generate()"
        tracker.start(now)
        if self._restored:
            tracker.forecaster.load_state_dict(self._restored)
        if main and train_dataloader is not None:
            # several evaluation datasets: the one with the most batches prices them all
            self._predict(tracker, args, spec, model, optimizer, train_dataloader,
                          max(eval_loaders, key=len) if sized else None, step_fn)
        tracker.begin_training()
        self._last_t = self.clock()

    def _predict(self, tracker: RunTracker, args: Any, spec: PrecisionSpec, model: torch.nn.Module, optimizer: Any,
                 train_dataloader: Any, eval_loader: Any, step_fn: Callable[[torch.nn.Module, Any], Any] | None) -> None:
        run_device = torch.device(args.device)
        try:
            view = loader_view(train_dataloader, _Processes(args.world_size))
            batch, load_s = example_batch(view)
        except Exception as exc:  # noqa: BLE001 - a loader we cannot read still trains
            tracker.warn_once("predict", f"could not build an example batch ({type(exc).__name__}: {exc}); "
                                         "the ETA uses measured batches only")
            return
        val_batch, val_facts = None, LoaderFacts()
        if eval_loader is not None:
            try:
                val_batch, val_load_s = example_batch(loader_view(eval_loader, _Processes(args.world_size)))
                val_facts = loader_facts(eval_loader, val_batch, val_load_s)
            except Exception:  # noqa: BLE001 - the evaluations are then measured when they run
                val_batch = None
        target = self.target if self.target is not None else (run_device if run_device.type == "cuda" else "cpu")
        optimizer = unwrap_optimizer(optimizer)
        if args.max_grad_norm and args.max_grad_norm > 0:  # the Trainer clips before each step (1.0 by default)
            optimizer = ClippedGradients(optimizer, float(args.max_grad_norm))
        inputs = TraceInputs(model, batch, step_fn, optimizer, spec, target, run_device,
                             val_batch=val_batch, context=forward_without_autocast(model))
        checkpoint = CheckpointFacts(directory=args.output_dir, weights_only=bool(args.save_only_model),
                                     replaces_previous=args.save_total_limit is not None,
                                     weights_bytes=_adapter_bytes(model)) if tracker.forecaster.saves else None
        tracker.predict(inputs, train_loader=loader_facts(train_dataloader, batch, load_s), val_loader=val_facts,
                        checkpoint=checkpoint, world_size=int(args.world_size), loop=HF_TRAINER_LOOP)

    # ------------------------------------------------------------------------------ events
    def _event(self, name: str, t: float | None = None) -> None:
        if self.tracker is None:
            return
        t = self.clock() if t is None else t
        self.tracker.feed(name, t)
        self._last_t = max(self._last_t, t)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._event("epoch_start")
        self._epoch_began = True

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._epoch_began and self.tracker is not None:
            # after every callback's on_epoch_begin: one of them may have unfrozen a part of the model
            self._epoch_began = False
            self.tracker.follow_training_parameters()
        self._event("batch_start")

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._event("batch_end")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = self.clock()
        self._event("batch_end", now)
        tracker = self.tracker
        if tracker is not None and tracker.active:
            tracker.refresh(now)
            bar = getattr(self._bar_owner, "training_bar", None)
            if bar is not None and tracker.eta_text:
                bar.set_postfix_str(f"eta={tracker.eta_text}", refresh=False)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._in_eval and self.tracker is not None and not self.tracker.closed:
            self._in_eval = True
            self._event("val_start", self._last_t)  # the evaluation began after the last event

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker is None or self.tracker.closed:
            return
        if not self._in_eval:
            self._event("val_start", self._last_t)
        self._in_eval = False
        self._event("val_end")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._event("save_start", self._last_t)  # the save began after the last event
        self._event("save_end")

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._event("epoch_end")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        tracker = self.tracker
        if tracker is not None and tracker.active and not tracker.closed and logs is not None:
            tracker.refresh()
            if tracker.eta_text:
                logs["eta"] = tracker.eta_text  # after the reporting integrations: shown, not tracked

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker is not None:
            self.tracker.close()

    # ------------------------------------------------------------------------------ resume
    def remaining_s(self) -> float | None:
        """Seconds left in the run now (``None`` while unknown)."""
        return self.tracker.remaining_s() if self.tracker is not None else None

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (``ExportableState``): the arguments and the measured unit costs."""
        measured = self.tracker.forecaster.state_dict(self.clock()) if self.tracker is not None else None
        device = self.device if self.device is None or isinstance(self.device, str) else str(self.device)
        return {"args": {"device": device, "advise": self.advise, "warmup_batches": self.warmup_batches,
                         "refresh_s": self.refresh_s},
                "attributes": {"_restored": measured}}


def _adapter_bytes(model: torch.nn.Module) -> float | None:
    """The bytes of a PEFT model's trainable weights, all that its ``save_pretrained`` writes (the
    frozen base is not saved); ``None`` for any other model, whose every weight is saved."""
    if not hasattr(model, "peft_config") or not hasattr(model, "get_base_model"):
        return None
    return float(sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad))


class _Processes:
    """The one attribute of an accelerator that :func:`loader_view` reads."""

    def __init__(self, num_processes: int) -> None:
        self.num_processes = num_processes
