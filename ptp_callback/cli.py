"""``ptp``: the device table and this machine's probe from the command line.

    ptp devices          # every known GPU: dense peaks per dtype, bandwidth, SMs
    ptp probe            # measure this machine (GEMM rate per dtype, copy bandwidth, per-op time)
"""

from __future__ import annotations

import argparse
import sys

from .devices import known_devices

_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")


def devices_table() -> str:
    """The device table, one GPU a row (``-`` where a dtype has no fast path)."""
    header = f"{'key':16s} {'name':32s} " + " ".join(f"{d:>7s}" for d in _DTYPES) + f" {'GB/s':>6s} {'SMs':>4s}"
    rows = [header, "-" * len(header)]
    for spec in known_devices():
        peaks = " ".join(f"{spec.peak_tflops[d]:7.1f}" if spec.peak_tflops.get(d) else f"{'-':>7s}" for d in _DTYPES)
        rows.append(f"{spec.key:16s} {spec.name[:32]:32s} {peaks} {spec.memory_bw_gbs:6.0f} {spec.sm_count:4d}")
    rows.append("dense TFLOP/s per dtype; add a GPU with ptp_callback.register_device(DeviceSpec(...))")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptp", description="precision-aware training-time prediction")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("devices", help="list the known GPUs and their peaks")
    probe = commands.add_parser("probe", help="measure this machine's CPU (or a local GPU)")
    probe.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "devices":
        print(devices_table())
        return 0
    import torch

    from .probe import probe_device

    result = probe_device(torch.device(args.device), cache=False)
    print(f"{result.device_name}: copy {result.copy_gbps:.1f} GB/s, {result.small_op_s * 1e6:.1f} us per small op, "
          f"{result.autograd_op_s * 1e6:.1f} us per autograd op")
    for dtype, rates in result.gemm_tflops.items():
        print(f"  GEMM {dtype}: " + ", ".join(f"{n}^3 {r * 1e3:.1f} GFLOP/s" for n, r in rates.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
