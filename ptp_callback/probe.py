"""A quick measurement of the local device: GEMM rate per dtype, copy bandwidth, per-op host time.

A CPU has no datasheet entry, so predicting a CPU fit needs the probe; on a GPU it optionally
refines the table's numbers (``predict_step(..., probe=True)``). It runs a few small, fixed
micro-benchmarks within a few seconds (3.0 s on a 2-thread AVX2 EPYC), and caches the result on
disk per device name and torch version (``$PTP_CACHE_DIR`` or ``~/.cache/ptp_callback``), so later
runs are free.

>>> result = probe_device(torch.device("cpu"), cache=False)   # doctest: +SKIP
>>> result.gemm_tflops["fp32"]["256"] > 0                       # doctest: +SKIP
True
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

import torch

from .cache import cache_dir
from .coefficients import CostCoefficients, coefficients_for
from .costs import CONV_FAMILIES
from .devices import DeviceSpec
from .rng import rng_preserved

_GEMM_SIZES = (256, 512, 1024)
_SKINNY_SHAPE = (64, 1024, 1024)  # (m, n, k): a 64-row batch through a 1024-wide layer
_SKINNY = "x".join(map(str, _SKINNY_SHAPE))
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class ProbeResult:
    """Measured rates of one device: ``gemm_tflops[dtype][size]``, copy GB/s (read + written),
    host seconds per small op issued from Python, and per op of a tiny forward+backward; on a CPU,
    ``element_s``: seconds per element of the ops it computes slower than it moves their bytes
    (random numbers, transcendental functions; :func:`element_ops`; ``"tanh:bf16"`` and the like for
    :data:`HALF_ELEMENT_OPS` in bf16 and fp16), and ``fault_s_per_byte``
    what writing a freshly allocated large tensor costs per byte beyond writing one it holds (the
    operating system maps and zeroes its pages: :func:`_fault_seconds_per_byte`), and
    ``stream_copy_gbps`` the copy rate over more memory than its caches hold (:func:`_stream_copy_gbps`),
    and ``llc_copy_gbps`` a copy's rate through the last-level cache (between two 4 MB tensors)."""

    device_name: str
    torch_version: str
    threads: int
    gemm_tflops: dict[str, dict[str, float]]
    copy_gbps: float
    small_op_s: float
    autograd_op_s: float
    probe_s: float
    cache_copy_gbps: float = 0.0
    element_s: dict[str, float] = field(default_factory=dict)
    fault_s_per_byte: float = 0.0
    stream_copy_gbps: float = 0.0
    # The skinny GEMM's rate with its second operand transposed (``x @ w.t()``, a linear layer's
    # forward), per dtype: see :func:`_transposed_gemm_tflops`.
    gemm_transposed_tflops: dict[str, float] = field(default_factory=dict)
    # A CPU's fused attention forward and backward per dtype (``"fwd:bf16"``): seconds of one call
    # at :data:`_ATTENTION_SHAPE` (:func:`_attention_seconds`).
    attention_s: dict[str, float] = field(default_factory=dict)
    # The same for a dense convolution, in fp32 and the half dtypes whose GEMMs have no fast path
    # here (:func:`_conv_seconds`).
    conv_s: dict[str, float] = field(default_factory=dict)
    # For a half dtype without matrix instructions here (PyTorch's fallback kernels), TFLOP/s of
    # more shapes and layouts: ``"transposed_k64"`` (``x @ w.t()`` with a 64-long inner dimension),
    # ``"mn_major"`` (``g.t() @ x``, a weight gradient's) and ``"row_major_n64"`` (both operands
    # row-major, 64 columns out): :func:`_fallback_layout_tflops`.
    gemm_fallback_tflops: dict[str, dict[str, float]] = field(default_factory=dict)
    llc_copy_gbps: float = 0.0
    # A CPU's tiny reference training step, seconds per phase (``reference_step.time_reference_step``),
    # and the factor per phase on the per-op host costs that the step's trace fits them with
    # (``reference_step.host_scales``, :func:`with_host_scales`; applied by :func:`cpu_coefficients`).
    reference_step_s: dict[str, float] = field(default_factory=dict)
    reference_host_scales: dict[str, float] = field(default_factory=dict)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} ({torch.get_num_threads()} threads)"


def _cache_path(device: torch.device) -> str:
    # v3: fp32 GEMM rates timed at full matmul precision; older caches may hold bf16 or TF32 rates.
    # v4: the first-touch cost of fresh allocations, which older caches lack.
    # v5: a CPU's copy rate beyond its caches, which older caches lack.
    # v6: a CPU's pooling times, which older caches lack.
    # v7: GEMM rates with a transposed operand, and fallback kernels no longer read as scaling with
    # the threads.
    # v8: a CPU's element rates in bf16 and fp16 (HALF_ELEMENT_OPS), which older caches lack.
    # v9: a CPU's fused attention and convolution times per dtype, which older caches lack.
    # v10: a fallback dtype's GEMM rates by layout and shape, which older caches lack.
    # v11: a CPU's copy rate through its last-level cache, which older caches lack.
    # v12: a CPU's rate of SDPA's safe softmax, which older caches lack.
    # v13: a CPU's tiny reference training step, which older caches lack.
    # v14: a CPU's batch norm rates per element, forward and backward, which older caches lack.
    # v15: a CPU's rates per element of bilinear upsampling, forward and backward, and of gather and
    # scatter_add, which older caches lack.
    key = hashlib.sha1(f"{_device_name(device)}|{torch.__version__}|v15".encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"probe-{device.type}-{key}.json")


def _timed(fn: Callable[[], object], device: torch.device, repeats: int, once_beyond_s: float = math.inf) -> float:
    """Fastest of ``repeats`` timings of ``fn`` after one warm-up call (synchronizing a GPU); one
    timing only where the warm-up took longer than ``once_beyond_s``.

    The fastest, not the median: on a shared machine the slow samples measure the neighbours.
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    started = time.perf_counter()
    fn()
    sync()
    if time.perf_counter() - started > once_beyond_s:
        repeats = 1
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        sync()  # the probe times device work, so it must wait for it
        samples.append(time.perf_counter() - started)
    return min(samples)


def _single_thread(fn: Callable[[], object], device: torch.device) -> float:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _timed(fn, device, 2)
    finally:
        torch.set_num_threads(threads)


@contextmanager
def _ieee_fp32_matmuls() -> Iterator[None]:
    """fp32 matmuls at full precision while the probe times them, whatever this process set.

    ``torch.set_float32_matmul_precision("medium")`` lets a CPU with bf16 matrix units run fp32
    matmuls in bf16 (3.3x faster on a Xeon with AMX: 1.39 against 0.42 TFLOP/s), and "high" runs
    them in TF32 on an Ampere or newer GPU. A probe taken under either would cache that rate as
    the fp32 one, and every later process at the default setting would read it as a machine
    running slower than its cache, slowing every predicted rate (see :func:`at_speed`).
    """
    setting = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(setting)


# A GEMM that takes this long on all threads is not one a thread barrier's stalls (milliseconds)
# could have slowed much: it runs without a fast path for its dtype (bf16 and fp16 on a CPU
# without their matrix instructions: 137 ms for a 64x1024x1024 bf16 GEMM on a 2-thread AVX2
# EPYC, 1.2 ms in fp32), so it is timed once, and not again on one thread (those timings were
# 2.1 s of a 3.1 s first probe there).
_STALL_BOUND_S = 0.05


def _gemm_seconds(a: torch.Tensor, b: torch.Tensor, device: torch.device) -> float:
    matmul = lambda: a @ b  # noqa: E731 - timed right here, bound for clarity
    with _ieee_fp32_matmuls():
        seconds = _timed(matmul, device, 3, once_beyond_s=_STALL_BOUND_S)
        threads = torch.get_num_threads()
        if device.type == "cpu" and threads > 1 and seconds < _STALL_BOUND_S:
            # A busy machine can stall a multi-threaded BLAS at its thread barriers for
            # milliseconds (100x slower small GEMMs, seen on a 2-core VM): one thread times
            # the capability too, scaled by the threads, and the faster estimate stands. Only for
            # a kernel that gains from threads (or a stalled one): a fallback kernel that runs on
            # one thread whatever the setting (bf16 256x256x256 on that EPYC: 23 ms on one thread
            # and on two) would be read as twice as fast as it runs.
            alone = _single_thread(matmul, device)
            scales = seconds < 0.9 * alone or seconds > 3.0 * alone
            seconds = min(seconds, alone / threads if scales else alone)
    return seconds


def _measure(device: torch.device) -> ProbeResult:
    started = time.perf_counter()
    gemm: dict[str, dict[str, float]] = {}
    for key, dtype in _DTYPES.items():
        rates: dict[str, float] = {}
        # Square sizes, then a skinny one (a 64-row batch through a 1024-wide layer): how the rate
        # falls with the smallest dimension is what small batches and narrow layers meet.
        for label, (m, n, k) in [(_SKINNY, _SKINNY_SHAPE)] + [(str(s), (s, s, s)) for s in _GEMM_SIZES]:
            a = torch.randn(m, k, device=device).to(dtype)
            b = torch.randn(k, n, device=device).to(dtype)
            seconds = _gemm_seconds(a, b, device)
            rates[label] = 2 * m * n * k / seconds / 1e12
            if label != _SKINNY and seconds * 8 * 4 > 0.25:
                # No fast path for this dtype (fp16 on most CPUs): the next size (8x the work, timed
                # 4 times) would cost too much, and would run at about this rate anyway.
                break
        gemm[key] = rates
    transposed = {key: _transposed_gemm_tflops(dtype, device) for key, dtype in _DTYPES.items()}
    copy_gbps = _copy_gbps(64 * 2**20 if device.type == "cuda" else _COPY_ELEMENTS, device, 10)
    # A CPU's caches hold the small activations of small models: their bandwidth matters there.
    cache_copy_gbps = _copy_gbps(2**18, device, 20)  # 1 MB
    small_op_s, autograd_op_s = host_op_seconds(device)
    element_s: dict[str, float] = {}
    attention_s: dict[str, float] = {}
    conv_s: dict[str, float] = {}
    fallback: dict[str, dict[str, float]] = {}
    fault_s_per_byte = stream_copy_gbps = llc_copy_gbps = 0.0
    reference_step_s: dict[str, float] = {}
    if device.type == "cpu":
        from .reference_step import time_reference_step

        reference_step_s = time_reference_step()
        n = _ELEMENTS
        element_s = {name: _timed(fn, device, 3) / n for name, fn in element_ops(n, device).items()}
        for dtype, key in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
            ops = element_ops(n, device, dtype)
            element_s.update({f"{name}:{key}": _timed(ops[name], device, 3) / n for name in HALF_ELEMENT_OPS})
        fault_s_per_byte = _fault_seconds_per_byte(device)
        stream_copy_gbps = _stream_copy_gbps(device)
        llc_copy_gbps = _copy_gbps(_LLC_ELEMENTS, device, 10)
        attention_s = _attention_seconds(device)
        # The half dtypes without matrix instructions here: their kernels are fallbacks of their own.
        slow = _fallback_dtypes(gemm)
        conv_s = _conv_seconds(device, slow)
        fallback = {key: _fallback_layout_tflops(_DTYPES[key], device) for key in slow}
    return ProbeResult(_device_name(device), torch.__version__, torch.get_num_threads(), gemm, copy_gbps,
                       small_op_s, autograd_op_s, time.perf_counter() - started, cache_copy_gbps, element_s,
                       fault_s_per_byte, stream_copy_gbps, transposed, attention_s, conv_s, fallback, llc_copy_gbps,
                       reference_step_s)


def host_op_seconds(device: torch.device) -> tuple[float, float]:
    """Host seconds per small op issued from Python to ``device``, and per op of a tiny forward and
    backward: on a GPU, how fast this host dispatches and launches (the ops are too small for the
    device to be the limit). A few milliseconds; nothing is cached."""
    small = torch.zeros(16, device=device)

    def small_ops() -> None:
        for _ in range(200):
            small.add_(1.0)

    small_op_s = _timed(small_ops, device, 3) / 200
    weight = torch.zeros(16, device=device, requires_grad=True)

    def tiny_step() -> None:
        for _ in range(50):
            loss = (weight * 2.0 + 1.0).sum()  # 3 forward ops, 3 backward ops
            loss.backward()

    return small_op_s, _timed(tiny_step, device, 3) / (50 * 6)


def _transposed_gemm_tflops(dtype: torch.dtype, device: torch.device) -> float:
    """TFLOP/s of the skinny GEMM with a transposed second operand, as a linear layer's forward
    runs it (``x @ weight.t()``); the other probed GEMMs take both operands row-major, as a
    linear layer's input gradient does.

    Where a CPU has no matrix instructions for a dtype, PyTorch's fallback kernels differ by
    layout: on a 2-thread AVX2 EPYC, bf16 ``64x1024 @ 1024x1024`` took 137 ms row-major and 6.5 ms
    transposed (fp32: 1.2 and 1.4 ms), and a bf16 MLP's training step 340 ms, 290 of them in its
    one row-major input gradient (:func:`cpu_coefficients`).
    """
    m, n, k = _SKINNY_SHAPE
    a = torch.randn(m, k, device=device).to(dtype)
    weight = torch.randn(n, k, device=device).to(dtype)
    return 2 * m * n * k / _gemm_seconds(a, weight.t(), device) / 1e12


# (batch, heads, sequence, head dim) of the probed causal attention: about 34 MFLOP forward.
_ATTENTION_SHAPE = (2, 4, 256, 64)


def _attention_seconds(device: torch.device) -> dict[str, float]:
    """A causal ``scaled_dot_product_attention`` at :data:`_ATTENTION_SHAPE`, forward and backward
    (its forward+backward less its forward), in each of fp32, bf16 and fp16.

    A CPU's fused attention kernel computes half-precision inputs in fp32, so it runs at neither
    the probed bf16 GEMM rate nor the fp32 one: on a 2-thread AVX2 EPYC (no bf16 instructions),
    where a bf16 GEMM ran 120x slower than an fp32 one, bf16 attention ran forward at fp32's speed
    (0.9-1.1x its time over four shapes) and backward 2-7x slower; fp16 1.3-2.6x and 3-11x.
    """
    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return _forward_backward_seconds(call, [_ATTENTION_SHAPE] * 3, list(_DTYPES), device, 3)


# (batch, channels in and out, height and width) of the probed 3x3 convolution: 38 MFLOP forward.
# The fallback's slowdown grows with the size (bf16 forward on an AVX2 EPYC: 12x fp32's time at
# 2x32x16x16, 30x here, 64x at 2x64x32x32): a middle size.
_CONV_SHAPE = (2, 32, 32)


def _conv_seconds(device: torch.device, half: list[str]) -> dict[str, float]:
    """A dense 3x3 convolution at :data:`_CONV_SHAPE`, forward and backward, in fp32 and the
    ``half`` dtypes: those without matrix instructions here, whose convolutions oneDNN runs in
    kernels of their own. On a 2-thread AVX2 EPYC (2026-11-28, five shapes) bf16 ones ran forward
    36-109x the fp32 time and backward 2-5x: the bf16 GEMM rate gives neither. None where every
    dtype has a fast path (their convolutions are priced from it), and none on a GPU."""
    if not half:
        return {}
    batch, channels, size = _CONV_SHAPE

    def call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, w, padding=1)

    shapes = [(batch, channels, size, size), (channels, channels, 3, 3)]
    return _forward_backward_seconds(call, shapes, ["fp32", *half], device, 2)


def _forward_backward_seconds(call: Callable[..., torch.Tensor], shapes: list[tuple[int, ...]], dtypes: list[str],
                              device: torch.device, repeats: int) -> dict[str, float]:
    """``call`` on random inputs of ``shapes`` in each of ``dtypes``: its forward, and its backward
    as its forward+backward less its forward (``"fwd:bf16"``, ``"bwd:bf16"``)."""
    out = {}
    for key in dtypes:
        inputs = [torch.randn(*shape, device=device).to(_DTYPES[key]).requires_grad_() for shape in shapes]
        # A dtype some CPU runs hundreds of times slower than fp32 is timed once after its warm-up,
        # as a GEMM without a fast path is (:data:`_STALL_BOUND_S`).
        with torch.no_grad():
            forward_s = _timed(lambda: call(*inputs), device, repeats, once_beyond_s=_STALL_BOUND_S)
        both_s = _timed(lambda: call(*inputs).sum().backward(), device, repeats, once_beyond_s=_STALL_BOUND_S)
        out[f"fwd:{key}"], out[f"bwd:{key}"] = forward_s, max(both_s - forward_s, 0.1 * both_s)
    return out


def _fallback_layout_tflops(dtype: torch.dtype, device: torch.device) -> dict[str, float]:
    """More layouts' rates where PyTorch's fallback kernels run ``dtype``'s GEMMs.

    Each layout is a kernel of its own there, with a rate that follows one dimension: on a 2-thread
    AVX2 EPYC (bf16, 2026-11-28, m in {64, 512}, k and n in {64, 256, 1024}) ``x @ w.t()`` ran
    ~5 GFLOP/s at k=64, ~12 at 256, ~18.5 at 1024 whatever m and n (dot products along k); both
    operands row-major 2.0-2.3 at n=64, 1.1-1.8 at 256, 0.8-1.2 at 1024 whatever m and k (the
    skinny GEMM gives n=1024); ``g.t() @ x`` 10-17 whatever the shape. About 0.1 s there.
    """
    a, w = torch.randn(512, 64, device=device).to(dtype), torch.randn(256, 64, device=device).to(dtype)
    g, x = torch.randn(128, 256, device=device).to(dtype), torch.randn(128, 256, device=device).to(dtype)
    wide, narrow = torch.randn(512, 256, device=device).to(dtype), torch.randn(256, 64, device=device).to(dtype)
    return {"transposed_k64": 2 * 512 * 256 * 64 / _gemm_seconds(a, w.t(), device) / 1e12,
            "mn_major": 2 * 256 * 256 * 128 / _gemm_seconds(g.t(), x, device) / 1e12,
            "row_major_n64": 2 * 512 * 64 * 256 / _gemm_seconds(wide, narrow, device) / 1e12}


def _stream_copy_gbps(device: torch.device) -> float:
    """A copy's rate (bytes read + written per second) between two 128 MB tensors: more than the
    caches keep of a training step, whose ops read tensors written many megabytes earlier.

    A 32 MB copy can run from the last-level cache (54 GB/s on a 2-thread Xeon whose VM sees a
    480 MB L3); the same copy over 2 x 128 MB ran at 27 GB/s there, as over 2 x 1 GB, and so did
    the 4 MB multiplies inside a GPT-2 step (0.35-0.69 ms each against 0.155 ms repeated alone).
    It adds about 0.08 s to the probe there, most of it the operating system mapping the pages."""
    return _copy_gbps(32 * 2**20, device, 3)


def _copy_gbps(elements: int, device: torch.device, repeats: int) -> float:
    """The fastest of ``repeats`` copies of ``elements`` fp32 values, in bytes read + written per second."""
    src = torch.empty(elements, device=device).fill_(1.0)  # written: unwritten pages all read one zero page
    dst = torch.empty_like(src)  # mapped by _timed's warm-up copy
    return 2 * elements * 4 / _timed(lambda: dst.copy_(src), device, repeats) / 1e9


def _fault_seconds_per_byte(device: torch.device) -> float:
    """Seconds per byte that filling a new 64 MB tensor takes beyond filling one already held: the
    operating system mapping and zeroing its pages on first touch (0.18 ns a byte on a 2-thread
    Xeon, where the fill itself took 0.03). 64 MB is above every mmap threshold of glibc's, so
    each new one is mapped afresh."""
    n = 16 * 2**20
    held = torch.empty(n, device=device)
    fresh_s = _timed(lambda: torch.empty(n, device=device).fill_(1.0), device, 3)
    held_s = _timed(lambda: held.fill_(1.0), device, 3)
    return max(0.0, fresh_s - held_s) / (4 * n)


# 64K fp32 elements (256 KB): in the caches, so the time is the op's arithmetic, not its bytes.
_ELEMENTS = 2**16
# Ops that run the same arithmetic as a measured one (in-place forms, factories, sampling).
ELEMENT_ALIASES: dict[str, str] = {
    "bernoulli": "bernoulli_", "_fused_dropout": "native_dropout", "rand": "uniform_", "rand_like": "uniform_",
    "randn": "normal_", "randn_like": "normal_", "exp_": "exp", "log_": "log", "tanh_": "tanh",
    "sigmoid_": "sigmoid", "silu_": "silu", "elu_": "elu", "sin_": "sin", "cos_": "cos",
    **dict.fromkeys(("_native_batch_norm_legit", "_native_batch_norm_legit_functional", "_batch_norm_with_update",
                     "_batch_norm_with_update_functional"), "native_batch_norm"),
    "batch_norm_backward": "native_batch_norm_backward", "scatter_add_": "scatter_add",
}


# The ops timed in bf16 and fp16 too: a CPU's kernels compute half-precision elements in fp32,
# converting each one in and out, so even a product runs slower than its bytes move (a 2-thread
# Xeon with AMX-BF16, 2026-11-27, over 64K elements: mul 0.12 ns an element in bf16, 0.08 in fp32;
# tanh 0.77 against 0.17).
HALF_ELEMENT_OPS = ("mul", "exp", "tanh", "sigmoid", "erf", "gelu", "gelu_backward", "silu", "silu_backward",
                    "_softmax", "_log_softmax", "_log_softmax_backward_data", "native_batch_norm",
                    "native_batch_norm_backward", "gather", "scatter_add")


def element_ops(n: int, device: torch.device, dtype: torch.dtype = torch.float32) -> dict[str, Callable[[], object]]:
    """The ops a CPU computes element by element slower than it moves their bytes, each over ``n``
    elements of ``dtype`` (a multiple of 256, the softmax rows' length).

    A CPU draws random numbers one by one (``bernoulli_``, behind dropout, took 11 ns an element on
    a 2-core EPYC, 80 times a copy's 0.13), evaluates transcendental functions in software
    (``tanh`` 2.5 ns, ``exp`` 0.8) and pools NCHW maps window by window (a 2x2 max pool with its
    indices 2.2 ns an input element on a 2-thread Xeon, 15 times a copy; an audio convnet's two
    max pools took 11.5 ms of its 30 ms forward, priced 5.3 by their bytes). A GPU does all of them
    at its memory bandwidth. Pools are timed over 2x2 windows. A training batch norm takes longer
    in fp32 than a half-precision input's (2-thread Xeon, 2026-11-29, 16 channels of 16x16 maps:
    forward 0.85 ns an element in fp32, 0.32 from bf16). A bilinear upsampling interpolates each
    output element from four inputs, and its backward adds each output's gradient back into them
    (2-thread Xeon, 2026-11-29, 2x and 4x over 8x8 to 32x32 maps of 10-256 channels: forward
    0.7-1.4 ns an output element, backward 2.3-2.4 in fp32 and bf16 alike, 20 times its bytes' time);
    it is timed over 16 channels of 32x32 maps, upsampled 2x. ``gather`` (DeBERTa's relative
    positions) and ``scatter_add`` (its backward) read or add one element at an index at a time:
    0.3-1.2 ns an element in fp32 or bf16 against a copy's 0.03-0.16 (that Xeon, rows of 64-65536);
    they are timed along rows of 256 at random indices. A time is per element of the op's largest
    tensor (:func:`kernels.element_seconds`)."""
    aten = torch.ops.aten
    x = torch.randn(n, device=device).to(dtype)
    grad, positive, out = torch.randn_like(x), x.abs() + 0.1, torch.empty_like(x)
    rows, grad_rows = x.view(-1, 256), grad.view(-1, 256)
    log_probs = torch.log_softmax(rows, -1)
    maps = x.view(-1, 1, 16, 16)
    pooled, indices = aten.max_pool2d_with_indices(maps, [2, 2], [2, 2])
    pooled_grad = torch.randn_like(pooled)
    # A training batch norm over 16 channels of 16x16 maps, its weights and statistics in fp32 as
    # under autocast (a half-precision input).
    channels = torch.ones(16, device=device)
    norm_args = (channels, torch.zeros_like(channels), torch.zeros_like(channels), torch.ones_like(channels))
    normed = x.view(-1, 16, 16) if n % 4096 else x.view(-1, 16, 16, 16)
    _, mean, invstd = aten.native_batch_norm(normed, *norm_args, True, 0.1, 1e-5)
    # upsampled to n elements (16 channels of 32x32 maps; one 8x8 map for a small n)
    low = x[: n // 4].view(-1, 16, 32, 32) if n % 65536 == 0 else x[: n // 4].view(-1, 1, 8, 8)
    high = [2 * low.shape[-2], 2 * low.shape[-1]]
    high_grad = torch.randn(low.shape[0], low.shape[1], *high, device=device).to(dtype)
    picks = torch.randint(0, 256, rows.shape, device=device)
    return {
        "max_pool2d_with_indices": lambda: aten.max_pool2d_with_indices(maps, [2, 2], [2, 2]),
        "max_pool2d_with_indices_backward": lambda: aten.max_pool2d_with_indices_backward(
            pooled_grad, maps, [2, 2], [2, 2], [0, 0], [1, 1], False, indices),
        "avg_pool2d": lambda: aten.avg_pool2d(maps, [2, 2], [2, 2]),
        "upsample_bilinear2d": lambda: aten.upsample_bilinear2d(low, high, False),
        "upsample_bilinear2d_backward": lambda: aten.upsample_bilinear2d_backward(high_grad, high, list(low.shape),
                                                                                  False),
        "native_batch_norm": lambda: aten.native_batch_norm(normed, *norm_args, True, 0.1, 1e-5),
        "native_batch_norm_backward": lambda: aten.native_batch_norm_backward(
            grad.view(normed.shape), normed, channels, norm_args[2], norm_args[3], mean, invstd, True, 1e-5,
            [True, True, True]),
        "gather": lambda: torch.gather(rows, -1, picks),
        "scatter_add": lambda: torch.scatter_add(rows, -1, picks, grad_rows),
        "bernoulli_": lambda: out.bernoulli_(0.9),
        "native_dropout": lambda: aten.native_dropout(x, 0.1, True),
        "uniform_": lambda: out.uniform_(),
        "normal_": lambda: out.normal_(),
        "exp": lambda: torch.exp(x, out=out),
        "log": lambda: torch.log(positive, out=out),
        "tanh": lambda: torch.tanh(x, out=out),
        "sigmoid": lambda: torch.sigmoid(x, out=out),
        "erf": lambda: torch.erf(x, out=out),
        "sin": lambda: torch.sin(x, out=out),
        "cos": lambda: torch.cos(x, out=out),
        "gelu": lambda: aten.gelu(x),
        "gelu_backward": lambda: aten.gelu_backward(grad, x),
        "silu": lambda: aten.silu(x),
        "silu_backward": lambda: aten.silu_backward(grad, x),
        "elu": lambda: aten.elu(x),
        "softplus": lambda: aten.softplus(x),
        "mish": lambda: aten.mish(x),
        "_softmax": lambda: aten._softmax(rows, -1, False),
        # SDPA's unfused softmax also finds the rows that are all masked (a reduction over each
        # row): 1.2-1.3 ns an element against the softmax's 0.3 on a 2-thread Xeon, 2.0-2.1 over
        # rows of 32 (2026-11-29).
        "_safe_softmax": lambda: aten._safe_softmax(rows, -1),
        "_log_softmax": lambda: aten._log_softmax(rows, -1, False),
        "_log_softmax_backward_data": lambda: aten._log_softmax_backward_data(grad_rows, log_probs, -1, dtype),
        **({} if dtype == torch.float32 else {"mul": lambda: torch.mul(x, grad, out=out)}),
    }


# A cached probe whose GEMM rate is this much below a fresh spot check was taken while the
# machine was busy (seen on a 2-core VM: 0.05 TFLOP/s cached, 0.07 measured later); every
# prediction read from it would be that much too slow, so the probe is taken again.
SPOT_CHECK_FASTER = 1.2
# A CPU shared with other work runs a fit at the speed it has now, not at the best the probe ever
# saw (a 2-core VM: 0.085 TFLOP/s cached, 0.067 for hours later, and its fits 25-35% longer than
# predicted): a slower spot check slows the cached rates for this process, by at most this factor.
SLOWEST_NOW = 0.5
_SPOT_SIZE = 256
_SPOT_READINGS = 3
_COPY_ELEMENTS = 8 * 2**20  # a CPU's copy rate: between two 32 MB tensors
# Through its last-level cache: two 4 MB tensors, more than a core's L2 holds (2 MB on a Sapphire
# Rapids Xeon, 0.5 MB on an EPYC), less than any L3 (32 MB on a 2-thread EPYC VM, whose 32 MB copy
# ran from memory at 19 GB/s); a 2-thread Xeon VM (2026-11-29): 2 MB tensors 112-128 GB/s, 4-16 MB
# ones 57-59 GB/s, 32 MB ones 53-55 GB/s.
_LLC_ELEMENTS = 2**20
# A spot check of a few milliseconds is a noisy reading of a machine's speed: on a 2-core VM fresh
# processes a minute apart read 0.53 to 1.0 of the cached rate (median 0.9), while the steps they
# then ran took the same time. A machine busy for hours stays busy from one process to the next:
# the speed used is the median of the latest readings of the same cache within this long.
SPOT_MEMORY_S = 3600.0
_SPOT_POOL = 9
_now: dict[str, ProbeResult] = {}  # per cache file: the result this process's spot check left


@rng_preserved()  # its random operands must not move the user's generators (data order, dropout)
def probe_device(device: torch.device, *, cache: bool = True, refresh: bool = False) -> ProbeResult:
    """Measure ``device`` (a CPU or a local CUDA GPU), or read the cached result; ``refresh``
    measures even when a result is cached, and caches the new one.

    A cached result is spot-checked once per process with one GEMM (a few milliseconds) and, on a
    CPU, a skinny GEMM and a copy (:func:`_parts_faster_now`): if this machine now runs one of them
    :data:`SPOT_CHECK_FASTER` times faster than the cache says, the cache was measured on a busy
    machine, and the probe runs again (keeping the better of the two readings of each rate). A CPU
    that runs the GEMM slower now than the cache says is busy now: this process
    reads the cached rates slowed to the speed its spot checks read: this one's and the latest ones
    of the past hour, their median (see :func:`at_speed`, :data:`SPOT_MEMORY_S`)."""
    device = torch.device(device)
    path = _cache_path(device)
    cached = _read(path) if cache and not refresh else None
    if cached is not None:
        if path in _now:
            return _now[path]
        speed = _speed_now(cached, device)
        if speed <= SPOT_CHECK_FASTER and not _parts_faster_now(cached, device):
            _now[path] = at_speed(cached, _pooled_speed(path, speed)) if device.type == "cpu" else cached
            return _now[path]
    result = _measure(device)
    if cached is not None:
        result = _best_of(cached, result)
    result = with_host_scales(result)
    if cache:
        _forget_spot_checks(path)  # they were readings against the rates this probe replaces
    # Kept even when the machine was busy: probing again at every start would cost seconds each
    # time; the spot check above, or `ptp probe`, replaces it.
    _now[path] = result
    if cache:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                json.dump(asdict(result), f)
        except OSError:
            pass  # a read-only home: measure again next time
    return result


def _pooled_speed(path: str, speed: float) -> float:
    """The median of this spot check's ``speed`` and the latest earlier ones of the cache at ``path``
    within :data:`SPOT_MEMORY_S` (kept beside it), this one added."""
    spots, now = path + ".spots", time.time()
    try:
        with open(spots) as f:
            readings = [(float(t), float(v)) for t, v in json.load(f) if 0.0 <= now - float(t) < SPOT_MEMORY_S]
    except (OSError, ValueError, TypeError):
        readings = []
    readings = (readings + [(now, speed)])[-_SPOT_POOL:]
    try:
        with open(spots, "w") as f:
            json.dump(readings, f)
    except OSError:
        pass  # an unwritable cache: this reading alone
    return statistics.median(v for _, v in readings)


def _forget_spot_checks(path: str) -> None:
    try:
        os.remove(path + ".spots")
    except OSError:
        pass


def _read(path: str) -> ProbeResult | None:
    try:
        with open(path) as f:
            return ProbeResult(**json.load(f))
    except (OSError, TypeError, ValueError):
        return None


def _speed_now(cached: ProbeResult, device: torch.device) -> float:
    """How fast one fp32 GEMM runs now against ``cached``'s rate for it (1.0: nothing to compare)."""
    rate = cached.gemm_tflops.get("fp32", {}).get(str(_SPOT_SIZE))
    if not rate:
        return 1.0  # a cache written by another version of the probe
    n = _SPOT_SIZE
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    # The best of three readings: a process's first ones ran 10-25% slow on a 2-core VM (its
    # threads waking up), and a fit runs warm.
    seconds = min(_gemm_seconds(a, b, device) for _ in range(_SPOT_READINGS))
    return 2 * n**3 / seconds / 1e12 / rate


def _parts_faster_now(cached: ProbeResult, device: torch.device) -> bool:
    """Whether a CPU now runs the skinny GEMM or the 32 MB copy :data:`SPOT_CHECK_FASTER` times
    faster than ``cached`` says (about 80 ms on a 2-thread VM: 30 the GEMM, 50 the copy and its pages).

    The probe takes its readings one after another over two seconds, and a machine busy for part
    of them leaves some rates slow and others right: a 2-thread EPYC VM's cache held a square GEMM
    at 0.87 of its rate, a skinny one at 0.25 and the copy at 0.49 (its predicted steps up to 3.7x
    too long), and the square GEMM's spot check alone let it stand."""
    if device.type != "cpu":
        return False
    skinny = cached.gemm_tflops.get("fp32", {}).get(_SKINNY)
    if skinny:
        m, n, k = _SKINNY_SHAPE
        seconds = _gemm_seconds(torch.randn(m, k), torch.randn(k, n), device)
        if 2 * m * n * k / seconds / 1e12 > SPOT_CHECK_FASTER * skinny:
            return True
    if not cached.copy_gbps:
        return False
    return _copy_gbps(_COPY_ELEMENTS, device, _SPOT_READINGS) > SPOT_CHECK_FASTER * cached.copy_gbps


def at_speed(result: ProbeResult, speed: float) -> ProbeResult:
    """``result`` as a machine running at ``speed`` times its pace would measure it (every rate
    times ``speed``, every time per op over it); ``speed`` is taken between :data:`SLOWEST_NOW`
    and 1: a faster machine is probed again instead.

    >>> r = ProbeResult("cpu", "t", 2, {"fp32": {"256": 0.08}}, 20.0, 8e-6, 2e-5, 1.0, 80.0)
    >>> slowed = at_speed(r, 0.8)
    >>> round(slowed.gemm_tflops["fp32"]["256"], 3), round(slowed.copy_gbps, 1), round(slowed.small_op_s * 1e6, 1)
    (0.064, 16.0, 10.0)
    >>> at_speed(r, 0.1).copy_gbps, at_speed(r, 1.1) is r
    (10.0, True)
    """
    speed = max(SLOWEST_NOW, speed)
    if speed >= 1.0:
        return result
    return replace(result, gemm_tflops={k: {size: rate * speed for size, rate in rates.items()}
                                        for k, rates in result.gemm_tflops.items()},
                   copy_gbps=result.copy_gbps * speed, cache_copy_gbps=result.cache_copy_gbps * speed,
                   small_op_s=result.small_op_s / speed, autograd_op_s=result.autograd_op_s / speed,
                   element_s={name: s / speed for name, s in result.element_s.items()},
                   fault_s_per_byte=result.fault_s_per_byte / speed, stream_copy_gbps=result.stream_copy_gbps * speed,
                   llc_copy_gbps=result.llc_copy_gbps * speed,
                   attention_s={name: s / speed for name, s in result.attention_s.items()},
                   conv_s={name: s / speed for name, s in result.conv_s.items()},
                   gemm_fallback_tflops={k: {layout: rate * speed for layout, rate in rates.items()}
                                         for k, rates in result.gemm_fallback_tflops.items()},
                   reference_step_s={phase: s / speed for phase, s in result.reference_step_s.items()})


def _best_of(old: ProbeResult, new: ProbeResult) -> ProbeResult:
    """Each rate's faster reading of two probes of one device (the slower one measured its neighbours)."""
    gemm = {key: {size: max(rate, old.gemm_tflops.get(key, {}).get(size, 0.0)) for size, rate in rates.items()}
            for key, rates in new.gemm_tflops.items()}
    return replace(new, gemm_tflops=gemm, copy_gbps=max(old.copy_gbps, new.copy_gbps),
                   cache_copy_gbps=max(old.cache_copy_gbps, new.cache_copy_gbps),
                   small_op_s=min(old.small_op_s, new.small_op_s),
                   autograd_op_s=min(old.autograd_op_s, new.autograd_op_s),
                   element_s={name: min(s, old.element_s.get(name, s)) for name, s in new.element_s.items()},
                   fault_s_per_byte=min(old.fault_s_per_byte, new.fault_s_per_byte) if old.fault_s_per_byte
                   else new.fault_s_per_byte, stream_copy_gbps=max(old.stream_copy_gbps, new.stream_copy_gbps),
                   llc_copy_gbps=max(old.llc_copy_gbps, new.llc_copy_gbps),
                   gemm_transposed_tflops={key: max(rate, old.gemm_transposed_tflops.get(key, 0.0))
                                           for key, rate in new.gemm_transposed_tflops.items()},
                   attention_s={name: min(s, old.attention_s.get(name, s)) for name, s in new.attention_s.items()},
                   conv_s={name: min(s, old.conv_s.get(name, s)) for name, s in new.conv_s.items()},
                   gemm_fallback_tflops={k: {layout: max(rate, old.gemm_fallback_tflops.get(k, {}).get(layout, 0.0))
                                             for layout, rate in rates.items()}
                                         for k, rates in new.gemm_fallback_tflops.items()},
                   reference_step_s={phase: min(s, old.reference_step_s.get(phase, s))
                                     for phase, s in new.reference_step_s.items()})


def _best_rate(result: ProbeResult, dtype: str) -> float:
    return max(result.gemm_tflops.get(dtype, {"0": 0.0}).values())


def cpu_spec(result: ProbeResult) -> DeviceSpec:
    """A DeviceSpec for the probed CPU: measured GEMM rates stand in for peaks."""
    peaks = {k: _best_rate(result, k) for k in _DTYPES if _best_rate(result, k) > 0}
    # A step's tensors of 4 MB and more stream from memory (see _stream_copy_gbps); smaller ones
    # run at the in-cache rate (cpu_coefficients), or at the last-level cache's in a step whose
    # memory outgrows the caches (predict.in_step_caches).
    return DeviceSpec(
        key="cpu", name=result.device_name, arch="cpu", sm_count=max(1, result.threads), memory_gb=1.0,
        memory_bw_gbs=result.stream_copy_gbps or result.copy_gbps, l2_mb=1.0, peak_tflops=peaks,
        sources=(f"measured by ptp_callback.probe in {result.probe_s:.2f}s with torch {result.torch_version}",),
    )


# A CPU's convolutions (oneDNN) by kernel family, direction and dtype: their implicit GEMMs at a
# fraction of the probed GEMM peak (above 1: faster than the probe's three GEMM shapes), a strided
# one's slower (``CPU_CONV_STRIDED``), plus passes over their tensors at the probed rate beyond the
# caches (``CPU_CONV_BYTE_PASSES`` over the activations and gradients, ``CPU_CONV_WEIGHT_PASSES``
# over the weights: the reorders between NCHW and the blocked layouts oneDNN computes in, a bf16
# weight gradient's conversions) and a fixed cost per call (``CPU_CONV_CALL_OPS``, in small ops).
# Fitted on 80 random dense and 1x1 convolutions (3-512 channels, 2x2 to 64x64 maps, filters of
# 1-7, strides 1 and 2), forward and backward, fp32 and bf16 (autocast's), on a 2-thread Xeon with
# AMX (2026-11-29). On 85 others the median error of fp32 forward, fp32 backward, bf16 forward and
# bf16 backward went from 12%, 31%, 56% and 61% (30 of them, the rule before: one efficiency per
# family and direction) to 5-12%, 11-14%, 12-20% and 10-31%. Grouped ones keep their efficiencies.
_FITTED_CONV_FAMILIES = ("dense", "dense_3x3", "pointwise", "strided_pointwise")
CPU_CONV_EFF = {**{f"conv:{family}:{direction}{half}": eff for family in _FITTED_CONV_FAMILIES
                   for direction, half, eff in (("fwd", "", 1.28), ("bwd", "", 0.96), ("fwd", ":bf16", 1.8),
                                                ("bwd", ":bf16", 2.3))},
                "conv:grouped:fwd": 0.25, "conv:grouped:bwd": 0.3}
CPU_CONV_STRIDED = {"fwd": 0.09, "bwd": 0.49, "fwd:bf16": 0.15, "bwd:bf16": 1.57}
CPU_CONV_BYTE_PASSES = {"fwd": 1.75, "bwd": 2.3, "fwd:bf16": 1.1, "bwd:bf16": 2.0}
CPU_CONV_WEIGHT_PASSES = {"fwd": 3.0, "bwd": 1.3, "fwd:bf16": 2.5, "bwd:bf16": 17.0}
CPU_CONV_CALL_OPS = {"fwd": 26, "bwd": 166, "fwd:bf16": 49, "bwd:bf16": 184}


# A GEMM's or convolution's rate inside a CPU training step, relative to the probe's best-of-three
# on warm operands (kernels.in_step_rate): 1 / 1.13, the median over seven models' steps.
CPU_IN_STEP_GEMM_RATE = 0.885


def cpu_coefficients(result: ProbeResult) -> CostCoefficients:
    """Coefficients for a CPU: rates are measured, so efficiencies are relative to the probe.

    The smallest GEMM dimension at which the rate is half the best comes from the skinny probe; the
    per-op host times from the small-op and tiny forward+backward loops. On a CPU the host and
    the "device" are one thread, so the prediction adds them (``synchronous``). Ops moving under
    4 MB run at the probed in-cache copy bandwidth, a per-parameter optimizer's ops at the 32 MB
    copy's (one parameter's tensors stay cached between them), all others at the rate beyond the
    caches (:func:`cpu_spec`).
    """
    half_dim = {}
    for key, rates in result.gemm_tflops.items():
        best = max(rates.values())
        if _SKINNY in rates:
            # rate = best * d / (d + d0) with d the smallest dimension: d0 from the skinny probe.
            ratio = max(1e-3, min(1.0, rates[_SKINNY] / best))
            half_dim[key] = 64 * (1.0 / ratio - 1.0)
    base = coefficients_for("hopper")
    small = result.small_op_s
    return _host_fitted(result, replace(
        base,
        gemm_eff={"gemm": 1.0, "misaligned": 1.0, "in_step": CPU_IN_STEP_GEMM_RATE},
        # oneDNN's convolutions, relative to the probed GEMM peak, and a fixed cost per call (its
        # primitive lookup and layout reorders: 60 us forward, 120 us backward, 28 and 56 small
        # ops, on a 2-thread Xeon): fitted on 48 random convolutions there, forward and backward
        # (median error 46% -> 14%), checked on 48 others (60% -> 20%).
        conv_eff={"conv": 0.6, **CPU_CONV_EFF},
        attention_eff={"attention": 0.4},
        mem_eff={"elementwise": 0.8, "cast": 0.6, "reduction": 0.6, "norm": 0.4, "batch_norm": 0.6,
                 "batch_norm_native": 0.6, "pool": 0.3, "embedding": 0.3, "optimizer": 0.7, "scaler": 0.5,
                 "conv_dw": 0.3, "conv": 0.3, "gemm": 0.8, "attention": 0.6},
        kernel_floor_s=0.0,
        host_op_s={"forward": result.small_op_s + result.autograd_op_s, "backward": result.autograd_op_s,
                   "optimizer": result.small_op_s},
        host_view_s=result.small_op_s * 0.3,
        host_module_s=result.small_op_s * 2,
        host_param_s={"ptp.optimizer_python": result.small_op_s, "ptp.zero_grad": result.small_op_s * 0.3},
        host_launch_s=0.0,
        launch_latency_s=0.0,
        sync_s=0.0,
        host_step_s=20 * result.small_op_s,
        # The GPU's fitted latencies, per-call host costs and library overheads do not apply to a
        # CPU, whose per-op costs the probe measured.
        latency_s={**{f"conv:{family}:{direction}": calls * small for family in CONV_FAMILIES
                      for direction, calls in (("fwd", 28), ("bwd", 56))},
                   **{f"conv:{family}:{key}": calls * small for family in _FITTED_CONV_FAMILIES
                      for key, calls in CPU_CONV_CALL_OPS.items()},
                   "conv_dw:fwd": 28 * small, "conv_dw:bwd": 56 * small,
                   "conv_dw:wgrad_gemm:per_map": 0.09 * small},
        host_call_s={},
        host_class_s={},
        # oneDNN's depthwise weight gradient beyond its direct kernel (filters wider than 3, inputs too
        # short for the filter) is an im2col and a GEMM per image and channel: about 0.09 small ops each,
        # then 1.75% of the GEMM peak, 0.8% once a column buffer outgrows the core's caches (fitted on
        # 219 random depthwise backward passes on a 2-thread Xeon, 2026-11-25; kernels.depthwise_seconds).
        compute_eff={"conv_dw": 0.2, "conv_dw:fwd": 0.25, "conv_dw:bwd": 0.12,
                     "conv_dw:wgrad_gemm:fits": 0.0175, "conv_dw:wgrad_gemm:spill": 0.008},
        # oneDNN's LSTM layers beyond their GEMMs (kernels.cpu_recurrent_seconds), fitted on 22 LSTMs on
        # a 2-thread Xeon with AMX: each step's gate activations (forward once their probed time,
        # backward 3x), a call's set-up (50 small ops forward, 20 backward), a half-precision step's
        # fixed cost (4 small ops forward, 8 backward); fp32 forward GEMMs ran at 1.2x their time,
        # bf16 backward ones at 1.6x.
        recurrent={"cpu_gate:fwd": 1.0, "cpu_gate:bwd": 3.0, "cpu_setup_s:fwd": 50 * small,
                   "cpu_setup_s:bwd": 20 * small,
                   **{f"cpu_step_s:{direction}:{half}": ops * small for half in ("bf16", "fp16")
                      for direction, ops in (("fwd", 4), ("bwd", 8))},
                   "cpu_gemm_scale:fwd:fp32": 1.2, "cpu_gemm_scale:bwd:bf16": 1.6, "cpu_gemm_scale:bwd:fp16": 1.6},
        source=f"CPU probe: {result.device_name}",
        # Batch norm's GPU penalties for few channels and small feature maps (an SM per channel)
        # are not a CPU's, which splits a channel's rows among its threads; and a CPU's
        # efficiencies are fractions of its own probed bandwidth, not of the H100 the GPU ones are.
        extra={**{k: v for k, v in base.extra.items()
                  if not k.startswith(("batch_norm", "reference_bw_gbs", "reference_sm_count"))},
               "host_scale": 1.0, "gemm_model": "roofline", "gemm_half_rate_dim": half_dim,
               **{f"{name}:{family}:{key}": v for name, table in (("cpu_conv_strided", CPU_CONV_STRIDED),
                                                                   ("cpu_conv_byte_passes", CPU_CONV_BYTE_PASSES),
                                                                   ("cpu_conv_weight_passes", CPU_CONV_WEIGHT_PASSES))
                  for family in _FITTED_CONV_FAMILIES for key, v in table.items()},
               "synchronous": True, "host_speed": host_speed(result.small_op_s, base), "cache_bytes": 4e6,
               "fresh_byte_s": result.fault_s_per_byte,
               "gemm_transposed_speedup": transposed_speedup(result),
               "gemm_fallback": fallback_layouts(result),
               "attention_dtype_slowdown": dtype_slowdowns(result.attention_s),
               "conv_dtype_slowdown": dtype_slowdowns(result.conv_s),
               "cache_bw_gbs": max(result.cache_copy_gbps, result.copy_gbps),
               "reuse_bw_gbs": result.llc_copy_gbps or result.copy_gbps,
               "element_s": {**{alias + half: result.element_s[name + half] for alias, name in ELEMENT_ALIASES.items()
                                for half in ("", ":bf16", ":fp16") if name + half in result.element_s},
                             **result.element_s}},
    ))


def with_host_scales(result: ProbeResult) -> ProbeResult:
    """A CPU probe with its host costs' factors per phase fitted to its reference step (a trace of
    it, about 0.1 s; kept with the probe): see :mod:`~ptp_callback.reference_step`."""
    if not result.reference_step_s:
        return result
    from .reference_step import host_scales

    unfitted = replace(result, reference_host_scales={})
    try:
        scales = host_scales(cpu_coefficients(unfitted), cpu_spec(unfitted), result.reference_step_s)
    except Exception:  # noqa: BLE001 - a trace this torch cannot run leaves the micro-loops' host costs
        return unfitted
    return replace(result, reference_host_scales=scales)


def _host_fitted(result: ProbeResult, coef: CostCoefficients) -> CostCoefficients:
    """``coef`` with each phase's per-op host cost scaled by the probe's fit to its reference step:
    module calls go with the forward's ops, the optimizer's Python per parameter and ``zero_grad``
    with the optimizer's."""
    scales = result.reference_host_scales
    if not scales:
        return coef
    return replace(coef, host_op_s={phase: s * scales.get(phase, 1.0) for phase, s in coef.host_op_s.items()},
                   host_module_s=coef.host_module_s * scales.get("forward", 1.0),
                   host_param_s={name: s * scales.get("optimizer", 1.0) for name, s in coef.host_param_s.items()})


# A transposed operand's rate over the row-major one's below this is the same kernel (fp32: 0.8-1.2x).
_LAYOUT_KERNEL_RATIO = 2.0


def _fallback_dtypes(gemm: dict[str, dict[str, float]]) -> list[str]:
    """The half dtypes this CPU has no matrix instructions for: slower than fp32 at their best GEMM
    rate. PyTorch runs them in fallback kernels of their own, one per operand layout; fp32 and a
    dtype with matrix instructions run every layout in one kernel, whatever a noisy probe read."""
    def best(key: str) -> float:
        return max(gemm.get(key, {"0": 0.0}).values())

    return [key for key in gemm if key != "fp32" and best(key) < best("fp32")]


def transposed_speedup(result: ProbeResult) -> dict[str, float]:
    """Per dtype, how much faster a GEMM with a transposed operand runs than one with both
    row-major (which all the other probed GEMMs are), where the CPU runs them in different kernels:
    PyTorch's fallback for a dtype without matrix instructions (bf16 on an AVX2 EPYC: 21x; a bf16
    MLP's step was predicted at 907 ms with every GEMM at the row-major rate, and took 340 ms)."""
    out = {}
    fallbacks = _fallback_dtypes(result.gemm_tflops)
    for key, rate in result.gemm_transposed_tflops.items():
        row_major = result.gemm_tflops.get(key, {}).get(_SKINNY, 0.0)
        if key in fallbacks and row_major > 0 and rate / row_major >= _LAYOUT_KERNEL_RATIO:
            out[key] = rate / row_major
    return out


def fallback_layouts(result: ProbeResult) -> dict[str, dict[str, float]]:
    """Per dtype that runs PyTorch's fallback GEMM kernels here, the model of each layout's rate
    (FLOP/s; ``kernels.cpu_gemm_rate``): both operands row-major ``row_major * (64 / n) **
    row_major_slope`` (through the probed 64- and 1024-column GEMMs); one transposed
    ``transposed * k / (k + transposed_k0)`` (through the skinny and the k=64 one); a weight
    gradient's ``mn_major``."""
    out = {}
    speedups = transposed_speedup(result)  # where the layouts run different kernels
    for key, layouts in result.gemm_fallback_tflops.items():
        if key not in speedups:
            continue
        rates, transposed = result.gemm_tflops.get(key, {}), result.gemm_transposed_tflops.get(key, 0.0)
        narrow, skinny = layouts.get("row_major_n64", 0.0), rates.get(_SKINNY)
        short = layouts.get("transposed_k64", 0.0)
        if not (narrow and skinny and transposed and short and layouts.get("mn_major")):
            continue
        slope = min(1.0, max(0.0, math.log(narrow / skinny) / math.log(16)))
        q = min(short / transposed, 0.99)  # k=64 against the skinny's k=1024
        k0 = 65536 * (1 - q) / (1024 * q - 64) if q > 1 / 16 else 1e4
        out[key] = {"row_major": narrow * 1e12, "row_major_slope": slope,
                    "transposed": transposed * (1024 + k0) / 1024 * 1e12, "transposed_k0": k0,
                    "mn_major": layouts["mn_major"] * 1e12}
    return out


def dtype_slowdowns(times: dict[str, float]) -> dict[str, float]:
    """Per direction and half-precision dtype (``"bwd:bf16"``), a probed kernel's time over the fp32
    one's (:func:`_attention_seconds`, :func:`_conv_seconds`): a CPU's fused attention or
    convolution in that dtype is priced as in fp32 at this multiple (``kernels._cpu_half_as_fp32``)."""
    return {name: times[name] / times[f"{name.split(':')[0]}:fp32"] for name in times
            if not name.endswith(":fp32") and times.get(f"{name.split(':')[0]}:fp32")}


def host_speed(small_op_s: float, coef: CostCoefficients) -> float:
    """This host's time per small op over that of the host ``coef`` was fitted on (its
    ``reference_small_op_s``): how much slower its per-op and per-batch host work runs."""
    return small_op_s / _reference_small_op_s(coef)


def probed_small_op_s(coef: CostCoefficients) -> float:
    """The probed host's time per small op, from the ``host_speed`` its coefficients keep."""
    return coef.extra["host_speed"] * _reference_small_op_s(coef)


def _reference_small_op_s(coef: CostCoefficients) -> float:
    return coef.extra.get("reference_small_op_s", 10.85e-6)


def refine_with_probe(spec: DeviceSpec, coef: CostCoefficients, result: ProbeResult) -> tuple[DeviceSpec, CostCoefficients]:
    """A GPU's table entry with peaks and bandwidth rescaled to what the probe measured.

    The table's efficiencies stay; each dtype's peak is scaled so that peak x efficiency equals
    the measured 1024^3 GEMM rate relative to what the table predicts for it, bandwidth likewise,
    and the host time per op by the measured small-op time (the table's host is a reference one).
    """
    from .costs import OpCost
    from .predict import gemm_seconds

    peaks = dict(spec.peak_tflops)
    n = _GEMM_SIZES[-1]
    for key, rates in result.gemm_tflops.items():
        measured = rates.get(str(n))  # the square 1024^3 GEMM
        if not measured or key not in peaks:
            continue
        cost = OpCost("gemm", 2.0 * n**3, 3.0 * n * n * _DTYPES[key].itemsize, 1, key, (1, n, n, n))
        predicted_rate = 2.0 * n**3 / gemm_seconds(cost, spec, coef) / 1e12
        peaks[key] = peaks[key] * measured / predicted_rate
    refined = replace(spec, peak_tflops=peaks,
                      memory_bw_gbs=result.copy_gbps / coef.memory_efficiency("elementwise", "fp32"),
                      sources=spec.sources + (f"refined by a probe on {result.device_name}",))
    host = host_speed(result.small_op_s, coef)
    tuned = replace(coef, host_op_s={k: v * host for k, v in coef.host_op_s.items()},
                    host_module_s=coef.host_module_s * host, host_view_s=coef.host_view_s * host,
                    host_step_s=coef.host_step_s * host,
                    host_param_s={k: v * host for k, v in coef.host_param_s.items()})
    return refined, tuned
