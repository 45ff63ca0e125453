"""A fit played as the event stream Lightning's hooks give, on virtual time, for forecaster tests.

``play(schedule, saves, costs)`` yields ``(seconds, event)`` pairs in Lightning 2.6's hook order
(sanity check, epoch start, batch start/end, validation after the batch it is due after, saves at
batch end / validation end / epoch end, epoch end, train end, fit end), each unit of work costing
what ``costs`` says. Positions of validation runs and saves come from the schedule, so a forecaster
given the same schedule and costs must know the remaining time exactly.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from ptp_callback.schedule import FitSchedule


@dataclass(frozen=True)
class Costs:
    """Seconds each unit of a simulated fit takes."""

    batch: float = 1.0  # a training batch (its gap before batch_start included)
    gap: float = 0.0  # the part of ``batch`` spent before batch_start (data wait)
    step: float = 0.0  # extra for a batch that steps the optimizer
    first_extra: float = 0.0  # warm-up of the very first batch
    val_run: float = 2.0  # one validation run, all of it
    epoch: float = 0.5  # an epoch boundary (epoch end to the first batch of the next)
    first_epoch: float = 0.0  # the first epoch's start (its loader started during set-up)
    save: float = 3.0  # one checkpoint save
    end: float = 1.5  # train end to fit end
    sanity: float = 0.7
    startup: float = 0.0


def play(schedule: FitSchedule, saves: tuple[int, ...], costs: Costs, *, sanity: bool = True,
         stepping: set[int] | None = None) -> Iterator[tuple[float, str]]:
    """Events of the fit; ``stepping``: positions whose batch steps the optimizer."""
    t = 0.0
    yield t, "fit_start"
    t += costs.startup
    if sanity and schedule.sanity_batches:
        yield t, "sanity_start"
        t += costs.sanity
        yield t, "sanity_end"
    yield t, "train_start"
    ends = list(schedule.epoch_starts[1:]) + [schedule.total_batches]
    vals = schedule.val_after_batches
    first = True
    for i, (begin, end) in enumerate(zip(schedule.epoch_starts, ends)):
        yield t, "epoch_start"
        t += costs.first_epoch if i == 0 else costs.epoch / 2
        for p in range(begin + 1, end + 1):
            t += costs.gap
            yield t, "batch_start"
            t += costs.batch - costs.gap + (costs.step if stepping and p in stepping else 0.0)
            if first:
                t += costs.first_extra
                first = False
            yield t, "batch_end"
            at_p = bisect.bisect_right(saves, p) - bisect.bisect_left(saves, p)
            if p in vals:
                yield t, "val_start"
                t += costs.val_run
                yield t, "val_end"
            for _ in range(at_p if p != end else 0):
                yield t, "save_start"
                t += costs.save
        yield t, "epoch_end"
        last = i == len(schedule.epoch_starts) - 1
        if not last:
            t += costs.epoch / 2  # epoch-end hooks; the next epoch's start has the other half
        at_end = bisect.bisect_right(saves, end) - bisect.bisect_left(saves, end)
        for _ in range(at_end):
            yield t, "save_start"
            t += costs.save
    yield t, "train_end"
    t += costs.end
    yield t, "fit_end"


def feed(forecaster, name: str, t: float) -> None:  # noqa: ANN001 - a RunForecaster
    getattr(forecaster, name)(t)
