"""Gradient clipping, traced as part of the optimizer step it precedes.

Lightning's ``Trainer(gradient_clip_val=...)``, the Hugging Face Trainer (``max_grad_norm``, 1.0
unless set otherwise) and many hand-written loops clip the gradients before every optimizer step:
by norm, a norm over every gradient and then a scaling of each (two more passes over them), or
by value, a clamp of each. Wrapping the optimizer in :class:`ClippedGradients` traces that work
where it runs: after the GradScaler's unscale, before the optimizer's update.

>>> import torch
>>> from ptp_callback.tracer import trace_step
>>> model = torch.nn.Linear(64, 64)
>>> clipped = ClippedGradients(torch.optim.AdamW(model.parameters()), 1.0)
>>> trace = trace_step(model, torch.randn(8, 64), optimizer=clipped, target_type="cuda")
>>> [op.name for op in trace.ops if op.phase == "optimizer"][:2]
['aten._foreach_norm.Scalar', 'aten.stack.default']
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

ALGORITHMS = ("norm", "value")


@dataclass(frozen=True)
class ClippedGradients:
    """``optimizer`` (an instance, a factory ``params -> optimizer``, or ``None`` for AdamW
    defaults) with its gradients clipped before each step: to a total ``norm_type``-norm of at
    most ``limit`` (``algorithm="norm"``, as ``torch.nn.utils.clip_grad_norm_``), or each element
    to ``[-limit, limit]`` (``"value"``, as ``clip_grad_value_``)."""

    optimizer: Any
    limit: float
    algorithm: str = "norm"
    norm_type: float = 2.0

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"ClippedGradients(algorithm={self.algorithm!r}): expected 'norm' or 'value'")
        if not self.limit > 0:
            raise ValueError(f"ClippedGradients(limit={self.limit!r}): expected a positive number "
                             "(pass the optimizer itself when nothing is clipped)")

    def apply(self, optimizer: torch.optim.Optimizer, foreach: bool | None) -> None:
        """Clip the gradients of ``optimizer``'s parameters (``foreach``: a few multi-tensor kernels
        rather than one per parameter; ``None``: torch's choice for their device, as for real ones
        under :func:`foreach_for_fake_tensors`)."""
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if self.algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, self.limit, foreach=foreach)
        else:
            torch.nn.utils.clip_grad_norm_(params, self.limit, norm_type=self.norm_type, foreach=foreach)


@contextlib.contextmanager
def foreach_for_fake_tensors() -> Iterator[None]:
    """While active, torch's gradient clipping (``clip_grad_norm_``, ``clip_grad_value_`` with
    ``foreach=None``, a step's own call included) takes its multi-tensor kernels for fake tensors
    as it does for real ones: it checks ``type(t) is torch.Tensor``, which a fake tensor is not, and
    would trace two kernels per parameter instead of a few in all (DTensor registers itself so)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils import _foreach_utils

    types = _foreach_utils._foreach_supported_types
    added = FakeTensor not in types
    if added:
        types.append(FakeTensor)
    try:
        yield
    finally:
        if added and FakeTensor in types:
            types.remove(FakeTensor)


def clipping_of(optimizer: Any) -> tuple[Any, ClippedGradients | None]:
    """The optimizer argument inside ``optimizer``, and its clipping (``None`` if not clipped)."""
    if isinstance(optimizer, ClippedGradients):
        return optimizer.optimizer, optimizer
    return optimizer, None
