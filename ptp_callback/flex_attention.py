"""FlexAttention recorded as the fused kernel a GPU runs, on any machine that traces it.

``torch.nn.attention.flex_attention`` wraps its call in ``torch.compile(fullgraph=True)`` even in
eager code, and the compiled call is a higher-order op: neither goes through a trace's fake
tensors (and on a CPU its backward refuses to run). While a step is traced for a CUDA target,
this module stands in for that call: one attention record forward and one backward, with the
outputs' shapes, FLOPs from the same formulas as SDPA (``attention.AttentionCall``), key/value
heads broadcast to the query heads, times the share of blocks the block mask computes (from its
block counts where they are real numbers, else from its ``mask_mod`` on real positions; dense
where neither answers).

What it prices: the fused Triton kernel that ``torch.compile`` generates (Hugging Face's
``flex_attention`` integration compiles it), at the fused SDPA kernels' fitted rates; no GPU has
timed FlexAttention's own kernel for these coefficients. An uncompiled call on a GPU runs an
unfused implementation that materializes the scores, which is slower than priced.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._python_dispatch import _disable_current_modes

from .attention import AttentionCall, attention_cost, in_autocast_dtype

_MODULE = "torch.nn.attention.flex_attention"
_NAMES = {False: "ptp.flex_attention", True: "ptp.flex_attention_backward"}


def block_density(block_mask: tuple, q_len: int, kv_len: int) -> float:
    """The share of (query block, key block) pairs a block mask computes (1.0 when unknown).

    ``block_mask`` is ``BlockMask.as_tuple()``: the lengths, the block counts and indices of partial
    and of full blocks (key-side, then query-side), the block sizes, the ``mask_mod``. Its counts
    when they are real numbers (a mask built before the step), else its ``mask_mod`` evaluated."""
    counts = [t for t in (block_mask[2], block_mask[4]) if isinstance(t, torch.Tensor)]
    indices = block_mask[3]
    if counts and isinstance(indices, torch.Tensor) and not any(is_fake(t) for t in counts + [indices]):
        kv_blocks, q_blocks = indices.shape[-1], counts[0].shape[-1]
        # Real tensors, counted for real: outside the trace's modes, which would fake them.
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            computed = sum(float(t.sum()) / max(1, t.shape[0] * t.shape[1]) for t in counts)
        return min(1.0, computed / max(1, q_blocks * kv_blocks))
    return _mask_mod_density(block_mask[-1], q_len, kv_len, block_mask[-3], block_mask[-2])


# Positions a block's side is sampled at when a mask_mod is evaluated: a block with any of its
# sampled pairs kept is computed (exact for the masks models use: causal, sliding windows, documents).
_SAMPLES = 16


def _mask_mod_density(mask_mod: Any, q_len: int, kv_len: int, q_block: Any, kv_block: Any) -> float:
    """The share of blocks a ``mask_mod`` keeps, for the first batch row and head (1.0 when it
    cannot be evaluated on real positions: it reads the batch, or does not broadcast)."""
    if not callable(mask_mod) or not isinstance(q_block, int) or not isinstance(kv_block, int):
        return 1.0
    try:
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            q = _sampled_positions(q_len, q_block).view(-1, 1)
            kv = _sampled_positions(kv_len, kv_block).view(1, -1)
            zero = torch.zeros((), dtype=torch.int)
            keep = mask_mod(zero, zero, q, kv)
            if not isinstance(keep, torch.Tensor) or is_fake(keep) or keep.shape != (q.numel(), kv.numel()):
                return 1.0
            blocks = keep.view(-1, _SAMPLES, kv.numel() // _SAMPLES, _SAMPLES).any(3).any(1)
            return float(blocks.float().mean())
    except Exception:  # noqa: BLE001 - a mask_mod that needs the batch's values: priced dense
        return 1.0


def _sampled_positions(length: int, block: int) -> torch.Tensor:
    """``_SAMPLES`` positions in each block of ``length`` (its first and last among them)."""
    starts = torch.arange(0, length, block).view(-1, 1)
    ends = torch.clamp(starts + block - 1, max=length - 1)
    steps = torch.linspace(0, 1, _SAMPLES).view(1, -1)
    return (starts + (ends - starts) * steps).round().long().view(-1)


class _FlexKernel(torch.autograd.Function):
    """The fused FlexAttention kernel: records itself forward and backward, allocates its outputs."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, call: AttentionCall,
                density: float, recorder: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, hq, _hkv, sq, _sk, _d, dv = call.dims
        with recorder.paused():
            out = torch.empty((b, hq, sq, dv), dtype=query.dtype, device=query.device)
            lse = torch.empty((b, hq, sq), dtype=torch.float32, device=query.device)
            max_scores = torch.empty((b, hq, sq), dtype=torch.float32, device=query.device)
        recorder.record(_NAMES[False], _cost(call, density, (query, key, value), (out, lse), backward=False),
                        (query, key, value), (out, lse))
        ctx.call, ctx.density, ctx.recorder = call, density, recorder
        ctx.inputs = (query, key, value, out, lse)
        ctx.mark_non_differentiable(lse, max_scores)
        return out, lse, max_scores

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, *_stats: Any) -> tuple[Any, ...]:
        query, key, value, out, lse = ctx.inputs
        with ctx.recorder.paused():
            grads = tuple(torch.empty_like(t) for t in (query, key, value))
        inputs = (grad_out, query, key, value, out, lse)
        ctx.recorder.record(_NAMES[True], _cost(ctx.call, ctx.density, inputs, grads, backward=True), inputs, grads)
        return (*grads, None, None, None)


def _cost(call: AttentionCall, density: float, inputs: tuple, outputs: tuple, backward: bool) -> Any:
    cost = attention_cost(call, inputs, outputs, backward)
    return replace(cost, flops=cost.flops * density) if density < 1.0 else cost


def _recorded_call(recorder: Any) -> Any:
    """A stand-in for the ``flex_attention_hop`` higher-order op that records the fused kernel."""

    def flex_attention_hop(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_mod: Any,
                           block_mask: tuple, scale: float, kernel_options: dict, *args: Any, **kwargs: Any) -> Any:
        device_type = query.device.type
        # As the op's autocast rule does: query, key and value in the autocast dtype first.
        query, key, value = in_autocast_dtype(device_type, query, key, value)
        b, hq, sq, d = query.shape
        _b, hkv, sk, _d = key.shape
        call = AttentionCall((b, hq, hkv, sq, sk, d, value.shape[-1]), query.dtype, causal=False, dropout=False,
                             has_mask=False, backend="flex", scale=scale)
        with torch.autocast(device_type, enabled=False):
            return _FlexKernel.apply(query, key, value, call, block_density(block_mask, sq, sk), recorder)

    return flex_attention_hop


@contextlib.contextmanager
def flex_attention_recorded(recorder: Any) -> Iterator[None]:
    """While a step is traced for a CUDA target: FlexAttention's calls are recorded as the fused
    kernel (see module doc). Nothing changes where the step never imported FlexAttention."""
    module = sys.modules.get(_MODULE)
    if module is None or not hasattr(module, "flex_attention_hop"):
        yield
        return
    saved = {name: getattr(module, name) for name in ("flex_attention_hop", "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG",
                                                      "_validate_device") if hasattr(module, name)}
    # No compile of its own (which would skip every frame under the trace's dispatch modes), the
    # stand-in for the op, and no refusal of a CPU proxy's backward (the GPU runs it).
    module.flex_attention_hop = _recorded_call(recorder)
    module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    if "_validate_device" in saved:
        module._validate_device = _cuda_target_device_check(saved["_validate_device"])
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
        if "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG" not in saved:
            del module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG


def _cuda_target_device_check(check: Any) -> Any:
    def validate(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != "cpu":  # a CPU proxy stands in for the GPU
            check(query, key, value)

    return validate

