"""Does calibrating leave the training slower? Step times before and after each calibration means.

usage: python benchmarks/calibration_aftereffect.py [--device cpu|cuda] [--steps N] [--rounds R]

On the H100 80GB HBM3 that recorded ``benchmarks/data/``, once ``torch.profiler`` had run in a
process, launch-bound steps stayed 25-45% slower. ptp_callback calibrates per op class by timing
the heaviest ops in isolation (``measure_op_classes``) instead. This script runs a small
launch-bound training loop, measures the median step before and after (1) ``measure_op_classes``
and (2) one profiled step, R rounds each in fresh processes, and prints the after/before ratios.
Run it on a GPU when one is lent; on a CPU it checks the mechanism.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_round(device_name: str, steps: int, means: str) -> dict[str, float]:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from ptp_callback.calibrate import measure_op_classes
    from ptp_callback.step import resolve_device
    from ptp_callback.tracer import trace_step

    device = torch.device(device_name)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(256, 256), nn.GELU())], nn.Linear(256, 10)).to(device)
    batch = (torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device))
    optimizer = torch.optim.AdamW(model.parameters())

    def step() -> None:
        loss = F.cross_entropy(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def median_step() -> float:
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()  # a step's time includes its device work
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    for _ in range(10):
        step()
    before = median_step()
    if means == "ops":
        spec, coef = resolve_device("cpu" if device.type == "cpu" else device)
        trace = trace_step(model, batch, lambda m, b: F.cross_entropy(m(b[0]), b[1]), optimizer, "32-true",
                           target_type=device.type)
        measure_op_classes(trace, spec, coef, device, budget_s=1.0, min_share=0.0)
    else:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities):
            step()
    after = median_step()
    return {"before": before, "after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round", dest="single", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        print(json.dumps(one_round(args.device, args.steps, args.single)))
        return
    print(f"calibration after-effect on {args.device}, {time.strftime('%Y-%m-%d')}, {args.steps} steps per median")
    for means in ("ops", "profiler"):
        ratios = []
        for _ in range(args.rounds):  # a fresh process each round: the profiler's effect is per process
            out = subprocess.run([sys.executable, __file__, "--device", args.device, "--steps", str(args.steps),
                                  "--round", means], capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            ratios.append(result["after"] / result["before"])
        label = "measure_op_classes" if means == "ops" else "one torch.profiler step"
        print(f"  after {label:24s}: step time x{statistics.median(ratios):.3f} (median of {len(ratios)} rounds: "
              + ", ".join(f"{r:.3f}" for r in ratios) + ")")


if __name__ == "__main__":
    main()
