"""A LightningModule and its Trainer as the predictor sees them: precision, steps, batch hooks.

What ``PrecisionTimeCallback`` needs to trace a LightningModule's real training and validation
steps outside the loop (the module's own ``training_step`` called on an example batch, with its
``self.log`` calls silenced because the loop's result collection does not exist yet, and its
loggers too, so that nothing the trace computes reaches the user's logs), the
precision of the trainer, and the gradient communication of its strategy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.core.optimizer import _MockOptimizer

from ptp_callback.calibrate import measure_op_classes
from ptp_callback.clipping import ClippedGradients
from ptp_callback.comm import ddp_exposed_seconds, fsdp_exposed_seconds
from ptp_callback.devices import DeviceSpec
from ptp_callback.forecast import RunForecaster
from ptp_callback.host_costs import LIGHTNING_LOOP
from ptp_callback.loaders import example_batch, first_loader, loader_facts
from ptp_callback.manual_step import ManualOptimization, ManualStep
from ptp_callback.module_state import stood_in
from ptp_callback.precision import PRECISIONS, PrecisionSpec
from ptp_callback.report import communication_note
from ptp_callback.run_prediction import RunPrediction, precision_advice, predict_run
from ptp_callback.trace_cache import code_key
from ptp_callback.tracer import has_compiled_parts, loss_of

__all__ = ["add_bar_metric", "advise_precision", "batch_hooks", "communication", "compiled", "has_validation",
           "log_eta_metrics", "logs_now", "manual_training_step", "plan_notes", "precision_spec", "predict_fit",
           "quiet_logging", "step_code_key", "traced_step", "training_step",
           "validation_step"]


def add_bar_metric(trainer: Trainer, name: str, text: Callable[[], str]) -> Callable[[], None]:
    """Show ``text()`` as the metric ``name`` in the trainer's progress bar (TQDM or Rich: both take
    extra metrics from ``get_metrics``); returns the function that takes it out again."""
    bar = trainer.progress_bar_callback
    if bar is None or not hasattr(bar, "get_metrics"):
        return lambda: None
    original = bar.get_metrics

    def get_metrics(trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        metrics = original(trainer, pl_module)
        shown = text()
        return {**metrics, name: shown} if shown else metrics

    bar.get_metrics = get_metrics  # an instance attribute over the class's method

    def remove() -> None:
        if vars(bar).get("get_metrics") is get_metrics:
            del bar.get_metrics

    return remove


def precision_spec(trainer: Trainer) -> PrecisionSpec | None:
    name = str(trainer.precision)
    if name not in PRECISIONS:
        return None
    spec = PrecisionSpec.from_setting(name)
    return spec.with_tf32(False, False) if trainer.strategy.root_device.type == "cpu" else spec  # TF32: a GPU matter


def training_step(module: LightningModule, batch: Any) -> Any:
    return module.training_step(batch, 0)


def traced_step(trainer: Trainer, module: LightningModule,
                optimizer: torch.optim.Optimizer | None = None) -> tuple[Callable[..., Any], Any]:
    """The step function and optimizer argument that trace the module's training step: its
    ``training_step`` and first optimizer (its gradients clipped as ``gradient_clip_val`` says),
    or under manual optimization all its optimizers (which the step clips itself, if at all).
    ``optimizer``: one to trace in place of the first (automatic optimization)."""
    if not module.automatic_optimization:
        return manual_training_step, ManualOptimization(tuple(trainer.optimizers))
    if optimizer is None:
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
    if isinstance(optimizer, _MockOptimizer):  # configure_optimizers returned None: Lightning steps nothing
        return _backward_only, ManualOptimization(())
    limit = trainer.gradient_clip_val
    if limit:
        algorithm = getattr(trainer.gradient_clip_algorithm, "value", None) or "norm"
        return training_step, ClippedGradients(optimizer, float(limit), str(algorithm))
    return training_step, optimizer


def _backward_only(module: LightningModule, batch: Any, step: ManualStep) -> None:
    """A training step without an optimizer: its forward and backward (``_MockOptimizer.step``
    runs Lightning's closure, and nothing else)."""
    step.backward(loss_of(training_step(module, batch)))


class _NoSchedule:
    """A learning-rate scheduler stand-in: a traced step must not move the real schedule, and may
    read it (``get_last_lr()`` for a log line)."""

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_scheduler":  # copy and pickle look before __init__ has run
            raise AttributeError(name)
        return getattr(self._scheduler, name)


def manual_training_step(module: LightningModule, batch: Any, step: ManualStep) -> Any:
    """A manual-optimization ``training_step`` on the traced optimizers: ``self.optimizers()``
    returns the recorded copies, ``self.manual_backward`` records a backward, and the real
    optimizers, schedulers and ``requires_grad`` flags are never touched."""
    optimizers = [_Toggleable(o) for o in step.optimizers]
    schedulers = [_NoSchedule(config.scheduler) for config in module.trainer.lr_scheduler_configs]
    with stood_in(module,
                   optimizers=lambda use_pl_optimizer=True: optimizers[0] if len(optimizers) == 1 else optimizers,
                   lr_schedulers=lambda: (schedulers[0] if len(schedulers) == 1 else schedulers) if schedulers else None,
                   manual_backward=lambda loss, *args, **kwargs: step.backward(loss, *args, **kwargs),
                   toggle_optimizer=_nothing, untoggle_optimizer=_nothing):
        return module.training_step(batch, 0)


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


class _Toggleable:
    """A recorded optimizer with ``LightningOptimizer.toggle_model()`` (a no-op while tracing)."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    @contextlib.contextmanager
    def toggle_model(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        yield

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)


def validation_step(module: LightningModule, batch: Any) -> Any:
    return module.validation_step(batch, 0)


def step_code_key(module: LightningModule) -> str:
    """What the traced steps depend on beyond the model: the module's step methods' code."""
    cls = type(module)
    return code_key(cls.training_step, cls.validation_step, cls.forward)


def compiled(module: LightningModule) -> bool:
    """Whether ``torch.compile`` compiles the module or a part of it (the plan has no time for
    the compilation, which the first batches pay): Lightning's own ``_compiler_ctx`` or a
    ``torch.compile``'d part."""
    return bool(getattr(module, "_compiler_ctx", None)) or has_compiled_parts(module)


def has_validation(trainer: Trainer) -> bool:
    from lightning.pytorch.utilities.model_helpers import is_overridden

    return bool(trainer.enable_validation and is_overridden("validation_step", trainer.lightning_module))


def batch_hooks(module: LightningModule) -> Callable[[Any], Any]:
    return lambda batch: module.on_after_batch_transfer(module.on_before_batch_transfer(batch, 0), 0)


def communication(trainer: Trainer) -> Callable[[Any, DeviceSpec], float]:
    """Gradient communication one optimizer step adds with DDP / FSDP on ``trainer.world_size`` GPUs
    (DDP overlaps it with the backward; FSDP gathers and scatters around the whole step)."""
    world = trainer.world_size
    strategy = type(trainer.strategy).__name__.lower()
    grad_bytes = sum(p.numel() * (4 if p.dtype == torch.float32 else p.element_size())
                     for p in trainer.lightning_module.parameters() if p.requires_grad)

    def seconds(step: Any, device: DeviceSpec) -> float:
        link = getattr(device, "interconnect_gbs", None)
        if world <= 1 or not link or device.arch == "cpu":
            return 0.0
        if "fsdp" in strategy:
            return fsdp_exposed_seconds(grad_bytes, step.step_s, world_size=world, link_gbs=link)
        if "ddp" in strategy:
            return ddp_exposed_seconds(grad_bytes, step.breakdown["phase"]["backward"], world_size=world,
                                       link_gbs=link)
        return 0.0

    return seconds


class _SilentLogger:
    """A logger while a step is traced: whatever the step asks of it (``self.logger.experiment
    .add_image(...)``, ``log_metrics``) does nothing, so the trace's stand-in numbers never reach
    the user's logs."""

    def __getattr__(self, name: str) -> _SilentLogger:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _SilentLogger:
        return self


@contextlib.contextmanager
def quiet_logging(module: LightningModule) -> Iterator[None]:
    """``self.log`` needs the loop's result collection, which does not exist at fit start: while
    tracing, logging calls are no-ops, and the trainer's loggers are silent stand-ins."""
    trainer = module._trainer
    loggers = trainer.loggers if trainer is not None else []
    if loggers:
        trainer.loggers = [_SilentLogger() for _ in loggers]
    try:
        with stood_in(module, log=_nothing, log_dict=_nothing):
            yield
    finally:
        if loggers:
            trainer.loggers = loggers


def predict_fit(trainer: Trainer, module: LightningModule, spec: PrecisionSpec | None, checkpoint: Any,
                device: Any, sanity_batches: int) -> tuple[RunPrediction, Any]:
    """The fit's prediction from its real steps on example batches of its loaders (``device``:
    the GPU to predict for, ``None`` for the one it runs on), and the training batch it traced."""
    if spec is None:
        raise ValueError(f"precision {trainer.precision!r} is not modelled")
    transform = batch_hooks(module)
    train_loader, train_batch, load_s = _train_example(trainer, transform)
    val = {}
    val_loader = first_loader(trainer.val_dataloaders) if has_validation(trainer) else None
    if val_loader is not None:
        val_batch, val_load_s = example_batch(val_loader, transform)
        val = {"val_batch": val_batch, "val_step_fn": validation_step,
               "val_loader": loader_facts(val_loader, val_batch, val_load_s)}
    run_device = trainer.strategy.root_device
    step_fn, optimizer = traced_step(trainer, module)
    with quiet_logging(module):
        prediction = predict_run(
            module, train_batch, step_fn, optimizer, spec,
            device if device is not None else run_device, run_device=run_device,
            train_loader=loader_facts(train_loader, train_batch, load_s), sanity_batches=sanity_batches,
            checkpoint=checkpoint, communication=communication(trainer), loader_started_before_first_epoch=True,
            model_to_cpu_at_end=True, framework_loop=LIGHTNING_LOOP, val_workers_live_on=True,
            compiled=compiled(module), extra_key=step_code_key(module), **val)
    return prediction, train_batch


def plan_notes(trainer: Trainer, module: LightningModule, device: DeviceSpec | None = None) -> str:
    """What may make the fit differ from its plan, which runs to the trainer's limits: an early stop,
    ``torch.compile``'s compilation, anomaly detection's checks, the processes' communication on a
    CPU, which are not predicted (appended to the plan's line, each after ``"; "``)."""
    notes = "; EarlyStopping may end it sooner" if trainer.early_stopping_callbacks else ""
    notes += "; torch.compile's compilation is not in it" if compiled(module) else ""
    notes += "; detect_anomaly's checks are not in it" if getattr(trainer, "_detect_anomaly", False) else ""
    return notes + (communication_note(trainer.world_size, device.arch) if device is not None else "")


def advise_precision(trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
                     schedule: Any, *, fit_s: float | None, measured_step_s: float | None = None,
                     corrections: dict[str, float] | None = None) -> str | None:
    """The precision advice for this fit (:func:`~ptp_callback.run_prediction.precision_advice`): the
    module's own step traced under the other precisions, with its logging silenced."""
    with quiet_logging(module):
        step_fn, optimizer = traced_step(trainer, module)
        return precision_advice(prediction, module, example, step_fn, optimizer, current=precision_spec(trainer),
                                schedule=schedule, fit_s=fit_s, measured_step_s=measured_step_s,
                                corrections=corrections, extra_key=step_code_key(module))


def _train_example(trainer: Trainer, transform: Callable[[Any], Any]) -> tuple[Any, Any, float]:
    """The first training loader, an example of the batch ``training_step`` receives, and the
    seconds it took to build. Several training loaders (a dict or list of them) are combined into
    one batch of each, in their structure, as Lightning's default ``max_size_cycle`` mode does."""
    iterables = trainer.train_dataloader
    mode = getattr(trainer.fit_loop._combined_loader, "_mode", "max_size_cycle")
    loader = first_loader(iterables)
    if loader is None:
        raise ValueError("no training batch to trace")
    if not isinstance(iterables, (Mapping, list, tuple)) or len(iterables) < 2 or mode == "sequential":
        batch, load_s = example_batch(loader, transform)
        return loader, batch, load_s
    keys = list(iterables.keys()) if isinstance(iterables, Mapping) else list(range(len(iterables)))
    examples = [example_batch(iterables[key]) for key in keys]
    combined: Any = dict(zip(keys, (b for b, _s in examples))) if isinstance(iterables, Mapping) \
        else [b for b, _s in examples]
    with contextlib.suppress(Exception):  # user hooks written for the loop's state
        combined = transform(combined)
    return loader, combined, sum(s for _b, s in examples)


def _log_step(trainer: Trainer) -> int:
    """The step Lightning logs this batch's metrics at: its count of batches that stepped, to which
    this batch is added after its hooks (``global_step`` is already one ahead)."""
    return int(getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step))


def logs_now(trainer: Trainer, logged_step: int) -> bool:
    """Whether the trainer's loggers take the ETA now: in the rows Lightning logs its own metrics
    to (``log_every_n_steps``; the batch that steps, under accumulation), once each
    (``logged_step``: the step last logged)."""
    if not trainer.loggers:
        return False
    accumulating = getattr(trainer.fit_loop, "_should_accumulate", lambda: False)()
    step = _log_step(trainer)
    return not accumulating and not (step + 1) % max(1, trainer.log_every_n_steps) and step != logged_step


def log_eta_metrics(trainer: Trainer, remaining_s: float | None, predicted_step_s: float | None,
                    measured_batch_s: float | None) -> int:
    """``ptp/eta_s``, ``ptp/step_s_predicted`` and ``ptp/step_s_measured`` (an optimizer step:
    batches x accumulation) to the trainer's loggers (see :func:`logs_now`); returns the step logged."""
    step = _log_step(trainer)
    metrics = {} if remaining_s is None else {"ptp/eta_s": remaining_s}
    if predicted_step_s is not None:
        metrics["ptp/step_s_predicted"] = predicted_step_s
    if measured_batch_s is not None:
        metrics["ptp/step_s_measured"] = measured_batch_s * trainer.accumulate_grad_batches
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)
    return step


def time_op_classes(trainer: Trainer, prediction: RunPrediction | None, forecaster: RunForecaster,
                    clock: Callable[[], float]) -> dict[str, float]:
    """``calibrate_ops=True``: the heaviest op classes timed on the run's device, as corrections of
    the prediction (its time counted as the callback's own work). Only for a prediction for that kind
    of device, and a fit predicted to last over 200 s: a second of timing would cost over 0.5% of a
    shorter one."""
    run_device = trainer.strategy.root_device
    if prediction is None or (prediction.device.arch == "cpu") != (run_device.type == "cpu") or \
            (forecaster.predicted_total_s or 0.0) <= 200.0:
        return {}
    started = clock()
    corrections = measure_op_classes(prediction.trace, prediction.device, prediction.coefficients, run_device,
                                     budget_s=1.0)
    forecaster.own_work(clock() - started)
    return corrections
