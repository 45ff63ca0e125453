"""Checks of what users pass in: one-line errors that repeat the call and say what to do.

>>> check_optimizer("adamw", "ptp.track(optimizer=...)")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: ptp.track(optimizer='adamw'): pass the optimizer object (torch.optim.AdamW(...)), ... not its name
"""

from __future__ import annotations

from typing import Any

import torch

from .clipping import clipping_of
from .manual_step import ManualOptimization

__all__ = ["check_callback_settings", "check_model", "check_optimizer", "check_step_fn"]


def lazy_modules(model: torch.nn.Module) -> list[str]:
    """The modules whose parameters or buffers a first forward has yet to create (``nn.LazyLinear``
    and the other ``Lazy*`` modules): until then their shapes, and so the step's work, are unknown."""
    from torch.nn.parameter import is_lazy

    return [f"{name or 'the model'} ({type(module).__name__})" for name, module in model.named_modules()
            if any(is_lazy(t) for t in (*module.parameters(recurse=False), *module.buffers(recurse=False)))]


def check_model(model: Any, where: str) -> None:
    """A module with at least one trainable parameter, all of them created."""
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"{where}: expected a torch.nn.Module, got {type(model).__name__}")
    lazy = lazy_modules(model)
    if lazy:
        named = ", ".join(lazy[:3]) + (" ..." if len(lazy) > 3 else "")
        raise ValueError(f"{where}: {named}: parameters not created yet (lazy modules); run one forward pass on "
                         "a real batch first (it creates them), then predict")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"{where}: the model has no trainable parameters (requires_grad is False for all of "
                         "them); unfreeze the ones that train, or pass the model the optimizer updates")


def check_optimizer(optimizer: Any, where: str) -> None:
    """An optimizer instance, a factory, or ``None``."""
    call = where.rsplit("=...", 1)[0]
    optimizer, _clip = clipping_of(optimizer)
    if isinstance(optimizer, str):
        raise ValueError(f"{call}={optimizer!r}): pass the optimizer object (torch.optim.AdamW(...)), "
                         "a factory params -> optimizer, or None for AdamW defaults -- not its name")
    if isinstance(optimizer, ManualOptimization):
        for one in optimizer.optimizers:
            if not isinstance(one, torch.optim.Optimizer):
                raise ValueError(f"{call}=ManualOptimization(...)): expected torch.optim.Optimizer instances, "
                                 f"got {type(one).__name__}")
        return
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer) and not callable(optimizer):
        raise ValueError(f"{call}=<{type(optimizer).__name__}>): expected a torch.optim.Optimizer, a factory "
                         "params -> optimizer, ptp.ManualOptimization(optimizers) for a step that steps them "
                         "itself, or None for AdamW defaults")


def check_callback_settings(where: str, advise: Any, warmup_batches: Any, refresh_s: Any, clock: Any = None,
                            **flags: Any) -> None:
    """The settings every framework's callback takes: ``advise`` is True, False or ``"auto"``;
    ``warmup_batches`` an integer and ``refresh_s`` seconds, neither negative; ``clock`` (when
    given) a function returning seconds; each of ``flags`` True or False (``"no"`` would read as on)."""
    for name, value in flags.items():
        if value not in (True, False):
            raise ValueError(f"{where}({name}={value!r}): expected True or False")
    if advise not in (True, False, "auto"):
        raise ValueError(f"{where}(advise={advise!r}): expected True, False or 'auto'")
    if isinstance(warmup_batches, bool) or not isinstance(warmup_batches, int) or warmup_batches < 0:
        raise ValueError(f"{where}(warmup_batches={warmup_batches!r}): expected an integer >= 0 (batches)")
    if isinstance(refresh_s, bool) or not isinstance(refresh_s, (int, float)) or refresh_s < 0:
        raise ValueError(f"{where}(refresh_s={refresh_s!r}): expected a number of seconds >= 0")
    if clock is not None and not callable(clock):
        raise ValueError(f"{where}(clock={clock!r}): expected a function returning seconds (time.perf_counter)")


def check_step_fn(step_fn: Any, where: str) -> None:
    """A step function, or ``None`` for the default."""
    if step_fn is not None and not callable(step_fn):
        raise ValueError(f"{where}={step_fn!r}): expected a function step_fn(model, batch) -> loss, or None for "
                         "model(*batch) and its .loss")
