"""Accuracy of the per-op cost model on op shapes it was not fitted on (``data/ops.jsonl``).

usage: python benchmarks/op_accuracy.py [--seed 0] [--train-fraction 0.7] [--rounds 30]

The measured shapes of each group (GEMM, convolution, attention, recurrent, norms, memory-bound
ops) are split at random with a fixed seed: 70% of the shapes (all their dtypes and parts
together: a held-out shape was never seen in any dtype) fit the op-level coefficients from their
starting values exactly as ``fit_coefficients.py`` does; the other 30% are predicted. The 8 host
programs fit the host costs and are not split.

Printed per group and per op x dtype x part: the median and 90th-percentile absolute error on the
held-out shapes, over all of them and over the *device-bound* ones -- those whose measured time
is at least twice what the host model (fitted on the host rows alone) says the benchmark's loop
needed to issue them. A tiny op's CUDA-event time measures the benchmark's host loop, which
varied between its two runs by up to 30% (7.6 vs 10.1 us for the same tiny add), not the op.
The op fit takes 15-20 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import op_data  # noqa: E402
from fit_coefficients import INITIAL, device_bound, fit_ops, predict_measurement, shape_key, split_keys  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-fraction", type=float, default=0.7)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    started = time.perf_counter()
    measurements = op_data.load()
    train_keys, test_keys = split_keys(measurements, args.train_fraction, args.seed)
    train = [m for m in measurements if shape_key(m) in train_keys]
    test = [m for m in measurements if shape_key(m) in test_keys]
    print(f"per-op accuracy on held-out shapes of data/ops.jsonl (NVIDIA H100 SXM, PyTorch 2.11); "
          f"{time.strftime('%Y-%m-%d')}; seed {args.seed}: {len(train)} measurements fit, {len(test)} held out")
    coef = fit_ops(train, INITIAL, args.rounds, verbose=True)
    by_group: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    by_kind: dict[tuple[str, str, str], list[tuple[float, bool]]] = defaultdict(list)
    for m in test:
        error = abs(predict_measurement(m, coef) / m.us - 1.0)
        bound = device_bound(m, coef)
        by_group[m.group].append((error, bound))
        by_kind[(m.op, m.dtype, m.part)].append((error, bound))

    def line(name: str, values: list[tuple[float, bool]]) -> str:
        every = [e for e, _b in values]
        device = [e for e, b in values if b]
        text = f"  {name:38s} n={len(every):4d} median {100 * statistics.median(every):5.1f}% p90 {100 * percentile(every, 0.9):6.1f}%"
        if device:
            text += (f" | device-bound n={len(device):4d} median {100 * statistics.median(device):5.1f}% "
                     f"p90 {100 * percentile(device, 0.9):6.1f}%")
        return text

    print("held-out error by group:")
    for group in ("gemm", "conv", "attention", "recurrent", "norm", "memory"):
        if by_group.get(group):
            print(line(group, by_group[group]))
    print("by op, dtype, part:")
    for key in sorted(by_kind):
        print(line(" ".join(key), by_kind[key]))
    print(f"({time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    main()
