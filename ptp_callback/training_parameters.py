"""Which parameters train, and a run's batches priced again when that changes during the run.

Fine-tuning often trains a head first and unfreezes the backbone later (Lightning's
``BackboneFinetuning``, a loop that sets ``requires_grad`` and adds a parameter group at some
epoch). A frozen backbone runs no weight gradients and no optimizer updates, so its step costs a
fraction of the unfrozen one, and a prediction made at the start is of the frozen step. The
:class:`TrainingParametersWatch` keeps the forecaster's batch cost in step with the parameters that
train: a change known in advance is priced from where it happens
(:meth:`~TrainingParametersWatch.expect`), any other is found where the adapter looks (an epoch's
first batch, and each time the ETA is recomputed: about once a second) and the step traced again
(:meth:`~TrainingParametersWatch.check`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .forecast import RunForecaster
from .predict import StepPrediction
from .run_prediction import RunPrediction

# Inside an epoch the parameters are looked at no more often than this (when the ETA is recomputed):
# a look costs 10-30 us, and a change found a second late costs the ETA a second's batches.
LOOK_EVERY_S = 1.0

__all__ = ["StepChange", "TrainingParameters", "TrainingParametersWatch", "batch_cost_factor", "save_cost_change",
           "step_change", "training_parameters"]


@dataclass(frozen=True)
class TrainingParameters:
    """Which parameters train: those that require grad (count, elements) and those the optimizers hold."""

    trainable: int
    trainable_elements: int
    optimized: int


def training_parameters(model: torch.nn.Module, optimizers: Iterable[Any]) -> TrainingParameters:
    """``optimizers``: optimizers, or what a trace takes for them (clipped gradients, the optimizers
    of a manual step), ``None`` or a factory (which hold no parameters yet)."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimized = sum(len(group["params"]) for o in optimizers for group in _param_groups(o))
    return TrainingParameters(len(params), sum(p.numel() for p in params), optimized)


def _param_groups(optimizer: Any) -> list[dict[str, Any]]:
    if hasattr(optimizer, "param_groups"):
        return list(optimizer.param_groups)
    inner = getattr(optimizer, "optimizer", None)  # ClippedGradients, an accelerate AcceleratedOptimizer
    if inner is not None:
        return _param_groups(inner)
    return [g for o in getattr(optimizer, "optimizers", ()) for g in _param_groups(o)]  # ManualOptimization


@dataclass(frozen=True)
class StepChange:
    """The step after a change of the parameters that train: a training batch's cost as a factor of
    the one predicted at the start, the predicted step's seconds, the parameters that train, and the
    seconds a checkpoint save costs more than the one predicted at the start (the optimizer's state
    for the parameters that train now)."""

    factor: float
    step_s: float
    parameters: TrainingParameters
    save_s: float = 0.0


def batch_cost_factor(prediction: RunPrediction, step: StepPrediction, accumulate: int = 1) -> float:
    """What a training batch costs with ``step`` in place of the step ``prediction`` predicted, as a
    factor of its planned batch: the steps' difference (the optimizer's once per ``accumulate``
    batches) added to it, its loop and loader work kept as they are."""
    def per_batch(s: StepPrediction) -> float:
        optimizer_s = s.breakdown["phase"].get("optimizer", 0.0)
        return s.step_s - optimizer_s + optimizer_s / max(1, accumulate)

    plan = prediction.plan
    batch = plan.train_batch_s + plan.optimizer_step_s / max(1, accumulate)
    if batch <= 0.0:
        return 1.0
    return max(0.0, batch + per_batch(step) - per_batch(prediction.step)) / batch


def save_cost_change(prediction: RunPrediction, step: StepPrediction) -> float:
    """Seconds a checkpoint save costs more with ``step``'s optimizer state in place of the state of
    the step ``prediction`` predicted (none where the checkpoints hold no optimizer state): at the
    plan's seconds per byte of a save."""
    if not prediction.saves_optimizer_state or prediction.checkpoint_bytes <= 0:
        return 0.0
    per_byte = max(0.0, prediction.plan.save_s - prediction.host.save_fixed_s) / prediction.checkpoint_bytes
    return per_byte * (step.optimizer_state_bytes - prediction.step.optimizer_state_bytes)


def step_change(prediction: RunPrediction, step: StepPrediction, parameters: TrainingParameters,
                accumulate: int = 1) -> StepChange:
    return StepChange(batch_cost_factor(prediction, step, accumulate), step.step_s, parameters,
                      save_cost_change(prediction, step))


class TrainingParametersWatch:
    """Keeps a forecaster's training batch cost in step with the parameters that train."""

    def __init__(self, prediction: RunPrediction, forecaster: RunForecaster, parameters: TrainingParameters) -> None:
        self.prediction, self.forecaster, self.parameters = prediction, forecaster, parameters
        self.factor = 1.0  # of the batch's cost now to the one predicted at the start
        self.step_s = prediction.step.step_s  # the predicted step as the parameters that train now make it
        self.save_s = 0.0  # what a save costs more than predicted at the start
        self.expected: tuple[int, StepChange] | None = None  # from the start of which epoch
        self._looked_at = -math.inf

    def look_due(self, now: float) -> bool:
        """Whether to look at the parameters inside an epoch at ``now`` (:data:`LOOK_EVERY_S`)."""
        if now - self._looked_at < LOOK_EVERY_S:
            return False
        self._looked_at = now
        return True

    def expect(self, epoch: int, change: StepChange) -> None:
        """``change`` will happen at the start of ``epoch``: price the batches from there."""
        self.expected = (epoch, change)
        self.forecaster.expect_cost_change(epoch, change.factor, change.save_s)

    def check(self, now: TrainingParameters, step_now: Callable[[], StepPrediction], accumulate: int = 1) -> bool:
        """Between training batches: ``now`` are the parameters that train; ``step_now()`` traces the
        step as they make it, called only when they changed in a way nobody expected. ``True`` when
        the batch's cost was set again."""
        epoch, expected = self.expected or (None, None)
        start = self.forecaster.epoch_start_position(epoch) if epoch is not None else None
        due = start is not None and self.forecaster.position >= start
        if now == self.parameters and not due:
            return False
        self.expected = None  # happened, did not, or something else changed first: the step says
        before, self.parameters = self.parameters, now  # (a step that cannot be traced is not tried again)
        if now == before:
            change = StepChange(self.factor, self.step_s, now, self.save_s)  # the expected change did not happen
        elif due and expected is not None and now == expected.parameters:
            change = expected
        else:
            change = step_change(self.prediction, step_now(), now, accumulate)
        # An optimizer keeps the state of parameters that stop training, and a checkpoint saves it:
        # the saves never shrink back (the trace's optimizer starts without that state).
        save_s = max(self.save_s, change.save_s)
        factor, save_change = change.factor / self.factor, save_s - self.save_s
        self.step_s, self.factor, self.save_s = change.step_s, change.factor, save_s
        self.forecaster.cost_changed(factor, save_change)
        return True
