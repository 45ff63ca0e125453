"""CUDA's autocast policy, replayed on CPU so that a CPU trace runs what a GPU would run.

A CPU-only PyTorch cannot fake CUDA tensors through a backward pass, so the tracer runs the step
on CPU fake tensors as a proxy. CPU autocast casts fewer ops than CUDA autocast: on CPU,
``layer_norm``, ``softmax``, ``pow``, ``sum`` ... keep their bf16 input, while CUDA runs them in
fp32, adding casts and fp32 traffic that a GPU prediction must see. Inside :func:`cuda_autocast_on_cpu`
the AutocastCPU dispatch key gets CUDA's policy for those ops (kernels registered with
``torch.library`` and removed on exit, which restores CPU's own kernels).

The op lists are CUDA's, from ``aten/src/ATen/autocast_mode.h`` (``AT_FORALL_FP32``,
``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_PROMOTE``) of PyTorch 2.14, the union of
what recent versions list. The policy in force (:func:`active_policy`) keeps only the ops the
installed PyTorch registers a CUDA autocast kernel for -- its dispatcher says so, GPU or not --
so an op a version does not cast (``rms_norm`` before 2.12) is not cast in its traces either.
``tests/test_cuda_autocast.py`` checks the policy in force against the installed header.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

# CUDA: run in fp32 (floating, non-double inputs cast to float32).
CUDA_FP32_OPS: tuple[str, ...] = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)

# CUDA: keep the input but compute and return fp32 (``dtype=torch.float32`` when not given).
CUDA_FP32_SET_OPT_DTYPE_OPS: tuple[str, ...] = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList",
    # named-tensor overloads: CUDA autocast casts them in some versions (2.11), not in others
    "prod.dim_Dimname", "softmax.Dimname", "log_softmax.Dimname", "cumprod.dimname", "cumsum.dimname",
    "sum.dim_DimnameList",
)

# CUDA casts these to the autocast dtype but CPU autocast does not.
CUDA_ONLY_LOWER_PRECISION_OPS: tuple[str, ...] = (
    "addmv", "addr", "einsum", "mv", "chain_matmul", "linalg_multi_dot", "convolution",
    "_convolution", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
)

# CUDA: run in the widest floating type among the inputs (fp32 if any is fp32), as CPU autocast
# does not: spectral_norm's ``vdot(u, mv(W, v))`` meets an fp32 vector and CUDA's bf16 ``mv``.
CUDA_PROMOTE_OPS: tuple[str, ...] = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put", "tensordot",
    "scatter_add",
)

# CPU autocast casts these to fp32, or promotes their inputs to the widest type (``cat``, ``stack``,
# ``index_copy``), but CUDA autocast has no kernel for them: on a GPU they run on their inputs as
# they come (or decompose into ops CUDA does cast, e.g. cross_entropy_loss -> log_softmax(dtype=
# float32) + nll_loss). Replayed as CPU autocast applies them, a CPU proxy would record casts no GPU
# runs, and stop where CPU autocast refuses a mix of fp16 and bf16 that a GPU's ``cat`` takes
# (a cuDNN LSTM's fp16 output beside bf16 activations). CPU autocast's lower-precision ops without a
# CUDA kernel (``conv2d.padding``, ``_addmm_activation``) stay: they decompose into ops CUDA casts alike.
CPU_ONLY_AUTOCAST_OPS: tuple[str, ...] = (
    "cross_entropy_loss", "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d",
    "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "max_unpool2d", "max_unpool3d",
    "fractional_max_pool2d", "fractional_max_pool3d", "cat", "stack", "index_copy",
    "ctc_loss.IntList", "ctc_loss.Tensor", "multilabel_margin_loss_forward", "fake_quantize_per_tensor_affine",
    "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft",
    "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft", "stft", "stft.center",
    "polar", "view_as_complex", "quantile", "quantile.scalar", "nanquantile", "nanquantile.scalar", "trace",
    "inverse", "pinverse", "svd", "geqrf", "orgqr", "ormqr", "cholesky_inverse", "cholesky_solve", "lu_solve",
    "triangular_solve", "_lu_with_info", "linalg_cholesky", "linalg_cholesky_ex", "linalg_cond",
    "linalg_cond.p_str", "linalg_eig", "linalg_eigh", "linalg_eigvals", "linalg_eigvalsh",
    "linalg_householder_product", "linalg_inv", "linalg_inv_ex", "linalg_lstsq", "linalg_matrix_rank",
    "linalg_matrix_rank.atol_rtol_float", "linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.tol_tensor",
    "linalg_qr", "linalg_solve", "linalg_svd", "linalg_svdvals", "linalg_tensorinv", "linalg_tensorsolve",
)

_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _cuda_autocast_kernel(qualified: str) -> bool:
    """Whether the installed PyTorch registers a CUDA autocast kernel for ``name[.overload]``."""
    name, _, overload = qualified.partition(".")
    schema = f"aten::{name}" + (f".{overload}" if overload else "")
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(schema, "AutocastCUDA"))
    except RuntimeError:  # the op does not exist in this version
        return False


def active_policy() -> dict[str, tuple[str, ...]]:
    """The op lists as the installed PyTorch's CUDA autocast applies them (see module doc).

    A build without any CUDA autocast kernel (CPU-only PyTorch) cannot say: the full lists stand.
    """
    lists = {"fp32": CUDA_FP32_OPS, "fp32_set_opt_dtype": CUDA_FP32_SET_OPT_DTYPE_OPS,
             "lower_precision": CUDA_ONLY_LOWER_PRECISION_OPS, "promote": CUDA_PROMOTE_OPS,
             "cpu_only": CPU_ONLY_AUTOCAST_OPS}
    if not _cuda_autocast_kernel("mm"):
        return lists
    policy = {key: tuple(op for op in ops if _cuda_autocast_kernel(op)) for key, ops in lists.items()
              if key != "cpu_only"}
    policy["cpu_only"] = tuple(op for op in CPU_ONLY_AUTOCAST_OPS if not _cuda_autocast_kernel(op))
    return policy


def casts_to_fp32(op: str) -> bool:
    """Whether CUDA autocast runs ``op`` in fp32 with the installed PyTorch."""
    return op in active_policy()["fp32"]


def _overload(qualified: str) -> torch._ops.OpOverload | None:
    name, _, overload = qualified.partition(".")
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def _eligible(value: Any) -> bool:
    # autocast's is_eligible: a floating tensor that is not double.
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64


def _cast_all(values: Any, dtype: torch.dtype) -> Any:
    if _eligible(values) and values.dtype != dtype:
        return values.to(dtype)
    if isinstance(values, (list, tuple)):
        return type(values)(_cast_all(v, dtype) for v in values)
    return values


def _cast_kernel(op: torch._ops.OpOverload, to_dtype: Callable[[], torch.dtype]) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
            dtype = to_dtype()
            return op(*_cast_all(args, dtype), **{k: _cast_all(v, dtype) for k, v in kwargs.items()})

    return kernel


def _set_opt_dtype_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    dtype_index = next(i for i, a in enumerate(op._schema.arguments) if a.name == "dtype")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
            if _eligible(args[0]):
                if len(args) > dtype_index:
                    if args[dtype_index] is None:
                        args = (*args[:dtype_index], torch.float32, *args[dtype_index + 1 :])
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            return op(*args, **kwargs)

    return kernel


def _promote_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
            inputs = [t for t in tree_leaves((args, kwargs)) if _eligible(t)]
            if not inputs:
                return op(*args, **kwargs)
            dtype = torch.float32 if any(t.dtype == torch.float32 for t in inputs) else _to_lower_precision()
            return op(*_cast_all(args, dtype), **{k: _cast_all(v, dtype) for k, v in kwargs.items()})

    return kernel


def _passthrough_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        # Below AutocastCPU, but the ops this one decomposes into are autocast again.
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
            return op(*args, **kwargs)

    return kernel


def _to_float32() -> torch.dtype:
    return torch.float32


def _to_lower_precision() -> torch.dtype:
    return torch.get_autocast_dtype("cpu")


# Each policy: the list it covers and the kernel it registers for one of its ops.
_POLICIES: tuple[tuple[str, Callable[[torch._ops.OpOverload], Callable[..., Any]]], ...] = (
    ("fp32", lambda op: _cast_kernel(op, _to_float32)),
    ("fp32_set_opt_dtype", _set_opt_dtype_kernel),
    ("lower_precision", lambda op: _cast_kernel(op, _to_lower_precision)),
    ("promote", _promote_kernel),
    ("cpu_only", _passthrough_kernel),
)


@contextlib.contextmanager
def cuda_autocast_on_cpu() -> Iterator[list[str]]:
    """Give CPU autocast CUDA's cast policy until exit; yields the names of the overridden ops."""
    library = torch.library.Library("aten", "IMPL")
    overridden: list[str] = []
    policy = active_policy()
    try:
        for key, make_kernel in _POLICIES:
            for qualified in policy[key]:
                op = _overload(qualified)
                if op is not None:  # an op this PyTorch does not have needs no policy
                    library.impl(qualified, make_kernel(op), "AutocastCPU")
                    overridden.append(qualified)
        yield overridden
    finally:
        library._destroy()


@contextlib.contextmanager
def cuda_regions_on_cpu() -> Iterator[None]:
    """Until exit, an autocast region the step opens for CUDA (``torch.autocast("cuda", ...)``,
    ``torch.cuda.amp.autocast``) opens on the CPU that stands in for the GPU, in CUDA's default
    dtype where it names none: an fp32 island (``enabled=False``) stays fp32, an fp16 region fp16.
    Without it the region is a no-op on a machine without CUDA, and its ops take the precision's
    autocast."""
    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__init__

    def __init__(self: Any, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if device_type == "cuda":
            device_type, dtype = "cpu", dtype if dtype is not None else torch.get_autocast_dtype("cuda")
        original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    autocast.__init__ = __init__  # type: ignore[method-assign]
    try:
        yield
    finally:
        autocast.__init__ = original  # type: ignore[method-assign]
