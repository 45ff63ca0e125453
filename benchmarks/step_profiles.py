"""The H100's kernel profiles of dev workload steps beside the engine's prediction: whether a step's
miss is in its device time (an op class priced wrong) or in the time the device waits for the host.

usage: python benchmarks/step_profiles.py [FILE] [--ops WORKLOAD:PRECISION] [--top N]

FILE (default ``data/profiles_2026-11-26.jsonl``, made by ``profile_steps.py`` on an H100) holds,
per workload and precision, the step time measured in that run and each aten op's self device
time over one profiled step. For each one this prints the step (``data/steps.jsonl``'s, that run's,
predicted), the device time (profiled, predicted: the sum of the ops' kernel times) and the
predicted host time. ``--ops`` adds a table by aten op for one configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h100_data import DATA, load_measured  # noqa: E402
from step_data import cached_trace  # noqa: E402

from ptp_callback.coefficients import HOPPER  # noqa: E402
from ptp_callback.devices import get_device  # noqa: E402
from ptp_callback.kernels import kernel_seconds  # noqa: E402
from ptp_callback.predict import host_seconds, simulate  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default=DEFAULT)
    parser.add_argument("--ops", default="", help="WORKLOAD:PRECISION for a table by aten op")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    reference = load_measured()
    with open(args.file) as f:
        records = [json.loads(line) for line in f]
    print(f"{'workload':28s} {'precision':10s} {'step: steps.jsonl':>17s} {'run':>7s} {'predicted':>9s} "
          f"{'device: profiled':>17s} {'predicted':>9s} {'host: predicted':>16s}")
    for record in records:
        trace = cached_trace(record["workload"], record["precision"])
        step = simulate(trace, DEVICE, HOPPER).step_s
        device = sum(kernel_seconds(op, DEVICE, HOPPER) for op in trace.ops)
        host = sum(host_seconds(op, HOPPER) for op in trace.ops)
        ref = reference.get((record["workload"], record["precision"]))
        print(f"{record['workload']:28s} {record['precision']:10s} {ref.step_s * 1e3 if ref else float('nan'):14.1f} ms "
              f"{record['step_s_median'] * 1e3:7.1f} {step * 1e3:9.1f} {record['profile_total_ms']:14.1f} ms "
              f"{device * 1e3:9.1f} {host * 1e3:13.1f} ms")
    if args.ops:
        workload, precision = args.ops.split(":")
        op_table(next(r for r in records if r["workload"] == workload and r["precision"] == precision), args.top)


if __name__ == "__main__":
    main()
