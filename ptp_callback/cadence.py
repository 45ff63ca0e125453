"""Evaluations and saves of loops that count in optimizer steps or epochs, as schedule positions.

A hand-written loop (``evaluate()`` every 500 steps) and the HF ``Trainer`` (``eval_steps``,
``save_steps``, ``eval_strategy="epoch"``) say how often they evaluate or save in optimizer steps
or epochs; the forecaster counts in training (micro-)batches. :func:`positions_every` converts:
the position of the batch whose optimizer step makes the global step a multiple of ``n``, or the
last batch of every epoch.

>>> from ptp_callback.schedule import build_schedule
>>> s = build_schedule(batches_per_epoch=10, accumulate=2, max_epochs=2, max_steps=None,
...                    val_check_batch=None, check_val_every_n_epoch=1, val_batches_per_run=0)
>>> positions_every(s, 4)          # steps 4 and 8 end at batches 8 and 16 (5 steps an epoch)
(8, 16)
>>> positions_every(s, "epoch")
(10, 20)
"""

from __future__ import annotations

import bisect
from dataclasses import replace

from .schedule import FitSchedule, steps_at

__all__ = ["Every", "positions_every", "with_evaluations"]

#: A cadence: every ``n`` optimizer steps, every epoch, or never.
Every = int | str | None


def _step_after(schedule: FitSchedule, position: int) -> int:
    return steps_at(position, batches_per_epoch=schedule.batches_per_epoch, accumulate=schedule.accumulate,
                    start=schedule.start, step_on_epoch_end=schedule.step_on_epoch_end)


class _StepPositions:
    """``steps_at`` over the schedule's positions, as a sequence ``bisect`` can search."""

    def __init__(self, schedule: FitSchedule) -> None:
        self.schedule = schedule
        self.start = schedule.start_batch

    def __len__(self) -> int:
        return (self.schedule.total_batches or 0) - self.start + 1

    def __getitem__(self, i: int) -> int:
        return _step_after(self.schedule, self.start + i)


def positions_every(schedule: FitSchedule, every: Every, *, final: bool = False) -> tuple[int, ...]:
    """Positions after which something that runs ``every`` (steps, ``"epoch"`` or ``None``) happens.

    ``final=True`` adds the fit's last batch (the HF ``Trainer`` saves there whatever the step).
    Only positions after the schedule's start are listed; an unbounded fit gives ``()``.
    """
    total = schedule.total_batches
    if every is None or total is None:
        return ()
    if every == "epoch":
        ends = list(schedule.epoch_starts[1:]) + [total]
        out = [p for p in ends if p > schedule.start_batch]
    elif isinstance(every, int) and not isinstance(every, bool) and every > 0:
        steps = _StepPositions(schedule)
        first = _step_after(schedule, schedule.start_batch)
        last = _step_after(schedule, total)
        out = [schedule.start_batch + bisect.bisect_left(steps, target)
               for target in range((first // every + 1) * every, last + 1, every)]
    else:
        raise ValueError(f"every={every!r}: expected a number of optimizer steps (> 0), 'epoch' or None")
    if final and total > schedule.start_batch and (not out or out[-1] != total):
        out.append(total)
    return tuple(out)


def with_evaluations(schedule: FitSchedule, positions: tuple[int, ...], batches_per_run: int | None) -> FitSchedule:
    """The schedule with its validation runs at ``positions`` (``batches_per_run`` batches each;
    ``None`` when unknown: the first run is then measured, not predicted)."""
    if not positions:
        return replace(schedule, val_after_batches=(), val_batches_per_run=0)
    return replace(schedule, val_after_batches=tuple(sorted(positions)), val_batches_per_run=batches_per_run)
