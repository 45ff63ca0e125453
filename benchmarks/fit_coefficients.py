"""Fit the cost model's coefficients for one device: per op class on per-op timings, then a few
per-step host constants on whole training steps.

usage: python benchmarks/fit_coefficients.py [--rounds N] [--train-fraction F] [--seed S]

Stage 1 (op level, ``data/ops.jsonl`` and the H100 rows of ``data/ops_recurrent_2026-11-26.jsonl``,
another session's recurrent layers: ``op_data.SESSIONS``): every measured op of the shape grids, recorded as a trace
records it (``op_data.py``), is predicted as ``max(device time, host time)`` -- a tiny op's CUDA
events measure the host issuing it. The host costs per op come from the ``host`` rows (tiny ops
issued in a loop, with and without autocast, forward and backward, an AdamW step over 100
parameters); then each class's device parameters (efficiencies, tile and K-fill terms,
misaligned-kernel rates, convolution families and passes, attention and recurrent terms,
bandwidth efficiencies and latencies) are fitted to that class's device-bound rows (measured at
least twice the host time), by coordinate descent on the absolute log error (the median ratio)
with a weak pull toward physical starting values. A group timed in more than one session (the
recurrent layers, whose time steps the host launches one by one) is fitted on rows levelled to
the sessions' common level (:func:`session_levels`), each session weighing the same.

Stage 1b (kernel profiles, ``profile_top`` of ``data/steps.jsonl``): the bandwidth fraction of
kernels no op row times (:data:`PROFILED`: pooling, forward and backward), from the device time
the profiled steps spent in them; and what attention dropout adds to a fused attention kernel, by
pass and math dtype (no op row has dropout), from the profiled steps of models that train with it;
the rate of PyTorch's element-by-element ``cat`` kernel (no op row has a ``cat``) and the bandwidth
fraction of sums over leading dimensions (``ops.jsonl`` sums whole tensors), from the steps whose
profiles time them.

Stage 2 (step level, ``data/steps.jsonl``): the few constants no op row can show -- the step
loop's own host time, how fast it issues ops, the device's per-kernel floor and the launch
latency -- are fitted on whole steps, by the mean absolute log error (as stage 1, and as the MAPE
the steps are scored by). :data:`STEP_PARAMS` lists them; every other coefficient stays as stage 1 left it,
so that a workload or family held out of stage 2 is genuinely unseen.

Prints the fitted coefficients as Python to paste into ``ptp_callback/coefficients.py``. The op
fit takes about a minute, the step fit a few seconds once the traces are cached (``step_data.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from op_data import Measurement  # noqa: E402

from ptp_callback.coefficients import CostCoefficients  # noqa: E402
from ptp_callback.costs import COLUMN_REDUCTION, CONV_FAMILIES, MN_MAJOR_GEMM, STRIDED_CAT  # noqa: E402
from ptp_callback.devices import get_device  # noqa: E402
from ptp_callback.kernels import kernel_seconds, math_dtype, per_element_bytes, recurrent_host_seconds  # noqa: E402
from ptp_callback.predict import host_seconds, simulate, step_host_seconds  # noqa: E402

DEVICE = get_device("h100-sxm")
Param = tuple[str, str | None, float, float]  # (coefficient table, key or None for a scalar, low, high)

_HALF = ("bf16", "fp16")
TIE = "|"  # a parameter key "a|b": one value fitted for both keys


def _tied(pattern: str) -> str:
    """One key per half-precision dtype, fitted as one value (see :data:`TIE`)."""
    return TIE.join(pattern.format(d) for d in _HALF)


# Stage 1: which parameters each group of op rows fits.
OP_PARAMS: dict[str, list[Param]] = {
    "host": [
        ("host_op_s", "forward", 2e-6, 30e-6), ("host_op_s", "backward", 2e-6, 20e-6),
        ("host_op_s", "optimizer", 2e-6, 40e-6), ("host_view_s", None, 0.2e-6, 5e-6),
        ("host_module_s", None, 1e-6, 30e-6), ("host_launch_s", None, 0.5e-6, 10e-6),
        ("host_call_s", "backward", 5e-6, 600e-6), ("host_call_s", "autocast", 2e-6, 100e-6),
        ("host_param_s", "ptp.optimizer_python", 0.5e-6, 30e-6),
    ],
    "gemm": [
        # fp16 and bf16 GEMMs share their efficiencies: their tensor cores' peaks are equal, and
        # on the 298 shapes ops.jsonl timed in both they ran at the same speed (median ratio 0.997).
        ("gemm_eff", "gemm:fp32", 0.3, 0.98), ("gemm_eff", "gemm:tf32", 0.3, 0.98),
        ("gemm_eff", _tied("gemm:{}"), 0.3, 0.98),
        ("gemm_k_fill", "gemm:fp32", 4.0, 1024.0), ("gemm_k_fill", "gemm:tf32", 4.0, 2048.0),
        ("gemm_k_fill", "gemm", 4.0, 1024.0),
        ("gemm_tile_eff", "tensor", 16.0, 65536.0), ("gemm_tile_eff", "simt", 16.0, 65536.0),
        ("gemm_eff", "misaligned:tf32", 0.05, 1.0),
        *[("gemm_eff", _tied(f"misaligned:{{}}:{a}"), 0.05, 1.0) for a in (1, 2, 4)],
        ("mem_eff", "gemm", 0.3, 1.0), ("host_class_s", "gemm", 0.0, 40e-6),
    ],
    "conv": [
        *[("conv_eff", f"conv:{fam}:{p}:{d}", 0.05, 1.5) for fam in CONV_FAMILIES
          for p in ("fwd", "dgrad", "wgrad") for d in ("tf32", "bf16", "fp16")],
        *[("extra", f"conv_layout_passes:{fam}:{p}:{d}", 0.0, 4.0) for fam in CONV_FAMILIES
          for p in ("fwd", "bwd") for d in ("tf32", "bf16", "fp16") if fam != "pointwise" or d != "tf32"],
        *[("mem_eff", f"conv:{fam}:{p}", 0.05, 1.0) for fam in CONV_FAMILIES
          for p in ("fwd", "bwd")],
        *[("latency_s", f"conv:{fam}:{p}", 0.0, 300e-6) for fam in CONV_FAMILIES
          for p in ("fwd", "bwd")],
        ("latency_s", "conv:grouped:per_group", 0.0, 50e-6),
        *[("compute_eff", f"conv_dw:{p}:{d}", 0.002, 1.0) for p in ("fwd", "bwd") for d in ("fp32", "bf16", "fp16")],
        ("mem_eff", "conv_dw:fwd", 0.02, 1.0), ("mem_eff", "conv_dw:bwd", 0.01, 1.0),
        *[(table, f"conv_dw:{p}:cudnn", lo, hi) for p in ("fwd", "bwd")
          for table, lo, hi in (("compute_eff", 0.002, 1.0), ("mem_eff", 0.01, 1.0), ("latency_s", 0.0, 30e-6))],
        ("host_class_s", "conv", 0.0, 60e-6), ("latency_s", "conv_dw:fwd", 0.0, 30e-6), ("latency_s", "conv_dw:bwd", 0.0, 30e-6),
    ],
    "attention": [
        *[("attention_eff", f"attention:{p}:{d}", 0.05, 1.5) for p in ("fwd", "bwd") for d in ("fp32", "bf16", "fp16")],
        ("extra", "attention_key_fill:fp32", 1.0, 4096.0), ("extra", "attention_key_fill", 1.0, 4096.0),
        ("extra", "attention_dim_fill:fp32", 0.0, 512.0), ("extra", "attention_dim_fill", 0.0, 512.0),
        ("latency_s", "attention:fwd", 0.0, 100e-6), ("latency_s", "attention:bwd", 0.0, 200e-6),
        ("host_class_s", "attention", 0.0, 60e-6),
    ],
    "recurrent": [
        *[("recurrent", f"step_s:{r}:{p}", 0.2e-6, 100e-6) for r in ("standard", "persistent") for p in ("fwd", "bwd")],
        ("recurrent", "step_s:standard:fwd:bf16", 0.2e-6, 100e-6), ("recurrent", "step_s:standard:bwd:bf16", 0.2e-6, 100e-6),
        ("latency_s", "recurrent:fwd", 0.0, 5e-3), ("latency_s", "recurrent:bwd", 0.0, 5e-3),
        ("host_class_s", "recurrent", 0.0, 300e-6),
    ],
    "norm": [
        ("mem_eff", "norm:fwd", 0.05, 1.0), ("mem_eff", "norm:bwd", 0.05, 1.0),
        ("latency_s", "norm:fwd", 0.0, 50e-6), ("latency_s", "norm:bwd", 0.0, 50e-6),
        ("latency_s", "norm_row:fwd", 1e-9, 1e-6), ("latency_s", "norm_row:bwd", 1e-9, 1e-6),
        ("host_class_s", "norm", 0.0, 100e-6),
        *[("mem_eff", f"{c}:{p}", 0.01, 1.0) for c in ("batch_norm", "batch_norm_native") for p in ("fwd", "bwd")],
        *[("latency_s", f"{c}:{p}", 0.0, 80e-6) for c in ("batch_norm", "batch_norm_native") for p in ("fwd", "bwd")],
        *[("extra", f"{c}_channels_half:{p}", 0.0, 2000.0) for c in ("batch_norm", "batch_norm_native") for p in ("fwd", "bwd")],
        *[("extra", f"{c}_run_half:{p}", 1.0, 4096.0) for c in ("batch_norm", "batch_norm_native") for p in ("fwd", "bwd")],
    ],
    "memory": [
        ("mem_eff", "elementwise", 0.3, 1.0), ("mem_eff", "cast:narrowing", 0.2, 1.0),
        ("mem_eff", "cast:widening", 0.2, 1.0), ("mem_eff", "reduction", 0.2, 1.0),
        ("latency_s", "reduction", 0.0, 30e-6), ("mem_eff", "embedding:fwd", 0.02, 1.0),
        ("mem_eff", "embedding:bwd", 0.02, 1.0),
    ],
}
# Stage 2: the constants only whole steps show -- the step loop's own host time, how fast the
# training loop issues ops relative to the op benchmark's loop, the device's floor per kernel
# and the launch latency -- and where each refit starts (physical first guesses).
STEP_PARAMS: list[Param] = [
    ("host_step_s", None, 5e-6, 2e-3), ("extra", "host_scale", 0.5, 2.0), ("kernel_floor_s", None, 0.5e-6, 10e-6),
    ("launch_latency_s", None, 0.5e-6, 20e-6),
]
STEP_START: dict[tuple[str, str | None], float] = {
    ("host_step_s", None): 100e-6, ("extra", "host_scale"): 1.0, ("kernel_floor_s", None): 2.5e-6,
    ("launch_latency_s", None): 4e-6,
}
PRIOR_WEIGHT = 0.002  # pulls a parameter the data cannot pin back toward its starting value

# Where every fit starts, and what the prior pulls toward: physical first guesses (datasheet-like
# efficiencies, host costs of the order of the 10.85 us per small op of micro.json, latencies of
# a few microseconds, cuDNN RNN setup of a millisecond). Never the fitted values: a refit without
# some data must not start from coefficients that saw it.
INITIAL = CostCoefficients(
    gemm_eff={"gemm": 0.78, "gemm:fp8": 0.70, "misaligned": 0.25},
    gemm_k_fill={"gemm": 96.0},
    gemm_tile_eff={"tensor": 4096.0, "simt": 2048.0},
    conv_eff={"conv": 0.8},
    attention_eff={"attention": 0.5},
    # No efficiency of their own for the optimizer's and the grad scaler's multi-tensor kernels: they
    # are elementwise kernels over 64K-element chunks and take the elementwise one (no op row times
    # them; the AdamW kernels in steps.jsonl's kernel profiles agree with it within 3% in fp32).
    mem_eff={"elementwise": 0.85, "cast": 0.85, "reduction": 0.8, "norm": 0.6, "batch_norm": 0.4,
             "batch_norm_native": 0.3, "pool": 0.5, "embedding": 0.3,
             "conv_dw": 0.3, "conv": 0.6, "gemm": 0.8, "attention": 0.8, "recurrent": 0.8,
             # A convolution's bias passes on cuDNN's path, per fp32 byte (benchmarks/conv_bias_rate.py,
             # H100 80GB HBM3, 2026-11-24: the add 0.288e12 elements/s, the gradient's sum 0.400e12,
             # medians over fp32, bf16 and fp16); measured, not fitted.
             "conv_bias:fwd": 0.687, "conv_bias:bwd": 0.477},
    kernel_floor_s=2.5e-6,
    host_op_s={"forward": 10e-6, "backward": 10e-6, "optimizer": 10e-6},
    host_view_s=1.5e-6,
    host_module_s=8e-6,
    host_param_s={"ptp.optimizer_python": 6e-6, "ptp.zero_grad": 1.5e-6},
    host_launch_s=4e-6,
    launch_latency_s=4e-6,
    sync_s=15e-6,
    host_step_s=100e-6,
    # cuDNN's fp32 depthwise weight gradient (a channels-last depthwise convolution's), from an
    # H200 kernel profile of ConvNeXt-T (benchmarks/depthwise_cudnn.py, 2026-11-27: 0.38 TFLOP/s,
    # median of 4 shapes); measured, not fitted: no op row runs it.
    compute_eff={"conv_dw": 0.03, "conv_dw:wgrad:cudnn:fp32": 0.0057},
    latency_s={"recurrent": 500e-6, "conv": 2e-6, "attention": 2e-6, "norm": 2e-6, "norm_row": 5e-8,
               "batch_norm": 2e-6, "batch_norm_native": 2e-6, "reduction": 2e-6, "conv_dw": 2e-6},
    recurrent={"persistent_max_hidden": 128, "step_s:standard": 20e-6, "step_s:persistent": 3e-6, "l2_fraction": 0.5},
    host_call_s={"backward": 100e-6, "autocast": 20e-6},
    # A layer or RMS norm call's Python and dispatch: the op rows of small norms take the same
    # ~20 us from 1 MB to 50 MB, the loop's time, not the kernel's (a start near it keeps those
    # rows out of the device fit).
    host_class_s={"gemm": 5e-6, "conv": 10e-6, "attention": 10e-6, "recurrent": 30e-6, "norm": 10e-6},
    source="initial physical guesses (not fitted)",
    extra={"attention_key_fill": 256.0, "attention_dim_fill": 32.0, "attention_dropout_cost": 0.4,
           "conv_layout_passes": 1.0, "reference_small_op_s": 10.85e-6, "batch_norm_channels_half": 32.0,
           "batch_norm_native_channels_half": 32.0, "batch_norm_run_half": 32.0, "batch_norm_native_run_half": 32.0,
           "host_scale": 1.0,
           # The GPU every efficiency is a fraction of (kernels.stream_rate scales them to others).
           "reference_bw_gbs": DEVICE.memory_bw_gbs, "reference_sm_count": float(DEVICE.sm_count)},
)


def get_param(coef: CostCoefficients, table: str, key: str | None) -> float:
    value = getattr(coef, table)
    if key is None:
        return value
    key = key.split(TIE)[0]
    return value.get(key, _default_of(table, key))


def _default_of(table: str, key: str) -> float:
    """Starting value for a key the starting coefficients do not hold: its general key's value."""
    parts = key.split(":")
    source = getattr(INITIAL, table)
    for end in range(len(parts) - 1, 0, -1):
        general = ":".join(parts[:end])
        if general in source:
            return source[general]
    return {"latency_s": 1e-6, "extra": 1.0}.get(table, 0.5)


def with_params(coef: CostCoefficients, params: list[Param], values: Iterable[float]) -> CostCoefficients:
    changes: dict[str, Any] = {}
    for (table, key, _lo, _hi), value in zip(params, values):
        if key is None:
            changes[table] = value
        else:
            current = changes.get(table)
            if current is None:
                current = dict(getattr(coef, table))
                changes[table] = current
            for one in key.split(TIE):
                current[one] = value
    return replace(coef, **changes)


def coordinate_descent(loss: Callable[[CostCoefficients], float], start: CostCoefficients, params: list[Param],
                       rounds: int, prior: CostCoefficients | None = None) -> CostCoefficients:
    """Minimize ``loss`` in log space, one parameter at a time, with shrinking multiplicative steps."""
    prior = prior or start
    values = [min(hi, max(lo, get_param(start, t, k))) for t, k, lo, hi in params]
    anchors = [max(lo, get_param(prior, t, k)) for t, k, lo, _hi in params]

    def total(vals: list[float]) -> float:
        penalty = sum(math.log(max(v, 1e-12) / max(a, 1e-12)) ** 2 for v, a in zip(vals, anchors))
        return loss(with_params(start, params, vals)) + PRIOR_WEIGHT * penalty

    best = total(values)
    steps = [0.5] * len(values)
    for _ in range(rounds):
        improved = 0
        for i, (_t, _k, lo, hi) in enumerate(params):
            for direction in (1.0, -1.0):
                trial = list(values)
                base = values[i] if values[i] > 0 else max(lo, 1e-9)
                trial[i] = min(hi, max(lo, base * math.exp(direction * steps[i])))
                if trial[i] == values[i]:
                    continue
                score = total(trial)
                if score < best - 1e-12:
                    best, values = score, trial
                    improved += 1
                    steps[i] = min(1.5, steps[i] * 1.5)
                    break
            else:
                steps[i] *= 0.5
        if improved == 0 and max(steps) < 0.005:
            break
    return with_params(start, params, values)


# ------------------------------------------------------------------------------------ op level

def _host_of(m: Measurement, coef: CostCoefficients, *, paced: bool = True) -> float:
    """Host seconds the op benchmark's loop spent per call of this measurement (``paced``: with
    what a cuDNN RNN call spends launching its time steps)."""
    seconds = sum(host_seconds(op, coef) + (recurrent_host_seconds(op, DEVICE, coef) if paced else 0.0)
                  for op in m.ops)
    if any(op.phase == "backward" for op in m.ops) and m.part != "bwd":
        seconds += coef.host_call_s.get("backward", 0.0)  # loss.backward() / autograd.grad()
    if m.dtype.endswith("autocast") or "autocast" in dict(m.shape).get("what", ""):
        seconds += coef.host_call_s.get("autocast", 0.0)
    if dict(m.shape).get("what", "").endswith("foreach_False"):
        seconds += 100 * coef.host_param_s.get("ptp.optimizer_python", 0.0)
    elif dict(m.shape).get("what", "").endswith("foreach_True"):
        seconds += 100 * coef.host_param_s.get("ptp.optimizer_python", 0.0) * 0.25  # lists gathered once
    return seconds


def predict_measurement(m: Measurement, coef: CostCoefficients) -> float:
    """Predicted microseconds of one measurement: host time for host rows, else max(device, host)."""
    host = _host_of(m, coef)
    if m.group == "host":
        return host * 1e6
    device = sum(kernel_seconds(op, DEVICE, coef) for op in m.ops)
    return max(device, host) * 1e6


def device_bound(m: Measurement, coef: CostCoefficients) -> bool:
    """Whether the measured time is at least twice what the host needed to issue the op: only
    then does it say much about the device (a tiny op's time is the benchmark loop's host time).
    A cuDNN RNN's launches of its time steps are the op's own work, fitted with its device terms."""
    return m.group != "host" and m.us >= 2.0 * _host_of(m, coef, paced=False) * 1e6


def op_loss(measurements: list[Measurement]) -> Callable[[CostCoefficients], float]:
    """Mean absolute log error, each benchmark session weighing the same (``op_data.SESSIONS``):
    a session's rows share one host, so many rows of one session are one draw of it, not many."""
    per_session = Counter(m.session for m in measurements)
    weights = [1.0 / (len(per_session) * per_session[m.session]) for m in measurements]

    def loss(coef: CostCoefficients) -> float:
        total = 0.0
        for m, weight in zip(measurements, weights):
            error = math.log(predict_measurement(m, coef) / m.us)
            # Absolute, not squared: the fit aims at the median ratio, and the few shapes where
            # cuDNN picks a kernel 5-10x slower than its usual one do not drag the rest.
            total += weight * abs(error)
        return total
    return loss


#: Fits of a group timed in several sessions: each one levels the sessions by the last one's residuals.
SESSION_ROUNDS = 3


def multi_session_groups(measurements: list[Measurement]) -> set[str]:
    """The groups whose rows come from more than one benchmark session."""
    sessions: dict[str, set[str]] = defaultdict(set)
    for m in measurements:
        sessions[m.group].add(m.session)
    return {group for group, seen in sessions.items() if len(seen) > 1}


def session_levels(measurements: list[Measurement], coef: CostCoefficients) -> dict[str, float]:
    """Per benchmark session, the factor that brings its times to the sessions' common level: its
    median log ratio of predicted to measured, less the mean of those medians over the sessions.
    The same shapes ran 1.7x apart on two days' hosts (a cuDNN RNN's time steps are launched one
    by one); levelled, the fit aims at the geometric mean of the hosts, not at whichever session's
    rows scatter least."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for m in measurements:
        ratios[m.session].append(math.log(predict_measurement(m, coef) / m.us))
    medians = {session: statistics.median(values) for session, values in ratios.items()}
    mean = sum(medians.values()) / len(medians)
    return {session: math.exp(median - mean) for session, median in medians.items()}


def split_keys(measurements: list[Measurement], train_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """A seeded split of the measured shapes (rows, all their dtypes and parts together), stratified
    by group: a held-out shape was never seen in any dtype. ``host`` rows are not split (8 programs)."""
    by_group: dict[str, list[str]] = defaultdict(list)
    for m in measurements:
        shape_key = f"{m.op}|{m.shape}"
        if shape_key not in by_group[m.group]:
            by_group[m.group].append(shape_key)
    rng = random.Random(seed)
    train, test = set(), set()
    for group, keys in sorted(by_group.items()):
        keys = sorted(keys)
        rng.shuffle(keys)
        cut = len(keys) if group == "host" else int(round(train_fraction * len(keys)))
        train.update(keys[:cut])
        test.update(keys[cut:])
    return train, test


def shape_key(m: Measurement) -> str:
    return f"{m.op}|{m.shape}"


def fit_ops(measurements: list[Measurement], start: CostCoefficients = INITIAL, rounds: int = 30,
            verbose: bool = True) -> CostCoefficients:
    """Stage 1: host costs on the host rows, then each device class on its own rows."""
    coef = start
    by_group: dict[str, list[Measurement]] = defaultdict(list)
    for m in measurements:
        by_group[m.group].append(m)
    for group in ("host", "memory", "norm", "gemm", "conv", "attention", "recurrent"):
        every = by_group.get(group, [])
        rows = every
        device_params = [p for p in OP_PARAMS[group] if p[0] != "host_class_s" or group == "host"]
        if group != "host":
            # Device coefficients from the rows the device bounds: a tiny op's time is the
            # benchmark's host loop (see device_bound), which the host rows already fitted.
            rows = [m for m in every if device_bound(m, coef)]
        if not rows:
            continue
        started = time.perf_counter()
        library = [p for p in OP_PARAMS[group] if p not in device_params]
        levelled, levelled_every = rows, every
        for _ in range(SESSION_ROUNDS if group in multi_session_groups(every) else 1):
            coef = coordinate_descent(op_loss(levelled), coef, device_params, rounds, prior=start)
            if library:
                # The extra host time of a library call (cuBLAS, cuDNN) shows on the host-bound rows.
                coef = coordinate_descent(op_loss(levelled_every), coef, library, rounds, prior=start)
            levels = session_levels(every, coef)
            levelled = [replace(m, us=m.us * levels[m.session]) for m in rows]
            levelled_every = [replace(m, us=m.us * levels[m.session]) for m in every]
        if verbose:
            errors = [abs(predict_measurement(m, coef) / m.us - 1.0) for m in rows]
            errors.sort()
            print(f"  {group:10s} {len(rows):5d} measurements, median error {100 * errors[len(errors) // 2]:.1f}% "
                  f"({time.perf_counter() - started:.0f}s)", flush=True)
    return coef


# ------------------------------------------------------------------ kernels no op row times

#: Kernels ``ops.jsonl`` has no rows for, timed instead by the kernel profiles of ``steps.jsonl``
#: (``profile_top``: each aten op's device milliseconds over one profiled step): the bandwidth
#: fraction (``mem_eff`` key) the aten ops' traced bytes need to take their profiled time.
PROFILED: dict[str, tuple[str, ...]] = {
    "pool:fwd": ("max_pool2d_with_indices",),
    "pool:bwd": ("max_pool2d_with_indices_backward",),
}


def _profile_ms(case: StepCase) -> dict[str, float]:
    """A profiled step's device milliseconds by aten op or kernel name (``profile_top``)."""
    return {name: ms for name, _calls, ms in case.profile}


_BANDWIDTH = DEVICE.memory_bw_gbs * 1e9


def _bandwidth_fraction(nbytes: float, seconds: float) -> float:
    """The share of the device's bandwidth that moves ``nbytes`` in ``seconds``."""
    return nbytes / (_BANDWIDTH * seconds)


def _with_median_efficiency(coef: CostCoefficients, key: str, fractions: list[float]) -> CostCoefficients:
    """``coef`` with ``mem_eff[key]`` the median of ``fractions`` (unchanged where there are none)."""
    if not fractions:
        return coef
    value = statistics.median(fractions)
    print(f"  mem_eff[{key!r}] = {value:.4g} (median of {len(fractions)} profiled steps)")
    return replace(coef, mem_eff={**coef.mem_eff, key: value})


def fit_profiled(coef: CostCoefficients, cases: list[StepCase]) -> CostCoefficients:
    """Stage 1b: each :data:`PROFILED` efficiency, the median over every profiled step that runs
    those ops (a per-kernel measurement like an op row's, taken inside a training step)."""
    profiles = [_profile_ms(case) for case in cases]
    for key, names in PROFILED.items():
        fractions = []
        for case, profile in zip(cases, profiles):
            for name in names:
                ms = profile.get(f"aten::{name}")
                nbytes = sum(op.cost.bytes for op in case.trace.ops if op.name == f"aten.{name}.default")
                if ms and nbytes:
                    fractions.append(_bandwidth_fraction(nbytes, ms * 1e-3))
        coef = _with_median_efficiency(coef, key, fractions)
    return coef


#: The kernel PyTorch's CUDA ``cat`` runs for inputs that are not contiguous (its strided
#: instantiation, batch and stride sizes 64: ``costs.STRIDED_CAT``), as a profile names it.
STRIDED_CAT_KERNEL = re.compile(r"CatArrayBatchedCopy<.*, 64, 64>")


def fit_strided_cat(coef: CostCoefficients, cases: list[StepCase]) -> CostCoefficients:
    """Stage 1b: ``mem_eff["elementwise:strided_cat"]``, the rate of the element-by-element ``cat``
    kernel (no op row times it): per profiled step whose strided cat kernel ran as often as the
    trace has such cats, the fp32 bytes of their elements over the kernel's profiled time; the
    median of those steps."""
    fractions = []
    for case in cases:
        calls = sum(c for name, c, _ms in case.profile if STRIDED_CAT_KERNEL.search(name))
        ms = sum(ms for name, _c, ms in case.profile if STRIDED_CAT_KERNEL.search(name))
        cats = [op for op in case.trace.ops if op.cost.kernel == STRIDED_CAT]
        if cats and calls == len(cats):
            fractions.append(_bandwidth_fraction(sum(per_element_bytes(op.cost) for op in cats), ms * 1e-3))
    return _with_median_efficiency(coef, f"elementwise:{STRIDED_CAT}", fractions)


def fit_column_sums(coef: CostCoefficients, cases: list[StepCase]) -> CostCoefficients:
    """Stage 1b: ``mem_eff["reduction:columns"]``, the bandwidth fraction of a sum over leading
    dimensions (``costs.COLUMN_REDUCTION``; ``ops.jsonl``'s sums are whole-tensor sums): per
    profiled step, the bytes of its column sums over what its ``aten::sum`` time leaves once its
    other sums are priced; the median over the steps that profiled as many sums as their trace has
    (a convolution's bias gradient, priced with the convolution, profiles as a sum of its own)."""
    fractions = []
    for case in cases:
        calls, ms = next(((c, ms) for name, c, ms in case.profile if name == "aten::sum"), (0, 0.0))
        sums = [op for op in case.trace.ops if op.name.startswith("aten.sum.")]
        columns = [op for op in sums if op.cost.kernel == COLUMN_REDUCTION]
        if not ms or not columns or calls != len(sums):
            continue
        rest = sum(kernel_seconds(op, DEVICE, coef) for op in sums if op.cost.kernel != COLUMN_REDUCTION)
        fixed = sum(kernel_seconds(replace(op, cost=replace(op.cost, bytes=0.0)), DEVICE, coef) for op in columns)
        left = ms * 1e-3 - rest - fixed
        if left > 0:
            fractions.append(_bandwidth_fraction(sum(op.cost.bytes for op in columns), left))
    return _with_median_efficiency(coef, f"reduction:{COLUMN_REDUCTION}", fractions)


def fit_tf32_mn_major(coef: CostCoefficients, cases: list[StepCase]) -> CostCoefficients:
    """Stage 1b: ``gemm_eff["mn_major:tf32"]``, the rate of a Hopper TF32 GEMM neither of whose
    operands runs along K (``costs.MN_MAJOR_GEMM``: a linear layer's weight gradient), relative to
    the rate ``ops.jsonl``'s TF32 rows give (all of them row-major): per profiled TF32 step whose
    ``aten::mm`` calls match its trace's, what its ``mm`` time leaves once its other GEMMs are
    priced, against the prediction for its weight gradients; the median over those steps."""
    implied = []
    for case in cases:
        calls, ms = next(((c, ms) for name, c, ms in case.profile if name == "aten::mm"), (0, 0.0))
        mms = [op for op in case.trace.ops if op.name == "aten.mm.default" and op.cost.dtype == "tf32"]
        if ms < 1.0 or calls != len(mms):
            continue
        transposed = sum(kernel_seconds(op, DEVICE, coef) for op in mms if op.cost.kernel == MN_MAJOR_GEMM)
        rest = sum(kernel_seconds(op, DEVICE, coef) for op in mms if op.cost.kernel != MN_MAJOR_GEMM)
        if transposed and ms * 1e-3 > rest:
            implied.append(transposed / (ms * 1e-3 - rest))
    if not implied:
        return coef
    value = round(statistics.median(implied), 4)
    print(f"  gemm_eff['mn_major:tf32'] = {value:.4g} (median of {len(implied)} profiled steps)")
    return replace(coef, gemm_eff={**coef.gemm_eff, "mn_major:tf32": value})


#: The fused attention kernels a CUDA ``scaled_dot_product_attention`` runs (aten op names less their
#: ``_forward``/``_backward``): ``ops.jsonl``'s attention rows have no dropout, so its cost comes
#: from the profiled steps of models that train with attention dropout.
ATTENTION_KERNELS = ("_efficient_attention", "_flash_attention", "_cudnn_attention")


def fit_attention_dropout(coef: CostCoefficients, cases: list[StepCase]) -> CostCoefficients:
    """Stage 1b: ``extra["attention_dropout_cost:<fwd|bwd>:<family>"]``, what a fused attention
    kernel with dropout takes beyond the same kernel without (a fraction of its compute time): the
    median over the profiled steps whose attention drops out, of their attention kernels' profiled
    time over the prediction without dropout."""
    kept = {k: v for k, v in coef.extra.items() if not k.startswith("attention_dropout_cost:")}
    no_dropout = replace(coef, extra={**kept, "attention_dropout_cost": 0.0})
    implied: dict[tuple[str, str], list[float]] = defaultdict(list)
    for case in cases:
        profile = _profile_ms(case)
        ops = [op for op in case.trace.ops if op.cost.op_class == "attention" and op.cost.dropout]
        for direction, suffix in (("fwd", "_forward"), ("bwd", "_backward")):
            chosen = [op for op in ops if op.cost.backward == (direction == "bwd")]
            measured = sum(profile.get(f"aten::{kernel}{suffix}", 0.0) for kernel in ATTENTION_KERNELS) * 1e-3
            predicted = sum(kernel_seconds(op, DEVICE, no_dropout) for op in chosen)
            if chosen and measured and predicted:
                implied[(direction, math_dtype(DEVICE, chosen[0].cost.dtype))].append(measured / predicted - 1.0)
    extra = dict(kept)
    for (direction, family), values in sorted(implied.items()):
        key = f"attention_dropout_cost:{direction}:{family}"
        extra[key] = round(max(0.0, statistics.median(values)), 4)
        print(f"  extra[{key!r}] = {extra[key]:.4g} (median of {len(values)} profiled steps)")
    return replace(coef, extra=extra)


# ---------------------------------------------------------------------------------- step level

@dataclass(frozen=True)
class StepCase:
    workload: str
    precision: str
    measured_s: float
    trace: Any
    profile: tuple[tuple[str, int, float], ...] = ()  # ``profile_top``: (aten op or kernel, calls, ms)


# Per-kernel floors at which the fast walk checks that an op's time is linear in the floor: the
# fit moves the floor between its bounds.
_PROBED_FLOORS = (1e-6, 5e-6, 20e-6)


class StepTimeline:
    """One measured step's per-op host and kernel times under fixed stage-1 coefficients, so that
    the stage-2 constants can be refitted in milliseconds: the same two-timeline walk as
    ``predict.simulate`` (checked by :meth:`check`), with only those constants free."""

    def __init__(self, case: StepCase, coef: CostCoefficients) -> None:
        self.case = case
        no_floor = replace(coef, kernel_floor_s=0.0)
        ops = case.trace.ops
        self.host = [host_seconds(op, coef) for op in ops]
        self.paced = [recurrent_host_seconds(op, DEVICE, coef) for op in ops]
        self.body = [kernel_seconds(op, DEVICE, no_floor) for op in ops]
        self.kernels = [op.cost.kernels for op in ops]
        self.sync = [op.name == "ptp.sync" for op in ops]
        self.calls = (step_host_seconds(case.trace, coef) - coef.host_step_s) / coef.extra.get("host_scale", 1.0)
        # Ops whose time is not body + floor x kernels for every floor (a persistent cuDNN RNN's
        # time steps each take the longer of a fixed step time and a GEMM plus the floor) are
        # priced in full at each call.
        exact = [i for i, op in enumerate(ops) if op.cost.kernels and any(
            abs(kernel_seconds(op, DEVICE, replace(coef, kernel_floor_s=floor)) - self.body[i] - floor * op.cost.kernels)
            > 1e-12 for floor in _PROBED_FLOORS)]
        self.exact = [ops[i] for i in exact]  # in step order; their body is None
        for i in exact:
            self.body[i] = None

    def step_s(self, coef: CostCoefficients) -> float:
        scale = coef.extra.get("host_scale", 1.0)
        latency, floor = coef.launch_latency_s, coef.kernel_floor_s
        host = end = coef.host_step_s + self.calls * scale
        dev = 0.0
        exact = iter([kernel_seconds(op, DEVICE, coef) for op in self.exact])
        for h, paced, body, n, sync in zip(self.host, self.paced, self.body, self.kernels, self.sync):
            host += h * scale
            if sync and dev > host:
                host = dev
            if n:
                start = host + latency
                dev = (dev if dev > start else start) + (body + floor * n if body is not None else next(exact))
                if paced:
                    dev = max(dev, start + paced)
            host += paced
        return max(host, dev, end)

    def check(self, coef: CostCoefficients) -> None:
        expected = simulate(self.case.trace, DEVICE, coef).step_s
        if abs(self.step_s(coef) / expected - 1.0) > 1e-9:
            raise AssertionError(f"fast timeline {self.step_s(coef)} != simulate {expected} ({self.case.workload})")


def step_loss(timelines: list[StepTimeline]) -> Callable[[CostCoefficients], float]:
    """Mean absolute log error, as stage 1's: the per-step constants are shared by every model, and
    one workload the op model misses (VGG-16's convolutions, 12-20% over) must not pull them for
    all the others the way a squared error lets it."""
    def loss(coef: CostCoefficients) -> float:
        return sum(abs(math.log(t.step_s(coef) / t.case.measured_s)) for t in timelines) / len(timelines)
    return loss


def fit_steps(timelines: list[StepTimeline], coef: CostCoefficients, rounds: int = 40) -> CostCoefficients:
    """Stage 2: the per-step constants of :data:`STEP_PARAMS` on whole steps, from their starting
    values in ``STEP_START``; nothing else moves."""
    start = with_params(coef, STEP_PARAMS, [STEP_START[(t, k)] for t, k, _lo, _hi in STEP_PARAMS])
    return coordinate_descent(step_loss(timelines), start, STEP_PARAMS, rounds)


def render_python(coef: CostCoefficients, width: int = 116) -> str:
    """The coefficients as the Python literal of ``ptp_callback/coefficients.py``."""
    def fmt(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return repr(value)

    lines = ["HOPPER = CostCoefficients("]
    fields = ("gemm_eff", "gemm_k_fill", "gemm_tile_eff", "conv_eff", "attention_eff", "mem_eff", "kernel_floor_s",
              "host_op_s", "host_view_s", "host_module_s", "host_param_s", "host_launch_s", "launch_latency_s",
              "sync_s", "host_step_s", "compute_eff", "latency_s", "recurrent", "host_call_s", "host_class_s", "source",
              "extra")
    for name in fields:
        value = getattr(coef, name)
        if not isinstance(value, dict):
            lines.append(f"    {name}={fmt(value)},")
            continue
        head = f"    {name}={{"
        current = head
        items = [f"{k!r}: {fmt(v)}" for k, v in value.items()]
        for i, item in enumerate(items):
            piece = item + ("," if i < len(items) - 1 else "},")
            if len(current) + len(piece) + 1 > width and current.strip() != head.strip():
                lines.append(current.rstrip())
                current = " " * len(head) + piece + " "
            else:
                current += piece + " "
        if not items:
            current += "},"
        lines.append(current.rstrip())
    lines.append(")")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps-only", action="store_true",
                        help="keep the shipped per-op coefficients, refit stage 2 only")
    args = parser.parse_args()
    import op_data
    import step_data

    if args.steps_only:
        from ptp_callback.coefficients import HOPPER
        coef = HOPPER
    else:
        started = time.perf_counter()
        measurements = op_data.load()
        print(f"{len(measurements)} op measurements ({time.perf_counter() - started:.0f}s); stage 1, op level:")
        coef = fit_ops(measurements, INITIAL, args.rounds)
    cases = step_data.load_cases()
    if not args.steps_only:
        print("stage 1b, kernels no op row times, from the kernel profiles of steps.jsonl:")
        for fit in (fit_profiled, fit_attention_dropout, fit_strided_cat, fit_column_sums, fit_tf32_mn_major):
            coef = fit(coef, cases)
    print(f"stage 2, step level, on {len(cases)} measured steps")
    timelines = [StepTimeline(c, coef) for c in cases]
    started = time.perf_counter()
    coef = fit_steps(timelines, coef, args.rounds)
    print(f"  ({time.perf_counter() - started:.0f}s)")
    for timeline in timelines:
        timeline.check(coef)
    for table, key, _lo, _hi in STEP_PARAMS:
        print(f"  {table}{'' if key is None else f'[{key!r}]'} = {get_param(coef, table, key):.4g}")
    coef = replace(coef, source=f"fitted by benchmarks/fit_coefficients.py on {time.strftime('%Y-%m-%d')}: "
                                "ops.jsonl and ops_recurrent_2026-11-26.jsonl (op level) and steps.jsonl (per-step host constants), "
                                "H100 SXM")
    print(render_python(coef))


if __name__ == "__main__":
    main()
