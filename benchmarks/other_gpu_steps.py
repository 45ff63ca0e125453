"""The dev workloads' training steps timed on a GPU the coefficients were not fitted on, predicted
for that GPU: how the per-op cost model carries to another device.

usage: python benchmarks/other_gpu_steps.py [FILE ...]   (default: the shipped H200 steps)

Each FILE holds steps timed like ``data/steps.jsonl`` (``../shared/bench/groundtruth.py``: median of
20 AdamW steps after warm-up), with the ``device`` torch reported. Every step is traced here (the
cached trace of ``step_data.py``) and predicted for that device with the shipped coefficients,
which were fitted on H100 SXM timings only. Printed per step: measured and predicted time, and
beside them the H100's measured and predicted time of the same step, so that the predicted
speed-up of one GPU over the other can be read against the measured one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from h100_data import load_measured  # noqa: E402
from step_data import cached_trace  # noqa: E402

from ptp_callback.predict import simulate  # noqa: E402
from ptp_callback.step import resolve_device  # noqa: E402

DEFAULT = os.path.join(HERE, "data", "steps_h200_2026-11-27.jsonl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=[DEFAULT])
    args = parser.parse_args(argv)
    rows = [json.loads(line) for path in args.files for line in open(path) if line.strip()]
    rows = [row for row in rows if "step_s_median" in row]
    h100 = load_measured()
    reference, reference_coef = resolve_device("h100-sxm")
    print(f"steps timed on another GPU, predicted {time.strftime('%Y-%m-%d')} with the shipped (H100-fitted) "
          f"coefficients, traced on this machine")
    print(f"{'workload':28s} {'precision':10s} {'device':14s} {'measured':>9s} {'predicted':>9s} {'error':>7s}"
          f" | {'H100':>8s} {'predicted':>9s} | {'speed-up measured':>17s} {'predicted':>9s}")
    errors, speedups = [], []
    for row in rows:
        workload, precision = row["workload"], row["precision"]
        device, coef = resolve_device(row["device"])
        trace = cached_trace(workload, precision)
        predicted = simulate(trace, device, coef).step_s
        error = predicted / row["step_s_median"] - 1
        errors.append(abs(error))
        line = (f"{workload:28s} {precision:10s} {device.key:14s} {1e3 * row['step_s_median']:9.2f} "
                f"{1e3 * predicted:9.2f} {100 * error:+6.1f}%")
        if (workload, precision) in h100:
            h100_s = h100[workload, precision].step_s
            h100_predicted = simulate(trace, reference, reference_coef).step_s
            measured_ratio, predicted_ratio = h100_s / row["step_s_median"], h100_predicted / predicted
            speedups.append(abs(predicted_ratio / measured_ratio - 1))
            line += (f" | {1e3 * h100_s:8.2f} {1e3 * h100_predicted:9.2f} | {measured_ratio:17.2f}x "
                     f"{predicted_ratio:8.2f}x")
        print(line, flush=True)
    if not errors:
        print("no timed steps")
        return 1
    print(f"\n{len(errors)} steps: MAPE {100 * statistics.mean(errors):.1f}%, median {100 * statistics.median(errors):.1f}%,"
          f" worst {100 * max(errors):.1f}%")
    if speedups:
        print(f"speed-up over the H100 within 5% of the measured one: {sum(s <= 0.05 for s in speedups)} of "
              f"{len(speedups)} (median error {100 * statistics.median(speedups):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
