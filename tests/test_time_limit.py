"""The walk to where a max_time limit stops a fit (Lightning checks it at training batch ends)."""

from __future__ import annotations

import pytest

from ptp_callback.time_limit import Ahead, time_to_stop, time_to_stop_at_epoch_ends

UNIT = {"train": 1.0, "val": 2.0, "epoch": 0.5, "save": 3.0}


def ahead(position: int = 0, total: int | None = 30, **kw) -> Ahead:
    settings = dict(vals=(10, 20, 30), saves=(10, 20, 30), epochs=(0, 10, 20), here={}, first={}, unit=UNIT)
    settings.update(kw)
    return Ahead(position, total, **settings)


def test_a_limit_inside_a_stretch_of_batches_stops_at_the_batch_it_runs_out_in():
    stops = time_to_stop(ahead(position=2), 4.5)  # batches 3..10 end at 1, 2, ... 8 s from now
    assert {stop for _, _, stop in stops} == {6, 7, 8}  # 4.5 s, spread over 15% of it
    _limit, seconds, stop = stops[len(stops) // 2]  # the limit itself
    assert (stop, seconds["train"], seconds["val"]) == (7, 5.0, 0.0)


def test_a_limit_that_runs_out_during_the_work_between_epochs_stops_after_the_next_epochs_first_batch():
    # batches 1..10 end at 10 s; validation, save and the next epoch's start take 5.5 s more: a limit
    # at 12 s runs out in the save, and the first batch to end after it is batch 11, at 16.5 s
    stops = time_to_stop(ahead(), 12.0)
    assert {stop for _, _, stop in stops} == {11}
    seconds = stops[0][1]
    assert seconds == pytest.approx({"train": 11.0, "val": 2.0, "epoch": 0.5, "save": 3.0})


def test_a_schedule_that_ends_before_the_limit_has_no_stop():
    assert all(stop is None for _, _, stop in time_to_stop(ahead(position=25), 100.0))


def test_the_next_occurrence_and_the_work_here_come_first():
    # a validation run half done at position 10 (1 s left), its save and the epoch start still to come
    a = ahead(position=10, here={"val": 1, "save": 1, "epoch": 1}, first={"val": 1.0})
    (_limit, seconds, stop), *_ = time_to_stop(a, 0.0)
    assert stop == 11
    assert seconds == pytest.approx({"train": 1.0, "val": 1.0, "epoch": 0.5, "save": 3.0})


def test_a_cycle_of_epochs_repeats_for_a_fit_that_only_the_limit_ends():
    cycle = ahead(total=None, vals=(10, 20), saves=(10, 20), epochs=(0, 10), period=20)
    assert cycle.next_event(20) == 30 and cycle.next_event(25) == 30 and cycle.next_event(30) == 40
    assert cycle.work_at(40) == {"val": 1, "save": 1, "epoch": 1}
    assert cycle.work_at(35) == {"val": 0, "save": 0, "epoch": 0}
    # from a resumed fit's partial first epoch (batches 5..9), whole epochs repeat from batch 10
    resumed = ahead(position=5, total=None, vals=(10, 20, 30), saves=(10, 20, 30), epochs=(10, 20), period=20,
                    period_base=10)
    assert [resumed.next_event(p) for p in (5, 10, 30, 31)] == [10, 20, 40, 40]
    assert resumed.work_at(50) == {"val": 1, "save": 1, "epoch": 1}
    assert [resumed.previous_save(q) for q in (9, 10, 29, 30, 31, 55)] == [None, 10, 20, 30, 30, 50]
    # 10 batches and 5.5 s between epochs: a limit at 100 s runs out in the sixth epoch's batches
    # (the fit starts after the partial epoch's 5 batches: 5 s, then 5.5 s at its end)
    stops = time_to_stop(resumed, 89.5)
    limit, seconds, stop = stops[len(stops) // 2]
    assert (limit, stop, seconds["val"], seconds["epoch"]) == (89.5, 62, 6 * 2.0, 6 * 0.5)


def test_a_limit_checked_at_epoch_ends_stops_after_the_epoch_it_runs_out_in():
    # Timer(interval="epoch"): each epoch is 10 batches, then its validation and save (checked after
    # them, at 15 s, 30.5 s, ...), then the next epoch's start (0.5 s)
    stops = time_to_stop_at_epoch_ends(ahead(), 12.0)
    assert {stop for _, _, stop in stops} == {10}
    assert stops[0][1] == pytest.approx({"train": 10.0, "val": 2.0, "epoch": 0.0, "save": 3.0})
    limit, seconds, stop = time_to_stop_at_epoch_ends(ahead(), 20.0)[len(stops) // 2]
    assert (limit, stop) == (20.0, 20)
    assert seconds == pytest.approx({"train": 20.0, "val": 4.0, "epoch": 0.5, "save": 6.0})
    assert time_to_stop_at_epoch_ends(ahead(), 60.0)[-1][2] is None  # the schedule ends first (46 s)


def test_a_walk_too_long_to_follow_gives_way():
    # validation after every batch of a fit with a week's limit: far more stretches than walked
    every = ahead(total=None, vals=(1,), saves=(), epochs=(), period=1, unit=dict(UNIT, val=0.0))
    assert time_to_stop(every, 7 * 86400.0) is None
