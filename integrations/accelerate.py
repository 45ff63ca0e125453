"""An Accelerate loop as the tracker sees it: precision, accumulation, processes, checkpoints.

Used by :func:`ptp_callback.track` when it is given ``accelerator=``::

    accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=4)
    model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
    tracker = ptp.track(model, optimizer, train_dl, step_fn, epochs=3, accelerator=accelerator)
    for epoch in range(3):
        for batch in tracker.iterate(train_dl):
            with accelerator.accumulate(model):
                loss = step_fn(model, batch)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    tracker.close()

========================================= ===============================================================
read from the accelerator                 used as
========================================= ===============================================================
``mixed_precision`` no / fp16 / bf16       ``32-true`` / ``16-mixed`` / ``bf16-mixed`` (TF32 from torch's flags)
``mixed_precision`` fp8                    not modelled: one warning, measured timing only
``gradient_accumulation_steps``            micro-batches per optimizer step (the epoch's last step takes
                                           what is left, as ``accumulate`` does)
``num_processes``, ``device``              data-parallel processes (gradient all-reduce), the run's device
``is_local_main_process``                  the only process that predicts, shows the bar and prints
``register_for_checkpointing``             the tracker's calibration is saved by ``save_state`` and restored
                                           by ``load_state`` (call ``load_state`` before the loop starts)
``register_save_state_pre_hook``           each ``save_state`` is timed as a checkpoint save
========================================= ===============================================================

The step is traced on the unwrapped model with Accelerate's autocast wrapper of ``forward`` set
aside (the tracer applies the precision itself, so that other precisions can be predicted too).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ptp_callback.clipping import ClippedGradients
from ptp_callback.precision import PrecisionSpec

__all__ = ["PRECISIONS", "forward_without_autocast", "loader_view", "mode_as_run", "read_accelerator", "register",
           "unwrap_model", "unwrap_optimizer"]

#: ``accelerator.mixed_precision`` -> the precision it trains at (``None``: not modelled).
PRECISIONS: dict[str, str | None] = {"no": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed", "fp8": None}


def mode_as_run(mode: str, device: Any) -> str:
    """``mixed_precision`` as Accelerate runs it on ``device``: ``"fp16"`` on a CPU gets no autocast
    and no GradScaler, so it trains as ``"no"`` does (the HF Trainer's ``fp16=True`` too)."""
    return "no" if mode == "fp16" and torch.device(device).type == "cpu" else mode


def read_accelerator(accelerator: Any, precision: str | PrecisionSpec | None,
                     accumulate: int | None) -> tuple[PrecisionSpec | None, str, int, int, bool, torch.device]:
    """``(precision spec or None, its label, accumulation, processes, local main?, device)``.

    ``precision`` / ``accumulate`` given to ``track`` must agree with the accelerator's.
    """
    mode = str(getattr(accelerator, "mixed_precision", "no"))
    if mode not in PRECISIONS:
        raise ValueError(f"ptp.track(accelerator=...): mixed_precision={mode!r} is not one of {', '.join(PRECISIONS)}")
    name = PRECISIONS[mode_as_run(mode, accelerator.device)]
    spec = PrecisionSpec.from_setting(name) if name is not None else None
    if precision is not None:
        given = precision if isinstance(precision, PrecisionSpec) else PrecisionSpec.from_setting(precision)
        if spec is None or given.name != spec.name:
            runs = f"trains at {spec.name} (mixed_precision={mode!r})" if spec is not None and name != PRECISIONS[mode] \
                else f"runs mixed_precision={mode!r}"
            raise ValueError(f"ptp.track(precision={precision!r}): the accelerator {runs}; "
                             "drop precision= (it is read from the accelerator)")
        spec = given
    steps = int(getattr(accelerator, "gradient_accumulation_steps", 1) or 1)
    if accumulate is not None and accumulate != steps:
        raise ValueError(f"ptp.track(accumulate={accumulate!r}): the accelerator accumulates {steps} batches; "
                         "drop accumulate= (it is read from the accelerator)")
    label = spec.label if spec is not None else mode
    return (spec, label, steps, int(accelerator.num_processes), bool(accelerator.is_local_main_process),
            torch.device(accelerator.device))


def register(accelerator: Any, tracker: Any) -> None:
    """Save the tracker with ``save_state`` (restored by ``load_state``) and time each save."""
    accelerator.register_for_checkpointing(tracker)
    accelerator.register_save_state_pre_hook(lambda models, weights, output_dir: tracker.save_started())


def unwrap_model(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """The model without DDP / compile wrappers (nothing of it is changed)."""
    return accelerator.unwrap_model(model)


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside an ``AcceleratedOptimizer`` (kept inside a ``ClippedGradients``)."""
    if isinstance(optimizer, ClippedGradients):
        return dataclasses.replace(optimizer, optimizer=unwrap_optimizer(optimizer.optimizer))
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


def forward_without_autocast(model: torch.nn.Module) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A context that gives ``model`` back its own ``forward`` while the step is traced.

    ``Accelerator.prepare`` replaces ``model.forward`` by an autocast wrapper under mixed precision
    (and keeps the original as ``model._original_forward``); tracing through it would run every
    predicted precision under the accelerator's autocast.
    """

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        original = model.__dict__.get("_original_forward")
        wrapped = model.__dict__.get("forward")
        if original is None or wrapped is None:
            yield
            return
        model.forward = original  # type: ignore[method-assign]
        try:
            yield
        finally:
            model.forward = wrapped  # type: ignore[method-assign]

    return context


def loader_view(loader: Any, accelerator: Any) -> Any:
    """A plain DataLoader over a prepared loader's dataset, for building one example batch.

    A prepared loader registers with the accelerator's gradient state when iterated; this one does
    not. Its batch size is one process's (``total_batch_size / num_processes``).
    """
    per_process = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None),
                                                                 "batch_size", None)
    total = getattr(loader, "total_batch_size", None)
    if total:
        per_process = max(1, int(total) // max(1, int(accelerator.num_processes)))
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        return loader
    return torch.utils.data.DataLoader(dataset, batch_size=per_process or 1, collate_fn=loader.collate_fn)
