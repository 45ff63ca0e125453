"""Where a ``max_time`` limit stops a fit: at the first training batch that ends past it.

Lightning's ``Timer`` compares the time since training started with the limit at the end of each
training batch, and nowhere else. A limit that runs out during a validation run, a checkpoint save or
an epoch boundary therefore lets all of that finish, starts the next epoch and runs one more batch
before the fit stops (seen on an H100, 2026-11-26: a ``max_time=20s`` ResNet-18 fit whose third
epoch's last batch ended 20 ms before its limit validated, saved, started a fourth epoch and stopped
after its first batch, 1.5 s past the limit, then validated and saved once more). Spreading
the time the limit leaves over the kinds of work by their shares misses those seconds exactly when
they are all that is left.

:func:`time_to_stop` walks the work ahead in its real order (training batches, and between them the
validation runs, saves and epoch starts at their positions) up to the batch at which the limit
stops the fit. Far from the stop, where that batch lands depends on seconds the forecast cannot
know to better than a few percent, so the walk is repeated for limits within :data:`SPREAD` of
the one left; the forecaster takes the median of their outcomes by how far past its limit each
runs (most limits run out inside a stretch of batches). Close to the stop the spread is a fraction
of a batch and every outcome is the same. A ``Timer(interval="epoch")`` checks at epoch ends only:
:func:`time_to_stop_at_epoch_ends` walks to the first epoch end past the limit instead.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property

__all__ = ["Ahead", "SPREAD", "time_to_stop", "time_to_stop_at_epoch_ends"]

#: How far (a share of the time the limit leaves) the walk's limit is spread: the forecast's
#: uncertainty about when it will be reached (a CPU fit's batches drift by 10% over it; an epoch
#: boundary's cost varies more from one to the next).
SPREAD = 0.15
_SAMPLES = 15  # odd: one of them is the limit itself
#: Beyond this many stretches of batches between other work (about 7 ms of walking on a 2-core VM)
#: the walk stops: the stop is then far, and the caller spreads the limit over the kinds by their
#: shares instead.
MAX_STRETCHES = 1024
_PHASE = ("train", "val", "epoch", "save")


@dataclass(frozen=True)
class Ahead:
    """The work ahead of a fit, as :func:`time_to_stop` walks it.

    ``position``: training batches done; ``total``: batches the schedule has (``None``: only the
    limit ends it); ``vals``, ``saves``, ``epochs``: the positions after which validation runs and
    saves happen and at which epochs begin (sorted; a position may repeat in ``saves``). With
    ``period``, they lay out a few epochs of a fit that only the limit ends, and from
    ``period_base`` (their first whole epoch's start) on repeat every ``period`` batches.
    ``here``: occurrences at ``position`` still to come (``val``, ``save``, ``epoch``) before the
    next batch; ``first``: the next occurrence's seconds per kind (a running one's remainder);
    ``unit``: a later occurrence's seconds per kind; ``first_position``: where the fit began (an
    epoch starting there follows no epoch's end).
    """

    position: int
    total: int | None
    vals: tuple[int, ...]
    saves: tuple[int, ...]
    epochs: tuple[int, ...]
    here: dict[str, int]
    first: dict[str, float]
    unit: dict[str, float]
    period: int | None = None
    period_base: int = 0
    first_position: int = 0

    def _positions(self, kind: str) -> tuple[int, ...]:
        return {"val": self.vals, "save": self.saves, "epoch": self.epochs}[kind]

    @cached_property
    def _offsets(self) -> dict[str, list[int]]:
        """One period's positions per kind as offsets from ``period_base``: in (0, period] for work
        after a batch (validation, saves), in [0, period) for epoch starts."""
        period = self.period or 0
        out = {}
        for kind in ("val", "save", "epoch"):
            lo, hi = (0, period - 1) if kind == "epoch" else (1, period)
            out[kind] = [x - self.period_base for x in self._positions(kind) if lo <= x - self.period_base <= hi]
        return out

    def _next_in(self, kind: str, p: int) -> int | None:
        positions = self._positions(kind)
        if not self.period or p < self.period_base:
            i = bisect.bisect_right(positions, p)
            if i < len(positions):
                return positions[i]
            if not self.period:
                return None
        offsets = self._offsets[kind]
        if not offsets:
            return None
        cycles, r = divmod(max(0, p - self.period_base), self.period)
        i = bisect.bisect_right(offsets, r)
        if i == len(offsets):
            cycles, i = cycles + 1, 0
        return self.period_base + cycles * self.period + offsets[i]

    def next_event(self, p: int) -> int | None:
        """The first position after ``p`` with other work than a batch (``None``: none known)."""
        candidates = [q for q in (self._next_in(kind, p) for kind in ("val", "save", "epoch")) if q is not None]
        return min(candidates) if candidates else None

    def _count(self, kind: str, q: int) -> int:
        after_batch = kind != "epoch"
        end = self.period_base + (self.period or 0)
        if self.period and (q > end if after_batch else q >= end):
            r = (q - self.period_base - 1) % self.period + 1 if after_batch else (q - self.period_base) % self.period
            q = self.period_base + r
        positions = self._positions(kind)
        return bisect.bisect_right(positions, q) - bisect.bisect_left(positions, q)

    def previous_save(self, q: int) -> int | None:
        """The last position at or before ``q`` after which a save is laid out (``None``: none)."""
        end = self.period_base + (self.period or 0)
        if not self.period or q <= end:
            i = bisect.bisect_right(self.saves, q)
            return self.saves[i - 1] if i else None
        offsets = self._offsets["save"]
        if not offsets:
            return None
        cycles, r = divmod(q - self.period_base - 1, self.period)
        i = bisect.bisect_right(offsets, r + 1)
        if i:
            return self.period_base + cycles * self.period + offsets[i - 1]
        return self.period_base + (cycles - 1) * self.period + offsets[-1]

    def batches_until(self, p: int) -> int | None:
        """The position that batches from ``p`` run to before other work or the schedule's end
        (``None``: neither is known)."""
        q = self.next_event(p)
        return self.total if q is None or (self.total is not None and q > self.total) else q

    def work_at(self, q: int) -> dict[str, int]:
        """The occurrences of other work at position ``q``, before the batch after it."""
        return {kind: self._count(kind, q) for kind in ("val", "save", "epoch")}


@dataclass(frozen=True)
class _Stretch:
    """Batches run back to back between other work: ``count`` of them, the first ending at
    ``first_end`` seconds from now and each later one ``unit`` after it; ``before`` is the seconds
    per kind spent before the stretch's first batch began at ``start``."""

    start: float
    first_end: float
    unit: float
    count: int
    position: int
    before: dict[str, float]

    @property
    def end(self) -> float:
        return self.first_end + (self.count - 1) * self.unit


def _spread(limit_left: float) -> list[float]:
    """The limits a walk is repeated for: :data:`SPREAD` either side of ``limit_left``, evenly, the
    limit itself in the middle (just it, when no time is left)."""
    if limit_left <= 0:
        return [limit_left]
    low, high = limit_left * (1.0 - SPREAD), limit_left * (1.0 + SPREAD)
    return [low + (high - low) * i / (_SAMPLES - 1) for i in range(_SAMPLES)]


def _run_pending(ahead: Ahead, pending: dict[str, int], first: dict[str, float], spent: dict[str, float],
                 kinds: tuple[str, ...]) -> float:
    """Charge the occurrences of ``kinds`` due at a position (the next of each kind at its ``first``
    cost, later ones at its unit) to ``spent``; returns their seconds."""
    total = 0.0
    for kind in kinds:
        for _ in range(pending.get(kind, 0)):
            seconds = first.pop(kind, ahead.unit[kind])
            spent[kind] += seconds
            total += seconds
    return total


def _walk(ahead: Ahead, horizon: float) -> list[_Stretch] | None:
    """The stretches of batches from now until one ends past ``horizon`` seconds or the schedule
    ends (``None``: more than :data:`MAX_STRETCHES` of them)."""
    spent = dict.fromkeys(_PHASE, 0.0)
    t = 0.0
    p = ahead.position
    pending = dict(ahead.here)
    first = dict(ahead.first)
    stretches: list[_Stretch] = []
    while len(stretches) < MAX_STRETCHES:
        t += _run_pending(ahead, pending, first, spent, ("val", "save", "epoch"))
        if ahead.total is not None and p >= ahead.total:
            return stretches
        end = ahead.batches_until(p)
        batch = first.pop("train", ahead.unit["train"])
        unit = ahead.unit["train"]
        if end is None:  # nothing but batches ahead: enough of them to pass the horizon
            count = max(1, math.ceil((horizon - t - batch) / unit) + 1) if unit > 0 else 1
        else:
            count = end - p
        stretch = _Stretch(t, t + batch, unit, count, p, dict(spent))
        stretches.append(stretch)
        if stretch.end >= horizon or end is None:
            return stretches
        spent["train"] += stretch.end - t
        t = stretch.end
        p = end
        pending = ahead.work_at(p)
    return None


def _epoch_ends(ahead: Ahead, horizon: float) -> list[tuple[float, dict[str, float], int]] | None:
    """For a limit checked at epoch ends only (``Timer(interval="epoch")``): each epoch end from now
    until one is reached past ``horizon`` seconds -- the time of the check (after the epoch's last
    batch, its validation run and its saves), the seconds per kind until then, its position.
    ``None``: more than :data:`MAX_STRETCHES` epochs to walk."""
    spent = dict.fromkeys(_PHASE, 0.0)
    t = 0.0
    p = ahead.position
    pending = dict(ahead.here)
    first = dict(ahead.first)
    ends: list[tuple[float, dict[str, float], int]] = []
    while len(ends) < MAX_STRETCHES:
        t += _run_pending(ahead, pending, first, spent, ("val", "save"))
        if (pending.get("epoch", 0) or p == ahead.total) and p != ahead.first_position:
            ends.append((t, dict(spent), p))  # the check, before the next epoch starts
            if t >= horizon or p == ahead.total:
                return ends
        t += _run_pending(ahead, pending, first, spent, ("epoch",))
        if ahead.total is not None and p >= ahead.total:
            return ends
        end = ahead.batches_until(p)
        if end is None:  # no epoch end ahead is known
            return ends
        seconds = first.pop("train", ahead.unit["train"]) + (end - p - 1) * ahead.unit["train"]
        spent["train"] += seconds
        t += seconds
        p = end
        pending = ahead.work_at(p)
    return None


def time_to_stop_at_epoch_ends(ahead: Ahead, limit_left: float) -> list[tuple[float, dict[str, float], int | None]] | None:
    """As :func:`time_to_stop`, for a limit checked at epoch ends only: each spread limit stops the
    fit at the first epoch end reached after it (the seconds include that epoch's validation and
    saves, which run before the check)."""
    limits = _spread(limit_left)
    ends = _epoch_ends(ahead, limits[-1])
    if ends is None or (ahead.total is None and (not ends or ends[-1][0] < limits[-1])):
        return None  # (without an epoch length the ends ahead are not known)
    times = [t for t, _, _ in ends]
    out: list[tuple[float, dict[str, float], int | None]] = []
    for limit in limits:
        j = bisect.bisect_left(times, limit)
        out.append((limit, {}, None) if j == len(ends) else (limit, dict(ends[j][1]), ends[j][2]))
    return out


def time_to_stop(ahead: Ahead, limit_left: float) -> list[tuple[float, dict[str, float], int | None]] | None:
    """Where a limit ``limit_left`` seconds away stops the fit, for limits spread over
    :data:`SPREAD` of it: for each, the limit, the seconds per kind (``train``, ``val``, ``epoch``,
    ``save``) from now to the end of the training batch at which it stops, and that batch's
    position (``None`` where the schedule ends before that limit). ``None`` when the stop is too
    far to walk to."""
    limits = _spread(limit_left)
    stretches = _walk(ahead, limits[-1])
    if stretches is None:
        return None
    ends = [s.end for s in stretches]
    out: list[tuple[float, dict[str, float], int | None]] = []
    for limit in limits:
        j = bisect.bisect_left(ends, limit)
        if j == len(stretches):
            out.append((limit, {}, None))  # the schedule ends before this limit
            continue
        s = stretches[j]
        k = 1 if limit <= s.first_end or s.unit <= 0 else 1 + math.ceil((limit - s.first_end) / s.unit - 1e-9)
        k = min(k, s.count)
        seconds = dict(s.before)
        seconds["train"] += s.first_end + (k - 1) * s.unit - s.start
        out.append((limit, seconds, s.position + k))
    return out
