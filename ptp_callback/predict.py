"""Trace x device x coefficients -> the time of one training step, on two timelines.

A GPU step is two timelines, not one sum: the host (Python, dispatcher, kernel launch) issues
ops one after another, and each kernel starts no earlier than the host issued it and the device
finished the previous one. Big steps are bound by the device, small ones by the host: this is
why autocast's extra casts make small models *slower* in bf16-mixed than in fp32. A sync point
(GradScaler reading ``found_inf``) makes the host wait for the device. The step ends when both
are done (the measured step ends with a device synchronize).

The device time of each op comes from the per-class cost model of :mod:`kernels`; the host
time from the per-op host costs below. On a CPU target the two timelines are one thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .coefficients import CostCoefficients
from .precision import support_notes
from .kernels import (  # noqa: F401 - re-exported: the cost model's public entry points
    attention_seconds,
    conv_seconds,
    gemm_seconds,
    kernel_seconds,
    peak_flops,
    recurrent_host_seconds,
    wave_seconds,
)
from .tracer import PHASES, OpRecord, Trace

if TYPE_CHECKING:
    from .devices import DeviceSpec


def host_seconds(op: OpRecord, coef: CostCoefficients) -> float:
    """Host time spent issuing one recorded op, with the metadata ops and module calls before it."""
    seconds = op.views * coef.host_view_s + op.module_calls * coef.host_module_s
    if op.params:
        seconds += op.params * coef.host_param_s.get(op.name, 0.0)
    if op.name == "ptp.sync":
        return seconds + coef.sync_s
    if op.cost.kernels == 0:
        return seconds + coef.host_view_s * 2  # allocation, host scalar
    return (seconds + coef.host_op_s.get(op.phase, coef.host_op_s["forward"]) + (op.cost.kernels - 1) * coef.host_launch_s
            + coef.host_class_s.get(op.cost.op_class, 0.0))


def _dtype_notes(trace: Trace, device: DeviceSpec) -> tuple[str, ...]:
    """fp8 math on a device without it (before Ada/Hopper) cannot run at all."""
    if device.arch != "cpu" and not device.peak_tflops.get("fp8") and any(op.cost.dtype == "fp8" for op in trace.ops):
        return (f"{device.name} has no fp8 math (it needs Ada or Hopper): torch._scaled_mm fails there; "
                "its fp8 GEMMs are predicted at the fp16 rate",)
    return ()


def step_host_seconds(trace: Trace, coef: CostCoefficients) -> float:
    """Host time a step spends once, outside any op: the loop's Python, the autograd engine's
    start for ``backward()``, entering and leaving autocast."""
    seconds = 0.0
    if any(op.phase == "backward" for op in trace.ops):
        seconds += coef.host_call_s.get("backward", 0.0)
    if trace.precision.autocast_dtype is not None:
        seconds += coef.host_call_s.get("autocast", 0.0)
    return coef.host_step_s + seconds * coef.extra.get("host_scale", 1.0)


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
    # What the user should know about this prediction: a precision the device cannot run fast,
    # ops the cost model has no rule for, an optimizer that cannot train in this precision. Also
    # in ``notes``; ``print(pred)`` shows them.
    warnings: tuple[str, ...] = ()
    optimizer_state_bytes: float = 0.0  # what the optimizer keeps after the step (a checkpoint saves it)

    @property
    def bound(self) -> str:
        """"host" when issuing ops takes longer than running them, else "device"."""
        return "host" if self.host_s > self.device_s else "device"

    def __str__(self) -> str:
        from .display import format_prediction_table

        return format_prediction_table(self)


def in_step_caches(trace: Trace, coef: CostCoefficients) -> CostCoefficients:
    """A CPU's coefficients for this step: where the step's memory at its peak (parameters, the
    optimizer's state, the most its new tensors hold at once) outgrows the caches the probe sized
    (``extra["cache_bytes"]``), its small tensors are no longer where the probe's 1 MB copy found
    its own (``cache_bw_gbs``): each op writes a block the step last used an op or a layer ago, and
    reads tensors written as long ago. They move at the rate of a copy through the last-level cache
    (``reuse_bw_gbs``). A 2-layer GPT-2 of width 64 on a 2-thread Xeon (2026-11-29): its step's
    products of two 128K-element tensors took 14-19 us each, 8-10 us when run alone on the same
    tensors, and the step 10-11 ms against 6.2 ms priced with the in-cache rate, 7.2 ms with
    the last-level cache's.
    Coefficients without those keys (a GPU's) are returned as they are."""
    extra = coef.extra
    if "cache_bw_gbs" not in extra or "reuse_bw_gbs" not in extra:
        return coef
    peak = trace.param_bytes + trace.optimizer_state_bytes + trace.peak_new_bytes
    if peak <= extra.get("cache_bytes", 0.0):
        return coef
    return replace(coef, extra={**extra, "cache_bw_gbs": min(extra["cache_bw_gbs"], extra["reuse_bw_gbs"])})


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
    coef = in_step_caches(trace, coef)
    unknown = (trace.unknown_ops_note,) if trace.unknown_ops_note else ()
    # What print(pred) shows, as trace_step warned of it: ops priced without a rule, sizes assumed.
    assumed = (trace.taken_largest_note,) if trace.taken_largest_note else ()
    warnings = support_notes(trace.precision, device) + _dtype_notes(trace, device) + unknown + assumed + trace.hazards
    synchronous = bool(coef.extra.get("synchronous", False))
    host = end = step_host_seconds(trace, coef) * corrections.get("host", 1.0)
    dev = 0.0
    host_busy, dev_busy = host, 0.0
    by_phase = dict.fromkeys(PHASES, 0.0)
    by_phase["forward"] = end  # the step's own Python (loop, autocast, backward call) happens on the host
    by_class: dict[str, float] = {"host": end}
    kernel_times: list[float] = []
    # A cuDNN RNN call's host launches its time steps one by one: the machine's host speed scales
    # that, the loop's own (``host_scale``) does not, as it runs inside the call, not in Python.
    launch_factor = corrections.get("host", 1.0)
    host_factor = launch_factor * coef.extra.get("host_scale", 1.0)
    for op in trace.ops:
        h = host_seconds(op, coef) * host_factor
        k = kernel_seconds(op, device, coef) * corrections.get(op.cost.op_class, 1.0)
        paced = recurrent_host_seconds(op, device, coef) * launch_factor
        kernel_times.append(k)
        host_busy += h + paced
        dev_busy += k
        if synchronous:
            host += h + k
            dev = host
        else:
            host += h
            if op.name == "ptp.sync":
                host = max(host, dev)
            if k > 0.0:
                dev = max(max(dev, host + coef.launch_latency_s) + k, host + paced + coef.launch_latency_s)
            host += paced
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
        notes=tuple(trace.mappings) + ((trace.numbers_read_note,) if trace.numbers_read_note else ()) + warnings,
        warnings=warnings,
        optimizer_state_bytes=float(trace.optimizer_state_bytes),
    )
