"""The run forecaster: how long a whole fit will take, from a plan and the events of the run.

Framework-free. An adapter (Lightning, Accelerate, a plain loop, the HF ``Trainer``) feeds it
timestamped events as they happen -- fit start and end, sanity check, epoch start and end, each
training batch's start and end, validation runs, checkpoint saves -- and reads back the remaining
seconds, the predicted total and its parts. It never reads a clock itself (tests drive it on
virtual time) and does O(1) work per batch.

Every second between two events is charged to one *kind* of work:

============ ==============================================================================
``ptp``      the callback's own work (tracing, probes), reported with :meth:`own_work`
``startup``  from fit start to the first epoch: framework set-up, loader creation
``sanity``   the sanity check (a few validation batches before training)
``train``    training batches: from one batch's end to the next one's (data wait included)
``warmup``   what the first training batches take beyond the steady batch time
``val``      each validation run: from the batch after which it is due to its last hook
``epoch``    each epoch boundary: epoch-end hooks and the loader's start (worker processes)
``save``     each checkpoint save
``end``      after the last batch: the end of the last epoch, teardown
============ ==============================================================================

Before a kind has been seen, its cost comes from the :class:`RunPlan` (the prediction made
before step one); once seen, its measured cost replaces the prediction for all that is left of
it. Training batches use the mean of the most recent ``window`` steady batches, so the ETA
follows the speed it measures (the same CPU fit can run 30% longer on a busy machine); the first
``warmup_batches`` (and any leading batches over twice the typical one: cuDNN autotuning, lazy
kernel loading) are warm-up, not steady work. A future cost the forecaster knows of is never left
out: the remaining time is each kind's occurrences still to come times its unit cost, minus what
the occurrence in progress has already spent.

>>> from ptp_callback.schedule import build_schedule
>>> s = build_schedule(batches_per_epoch=10, max_epochs=2, max_steps=None, val_check_batch=10,
...                    check_val_every_n_epoch=1, val_batches_per_run=2)
>>> f = RunForecaster(s, RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0, end_s=2.0))
>>> f.fit_start(0.0)
>>> f.remaining_s(0.0)     # 20 batches x 1 + 2 validation runs x (1 + 2 x 0.5) + the end 2
26.0
"""

from __future__ import annotations

import bisect
import math
import statistics
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .run_plan import RunPlan
from .schedule import EPOCH_END, FitSchedule, steps_at
from .time_limit import Ahead, time_to_stop, time_to_stop_at_epoch_ends

__all__ = ["KINDS", "Part", "RunForecaster", "RunPlan"]

KINDS: tuple[str, ...] = ("ptp", "startup", "sanity", "train", "warmup", "val", "epoch", "save", "end")
_DONE_BEFORE_STEP_ONE = ("ptp", "startup", "sanity")


@dataclass(frozen=True)
class Part:
    """One kind of work: what it has cost so far and what is left of it.

    ``unit_s`` is the cost of one occurrence now in use (measured once seen, else predicted) and
    ``measured`` says which; ``left_s`` / ``left_count`` are what the ETA adds for it.
    """

    kind: str
    spent_s: float
    count: int
    left_s: float
    left_count: int | None
    unit_s: float | None
    measured: bool


@dataclass
class _Meter:
    """Seconds charged to one kind: closed occurrences and the one in progress."""

    done: int = 0
    total: float = 0.0
    current: float = 0.0
    values: list[float] = field(default_factory=list)

    def close(self) -> None:
        self.done += 1
        self.total += self.current
        if len(self.values) < 64:
            self.values.append(self.current)
        else:  # keep the first (warm-up) and the most recent
            self.values[32:] = self.values[33:] + [self.current]
        self.current = 0.0

    def add_to_last(self, seconds: float) -> None:
        """Charge ``seconds`` more to the last closed occurrence."""
        self.total += seconds
        self.values[-1] += seconds


# After the batch's cost changed (a backbone unfrozen), the batch time is taken from the batches
# measured at the new cost alone once there are this many of them.
CHANGED_COST_SAMPLES = 10


class _BatchTimes:
    """Steady seconds per training batch: warm-up dropped, then a mean over the latest batches.

    A mean, not a median, because the ETA multiplies it by a count (periodic slow batches are part
    of the work). Over how many of the latest batches is the caller's choice (:meth:`mean_s`): the
    forecaster averages over as many batches as are left to forecast, so that early in a fit the
    whole history is used, and near its end the speed it has now (a host's speed drifts by 10-20%
    over a fit). Cumulative sums keep every query O(1).
    """

    def __init__(self, warmup_batches: int) -> None:
        self.warmup_batches = warmup_batches
        self.cumulative = array("d", [0.0])
        self.early: list[float] = []
        self.warmup: list[float] = []
        self.seen = 0
        self.settled = False
        self.changed_at: int | None = None  # steady samples before the batch's cost last changed
        self._warmup_extra_at_change: float | None = None  # the warm-up's excess, measured at the old cost

    def add(self, seconds: float) -> None:
        self.seen += 1
        if self.seen <= self.warmup_batches:
            self.warmup.append(seconds)
            return
        if not self.settled:
            # Settling: leading batches far above the typical one are still warm-up.
            self.early.append(seconds)
            if len(self.early) < 5:
                return
            typical = statistics.median(self.early[len(self.early) // 2:])
            while self.early and self.early[0] > 2.0 * typical:
                self.warmup.append(self.early.pop(0))
            self.settled = True
            pending, self.early = self.early, []
            for value in pending:
                self.cumulative.append(self.cumulative[-1] + value)
            return
        self.cumulative.append(self.cumulative[-1] + seconds)

    def mean_s(self, last: int | None = None) -> float | None:
        """Mean of the latest ``last`` steady batches (all when ``None``)."""
        n = len(self.cumulative) - 1
        if n == 0:
            return sum(self.early) / len(self.early) if self.early else None
        k = n if last is None else max(1, min(n, last))
        if self.changed_at is not None and n - self.changed_at >= CHANGED_COST_SAMPLES:
            k = min(k, n - self.changed_at)  # enough batches at the new cost: only they say what it is
        return (self.cumulative[-1] - self.cumulative[-1 - k]) / k

    def rescale(self, factor: float) -> None:
        """The batch's cost changes by ``factor`` from the next batch on (other parameters train):
        the batches so far stand for the new cost, scaled, until enough are measured at it. The
        warm-up's excess is time spent at the old cost: it stays as it was measured."""
        if self.seen:
            self._warmup_extra_at_change = self.warmup_extra_s()
        self.cumulative = array("d", (c * factor for c in self.cumulative))
        self.early = [s * factor for s in self.early]
        self.changed_at = len(self.cumulative) - 1 + len(self.early)  # (the early ones settle into it)

    @property
    def samples(self) -> int:
        return len(self.cumulative) - 1 or len(self.early)

    def warmup_extra_s(self) -> float:
        if self._warmup_extra_at_change is not None:
            return self._warmup_extra_at_change
        steady = self.mean_s()
        if steady is None:
            return 0.0
        return max(0.0, sum(self.warmup) - steady * len(self.warmup))


# An occurrence that has run past its expected cost is not over: it is taken to need this share of
# that cost still (a save that took 4.5 s instead of the 3.5 s of the one before it, a slow batch).
OVERRUN_SHARE = 0.2


# An ETA on show is never older than this share of the fit so far (nor than the caller's refresh
# interval): the plan's ETA is replaced by one from measured batches within a fraction of a
# second of the first ones, not after a whole interval, which in a fit of seconds is 10% of it.
REFRESH_SHARE = 0.05


def _count_at(positions: tuple[int, ...], p: int) -> int:
    """How often ``p`` is listed in the sorted ``positions``."""
    return bisect.bisect_right(positions, p) - bisect.bisect_left(positions, p)


def _left_of_occurrence(expected: float, spent: float) -> float:
    """Seconds left of an occurrence expected to take ``expected`` that has run ``spent`` so far."""
    return max(expected - spent, OVERRUN_SHARE * expected if spent > 0 else 0.0)


class RunForecaster:
    """Remaining time of a fit from its schedule, a plan and the events fed to it (see module doc).

    Args:
        schedule: the fit's batches, optimizer steps, validation runs, epochs and time limit.
        plan: the predicted unit costs; ``None`` when nothing could be predicted (then every kind
            is measured, and the ETA appears once training batches have been timed).
        saves: positions after which checkpoint saves happen (:func:`~ptp_callback.checkpoints.save_positions`).
        save_every_s: a time-triggered save interval, if any.
        saves_per_val_run: saves after each validation run of a fit that validates every so many
            seconds (``schedule.val_every_s``), whose runs are counted from the time left.
        warmup_batches: first training batches never used as steady measurements.
        min_window: the fewest latest steady batches the batch time averages (it averages over as
            many as are left to forecast, when more; whole accumulation cycles).
        relayout: for a schedule without an epoch length (a train iterable without ``len``): given
            the batches of the first whole epoch, the schedule and save positions of the fit with
            epochs that long. Called once, at that epoch's end; the fit has an ETA from then on.
        cycle: for a fit that only ``max_time`` ends (no epoch or step limit): the schedule and
            save positions of a few of its epochs, which the walk to the limit's stop repeats.
        time_limit_at_epoch_ends: the ``max_time`` limit is checked at epoch ends only
            (``Timer(interval="epoch")``), not at the end of each training batch.
    """

    def __init__(
        self,
        schedule: FitSchedule,
        plan: RunPlan | None = None,
        *,
        saves: tuple[int, ...] = (),
        save_every_s: float | None = None,
        saves_per_val_run: int = 0,
        warmup_batches: int = 3,
        min_window: int = 50,
        relayout: Callable[[int], tuple[FitSchedule, tuple[int, ...]]] | None = None,
        cycle: tuple[FitSchedule, tuple[int, ...]] | None = None,
        time_limit_at_epoch_ends: bool = False,
    ) -> None:
        self.schedule = schedule
        self.time_limit_at_epoch_ends = time_limit_at_epoch_ends
        self.relayout = relayout
        self.cycle = cycle
        self.plan = plan
        self.saves = tuple(sorted(saves))
        self.save_every_s = save_every_s
        self.saves_per_val_run = saves_per_val_run
        self.batches = _BatchTimes(warmup_batches)
        self.min_window = min_window
        self.meters = {kind: _Meter() for kind in KINDS}
        self.position = self.first_batch = schedule.start_batch  # first_batch: where this fit began
        self.elapsed_before_s = 0.0  # fit seconds of earlier runs (resume)
        self.t0: float | None = None
        self.train_t0: float | None = None
        self.predicted_total_s: float | None = None  # when the plan was set
        self.before_step_one_s: float | None = None  # at the first training batch's start
        self.initial_parts: dict[str, Part] = {}  # what the ETA counted at step one (the report's "predicted")
        self.ended = False
        self._t: float | None = None
        self._last = ""  # the last event
        self._context = "startup"  # where a save interrupted: the kind its aftermath belongs to
        self._val_ended_at = -1  # position whose validation run has ended (its val_end was seen)
        self._val_forks: list[float] = []  # what training batches after validation runs paid for them
        self._val_open = False  # a run's seconds are still being charged (until the next other event)
        self._saves_closed: tuple[int, int] = (-1, 0)  # (position, saves closed there)
        self._save_open = False
        self._epoch_open_at: int | None = None
        self._epoch_closed_at = -1
        self._sanity_val_ends: list[float] = []  # the first ones' times (the loop's work per batch)
        self._sanity_batches = 0  # all of them (a run's fixed part)
        self._prior: dict[str, float] = {}  # unit costs measured by an earlier run (resume)
        self._own_pending = 0.0  # the callback's own seconds inside the interval now running
        self._limit_used_s = 0.0  # of max_time, used by earlier runs (resume)
        self._time_stop_at: int | None = None  # the position at whose batch's end max_time ran out
        self._train_end_t: float | None = None
        self._last_save_t: float | None = None
        # (epoch, factor, save_s): from that epoch a batch costs factor times more, a save save_s more
        self._cost_change: tuple[int, float, float] | None = None

    # ------------------------------------------------------------------------------ set-up
    def set_plan(self, plan: RunPlan | None, now: float | None = None) -> None:
        """Install (or replace) the prediction; ``now`` records the predicted total at that time."""
        self.plan = plan
        if now is not None:
            self.predicted_total_s = self.total_s(now)
            self.initial_parts = self.parts(now)

    # ------------------------------------------------------------------------------ events
    def fit_start(self, t: float, *, limit_used_s: float = 0.0) -> None:
        """The fit begins; ``limit_used_s``: of a ``max_time`` limit, what earlier runs of a
        resumed fit used (known before the plan is made, so that it counts only what is left)."""
        self.t0 = self._t = t
        self._last = "fit_start"
        self._limit_used_s = limit_used_s

    def own_work(self, seconds: float) -> None:
        """The callback spent ``seconds`` of its own since the last event (trace, probes, advice):
        charged to ``ptp``, not to the kind of work the interval otherwise belongs to."""
        self.meters["ptp"].current += max(0.0, seconds)
        self._own_pending += max(0.0, seconds)

    def sanity_start(self, t: float) -> None:
        self._event(t, "sanity_start")

    def sanity_end(self, t: float) -> None:
        self._event(t, "sanity_end")
        self.meters["sanity"].close()
        if self.plan is not None:
            self._refine_with_sanity(self.meters["sanity"].total)

    def train_start(self, t: float, *, limit_used_s: float = 0.0) -> None:
        """Training begins (after the sanity check): a ``max_time`` limit counts from here, less
        ``limit_used_s`` that earlier runs of a resumed fit used."""
        self._event(t, "train_start")
        self.train_t0 = t
        self._limit_used_s = limit_used_s

    def epoch_start(self, t: float) -> None:
        self._event(t, "epoch_start")
        if self.meters["startup"].done == 0:
            self.meters["startup"].close()
        self._epoch_open_at = self.position

    def batch_start(self, t: float) -> None:
        self._event(t, "batch_start")
        if self._epoch_open_at is not None:
            self.meters["epoch"].close()
            self._epoch_closed_at, self._epoch_open_at = self._epoch_open_at, None
        elif self.meters["startup"].done == 0:
            self.meters["startup"].close()
        if self.position == self.first_batch:  # this fit's first batch (the total may be unknown)
            self.before_step_one_s = self.total_s(t)
            if self.plan is not None:
                self.initial_parts = self._predicted_at_step_one(t)

    def batch_end(self, t: float) -> None:
        self._event(t, "batch_end")
        meter = self.meters["train"]
        epoch = self.meters["epoch"]
        steady = self.batches.mean_s() if self._epoch_closed_at == self.position and epoch.done > 1 \
            and self.batches.settled else None  # only at a later epoch's first batch: not every batch
        if steady is not None:
            # A later epoch's first batch pays for its boundary beyond the loader's start: on a CPU
            # the step copies the pages that the epoch's new forked workers map (a GPT-2 step:
            # 1.1 s against 0.17). That excess is the epoch's, as the plan counts it.
            excess = max(0.0, meter.current - steady)
            meter.current -= excess
            epoch.add_to_last(excess)
        elif self._pays_for_a_val_run():
            # Likewise after a validation run inside an epoch whose loader forked new workers (they
            # live until the next run): the excess is the run's, counted apart from a run's unit,
            # which validation runs at an epoch's end (whose excess is the epoch's) share.
            excess = max(0.0, meter.current - (self.batches.mean_s() or meter.current))
            meter.current -= excess
            self.meters["val"].total += excess
            self._val_forks.append(excess)
        self.batches.add(meter.current)
        meter.close()
        self.position += 1
        if not self.time_limit_at_epoch_ends:
            self._check_time_limit(t)  # Lightning's Timer stops the fit at the end of this batch

    def _check_time_limit(self, t: float) -> None:
        left = self._time_limit_left_s(t)
        if left is not None and left <= 1e-9 and self.train_t0 is not None and self._time_stop_at is None:
            self._time_stop_at = self.position

    def _time_limit_left_s(self, t: float) -> float | None:
        """What a ``max_time`` limit leaves at ``t`` (the whole of it before training starts; below 0
        once it has run out; ``None``: no limit)."""
        s = self.schedule
        if s.max_time_s is None:
            return None
        started = self.train_t0 if self.train_t0 is not None else t
        return s.max_time_s - self._limit_used_s - (t - started)

    def _pays_for_a_val_run(self) -> bool:
        """Whether the batch ending now is the first after a validation run inside an epoch, in a
        fit whose plan has such batches pay for the run's new workers (``RunPlan.val_fork_s``)."""
        return (self.plan is not None and self.plan.val_fork_s > 0 and self._val_ended_at == self.position
                and self._epoch_closed_at != self.position and self.batches.settled)

    def _val_forks_left(self) -> int:
        """Validation runs inside an epoch still to be paid for by the training batch after them."""
        if self.plan is None or self.plan.val_fork_s <= 0:
            return 0
        s = self.schedule
        starts = set(s.epoch_starts)
        vals = s.val_after_batches[bisect.bisect_left(s.val_after_batches, self.position):]
        return sum(1 for v in vals if v not in starts and (s.total_batches is None or v < s.total_batches))

    def val_start(self, t: float) -> None:
        self._event(t, "val_start")
        self._val_open = True

    def val_batch_end(self, t: float) -> None:
        """A validation batch ended (the sanity check's refine the plan before step one)."""
        if self._last == "sanity_start":
            self._sanity_batches += 1
            if len(self._sanity_val_ends) < 64:
                self._sanity_val_ends.append(t)

    def val_end(self, t: float) -> None:
        self._event(t, "val_end")
        self._val_ended_at = self.position

    def save_start(self, t: float) -> None:
        self._event(t, "save_start")
        self._save_open = True
        self._last_save_t = t

    def save_end(self, t: float) -> None:
        """The save is written (adapters that cannot see this let the next event close it)."""
        self._event(t, "save_end")

    def epoch_end(self, t: float) -> None:
        self._event(t, "epoch_end")
        if self.time_limit_at_epoch_ends:
            self._check_time_limit(t)
        s = self.schedule
        began = self._epoch_open_at if self._epoch_open_at is not None else self._epoch_closed_at  # its first position
        whole = began >= 0 and (began != self.first_batch or s.start_batch_in_epoch == 0)
        if s.batches_per_epoch is None and self.relayout is not None and whole and self.position > began:
            schedule, saves = self.relayout(self.position - began)
            self.schedule, self.saves, self.relayout = schedule, tuple(sorted(saves)), None

    def continue_with(self, schedule: FitSchedule, saves: tuple[int, ...]) -> None:
        """From an epoch's start on, the rest of the fit is ``schedule`` (starting at the current
        position) with ``saves``: a train loader reloaded with another length changes it."""
        if schedule.start_batch != self.position:
            raise ValueError(f"continue_with: the schedule starts at batch {schedule.start_batch}, "
                             f"the fit is at {self.position}")
        self.schedule, self.saves, self.relayout = schedule, tuple(sorted(saves)), None

    def expect_cost_change(self, epoch: int, factor: float, save_s: float = 0.0) -> None:
        """From the first training batch of ``epoch`` on, a batch will cost ``factor`` times what it
        does now and a checkpoint save ``save_s`` more (``BackboneFinetuning`` unfreezes the
        backbone at an epoch's start: its optimizer state is saved too from then): priced so until
        :meth:`cost_changed` says it happened (or did not)."""
        self._cost_change = (epoch, factor, save_s)

    def epoch_start_position(self, epoch: int) -> int | None:
        """The position of ``epoch``'s first training batch in this fit's layout (``None``: past it)."""
        starts, index = self.schedule.epoch_starts, epoch - self.schedule.start_epoch
        if index < 0:
            return self.schedule.start_batch
        return starts[index] if index < len(starts) else None

    def cost_changed(self, factor: float, save_s: float = 0.0) -> None:
        """From the next training batch on, a batch costs ``factor`` times what it did and a save
        ``save_s`` more: the batches and saves measured so far and the plan's stand for the new
        cost, scaled. (An earlier run's batch, measured at whatever trained then, is dropped: this
        run's batches replace it soon.)"""
        self._cost_change = None
        if save_s:
            saves = self.meters["save"]
            saves.values = [max(0.0, v + save_s) for v in saves.values]
            self._prior.pop("save", None)
            if self.plan is not None:
                first = self.plan.first_save_s
                self.plan = replace(self.plan, save_s=max(0.0, self.plan.save_s + save_s),
                                    first_save_s=None if first is None else max(0.0, first + save_s))
        if factor == 1.0:
            return
        self.batches.rescale(factor)
        self._prior.pop("train", None)
        if self.plan is not None:
            self.plan = replace(self.plan, train_batch_s=self.plan.train_batch_s * factor,
                                optimizer_step_s=self.plan.optimizer_step_s * factor)

    def train_end(self, t: float) -> None:
        self._event(t, "train_end")
        self._train_end_t = t

    def fit_end(self, t: float) -> None:
        self._event(t, "fit_end")
        self.meters["end"].close()
        self.ended = True

    # --------------------------------------------------------------------- charging time
    def _event(self, t: float, name: str) -> None:
        if self._t is None:
            self.t0 = self._t = t
        kind = self._gap_kind(self._last, name)
        self.meters[kind].current += max(0.0, t - self._t - self._own_pending)
        self._own_pending = 0.0
        self._close_finished(name)
        self._t = t
        self._last = name

    def _gap_kind(self, last: str, name: str) -> str:
        """The kind the seconds between the events ``last`` and ``name`` belong to."""
        if last in ("fit_start", "sanity_end", "train_start", ""):
            return "sanity" if name == "sanity_end" else "startup"
        if last == "sanity_start":
            return "sanity"
        if last == "batch_start":
            return "train"
        if last == "batch_end":
            if name == "batch_start":
                return "train"
            if name == "val_start":
                return "val"
            if name in ("save_start", "save_end"):
                return "save"
            if name == "epoch_end":
                return self._epoch_or_end()
            return "end" if name in ("train_end", "fit_end") else "train"
        if last in ("val_start", "val_end"):
            return "val"
        if last == "save_start":
            return "save"
        if last == "save_end":
            return self._context
        if last == "epoch_start":
            return "epoch"
        if last == "epoch_end":
            return "end" if name in ("train_end", "fit_end") else self._epoch_or_end()
        return "end"  # after train_end

    def _epoch_or_end(self) -> str:
        total = self.schedule.total_batches
        return "end" if total is not None and self.position >= total else "epoch"

    def _close_finished(self, name: str) -> None:
        """Close the occurrences that the event ``name`` ends."""
        if self._save_open:
            self.meters["save"].close()
            self._save_open = False
            position, count = self._saves_closed
            self._saves_closed = (self.position, count + 1 if position == self.position else 1)
        if self._val_open and name not in ("val_start", "val_end"):
            self.meters["val"].close()
            self._val_open = False
        if name == "save_start" and self._last not in ("save_start", "save_end"):
            self._context = {"val_end": "val", "epoch_end": self._epoch_or_end()}.get(self._last, "train")

    def _refine_with_sanity(self, sanity_s: float) -> None:
        """Before step one, what the sanity check measured refines the plan (see ``RunPlan``)."""
        plan = self.plan
        assert plan is not None
        # The gap before the last worker's first batch times that worker's start, not the loop.
        ends = self._sanity_val_ends[max(0, plan.sanity_loader_workers - 1):]
        if plan.sanity_calibrates and len(ends) >= 2:
            # The first batch pays the loader's start. The training batches keep their predicted
            # cost: what a validation batch took beyond its prediction is not a training batch's
            # (the quickstart's MLP on a 2-thread EPYC: validation batches 4 ms over, the training
            # batches as predicted; carried over, they put its fit 20% long before step one).
            measured = min(b - a for a, b in zip(ends, ends[1:]))
            if len(ends) == 2 and plan.val_batch_s > 0:
                # One interval (the default two sanity batches) is the second batch, still warming
                # up: a CPU MLP's took 1.6-1.8 ms against 0.7-0.9 ms steady ones and the 0.75-0.86 ms
                # predicted; the EPYC's 13.5-23.4 ms against 12-13 ms steady and 8-9 ms predicted.
                # Between the two estimates, whose errors run opposite ways: their geometric mean.
                measured = math.sqrt(measured * plan.val_batch_s)
            plan = replace(plan, val_batch_s=measured)
        if plan.sanity_calibrates and self._sanity_batches and plan.sanity_loader_workers \
                and not plan.val_workers_persist:
            plan = self._val_run_from_sanity(plan, sanity_s, self._sanity_batches)
        if plan.warmup_per_sanity_excess and plan.sanity_s:
            excess = max(0.0, sanity_s - (plan.sanity_s - plan.sanity_warmup_s))
            plan = replace(plan, warmup_s=plan.warmup_per_sanity_excess * excess)
        self.plan = plan

    @staticmethod
    def _val_run_from_sanity(plan: RunPlan, sanity_s: float, batches: int) -> RunPlan:
        """The sanity check is a short validation run: what it took beyond its batches is what a
        validation run's fixed part takes on this host (its loader's worker start, the loop's
        set-up and teardown, the progress bar's validation bar). It replaces the predicted one, only
        where no GPU warm-up shares those seconds (``sanity_calibrates``). On a 2-core CPU with 2
        workers the prediction (the probe's worker start, 24-42 ms in a fresh process) was a third
        of what each validation run of a fit took beyond its batches (100-125 ms); the sanity check's
        excess was 70-80 ms. A training loader's start at an epoch boundary is not scaled with it:
        without the evaluation loop's set-up it took 30-55 ms there. A loader without workers has
        no start to time: the excess is then the first batches' warm-up, which later runs do not
        pay (a CPU MLP's sanity check: 10 ms beyond its batches; each validation run after it
        under 1 ms), and the run's fixed part stays predicted."""
        return replace(plan, val_run_s=max(0.0, sanity_s - batches * plan.val_batch_s))

    # ---------------------------------------------------------------------- unit costs
    def _unit(self, kind: str) -> tuple[float | None, bool]:
        """Seconds of one (later) occurrence of ``kind``, and whether that is measured."""
        plan = self.plan
        if kind == "train":
            total = self.schedule.total_batches
            horizon = max(self.min_window, total - self.position) if total is not None else None
            within = self._batches_within_time_limit()
            if within is not None:
                horizon = max(self.min_window, min(horizon or within, within))
            if horizon is not None:
                accumulate = max(1, self.schedule.accumulate)
                horizon = -(-horizon // accumulate) * accumulate  # whole accumulation cycles
            measured = self.batches.mean_s(horizon)
            if measured is not None:
                return measured, True
            if "train" in self._prior:
                return self._prior["train"], True
            if plan is None:
                return None, False
            s = self.schedule
            left = (s.total_batches or 0) - self.position
            steps = s.remaining(self.position).optimizer_steps if s.total_steps is not None else None
            share = (steps / left) if steps is not None and left > 0 else 1.0 / max(1, s.accumulate)
            return plan.train_batch_s + share * plan.optimizer_step_s, False
        values = self.meters[kind].values
        if kind == "val" and values:
            runs = values[1:] or values  # the first run after the sanity check may still warm up
            return sum(runs) / len(runs), True
        if kind in ("epoch", "save") and values:
            later = values[1:]
            if later:
                return sum(later) / len(later), True
            first, predicted_later = self._planned(kind, True), self._planned(kind, False)
            return max(0.0, values[0] + predicted_later - first), True  # the measured first, as later ones differ
        if kind in self._prior:
            return self._prior[kind], True
        return self._planned(kind, False), False

    def _batches_within_time_limit(self) -> int | None:
        """About how many batches a ``max_time`` limit leaves at the speed measured so far (the
        batch time then averages over as many of the latest; ``None``: no limit, or nothing measured)."""
        left = self._time_limit_left_s(self._t) if self.train_t0 is not None and self._t is not None else None
        mean = self.batches.mean_s()
        if left is None or not mean:
            return None
        return max(0, int(left / mean))

    def _planned(self, kind: str, first: bool) -> float:
        """The plan's cost of the first or a later occurrence of ``kind`` (0 without a plan)."""
        plan = self.plan
        if plan is None:
            return 0.0
        if kind == "epoch":
            return plan.first_epoch_s if first and plan.first_epoch_s is not None else plan.epoch_s
        if kind == "save":
            return plan.first_save_s if first and plan.first_save_s is not None else plan.save_s
        if kind == "val":
            return plan.val_run_s + (self.schedule.val_batches_per_run or 0) * plan.val_batch_s
        return {"end": plan.end_s, "sanity": plan.sanity_s}.get(kind, 0.0)

    def _first_unit(self, kind: str, unit: float) -> float:
        """The next occurrence's cost when it is the fit's first of its kind (it may differ)."""
        if self.meters[kind].done or kind in self._prior or self.plan is None:
            return unit
        if kind == "train" and self.batches.seen == 0:
            return unit + self.plan.warmup_s  # the first batches' warm-up is still to come
        if kind in ("epoch", "save"):
            return self._planned(kind, True)
        return unit

    # --------------------------------------------------------------------- counts left
    def _in_progress(self) -> str:
        """The kind whose counted occurrence is running now ('' when none is: after ``val_end`` the
        run is over, though its last seconds are still charged to it)."""
        last = self._last
        if last == "val_end":
            return ""
        if last == "batch_end":
            if self._val_due(self.position):
                return "val"
            if self._epoch_ends_here():
                return self._epoch_or_end()
            return "train"
        return self._gap_kind(last, "")

    def _val_due(self, position: int) -> bool:
        vals = self.schedule.val_after_batches
        i = bisect.bisect_left(vals, position)
        return i < len(vals) and vals[i] == position and self._val_ended_at != position

    def _epoch_ends_here(self) -> bool:
        s = self.schedule
        if s.total_batches is not None and self.position >= s.total_batches:
            return True
        starts = s.epoch_starts
        i = bisect.bisect_left(starts, self.position)
        return i < len(starts) and starts[i] == self.position and self.position != self.first_batch

    def _counts_left(self) -> dict[str, float | None]:
        s = self.schedule
        p = self.position
        counts: dict[str, float | None] = {}
        if s.total_batches is None:
            counts["train"] = None
        else:
            counts["train"] = max(0, s.total_batches - p)
        vals, starts = s.val_after_batches, s.epoch_starts
        here = self._due_here({"val": _count_at(vals, p), "save": _count_at(self.saves, p),
                               "epoch": _count_at(starts, p)})
        counts["val"] = len(vals) - bisect.bisect_right(vals, p) + here["val"]
        counts["save"] = len(self.saves) - bisect.bisect_right(self.saves, p) + here["save"]
        counts["epoch"] = len(starts) - bisect.bisect_right(starts, p) + here["epoch"]
        counts["end"] = 0 if self.ended else 1
        sanity_pending = bool(s.sanity_batches) and self.meters["sanity"].done == 0
        counts["sanity"] = 1 if sanity_pending else 0
        return counts

    def _due_here(self, listed: dict[str, int]) -> dict[str, int]:
        """Of the work ``listed`` at the current position (validation runs, saves, epoch starts),
        what is still to come or running there."""
        p = self.position
        running = self._val_running()  # (a run nobody planned may be running)
        saves = self._saves_not_made(listed["save"], p)
        if self._save_open and saves == 0:
            saves = 1  # a save the plan did not foresee is running
        return {"val": int(running or (listed["val"] > 0 and self._val_ended_at != p)), "save": saves,
                "epoch": int(self._epoch_open_at is not None or (listed["epoch"] > 0 and self._epoch_closed_at != p))}

    def _val_running(self) -> bool:
        """Whether a validation run is running now (started, not yet ended)."""
        return self._val_open and self._last != "val_end"

    def _saves_not_made(self, listed: int, position: int) -> int:
        """Of ``listed`` saves at ``position``, those not made yet (the saves closed there are done)."""
        closed_pos, closed = self._saves_closed
        return max(0, listed - (closed if closed_pos == position else 0))

    # -------------------------------------------------------------------------- answers
    def elapsed_s(self, now: float) -> float:
        """Seconds of this fit so far (earlier runs of a resumed fit included; frozen at its end)."""
        if self.ended and self._t is not None:
            now = min(now, self._t)
        return self.elapsed_before_s + (now - self.t0 if self.t0 is not None else 0.0)

    def refresh_due(self, now: float, last_refresh: float, refresh_s: float) -> bool:
        """Whether an ETA computed at ``last_refresh`` is due to be computed again at ``now``: after
        ``refresh_s``, or sooner while the fit is young (:data:`REFRESH_SHARE` of its elapsed time)."""
        return now - last_refresh >= min(refresh_s, REFRESH_SHARE * self.elapsed_s(now))

    def remaining_s(self, now: float) -> float | None:
        """Seconds left in the fit at ``now`` (``None`` when the fit's length is unknown)."""
        parts = self._left(now)
        if parts is None:
            return None
        return sum(parts.values())

    def total_s(self, now: float) -> float | None:
        """The whole fit as it now looks: elapsed plus remaining."""
        left = self.remaining_s(now)
        return None if left is None else self.elapsed_s(now) + left

    def _left(self, now: float) -> dict[str, float] | None:
        if self.ended:
            return dict.fromkeys(KINDS, 0.0)
        s = self.schedule
        counts = self._counts_left()
        current = self._in_progress()
        since = max(0.0, now - self._t) if self._t is not None else 0.0
        train_unit, _ = self._unit("train")
        if counts["train"] is None and s.max_time_s is None:
            return None
        if train_unit is None:
            return None
        left: dict[str, float] = dict.fromkeys(KINDS, 0.0)
        next_left: dict[str, float] = {}  # what the next (or running) occurrence of a kind has left
        for kind in ("train", "val", "epoch", "save", "end", "sanity"):
            count = counts[kind]
            if (count is None or count <= 0) and s.max_time_s is None:
                continue  # (a time limit's walk prices the next occurrence of every kind)
            unit, _measured = self._unit(kind)
            if unit is None:
                continue
            first = self._first_unit(kind, unit)
            # What the next occurrence has taken already: the time since the last event if it is
            # running now, and what it was charged before another kind interrupted it (an epoch's
            # end, then a save, then its start).
            spent = self.meters[kind].current + (since if kind == current else 0.0)
            if kind == "val" and self._val_ended_at == self.position:
                spent = 0.0  # the run is over: its last seconds are not the next run's
            next_left[kind] = _left_of_occurrence(first, spent)
            if count is None or count <= 0:
                continue
            left[kind] = next_left[kind] + (count - 1) * unit
            if kind == "train" and first > unit:  # show the first batches' warm-up apart
                extra = min(left[kind], max(0.0, first - max(spent, unit)))
                left[kind] -= extra
                left["warmup"] = extra
        change_scale = self._expected_change_scale(counts["train"])
        left["train"] *= change_scale
        train_unit *= change_scale
        left["save"] += self._expected_save_change()
        forks = self._val_forks_left()
        if forks:
            measured = self._val_forks
            left["val"] += forks * (sum(measured) / len(measured) if measured else self.plan.val_fork_s)
        if s.val_every_s and counts["train"]:
            runs = math.floor(counts["train"] * train_unit / s.val_every_s)
            left["val"] += runs * self._unit("val")[0]
            left["save"] += runs * self.saves_per_val_run * (self._unit("save")[0] or 0.0)
        if self.save_every_s and counts["train"]:
            saves = self._time_saves_left(left, counts, train_unit, now)
            left["save"] += saves * (self._unit("save")[0] or 0.0)
        if s.max_time_s is not None:
            self._cap_by_max_time(left, now, counts, next_left)
        return left

    def _expected_change_from(self) -> int | None:
        """The position from which the expected cost change (:meth:`expect_cost_change`) applies to
        what is left (``None``: none is expected, or its epoch is past this layout)."""
        start = self.epoch_start_position(self._cost_change[0]) if self._cost_change is not None else None
        return None if start is None else max(start, self.position)

    def _expected_change_scale(self, batches_left: float | None) -> float:
        """The mean cost of the training batches left, as a share of the batch's cost now, with the
        expected cost change in the batches from its epoch on."""
        start = self._expected_change_from()
        if start is None or not batches_left or self.schedule.total_batches is None:
            return 1.0
        after = max(0, self.schedule.total_batches - start)
        return 1.0 + (self._cost_change[1] - 1.0) * min(1.0, after / batches_left)

    def _expected_save_change(self) -> float:
        """Seconds the expected cost change adds to the saves still to come from its epoch on."""
        start = self._expected_change_from()
        if start is None:
            return 0.0
        return self._cost_change[2] * (len(self.saves) - bisect.bisect_right(self.saves, start))

    def _time_saves_left(self, left: dict[str, float], counts: dict[str, float | None], batch_s: float,
                         now: float) -> int:
        """Saves ``ModelCheckpoint(train_time_interval=...)`` will make: it checks at each training
        batch's end whether that much wall time has passed since training started or its last save
        began, so the save itself and the validation runs and epoch ends between count too, and
        each interval ends at a batch's end."""
        every = self.save_every_s
        assert every is not None
        save_s = self._unit("save")[0] or 0.0
        period = every if batch_s <= 0 else max(1, math.ceil((every - save_s) / batch_s)) * batch_s
        # a validation run or an epoch's end longer than an interval still leads to one save only
        # (a run at an epoch's end and the next epoch's start are one break between batches)
        breaks = max(counts.get("val") or 0, counts.get("epoch") or 0)
        work = left["train"] + left["warmup"] + min(left["val"] + left["epoch"], breaks * period)
        since = [t for t in (self.train_t0, self._last_save_t) if t is not None]
        first = max(0.0, every - (now - max(since) if since else 0.0))  # work before the next save
        if work < first:
            return 0
        return min(int(counts["train"] or 0), 1 + math.floor((work - first) / period))

    def _validates_at_a_stop(self, position: int | None = None) -> bool:
        """Whether a stop after the batch that brings the fit to ``position`` (now: the current
        one) runs a validation first: Lightning validates when ``should_stop`` is set (``max_time``,
        early stopping) in an epoch that validates."""
        s = self.schedule
        if not s.val_batches_per_run:
            return False
        every = s.check_val_every_n_epoch
        if every is None or every <= 1:
            return True
        position = self.position if position is None else position
        return bool(s.batches_per_epoch) and (s.epoch_of_batch(position) + 1) % every == 0

    def _cap_by_max_time(self, left: dict[str, float], now: float, counts: dict[str, float | None],
                         next_left: dict[str, float]) -> None:
        """``max_time`` stops training at the first training batch that ends once that much time
        has passed since training started (:mod:`~ptp_callback.time_limit`): the work up to that
        batch, then the validation the stop runs, a save and the end."""
        limit_left = max(0.0, self._time_limit_left_s(now) or 0.0)
        phase = ("train", "warmup", "val", "epoch", "save")
        bounded = counts["train"] is not None  # else only the limit ends the fit
        scheduled = sum(left[k] for k in phase) if bounded else math.inf
        if scheduled <= limit_left:
            return
        ahead = self._ahead(next_left, counts["train"])
        if ahead is not None and self._time_stop_at is not None:
            self._left_after_stop(left, ahead, self._time_stop_at, next_left)
            return
        walk = time_to_stop_at_epoch_ends if self.time_limit_at_epoch_ends else time_to_stop
        stops = walk(ahead, limit_left) if ahead is not None else None
        if stops is None:
            self._spread_limit(left, limit_left, bounded, next_left)
            return
        # Each spread limit's outcome: the seconds per kind up to its stop, and what the stop runs.
        outcomes = []
        for limit, seconds, stop in stops:
            after = dict.fromkeys(("val", "save"), 0.0)
            if stop is None:  # the schedule ends before this limit
                seconds = {kind: left[kind] for kind in ("train", "val", "epoch", "save")}
                seconds["train"] += left["warmup"]
            elif not self.time_limit_at_epoch_ends:  # (at an epoch end, its validation and saves are in)
                validates = self._stop_validates(ahead, stop)
                after["val"] = ahead.unit["val"] if validates else 0.0
                after["save"] = ahead.unit["save"] * self._saves_at_a_stop(ahead, stop, validates)
            outcomes.append((sum(seconds.values()) + sum(after.values()) - limit, limit, seconds, after))
        # The median outcome by how far past its limit it runs: most limits run out inside a stretch of
        # batches, and a stop across an epoch boundary counts only where most of the spread puts it.
        # Its mix of work up to the stop is brought from its limit to the one left.
        _past, limit, seconds, after = sorted(outcomes, key=lambda o: o[0])[len(outcomes) // 2]
        scale = limit_left / limit if limit > 0 else 1.0
        for kind in ("train", "val", "epoch", "save"):
            left[kind] = seconds[kind] * scale + after.get(kind, 0.0)
        left["warmup"] = min(left["warmup"], left["train"])
        left["train"] -= left["warmup"]

    def _ahead(self, next_left: dict[str, float], train_left: float | None) -> Ahead | None:
        """The work ahead as the time-limit walk reads it: this schedule's positions, or for a fit
        that only the limit ends, those of :attr:`cycle` repeating (``train_left``: the training
        batches left, over which an expected cost change is spread)."""
        s = self.schedule
        vals, saves, epochs = s.val_after_batches, self.saves, s.epoch_starts
        period, base = None, 0
        if s.total_batches is None and self.cycle is not None and self.cycle[0].total_batches:
            cycle, saves = self.cycle
            vals, epochs, saves = cycle.val_after_batches, cycle.epoch_starts, tuple(sorted(saves))
            whole = [e for e in epochs if e > cycle.start_batch or cycle.start_batch_in_epoch == 0]
            if whole and cycle.total_batches > whole[0]:
                base, period = whole[0], cycle.total_batches - whole[0]
        unit = {kind: self._unit(kind)[0] or 0.0 for kind in ("train", "val", "epoch", "save")}
        unit["train"] *= self._expected_change_scale(train_left)
        if unit["train"] <= 0:
            return None
        ahead = Ahead(self.position, s.total_batches, vals, saves, epochs, {}, {}, unit, period, base, self.first_batch)
        return replace(ahead, here=self._due_here(ahead.work_at(self.position)), first=dict(next_left))

    def _left_after_stop(self, left: dict[str, float], ahead: Ahead, stop: int, next_left: dict[str, float]) -> None:
        """The limit ran out at the end of the batch that brought the fit to ``stop``: what is left
        is the validation that stop runs and its saves (those not yet done), then the end."""
        for kind in ("train", "warmup", "epoch"):
            left[kind] = 0.0
        running = self._val_running()
        validates = self._stop_validates(ahead, stop)
        left["val"] = next_left.get("val", 0.0) if running or (validates and self._val_ended_at != stop) else 0.0
        saves = self._saves_not_made(self._saves_at_a_stop(ahead, stop, validates), stop)
        if self._save_open:
            left["save"] = next_left.get("save", 0.0) + max(0, saves - 1) * ahead.unit["save"]
        else:
            left["save"] = saves * ahead.unit["save"]

    def _stop_validates(self, ahead: Ahead, stop: int) -> bool:
        """Whether a validation runs at a ``max_time`` stop after the batch that brings the fit to
        ``stop``: one due there anyway, or the one Lightning runs when it stops inside an epoch that
        validates (not for a limit checked at epoch ends, which stops after the epoch's own)."""
        return ahead.work_at(stop)["val"] > 0 or (not self.time_limit_at_epoch_ends and self._validates_at_a_stop(stop))

    def _saves_at_a_stop(self, ahead: Ahead | None = None, stop: int | None = None, validates: bool = True) -> int:
        """The saves a stop after the batch that brings the fit to ``stop`` makes: those scheduled
        there, else one at the stopped epoch's end in a fit that saves -- but none where the fit
        saves after its validation runs (``ModelCheckpoint`` does with ``check_val_every_n_epoch``
        other than 1 or validation more than once an epoch) and the stop runs none, and none when
        no optimizer step was taken since the last save (it skips a save at the same global step)."""
        cycle_saves = self.cycle[1] if self.cycle is not None else ()
        if not (self.saves or cycle_saves or self.meters["save"].done):
            return 0
        if ahead is None or stop is None:
            return 1
        listed = ahead.work_at(stop)["save"]
        if listed:
            return listed
        s = self.schedule
        after_validation = bool(s.val_batches_per_run) and (
            s.check_val_every_n_epoch != 1
            or (bool(s.batches_per_epoch) and s.val_check_batch != EPOCH_END and s.val_check_batch < s.batches_per_epoch))
        if after_validation and not validates:
            return 0
        # the last save before the stop: a laid-out one, or the last one made
        made = self._saves_closed[0] if self.meters["save"].done else None
        last = max((p for p in (ahead.previous_save(stop), made) if p is not None and p <= stop), default=None)
        return 0 if last is not None and self._steps_at(stop) == self._steps_at(last) else 1

    def _steps_at(self, position: int) -> int:
        """The global step after the batch that brings the fit to ``position``."""
        s = self.schedule
        return steps_at(max(position, s.start_batch), batches_per_epoch=s.batches_per_epoch, accumulate=s.accumulate,
                        start=s.start, step_on_epoch_end=s.step_on_epoch_end)

    def _spread_limit(self, left: dict[str, float], limit_left: float, bounded: bool,
                      next_left: dict[str, float]) -> None:
        """A stop too far ahead to walk to: the time the limit leaves is split among the kinds of
        work by their shares, then the validation the stop runs and a save."""
        phase = ("train", "warmup", "val", "epoch", "save")
        final_save = (self._unit("save")[0] or 0.0) * self._saves_at_a_stop()  # the stop's place is unknown
        stop_val = 0.0
        if self._validates_at_a_stop():
            stop_val = next_left.get("val", self._unit("val")[0] or 0.0)
        warmup = min(left["warmup"], limit_left) if bounded else 0.0
        shares = self._time_limit_shares(left if bounded else None)
        for kind in phase:
            left[kind] = shares.get(kind, 0.0) * (limit_left - warmup)
        left["warmup"] = warmup
        left["val"] += stop_val
        left["save"] += final_save

    def _time_limit_shares(self, scheduled: dict[str, float] | None) -> dict[str, float]:
        """How the time a ``max_time`` limit leaves divides among training, validation, epoch
        starts and saves: as the schedule's remaining work does, or, for a fit without another
        limit, as the work of :attr:`cycle` does (all training when neither is known)."""
        kinds = ("train", "val", "epoch", "save")
        if scheduled is not None:
            weights = {kind: scheduled[kind] for kind in kinds}
        elif self.cycle is not None and self.cycle[0].total_batches:
            cycle, saves = self.cycle
            occurrences = {"train": cycle.total_batches, "val": len(cycle.val_after_batches),
                           "epoch": len(cycle.epoch_starts), "save": len(saves)}
            weights = {kind: n * (self._unit(kind)[0] or 0.0) for kind, n in occurrences.items()}
        else:
            weights = {}
        total = sum(weights.values())
        if total <= 0:
            return {"train": 1.0}
        return {kind: weight / total for kind, weight in weights.items()}

    def _predicted_at_step_one(self, t: float) -> dict[str, Part]:
        """Each part as the ETA counts it at the first training batch, so that the parts add up to
        :attr:`before_step_one_s`: the sanity check's refinements of later parts are in, and the
        parts already done by then keep the plan's prediction from fit start."""
        now = self.parts(t)
        return {kind: self.initial_parts.get(kind, part) if kind in _DONE_BEFORE_STEP_ONE else part
                for kind, part in now.items()}

    def parts(self, now: float) -> dict[str, Part]:
        """Each kind's seconds so far, its unit cost, and what the ETA counts for it."""
        left = self._left(now) or {}
        counts = self._counts_left()
        out: dict[str, Part] = {}
        for kind in KINDS:
            meter = self.meters[kind]
            unit, measured = self._unit(kind) if kind not in ("ptp", "warmup", "startup") else (None, True)
            spent = meter.total + meter.current
            if kind == "warmup":
                spent = self.batches.warmup_extra_s()
            if kind == "train":
                spent -= self.batches.warmup_extra_s()
            count = counts.get(kind)
            if count and unit and self.schedule.max_time_s is not None:
                count = min(count, round(left.get(kind, 0.0) / unit))  # what fits in the time limit
            out[kind] = Part(kind, spent, meter.done, left.get(kind, 0.0), None if count is None else int(count),
                             unit, measured)
        return out

    @property
    def stopped_early(self) -> tuple[int, int] | None:
        """``(batches run, batches scheduled)`` of a fit that ended before its schedule did (early
        stopping, ``trainer.should_stop``, a loop left early, an exception); ``None`` for any other
        fit, and for one that ``max_time`` ended."""
        s = self.schedule
        if not self.ended or s.total_batches is None or self.position >= s.total_batches or self._ended_by_time():
            return None
        return self.position - self.first_batch, s.total_batches - self.first_batch

    def _ended_by_time(self) -> bool:
        """Whether ``max_time`` ran out by the end of training (within the slack between Lightning's
        Timer and this clock: 2% of the limit and half a second)."""
        s = self.schedule
        if s.max_time_s is None:
            return False
        if self._time_stop_at is not None:
            return True
        end = self._train_end_t if self._train_end_t is not None else self._t  # an exception skips train_end
        if end is None:
            return True
        left = self._time_limit_left_s(end)
        return left is not None and left <= 0.02 * s.max_time_s + 0.5

    # --------------------------------------------------------------------------- resume
    def state_dict(self, now: float) -> dict[str, Any]:
        """Measured unit costs and elapsed time, for a resumed fit to start from."""
        units = {}
        for kind in ("train", "val", "epoch", "save"):
            unit, measured = self._unit(kind)
            if measured and unit is not None:
                units[kind] = unit
        return {"units": units, "elapsed_s": self.elapsed_s(now)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start from an earlier run's measurements: they count as seen until this run measures."""
        self._prior = {k: float(v) for k, v in state.get("units", {}).items()}
        self.elapsed_before_s = float(state.get("elapsed_s", 0.0))
