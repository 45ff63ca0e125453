"""The H100's kernel profiles of dev workload steps beside the engine's prediction: whether a step's
miss is in its device time (an op class priced wrong) or in the time the device waits for the host.

usage: python benchmarks/step_profiles.py [FILE] [--ops WORKLOAD:PRECISION] [--top N] [--gemms]

FILE (default ``data/profiles_2026-11-26.jsonl``, made by ``profile_steps.py`` on an H100) holds,
per workload and precision, the step time measured in that run and each aten op's self device
time over one profiled step. For each one this prints the step (``data/steps.jsonl``'s, that run's,
predicted), the device time (profiled, predicted: the sum of the ops' kernel times) and the
predicted host time (the host timeline's busy time). ``--ops`` adds a table by aten op for one
configuration. ``--gemms`` scores the GEMM model on the steps' own GEMMs, shape by shape: kernel
times of real training steps that no coefficient was fitted on (``ops.jsonl``'s GEMM rows are
mostly random, misaligned shapes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h100_data import DATA, load_measured  # noqa: E402
from step_data import cached_trace  # noqa: E402

from ptp_callback.coefficients import HOPPER  # noqa: E402
from ptp_callback.devices import get_device  # noqa: E402
from ptp_callback.kernels import kernel_seconds  # noqa: E402
from ptp_callback.predict import simulate  # noqa: E402

DEFAULT = os.path.join(DATA, "profiles_2026-11-26.jsonl")
DEVICE = get_device("h100-sxm")


def _op_name(name: str) -> str:
    """``aten::mm`` (a profile's name) and ``aten.mm.default`` (a trace's) alike as ``mm``."""
    if name.startswith("aten::"):
        return name.removeprefix("aten::")
    return name.removeprefix("aten.").rsplit(".", 1)[0]


def op_table(record: dict, top: int) -> None:
    measured, measured_calls = defaultdict(float), Counter()
    for name, _shapes, calls, us in record["ops"]:
        measured[_op_name(name)] += us / 1e3
        measured_calls[_op_name(name)] += calls
    predicted, predicted_calls, op_class = defaultdict(float), Counter(), {}
    for op in cached_trace(record["workload"], record["precision"]).ops:
        name = _op_name(op.name)
        predicted[name] += kernel_seconds(op, DEVICE, HOPPER) * 1e3
        predicted_calls[name] += 1
        op_class[name] = op.cost.op_class
    names = sorted(set(measured) | set(predicted), key=lambda n: -max(measured.get(n, 0.0), predicted.get(n, 0.0)))
    print(f"\n{record['workload']} {record['precision']}: device ms by aten op (the profile names the kernel "
          "PyTorch dispatched to, e.g. cudnn_convolution for convolution)")
    print(f"{'op':42s} {'profiled':>9s} {'calls':>6s} {'predicted':>10s} {'calls':>6s}  class")
    for name in names[:top]:
        print(f"{name[:42]:42s} {measured.get(name, 0.0):9.2f} {measured_calls[name]:6d} {predicted.get(name, 0.0):10.2f} "
              f"{predicted_calls[name]:6d}  {op_class.get(name, '')}")


_GEMMS = ("mm", "bmm", "addmm", "baddbmm")


def gemm_errors(records: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Per precision, for each GEMM shape a step ran as often as its trace did (and for at least
    20 us a call): the log of predicted over profiled device time, and the profiled time."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        measured: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0])
        for name, shapes, calls, us in record["ops"]:
            if _op_name(name) in _GEMMS:
                key = (_op_name(name), str([s for s in json.loads(shapes) if s]))
                measured[key][0] += calls
                measured[key][1] += us
        predicted: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0])
        for op in cached_trace(record["workload"], record["precision"]).ops:
            if _op_name(op.name) in _GEMMS:
                key = (_op_name(op.name), str([list(s) for s in op.in_shapes if s]))
                predicted[key][0] += 1
                predicted[key][1] += kernel_seconds(op, DEVICE, HOPPER) * 1e6
        for key, (calls, us) in measured.items():
            if key in predicted and predicted[key][0] == calls and us / calls >= 20:
                out[record["precision"]].append((math.log(predicted[key][1] / us), us))
    return out


def gemm_table(records: list[dict]) -> None:
    print("\nGEMM shapes of the profiled steps (at least 20 us a call), predicted / profiled kernel time:")
    print(f"{'precision':10s} {'shapes':>6s} {'median |error|':>15s} {'median error':>13s} {'sum: predicted/profiled':>24s}")
    for precision, errors in gemm_errors(records).items():
        logs = [e for e, _us in errors]
        total = sum(us for _e, us in errors)
        predicted = sum(us * math.exp(e) for e, us in errors)
        print(f"{precision:10s} {len(errors):6d} {100 * statistics.median(abs(math.expm1(e)) for e in logs):14.1f}% "
              f"{100 * math.expm1(statistics.median(logs)):+12.1f}% {predicted / total:24.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default=DEFAULT)
    parser.add_argument("--ops", default="", help="WORKLOAD:PRECISION for a table by aten op")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--gemms", action="store_true", help="score the GEMM model on the steps' GEMM shapes")
    args = parser.parse_args()
    reference = load_measured()
    with open(args.file) as f:
        records = [json.loads(line) for line in f]
    print(f"{'workload':28s} {'precision':10s} {'step: steps.jsonl':>17s} {'run':>7s} {'predicted':>9s} "
          f"{'device: profiled':>17s} {'predicted':>9s} {'host: predicted':>16s}")
    for record in records:
        trace = cached_trace(record["workload"], record["precision"])
        # The engine's two timelines: the host's busy time includes what a cuDNN RNN spends
        # launching its time steps, which is no op's kernel time.
        predicted = simulate(trace, DEVICE, HOPPER)
        step, device, host = predicted.step_s, predicted.device_s, predicted.host_s
        ref = reference.get((record["workload"], record["precision"]))
        print(f"{record['workload']:28s} {record['precision']:10s} {ref.step_s * 1e3 if ref else float('nan'):14.1f} ms "
              f"{record['step_s_median'] * 1e3:7.1f} {step * 1e3:9.1f} {record['profile_total_ms']:14.1f} ms "
              f"{device * 1e3:9.1f} {host * 1e3:13.1f} ms")
    if args.ops:
        workload, precision = args.ops.split(":")
        op_table(next(r for r in records if r["workload"] == workload and r["precision"] == precision), args.top)
    if args.gemms:
        gemm_table(records)


if __name__ == "__main__":
    main()
