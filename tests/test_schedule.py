"""FitSchedule arithmetic, and read_schedule against what real (tiny, CPU) Lightning fits actually run."""

from __future__ import annotations

import logging
import warnings
from datetime import timedelta


import pytest
import torch
import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from ptp_callback.integrations.lightning_schedule import read_schedule
from ptp_callback.schedule import (
    EPOCH_END,
    FitStart,
    RemainingWork,
    build_schedule,
    fit_length,
    steps_at,
    val_check_positions,
)

logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore")


# ---------------------------------------------------------------------------------------------------
# pure arithmetic


def test_fit_length_epochs_only():
    # 10 batches/epoch, accumulate 3: steps after batches 3, 6, 9 and 10 (the last batch steps) = 4/epoch
    assert fit_length(batches_per_epoch=10, accumulate=3, max_epochs=3, max_steps=None) == (3, 30, 12)


def test_fit_length_max_steps_mid_epoch():
    # 4 steps/epoch (as above). max_steps=6: epoch 0 gives 4, steps 5 and 6 after batches 3 and 6 of
    # epoch 1 -> stops at position 10 + 6 = 16
    assert fit_length(batches_per_epoch=10, accumulate=3, max_epochs=None, max_steps=6) == (2, 16, 6)
    # max_steps=8 is exactly two epochs: the 8th step is the epoch-end step after batch 10 of epoch 1
    assert fit_length(batches_per_epoch=10, accumulate=3, max_epochs=None, max_steps=8) == (2, 20, 8)
    # max_epochs wins when it comes first: 2 epochs = 8 steps < 100
    assert fit_length(batches_per_epoch=10, accumulate=3, max_epochs=2, max_steps=100) == (2, 20, 8)


def test_fit_length_unbounded_and_endless():
    assert fit_length(batches_per_epoch=10, max_epochs=None, max_steps=None) == (None, None, None)
    # unsized loader = one endless epoch: 5 steps of 2 micro-batches = 10 batches
    assert fit_length(batches_per_epoch=None, accumulate=2, max_epochs=None, max_steps=5) == (1, 10, 5)
    assert fit_length(batches_per_epoch=0, max_epochs=3, max_steps=None) == (0, 0, 0)


def test_fit_length_resumed():
    # resumed at position 14 = epoch 1 batch 4 (10 batches/epoch), global step 14; max_steps 25:
    # epoch 1 continues with batches 5..10 (6 steps -> 20), then 5 more steps in epoch 2 -> position 25
    start = FitStart(position=14, step=14, epoch=1, epochs_counted=1, batch_in_epoch=4)
    assert fit_length(batches_per_epoch=10, max_epochs=None, max_steps=25, start=start) == (2, 25, 25)


def test_steps_at():
    # accumulate 3, 10 batches/epoch: steps after batches 3, 6, 9, 10 | 13, 16, 19, 20
    got = [steps_at(p, batches_per_epoch=10, accumulate=3) for p in range(0, 21)]
    assert got == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 8]


def test_val_check_positions_per_epoch():
    # val_check_interval=0.5 of 10 batches -> every 5 in-epoch batches; check_val_every_n_epoch=2 keeps
    # epochs 1 and 3 only (current_epoch + 1 divisible by 2): positions 10+5, 10+10, 30+5, 30+10
    assert val_check_positions(10, 5, 2, epochs=4) == (15, 20, 35, 40)


def test_val_check_positions_across_epochs():
    # check_val_every_n_epoch=None: every 7 batches on the total counter, epochs of 5, 3 epochs = 15 batches
    assert val_check_positions(5, 7, None, epochs=3) == (7, 14)


def test_val_check_positions_cut_and_epoch_end():
    # the fit stops at 16 (max_steps mid-epoch): the run at 20 does not happen, the one at 15 does
    assert val_check_positions(10, 5, 1, epochs=2, max_total_batches=16) == (5, 10, 15)
    # EPOCH_END: after each epoch's last batch
    assert val_check_positions(4, EPOCH_END, 1, epochs=3) == (4, 8, 12)


def test_val_check_positions_resumed_quirk_epoch():
    # Lightning restarting on a finished epoch (max_steps-based) trains one more batch with in-epoch
    # index 11 of 10: that epoch ends at 11; epochs are gated by check_val_every_n_epoch=2 (epoch 2 is
    # not a val epoch; epoch 3 is: its batches 5 and 10 sit at 21 + 5 and 21 + 10)
    start = FitStart(position=20, step=20, epoch=2, epochs_counted=2, batch_in_epoch=10, first_epoch_end=11)
    assert val_check_positions(10, 5, 2, epochs=3, start=start) == (26, 31)


def test_remaining_arithmetic():
    # 10 batches/epoch, 2 epochs, accumulate 3 -> 8 steps; validation every 5 batches -> (5, 10, 15, 20)
    s = build_schedule(
        batches_per_epoch=10,
        accumulate=3,
        max_epochs=2,
        max_steps=None,
        val_check_batch=5,
        check_val_every_n_epoch=1,
        val_batches_per_run=4,
    )
    assert (s.total_batches, s.total_steps, s.val_after_batches) == (20, 8, (5, 10, 15, 20))
    assert s.remaining(0) == RemainingWork(20, 8, 4, 16)
    # after batch 10: 4 steps done (3, 6, 9, 10), runs at 5 and 10 done
    assert s.remaining(10) == RemainingWork(10, 4, 2, 8)
    # asked from on_train_batch_end of batch 10, the run after it is still to come
    assert s.remaining(10, val_pending=True) == RemainingWork(10, 4, 3, 12)
    assert s.remaining(20) == RemainingWork(0, 0, 0, 0)


def test_remaining_unknown_sizes():
    s = build_schedule(
        batches_per_epoch=None,
        max_epochs=None,
        max_steps=None,
        val_check_batch=EPOCH_END,
        check_val_every_n_epoch=1,
        val_batches_per_run=None,
    )
    # unbounded fit of an unsized loader with an unsized val loader: nothing can be listed or counted
    assert s.remaining(3) == RemainingWork(None, None, 0, None)


# ---------------------------------------------------------------------------------------------------
# real fits


class Model(pl.LightningModule):
    """Linear regression on random data; sizes and loader options are constructor arguments."""

    def __init__(self, n_train=10, n_val=(4,), batch_size=1, drop_last=False, iterable=False):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.n_train, self.n_val, self.batch_size = n_train, n_val, batch_size
        self.drop_last, self.iterable = drop_last, iterable

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        if self.iterable:
            return DataLoader(_Endless(), batch_size=self.batch_size)
        data = TensorDataset(torch.randn(self.n_train, 2))
        return DataLoader(data, batch_size=self.batch_size, drop_last=self.drop_last)

    def val_dataloader(self):
        loaders = [DataLoader(TensorDataset(torch.randn(n, 2)), batch_size=1) for n in self.n_val]
        return loaders[0] if len(loaders) == 1 else loaders


class NoValModel(Model):
    validation_step = pl.LightningModule.validation_step  # not overridden -> no validation


class _Endless(IterableDataset):
    """An unsized, never-ending iterable (the streaming case)."""

    def __iter__(self):
        while True:
            yield (torch.randn(2),)


class Recorder(pl.Callback):
    """Reads the schedule at on_fit_start and records what the fit actually does."""

    def __init__(self):
        self.schedule = None
        self.train_batches = 0
        self.sanity_batches = 0
        self.val_batches = []  # per (non-sanity) validation run
        self.val_at = []  # training-batch position at each validation start
        self.after_batch = []  # (position, global_step) at every on_train_batch_end
        self.final_step = None

    @staticmethod
    def position(trainer):
        return trainer.fit_loop.epoch_loop.batch_progress.total.ready

    read = True

    def on_fit_start(self, trainer, pl_module):
        if self.read:
            self.schedule = read_schedule(trainer)

    def on_train_batch_end(self, trainer, *args):
        self.train_batches += 1
        self.after_batch.append((self.position(trainer), trainer.global_step))

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.val_at.append(self.position(trainer))
            self.val_batches.append(0)

    def on_validation_batch_end(self, trainer, *args):
        if trainer.sanity_checking:
            self.sanity_batches += 1
        else:
            self.val_batches[-1] += 1

    def on_fit_end(self, trainer, pl_module):
        self.final_step = trainer.global_step


def _fit(model_kw=None, *, model_cls=Model, ckpt_path=None, callbacks=(), read=True, **trainer_kw):
    rec = Recorder()
    rec.read = read
    trainer_kw.setdefault("enable_checkpointing", any(isinstance(c, ModelCheckpoint) for c in callbacks))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[rec, *callbacks],
        **trainer_kw,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model_cls(**(model_kw or {})), ckpt_path=ckpt_path)
    return rec, trainer


def _check(rec):
    """The schedule read at on_fit_start matches what the fit ran, at every point of it."""
    s = rec.schedule
    ran_steps = rec.final_step - s.start_step
    ran_val = sum(rec.val_batches)
    assert s.total_batches == s.start_batch + rec.train_batches
    assert s.total_steps == rec.final_step
    assert s.val_after_batches == tuple(rec.val_at)
    assert s.sanity_batches == rec.sanity_batches
    if rec.val_batches:
        assert set(rec.val_batches) == {s.val_batches_per_run}
    assert s.remaining(s.start_batch) == RemainingWork(rec.train_batches, ran_steps, len(rec.val_at), ran_val)
    # from every on_train_batch_end: what is left is what the rest of the fit did
    for i, (pos, step) in enumerate(rec.after_batch):
        left = s.remaining(pos, val_pending=True)
        runs_left = sum(1 for p in rec.val_at if p >= pos)
        assert left.train_batches == len(rec.after_batch) - i - 1, pos
        assert left.optimizer_steps == rec.final_step - step, pos
        assert left.val_runs == runs_left, pos


FITS = {
    # id: (model kwargs, trainer kwargs)
    "epochs": ({}, dict(max_epochs=2)),
    "max_steps-only": ({}, dict(max_steps=25)),
    "max_steps-mid-epoch": ({}, dict(max_steps=13, max_epochs=5)),
    "accumulate3-epoch10": ({}, dict(max_epochs=2, accumulate_grad_batches=3)),
    "accumulate3-max_steps-mid-epoch": ({}, dict(max_steps=6, accumulate_grad_batches=3)),
    "accumulate3-max_steps-on-epoch-end": ({}, dict(max_steps=8, accumulate_grad_batches=3)),
    "limit_train-int": ({}, dict(max_epochs=2, limit_train_batches=7)),
    "limit_train-float": ({}, dict(max_epochs=2, limit_train_batches=0.45)),
    "drop_last": (dict(n_train=23, batch_size=3, drop_last=True), dict(max_epochs=2)),
    "val-int": ({}, dict(max_epochs=2, val_check_interval=3)),
    "val-0.25": ({}, dict(max_epochs=2, val_check_interval=0.25)),
    "val-0.5-accumulate3": ({}, dict(max_epochs=2, val_check_interval=0.5, accumulate_grad_batches=3)),
    "val-0.3-not-at-epoch-end": ({}, dict(max_epochs=2, val_check_interval=0.3)),
    "val-every-2nd-epoch": ({}, dict(max_epochs=4, val_check_interval=0.5, check_val_every_n_epoch=2)),
    "val-every-2nd-epoch-odd-count": ({}, dict(max_epochs=3, check_val_every_n_epoch=2)),
    "val-int-across-epochs": (dict(n_train=5), dict(max_epochs=4, val_check_interval=7, check_val_every_n_epoch=None)),
    "val-across-epochs-max_steps": (
        dict(n_train=5),
        dict(max_steps=11, val_check_interval=4, check_val_every_n_epoch=None, accumulate_grad_batches=2),
    ),
    "limit_val-int": ({}, dict(max_epochs=1, limit_val_batches=2)),
    "limit_val-float": (dict(n_val=(8,)), dict(max_epochs=1, limit_val_batches=0.5)),
    "limit_val-0": ({}, dict(max_epochs=1, limit_val_batches=0)),
    "sanity-0": ({}, dict(max_epochs=1, num_sanity_val_steps=0)),
    "sanity-all": ({}, dict(max_epochs=1, num_sanity_val_steps=-1)),
    "sanity-all-limited": ({}, dict(max_epochs=1, num_sanity_val_steps=-1, limit_val_batches=3)),
    "two-val-loaders": (dict(n_val=(3, 5)), dict(max_epochs=2, val_check_interval=0.5)),
    "two-val-loaders-limited-sanity-all": (dict(n_val=(3, 5)), dict(max_epochs=1, limit_val_batches=4, num_sanity_val_steps=-1)),
    "unsized-endless-max_steps": (
        dict(iterable=True),
        dict(max_steps=7, accumulate_grad_batches=2, val_check_interval=5, check_val_every_n_epoch=None),
    ),
    "unsized-limit_train-int": (dict(iterable=True), dict(max_epochs=3, limit_train_batches=4)),
    "fast_dev_run": ({}, dict(fast_dev_run=3)),
}


@pytest.mark.parametrize("model_kw, trainer_kw", list(FITS.values()), ids=list(FITS))
def test_schedule_matches_fit(model_kw, trainer_kw):
    rec, _ = _fit(model_kw, **trainer_kw)
    _check(rec)


def test_no_validation_step():
    rec, _ = _fit(model_cls=NoValModel, max_epochs=2, val_check_interval=0.5)
    _check(rec)
    s = rec.schedule
    assert (s.val_batches_per_run, s.val_after_batches, s.sanity_batches) == (0, (), 0)


def test_settings_are_reported():
    rec, _ = _fit(max_epochs=2, accumulate_grad_batches=3, max_time={"hours": 1}, limit_val_batches=2)
    s = rec.schedule
    assert (s.batches_per_epoch, s.accumulate, s.max_epochs, s.max_steps) == (10, 3, 2, None)
    assert (s.val_batches_per_run, s.sanity_batches, s.max_time_s, s.val_every_s) == (2, 2, 3600.0, None)
    assert (s.start_batch, s.start_step) == (0, 0)


def test_default_max_epochs_is_1000():
    # max_epochs=None without max_steps / max_time means 1000 epochs (loops.utilities._parse_loop_limits);
    # stop right after reading so that the test does not run them
    class ReadAndStop(Recorder):
        def on_fit_start(self, trainer, pl_module):
            super().on_fit_start(trainer, pl_module)
            trainer.should_stop = True

    rec = ReadAndStop()
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, callbacks=[rec],
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Model())
    s = rec.schedule
    assert (s.max_epochs, s.total_batches, s.total_steps, len(s.val_after_batches)) == (1000, 10_000, 10_000, 1000)


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume"])
def test_reading_does_not_change_the_fit(resume, tmp_path):
    # read_schedule loads the dataloaders early; the fit must run exactly as without it
    kw = dict(max_steps=17, val_check_interval=0.5, accumulate_grad_batches=3)
    ckpt = None
    if resume:
        _, trainer = _fit(max_steps=4, val_check_interval=0.5, accumulate_grad_batches=3)
        ckpt = tmp_path / "r.ckpt"
        trainer.save_checkpoint(ckpt)
    runs = [_fit(ckpt_path=ckpt, read=read, **kw)[0] for read in (False, True)]
    plain, reading = ((r.after_batch, r.val_at, r.val_batches, r.sanity_batches, r.final_step) for r in runs)
    assert plain == reading


def test_time_based_val_check_interval():
    # Lightning >= 2.6: a timedelta interval (trainer._val_check_time_interval, seconds); no batch-based
    # checks and no end-of-epoch run, so with an hour nothing is validated in this tiny fit
    rec, trainer = _fit(max_epochs=2, val_check_interval=timedelta(hours=1))
    s = rec.schedule
    assert trainer.val_check_batch is None
    assert (s.val_every_s, s.val_after_batches) == (3600.0, ())
    _check(rec)


# --- resume ------------------------------------------------------------------------------------------


def _resume(first_kw, second_kw, tmp_path, *, model_kw=None, checkpoint=None):
    """Fit with ``first_kw``; take ``trainer.save_checkpoint`` at the end (or the ModelCheckpoint file
    ``checkpoint`` = (callback, filename)); resume a new Trainer with ``second_kw``."""
    callbacks = () if checkpoint is None else (checkpoint[0],)
    first, trainer = _fit(model_kw, callbacks=callbacks, **first_kw)
    if checkpoint is None:
        path = tmp_path / "end.ckpt"
        trainer.save_checkpoint(path)
    else:
        path = tmp_path / checkpoint[1]
    second, _ = _fit(model_kw, ckpt_path=path, **second_kw)
    return first, second


RESUMES = {
    # id: (first fit, resumed fit, ModelCheckpoint kwargs + file to resume from, or None for save_checkpoint)
    "max_steps-mid-epoch": (dict(max_steps=13), dict(max_steps=34), None),
    "max_steps-mid-epoch-accumulate3": (
        dict(max_steps=5, accumulate_grad_batches=3, val_check_interval=0.5),
        dict(max_steps=14, accumulate_grad_batches=3, val_check_interval=0.5),
        None,
    ),
    # Lightning restarts a max_steps fit that ended on an epoch end with one extra batch (in-epoch
    # index 11 of 10) in a new epoch, unless that position is due a validation: then an empty epoch
    "max_steps-epoch-end-extra-batch": (
        dict(max_steps=20, check_val_every_n_epoch=2, val_check_interval=0.5),
        dict(max_steps=45, check_val_every_n_epoch=2, val_check_interval=0.5),
        None,
    ),
    "max_steps-epoch-end-val-due": (dict(max_steps=20), dict(max_steps=45), None),
    "max_epochs": (dict(max_epochs=2, val_check_interval=0.5), dict(max_epochs=4, val_check_interval=0.5), None),
    "max_epochs-val-every-2nd": (
        dict(max_epochs=1, check_val_every_n_epoch=2),
        dict(max_epochs=4, check_val_every_n_epoch=2),
        None,
    ),
    "val-int-across-epochs": (
        dict(max_steps=8, val_check_interval=7, check_val_every_n_epoch=None),
        dict(max_steps=31, val_check_interval=7, check_val_every_n_epoch=None),
        None,
    ),
    # ModelCheckpoint(every_n_train_steps) saves in on_train_batch_end, before that batch's validation:
    # the resumed fit skips that validation
    "ckpt-on-train-batch-end-mid-epoch": (
        dict(max_steps=14, val_check_interval=0.5),
        dict(max_steps=27, val_check_interval=0.5),
        (dict(every_n_train_steps=5), "ck-step=5.ckpt"),
    ),
    "ckpt-on-train-batch-end-epoch-end": (
        dict(max_steps=14),
        dict(max_steps=27, val_check_interval=0.5),
        (dict(every_n_train_steps=10), "ck-step=10.ckpt"),
    ),
    "ckpt-on-train-batch-end-accumulate3": (
        dict(max_steps=7, accumulate_grad_batches=3),
        dict(max_steps=13, accumulate_grad_batches=3, val_check_interval=0.5),
        (dict(every_n_train_steps=2), "ck-step=2.ckpt"),
    ),
    # saved in on_validation_end in the middle of an epoch (max_epochs-based fits): the restart lands on
    # a validation batch, so Lightning's first loop iteration trains nothing
    "ckpt-on-validation-end-mid-epoch": (
        dict(max_epochs=2, val_check_interval=0.5),
        dict(max_epochs=3, val_check_interval=0.5),
        (dict(save_on_train_epoch_end=False), "ck-step=5.ckpt"),
    ),
    # saved in on_train_epoch_end of epoch 0, resumed with max_steps: Lightning replays epoch 0 without
    # training and counts it again, so max_epochs=3 leaves only one more real epoch
    "ckpt-on-train-epoch-end": (
        dict(max_epochs=2, limit_val_batches=0),
        dict(max_epochs=3, max_steps=27),
        (dict(save_on_train_epoch_end=True), "ck-step=10.ckpt"),
    ),
}


@pytest.mark.parametrize("first_kw, second_kw, checkpoint", list(RESUMES.values()), ids=list(RESUMES))
def test_resume(first_kw, second_kw, checkpoint, tmp_path):
    if checkpoint is not None:
        kw, name = checkpoint
        cb = ModelCheckpoint(dirpath=tmp_path, filename="ck-{step}", save_top_k=-1, **kw)
        checkpoint = (cb, name)
    first, second = _resume(first_kw, second_kw, tmp_path, checkpoint=checkpoint)
    s = second.schedule
    assert s.start_step > 0 and s.start_batch > 0
    # the resumed fit continues the batch counter: its first batch is start_batch + 1
    assert second.after_batch[0][0] == s.start_batch + 1
    _check(second)


class _Stateful(IterableDataset):
    """A resumable 'dataloader' (Lightning saves/loads its state_dict): yields 0, 1, 2, ..."""

    def __init__(self):
        self.next = 0

    def __len__(self):
        return 10

    def __iter__(self):
        while self.next < len(self):
            self.next += 1
            yield (torch.full((2,), float(self.next - 1)),)
        self.next = 0

    def state_dict(self):
        return {"next": self.next}

    def load_state_dict(self, state):
        self.next = state["next"]


class StatefulModel(Model):
    def train_dataloader(self):
        from lightning.pytorch.utilities import CombinedLoader

        return CombinedLoader(_Stateful())

    def training_step(self, batch, batch_idx):
        self.seen.append(int(batch[0][0]))
        return super().training_step(batch, batch_idx)

    def on_fit_start(self):
        self.seen = []


def test_resume_keeps_stateful_loader_state(tmp_path):
    # reading the schedule must not make Lightning drop the checkpointed loader state (issue #20550):
    # the resumed fit continues with item 4, not 0
    first, trainer = _fit(model_cls=StatefulModel, max_steps=4, limit_val_batches=0)
    trainer.save_checkpoint(tmp_path / "s.ckpt")
    rec = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[rec],
        max_steps=7,
        limit_val_batches=0,
    )
    model = StatefulModel()
    trainer.fit(model, ckpt_path=tmp_path / "s.ckpt")
    assert model.seen == [4, 5, 6]
    assert rec.schedule.start_batch == 4
    _check(rec)
