"""How fast a convolution's bias runs, per element and per byte, in each dtype.

usage: python benchmarks/conv_bias_rate.py [--device cpu|cuda] [--shapes N] [--out FILE]

On cuDNN's path PyTorch adds a convolution's bias in a pass of its own
(``output.add_(bias.view(1, C, 1, 1))``) and sums its gradient over (N, H, W). The cost model
prices both at the fp32 time whatever the dtype (``kernels._bias_seconds``): the broadcast's index
arithmetic bounds them, not their bytes. This script times the two passes, and a plain in-place
``mul_`` for comparison, over seeded NCHW shapes in fp32, bf16 and fp16, and prints the median
rates of the calls long enough to measure (30 us and more). On an H100 80GB HBM3 (2026-11-24,
PyTorch 2.11): the adds ran at 261, 288 and 291 G elements/s in fp32, bf16 and fp16, the sums at
390, 400 and 400, and ``mul_`` at 2.6-2.7 TB/s in all three -- a half-precision ``mul_`` takes
half the time of an fp32 one, a half-precision bias pass about the same. Run it on a GPU; on a
CPU it checks the mechanism.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

import torch


def timed(fn: Callable[[], object], device: torch.device, repeats: int = 15) -> float:
    """Median seconds of one call (CUDA events on a GPU)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def shapes(count: int, max_elements: float, seed: int = 5) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        side = rng.choice([7, 13, 14, 27, 28, 55, 56, 112])
        channels = rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024])
        n = rng.choice([32, 64, 128, 256])
        while n > 1 and n * channels * side * side > max_elements:
            n //= 2
        out.append((n, channels, side))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", type=int, default=40)
    parser.add_argument("--out", default="", help="also write one JSON line per shape and dtype")
    args = parser.parse_args()
    device = torch.device(args.device)
    max_elements = 2.5e8 if device.type == "cuda" else 4e6
    rows = []
    for n, channels, side in shapes(args.shapes, max_elements):
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
            y = torch.randn(n, channels, side, side, device=device, dtype=dtype)
            bias = torch.randn(channels, device=device, dtype=dtype)
            rows.append(dict(n=n, c=channels, hw=side, dtype=name, elements=y.numel(), itemsize=y.element_size(),
                             add_s=timed(lambda: y.add_(bias.view(1, -1, 1, 1)), device),
                             sum_s=timed(lambda: y.sum((0, 2, 3)), device),
                             mul_s=timed(lambda: y.mul_(1.0), device)))
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"conv bias passes on {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, "
          f"PyTorch {torch.__version__}, {time.strftime('%Y-%m-%d')}; calls of 30 us and more:")
    for name in ("fp32", "bf16", "fp16"):
        measured = [r for r in rows if r["dtype"] == name and r["add_s"] >= 30e-6]
        if not measured:
            print(f"  {name}: no call long enough")
            continue
        add = statistics.median(r["elements"] / r["add_s"] for r in measured) / 1e9
        reduce = statistics.median(r["elements"] / r["sum_s"] for r in measured) / 1e9
        stream = statistics.median(2 * r["elements"] * r["itemsize"] / r["mul_s"] for r in measured) / 1e9
        print(f"  {name}: bias add {add:6.0f} G elements/s, gradient sum {reduce:6.0f} G elements/s, "
              f"in-place mul_ {stream:6.0f} GB/s ({len(measured)} shapes)")


if __name__ == "__main__":
    main()
