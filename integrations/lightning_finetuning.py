"""The parameters that train in a Lightning fit, and ``BackboneFinetuning``'s unfreezing.

``BackboneFinetuning`` unfreezes the module's ``backbone`` at the start of a set epoch and adds its
parameters to the first optimizer as a group of their own. Its step is traced at fit start as the
callback will make it (the backbone trainable, its parameters in the optimizer; the real flags are
set back at once), so that the batches from that epoch on are priced before step one. Any other
change (a ``BaseFinetuning`` of the user's, a hook that sets ``requires_grad``) is found at the first
batch of each epoch, after every callback's ``on_train_epoch_start``, or inside an epoch when the
ETA is next recomputed (:class:`~ptp_callback.training_parameters.TrainingParametersWatch`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BackboneFinetuning, BaseFinetuning

from ptp_callback.predict import StepPrediction
from ptp_callback.run_prediction import RunPrediction, step_as_it_is
from ptp_callback.training_parameters import (StepChange, TrainingParameters, TrainingParametersWatch, step_change,
                                              training_parameters)

from .lightning_module import precision_spec, quiet_logging, step_code_key, traced_step
from .lightning_schedule import accumulation_at

__all__ = ["expect_unfreezing", "expected_unfreezing", "fit_parameters", "retraced_step"]


def fit_parameters(trainer: Trainer, module: LightningModule,
                   optimizers: list[torch.optim.Optimizer] | None = None) -> TrainingParameters:
    """The parameters that train in the fit: the module's, and those the trainer's optimizers (or
    ``optimizers``) hold."""
    return training_parameters(module, trainer.optimizers if optimizers is None else optimizers)


def expect_unfreezing(watch: TrainingParametersWatch, trainer: Trainer, module: LightningModule,
                      example: Any) -> None:
    """Tell ``watch`` of ``BackboneFinetuning``'s unfreezing still to come in this fit (from the
    first epoch whose start the fit runs: a fit resumed mid-epoch has run its own already)."""
    schedule = watch.forecaster.schedule
    first_epoch = schedule.start_epoch + (1 if schedule.start_batch_in_epoch else 0)
    expected = expected_unfreezing(trainer, module, watch.prediction, example, first_epoch)
    if expected is not None:
        watch.expect(*expected)


def retraced_step(trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
                  optimizer: torch.optim.Optimizer | None = None) -> StepPrediction:
    """The module's training step traced as it is now (``optimizer``: one in place of the first),
    at the costs of ``prediction``."""
    with quiet_logging(module):
        step_fn, traced_optimizer = traced_step(trainer, module, optimizer)
        return step_as_it_is(prediction, module, example, step_fn, traced_optimizer, precision_spec(trainer),
                             extra_key=step_code_key(module))


def expected_unfreezing(trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
                        first_epoch: int = 0) -> tuple[int, StepChange] | None:
    """``BackboneFinetuning``'s unfreezing at the start of ``first_epoch`` or a later one of this
    fit: the epoch it happens at, and the step after it. ``None`` when no such callback will unfreeze
    anything (a subclass with its own ``finetune_function`` unfreezes as it likes: that is found
    when it happens)."""
    callback = next((c for c in trainer.callbacks if isinstance(c, BackboneFinetuning)
                     and type(c).finetune_function is BackboneFinetuning.finetune_function), None)
    if callback is None or not trainer.optimizers or not module.automatic_optimization:
        return None
    epoch = callback.unfreeze_backbone_at_epoch
    max_epochs = trainer.fit_loop.max_epochs
    if epoch < first_epoch or max_epochs is not None and 0 <= max_epochs <= epoch:
        return None
    before = fit_parameters(trainer, module)
    with _unfrozen(trainer, module.backbone, callback.train_bn) as optimizers:
        after = fit_parameters(trainer, module, optimizers)
        if after == before:
            return None
        step = retraced_step(trainer, module, prediction, example, optimizers[0])
    return epoch, step_change(prediction, step, after, accumulation_at(trainer, epoch))


@contextlib.contextmanager
def _unfrozen(trainer: Trainer, backbone: torch.nn.Module, train_bn: bool) -> Iterator[list[torch.optim.Optimizer]]:
    """The backbone as ``BaseFinetuning.unfreeze_and_add_param_group`` leaves it (every parameter
    trainable, batch norms tracking their statistics again), and the first optimizer with the
    backbone's newly trainable parameters as a group of their own: a copy that shares the real one's
    state and is never stepped. The flags are set back on exit."""
    modules = BaseFinetuning.flatten_modules(backbone)
    flags = [(p, p.requires_grad) for m in modules for p in m.parameters(recurse=False)]
    tracking = [(m, m.track_running_stats) for m in modules if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    optimizer = trainer.optimizers[0]
    try:
        BaseFinetuning.make_trainable(modules)
        # Those not in an optimizer group yet: by identity (Lightning compares values, pairwise, which
        # costs seconds for a large backbone and is the same for parameters that differ in value).
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        added = [p for p in BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
                 if id(p) not in held]
        copy = object.__new__(type(optimizer))
        copy.__dict__.update(vars(optimizer))
        copy.param_groups = [*optimizer.param_groups, {**optimizer.param_groups[0], "params": added}] \
            if added else list(optimizer.param_groups)
        yield [copy, *trainer.optimizers[1:]]
    finally:
        for p, required in flags:
            p.requires_grad_(required)
        for m, tracked in tracking:
            m.track_running_stats = tracked
