"""Per-op-class, per-dtype cost coefficients: how close to its peaks a device runs each class.

A device's datasheet gives peaks (FLOP/s per dtype, DRAM bandwidth); real kernels reach a
fraction of them that depends on the op class, the dtype and the shape. These coefficients hold
those fractions and the fixed costs (kernel floor, host time per op). They are keyed by op class
and dtype only -- never by a model -- so they carry over to models nobody measured.

The ``HOPPER`` values were fitted with ``benchmarks/fit_coefficients.py`` against the measured
H100 step times and per-op profiles in ``../shared/h100`` (the fit reports its leave-one-workload-out
error). Other architectures use the same fractions of their own peaks until measured.
Online calibration (``calibrate.py``) multiplies them by per-class corrections at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OP_CLASSES: tuple[str, ...] = (
    "gemm", "conv", "conv_dw", "attention", "norm", "batch_norm", "batch_norm_native", "reduction", "elementwise",
    "cast", "pool", "embedding", "optimizer", "scaler", "host",
)


@dataclass(frozen=True)
class CostCoefficients:
    """Fractions of peak and fixed costs, per op class and dtype, for one kind of device.

    Compute efficiencies are fractions of the dense peak of the op's math dtype; memory
    efficiencies are fractions of DRAM bandwidth. Host times are seconds per event on the host
    thread (Python, dispatcher, launch).
    """

    # Big-GEMM efficiency per math dtype; K-loop fill cost in elements of K per tile; relative
    # efficiency of smaller tiles (cuBLAS picks smaller tiles when a big one leaves SMs idle).
    gemm_eff: dict[str, float]
    gemm_k_fill: dict[str, float]
    gemm_tile_eff: dict[str, float]
    conv_eff: dict[str, float]
    # Attention efficiency per (dtype, "fwd"/"bwd").
    attention_eff: dict[str, float]
    # Memory efficiency per class, with optional "class:dtype" overrides.
    mem_eff: dict[str, float]
    kernel_floor_s: float
    # Host: seconds per launched op by phase, per metadata op, per module call, per parameter of
    # per-parameter Python loops (by pseudo-op), and the latency from launch to kernel start.
    host_op_s: dict[str, float]
    host_view_s: float
    host_module_s: float
    host_param_s: dict[str, float]
    host_launch_s: float
    launch_latency_s: float
    sync_s: float
    host_step_s: float  # once per step: the loop's Python, autocast enter/exit, backward() call, sync
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def memory_efficiency(self, op_class: str, dtype: str, backward: bool = False) -> float:
        """Fraction of DRAM bandwidth: most specific of ``class:dtype:bwd``, ``class:bwd``,
        ``class:dtype``, ``class``, else the elementwise value."""
        return lookup(self.mem_eff, op_class, dtype, backward, self.mem_eff["elementwise"])


def lookup(table: dict[str, float], op_class: str, dtype: str, backward: bool, default: float) -> float:
    """The most specific entry of ``table`` for an op: ``class:dtype:bwd`` ... ``class``."""
    direction = "bwd" if backward else "fwd"
    for key in (f"{op_class}:{dtype}:{direction}", f"{op_class}:{direction}", f"{op_class}:{dtype}", op_class):
        value = table.get(key)
        if value is not None:
            return value
    return default


# Fitted on NVIDIA H100 80GB HBM3 (SXM), PyTorch 2.11, with benchmarks/fit_coefficients.py (2026-11-22):
# 48 measured step times of ../shared/h100/steps.jsonl, their per-op-class profile times and the
# large square GEMMs of micro.json. Every value is a fraction of a datasheet peak or a time per
# event; none belongs to a model. Values that hit a bound of the fit are marked.
HOPPER = CostCoefficients(
    gemm_eff={"gemm:fp32": 0.820, "gemm:tf32": 0.804, "gemm:bf16": 0.826, "gemm:fp16": 0.838, "gemm:fp8": 0.70,
              "gemm:fp64": 0.80, "misaligned:tf32": 0.257, "misaligned": 0.135},
    gemm_k_fill={"gemm:fp32": 60.9, "gemm:tf32": 274.0, "gemm": 98.4},
    gemm_tile_eff={"large": 1.0, "medium": 0.848, "small": 0.977, "tiny": 0.35},
    conv_eff={"conv:tf32": 0.858, "conv:bf16": 0.684, "conv:fp16": 0.732, "conv": 0.8},
    attention_eff={"attention:fp32:fwd": 0.590, "attention:fp32:bwd": 0.655, "attention:fwd": 0.397,
                   "attention:bwd": 0.397},
    mem_eff={"elementwise": 0.791, "cast": 0.90, "reduction": 0.90, "norm": 0.398, "batch_norm": 0.188,
             "batch_norm_native": 0.126, "pool": 0.609, "pool:bwd": 0.325, "embedding": 0.313,
             "optimizer": 0.750, "scaler": 0.70, "conv_dw": 0.390, "conv_dw:bwd": 0.113, "conv": 0.6,
             "gemm": 0.8, "attention": 0.8},  # cast and reduction at the fit's upper bound (0.9)
    kernel_floor_s=8e-6,  # at the fit's upper bound: also absorbs kernels we count as one but run as several
    host_op_s={"forward": 33.9e-6, "backward": 22.1e-6, "optimizer": 36.9e-6},
    host_view_s=2e-6,
    host_module_s=8.6e-6,
    host_param_s={"ptp.optimizer_python": 6.3e-6, "ptp.zero_grad": 1.5e-6},
    host_launch_s=5e-6,
    launch_latency_s=5e-6,
    sync_s=15e-6,
    host_step_s=83e-6,
    source="fitted on H100 SXM measurements (../shared/h100), benchmarks/fit_coefficients.py",
    extra={"attention_key_fill": 189.0, "attention_dropout_cost": 0.372, "conv_layout_passes": 0.752,
           "reference_small_op_s": 10.85e-6},
)

BY_ARCH: dict[str, CostCoefficients] = {"hopper": HOPPER}


def coefficients_for(arch: str) -> CostCoefficients:
    """Coefficients for an architecture; unmeasured ones borrow Hopper's fractions of peak."""
    return BY_ARCH.get(arch, HOPPER)
