"""What one traced aten op costs in device-independent terms: class, FLOPs, bytes, launches.

Every op of a traced step becomes an :class:`OpCost`: its op class (the unit the cost model and
calibration work in), the FLOPs of matrix-like work (torch's own ``flop_counter`` formulas, read
from its registry, never re-derived), the bytes it moves (inputs read plus outputs written, in
their real dtypes), how many kernels it launches, and the dtype its math runs in. Turning that
into seconds on a device is ``predict.py``'s job.

Op classes:

=============== ===========================================================================
``gemm``        mm, addmm, bmm, baddbmm (FLOPs from flop_counter, GEMM dims kept for waves), and
                mixture-of-experts grouped GEMMs (``grouped_gemm.py``)
``conv``        dense, pointwise (1x1) and grouped convolutions and their backward
``conv_dw``     depthwise convolutions: little math per byte, memory-bound
``attention``   fused scaled-dot-product attention, forward and backward (``attention.py``)
``recurrent``   cuDNN LSTM/GRU/RNN calls, forward and backward (``recurrent.py``), and a CPU's
                oneDNN LSTM layers (``mkldnn_rnn_layer``: one call per layer and direction)
``norm``        layer/group/RMS norm and their backward
``batch_norm``  batch norm run by cuDNN (CUDA's choice for fp32, and fp16 input with fp32 weights)
``batch_norm_native`` batch norm run by PyTorch's own kernels (bf16, or fp16 weights), slower
``reduction``   sums, means, softmax, log-softmax, losses and their backward
``elementwise`` pointwise math and data movement (copy, cat, index, pad, fill, dropout)
``cast``        dtype conversions (autocast's casts and their backward)
``pool``        pooling and its backward
``embedding``   embedding lookup and its (scatter-add) backward
``optimizer``   multi-tensor (``_foreach_*``) and fused optimizer kernels
``scaler``      GradScaler's inf checks and scale update
``host``        no device kernel: allocation, scalars kept on the host, bookkeeping
=============== ===========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from torch.utils import flop_counter

from . import grouped_gemm
from .conv_dispatch import cudnn_runs_depthwise

_FLOP_FORMULAS = flop_counter.flop_registry

# Ops whose kernels are classified by name (overload packet name without "aten.").
_CLASS_BY_NAME: dict[str, str] = {
    **dict.fromkeys(("mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "addmv", "mv", "dot",
                     "addr", "addbmm", "_scaled_mm", "vdot", "_grouped_mm", "_trilinear", "_euclidean_dist"), "gemm"),
    **dict.fromkeys(("convolution", "_convolution", "convolution_backward", "cudnn_convolution",
                     "cudnn_convolution_transpose", "mkldnn_convolution", "_slow_conv2d_forward",
                     "_slow_conv2d_backward", "convolution_overrideable",
                     "_conv_depthwise2d", "conv_depthwise3d"), "conv"),
    **dict.fromkeys(("_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention_for_cpu_backward",
                     "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
                     "_scaled_dot_product_efficient_attention",
                     "_scaled_dot_product_efficient_attention_backward",
                     "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
                     "_flash_attention_forward", "_flash_attention_backward",
                     "_efficient_attention_forward", "_efficient_attention_backward"), "attention"),
    **dict.fromkeys(("native_layer_norm", "native_layer_norm_backward", "native_group_norm",
                     "native_group_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward"), "norm"),
    **dict.fromkeys(("native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
                     "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
                     "cudnn_batch_norm", "cudnn_batch_norm_backward", "miopen_batch_norm",
                     "batch_norm_backward", "_batch_norm_with_update",
                     "_batch_norm_with_update_functional", "_batch_norm_no_update"), "batch_norm"),
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std",
                     "var_mean", "std_mean", "norm", "linalg_vector_norm", "cumsum", "cumprod", "prod",
                     "logsumexp", "_softmax", "_log_softmax", "_softmax_backward_data",
                     "_log_softmax_backward_data", "nll_loss_forward", "nll_loss_backward",
                     "nll_loss2d_forward", "nll_loss2d_backward", "mse_loss", "mse_loss_backward",
                     "binary_cross_entropy_with_logits", "all", "any", "_is_all_true", "_is_any_true", "topk", "sort",
                     "_weight_norm_interface", "_weight_norm_interface_backward", "_ctc_loss",
                     "_ctc_loss_backward", "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss",
                     "huber_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
                     "multi_margin_loss", "multi_margin_loss_backward", "multilabel_margin_loss_forward",
                     "multilabel_margin_loss_backward", "kthvalue", "median", "nanmedian", "mode", "cummax",
                     "cummin", "logcumsumexp", "_cdist_forward", "_cdist_backward", "trace",
                     # batched small triangular solves: the chunks of linear attention (Qwen3-Next's
                     # gated delta rule), bound by their bytes
                     "linalg_solve_triangular"), "reduction"),
    **dict.fromkeys(("max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max_pool2d",
                     "max_pool3d_with_indices", "max_pool3d_with_indices_backward",
                     "avg_pool2d", "avg_pool2d_backward", "avg_pool3d", "avg_pool3d_backward",
                     "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
                     "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "_adaptive_avg_pool3d",
                     "_adaptive_avg_pool3d_backward", "adaptive_max_pool3d", "adaptive_max_pool3d_backward",
                     "max_unpool2d", "max_unpool3d", "fractional_max_pool2d", "fractional_max_pool2d_backward",
                     "fractional_max_pool3d", "fractional_max_pool3d_backward"), "pool"),
    **dict.fromkeys(("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"), "recurrent"),
    **dict.fromkeys(("embedding", "embedding_dense_backward", "embedding_backward",
                     "_embedding_bag", "_embedding_bag_backward"), "embedding"),
    **dict.fromkeys(("_fused_adamw_", "_fused_adam_", "_fused_sgd_", "_fused_adagrad_"), "optimizer"),
    **dict.fromkeys(("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_"), "scaler"),
}

# Ops that launch no device kernel but cost host time (allocation, host scalars, bookkeeping).
_HOST_ONLY: frozenset[str] = frozenset((
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "_local_scalar_dense",
    "lift_fresh", "resize_", "set_", "is_same_size", "_has_compatible_shallow_copy_type",
    "_record_function_enter_new", "_record_function_exit", "_record_function_enter",
    "record_stream", "is_nonzero", "equal", "_assert_async", "sym_size", "sym_stride",
    "sym_numel", "sym_storage_offset", "_to_copy_meta", "device",
    # a sparse gradient's (nn.Embedding(sparse=True)) tensor built around its indices and values
    "_sparse_coo_tensor_with_dims_and_tensors", "is_coalesced",
))

# Kernels launched per call where it is not one (device-side work split into passes).
_KERNELS: dict[str, int] = {
    "convolution_backward": 2, "native_layer_norm_backward": 2,
    "native_batch_norm": 2, "native_batch_norm_backward": 2, "_native_batch_norm_legit": 2,
    "_native_batch_norm_legit_functional": 2, "cudnn_batch_norm": 2, "cudnn_batch_norm_backward": 2,
    "_fused_rms_norm_backward": 2, "embedding_dense_backward": 4, "nll_loss_backward": 2, "_safe_softmax": 4,
    "native_dropout": 1, "_scaled_dot_product_flash_attention_for_cpu_backward": 3,
    "_scaled_dot_product_efficient_attention_backward": 3, "_efficient_attention_backward": 3,
    "_scaled_dot_product_flash_attention_backward": 3, "_flash_attention_backward": 3,
    "_scaled_dot_product_cudnn_attention_backward": 3, "slice_backward": 2, "select_backward": 2,
    "_amp_update_scale_": 1, "cat": 1,
}

_FILL_OPS: frozenset[str] = frozenset((
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "fill_", "zero_", "arange",
    "new_zeros", "new_ones", "new_full", "scalar_tensor", "rand", "randn", "rand_like", "randn_like",
    "bernoulli_", "normal_", "uniform_", "exponential_", "geometric_", "log_normal_", "cauchy_", "random_",
    "eye", "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
))

# Data-movement and indexing kernels priced by bytes like pointwise ops (torch tags those
# ``pointwise``; these have no tag). Anything neither classified, tagged nor listed is unknown to
# the cost model: still priced by its bytes, and reported (``Trace.unknown_ops``).
_DATA_MOVEMENT: frozenset[str] = frozenset((
    "copy_", "_to_copy", "clone", "contiguous", "cat", "stack", "index", "index_put_", "index_put", "_index_put_impl_",
    "index_select", "index_add", "index_add_", "index_copy", "index_copy_", "gather", "scatter", "scatter_",
    "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "masked_fill", "masked_fill_",
    "masked_scatter", "masked_scatter_backward", "masked_select", "where", "constant_pad_nd",
    "reflection_pad2d", "replication_pad2d", "repeat", "repeat_interleave", "_unsafe_index", "_unsafe_index_put",
    "slice_backward", "select_backward", "slice_scatter", "select_scatter", "diagonal_backward", "as_strided_scatter",
    "native_dropout", "native_dropout_backward", "tril", "triu", "tril_", "triu_", "roll", "flip", "narrow_copy",
    "expand_copy", "permute_copy", "transpose_copy", "new_zeros", "new_ones", "new_full", "embedding_dense_backward",
    "upsample_nearest1d", "upsample_nearest1d_backward", "upsample_nearest2d", "upsample_nearest2d_backward",
    "upsample_nearest3d", "upsample_nearest3d_backward", "_upsample_nearest_exact1d",
    "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d", "_upsample_nearest_exact2d_backward",
    "_upsample_nearest_exact3d", "_upsample_nearest_exact3d_backward", "upsample_linear1d",
    "upsample_linear1d_backward", "upsample_bilinear2d", "upsample_bilinear2d_backward", "upsample_bicubic2d",
    "upsample_bicubic2d_backward", "_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa_backward",
    "_upsample_bicubic2d_aa", "_upsample_bicubic2d_aa_backward", "upsample_trilinear3d",
    "upsample_trilinear3d_backward", "grid_sampler_2d", "grid_sampler_2d_backward", "grid_sampler_3d",
    "grid_sampler_3d_backward", "cudnn_grid_sampler", "cudnn_grid_sampler_backward", "reflection_pad1d",
    "reflection_pad1d_backward", "reflection_pad2d_backward", "reflection_pad3d", "reflection_pad3d_backward",
    "replication_pad1d", "replication_pad1d_backward", "replication_pad2d_backward", "replication_pad3d",
    "replication_pad3d_backward", "index_fill", "index_fill_", "diag_embed",
    # Tensor.unfold's gradient (timm's HaloAttn blocks), channel shuffles, an EmbeddingBag's dense
    # gradient, and sampling from a distribution: gathers and scatters over their tensors
    "unfold_backward", "native_channel_shuffle", "_embedding_bag_dense_backward", "multinomial",
    # nn.Embedding(max_norm=...): the looked-up rows rescaled in place before the lookup
    "embedding_renorm_",
    # cuFFT: one to a few passes over the data for the sizes models use (FNO, FNet, spectrograms)
    "_fft_r2c", "_fft_c2r", "_fft_c2c",
    # torchvision's detection ops: gathers with bilinear weights (backward: atomic adds), box overlaps
    "roi_align", "_roi_align_backward", "roi_pool", "_roi_pool_backward", "ps_roi_align", "_ps_roi_align_backward",
    "ps_roi_pool", "_ps_roi_pool_backward", "nms",
    "_softmax", "_log_softmax", "_safe_softmax", "col2im", "im2col", "channel_shuffle", "pixel_shuffle",
    "pixel_unshuffle", "_adaptive_avg_pool2d", "one_hot", "bernoulli", "_fused_dropout", "_masked_scale",
    "linspace", "randperm", "randint", "_pin_memory", "sort", "unique", "_unique2", "nonzero", "bucketize",
    "searchsorted", "histc", "bincount", "lerp", "lerp_", "addcmul", "addcdiv", "addcmul_", "addcdiv_",
    # activations whose forms carry no ``pointwise`` tag in some PyTorch versions (leaky_relu in 2.11)
    "hardswish", "hardswish_", "hardswish_backward", "hardsigmoid", "hardsigmoid_", "hardsigmoid_backward",
    "hardtanh", "hardtanh_", "hardtanh_backward", "silu", "silu_", "silu_backward", "mish", "mish_",
    "mish_backward", "elu", "elu_", "elu_backward", "leaky_relu", "leaky_relu_", "leaky_relu_backward",
    "rrelu_with_noise", "rrelu_with_noise_backward", "hardshrink_backward", "softshrink_backward",
    "gelu", "gelu_", "gelu_backward", "relu", "relu_", "threshold", "threshold_backward", "softplus",
    "softplus_backward", "sigmoid_backward", "tanh_backward", "glu", "glu_backward", "prelu",
    "_prelu_kernel", "_prelu_kernel_backward", "log_sigmoid_forward", "log_sigmoid_backward",
    # pointwise math without the tag (a router's ``positions // top_k``, complex rotary embeddings)
    "floor_divide", "floor_divide_", "polar", "abs_",
))

DTYPE_KEYS: dict[torch.dtype, str] = {
    torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
    getattr(torch, "float8_e4m3fn", torch.float32): "fp8", getattr(torch, "float8_e5m2", torch.float32): "fp8",
}
# torch.float32 may have been used as a stand-in above on old torch builds.
DTYPE_KEYS[torch.float32] = "fp32"


# Allocations a CPU's allocator always takes from the operating system afresh: glibc maps every one
# above its largest mmap threshold (32 MiB on 64-bit) and unmaps it when freed. Smaller ones come
# from memory the step freed: counting those too (from 256 KB on) put the CPU steps of transformers
# within 1-9% but small MLPs and convnets 26-52% over, whose same-sized tensors glibc reuses.
LARGE_ALLOCATION_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class OpCost:
    """Device-independent cost of one traced op.

    ``flops`` counts matrix-like work as ``torch.utils.flop_counter`` does (2 per multiply-add,
    causal attention not halved); ``causal`` tells the timing model to halve attention work.
    ``gemm`` holds ``(batch, m, n, k)`` for GEMMs, ``None`` otherwise. ``dtype`` is the dtype key of
    the math ("fp32", "tf32", "bf16", ...): fp32 GEMMs and convolutions become "tf32" when the
    precision allows TF32 for them. ``backward`` marks a backward kernel (``*_backward*`` ops run
    other kernels than their forward); ``misaligned`` a tensor-core GEMM with a dimension that is
    not a multiple of 16 bytes (cuBLAS then falls back to slow narrow-load kernels: a vocabulary
    of 50257 does this), ``alignment`` the elements all its dimensions are multiples of (1, 2, 4);
    ``aux_bytes`` memory-bound side work inside a compute op (the bias gradient a convolution
    backward reduces, the bias a convolution forward adds to its output); ``dropout`` fused
    attention that applies dropout;
    ``gemms`` the implicit GEMMs ``(batch, m, n, k)`` of a convolution (forward: one; backward: data
    and weight gradients) and ``pass_bytes`` the bytes each of those kernels reads and writes (the
    output gradient is read by both backward kernels); ``layout_bytes`` the activation traffic of
    converting NCHW tensors to the NHWC layout tensor-core convolutions run in, and back. ``kernel`` names the kernel family
    where a class has several (convolutions: ``dense``, ``dense_3x3``, ``pointwise``, ``strided_pointwise``,
    ``grouped``, ``depthwise``,
    ``depthwise_cudnn`` where PyTorch hands a depthwise one to cuDNN (:mod:`conv_dispatch`);
    attention: ``flash``, ``efficient``; recurrent layers: ``lstm``, ``gru``, ``rnn_tanh``,
    ``rnn_relu``; casts: ``narrowing`` to a smaller dtype, ``widening`` to a larger one; GEMMs:
    ``row_major`` when neither operand is transposed, ``grouped_mm``) and ``dims`` holds the shape the class's time model needs (attention:
    ``(batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim)``; recurrent:
    ``(gates, layers, directions, batch, seq, input, hidden, proj)``; convolution:
    ``(n, c_in, c_out, in_pixels, out_pixels, kernel_pixels, groups, stride)``; batch norm:
    ``(elements per channel, channels)``, plus the feature-map pixels for an NCHW input).
    ``passes`` names the cuDNN pass each of ``gemms`` runs (``fwd``, ``dgrad``, ``wgrad``: a
    transposed convolution's forward is a data gradient). ``fresh_bytes``: the op's newly
    allocated outputs of :data:`LARGE_ALLOCATION_BYTES` or more (a CPU maps such allocations from
    the OS afresh, page by page, when they are first written).
    """

    op_class: str
    flops: float
    bytes: float
    kernels: int
    dtype: str
    gemm: tuple[int, int, int, int] | None = None
    causal: bool = False
    backward: bool = False
    misaligned: bool = False
    alignment: int = 0
    aux_bytes: float = 0.0
    dropout: bool = False
    gemms: tuple[tuple[int, int, int, int], ...] = ()
    layout_bytes: float = 0.0
    kernel: str = ""
    dims: tuple[int, ...] = ()
    pass_bytes: tuple[float, ...] = ()
    fresh_bytes: float = 0.0
    passes: tuple[str, ...] = ()


@lru_cache(maxsize=None)
def _write_slots(func: torch._ops.OpOverload) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """Argument positions the op mutates, and which returns are fresh (not aliases of inputs)."""
    schema = func._schema
    mutated = tuple(i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write)
    fresh = tuple(r.alias_info is None for r in schema.returns)
    return mutated, fresh


@lru_cache(maxsize=None)
def is_known(func: torch._ops.OpOverload) -> bool:
    """Whether the cost model has a rule for this op (a class, a pointwise/reduction tag, a list)."""
    name = func.overloadpacket.__name__
    if op_kind(func) != "kernel" or name in _CLASS_BY_NAME or name in _FILL_OPS or name in _DATA_MOVEMENT:
        return True
    if name.startswith("_foreach_") or name.startswith("_fused_"):
        return True
    tags = getattr(func, "tags", ())
    # ``view_copy``: a view's copying twin (``diagonal_copy``: torchmetrics' confusion matrices), one copy kernel
    return torch.Tag.pointwise in tags or torch.Tag.reduction in tags or torch.Tag.view_copy in tags


@lru_cache(maxsize=None)
def op_kind(func: torch._ops.OpOverload) -> str:
    """``"free"`` (no work in a real step), ``"view"`` (metadata only), ``"host"`` (no kernel) or
    ``"kernel"``; cached per overload."""
    name = func.overloadpacket.__name__
    if func.namespace == "prim" or func.namespace == "profiler":
        return "free"  # fake-tensor metadata queries and profiler markers: no work in a real step
    # ``inplace_view``: ops that change a tensor's sizes or strides in place (``as_strided_``, ``t_``)
    metadata = func.is_view or torch.Tag.inplace_view in getattr(func, "tags", ())
    if metadata or name in ("detach", "alias", "lift_fresh", "_unsafe_view", "view", "_reshape_alias",
                            "unsafe_split", "unsafe_chunk"):
        return "view"
    if name in _HOST_ONLY:
        return "host"
    return "kernel"


# Kernels whose time on CUDA follows the element count, not the bytes: NCHW batch norm, pooling and
# PyTorch's own depthwise convolution kernel took the same time in fp16/bf16 as in fp32 on the
# H100, so their traffic is counted at fp32 width (not cuDNN's depthwise kernels).
_ELEMENT_BOUND = frozenset(("batch_norm", "batch_norm_native", "pool", "conv_dw"))


def _tensor_bytes(t: torch.Tensor, min_width: int = 1) -> int:
    # A broadcast (expanded) view reads its storage, not its numel; a slice reads its numel.
    width = max(t.element_size(), min_width)
    nbytes = t.numel() * width
    try:
        storage = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return nbytes
    storage = storage * width // max(1, t.element_size())
    return min(nbytes, storage) if storage else nbytes


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors in nested lists, tuples and dicts, in order (a plain walk: pytree's is slower,
    and this runs for every recorded op)."""
    found: list[torch.Tensor] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def _first_float_dtype(tensors: list[torch.Tensor]) -> torch.dtype:
    for t in tensors:
        if t.is_floating_point():
            return t.dtype
    return tensors[0].dtype if tensors else torch.float32


def foreach_launches(name: str, depth: int, tensors: int, chunks: int) -> int:
    """multi_tensor_apply launches over ``depth`` lists of ``tensors`` tensors in ``chunks`` chunks
    of 64K elements: a launch holds at most N tensors and 320 chunks.

    From aten/src/ATen/native/cuda/MultiTensorApply.cuh (depth_to_max_tensors, kChunkSize,
    depth_to_max_blocks); the host-side state steps of non-capturable optimizers are not here.
    """
    depth = max(1, depth)
    max_tensors = (110, 64, 48, 36, 30)[min(depth, 5) - 1]
    if "ScalarList" in name:
        max_tensors = (96, 64, 48, 36, 30)[min(depth, 5) - 1]
    return max(1, math.ceil(tensors / max_tensors), math.ceil(chunks / 320))


def _gemm_dims(name: str, args: tuple, out: torch.Tensor) -> tuple[int, int, int, int] | None:
    try:
        if name in ("mm", "_scaled_mm"):
            a, b = args[0], args[1]
            return (1, a.shape[0], b.shape[1], a.shape[1])
        if name in ("addmm", "_addmm_activation"):
            a, b = args[1], args[2]
            return (1, a.shape[0], b.shape[1], a.shape[1])
        if name == "bmm":
            a, b = args[0], args[1]
            return (a.shape[0], a.shape[1], b.shape[2], a.shape[2])
        if name == "baddbmm":
            a, b = args[1], args[2]
            return (a.shape[0], a.shape[1], b.shape[2], a.shape[2])
    except (AttributeError, IndexError):
        return None
    return None


def _contraction(name: str, args: tuple) -> tuple[float, tuple[int, int, int, int] | None]:
    """FLOPs and the larger batched GEMM of ops that contract tensors with GEMMs inside one ATen
    kernel (``torch.utils.flop_counter`` counts neither).

    ``_euclidean_dist(x1, x2)`` (``torch.cdist`` with p=2 on more than 25 rows): one batched GEMM of
    the rows of each, with two columns more for their squared norms. ``_trilinear(i1, i2, i3,
    expand1, expand2, expand3, sumdim)`` (``nn.Bilinear`` and its gradients): each input unsqueezed at
    its ``expand`` dimensions spans one index space; ``i1`` and ``i2`` are contracted first, over the
    summed dimensions ``i3`` lacks, then their product with ``i3`` over the other summed ones. Each
    contraction is a GEMM of the dimensions only its left operand has by those only its right one
    has, over the summed ones, batched over the others both have."""
    try:
        if name == "_euclidean_dist":
            x1, x2 = args[0], args[1]
            batch = math.prod(x1.shape[:-2])
            rows, cols, k = x1.shape[-2], x2.shape[-2], x1.shape[-1] + 2
            return 2.0 * batch * rows * cols * k, (batch, rows, cols, k)
        tensors, expands, sumdim = args[:3], args[3:6], set(args[6])
        shapes = []
        for t, expand in zip(tensors, expands):
            shape = list(t.shape)
            for d in sorted(expand):
                shape.insert(d, 1)
            shapes.append(shape)
        size = [max(sides) for sides in zip(*shapes)]
        has = [set(range(len(size))) - set(expand) for expand in expands]
        first_sum = (has[0] & has[1] & sumdim) - has[2]
        left = (has[0] | has[1]) - first_sum

        def extent(dims: set[int]) -> int:
            return math.prod(size[d] for d in dims)

        def gemm(a: set[int], b: set[int], summed: set[int]) -> tuple[int, int, int, int]:
            return extent((a & b) - summed), extent(a - b), extent(b - a), extent(summed)

        gemms = [gemm(has[0], has[1], first_sum), gemm(left, has[2], (left & has[2] & sumdim))]
        work = [math.prod(g) for g in gemms]
        return 2.0 * sum(work), gemms[work.index(max(work))]
    except (AttributeError, IndexError, TypeError, ValueError):
        return 0.0, None


# The kernel family of a GEMM whose operands are both row-major (neither transposed): a linear
# layer's input gradient, ``attention @ value``. A CPU without matrix instructions for its dtype runs
# it in another kernel than the transposed layouts (``probe.transposed_speedup``).
ROW_MAJOR_GEMM = "row_major"


def _gemm_operands(name: str, args: tuple) -> tuple:
    """The two matrices a GEMM op multiplies (``addmm`` and its kin take the bias first)."""
    return args[1:3] if name in ("addmm", "baddbmm", "_addmm_activation") else args[:2]


def _both_row_major(name: str, args: tuple) -> bool:
    operands = _gemm_operands(name, args)
    return all(isinstance(t, torch.Tensor) and t.dim() >= 2 and (t.stride()[-1] == 1 or t.shape[-1] == 1)
               for t in operands)


# The kernel family of a GEMM neither of whose operands runs along K in memory: ``(m, k) @ (k, n)``
# with the first transposed (its m contiguous) and the second row-major (its n contiguous), as in a
# linear layer's weight gradient ``grad_out.t() @ input``. Hopper's TF32 tensor-core instructions
# (``wgmma``) read only K-major operands, unlike fp16 and bf16 ones.
MN_MAJOR_GEMM = "mn_major"


def _both_mn_major(name: str, args: tuple) -> bool:
    operands = _gemm_operands(name, args)
    if len(operands) < 2 or not all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in operands):
        return False
    a, b = operands
    return a.stride()[-1] != 1 and a.shape[-1] > 1 and b.stride()[-2] != 1 and b.shape[-2] > 1


def _leading_dimension(t: torch.Tensor) -> int:
    """The stride between rows (or columns, for a transposed operand) a BLAS call is given."""
    if t.dim() < 2:
        return t.shape[-1] if t.dim() else 1
    rows, cols = t.stride()[-2], t.stride()[-1]
    if cols == 1 or t.shape[-1] == 1:
        return max(rows, 1) if t.shape[-2] > 1 else t.shape[-1]
    return max(cols, 1)


def _gemm_alignment(name: str, args: tuple, outputs: list[torch.Tensor], widest: int) -> int:
    """Elements (1 ... ``widest``) that every operand's leading dimension and start are multiples of.

    cuBLAS picks vectorized tensor-core kernels only when each matrix's leading dimension and
    address are 16-byte aligned. For row-major ``(m, k) @ (k, n)`` those are ``k``, ``n`` and ``n``: an
    odd ``m`` does not matter, a 50257-token vocabulary does (measured on the H100: odd ``k`` or
    ``n`` ran bf16 GEMMs at 14% of peak instead of 70%, odd ``m`` at 47-70%).
    """
    operands = [a for a in _gemm_operands(name, args) if isinstance(a, torch.Tensor)]
    operands += outputs[:1]
    values = []
    for t in operands:
        values.append(_leading_dimension(t))
        values.append(t.storage_offset())
    alignment = widest
    while alignment > 1 and any(v % alignment for v in values):
        alignment //= 2
    return alignment


@lru_cache(maxsize=None)
def _arg_index(func: torch._ops.OpOverload, arg_name: str) -> int | None:
    for i, argument in enumerate(func._schema.arguments):
        if argument.name == arg_name:
            return i
    return None


def _arg(func: torch._ops.OpOverload, args: tuple, kwargs: dict, arg_name: str, default: Any) -> Any:
    if arg_name in kwargs:
        return kwargs[arg_name]
    index = _arg_index(func, arg_name)
    if index is not None and index < len(args):
        return args[index]
    return default


def _attention_flops(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[float, bool, bool]:
    """FLOPs of a fused attention op (flop_counter's sdpa formulas), causal?, dropout?"""
    name = func.overloadpacket.__name__
    def heads_of(q: torch.Tensor, t: torch.Tensor) -> tuple[int, ...]:
        # Grouped-query key/value heads broadcast to the query heads: the work the kernel does
        # (older flop_counter versions reject the unbroadcast shapes).
        return (*t.shape[:-3], q.shape[-3], *t.shape[-2:]) if t.dim() == 4 == q.dim() else tuple(t.shape)

    if name.endswith("_backward"):
        grad_out, q, k, v = args[0], args[1], args[2], args[3]
        flops = flop_counter.sdpa_backward_flop_count(grad_out.shape, q.shape, heads_of(q, k), heads_of(q, v))
    else:
        q, k, v = args[0], args[1], args[2]
        flops = flop_counter.sdpa_flop_count(q.shape, heads_of(q, k), heads_of(q, v))
    causal = bool(_arg(func, args, kwargs, "is_causal", False))
    dropout = float(_arg(func, args, kwargs, "dropout_p", 0.0) or 0.0) > 0.0
    return float(flops), causal, dropout


def _spatial(shape: torch.Size) -> int:
    return math.prod(shape[2:]) if len(shape) > 2 else 1


def _conv_dims(func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: list[torch.Tensor]) -> tuple[int, ...]:
    """``(n, c_in, c_out, in_pixels, out_pixels, kernel_pixels, groups, stride, filter_width,
    height_slack, taps)`` of a convolution.

    ``filter_width``: the filter's last side; ``height_slack``: the input's height less the filter's
    and the rows a stride skips at the padded start (0 without a height axis), negative when the
    input cannot hold the filter. oneDNN's direct depthwise weight-gradient kernel needs a width
    up to 3 and a slack of 0 or more (:func:`kernels.depthwise_seconds`). ``taps``: the filter taps
    that reach one input pixel on average, rounded up (``kernel_pixels`` over the product of the
    strides of every spatial axis: 2 for a 1-D kernel of 3 at stride 2, 4 for a 3x3x3 one at stride
    2; never more than ``out_pixels x kernel_pixels / in_pixels``; :func:`conv_gemms`).

    A transposed convolution is given as the convolution it is the transpose of (its input is that
    convolution's output): cuDNN runs its forward as that convolution's data gradient, and its
    backward as that convolution's forward (the data gradient) and weight gradient
    (:func:`conv_passes`).
    """
    try:
        if func.overloadpacket.__name__ == "convolution_backward":
            grad_out, data, weight = args[0], args[1], args[2]
            result = grad_out
        else:
            data, weight = args[0], args[1]
            result = out[0]
        groups = int(_arg(func, args, kwargs, "groups", 1) or 1)
        stride = list(_arg(func, args, kwargs, "stride", [1]) or [1])
        padding = _arg(func, args, kwargs, "padding", [0])
        c_out = int(weight.shape[0])
        if _transposed(func, args, kwargs):
            # The weight of a transposed convolution is (C_in, C_out / groups, *kernel).
            data, result, c_out = result, data, int(data.shape[1])
        axes = max(1, weight.dim() - 2)
        strides = math.prod(int(stride[i] if i < len(stride) else stride[0]) for i in range(axes))
        kernel, in_px, out_px = math.prod(weight.shape[2:]), _spatial(data.shape), _spatial(result.shape)
        # Never more taps than the output's pixels x the filter's spread over the input's pixels:
        # a 4x4 filter over a 4x4 input with a 1x1 output (a generator's first transposed
        # convolution, from its latent vector) reaches each input pixel once, not 16 times.
        taps = min(-(-kernel // max(1, strides)), -(-out_px * kernel // max(1, in_px)))
        return (int(data.shape[0]), int(data.shape[1]), c_out, in_px, out_px, kernel, groups, int(max(stride)),
                int(weight.shape[-1]) if weight.dim() > 2 else 1,
                _height_slack(data.shape[2:], weight.shape[2:], stride, padding), taps)
    except (AttributeError, IndexError, TypeError):
        return ()


def _transposed(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    return bool(_arg(func, args, kwargs, "transposed", False))


def conv_passes(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[str, ...]:
    """The cuDNN passes a convolution op runs, in the order of its implicit GEMMs: ``("fwd",)``
    for a forward, ``("dgrad", "wgrad")`` for a backward (data and weight gradients); a transposed
    convolution's ``("dgrad",)`` and ``("fwd", "wgrad")``, those of the convolution it transposes."""
    backward = func.overloadpacket.__name__ == "convolution_backward"
    if _transposed(func, args, kwargs):
        return ("fwd", "wgrad") if backward else ("dgrad",)
    return ("dgrad", "wgrad") if backward else ("fwd",)


def _height_slack(sides: Sequence[int], filter_sides: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int]) -> int:
    if len(sides) < 2:
        return 0
    axis = len(sides) - 2

    def at(values: Sequence[int], default: int) -> int:
        return int(values[axis] if len(values) > axis else values[0]) if values else default

    return int(sides[axis]) - int(filter_sides[axis]) - (-at(padding, 0)) % max(1, at(stride, 1))


def conv_pass_flops(dims: tuple[int, ...]) -> float:
    """FLOPs of one pass of a convolution of ``dims`` (forward, data or weight gradient alike): its
    output pixels x output channels x the multiply-adds of one group's filter."""
    n, c_in, c_out, _in_px, out_px, kernel, groups = dims[:7]
    return 2.0 * n * out_px * c_out * (c_in // groups) * kernel


# The kernel families :func:`conv_family` names for convolutions that are not depthwise.
CONV_FAMILIES: tuple[str, ...] = ("dense", "dense_3x3", "pointwise", "strided_pointwise", "grouped")


def conv_family(dims: tuple[int, ...]) -> str:
    """The kernel family cuDNN runs a convolution with.

    ``pointwise``: 1x1, stride 1 -- in NCHW a plain batched GEMM, no layout change (on an aligned map);
    ``strided_pointwise``: 1x1 with a stride (a strided gather of the input); ``dense_3x3``: 3x3,
    stride 1, the shape cuDNN has its most tuned kernels for (Winograd among them); ``dense``: any
    other ungrouped convolution (implicit GEMM); ``grouped``; ``depthwise`` (one input channel per
    group). With 3x3 stride-1 convolutions priced as ``dense``, the H100's op rows put them 13%
    over (median, forward) and 7x7 ones 24% under: one efficiency cannot fit both, and the step
    MAPE of the five convnets with a family held out went from 10.7% to 9.6% with the split.
    """
    if not dims:
        return "dense"
    _n, c_in, _c_out, _ip, _op, kernel, groups, stride = dims[:8]
    if groups > 1:
        return "depthwise" if groups == c_in else "grouped"
    if kernel == 1:
        return "pointwise" if stride == 1 else "strided_pointwise"
    return "dense_3x3" if kernel == 9 and stride == 1 else "dense"


# Channels per group that cuDNN's Hopper kernels tile a convolution's channels in (see
# :func:`kernels.runs_as_gemm`).
CHANNEL_TILE = 64


def fills_channel_tiles(dims: tuple[int, ...]) -> bool:
    """Whether an ungrouped convolution's input and output channels are both whole multiples of
    :data:`CHANNEL_TILE` (VGG's and ResNet's 64 to 512 are; an RGB input or MobileNet's 40 are not)."""
    if len(dims) < 7 or dims[6] != 1 or not dims[1] or not dims[2]:
        return False
    return dims[1] % CHANNEL_TILE == 0 and dims[2] % CHANNEL_TILE == 0


def conv_gemms(dims: tuple[int, ...], passes: tuple[str, ...], channels_first: bool = True,
               k_chunk: int = 1) -> tuple[tuple[int, int, int, int], ...]:
    """The implicit GEMMs ``(batch, m, n, k)`` of a convolution's passes (cuDNN's formulation).

    ``fwd``: m = output pixels, n = C_out/g, k = C_in/g x kernel; ``dgrad``: m = input pixels,
    n = C_in/g, k = C_out/g x the filter taps that reach one input pixel (``taps``, kernel /
    stride^2 in 2-D: the data gradient of a stride-2 convolution runs as strided sub-problems, not over an output
    gradient padded with zeros; held-out median error of the H100's convolutions 20.1% -> 18.5%
    over three random splits); ``wgrad``: m = C_out/g, n = C_in/g x kernel, k = N x output
    pixels. On a channels-first (NCHW) tensor the forward and data-gradient tiles cover one
    image's pixels each (batch = N x groups), so a 7x7 map fills a 64-row tile to 77%: tiles over
    flattened N x pixels rows under-predicted the H100's NCHW convolutions with 7x7 and 3x3 output
    maps by a median 1.6-3.6x. On a channels-last tensor the rows are N x pixels.

    The forward and data-gradient K loops step through the channels in whole chunks of
    ``k_chunk`` per filter tap (:func:`_chunked`), so 88 input channels of a 3x3 convolution cost
    the K of 128 in half precision (held-out median error of the H100's dense convolution
    backward passes 37.9% -> 35.4%, pointwise 32.8% -> 29.9%). Grouped convolutions pass 1.
    """
    n, c_in, c_out, in_px, out_px, kernel, groups = dims[:7]
    taps = dims[10]  # the filter taps that reach one input pixel (:func:`_conv_dims`)
    ci, co = max(1, c_in // groups), max(1, c_out // groups)
    pi, po = _chunked(ci, k_chunk), _chunked(co, k_chunk)
    images, rows = (n, 1) if channels_first else (1, n)
    shapes = {"fwd": (groups * images, rows * out_px, co, pi * kernel),
              "dgrad": (groups * images, rows * in_px, ci, po * taps),
              "wgrad": (groups, co, ci * kernel, n * out_px)}
    return tuple(shapes[p] for p in passes)


def _chunked(channels: int, chunk: int) -> int:
    """Channels as an implicit GEMM's K loop steps through them: whole chunks per filter tap (a
    chunk no wider than the channels rounded up to a power of two, and no narrower than the 16
    bytes a vectorized load reads: an RGB input runs as 8 channels in half precision, as cuDNN's
    ``align8`` kernels for a first convolution do)."""
    if chunk <= 1:
        return channels
    chunk = min(chunk, max(chunk // 8, 1 << (channels - 1).bit_length()))
    return -(-channels // chunk) * chunk


_NO_GEMM = (0, 0, 0, 0)
# Pixels per NCHW image a half-precision 1x1 convolution runs on in place (16 bytes).
_PIXEL_ALIGNMENT = 8


def _channels_first(args: tuple) -> bool:
    """Whether a convolution's first 4-D activation is in the channels-first (NCHW) layout."""
    first = next((t for t in args[:2] if isinstance(t, torch.Tensor) and t.dim() == 4), None)
    return first is None or not first.is_contiguous(memory_format=torch.channels_last)


def _cudnn_depthwise(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether a CUDA device runs this depthwise convolution (forward or backward) with cuDNN."""
    backward = func.overloadpacket.__name__ == "convolution_backward"
    data, weight = (args[1], args[2]) if backward else (args[0], args[1])
    if not isinstance(data, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return False
    stride = list(_arg(func, args, kwargs, "stride", [1]) or [1])
    dilation = list(_arg(func, args, kwargs, "dilation", [1]) or [1])
    return cudnn_runs_depthwise(data, weight, stride, dilation, _channels_first(args))


def _nchw_bytes(args: tuple, outputs: list[torch.Tensor]) -> float:
    """Bytes cuDNN moves converting a channels-first convolution's activations to NHWC and back."""
    # With one channel, NCHW and NHWC are the same layout: nothing to convert.
    return float(sum(2 * t.numel() * t.element_size() for t in list(args[:2]) + outputs
                     if isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[1] > 1))


def rnn_layer_inputs(dims: tuple[int, ...]) -> list[int]:
    """Input width of each layer of an RNN call of ``dims`` (see :func:`rnn_flops`): the first takes
    the input, the others the layer below (both directions, projected where an LSTM projects)."""
    _gates, layers, dirs, _batch, _seq, inp, hidden, proj = dims
    return [inp] + [dirs * (proj or hidden)] * (layers - 1)


def rnn_flops(dims: tuple[int, ...], backward: bool) -> float:
    """FLOPs of an RNN call of ``dims = (gates, layers, directions, batch, seq, input, hidden, proj)``:
    per layer, direction and step, gates x hidden outputs of (input + recurrent) multiply-adds, plus
    an LSTM's projection; backward twice that (data and weight gradients)."""
    gates, layers, dirs, batch, seq, _inp, hidden, proj = dims
    recurrent = proj or hidden
    forward = sum(2.0 * batch * seq * gates * hidden * (width + recurrent) * dirs for width in rnn_layer_inputs(dims))
    if proj:
        forward += 2.0 * batch * seq * hidden * proj * dirs * layers
    return 2.0 * forward if backward else forward


def _onednn_rnn_dims(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[int, ...]:
    """``(gates, 1, 1, batch, seq, input, hidden, 0)`` of one oneDNN RNN layer call, as
    :class:`~ptp_callback.recurrent.RnnCall` holds a cuDNN call's (one layer, one direction each);
    () when the arguments are not the expected ones. PyTorch runs ``nn.LSTM`` this way on CPUs with
    native bf16 support (AVX-512 BF16, AMX), forward and backward: each call is a whole layer."""
    data, w_ih, _w_hh, _b_ih, _b_hh, hx = (tuple(args) + (None,) * 6)[:6]
    hidden = int(_arg(func, args, kwargs, "hidden_size", 0) or 0)
    tensors = (data, w_ih, hx)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or data.dim() != 3 or hx.dim() < 2 or hidden <= 0:
        return ()
    # The input is (seq, batch, input) whatever ``batch_first`` says (PyTorch transposes it before
    # the call); the hidden state is (batch, hidden).
    batch = int(hx.shape[-2])
    seq = data.numel() // max(1, batch * int(data.shape[-1]))
    return (max(1, int(w_ih.shape[0]) // hidden), 1, 1, batch, int(seq), int(data.shape[-1]), hidden, 0)


def _norm_rows(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[int, ...]:
    """``(rows, row width)`` a layer/group norm kernel normalizes (one row per reduction)."""
    name = func.overloadpacket.__name__
    x = args[1] if name.endswith("_backward") and len(args) > 1 else args[0] if args else None
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return ()
    if "group_norm" in name:
        groups = _arg(func, args, kwargs, "group", 1) or 1
        rows = int(x.shape[0]) * int(groups)
    else:
        normalized = _arg(func, args, kwargs, "normalized_shape", [x.shape[-1]])
        rows = x.numel() // max(1, math.prod(normalized))
    return (rows, x.numel() // max(1, rows))


def _group_norm_kernels(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> int:
    """Kernels CUDA's group norm launches (``aten/src/ATen/native/cuda/group_norm_kernel.cu``).
    Forward: the rows' moments, then the normalization, with a small kernel between them that
    folds the affine weight and bias into one scale and shift per channel (maps wider than one
    pixel). Backward: per channel and image, the sums of the gradient and of gradient times input
    (maps wider than one pixel); for the input's gradient the weight times ``rstd`` (with a
    weight), the per-group coefficients and the gradient itself; then the weight's and bias's
    gradients, one kernel for both."""
    pixels = _arg(func, args, kwargs, "HxW", 2)
    weight = _arg(func, args, kwargs, "weight", None)
    affine = isinstance(weight, torch.Tensor) or isinstance(_arg(func, args, kwargs, "bias", None), torch.Tensor)
    if func.overloadpacket.__name__ == "native_group_norm":
        return 2 + int(affine and pixels > 1)
    mask = _arg(func, args, kwargs, "output_mask", [True, True, True])
    kernels = int(pixels > 1)
    if mask[0]:
        kernels += 2 + int(pixels > 1 and isinstance(weight, torch.Tensor))
    return max(1, kernels + int(bool(mask[1] or mask[2])))


def _cudnn_batch_norm(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """CUDA's rule (aten/src/ATen/native/Normalization.cpp, _batch_norm_impl_index): cuDNN runs
    batch norm unless the input or weight is bf16, or the input is fp16 with non-fp32 weights."""
    data = _arg(func, args, kwargs, "input", None)
    if data is None:
        data = _arg(func, args, kwargs, "grad_out", None)
    weight = _arg(func, args, kwargs, "weight", None)
    if not isinstance(data, torch.Tensor):
        return True
    weight_dtype = weight.dtype if isinstance(weight, torch.Tensor) else torch.float32
    if torch.bfloat16 in (data.dtype, weight_dtype):
        return False
    return not (data.dtype == torch.float16 and weight_dtype != torch.float32)


def _safe_softmax_bytes(scores: torch.Tensor, out: torch.Tensor, dim: int) -> tuple[int, int]:
    """(read, written) by ``_safe_softmax``, the softmax of SDPA's unfused math path. Eager PyTorch
    runs it as four kernels (``_KERNELS``): the softmax, ``eq(-inf)`` into a bool mask, ``all``
    over each row of the mask, and ``where`` zeroing fully masked rows: three more passes over the
    scores than a plain softmax."""
    x, o, mask = _tensor_bytes(scores), _tensor_bytes(out), scores.numel()
    rows = mask // max(1, scores.shape[dim]) if scores.dim() else 1
    return x + x + mask + o + rows, o + mask + rows + o


# Softmax kernels; the first argument (input, or gradient) is read again when its rows are long.
_SOFTMAX_OPS = frozenset(("_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"))
# A block's default shared memory: a softmax row longer than this cannot be held on chip.
SOFTMAX_ROW_BYTES = 48 * 1024


def _softmax_rereads(name: str, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> int:
    """Bytes a softmax reads beyond one pass over its inputs. PyTorch's CUDA softmax keeps a row
    in shared memory when it fits; a longer row (a language model's vocabulary: 32,000 fp32 logits
    are 125 KB) is read from memory once per pass: forward for its maximum, for its sum of
    exponentials and for the output (two more reads of the input), backward for the sum of the
    gradient and for the result (one more read of the gradient). On the H100 the forward of
    6,145 x 50,257 fp32 logits took 1.58 ms, what four passes over them take at 0.94 of its bandwidth."""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None or x.dim() == 0:
        return 0
    dim = _arg(func, args, kwargs, "dim", -1)
    if x.shape[dim] * x.element_size() <= SOFTMAX_ROW_BYTES:
        return 0
    return (2 if name in ("_softmax", "_log_softmax") else 1) * _tensor_bytes(x)


# The kernel family of a sum or mean over a tensor's leading dimensions (a bias's gradient).
COLUMN_REDUCTION = "columns"
COLUMN_OUTPUTS = 4096


def _reduces_leading_dims(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether a contiguous ``x`` is summed over leading dimensions only into 2 to
    :data:`COLUMN_OUTPUTS` outputs (``grad.sum(0)`` of an ``(N, C)`` gradient: a bias's gradient, a
    norm's weight gradient). Each output then gathers values a row apart, which the H100 ran at
    0.3-0.6 of its bandwidth (C = 64-3072 in its kernel profiles), where a sum along rows streams at
    0.9 of it. Wider outputs are left to the row rate: BERT's step, whose sums include a
    30,522-wide vocabulary bias gradient, took about what that rate gives for it."""
    if not x.is_contiguous() or not 1 < out.numel() <= COLUMN_OUTPUTS or out.numel() >= x.numel():
        return False
    kept = 1
    for size in reversed(x.shape):
        if kept == out.numel():
            return True
        kept *= size
        if kept > out.numel():
            return False
    return False


# The kernel family of a concatenation that PyTorch's CUDA kernel copies element by element.
STRIDED_CAT = "strided_cat"


def _cat_copies_per_element(tensors: list, outputs: list[torch.Tensor]) -> bool:
    """Whether a CUDA ``torch.cat`` runs its generic kernel for inputs that are not contiguous
    (``CatArrayBatchedCopy`` with per-input strides, ``aten/src/ATen/native/cuda/Cat.cu``), which
    computes every element's offsets: its time follows the elements, not their bytes (a rotary
    embedding's ``cat((-x2, x1), -1)`` of two halves of a tensor took as long in bf16 as in fp32 on
    the H100). Contiguous inputs go to vectorized copies, and more than four dimensions to one copy
    per input."""
    inputs = [t for t in tensors if isinstance(t, torch.Tensor) and t.numel() > 0]
    if len(tensors) < 2 or not outputs or outputs[0].dim() > 4:
        return False
    return any(not t.is_contiguous() for t in inputs)


def describe_op(
    func: torch._ops.OpOverload,
    args: tuple,
    kwargs: dict,
    out: Any,
    *,
    matmul_tf32: bool,
    conv_tf32: bool,
    phase: str,
) -> OpCost:
    """Cost of one op that launches work (``op_kind(func) != "view"``)."""
    name = func.overloadpacket.__name__
    # A tensor passed twice (``addcmul(v, g, g)``, ``x * x``) is read from memory once.
    inputs = list({id(t): t for t in tensors_in((args, kwargs))}.values())
    outputs = tensors_in(out)
    mutated, fresh = _write_slots(func)
    read = sum(_tensor_bytes(t) for t in inputs)
    written = sum(_tensor_bytes(t) for t in tensors_in([args[i] for i in mutated if i < len(args)]))
    # One return that is a list (``_foreach_sqrt`` returns ``Tensor[]``) is one slot holding them all.
    out_list = out if isinstance(out, (tuple, list)) and len(fresh) > 1 else (out,)
    large_fresh = 0.0
    for is_fresh, value in zip(fresh, out_list):
        if is_fresh:
            sizes = [_tensor_bytes(t) for t in tensors_in(value)]
            written += sum(sizes)
            large_fresh += sum(size for size in sizes if size >= LARGE_ALLOCATION_BYTES)
    dtype = _first_float_dtype(inputs or outputs)
    dtype_key = DTYPE_KEYS.get(dtype, "fp32")

    if op_kind(func) == "host":
        return OpCost("host", 0.0, 0.0, 0, dtype_key)

    if name.startswith("_foreach_"):
        lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        if lists and all(t.dim() == 0 for t in lists[0]) and phase == "optimizer":
            # Optimizer step counters: CPU tensors unless capturable/fused, so host work.
            return OpCost("host", 0.0, 0.0, 0, dtype_key)
        members = lists[0] if lists else []
        first = _first_float_dtype(members) if lists else dtype
        # (lists, tensors per list, 64K-element chunks of the first list): what the launches follow.
        dims = (len(lists), len(members), sum(max(1, math.ceil(t.numel() / 65536)) for t in members))
        return OpCost("optimizer", 0.0, float(read + written), foreach_launches(str(func), *dims),
                      DTYPE_KEYS.get(first, "fp32"), dims=dims)

    op_class = _CLASS_BY_NAME.get(name)
    flops = 0.0
    gemm = None
    causal = dropout = False
    gemms: tuple[tuple[int, int, int, int], ...] = ()
    layout = 0.0
    pass_bytes: tuple[float, ...] = ()
    passes: tuple[str, ...] = ()
    dims: tuple[int, ...] = ()
    kernel_family = ""
    if op_class == "gemm":
        if grouped_gemm.is_grouped_mm(func):
            flops, gemm = grouped_gemm.groups_and_dims(args, kwargs)
            kernel_family = grouped_gemm.KERNEL
        elif name in ("_trilinear", "_euclidean_dist"):
            flops, gemm = _contraction(name, args)
        else:
            formula = _FLOP_FORMULAS.get(func.overloadpacket)
            flops = float(formula(*args, **kwargs, out_val=out)) if formula else 0.0
            gemm = _gemm_dims(name, args, outputs[0] if outputs else None)
            if dtype.is_complex:
                # flop_counter counts a multiply-add per output element and step of K; a complex one
                # is four real multiplies and four adds (cuBLAS's cgemm), on the real dtype's units.
                flops *= 4.0
                dtype_key = DTYPE_KEYS.get(dtype.to_real(), "fp32")
            if gemm is not None and _both_row_major(name, args):
                kernel_family = ROW_MAJOR_GEMM
            elif gemm is not None and _both_mn_major(name, args):
                kernel_family = MN_MAJOR_GEMM
        if dtype_key == "fp32" and matmul_tf32:
            dtype_key = "tf32"
    elif op_class == "conv":
        formula = _FLOP_FORMULAS.get(func.overloadpacket)
        flops = float(formula(*args, **kwargs, out_val=out)) if formula else 0.0
        dims = _conv_dims(func, args, kwargs, outputs)
        kernel_family = conv_family(dims)
        # A backward's (data gradient, weight gradient, bias gradient) to compute.
        mask = _arg(func, args, kwargs, "output_mask", [True, True, False])
        if name == "convolution_backward" and dims and dims[6] > 1:
            # flop_counter's backward formula ignores groups (PyTorch 2.14 counts a depthwise 3x3
            # backward 65x too high); each gradient pass does the forward's multiply-adds.
            flops = conv_pass_flops(dims) * sum(1 for on in mask[:2] if on)
        if kernel_family == "depthwise":
            op_class = "conv_dw"
            if _cudnn_depthwise(func, args, kwargs):
                kernel_family = "depthwise_cudnn"
            if name == "convolution_backward":
                passes = tuple(part for part, on in zip(("dgrad", "wgrad"), mask[:2]) if on)
        elif dims:
            if dtype_key == "fp32" and conv_tf32:
                dtype_key = "tf32"
            channels_first = _channels_first(args)
            # A K chunk is 128 bytes of channels (64 half, 32 TF32) in cuDNN's sm90 kernels.
            chunk = 128 // dtype.itemsize if kernel_family != "grouped" else 1
            passes = conv_passes(func, args, kwargs)
            if name == "convolution_backward":
                # Always (data gradient, weight gradient); a pass the mask leaves out is empty.
                both = conv_gemms(dims, passes, channels_first, chunk)
                gemms = tuple(g if on else _NO_GEMM for g, on in zip(both, mask[:2]))
                # Each gradient kernel reads the output gradient, and the weight (data gradient)
                # or the input (weight gradient), and writes its own result.
                grad_out, data, weight = (_tensor_bytes(t) for t in args[:3])
                results = [t if isinstance(t, torch.Tensor) else None for t in list(out_list)[:2]]
                pass_bytes = tuple(float(grad_out + (weight if i == 0 else data) + _tensor_bytes(result))
                                   if on and result is not None else 0.0
                                   for i, (on, result) in enumerate(zip(mask[:2], results)))
            else:
                gemms = conv_gemms(dims, passes, channels_first, chunk)
                pass_bytes = (float(read + written),)
            # A 1x1 stride-1 convolution is a plain GEMM per image in NCHW, with nothing to convert,
            # as long as an image's pixel rows keep the 16-byte alignment half-precision tensor-core
            # loads need: a 55x55 or 14x14 map (pixels not a multiple of 8) is converted like any
            # other. The H100's half-precision op rows with 7x7 and 14x14 maps ran 2.4x (forward)
            # and 1.5x (backward) the aligned rule, while 28x28 and larger maps matched it; TF32
            # rows showed no such step, and SqueezeNet's TF32 steps ran faster than converting.
            misaligned = dtype.itemsize == 2 and dims[3] % _PIXEL_ALIGNMENT != 0
            if (dtype_key != "fp32" and dtype_key != "fp64" and channels_first
                    and (kernel_family != "pointwise" or misaligned)):
                layout = _nchw_bytes(args, outputs)
    elif op_class == "attention":
        flops, causal, dropout = _attention_flops(func, args, kwargs)
    elif op_class == "batch_norm":
        if not _cudnn_batch_norm(func, args, kwargs):
            op_class = "batch_norm_native"
        x = args[0] if args and isinstance(args[0], torch.Tensor) and args[0].dim() >= 2 else None
        if x is not None and x.shape[1]:
            dims = (x.numel() // x.shape[1], int(x.shape[1]))  # (elements per channel, channels)
            if x.dim() > 2 and x.is_contiguous():
                # NCHW: a channel's values lie in runs of one feature map each. A (N, C) input or a
                # channels-last one is read along its channels, with no such runs.
                dims += (math.prod(x.shape[2:]),)
    elif op_class == "norm":
        dims = _norm_rows(func, args, kwargs)
    elif op_class == "reduction" and name in ("sum", "mean") and inputs and outputs:
        if _reduces_leading_dims(inputs[0], outputs[0]):
            kernel_family = COLUMN_REDUCTION
    elif op_class == "recurrent":
        dims = _onednn_rnn_dims(func, args, kwargs)
        flops = rnn_flops(dims, "backward" in name) if dims else 0.0
    elif op_class is None:
        op_class = "elementwise"
        source = target = None
        if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            source, target = args[1].dtype, args[0].dtype
        elif name == "_to_copy" and outputs and inputs:
            source, target = inputs[0].dtype, outputs[0].dtype
        if source is not None and source != target:
            op_class = "cast"
            kernel_family = "narrowing" if target.itemsize < source.itemsize else "widening"
        if name in _FILL_OPS:
            read = 0  # write-only kernels (their "inputs" are shapes or a template)
        elif name == "cat" and args and _cat_copies_per_element(list(args[0]), outputs):
            kernel_family = STRIDED_CAT
        elif name == "_safe_softmax" and inputs and outputs:
            read, written = _safe_softmax_bytes(inputs[0], outputs[0], _arg(func, args, kwargs, "dim", -1))

    if name in _SOFTMAX_OPS and inputs:
        read += _softmax_rereads(name, func, args, kwargs)
    elif name in ("nll_loss_forward", "nll_loss2d_forward") and len(args) > 1 and isinstance(args[1], torch.Tensor):
        # The loss gathers one log-probability per target, not the whole (rows, classes) input.
        read = _tensor_bytes(args[1]) + args[1].numel() * args[0].element_size()
    elif name in ("nll_loss_backward", "nll_loss2d_backward") and len(args) > 1 and isinstance(args[1], torch.Tensor):
        # Handed the forward input for its shape only: it zero-fills the input's gradient and
        # scatters one value per target into it.
        read -= _tensor_bytes(args[1])
    if name in ("embedding", "_embedding_bag") and len(args) > 1 and isinstance(args[1], torch.Tensor):
        # A lookup reads the rows its indices select, not the whole table (H100, 60,488 tokens of a
        # 32,000 x 256 fp32 table: 41 us, the rows' 124 MB read and written; the table is 33 MB).
        weight, indices = args[0], args[1]
        read = _tensor_bytes(indices) + indices.numel() * weight.shape[-1] * weight.element_size()
    if op_class == "pool" and name.endswith("_backward") and len(args) > 1:
        # A pooling backward is handed its forward input for the shape only: the kernel reads the
        # output gradient (and a max's indices) and writes the input's gradient.
        inputs = [t for t in inputs if t is not args[1]]
    if op_class in _ELEMENT_BOUND and kernel_family != "depthwise_cudnn":
        read = sum(_tensor_bytes(t, 4) for t in inputs if t.is_floating_point())
        read += sum(_tensor_bytes(t) for t in inputs if not t.is_floating_point())
        written = sum(_tensor_bytes(t, 4 if t.is_floating_point() else 1) for t in outputs)
    kernels = _KERNELS.get(name, 1)
    if name in ("native_group_norm", "native_group_norm_backward"):
        kernels = _group_norm_kernels(func, args, kwargs)
    if kernel_family == grouped_gemm.KERNEL and gemm is not None:
        kernels = grouped_gemm.launches(dtype_key, gemm)
    misaligned = False
    alignment = 0
    aux = 0.0
    if gemm is not None and dtype_key not in ("fp32", "fp64"):
        per_16_bytes = max(1, 16 // dtype.itemsize)
        alignment = _gemm_alignment(name, args, outputs, per_16_bytes)
        misaligned = alignment < per_16_bytes
    if name == "convolution_backward" and len(args) > 10 and args[10][2]:
        aux = float(_tensor_bytes(args[0]))  # grad_output read once more for the bias gradient
        kernels += 1
    elif name == "convolution" and outputs and isinstance(_arg(func, args, kwargs, "bias", None), torch.Tensor):
        # cuDNN convolves without the bias; PyTorch then adds it in place, one more pass over the output.
        aux = 2.0 * _tensor_bytes(outputs[0])
        kernels += 1
    return OpCost(op_class, flops, float(read + written), kernels, dtype_key, gemm, causal,
                  "backward" in name, misaligned, alignment, aux, dropout, gemms, layout, kernel_family, dims,
                  pass_bytes, large_fresh, passes)
