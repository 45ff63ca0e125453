"""Group norm timed on a GPU over the shapes of diffusion U-Nets and conv encoders, beside the
layer norm of the same tensors, in the row format of ``data/ops.jsonl``; and the cost model's
prediction of recorded rows.

``ops.jsonl`` times layer, RMS and batch norm but no group norm, whose kernels differ from a layer
norm's: CUDA computes each group's moments in one kernel and normalizes in another (reading the
input twice from memory where a layer norm's second read of a row hits on-chip memory), and its
backward runs five kernels. The cost model prices it with the layer norms' efficiencies and that
kernel count; these rows say how far that holds.

usage: python benchmarks/norm_sweep.py OUT.jsonl [--smoke]      (a GPU; on a CPU --smoke checks it)
       python benchmarks/norm_sweep.py --score FILE [FILE ...]   (no GPU needed)

Each row is the median of 3 groups of CUDA-event-timed calls after warm-up, as ``ops.jsonl``'s are;
``--score`` predicts each recorded row for ``h100-sxm`` and prints the error by op, dtype and pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from recurrent_sweep import DEVICE, DTYPES, bench  # noqa: E402

GROUPS = 32


def shapes(smoke: bool) -> list[tuple[int, int, int, int]]:
    """(n, channels, map side, groups): a U-Net's stages at 64x64 latents (128-1280 channels) and a
    few convnet maps with fewer groups."""
    if smoke:
        return [(2, 64, 8, GROUPS)]
    unet = [(128, 64), (320, 64), (320, 32), (640, 32), (640, 16), (1280, 16), (1280, 8)]
    grid = [(n, c, hw, GROUPS) for n in (4, 16) for c, hw in unet]
    grid += [(32, 64, 56, 8), (32, 256, 28, 16), (8, 512, 14, 1)]
    return grid


def _row(op: str, dtype: str, shape: dict, forward_us: float, both_us: float, nbytes: int) -> dict:
    return {"op": op, "dtype": dtype, "shape": shape, "us": forward_us, "us_forward_backward": both_us,
            "bytes": nbytes, "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
            "torch": torch.__version__}


def time_rows(out: str, smoke: bool) -> None:
    for n, c, hw, groups in shapes(smoke):
        for name, dtype in DTYPES.items():
            if DEVICE == "cpu" and dtype is torch.float16:
                continue
            x = torch.randn(n, c, hw, hw, device=DEVICE, dtype=dtype, requires_grad=True)
            w = torch.ones(c, device=DEVICE, dtype=dtype, requires_grad=True)
            b = torch.zeros(c, device=DEVICE, dtype=dtype, requires_grad=True)
            # The layer norm of the same elements: each pixel's channels, as a ConvNeXt block has them.
            rows = x.detach().permute(0, 2, 3, 1).reshape(-1, c).contiguous().requires_grad_()
            grad = torch.randn_like(x)
            row_grad = grad.permute(0, 2, 3, 1).reshape(-1, c).contiguous()
            cases = {
                "group_norm": ({"n": n, "c": c, "hw": hw, "groups": groups}, lambda: F.group_norm(x, groups, w, b),
                               lambda y: torch.autograd.grad(y, (x, w, b), grad)),
                "layer_norm": ({"rows": n * hw * hw, "d": c}, lambda: F.layer_norm(rows, (c,), w, b),
                               lambda y: torch.autograd.grad(y, (rows, w, b), row_grad)),
            }
            for op, (shape, forward, backward) in cases.items():
                row = _row(op, name, shape, bench(forward), bench(lambda: backward(forward())),
                           2 * x.numel() * x.element_size())
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{op} {shape} {name}: {row['us']:.1f} us forward, {row['us_forward_backward']:.1f} us "
                      f"forward+backward", flush=True)


def score(files: list[str]) -> None:
    """Each recorded norm row predicted for ``h100-sxm``: median error by op, dtype and pass (rows
    timed on another device are scored too, under its name, but only an H100's are comparable)."""
    import op_data
    from fit_coefficients import device_bound, predict_measurement

    from ptp_callback.coefficients import HOPPER

    for path in files:
        with open(path) as f:
            rows = [row for row in map(json.loads, f) if op_data.GROUPS.get(row.get("op")) == "norm"]
        for device in sorted({row.get("device", "?") for row in rows}):
            errors: dict[tuple[str, str, str], list[float]] = defaultdict(list)
            for m in op_data.build([row for row in rows if row.get("device", "?") == device], os.path.basename(path)):
                bound = "device-bound" if device_bound(m, HOPPER) else "host-bound"
                errors[(m.op, m.dtype, f"{m.part} {bound}")].append(predict_measurement(m, HOPPER) / m.us - 1.0)
            print(f"{path}, rows timed on {device}: predicted for h100-sxm / measured - 1")
            for key in sorted(errors):
                values = errors[key]
                print(f"  {' '.join(key):40s} n={len(values):3d} median {100 * statistics.median(values):+6.1f}%  "
                      f"|median| {100 * statistics.median(abs(v) for v in values):5.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", help="the JSON-lines file the timed rows are appended to")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--score", nargs="+", metavar="FILE", help="score recorded rows instead (no GPU needed)")
    args = parser.parse_args()
    if args.score:
        score(args.score)
        return
    if not args.out:
        parser.error("OUT is needed to time rows (or give --score FILE)")
    time_rows(args.out, args.smoke)


if __name__ == "__main__":
    main()
