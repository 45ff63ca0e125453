"""Evaluations and saves every n optimizer steps or every epoch, as schedule positions."""

from __future__ import annotations

import pytest

from ptp_callback.cadence import positions_every, with_evaluations
from ptp_callback.schedule import FitStart, build_schedule


def schedule(**overrides):
    settings = dict(batches_per_epoch=10, accumulate=3, max_epochs=2, max_steps=None, val_check_batch=None,
                    check_val_every_n_epoch=1, val_batches_per_run=0)
    settings.update(overrides)
    return build_schedule(**settings)


def test_every_n_steps_lands_on_the_batch_that_steps():
    # 10 batches an epoch, accumulate 3: steps after batches 3, 6, 9 and 10 (the epoch's last batch steps)
    # -> steps 2, 4, 6, 8 end at batches 6, 10, 16 (6 + 10), 20
    assert positions_every(schedule(), 2) == (6, 10, 16, 20)


def test_every_epoch_and_never():
    assert positions_every(schedule(), "epoch") == (10, 20)
    assert positions_every(schedule(), None) == ()


def test_the_final_step_is_added_once():
    s = schedule(max_epochs=None, max_steps=7)  # epoch 0 takes 4 steps; steps 5, 6, 7 at its batches 3, 6, 9
    assert s.total_batches == 19  # 10 + 9
    assert positions_every(s, 3, final=True) == (9, 16, 19)  # steps 3 and 6, then the last batch
    assert positions_every(s, 7, final=True) == (19,)


def test_a_resumed_schedule_lists_only_what_is_left():
    # 2 batches into epoch 1, 4 steps done: steps 5-8 come after batches 3, 6, 9, 10 of epoch 1
    s = schedule(start=FitStart(position=12, step=4, epoch=1, epochs_counted=1, batch_in_epoch=2))
    assert positions_every(s, 2) == (16, 20)  # steps 6 and 8
    assert positions_every(s, "epoch") == (20,)


def test_unbounded_runs_have_no_positions_and_bad_cadences_fail():
    assert positions_every(schedule(batches_per_epoch=None, max_epochs=None), 5) == ()
    with pytest.raises(ValueError, match="every=0"):
        positions_every(schedule(), 0)


def test_with_evaluations_sets_runs_and_their_batches():
    s = with_evaluations(schedule(), (10, 20), 4)
    assert s.val_after_batches == (10, 20) and s.val_batches_per_run == 4
    assert s.remaining(0).val_batches == 8
    assert with_evaluations(schedule(), (), 4).val_batches_per_run == 0
