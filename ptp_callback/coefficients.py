"""Per-op-class, per-dtype cost coefficients: how close to its peaks a device runs each class.

A device's datasheet gives peaks (FLOP/s per dtype, DRAM bandwidth); real kernels reach a
fraction of them that depends on the op class, the kernel family, the dtype and the shape. These
coefficients hold those fractions and the fixed costs (kernel floor and latencies, host time per
op). They are keyed by op class, kernel family, pass and dtype only -- never by a model -- so
they carry over to models nobody measured.

Keys are ``:``-joined from the most general part to the most specific (``"conv:dense:wgrad:bf16"``);
:func:`pick` takes the most specific key present (``conv:dense:wgrad:bf16``, then
``conv:dense:wgrad``, ``conv:dense``, ``conv``).

The ``HOPPER`` values are fitted by ``benchmarks/fit_coefficients.py``: the device-side ones on
the per-op H100 timings of ``benchmarks/data/ops.jsonl`` (broad seeded shape grids), the host
costs per op on its ``host`` rows, and only the per-step host constants on whole training steps.
Other architectures use the same fractions of their own peaks until measured. Online
calibration (``calibrate.py``) multiplies them by per-class corrections at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OP_CLASSES: tuple[str, ...] = (
    "gemm", "conv", "conv_dw", "attention", "recurrent", "norm", "batch_norm", "batch_norm_native", "reduction",
    "elementwise", "cast", "pool", "embedding", "optimizer", "scaler", "host",
)


def pick(table: dict[str, Any], parts: tuple[str, ...], default: Any) -> Any:
    """The value of the most specific key of ``table`` made of a prefix of ``parts``."""
    for end in range(len(parts), 0, -1):
        value = table.get(":".join(parts[:end]))
        if value is not None:
            return value
    return default


@dataclass(frozen=True)
class CostCoefficients:
    """Fractions of peak and fixed costs, per op class and dtype, for one kind of device.

    Compute efficiencies are fractions of the dense peak of the op's math dtype (``compute_eff``:
    of the fp32 CUDA-core peak, for CUDA-core kernels); memory efficiencies are fractions of DRAM
    bandwidth; ``latency_s`` a fixed device time per kernel of a class beyond ``kernel_floor_s``.
    Host times are seconds per event on the host thread (Python, dispatcher, launch):
    ``host_op_s`` per launched op by phase, ``host_view_s`` per metadata op, ``host_module_s`` per
    module call, ``host_param_s`` per parameter of per-parameter Python loops (by pseudo-op),
    ``host_call_s`` per step for what happens once in one (``"backward"``: the autograd engine's
    start, ``"autocast"``: entering and leaving autocast), ``host_step_s`` the loop's own Python,
    ``host_class_s`` extra host time per op of a class whose library call costs more to issue
    (cuBLAS and cuDNN choose and configure a kernel on the host).
    """

    gemm_eff: dict[str, float]
    gemm_k_fill: dict[str, float]
    gemm_tile_eff: dict[str, float]
    conv_eff: dict[str, float]
    attention_eff: dict[str, float]
    mem_eff: dict[str, float]
    kernel_floor_s: float
    host_op_s: dict[str, float]
    host_view_s: float
    host_module_s: float
    host_param_s: dict[str, float]
    host_launch_s: float
    launch_latency_s: float
    sync_s: float
    host_step_s: float
    compute_eff: dict[str, float] = field(default_factory=dict)
    latency_s: dict[str, float] = field(default_factory=dict)
    recurrent: dict[str, float] = field(default_factory=dict)
    host_call_s: dict[str, float] = field(default_factory=dict)
    host_class_s: dict[str, float] = field(default_factory=dict)
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def memory_efficiency(self, op_class: str, dtype: str, backward: bool = False) -> float:
        """Fraction of DRAM bandwidth: most specific of ``class:dir:dtype``, ``class:dir``,
        ``class``, else the elementwise value."""
        return pick(self.mem_eff, (op_class, "bwd" if backward else "fwd", dtype), self.mem_eff["elementwise"])


def lookup(table: dict[str, float], op_class: str, dtype: str, backward: bool, default: float) -> float:
    """The most specific entry of ``table`` for an op: ``class:dir:dtype``, ``class:dir``, ``class``."""
    return pick(table, (op_class, "bwd" if backward else "fwd", dtype), default)


# Fitted on NVIDIA H100 80GB HBM3 (SXM), PyTorch 2.11, by benchmarks/fit_coefficients.py (see there for
# the data and the date). Every value is a fraction of a datasheet peak or a time per event; none
# belongs to a model.
HOPPER = CostCoefficients(
    gemm_eff={"gemm:fp32": 0.78, "gemm:tf32": 0.78, "gemm:bf16": 0.78, "gemm:fp16": 0.78, "gemm:fp8": 0.70,
              "misaligned:tf32": 0.33, "misaligned:bf16:1": 0.2, "misaligned:bf16:2": 0.3, "misaligned:bf16:4": 0.45,
              "misaligned:fp16:1": 0.2, "misaligned:fp16:2": 0.3, "misaligned:fp16:4": 0.45},
    gemm_k_fill={"gemm:fp32": 64.0, "gemm:tf32": 256.0, "gemm": 96.0},
    gemm_tile_eff={"tensor": 4096.0, "simt": 2048.0},
    conv_eff={"conv": 0.8},
    attention_eff={"attention:fwd:fp32": 0.6, "attention:bwd:fp32": 0.6, "attention:fwd": 0.5, "attention:bwd": 0.45},
    mem_eff={"elementwise": 0.85, "cast": 0.85, "reduction": 0.8, "norm": 0.6, "batch_norm": 0.2,
             "batch_norm_native": 0.12, "pool": 0.5, "embedding": 0.3, "optimizer": 0.75, "scaler": 0.7,
             "conv_dw": 0.3, "conv": 0.6, "gemm": 0.8, "attention": 0.8, "recurrent": 0.8},
    kernel_floor_s=2.5e-6,
    host_op_s={"forward": 12e-6, "backward": 12e-6, "optimizer": 12e-6},
    host_view_s=1.5e-6,
    host_module_s=8e-6,
    host_param_s={"ptp.optimizer_python": 6e-6, "ptp.zero_grad": 1.5e-6},
    host_launch_s=4e-6,
    launch_latency_s=4e-6,
    sync_s=15e-6,
    host_step_s=80e-6,
    compute_eff={"conv_dw": 0.03},
    latency_s={},
    recurrent={"persistent_max_hidden": 128, "step_s:standard": 20e-6, "step_s:persistent": 2e-6, "l2_fraction": 0.5},
    host_call_s={"backward": 60e-6, "autocast": 20e-6},
    host_class_s={"gemm": 5e-6, "conv": 10e-6, "attention": 10e-6, "recurrent": 30e-6},
    source="initial physical guesses (not yet fitted)",
    extra={"attention_key_fill": 256.0, "attention_dim_fill": 32.0, "attention_dropout_cost": 0.4,
           "conv_layout_passes": 1.0, "reference_small_op_s": 10.85e-6},
)

BY_ARCH: dict[str, CostCoefficients] = {"hopper": HOPPER}


def coefficients_for(arch: str) -> CostCoefficients:
    """Coefficients for an architecture; unmeasured ones borrow Hopper's fractions of peak."""
    return BY_ARCH.get(arch, HOPPER)
