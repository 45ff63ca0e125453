"""The whole fit's time: predicted before step one, and remaining time while it runs.

A fit is sanity check + training batches + validation runs + a one-off warm-up, each costed from
its own source: training batches from the step prediction (per micro-batch: forward and backward,
plus the optimizer step once per ``accumulate``), validation batches from the traced validation
step, the warm-up from the measured first-step cost of GPU runs. Once the fit runs, measured times
replace predicted ones class by class of work (:class:`~ptp_callback.calibrate.StepStats`), and the
schedule's exact remaining counts turn them into seconds.

>>> from ptp_callback.schedule import build_schedule
>>> schedule = build_schedule(batches_per_epoch=100, accumulate=1, max_epochs=2, max_steps=None,
...     val_check_batch=100, check_val_every_n_epoch=1, val_batches_per_run=10)
>>> plan = FitPlan(train_batch_s=0.1, optimizer_step_s=0.0, val_batch_s=0.05, warmup_s=1.0)
>>> round(predict_fit(schedule, plan).total_s, 3)   # 200 x 0.1 + 2 x 10 x 0.05 + 1.0 warm-up
22.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .schedule import FitSchedule

# First steps on an H100 (../shared/h100/steps.jsonl, first_step_s - step_s_median) cost between
# 0.0 and 8.6 s extra, median 0.29 s over 48 configurations; first steps under autocast were the
# slow ones. The allowance is that median plus two steady steps, a stated guess, not a fit.
WARMUP_BASE_S = 0.29
WARMUP_STEPS = 2.0


@dataclass(frozen=True)
class FitPlan:
    """Per-unit times the fit prediction multiplies by the schedule's counts.

    ``train_batch_s`` is one micro-batch (forward + backward, and data-loader wait when known);
    ``optimizer_step_s`` one optimizer step; ``val_batch_s`` one validation batch; ``warmup_s`` the
    one-off cost of the first steps (kernel loading, autotuning).
    """

    train_batch_s: float
    optimizer_step_s: float
    val_batch_s: float
    warmup_s: float = 0.0


@dataclass(frozen=True)
class FitPrediction:
    """Seconds of a whole fit and its parts (``None`` parts mean unknown, e.g. an unbounded fit)."""

    total_s: float | None
    train_s: float | None
    val_s: float
    sanity_s: float
    warmup_s: float
    capped_by_max_time: bool = False


def warmup_allowance(step_s: float, on_gpu: bool) -> float:
    """One-off extra seconds of the first steps: measured on GPUs, negligible on a CPU."""
    return WARMUP_BASE_S + WARMUP_STEPS * step_s if on_gpu else WARMUP_STEPS * 0.0


def predict_fit(schedule: FitSchedule, plan: FitPlan, *, batches_done: int | None = None,
                include_sanity: bool = True) -> FitPrediction:
    """Seconds of the fit from ``batches_done`` (default: its start) to its end."""
    done = schedule.start_batch if batches_done is None else batches_done
    remaining = schedule.remaining(done)
    val_batches = remaining.val_batches or 0
    val_s = val_batches * plan.val_batch_s
    sanity_s = (schedule.sanity_batches or 0) * plan.val_batch_s if include_sanity else 0.0
    if remaining.train_batches is None:
        return FitPrediction(None, None, val_s, sanity_s, plan.warmup_s)
    train_s = remaining.train_batches * plan.train_batch_s + (remaining.optimizer_steps or 0) * plan.optimizer_step_s
    if schedule.val_every_s:
        val_s = math.floor(train_s / schedule.val_every_s) * (schedule.val_batches_per_run or 0) * plan.val_batch_s
    total = train_s + val_s + sanity_s + plan.warmup_s
    capped = schedule.max_time_s is not None and total > schedule.max_time_s
    return FitPrediction(min(total, schedule.max_time_s) if capped else total, train_s, val_s, sanity_s,
                         plan.warmup_s, capped)


@dataclass(frozen=True)
class Remaining:
    """What is left of a running fit, and where the estimate comes from."""

    seconds: float | None
    train_batches: int | None
    val_runs: int
    measured: bool  # True once measured batch times drive it, False while it is the prediction


def remaining_time(
    schedule: FitSchedule,
    batches_done: int,
    *,
    batch_s: float,
    val_batch_s: float,
    elapsed_s: float,
    measured: bool,
    val_pending: bool = False,
) -> Remaining:
    """Seconds left after ``batches_done`` training batches, ``batch_s`` per batch including the
    optimizer share, ``val_batch_s`` per validation batch; capped by ``max_time``."""
    work = schedule.remaining(batches_done, val_pending=val_pending)
    if work.train_batches is None:
        return Remaining(None, None, work.val_runs, measured)
    seconds = work.train_batches * batch_s + (work.val_batches or 0) * val_batch_s
    if schedule.val_every_s:
        runs = math.floor(work.train_batches * batch_s / schedule.val_every_s)
        seconds += runs * (schedule.val_batches_per_run or 0) * val_batch_s
    if schedule.max_time_s is not None:
        seconds = min(seconds, max(0.0, schedule.max_time_s - elapsed_s))
    return Remaining(seconds, work.train_batches, work.val_runs, measured)
