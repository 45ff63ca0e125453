"""Scaled-dot-product attention recorded as a CUDA GPU runs it, whatever CPU traced it.

``F.scaled_dot_product_attention`` picks its kernel at run time from the device, the dtype and
the arguments. A CPU proxy trace would record CPU's flash kernel (or, with dropout, CPU's
unfused math), and a trace on fake CUDA tensors fails in ``flop_counter`` for grouped-query
shapes on older PyTorch. So for a CUDA target the call is intercepted and recorded as what the
GPU runs, by the rules of PyTorch 2.11 on an sm80+ GPU (checked against the kernels in the H100
profiles and per-op timings):

* fp16/bf16, no explicit mask, head dim <= 256 (a multiple of 8): one fused kernel forward and
  one backward (flash attention; cuDNN attention on Hopper for equal head counts: the same
  work, timed as one family), grouped-query heads included;
* fp32, or an explicit mask: the memory-efficient kernel, which does not take grouped-query
  heads;
* anything else (fp32 grouped-query attention, odd head dims): the unfused math path, traced as
  the ops it runs (``_scaled_dot_product_attention_math``: repeat the key/value heads, two batched
  GEMMs, ``_safe_softmax`` -- four kernels, ``costs._safe_softmax_bytes`` -- and dropout).

Fused kernels apply dropout inside the kernel. The FLOPs are ``flop_counter``'s SDPA formulas
with the key/value heads broadcast to the query heads (the work the kernel does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter

from .costs import DTYPE_KEYS, OpCost

FUSED_BACKENDS = ("flash", "efficient")


def cuda_backend(dtype: torch.dtype, head_dim: int, value_dim: int, has_mask: bool, grouped: bool) -> str:
    """The SDPA kernel family a CUDA GPU runs: ``"flash"``, ``"efficient"`` or ``"math"``."""
    half = dtype in (torch.float16, torch.bfloat16)
    if half and not has_mask and max(head_dim, value_dim) <= 256 and head_dim % 8 == 0 and value_dim % 8 == 0:
        return "flash"
    if not grouped and dtype != torch.float64 and head_dim % 4 == 0 and value_dim % 4 == 0:
        return "efficient"
    return "math"


@dataclass(frozen=True)
class AttentionCall:
    """One SDPA call: shapes as ``(batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim)``."""

    dims: tuple[int, int, int, int, int, int, int]
    dtype: torch.dtype
    causal: bool
    dropout: bool
    has_mask: bool
    backend: str
    scale: float | None

    @property
    def grouped(self) -> bool:
        return self.dims[1] != self.dims[2]

    def replay(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[Any, dict]:
        """Arguments to time the forward alone on a GPU (``calibrate.measure_op_classes``)."""
        from .tracer import TensorSpec

        specs = tuple(TensorSpec(tuple(t.shape), t.dtype) for t in (query, key, value))
        return specs, {"is_causal": self.causal, "scale": self.scale, "enable_gqa": self.grouped}

    def flops(self, backward: bool) -> float:
        b, hq, _hkv, sq, sk, d, dv = self.dims
        q, k, v, o = (b, hq, sq, d), (b, hq, sk, d), (b, hq, sk, dv), (b, hq, sq, dv)
        if backward:
            return float(flop_counter.sdpa_backward_flop_count(o, q, k, v))
        return float(flop_counter.sdpa_flop_count(q, k, v))


def describe_call(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any,
                  dropout_p: float, is_causal: bool, scale: float | None, enable_gqa: bool) -> AttentionCall | None:
    """The call's shapes and kernel family, or None for layouts recorded op by op (not 4-D)."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return None
    b, hq, sq, d = query.shape
    _b, hkv, sk, _d = key.shape
    dv = value.shape[-1]
    grouped = bool(enable_gqa) and hkv != hq
    if hkv != hq and not grouped:
        return None  # broadcasting PyTorch itself would reject: leave it to PyTorch
    backend = cuda_backend(query.dtype, d, dv, attn_mask is not None, grouped)
    return AttentionCall((b, hq, hkv, sq, sk, d, dv), query.dtype, bool(is_causal), bool(dropout_p and dropout_p > 0),
                         attn_mask is not None, backend, scale)


# What the records are called: the public op forward (replayable on a GPU), a pseudo-op backward.
_NAMES = {False: "aten.scaled_dot_product_attention.default", True: "ptp.scaled_dot_product_attention_backward"}


def _nbytes(tensors: tuple[torch.Tensor, ...]) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))


def attention_cost(call: AttentionCall, inputs: tuple[torch.Tensor, ...], outputs: tuple[torch.Tensor, ...],
                   backward: bool) -> OpCost:
    """The record of one fused attention kernel (three kernels backward: preprocess, main, dq)."""
    return OpCost("attention", call.flops(backward), _nbytes(inputs) + _nbytes(outputs), 3 if backward else 1,
                  DTYPE_KEYS.get(call.dtype, "fp32"), causal=call.causal, backward=backward, dropout=call.dropout,
                  kernel=call.backend, dims=call.dims)


def _sdpa_args(args: tuple, kwargs: dict) -> dict[str, Any]:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    defaults = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    return bound


class _FusedAttention(torch.autograd.Function):
    """A fused attention kernel: records itself forward and backward, allocates its outputs."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None,
                call: AttentionCall, recorder: Any) -> torch.Tensor:
        """``bias``: a mask that is trained (a relative-position bias), else None: the kernel reads
        it, and its backward writes the bias's gradient, as large as the attention scores."""
        b, hq, _hkv, sq, _sk, _d, dv = call.dims
        with recorder.paused():
            # The fused kernels write (batch, q_len, heads, dim) and return its transpose.
            out = torch.empty((b, sq, hq, dv), dtype=query.dtype, device=query.device).transpose(1, 2)
        inputs = (query, key, value) + ((bias,) if bias is not None else ())
        recorder.record(_NAMES[False], attention_cost(call, inputs, (out,), backward=False),
                        inputs, out, replay=call.replay(query, key, value))
        ctx.call, ctx.recorder = call, recorder
        ctx.inputs = (query, key, value, out)
        ctx.bias = bias
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        query, key, value, out = ctx.inputs
        bias = ctx.bias
        b, hq, _hkv, sq, sk, _d, _dv = ctx.call.dims
        with ctx.recorder.paused():
            grads = tuple(torch.empty_like(t) for t in (query, key, value))
            # Autograd sums it down to the bias's own shape, as it sums the broadcast on a GPU.
            grad_bias = None if bias is None else torch.empty((b, hq, sq, sk), dtype=bias.dtype, device=bias.device)
        inputs = (grad_out, query, key, value, out)
        outputs = grads + ((grad_bias,) if grad_bias is not None else ())
        ctx.recorder.record(_NAMES[True], attention_cost(ctx.call, inputs, outputs, backward=True), inputs, outputs)
        return (*grads, grad_bias, None, None)


def in_autocast_dtype(device_type: str, *values: Any) -> tuple[Any, ...]:
    """``values`` as an op on autocast's lower-precision list gets them: floating tensors in the
    autocast dtype while autocast is on for ``device_type``, everything else as it is."""
    if not torch.is_autocast_enabled(device_type):
        return values
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype else t
                 for t in values)


def run_sdpa(func: Any, args: tuple, kwargs: dict, recorder: Any) -> Any:
    """``F.scaled_dot_product_attention`` as the CUDA target runs it (see module doc)."""
    bound = _sdpa_args(args, kwargs)
    query, key, value = bound["query"], bound["key"], bound["value"]
    device_type = query.device.type
    # SDPA is on CUDA autocast's lower-precision list: its floating inputs, a float mask among them,
    # are cast first.
    query, key, value, mask = in_autocast_dtype(device_type, query, key, value, bound["attn_mask"])
    call = describe_call(query, key, value, mask, bound["dropout_p"], bound["is_causal"],
                         bound["scale"], bound["enable_gqa"])
    if call is None:
        return func(*args, **kwargs)
    with torch.autocast(device_type, enabled=False):
        if call.backend in FUSED_BACKENDS:
            # A trained mask (a relative-position bias) gets its gradient from the kernel's backward.
            bias = mask if isinstance(mask, torch.Tensor) and mask.requires_grad else None
            return _FusedAttention.apply(query, key, value, bias, call, recorder)
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, mask, bound["dropout_p"], bound["is_causal"], None,
            scale=bound["scale"], enable_gqa=bool(bound["enable_gqa"]))[0]
