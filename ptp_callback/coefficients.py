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

    def memory_efficiency(self, op_class: str, dtype: str, backward: bool = False, kernel: str = "") -> float:
        """Fraction of DRAM bandwidth: ``class:kernel`` for a kernel family that has its own (a
        cast's ``narrowing`` or ``widening``), else the most specific of ``class:dir:dtype``,
        ``class:dir``, ``class``, else the elementwise value."""
        if kernel and f"{op_class}:{kernel}" in self.mem_eff:
            return self.mem_eff[f"{op_class}:{kernel}"]
        return pick(self.mem_eff, (op_class, "bwd" if backward else "fwd", dtype), self.mem_eff["elementwise"])


def lookup(table: dict[str, float], op_class: str, dtype: str, backward: bool, default: float) -> float:
    """The most specific entry of ``table`` for an op: ``class:dir:dtype``, ``class:dir``, ``class``."""
    return pick(table, (op_class, "bwd" if backward else "fwd", dtype), default)


# Fitted on NVIDIA H100 80GB HBM3 (SXM), PyTorch 2.11, by benchmarks/fit_coefficients.py (see there for
# the data and the date). Every value is a fraction of a datasheet peak or a time per event; none
# belongs to a model.
HOPPER = CostCoefficients(
    gemm_eff={'gemm': 0.78, 'gemm:fp8': 0.7, 'misaligned': 0.25, 'gemm:fp32': 0.8033, 'gemm:tf32': 0.8061,
              'gemm:bf16': 0.7311, 'gemm:fp16': 0.7311, 'misaligned:tf32': 0.3281, 'misaligned:bf16:1': 0.2182,
              'misaligned:fp16:1': 0.2182, 'misaligned:bf16:2': 0.3252, 'misaligned:fp16:2': 0.3252,
              'misaligned:bf16:4': 0.3109, 'misaligned:fp16:4': 0.3109, 'mn_major:tf32': 0.7362},
    gemm_k_fill={'gemm': 91.07, 'gemm:fp32': 41.25, 'gemm:tf32': 95.35},
    gemm_tile_eff={'tensor': 8934, 'simt': 1777},
    conv_eff={'conv': 0.8, 'conv:dense:fwd:tf32': 0.7726, 'conv:dense:fwd:bf16': 0.7042,
              'conv:dense:fwd:fp16': 0.6763, 'conv:dense:dgrad:tf32': 0.7034, 'conv:dense:dgrad:bf16': 0.56,
              'conv:dense:dgrad:fp16': 0.5475, 'conv:dense:wgrad:tf32': 0.4662, 'conv:dense:wgrad:bf16': 0.5053,
              'conv:dense:wgrad:fp16': 0.5146, 'conv:dense_3x3:fwd:tf32': 1.107, 'conv:dense_3x3:fwd:bf16': 0.9144,
              'conv:dense_3x3:fwd:fp16': 0.858, 'conv:dense_3x3:dgrad:tf32': 0.6441,
              'conv:dense_3x3:dgrad:bf16': 0.5358, 'conv:dense_3x3:dgrad:fp16': 0.6284,
              'conv:dense_3x3:wgrad:tf32': 0.4962, 'conv:dense_3x3:wgrad:bf16': 0.5901,
              'conv:dense_3x3:wgrad:fp16': 0.5215, 'conv:pointwise:fwd:tf32': 0.6263,
              'conv:pointwise:fwd:bf16': 0.9869, 'conv:pointwise:fwd:fp16': 0.9864,
              'conv:pointwise:dgrad:tf32': 0.5025, 'conv:pointwise:dgrad:bf16': 0.5076,
              'conv:pointwise:dgrad:fp16': 0.5059, 'conv:pointwise:wgrad:tf32': 0.6397,
              'conv:pointwise:wgrad:bf16': 0.6669, 'conv:pointwise:wgrad:fp16': 0.6732,
              'conv:strided_pointwise:fwd:tf32': 0.97, 'conv:strided_pointwise:fwd:bf16': 0.9342,
              'conv:strided_pointwise:fwd:fp16': 0.933, 'conv:strided_pointwise:dgrad:tf32': 0.9235,
              'conv:strided_pointwise:dgrad:bf16': 1.001, 'conv:strided_pointwise:dgrad:fp16': 0.9915,
              'conv:strided_pointwise:wgrad:tf32': 0.8, 'conv:strided_pointwise:wgrad:bf16': 0.8,
              'conv:strided_pointwise:wgrad:fp16': 0.8, 'conv:grouped:fwd:tf32': 0.5536,
              'conv:grouped:fwd:bf16': 0.5983, 'conv:grouped:fwd:fp16': 0.6054, 'conv:grouped:dgrad:tf32': 0.5248,
              'conv:grouped:dgrad:bf16': 0.3474, 'conv:grouped:dgrad:fp16': 0.3427,
              'conv:grouped:wgrad:tf32': 0.2987, 'conv:grouped:wgrad:bf16': 0.3599,
              'conv:grouped:wgrad:fp16': 0.3609},
    attention_eff={'attention': 0.5, 'attention:fwd:fp32': 0.8228, 'attention:fwd:bf16': 1.016,
                   'attention:fwd:fp16': 1.003, 'attention:bwd:fp32': 0.7856, 'attention:bwd:bf16': 0.7305,
                   'attention:bwd:fp16': 0.7275},
    mem_eff={'elementwise': 0.8926, 'cast': 0.85, 'reduction': 0.918, 'norm': 0.6, 'batch_norm': 0.4,
             'batch_norm_native': 0.3, 'pool': 0.5, 'embedding': 0.3, 'conv_dw': 0.3, 'conv': 0.6, 'gemm': 0.5625,
             'attention': 0.8, 'recurrent': 0.8, 'conv_bias:fwd': 0.687, 'conv_bias:bwd': 0.477,
             'cast:narrowing': 0.9026, 'cast:widening': 0.5855, 'embedding:fwd': 0.8462, 'embedding:bwd': 0.07705,
             'norm:fwd': 0.6537, 'norm:bwd': 0.3661, 'batch_norm:fwd': 0.5504, 'batch_norm:bwd': 0.431,
             'batch_norm_native:fwd': 0.5746, 'batch_norm_native:bwd': 0.5755, 'conv:dense:fwd': 0.5255,
             'conv:dense:bwd': 0.5142, 'conv:dense_3x3:fwd': 0.6, 'conv:dense_3x3:bwd': 0.6,
             'conv:pointwise:fwd': 0.8212, 'conv:pointwise:bwd': 0.826, 'conv:strided_pointwise:fwd': 0.5215,
             'conv:strided_pointwise:bwd': 0.2482, 'conv:grouped:fwd': 0.2557, 'conv:grouped:bwd': 0.1851,
             'conv_dw:fwd': 0.2618, 'conv_dw:bwd': 0.1078, 'conv_dw:fwd:cudnn': 0.3506,
             'conv_dw:bwd:cudnn': 0.1972, 'pool:fwd': 0.6009, 'pool:bwd': 0.208, 'elementwise:strided_cat': 0.4005,
             'reduction:columns': 0.5596},
    kernel_floor_s=6.216e-06,
    host_op_s={'forward': 8.747e-06, 'backward': 2e-05, 'optimizer': 8.497e-06},
    host_view_s=2.48e-06,
    host_module_s=9.43e-06,
    host_param_s={'ptp.optimizer_python': 1.937e-05, 'ptp.zero_grad': 1.5e-06},
    host_launch_s=4.009e-06,
    launch_latency_s=3.995e-06,
    sync_s=1.5e-05,
    host_step_s=8.244e-05,
    compute_eff={'conv_dw': 0.03, 'conv_dw:fwd:fp32': 0.04552, 'conv_dw:fwd:bf16': 0.04282,
                 'conv_dw:fwd:fp16': 0.04113, 'conv_dw:bwd:fp32': 0.02479, 'conv_dw:bwd:bf16': 0.02413,
                 'conv_dw:bwd:fp16': 0.02342, 'conv_dw:fwd:cudnn': 0.07906, 'conv_dw:bwd:cudnn': 0.08361,
                 'conv_dw:wgrad:cudnn:fp32': 0.0057},
    latency_s={'recurrent': 0.0005, 'conv': 2e-06, 'attention': 2e-06, 'norm': 2e-06, 'norm_row': 5e-08,
               'batch_norm': 2e-06, 'batch_norm_native': 2e-06, 'reduction': 1.209e-05, 'conv_dw': 2e-06,
               'norm:fwd': 2.797e-06, 'norm:bwd': 2.037e-06, 'norm_row:fwd': 1.63e-07, 'norm_row:bwd': 5e-08,
               'batch_norm:fwd': 2.031e-06, 'batch_norm:bwd': 2.008e-06, 'batch_norm_native:fwd': 2.165e-06,
               'batch_norm_native:bwd': 1.988e-06, 'conv:dense:fwd': 2.075e-06, 'conv:dense:bwd': 2.354e-06,
               'conv:dense_3x3:fwd': 2.134e-06, 'conv:dense_3x3:bwd': 2.164e-06, 'conv:pointwise:fwd': 2.194e-06,
               'conv:pointwise:bwd': 2.437e-06, 'conv:strided_pointwise:fwd': 2.128e-06,
               'conv:strided_pointwise:bwd': 2.092e-06, 'conv:grouped:fwd': 1.973e-06,
               'conv:grouped:bwd': 2.302e-06, 'conv:grouped:per_group': 7.069e-06, 'conv_dw:fwd:cudnn': 2.767e-06,
               'conv_dw:bwd:cudnn': 2.072e-06, 'conv_dw:fwd': 1.932e-06, 'conv_dw:bwd': 2.413e-06,
               'attention:fwd': 2.373e-05, 'attention:bwd': 2.085e-06, 'recurrent:fwd': 0.0001342,
               'recurrent:bwd': 0.001418},
    recurrent={'persistent_max_hidden': 128, 'step_s:standard': 2e-05, 'step_s:persistent': 3e-06,
               'l2_fraction': 0.5, 'step_s:standard:fwd': 1.518e-05, 'step_s:standard:bwd': 1.936e-05,
               'step_s:persistent:fwd': 1.532e-06, 'step_s:persistent:bwd': 1.884e-06,
               'step_s:standard:fwd:bf16': 1.687e-05, 'step_s:standard:bwd:bf16': 2.126e-05},
    host_call_s={'backward': 0.00013, 'autocast': 4.095e-05},
    host_class_s={'gemm': 8.787e-06, 'conv': 2.197e-05, 'attention': 3.119e-05, 'recurrent': 0.0001882,
                  'norm': 1.269e-05},
    source='fitted by benchmarks/fit_coefficients.py on 2026-11-29: ops.jsonl and ops_recurrent_2026-11-26.jsonl (op level) and steps.jsonl (per-step host constants), H100 SXM',
    extra={'attention_key_fill': 322.2, 'attention_dim_fill': 47.25, 'attention_dropout_cost': 0.4,
           'conv_layout_passes': 1, 'reference_small_op_s': 1.085e-05, 'batch_norm_channels_half': 32,
           'batch_norm_native_channels_half': 32, 'batch_norm_run_half': 32, 'batch_norm_native_run_half': 32,
           'host_scale': 1.431, 'reference_bw_gbs': 3352.0, 'reference_sm_count': 132.0,
           'batch_norm_channels_half:fwd': 67.65, 'batch_norm_channels_half:bwd': 106.8,
           'batch_norm_native_channels_half:fwd': 172.9, 'batch_norm_native_channels_half:bwd': 249.4,
           'batch_norm_run_half:fwd': 35.42, 'batch_norm_run_half:bwd': 30.78,
           'batch_norm_native_run_half:fwd': 108.1, 'batch_norm_native_run_half:bwd': 30.95,
           'conv_layout_passes:dense:fwd:tf32': 0.9381, 'conv_layout_passes:dense:fwd:bf16': 1.32,
           'conv_layout_passes:dense:fwd:fp16': 1.268, 'conv_layout_passes:dense:bwd:tf32': 1.644,
           'conv_layout_passes:dense:bwd:bf16': 1.332, 'conv_layout_passes:dense:bwd:fp16': 1.335,
           'conv_layout_passes:dense_3x3:fwd:tf32': 1.299, 'conv_layout_passes:dense_3x3:fwd:bf16': 1.24,
           'conv_layout_passes:dense_3x3:fwd:fp16': 1.092, 'conv_layout_passes:dense_3x3:bwd:tf32': 1.307,
           'conv_layout_passes:dense_3x3:bwd:bf16': 1.319, 'conv_layout_passes:dense_3x3:bwd:fp16': 1.344,
           'conv_layout_passes:pointwise:fwd:bf16': 1.329, 'conv_layout_passes:pointwise:fwd:fp16': 1.046,
           'conv_layout_passes:pointwise:bwd:bf16': 1.027, 'conv_layout_passes:pointwise:bwd:fp16': 1.016,
           'conv_layout_passes:strided_pointwise:fwd:tf32': 0.6618,
           'conv_layout_passes:strided_pointwise:fwd:bf16': 1.328,
           'conv_layout_passes:strided_pointwise:fwd:fp16': 1.354,
           'conv_layout_passes:strided_pointwise:bwd:tf32': 0.7877,
           'conv_layout_passes:strided_pointwise:bwd:bf16': 1.122,
           'conv_layout_passes:strided_pointwise:bwd:fp16': 1.329, 'conv_layout_passes:grouped:fwd:tf32': 0.864,
           'conv_layout_passes:grouped:fwd:bf16': 1.88, 'conv_layout_passes:grouped:fwd:fp16': 1.894,
           'conv_layout_passes:grouped:bwd:tf32': 1.523, 'conv_layout_passes:grouped:bwd:bf16': 1.582,
           'conv_layout_passes:grouped:bwd:fp16': 1.478, 'attention_key_fill:fp32': 80.21,
           'attention_dim_fill:fp32': 33.19, 'attention_dropout_cost:bwd:bf16': 0.2165,
           'attention_dropout_cost:bwd:fp16': 0.1963, 'attention_dropout_cost:bwd:fp32': 0.0409,
           'attention_dropout_cost:fwd:bf16': 0.7211, 'attention_dropout_cost:fwd:fp16': 0.6812,
           'attention_dropout_cost:fwd:fp32': 0.2532},
)


BY_ARCH: dict[str, CostCoefficients] = {"hopper": HOPPER}


def coefficients_for(arch: str) -> CostCoefficients:
    """Coefficients for an architecture; unmeasured ones borrow Hopper's fractions of peak."""
    return BY_ARCH.get(arch, HOPPER)
