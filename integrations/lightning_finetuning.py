"""Parameters that start training during a fit, and what that does to a training batch's cost.

Fine-tuning often trains a head first and unfreezes the backbone later: Lightning's
``BackboneFinetuning`` at a set epoch, or the user's own callback or hook (``requires_grad`` set,
a parameter group added). A frozen backbone runs no weight gradients and no optimizer updates, so
its step costs a fraction of the unfrozen one. The prediction made at fit start is of the frozen
step, so:

* ``BackboneFinetuning``'s unfreezing is predicted before step one: the step is traced again with
  the backbone trainable and its parameters in the optimizer, as the callback will make them, and
  the batches from that epoch on are priced at the ratio of the two;
* any other change is found at the first batch of each epoch (after every callback's
  ``on_train_epoch_start``) and the step traced again as it now is.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BackboneFinetuning, BaseFinetuning

from ptp_callback.forecast import RunForecaster
from ptp_callback.run_prediction import RunPrediction, batch_cost_factor, step_as_it_is

from .lightning_module import precision_spec, quiet_logging, step_code_key, traced_step

__all__ = ["TrainingParameters", "TrainingParametersWatch", "Unfreezing", "cost_factor_now", "expected_unfreezing",
           "training_parameters"]


@dataclass(frozen=True)
class TrainingParameters:
    """Which parameters train: those that require grad (count, elements) and those the optimizers hold."""

    trainable: int
    trainable_elements: int
    optimized: int


class TrainingParametersWatch:
    """Follows the parameters that train through a fit, for its forecaster: a ``BackboneFinetuning``
    unfreezing expected from the start (:meth:`start`), any change found at an epoch's first batch
    (:meth:`epoch_first_batch`)."""

    def __init__(self, trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
                 forecaster: RunForecaster) -> None:
        self.prediction, self.example, self.forecaster = prediction, example, forecaster
        self.parameters = training_parameters(trainer, module)
        self.factor = 1.0  # of the batch's cost now to the one predicted at fit start
        self.step_s = prediction.step.step_s  # the predicted step as the parameters that train now make it
        self.expected: tuple[int, Unfreezing] | None = None  # at which training batch

    def start(self, trainer: Trainer, module: LightningModule) -> None:
        """Price a ``BackboneFinetuning`` unfreezing still to come in this fit from its epoch on."""
        expected = expected_unfreezing(trainer, module, self.prediction, self.example)
        if expected is None:
            return
        epoch, unfreezing = expected
        starts = self.forecaster.schedule.epoch_starts
        index = epoch - self.forecaster.schedule.start_epoch
        if 0 < index < len(starts):
            self.expected = (starts[index], unfreezing)
            self.forecaster.expect_cost_change(starts[index], unfreezing.factor)

    def epoch_first_batch(self, trainer: Trainer, module: LightningModule) -> None:
        """At an epoch's first batch, after every callback's epoch start: the batch's cost as the
        parameters that train now make it (the expected factor, or the step traced again)."""
        now = training_parameters(trainer, module)
        position, expected = self.expected or (None, None)
        due = position is not None and self.forecaster.position >= position
        if now == self.parameters and not due:
            return
        self.expected = None  # happened, did not, or something else changed first: the step says
        if now == self.parameters:
            factor, step_s = 1.0, self.step_s  # the expected unfreezing did not happen
        elif due and now == expected.parameters:
            factor, step_s = expected.factor / self.factor, expected.step_s
        else:
            factor, step_s = cost_factor_now(trainer, module, self.prediction, self.example)
            factor /= self.factor
        self.parameters, self.step_s = now, step_s
        self.factor *= factor
        self.forecaster.cost_changed(factor)


def training_parameters(trainer: Trainer, module: LightningModule,
                        optimizers: list[torch.optim.Optimizer] | None = None) -> TrainingParameters:
    params = [p for p in module.parameters() if p.requires_grad]
    optimized = sum(len(group["params"]) for o in (trainer.optimizers if optimizers is None else optimizers)
                    for group in o.param_groups)
    return TrainingParameters(len(params), sum(p.numel() for p in params), optimized)


@dataclass(frozen=True)
class Unfreezing:
    """What an unfreezing makes of the step: a training batch's cost as a factor of the one predicted
    at fit start, the predicted step's seconds, and the parameters that train."""

    factor: float
    step_s: float
    parameters: TrainingParameters


def expected_unfreezing(trainer: Trainer, module: LightningModule, prediction: RunPrediction,
                        example: Any) -> tuple[int, Unfreezing] | None:
    """``BackboneFinetuning``'s unfreezing still to come in this fit: the epoch it happens at, and
    what it makes of the step. ``None`` when no such callback will unfreeze anything (a subclass with its own
    ``finetune_function`` unfreezes as it likes: that is found when it happens)."""
    callback = next((c for c in trainer.callbacks if isinstance(c, BackboneFinetuning)
                     and type(c).finetune_function is BackboneFinetuning.finetune_function), None)
    if callback is None or not trainer.optimizers or not module.automatic_optimization:
        return None
    epoch = callback.unfreeze_backbone_at_epoch
    max_epochs = trainer.fit_loop.max_epochs
    if epoch <= trainer.current_epoch or max_epochs is not None and 0 <= max_epochs <= epoch:
        return None
    before = training_parameters(trainer, module)
    with _unfrozen(trainer, module.backbone, callback.train_bn) as optimizers:
        after = training_parameters(trainer, module, optimizers)
        if after == before:
            return None
        factor, step_s = _factor(trainer, module, prediction, example, optimizers[0])
    return epoch, Unfreezing(factor, step_s, after)


def cost_factor_now(trainer: Trainer, module: LightningModule, prediction: RunPrediction,
                    example: Any) -> tuple[float, float]:
    """The factor a training batch's cost changed by, from the step traced at fit start to the step
    as the module and its optimizer are now; and that step's predicted seconds."""
    return _factor(trainer, module, prediction, example, None)


def _factor(trainer: Trainer, module: LightningModule, prediction: RunPrediction, example: Any,
            optimizer: torch.optim.Optimizer | None) -> tuple[float, float]:
    with quiet_logging(module):
        step_fn, traced_optimizer = traced_step(trainer, module, optimizer)
        step = step_as_it_is(prediction, module, example, step_fn, traced_optimizer, precision_spec(trainer),
                             extra_key=step_code_key(module))
    return batch_cost_factor(prediction, step, trainer.accumulate_grad_batches), step.step_s


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
