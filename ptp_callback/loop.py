"""``ptp.track``: the whole run's ETA for a training loop you write yourself (plain PyTorch or Accelerate).

>>> tracker = ptp.track(model, optimizer, train_loader, step_fn, epochs=3)     # doctest: +SKIP
>>> for epoch in range(3):                                                     # doctest: +SKIP
...     for batch in tracker.iterate(train_loader):
...         loss = step_fn(model, batch); loss.backward(); optimizer.step(); optimizer.zero_grad()
...     with tracker.phase("eval"):
...         evaluate(model)
>>> tracker.close()                                                            # doctest: +SKIP

:func:`track` reads what the loop runs with -- its precision, accumulation, processes and devices
(from an ``accelerate.Accelerator`` when given one), the length of its loaders, how often it
evaluates and saves -- into a :class:`~ptp_callback.tracker.LoopShape`, predicts the run before its
first step (one training step of the real model traced under the run's precision, the host's
costs) and returns the :class:`~ptp_callback.tracker.RunTracker` that times it.

Limits: the length comes from ``epochs`` x ``len(train_loader)`` or ``max_steps`` (a loop that stops
early -- early stopping, a time budget -- ends sooner than the ETA says). A train loader without
``len()`` (an ``IterableDataset``) and ``epochs`` gets its ETA once ``tracker.iterate`` has seen
the first epoch end: later epochs are taken to be as long. A run resumed from a
checkpoint continues right after the batch it saved at, as Accelerate's ``skip_first_batches``
does. Only the local main process predicts, shows the bar and prints.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .cadence import Every
from .devices import DeviceSpec
from .host_costs import ACCELERATE_LOOP
from .precision import PrecisionSpec, weights_precision
from .run_plan import LoaderFacts
from .run_prediction import CheckpointFacts
from .tracer import StepFn
from .tracker import LoopShape, RunTracker, TraceInputs

__all__ = ["track"]


def track(
    model: torch.nn.Module,
    optimizer: Any = None,
    train_loader: Any = None,
    step_fn: StepFn | None = None,
    *,
    epochs: int | None = None,
    max_steps: int | None = None,
    accelerator: Any = None,
    precision: str | PrecisionSpec | None = None,
    accumulate: int | None = None,
    eval_loader: Any = None,
    eval_every: Every = None,
    save_every: Every = None,
    checkpoint_dir: str | None = None,
    device: str | DeviceSpec | None = None,
    advise: bool | str = "auto",
    bar: bool = True,
    verbose: bool = True,
    warmup_batches: int = 3,
    refresh_s: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
) -> RunTracker:
    """Predict a hand-written training run before its first step; return the tracker that times it.

    Args:
        model: the model being trained (wrapped by DDP or Accelerate is fine).
        optimizer: its optimizer (class and hyperparameters are traced), a factory ``params ->
            optimizer``, or ``None`` for AdamW defaults.
        train_loader: the training DataLoader (its length sets the epoch; one batch is built, from the
            dataset, without touching your iterator or random state; a one-shot iterator such as a
            generator is not read, and the ETA then uses measured batches only).
        step_fn: ``step_fn(model, batch) -> loss`` (default: ``model(*batch)`` or ``model(**batch)``
            and its ``.loss``).
        epochs, max_steps: the run's length (``max_steps`` counts optimizer steps); one is needed.
        accelerator: an ``accelerate.Accelerator``: its ``mixed_precision``, gradient accumulation,
            processes and device are read, the bar shows on the local main process only, and the
            tracker registers for ``save_state`` / ``load_state`` (its calibration is restored).
        precision: what the loop runs at when there is no accelerator: ``"32-true"`` (default),
            ``"bf16-mixed"`` (a ``torch.autocast`` loop), ``"16-mixed"`` (autocast + GradScaler),
            ``"bf16-true"``, ...
        accumulate: micro-batches per optimizer step (default 1, or the accelerator's).
        eval_loader: the evaluation DataLoader (its length and one batch predict an evaluation).
        eval_every, save_every: how often the loop evaluates / saves: every ``n`` optimizer steps or
            ``"epoch"``; ``eval_every`` defaults to ``"epoch"`` when an ``eval_loader`` is given.
        checkpoint_dir: where saves go (their write rate is probed; default: the current directory).
        device: predict for this GPU (``"h100"``, ``"a100-sxm-80gb"``) instead of the one the model
            is on; the ETA still follows the real run.
        advise: predict the other precisions and say when one would be faster; ``"auto"`` only when
            that costs under 1% of the run.
        bar: show a tqdm bar with the whole run's ETA (the local main process only).
        verbose: print the plan at the first batch and the report at ``close()``.
    """
    _check_arguments(model, optimizer, step_fn, accelerator, epochs, max_steps, advise, eval_every, save_every,
                     warmup_batches, refresh_s, clock, bar=bar, verbose=verbose)
    settings = _LoopSettings.read(model, accelerator, precision, accumulate, device)
    loader_len = _length(train_loader)
    if eval_every is None and eval_loader is not None:
        eval_every = "epoch"
    shape = LoopShape(batches_per_epoch=loader_len, accumulate=settings.accumulate,
                      epochs=epochs, max_steps=max_steps,
                      eval_every=eval_every, eval_batches=_length(eval_loader), save_every=save_every)
    schedule, saves = shape.schedule()
    tracker = RunTracker(schedule, saves=saves, precision_label=settings.label, shape=shape,
                         advise=advise, bar=bar, verbose=verbose, main_process=settings.main_process,
                         warmup_batches=warmup_batches, refresh_s=refresh_s, clock=clock)
    tracker.device_note = settings.device_note
    tracker.start()
    if accelerator is not None:
        from .integrations.accelerate import register

        register(accelerator, tracker)
    if settings.precision is None:
        tracker.warn_once("precision", f"{settings.label} training is not modelled; the ETA uses measured "
                                       "batches only")
    elif settings.main_process and train_loader is not None:
        _predict(tracker, settings, model, optimizer, train_loader, step_fn, eval_loader, checkpoint_dir,
                 accelerator)
    return tracker


def _predict(tracker: RunTracker, settings: _LoopSettings, model: torch.nn.Module, optimizer: Any,
             train_loader: Any, step_fn: StepFn | None, eval_loader: Any, checkpoint_dir: str | None,
             accelerator: Any) -> None:
    from .loaders import example_batch, loader_facts

    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    if accelerator is not None:
        from .integrations import accelerate as acc

        model, optimizer = acc.unwrap_model(accelerator, model), acc.unwrap_optimizer(optimizer)
        context = acc.forward_without_autocast(model)
        train_view = acc.loader_view(train_loader, accelerator)
        eval_view = acc.loader_view(eval_loader, accelerator) if eval_loader is not None else None
    else:
        model = getattr(model, "module", model) if isinstance(model, torch.nn.parallel.DistributedDataParallel) \
            else model
        train_view, eval_view = train_loader, eval_loader
    try:
        batch, load_s = example_batch(train_view)
        val_batch, val_facts = None, LoaderFacts()
        if eval_view is not None:
            val_batch, val_load_s = example_batch(eval_view)
            val_facts = loader_facts(eval_loader, val_batch, val_load_s)
    except Exception as exc:  # noqa: BLE001 - a loader we cannot read still trains
        tracker.warn_once("predict", f"could not build an example batch ({type(exc).__name__}: {exc}); "
                                     "the ETA uses measured batches only")
        return
    assert settings.precision is not None
    inputs = TraceInputs(model, batch, step_fn, optimizer, settings.precision, settings.device, settings.run_device,
                         val_batch=val_batch, context=context)
    checkpoint = CheckpointFacts(directory=checkpoint_dir or os.getcwd()) if tracker.forecaster.saves else None
    tracker.predict(inputs, train_loader=loader_facts(train_loader, batch, load_s), val_loader=val_facts,
                    checkpoint=checkpoint, world_size=settings.world_size,
                    loop=ACCELERATE_LOOP if accelerator is not None else None)


@dataclass(frozen=True)
class _LoopSettings:
    """What a loop runs with: precision (``None``: not modelled), accumulation, processes, devices."""

    precision: PrecisionSpec | None
    label: str
    accumulate: int
    world_size: int
    main_process: bool
    run_device: torch.device
    device: str | torch.device | DeviceSpec
    device_note: str | None

    @classmethod
    def read(cls, model: torch.nn.Module, accelerator: Any, precision: str | PrecisionSpec | None,
             accumulate: int | None, device: str | DeviceSpec | None) -> _LoopSettings:
        if accumulate is not None and (isinstance(accumulate, bool) or not isinstance(accumulate, int)
                                       or accumulate < 1):
            _bad(f"accumulate={accumulate!r}: expected an integer >= 1")
        spec: PrecisionSpec | None
        if accelerator is not None:
            from .integrations.accelerate import read_accelerator

            spec, label, accumulate, world, main, run_device = read_accelerator(accelerator, precision, accumulate)
        else:
            spec = _precision(precision or "32-true")
            label, run_device = spec.label, _model_device(model)
            world, main = _distributed()
        if precision is None and spec is not None and spec.name == "32-true":
            spec = _precision(weights_precision(model))  # bf16 weights without autocast: bf16-true
            label = spec.label
        if spec is not None and run_device.type != "cuda":
            spec = spec.with_tf32(False, False)  # TF32 is a GPU matter
            label = spec.label
        note = None
        target: str | torch.device | DeviceSpec
        if device is None:
            target = run_device if run_device.type == "cuda" else "cpu"
        elif isinstance(device, DeviceSpec):
            target = device
        elif str(device).split(":")[0] in ("cpu", "cuda"):
            target = torch.device(device)
        else:
            from .device_names import resolve_device_name

            target, note = resolve_device_name(str(device))
        return cls(spec, label, int(accumulate or 1), world, main, run_device, target, note)


def _bad(message: str) -> Any:
    raise ValueError(f"ptp.track(...): {message}")


def _check_arguments(model: Any, optimizer: Any, step_fn: Any, accelerator: Any, epochs: Any, max_steps: Any,
                     advise: Any, eval_every: Every, save_every: Every, warmup_batches: Any, refresh_s: Any,
                     clock: Any, **flags: Any) -> None:
    from .arguments import check_callback_settings, check_model, check_optimizer, check_step_fn

    check_model(model, "ptp.track(model=...)")
    check_optimizer(optimizer, "ptp.track(optimizer=...)")
    check_step_fn(step_fn, "ptp.track(step_fn")
    if accelerator is not None and not hasattr(accelerator, "num_processes"):
        _bad(f"accelerator={accelerator!r}: expected an accelerate.Accelerator (or None for a plain loop)")
    for name, value in (("epochs", epochs), ("max_steps", max_steps)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            _bad(f"{name}={value!r}: expected an integer >= 1")
    if epochs is None and max_steps is None:
        _bad("pass epochs=... or max_steps=... (the run's length)")
    check_callback_settings("ptp.track", advise, warmup_batches, refresh_s, clock, **flags)
    for name, every in (("eval_every", eval_every), ("save_every", save_every)):
        if every is not None and every != "epoch" and (isinstance(every, bool) or not isinstance(every, int)
                                                       or every < 1):
            _bad(f"{name}={every!r}: expected a number of optimizer steps (>= 1), 'epoch' or None")


def _precision(precision: str | PrecisionSpec) -> PrecisionSpec:
    if isinstance(precision, PrecisionSpec):
        return precision
    try:
        return PrecisionSpec.from_setting(precision)
    except ValueError as exc:
        raise ValueError(f"ptp.track(precision={precision!r}): {str(exc).split('; ', 1)[-1]}") from None


def _length(loader: Any) -> int | None:
    if loader is None:
        return None
    try:
        return len(loader)
    except TypeError:
        return None


def _model_device(model: torch.nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def _distributed() -> tuple[int, bool]:
    """World size and whether this is the local main process (torchrun sets ``LOCAL_RANK``)."""
    world = 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world = torch.distributed.get_world_size()
    return world, os.environ.get("LOCAL_RANK", "0") == "0"
