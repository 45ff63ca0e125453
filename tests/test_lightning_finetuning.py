"""A backbone that starts training during a real Lightning fit: predicted before step one when
``BackboneFinetuning`` will unfreeze it, found at the epoch it happens otherwise."""

from __future__ import annotations

import itertools

import lightning as L
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import BackboneFinetuning, BaseFinetuning, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import PrecisionTimeCallback


class WithBackbone(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.BatchNorm1d(256),
                                      nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.head = nn.Linear(256, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=1e-3)


class UnfreezesAtEpochOne(BaseFinetuning):
    """Its own unfreezing: nothing says in advance when it happens."""

    def freeze_before_training(self, pl_module):
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module, epoch, optimizer):
        if epoch == 1:
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer)


class SeenAtFirstBatch(L.Callback):
    """What training's start and the first training batch of each epoch see: the backbone's flags,
    the optimizer's groups, and the change the callback expects and the factor it applies."""

    def __init__(self, ptp: PrecisionTimeCallback) -> None:
        self.ptp, self.start, self.epochs = ptp, None, []

    def _seen(self, trainer, pl_module):
        # (its batch norm trains throughout: BackboneFinetuning's train_bn=True)
        flags = {p.requires_grad for m in pl_module.backbone if isinstance(m, nn.Linear) for p in m.parameters()}
        watch = self.ptp._watch
        return flags, len(trainer.optimizers[0].param_groups), watch.expected, watch.factor

    def on_train_start(self, trainer, pl_module):
        self.start = self._seen(trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            self.epochs.append(self._seen(trainer, pl_module))


def fit(callbacks: list, ptp: PrecisionTimeCallback) -> SeenAtFirstBatch:
    seen = SeenAtFirstBatch(ptp)
    data = TensorDataset(torch.randn(128, 64), torch.randint(0, 4, (128,)))
    trainer = L.Trainer(accelerator="cpu", max_epochs=3, limit_train_batches=8, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False,
                        callbacks=[ptp, *callbacks, seen])
    trainer.fit(WithBackbone(), DataLoader(data, batch_size=16))
    return seen


@pytest.mark.parametrize("at_epoch", [0, 1, 2])
def test_backbone_finetuning_is_priced_from_the_epoch_it_unfreezes_before_step_one(at_epoch):
    ptp = PrecisionTimeCallback(device="cpu", advise=False)
    seen = fit([BackboneFinetuning(unfreeze_backbone_at_epoch=at_epoch)], ptp)
    flags, groups, expected, factor = seen.start
    # tracing the unfrozen step left the backbone frozen and the optimizer as it was
    assert flags == {False} and groups == 1
    epoch, change = expected
    expected_factor = change.factor
    assert epoch == at_epoch and expected_factor > 1.2 and factor == 1.0
    assert ptp.forecaster.epoch_start_position(epoch) == 8 * at_epoch
    assert change.step_s > ptp.prediction.step.step_s
    # from the epoch it unfroze at, a batch costs what was expected, with no second trace
    flags, groups, expected, factor = seen.epochs[at_epoch]
    assert flags == {True} and groups == 2 and expected is None and factor == expected_factor
    assert ptp.forecaster.batches.changed_at is not None


@pytest.mark.parametrize("weights_only", [False, True])
def test_the_unfrozen_backbones_optimizer_state_is_priced_into_the_saves_after_it(tmp_path, weights_only):
    ptp = PrecisionTimeCallback(device="cpu", advise=False)
    seen = SeenAtFirstBatch(ptp)
    data = TensorDataset(torch.randn(128, 64), torch.randint(0, 4, (128,)))
    trainer = L.Trainer(accelerator="cpu", max_epochs=3, limit_train_batches=8, logger=False,
                        default_root_dir=tmp_path, enable_model_summary=False, enable_progress_bar=False,
                        callbacks=[ptp, BackboneFinetuning(unfreeze_backbone_at_epoch=1), seen,
                                   ModelCheckpoint(dirpath=tmp_path, save_weights_only=weights_only)])
    trainer.fit(WithBackbone(), DataLoader(data, batch_size=16))
    _flags, _groups, (epoch, change), _factor = seen.start
    prediction = ptp.prediction
    if weights_only:
        assert change.save_s == 0.0
        return
    # AdamW's two fp32 moments of each linear weight and bias that unfreezes, at the plan's rate per byte
    unfrozen = sum(p.numel() for m in WithBackbone().backbone if isinstance(m, nn.Linear) for p in m.parameters())
    per_byte = (prediction.plan.save_s - prediction.host.save_fixed_s) / prediction.checkpoint_bytes
    assert change.save_s == pytest.approx(per_byte * 2 * 4 * unfrozen, rel=0.01) and change.save_s > 0
    assert ptp._watch.save_s == change.save_s  # it happened at epoch 1's start, as expected


class UnfreezesThenFreezes(UnfreezesAtEpochOne):
    def finetune_function(self, pl_module, epoch, optimizer):
        super().finetune_function(pl_module, epoch, optimizer)
        if epoch == 2:
            self.freeze(pl_module.backbone)  # the optimizer keeps the backbone's state


class SavesSeen(L.Callback):
    def __init__(self, ptp: PrecisionTimeCallback) -> None:
        self.ptp, self.save_s = ptp, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            self.save_s.append(self.ptp._watch.save_s)


def test_saves_keep_the_optimizer_state_of_a_backbone_frozen_again(tmp_path):
    ptp = PrecisionTimeCallback(device="cpu", advise=False)
    seen = SavesSeen(ptp)
    data = TensorDataset(torch.randn(128, 64), torch.randint(0, 4, (128,)))
    trainer = L.Trainer(accelerator="cpu", max_epochs=4, limit_train_batches=8, logger=False,
                        default_root_dir=tmp_path, enable_model_summary=False, enable_progress_bar=False,
                        callbacks=[ptp, UnfreezesThenFreezes(), seen, ModelCheckpoint(dirpath=tmp_path)])
    trainer.fit(WithBackbone(), DataLoader(data, batch_size=16))
    before, unfrozen, frozen_again, after = seen.save_s
    assert before == 0.0 and unfrozen > 0.0
    assert frozen_again == unfrozen and after == unfrozen  # its state stays in every checkpoint


def test_an_unfreezing_nothing_announced_is_found_at_the_epoch_it_happens():
    ptp = PrecisionTimeCallback(device="cpu", advise=False)
    seen = fit([UnfreezesAtEpochOne()], ptp)
    assert [e[2] for e in seen.epochs] == [None, None, None] and seen.epochs[0][3] == 1.0
    assert seen.epochs[1][0] == {True} and seen.epochs[1][3] > 1.2  # the step traced again as it now is
    assert seen.epochs[2][3] == seen.epochs[1][3]


def test_a_fit_that_ends_before_the_backbone_unfreezes_expects_nothing():
    ptp = PrecisionTimeCallback(device="cpu", advise=False)
    seen = fit([BackboneFinetuning(unfreeze_backbone_at_epoch=3)], ptp)
    assert {e[2] for e in seen.epochs} == {None} and {e[3] for e in seen.epochs} == {1.0}


def test_a_fit_resumed_at_the_epoch_the_backbone_unfreezes_expects_it(tmp_path):
    data = DataLoader(TensorDataset(torch.randn(128, 64), torch.randint(0, 4, (128,))), batch_size=16)

    def trainer(epochs: int, callbacks: list) -> L.Trainer:
        return L.Trainer(accelerator="cpu", max_epochs=epochs, limit_train_batches=8, logger=False,
                         enable_model_summary=False, enable_progress_bar=False, default_root_dir=tmp_path,
                         callbacks=callbacks)

    first = trainer(1, [BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    first.fit(WithBackbone(), data)  # saves at the end of epoch 0, the backbone still frozen
    ptp = PrecisionTimeCallback(device="cpu", advise=False)
    seen = SeenAtFirstBatch(ptp)
    trainer(3, [ptp, BackboneFinetuning(unfreeze_backbone_at_epoch=1), seen]).fit(
        WithBackbone(), data, ckpt_path=first.checkpoint_callback.best_model_path)
    epoch, change = seen.start[2]
    assert epoch == 1 and ptp.forecaster.epoch_start_position(1) == 8
    assert seen.epochs[0][3] == change.factor > 1.2  # applied at its first batch, as expected


class UnfreezesAtBatch(BaseFinetuning):
    """Unfreezes the backbone before the training batch at ``position`` (a step-based schedule)."""

    def __init__(self, position: int) -> None:
        super().__init__()
        self.position = position

    def freeze_before_training(self, pl_module):
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module, epoch, optimizer):
        pass

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.fit_loop.total_batch_idx == self.position:
            self.unfreeze_and_add_param_group(pl_module.backbone, trainer.optimizers[0])


def test_an_unfreezing_inside_an_epoch_is_found_when_the_eta_is_next_recomputed():
    ticks = itertools.count()  # a clock a second on at each reading: the ETA recomputed at every batch's end
    ptp = PrecisionTimeCallback(device="cpu", advise=False, refresh_s=0.0, clock=lambda: float(next(ticks)))

    class Factors(L.Callback):
        def __init__(self):
            self.seen = []

        def on_train_batch_end(self, trainer, *args):
            self.seen.append(ptp._watch.factor)

    factors = Factors()
    fit([UnfreezesAtBatch(12), factors], ptp)
    assert set(factors.seen[:12]) == {1.0} and factors.seen[12] > 1.2  # at that batch's end, not at epoch 2


def test_the_unfreezing_is_priced_at_the_accumulation_of_its_epoch():
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    def expected_factor(callbacks: list, **settings) -> float:
        ptp = PrecisionTimeCallback(device="cpu", advise=False)
        seen = SeenAtFirstBatch(ptp)
        data = DataLoader(TensorDataset(torch.randn(128, 64), torch.randint(0, 4, (128,))), batch_size=16)
        L.Trainer(accelerator="cpu", max_epochs=2, limit_train_batches=8, logger=False, enable_checkpointing=False,
                  enable_model_summary=False, enable_progress_bar=False, callbacks=[ptp, *callbacks, seen],
                  **settings).fit(WithBackbone(), data)
        return seen.start[2][1].factor

    def unfreezing():
        return BackboneFinetuning(unfreeze_backbone_at_epoch=1)

    scheduled = expected_factor([unfreezing(), GradientAccumulationScheduler({0: 1, 1: 4})])
    by_four = expected_factor([unfreezing()], accumulate_grad_batches=4)
    by_one = expected_factor([unfreezing()])
    # the new group's update once per 4 batches, as from epoch 1 on (the factors differ by 10-15%;
    # each fit's plan has its own measured loader time, a few percent)
    assert abs(scheduled - by_four) < abs(scheduled - by_one)
