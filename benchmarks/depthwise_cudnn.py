"""Depthwise convolutions that PyTorch hands to cuDNN, per shape: the kernel time an H200 profile
measured beside the engine's, and the rate of cuDNN's fp32 weight gradient that the engine uses.

usage: python benchmarks/depthwise_cudnn.py [PROFILES.jsonl]

The default file (``data/profiles_h200_2026-11-27_pm.jsonl``, ``architecture_sweep.py --time ...
--profile`` on an H200) holds one profiled training step of each of five held-out architectures.
ConvNeXt-T's 7x7 depthwise convolutions run on channels-last tensors (its blocks permute to NHWC
and back), which PyTorch sends to cuDNN in every dtype (:mod:`ptp_callback.conv_dispatch`). For
every such convolution this prints the profiled forward and backward kernel time per call and
the engine's, traced here for ``h200-sxm``. For the fp32 backward passes it prints the rate the
weight gradient ran at, taken as the profiled backward less the engine's data gradient (which runs
the same specialized kernel as the forward, at the forward's speed), and the median of those rates
as a share of the fp32 peak: the ``conv_dw:wgrad:cudnn:fp32`` compute efficiency.
No GPU needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from architecture_sweep import MODELS  # noqa: E402
from step_data import spec_of  # noqa: E402

from ptp_callback.coefficients import HOPPER  # noqa: E402
from ptp_callback.costs import conv_pass_flops  # noqa: E402
from ptp_callback.devices import get_device  # noqa: E402
from ptp_callback.kernels import kernel_seconds, peak_flops  # noqa: E402
from ptp_callback.tracer import trace_step  # noqa: E402

DEFAULT = os.path.join(HERE, "data", "profiles_h200_2026-11-27_pm.jsonl")
DEVICE = get_device("h200-sxm")


def _profiled(record: dict) -> dict[tuple[str, str], list[float]]:
    """Profiled depthwise convolutions by (pass, weight shape): [calls, microseconds]."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for name, shapes, calls, us in record["ops"]:
        shapes = [s for s in json.loads(shapes) if s]
        if name == "aten::convolution_backward" and shapes[2][1] == 1:
            key = ("bwd", str(shapes[2]))
        elif name == "aten::cudnn_convolution" and shapes[1][1] == 1:
            key = ("fwd", str(shapes[1]))
        else:
            continue
        out[key][0] += calls
        out[key][1] += us
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default=DEFAULT)
    args = parser.parse_args()
    records = [json.loads(line) for line in open(args.file) if line.strip()]
    print(f"{'model':16s} {'precision':10s} {'pass':4s} {'weight':16s} {'calls':>5s} {'profiled us':>11s} "
          f"{'engine us':>9s} {'wgrad TFLOP/s':>13s}")
    rates = []
    for record in records:
        profiled = _profiled(record)
        if not profiled:
            continue
        model, batch, loss = MODELS[record["workload"]]()
        trace = trace_step(model, batch, loss, None, spec_of(record["precision"]), target_type="cuda",
                           trace_on="cpu")
        engine: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0.0, None])
        for op in trace.ops:
            if op.cost.op_class != "conv_dw" or op.cost.kernel != "depthwise_cudnn":
                continue
            weight = [list(s) for s in op.in_shapes if s][2 if op.cost.backward else 1]
            entry = engine["bwd" if op.cost.backward else "fwd", str(weight)]
            entry[0] += 1
            entry[1] += kernel_seconds(op, DEVICE, HOPPER) * 1e6
            entry[2] = op
        for key in sorted(profiled, key=lambda k: (k[0], -profiled[k][1])):
            calls, us = profiled[key]
            count, predicted, op = engine.get(key, (0, 0.0, None))
            rate = ""
            if key[0] == "bwd" and op is not None and op.cost.dtype == "fp32" and "wgrad" in op.cost.passes:
                # The data gradient at the engine's price: its flops at the backward's cuDNN rate.
                dgrad_s = conv_pass_flops(op.cost.dims) / (
                    HOPPER.compute_eff["conv_dw:bwd:cudnn"] * peak_flops(DEVICE, "fp32"))
                wgrad_s = us / calls * 1e-6 - dgrad_s
                rates.append(conv_pass_flops(op.cost.dims) / wgrad_s)
                rate = f"{rates[-1] / 1e12:13.2f}"
            print(f"{record['workload'][:16]:16s} {record['precision']:10s} {key[0]:4s} {key[1]:16s} {calls:5d} "
                  f"{us / calls:11.1f} {predicted / max(count, 1):9.1f} {rate}")
    if rates:
        rate = statistics.median(rates)
        print(f"\nfp32 weight gradient on cuDNN: median {rate / 1e12:.2f} TFLOP/s over {len(rates)} shapes = "
              f"{rate / peak_flops(DEVICE, 'fp32'):.4f} of the fp32 peak "
              f"(the engine's conv_dw:wgrad:cudnn:fp32: {HOPPER.compute_eff.get('conv_dw:wgrad:cudnn:fp32')})")


if __name__ == "__main__":
    main()
