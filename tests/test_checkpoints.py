"""Which checkpoint saves a fit makes: the rules of ``save_positions`` against real Lightning fits."""

from __future__ import annotations

import os

import lightning as L
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import CheckpointIO
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback.checkpoints import CheckpointSettings, save_positions
from ptp_callback.integrations.lightning_schedule import read_checkpoints, read_schedule
from ptp_callback.schedule import build_schedule


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Saves(L.Callback):
    """Records the training batches done at each checkpoint save, and what the rules predicted."""

    def __init__(self) -> None:
        self.batches = 0
        self.actual: list[int] = []
        self.predicted: tuple[int, ...] = ()
        self.facts = None

    def on_fit_start(self, trainer, pl_module):
        self.predicted, _every_s, self.facts, _per_val_run = read_checkpoints(trainer, read_schedule(trainer))

    def on_train_batch_end(self, *args):
        self.batches += 1

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.actual.append(self.batches)


def fit(tmp_path, checkpoint: ModelCheckpoint | None, **settings) -> Saves:
    data = TensorDataset(torch.randn(96, 8), torch.randint(0, 2, (96,)))
    saves = Saves()
    options = dict(accelerator="cpu", max_epochs=3, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, limit_val_batches=2, num_sanity_val_steps=0,
                   default_root_dir=str(tmp_path))
    options.update(settings)
    callbacks = [saves] + ([checkpoint] if checkpoint is not None else [])
    L.Trainer(callbacks=callbacks, enable_checkpointing=checkpoint is not None, **options).fit(
        Tiny(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    return saves


CADENCES = {
    "default: every epoch's end": (dict(), dict()),
    "after each validation when it runs twice an epoch": (dict(), dict(val_check_interval=0.5)),
    "every_n_train_steps with accumulation": (dict(every_n_train_steps=5), dict(accumulate_grad_batches=2)),
    "every second epoch": (dict(every_n_epochs=2), dict()),
    "save_last writes a second file": (dict(save_last=True), dict()),
    "save_last='link' only links": (dict(save_last="link"), dict()),
    "keep all, every 4 steps, validation every other epoch": (dict(save_top_k=-1, every_n_train_steps=4),
                                                              dict(check_val_every_n_epoch=2)),
    "max_steps stops mid-epoch": (dict(), dict(max_epochs=-1, max_steps=17)),
    "no validation": (dict(), dict(limit_val_batches=0)),
    "save_top_k=0 with save_last": (dict(save_top_k=0, save_last=True), dict()),
}


@pytest.mark.parametrize("cadence", list(CADENCES))
def test_predicted_saves_are_the_saves_lightning_makes(tmp_path, cadence):
    checkpoint_args, trainer_args = CADENCES[cadence]
    saves = fit(tmp_path, ModelCheckpoint(dirpath=tmp_path / "ckpt", **checkpoint_args), **trainer_args)
    assert saves.actual, "the fit saved nothing: the case tests nothing"
    assert list(saves.predicted) == saves.actual


def test_a_monitored_metric_saves_at_most_every_candidate(tmp_path):
    saves = fit(tmp_path, ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss", save_top_k=1),
                max_epochs=4)
    assert set(saves.actual) <= set(saves.predicted)  # only improvements save: the plan counts every candidate


class DirectSave(CheckpointIO):
    """A checkpoint IO that writes with torch.save straight to the file, not through memory."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None):
        return torch.load(path, map_location=map_location, weights_only=False)

    def remove_checkpoint(self, path):
        os.remove(path)


def test_saves_through_lightnings_own_checkpoint_io_are_probed_through_memory(tmp_path):
    # TorchCheckpointIO serializes into a BytesIO before writing: the write-rate probe must do the same
    saves = fit(tmp_path, ModelCheckpoint(dirpath=tmp_path / "ckpt"))
    assert saves.facts.buffered
    saves = fit(tmp_path, ModelCheckpoint(dirpath=tmp_path / "other"), plugins=[DirectSave()])
    assert saves.actual and os.listdir(tmp_path / "other")  # the plugin did save
    assert not saves.facts.buffered


def test_no_checkpoint_callback_means_no_saves(tmp_path):
    saves = fit(tmp_path, None)
    assert saves.predicted == () and saves.actual == []


def test_fast_dev_run_saves_nothing(tmp_path):
    saves = fit(tmp_path, ModelCheckpoint(dirpath=tmp_path / "ckpt"), fast_dev_run=2)
    assert saves.batches == 2  # the fit ran, and its checkpoint callback was on
    assert saves.predicted == () and saves.actual == []


def test_an_unbounded_fit_lays_out_no_saves():
    s = build_schedule(batches_per_epoch=None, max_epochs=None, max_steps=None, val_check_batch=None,
                       check_val_every_n_epoch=1, val_batches_per_run=0)
    assert save_positions(s, CheckpointSettings()) == ()


def test_the_step_of_the_first_save_is_never_zero():
    # ModelCheckpoint starts from global step 0 as "already saved": a save due before any optimizer
    # step (accumulation over the whole first epoch) does not happen
    s = build_schedule(batches_per_epoch=2, accumulate=4, max_epochs=2, max_steps=None, val_check_batch=2,
                       check_val_every_n_epoch=1, val_batches_per_run=1)
    assert save_positions(s, CheckpointSettings()) == (2, 4)  # each epoch's last batch steps


def test_a_resume_with_accumulation_at_a_saved_step_saves_there_again(tmp_path):
    # ModelCheckpoint does not restore the step it last saved at: the resumed fit's first batch, which
    # leaves global_step at the saved multiple, saves once more.
    checkpoint = dict(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1, filename="{step}")
    fit(tmp_path, ModelCheckpoint(**checkpoint), accumulate_grad_batches=2, max_epochs=2)
    saves = Saves()
    L.Trainer(callbacks=[saves, ModelCheckpoint(**checkpoint)], accelerator="cpu", max_epochs=2, logger=False,
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=2, num_sanity_val_steps=0,
              accumulate_grad_batches=2).fit(
        Tiny(), DataLoader(TensorDataset(torch.randn(96, 8), torch.randint(0, 2, (96,))), batch_size=8),
        ckpt_path=tmp_path / "ckpt" / "step=4.ckpt")
    assert saves.actual[0] == 1  # the batch after the resume
    assert list(saves.predicted) == [8 + b for b in saves.actual]  # the plan counts from the fit's start
