"""Device time of one recorded op's kernels, per op class: the fitted per-op cost model.

Every formula works on a device's datasheet peaks (FLOP/s per math dtype, DRAM bandwidth, SM
count) and the class coefficients of :mod:`coefficients`, fitted on per-op H100 timings over
broad shape grids (``benchmarks/fit_coefficients.py``), never on a model:

* ``gemm``: wave-quantized tiles (NeuSight-style): CTAs = tiles x split-K, waves =
  ceil(CTAs / SMs), each tile costs ``2 * Mt * Nt * (K / split + k_fill)`` FLOPs at its share of
  the dtype's peak; the best tile and split-K is taken, as cuBLAS heuristics do (up to 128-way:
  a tiny output over a long K, like a first convolution's weight gradient, fills every SM). A
  tensor-core GEMM whose leading dimensions are not 16-byte aligned runs older narrow-load
  kernels at a fraction of that rate, by alignment (``costs._gemm_alignment``). Never less than
  the memory time. On Hopper and Blackwell an aligned half-precision GEMM instead spreads its
  tiles' work over every SM, with no partial waves, and streams its operands like a copy
  (:func:`streams_tiles`).
* ``conv``: by kernel family and pass. Dense, 1x1 and grouped convolutions are their implicit
  GEMMs (forward; data and weight gradients, ``groups`` GEMMs each) through the wave model at a
  per-family, per-pass efficiency, each pass never faster than its own bytes (only the weight
  gradient splits K: a forward or data-gradient kernel runs its output tiles over the whole
  ``cin * kh * kw`` reduction, so a small output over a long one, like a 7x7 convolution of
  many channels at 7x7 pixels, leaves most SMs idle), plus cuDNN's
  NCHW<->NHWC conversions for tensor-core math (none for a 1x1 stride-1 convolution),
  plus the bias (forward: PyTorch adds it in a pass of its own; backward: one more reduction).
  On Hopper and Blackwell a convolution whose channels fill whole 64-channel tiles runs its
  passes at the GEMM model's rate instead (:func:`runs_as_gemm`), and so does a grouped one
  whose small groups cuDNN packs into whole channel tiles (:func:`packed_groups`).
  ``conv_dw``: depthwise convolutions run CUDA-core kernels whose time follows the multiply-adds
  (``flops`` at a fitted rate) or the bytes, whichever is longer: PyTorch's own kernel, or
  cuDNN's where PyTorch picks it (fp16 3x3 and 5x5, channels-last: :mod:`conv_dispatch`).
* ``attention``: FLOPs at a fraction of peak that grows with the keys a query block sweeps and
  with the head dimension, on the waves of (batch x heads x query blocks) CTAs; causal halves the
  work; dropout in the kernel costs extra.
* ``recurrent``: a cuDNN RNN call is a fixed setup cost and, per layer and direction, one GEMM
  over all time steps for the input projection and then one step after another: each step's
  recurrent GEMM (backward: its data gradient), as one kernel whose few CTAs walk the whole K
  without split-K, and its gates' kernel. Where cuDNN's persistent kernels run the layer, a step
  is never faster than a fixed per-step time on the device; elsewhere the host launches each
  step's kernels, which takes a fixed time per step on the host (:func:`recurrent_host_seconds`):
  the device runs the steps as they come, and work queued before the call runs meanwhile.
  Backward: the same steps plus the input's data gradient and the weight-gradient GEMMs.
* everything else: bytes over bandwidth at the class's efficiency, plus the class's latency; on a
  CPU never less than its elements at the probed time per element of that op, where the probe
  measured one (random numbers, transcendental functions, pooling: ``probe.element_ops``).

Plus a fixed floor per kernel.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from . import grouped_gemm
from .coefficients import CostCoefficients, pick
from .costs import (DTYPE_KEYS, MN_MAJOR_GEMM, ROW_MAJOR_GEMM, STRIDED_CAT, OpCost, conv_pass_flops, fills_channel_tiles,
                    rnn_layer_inputs)

if TYPE_CHECKING:
    from .devices import DeviceSpec
    from .tracer import OpRecord

# Output tiles (rows, cols) a GEMM kernel may use: tensor-core tiles, and CUDA-core (SIMT) fp32
# tiles. A tile's rate relative to the largest follows its area: ``A / (A + a0)`` normalized,
# with ``a0`` (``gemm_tile_eff["tensor"]`` / ``["simt"]``) fitted: smaller tiles re-read their
# operands more often per multiply-add.
_TILES = {
    "tensor": ((128, 256), (256, 128), (128, 128), (256, 64), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64)),
    "simt": ((128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32)),
}
_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
_QUERY_BLOCK = 128  # rows of queries per attention CTA (flash and memory-efficient kernels)


class UnsupportedDtype(ValueError):
    """The device has no way to run this dtype at all (e.g. fp8 GEMMs before Ada/Hopper)."""


def math_dtype(device: DeviceSpec, dtype: str) -> str:
    """The dtype whose peak a math dtype runs at on ``device`` (see :func:`peak_flops`)."""
    peaks = device.peak_tflops
    if peaks.get(dtype):
        return dtype
    if dtype == "tf32":
        return "fp32"  # no TF32 tensor cores (before Ampere): fp32 on CUDA cores
    if dtype == "bf16":
        return "fp32"  # no bf16 tensor cores (before Ampere): emulated, at best the fp32 rate
    if dtype == "fp64":
        return "fp32"
    if dtype == "fp8":
        raise UnsupportedDtype(f"{device.name} has no fp8 math (needs Ada or Hopper)")
    return "fp32"


def peak_flops(device: DeviceSpec, dtype: str) -> float:
    """Dense peak FLOP/s the device reaches for a math dtype (its fallback where it has no fast path)."""
    try:
        key = math_dtype(device, dtype)
    except UnsupportedDtype:
        key = "fp16" if device.peak_tflops.get("fp16") else "fp32"
    value = device.peak_tflops.get(key) or device.peak_tflops.get("fp32")
    if not value:
        raise ValueError(f"device {device.key} has no fp32 peak")
    return value * 1e12


def _family(device: DeviceSpec, dtype: str) -> str:
    """Which coefficients a math dtype uses: those of the dtype it really runs as."""
    try:
        return math_dtype(device, dtype)
    except UnsupportedDtype:
        return "fp16"


def _bandwidth(device: DeviceSpec) -> float:
    return device.memory_bw_gbs * 1e9


def stream_rate(device: DeviceSpec, coef: CostCoefficients, efficiency: float) -> float:
    """Bytes per second of a kernel family that reached ``efficiency`` of the bandwidth of the GPU
    ``coef`` was fitted on (its ``reference_bw_gbs``).

    A kernel that streams like a copy there (the elementwise efficiency or more) is bound by DRAM
    and keeps its share of any GPU's bandwidth. One that reached less was also held back on the
    SMs' side (index arithmetic, too few bytes in flight): its rate is the two limits combined as
    ``1/r^2 = 1/(copy share x bandwidth)^2 + 1/(SM-side rate)^2``, the SM-side rate solved from
    the reference GPU and scaled by the SMs another one has, never by more than its bandwidth. So
    on a GPU with more bandwidth per SM such kernels gain less than a copy does (SqueezeNet's
    step on an H200 against an H100, the same 132 SMs and 1.43x the bandwidth, 2026-11-27: its
    ReLUs and concatenations ran 1.36-1.41x faster, its max pooling and bias-gradient sums
    0.99-1.08x), and on one with less bandwidth per SM, every kernel scales with the bandwidth.
    """
    bandwidth = _bandwidth(device)
    reference = coef.extra.get("reference_bw_gbs", 0.0) * 1e9
    copy_share = coef.mem_eff["elementwise"]
    if not reference or efficiency >= copy_share or bandwidth == reference:
        return bandwidth * efficiency
    sm_side = 1.0 / math.sqrt((efficiency * reference) ** -2 - (copy_share * reference) ** -2)
    scale = min(device.sm_count / coef.extra["reference_sm_count"], bandwidth / reference)
    return ((copy_share * bandwidth) ** -2 + (sm_side * scale) ** -2) ** -0.5


def memory_seconds(nbytes: float, device: DeviceSpec, coef: CostCoefficients, op_class: str, dtype: str,
                   backward: bool = False) -> float:
    """Seconds to move ``nbytes`` through DRAM at the class's share of the device's bandwidth."""
    return nbytes / stream_rate(device, coef, coef.memory_efficiency(op_class, dtype, backward))


def wave_seconds(batch: int, m: int, n: int, k: int, dtype: str, device: DeviceSpec, coef: CostCoefficients,
                 scale: float = 1.0, max_split: int = _SPLITS[-1]) -> float:
    """Wave-quantized time of ``batch`` GEMMs of ``(m x k) @ (k x n)`` (see module doc).

    ``scale`` multiplies the efficiency (convolutions' implicit GEMMs, misaligned kernels);
    ``max_split`` caps the split-K ways a kernel may use.
    """
    if batch == 0:
        return 0.0
    family = _family(device, dtype)
    per_sm = peak_flops(device, dtype) * pick(coef.gemm_eff, ("gemm", family), 0.7) * scale / device.sm_count
    kind = "simt" if family in ("fp32", "fp64") else "tensor"
    candidates = _wave_candidates(batch, m, n, k, kind, device.sm_count, pick(coef.gemm_k_fill, ("gemm", family), 64.0),
                                  coef.gemm_tile_eff.get(kind, 0.0), max_split)
    bandwidth = _bandwidth(device) * coef.memory_efficiency("elementwise", "fp32")
    return min(units / per_sm + split_bytes / bandwidth for units, split_bytes in candidates)


def _tile_rate(rows: int, cols: int, kind: str, a0: float) -> float:
    """A tile's rate relative to the largest tile of its kind (see :data:`_TILES`)."""
    largest = _TILES[kind][0][0] * _TILES[kind][0][1]
    area = rows * cols
    return (area / (area + a0)) / (largest / (largest + a0))


@lru_cache(maxsize=1 << 18)
def _wave_candidates(batch: int, m: int, n: int, k: int, kind: str, sms: int, k_fill: float,
                     a0: float, max_split: int = _SPLITS[-1]) -> tuple[tuple[float, float], ...]:
    """Per tile and split-K choice: the FLOPs one SM runs over all waves (at the tile's relative
    rate), and the bytes of fp32 partial sums a split-K writes and reads back. Cached: the fits
    evaluate the same shapes thousands of times."""
    out = []
    for rows, cols in _TILES[kind]:
        relative = _tile_rate(rows, cols, kind, a0)
        base_ctas = batch * math.ceil(m / rows) * math.ceil(n / cols)
        for split in _SPLITS:
            if split > max_split or split > 1 and (k / split < 256 or base_ctas >= sms):
                break
            waves = math.ceil(base_ctas * split / sms)
            units = waves * 2.0 * rows * cols * (k / split + k_fill) / relative
            out.append((units, 2.0 * split * batch * m * n * 4 if split > 1 else 0.0))
    return tuple(out)


def misaligned_scale(cost: OpCost, coef: CostCoefficients, family: str) -> float:
    """Relative rate of the narrow-load kernels cuBLAS falls back to for a misaligned GEMM."""
    if not cost.misaligned:
        return 1.0
    align = max(1, cost.alignment)
    return pick(coef.gemm_eff, ("misaligned", family, str(align)), 0.2)


def _cpu_rooflines(coef: CostCoefficients) -> bool:
    """Coefficients of a probed CPU: measured-rate rooflines instead of the GPU's wave model."""
    return coef.extra.get("gemm_model") == "roofline"


def in_step_rate(coef: CostCoefficients) -> float:
    """A probed CPU's GEMM and convolution rate inside a training step, relative to the probe's.

    The probe keeps the fastest of three back-to-back runs of one GEMM on the same operands; in a
    step each GEMM reads operands another op left in the last-level cache or in memory, and the
    BLAS threads wake for it. On a 2-thread Xeon (2026-11-27, ``benchmarks/cpu_steps.py``) the
    GEMMs of seven models' steps took 1.04-1.24x (median 1.13) the time their probed rates give.
    Not applied to recurrent layers, whose GEMM scales were fitted on whole layers
    (``recurrent["cpu_gemm_scale:*"]``). A GPU's coefficients have no such factor: 1.
    """
    return coef.gemm_eff.get("in_step", 1.0)


def cpu_gemm_rate(m: int, n: int, k: int, dtype: str, device: DeviceSpec, coef: CostCoefficients,
                  layout: str | None = None) -> float:
    """FLOP/s of a ``(m x k) @ (k x n)`` GEMM on a probed CPU: the measured rate, falling with the
    smallest dimension (packing and blocking overheads are amortized over fewer multiply-adds).

    Where the dtype runs PyTorch's fallback kernels (no matrix instructions for it), each layout is a
    kernel of its own whose rate follows one dimension (``probe.fallback_layouts``): both operands
    row-major, n (no narrower than 64: none was timed); a transposed second operand, k; a weight
    gradient's layout, none. ``layout``: the GEMM's ``OpCost.kernel`` (``None``: a GEMM inside a
    fused kernel, such as oneDNN's LSTM layer, at the smallest dimension's rate)."""
    fallback = coef.extra.get("gemm_fallback", {}).get(dtype)
    if fallback and layout is not None:
        if layout == ROW_MAJOR_GEMM:
            return fallback["row_major"] * (64 / max(n, 64)) ** fallback["row_major_slope"]
        if layout == MN_MAJOR_GEMM:
            return fallback["mn_major"]
        return fallback["transposed"] * k / (k + fallback["transposed_k0"])
    smallest = min(m, n, k)
    half = coef.extra.get("gemm_half_rate_dim", {}).get(dtype, 0.0)
    return peak_flops(device, dtype) * pick(coef.gemm_eff, ("gemm", dtype), 1.0) * smallest / (smallest + half)


def _mn_major_scale(family: str, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Relative rate of a GEMM neither of whose operands runs along K (a weight gradient): Hopper's
    TF32 tensor-core instructions read K-major operands only (``gemm_eff['mn_major:tf32']``)."""
    if family == "tf32" and device.arch == "hopper":
        return pick(coef.gemm_eff, ("mn_major", family), 1.0)
    return 1.0


def gemm_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Time of a GEMM op: wave-quantized tiles on a GPU, a measured-rate roofline on a CPU."""
    batch, m, n, k = cost.gemm or (1, 1, 1, 1)
    # An aligned GEMM streams its operands like a copy; the narrow loads of a misaligned one do not.
    memory = memory_seconds(cost.bytes, device, coef, "gemm" if cost.misaligned else "elementwise", cost.dtype)
    if _cpu_rooflines(coef):
        rate = cpu_gemm_rate(m, n, k, cost.dtype, device, coef, cost.kernel)
        if cost.dtype in coef.extra.get("gemm_fallback", {}):
            # PyTorch's fallback kernels, compute-bound at a few GFLOP/s, run in a step as fast as
            # alone (a bf16 MLP's and a tiny GPT-2's GEMMs on an AVX2 EPYC: 0.90x and 0.82x their
            # time priced with the in-step factor)
            return max(cost.flops / rate, memory)
        if cost.kernel != ROW_MAJOR_GEMM:
            # The probed rates are row-major GEMMs'; a CPU's fallback kernel for a dtype without
            # matrix instructions runs transposed layouts many times faster (probe.transposed_speedup).
            rate *= coef.extra.get("gemm_transposed_speedup", {}).get(cost.dtype, 1.0)
        return max(cost.flops / (rate * in_step_rate(coef)), memory)
    family = _family(device, cost.dtype)
    scale = misaligned_scale(cost, coef, family)
    if cost.kernel == MN_MAJOR_GEMM:
        scale *= _mn_major_scale(family, device, coef)
    if cost.kernel == grouped_gemm.KERNEL and not grouped_gemm.fast_path(cost.dtype, device.arch):
        # PyTorch's fallback: one GEMM per group, each in waves of its own.
        return max(batch * wave_seconds(1, m, n, k, cost.dtype, device, coef, scale), memory)
    if streams_tiles(cost, device, family):
        streamed = memory_seconds(cost.bytes, device, coef, "elementwise", "fp32")
        return max(streamed_seconds(batch, m, n, k, cost.dtype, device, coef), streamed)
    return max(wave_seconds(batch, m, n, k, cost.dtype, device, coef, scale), memory)


# GPUs whose cuBLAS runs aligned half-precision GEMMs as TMA kernels with a persistent tile
# scheduler (``nvjet_sm90_*`` in the H100's profiles), and the dtypes it does so for: its TF32
# GEMMs ran ``sm90_xmma_gemm_*_segment_k_off`` kernels, which fill the SMs wave by wave.
STREAM_K_ARCHS = frozenset(("hopper", "blackwell"))
_STREAMED_DTYPES = frozenset(("bf16", "fp16", "fp8"))


def streams_tiles(cost: OpCost, device: DeviceSpec, family: str) -> bool:
    """Whether a GEMM runs as a Hopper-style kernel that spreads its work over every SM.

    On Hopper and Blackwell, cuBLAS runs a tensor-core GEMM whose operands are 16-byte aligned
    with TMA loads and a persistent (stream-K) scheduler: the K loop of the output tiles is divided
    evenly among all SMs, so there are no partial waves and no split-K partial sums written to
    memory, and the operands stream at the bandwidth a copy gets. TMA needs that alignment, so a
    misaligned GEMM runs the older wave-quantized kernels (``cutlass_75_*_align1`` in the profiles).
    Scored on the GEMMs of the H100's profiled training steps, which no coefficient is fitted on
    (``benchmarks/step_profiles.py --gemms``, 157 half-precision shapes of four workloads), the
    median error per shape went from 32-40% (wave model) to 16% (work over every SM).
    """
    return device.arch in STREAM_K_ARCHS and family in _STREAMED_DTYPES and not cost.misaligned


def streamed_seconds(batch: int, m: int, n: int, k: int, dtype: str, device: DeviceSpec,
                     coef: CostCoefficients) -> float:
    """Time of ``batch`` GEMMs whose tiles' K loops are spread evenly over all SMs (stream-K):
    the FLOPs of the padded output tiles, at the tile's relative rate, over the whole device."""
    if batch == 0:
        return 0.0
    family = _family(device, dtype)
    rate = peak_flops(device, dtype) * pick(coef.gemm_eff, ("gemm", family), 0.7)
    k_fill = pick(coef.gemm_k_fill, ("gemm", family), 64.0)
    a0 = coef.gemm_tile_eff.get("tensor", 0.0)
    best = min(batch * math.ceil(m / rows) * rows * math.ceil(n / cols) * cols / _tile_rate(rows, cols, "tensor", a0)
               for rows, cols in _TILES["tensor"])
    return 2.0 * best * (k + k_fill) / rate


def runs_as_gemm(cost: OpCost, device: DeviceSpec) -> bool:
    """Whether a convolution's passes run at the rate of GEMMs of their implicit shapes.

    On Hopper and Blackwell, an ungrouped tensor-core convolution whose input and output channels
    fill whole 64-channel tiles (:func:`costs.fills_channel_tiles`) ran each pass about as fast as
    cuBLAS runs the same GEMM. In the H100's kernel profiles of VGG-16 (batch 64) and ResNet-18
    (batch 256), whose convolutions but the RGB one have 64 to 512 channels, the half-precision
    passes took (forward, data gradient, weight gradient) 3.3, 2.0-2.4, 2.2-3.0 ms and 1.8-3.0,
    1.5-1.6, 1.5-1.9 ms; the GEMM model says 3.3, 3.2, 3.2 and 2.4, 2.1, 2.0 ms, while the
    efficiencies fitted on the op rows (random channel counts, none a multiple of 64) said 3.7-4.0,
    5.3-6.2, 6.5-7.2 and 2.8-2.9, 3.4-3.8, 4.0-4.4 ms. In TF32 the weight gradient, both of whose
    operands are MN-major, ran at the rate of an MN-major TF32 GEMM (``gemm_eff['mn_major:tf32']``):
    11.7 and 6.0 ms, modelled 9.2 and 5.8 (the op rows' efficiencies: 13.1 and 7.9).
    ``benchmarks/conv_passes.py`` prints these figures. Only H100s were measured; Blackwell is
    taken to run them alike, as it is for GEMMs (:data:`STREAM_K_ARCHS`).
    """
    if device.arch not in STREAM_K_ARCHS or not fills_channel_tiles(cost.dims):
        return False
    return _family(device, cost.dtype) in _CONV_GEMM_DTYPES


# The math dtypes whose channel-filling convolutions run at GEMM rates (TF32 and the half
# precisions: tensor cores; an fp32 convolution without TF32 runs CUDA-core kernels).
_CONV_GEMM_DTYPES = frozenset(("tf32", "bf16", "fp16"))


# Channels of one tile that cuDNN's Hopper grouped-convolution kernels pack whole groups into.
_GROUP_TILE = {"bf16": 64, "fp16": 64, "tf32": 32}


def packed_groups(cost: OpCost, device: DeviceSpec) -> int:
    """How many groups cuDNN packs into one channel tile of a grouped convolution (0: it does not).

    ResNeXt-50's grouped 3x3 convolutions (32 groups of 4, 8, 16 and 32 channels) ran on an H200
    (``profiles_h200_2026-11-27_pm.jsonl``) as one cuDNN kernel per pass, named by the groups it
    packs into a tile: ``_g16_``, ``_g8_``, ``_g4_``, ``_g2_`` in half precision (tiles of 64
    channels), ``_g8_`` to ``_g1_`` in TF32 (32). Such a kernel is an implicit GEMM over the tile's
    block-diagonal weight, zeros included: each stage's forward kernel took about what a dense
    GEMM of that padded reduction takes, where the stages' own multiply-adds (all equal) would
    have them equal. The op rows' grouped rates and cost per group were fitted on random channel
    counts that none of these kernels serve (9, 17, 35 channels a group), run as slower kernels.
    Taken to hold for a group's input and output channels alike dividing the tile, the output
    channels filling whole tiles; a group of other widths keeps the fitted rule.
    """
    if cost.kernel != "grouped" or len(cost.dims) < 7 or device.arch not in STREAM_K_ARCHS:
        return 0
    _n, c_in, c_out, _ip, _op, _kernel, groups = cost.dims[:7]
    tile = _GROUP_TILE.get(_family(device, cost.dtype), 0)
    per_group = c_in // groups
    if not tile or per_group * groups != c_in or c_out != c_in or tile % per_group or c_out % tile:
        return 0
    return tile // per_group


def _packed_gemm(gemm: tuple[int, int, int, int], part: str, packing: int) -> tuple[int, int, int, int]:
    """A pass's implicit GEMM when ``packing`` groups share one tile: fewer, wider GEMMs whose
    block-diagonal weight tile is multiplied whole, zeros included."""
    batch, m, n, k = gemm
    if not batch:
        return gemm
    if part == "wgrad":
        return (max(1, batch // packing), m * packing, n * packing, k)
    return (max(1, batch // packing), m, n * packing, k * packing)


def conv_pass_names(cost: OpCost) -> tuple[str, ...]:
    """The pass each of a convolution's implicit GEMMs runs (``cost.passes``; a record without them:
    the forward, or the backward's data and weight gradients)."""
    return cost.passes or (("dgrad", "wgrad") if cost.backward else ("fwd",))


def conv_pass_seconds(cost: OpCost, gemm: tuple[int, int, int, int], part: str, device: DeviceSpec,
                      coef: CostCoefficients, as_gemm: bool = False) -> float:
    """Math time of one convolution pass (``fwd``, ``dgrad`` or ``wgrad``) of implicit GEMM
    ``gemm``: at the GEMM model's rate when ``as_gemm`` (:func:`runs_as_gemm`), else through the
    wave model at the family's fitted efficiency for the pass."""
    family = _family(device, cost.dtype)
    if as_gemm:
        if family in _STREAMED_DTYPES:
            return streamed_seconds(*gemm, cost.dtype, device, coef)
        scale = _mn_major_scale(family, device, coef) if part == "wgrad" else 1.0
        return wave_seconds(*gemm, cost.dtype, device, coef, scale)
    scale = pick(coef.conv_eff, ("conv", cost.kernel or "dense", part, family), 0.8)
    splits = _SPLITS[-1] if part == "wgrad" else 1
    return wave_seconds(*gemm, cost.dtype, device, coef, scale, splits)


def _cpu_half_as_fp32(coef: CostCoefficients, kind: str, direction: str, dtype: str) -> tuple[str, float]:
    """``("fp32", slowdown)`` for a probed CPU's ``kind`` of kernel (``"attention"``, ``"conv"``) in a
    half-precision ``dtype`` whose time over the fp32 one's the probe measured
    (``coef.extra[f"{kind}_dtype_slowdown"]``, :func:`~ptp_callback.probe.dtype_slowdowns`): the op
    is priced as in fp32 at that multiple. Else ``(dtype, 1.0)``: priced as it is."""
    slowdown = coef.extra.get(f"{kind}_dtype_slowdown", {}).get(f"{direction}:{dtype}") if _cpu_rooflines(coef) else None
    return ("fp32", slowdown) if slowdown else (dtype, 1.0)


def conv_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """A dense, pointwise or grouped convolution (see module doc)."""
    direction = "bwd" if cost.backward else "fwd"
    # A CPU without matrix instructions for a half dtype: oneDNN's kernels for it, at the probed
    # slowdown over fp32's (forward 36-109x on an AVX2 EPYC, backward 2-5x: the half-precision
    # GEMM rate gives neither).
    dtype, slowdown = _cpu_half_as_fp32(coef, "conv", direction, cost.dtype)
    family = _family(device, dtype)
    kind = cost.kernel or "dense"
    conv_bandwidth = stream_rate(device, coef, pick(coef.mem_eff, ("conv", kind, direction), 0.8))
    packing = packed_groups(cost, device)
    if cost.gemms and not _cpu_rooflines(coef):
        # One kernel per pass, each bound by its own GEMM or its own bytes: a backward's data
        # gradient may be compute-bound while its weight gradient streams the activations.
        passes = conv_pass_names(cost)
        pass_bytes = cost.pass_bytes or (cost.bytes / len(cost.gemms),) * len(cost.gemms)
        as_gemm = runs_as_gemm(cost, device)
        gemms = cost.gemms
        if packing:
            as_gemm = True
            gemms = tuple(_packed_gemm(gemm, part, packing) for gemm, part in zip(gemms, passes))
        body = sum(max(conv_pass_seconds(cost, gemm, part, device, coef, as_gemm), nbytes / conv_bandwidth)
                   for gemm, part, nbytes in zip(gemms, passes, pass_bytes))
    else:
        # A CPU's convolution kernels (oneDNN) have an efficiency per family and direction.
        scale = pick(coef.conv_eff, ("conv", kind, direction if _cpu_rooflines(coef) else "fwd", family), 0.8)
        compute = cost.flops * slowdown / (peak_flops(device, dtype) * pick(coef.gemm_eff, ("gemm", family), 0.7)
                                           * scale * in_step_rate(coef))
        byte_passes = pick(coef.extra, ("cpu_conv_byte_passes", kind, direction, family), 0.0)
        if byte_passes and _cpu_rooflines(coef):
            return _onednn_seconds(cost, compute, slowdown, byte_passes, (kind, direction, family), device, coef)
        body = max(compute, cost.bytes / conv_bandwidth)
    passes_of_layout = pick(coef.extra, ("conv_layout_passes", kind, direction, family), 1.0)
    layout = memory_seconds(cost.layout_bytes * passes_of_layout, device, coef, "elementwise", cost.dtype)
    aux = _bias_seconds(cost, device, coef, per_element=True)
    latency = pick(coef.latency_s, ("conv", kind, direction), 0.0)
    if kind == "grouped" and cost.dims and not packing:
        latency += cost.dims[6] * pick(coef.latency_s, ("conv", kind, "per_group"), 0.0)
    return body + layout + aux + latency


def _onednn_seconds(cost: OpCost, compute: float, slowdown: float, byte_passes: float, key: tuple[str, str, str],
                    device: DeviceSpec, coef: CostCoefficients) -> float:
    """A probed CPU's dense or 1x1 convolution (``probe.CPU_CONV_*``): its GEMMs' ``compute``, a stride's
    data gradient slower, passes over the tensors (oneDNN's reorders into and out of its blocked
    layouts, a half dtype's from NCHW among them) and a fixed cost per call; ``key`` is (family,
    direction, dtype family)."""
    strided = bool(cost.dims) and cost.dims[7] > 1
    body = compute * (1.0 + strided * pick(coef.extra, ("cpu_conv_strided", *key), 0.0))
    moved, weights = cost.bytes + cost.layout_bytes, _conv_weight_bytes(cost)
    if slowdown != 1.0:  # a half dtype's fallback kernels: the fp32 call's time at the probed slowdown
        moved, weights = _fp32_bytes(cost.bytes, cost.dtype), _fp32_bytes(weights, cost.dtype)
    weight_passes = pick(coef.extra, ("cpu_conv_weight_passes", *key), byte_passes)
    passes = slowdown * ((moved - weights) * byte_passes + weights * weight_passes) / _bandwidth(device)
    call = pick(coef.latency_s, ("conv", *key), 0.0)
    return body + passes + _bias_seconds(cost, device, coef, per_element=True) + call


def _conv_weight_bytes(cost: OpCost) -> float:
    """Bytes of a convolution's weight (``c_out x c_in / groups x kernel_pixels``, ``costs._conv_dims``)."""
    if len(cost.dims) < 7:
        return 0.0
    _batch, c_in, c_out, _in_pixels, _out_pixels, kernel_pixels, groups = cost.dims[:7]
    return c_out * c_in / max(1, groups) * kernel_pixels * _ITEMSIZE.get(cost.dtype, 4)


def _bias_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients, per_element: bool = False) -> float:
    """A convolution's bias: backward reduces the output gradient once more (a GPU and a CPU
    alike); forward adds it to the output in a pass of its own on a GPU, while CPU kernels fuse it.

    ``per_element``: the pass runs at the fp32 time whatever the dtype. cuDNN's path adds the
    bias with a broadcasting kernel and sums its gradient over (N, H, W), whose index arithmetic,
    not their bytes, bounds them: on the H100 about 0.28e12 elements/s for the add and 0.4e12 for
    the sum in fp32, bf16 and fp16 alike (``benchmarks/conv_bias_rate.py``), and VGG-16's bias
    adds took 3.0 ms of a step in fp32 and 2.8 ms in bf16.
    """
    nbytes = cost.aux_bytes
    if _cpu_rooflines(coef):
        return memory_seconds(nbytes, device, coef, "reduction", cost.dtype) if cost.backward else 0.0
    if per_element:
        nbytes = _fp32_bytes(nbytes, cost.dtype)
    # The passes' own measured rates (``conv_bias`` in ``mem_eff``), not those of the reductions and
    # pointwise ops a refit moves: on the rows those were fitted on, a sum streams at 0.9 of the
    # bandwidth, twice what a bias gradient's sum over (N, H, W) reached.
    return memory_seconds(nbytes, device, coef, "conv_bias", cost.dtype, cost.backward)


# Bytes per element of each dtype key (TF32 math on fp32 storage).
_ITEMSIZE = {**{key: dtype.itemsize for dtype, key in DTYPE_KEYS.items()}, "tf32": 4}


def depthwise_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """A depthwise convolution: CUDA-core multiply-adds or bytes, whichever takes longer, at the
    rates of PyTorch's own kernel or, where PyTorch picks it on a GPU, of cuDNN's."""
    direction = "bwd" if cost.backward else "fwd"
    # The rates are keyed by the kernel (cuDNN) or else by the dtype family (PyTorch's kernel).
    key = "cudnn" if cost.kernel == "depthwise_cudnn" and not _cpu_rooflines(coef) else _family(device, cost.dtype)
    rate = pick(coef.compute_eff, ("conv_dw", direction, key), 0.03) * peak_flops(device, "fp32")
    memory = memory_seconds(cost.bytes, device, coef, "conv_dw", key, cost.backward)
    bias = _bias_seconds(cost, device, coef)
    flops, gemm_weight_grad = cost.flops, 0.0
    if cost.backward and _cpu_rooflines(coef) and _onednn_depthwise_weight_grad_by_gemm(cost.dims):
        # The weight gradient is not the direct kernel's: priced apart, the rest at the direct rate.
        flops = cost.flops - conv_pass_flops(cost.dims)
        gemm_weight_grad = _depthwise_gemm_weight_grad_seconds(cost.dims, device, coef)
    elif cost.backward and key == "cudnn" and cost.dtype == "fp32" and "wgrad" in cost.passes:
        flops = cost.flops - conv_pass_flops(cost.dims)
        gemm_weight_grad = _cudnn_fp32_depthwise_weight_grad_seconds(cost.dims, device, coef)
    return (max(flops / rate, memory) + gemm_weight_grad + bias
            + pick(coef.latency_s, ("conv_dw", direction, key), 0.0))


def _cudnn_fp32_depthwise_weight_grad_seconds(dims: tuple[int, ...], device: DeviceSpec,
                                               coef: CostCoefficients) -> float:
    """cuDNN's weight gradient of an fp32 depthwise convolution (a channels-last one: PyTorch hands
    those to cuDNN in every dtype). Its half-precision passes and its fp32 forward and data gradient
    run specialized depthwise kernels (``conv2d_c1_k1_nhwc``, ``dgrad2d_c1_k1_nhwc``); the fp32
    weight gradient runs grouped implicit-GEMM and direct kernels
    (``wgrad_implicit_gemm_indexed_tf32..._g16``, ``wgrad2d_grouped_direct_kernel``) at about 0.4
    TFLOP/s, a fifteenth of the forward's rate: ConvNeXt-T's 7x7 ones (batch 32, 96-768 channels)
    took 0.27-2.3 ms each on an H200, 17 ms of a 53 ms step (``benchmarks/depthwise_cudnn.py``).
    The kernels are bound by their arithmetic, far below the bandwidth, so the rate is taken
    to hold on any Hopper GPU."""
    share = pick(coef.compute_eff, ("conv_dw", "wgrad", "cudnn", "fp32"), 0.03)
    return conv_pass_flops(dims) / (share * peak_flops(device, "fp32"))


def _onednn_depthwise_weight_grad_by_gemm(dims: tuple[int, ...]) -> bool:
    """Whether oneDNN computes this depthwise weight gradient with its im2col + GEMM fallback: its
    direct kernel takes filters up to 3 wide over inputs whose height holds the filter plus the rows
    a stride skips at the padded start, so 5x5 and 7x7 filters (and 1-D ones over 3), and 3x3 ones
    over 2-row maps (or 3-row ones at stride 2), fall back; 5x3 and 7x1 ones do not (oneDNN's
    verbose log, PyTorch 2.14 on a Xeon). A backward computing only the data gradient (frozen
    weights) is priced as if it computed the weight gradient alone."""
    return len(dims) > 9 and (dims[8] > 3 or dims[9] < 0)


# Beyond this column buffer per image and channel (filter taps x output pixels x 4 bytes) the
# fallback's GEMMs run at less than half their rate (the buffer outgrows a core's L1/L2 share).
_DW_GEMM_COLUMN_BYTES = 64e3


def _depthwise_gemm_weight_grad_seconds(dims: tuple[int, ...], device: DeviceSpec, coef: CostCoefficients) -> float:
    """oneDNN's fallback depthwise weight gradient: per image and channel, one im2col and one small
    GEMM (a fixed cost each, then multiply-adds at a low share of the peak).

    On a 2-thread Xeon over 219 random depthwise backward passes (3x3-7x7, 2x2-56x56 maps, 16-1152
    channels), median error 36% -> 18%, and 14% for those with this fallback; EfficientNet-B0's
    1152-channel 5x5 one over 2x2 maps took 4.6 ms, priced 1.0 ms at one rate by filter size.
    """
    n, c_in, _c_out, _in_px, out_px, kernel = dims[:6]
    spill = kernel * out_px * 4 > _DW_GEMM_COLUMN_BYTES
    share = pick(coef.compute_eff, ("conv_dw", "wgrad_gemm", "spill" if spill else "fits"), 0.01)
    per_map = pick(coef.latency_s, ("conv_dw", "wgrad_gemm", "per_map"), 0.0)
    return n * c_in * per_map + conv_pass_flops(dims) / (share * peak_flops(device, "fp32"))


def attention_seconds(op: OpRecord, device: DeviceSpec, coef: CostCoefficients) -> float:
    """A fused attention kernel (see module doc)."""
    cost = op.cost
    direction = "bwd" if cost.backward else "fwd"
    # A CPU's kernel computes half-precision attention in fp32, at neither the dtype's GEMM rate
    # (120x fp32's without bf16 instructions, 40 times slower than the attention ran) nor fp32's.
    dtype, slowdown = _cpu_half_as_fp32(coef, "attention", direction, cost.dtype)
    family = _family(device, dtype)
    if len(cost.dims) == 7:
        batch, heads, _kv_heads, q_len, key_len, head_dim, _v_dim = cost.dims
    else:  # an attention op recorded by name (a CPU target's kernels): shapes from the record
        q = op.in_shapes[1 if cost.backward else 0] if op.in_shapes else (1, 1, 512, 64)
        batch, heads, q_len, head_dim = (tuple(q) + (1, 1, 512, 64))[:4] if len(q) == 4 else (1, 1, 512, 64)
        key_len = op.in_shapes[2][-2] if len(op.in_shapes) > 2 and len(op.in_shapes[2]) >= 2 else q_len
    eff = pick(coef.attention_eff, ("attention", direction, family), 0.3)
    swept = key_len / 2 if cost.causal else key_len  # a causal query block sweeps half the keys on average
    eff *= swept / (swept + pick(coef.extra, ("attention_key_fill", family), 256.0))
    eff *= head_dim / (head_dim + pick(coef.extra, ("attention_dim_fill", family), 0.0))
    ctas = batch * heads * math.ceil(q_len / _QUERY_BLOCK)
    eff *= ctas / (math.ceil(ctas / device.sm_count) * device.sm_count)
    seconds = cost.flops * (0.5 if cost.causal else 1.0) / (peak_flops(device, dtype) * eff) * slowdown
    if cost.dropout:
        seconds *= 1.0 + pick(coef.extra, ("attention_dropout_cost", direction, family), 0.5)
    memory = memory_seconds(cost.bytes, device, coef, "attention", cost.dtype, cost.backward)
    return max(seconds, memory) + pick(coef.latency_s, ("attention", direction, family), 0.0)


def recurrent_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """A cuDNN RNN call, forward or backward (see module doc)."""
    if _cpu_rooflines(coef):
        return cpu_recurrent_seconds(cost, device, coef)
    gates, _layers, dirs, batch, seq, _inp, hidden, proj = cost.dims
    width = gates * hidden
    recurrent = proj or hidden
    direction = "bwd" if cost.backward else "fwd"
    nbytes = cost.dtype in ("fp32", "tf32") and 4 or 2
    total = 0.0
    if _persistent(cost, device, coef):
        # One kernel runs every step, the weights held on chip, never faster than a fixed time a
        # step (outside these kernels the per-step time is the host's: recurrent_host_seconds).
        floor = pick(coef.recurrent, ("step_s:persistent", direction, _family(device, cost.dtype)), 20e-6)
        per_step = max(floor, wave_seconds(1, batch, width, recurrent, cost.dtype, device, coef))
    else:
        # One step's recurrent GEMM -- forward (batch x recurrent) @ (recurrent x width), backward its
        # data gradient (batch x width) @ (width x recurrent) -- as one kernel of a few CTAs that walk
        # the whole K alone (no split-K: the H100 profiles time 15 us for the TF32 backward's
        # K = 2304 at batch 32), then the step's gates in a kernel of their own.
        n, k = (recurrent, width) if cost.backward else (width, recurrent)
        per_step = wave_seconds(1, batch, n, k, cost.dtype, device, coef, max_split=1) + coef.kernel_floor_s
    weights = width * recurrent * nbytes
    if weights > device.l2_mb * 1e6 * coef.recurrent.get("l2_fraction", 0.5):
        # Each step reads the recurrent weights again (cached in L2 when they fit).
        per_step = max(per_step, memory_seconds(weights, device, coef, "gemm", cost.dtype))
    for layer_input in rnn_layer_inputs(cost.dims):
        steps = seq * per_step
        if cost.backward:
            big = (wave_seconds(1, batch * seq, layer_input, width, cost.dtype, device, coef)
                   + wave_seconds(1, width, layer_input + recurrent, batch * seq, cost.dtype, device, coef))
        else:
            big = wave_seconds(1, batch * seq, width, layer_input, cost.dtype, device, coef)
        total += dirs * (steps + big)
    # cuDNN's per-call setup (descriptors, workspace): measured 1-2 ms per forward+backward, so that a
    # short sequence costs far more per step than a long one.
    setup = pick(coef.latency_s, ("recurrent", direction), 0.0)
    return total + setup


def _persistent(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> bool:
    """Whether cuDNN runs the call's steps in one persistent kernel (small hidden sizes, not bf16)."""
    hidden = cost.dims[6]
    return hidden <= coef.recurrent.get("persistent_max_hidden", 0) and _family(device, cost.dtype) != "bf16"


def recurrent_host_seconds(op: OpRecord, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Host time a cuDNN RNN call spends launching its time steps one after another, per layer and
    direction (0 for other ops, on a CPU, and where the persistent kernels run every step). The
    device runs each step's kernels as they come: a step is never faster than its launch, and
    other ops' kernels queued before the call run while the host is still launching it."""
    cost = op.cost
    if cost.op_class != "recurrent" or len(cost.dims) != 8 or _cpu_rooflines(coef) or _persistent(cost, device, coef):
        return 0.0
    _gates, _layers, dirs, _batch, seq, _inp, _hidden, _proj = cost.dims
    direction = "bwd" if cost.backward else "fwd"
    step = pick(coef.recurrent, ("step_s:standard", direction, _family(device, cost.dtype)), 20e-6)
    return dirs * seq * len(rnn_layer_inputs(cost.dims)) * step


def cpu_recurrent_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """A recurrent layer on a probed CPU (oneDNN's LSTM): per layer and direction, the input
    projection over all steps as one GEMM, then each step's recurrent GEMM at the CPU's GEMM rate
    for its shapes, plus each step's gate arithmetic over its batch x hidden cells (the probed time
    per element of its sigmoids and tanhs, by direction: ``coef.recurrent["cpu_gate"]``), a fixed
    cost per step (``cpu_step_s``, by direction and dtype) and one per call (``cpu_setup_s``);
    backward the data- and weight-gradient GEMMs of both. On a 2-thread Xeon (AMX), over 22 LSTMs
    (1-3 layers, batch 4-128, hidden 64-1024) timed alone, the median error in fp32 was 9% forward
    and 10% backward (17% and 17% without the gates and the set-up); the bf16 backward ran at 1.6x
    its GEMMs' bf16 rate (``cpu_gemm_scale``)."""
    gates, _layers, dirs, batch, seq, _inp, hidden, proj = cost.dims
    width, recurrent = gates * hidden, proj or hidden
    direction = "bwd" if cost.backward else "fwd"

    def gemm(m: int, n: int, k: int) -> float:
        return 2.0 * m * n * k / cpu_gemm_rate(m, n, k, cost.dtype, device, coef)

    step_s = pick(coef.recurrent, ("cpu_step_s", direction, cost.dtype), 0.0)
    step_s += pick(coef.recurrent, ("cpu_gate", direction), 0.0) * batch * hidden * _gate_element_s(gates, coef)
    scale = pick(coef.recurrent, ("cpu_gemm_scale", direction, cost.dtype), 1.0)
    total = 0.0
    for layer_input in rnn_layer_inputs(cost.dims):
        if cost.backward:
            projection = gemm(batch * seq, layer_input, width) + gemm(layer_input, width, batch * seq)
            step = gemm(batch, recurrent, width) + gemm(recurrent, width, batch)
        else:
            projection, step = gemm(batch * seq, width, layer_input), gemm(batch, width, recurrent)
        total += dirs * (scale * (projection + seq * step) + seq * step_s)
    return total + pick(coef.recurrent, ("cpu_setup_s", direction), 0.0)


def _gate_element_s(gates: int, coef: CostCoefficients) -> float:
    """Probed seconds of one hidden cell's gate activations in a step: an LSTM's three sigmoids and
    two tanhs, a GRU's two and one, a plain RNN's one tanh (0 where the probe timed none)."""
    rates = coef.extra.get("element_s", {})
    sigmoids, tanhs = {4: (3, 2), 3: (2, 1)}.get(gates, (0, 1))
    return sigmoids * rates.get("sigmoid", 0.0) + tanhs * rates.get("tanh", 0.0)


def _fp32_bytes(nbytes: float, dtype: str) -> float:
    """``nbytes`` of ``dtype`` elements counted as fp32 ones: a kernel whose time follows its elements."""
    return nbytes * 4 / _ITEMSIZE.get(dtype, 4)


def per_element_bytes(cost: OpCost) -> float:
    """What an fp32 copy of an op's elements moves: the bytes of a kernel whose time follows its
    elements whatever their dtype (a strided ``cat``, ``costs.STRIDED_CAT``), priced at its rate."""
    return _fp32_bytes(cost.bytes + cost.aux_bytes, cost.dtype)


def element_seconds(op: OpRecord, coef: CostCoefficients) -> float:
    """The op's arithmetic where the device measured it per element (a CPU's random numbers and
    transcendental functions, ``coef.extra["element_s"]``; 0 elsewhere): elements x seconds each.

    >>> from dataclasses import replace
    >>> from ptp_callback.coefficients import coefficients_for
    >>> from ptp_callback.costs import OpCost
    >>> from ptp_callback.tracer import OpRecord
    >>> coef = coefficients_for("hopper")
    >>> op = OpRecord("aten.bernoulli_.float", "forward", "", OpCost("elementwise", 0.0, 4e5, 1, "fp32"),
    ...               in_shapes=((100, 1000),), out_shapes=((100, 1000),))
    >>> element_seconds(op, coef), element_seconds(op, replace(coef, extra={"element_s": {"bernoulli_": 1e-8}}))
    (0.0, 0.001)
    """
    rates = coef.extra.get("element_s")
    if not rates:
        return 0.0
    parts = op.name.split(".")
    name = parts[1] if len(parts) > 1 else op.name
    rate = rates.get(name, 0.0)
    if op.cost.dtype in ("bf16", "fp16"):
        # A CPU computes half-precision elements in fp32 (:data:`probe.HALF_ELEMENT_OPS`): the op's own
        # half-precision rate where the probe timed one, else its fp32 one (random numbers are drawn
        # one by one in any dtype).
        rate = rates.get(f"{name}:{op.cost.dtype}") or rate
    if not rate:
        return 0.0
    return rate * max((math.prod(shape) for shape in op.in_shapes + op.out_shapes), default=0)


def kernel_seconds(op: OpRecord, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Device time of one op's kernels (0 for host-only ops), with, on a CPU, the first touch of the
    large outputs it allocates (:func:`first_touch_seconds`)."""
    if op.cost.kernels == 0:
        return 0.0
    return _kernel_seconds(op, device, coef) + first_touch_seconds(op.cost, coef)


def first_touch_seconds(cost: OpCost, coef: CostCoefficients) -> float:
    """A CPU op's newly allocated large outputs (``cost.fresh_bytes``) cost the operating system's
    mapping and zeroing of their pages when first written: the probe's time per byte of a fresh
    64 MB tensor beyond one it already held (``coef.extra["fresh_byte_s"]``, 0 on a GPU, whose
    caching allocator keeps its memory)."""
    return cost.fresh_bytes * coef.extra.get("fresh_byte_s", 0.0)


def _batch_norm_share(cost: OpCost, coef: CostCoefficients, direction: str) -> float:
    """The part of its class's bandwidth a batch norm reaches with its channels and feature maps."""
    if len(cost.dims) < 2:
        return 1.0
    # Per-channel statistics: with few channels the kernels cannot use the whole bandwidth
    # (measured: 16 channels reached 14% of it, 96 channels 66%, 500 or more 90%).
    channels = cost.dims[1]
    share = channels / (channels + pick(coef.extra, (f"{cost.op_class}_channels_half", direction), 0.0))
    if len(cost.dims) > 2:
        # A channel's values lie in runs of one feature map each (NCHW): the small maps of a
        # network's last stages (7x7, 14x14) leave most of every memory transaction unused.
        run = max(1, cost.dims[2])
        share *= run / (run + pick(coef.extra, (f"{cost.op_class}_run_half", direction), 0.0))
    return share


def _kernel_seconds(op: OpRecord, device: DeviceSpec, coef: CostCoefficients) -> float:
    cost = op.cost
    floor = coef.kernel_floor_s * cost.kernels
    if cost.op_class == "gemm" and cost.gemm is not None:
        return floor + gemm_seconds(cost, device, coef)
    if cost.op_class == "conv":
        return floor + conv_seconds(cost, device, coef)
    if cost.op_class == "conv_dw" and cost.dims:
        return floor + depthwise_seconds(cost, device, coef)
    if cost.op_class == "attention":
        return floor + attention_seconds(op, device, coef)
    if cost.op_class == "recurrent" and len(cost.dims) == 8:
        return floor + recurrent_seconds(cost, device, coef)
    direction = "bwd" if cost.backward else "fwd"
    # A kernel family may stream at its own rate: a cast to a smaller dtype faster than one to a
    # larger dtype of the same bytes (H100, 100 MB-1.6 GB: fp32 -> bf16 3.0 TB/s, bf16 -> fp32 1.95).
    efficiency = coef.memory_efficiency(cost.op_class, cost.dtype, cost.backward, cost.kernel)
    if cost.op_class.startswith("batch_norm"):
        efficiency *= _batch_norm_share(cost, coef, direction)
    moved = cost.bytes + cost.aux_bytes
    if cost.kernel == STRIDED_CAT and not _cpu_rooflines(coef):
        moved = per_element_bytes(cost)
    if cost.op_class.startswith("batch_norm") and _cpu_rooflines(coef):
        # A CPU's half-precision batch norm moves its own bytes (the fp32 width it is recorded at
        # is CUDA's: ``costs._ELEMENT_BOUND``); its arithmetic per element is the probe's.
        moved *= _ITEMSIZE.get(cost.dtype, 4) / 4
    if op.phase == "optimizer" and cost.op_class == "elementwise" and "reuse_bw_gbs" in coef.extra:
        # A CPU: a per-parameter optimizer runs its few ops over one parameter's tensors in turn,
        # which stay in the last-level cache between them (a step's other ops stream from memory),
        # but no nearer: each parameter's first op fetches them afresh, however small (AdamW over 100
        # parameters of 256 KB: 119 us each on a 2-thread Xeon, 62 priced at the in-cache rate).
        rate = coef.extra["reuse_bw_gbs"] * 1e9 * efficiency
    elif moved < coef.extra.get("cache_bytes", 0.0):
        rate = coef.extra["cache_bw_gbs"] * 1e9 * efficiency  # a CPU: small tensors stay in its caches
    else:
        rate = stream_rate(device, coef, efficiency)
    latency = pick(coef.latency_s, (cost.op_class, direction), 0.0)
    seconds = max(moved / rate, element_seconds(op, coef))
    if cost.op_class == "norm" and len(cost.dims) == 2:
        # One row per warp or block: many short rows take longer than their bytes.
        seconds = max(seconds, cost.dims[0] * pick(coef.latency_s, ("norm_row", direction), 0.0) / device.sm_count)
    return floor + latency + seconds
