"""The run forecaster on event streams of every schedule form, on virtual time."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fit_events import Costs, feed, play
from ptp_callback.checkpoints import CheckpointSettings, save_positions
from ptp_callback.forecast import OVERRUN_SHARE, REFRESH_SHARE, RunForecaster
from ptp_callback.run_plan import RunPlan
from ptp_callback.schedule import EPOCH_END, FitStart, build_schedule


def schedule_of(**overrides):
    settings = dict(batches_per_epoch=10, accumulate=1, max_epochs=3, max_steps=None, val_check_batch=10,
                    check_val_every_n_epoch=1, val_batches_per_run=4, sanity_batches=2)
    settings.update(overrides)
    return build_schedule(**settings)


def run_batches(forecaster: RunForecaster, t: float, count: int, batch_s: float) -> float:
    """``count`` training batches of ``batch_s`` each from ``t``; returns the time after the last."""
    for _ in range(count):
        forecaster.batch_start(t)
        t += batch_s
        forecaster.batch_end(t)
    return t


def plan_of(costs: Costs, **overrides) -> RunPlan:
    settings = dict(train_batch_s=costs.batch, val_run_s=costs.val_run, epoch_s=costs.epoch,
                    first_epoch_s=costs.first_epoch, save_s=costs.save, sanity_s=costs.sanity,
                    warmup_s=costs.first_extra, end_s=costs.end)
    settings.update(overrides)
    return RunPlan(**settings)


FORMS = {
    "epochs, default checkpoints": (dict(), CheckpointSettings()),
    "val_check_interval=0.25, saves after each validation":
        (dict(val_check_batch=2), CheckpointSettings(on_epoch_end=False)),
    "validation every 4 batches across epochs": (dict(val_check_batch=4, check_val_every_n_epoch=None),
                                                CheckpointSettings(on_epoch_end=False)),
    "max_steps mid-epoch, accumulation": (dict(max_epochs=None, max_steps=7, accumulate=3), CheckpointSettings()),
    "every_n_train_steps with save_last": (dict(), CheckpointSettings(every_n_train_steps=4, every_n_epochs=0,
                                                                      save_last=True)),
    "validation every second epoch": (dict(check_val_every_n_epoch=2), CheckpointSettings(every_n_epochs=2)),
    "validation at the end of an unsized epoch": (dict(val_check_batch=EPOCH_END), CheckpointSettings()),
    "no validation, no checkpoints": (dict(val_batches_per_run=0, val_check_batch=None, sanity_batches=0), None),
    "resumed mid-epoch": (dict(start=FitStart(position=14, step=14, epoch=1, epochs_counted=1, batch_in_epoch=4),
                               sanity_batches=0), CheckpointSettings()),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_remaining_time_is_exact_when_every_unit_costs_what_the_plan_says(form):
    overrides, checkpoint = FORMS[form]
    schedule = schedule_of(**overrides)
    saves = save_positions(schedule, checkpoint) if checkpoint else ()
    costs = Costs(first_extra=4.0)
    events = list(play(schedule, saves, costs))
    fit_end = events[-1][0]
    forecaster = RunForecaster(schedule, saves=saves)
    forecaster.fit_start(0.0)
    forecaster.set_plan(plan_of(costs), 0.0)
    assert forecaster.predicted_total_s == pytest.approx(fit_end)
    checked = 0
    for (t, name), (t_next, _next) in zip(events[1:], events[2:] + [(fit_end, "")]):
        feed(forecaster, name, t)
        for now in (t, (t + t_next) / 2):  # at the event, and half-way to the next one
            assert forecaster.remaining_s(now) == pytest.approx(fit_end - now, abs=1e-9), (name, now)
            checked += 1
    assert checked > 20
    assert forecaster.remaining_s(fit_end) == 0.0
    assert forecaster.before_step_one_s == pytest.approx(fit_end)


def test_the_schedule_forms_cover_what_lightning_counts():
    # spot checks of the layouts the test above plays (the rules are tested against real fits in
    # test_checkpoints.py and test_schedule.py)
    s = schedule_of(val_check_batch=2)
    assert s.val_after_batches[:5] == (2, 4, 6, 8, 10)
    assert save_positions(s, CheckpointSettings(on_epoch_end=False))[:3] == (2, 4, 6)
    s = schedule_of(max_epochs=None, max_steps=7, accumulate=3)
    # epoch 0 steps after batches 3, 6, 9 and 10 (4 steps); steps 5-7 come after batches 3, 6, 9 of epoch 1
    assert (s.total_batches, s.epoch_starts) == (19, (0, 10))


def test_measured_costs_replace_a_wrong_plan_kind_by_kind():
    schedule = schedule_of(max_epochs=4)
    saves = save_positions(schedule, CheckpointSettings())
    costs = Costs()
    events = list(play(schedule, saves, costs))
    fit_end = events[-1][0]
    forecaster = RunForecaster(schedule, saves=saves)
    forecaster.fit_start(0.0)
    doubled = plan_of(costs, train_batch_s=2.0, val_run_s=4.0, epoch_s=1.0, save_s=6.0, sanity_s=1.4)
    forecaster.set_plan(doubled, 0.0)
    assert forecaster.remaining_s(0.0) > 1.5 * fit_end
    epochs_started = 0
    for t, name in events[1:]:
        feed(forecaster, name, t)
        epochs_started += name == "epoch_start"
        if name == "batch_end" and epochs_started == 3 and forecaster.position == 25:
            # every kind has been seen (the epoch boundary after the first one too): only the
            # end is still the plan's, and it was right
            assert forecaster.remaining_s(t) == pytest.approx(fit_end - t, abs=1e-9)
            parts = forecaster.parts(t)
            assert all(parts[k].measured for k in ("train", "val", "save", "epoch"))
            break
    else:
        pytest.fail("the fit did not reach batch 25")


def test_before_any_measurement_the_optimizer_step_is_shared_over_the_accumulated_batches():
    schedule = schedule_of(max_epochs=1, accumulate=4, val_batches_per_run=0, val_check_batch=None,
                           sanity_batches=0)  # 10 batches, steps after batches 4, 8 and 10
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, optimizer_step_s=0.5))
    forecaster.fit_start(0.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(10 * 1.0 + 3 * 0.5)


def test_max_time_alone_gives_an_eta():
    schedule = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None, val_check_batch=10,
                              check_val_every_n_epoch=1, val_batches_per_run=2, max_time_s=100.0)
    assert schedule.total_batches is None
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, save_s=3.0, end_s=2.0), saves=())
    forecaster.fit_start(0.0)
    # the limit, the batch it runs out in (half of one, on average over where it does), then the end
    assert forecaster.remaining_s(0.0) == pytest.approx(100.0 + 0.5 + 2.0, abs=0.1)
    forecaster.train_start(5.0)
    forecaster.epoch_start(5.0)
    assert forecaster.remaining_s(35.0) == pytest.approx(70.0 + 0.5 + 2.0, abs=0.1)  # the limit counts from train start
    resumed = RunForecaster(schedule, RunPlan(train_batch_s=1.0, end_s=2.0))
    resumed.fit_start(0.0, limit_used_s=60.0)  # a resumed fit: its Timer had used 60 s already
    assert resumed.remaining_s(0.0) == pytest.approx(40.0 + 0.5 + 2.0, abs=0.1)  # known before training starts
    resumed.train_start(1.0, limit_used_s=60.0)
    assert resumed.remaining_s(11.0) == pytest.approx(30.0 + 0.5 + 2.0, abs=0.1)


@pytest.mark.parametrize("batches, stopped, raised", [(10, (10, 50), False), (20, None, False), (10, (10, 50), True)],
                         ids=["early stop", "time ran out", "an exception"])
def test_a_fit_with_max_time_that_stops_long_before_it_is_reported_as_stopped_early(batches, stopped, raised):
    schedule = build_schedule(batches_per_epoch=10, max_epochs=5, max_steps=None, val_check_batch=None,
                              check_val_every_n_epoch=1, val_batches_per_run=0, max_time_s=20.0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0))
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    for t in range(batches):
        if t % 10 == 0:
            forecaster.epoch_start(float(t))
        forecaster.batch_start(float(t))
        forecaster.batch_end(t + 1.0)
    if not raised:  # Lightning's exception path skips on_train_end
        forecaster.train_end(batches + 0.1)
    forecaster.fit_end(batches + 0.2)
    # EarlyStopping (or an exception) 10 s into a 20 s limit: what ran is set beside its prediction;
    # a fit that ran to its limit ended as planned
    assert forecaster.stopped_early == stopped


def test_a_max_time_stop_mid_epoch_still_runs_a_validation_and_the_save_before_the_end():
    # Lightning validates when should_stop is set in an epoch that validates, then saves at the
    # epoch's end: seen on an H100 (2026-11-24), 0.8 s of validation and the save after the limit
    schedule = build_schedule(batches_per_epoch=100, max_epochs=None, max_steps=None, val_check_batch=100,
                              check_val_every_n_epoch=1, val_batches_per_run=10, max_time_s=20.0)
    plan = RunPlan(train_batch_s=0.1, val_batch_s=0.05, val_run_s=0.3, save_s=0.4, end_s=0.3)
    forecaster = RunForecaster(schedule, plan, saves=())
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    forecaster.epoch_start(0.0)
    t = run_batches(forecaster, 0.0, 100, 0.1)
    forecaster.val_start(t)
    forecaster.val_end(t + 0.8)
    forecaster.epoch_end(t + 0.8)
    forecaster.save_start(t + 0.8)
    forecaster.save_end(t + 1.2)
    forecaster.epoch_start(t + 1.2)
    run_batches(forecaster, t + 1.2, 88, 0.1)  # up to the limit, 20 s after training started
    # the limit is spent: what is left is one validation run (0.8 s measured), a save (0.4 s) and the end
    assert forecaster.remaining_s(20.0) == pytest.approx(0.8 + 0.4 + 0.3, abs=0.06)
    forecaster.val_start(20.0)
    assert forecaster.remaining_s(20.5) == pytest.approx(0.3 + 0.4 + 0.3, abs=0.06)  # that run is half done


def test_a_max_time_stop_validates_only_in_an_epoch_that_validates():
    # check_val_every_n_epoch=2: epoch 0 does not validate, epoch 1 does. A stop right after epoch
    # 0's last batch runs no validation; one during epoch 1 does.
    schedule = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None, val_check_batch=10,
                              check_val_every_n_epoch=2, val_batches_per_run=4, max_time_s=10.0)
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0, end_s=0.5)
    at_epoch_end = RunForecaster(schedule, plan, saves=())
    at_epoch_end.fit_start(0.0)
    at_epoch_end.train_start(0.0)
    at_epoch_end.epoch_start(0.0)
    run_batches(at_epoch_end, 0.0, 10, 1.0)
    assert at_epoch_end.remaining_s(10.0) == pytest.approx(0.5)  # the end only
    in_epoch_1 = RunForecaster(schedule, replace(plan, train_batch_s=0.5), saves=())
    in_epoch_1.fit_start(0.0)
    in_epoch_1.train_start(0.0)
    in_epoch_1.epoch_start(0.0)
    run_batches(in_epoch_1, 0.0, 10, 0.5)
    in_epoch_1.epoch_end(5.0)
    in_epoch_1.epoch_start(5.0)
    run_batches(in_epoch_1, 5.0, 10, 0.5)  # 20 batches: epoch 1's last, at the limit
    assert in_epoch_1.remaining_s(10.0) == pytest.approx(1.0 + 4 * 0.5 + 0.5)  # a validation run, then the end


def test_a_max_time_stop_saves_only_where_lightning_would():
    # ModelCheckpoint saves after validation runs when check_val_every_n_epoch is not 1: a stop in
    # an epoch that does not validate saves nothing. And it skips a save at the global step it saved
    # last: a stop after the first batch of an epoch, before an accumulated step, saves nothing more.
    every2 = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None, val_check_batch=10,
                            check_val_every_n_epoch=2, val_batches_per_run=4, max_time_s=10.0)
    cycle = every2.with_epochs(12)
    cycle_saves = save_positions(cycle, CheckpointSettings(on_epoch_end=False))
    assert cycle_saves[:2] == (20, 40)
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0, save_s=3.0, end_s=0.5)
    forecaster = RunForecaster(every2, plan, saves=(), cycle=(cycle, cycle_saves))
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    forecaster.epoch_start(0.0)
    run_batches(forecaster, 0.0, 10, 1.0)  # the limit runs out at epoch 0's last batch: no validation, no save
    assert forecaster.remaining_s(10.0) == pytest.approx(0.5)

    accumulated = build_schedule(batches_per_epoch=10, accumulate=3, max_epochs=None, max_steps=None,
                                 val_check_batch=10, check_val_every_n_epoch=1, val_batches_per_run=4,
                                 max_time_s=12.0)
    cycle = accumulated.with_epochs(12)
    forecaster = RunForecaster(accumulated, plan, saves=(), cycle=(cycle, save_positions(cycle, CheckpointSettings())))
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    forecaster.epoch_start(0.0)
    t = run_epoch(forecaster, 0.0, 10, epoch_s=0.0, val_s=1.0, save_s=0.5)  # 11.5 s: the limit runs out next batch
    forecaster.epoch_start(t)
    run_batches(forecaster, t, 1, 1.0)  # epoch 1's first batch: no optimizer step since the save at batch 10
    assert forecaster.remaining_s(t + 1.0) == pytest.approx(1.0 + 0.5)  # a validation run (1 s measured), the end


def test_max_time_caps_a_longer_schedule():
    schedule = schedule_of(max_epochs=100, val_batches_per_run=0, val_check_batch=None, sanity_batches=0,
                           max_time_s=50.0)  # 1000 batches of 1 s would be far longer
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, end_s=2.0))
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    # the 40 s the limit leaves, half of the batch it runs out in on average, then the end
    assert forecaster.remaining_s(10.0) == pytest.approx(40.0 + 0.5 + 2.0, abs=0.1)
    assert forecaster.parts(10.0)["train"].left_count == 40  # the batches that fit, not the schedule's 1000


def run_epoch(forecaster: RunForecaster, t: float, batches: int, *, batch_s: float = 1.0, epoch_s: float = 1.0,
              val_s: float = 2.0, save_s: float = 2.0) -> float:
    """An epoch's start, its batches, then a validation run and a save at its end; returns the time after."""
    forecaster.epoch_start(t)
    t = run_batches(forecaster, t + epoch_s, batches, batch_s)
    forecaster.val_start(t)
    forecaster.val_end(t + val_s)
    forecaster.epoch_end(t + val_s)
    forecaster.save_start(t + val_s)
    forecaster.save_end(t + val_s + save_s)
    return t + val_s + save_s


def test_a_max_time_limit_stops_the_fit_at_the_first_training_batch_that_ends_past_it():
    # Lightning's Timer checks the limit at the end of each training batch only. Each epoch here is
    # an epoch start of 1 s, 10 batches of 1 s, a validation run of 2 s and a save of 2 s: 15 s. A
    # 150 s limit runs out in the tenth epoch's save: the eleventh epoch starts and runs one batch
    # (152 s into training), then the stop validates and saves once more before the end (as an H100
    # fit did, 2026-11-26: a limit spent during an epoch's validation ran 1.6 s past it).
    schedule = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None, val_check_batch=EPOCH_END,
                              check_val_every_n_epoch=1, val_batches_per_run=2, max_time_s=150.0)
    cycle = schedule.with_epochs(12)
    cycle_saves = save_positions(cycle, CheckpointSettings())  # Lightning's default: one at each epoch's end
    assert len(cycle_saves) == 12
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0, epoch_s=1.0, save_s=2.0, end_s=2.0)
    forecaster = RunForecaster(schedule, plan, saves=(), cycle=(cycle, cycle_saves))
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    t = 0.0
    for _ in range(9):
        t = run_epoch(forecaster, t, 10)
    forecaster.epoch_start(t)
    t = run_batches(forecaster, t + 1.0, 10, 1.0)
    assert t == pytest.approx(146.0)
    parts = forecaster.parts(t)
    left = {kind: parts[kind].left_s for kind in ("train", "val", "epoch", "save", "end")}
    assert left == pytest.approx({"train": 1.0, "val": 2.0 + 2.0, "epoch": 1.0, "save": 2.0 + 2.0, "end": 2.0})
    forecaster.val_start(t)
    forecaster.val_end(t + 2.0)
    forecaster.epoch_end(t + 2.0)
    forecaster.save_start(t + 2.0)
    forecaster.save_end(t + 4.0)  # 150 s: the limit ran out, and no batch has ended since
    assert forecaster.remaining_s(t + 4.0) == pytest.approx(1.0 + 1.0 + 2.0 + 2.0 + 2.0)
    forecaster.epoch_start(t + 4.0)
    run_batches(forecaster, t + 5.0, 1, 1.0)  # the batch whose end stops the fit
    assert forecaster.remaining_s(t + 6.0) == pytest.approx(2.0 + 2.0 + 2.0)


def test_far_from_a_max_time_stop_the_limit_is_spent_as_the_fit_spends_its_time():
    # Where the stop will land is not known to a batch from far away: the time the limit leaves
    # goes to training, validation, epoch starts and saves as the fit's epochs divide it (10, 2,
    # 1 and 2 of every 15 s), plus what the stop runs: a validation, a save and the end.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0, epoch_s=1.0, save_s=2.0, end_s=2.0)
    unbounded = build_schedule(batches_per_epoch=10, max_epochs=None, max_steps=None, val_check_batch=EPOCH_END,
                               check_val_every_n_epoch=1, val_batches_per_run=2, max_time_s=1500.0)
    cycle = unbounded.with_epochs(12)
    longer = build_schedule(batches_per_epoch=10, max_epochs=1000, max_steps=None, val_check_batch=EPOCH_END,
                            check_val_every_n_epoch=1, val_batches_per_run=2, max_time_s=1500.0)
    for schedule, saves, cycle_of in ((unbounded, (), (cycle, save_positions(cycle, CheckpointSettings()))),
                                      (longer, save_positions(longer, CheckpointSettings()), None)):
        forecaster = RunForecaster(schedule, plan, saves=saves, cycle=cycle_of)
        forecaster.fit_start(0.0)
        forecaster.train_start(0.0)
        parts = forecaster.parts(0.0)
        left = {kind: parts[kind].left_s for kind in ("train", "val", "epoch", "save")}
        spent = {"train": 1000.0, "val": 200.0 + 2.0, "epoch": 100.0, "save": 200.0 + 2.0}
        assert left == pytest.approx(spent, rel=0.02)
        assert forecaster.remaining_s(0.0) == pytest.approx(1500.0 + 2.0 + 2.0 + 2.0, rel=0.005)


def test_time_based_validation_is_counted_from_its_interval():
    schedule = schedule_of(max_epochs=1, val_check_batch=None, val_every_s=4.0, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0))
    forecaster.fit_start(0.0)
    # 10 s of training -> 2 validation runs of 1 + 4 x 0.5 s
    assert forecaster.remaining_s(0.0) == pytest.approx(10.0 + 2 * 3.0)
    # a ModelCheckpoint that saves when validation ends (its best and its last) saves after each
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.5, val_run_s=1.0, save_s=0.25)
    saving = RunForecaster(schedule, plan, saves_per_val_run=2)
    saving.fit_start(0.0)
    assert saving.remaining_s(0.0) == pytest.approx(10.0 + 2 * 3.0 + 2 * 2 * 0.25)


def test_time_based_saves_are_counted_from_their_interval():
    schedule = schedule_of(max_epochs=1, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, save_s=0.5), save_every_s=3.0)
    forecaster.fit_start(0.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(10.0 + 3 * 0.5)  # after batches 3, 6 and 9
    # ModelCheckpoint's interval is wall time from when its last save began: a 2 s save leaves 1 s
    # of it, one batch; saves after batches 3, 4, ..., 10
    slow = RunForecaster(schedule, RunPlan(train_batch_s=1.0, save_s=2.0), save_every_s=3.0)
    slow.fit_start(0.0)
    assert slow.remaining_s(0.0) == pytest.approx(10.0 + 8 * 2.0)
    # checked at batch ends only: a 60 s validation run leads to one save, not 20
    long_val = schedule_of(max_epochs=2, val_batches_per_run=1, sanity_batches=0)
    validating = RunForecaster(long_val, RunPlan(train_batch_s=1.0, val_batch_s=60.0, save_s=0.5), save_every_s=3.0)
    validating.fit_start(0.0)
    saves_s = validating.parts(0.0)["save"].left_s
    assert saves_s <= (20 // 3 + 2) * 0.5  # 6 intervals of training, and one after each run


def test_an_unbounded_fit_has_no_eta():
    schedule = build_schedule(batches_per_epoch=None, max_epochs=None, max_steps=None, val_check_batch=None,
                              check_val_every_n_epoch=1, val_batches_per_run=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0))
    forecaster.fit_start(0.0)
    assert forecaster.remaining_s(0.0) is None and forecaster.total_s(0.0) is None


def test_an_epoch_of_unknown_length_lays_out_the_fit_once_it_has_ended():
    # the events of three 10-batch epochs, validated and saved at each end; the forecaster only
    # knows that the train iterable has no length, until its first epoch ends
    known = schedule_of(val_check_batch=EPOCH_END)
    events = list(play(known, save_positions(known, CheckpointSettings()), Costs()))
    fit_end = events[-1][0]
    unsized = schedule_of(batches_per_epoch=None, val_check_batch=EPOCH_END)
    assert unsized.total_batches is None

    def relayout(batches: int):
        schedule = unsized.with_epoch_length(batches)
        return schedule, save_positions(schedule, CheckpointSettings())

    forecaster = RunForecaster(unsized, saves=(), relayout=relayout)
    forecaster.fit_start(0.0)
    forecaster.set_plan(plan_of(Costs()), 0.0)
    epochs_ended = 0
    for t, name in events[1:]:
        feed(forecaster, name, t)
        epochs_ended += name == "epoch_end"
        if epochs_ended == 0:
            assert forecaster.remaining_s(t) is None, name
        else:
            assert forecaster.remaining_s(t) == pytest.approx(fit_end - t, abs=1e-9), (name, t)
    assert forecaster.schedule.total_batches == 30 and forecaster.saves == (10, 20, 30)
    assert forecaster.before_step_one_s is None


def test_the_callbacks_own_work_is_charged_to_ptp():
    forecaster = RunForecaster(schedule_of(), RunPlan(train_batch_s=1.0))
    forecaster.fit_start(10.0)
    forecaster.own_work(2.0)  # e.g. the trace, inside on_fit_start
    forecaster.sanity_start(12.5)
    parts = forecaster.parts(12.5)
    assert parts["ptp"].spent_s == pytest.approx(2.0)
    assert parts["startup"].spent_s == pytest.approx(0.5)


def test_warmup_batches_are_not_steady_work():
    schedule = schedule_of(max_epochs=1, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=9.0), warmup_batches=2)
    forecaster.fit_start(0.0)
    forecaster.epoch_start(0.0)
    t = 0.0
    for seconds in (6.0, 3.0, 1.0, 1.0):  # two warm-up batches, then steady ones
        forecaster.batch_start(t)
        t += seconds
        forecaster.batch_end(t)
    assert forecaster.remaining_s(t) == pytest.approx(6 * 1.0)
    assert forecaster.parts(t)["warmup"].spent_s == pytest.approx(5.0 + 2.0)  # 6 + 3 beyond 2 x 1


def test_leading_batches_far_above_the_typical_one_are_warmup_too():
    schedule = schedule_of(max_epochs=2, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0), warmup_batches=0)
    forecaster.fit_start(0.0)
    t = 0.0
    for seconds in (5.0, 1.0, 1.0, 1.0, 1.0, 1.0):  # cuDNN autotuning in the first batch
        forecaster.batch_start(t)
        t += seconds
        forecaster.batch_end(t)
    assert forecaster.batches.mean_s() == pytest.approx(1.0)


def test_a_later_epochs_slow_first_batch_is_the_epoch_boundarys_cost():
    """A CPU step after an epoch's new forked loader workers copies every page they map: the first
    batch of a 4-layer GPT-2's later epochs took 1.1 s against 0.17. The plan counts that at the
    epoch boundary; so must the measurement, or the report puts it under training and the epochs'
    measured cost drops it from the ETA."""
    schedule = schedule_of(max_epochs=3, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, epoch_s=4.0, first_epoch_s=0.0), warmup_batches=0)
    forecaster.fit_start(0.0)
    t = 0.0
    for epoch in range(2):
        forecaster.epoch_start(t)
        t += 0.5  # the loader's start
        for i in range(10):
            forecaster.batch_start(t)
            t += 4.0 if epoch == 1 and i == 0 else 1.0
            forecaster.batch_end(t)
        forecaster.epoch_end(t)
    parts = forecaster.parts(t)
    assert forecaster.batches.mean_s() == pytest.approx(1.0)
    assert parts["epoch"].spent_s == pytest.approx(0.5 + 0.5 + 3.0)  # the second one's start and first-batch excess
    assert parts["epoch"].unit_s == pytest.approx(3.5) and parts["train"].spent_s == pytest.approx(20.0)
    assert forecaster.remaining_s(t) == pytest.approx(3.5 + 10 * 1.0)


def test_the_slow_batch_after_a_validation_run_inside_an_epoch_is_the_runs_cost():
    """A validation run whose loader forks workers each run makes the training batch after it copy
    the step's memory (an LSTM on 2 CPU cores: 485-535 ms against 82 ms steady). The plan counts
    that for each run inside an epoch, not for runs at an epoch's end (the epoch boundary's copy
    is the same one); the measurement moves the batch's excess to validation, and later runs are
    counted at the measured excess."""
    schedule = schedule_of(max_epochs=2, val_check_batch=5, val_batches_per_run=1, sanity_batches=0)
    assert schedule.val_after_batches == (5, 10, 15, 20)
    plan = RunPlan(train_batch_s=1.0, val_fork_s=2.0)
    forecaster = RunForecaster(schedule, plan, warmup_batches=0)
    forecaster.fit_start(0.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(20 * 1.0 + 2 * 2.0)  # after batches 5 and 15 only
    t = 0.0
    forecaster.epoch_start(t)
    t = run_batches(forecaster, t, 5, 1.0)
    forecaster.val_start(t)
    forecaster.val_end(t)
    forecaster.batch_start(t)
    t += 1.0 + 3.0  # the batch after the run: 3 s of copies
    forecaster.batch_end(t)
    parts = forecaster.parts(t)
    assert forecaster.batches.mean_s() == pytest.approx(1.0) and parts["train"].spent_s == pytest.approx(6.0)
    assert parts["val"].spent_s == pytest.approx(3.0)
    assert forecaster.remaining_s(t) == pytest.approx(14 * 1.0 + 3.0)  # the run after batch 15, as measured
    no_forks = RunForecaster(schedule, replace(plan, val_fork_s=0.0), warmup_batches=0)
    no_forks.fit_start(0.0)
    assert no_forks.remaining_s(0.0) == pytest.approx(20 * 1.0)


def test_the_batch_time_follows_the_speed_it_measures_near_the_end():
    schedule = schedule_of(max_epochs=1, batches_per_epoch=400, val_batches_per_run=0, val_check_batch=None,
                           sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0), warmup_batches=0, min_window=50)
    forecaster.fit_start(0.0)
    t = 0.0
    for i in range(350):  # the machine gets busy: batches take twice as long from batch 250 on
        forecaster.batch_start(t)
        t += 1.0 if i < 250 else 2.0
        forecaster.batch_end(t)
    # 50 batches left: averaged over the latest 50, all at the new speed
    assert forecaster.remaining_s(t) == pytest.approx(50 * 2.0)


def test_an_overrunning_save_is_not_taken_as_done():
    schedule = schedule_of(max_epochs=2, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    saves = save_positions(schedule, CheckpointSettings())  # after batches 10 and 20
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, save_s=3.0), saves=saves)
    forecaster.fit_start(0.0)
    t = run_batches(forecaster, 0.0, 20, 1.0)
    forecaster.epoch_end(t)
    forecaster.save_start(t)
    assert forecaster.remaining_s(t + 1.0) == pytest.approx(2.0)
    assert forecaster.remaining_s(t + 5.0) == pytest.approx(OVERRUN_SHARE * 3.0)


def test_later_saves_cost_what_the_first_measured_plus_what_the_plan_says_they_add():
    schedule = schedule_of(max_epochs=3, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    saves = save_positions(schedule, CheckpointSettings())  # after batches 10, 20, 30
    plan = RunPlan(train_batch_s=1.0, save_s=3.5, first_save_s=3.0)  # later ones delete the previous file
    forecaster = RunForecaster(schedule, plan, saves=saves)
    forecaster.fit_start(0.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(30 + 3.0 + 2 * 3.5)
    t = 0.0
    for _ in range(10):
        forecaster.batch_start(t)
        t += 1.0
        forecaster.batch_end(t)
    forecaster.epoch_end(t)
    forecaster.save_start(t)
    t += 4.0  # the first save took 4 s, not 3
    forecaster.epoch_start(t)
    assert forecaster.parts(t)["save"].left_s == pytest.approx(2 * (4.0 + 0.5))


def after_sanity(plan: RunPlan, batch_ends: tuple[float, ...]) -> RunForecaster:
    """A forecaster whose sanity check started at 0 and whose validation batches ended at ``batch_ends``."""
    forecaster = RunForecaster(schedule_of(val_batches_per_run=0, val_check_batch=None), plan)
    forecaster.fit_start(0.0)
    forecaster.sanity_start(0.0)
    for t in batch_ends:
        forecaster.val_batch_end(t)
    forecaster.sanity_end(batch_ends[-1])
    return forecaster


@pytest.mark.parametrize("second", [1.2, 1.0])
def test_sanity_check_batches_measure_a_validation_batch_on_a_cpu_and_leave_training_batches_as_predicted(second):
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.2, sanity_s=1.0, sanity_calibrates=True)
    # the first batch pays the loader's start; the next two take 0.3 and 0.4 s (or 0.1 and 0.2 s)
    forecaster = after_sanity(plan, (0.9, second, 2 * second - 0.8))
    assert forecaster.plan.val_batch_s == pytest.approx(second - 0.9)  # the faster of the two
    # a validation batch's miss says nothing of a training batch's (another step, another loop)
    assert forecaster.plan.train_batch_s == pytest.approx(1.0)


def test_the_default_two_sanity_batches_time_one_batch_still_warming_up_beside_the_prediction():
    # A CPU MLP (2026-11-29): the second sanity batch took 1.78 ms, later validation batches
    # 0.65-1.0 ms, the prediction 0.75 ms. The one interval is weighed with the prediction.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.00075, sanity_s=0.01, sanity_calibrates=True)
    forecaster = after_sanity(plan, (0.005, 0.00678))
    assert forecaster.plan.val_batch_s == pytest.approx((0.00178 * 0.00075) ** 0.5)


def test_sanity_batches_from_workers_just_started_do_not_calibrate():
    # Lightning's default two sanity batches from a loader with two workers: each worker's first
    # batch, so the gap between them times the workers' start, not the loop.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.2, sanity_s=1.0, sanity_calibrates=True, sanity_loader_workers=2)
    forecaster = after_sanity(plan, (0.9, 1.6))
    assert forecaster.plan.train_batch_s == pytest.approx(1.0)
    # after both workers' first batches: 0.2 and 0.25 s apart
    forecaster = after_sanity(plan, (0.9, 1.6, 1.8, 2.05))
    assert forecaster.plan.train_batch_s == pytest.approx(1.0)
    assert forecaster.plan.val_batch_s == pytest.approx(0.2)


def test_the_sanity_checks_fixed_part_replaces_a_validation_runs_predicted_one_on_a_cpu():
    # Predicted: a validation run's fixed part (its loader's start) 0.1 s, an epoch's start 0.1 s.
    # The sanity check (2 workers, 4 batches of 0.2 s) took 1.4 s: 0.6 s beyond its batches.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.2, val_run_s=0.1, epoch_s=0.1,
                   sanity_s=0.9, sanity_calibrates=True, sanity_loader_workers=2)
    forecaster = after_sanity(plan, (0.6, 0.8, 1.2, 1.4))
    assert forecaster.plan.val_run_s == pytest.approx(1.4 - 4 * 0.2)
    assert forecaster.plan.epoch_s == pytest.approx(0.1)  # no evaluation loop to set up there
    # On a GPU the sanity check's excess is the kernels' first use: the run's fixed part stays predicted.
    gpu = after_sanity(replace(plan, sanity_calibrates=False), (0.6, 0.8, 1.2, 1.4))
    assert gpu.plan.val_run_s == pytest.approx(0.1)
    # Persistent workers: the sanity check's excess is their start, which no later run pays again.
    persistent = after_sanity(replace(plan, val_run_s=0.0, val_workers_persist=True), (0.6, 0.8, 1.2, 1.4))
    assert persistent.plan.val_run_s == 0.0


def test_a_long_sanity_checks_fixed_part_counts_every_batch():
    # num_sanity_val_steps=-1 runs the whole validation set: 100 batches of 0.01 s after 0.1 s of
    # set-up. The forecaster keeps only the first batches' times, but counts them all.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.01, val_run_s=0.02, sanity_s=1.0, sanity_calibrates=True,
                   sanity_loader_workers=2)
    forecaster = after_sanity(plan, tuple(0.1 + 0.01 * (i + 1) for i in range(100)))
    assert forecaster.plan.val_run_s == pytest.approx(0.1)


def test_without_loader_workers_the_sanity_checks_excess_is_warm_up_not_a_runs_fixed_part():
    # A CPU MLP (2026-11-29): two sanity batches ended at 16.2 and 22.5 ms, the check at 23.2 ms;
    # each later validation run took under 1 ms beyond its batches of 5.3 ms.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.005, val_run_s=0.0005, sanity_s=0.01, sanity_calibrates=True)
    forecaster = after_sanity(plan, (0.0162, 0.0225))
    assert forecaster.plan.val_batch_s == pytest.approx((0.0063 * 0.005) ** 0.5)  # the batch's own time is measured
    assert forecaster.plan.val_run_s == pytest.approx(0.0005)  # the fixed part stays predicted


def test_the_sanity_checks_excess_predicts_the_first_training_steps_warmup_on_a_gpu():
    plan = RunPlan(train_batch_s=1.0, sanity_s=1.5, sanity_warmup_s=0.5, warmup_s=0.3, warmup_per_sanity_excess=2.0)
    forecaster = RunForecaster(schedule_of(), plan)
    forecaster.fit_start(0.0)
    forecaster.sanity_start(0.0)
    forecaster.sanity_end(4.0)  # 3 s beyond the 1 s of batches and loader start: first use of kernels
    assert forecaster.plan.warmup_s == pytest.approx(6.0)


def test_a_resumed_fit_starts_from_the_earlier_runs_measurements():
    schedule = schedule_of(max_epochs=2, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    first = RunForecaster(schedule, RunPlan(train_batch_s=5.0), warmup_batches=0)
    first.fit_start(0.0)
    t = 0.0
    for _ in range(8):
        first.batch_start(t)
        t += 2.0
        first.batch_end(t)
    state = first.state_dict(t)
    resumed_schedule = schedule_of(max_epochs=2, val_batches_per_run=0, val_check_batch=None, sanity_batches=0,
                                   start=FitStart(position=8, step=8, batch_in_epoch=8))
    second = RunForecaster(resumed_schedule, RunPlan(train_batch_s=5.0, end_s=1.0))
    second.load_state_dict(state)
    second.fit_start(100.0)
    assert second.remaining_s(100.0) == pytest.approx(12 * 2.0 + 1.0)  # 12 batches at the measured 2 s
    assert second.elapsed_s(100.0) == pytest.approx(16.0)


def test_events_the_schedule_did_not_foresee_do_not_break_it():
    schedule = schedule_of(max_epochs=1, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, save_s=2.0))
    forecaster.fit_start(0.0)
    forecaster.val_start(0.5)  # a validation nobody planned
    forecaster.val_end(1.0)
    forecaster.save_start(1.0)  # a save made by hand
    assert forecaster.remaining_s(1.5) == pytest.approx(10 * 1.0 + 1.5)
    for t in range(2, 20):
        forecaster.batch_start(float(t))
        forecaster.batch_end(t + 0.5)
    forecaster.fit_end(30.0)
    forecaster.batch_end(31.0)
    assert forecaster.remaining_s(32.0) == 0.0


def test_without_a_plan_the_eta_comes_from_measured_batches():
    schedule = schedule_of(max_epochs=1, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, None, warmup_batches=1)
    forecaster.fit_start(0.0)
    assert forecaster.remaining_s(0.0) is None
    t = 0.0
    for _ in range(3):
        forecaster.batch_start(t)
        t += 0.5
        forecaster.batch_end(t)
    assert forecaster.remaining_s(t) == pytest.approx(7 * 0.5)
    assert math.isfinite(forecaster.total_s(t))


def test_the_plan_and_report_lines_name_each_part():
    from ptp_callback.report import plan_line, report_line

    schedule = schedule_of(max_epochs=2)
    saves = save_positions(schedule, CheckpointSettings())
    costs = Costs()
    forecaster = RunForecaster(schedule, saves=saves)
    forecaster.fit_start(0.0)
    forecaster.set_plan(plan_of(costs), 0.0)
    line = plan_line(forecaster.initial_parts, forecaster.predicted_total_s, "bf16-mixed", "NVIDIA H100 80GB HBM3")
    # 20 batches x 1 s, 2 validation runs x 2 s, 2 saves x 3 s, one epoch boundary of 0.5 s, end 1.5 s, sanity 0.7 s
    assert line == ("predicted fit 32.7s at bf16-mixed on NVIDIA H100 80GB HBM3: sanity check 700.0ms, "
                    "train 20.0s (20 batches), validation 4.0s (2 runs), epoch starts 500.0ms (2 epochs), "
                    "checkpoints 6.0s (2 saves), end 1.5s")
    for t, name in play(schedule, saves, costs):
        feed(forecaster, name, t)
    report = report_line(forecaster.initial_parts, forecaster.parts(32.7), 32.7, forecaster.before_step_one_s)
    assert report.startswith("fit took 32.7s, predicted before step one 32.7s (+0.0%): ")
    assert "checkpoints 6.0s (predicted 6.0s)" in report and "train 20.0s (predicted 20.0s)" in report


def test_a_resumed_runs_lines_count_its_earlier_time_as_a_part_so_that_the_parts_add_up():
    from ptp_callback.report import plan_line, report_line

    schedule = schedule_of(max_epochs=2, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0))
    forecaster.load_state_dict({"elapsed_s": 12.0})
    forecaster.fit_start(0.0)
    forecaster.set_plan(RunPlan(train_batch_s=1.0), 0.0)
    line = plan_line(forecaster.initial_parts, forecaster.total_s(0.0), "32-true", "cpu",
                     earlier_s=forecaster.elapsed_before_s)
    assert line.startswith("predicted fit 32.0s at 32-true on cpu: earlier runs 12.0s, train 20.0s")
    forecaster.train_start(0.0)
    forecaster.epoch_start(0.0)
    for t in range(3):
        forecaster.batch_start(float(t))
        forecaster.batch_end(t + 1.0)
    report = report_line(forecaster.initial_parts, forecaster.parts(3.0), 15.0, 32.0, stopped=(3, 20),
                         earlier_s=forecaster.elapsed_before_s)
    # what ran: its 12 s before the resume and 3 of the 20 batches, 15 s in all, as it took
    assert "15.0s for what ran (+0.0%): earlier runs 12.0s" in report
    # predicted for another device than the run's: stated, not set against this run's time
    report = report_line(forecaster.initial_parts, forecaster.parts(3.0), 15.0, 32.0, stopped=(3, 20),
                         earlier_s=forecaster.elapsed_before_s, other_device="NVIDIA H100 SXM5 80GB")
    assert "; predicted before step one for NVIDIA H100 SXM5 80GB 32.0s for the whole schedule, 15.0s for what " \
           "ran: earlier runs 12.0s" in report


def test_the_eta_is_recomputed_sooner_while_the_fit_is_young():
    forecaster = RunForecaster(schedule_of())
    forecaster.fit_start(10.0)
    # Two seconds in, an ETA 0.15 s old is due (over 5% of the fit so far), one 0.05 s old is not.
    assert REFRESH_SHARE * 2.0 == pytest.approx(0.1)
    assert forecaster.refresh_due(12.0, 11.85, 1.0)
    assert not forecaster.refresh_due(12.0, 11.95, 1.0)
    # A minute in, the caller's interval rules: due after 1 s, not after 0.5 s.
    assert forecaster.refresh_due(70.0, 69.0, 1.0)
    assert not forecaster.refresh_due(70.0, 69.5, 1.0)
    # refresh_s=0 recomputes at every call.
    assert forecaster.refresh_due(70.0, 70.0, 0.0)


def test_the_reports_predicted_parts_are_what_the_eta_counted_at_step_one():
    # The sanity check refines a validation run's fixed part (0.1 s planned, 0.6 s measured) before
    # step one: the report's "predicted" validation must be the refined one, and the parts must add
    # up to the total predicted before step one; the sanity check keeps its fit-start prediction.
    plan = RunPlan(train_batch_s=1.0, val_batch_s=0.2, val_run_s=0.1, sanity_s=0.9, sanity_calibrates=True,
                   sanity_loader_workers=2)
    forecaster = RunForecaster(schedule_of(), plan, warmup_batches=0)
    forecaster.fit_start(0.0)
    forecaster.set_plan(plan, 0.0)
    at_fit_start = forecaster.initial_parts["val"]
    forecaster.sanity_start(0.0)
    for t in (0.6, 0.8, 1.2, 1.4):
        forecaster.val_batch_end(t)
    forecaster.sanity_end(1.4)
    forecaster.batch_start(1.5)
    parts = forecaster.initial_parts
    runs = at_fit_start.left_count
    assert at_fit_start.left_s == pytest.approx(runs * (0.1 + 4 * 0.2))
    assert parts["val"].left_s == pytest.approx(runs * (0.6 + 4 * 0.2))
    assert parts["sanity"].spent_s + parts["sanity"].left_s == pytest.approx(0.9)  # as planned at fit start
    ahead = sum(p.spent_s + p.left_s for k, p in parts.items() if k not in ("ptp", "startup", "sanity"))
    assert ahead + 1.5 == pytest.approx(forecaster.before_step_one_s)  # step one began at 1.5 s


def test_a_schedule_continued_with_longer_epochs_counts_them_from_their_start():
    # Epoch 0 runs its 10 batches; a reloaded loader makes epochs 1 and 2 30 batches long.
    schedule = schedule_of(val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0))
    forecaster.fit_start(0.0)
    forecaster.train_start(0.0)
    forecaster.epoch_start(0.0)
    t = run_batches(forecaster, 0.0, 10, 1.0)
    forecaster.epoch_end(t)
    forecaster.epoch_start(t)
    rest = schedule_of(batches_per_epoch=30, val_batches_per_run=0, val_check_batch=None, sanity_batches=0,
                       start=FitStart(position=10, step=10, epoch=1, epochs_counted=1))
    forecaster.continue_with(rest, saves=(40, 70))
    assert forecaster.parts(t)["train"].left_count == 60
    assert forecaster.remaining_s(t) == pytest.approx(60 * 1.0)
    with pytest.raises(ValueError, match="starts at batch 0"):
        forecaster.continue_with(schedule, saves=())
    t = run_batches(forecaster, t, 15, 1.0)
    forecaster.fit_end(t)  # stopped 15 batches into epoch 1
    assert forecaster.stopped_early == (25, 70)


def batches_only(plan_batch_s: float | None = None, warmup_batches: int = 0, **overrides) -> RunForecaster:
    """A started forecaster of a fit of training batches alone (10 an epoch), with a plan of
    ``plan_batch_s`` a batch when given."""
    schedule = schedule_of(val_batches_per_run=0, val_check_batch=None, sanity_batches=0, **overrides)
    forecaster = RunForecaster(schedule, warmup_batches=warmup_batches)
    forecaster.fit_start(0.0)
    if plan_batch_s is not None:
        forecaster.set_plan(RunPlan(train_batch_s=plan_batch_s), 0.0)
    return forecaster


def test_a_change_of_the_batch_cost_expected_at_an_epoch_prices_the_batches_from_there():
    forecaster = batches_only(1.0, max_epochs=2)
    base = forecaster.remaining_s(0.0)
    forecaster.expect_cost_change(1, 3.0)  # the second epoch's batches cost 3x
    assert forecaster.remaining_s(0.0) == pytest.approx(base + 10 * 2.0)
    t = run_batches(forecaster, 0.0, 10, 1.0)
    assert forecaster.remaining_s(t) == pytest.approx(10 * 3.0)
    forecaster.cost_changed(3.0)  # it happened: the measured batches stand for the new cost
    assert forecaster.remaining_s(t) == pytest.approx(10 * 3.0)


def test_a_save_cost_change_expected_at_an_epoch_prices_the_saves_from_there():
    # Unfreezing a backbone at epoch 1 puts its optimizer state into every checkpoint from then on.
    schedule = schedule_of(max_epochs=3, val_batches_per_run=0, val_check_batch=None, sanity_batches=0)
    saves = save_positions(schedule, CheckpointSettings())  # after batches 10, 20, 30
    forecaster = RunForecaster(schedule, RunPlan(train_batch_s=1.0, save_s=1.0), saves=saves)
    forecaster.fit_start(0.0)
    base = forecaster.remaining_s(0.0)
    forecaster.expect_cost_change(1, 1.0, 2.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(base + 2 * 2.0)  # the saves after batches 20 and 30
    t = run_batches(forecaster, 0.0, 10, 1.0)
    forecaster.epoch_end(t)
    forecaster.save_start(t)
    t += 1.5  # the first save, before the change: measured at 1.5 s
    forecaster.epoch_start(t)
    assert forecaster.remaining_s(t) == pytest.approx(20 * 1.0 + 2 * (1.5 + 2.0))
    forecaster.cost_changed(1.0, 2.0)  # it happened: the measured save stands for the new cost
    assert forecaster.remaining_s(t) == pytest.approx(20 * 1.0 + 2 * (1.5 + 2.0))


def test_after_a_cost_change_the_batches_measured_at_the_new_cost_decide_once_there_are_enough():
    forecaster = batches_only(max_epochs=10)
    t = run_batches(forecaster, 0.0, 30, 1.0)
    forecaster.cost_changed(3.0)  # predicted 3x ...
    assert forecaster.batches.mean_s(70) == pytest.approx(3.0)
    t = run_batches(forecaster, t, 5, 2.0)  # ... measured 2x: too few batches yet to trust alone
    assert forecaster.batches.mean_s(65) == pytest.approx((30 * 3.0 + 5 * 2.0) / 35)
    t = run_batches(forecaster, t, 5, 2.0)
    assert forecaster.batches.mean_s(60) == pytest.approx(2.0)
    assert forecaster.remaining_s(t) == pytest.approx(60 * 2.0)


def test_an_expected_cost_change_that_does_not_happen_is_dropped():
    forecaster = batches_only(1.0, max_epochs=2)
    forecaster.expect_cost_change(1, 3.0)
    t = run_batches(forecaster, 0.0, 10, 1.0)
    forecaster.cost_changed(1.0)
    assert forecaster.remaining_s(t) == pytest.approx(10 * 1.0) and forecaster.batches.changed_at is None


def test_an_expected_cost_change_counts_in_the_time_a_limit_leaves():
    forecaster = batches_only(1.0, max_epochs=3, max_time_s=40.0)
    forecaster.train_start(0.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(30.0)  # the epochs end first
    forecaster.expect_cost_change(1, 3.0)  # 10 + 20 x 3 = 70 s of batches: the limit stops the fit
    assert 40.0 <= forecaster.remaining_s(0.0) <= 42.0


def test_an_expected_cost_change_stays_at_its_epoch_when_the_fit_is_laid_out_again():
    forecaster = batches_only(1.0, max_epochs=3)
    forecaster.expect_cost_change(2, 3.0)
    t = run_batches(forecaster, 0.0, 10, 1.0)
    # the loader reloaded with epochs of 5 batches: the third epoch starts at batch 15 now
    shorter = schedule_of(batches_per_epoch=5, max_epochs=3, val_batches_per_run=0, val_check_batch=None,
                          sanity_batches=0, start=FitStart(position=10, step=10, epoch=1, epochs_counted=1))
    forecaster.continue_with(shorter, ())
    assert forecaster.remaining_s(t) == pytest.approx(5 * 1.0 + 5 * 3.0)


def test_the_warmup_measured_before_a_cost_change_stays_as_measured():
    forecaster = batches_only(warmup_batches=2, max_epochs=4)
    t = run_batches(forecaster, 0.0, 2, 4.0)  # two warm-up batches, 3 s over a steady one each
    t = run_batches(forecaster, t, 18, 1.0)
    assert forecaster.batches.warmup_extra_s() == pytest.approx(6.0)
    forecaster.cost_changed(3.0)
    run_batches(forecaster, t, 12, 3.0)
    assert forecaster.batches.warmup_extra_s() == pytest.approx(6.0)


def test_batches_not_yet_settled_at_a_cost_change_count_as_measured_at_the_old_cost():
    forecaster = batches_only(max_epochs=10)
    t = run_batches(forecaster, 0.0, 3, 1.0)  # fewer than settle the steady batch time
    forecaster.cost_changed(3.0)  # predicted 3x ...
    run_batches(forecaster, t, 10, 2.0)  # ... measured 2x
    assert forecaster.batches.mean_s(50) == pytest.approx(2.0)


def test_an_earlier_runs_batch_is_dropped_at_a_cost_change():
    forecaster = batches_only(1.0, max_epochs=2)
    forecaster.load_state_dict({"units": {"train": 0.5}})  # measured by the run that saved, at whatever trained then
    assert forecaster.remaining_s(0.0) == pytest.approx(20 * 0.5)
    forecaster.cost_changed(3.0)
    assert forecaster.remaining_s(0.0) == pytest.approx(20 * 3.0)
