"""How long tracing and predicting one training step takes, per dev workload, on this machine.

usage: python benchmarks/trace_speed.py [--only a,b] [--runs 3] [--precision bf16-mixed]

Each run is a fresh Python process (torch imported, the workload built on the meta device), which
imports ``torch._dynamo`` (``FakeTensorMode`` does on first use: a one-time cost per process,
timed separately) and then times ``predict_step(..., device="h100-sxm")`` twice: *cold* is the
first call of the process (what the callback pays at fit start, on top of that import), *warm*
the second. Printed: the median over ``--runs`` processes of each, the number of recorded ops,
and for reference the same model's plain forward + backward + AdamW step on the meta device (no
tracing: the floor any tracer on this machine starts from). The machine's load is printed too:
on a shared 2-core machine the figures vary run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import json, os, sys, time, warnings
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
warnings.simplefilter("ignore")
import torch
from h100_data import build_on_meta, quiet_transformers
import ptp_callback as ptp
quiet_transformers()
model, batch, loss_fn = build_on_meta({name!r})
started = time.perf_counter()
import torch._dynamo  # what FakeTensorMode imports on first use: once per process
dynamo_import = time.perf_counter() - started
times = []
for _ in range(2):
    started = time.perf_counter()
    pred = ptp.predict_step(model, batch, loss_fn, None, {precision!r}, "h100-sxm", trace_on="cpu")
    times.append(time.perf_counter() - started)
opt = torch.optim.AdamW(model.parameters(), foreach=True)
started = time.perf_counter()
loss_fn(model, batch).backward()
opt.step()
plain = time.perf_counter() - started
print(json.dumps({{"cold": times[0], "warm": times[1], "ops": len(pred.ops), "plain_meta_step": plain,
                  "dynamo_import": dynamo_import}}))
"""


def run_once(name: str, precision: str) -> dict:
    code = _CHILD.format(root=os.path.dirname(HERE), here=HERE, name=name, precision=precision)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--precision", default="bf16-mixed")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from h100_data import workloads

    names = [n for n in workloads() if not args.only or n in args.only.split(",")]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               "unknown CPU") if os.path.exists("/proc/cpuinfo") else "unknown CPU"
    print(f"trace + predict time per workload ({args.precision}, predicting h100-sxm), {time.strftime('%Y-%m-%d')}, "
          f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; medians of {args.runs} processes")
    print(f"{'workload':26s} {'cold s':>7s} {'warm s':>7s} {'ops':>6s} {'plain meta step s':>18s} "
          f"{'dynamo import s':>16s}   runs (cold)")
    for name in names:
        results = [run_once(name, args.precision) for _ in range(args.runs)]
        cold = statistics.median(r["cold"] for r in results)
        warm = statistics.median(r["warm"] for r in results)
        plain = statistics.median(r["plain_meta_step"] for r in results)
        dynamo = statistics.median(r["dynamo_import"] for r in results)
        print(f"{name:26s} {cold:7.2f} {warm:7.2f} {results[0]['ops']:6d} {plain:18.2f} {dynamo:16.2f}   "
              + " ".join(f"{r['cold']:.2f}" for r in results), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
