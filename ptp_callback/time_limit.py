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
know to better than a few percent, so the walk is averaged over limits within
:data:`SPREAD` of the one left: close to the stop that spread is a fraction of a batch and the
answer is the walk's; far from it the average is the mean overshoot over the work's mix.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property

__all__ = ["Ahead", "SPREAD", "time_to_stop"]

#: How far (a share of the time the limit leaves) the walk's limit is spread: the forecast's
#: uncertainty about when it will be reached (a CPU fit's batches drift by 10% over it; an epoch
#: boundary's cost varies more from one to the next).
SPREAD = 0.15
_SAMPLES = 15  # odd: one of them is the limit itself
#: Beyond this many stretches of batches between other work (about 7 ms of walking on a 2-core VM)
#: the walk stops: the stop is then far,
#: and the caller spreads the limit over the kinds by their shares instead.
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
    ``unit``: a later occurrence's seconds per kind.
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
        for kind in ("val", "save", "epoch"):
            for _ in range(pending.get(kind, 0)):
                seconds = first.pop(kind, ahead.unit[kind])
                spent[kind] += seconds
                t += seconds
        if ahead.total is not None and p >= ahead.total:
            return stretches
        q = ahead.next_event(p)
        end = ahead.total if q is None or (ahead.total is not None and q > ahead.total) else q
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


def time_to_stop(ahead: Ahead, limit_left: float) -> list[tuple[float, dict[str, float], int | None]] | None:
    """Where a limit ``limit_left`` seconds away stops the fit, for limits spread over
    :data:`SPREAD` of it: for each, the limit, the seconds per kind (``train``, ``val``, ``epoch``,
    ``save``) from now to the end of the training batch at which it stops, and that batch's
    position (``None`` where the schedule ends before that limit). ``None`` when the stop is too
    far to walk to."""
    low, high = limit_left * (1.0 - SPREAD), limit_left * (1.0 + SPREAD)
    stretches = _walk(ahead, high)
    if stretches is None:
        return None
    ends = [s.end for s in stretches]
    samples = 1 if high <= low else _SAMPLES
    out: list[tuple[float, dict[str, float], int | None]] = []
    for i in range(samples):
        limit = low + (high - low) * i / (samples - 1) if samples > 1 else limit_left
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
