"""The convnets' convolution kernels in the H100's step profiles, by pass, beside the cost model.

usage: python benchmarks/conv_passes.py [--workloads NAME ...]

``data/steps.jsonl`` keeps, for each workload and precision, the 40 entries with the most device
time of one profiled step (aten ops and CUDA kernels alike). cuDNN's kernel names say which pass
they run (``fprop``, ``dgrad``, ``wgrad``) and which convert layouts (``nchwToNhwc``,
``nhwcToNchw``); this sums them per pass and prints them beside the model's time for the same
passes of the traced step, computed two ways:

* ``model``: as the engine prices them (:func:`ptp_callback.kernels.conv_pass_seconds`; a
  convolution whose channels fill whole 64-channel tiles at its implicit GEMMs' GEMM rate,
  :func:`ptp_callback.kernels.runs_as_gemm`);
* ``rows``: every convolution at the per-family efficiencies fitted on ``data/ops.jsonl``'s
  convolutions, none of which has channel counts that are multiples of 64.

Kernels below the profile's 40th entry are not listed, so a measured pass can be short by a few
of them: the smallest listed entry is printed as the bound of what each missing kernel took.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h100_data import DATA  # noqa: E402
from step_data import cached_trace  # noqa: E402

from ptp_callback.coefficients import HOPPER  # noqa: E402
from ptp_callback.devices import get_device  # noqa: E402
from ptp_callback.kernels import conv_pass_names, conv_pass_seconds, runs_as_gemm  # noqa: E402

DEVICE = get_device("h100-sxm")
PASSES = ("fwd", "dgrad", "wgrad")
# The convnets whose profiles list their convolution kernels: MobileNetV3's many small ones fall
# below its 40th entry, and the other convnets' records carry no profile.
CONVNETS = ("vgg16_b64", "resnet18_b256")


def kernel_pass(name: str) -> str | None:
    """The pass a cuDNN convolution kernel runs, ``layout`` for a layout conversion, else None."""
    if name.startswith("aten::"):
        return None
    if "nchwToNhwc" in name or "nhwcToNchw" in name:
        return "layout"
    if "wgrad" in name:
        return "wgrad"
    if "dgrad" in name:
        return "dgrad"
    if "fprop" in name or "implicit_convolve_sgemm" in name:
        return "fwd"
    return None


def measured_passes(record: dict) -> dict[str, float]:
    times: dict[str, float] = defaultdict(float)
    for name, _calls, ms in record["profile_top"]:
        part = kernel_pass(name)
        if part:
            times[part] += ms
    return times


def modelled_passes(workload: str, precision: str, as_gemm_allowed: bool) -> dict[str, float]:
    times: dict[str, float] = defaultdict(float)
    for op in cached_trace(workload, precision).ops:
        cost = op.cost
        if cost.op_class != "conv" or not cost.gemms:
            continue
        as_gemm = as_gemm_allowed and runs_as_gemm(cost, DEVICE)
        for gemm, part in zip(cost.gemms, conv_pass_names(cost)):
            times[part] += conv_pass_seconds(cost, gemm, part, DEVICE, HOPPER, as_gemm) * 1e3
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(CONVNETS))
    args = parser.parse_args()
    records = [json.loads(line) for line in open(os.path.join(DATA, "steps.jsonl"))]
    print("convolution kernels per step, ms: profiled (data/steps.jsonl) / model / rows (the op-row efficiencies "
          "for every convolution)")
    print(f"{'workload':26s} {'precision':11s} " + " ".join(f"{p:>22s}" for p in PASSES)
          + f" {'layout (profiled)':>18s} {'smallest listed':>16s}")
    for record in records:
        if record["workload"] not in args.workloads or "profile_top" not in record:
            continue
        measured = measured_passes(record)
        model = modelled_passes(record["workload"], record["precision"], True)
        rows = modelled_passes(record["workload"], record["precision"], False)
        cells = " ".join(f"{measured[p]:6.2f} / {model[p]:5.2f} / {rows[p]:5.2f}" for p in PASSES)
        print(f"{record['workload']:26s} {record['precision']:11s} {cells} {measured['layout']:18.2f} "
              f"{record['profile_top'][-1][2]:16.3f}")


if __name__ == "__main__":
    main()
