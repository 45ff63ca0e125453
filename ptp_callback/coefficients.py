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
    gemm_eff={'gemm:fp32': 0.8171, 'gemm:tf32': 0.7504, 'gemm:bf16': 0.7245, 'gemm:fp16': 0.7387, 'gemm:fp8': 0.7,
              'misaligned:tf32': 0.3772, 'misaligned:bf16:1': 0.2135, 'misaligned:bf16:2': 0.3101,
              'misaligned:bf16:4': 0.3236, 'misaligned:fp16:1': 0.2164, 'misaligned:fp16:2': 0.3055,
              'misaligned:fp16:4': 0.3405},
    gemm_k_fill={'gemm:fp32': 46.91, 'gemm:tf32': 125.5, 'gemm': 92.02},
    gemm_tile_eff={'tensor': 5963, 'simt': 2351},
    conv_eff={'conv': 0.8, 'conv:dense:fwd:tf32': 0.7071, 'conv:dense:fwd:bf16': 0.4925,
              'conv:dense:fwd:fp16': 0.4701, 'conv:dense:dgrad:tf32': 0.9985, 'conv:dense:dgrad:bf16': 0.6749,
              'conv:dense:dgrad:fp16': 0.655, 'conv:dense:wgrad:tf32': 0.4087, 'conv:dense:wgrad:bf16': 0.4111,
              'conv:dense:wgrad:fp16': 0.4021, 'conv:pointwise:fwd:tf32': 0.8679, 'conv:pointwise:fwd:bf16': 1.012,
              'conv:pointwise:fwd:fp16': 0.9902, 'conv:pointwise:dgrad:tf32': 0.742,
              'conv:pointwise:dgrad:bf16': 0.6439, 'conv:pointwise:dgrad:fp16': 0.629,
              'conv:pointwise:wgrad:tf32': 0.8433, 'conv:pointwise:wgrad:bf16': 0.9218,
              'conv:pointwise:wgrad:fp16': 0.9059, 'conv:strided_pointwise:fwd:tf32': 0.8093,
              'conv:strided_pointwise:fwd:bf16': 0.8127, 'conv:strided_pointwise:fwd:fp16': 0.8186,
              'conv:strided_pointwise:dgrad:tf32': 0.8091, 'conv:strided_pointwise:dgrad:bf16': 0.8292,
              'conv:strided_pointwise:dgrad:fp16': 0.8282, 'conv:strided_pointwise:wgrad:tf32': 0.8029,
              'conv:strided_pointwise:wgrad:bf16': 0.8095, 'conv:strided_pointwise:wgrad:fp16': 0.809,
              'conv:grouped:fwd:tf32': 0.5472, 'conv:grouped:fwd:bf16': 0.5828, 'conv:grouped:fwd:fp16': 0.566,
              'conv:grouped:dgrad:tf32': 0.4737, 'conv:grouped:dgrad:bf16': 0.3846,
              'conv:grouped:dgrad:fp16': 0.4012, 'conv:grouped:wgrad:tf32': 0.306,
              'conv:grouped:wgrad:bf16': 0.3134, 'conv:grouped:wgrad:fp16': 0.3143},
    attention_eff={'attention:fwd:fp32': 0.8585, 'attention:bwd:fp32': 0.788, 'attention:fwd': 0.5,
                   'attention:bwd': 0.45, 'attention:fwd:bf16': 0.8305, 'attention:fwd:fp16': 0.8213,
                   'attention:bwd:bf16': 0.6233, 'attention:bwd:fp16': 0.6219},
    mem_eff={'elementwise': 0.9193, 'cast': 0.676, 'reduction': 0.7354, 'norm': 0.6, 'batch_norm': 0.2,
             'batch_norm_native': 0.12, 'pool': 0.5, 'embedding': 0.3, 'optimizer': 0.75, 'scaler': 0.7,
             'conv_dw': 0.3, 'conv': 0.6, 'gemm': 0.5621, 'attention': 0.8, 'recurrent': 0.8,
             'embedding:fwd': 0.9218, 'embedding:bwd': 0.1093, 'norm:fwd': 0.6275, 'norm:bwd': 0.3889,
             'batch_norm:fwd': 0.3941, 'batch_norm:bwd': 0.2, 'batch_norm_native:fwd': 0.3607,
             'batch_norm_native:bwd': 0.2647, 'conv:dense:fwd': 0.6163, 'conv:dense:bwd': 0.6,
             'conv:pointwise:fwd': 1, 'conv:pointwise:bwd': 0.9475, 'conv:strided_pointwise:fwd': 0.699,
             'conv:strided_pointwise:bwd': 0.2388, 'conv:grouped:fwd': 0.7796, 'conv:grouped:bwd': 0.2763,
             'conv_dw:fwd': 0.4904, 'conv_dw:bwd': 0.1805},
    kernel_floor_s=1.848e-06,
    host_op_s={'forward': 8.838e-06, 'backward': 4e-05, 'optimizer': 8.948e-06},
    host_view_s=1.353e-06,
    host_module_s=6.388e-06,
    host_param_s={'ptp.optimizer_python': 5.655e-06, 'ptp.zero_grad': 1.5e-06},
    host_launch_s=3.973e-06,
    launch_latency_s=3.989e-06,
    sync_s=1.5e-05,
    host_step_s=0.0001089,
    compute_eff={'conv_dw': 0.03, 'conv_dw:fwd:fp32': 0.03635, 'conv_dw:fwd:bf16': 0.03503,
                 'conv_dw:fwd:fp16': 0.05155, 'conv_dw:bwd:fp32': 0.0186, 'conv_dw:bwd:bf16': 0.01812,
                 'conv_dw:bwd:fp16': 0.03643},
    latency_s={'reduction': 1.227e-06, 'norm:fwd': 1.208e-06, 'norm:bwd': 1.004e-06, 'norm_row:fwd': 1.698e-07,
               'norm_row:bwd': 7.296e-07, 'batch_norm:fwd': 9.927e-07, 'batch_norm:bwd': 9.974e-07,
               'batch_norm_native:fwd': 1.009e-06, 'batch_norm_native:bwd': 9.956e-07,
               'batch_norm_element:fwd': 1.528e-09, 'batch_norm_element:bwd': 6.164e-09,
               'batch_norm_native_element:fwd': 1.267e-09, 'batch_norm_native_element:bwd': 4.057e-09,
               'attention:fwd': 9.966e-07, 'attention:bwd': 1.008e-06, 'conv:dense:fwd': 1.111e-06,
               'conv:dense:bwd': 1.03e-06, 'conv:pointwise:fwd': 9.874e-07, 'conv:pointwise:bwd': 1.002e-06,
               'conv:strided_pointwise:fwd': 1.001e-06, 'conv:strided_pointwise:bwd': 1.004e-06,
               'conv:grouped:fwd': 1e-06, 'conv:grouped:bwd': 1.067e-06, 'conv:grouped:per_group': 9.074e-06,
               'conv_dw:fwd': 1.257e-06, 'conv_dw:bwd': 1.075e-06},
    recurrent={'persistent_max_hidden': 128, 'step_s:standard': 2e-05, 'step_s:persistent': 2e-06,
               'l2_fraction': 0.5, 'step_s:standard:fwd': 2.582e-05, 'step_s:standard:bwd': 2.493e-05,
               'step_s:persistent:fwd': 2.719e-06, 'step_s:persistent:bwd': 7.667e-06,
               'step_s:standard:fwd:bf16': 2.896e-05, 'step_s:standard:bwd:bf16': 2.324e-05, 'scale:fwd': 0.8897,
               'scale:bwd': 1.573},
    host_call_s={'backward': 0.0001018, 'autocast': 2.381e-05},
    host_class_s={'gemm': 8.598e-06, 'conv': 2.028e-05, 'attention': 2.7e-05, 'recurrent': 3e-05},
    source='fitted by benchmarks/fit_coefficients.py (2026-11-23): ops.jsonl (op level), steps.jsonl (per-step constants), H100 SXM',
    extra={'attention_key_fill': 333.4, 'attention_dim_fill': 34.78, 'attention_dropout_cost': 0.4,
           'conv_layout_passes': 1, 'reference_small_op_s': 1.085e-05, 'batch_norm_channel_slots': 2.818,
           'attention_key_fill:fp32': 117.7, 'attention_dim_fill:fp32': 31.45,
           'conv_layout_passes:dense:tf32': 1.397, 'conv_layout_passes:dense:bf16': 1.499,
           'conv_layout_passes:dense:fp16': 1.488, 'conv_layout_passes:pointwise:tf32': 0.416,
           'conv_layout_passes:pointwise:bf16': 0.4392, 'conv_layout_passes:pointwise:fp16': 0.4297,
           'conv_layout_passes:strided_pointwise:tf32': 0.7344, 'conv_layout_passes:strided_pointwise:bf16': 1.519,
           'conv_layout_passes:strided_pointwise:fp16': 1.696, 'conv_layout_passes:grouped:tf32': 1.229,
           'conv_layout_passes:grouped:bf16': 3.051, 'conv_layout_passes:grouped:fp16': 2.767,
           'host_scale': 0.9868},
)

BY_ARCH: dict[str, CostCoefficients] = {"hopper": HOPPER}


def coefficients_for(arch: str) -> CostCoefficients:
    """Coefficients for an architecture; unmeasured ones borrow Hopper's fractions of peak."""
    return BY_ARCH.get(arch, HOPPER)
