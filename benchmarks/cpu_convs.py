"""Random convolutions and batch norms on this CPU against the engine's pricing of them.

usage: python benchmarks/cpu_convs.py [--convs N] [--norms N] [--seed S] [--deep]

Each shape is traced as a one-layer model's training step for ``device="cpu"`` (this machine's
cached probe) at 32-true and at bf16-mixed, and its layer's forward and backward ops are priced;
then the same layer is timed in this process (median of 15 calls after 3: the forward, then the
forward and both gradients, less the forward), in fp32 and with a bf16 input as autocast gives it
(a bf16 convolution; a batch norm with fp32 weights). The timings include the layer's Python call
(about 10 us forward, 30 us backward), which the step model counts as host time: compare calls of
a millisecond or more. Printed: each shape's measured and priced times, then per dtype and pass the
median and 90th-percentile error. Convolutions are dense and 1x1, 3-256 channels over 7x7 to 56x56
maps (``--deep``: 64-512 channels over 2x2 to 64x64 maps, filters up to 7x7), strides 1 and 2.
The CPU convolution and batch-norm coefficients (``probe.CPU_CONV_*``) were fitted on such runs;
a new seed gives shapes they were not fitted on. Run it on a quiet machine (glibc's allocator as
the README's limits say: ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864``).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from ptp_callback import predict_step  # noqa: E402

_PRICED = ("native_batch_norm", "native_batch_norm_backward", "convolution", "convolution_backward")


class Scaled(nn.Module):
    """A learnable scale in front of the layer, so that the traced layer computes its input's gradient."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x * self.scale)


def priced(layer: nn.Module, x: torch.Tensor, precision: str) -> dict[str, float]:
    model = Scaled(layer)
    step = predict_step(model, (x,), lambda m, b: m(b[0]).float().sum(), torch.optim.SGD(model.parameters(), lr=0.1),
                        precision=precision, device="cpu")
    out = {"fwd": 0.0, "bwd": 0.0}
    for op, seconds in zip(step.ops, step.kernel_s):
        name = op.name.split(".")[1] if op.name.startswith("aten.") else op.name
        if name in _PRICED:
            out["bwd" if "backward" in name else "fwd"] += seconds
    return out


def _median_s(fn, calls: int = 15) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measured(layer: nn.Module, x: torch.Tensor) -> dict[str, float]:
    x = x.clone().requires_grad_(True)
    params = [p for p in layer.parameters() if p.requires_grad]
    grad = torch.randn_like(layer(x))
    forward = _median_s(lambda: layer(x))
    both = _median_s(lambda: torch.autograd.grad(layer(x), [x, *params], grad))
    return {"fwd": forward, "bwd": both - forward}


def conv_shapes(rng: random.Random, n: int, deep: bool) -> list[tuple[int, ...]]:
    def draw() -> tuple[int, ...]:
        if deep:
            return (rng.choice([8, 16, 32, 64]), rng.choice([3, 64, 128, 256, 384, 512]),
                    rng.choice([64, 128, 256, 512]), rng.choice([2, 4, 7, 8, 14, 16, 32, 64]), rng.choice([1, 3, 3, 7]),
                    rng.choice([1, 1, 2]))
        return (rng.choice([8, 16, 32, 64]), rng.choice([3, 16, 32, 48, 64, 96, 128, 256]),
                rng.choice([16, 32, 64, 128, 256]), rng.choice([7, 8, 14, 16, 28, 32, 56]), rng.choice([1, 3, 3, 3, 5]),
                rng.choice([1, 1, 2]))

    shapes = []
    while len(shapes) < n:
        batch, c_in, c_out, side, k, stride = draw()
        if 2e6 <= batch * c_in * side * side * c_out * k * k / stride**2 <= 3e9:  # 2 MFLOP to 6 GFLOP
            shapes.append((batch, c_in, c_out, side, k, stride))
    return shapes


def norm_shapes(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    shapes = []
    while len(shapes) < n:
        shape = (rng.choice([8, 16, 32, 64, 128]), rng.choice([16, 24, 32, 48, 64, 96, 128, 256, 512]),
                 rng.choice([4, 7, 8, 14, 16, 28, 32, 56]))
        if 2e4 <= shape[0] * shape[1] * shape[2] ** 2 <= 2e7:
            shapes.append(shape)
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convs", type=int, default=30)
    parser.add_argument("--norms", type=int, default=20)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--deep", action="store_true", help="wide layers over small maps")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = random.Random(args.seed)
    print(f"CPU convolutions and batch norms against their pricing, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, seed {args.seed}")
    errors: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    cases = [("conv", s) for s in conv_shapes(rng, args.convs, args.deep)]
    cases += [("norm", s) for s in norm_shapes(rng, args.norms)]
    for kind, shape in cases:
        for precision, dtype in (("32-true", torch.float32), ("bf16-mixed", torch.bfloat16)):
            if kind == "conv":
                batch, c_in, c_out, side, k, stride = shape
                x = torch.randn(batch, c_in, side, side)
                make = lambda: nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False)  # noqa: E731
                timed_layer, timed_x = make().to(dtype), x.to(dtype)
            else:
                batch, channels, side = shape
                x = torch.randn(batch, channels, side, side, dtype=dtype)
                make = lambda: nn.BatchNorm2d(channels)  # noqa: E731
                timed_layer, timed_x = make(), x
            predicted = priced(make(), x, precision)
            real = measured(timed_layer, timed_x)
            cells = []
            for part in ("fwd", "bwd"):
                error = predicted[part] / real[part] - 1.0
                errors.setdefault((kind, precision, part), []).append((error, real[part]))
                cells.append(f"{part} {real[part] * 1e3:8.3f} / {predicted[part] * 1e3:8.3f} ms ({100 * error:+5.0f}%)")
            print(f"{kind:5s} {str(shape):28s} {precision:10s} " + "   ".join(cells))
    print("measured / priced; per kind, precision and pass: median and 90th-percentile |error|, over all calls and "
          "over those of 0.5 ms or more (the layer's Python call weighs less)")
    for (kind, precision, part), values in sorted(errors.items()):
        summary = []
        for label, chosen in (("all", values), (">=0.5 ms", [v for v in values if v[1] >= 5e-4])):
            absolute = sorted(abs(error) for error, _ in chosen)
            if absolute:
                p90 = absolute[min(len(absolute) - 1, int(0.9 * len(absolute)))]
                median = statistics.median(absolute)
                summary.append(f"{label} {100 * median:3.0f}% / {100 * p90:3.0f}% ({len(absolute)})")
        print(f"  {kind:5s} {precision:10s} {part}: " + ", ".join(summary))


if __name__ == "__main__":
    main()
