"""cuDNN GRU and LSTM layers timed over batch size and width at fixed sequence length, in the
row format of ``data/ops.jsonl`` (``op``, ``dtype``, ``shape``, ``us``, ``us_forward_backward``,
``flops``): how a recurrent layer's per-step cost moves with the batch, which the seeded grid
of ``ops.jsonl`` samples only sparsely. GPU only (on a CPU ``--smoke`` checks the script).

usage: python benchmarks/recurrent_sweep.py OUT.jsonl [--like OPS.jsonl] [--smoke]
       python benchmarks/recurrent_sweep.py --compare [FILE ...]   (no GPU needed)
``--like`` times the recurrent shapes of another ops file again first (to compare two machines or
two days on the very same shapes), then the sweep.
Each row is the median of 3 groups of CUDA-event-timed calls after warm-up, as ``ops.jsonl``'s are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def bench(fn: Callable[[], object], min_total_s: float = 0.02, max_reps: int = 50) -> float:
    """Median microseconds per call over 3 groups, after warm-up (``ops.jsonl``'s method)."""
    for _ in range(3):
        fn()
    if DEVICE == "cpu":
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1e6
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = int(min(max_reps, max(3, min_total_s / one)))
    groups = []
    for _ in range(3):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        groups.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(groups)


def shapes(smoke: bool, like: str = "") -> list[tuple[str, int, int, int, int, int]]:
    """(cell, input, hidden, layers, batch, steps)."""
    if like:
        with open(like) as rows:
            recorded = [json.loads(line) for line in rows]
        seen = dict.fromkeys((r["op"].upper(), r["shape"]["input"], r["shape"]["hidden"], r["shape"]["layers"],
                              r["shape"]["b"], r["shape"]["s"]) for r in recorded if r["op"] in ("gru", "lstm"))
        return list(seen) + shapes(smoke)
    if smoke:
        return [("GRU", 16, 32, 2, 4, 8)]
    grid = [("GRU", 256, hidden, 3, batch, 512) for hidden in (256, 768, 1024) for batch in (8, 16, 32, 64)]
    grid += [("LSTM", 256, hidden, 2, batch, 256) for hidden in (512, 1024) for batch in (8, 32, 128)]
    return grid


def _key(row: dict) -> tuple:
    shape = row["shape"]
    return row["op"], shape["input"], shape["hidden"], shape["layers"], shape["b"], shape["s"], row["dtype"]


def compare(files: list[str]) -> None:
    """For each pair of (file, device) sets of recurrent rows, the median ratio of their times on the
    shapes both timed: the same layers on two machines or two days."""
    sets: dict[str, dict[tuple, dict]] = {}
    for path in files:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("op") in ("gru", "lstm") and "us" in row:
                    sets.setdefault(f"{os.path.basename(path)} {row.get('device', '?')}", {})[_key(row)] = row
    names = sorted(sets)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            common = [k for k in sets[first] if k in sets[second]]
            if not common:
                continue
            forward = [sets[first][k]["us"] / sets[second][k]["us"] for k in common]
            both = [sets[first][k]["us_forward_backward"] / sets[second][k]["us_forward_backward"] for k in common]
            print(f"{first}  /  {second}: {len(common)} rows, forward {statistics.median(forward):.2f}x "
                  f"({min(forward):.2f}-{max(forward):.2f}), forward+backward {statistics.median(both):.2f}x "
                  f"({min(both):.2f}-{max(both):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", help="the JSON-lines file the timed rows are appended to")
    parser.add_argument("--like", default="", help="an ops file whose recurrent shapes are timed first")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--compare", nargs="*", metavar="FILE",
                        help="compare recorded rows instead (default: data/ops.jsonl and this script's data)")
    args = parser.parse_args()
    if args.compare is not None:
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
        compare(args.compare or [os.path.join(data, "ops.jsonl"), os.path.join(data, "ops_recurrent_2026-11-26.jsonl")])
        return
    if not args.out:
        parser.error("OUT is needed to time rows (or give --compare)")
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    for cell, inp, hidden, layers, batch, steps in shapes(args.smoke, args.like):
        for name in ("fp32", "bf16", "fp16", "bf16-autocast", "fp16-autocast"):
            dtype = DTYPES[name.split("-")[0]]
            if DEVICE == "cpu" and dtype is torch.float16:
                continue
            param_dtype = torch.float32 if "autocast" in name else dtype
            module = getattr(torch.nn, cell)(inp, hidden, layers, batch_first=True).to(DEVICE, param_dtype)
            x = torch.randn(batch, steps, inp, device=DEVICE, dtype=param_dtype, requires_grad=True)
            autocast = "autocast" in name

            def forward() -> object:
                with torch.autocast(DEVICE, dtype=dtype, enabled=autocast):
                    return module(x)

            def forward_backward() -> None:
                y, _ = forward()
                y.float().sum().backward()
            gates = 4 if cell == "LSTM" else 3
            row = {"op": cell.lower(), "dtype": name,
                   "shape": {"input": inp, "hidden": hidden, "layers": layers, "b": batch, "s": steps},
                   "us": bench(forward), "us_forward_backward": bench(forward_backward),
                   "flops": 2 * batch * steps * gates * hidden * (inp + hidden + (layers - 1) * 2 * hidden),
                   "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "torch": torch.__version__,
                   "cudnn": torch.backends.cudnn.version()}
            with open(args.out, "a") as out:
                out.write(json.dumps(row) + "\n")
            print(f"{cell} {inp}->{hidden}x{layers} b{batch} s{steps} {name}: {row['us']:.0f} us forward, "
                  f"{row['us_forward_backward']:.0f} us forward+backward", flush=True)


if __name__ == "__main__":
    main()
