"""Fit the per-op-class, per-dtype coefficients of one device to measured step times and profiles.

usage: python benchmarks/fit_coefficients.py [--rounds N] [--cv] [--only a,b]

Data (all from ../shared/h100): every workload x precision step time of ``steps.jsonl``, the
device time per op class from each configuration's one-step profile (``profile_top``: aten rows
grouped into our op classes), and the large square GEMMs of ``micro.json``. The model's
parameters are efficiencies per op class and dtype, the GEMM tile/K-fill shape terms and the host
costs per op -- nothing keyed by a workload -- so the fit is a regression of physical
constants, and ``--cv`` reports how well they carry to a workload left out of the fit
(leave-one-workload-out). Prints the fitted coefficients as Python to paste into
``ptp_callback/coefficients.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h100_data import PRECISIONS, build_on_meta, load_measured, load_micro, quiet_transformers  # noqa: E402

from ptp_callback.coefficients import HOPPER, CostCoefficients  # noqa: E402, F401
from ptp_callback.costs import OpCost  # noqa: E402
from ptp_callback.devices import get_device  # noqa: E402
from ptp_callback.predict import kernel_seconds, simulate  # noqa: E402
from ptp_callback.tracer import OpRecord, trace_step  # noqa: E402

# (coefficient table, key, lower bound, upper bound). Scalars use key None.
PARAMS: list[tuple[str, str | None, float, float]] = [
    ("gemm_eff", "gemm:fp32", 0.4, 0.95), ("gemm_eff", "gemm:tf32", 0.3, 0.95),
    ("gemm_eff", "gemm:bf16", 0.3, 0.95), ("gemm_eff", "gemm:fp16", 0.3, 0.95),
    ("gemm_eff", "misaligned", 0.03, 0.6), ("gemm_eff", "misaligned:tf32", 0.05, 0.8),
    ("gemm_k_fill", "gemm:fp32", 8.0, 2048.0), ("gemm_k_fill", "gemm:tf32", 8.0, 4096.0),
    ("gemm_k_fill", "gemm", 8.0, 2048.0),
    ("gemm_tile_eff", "medium", 0.5, 1.0), ("gemm_tile_eff", "small", 0.2, 1.0),
    ("conv_eff", "conv:tf32", 0.1, 1.2), ("conv_eff", "conv:bf16", 0.1, 1.2),
    ("conv_eff", "conv:fp16", 0.1, 1.2), ("conv_eff", "conv", 0.1, 1.2),
    ("extra", "conv_layout_passes", 0.0, 3.0),
    ("attention_eff", "attention:fp32:fwd", 0.05, 0.95), ("attention_eff", "attention:fp32:bwd", 0.05, 0.95),
    ("attention_eff", "attention:fwd", 0.05, 0.95), ("attention_eff", "attention:bwd", 0.05, 0.95),
    ("extra", "attention_key_fill", 32.0, 2048.0), ("extra", "attention_dropout_cost", 0.0, 2.0),
    ("mem_eff", "elementwise", 0.3, 0.9), ("mem_eff", "cast", 0.3, 0.9), ("mem_eff", "reduction", 0.2, 0.9),
    ("mem_eff", "norm", 0.1, 0.9), ("mem_eff", "batch_norm", 0.05, 0.9),
    ("mem_eff", "batch_norm_native", 0.01, 0.9),
    ("mem_eff", "pool", 0.05, 0.9), ("mem_eff", "pool:bwd", 0.02, 0.9),
    ("mem_eff", "embedding", 0.02, 0.9), ("mem_eff", "optimizer", 0.2, 0.9),
    ("mem_eff", "conv_dw", 0.02, 0.9), ("mem_eff", "conv_dw:bwd", 0.005, 0.9),
    ("kernel_floor_s", None, 1.5e-6, 8e-6),
    ("host_op_s", "forward", 8e-6, 8e-5), ("host_op_s", "backward", 4e-6, 5e-5),
    ("host_op_s", "optimizer", 8e-6, 1.5e-4), ("host_module_s", None, 2e-6, 4e-5),
    ("host_param_s", "ptp.optimizer_python", 5e-7, 3e-5), ("host_step_s", None, 2e-5, 5e-4),
]
# Where every fit starts, and what the prior pulls toward: physical first guesses (datasheet-like
# efficiencies, host costs of the order of the measured 10.85 us per small op of micro.json).
INITIAL = CostCoefficients(
    gemm_eff={"gemm:fp32": 0.80, "gemm:tf32": 0.80, "gemm:bf16": 0.80, "gemm:fp16": 0.78, "gemm:fp8": 0.70,
              "gemm:fp64": 0.80, "misaligned:tf32": 0.26, "misaligned": 0.15},
    gemm_k_fill={"gemm:fp32": 64.0, "gemm:tf32": 384.0, "gemm": 96.0},
    gemm_tile_eff={"large": 1.0, "medium": 0.85, "small": 0.6, "tiny": 0.35},
    conv_eff={"conv:tf32": 0.6, "conv:bf16": 0.6, "conv:fp16": 0.6, "conv": 0.8},
    attention_eff={"attention:fp32:fwd": 0.45, "attention:fp32:bwd": 0.35, "attention:fwd": 0.5,
                   "attention:bwd": 0.4},
    mem_eff={"elementwise": 0.80, "cast": 0.80, "reduction": 0.70, "norm": 0.60, "batch_norm": 0.25,
             "batch_norm_native": 0.08, "pool": 0.50, "pool:bwd": 0.3, "embedding": 0.30, "optimizer": 0.80,
             "scaler": 0.70, "conv_dw": 0.30, "conv_dw:bwd": 0.06, "conv": 0.6, "gemm": 0.8, "attention": 0.8},
    kernel_floor_s=3e-6,
    host_op_s={"forward": 30e-6, "backward": 15e-6, "optimizer": 30e-6},
    host_view_s=2e-6,
    host_module_s=8e-6,
    host_param_s={"ptp.optimizer_python": 6e-6, "ptp.zero_grad": 1.5e-6},
    host_launch_s=5e-6,
    launch_latency_s=5e-6,
    sync_s=15e-6,
    host_step_s=80e-6,
    source="initial physical guesses (not yet fitted)",
    extra={"attention_key_fill": 256.0, "attention_dropout_cost": 0.6, "conv_layout_passes": 1.0},
)


PRIOR_WEIGHT = 0.002  # pulls parameters the data cannot pin back toward their physical starting guess

# Profile rows (aten op names) -> the group of our op classes they are compared with.
_PROFILE_GROUPS = [
    ("gemm", r"^(mm|addmm|bmm|baddbmm)$"),
    ("conv", r"^(cudnn_convolution|convolution_backward|_conv_depthwise2d|convolution|_convolution)$"),
    ("attention", r"attention"),
    ("norm", r"layer_norm|group_norm|rms_norm"),
    ("batch_norm", r"batch_norm"),
    ("pool", r"pool"),
    ("memory", r".*"),
]
_CLASS_GROUP = {"gemm": "gemm", "conv": "conv", "conv_dw": "conv", "attention": "attention", "norm": "norm",
                "batch_norm": "batch_norm", "batch_norm_native": "batch_norm", "pool": "pool",
                "optimizer": "optimizer"}


_SPLIT_BY_DIRECTION = ("attention", "conv", "batch_norm", "norm", "pool")


def group_of(group: str, backward: bool) -> str:
    """Groups whose backward kernels differ from their forward ones are compared per direction."""
    if group in _SPLIT_BY_DIRECTION:
        return f"{group}:{'bwd' if backward else 'fwd'}"
    return group


def profile_groups(profile: tuple[tuple[str, int, float], ...]) -> dict[str, float]:
    """Device seconds per group from a config's aten-level profile rows."""
    groups: dict[str, float] = defaultdict(float)
    for name, _calls, ms in profile:
        if name.startswith("Optimizer.step"):
            groups["optimizer"] += ms / 1e3
            continue
        if not name.startswith("aten::") or name.startswith("aten::_foreach"):
            continue
        op = name[6:]
        for group, pattern in _PROFILE_GROUPS:
            if re.search(pattern, op):
                groups[group_of(group, "backward" in op)] += ms / 1e3
                break
    return groups


def get_param(coef: CostCoefficients, table: str, key: str | None) -> float:
    value = getattr(coef, table)
    return value if key is None else value[key]


def with_params(coef: CostCoefficients, values: list[float]) -> CostCoefficients:
    changes: dict[str, object] = {}
    for (table, key, _lo, _hi), value in zip(PARAMS, values):
        if key is None:
            changes[table] = value
        else:
            current = changes.get(table) or dict(getattr(coef, table))
            current[key] = value  # type: ignore[index]
            changes[table] = current
    return replace(coef, **changes)


class Problem:
    """Traces once, then scores coefficient sets quickly."""

    def __init__(self, names: list[str]) -> None:
        self.device = get_device("h100-sxm")
        self.measured = load_measured()
        self.configs = []
        for name in names:
            model, batch, loss_fn = build_on_meta(name)
            for precision in PRECISIONS:
                m = self.measured.get((name, precision))
                if m is None:
                    continue
                trace = trace_step(model, batch, loss_fn, None, precision)
                self.configs.append((name, precision, trace, m, profile_groups(m.profile)))
        micro = load_micro()
        self.micro = []
        for dtype, key in (("fp32", "fp32"), ("tf32", "tf32"), ("bf16", "bf16"), ("fp16", "fp16")):
            for n in (4096, 8192):
                tflops = micro.get(f"mm_{key}_{n}_tflops")
                if tflops:
                    cost = OpCost("gemm", 2.0 * n**3, 3.0 * n * n * (4 if dtype in ("fp32", "tf32") else 2), 1, dtype,
                                  (1, n, n, n))
                    self.micro.append((OpRecord("aten.mm.default", "forward", "", cost), 2.0 * n**3 / (tflops * 1e12)))

    def evaluate(self, coef: CostCoefficients, names: set[str] | None = None) -> dict[tuple[str, str], tuple[float, float, dict[str, float], dict[str, float]]]:
        out = {}
        for name, precision, trace, m, prof in self.configs:
            if names is not None and name not in names:
                continue
            pred = simulate(trace, self.device, coef)
            groups: dict[str, float] = defaultdict(float)
            for op, k in zip(trace.ops, pred.kernel_s):
                groups[group_of(_CLASS_GROUP.get(op.cost.op_class, "memory"), op.cost.backward)] += k
            out[(name, precision)] = (pred.step_s, m.step_s, groups, prof)
        return out

    def loss(self, coef: CostCoefficients, names: set[str] | None = None, class_weight: float = 1.0) -> float:
        step_terms, class_terms = [], []
        for (_n, _p), (pred, meas, groups, prof) in self.evaluate(coef, names).items():
            step_terms.append(math.log(pred / meas) ** 2)
            for group, seconds in prof.items():
                share = seconds / meas
                if share < 0.03 or group not in groups or groups[group] <= 0:
                    continue
                class_terms.append(share * math.log(groups[group] / seconds) ** 2)
        micro_terms = [math.log(kernel_seconds(op, self.device, coef) / t) ** 2 for op, t in self.micro]
        total = sum(step_terms) / len(step_terms)
        if class_terms:
            total += class_weight * sum(class_terms) / len(step_terms)
        total += 0.2 * sum(micro_terms) / max(1, len(micro_terms))
        for (table, key, _lo, _hi) in PARAMS:
            total += PRIOR_WEIGHT * math.log(get_param(coef, table, key) / get_param(INITIAL, table, key)) ** 2
        return total


def fit(problem: Problem, start: CostCoefficients, rounds: int, names: set[str] | None = None, verbose: bool = True) -> CostCoefficients:
    """Coordinate descent in log space with shrinking multiplicative steps, within bounds."""
    values = [get_param(start, t, k) for t, k, _lo, _hi in PARAMS]
    best = problem.loss(with_params(start, values), names)
    steps = [0.4] * len(values)
    for r in range(rounds):
        improved = 0
        for i, (table, key, lo, hi) in enumerate(PARAMS):
            for direction in (1.0, -1.0):
                trial = list(values)
                trial[i] = min(hi, max(lo, values[i] * math.exp(direction * steps[i])))
                if trial[i] == values[i]:
                    continue
                score = problem.loss(with_params(start, trial), names)
                if score < best - 1e-9:
                    best, values = score, trial
                    improved += 1
                    steps[i] = min(1.0, steps[i] * 1.5)
                    break
            else:
                steps[i] *= 0.6
        if verbose:
            print(f"round {r + 1}: loss {best:.5f} ({improved} moves)", flush=True)
        if improved == 0 and max(steps) < 0.01:
            break
    return with_params(start, values)


def report(problem: Problem, coef: CostCoefficients, names: set[str] | None = None) -> float:
    errors = []
    for (name, precision), (pred, meas, _g, _p) in sorted(problem.evaluate(coef, names).items()):
        err = 100.0 * (pred / meas - 1.0)
        errors.append(abs(err))
        print(f"  {name:26s} {precision:10s} measured {meas * 1e3:9.2f} ms  predicted {pred * 1e3:9.2f} ms  {err:+6.1f}%")
    mape = sum(errors) / len(errors)
    print(f"  MAPE {mape:.1f}% over {len(errors)} configurations")
    return mape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--cv", action="store_true", help="leave-one-workload-out cross-validation")
    parser.add_argument("--only", default="", help="comma-separated workloads")
    args = parser.parse_args()
    quiet_transformers()
    from h100_data import workloads

    names = [n for n in workloads() if not args.only or n in args.only.split(",")]
    started = time.perf_counter()
    problem = Problem(names)
    print(f"traced {len(problem.configs)} configurations in {time.perf_counter() - started:.1f}s")
    print("shipped coefficients (ptp_callback.coefficients.HOPPER):")
    report(problem, HOPPER)
    fitted = fit(problem, INITIAL, args.rounds)
    print("after fitting (in-sample):")
    report(problem, fitted)
    print("fitted values:")
    for table, key, _lo, _hi in PARAMS:
        print(f"  {table}[{key!r}] = {get_param(fitted, table, key):.6g}")
    if args.cv:
        print("leave-one-workload-out:")
        cv_errors = []
        for held in names:
            train = {n for n in names if n != held}
            coef = fit(problem, INITIAL, args.rounds, train, verbose=False)  # from scratch, without it
            for (name, precision), (pred, meas, _g, _p) in sorted(problem.evaluate(coef, {held}).items()):
                err = 100.0 * (pred / meas - 1.0)
                cv_errors.append(abs(err))
                print(f"  {name:26s} {precision:10s} measured {meas * 1e3:9.2f} ms  predicted {pred * 1e3:9.2f} ms  {err:+6.1f}%", flush=True)
        print(f"  leave-one-workload-out MAPE {sum(cv_errors) / len(cv_errors):.1f}% over {len(cv_errors)} configurations")


if __name__ == "__main__":
    main()
