"""A tiny training step timed on this CPU, and the per-op host costs fitted to it.

The probe's host times are two micro-loops: an in-place add on a 16-element tensor (the time per
small op) and a three-op forward and backward. A training step spends more outside its ops than
those say: the autograd engine walks its graph node by node and accumulates each gradient, and a
per-parameter optimizer runs a Python loop around each parameter's ops. On a 2-core Xeon VM
(2026-11-29) a two-layer MLP's step (256 -> 512 -> 10, batch 32, AdamW) took 1.19 ms, of which
0.32 ms backward and 0.59 ms optimizer, against 0.12 and 0.36 ms predicted; the ops themselves,
timed by the profiler, took about their prices. So the probe also times the whole step of a
model too small for its arithmetic to matter (:func:`reference_step`), phase by phase, and each
phase's per-op host cost is scaled so that the trace of that step, priced with the probe's
coefficients, takes what the phase measured (:func:`host_scales`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

PHASES = ("forward", "backward", "optimizer")
# How far a phase's fitted host cost may move from the micro-loops' (a busy probe reads anything).
SCALE_LIMITS = (0.5, 4.0)


def reference_step() -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor], Callable[..., torch.Tensor]]:
    """The reference model, a batch and its loss: three linear layers of 16 features, batch 4."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 16), torch.nn.GELU(),
                                torch.nn.Linear(16, 8))
    batch = (torch.randn(4, 16), torch.randint(0, 8, (4,)))

    def loss(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    return model, batch, loss


def time_reference_step(steps: int = 100, rounds: int = 4) -> dict[str, float]:
    """Seconds of each phase of the reference step with AdamW's defaults (the optimizer's with its
    ``zero_grad``): the median of ``rounds`` means over ``steps`` steps, after as many warm-up steps."""
    model, batch, loss = reference_step()
    optimizer = torch.optim.AdamW(model.parameters())
    means: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for round_ in range(rounds + 1):
        totals = dict.fromkeys(PHASES, 0.0)
        for _ in range(steps):
            started = time.perf_counter()
            value = loss(model, batch)
            forward = time.perf_counter()
            value.backward()
            backward = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad()
            ended = time.perf_counter()
            totals["forward"] += forward - started
            totals["backward"] += backward - forward
            totals["optimizer"] += ended - backward
        if round_:  # the first round warms up
            for phase in PHASES:
                means[phase].append(totals[phase] / steps)
    return {phase: statistics.median(values) for phase, values in means.items()}


def host_scales(coef: Any, device: Any, measured: dict[str, float]) -> dict[str, float]:
    """Per phase, the factor on its host costs per op, module call and parameter (``coef.host_op_s``,
    ``host_module_s``, ``host_param_s``) that makes the reference step's trace, priced with ``coef``
    on ``device``, take the ``measured`` seconds; the ops' own prices (their arithmetic and bytes)
    and the views' host time are kept. 1.0 for a phase with nothing to fit."""
    from .predict import simulate, step_host_seconds
    from .tracer import trace_step

    model, batch, loss = reference_step()
    trace = trace_step(model, batch, loss, None, "32-true", target_type="cpu")
    # What the factors scale (per op, module call and parameter) and what they leave (views, the
    # ops' own prices): each phase priced with them and without them.
    unscaled = replace(coef, host_op_s=dict.fromkeys(coef.host_op_s, 0.0), host_module_s=0.0,
                       host_param_s=dict.fromkeys(coef.host_param_s, 0.0))

    def phases(c: Any) -> dict[str, float]:
        by_phase = simulate(trace, device, c).breakdown["phase"]
        by_phase["forward"] -= step_host_seconds(trace, c)  # the loop's own: no phase timed holds it
        return {phase: by_phase.get(phase, 0.0) for phase in PHASES}

    full, fixed = phases(coef), phases(unscaled)
    low, high = SCALE_LIMITS
    return {phase: min(high, max(low, (measured[phase] - fixed[phase]) / (full[phase] - fixed[phase])))
            if full[phase] > fixed[phase] and measured.get(phase) else 1.0 for phase in PHASES}
