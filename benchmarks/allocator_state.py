"""The demo's CPU fit with the C allocator settled at fit start (as the callback does) and without.

usage: python benchmarks/allocator_state.py [--rounds N]

Runs ``examples/lightning_quickstart.py`` (a 3-epoch MLP fit on the CPU, no checkpoint) in a
fresh Python process per run, alternating two settings each round:

``settled``    as shipped: the callback frees one 32 MiB block at fit start
               (``ptp_callback.allocator``), which raises glibc's mmap threshold;
``unsettled``  the same with that step skipped, as a process runs until it frees such a block
               itself (importing torch frees blocks of 1-2 MiB only, so the step's 2-31 MiB
               tensors are mapped afresh each time they are allocated).

First the demo's training step alone (its MLP, batch 128, AdamW) in a plain loop, each setting in a
fresh process: the page faults a step takes (the fresh mappings, counted by the kernel, so the
same on a busy machine) and its median time. Then each demo run's fit time and the error of the
prediction before step one (the callback's fit-end line), their medians per setting and the ratio
of the medians. Linux with glibc only; on another C library both settings run the same.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "examples", "lightning_quickstart.py")
RUN = ("import runpy, sys\n"
       "import ptp_callback.run_prediction as rp\n"
       "if sys.argv[1] == 'unsettled':\n"
       "    rp.settle_cpu_allocator = lambda: False\n"
       "runpy.run_path(sys.argv[2], run_name='__main__')\n")
STEP = """
import resource, statistics, sys, time
import torch, torch.nn as nn
from ptp_callback.allocator import settle_cpu_allocator
if sys.argv[1] == "settled":
    settle_cpu_allocator()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(784, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10))
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
x, y = torch.randn(128, 784), torch.randint(0, 10, (128,))
def step():
    nn.functional.cross_entropy(net(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
for _ in range(10):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
times = []
for _ in range(100):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 100, statistics.median(times))
"""
FIT_LINE = re.compile(r"fit took ([\d.]+)(m?s), predicted before step one ([\d.]+)(m?s) \(([+-][\d.]+)%\)")


def step_alone(setting: str) -> tuple[float, float]:
    """(page faults, median seconds) of the demo's training step in a plain loop."""
    done = subprocess.run([sys.executable, "-c", STEP, setting], capture_output=True, text=True, timeout=600, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the step failed ({setting}):\n{done.stderr[-2000:]}")
    faults, seconds = done.stdout.split()
    return float(faults), float(seconds)


def run(setting: str) -> tuple[float, float]:
    """(fit seconds, before-step-one error %) of one demo run."""
    done = subprocess.run([sys.executable, "-c", RUN, setting, DEMO], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    match = FIT_LINE.search(done.stdout + done.stderr)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"the demo failed ({setting}):\n{done.stderr[-2000:]}")
    fit_s = float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
    return fit_s, float(match.group(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for setting in ("unsettled", "settled"):
        faults, seconds = step_alone(setting)
        print(f"the demo's step alone, {setting:9s}: {faults:6.0f} page faults a step, {seconds * 1e3:.2f} ms (median of 100)",
              flush=True)
    results: dict[str, list[tuple[float, float]]] = {"settled": [], "unsettled": []}
    for i in range(args.rounds):
        order = ("unsettled", "settled") if i % 2 == 0 else ("settled", "unsettled")
        for setting in order:
            fit_s, error = run(setting)
            results[setting].append((fit_s, error))
            print(f"round {i + 1} {setting:9s} fit {fit_s:5.1f} s, before step one {error:+.1f}%", flush=True)
    medians = {k: statistics.median(f for f, _ in v) for k, v in results.items()}
    for setting, rows in results.items():
        errors = sorted(e for _, e in rows)
        print(f"{setting:9s} median fit {medians[setting]:.1f} s; before step one median {statistics.median(errors):+.1f}% "
              f"(runs: {', '.join(f'{e:+.1f}%' for e in errors)})")
    print(f"unsettled / settled fit time: {medians['unsettled'] / medians['settled']:.2f}x")


if __name__ == "__main__":
    main()
