"""The parameters that train in a Lightning fit, and ``BackboneFinetuning``'s unfreezing.

``BackboneFinetuning`` unfreezes the module's ``backbone`` at the start of a set epoch and adds its
parameters to the first optimizer as a group of their own. Its step is traced at fit start as the
callback will make it (the backbone trainable, its parameters in the optimizer; the real flags are
set back at once), so that the batches from that epoch on are priced before step one. Any other
change (a ``BaseFinetuning`` of the user's, a hook that sets ``requires_grad``) is found at the first
batch of each epoch, after every callback's ``on_train_epoch_start``
(:class:`~ptp_callback.training_parameters.TrainingParametersWatch`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BackboneFinetuning, BaseFinetuning

from ptp_callback.forecast import RunForecaster
from ptp_callback.predict import StepPrediction
from ptp_callback.run_prediction import RunPrediction, step_as_it_is
from ptp_callback.training_parameters import (StepChange, TrainingParameters, TrainingParametersWatch, step_change,
                                              training_parameters)

from .lightning_module import precision_spec, quiet_logging, step_code_key, traced_step

__all__ = ["expected_unfreezing", "fit_parameters", "step_now", "watch_fit"]


def fit_parameters(trainer: Trainer, module: LightningModule,
                   optimizers: list[torch.optim.Optimizer] | None = None) -> TrainingParameters:
    return training_parameters(module, trainer.optimizers if optimizers is None else optimizers)


def watch_fit(trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
              forecaster: RunForecaster) -> TrainingParametersWatch:
    """The watch of this fit's parameters that train, with ``BackboneFinetuning``'s unfreezing
    expected where it will happen (:func:`expected_unfreezing`)."""
    watch = TrainingParametersWatch(prediction, forecaster, fit_parameters(trainer, module))
    expected = expected_unfreezing(trainer, module, prediction, example)
    if expected is not None:
        epoch, change = expected
        starts, index = forecaster.schedule.epoch_starts, epoch - forecaster.schedule.start_epoch
        if 0 < index < len(starts):
            watch.expect(starts[index], change)
    return watch


def step_now(trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
             optimizer: torch.optim.Optimizer | None = None) -> StepPrediction:
    """The module's training step traced as it is now (``optimizer``: one in place of the first),
    at the costs of ``prediction``."""
    with quiet_logging(module):
        step_fn, traced_optimizer = traced_step(trainer, module, optimizer)
        return step_as_it_is(prediction, module, example, step_fn, traced_optimizer, precision_spec(trainer),
                             extra_key=step_code_key(module))


def expected_unfreezing(trainer: Trainer, module: LightningModule, prediction: RunPrediction,
                        example: Any) -> tuple[int, StepChange] | None:
    """``BackboneFinetuning``'s unfreezing still to come in this fit: the epoch it happens at, and
    the step after it. ``None`` when no such callback will unfreeze anything (a subclass with its
    own ``finetune_function`` unfreezes as it likes: that is found when it happens)."""
    callback = next((c for c in trainer.callbacks if isinstance(c, BackboneFinetuning)
                     and type(c).finetune_function is BackboneFinetuning.finetune_function), None)
    if callback is None or not trainer.optimizers or not module.automatic_optimization:
        return None
    epoch = callback.unfreeze_backbone_at_epoch
    max_epochs = trainer.fit_loop.max_epochs
    if epoch <= trainer.current_epoch or max_epochs is not None and 0 <= max_epochs <= epoch:
        return None
    before = fit_parameters(trainer, module)
    with _unfrozen(trainer, module.backbone, callback.train_bn) as optimizers:
        after = fit_parameters(trainer, module, optimizers)
        if after == before:
            return None
        step = step_now(trainer, module, prediction, example, optimizers[0])
    return epoch, step_change(prediction, step, after, trainer.accumulate_grad_batches)


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
        with warnings.catch_warnings():  # of parameters the optimizer holds already: the real unfreezing says it
            warnings.simplefilter("ignore")
            added = BaseFinetuning.filter_on_optimizer(
                optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True))
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
