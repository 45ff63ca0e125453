"""Composite ops a CUDA GPU runs as one fused kernel where a CPU decomposes them.

``F.rms_norm`` has a fused CUDA kernel (``aten._fused_rms_norm``, forward and backward) but no
CPU one: on the CPU proxy it decomposes into six pointwise and reduction ops forward and a dozen
backward, with several times the memory traffic. For a CUDA target it is recorded as the fused
kernel pair, with CUDA autocast's cast policy applied to its inputs first (fp32 where the
installed PyTorch lists ``rms_norm`` among the fp32 ops, see ``cuda_autocast.py``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .costs import DTYPE_KEYS, OpCost

NAMES = {False: "aten._fused_rms_norm.default", True: "aten._fused_rms_norm_backward.default"}


def _nbytes(tensors: tuple) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)))


def _cost(inputs: tuple, outputs: tuple, dtype: torch.dtype, backward: bool, rows: int) -> OpCost:
    # Two kernels backward: the input gradient, and the weight gradient's column reduction.
    x = inputs[1] if backward else inputs[0]
    return OpCost("norm", 0.0, _nbytes(inputs) + _nbytes(outputs), 2 if backward else 1, DTYPE_KEYS.get(dtype, "fp32"),
                  backward=backward, kernel="rms_norm", dims=(rows, x.numel() // max(1, rows)))


class _FusedRmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, rows: int, recorder: Any) -> torch.Tensor:
        with recorder.paused():
            out = torch.empty_like(x)
            rstd = x.new_empty((rows,), dtype=torch.float32 if x.dtype != torch.float64 else x.dtype)
        inputs = (x,) if weight is None else (x, weight)
        recorder.record(NAMES[False], _cost(inputs, (out, rstd), x.dtype, False, rows), inputs, (out, rstd))
        ctx.recorder, ctx.saved = recorder, (x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd = ctx.saved
        with ctx.recorder.paused():
            grad_x = torch.empty_like(x)
            grad_w = torch.empty_like(weight) if weight is not None and ctx.needs_input_grad[1] else None
        inputs = tuple(t for t in (grad, x, rstd, weight) if t is not None)
        outputs = tuple(t for t in (grad_x, grad_w) if t is not None)
        ctx.recorder.record(NAMES[True], _cost(inputs, outputs, x.dtype, True, rstd.shape[0]), inputs, outputs)
        return grad_x, grad_w, None, None


def run_rms_norm(func: Any, args: tuple, kwargs: dict, recorder: Any, fp32_under_autocast: bool) -> Any:
    """``F.rms_norm(input, normalized_shape, weight=None, eps=None)`` as CUDA's fused kernel."""
    names = ("input", "normalized_shape", "weight", "eps")
    bound = {"weight": None, "eps": None, **dict(zip(names, args)), **kwargs}
    x, weight = bound["input"], bound["weight"]
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return func(*args, **kwargs)
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type) and fp32_under_autocast:
        x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        if weight is not None and weight.dtype in (torch.float16, torch.bfloat16):
            weight = weight.float()
    normalized = bound["normalized_shape"]
    normalized = (normalized,) if isinstance(normalized, int) else tuple(normalized)
    rows = math.prod(x.shape[: x.dim() - len(normalized)])
    with torch.autocast(device_type, enabled=False):
        return _FusedRmsNorm.apply(x, weight, rows, recorder)
