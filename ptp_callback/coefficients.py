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
    gemm_eff={'gemm': 0.78, 'gemm:fp8': 0.7, 'misaligned': 0.25, 'gemm:fp32': 0.8236, 'gemm:tf32': 0.752,
              'gemm:bf16': 0.7649, 'gemm:fp16': 0.77, 'misaligned:tf32': 0.3531, 'misaligned:bf16:1': 0.2043,
              'misaligned:bf16:2': 0.2969, 'misaligned:bf16:4': 0.2829, 'misaligned:fp16:1': 0.2101,
              'misaligned:fp16:2': 0.2953, 'misaligned:fp16:4': 0.302},
    gemm_k_fill={'gemm': 94.78, 'gemm:fp32': 48.92, 'gemm:tf32': 100.1},
    gemm_tile_eff={'tensor': 6793, 'simt': 2499},
    conv_eff={'conv': 0.8, 'conv:dense:fwd:tf32': 0.7571, 'conv:dense:fwd:bf16': 0.528,
              'conv:dense:fwd:fp16': 0.501, 'conv:dense:dgrad:tf32': 1.059, 'conv:dense:dgrad:bf16': 0.6791,
              'conv:dense:dgrad:fp16': 0.6455, 'conv:dense:wgrad:tf32': 0.3896, 'conv:dense:wgrad:bf16': 0.3731,
              'conv:dense:wgrad:fp16': 0.3568, 'conv:pointwise:fwd:tf32': 0.7849, 'conv:pointwise:fwd:bf16': 1.02,
              'conv:pointwise:fwd:fp16': 0.9979, 'conv:pointwise:dgrad:tf32': 0.6362,
              'conv:pointwise:dgrad:bf16': 0.5835, 'conv:pointwise:dgrad:fp16': 0.5479,
              'conv:pointwise:wgrad:tf32': 0.6095, 'conv:pointwise:wgrad:bf16': 0.6433,
              'conv:pointwise:wgrad:fp16': 0.6149, 'conv:strided_pointwise:fwd:tf32': 0.8237,
              'conv:strided_pointwise:fwd:bf16': 0.8368, 'conv:strided_pointwise:fwd:fp16': 0.8406,
              'conv:strided_pointwise:dgrad:tf32': 0.4316, 'conv:strided_pointwise:dgrad:bf16': 0.6457,
              'conv:strided_pointwise:dgrad:fp16': 0.4665, 'conv:strided_pointwise:wgrad:tf32': 0.708,
              'conv:strided_pointwise:wgrad:bf16': 0.7462, 'conv:strided_pointwise:wgrad:fp16': 0.7095,
              'conv:grouped:fwd:tf32': 1.268, 'conv:grouped:fwd:bf16': 1.126, 'conv:grouped:fwd:fp16': 1.106,
              'conv:grouped:dgrad:tf32': 0.8616, 'conv:grouped:dgrad:bf16': 0.5658,
              'conv:grouped:dgrad:fp16': 0.563, 'conv:grouped:wgrad:tf32': 0.7213,
              'conv:grouped:wgrad:bf16': 0.6843, 'conv:grouped:wgrad:fp16': 0.6761, 'channel_align:32': 1.055,
              'channel_align:16': 0.874, 'channel_align:1': 0.569},
    attention_eff={'attention': 0.5, 'attention:fwd:fp32': 0.8612, 'attention:fwd:bf16': 0.9146,
                   'attention:fwd:fp16': 0.9075, 'attention:bwd:fp32': 0.7404, 'attention:bwd:bf16': 0.6197,
                   'attention:bwd:fp16': 0.6142},
    mem_eff={'elementwise': 0.882, 'cast': 0.674, 'reduction': 0.9067, 'norm': 0.6, 'batch_norm': 0.4,
             'batch_norm_native': 0.3, 'pool': 0.5, 'embedding': 0.3, 'optimizer': 0.75, 'scaler': 0.7,
             'conv_dw': 0.3, 'conv': 0.6, 'gemm': 0.5595, 'attention': 0.8, 'recurrent': 0.8, 'embedding:fwd': 1,
             'embedding:bwd': 0.07543, 'norm:fwd': 0.8167, 'norm:bwd': 0.3677, 'batch_norm:fwd': 0.5071,
             'batch_norm:bwd': 0.322, 'batch_norm_native:fwd': 0.4722, 'batch_norm_native:bwd': 0.3726,
             'conv:dense:fwd': 0.6457, 'conv:dense:bwd': 0.6, 'conv:pointwise:fwd': 1, 'conv:pointwise:bwd': 0.865,
             'conv:strided_pointwise:fwd': 0.8345, 'conv:strided_pointwise:bwd': 0.4771,
             'conv:grouped:fwd': 0.8123, 'conv:grouped:bwd': 0.6, 'conv_dw:fwd': 0.4814, 'conv_dw:bwd': 0.1667},
    kernel_floor_s=5.972e-06,
    host_op_s={'forward': 8.926e-06, 'backward': 2e-05, 'optimizer': 8.429e-06},
    host_view_s=3.252e-06,
    host_module_s=9.109e-06,
    host_param_s={'ptp.optimizer_python': 6.45e-06, 'ptp.zero_grad': 1.5e-06},
    host_launch_s=4.052e-06,
    launch_latency_s=3.999e-06,
    sync_s=1.5e-05,
    host_step_s=9.705e-05,
    compute_eff={'conv_dw': 0.03, 'conv_dw:fwd:fp32': 0.03743, 'conv_dw:fwd:bf16': 0.03612,
                 'conv_dw:fwd:fp16': 0.05427, 'conv_dw:bwd:fp32': 0.01823, 'conv_dw:bwd:bf16': 0.01774,
                 'conv_dw:bwd:fp16': 0.03503},
    latency_s={'recurrent': 0.0005, 'conv': 2e-06, 'attention': 2e-06, 'norm': 2e-06, 'norm_row': 5e-08,
               'batch_norm': 2e-06, 'batch_norm_native': 2e-06, 'reduction': 1.078e-05, 'conv_dw': 2e-06,
               'norm:fwd': 1.65e-05, 'norm:bwd': 2.006e-06, 'norm_row:fwd': 6.75e-08, 'norm_row:bwd': 5e-08,
               'batch_norm:fwd': 2e-06, 'batch_norm:bwd': 2.003e-06, 'batch_norm_native:fwd': 2.07e-06,
               'batch_norm_native:bwd': 1.999e-06, 'conv:dense:fwd': 5.837e-06, 'conv:dense:bwd': 3.78e-06,
               'conv:pointwise:fwd': 2.035e-06, 'conv:pointwise:bwd': 2.334e-06,
               'conv:strided_pointwise:fwd': 2.17e-06, 'conv:strided_pointwise:bwd': 2.419e-06,
               'conv:grouped:fwd': 1.981e-06, 'conv:grouped:bwd': 2.346e-06, 'conv:grouped:per_group': 1.004e-05,
               'conv_dw:fwd': 2.648e-06, 'conv_dw:bwd': 4.559e-06, 'attention:fwd': 2.449e-05,
               'attention:bwd': 2.018e-06, 'recurrent:fwd': 0.0001521, 'recurrent:bwd': 0.001767},
    recurrent={'persistent_max_hidden': 128, 'step_s:standard': 2e-05, 'step_s:persistent': 3e-06,
               'l2_fraction': 0.5, 'step_s:standard:fwd': 2.466e-05, 'step_s:standard:bwd': 2.912e-05,
               'step_s:persistent:fwd': 1.786e-06, 'step_s:persistent:bwd': 2.505e-06,
               'step_s:standard:fwd:bf16': 2.81e-05, 'step_s:standard:bwd:bf16': 2.73e-05, 'scale:fwd': 0.8711,
               'scale:bwd': 0.8472},
    host_call_s={'backward': 0.0001584, 'autocast': 3.433e-05},
    host_class_s={'gemm': 8.489e-06, 'conv': 2.512e-05, 'attention': 2.856e-05, 'recurrent': 3e-05},
    source='fitted by benchmarks/fit_coefficients.py on 2026-11-23: ops.jsonl (op level) and steps.jsonl (per-step host constants), H100 SXM',
    extra={'attention_key_fill': 248.3, 'attention_dim_fill': 36.57, 'attention_dropout_cost': 0.4,
           'conv_layout_passes': 1, 'reference_small_op_s': 1.085e-05, 'batch_norm_channels_half': 32,
           'batch_norm_native_channels_half': 32, 'batch_norm_run_half': 32, 'batch_norm_native_run_half': 32,
           'host_scale': 1.553, 'batch_norm_channels_half:fwd': 60.66, 'batch_norm_channels_half:bwd': 55.51,
           'batch_norm_native_channels_half:fwd': 112.9, 'batch_norm_native_channels_half:bwd': 106.5,
           'batch_norm_run_half:fwd': 32.88, 'batch_norm_run_half:bwd': 31.72,
           'batch_norm_native_run_half:fwd': 51.04, 'batch_norm_native_run_half:bwd': 31.36,
           'conv_layout_passes:dense:tf32': 1.626, 'conv_layout_passes:dense:bf16': 1.73,
           'conv_layout_passes:dense:fp16': 1.678, 'conv_layout_passes:pointwise:tf32': 0.376,
           'conv_layout_passes:pointwise:bf16': 0.4111, 'conv_layout_passes:pointwise:fp16': 0.393,
           'conv_layout_passes:strided_pointwise:tf32': 0.8897, 'conv_layout_passes:strided_pointwise:bf16': 2.063,
           'conv_layout_passes:strided_pointwise:fp16': 2.215, 'conv_layout_passes:grouped:tf32': 1.005,
           'conv_layout_passes:grouped:bf16': 2.103, 'conv_layout_passes:grouped:fp16': 1.95,
           'attention_key_fill:fp32': 97.63, 'attention_dim_fill:fp32': 29.42},
)


BY_ARCH: dict[str, CostCoefficients] = {"hopper": HOPPER}


def coefficients_for(arch: str) -> CostCoefficients:
    """Coefficients for an architecture; unmeasured ones borrow Hopper's fractions of peak."""
    return BY_ARCH.get(arch, HOPPER)
