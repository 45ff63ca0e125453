"""Fit prediction, remaining time and online step statistics, on virtual time."""

from __future__ import annotations

import math

import pytest

from ptp_callback.calibrate import StepStats
from ptp_callback.eta import FitPlan, predict_fit, remaining_time
from ptp_callback.schedule import build_schedule


def schedule(**overrides):
    settings = dict(batches_per_epoch=100, accumulate=1, max_epochs=3, max_steps=None, val_check_batch=50,
                    check_val_every_n_epoch=1, val_batches_per_run=10, sanity_batches=2)
    settings.update(overrides)
    return build_schedule(**settings)


def test_fit_prediction_adds_the_parts():
    plan = FitPlan(train_batch_s=0.2, optimizer_step_s=0.05, val_batch_s=0.1, warmup_s=1.5)
    fit = predict_fit(schedule(), plan)
    # 300 batches x 0.2 + 300 steps x 0.05 = 75; 6 validation runs x 10 x 0.1 = 6; sanity 2 x 0.1
    assert math.isclose(fit.train_s, 75.0)
    assert math.isclose(fit.val_s, 6.0)
    assert math.isclose(fit.sanity_s, 0.2)
    assert math.isclose(fit.total_s, 75.0 + 6.0 + 0.2 + 1.5)


def test_accumulation_steps_the_optimizer_less_often():
    plan = FitPlan(train_batch_s=0.2, optimizer_step_s=1.0, val_batch_s=0.0)
    fit = predict_fit(schedule(accumulate=4, val_batches_per_run=0, sanity_batches=0), plan)
    # 3 epochs x 25 steps (100 batches / 4) = 75 optimizer steps
    assert math.isclose(fit.train_s, 300 * 0.2 + 75 * 1.0)


def test_max_time_caps_the_prediction():
    fit = predict_fit(schedule(max_time_s=10.0), FitPlan(0.2, 0.0, 0.1))
    assert fit.capped_by_max_time and fit.total_s == 10.0


def test_remaining_time_counts_only_what_is_left():
    s = schedule()
    # after 120 batches: 180 batches and validation runs at 150, 200, 250, 300 are left
    left = remaining_time(s, 120, batch_s=0.1, val_batch_s=0.05, elapsed_s=30.0, measured=True)
    assert left.train_batches == 180 and left.val_runs == 4
    assert math.isclose(left.seconds, 180 * 0.1 + 4 * 10 * 0.05)
    pending = remaining_time(s, 150, batch_s=0.1, val_batch_s=0.05, elapsed_s=30.0, measured=True, val_pending=True)
    assert pending.val_runs == 4  # the run after batch 150 has not started yet


def test_time_based_validation_is_costed_from_its_interval():
    s = schedule(val_check_batch=None, val_every_s=5.0)
    left = remaining_time(s, 0, batch_s=0.1, val_batch_s=0.05, elapsed_s=0.0, measured=False)
    # 300 batches x 0.1 = 30 s of training -> 6 validation runs of 10 batches x 0.05
    assert math.isclose(left.seconds, 30.0 + 6 * 0.5)


def feed(stats: StepStats, intervals: list[float], start: float = 0.0, *, first: bool = True) -> float:
    """Batch ends ``intervals`` apart (the first one at ``start`` when ``first``); returns the last time."""
    t = start
    if first:
        stats.batch_end(t)
    for interval in intervals:
        t += interval
        stats.batch_end(t)
    return t


def test_warmup_batches_are_dropped():
    stats = StepStats(warmup_batches=3)
    feed(stats, [5.0, 2.0, 1.0] + [0.1] * 20)
    assert stats.batch.samples == 20
    assert math.isclose(stats.batch.mean_s, 0.1)


def test_slow_leading_intervals_after_warmup_count_as_warmup():
    stats = StepStats(warmup_batches=1)
    feed(stats, [9.0, 0.9, 0.5] + [0.1] * 10)
    assert math.isclose(stats.batch.mean_s, 0.1)
    assert stats.batch.skipped_warmup == 3


def test_validation_time_is_taken_out_of_the_batch_interval():
    stats = StepStats(warmup_batches=0)
    t = feed(stats, [0.1] * 5)
    stats.validation(t, t + 2.0, batches=20)  # a 2 s validation run right after batch 5
    stats.batch_end(t + 2.1)  # batch 6 then takes 0.1 s
    feed(stats, [0.1] * 4, start=t + 2.1, first=False)
    assert stats.batch.mean_s == pytest.approx(0.1)
    assert stats.val_batch_s() == pytest.approx(0.1)


def test_state_dict_round_trip_keeps_measurements_and_rewarms():
    stats = StepStats(warmup_batches=2)
    feed(stats, [1.0, 1.0] + [0.2] * 10)
    restored = StepStats(warmup_batches=2)
    restored.load_state_dict(stats.state_dict())
    assert restored.batch.mean_s == pytest.approx(0.2)
    feed(restored, [3.0, 3.0, 0.2])  # the new process warms up again: its first intervals are skipped
    assert restored.batch.mean_s == pytest.approx(0.2)
