"""``predict_step``: the public entry point from a model and a batch to a step-time prediction."""

from __future__ import annotations

from typing import Any

import torch

from .coefficients import CostCoefficients, coefficients_for
from .devices import DeviceSpec, get_device
from .precision import PrecisionSpec, as_precision
from .predict import StepPrediction, simulate
from .tracer import OptimizerArg, StepFn, trace_step


def predict_step(
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None = None,
    optimizer: OptimizerArg = None,
    precision: str | int | PrecisionSpec = "bf16-mixed",
    device: str | torch.device | DeviceSpec = "h100-sxm",
    *,
    trace_on: str = "auto",
    coefficients: CostCoefficients | None = None,
    corrections: dict[str, float] | None = None,
) -> StepPrediction:
    """Predict the time of one optimizer step (forward, loss, backward, optimizer) on ``device``.

    ``step_fn(model, batch)`` returns the loss (default: ``model(*batch)`` and its ``.loss``);
    ``optimizer`` is an optimizer instance (class and hyperparameters are copied), a factory, or
    ``None`` for AdamW defaults; ``precision`` a Lightning precision string (TF32 flags are read
    from torch now); ``device`` a short name (``"h100-sxm"``), a ``torch.cuda.get_device_name()``
    string, a ``torch.device`` or a :class:`DeviceSpec`. Nothing of the model or optimizer is
    changed and no device memory is allocated.
    """
    spec = as_precision(precision)
    target = get_device(device)
    trace = trace_step(model, batch, step_fn, optimizer, spec, target_type="cuda", trace_on=trace_on)
    coef = coefficients or coefficients_for(target.arch)
    return simulate(trace, target, coef, corrections)
