"""Trace x device x coefficients -> the time of one training step, on two timelines.

A GPU step is two timelines, not one sum: the host (Python, dispatcher, kernel launch) issues
ops one after another, and each kernel starts no earlier than the host issued it and the device
finished the previous one. Big steps are bound by the device, small ones by the host: this is
why autocast's extra casts make small models *slower* in bf16-mixed than in fp32. A sync point
(GradScaler reading ``found_inf``) makes the host wait for the device. The step ends when both
are done (the measured step ends with a device synchronize).

Kernel time per op class, on the device's peaks and the class coefficients:

* ``gemm``: wave-quantized tiles (NeuSight-style): CTAs = tiles x split-K, waves = ceil(CTAs/SMs),
  each tile costs ``2*Mt*Nt*(K/split + k_fill)`` FLOPs at the tile's share of peak; the best tile
  and split-K is taken, as cuBLAS heuristics do, and never less than the memory time;
* ``conv``: its implicit GEMMs (forward; data and weight gradients) through the same wave model at
  a convolution efficiency, plus cuDNN's NCHW<->NHWC conversions for tensor-core math;
* ``attention``: FLOPs / (peak x efficiency), the efficiency growing with the key length a query
  block sweeps (halved for causal), dropout in the kernel costing extra;
* everything else: bytes / (bandwidth x class efficiency);
* plus a fixed floor per kernel. On a CPU target the two timelines are one thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .coefficients import CostCoefficients, lookup
from .costs import OpCost
from .tracer import PHASES, OpRecord, Trace

if TYPE_CHECKING:
    from .devices import DeviceSpec

_TILES = {
    # (rows, cols, tile-efficiency key): tensor-core GEMM tiles, and CUDA-core (SIMT) fp32 tiles.
    "tensor": ((128, 256, "large"), (128, 128, "medium"), (64, 128, "small"), (64, 64, "tiny")),
    "simt": ((128, 128, "large"), (128, 64, "medium"), (64, 64, "small"), (32, 32, "tiny")),
}
_SPLITS = (1, 2, 4, 8, 16)


def peak_flops(device: DeviceSpec, dtype: str) -> float:
    """Dense peak FLOP/s for a math dtype; a dtype without a fast path runs at a slower one."""
    for key in {"tf32": ("tf32", "fp32"), "bf16": ("bf16", "fp16", "fp32"), "fp8": ("fp8", "fp16", "bf16"),
                "fp64": ("fp64", "fp32")}.get(dtype, (dtype, "fp32")):
        value = device.peak_tflops.get(key)
        if value:
            return value * 1e12
    raise ValueError(f"device {device.key} has no fp32 peak")


def _bandwidth(device: DeviceSpec) -> float:
    return device.memory_bw_gbs * 1e9


def _memory_seconds(nbytes: float, device: DeviceSpec, coef: CostCoefficients, op_class: str, dtype: str,
                    backward: bool = False) -> float:
    """Seconds to move ``nbytes`` through DRAM at the class's share of the device's bandwidth."""
    return nbytes / (_bandwidth(device) * coef.memory_efficiency(op_class, dtype, backward))


def gemm_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Time of a GEMM op: wave-quantized tiles on a GPU, a measured-rate roofline on a CPU."""
    batch, m, n, k = cost.gemm or (1, 1, 1, 1)
    peak = peak_flops(device, cost.dtype)
    memory = _memory_seconds(cost.bytes, device, coef, "gemm", cost.dtype)
    if coef.extra.get("gemm_model") == "roofline":
        # A CPU: measured rates, falling with the smallest dimension (packing and blocking
        # overheads are amortized over fewer multiply-adds).
        smallest = min(m, n, k)
        half = coef.extra.get("gemm_half_rate_dim", {}).get(cost.dtype, 0.0)
        rate = peak * lookup(coef.gemm_eff, "gemm", cost.dtype, False, 1.0) * smallest / (smallest + half)
        return max(cost.flops / rate, memory)
    if cost.misaligned:
        # Narrow-load fallback kernels: their rate grows with the alignment they can use (16-bit
        # types: align2 kernels ran twice as fast as align1 on the H100); cuBLAS took align1 for
        # every misaligned TF32 GEMM there. A flat fraction of peak, whatever the shape.
        width = max(1, cost.alignment) if cost.dtype in ("bf16", "fp16") else 1
        return max(cost.flops / (peak * lookup(coef.gemm_eff, "misaligned", cost.dtype, False, 0.15) * width), memory)
    return max(wave_seconds(batch, m, n, k, cost.dtype, device, coef), memory)


def wave_seconds(batch: int, m: int, n: int, k: int, dtype: str, device: DeviceSpec, coef: CostCoefficients,
                 scale: float = 1.0) -> float:
    """Wave-quantized time of one ``batch x (m x k) @ (k x n)`` GEMM (see module doc).

    ``scale`` multiplies the efficiency (convolutions run as implicit GEMMs a little less
    efficiently than cuBLAS GEMMs).
    """
    per_sm = peak_flops(device, dtype) * lookup(coef.gemm_eff, "gemm", dtype, False, 0.7) * scale / device.sm_count
    k_fill = lookup(coef.gemm_k_fill, "gemm", dtype, False, 64.0)
    family = "simt" if dtype in ("fp32", "fp64") else "tensor"
    best = math.inf
    for rows, cols, size in _TILES[family]:
        tile_rate = per_sm * coef.gemm_tile_eff[size]
        base_ctas = batch * math.ceil(m / rows) * math.ceil(n / cols)
        for split in _SPLITS:
            if split > 1 and (k / split < 256 or base_ctas >= device.sm_count):
                break
            waves = math.ceil(base_ctas * split / device.sm_count)
            seconds = waves * 2.0 * rows * cols * (k / split + k_fill) / tile_rate
            if split > 1:  # fp32 partial sums written, then read back and reduced
                seconds += _memory_seconds(2.0 * split * batch * m * n * 4, device, coef, "elementwise", "fp32")
            best = min(best, seconds)
    return best


def conv_seconds(cost: OpCost, device: DeviceSpec, coef: CostCoefficients) -> float:
    """A dense convolution: its implicit GEMMs through the wave model at the conv efficiency, plus
    the NCHW<->NHWC conversions of tensor-core math and the bias-gradient reduction."""
    scale = lookup(coef.conv_eff, "conv", cost.dtype, cost.backward, 0.8)
    if cost.gemms and coef.extra.get("gemm_model") != "roofline":
        compute = sum(wave_seconds(b, m, n, k, cost.dtype, device, coef, scale) for b, m, n, k in cost.gemms)
    else:
        compute = cost.flops / (peak_flops(device, cost.dtype) * lookup(coef.gemm_eff, "gemm", cost.dtype, False, 0.7) * scale)
    memory = _memory_seconds(cost.bytes, device, coef, "conv", cost.dtype, cost.backward)
    layout = _memory_seconds(cost.layout_bytes * coef.extra.get("conv_layout_passes", 1.0), device, coef,
                             "elementwise", cost.dtype)
    aux = _memory_seconds(cost.aux_bytes, device, coef, "reduction", cost.dtype)
    return max(compute, memory) + layout + aux


def attention_seconds(op: OpRecord, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Fused attention: FLOPs at a fraction of peak that grows with the keys each query block sweeps."""
    cost = op.cost
    # The third tensor is the value (query, key, value) forward and the key (grad_out, query, key)
    # backward: either way its sequence dimension is the key length.
    key_len = op.in_shapes[2][-2] if len(op.in_shapes) > 2 and len(op.in_shapes[2]) >= 2 else 512
    eff = lookup(coef.attention_eff, "attention", cost.dtype, cost.backward, 0.3)
    swept = key_len / 2 if cost.causal else key_len  # a causal query block sweeps half the keys on average
    fill = coef.extra.get("attention_key_fill", 256.0)
    eff *= swept / (swept + fill)
    seconds = cost.flops * (0.5 if cost.causal else 1.0) / (peak_flops(device, cost.dtype) * eff)
    if cost.dropout:
        seconds *= 1.0 + coef.extra.get("attention_dropout_cost", 0.5)
    return max(seconds, _memory_seconds(cost.bytes, device, coef, "attention", cost.dtype, cost.backward))


def kernel_seconds(op: OpRecord, device: DeviceSpec, coef: CostCoefficients) -> float:
    """Device time of one op's kernels (0 for host-only ops)."""
    cost = op.cost
    if cost.kernels == 0:
        return 0.0
    floor = coef.kernel_floor_s * cost.kernels
    bandwidth = _bandwidth(device)
    if cost.op_class == "gemm" and cost.gemm is not None:
        return floor + gemm_seconds(cost, device, coef)
    if cost.op_class == "conv":
        return floor + conv_seconds(cost, device, coef)
    if cost.op_class == "attention":
        return floor + attention_seconds(op, device, coef)
    efficiency = coef.memory_efficiency(cost.op_class, cost.dtype, cost.backward)
    moved = cost.bytes + cost.aux_bytes
    if moved < coef.extra.get("cache_bytes", 0.0):
        bandwidth = coef.extra["cache_bw_gbs"] * 1e9  # a CPU: small tensors stay in its caches
    return floor + moved / (bandwidth * efficiency)


def host_seconds(op: OpRecord, coef: CostCoefficients) -> float:
    """Host time spent issuing one recorded op, with the metadata ops and module calls before it."""
    seconds = op.views * coef.host_view_s + op.module_calls * coef.host_module_s
    if op.params:
        seconds += op.params * coef.host_param_s.get(op.name, 0.0)
    if op.name == "ptp.sync":
        return seconds + coef.sync_s
    if op.cost.kernels == 0:
        return seconds + coef.host_view_s * 2  # allocation, host scalar
    return seconds + coef.host_op_s.get(op.phase, coef.host_op_s["forward"]) + (op.cost.kernels - 1) * coef.host_launch_s


@dataclass(frozen=True)
class StepPrediction:
    """Predicted time of one optimizer step, with what it is made of.

    ``breakdown["phase"]`` and ``breakdown["class"]`` split ``step_s`` (each op is charged the
    time it adds to the step's end, so the parts sum to ``step_s``); ``host_s`` / ``device_s``
    are the busy times of the two timelines; ``kernel_s`` is each op's device time.
    """

    step_s: float
    breakdown: dict[str, dict[str, float]]
    flops: float
    bytes: float
    ops: list[OpRecord]
    host_s: float
    device_s: float
    device_name: str
    precision: str
    trace_s: float
    kernel_s: list[float] = field(default_factory=list, repr=False)
    notes: tuple[str, ...] = ()

    @property
    def bound(self) -> str:
        """"host" when issuing ops takes longer than running them, else "device"."""
        return "host" if self.host_s > self.device_s else "device"

    def __str__(self) -> str:
        from .display import format_prediction_table

        return format_prediction_table(self)


def simulate(
    trace: Trace,
    device: DeviceSpec,
    coef: CostCoefficients,
    corrections: dict[str, float] | None = None,
) -> StepPrediction:
    """Run the host and device timelines over the trace; on a CPU (coefficients marked
    ``synchronous``) they are one thread.

    ``corrections`` multiply the kernel time of an op class (``{"gemm": 1.1}``) or, under the
    key ``"host"``, all host time: online calibration supplies them.
    """
    corrections = corrections or {}
    synchronous = bool(coef.extra.get("synchronous", False))
    host = end = coef.host_step_s * corrections.get("host", 1.0)
    dev = 0.0
    host_busy, dev_busy = host, 0.0
    by_phase = dict.fromkeys(PHASES, 0.0)
    by_phase["forward"] = end  # the step's own Python (loop, autocast, backward call) happens on the host
    by_class: dict[str, float] = {"host": end}
    kernel_times: list[float] = []
    host_factor = corrections.get("host", 1.0)
    for op in trace.ops:
        h = host_seconds(op, coef) * host_factor
        k = kernel_seconds(op, device, coef) * corrections.get(op.cost.op_class, 1.0)
        kernel_times.append(k)
        host_busy += h
        dev_busy += k
        if synchronous:
            host += h + k
            dev = host
        else:
            host += h
            if op.name == "ptp.sync":
                host = max(host, dev)
            if k > 0.0:
                dev = max(dev, host + coef.launch_latency_s) + k
        new_end = max(host, dev)
        added = new_end - end
        end = new_end
        by_phase[op.phase] = by_phase.get(op.phase, 0.0) + added
        by_class[op.cost.op_class] = by_class.get(op.cost.op_class, 0.0) + added
    return StepPrediction(
        step_s=end,
        breakdown={"phase": by_phase, "class": dict(sorted(by_class.items(), key=lambda kv: -kv[1]))},
        flops=sum(op.cost.flops for op in trace.ops),
        bytes=sum(op.cost.bytes for op in trace.ops),
        ops=trace.ops,
        host_s=host_busy,
        device_s=dev_busy,
        device_name=getattr(device, "name", str(device)),
        precision=trace.precision.label,
        trace_s=trace.trace_s,
        kernel_s=kernel_times,
        notes=trace.mappings,
    )
