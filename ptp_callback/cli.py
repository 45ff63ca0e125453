"""``ptp``: plan a run before renting a GPU, read the device table, measure this machine.

    ptp predict mypkg.models:make --device h100 a100 --precision all --steps 10000
    ptp predict ./gpt2/config.json --batch-size 8 --seq-len 1024 --epochs 3 --samples 100000 --usd-per-gpu-hour 2.5
    ptp devices [NAME]   # every known GPU's peaks, bandwidth and links, and where each number comes from
    ptp probe            # measure this machine (GEMM rate per dtype, copy bandwidth, per-op time)
    ptp --version

Layered like ``accelerate estimate-memory``: :func:`build_parser`, the pure
:func:`~ptp_callback.planning.plan_rows` (tests call it), :func:`render_plan` and :func:`main`.
Bad input is one line on stderr (``ptp: error: ...``) and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from .devices import DeviceSpec, known_devices
from .display import format_duration
from .planning import ALL_PRECISIONS, PlanRequest, PlanTable, plan_rows

_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line (argparse prints the whole usage first)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="ptp", description="precision-aware training-time prediction")
    parser.add_argument("--version", action="version", version=f"ptp-callback {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    predict = commands.add_parser("predict", help="a model's step and run time per precision and GPU",
                                  description="Predict a model's training step and run on GPUs it has not run on.")
    predict.add_argument("model", help="module:factory (returns the model, or the model and an example batch; may "
                                       "take batch_size= and seq_len=) or a Hugging Face config.json")
    predict.add_argument("--batch-size", type=int, help="examples per GPU per step (default: the factory's, or 8)")
    predict.add_argument("--seq-len", type=int, help="tokens per example (token models; default min(512, max))")
    predict.add_argument("--precision", nargs="+", default=["bf16-mixed"],
                         help=f"'all' or some of {', '.join(ALL_PRECISIONS)} (default bf16-mixed)")
    predict.add_argument("--device", nargs="+", default=["h100"], help="GPUs as you would name them: h100, a100, "
                                                                       "l4, h100-pcie ... (default h100)")
    predict.add_argument("--gpus", type=int, default=1, help="data-parallel GPUs (default 1)")
    length = predict.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="optimizer steps of the run")
    length.add_argument("--epochs", type=float, help="epochs of the run (with --samples)")
    predict.add_argument("--samples", type=int, help="training examples per epoch (with --epochs)")
    predict.add_argument("--usd-per-gpu-hour", nargs="+", metavar="PRICE",
                         help="price of one GPU hour, for every device (2.5) or per device (h100=2.5 a100=1.3): "
                              "adds each run's cost")
    predict.add_argument("--json", action="store_true", help="print JSON instead of a table")

    devices = commands.add_parser("devices", help="the known GPUs, their numbers and the source of each")
    devices.add_argument("name", nargs="?", help="one GPU (h100, a100-sxm-80gb ...)")

    probe = commands.add_parser("probe", help="measure this machine's CPU (or a local GPU)")
    probe.add_argument("--device", default="cpu", help="cpu or cuda[:N] (this machine's devices)")
    return parser


# ------------------------------------------------------------------------------------- predict
def render_plan(table: PlanTable) -> str:
    """The table ``ptp predict`` prints."""
    head = f"{table.model}: {table.parameters / 1e6:.1f}M parameters, {table.batch}"
    head += f", {table.steps} steps" if table.steps is not None else ""
    head += f", {table.gpus} GPUs (data parallel)" if table.gpus > 1 else ", 1 GPU"
    columns = ["precision", "device", "step", "run"] + (["cost"] if any(r.cost_usd is not None for r in table.rows)
                                                        else []) + ["supported"]
    lines = []
    for row in table.rows:
        cells = [row.precision, row.device, format_duration(row.step_s) if row.supported else "-",
                 format_duration(row.run_s) if row.run_s is not None else "-"]
        if "cost" in columns:
            cells.append(f"${row.cost_usd:,.2f}" if row.cost_usd is not None else "-")
        cells.append("yes" if row.supported else f"no ({row.note})")
        lines.append(cells)
    widths = [max(len(c), *(len(line[i]) for line in lines)) for i, c in enumerate(columns)]
    out = table.notes + [head, "  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    out.append("step: one optimizer step (AdamW) predicted from a trace of the model; run: steps x step, without "
               "data loading, evaluation or checkpoints")
    return "\n".join(out)


def _prices(values: list[str] | None) -> float | dict[str, float] | None:
    """``["2.5"]`` -> 2.5; ``["h100=2.5", "a100=1.3"]`` -> a price per device name."""
    if not values:
        return None
    try:
        if len(values) == 1 and "=" not in values[0]:
            return float(values[0])
        return {name: float(price) for name, price in (value.split("=", 1) for value in values)}
    except ValueError:
        raise ValueError(f"--usd-per-gpu-hour {' '.join(values)}: expected a price (2.5) or prices per device "
                         "(h100=2.5 a100=1.3)") from None


def _predict(args: argparse.Namespace) -> int:
    request = PlanRequest(model=args.model, batch_size=args.batch_size, seq_len=args.seq_len,
                          precisions=tuple(args.precision), devices=tuple(args.device), gpus=args.gpus,
                          steps=args.steps, epochs=args.epochs, samples=args.samples,
                          usd_per_gpu_hour=_prices(args.usd_per_gpu_hour))
    table = plan_rows(request)
    if args.json:
        print(json.dumps({"model": table.model, "parameters": table.parameters, "batch": table.batch,
                          "steps": table.steps, "gpus": table.gpus, "notes": table.notes,
                          "rows": [asdict(row) for row in table.rows]}, indent=2))
    else:
        print(render_plan(table))
    return 0


# ------------------------------------------------------------------------------------- devices
def devices_table(specs: list[DeviceSpec] | None = None) -> str:
    """The device table, one GPU a row (``-`` where a dtype has no fast path), then each GPU's sources."""
    specs = known_devices() if specs is None else specs
    header = f"{'key':16s} {'name':32s} " + " ".join(f"{d:>7s}" for d in _DTYPES) + \
        f" {'GB/s':>6s} {'link':>5s} {'SMs':>4s}"
    rows = [header, "-" * len(header)]
    for spec in specs:
        peaks = " ".join(f"{spec.peak_tflops[d]:7.1f}" if spec.peak_tflops.get(d) else f"{'-':>7s}" for d in _DTYPES)
        link = f"{spec.interconnect_gbs:5.0f}" if spec.interconnect_gbs else f"{'-':>5s}"
        rows.append(f"{spec.key:16s} {spec.name[:32]:32s} {peaks} {spec.memory_bw_gbs:6.0f} {link} {spec.sm_count:4d}")
    rows.append("dense TFLOP/s per dtype; GB/s: memory bandwidth; link: GPU-to-GPU GB/s per direction")
    rows.append("")
    rows.append("sources (\"unverified\": not checked against a copy of the vendor document):")
    for spec in specs:
        rows.append(f"{spec.key}:")
        rows.extend(f"  - {source}" for source in spec.sources)
    rows.append("add a GPU with ptp_callback.register_device(DeviceSpec(...))")
    return "\n".join(rows)


def _devices(args: argparse.Namespace) -> int:
    specs = None
    if args.name:
        from .device_names import resolve_device_name

        spec, note = resolve_device_name(args.name)
        if note:
            print(note)
        specs = [spec]
    print(devices_table(specs))
    return 0


# --------------------------------------------------------------------------------------- probe
def probe_target(name: str) -> Any:
    """The local device ``ptp probe --device`` measures; one-line ``ValueError`` otherwise."""
    import torch

    text = name.strip().lower()
    if text != "cpu" and not (text == "cuda" or text.startswith("cuda:") and text[5:].isdigit()):
        hint = ""
        try:
            from .device_names import resolve_device_name

            spec, _ = resolve_device_name(name)
            hint = f"; to see {spec.key}'s numbers run `ptp devices {spec.key}`"
        except ValueError:
            pass
        raise ValueError(f"--device {name}: ptp probe measures this machine: give cpu or cuda[:N], not a GPU "
                         f"name{hint}")
    device = torch.device(text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: this machine has no CUDA GPU (torch.cuda.is_available() is False); "
                             "probe the CPU with --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {name}: this machine has {count} GPU(s): cuda:0 to cuda:{count - 1}")
    return device


def _probe(args: argparse.Namespace) -> int:
    from .probe import probe_device

    result = probe_device(probe_target(args.device), refresh=True)
    beyond = f" ({result.stream_copy_gbps:.1f} beyond its caches)" if result.stream_copy_gbps else ""
    if result.llc_copy_gbps:
        beyond += f", {result.llc_copy_gbps:.1f} GB/s through its last-level cache"
    print(f"{result.device_name}: copy {result.copy_gbps:.1f} GB/s{beyond}, "
          f"{result.small_op_s * 1e6:.1f} us per small op, {result.autograd_op_s * 1e6:.1f} us per autograd op")
    for dtype, rates in result.gemm_tflops.items():
        print(f"  GEMM {dtype}: " + ", ".join(f"{n}^3 {r * 1e3:.1f} GFLOP/s" if "x" not in n
                                             else f"{n} {r * 1e3:.1f} GFLOP/s" for n, r in rates.items()))
    if result.element_s:
        print("  ns per element: " + ", ".join(f"{name} {s * 1e9:.2f}" for name, s in result.element_s.items()))
    if result.fault_s_per_byte:
        print(f"  first touch of a new large tensor: {result.fault_s_per_byte * 1e9:.2f} ns per byte")
    if result.reference_step_s:
        print("  reference step: " + ", ".join(
            f"{phase} {s * 1e6:.0f} us (host cost per op x{result.reference_host_scales.get(phase, 1.0):.2f})"
            for phase, s in result.reference_step_s.items()))
    return 0


# ---------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = {"predict": _predict, "devices": _devices, "probe": _probe}[args.command]
    try:
        return run(args)
    except ValueError as exc:  # our one-line errors (UnknownDeviceError is one)
        print(f"ptp: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
