"""Online calibration: what the running fit really spends per batch, and per op class.

Two sources, both cheap and neither touching ``torch.profiler`` (on the H100 a single profiled
step left launch-bound training 25-45% slower for the rest of the process):

* :class:`StepStats` turns hook timestamps into robust per-batch times. The interval between two
  consecutive ``on_train_batch_end`` calls is one training batch including data-loader wait and
  every hook; intervals that contain a validation run have its duration taken out. The first
  ``warmup_batches`` intervals are dropped (first steps were measured 10-50x slower on an H100
  under autocast: cuDNN autotuning, lazy kernel loading), and so is any leading run of intervals
  over twice the median of the rest. The estimate is the mean of the last ``window`` kept intervals:
  a mean, because an ETA multiplies it by a count; windowed, so a drift is followed.
* :func:`measure_op_classes` times the heaviest ops of the trace in isolation on the real device,
  with fresh tensors of the traced shapes, and returns measured/predicted per op class. Those class
  corrections carry over to other precisions (a GEMM correction learned in bf16 applies to fp32
  GEMMs too), which one global factor cannot do.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .predict import kernel_seconds
from .tracer import Trace


@dataclass(frozen=True)
class BatchEstimate:
    """Seconds per training batch: ``mean_s`` over ``samples`` kept intervals (``None`` before any)."""

    mean_s: float | None
    samples: int
    skipped_warmup: int


class StepStats:
    """Robust per-batch and per-validation-run times from hook timestamps (see module doc).

    Feed it ``batch_end(t)`` for every training batch, and ``validation(start, end)`` for every
    validation run inside training; it never reads a clock itself.
    """

    def __init__(self, warmup_batches: int = 3, window: int = 200) -> None:
        self.warmup_batches = warmup_batches
        self.window = window
        self._last_end: float | None = None
        self._excluded = 0.0  # validation seconds inside the current interval
        self._seen = 0
        self._kept: deque[float] = deque(maxlen=window)
        self._early: list[float] = []  # intervals after warm-up, before the warm-up tail is settled
        self._skipped = 0
        self.val_runs: list[tuple[float, int]] = []  # (seconds, batches) per validation run
        self._waits: deque[float] = deque(maxlen=window)

    def batch_start(self, t: float) -> None:
        """The batch is fetched: the time since the previous batch ended was data-loader wait
        (and Lightning's batch transfer), which a faster precision does not shorten."""
        if self._last_end is not None and self._seen >= self.warmup_batches and not self._excluded:
            self._waits.append(max(0.0, t - self._last_end))

    @property
    def data_wait_s(self) -> float | None:
        """Mean data-loader wait per batch after warm-up (``None`` before any)."""
        return sum(self._waits) / len(self._waits) if self._waits else None

    def batch_end(self, t: float) -> None:
        if self._last_end is not None:
            interval = t - self._last_end - self._excluded
            self._seen += 1
            if self._seen <= self.warmup_batches:
                self._skipped += 1
            else:
                self._add(interval)
        self._last_end = t
        self._excluded = 0.0

    def _add(self, interval: float) -> None:
        if self._kept:
            self._kept.append(interval)
            return
        # Still settling: leading intervals far above the typical one are warm-up, not work.
        self._early.append(interval)
        if len(self._early) >= 5:
            typical = statistics.median(self._early[len(self._early) // 2 :])
            while self._early and self._early[0] > 2.0 * typical:
                self._early.pop(0)
                self._skipped += 1
            self._kept.extend(self._early)
            self._early = []

    def validation(self, start: float, end: float, batches: int) -> None:
        """A validation run inside training: its time is not training time."""
        self.val_runs.append((end - start, batches))
        self._excluded += end - start

    @property
    def batches_seen(self) -> int:
        """Intervals seen so far in this process (warm-up included)."""
        return self._seen

    @property
    def batch(self) -> BatchEstimate:
        values = list(self._kept) or self._early
        if not values:
            return BatchEstimate(None, 0, self._skipped)
        return BatchEstimate(sum(values) / len(values), len(values), self._skipped)

    def val_batch_s(self) -> float | None:
        """Seconds per validation batch from completed runs, the first (warm-up) run dropped when
        later ones exist."""
        runs = self.val_runs[1:] if len(self.val_runs) > 1 else self.val_runs
        batches = sum(b for _s, b in runs)
        return sum(s for s, _b in runs) / batches if batches else None

    def state_dict(self) -> dict[str, Any]:
        return {"kept": list(self._kept), "val_runs": list(self.val_runs), "skipped": self._skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._kept = deque(state.get("kept", []), maxlen=self.window)
        self.val_runs = [tuple(r) for r in state.get("val_runs", [])]
        self._skipped = state.get("skipped", 0)
        # The resumed process warms up again: its first intervals are skipped like a fresh one's.
        self._seen = 0
        self._last_end = None


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
