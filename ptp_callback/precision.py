"""Training precision settings: what a Lightning precision string means for each op class.

A precision describes the *training run*, not the model as given: under ``bf16-true`` the
parameters and floating-point inputs are cast to bf16 (as Lightning's ``HalfPrecision`` plugin
does), under ``*-mixed`` the forward runs in ``torch.autocast`` and ``16-mixed`` adds a
``GradScaler``. TF32 is not a precision string in Lightning: it comes from
``torch.get_float32_matmul_precision()`` (matmuls) and ``torch.backends.cudnn.allow_tf32``
(convolutions), read when the spec is built unless given explicitly.

>>> spec = PrecisionSpec.from_setting("bf16-mixed")
>>> spec.autocast_dtype, spec.param_dtype
(torch.bfloat16, torch.float32)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .devices import DeviceSpec

# Names people type for a precision that are not Lightning's, and what to pass instead.
_MEANT: dict[str, str] = {
    "fp16": "16-mixed (autocast to fp16) or 16-true (fp16 weights)",
    "half": "16-mixed (autocast to fp16) or 16-true (fp16 weights)",
    "bfloat16": "bf16-mixed (autocast to bf16) or bf16-true (bf16 weights)",
    "fp32": "32-true", "float32": "32-true", "float": "32-true",
    "tf32": "32-true with TF32 matmuls: torch.set_float32_matmul_precision('high'), or "
            "PrecisionSpec.from_setting('32-true', matmul_tf32=True)",
    "mixed": "bf16-mixed or 16-mixed",
}


def _did_you_mean(raw: str) -> str:
    """``"; for fp16 pass ..."`` for a name people type, or a close Lightning name, else ``""``."""
    import difflib

    if raw in _MEANT:
        return f"; for {raw} pass {_MEANT[raw]}"
    close = difflib.get_close_matches(raw, PRECISIONS, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


# Lightning's accepted aliases (lightning/fabric/plugins/precision/precision.py).
_ALIASES: dict[str, str] = {
    "64": "64-true",
    "32": "32-true",
    "16": "16-mixed",
    "bf16": "bf16-mixed",
    "32-tf32": "32-true",  # the ground-truth data's name for 32-true with TF32 matmuls
}

PRECISIONS: tuple[str, ...] = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true")


@dataclass(frozen=True)
class PrecisionSpec:
    """What one training precision does to dtypes.

    ``param_dtype`` is the dtype of parameters and floating inputs; ``autocast_dtype`` the
    lower-precision dtype of autocast (``None`` without autocast); ``grad_scaler`` whether a
    ``GradScaler`` runs; ``matmul_tf32`` / ``conv_tf32`` whether fp32 matmuls / convolutions
    may use TF32 tensor cores.
    """

    name: str
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    grad_scaler: bool
    matmul_tf32: bool
    conv_tf32: bool

    @classmethod
    def from_setting(
        cls,
        precision: str | int,
        *,
        matmul_tf32: bool | None = None,
        conv_tf32: bool | None = None,
    ) -> PrecisionSpec:
        """Build the spec for a Lightning precision string (or alias), reading TF32 flags now.

        ``"32-tf32"`` is accepted as ``"32-true"`` with TF32 matmuls (the naming of
        ``benchmarks/data/steps.jsonl``); explicit ``matmul_tf32`` / ``conv_tf32`` override the flags.
        """
        raw = str(precision).strip().lower()
        if raw == "32-tf32" and matmul_tf32 is None:
            matmul_tf32 = True
        name = _ALIASES.get(raw, raw)
        if name not in PRECISIONS:
            raise ValueError(
                f"precision={precision!r} is not a known precision; expected one of "
                f"{', '.join(PRECISIONS)} (or the aliases 64, 32, 16, bf16){_did_you_mean(raw)}"
            )
        if matmul_tf32 is None:
            matmul_tf32 = torch.get_float32_matmul_precision() != "highest"
        if conv_tf32 is None:
            conv_tf32 = bool(torch.backends.cudnn.allow_tf32)
        param_dtype = {
            "64-true": torch.float64,
            "16-true": torch.float16,
            "bf16-true": torch.bfloat16,
        }.get(name, torch.float32)
        autocast_dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(name)
        return cls(
            name=name,
            param_dtype=param_dtype,
            autocast_dtype=autocast_dtype,
            grad_scaler=name == "16-mixed",
            matmul_tf32=matmul_tf32,
            conv_tf32=conv_tf32,
        )

    @property
    def label(self) -> str:
        """The name users know, with TF32 spelled out where it changes fp32 matmuls."""
        if self.name == "32-true" and self.matmul_tf32:
            return "32-true+tf32"
        return self.name

    def with_tf32(self, matmul: bool, conv: bool | None = None) -> PrecisionSpec:
        """The same precision with other TF32 flags."""
        return replace(self, matmul_tf32=matmul, conv_tf32=self.conv_tf32 if conv is None else conv)

    def on_target(self, target_type: str) -> PrecisionSpec:
        """This precision as a ``target_type`` ("cpu" or "cuda") device runs it: TF32 is a GPU
        matter, and torch's flags (cuDNN allows it by default) say nothing of a CPU's oneDNN
        kernels, which run fp32 as fp32."""
        return self.with_tf32(False, False) if target_type == "cpu" else self


def as_precision(precision: str | int | PrecisionSpec, **tf32: bool | None) -> PrecisionSpec:
    """Accept a spec as is, or build one from a precision string."""
    if isinstance(precision, PrecisionSpec):
        return precision
    return PrecisionSpec.from_setting(precision, **tf32)


def weights_precision(model: torch.nn.Module) -> str:
    """What a loop without autocast trains ``model`` at: ``bf16-true`` / ``16-true`` when every
    floating-point parameter is in that dtype, else ``32-true`` (under which the trace keeps each
    parameter's own dtype)."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return {frozenset((torch.bfloat16,)): "bf16-true", frozenset((torch.float16,)): "16-true"}.get(
        frozenset(dtypes), "32-true")


# GPU generations without bf16 tensor cores (bf16 came with Ampere).
_BEFORE_BF16 = frozenset(("volta", "turing", "pascal", "maxwell", "kepler"))


def support_notes(spec: PrecisionSpec, device: DeviceSpec) -> tuple[str, ...]:
    """What ``device`` cannot run fast in this precision, and how it is predicted instead.

    bf16 before Ampere (V100, T4) has no tensor cores: PyTorch still runs it, its matrix math at
    no more than the fp32 CUDA-core rate, and that is what is predicted. TF32 before Ampere does
    nothing: fp32 matmuls stay on CUDA cores.
    """
    if device.arch == "cpu":
        return ()
    notes = []
    dtypes = {spec.param_dtype, spec.autocast_dtype}
    if torch.bfloat16 in dtypes and not device.peak_tflops.get("bf16"):
        faster = "16-mixed" if spec.autocast_dtype is not None else "16-true"
        if device.arch in _BEFORE_BF16:
            notes.append(f"{spec.label} is not supported at speed on {device.name}: it has no bf16 tensor cores "
                         f"(bf16 needs Ampere or newer), so bf16 matrix math is predicted at the fp32 rate, as it "
                         f"would run" + (f"; {faster} uses its fp16 tensor cores" if device.peak_tflops.get("fp16")
                                          else ""))
        else:  # a registered spec that names no bf16 rate: not a property of the GPU
            notes.append(f"{device.name}'s DeviceSpec gives no bf16 peak (peak_tflops['bf16']): bf16 matrix math is "
                         "predicted at its fp32 rate; add the datasheet's bf16 rate for a prediction at speed")
    if spec.matmul_tf32 and spec.param_dtype == torch.float32 and spec.autocast_dtype is None \
            and not device.peak_tflops.get("tf32"):
        notes.append(f"TF32 has no effect on {device.name} (it needs Ampere or newer): fp32 matmuls are "
                     f"predicted on CUDA cores")
    return tuple(notes)
