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

from typing import TYPE_CHECKING

from .schedule import FitSchedule

if TYPE_CHECKING:
    from .predict import StepPrediction

# Extra seconds of a GPU fit's first steps, from the Lightning fits of ../shared/h100/fits.jsonl
# (H100; first batches and the 2-batch sanity check against steady ones): about 0.2 s for the sanity
# check and 0.1 s for the first training batch, plus 0.7 s and 0.15 s more under autocast. After the
# last batch those fits took another 1.2-1.8 s to reach on_fit_end (loop and loader teardown).
GPU_WARMUP_SANITY_S = (0.2, 0.7)
GPU_WARMUP_TRAIN_S = (0.1, 0.15)
GPU_TEARDOWN_S = 1.5


@dataclass(frozen=True)
class FitPlan:
    """Per-unit times the fit prediction multiplies by the schedule's counts.

    ``train_batch_s`` is one micro-batch (forward + backward, and data-loader wait when known);
    ``optimizer_step_s`` one optimizer step; ``val_batch_s`` one validation batch; ``warmup_s`` the
    one-off costs (the first steps' kernel loading and autotuning, the end's teardown).
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


def plan_fit(
    step: StepPrediction,
    val_step: StepPrediction | None,
    *,
    on_gpu: bool,
    autocast: bool,
    sanity: bool,
    data_wait_s: float = 0.0,
    comm_s: float = 0.0,
) -> FitPlan:
    """Per-unit times of a fit from its predicted training and validation steps.

    A micro-batch costs the step without its optimizer phase plus the data-loader wait; the
    optimizer step (with gradient communication, ``comm_s``) once per optimizer step; on a GPU
    the first steps' warm-up and the end's teardown are measured allowances (see above).
    """
    optimizer_s = step.breakdown["phase"].get("optimizer", 0.0)
    warmup = 0.0
    if on_gpu:
        warmup = GPU_WARMUP_TRAIN_S[0] + autocast * GPU_WARMUP_TRAIN_S[1] + GPU_TEARDOWN_S
        if sanity:
            warmup += GPU_WARMUP_SANITY_S[0] + autocast * GPU_WARMUP_SANITY_S[1]
    return FitPlan(train_batch_s=step.step_s - optimizer_s + data_wait_s, optimizer_step_s=optimizer_s + comm_s,
                   val_batch_s=val_step.step_s if val_step is not None else 0.0, warmup_s=warmup)


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
