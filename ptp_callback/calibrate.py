"""Per-op-class corrections from the heaviest ops of a trace, timed in isolation on the real device.

:func:`measure_op_classes` replays the heaviest ops of each class with fresh tensors of the traced
shapes and returns measured / predicted per op class. Those corrections carry over to other
precisions (a GEMM correction learned in bf16 applies to fp32 GEMMs too), which one global factor
cannot do; the precision advice uses them.

Opt-in (``PrecisionTimeCallback(calibrate_ops=True)``): on the H100, timing op classes this way left
launch-bound training 1.09x slower afterwards in one process (1.28x in one of three rounds; see
``benchmarks/calibration_aftereffect.py``), and the run forecaster does not need it -- measured
batches, validation runs and saves replace their predictions as the fit runs. It never uses
``torch.profiler``, which on the H100 left such steps 25-45% slower.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from .predict import kernel_seconds
from .rng import rng_preserved
from .tracer import Trace


# ---------------------------------------------------------------------------------------------------
# per-class corrections from ops timed in isolation

_REPLAYABLE = ("gemm", "conv", "conv_dw", "attention", "elementwise", "cast", "reduction", "norm", "batch_norm",
               "batch_norm_native", "optimizer")


def _materialize(spec: Any, device: torch.device) -> Any:
    from .tracer import TensorSpec

    if isinstance(spec, TensorSpec):
        if spec.dtype.is_floating_point:
            # Positive values: optimizer ops take square roots of second moments; NaNs from
            # negative inputs can take a slow path and would time something training never runs.
            return (torch.rand(spec.shape, device=device) + 0.5).to(spec.dtype)
        if spec.dtype == torch.bool:
            return torch.ones(spec.shape, dtype=torch.bool, device=device)
        return torch.zeros(spec.shape, dtype=spec.dtype, device=device)  # valid indices and labels
    if isinstance(spec, (list, tuple)):
        return type(spec)(_materialize(s, device) for s in spec)
    if isinstance(spec, dict):
        return {k: _materialize(v, device) for k, v in spec.items()}
    return spec


def _time_call(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    if device.type == "cuda":
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()  # the events' elapsed time needs both recorded
        return start.elapsed_time(end) / 1e3 / repeats
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


@rng_preserved()  # its random operands must not move the user's generators (data order, dropout)
def measure_op_classes(
    trace: Trace,
    device_spec: Any,
    coefficients: Any,
    device: torch.device,
    *,
    budget_s: float = 1.0,
    top_per_class: int = 3,
    min_share: float = 0.03,
    max_bytes: int = 2**30,
    host_overhead_s: float = 0.0,
) -> dict[str, float]:
    """Measured / predicted kernel time per op class, from the heaviest ops run in isolation.

    Only classes holding at least ``min_share`` of the predicted device time are measured, at
    most ``top_per_class`` distinct op shapes each, and no op whose tensors exceed ``max_bytes``
    (the fit's memory is the user's). Stops early when ``budget_s`` is spent. Ops that cannot be
    replayed (custom ops, ops needing valid data) are skipped; classes with no measurement get no
    correction. On a CPU a timed call includes dispatching it: ``host_overhead_s`` (the probe's
    per-op time) is taken off, since the prediction counts host time separately.
    """
    predicted = [(op, kernel_seconds(op, device_spec, coefficients)) for op in trace.ops]
    total = sum(t for _op, t in predicted) or 1.0
    per_class: dict[str, list[tuple[Any, float]]] = {}
    for op, t in predicted:
        if op.cost.op_class in _REPLAYABLE and op.replay is not None and t > 0:
            per_class.setdefault(op.cost.op_class, []).append((op, t))
    corrections: dict[str, float] = {}
    deadline = time.perf_counter() + budget_s
    for op_class, ops in sorted(per_class.items(), key=lambda kv: -sum(t for _o, t in kv[1])):
        if sum(t for _o, t in ops) / total < min_share:
            continue
        seen: set[tuple] = set()
        measured_sum = predicted_sum = 0.0
        for op, t in sorted(ops, key=lambda ot: -ot[1]):
            key = (op.name, op.in_shapes, op.in_dtypes)
            if key in seen or op.cost.bytes > max_bytes or time.perf_counter() > deadline:
                continue
            seen.add(key)
            try:
                measured = max(0.0, _replay(op, device) - host_overhead_s)
            except Exception:  # noqa: BLE001 - an op we cannot rebuild is simply not measured
                continue
            if measured > 0 and math.isfinite(measured):
                measured_sum += measured
                predicted_sum += t
            if len(seen) >= top_per_class:
                break
        if predicted_sum > 0:
            corrections[op_class] = measured_sum / predicted_sum
    return corrections


def _replay(op: Any, device: torch.device) -> float:
    namespace, name, overload = op.name.split(".")
    func = getattr(getattr(getattr(torch.ops, namespace), name), overload)
    args, kwargs = _materialize(op.replay, device)
    with torch.no_grad():
        first = _time_call(lambda: func(*args, **kwargs), device, 1)
        repeats = max(1, min(20, int(0.05 / max(first, 1e-6))))
        return _time_call(lambda: func(*args, **kwargs), device, repeats)
