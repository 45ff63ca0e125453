"""Where a dev workload's training step spends its device time, per aten op and input shapes and per
kernel: the evidence for fitting an op class against the workloads themselves (GPU only for
meaningful figures; on a CPU it checks itself in seconds with ``--smoke``).

usage: python benchmarks/profile_steps.py OUT.jsonl [--only name,...] [--precisions p,...] [--smoke]
       python benchmarks/profile_steps.py --compare A.jsonl B.jsonl   (no GPU: per-op device time, A over B)

Two passes, so that the profiler cannot slow the timed steps (once ``torch.profiler`` has run in a
process, launch-bound steps stay slower): first every configuration's step is timed (median of 10
after 5 warm-up steps, as ``data/steps.jsonl`` was), then each is profiled for one step. One JSON
line per workload x precision: ``step_s_median``, ``profile_total_ms`` and ``ops`` (``[aten op,
input shapes, calls, self device us]``) and ``kernels`` (``[kernel, calls, us]``), both by device time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
from workloads import SMOKE, WORKLOADS  # noqa: E402

PRECISIONS = ("32-true", "32-tf32", "16-mixed", "bf16-mixed", "bf16-true", "16-true")
_TRUE_DTYPE = {"bf16-true": torch.bfloat16, "16-true": torch.float16}
_AMP_DTYPE = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def build_step(spec: tuple, precision: str, device: torch.device) -> Callable[..., None]:
    """One AdamW training step of the workload as ``data/steps.jsonl`` measured it: ``step()`` on
    the workload's batch, built once on ``device`` (``step.batch``), or ``step(batch)`` on another."""
    make_model, make_batch, loss_fn = spec
    torch.set_float32_matmul_precision("high" if precision == "32-tf32" else "highest")
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    torch.manual_seed(0)
    with torch.device(device):
        model = make_model()
    model = model.to(device)
    true_dtype = _TRUE_DTYPE.get(precision)
    if true_dtype is not None:
        model = model.to(true_dtype)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp = _AMP_DTYPE.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None
    batch = make_batch(device, true_dtype or torch.float32)

    def step(other: Any = None) -> None:
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model, batch if other is None else other)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    step.batch = batch  # type: ignore[attr-defined]
    return step


def time_step(step: Callable[[], None], device: torch.device, warmup: int = 5, timed: int = 10) -> float:
    for _ in range(warmup):
        step()
    sync(device)
    times = []
    for _ in range(timed):
        started = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def profile_step(step: Callable[[], None], device: torch.device) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        step()
        sync(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    ops, kernels = [], []
    for event in prof.key_averages(group_by_input_shape=True):
        us = getattr(event, key, 0) or 0
        if us <= 0:
            continue
        if event.key.startswith("aten::"):
            ops.append([event.key, str(event.input_shapes), event.count, round(us, 2)])
    for event in prof.key_averages():
        us = getattr(event, key, 0) or 0
        if us > 0 and not event.key.startswith("aten::") and device.type == "cuda":
            kernels.append([event.key[:200], event.count, round(us, 2)])
    ops.sort(key=lambda row: -row[3])
    kernels.sort(key=lambda row: -row[2])
    return {"profile_total_ms": round(sum(row[3] for row in ops) / 1e3, 3), "ops": ops, "kernels": kernels}


def compare(first: str, second: str, top: int = 12) -> None:
    """Each configuration profiled in both files: its aten ops' device time in the first over the
    second (two GPUs, say), the ops that took most time first."""
    def load(path: str) -> dict[tuple[str, str], dict[str, Any]]:
        with open(path) as f:
            return {(r["workload"], r["precision"]): r for r in map(json.loads, f)}

    a, b = load(first), load(second)
    for key in [k for k in a if k in b]:
        print(f"{key[0]} {key[1]}: {a[key]['device']} {1e3 * a[key]['step_s_median']:.2f} ms, "
              f"{b[key]['device']} {1e3 * b[key]['step_s_median']:.2f} ms a step")
        totals: dict[str, list[float]] = {}
        for op, _shapes, _calls, us in a[key]["ops"]:
            totals.setdefault(op, [0.0, 0.0])[0] += us
        for op, _shapes, _calls, us in b[key]["ops"]:
            totals.setdefault(op, [0.0, 0.0])[1] += us
        for op, (us_a, us_b) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"  {op:44s} {us_a:9.0f} us {us_b:9.0f} us  {us_a / us_b if us_b else float('nan'):5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two recorded profiles instead")
    parser.add_argument("--only", default="")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--smoke", action="store_true", help="the tiny workloads, on whatever device is here")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if not args.out:
        parser.error("OUT is needed to profile (or give --compare A B)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    table = SMOKE if args.smoke else WORKLOADS
    names = [n for n in table if not args.only or n in args.only.split(",")]
    configs = [(n, p) for n in names for p in args.precisions.split(",")
               if device.type == "cuda" or p not in ("16-mixed", "16-true")]
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    timed: dict[tuple[str, str], float] = {}
    for name, precision in configs:
        timed[name, precision] = time_step(build_step(table[name], precision, device), device)
        print(f"timed {name} {precision}: {timed[name, precision] * 1e3:.2f} ms", flush=True)
        gc.collect()
    for name, precision in configs:
        record = {"workload": name, "precision": precision, "device": gpu, "torch": torch.__version__,
                  "step_s_median": timed[name, precision]}
        record.update(profile_step(build_step(table[name], precision, device), device))
        with open(args.out, "a") as out:
            out.write(json.dumps(record) + "\n")
        print(f"profiled {name} {precision}: {record['profile_total_ms']:.1f} ms of device time", flush=True)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
