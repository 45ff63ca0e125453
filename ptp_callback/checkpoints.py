"""Checkpoint saves of a fit: which saves will happen, where, and how many bytes each writes.

Framework-free: an adapter reads its checkpoint callback (Lightning's ``ModelCheckpoint``, the
``save_steps`` of an HF ``Trainer``, an Accelerate loop's ``save_state`` calls) into
:class:`CheckpointSettings`; :func:`save_positions` lays the saves out on the fit's
:class:`~ptp_callback.schedule.FitSchedule` (positions count training batches, as there).

The rules are Lightning 2.6's ``ModelCheckpoint`` (``callbacks/model_checkpoint.py``):

* ``every_n_train_steps=n``: a save after the training batch whose optimizer step makes
  ``global_step % n == 0``;
* ``every_n_epochs=n`` (the default, 1, when no trigger is given): a save at the end of every n-th
  epoch -- on ``on_train_epoch_end``, or after each validation run of that epoch when validation runs
  more than once an epoch (``_should_save_on_train_epoch_end``);
* never twice at the same ``global_step`` (``_should_skip_saving_checkpoint``) -- within one run: a
  resumed fit does not restore the step last saved at, so resuming at a multiple of ``n`` with
  gradient accumulation saves again after the first batch, which leaves ``global_step`` there;
* ``save_last=True`` writes a second, full checkpoint after each save (``"link"`` only links it)
  and, if no save happened at all, one at the end of training;
* ``save_top_k=0`` saves nothing but ``last``. With a ``monitor`` and ``save_top_k=k`` a save
  happens only when the metric is among the best k, and a step-triggered save before the metric
  exists (before the first validation run) is put off to that run's end, several as one, or dropped
  where saves follow the epoch's end: every candidate is counted (an upper bound).

>>> from ptp_callback.schedule import build_schedule
>>> s = build_schedule(batches_per_epoch=100, max_epochs=3, max_steps=None, val_check_batch=100,
...                    check_val_every_n_epoch=1, val_batches_per_run=5)
>>> save_positions(s, CheckpointSettings())                  # Lightning's default: each epoch's end
(100, 200, 300)
>>> save_positions(s, CheckpointSettings(every_n_train_steps=120, every_n_epochs=0, save_last=True))
(120, 120, 240, 240)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .schedule import FitSchedule, steps_at


@dataclass(frozen=True)
class CheckpointSettings:
    """One checkpointing callback, in plain numbers (see the module doc for the rules).

    ``on_epoch_end``: epoch-triggered saves happen at the end of the training epoch (``True``) or
    after each validation run of the epoch (``False``). ``every_s``: a time-triggered save interval
    (``train_time_interval``), counted by the forecaster from the time left. ``weights_only``: the
    optimizer state is not written.
    """

    every_n_train_steps: int = 0
    every_n_epochs: int = 1
    on_epoch_end: bool = True
    save_last: bool = False
    save_top_k: int = 1
    every_s: float | None = None
    weights_only: bool = False


def saves_per_validation_run(settings: CheckpointSettings) -> int:
    """Saves after each validation run of a fit that validates every so many seconds (whose runs
    have no positions for :func:`save_positions`): a checkpoint that saves when validation ends,
    every epoch, saves its best and its last each time (counted by the forecaster with the runs)."""
    if settings.on_epoch_end or settings.every_n_epochs != 1 or settings.save_top_k == 0:
        return 0
    return 1 + int(settings.save_last)


def save_positions(schedule: FitSchedule, settings: CheckpointSettings) -> tuple[int, ...]:
    """Positions after which a save happens, ascending, one entry per save (a position may repeat).

    Empty for an unbounded fit (its saves are counted as they happen).
    """
    if schedule.total_batches is None or not schedule.epoch_starts:
        return ()
    topk = 1 if settings.save_top_k != 0 else 0
    last = 1 if settings.save_last else 0
    steps = _Steps(schedule)
    saved: list[int] = []
    last_saved_step = 0  # ModelCheckpoint starts at 0: "no need to save when no steps were taken"

    def save(position: int) -> None:
        nonlocal last_saved_step
        step = steps.at(position)
        if step == last_saved_step:
            return
        saved.extend([position] * topk)
        if topk:
            last_saved_step = step
            saved.extend([position] * last)

    ends = list(schedule.epoch_starts[1:]) + [schedule.total_batches]
    vals = schedule.val_after_batches
    for i, (begin, end) in enumerate(zip(schedule.epoch_starts, ends)):
        epoch = schedule.start_epoch + i
        by_epoch = settings.every_n_epochs >= 1 and (epoch + 1) % settings.every_n_epochs == 0
        events: list[tuple[int, int]] = []  # (position, order): batch end 0, validation end 1, epoch end 2
        if settings.every_n_train_steps >= 1:
            events += [(p, 0) for p in steps.multiples_in(begin, end, settings.every_n_train_steps)]
            if i == 0 and begin < end:
                resumed = steps.at(begin)
                if resumed and resumed % settings.every_n_train_steps == 0 and steps.at(begin + 1) == resumed:
                    events.append((begin + 1, 0))  # a resume forgets the save made there: see the module doc
        if by_epoch and not settings.on_epoch_end:
            events += [(p, 1) for p in vals[bisect.bisect_right(vals, begin):bisect.bisect_right(vals, end)]]
        if by_epoch and settings.on_epoch_end:
            events.append((end, 2))
        for position, _order in sorted(events):
            save(position)
    if last and not saved:
        saved.append(schedule.total_batches)  # on_train_end: save_last when nothing was saved
    return tuple(saved)


class _Steps:
    """``global_step`` after a position, and the positions where it reaches multiples of ``n``."""

    def __init__(self, schedule: FitSchedule) -> None:
        self.schedule = schedule

    def at(self, position: int) -> int:
        s = self.schedule
        return steps_at(position, batches_per_epoch=s.batches_per_epoch, accumulate=s.accumulate, start=s.start,
                        step_on_epoch_end=s.step_on_epoch_end)

    def multiples_in(self, begin: int, end: int, n: int) -> list[int]:
        """Positions in ``(begin, end]`` whose batch steps the optimizer to a multiple of ``n``."""
        out: list[int] = []
        step = self.at(begin)
        target = (step // n + 1) * n
        while target <= self.at(end):
            out.append(self._first_position_at_step(begin, end, target))
            target += n
        return out

    def _first_position_at_step(self, begin: int, end: int, step: int) -> int:
        lo, hi = begin + 1, end  # steps_at is non-decreasing: bisect for the first position at ``step``
        while lo < hi:
            mid = (lo + hi) // 2
            if self.at(mid) >= step:
                hi = mid
            else:
                lo = mid + 1
        return lo
