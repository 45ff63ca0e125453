"""Trace one real training step on fake tensors: every aten op, with shapes, dtypes and phase.

The user's model runs its real ``forward``, loss, ``backward`` and ``optimizer.step()``, but on
fake tensors (``FakeTensorMode``): parameters, buffers, gradients and optimizer state are fake
stand-ins with the right shapes, dtypes and device, so no real memory is touched and nothing of
the user's changes. A ``TorchDispatchMode`` records each aten op below autograd, which is where
autocast's casts, the backward pass and the optimizer's kernels are all visible.

Where the target device cannot be faked through a backward pass (CUDA on a machine without a
GPU), the step is traced on CPU as a proxy, with these mappings so the trace shows what CUDA
would run:

* autocast: CPU autocast gets CUDA's cast policy (``cuda_autocast.py``): layer norm, softmax,
  pow, sums ... run in fp32 as on CUDA;
* optimizer: CUDA's default implementation is ``foreach`` (a few multi-tensor launches), CPU's is
  a per-parameter loop, so a copied optimizer with ``foreach=None`` gets ``foreach=True``;
* attention: CUDA's fused SDPA kernels apply dropout inside the kernel, CPU falls back to the
  unfused math path when dropout is on, so SDPA is traced with dropout off (fused kernel kept);
* batch norm: CPU's ``native_batch_norm`` stands for cuDNN's batch norm (same class and bytes);
  batch and layer norm run on meta tensors (``meta_dispatch.py``), so their saved statistics have
  CUDA's dtype (fp32 for half inputs);
* dropout: CUDA runs one fused ``native_dropout`` kernel, CPU three, so dropout is traced as
  ``native_dropout``;
* GradScaler: traced as ``GradScaler("cpu")``, whose kernels match CUDA's, with the host sync of
  ``found_inf.item()`` recorded as a sync point.

On every device, Hugging Face's attention-mask shortcuts, which read tensor values, are answered
from the real batch (``mask_checks.py``). On the CPU proxy the batch's integer, boolean and
small floating-point tensors keep their values (and the model's integer and boolean buffers), a
router's choice and a one-element random draw get typical ones, and sizes the model's own numbers decide are taken at their largest
(``known_values.py``), so steps that read them (CTC losses, SpecAugment, experts run one by one,
detectors) trace; mixture-of-experts grouped GEMMs are recorded as CUDA runs them
(``grouped_gemm.py``); a submodule converted inside the step keeps its converted fake
parameters (``module_conversion.py``).

>>> import torch
>>> trace = trace_step(torch.nn.Linear(8, 4), (torch.randn(2, 8),), lambda m, b: m(*b).sum())
>>> sorted({op.phase for op in trace.ops})
['backward', 'forward', 'optimizer']
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import grouped_gemm
from .attention import run_sdpa
from .known_values import (ValuedFakeTensorMode, checks_the_model, is_nms, known_number, permutes_at_random,
                           reads_as_median, sized_by_values, spread_evenly, valued_fake)
from .batches import map_batch
from .costs import OpCost, describe_op, is_known, op_kind, tensors_in
from .cuda_autocast import casts_to_fp32, cuda_autocast_on_cpu, cuda_regions_on_cpu
from .flex_attention import flex_attention_recorded
from .fused import run_rms_norm
from .garbage_collection import collect_new_objects_only
from .clipping import ClippedGradients, clipping_of, foreach_for_fake_tensors
from .live_memory import LiveBytes
from .manual_step import ManualOptimization, ManualStep
from .mask_checks import real_mask_checks
from .meta_dispatch import MetaShortcut, empty_fake
from .module_conversion import conversions_keep_fake_parameters
from .module_state import module_state_kept
from .optimizer_precision import eps_underflow
from .packed_sequences import failed_over_packed_sequences, is_packing, run_packing
from .precision import PrecisionSpec, as_precision
from .recurrent import is_rnn, run_rnn
from .repeated_blocks import trace_repeated
from .rng import rng_preserved
from .value_reads import STAND_IN, numpy_reads

StepFn = Callable[[torch.nn.Module, Any], Any]
OptimizerArg = (torch.optim.Optimizer | Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer] | ManualOptimization
                | ClippedGradients | None)

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
_PRIM_DEVICE = torch.ops.prim.device.default
_LOCAL_SCALAR = torch.ops.aten._local_scalar_dense.default
_UNSCALE = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default
# One-element random draws, which Python may read (LayerDrop: ``if torch.rand([]) < p: skip``).
_RANDOM_DRAWS = frozenset(getattr(torch.ops.aten.rand, name) for name in ("default", "generator")
                          if hasattr(torch.ops.aten.rand, name))
_RANDPERM = frozenset(getattr(torch.ops.aten.randperm, name) for name in ("default", "generator")
                      if hasattr(torch.ops.aten.randperm, name))
_UNIFORM = torch.ops.aten.uniform_.default
_TOPK = torch.ops.aten.topk.default
_MAX_DIM = torch.ops.aten.max.dim
_ONE_PICK = (torch.ops.aten.argmax.default, _MAX_DIM)


class TraceError(RuntimeError):
    """The step could not be traced; the message names the op and module that stopped it."""


class TraceWarning(UserWarning):
    """The trace holds ops the cost model has no rule for (priced by the bytes they move)."""


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """``FakeTensorMode`` logs a whole traceback at ERROR level when an op's meta kernel raises;
    the trace turns that failure into one :class:`TraceError` naming the op, which the callback
    shows as its one warning."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One recorded op.

    ``name`` is the aten overload (``"aten.mm.default"``) or a ``ptp.*`` pseudo-op for host work
    (``ptp.sync``: the host waits for the device; ``ptp.zero_grad``; ``ptp.optimizer_python``).
    ``views`` counts the metadata-only ops (views, detach, device queries) dispatched since the
    previous record and ``module_calls`` the ``nn.Module`` calls: both are host work.
    ``params`` is the number of parameter tensors a per-parameter host loop walks.
    """

    name: str
    phase: str
    module: str
    cost: OpCost
    in_shapes: tuple[tuple[int, ...], ...] = ()
    in_dtypes: tuple[str, ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()
    out_dtypes: tuple[str, ...] = ()
    views: int = 0
    module_calls: int = 0
    params: int = 0
    replay: Any = field(default=None, repr=False, compare=False)

    @property
    def out_bytes(self) -> int:
        """Bytes of the op's recorded outputs."""
        return sum(math.prod(shape) * _itemsize(dtype) for shape, dtype in zip(self.out_shapes, self.out_dtypes))


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor argument of a recorded op, enough to rebuild one for timing it in isolation."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def _replay_spec(args: tuple, kwargs: dict) -> tuple[Any, dict]:
    def spec(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return TensorSpec(tuple(value.shape), value.dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(spec(v) for v in value)
        if isinstance(value, torch.device):
            return None  # filled in with the device the op is replayed on
        return value

    return spec(args), {k: spec(v) for k, v in kwargs.items() if k != "device"}


@dataclass
class Trace:
    """The ops of one training step and what they were traced under."""

    ops: list[OpRecord]
    precision: PrecisionSpec
    trace_device: str
    target_type: str
    param_count: int
    param_tensors: int
    trainable_tensors: int
    param_bytes: int
    trace_s: float
    mappings: tuple[str, ...] = ()
    optimizer_name: str = ""
    notes: list[str] = field(default_factory=list)
    # Bytes of the optimizer's state after a step (Adam's two moments, SGD's momentum buffers...):
    # with the parameters, what a checkpoint holds.
    optimizer_state_bytes: int = 0
    # Ops the cost model has no rule for, with their count: priced by their bytes, and warned about.
    unknown_ops: dict[str, int] = field(default_factory=dict)
    # Settings this step cannot train with (an optimizer eps its parameters' dtype rounds to 0).
    hazards: tuple[str, ...] = ()
    # Ops sized by values the trace does not have, taken at their largest (``known_values.py``),
    # with their count: warned about.
    taken_largest: dict[str, int] = field(default_factory=dict)
    # How often the step read floating-point values its model computed (``.item()``, ``.numpy()``),
    # each given ``STAND_IN`` (``value_reads.py``).
    numbers_read: int = 0
    # The most bytes the step's new tensors (activations, gradients, the optimizer's temporaries)
    # held at once (``live_memory.py``); the parameters and optimizer state come on top.
    peak_new_bytes: int = 0

    @property
    def unknown_ops_note(self) -> str | None:
        """One sentence on the ops the cost model has no rule for, or ``None`` when it has one for all."""
        if not self.unknown_ops:
            return None
        count = sum(self.unknown_ops.values())
        listed = ", ".join(f"{name} x{n}" for name, n in sorted(self.unknown_ops.items(), key=lambda kv: -kv[1]))
        return (f"the cost model has no rule for {len(self.unknown_ops)} op(s) making {count} of {len(self.ops)} "
                f"recorded ops ({100.0 * count / max(1, len(self.ops)):.1f}%), priced by the bytes they move: {listed}")

    @property
    def numbers_read_note(self) -> str | None:
        """One sentence on the numbers the step read from its model's values, or ``None``."""
        if not self.numbers_read:
            return None
        sync = ", waiting for the work queued on the GPU" if self.target_type == "cuda" else ""
        return (f"the step reads values its model computed {self.numbers_read} time(s) (`.item()`, `.numpy()`){sync}: "
                f"traced as {STAND_IN}")

    @property
    def taken_largest_note(self) -> str | None:
        """One sentence on the ops whose sizes were taken at their largest, or ``None``."""
        if not self.taken_largest:
            return None
        listed = ", ".join(f"{name} x{n}" for name, n in sorted(self.taken_largest.items()))
        return (f"sizes decided by the model's own numbers taken at their largest (every element kept): {listed}; "
                "a step that keeps fewer runs faster than predicted")

    @property
    def proxy(self) -> bool:
        """True when the step was traced on CPU standing in for another device."""
        return self.trace_device != self.target_type


_SHAPE_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}
_DTYPE_OF_NAME = {name: dtype for dtype, name in _SHAPE_DTYPE.items()}


def _itemsize(name: str) -> int:
    """Bytes per element of a dtype as :func:`_meta_of` names it (``"fp32"``, ``"int64"``, ``"bool"``)."""
    dtype = _DTYPE_OF_NAME.get(name) or getattr(torch, name, None)
    return dtype.itemsize if isinstance(dtype, torch.dtype) else 4


def _meta_of(tensors: list[torch.Tensor]) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    return (tuple(tuple(t.shape) for t in tensors),
            tuple(_SHAPE_DTYPE.get(t.dtype, str(t.dtype).removeprefix("torch.")) for t in tensors))


@functools.lru_cache(maxsize=None)
def _in_place_list_op(func: Any) -> bool:
    """A multi-tensor op that updates its lists in place and returns nothing (``_foreach_mul_``,
    ``_fused_adamw_``, the scaler's unscale): it changes no tensor's shape, dtype or layout."""
    name = func.overloadpacket.__name__
    return name.startswith(("_foreach_", "_fused_", "_amp_foreach_")) and name.endswith("_") and not func._schema.returns


def _skips_dispatch(func: Any, args: tuple) -> bool:
    """Whether an op can be recorded without running it on the fake tensors: an in-place list op
    over tensors that carry no value. Running it would dispatch every tensor of the lists one by
    one (most of an optimizer step's trace time: 400 parameters, 0.5 ms each); only fake scalars
    holding a known value (a non-capturable optimizer's step counts) must be updated."""
    if not _in_place_list_op(func):
        return False
    for arg in args:
        for t in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(t, FakeTensor) and t.constant is not None:
                return False
    return True


class _Recorder(TorchDispatchMode):
    """Records kernel-launching ops; counts metadata ops cheaply without recording them."""

    def __init__(self, spec: PrecisionSpec, module_of: Callable[[], str], *, cuda_target: bool = True) -> None:
        super().__init__()
        self.spec = spec
        self.module_of = module_of
        self.cuda_target = cuda_target
        self.meta = MetaShortcut(cuda_target)
        self.ops: list[OpRecord] = []
        self.phase = "forward"
        self.active = True
        self.views = 0
        self.module_calls = 0
        self.failed_op: str | None = None
        self.unknown: dict[str, int] = {}  # ops the cost model has no rule for, and how often
        self.numbers_read = 0  # numbers the step read from its model's values (stand-ins given)
        self.checks_read = 0  # answers to checks of the model's numbers read (known_values.checks_the_model)
        self.live = LiveBytes()  # what the step's new tensors hold at once
        self.draws = 0  # randperm draws given values (known_values.permutes_at_random)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        # The backward's ops come here from the autograd engine with the trace's torch function mode
        # (``_CudaKernels``) still on its stack, so each tensor method the recording and the fake
        # mode call (``numel()``, ``stride()``...) would run its Python handler: about 56,000 calls in
        # a MaxViT step. The forward's ops come through that mode, which is off its stack by then.
        with torch._C.DisableTorchFunction():
            return self._dispatch(func, args, kwargs or {})

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if func is _PRIM_DEVICE and args and isinstance(args[0], FakeTensor):
            # A fake tensor's device is answered in Python (C++ asks thousands of times a step:
            # autograd's checks): answer here as FakeTensorMode would, without its dispatch. A
            # real run reads a field, so this is no host work of the step either.
            return args[0].fake_device
        numbers_read, checks_read = self.numbers_read, self.checks_read
        if func is _UNSCALE and isinstance(args[1], FakeTensor):
            # The flag this unscale writes (GradScaler's found_inf), marked before the list op is
            # skipped: on a GPU its tensors carry no values, so it never runs (``_skips_dispatch``).
            args[1]._ptp_found_inf = True
        try:
            out = None if _skips_dispatch(func, args) else self._run(func, args, kwargs)
        except Exception:
            if self.failed_op is None:
                self.failed_op = f"{func} (in module {self.module_of() or '<top level>'}, {self.phase})"
            raise
        if not self.active:
            return out
        kind = op_kind(func)
        if kind == "view":
            self.views += 1
            return out
        if kind == "free":
            return out
        cost = describe_op(func, args, kwargs, out, matmul_tf32=self.spec.matmul_tf32,
                           conv_tf32=self.spec.conv_tf32, phase=self.phase)
        if not is_known(func):
            self.unknown[str(func)] = self.unknown.get(str(func), 0) + 1
        if cost.op_class == "gemm" and cost.kernel == grouped_gemm.KERNEL and not grouped_gemm.fast_path(cost.dtype):
            self.pseudo("ptp.sync")  # the fallback copies the group offsets to the host first
        self.record(str(func), cost, (args, kwargs), out, _replay_spec(args, kwargs) if cost.kernels else None)
        if self.cuda_target and is_nms(func):
            self.pseudo("ptp.sync")  # torchvision's CUDA kernel copies its overlap mask to the host
        elif self.cuda_target and (self.numbers_read > numbers_read or self.checks_read > checks_read):
            self.wait_for_device()  # ``_run`` read a number of the model's, or the answer to a check of them
        return out

    def _run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if func is _LOCAL_SCALAR and isinstance(args[0], FakeTensor):
            if getattr(args[0], "_ptp_found_inf", False):
                # A GradScaler in the step's own code asks whether the gradients overflowed: in a
                # healthy step they did not (read 1.0, the scaler would skip the optimizer step).
                self.checks_read += 1
                return 0.0
            if args[0].constant is not None:
                self.checks_read += checks_the_model(args[0])
                with unset_fake_temporarily():  # what the fake mode returns, without its dispatch
                    return args[0].constant.item()
            if args[0].is_floating_point():
                # A number the model computed, read for the logs or a check (``loss.item()``): a
                # fake tensor has none, so the step goes on with a stand-in (``value_reads.py``).
                self.numbers_read += 1
                return STAND_IN
        out = self.meta.run(func, args, kwargs)
        if out is NotImplemented and grouped_gemm.is_grouped_mm(func):
            out = grouped_gemm.fake_output(func, args, kwargs)
        if out is NotImplemented:
            out = sized_by_values(func, args, kwargs)
        out = func(*args, **kwargs) if out is NotImplemented else out
        if func in _RANDOM_DRAWS:
            reads_as_median(out)
        elif func in _RANDPERM:
            self.draws += 1
            permutes_at_random(out, self.draws)
        elif func is _UNIFORM:
            reads_as_median(out, args[1] if len(args) > 1 else kwargs.get("from", 0.0),
                            args[2] if len(args) > 2 else kwargs.get("to", 1.0))
        elif func is _TOPK and isinstance(args[0], FakeTensor) and args[0].constant is None:
            dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
            spread_evenly(out[1], dim, args[0].shape[dim] if args[0].dim() else 1)
        elif func in _ONE_PICK and isinstance(args[0], FakeTensor) and args[0].constant is None:
            # top-1 routers (Switch Transformers) pick with argmax; keepdim keeps a size-1 dim
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            if dim is not None and args[0].dim():
                spread_evenly(out[1] if func is _MAX_DIM else out, dim if keepdim else None, args[0].shape[dim])
        return out

    def record(self, name: str, cost: OpCost, inputs: Any, outputs: Any, replay: Any = None) -> None:
        """Append one op record, charging it the metadata ops and module calls since the last one."""
        ins, outs = tensors_in(inputs), tensors_in(outputs)
        in_shapes, in_dtypes = _meta_of(ins)
        out_shapes, out_dtypes = _meta_of(outs)
        self.ops.append(OpRecord(name, self.phase, self.module_of(), cost, in_shapes, in_dtypes,
                                 out_shapes, out_dtypes, self.views, self.module_calls, replay=replay))
        self.live.track(ins, outs)
        self.views = 0
        self.module_calls = 0

    def read_into_numpy(self) -> None:
        """The step handed values its model computed to NumPy (``value_reads.numpy_reads``)."""
        self.numbers_read += 1
        if self.cuda_target and self.active:
            self.wait_for_device()

    def wait_for_device(self) -> None:
        """A value the model computed, copied from the GPU once the work queued before it is done:
        a host sync, unless no kernel was queued since the last one (``.tolist()`` of a GPU tensor
        reads every element after one copy)."""
        for op in reversed(self.ops):
            if op.name == "ptp.sync":
                return
            if op.cost.kernels > 0:
                break
        self.pseudo("ptp.sync")

    def pseudo(self, name: str, params: int = 0) -> None:
        """Record host work that no aten op shows (a sync, a per-parameter Python loop)."""
        self.ops.append(OpRecord(name, self.phase, "", OpCost("host", 0.0, 0.0, 0, "fp32"),
                                 views=self.views, module_calls=self.module_calls, params=params))
        self.views = 0
        self.module_calls = 0

    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.active = False
        try:
            yield
        finally:
            self.active = True


class _ModulePath:
    """The innermost module whose forward is running (``"Model.layer.0.attn"``), from global
    module hooks, and a count of module calls (host work) for the recorder.

    Backward ops are not attributed to modules: per-module backward hooks (as
    ``torch.utils.module_tracker`` adds) cost more trace time than the attribution is worth.
    """

    def __init__(self, recorder_ref: list[_Recorder], model: torch.nn.Module | None = None) -> None:
        self.recorder_ref = recorder_ref
        root = type(model).__name__ if model is not None else ""
        self.names: dict[int, str] = {}
        if model is not None:
            for name, module in model.named_modules():
                self.names.setdefault(id(module), f"{root}.{name}" if name else root)
        self.stack: list[str] = []
        self._handles: list[Any] = []
        self._warnings: warnings.catch_warnings | None = None

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def __enter__(self) -> _ModulePath:
        def enter(module: torch.nn.Module, args: Any) -> None:
            self.stack.append(self.names.get(id(module)) or type(module).__name__)
            if self.recorder_ref:
                self.recorder_ref[0].module_calls += 1

        def leave(module: torch.nn.Module, args: Any, output: Any) -> None:
            if self.stack:
                self.stack.pop()

        hooks = torch.nn.modules.module
        self._handles = [hooks.register_module_forward_pre_hook(enter),
                         hooks.register_module_forward_hook(leave, always_call=True)]
        # A torch.compile'd module warns the user about global hooks each time it is called while
        # these are registered: they are the trace's own, gone when it ends.
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._warnings is not None:
            self._warnings.__exit__(*exc)
            self._warnings = None
        for handle in self._handles:
            handle.remove()
        self.stack.clear()


class _CudaKernels(TorchFunctionMode):
    """Records attention, recurrent layers and dropout as a CUDA GPU runs them (see module doc).

    Active for every CUDA target, on the CPU proxy and on a local GPU alike, so that both record
    the same kernels: SDPA as one fused kernel (``attention.py``), ``nn.LSTM``/``GRU``/``RNN`` as one
    cuDNN call (``recurrent.py``), ``F.rms_norm`` as its fused kernel (``fused.py``). On the CPU proxy dropout is traced as CUDA's one fused
    ``native_dropout`` kernel where CPU runs three (``bernoulli_``, ``div_``, ``mul``).
    """

    def __init__(self, recorder: _Recorder, proxy: bool) -> None:
        super().__init__()
        self.recorder = recorder
        self.proxy = proxy
        self._registered = contextlib.ExitStack()

    def __enter__(self) -> _CudaKernels:
        library = _nested_kernels(self.recorder, self.proxy)
        self._registered.callback(library._destroy)
        if self.proxy and self.recorder.spec.autocast_dtype is not None:
            # For the whole step, not only the forward: a checkpointed block (torch.utils.checkpoint)
            # runs its forward again in the backward, under the autocast state it saved, and must
            # cast as it did the first time. Outside autocast the policy does nothing.
            self._registered.enter_context(cuda_autocast_on_cpu())
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._registered.close()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return run_sdpa(func, args, kwargs, self.recorder)
        if is_rnn(func):
            return run_rnn(func, args, kwargs, self.recorder, self.recorder.spec.conv_tf32)
        if is_packing(func):
            return run_packing(func, args, kwargs)
        if func is torch.nn.functional.rms_norm or func is torch.rms_norm:
            return run_rms_norm(func, args, kwargs, self.recorder, casts_to_fp32("rms_norm"))
        if func is torch.nn.functional.ctc_loss or func is torch.ctc_loss:
            # Lengths given as Python lists: ATen's composite builds a tensor from them with the
            # loss's options, which a fake tensor cannot hold. As host tensors they keep their
            # values, which size the loss's trellis as tensor lengths do.
            args = tuple(_as_lengths(a) if i in (2, 3) else a for i, a in enumerate(args))
            kwargs = {k: _as_lengths(v) if k in ("input_lengths", "target_lengths") else v for k, v in kwargs.items()}
        if func is torch.Tensor.__format__ and known_number(args[0]) is not None:
            # ``f"expert_{idx}"`` of a one-element tensor: a real tensor formats as its number
            return format(known_number(args[0]), *args[1:])
        if self.proxy and func is torch.nn.functional.dropout:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            training = args[2] if len(args) > 2 else kwargs.get("training", True)
            fused = _fused_dropout(args[0], p, training)
            if fused is not None:
                return fused
        return func(*args, **kwargs)


def _as_lengths(value: Any) -> Any:
    """A CTC loss's lengths given as a Python list or tuple, as a host ``int64`` tensor."""
    return torch.tensor(value, dtype=torch.long) if isinstance(value, (list, tuple)) else value


def _fused_dropout(input: Any, p: float, train: bool) -> torch.Tensor | None:
    """A training dropout as CUDA runs it, one fused ``native_dropout`` kernel (a CPU runs three:
    ``bernoulli_``, ``div_``, ``mul``); ``None`` where there is nothing to drop at random."""
    if train and 0.0 < p < 1.0 and isinstance(input, torch.Tensor):
        return torch.native_dropout(input, p, True)[0]
    return None


def _nested_kernels(recorder: _Recorder, proxy: bool) -> torch.library.Library:
    """The same records for the calls :class:`_CudaKernels` does not see: a torch function mode is
    off while it handles a call, so what a Python-level torch function calls inside (as
    ``nn.MultiheadAttention``'s ``F.multi_head_attention_forward`` calls SDPA and dropout) reaches
    the aten ops directly. Those ops get kernels that record them the same way until exit.

    Without them ``nn.TransformerEncoderLayer`` (dropout 0.1) was traced on the CPU proxy as CPU's
    unfused attention (two batched GEMMs, softmax, three dropout kernels) and torchvision's ViT as
    CPU's flash kernel, where the GPU runs one fused kernel."""
    library = torch.library.Library("aten", "IMPL")
    impl = functools.partial(_quiet_impl, library)

    def unfused(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                is_causal: bool = False, *, scale: float | None = None, enable_gqa: bool = False) -> Any:
        return torch.ops.aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
                                                                  None, scale=scale, enable_gqa=enable_gqa)[0]

    def attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                  is_causal: bool = False, *, scale: float | None = None, enable_gqa: bool = False) -> Any:
        return run_sdpa(unfused, (query, key, value, attn_mask, dropout_p, is_causal),
                        {"scale": scale, "enable_gqa": enable_gqa}, recorder)

    impl("scaled_dot_product_attention", attention)
    if proxy:
        def dropout(input: Any, p: float, train: bool) -> Any:
            fused = _fused_dropout(input, p, train)
            if fused is not None:
                return fused
            return input * 0.0 if train and p == 1.0 else input

        impl("dropout", dropout)
    return library


def _quiet_impl(library: torch.library.Library, op: str, kernel: Callable[..., Any]) -> None:
    # Some PyTorch versions (2.11) register a CompositeImplicitAutograd kernel of their own and warn
    # that ours overrides it; it does, only until the trace ends (``_destroy`` puts theirs back).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        library.impl(op, kernel, "CompositeImplicitAutograd")


def _float_dtype_for(t: torch.Tensor, spec: PrecisionSpec) -> torch.dtype:
    if t.is_floating_point() and spec.param_dtype != torch.float32:
        return spec.param_dtype
    return t.dtype


def _fake_state(model: torch.nn.Module, spec: PrecisionSpec, device: torch.device,
                mode: FakeTensorMode) -> tuple[dict[str, torch.Tensor], dict[int, torch.Tensor]]:
    """Fake parameters and buffers by name; tied parameters share one fake (keyed by id).

    On the CPU proxy an integer or boolean buffer keeps its values, as the batch's tensors do: a
    step may read a counter it keeps (a MoCo queue's pointer: ``ptr = int(self.queue_ptr)``)."""
    by_id: dict[int, torch.Tensor] = {}
    named: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        fake = by_id.get(id(p))
        if fake is None:
            fake = empty_fake(mode, p, _float_dtype_for(p, spec), device).requires_grad_(p.requires_grad)
            by_id[id(p)] = fake
        named[name] = fake
    for name, b in model.named_buffers(remove_duplicate=False):
        fake = by_id.get(id(b))
        if fake is None:
            valued = valued_fake(mode, b) if isinstance(mode, ValuedFakeTensorMode) and not b.is_floating_point() \
                else None
            fake = valued if valued is not None else empty_fake(mode, b, _float_dtype_for(b, spec), device)
            by_id[id(b)] = fake
        named[name] = fake
    return named, by_id


def _fake_batch(batch: Any, spec: PrecisionSpec, device: torch.device, mode: FakeTensorMode) -> Any:
    """The batch with every tensor replaced by a fake one on the trace device.

    Floating-point tensors take the parameter dtype under ``*-true`` precisions, as Lightning's
    precision plugins convert inputs. In a :class:`ValuedFakeTensorMode` (the CPU proxy) integer
    and boolean tensors, and small floating-point ones, keep their values (``known_values.py``).
    A tensor that requires grad keeps requiring it: a step may differentiate with respect to its
    input (a physics-informed loss), and a reentrant ``torch.utils.checkpoint`` block runs its
    backward only when an input requires grad.
    """
    def fake(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        dtype = _float_dtype_for(t, spec)
        valued = valued_fake(mode, t, dtype) if isinstance(mode, ValuedFakeTensorMode) else None
        out = valued if valued is not None else empty_fake(mode, t, dtype, device)
        return out.requires_grad_() if t.requires_grad and out.is_floating_point() else out

    return map_batch(fake, batch)


def _optimizer_ctor_kwargs(cls: type, defaults: Mapping[str, Any]) -> dict[str, Any]:
    import inspect

    try:
        accepted = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in defaults.items() if k in accepted and k != "params"}


def _copy_optimizer(
    optimizer: OptimizerArg,
    model: torch.nn.Module,
    fakes_by_id: dict[int, torch.Tensor],
    cuda_defaults: bool,
) -> tuple[torch.optim.Optimizer, list[str]]:
    """A new optimizer of the user's class and hyperparameters over the fake parameters."""
    notes: list[str] = []
    trainable = [fakes_by_id[id(p)] for p in dict.fromkeys(model.parameters()) if p.requires_grad]
    if optimizer is None:
        optimizer = torch.optim.AdamW(trainable, foreach=True if cuda_defaults else None)
        notes.append("optimizer: AdamW with default hyperparameters")
        return optimizer, notes
    if not isinstance(optimizer, torch.optim.Optimizer):
        built = optimizer(trainable)
        if not isinstance(built, torch.optim.Optimizer):
            raise TypeError(f"optimizer factory returned {type(built).__name__}, expected a torch.optim.Optimizer")
        optimizer = built
        if not cuda_defaults:
            return optimizer, notes
        groups = [dict(g) for g in optimizer.param_groups]
        cls, defaults = type(optimizer), optimizer.defaults
    else:
        cls, defaults = type(optimizer), optimizer.defaults
        groups = []
        for group in optimizer.param_groups:
            params = [fakes_by_id[id(p)] for p in group["params"] if id(p) in fakes_by_id]
            if params:
                groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
        if not groups:
            raise TypeError("the optimizer holds none of the model's parameters; pass the optimizer of this model")
    if cuda_defaults:
        for group in groups:
            # torch turns foreach off itself for a tensor learning rate without capturable=True
            tensor_lr = isinstance(group.get("lr"), torch.Tensor) and not group.get("capturable")
            if "foreach" in group and group.get("foreach") is None and not group.get("fused") and not tensor_lr:
                group["foreach"] = True
                if "foreach=True (CUDA default)" not in notes:
                    notes.append("optimizer: foreach=True (CUDA default)")
    groups = [{k: v if k == "params" else _fake_hyperparameter(v) for k, v in group.items()} for group in groups]
    return cls(groups, **_optimizer_ctor_kwargs(cls, {k: _fake_hyperparameter(v) for k, v in defaults.items()})), notes


def _fake_hyperparameter(value: Any) -> Any:
    """A hyperparameter held as a one-element tensor (``lr=torch.tensor(1e-3)``, for a learning-rate
    schedule under ``torch.compile``) made again inside the fake mode, as a factory of the optimizer
    makes it: a fake tensor that knows its number. The copy's constructor checks it (``0.0 <= lr``),
    which the real tensor, turned fake without it, could not answer."""
    if isinstance(value, tuple):
        return tuple(_fake_hyperparameter(v) for v in value)
    if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor) and value.numel() == 1:
        with unset_fake_temporarily():
            number = value.item()
        return torch.tensor(number, dtype=value.dtype).reshape(value.shape)
    return value


def _check_no_closure(optimizer: torch.optim.Optimizer) -> None:
    """An optimizer whose ``step`` must be given a closure (``torch.optim.LBFGS``) evaluates the model
    again as often as its line search decides from the loss values: one traced step cannot say
    how often."""
    import inspect

    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return
    if closure is not None and closure.default is inspect.Parameter.empty:
        raise TraceError(
            f"{type(optimizer).__name__}.step() needs a closure that runs the model again, as many times as "
            "the optimizer decides from the loss values: one traced step cannot predict that"
        )


def loss_of(output: Any) -> torch.Tensor:
    """The loss tensor in what a step function returned (tensor, dict, or model output)."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping) and "loss" in output:
        return loss_of(output["loss"])
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss_of(loss)
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return loss_of(output[0])
    raise TraceError(
        f"step_fn returned {type(output).__name__}; expected a loss tensor, a dict with 'loss' "
        "or a model output with .loss"
    )


def default_step_fn(model: torch.nn.Module, batch: Any) -> Any:
    """Call the model on the batch (``model(*batch)``, ``model(**batch)`` or ``model(batch)``)."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def resolve_trace_device(target_type: str, trace_on: str = "auto") -> torch.device:
    """Where to trace: the target itself when it exists here, else CPU as a proxy."""
    if trace_on == "cpu" or target_type == "cpu":
        return torch.device("cpu")
    if trace_on not in ("auto", "target"):
        raise ValueError(f"trace_on={trace_on!r}; expected 'auto', 'target' or 'cpu'")
    if target_type == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if trace_on == "target":
        raise TraceError(f"trace_on='target' but no {target_type} device exists on this machine")
    return torch.device("cpu")


@contextlib.contextmanager
def _train_mode(model: torch.nn.Module, training: bool) -> Iterator[None]:
    modes = {m: m.training for m in model.modules()}
    model.train(training)
    try:
        yield
    finally:
        for module, mode in modes.items():
            module.training = mode


def trace_step(
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None = None,
    optimizer: OptimizerArg = None,
    precision: str | int | PrecisionSpec = "32-true",
    *,
    target_type: str = "cuda",
    trace_on: str = "auto",
    train: bool = True,
    extrapolate_repeats: bool = True,
) -> Trace:
    """Trace one training step (forward, loss, backward, optimizer step) of ``model`` on ``batch``.

    ``step_fn(model, batch)`` returns the loss (a tensor, a dict with ``"loss"`` or an object with
    ``.loss``); ``optimizer`` is an optimizer instance (its class and hyperparameters are copied),
    a factory ``params -> optimizer``, or ``None`` for AdamW defaults. ``target_type`` is the
    device type being predicted (``"cuda"`` or ``"cpu"``). With ``train=False`` only the forward
    runs, in eval mode and without gradients (a validation step).

    ``trace_on="auto"`` traces on the target device when this machine has one, and falls back to
    the CPU proxy if that fails; ``"target"`` insists on the target; ``"cpu"`` always uses the proxy
    (the mode the cost coefficients were fitted with).

    A stack of identical blocks (a transformer's layers) is traced one and two blocks deep and the
    rest extrapolated, which gives the same ops as tracing every block (``repeated_blocks``) in a
    fraction of the time; ``extrapolate_repeats=False`` traces every block.
    """
    from .arguments import check_optimizer, check_step_fn

    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"trace_step(model=...): expected a torch.nn.Module, got {type(model).__name__}")
    check_optimizer(optimizer, "trace_step(optimizer=...)")
    check_step_fn(step_fn, "trace_step(step_fn")
    device = resolve_trace_device(target_type, trace_on)

    def traced_on(where: torch.device) -> Trace:
        def trace() -> Trace:
            # Every trace (the shortened ones included) starts from the user's generators and leaves
            # them there: the step draws what it would draw next, the same in each trace.
            with rng_preserved(), _quiet_fake_tensor_log():
                return _trace(model, batch, step_fn, optimizer, precision, where, target_type, train)

        with collect_new_objects_only():
            return _shortest(model, precision, trace) if extrapolate_repeats else trace()

    if trace_on == "auto" and device.type != "cpu":
        try:
            traced = traced_on(device)
        except TraceError as exc:
            traced = traced_on(torch.device("cpu"))
            traced.notes.append(f"tracing on {device} failed ({exc}); traced on the CPU proxy instead")
    else:
        traced = traced_on(device)
    # Warned here, once, with the whole step's counts: not by each shortened or failed trace.
    if traced.unknown_ops_note:
        warnings.warn(f"ptp: {traced.unknown_ops_note}", TraceWarning, stacklevel=2)
    if traced.taken_largest_note:
        warnings.warn(f"ptp: {traced.taken_largest_note}", TraceWarning, stacklevel=2)
    return traced


def _shortest(model: torch.nn.Module, precision: str | int | PrecisionSpec, trace: Callable[[], Trace]) -> Trace:
    """The step traced with a stack of identical blocks cut short (``repeated_blocks``) where
    that gives the full step's ops, else ``trace()`` of the whole model."""
    try:
        shortened = trace_repeated(model, trace)
    except Exception:  # noqa: BLE001 - the full trace below names the op that fails, or succeeds
        shortened = None
    if shortened is None:
        return trace()
    return replace(shortened, **_param_facts(model, as_precision(precision)))


def _param_facts(model: torch.nn.Module, spec: PrecisionSpec) -> dict[str, int]:
    unique = list(dict.fromkeys(model.parameters()))
    return {
        "param_count": sum(p.numel() for p in unique),
        "param_tensors": len(unique),
        "trainable_tensors": sum(1 for p in unique if p.requires_grad),
        "param_bytes": sum(p.numel() * torch.empty((), dtype=_float_dtype_for(p, spec)).element_size() for p in unique),
    }


def _trace(
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None,
    optimizer: OptimizerArg,
    precision: str | int | PrecisionSpec,
    device: torch.device,
    target_type: str,
    train: bool,
) -> Trace:
    spec = as_precision(precision).on_target(target_type)
    step_fn = step_fn or default_step_fn
    proxy_for_cuda = device.type == "cpu" and target_type == "cuda"
    started = time.perf_counter()
    recorder_ref: list[_Recorder] = []
    module_path = _ModulePath(recorder_ref, model)
    recorder = _Recorder(spec, module_path.current, cuda_target=target_type == "cuda")
    recorder_ref.append(recorder)
    mappings: list[str] = []
    if proxy_for_cuda:
        mappings.append("traced on CPU as a proxy for CUDA")
    if has_compiled_parts(model):
        mappings.append("torch.compile: the eager step is predicted (compiled kernels and compilation not modelled)")

    from torch.nn.utils.stateless import _reparametrize_module

    with contextlib.ExitStack() as stack:
        mode = (ValuedFakeTensorMode if device.type == "cpu" else FakeTensorMode)(allow_non_fake_inputs=True)
        stack.enter_context(mode)
        fakes, fakes_by_id = _fake_state(model, spec, device, mode)
        fake_batch = _fake_batch(batch, spec, device, mode)
        optimizer, clip = clipping_of(optimizer)
        manual = isinstance(optimizer, ManualOptimization)
        copies: list[torch.optim.Optimizer] = []
        if train:
            for one in optimizer.optimizers if manual else (optimizer,):
                copy, notes = _copy_optimizer(one, model, fakes_by_id, target_type == "cuda")
                _check_no_closure(copy)
                copies.append(copy)
                mappings.extend(note for note in notes if note not in mappings)
        scaler = None
        if train and spec.grad_scaler:
            scaler = torch.amp.GradScaler(device.type)
            scaler._lazy_init_scale_growth_tracker(device)  # steady state: the scale exists
        stack.enter_context(module_state_kept(model))  # exits last: after the parameters are put back
        stack.enter_context(_reparametrize_module(model, fakes, tie_weights=True, strict=False))
        stack.enter_context(conversions_keep_fake_parameters())
        stack.enter_context(_train_mode(model, train))
        if not train:
            stack.enter_context(torch.no_grad())
        stack.enter_context(module_path)
        stack.enter_context(real_mask_checks(batch))
        stack.enter_context(numpy_reads(recorder.read_into_numpy))
        stack.enter_context(foreach_for_fake_tensors())
        if target_type == "cuda":
            stack.enter_context(_CudaKernels(recorder, proxy=proxy_for_cuda))
            stack.enter_context(flex_attention_recorded(recorder))
            if proxy_for_cuda:
                stack.enter_context(cuda_regions_on_cpu())
        stack.enter_context(recorder)
        try:
            step = ManualStep(recorder, copies, scaler, clip, foreach=True if target_type == "cuda" else None)
            with recorder.in_phase("forward"), _autocast(spec, device, proxy_for_cuda, mappings), _default_dtype(spec):
                if manual and train:  # the step runs its own backward and optimizer steps
                    step_fn(model, fake_batch, step)  # type: ignore[call-arg]
                else:
                    output = step_fn(model, fake_batch)
            if train and not manual:
                loss = loss_of(output)
                if loss.dim():  # not a loss: a real backward would refuse it
                    mappings.append(f"the step returned a tensor of shape {tuple(loss.shape)}, not a scalar loss: "
                                    "its backward is traced from the tensor's sum")
                    loss = loss.sum()
                step.backward(loss)
                step.optimizers[0].step()
                step.optimizers[0].zero_grad()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one clear TraceError
            where = recorder.failed_op or f"Python code outside any aten op{_raising_line(exc)}"
            raise TraceError(
                f"could not trace the {'training' if train else 'validation'} step: {type(exc).__name__} at {where}: "
                f"{exc}{_why(exc, proxy_for_cuda)}"
            ) from exc

    hazards = tuple(dict.fromkeys(h for h in (eps_underflow(c) for c in copies) if h))
    if any(op.cost.op_class == "conv" and op.cost.dtype == "tf32" for op in recorder.ops):
        # "32-true" says fp32; cuDNN's default (allow_tf32) runs its convolutions on TF32 tensor cores.
        mappings.append("fp32 convolutions run in TF32 (torch.backends.cudnn.allow_tf32, on by default)")
    return Trace(
        ops=recorder.ops,
        precision=spec,
        trace_device=device.type,
        target_type=target_type,
        **_param_facts(model, spec),
        trace_s=time.perf_counter() - started,
        mappings=tuple(mappings),
        optimizer_name="+".join(type(c).__name__ for c in copies),
        optimizer_state_bytes=sum(_state_bytes(c) for c in copies),
        unknown_ops=dict(recorder.unknown),
        taken_largest=dict(mode.taken_largest) if isinstance(mode, ValuedFakeTensorMode) else {},
        numbers_read=recorder.numbers_read,
        hazards=hazards,
        peak_new_bytes=recorder.live.peak,
    )


def _raising_line(exc: BaseException) -> str:
    """`` (file.py:12: `the line`)``: the innermost line of the model's or step's own code in the
    failure's traceback (PyTorch's and ptp_callback's frames passed over), or ``""``."""
    import traceback

    skipped = tuple(os.path.dirname(os.path.abspath(module.__file__)) + os.sep for module in (torch, contextlib))
    skipped += (os.path.dirname(os.path.abspath(__file__)) + os.sep,)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not os.path.abspath(frame.filename).startswith(skipped):
            code = f": `{frame.line.strip()}`" if frame.line else ""
            return f" ({os.path.basename(frame.filename)}:{frame.lineno}{code})"
    return ""


# Failures whose message alone would not tell the user what happened: a part of the message, and
# what it means.
_EXPLAINED: tuple[tuple[str, str], ...] = (
    ("does not require grad and does not have a grad_fn",
     "the loss depends on no trained parameter in the trace: a branch on a random draw read as its median "
     "(LayerDrop with a drop probability of 0.5 or more skips every layer) or on a value the trace does not have"),
    ("backward through the graph a second time",
     "the step function ran the backward itself: return the loss (the trace runs the backward and the optimizer "
     "step), or take a ptp.ManualOptimization and call step.backward(loss) and the optimizers' step() "
     "(step.optimizers)"),
    ("positional argument",
     "if it is the model's or the step function's call: the default step is model(*batch) (model(**batch) for a "
     "dict) and its .loss; pass step_fn(model, batch) -> loss for another call (a ManualOptimization's step_fn "
     "takes (model, batch, step))"),
    (".numpy() is not supported for tensor subclasses",
     "the step hands the model's numbers to NumPy, which a trace on fake tensors does not have"),
    ("out of bounds",
     "an index the batch holds is out of range (labels beyond the model's classes, token ids beyond its "
     "vocabulary): the step fails the same way on a GPU"),
    # cuFFT's transforms (torch.fft, stft): CUDA autocast leaves them in the input's dtype
    ("Unsupported dtype BFloat16",
     "an FFT of a bf16 tensor, which PyTorch's CUDA FFTs reject too (autocast does not cast them): the step fails "
     "the same way on a GPU under this precision; casting the FFT's input to float32 avoids it"),
    ("at::autocast::prioritize",
     "autocast met fp16 and bf16 tensors in one op (a cuDNN LSTM/GRU returns fp16 under any autocast): the step "
     "fails the same way on a GPU under this precision; 16-mixed, or casting the recurrent layer's output, "
     "avoids it"),
)


def _why(exc: Exception, proxy_for_cuda: bool = False) -> str:
    """What a failure the user cannot act on from its name alone means."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    message = str(exc)
    if failed_over_packed_sequences(exc):
        return (" -- packed sequences (pack_padded_sequence) are traced for a GPU target only: a CPU runs a "
                "recurrent layer over them step by step, by the values of their sizes")
    if not proxy_for_cuda and "FlexAttention does not support backward on CPU" in message:
        return " -- the step fails the same way when it runs on this CPU: PyTorch runs FlexAttention's backward on GPUs"
    if proxy_for_cuda and "cpu" in message.lower() and "same device" not in message:
        # a kernel the CPU lacks for a dtype ("not implemented for 'Half'")
        return (" -- the step is traced on this machine's CPU in place of the GPU, and this op does not run "
                "there: on a machine with a CUDA GPU the trace runs on the GPU")
    if isinstance(exc, DataDependentOutputException):
        return (" -- the step reads an integer or a truth value its model's numbers decide (`int((out > 0).sum())`, "
                "`if (out > 0).any():`), which a trace on fake tensors does not have")
    if isinstance(exc, DynamicOutputShapeException):
        return (" -- this op's output size depends on the values of its inputs (packed sequences, lengths, "
                "unique values), which a trace on fake tensors does not have")
    return next((f" -- {meaning}" for part, meaning in _EXPLAINED if part in message), "")


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors in an optimizer's per-parameter state (step counters included)."""
    return sum(v.numel() * v.element_size() for state in optimizer.state.values() for v in state.values()
               if isinstance(v, torch.Tensor))


@contextlib.contextmanager
def _autocast(spec: PrecisionSpec, device: torch.device, proxy_for_cuda: bool, mappings: list[str]) -> Iterator[None]:
    """The precision's autocast; on the CPU proxy it casts by CUDA's policy, which
    :class:`_CudaKernels` keeps registered while it is active."""
    if spec.autocast_dtype is None:
        yield
        return
    if proxy_for_cuda and "autocast: CUDA cast policy replayed on CPU" not in mappings:
        mappings.append("autocast: CUDA cast policy replayed on CPU")
    with torch.autocast(device.type, dtype=spec.autocast_dtype):
        yield


def has_compiled_parts(model: torch.nn.Module) -> bool:
    """Whether ``torch.compile`` wraps the model or a part of it, or ``module.compile()`` compiled
    one in place (it keeps its class and calls a compiled ``_compiled_call_impl``). Without
    importing the compiler (1-2 s) where nothing was compiled."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return eval_frame is not None and any(
        isinstance(m, eval_frame.OptimizedModule) or getattr(m, "_compiled_call_impl", None) is not None
        for m in model.modules())


@contextlib.contextmanager
def _default_dtype(spec: PrecisionSpec) -> Iterator[None]:
    """The parameters' dtype as torch's default dtype under a ``*-true`` precision other than fp32,
    as Lightning's precision plugins set it around the training step: a tensor the forward makes
    without a dtype (``torch.rand(x.shape)``) is made in that dtype, and meets the weights in it."""
    if spec.autocast_dtype is not None or spec.param_dtype == torch.float32:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(spec.param_dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class OpContext:
    """What :func:`record_ops` hands its function: the phase and autocast switches of a step."""

    def __init__(self, recorder: _Recorder, spec: PrecisionSpec, mappings: list[str]) -> None:
        self._recorder = recorder
        self._spec = spec
        self._mappings = mappings

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Record what runs inside as ``forward``, ``backward`` or ``optimizer`` work."""
        return self._recorder.in_phase(name)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """The precision's autocast (CUDA's cast policy), as a training step's forward runs in."""
        return _autocast(self._spec, torch.device("cpu"), True, self._mappings)

    def setup(self) -> contextlib.AbstractContextManager[None]:
        """Work not to record (building the tensors and modules the recorded ops use)."""
        return self._recorder.paused()


def record_ops(fn: Callable[[OpContext], Any], precision: str | int | PrecisionSpec = "32-true") -> list[OpRecord]:
    """The op records of ``fn`` as a step traced for a CUDA target would hold them.

    ``fn`` builds its own tensors and modules under ``ctx.setup()`` (they are fake: nothing is
    allocated) and runs a few ops; it may wrap work in ``ctx.phase("backward")`` and
    ``ctx.autocast()``. For pinning the cost of single ops (tests, the per-op benchmarks) with the
    very records a trace holds.

    >>> def matmul(ctx):
    ...     with ctx.setup():
    ...         a, b = torch.randn(64, 32), torch.randn(32, 16)
    ...     a @ b
    >>> [(op.name, op.cost.flops) for op in record_ops(matmul)]
    [('aten.mm.default', 65536.0)]
    """
    spec = as_precision(precision)
    recorder_ref: list[_Recorder] = []
    module_path = _ModulePath(recorder_ref)
    recorder = _Recorder(spec, module_path.current)
    recorder_ref.append(recorder)
    with FakeTensorMode(allow_non_fake_inputs=True), module_path, _CudaKernels(recorder, proxy=True), recorder:
        fn(OpContext(recorder, spec, []))
    return recorder.ops
