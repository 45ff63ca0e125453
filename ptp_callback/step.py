"""``predict_step``: the public entry point from a model and a batch to a step-time prediction."""

from __future__ import annotations

from typing import Any

import torch

from .coefficients import CostCoefficients, coefficients_for
from .device_names import resolve_device_name
from .devices import DeviceSpec, UnknownDeviceError, get_device
from .notices import warn
from .precision import PrecisionSpec, as_precision
from .predict import StepPrediction, simulate
from .probe import cpu_coefficients, cpu_spec, probe_device, refine_with_probe
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
    probe: bool = False,
    coefficients: CostCoefficients | None = None,
    corrections: dict[str, float] | None = None,
) -> StepPrediction:
    """Predict the time of one optimizer step (forward, loss, backward, optimizer) on ``device``.

    ``step_fn(model, batch)`` returns the loss (default: ``model(*batch)`` and its ``.loss``);
    ``optimizer`` is an optimizer instance (class and hyperparameters are copied), a factory, or
    ``None`` for AdamW defaults; ``precision`` a Lightning precision string (TF32 flags are read
    from torch now); ``device`` a short name (``"h100-sxm"``), a ``torch.cuda.get_device_name()``
    string, a ``torch.device`` or a :class:`DeviceSpec`; ``"cpu"`` is measured by a quick probe
    (cached on disk), and ``probe=True`` refines a local GPU's table numbers the same way. Nothing
    of the model or optimizer is changed and no device memory is allocated by the trace.
    """
    from .arguments import check_model, check_optimizer, check_step_fn
    from .coefficients import CostCoefficients

    check_model(model, "predict_step(model=...)")
    check_optimizer(optimizer, "predict_step(optimizer=...)")
    check_step_fn(step_fn, "predict_step(step_fn")
    if coefficients is not None and not isinstance(coefficients, CostCoefficients):
        raise ValueError(f"predict_step(coefficients=<{type(coefficients).__name__}>): expected a CostCoefficients "
                         "(ptp_callback.coefficients.coefficients_for(arch)), or None for the device's own")
    spec = as_precision(precision)
    target, coef = resolve_device(device, probe=probe)
    trace = trace_step(model, batch, step_fn, optimizer, spec, target_type=target.trace_target,
                       trace_on=trace_on)
    return simulate(trace, target, coefficients or coef, corrections)


def resolve_device(device: str | torch.device | DeviceSpec, *, probe: bool = False) -> tuple[DeviceSpec, CostCoefficients]:
    """The device spec and its coefficients: from the table, or measured for a CPU.

    ``"cpu"`` (or a CPU ``torch.device``) is probed (cached on disk). With ``probe=True`` a local
    CUDA device's table numbers are refined by a quick measurement.
    """
    if isinstance(device, DeviceSpec) and device.arch == "cpu":
        # A CPU's spec comes from this machine's probe, which also gives its coefficients: the GPU
        # table's would price its steps as an H100 host's launches and Hopper's efficiencies (the
        # precision advice, which re-prices a run for its spec, put a 2-thread EPYC's bf16-mixed
        # step at 74x its 32-true one; they ran 13x apart).
        return device, cpu_coefficients(probe_device(torch.device("cpu")))
    if isinstance(device, DeviceSpec):
        return device, coefficients_for(device.arch)
    as_device = torch.device(device) if isinstance(device, torch.device) or str(device).split(":")[0] in ("cpu", "cuda") else None
    if as_device is not None and as_device.type == "cpu":
        result = probe_device(as_device)
        return cpu_spec(result), cpu_coefficients(result)
    try:
        spec = get_device(device)
    except UnknownDeviceError as unknown:
        # A name as the CLI and the callbacks take it ("h100", "A100 80GB"): one device, else the
        # error that lists every known one and how to add one.
        try:
            spec, note = resolve_device_name(str(device))
        except UnknownDeviceError:
            raise unknown from None
        if note:
            warn(note)
    coef = coefficients_for(spec.arch)
    if probe and as_device is not None and as_device.type == "cuda" and torch.cuda.is_available():
        spec, coef = refine_with_probe(spec, coef, probe_device(as_device))
    return spec, coef
