"""The shape of a whole ``fit``: how many training batches, optimizer steps and validation runs it does.

This module is framework-free (stdlib only). ``ptp_callback.integrations.lightning_schedule`` reads a
Lightning ``Trainer`` into the plain numbers used here; the arithmetic that turns them into a schedule
lives here so that it can be unit-tested without running anything.

How positions are counted
-------------------------
A *position* is a cumulative count of training batches (``training_step`` calls, so every micro-batch of
gradient accumulation counts) since the very beginning of the fit, i.e. since epoch 0 step 0 -- a fit
resumed from a checkpoint keeps counting where the checkpointed fit stopped. This is Lightning's
``batch_progress.total.ready``. Position ``p`` means "after the ``p``-th training batch"; a validation run
listed at position ``p`` starts right after training batch ``p`` (before batch ``p + 1``). Position 0 is
"before any training". After a resume the layout from ``FitStart.position`` on is the one Lightning will
really run: its first epoch may be partial, empty, or one batch longer than the others (see
:class:`FitStart`), and only the validation runs still to come are listed.

Example (a fresh fit: 10 batches per epoch, 2 epochs, accumulate 3, validate twice per epoch)::

    >>> s = build_schedule(batches_per_epoch=10, accumulate=3, max_epochs=2, max_steps=None,
    ...                    val_check_batch=5, check_val_every_n_epoch=1, val_batches_per_run=4)
    >>> s.total_batches, s.total_steps      # each epoch steps after batches 3, 6, 9 and 10 (epoch end)
    (20, 8)
    >>> s.val_after_batches
    (5, 10, 15, 20)
    >>> s.remaining(12)   # 2 batches into epoch 1; 4 steps done (after batches 3, 6, 9, 10 of epoch 0)
    RemainingWork(train_batches=8, optimizer_steps=4, val_runs=2, val_batches=8)

Honest limits: the schedule is what the configuration implies. Early stopping (``trainer.should_stop``,
``EarlyStopping``, ``Timer``/``max_time``), ``on_train_batch_start`` returning -1, dataloaders that are
shorter than their ``len()`` or change length between epochs, and a manual-optimization step that does
not step each of its optimizers once per batch all make the real fit differ.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = [
    "EPOCH_END",
    "FitSchedule",
    "FitStart",
    "RemainingWork",
    "build_schedule",
    "epoch_start_positions",
    "fit_length",
    "steps_at",
    "val_check_positions",
]

#: Epochs laid out to sample the work of a fit that only ``max_time`` ends
#: (:meth:`FitSchedule.time_limit_cycle`), at most :data:`CYCLE_BATCHES` batches of them.
CYCLE_EPOCHS = 12
CYCLE_BATCHES = 1_000_000

#: ``val_check_batch`` value meaning "validate after the last batch of each epoch, whatever its index".
#: (Lightning's ``val_check_batch == inf``: an unsized train iterable with ``val_check_interval=1.0``.)
EPOCH_END = -1


@dataclass(frozen=True)
class FitStart:
    """Where the training loops stand when this fit begins its first training batch.

    A fresh fit is ``FitStart()``. After a resume the values come from the checkpoint's loop counters
    (see ``lightning_schedule.read_schedule``); they describe the *first* epoch this fit runs, which may be
    a partial one.

    Attributes:
        position: training batches already done, counted from the start of the whole fit.
        step: optimizer steps already done (``trainer.global_step``).
        epoch: epoch number (``trainer.current_epoch``) during the first epoch this fit runs; it gates
            ``check_val_every_n_epoch``. Later epochs are ``epoch + 1``, ``epoch + 2``, ...
        epochs_counted: epochs the fit loop already counts as run (Lightning's
            ``epoch_progress.current.processed``); the fit stops when it reaches ``max_epochs``, and every
            epoch this fit runs -- including the first, partial one -- adds one.
        batch_in_epoch: batches of the first epoch already done (the in-epoch counter it continues from).
        first_epoch_end: in-epoch index of the last batch of the first epoch (``None``: the epoch length).
            Equal to ``batch_in_epoch`` when the first epoch trains nothing.
    """

    position: int = 0
    step: int = 0
    epoch: int = 0
    epochs_counted: int = 0
    batch_in_epoch: int = 0
    first_epoch_end: int | None = None


@dataclass(frozen=True)
class RemainingWork:
    """Work left after a given position. ``None`` means unknown / unbounded."""

    train_batches: int | None
    optimizer_steps: int | None
    val_runs: int
    val_batches: int | None


@dataclass(frozen=True)
class FitSchedule:
    """Training and validation work of a whole ``fit`` (positions: see the module docstring).

    Attributes:
        batches_per_epoch: ``training_step`` calls per epoch after ``limit_train_batches``; ``None`` when
            the train iterable has no length (then the fit is taken to be one endless epoch).
        accumulate: ``accumulate_grad_batches``.
        max_epochs: ``None`` = unbounded.
        max_steps: optimizer-step cap, ``None`` = none.
        total_steps: optimizer steps of the whole fit (from step 0); ``None`` if unbounded.
        total_batches: training batches of the whole fit (from position 0); ``None`` if unbounded.
        val_batches_per_run: ``validation_step`` calls per validation run, summed over val dataloaders
            (0 = no validation; ``None`` = validation runs but a val dataloader has no length).
        val_after_batches: positions after which a validation run starts, ascending. On a resume only
            the runs after ``start_batch`` are listed. Empty when there is no validation, when it is
            time based (see ``val_every_s``) or when the fit is unbounded.
        val_every_s: validation interval in seconds when ``val_check_interval`` is a time interval.
        sanity_batches: ``validation_step`` calls of the sanity check before training (0 if skipped;
            ``None`` if unknown). Not part of ``remaining()``.
        max_time_s: ``Trainer(max_time=...)`` / ``Timer`` limit in seconds, ``None`` if none.
        start_batch: training batches done when this fit starts (``FitStart.position``).
        start_step: optimizer steps done when this fit starts (``FitStart.step``).
        start_epoch: ``trainer.current_epoch`` during the first epoch this fit runs.
        start_batch_in_epoch: batches of that epoch already done.
        first_epoch_end: in-epoch index of the last batch of the first epoch (``None``: epoch length).
        step_on_epoch_end: whether the last batch of an epoch always steps the optimizer even when the
            accumulation window is incomplete (Lightning does, unless the strategy accumulates itself).
        epoch_starts: the position at which each epoch of this fit begins (``on_train_epoch_start``),
            ascending; the first is ``start_batch``. Empty when the fit is unbounded.
        val_check_batch, check_val_every_n_epoch, start_epochs_counted: the settings the schedule
            was built from, kept so that :meth:`with_epoch_length` can lay it out again.
    """

    batches_per_epoch: int | None
    accumulate: int
    max_epochs: int | None
    max_steps: int | None
    total_steps: int | None
    total_batches: int | None
    val_batches_per_run: int | None
    val_after_batches: tuple[int, ...]
    val_every_s: float | None
    sanity_batches: int | None
    max_time_s: float | None
    start_batch: int
    start_step: int
    start_epoch: int = 0
    start_batch_in_epoch: int = 0
    first_epoch_end: int | None = None
    step_on_epoch_end: bool = True
    epoch_starts: tuple[int, ...] = ()
    val_check_batch: int | None = None
    check_val_every_n_epoch: int | None = 1
    start_epochs_counted: int = 0

    @property
    def start(self) -> FitStart:
        """The layout's starting point."""
        return FitStart(
            position=self.start_batch,
            step=self.start_step,
            epoch=self.start_epoch,
            epochs_counted=self.start_epochs_counted,
            batch_in_epoch=self.start_batch_in_epoch,
            first_epoch_end=self.first_epoch_end,
        )

    def with_epoch_length(self, batches_per_epoch: int) -> FitSchedule:
        """The same fit laid out with a known epoch length (a train iterable without ``len`` runs
        epochs as long as its first one): same settings, same start.

        >>> s = build_schedule(batches_per_epoch=None, max_epochs=3, max_steps=None,
        ...                    val_check_batch=EPOCH_END, check_val_every_n_epoch=1, val_batches_per_run=2)
        >>> s.total_batches is None
        True
        >>> s.with_epoch_length(10).total_batches, s.with_epoch_length(10).val_after_batches
        (30, (10, 20, 30))
        """
        return self._laid_out(batches_per_epoch, self.max_epochs)

    def with_epochs(self, epochs: int) -> FitSchedule:
        """The same fit cut after ``epochs`` epochs from its start: a sample of the work of a fit
        that only a time limit ends.

        >>> s = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None,
        ...                    val_check_batch=5, check_val_every_n_epoch=2, val_batches_per_run=2)
        >>> s.total_batches is None
        True
        >>> cut = s.with_epochs(4)
        >>> cut.total_batches, cut.val_after_batches, cut.epoch_starts
        (40, (15, 20, 35, 40), (0, 10, 20, 30))
        """
        return self._laid_out(self.batches_per_epoch, self.start_epoch + epochs)

    def time_limit_cycle(self) -> FitSchedule | None:
        """For a fit that only ``max_time`` ends: a few of its epochs laid out, a sample of its work
        (``None`` for any other fit, or when its epochs have no known length). Every cadence of 1, 2,
        3, 4, 6 or 12 epochs (validation, saves) repeats whole within :data:`CYCLE_EPOCHS`; fewer when
        epochs are long, since the layout lists every position a validation or a save follows.

        >>> s = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None, val_check_batch=10,
        ...                    check_val_every_n_epoch=1, val_batches_per_run=2, max_time_s=60.0)
        >>> s.time_limit_cycle().total_batches
        120
        """
        if self.max_time_s is None or self.total_batches is not None or not self.batches_per_epoch:
            return None
        return self.with_epochs(max(1, min(CYCLE_EPOCHS, CYCLE_BATCHES // self.batches_per_epoch)))

    def _laid_out(self, batches_per_epoch: int | None, max_epochs: int | None) -> FitSchedule:
        return build_schedule(
            batches_per_epoch=batches_per_epoch, accumulate=self.accumulate, max_epochs=max_epochs,
            max_steps=self.max_steps, val_check_batch=self.val_check_batch,
            check_val_every_n_epoch=self.check_val_every_n_epoch, val_batches_per_run=self.val_batches_per_run,
            val_every_s=self.val_every_s, sanity_batches=self.sanity_batches, max_time_s=self.max_time_s,
            start=self.start, step_on_epoch_end=self.step_on_epoch_end)

    def epoch_of_batch(self, position: int) -> int:
        """``trainer.current_epoch`` while the batch that brings the fit to ``position`` batches
        runs (at ``start_batch``: the epoch the fit starts in); the start epoch when epochs have no
        known length.

        >>> s = build_schedule(batches_per_epoch=10, max_epochs=3, max_steps=None,
        ...                    val_check_batch=EPOCH_END, check_val_every_n_epoch=1, val_batches_per_run=2)
        >>> s.epoch_of_batch(10), s.epoch_of_batch(11), s.epoch_of_batch(30)
        (0, 1, 2)
        """
        if not self.batches_per_epoch:
            return self.start_epoch
        first_end = self.batches_per_epoch if self.first_epoch_end is None else self.first_epoch_end
        index = self.start_batch_in_epoch + max(0, position - self.start_batch - 1)  # in the first epoch's count
        if index < first_end:
            return self.start_epoch
        return self.start_epoch + 1 + (index - first_end) // self.batches_per_epoch

    def remaining(self, batches_done: int, *, val_pending: bool = False) -> RemainingWork:
        """Work left after ``batches_done`` training batches (a position, so including ``start_batch``).

        Validation runs at positions ``<= batches_done`` count as done -- right for a caller that asks
        after that validation (``on_validation_end``, ``on_train_batch_start`` of the next batch). From
        ``on_train_batch_end`` the run due after this very batch has not started yet: pass
        ``val_pending=True`` to count a run at exactly ``batches_done`` as remaining. Positions before
        ``start_batch`` are treated as ``start_batch``.

        >>> s = build_schedule(batches_per_epoch=4, accumulate=1, max_epochs=2, max_steps=None,
        ...                    val_check_batch=4, check_val_every_n_epoch=1, val_batches_per_run=3)
        >>> s.remaining(4)                     # the validation after batch 4 is done
        RemainingWork(train_batches=4, optimizer_steps=4, val_runs=1, val_batches=3)
        >>> s.remaining(4, val_pending=True)   # asked from on_train_batch_end of batch 4
        RemainingWork(train_batches=4, optimizer_steps=4, val_runs=2, val_batches=6)
        """
        done = max(batches_done, self.start_batch)
        train = None if self.total_batches is None else max(0, self.total_batches - done)
        steps = None
        if self.total_steps is not None:
            steps_done = steps_at(
                done,
                batches_per_epoch=self.batches_per_epoch,
                accumulate=self.accumulate,
                start=self.start,
                step_on_epoch_end=self.step_on_epoch_end,
            )
            steps = max(0, self.total_steps - steps_done)
        cut = bisect.bisect_left if val_pending else bisect.bisect_right
        runs = len(self.val_after_batches) - cut(self.val_after_batches, done)
        per_run = self.val_batches_per_run
        return RemainingWork(train, steps, runs, None if per_run is None else runs * per_run)


# ---------------------------------------------------------------------------------------------------
# arithmetic


def _stepping_batches(a: int, b: int, accumulate: int, step_on_end: bool) -> int:
    """Optimizer steps taken by in-epoch batches ``a+1 .. b`` of an epoch whose last batch is ``b``.

    Lightning steps when the in-epoch batch counter is a multiple of ``accumulate`` and on the epoch's
    last batch (``_TrainingEpochLoop._should_accumulate``).
    """
    if b <= a:
        return 0
    n = b // accumulate - a // accumulate
    if step_on_end and b % accumulate:
        n += 1
    return n


def _kth_stepping_batch(a: int, k: int, accumulate: int) -> int:
    """In-epoch index of the ``k``-th (1-based) multiple-of-``accumulate`` batch after batch ``a``."""
    return (a // accumulate + k) * accumulate


def fit_length(
    *,
    batches_per_epoch: int | None,
    accumulate: int = 1,
    max_epochs: int | None,
    max_steps: int | None,
    start: FitStart = FitStart(),
    step_on_epoch_end: bool = True,
) -> tuple[int | None, int | None, int | None]:
    """``(epochs, total_batches, total_steps)`` of the fit: epochs this fit runs (the first, possibly
    partial, one included) and the final position / global step. ``None`` where unbounded.

    >>> # epoch 0 steps after batches 3, 6, 9 and 10 (its last batch steps too); steps 5 and 6 come
    >>> # after batches 3 and 6 of epoch 1, so the fit stops at position 10 + 6
    >>> fit_length(batches_per_epoch=10, accumulate=3, max_epochs=None, max_steps=6)
    (2, 16, 6)
    """
    acc = accumulate
    a = start.batch_in_epoch
    B = batches_per_epoch
    epochs_left = None if max_epochs is None else max_epochs - start.epochs_counted
    if epochs_left is not None and epochs_left <= 0:
        return 0, start.position, start.step
    if max_steps is not None and start.step >= max_steps:
        return 0, start.position, start.step

    if B == 0:
        return 0, start.position, start.step  # Lightning's fit loop is done at once without batches
    if B is None:
        # One endless epoch; it can only end through max_steps.
        if max_steps is None:
            return None, None, None
        end = _kth_stepping_batch(a, max_steps - start.step, acc)
        return 1, start.position + end - a, max_steps

    # first (possibly partial) epoch
    b = B if start.first_epoch_end is None else start.first_epoch_end
    step, pos = start.step, start.position
    n_steps = _stepping_batches(a, b, acc, step_on_epoch_end)
    if max_steps is not None and step + n_steps >= max_steps:
        return 1, pos + _cut(a, b, max_steps - step, acc) - a, max_steps
    step += n_steps
    pos += max(0, b - a)
    epochs = 1

    # full epochs
    spe = _stepping_batches(0, B, acc, step_on_epoch_end)
    full_left = None if epochs_left is None else epochs_left - 1
    if max_steps is None or spe == 0:
        if full_left is None:
            return None, None, None
        return epochs + full_left, pos + full_left * B, step + full_left * spe
    # full epochs that end strictly before max_steps is reached, then the epoch that reaches it
    n_full = (max_steps - step - 1) // spe
    if full_left is not None and n_full >= full_left:
        return epochs + full_left, pos + full_left * B, step + full_left * spe
    epochs += n_full
    pos += n_full * B
    step += n_full * spe
    return epochs + 1, pos + _cut(0, B, max_steps - step, acc), max_steps


def _cut(a: int, b: int, k: int, accumulate: int) -> int:
    """In-epoch index of the batch that takes the ``k``-th step after batch ``a`` (the epoch ends at ``b``)."""
    return min(_kth_stepping_batch(a, k, accumulate), b)


def steps_at(
    position: int,
    *,
    batches_per_epoch: int | None,
    accumulate: int,
    start: FitStart = FitStart(),
    step_on_epoch_end: bool = True,
) -> int:
    """Global step after training batch ``position`` (>= ``start.position``) of the planned layout.

    >>> steps_at(12, batches_per_epoch=10, accumulate=3)   # epoch 0: 4 steps; epoch 1 batch 2: none yet
    4
    """
    acc = accumulate
    a = start.batch_in_epoch
    k = max(0, position - start.position)
    if batches_per_epoch is None:
        return start.step + (a + k) // acc - a // acc
    B = batches_per_epoch
    b = B if start.first_epoch_end is None else start.first_epoch_end
    first = max(0, b - a)
    if k <= first:
        j = a + k
        return start.step + _stepping_batches(a, j, acc, step_on_epoch_end and j == b)
    step = start.step + _stepping_batches(a, b, acc, step_on_epoch_end)
    k -= first
    full, j = divmod(k, B)
    step += full * _stepping_batches(0, B, acc, step_on_epoch_end)
    return step + _stepping_batches(0, j, acc, False)


def val_check_positions(
    batches_per_epoch: int | None,
    val_check_batch: int | None,
    check_val_every_n_epoch: int | None,
    epochs: int | None,
    max_total_batches: int | None = None,
    *,
    start: FitStart = FitStart(),
) -> tuple[int, ...]:
    """Positions after which Lightning runs validation, for ``epochs`` epochs from ``start``.

    Mirrors ``_TrainingEpochLoop._should_check_val_fx`` for batch-based intervals:

    * ``check_val_every_n_epoch=n``: only in epochs ``e`` with ``(e + 1) % n == 0``, after in-epoch batch
      ``j`` (1-based) with ``j % val_check_batch == 0``;
    * ``check_val_every_n_epoch=None``: after every position ``p`` with ``p % val_check_batch == 0``,
      across epoch boundaries;
    * ``val_check_batch=EPOCH_END``: after the last batch of every (gated) epoch.

    ``max_total_batches`` cuts the list (inclusive: a validation due on the fit's last batch runs).
    ``val_check_batch=None`` (no or time-based validation) gives ``()``.

    >>> # 10 batches/epoch, val_check_interval=0.25 -> val_check_batch = int(10 * 0.25) = 2
    >>> val_check_positions(10, 2, 1, epochs=1)
    (2, 4, 6, 8, 10)
    >>> # val_check_interval=0.3 -> 3: batch 10 is no multiple of 3, so no validation at epoch end
    >>> val_check_positions(10, 3, 1, epochs=2)
    (3, 6, 9, 13, 16, 19)
    >>> # every 4 batches across epochs (check_val_every_n_epoch=None), fit cut at 10 batches
    >>> val_check_positions(3, 4, None, epochs=None, max_total_batches=10)
    (4, 8)
    """
    if val_check_batch is None or val_check_batch == 0:
        return ()
    B = batches_per_epoch
    a = start.batch_in_epoch
    first_end = start.first_epoch_end
    if B is None:
        # one endless epoch
        if max_total_batches is None or val_check_batch == EPOCH_END:
            return ()
        epochs, first_end = 1, a + (max_total_batches - start.position)
    elif first_end is None:
        first_end = B
    if epochs is None:
        if max_total_batches is None:
            return ()
        # enough epochs to reach max_total_batches
        after_first = max(0, max_total_batches - start.position - max(0, first_end - a))
        epochs = 1 + -(-after_first // B) if B else 1
    if epochs <= 0:
        return ()
    end = start.position + max(0, first_end - a) + (epochs - 1) * (B or 0)
    if max_total_batches is not None:
        end = min(end, max_total_batches)

    out: list[int] = []
    n = check_val_every_n_epoch

    def gated(e: int) -> bool:
        return n is None or (e + 1) % n == 0

    if val_check_batch == EPOCH_END:
        if first_end > a and gated(start.epoch):
            out.append(start.position + first_end - a)
        p = start.position + max(0, first_end - a)
        for i in range(1, epochs):
            p += B  # type: ignore[operator]
            if gated(start.epoch + i):
                out.append(p)
    elif n is None:
        # counted on the total batch counter, across epochs
        v = val_check_batch
        out.extend(range((start.position // v + 1) * v, end + 1, v))
    else:
        v = val_check_batch
        if gated(start.epoch):
            base = start.position - a
            out.extend(base + j for j in range((a // v + 1) * v, first_end + 1, v))
        if B:
            pattern = range(v, B + 1, v)
            p0 = start.position + max(0, first_end - a)  # position before epoch start.epoch + 1
            # only epochs e with (e + 1) % n == 0; i = e - start.epoch
            i = (-(start.epoch + 1)) % n or n  # first i >= 1 with (start.epoch + i + 1) % n == 0
            while i < epochs:
                base = p0 + (i - 1) * B
                if base >= end:
                    break
                out.extend(base + j for j in pattern)
                i += n
    return tuple(p for p in out if start.position < p <= end)


def epoch_start_positions(
    batches_per_epoch: int | None,
    epochs: int | None,
    total_batches: int | None,
    *,
    start: FitStart = FitStart(),
) -> tuple[int, ...]:
    """Positions at which the ``epochs`` epochs of a fit begin (the first one at ``start.position``).

    >>> epoch_start_positions(10, 3, 30)
    (0, 10, 20)
    >>> # resumed 4 batches into an epoch of 10: the partial epoch, then full ones; max_steps cut the fit at 22
    >>> epoch_start_positions(10, 3, 22, start=FitStart(position=14, batch_in_epoch=4, epochs_counted=1))
    (14, 20)
    """
    if epochs is None or total_batches is None or epochs <= 0:
        return ()
    positions = [start.position]
    if batches_per_epoch:
        first_end = batches_per_epoch if start.first_epoch_end is None else start.first_epoch_end
        p = start.position + max(0, first_end - start.batch_in_epoch)
        for _ in range(epochs - 1):
            if p >= total_batches:
                break
            positions.append(p)
            p += batches_per_epoch
    return tuple(positions)


def build_schedule(
    *,
    batches_per_epoch: int | None,
    accumulate: int = 1,
    max_epochs: int | None,
    max_steps: int | None,
    val_check_batch: int | None,
    check_val_every_n_epoch: int | None,
    val_batches_per_run: int | None,
    val_every_s: float | None = None,
    sanity_batches: int | None = 0,
    max_time_s: float | None = None,
    start: FitStart = FitStart(),
    step_on_epoch_end: bool = True,
) -> FitSchedule:
    """Assemble a :class:`FitSchedule` from plain settings (Lightning-free; see the module example).

    ``val_check_batch``: Lightning's ``trainer.val_check_batch`` (``EPOCH_END`` for its ``inf``;
    ``None`` for time-based or no validation). ``val_batches_per_run=0`` disables validation.
    """
    epochs, total_batches, total_steps = fit_length(
        batches_per_epoch=batches_per_epoch,
        accumulate=accumulate,
        max_epochs=max_epochs,
        max_steps=max_steps,
        start=start,
        step_on_epoch_end=step_on_epoch_end,
    )
    vals: tuple[int, ...] = ()
    if val_batches_per_run != 0 and val_every_s is None and total_batches is not None:
        vals = val_check_positions(
            batches_per_epoch,
            val_check_batch,
            check_val_every_n_epoch,
            epochs,
            total_batches,
            start=start,
        )
    return FitSchedule(
        batches_per_epoch=batches_per_epoch,
        accumulate=accumulate,
        max_epochs=max_epochs,
        max_steps=max_steps,
        total_steps=total_steps,
        total_batches=total_batches,
        val_batches_per_run=val_batches_per_run,
        val_after_batches=vals,
        val_every_s=val_every_s,
        sanity_batches=sanity_batches,
        max_time_s=max_time_s,
        start_batch=start.position,
        start_step=start.step,
        start_epoch=start.epoch,
        start_batch_in_epoch=start.batch_in_epoch,
        first_epoch_end=start.first_epoch_end,
        step_on_epoch_end=step_on_epoch_end,
        epoch_starts=epoch_start_positions(batches_per_epoch, epochs, total_batches, start=start),
        val_check_batch=val_check_batch,
        check_val_every_n_epoch=check_val_every_n_epoch,
        start_epochs_counted=start.epochs_counted,
    )
