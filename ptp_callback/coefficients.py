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
    gemm_eff={'gemm': 0.78, 'gemm:fp8': 0.7, 'misaligned': 0.25, 'gemm:fp32': 0.8241, 'gemm:tf32': 0.7632,
              'gemm:bf16': 0.7701, 'gemm:fp16': 0.7678, 'misaligned:tf32': 0.3495, 'misaligned:bf16:1': 0.2028,
              'misaligned:bf16:2': 0.2948, 'misaligned:bf16:4': 0.2808, 'misaligned:fp16:1': 0.2106,
              'misaligned:fp16:2': 0.2959, 'misaligned:fp16:4': 0.3024},
    gemm_k_fill={'gemm': 94.87, 'gemm:fp32': 48.92, 'gemm:tf32': 100.1},
    gemm_tile_eff={'tensor': 6728, 'simt': 2503},
    conv_eff={'conv': 0.8, 'conv:dense:fwd:tf32': 0.7037, 'conv:dense:fwd:bf16': 0.4907,
              'conv:dense:fwd:fp16': 0.4727, 'conv:dense:dgrad:tf32': 0.9895, 'conv:dense:dgrad:bf16': 0.6202,
              'conv:dense:dgrad:fp16': 0.6118, 'conv:dense:wgrad:tf32': 0.376, 'conv:dense:wgrad:bf16': 0.3805,
              'conv:dense:wgrad:fp16': 0.3837, 'conv:pointwise:fwd:tf32': 0.7981,
              'conv:pointwise:fwd:bf16': 0.9729, 'conv:pointwise:fwd:fp16': 0.9757,
              'conv:pointwise:dgrad:tf32': 0.6836, 'conv:pointwise:dgrad:bf16': 0.5777,
              'conv:pointwise:dgrad:fp16': 0.5753, 'conv:pointwise:wgrad:tf32': 0.8147,
              'conv:pointwise:wgrad:bf16': 0.9179, 'conv:pointwise:wgrad:fp16': 0.9193,
              'conv:strided_pointwise:fwd:tf32': 0.8073, 'conv:strided_pointwise:fwd:bf16': 0.8221,
              'conv:strided_pointwise:fwd:fp16': 0.8287, 'conv:strided_pointwise:dgrad:tf32': 0.4998,
              'conv:strided_pointwise:dgrad:bf16': 0.6942, 'conv:strided_pointwise:dgrad:fp16': 0.5758,
              'conv:strided_pointwise:wgrad:tf32': 0.7163, 'conv:strided_pointwise:wgrad:bf16': 0.7608,
              'conv:strided_pointwise:wgrad:fp16': 0.7372, 'conv:grouped:fwd:tf32': 1.31,
              'conv:grouped:fwd:bf16': 1.037, 'conv:grouped:fwd:fp16': 1.038, 'conv:grouped:dgrad:tf32': 0.8973,
              'conv:grouped:dgrad:bf16': 0.6077, 'conv:grouped:dgrad:fp16': 0.5671,
              'conv:grouped:wgrad:tf32': 0.755, 'conv:grouped:wgrad:bf16': 0.7138,
              'conv:grouped:wgrad:fp16': 0.7277, 'channel_align:32': 1.148, 'channel_align:16': 0.9563,
              'channel_align:1': 0.5211},
    attention_eff={'attention': 0.5, 'attention:fwd:fp32': 0.8389, 'attention:fwd:bf16': 0.8388,
                   'attention:fwd:fp16': 0.8284, 'attention:bwd:fp32': 0.7608, 'attention:bwd:bf16': 0.653,
                   'attention:bwd:fp16': 0.6489},
    mem_eff={'elementwise': 0.8847, 'cast': 0.6674, 'reduction': 0.8332, 'norm': 0.6, 'batch_norm': 0.4,
             'batch_norm_native': 0.3, 'pool': 0.5, 'embedding': 0.3, 'optimizer': 0.75, 'scaler': 0.7,
             'conv_dw': 0.3, 'conv': 0.6, 'gemm': 0.5595, 'attention': 0.8, 'recurrent': 0.8, 'embedding:fwd': 1,
             'embedding:bwd': 0.09037, 'norm:fwd': 0.8169, 'norm:bwd': 0.3729, 'batch_norm:fwd': 0.4796,
             'batch_norm:bwd': 0.1731, 'batch_norm_native:fwd': 0.4353, 'batch_norm_native:bwd': 0.3358,
             'conv:dense:fwd': 0.6017, 'conv:dense:bwd': 0.6, 'conv:pointwise:fwd': 1, 'conv:pointwise:bwd': 1,
             'conv:strided_pointwise:fwd': 0.8359, 'conv:strided_pointwise:bwd': 0.5258,
             'conv:grouped:fwd': 0.6985, 'conv:grouped:bwd': 0.6, 'conv_dw:fwd': 0.4814, 'conv_dw:bwd': 0.1667},
    kernel_floor_s=2.496e-06,
    host_op_s={'forward': 8.925e-06, 'backward': 2e-05, 'optimizer': 8.453e-06},
    host_view_s=3.29e-06,
    host_module_s=9.104e-06,
    host_param_s={'ptp.optimizer_python': 6.193e-06, 'ptp.zero_grad': 1.5e-06},
    host_launch_s=4.03e-06,
    launch_latency_s=3.996e-06,
    sync_s=1.5e-05,
    host_step_s=9.514e-05,
    compute_eff={'conv_dw': 0.03, 'conv_dw:fwd:fp32': 0.03743, 'conv_dw:fwd:bf16': 0.03612,
                 'conv_dw:fwd:fp16': 0.05427, 'conv_dw:bwd:fp32': 0.01823, 'conv_dw:bwd:bf16': 0.01774,
                 'conv_dw:bwd:fp16': 0.03503},
    latency_s={'recurrent': 0.0005, 'conv': 2e-06, 'attention': 2e-06, 'norm': 2e-06, 'norm_row': 5e-08,
               'batch_norm': 2e-06, 'batch_norm_native': 2e-06, 'reduction': 1.009e-05, 'conv_dw': 2e-06,
               'norm:fwd': 1.651e-05, 'norm:bwd': 2.002e-06, 'norm_row:fwd': 6.757e-08, 'norm_row:bwd': 5e-08,
               'batch_norm:fwd': 2.052e-06, 'batch_norm:bwd': 2.013e-06, 'batch_norm_native:fwd': 2.3e-06,
               'batch_norm_native:bwd': 2.005e-06, 'conv:dense:fwd': 2.107e-06, 'conv:dense:bwd': 2.07e-06,
               'conv:pointwise:fwd': 1.947e-06, 'conv:pointwise:bwd': 2.004e-06,
               'conv:strided_pointwise:fwd': 1.976e-06, 'conv:strided_pointwise:bwd': 2.052e-06,
               'conv:grouped:fwd': 2.01e-06, 'conv:grouped:bwd': 2.175e-06, 'conv:grouped:per_group': 3.429e-06,
               'conv_dw:fwd': 2.648e-06, 'conv_dw:bwd': 4.559e-06, 'attention:fwd': 1.969e-06,
               'attention:bwd': 2.014e-06, 'recurrent:fwd': 0.0001526, 'recurrent:bwd': 0.001798},
    recurrent={'persistent_max_hidden': 128, 'step_s:standard': 2e-05, 'step_s:persistent': 3e-06,
               'l2_fraction': 0.5, 'step_s:standard:fwd': 2.456e-05, 'step_s:standard:bwd': 2.871e-05,
               'step_s:persistent:fwd': 1.779e-06, 'step_s:persistent:bwd': 2.49e-06,
               'step_s:standard:fwd:bf16': 2.8e-05, 'step_s:standard:bwd:bf16': 2.679e-05, 'scale:fwd': 0.8738,
               'scale:bwd': 0.8709},
    host_call_s={'backward': 0.0002001, 'autocast': 3.418e-05},
    host_class_s={'gemm': 7.971e-06, 'conv': 6e-05, 'attention': 3.265e-05, 'recurrent': 3e-05},
    source='fitted by benchmarks/fit_coefficients.py on 2026-11-23: ops.jsonl (op level) and steps.jsonl (per-step host constants), H100 SXM',
    extra={'attention_key_fill': 299.8, 'attention_dim_fill': 37.8, 'attention_dropout_cost': 0.4,
           'conv_layout_passes': 1, 'reference_small_op_s': 1.085e-05, 'batch_norm_channels_half': 32,
           'batch_norm_native_channels_half': 32, 'host_scale': 1.528, 'batch_norm_channels_half:fwd': 56.61,
           'batch_norm_channels_half:bwd': 69.67, 'batch_norm_native_channels_half:fwd': 102.2,
           'batch_norm_native_channels_half:bwd': 110.8, 'conv_layout_passes:dense:tf32': 1.318,
           'conv_layout_passes:dense:bf16': 1.425, 'conv_layout_passes:dense:fp16': 1.419,
           'conv_layout_passes:pointwise:tf32': 0.3812, 'conv_layout_passes:pointwise:bf16': 0.4147,
           'conv_layout_passes:pointwise:fp16': 0.4164, 'conv_layout_passes:strided_pointwise:tf32': 0.8478,
           'conv_layout_passes:strided_pointwise:bf16': 1.837, 'conv_layout_passes:strided_pointwise:fp16': 2.018,
           'conv_layout_passes:grouped:tf32': 1.082, 'conv_layout_passes:grouped:bf16': 2.046,
           'conv_layout_passes:grouped:fp16': 2.039, 'attention_key_fill:fp32': 111.7,
           'attention_dim_fill:fp32': 30.34},
)

BY_ARCH: dict[str, CostCoefficients] = {"hopper": HOPPER}


def coefficients_for(arch: str) -> CostCoefficients:
    """Coefficients for an architecture; unmeasured ones borrow Hopper's fractions of peak."""
    return BY_ARCH.get(arch, HOPPER)
