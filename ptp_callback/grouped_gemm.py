"""Mixture-of-experts grouped GEMMs (``aten._grouped_mm``) recorded as a GPU runs them.

Mixture-of-experts layers (transformers' Mixtral, Qwen-MoE, OLMoE, DeepSeek... experts) sort the
routed tokens by expert and multiply each expert's rows by its own weights in one
``torch._grouped_mm`` call (``F.grouped_mm``): forward the gate/up and down projections, backward
the data gradients (2-D x 3-D, like the forward) and the weight gradients (2-D x 2-D, one result
per expert). A CUDA GPU runs it in one of two ways (PyTorch's ``_grouped_mm_cuda``):

* bf16 operands on Hopper or Blackwell: one CUTLASS grouped kernel (and a small kernel that lays
  out the groups), no host synchronization;
* any other dtype, or an older GPU: a fallback that copies the group offsets to the host (the
  host waits for the device there) and then runs one GEMM per group. transformers' experts cast
  their input to the weights' dtype because grouped GEMMs are not autocast ops, so under
  ``bf16-mixed`` / ``16-mixed`` (fp32 weights) the experts run this way, in fp32 or TF32.

The tokens each expert gets are data: a trace cannot know them. The FLOPs do not depend on the
split (every routed row is multiplied once); the time is priced for an even split, which a router
trained with a load-balancing loss aims for. A skewed split makes the real step slower.

PyTorch's meta kernel for ``_grouped_mm`` accepts only bf16 and fp16, while the CUDA and CPU
kernels also take fp32: so an fp32 call is given its output here, from the meta kernel's shape.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

# Absent before PyTorch 2.8 (no grouped GEMMs to record there).
_GROUPED_MM = {torch.ops.aten._grouped_mm.default} if hasattr(torch.ops.aten, "_grouped_mm") else set()
_META_DTYPES = (torch.bfloat16, torch.float16)
FAST_PATH_ARCHS = frozenset(("hopper", "blackwell"))
KERNEL = "grouped_mm"  # the ``OpCost.kernel`` of these GEMMs


def is_grouped_mm(func: Any) -> bool:
    """Whether ``func`` is PyTorch's grouped GEMM."""
    return func in _GROUPED_MM


def _operands(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    return args[0], args[1], offs


def fake_output(func: Any, args: tuple, kwargs: dict) -> Any:
    """The call's output on fake tensors where the meta kernel rejects the dtype, else
    ``NotImplemented`` (the fake mode runs the meta kernel)."""
    a, b, _offs = _operands(args, kwargs)
    if a.dtype in _META_DTYPES or not isinstance(a, FakeTensor):
        return NotImplemented
    out_dtype = kwargs.get("out_dtype") or (args[4] if len(args) > 4 and args[4] is not None else a.dtype)

    def stand_in(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        dtype = torch.bfloat16 if value.is_floating_point() else value.dtype
        return torch.empty_strided(value.shape, value.stride(), dtype=dtype, device="meta")

    with unset_fake_temporarily():
        meta_kwargs = {k: stand_in(v) for k, v in kwargs.items() if k != "out_dtype"}
        shape = func(*[stand_in(v) for v in args[:4]], **meta_kwargs).shape
        meta = torch.empty(shape, dtype=out_dtype, device="meta")
    return a.fake_mode.fake_tensor_converter.from_meta_and_device(a.fake_mode, meta, a.fake_device)


def groups_and_dims(args: tuple, kwargs: dict) -> tuple[float, tuple[int, int, int, int]]:
    """(FLOPs, ``(groups, m, n, k)``) of one call, each group's GEMM for an even split of the rows.

    The four forms: 2-D x 3-D (routed rows x each expert's weight), 3-D x 2-D, 2-D x 2-D (the
    contraction split by group: weight gradients) and 3-D x 3-D (a plain batched GEMM).
    """
    a, b, offs = _operands(args, kwargs)
    if a.dim() == 3 and b.dim() == 3:
        groups, m, k = a.shape
        n = b.shape[-1]
        return 2.0 * groups * m * n * k, (groups, m, n, k)
    groups = int(offs.shape[0]) if isinstance(offs, torch.Tensor) else 1
    share = max(1, groups)
    if a.dim() == 2 and b.dim() == 3:
        rows, k = a.shape
        n = b.shape[-1]
        return 2.0 * rows * k * n, (groups, math.ceil(rows / share), n, k)
    if a.dim() == 3 and b.dim() == 2:
        m, k = a.shape[1:]
        columns = b.shape[-1]
        return 2.0 * m * k * columns, (groups, m, math.ceil(columns / share), k)
    m, depth = a.shape
    n = b.shape[-1]
    return 2.0 * m * depth * n, (groups, m, n, math.ceil(depth / share))


def fast_path(dtype_key: str, arch: str | None = None) -> bool:
    """Whether a call runs as one grouped kernel (bf16 on Hopper or Blackwell; ``arch=None``: the
    dtype alone decides) rather than as a host-synchronized loop of one GEMM per group."""
    return dtype_key == "bf16" and (arch is None or arch in FAST_PATH_ARCHS)


def launches(dtype_key: str, dims: tuple[int, int, int, int]) -> int:
    """Kernels one call launches: the grouped kernel and its layout kernel, or one GEMM per group."""
    return 2 if fast_path(dtype_key) else max(1, dims[0])
