"""Precision advice: predict the same step at other precisions and say what a switch would save.

Each candidate precision is traced and predicted like the current one (its casts, its optimizer
traffic, its host/device balance), with the run's calibration applied: the per-class corrections
measured on this device, and the residual between the measured and predicted step at the current
precision. Peak-FLOP ratios would overstate gains 3-6x; this does not use them.

>>> import torch
>>> from ptp_callback.advisor import compare_precisions
>>> model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 10))
>>> batch = (torch.empty(4096, 4096, device="meta"), torch.empty(4096, dtype=torch.long, device="meta"))
>>> options = compare_precisions(model, batch, lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
...                              current="32-true", device="h100-sxm")
>>> [o.precision for o in options][:1]   # fastest first
['bf16-true']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .devices import DeviceSpec
from .display import format_duration
from .precision import PrecisionSpec, as_precision, support_notes
from .predict import simulate
from .step import resolve_device
from .trace_cache import cached_trace_step
from .tracer import OptimizerArg, StepFn, TraceError

# Precisions a switch may be advised to: mixed precision and TF32 keep fp32 weights and master
# copies, so they change speed, not what the model learns. Pure half precision (``*-true``) is
# predicted and listed but only advised when asked for, since it changes the training numerics.
SAFE = ("32-true", "32-true+tf32", "bf16-mixed", "16-mixed")
# How many times shorter another precision must make the run (or the step) to be named: below it,
# the difference is within what the predictions can tell apart.
ADVICE_GAIN = 1.1


@dataclass(frozen=True)
class PrecisionOption:
    """One precision's predicted step time (calibrated) and its speed relative to the current one.

    ``note`` says when the device cannot run this precision fast (bf16 before Ampere), in which
    case ``step_s`` is what it would really take there.
    """

    precision: str
    step_s: float
    speedup: float
    safe: bool
    note: str = ""


def candidate_precisions(device: DeviceSpec) -> list[PrecisionSpec]:
    """Precisions worth predicting on this device (TF32 needs Ampere or newer; bf16 a bf16 path)."""
    specs = [PrecisionSpec.from_setting("32-true", matmul_tf32=False)]
    if device.arch == "cpu":
        if device.peak_tflops.get("bf16", 0) > 0:
            specs += [PrecisionSpec.from_setting("bf16-mixed"), PrecisionSpec.from_setting("bf16-true")]
        return specs
    if device.peak_tflops.get("tf32"):
        specs.append(PrecisionSpec.from_setting("32-true", matmul_tf32=True))
    if device.peak_tflops.get("bf16"):
        specs += [PrecisionSpec.from_setting("bf16-mixed"), PrecisionSpec.from_setting("bf16-true")]
    if device.peak_tflops.get("fp16"):
        specs += [PrecisionSpec.from_setting("16-mixed"), PrecisionSpec.from_setting("16-true")]
    return specs


def compare_precisions(
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None = None,
    optimizer: OptimizerArg = None,
    *,
    current: str | PrecisionSpec,
    device: str | torch.device | DeviceSpec,
    corrections: dict[str, float] | None = None,
    measured_step_s: float | None = None,
    extra_key: str = "",
) -> list[PrecisionOption]:
    """Predicted step time at each candidate precision, fastest first.

    ``corrections`` are per-class calibration factors; ``measured_step_s`` the measured step at
    the ``current`` precision. What it adds to the prediction is taken as precision-independent
    work (framework loop, data loading, host noise) and added to every candidate -- so the advice
    never promises a gain from time no precision can cut; a prediction that was too slow instead
    scales every candidate down by the same factor. Traces come from the on-disk trace cache
    when the same step was traced before (``extra_key`` as for
    :func:`~ptp_callback.trace_cache.cached_trace_step`).
    """
    spec, coef = resolve_device(device)
    current_spec = as_precision(current)
    target_type = spec.trace_target
    predicted: dict[str, float] = {}
    notes: dict[str, str] = {}
    for candidate in candidate_precisions(spec) + [current_spec]:
        if candidate.label in predicted:
            continue
        try:
            trace, _cached = cached_trace_step(model, batch, step_fn, optimizer, candidate, target_type=target_type,
                                               extra_key=extra_key)
        except TraceError:
            continue  # e.g. an op without a half-precision kernel: that precision is not an option
        predicted[candidate.label] = simulate(trace, spec, coef, corrections).step_s
        notes[candidate.label] = "; ".join(support_notes(candidate, spec))
    base = predicted.get(current_spec.label)
    if measured_step_s and base:
        extra = measured_step_s - base
        calibrated = {k: (v + extra if extra >= 0 else v * measured_step_s / base) for k, v in predicted.items()}
    else:
        calibrated = predicted
    here = calibrated.get(current_spec.label)
    options = [
        PrecisionOption(label, seconds, (here / seconds) if here else 1.0, label in SAFE, notes.get(label, ""))
        for label, seconds in calibrated.items()
    ]
    return sorted(options, key=lambda o: o.step_s)


def advice(options: list[PrecisionOption], current: str, fit_s: float | None, *, fixed_s: float = 0.0,
           threshold: float = ADVICE_GAIN, allow_unsafe: bool = False) -> str | None:
    """A one-line suggestion when another precision is predicted ``threshold`` x faster, else None.

    ``fit_s`` is the fit at the current precision, of which ``fixed_s`` (data-loader waits,
    checkpoint saves) does not depend on the precision; the rest scales with the step. When the
    device cannot run the current precision fast (bf16 on a T4), the line starts by saying so;
    precisions it cannot run fast are never suggested.
    """
    by_label = {o.precision: o for o in options}
    here = by_label.get(current)
    if here is None:
        return None
    suggestion = _suggestion(options, here, fit_s, fixed_s, threshold, allow_unsafe)
    if here.note:
        return here.note + (f". {suggestion}" if suggestion else "")
    return suggestion


def keep_line(options: list[PrecisionOption], current: str, device_name: str, threshold: float = ADVICE_GAIN) -> str:
    """The line for a run whose precision is the one to keep: each other precision's predicted step
    time beside the current one's. A pure half precision (``*-true``) predicted faster is listed and
    said why it is not advised: its weights and optimizer state lose precision.

    >>> options = [PrecisionOption("32-true", 0.010, 1.0, True), PrecisionOption("bf16-mixed", 0.0095, 1.05, True),
    ...            PrecisionOption("bf16-true", 0.005, 2.0, False)]
    >>> keep_line(options, "32-true", "a CPU")  # doctest: +NORMALIZE_WHITESPACE
    'keep 32-true: no mixed precision or TF32 is predicted to cut this run by 10% on a CPU (step time relative to
    32-true: bf16-mixed 0.95x, bf16-true 0.50x; bf16-true keeps the weights and optimizer state in half
    precision, which changes what the model learns: listed, not advised)'
    >>> keep_line(options[:2], "bf16-mixed", "a CPU")  # doctest: +NORMALIZE_WHITESPACE
    'keep bf16-mixed: no other precision is predicted to cut this run by 10% on a CPU (step time relative to
    bf16-mixed: 32-true 1.05x)'
    """
    here = next((o.step_s for o in options if o.precision == current), None)
    others = [o for o in options if here and o.precision != current]
    if not others:
        return f"keep {current}: no other precision has a fast path predicted on {device_name}"
    listed = ", ".join(f"{o.precision} {o.step_s / here:.2f}x" for o in others)
    faster_unsafe = [o.precision for o in others if not o.safe and not o.note and here / o.step_s >= threshold]
    if faster_unsafe:
        names = " and ".join(faster_unsafe)
        listed += (f"; {names} {'keeps' if len(faster_unsafe) == 1 else 'keep'} the weights and optimizer state in "
                   "half precision, which changes what the model learns: listed, not advised")
    others_named = "no mixed precision or TF32" if current == "32-true" else "no other precision"
    return (f"keep {current}: {others_named} is predicted to cut this run by 10% on {device_name} "
            f"(step time relative to {current}: {listed})")


def _suggestion(options: list[PrecisionOption], here: PrecisionOption, fit_s: float | None, fixed_s: float,
                threshold: float, allow_unsafe: bool) -> str | None:
    current = here.precision
    eligible = [o for o in options if o.precision != current and (o.safe or allow_unsafe) and not o.note]
    if not eligible:
        return None
    best = min(eligible, key=lambda o: o.step_s)
    gain = here.step_s / best.step_s
    if gain < threshold:
        return None
    if fit_s:
        fixed_s = min(max(0.0, fixed_s), fit_s)
        new_fit = fixed_s + (fit_s - fixed_s) / gain
        if fit_s / new_fit < threshold:
            return None
        return (f"{current} -> {best.precision} would cut this fit from {format_duration(fit_s)} "
                f"to {format_duration(new_fit)} (step {format_duration(here.step_s)} -> "
                f"{format_duration(best.step_s)}, predicted)")
    return (f"{current} -> {best.precision} would cut each step from {format_duration(here.step_s)} to "
            f"{format_duration(best.step_s)} (predicted)")
