"""Typed table of GPU specs (peak FLOP/s per dtype, memory bandwidth) with lookup.

The predictor needs two numbers per GPU and dtype: the dense peak math rate and
the DRAM bandwidth. This module keeps them as data, one frozen ``DeviceSpec``
per GPU, and finds the right entry from whatever the user has at hand: a short
key, the string ``torch.cuda.get_device_name()`` returns, or a ``torch.device``.

Conventions for the numbers in the table:

* Peaks are DENSE TFLOP/s. NVIDIA datasheets print tensor-core peaks "with
  sparsity" (asterisked); those are halved here, because training never hits
  the 2:4 structured-sparsity path.
* ``fp16``/``bf16`` are tensor-core rates with FP32 accumulate (what PyTorch
  uses); ``tf32`` is the tensor-core TF32 rate; ``fp32`` is the CUDA-core rate;
  ``fp64`` the non-tensor FP64 rate and ``fp64_tc`` the FP64 tensor-core rate.
* A missing key means the GPU has no fast path for that dtype (no ``bf16`` on
  V100/T4, no ``fp8`` before Hopper/Ada), so ``peak()`` returns ``None``.
* Bandwidth is the datasheet DRAM number in GB/s (1 GB = 1e9 bytes).
* ``interconnect_gbs`` is GPU-to-GPU bandwidth per direction: half the datasheet's bidirectional
  NVLink figure (H100/H200 SXM 900 -> 450, H100 NVL bridge 600 -> 300, A100 SXM 600 -> 300, V100
  SXM2 300 -> 150, B200 1800 -> 900), else the PCIe slot (Gen5 x16 64, Gen4 32, Gen3 16 GB/s).

Example::

    >>> from ptp_callback.devices import get_device
    >>> spec = get_device("NVIDIA H100 80GB HBM3")
    >>> spec.key, spec.peak("bf16"), spec.peak("fp8")
    ('h100-sxm', 989.4, 1978.9)
    >>> get_device("a100_sxm_40gb").memory_bw_gbs
    1555.0
    >>> get_device("v100-sxm2-16gb").peak("bf16") is None
    True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

__all__ = [
    "DTYPE_KEYS",
    "DeviceSpec",
    "UnknownDeviceError",
    "get_device",
    "known_devices",
    "register_device",
    "unregister_device",
]

#: Dtype keys a ``DeviceSpec.peak_tflops`` mapping may use.
DTYPE_KEYS: frozenset[str] = frozenset({"fp64", "fp64_tc", "fp32", "tf32", "fp16", "bf16", "fp8"})

# Spellings people (and torch.dtype's str()) use for the keys above.
_DTYPE_ALIASES: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
}


class UnknownDeviceError(ValueError):
    """No table entry matches the device the user asked for (or several do)."""


def _normalize_key(text: str) -> str:
    """``"H100_SXM"`` / ``"h100 sxm"`` -> ``"h100-sxm"``."""
    return re.sub(r"[\s_]+", "-", text.strip().lower())


def _normalize_name(text: str) -> str:
    """Lowercase, ``_`` -> space, collapse whitespace: what name_patterns see."""
    return re.sub(r"\s+", " ", text.replace("_", " ").strip().lower())


def _dtype_key(dtype: Any) -> str:
    """Map ``"bf16"``, ``"bfloat16"``, ``torch.bfloat16`` ... to a DTYPE_KEYS entry."""
    text = str(dtype).strip().lower().removeprefix("torch.")
    if text.startswith("float8"):  # float8_e4m3fn, float8_e5m2, ...fnuz
        return "fp8"
    key = _DTYPE_ALIASES.get(text, text)
    if key not in DTYPE_KEYS:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPE_KEYS)}")
    return key


@dataclass(frozen=True)
class DeviceSpec:
    """Spec sheet of one GPU model.

    Example::

        >>> spec = DeviceSpec(key="my-gpu", name="My GPU", arch="ampere", sm_count=10,
        ...                   memory_gb=8, memory_bw_gbs=400, l2_mb=4,
        ...                   peak_tflops={"fp32": 10.0, "bf16": 40.0},
        ...                   name_patterns=(r"\\bmy gpu\\b",), sources=("my measurements",))
        >>> spec.peak("bfloat16"), spec.peak("fp8")
        (40.0, None)
    """

    key: str
    name: str
    arch: str
    sm_count: int
    memory_gb: float
    memory_bw_gbs: float
    l2_mb: float
    # hash=False: a mapping is unhashable; the other fields identify the spec.
    peak_tflops: Mapping[str, float] = field(hash=False)
    name_patterns: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    # GPU-to-GPU bandwidth per direction in GB/s (NVLink, else the PCIe slot): what a ring
    # all-reduce between GPUs of one server moves per GPU. None where unknown.
    interconnect_gbs: float | None = None
    _compiled: tuple[re.Pattern[str], ...] = field(
        default=(), init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        # Frozen dataclass: normalise through object.__setattr__ once, here.
        set_ = object.__setattr__
        key = _normalize_key(self.key)
        if not key:
            raise ValueError("DeviceSpec.key must not be empty")
        set_(self, "key", key)
        set_(self, "arch", self.arch.strip().lower())
        # Store plain int/float so reprs and comparisons don't depend on how the caller typed them.
        set_(self, "sm_count", int(self.sm_count))
        for attr in ("memory_gb", "memory_bw_gbs", "l2_mb"):
            set_(self, attr, float(getattr(self, attr)))
        for attr in ("sm_count", "memory_gb", "memory_bw_gbs"):
            if not getattr(self, attr) > 0:
                raise ValueError(f"DeviceSpec {key!r}: {attr} must be > 0")
        if self.l2_mb < 0:
            raise ValueError(f"DeviceSpec {key!r}: l2_mb must be >= 0")

        peaks = dict(self.peak_tflops)
        unknown = set(peaks) - DTYPE_KEYS
        if unknown:
            raise ValueError(
                f"DeviceSpec {key!r}: unknown peak_tflops keys {sorted(unknown)}; "
                f"allowed: {sorted(DTYPE_KEYS)}"
            )
        for dtype, value in peaks.items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"DeviceSpec {key!r}: peak_tflops[{dtype!r}] must be a positive number"
                )
        # fp32 on CUDA cores is the fallback rate for every op, so it must be there.
        if "fp32" not in peaks:
            raise ValueError(f"DeviceSpec {key!r}: peak_tflops must include 'fp32'")
        set_(self, "peak_tflops", MappingProxyType({k: float(v) for k, v in peaks.items()}))

        # Accept lists (easy to write in user code) but store tuples (frozen, hashable); one string
        # is one pattern (tuple() would split it into letters, each matching every GPU's name).
        patterns = (self.name_patterns,) if isinstance(self.name_patterns, str) else tuple(self.name_patterns)
        try:
            compiled = tuple(re.compile(p, re.IGNORECASE) for p in patterns)
        except re.error as exc:
            raise ValueError(f"DeviceSpec {key!r}: bad name pattern: {exc}") from exc
        set_(self, "name_patterns", patterns)
        set_(self, "_compiled", compiled)
        set_(self, "sources", tuple(self.sources))

    @property
    def trace_target(self) -> str:
        """The device type a step predicted for this device is traced for: ``"cpu"`` for a CPU,
        ``"cuda"`` for a GPU (its kernels, autocast policy and optimizer defaults)."""
        return "cpu" if self.arch == "cpu" else "cuda"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A copy for another process (strategy="ddp_spawn" pickles the callback holding the spec) is
        # built again from the fields: pickle cannot copy the read-only view of the peak table.
        return (DeviceSpec, (self.key, self.name, self.arch, self.sm_count, self.memory_gb, self.memory_bw_gbs,
                             self.l2_mb, dict(self.peak_tflops), self.name_patterns, self.sources,
                             self.interconnect_gbs))

    def peak(self, dtype_key: Any) -> float | None:
        """Dense peak in TFLOP/s for ``dtype_key``, or ``None`` if no fast path.

        Accepts the table keys (``"bf16"``), long names (``"bfloat16"``) and
        ``torch.dtype`` objects. Unknown dtype names raise ``ValueError``.
        """
        return self.peak_tflops.get(_dtype_key(dtype_key))

    def peak_flops(self, dtype_key: Any) -> float | None:
        """Dense peak in FLOP/s (not TFLOP/s), or ``None`` if no fast path."""
        tflops = self.peak(dtype_key)
        return None if tflops is None else tflops * 1e12

    @property
    def memory_bw(self) -> float:
        """DRAM bandwidth in bytes/s."""
        return self.memory_bw_gbs * 1e9

    def matches(self, device_name: str) -> bool:
        """True if ``device_name`` (e.g. from ``torch.cuda.get_device_name()``) is this GPU."""
        normalized = _normalize_name(device_name)
        return any(p.search(normalized) for p in self._compiled)


def _all_of(*words: str, without: tuple[str, ...] = ()) -> str:
    r"""Regex: the name has every word (any order, whole words) and none of ``without``.

    Whole-word matching is what keeps "l4" off "l40s", "a10" off "a100"/"a10g"
    and "h200" off "gh200". ``_all_of("a100", "pcie", "80gb")`` ->
    ``^(?=.*\ba100\b)(?=.*\bpcie\b)(?=.*\b80gb\b)``.
    """
    need = "".join(rf"(?=.*\b{w}\b)" for w in words)
    forbid = "".join(rf"(?!.*\b{w}\b)" for w in without)
    return f"^{need}{forbid}"


# fmt: off
# One entry per GPU model. "(unverified)" in a source note marks a number we
# could not check against a copy of the vendor document.
_BUILTIN: tuple[DeviceSpec, ...] = (
    # ---------------------------------------------------------------- Hopper
    DeviceSpec(
        key="h100-sxm", name="NVIDIA H100 SXM5 80GB", arch="hopper",
        interconnect_gbs=450,
        sm_count=132, memory_gb=80, memory_bw_gbs=3352, l2_mb=50,
        peak_tflops={"fp64": 33.5, "fp64_tc": 66.9, "fp32": 66.9, "tf32": 494.7,
                     "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9},
        # torch reports "NVIDIA H100 80GB HBM3"; the PCIe card is HBM2e, the NVL card says NVL.
        name_patterns=(_all_of("h100", "hbm3", without=("pcie", "nvl")), _all_of("h100", "sxm5?")),
        sources=(
            "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), H100 SXM5 column: "
            "132 SMs, 50 MB L2, 3352 GB/s, dense FP64 33.5 / FP64 TC 66.9 / FP32 66.9 / "
            "TF32 494.7 / FP16,BF16 989.4 / FP8 1978.9 TFLOPS",
            "NVIDIA H100 datasheet: 80 GB HBM3, 3.35 TB/s; TF32 989*, BF16 1979*, FP8 3958* "
            "(*sparse, halved here)",
        ),
    ),
    DeviceSpec(
        key="h100-pcie", name="NVIDIA H100 PCIe 80GB", arch="hopper",
        interconnect_gbs=64,
        sm_count=114, memory_gb=80, memory_bw_gbs=2000, l2_mb=50,
        peak_tflops={"fp64": 26.0, "fp64_tc": 51.0, "fp32": 51.0, "tf32": 378.0,
                     "fp16": 756.5, "bf16": 756.5, "fp8": 1513.0},
        name_patterns=(_all_of("h100", "pcie"),),
        sources=(
            "NVIDIA H100 PCIe datasheet / product brief PB-11133: 114 SMs, 50 MB L2, 80 GB HBM2e, "
            "2000 GB/s; FP64 26, FP64 TC 51, FP32 51, TF32 756*, BF16/FP16 1513*, FP8 3026* "
            "(*sparse, halved here)",
        ),
    ),
    DeviceSpec(
        key="h100-nvl", name="NVIDIA H100 NVL 94GB", arch="hopper",
        interconnect_gbs=300,
        sm_count=132, memory_gb=94, memory_bw_gbs=3900, l2_mb=50,
        peak_tflops={"fp64": 30.0, "fp64_tc": 60.0, "fp32": 60.0, "tf32": 417.5,
                     "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5},
        name_patterns=(_all_of("h100", "nvl"),),
        sources=(
            "NVIDIA H100 product page spec table, H100 NVL column (per GPU): FP64 30, FP64 TC 60, "
            "FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341* (*sparse, halved here), 94 GB HBM3, "
            "3.9 TB/s (unverified: not checked against a stored copy)",
            "SM count 132 and L2 50 MB assumed equal to H100 SXM (unverified)",
        ),
    ),
    DeviceSpec(
        key="h200-sxm", name="NVIDIA H200 SXM 141GB", arch="hopper",
        interconnect_gbs=450,
        sm_count=132, memory_gb=141, memory_bw_gbs=4800, l2_mb=50,
        peak_tflops={"fp64": 33.5, "fp64_tc": 66.9, "fp32": 66.9, "tf32": 494.7,
                     "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9},
        # torch reports "NVIDIA H200"; \b keeps "GH200" (Grace Hopper) out.
        name_patterns=(_all_of("h200", without=("nvl",)),),
        sources=(
            "NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s; FP64 34, FP32 67, TF32 989*, "
            "BF16 1979*, FP8 3958* (*sparse) - the same compute figures as H100 SXM, so the "
            "precise dense H100 SXM whitepaper values are used",
            "132 SMs per third-party spec pages (itkb.uw.cz, saulelectric.com); L2 50 MB as H100 "
            "(unverified)",
        ),
    ),
    DeviceSpec(
        key="h200-nvl", name="NVIDIA H200 NVL 141GB", arch="hopper",
        interconnect_gbs=450,
        sm_count=132, memory_gb=141, memory_bw_gbs=4800, l2_mb=50,
        peak_tflops={"fp64": 30.0, "fp64_tc": 60.0, "fp32": 60.0, "tf32": 417.5,
                     "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5},
        name_patterns=(_all_of("h200", "nvl"),),
        sources=(
            "NVIDIA H200 product page spec table, H200 NVL column: FP64 30, FP64 TC 60, FP32 60, "
            "TF32 835*, BF16/FP16 1671*, FP8 3341* (*sparse, halved here), 141 GB HBM3e, 4.8 TB/s "
            "(unverified: not checked against a stored copy)",
            "SM count 132 and L2 50 MB assumed equal to H200 SXM (unverified)",
        ),
    ),
    # ---------------------------------------------------------------- Ampere
    DeviceSpec(
        key="a100-sxm-40gb", name="NVIDIA A100 SXM4 40GB", arch="ampere",
        interconnect_gbs=300,
        sm_count=108, memory_gb=40, memory_bw_gbs=1555, l2_mb=40,
        peak_tflops={"fp64": 9.7, "fp64_tc": 19.5, "fp32": 19.5, "tf32": 156.0,
                     "fp16": 312.0, "bf16": 312.0},
        name_patterns=(_all_of("a100", "sxm4?", "40gb"),),
        sources=(
            "NVIDIA A100 datasheet: FP64 9.7, FP64 TC 19.5, FP32 19.5, TF32 156, BF16/FP16 312 "
            "(dense), 40 GB HBM2 at 1555 GB/s",
            "NVIDIA Ampere GA100 whitepaper: 108 SMs, 40 MB L2 (deviceQuery: 41943040 bytes)",
        ),
    ),
    DeviceSpec(
        key="a100-sxm-80gb", name="NVIDIA A100 SXM4 80GB", arch="ampere",
        interconnect_gbs=300,
        sm_count=108, memory_gb=80, memory_bw_gbs=2039, l2_mb=40,
        peak_tflops={"fp64": 9.7, "fp64_tc": 19.5, "fp32": 19.5, "tf32": 156.0,
                     "fp16": 312.0, "bf16": 312.0},
        name_patterns=(_all_of("a100", "sxm4?", "80gb"),),
        sources=(
            "NVIDIA A100 80GB datasheet, SXM column: 80 GB HBM2e at 2039 GB/s; "
            "compute as A100 40GB",
            "NVIDIA Ampere GA100 whitepaper: 108 SMs, 40 MB L2",
        ),
    ),
    DeviceSpec(
        key="a100-pcie-40gb", name="NVIDIA A100 PCIe 40GB", arch="ampere",
        interconnect_gbs=32,
        sm_count=108, memory_gb=40, memory_bw_gbs=1555, l2_mb=40,
        peak_tflops={"fp64": 9.7, "fp64_tc": 19.5, "fp32": 19.5, "tf32": 156.0,
                     "fp16": 312.0, "bf16": 312.0},
        name_patterns=(_all_of("a100", "pcie", "40gb"),),
        sources=(
            "NVIDIA A100 datasheet, PCIe 40GB column: 40 GB HBM2 at 1555 GB/s; same peak FLOPS "
            "as SXM (sustained clocks are lower at 250 W)",
            "NVIDIA Ampere GA100 whitepaper: 108 SMs, 40 MB L2",
        ),
    ),
    DeviceSpec(
        key="a100-pcie-80gb", name="NVIDIA A100 80GB PCIe", arch="ampere",
        interconnect_gbs=32,
        sm_count=108, memory_gb=80, memory_bw_gbs=1935, l2_mb=40,
        peak_tflops={"fp64": 9.7, "fp64_tc": 19.5, "fp32": 19.5, "tf32": 156.0,
                     "fp16": 312.0, "bf16": 312.0},
        name_patterns=(_all_of("a100", "pcie", "80gb"),),
        sources=(
            "NVIDIA A100 80GB datasheet, PCIe column: 80 GB HBM2e at 1935 GB/s; "
            "compute as A100 SXM",
            "NVIDIA Ampere GA100 whitepaper: 108 SMs, 40 MB L2",
        ),
    ),
    DeviceSpec(
        key="a10", name="NVIDIA A10", arch="ampere",
        interconnect_gbs=32,
        sm_count=72, memory_gb=24, memory_bw_gbs=600, l2_mb=6,
        peak_tflops={"fp64": 0.49, "fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0},
        name_patterns=(_all_of("a10"),),
        sources=(
            "NVIDIA A10 datasheet: FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250* "
            "(*sparse), 24 GB GDDR6 at 600 GB/s",
            "TechPowerUp GA102 A10 PCIe entry: 72 SMs, 6 MB L2; FP64 = 1/64 of FP32 (GA102), "
            "not in the datasheet",
        ),
    ),
    DeviceSpec(
        key="a10g", name="NVIDIA A10G", arch="ampere",
        interconnect_gbs=16,
        sm_count=80, memory_gb=24, memory_bw_gbs=600, l2_mb=6,
        peak_tflops={"fp64": 0.55, "fp32": 35.0, "tf32": 35.0, "fp16": 70.0, "bf16": 70.0},
        name_patterns=(_all_of("a10g"),),
        sources=(
            "AWS-only part, no NVIDIA datasheet. 24 GB GDDR6 at 600 GB/s per Baseten 'NVIDIA A10 "
            "vs A10G' (baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference)",
            "torch.cuda.get_device_properties on an A10G: multi_processor_count=80, L2 6 MB",
            "FP32 35, TF32 35, BF16/FP16 70 TFLOPS (tensor cores at half the A10 rate with FP32 "
            "accumulate; 80 SMs x 1.71 GHz) (unverified: recalled from Baseten's table; a "
            "measured 67 TFLOPS cuBLAS fp16 run on A10G is consistent with it); FP64 = 1/64 FP32 "
            "(unverified)",
        ),
    ),
    # ---------------------------------------------------------- Ada Lovelace
    DeviceSpec(
        key="l40s", name="NVIDIA L40S", arch="ada",
        interconnect_gbs=32,
        sm_count=142, memory_gb=48, memory_bw_gbs=864, l2_mb=96,
        peak_tflops={"fp64": 1.43, "fp32": 91.6, "tf32": 183.0, "fp16": 362.05,
                     "bf16": 362.05, "fp8": 733.0},
        name_patterns=(_all_of("l40s"),),
        sources=(
            "NVIDIA L40S datasheet: FP32 91.6, TF32 183 | 366*, BF16/FP16 362.05 | 733*, "
            "FP8 733 | 1466* (*sparse), 48 GB GDDR6 at 864 GB/s, 142 RT cores (= SMs), "
            "18176 CUDA cores",
            "FP64 1.43 TFLOPS (1/64 of FP32, TechPowerUp, not in datasheet); L2 96 MB = full "
            "AD102 (unverified)",
        ),
    ),
    DeviceSpec(
        key="l40", name="NVIDIA L40", arch="ada",
        interconnect_gbs=32,
        sm_count=142, memory_gb=48, memory_bw_gbs=864, l2_mb=96,
        peak_tflops={"fp64": 1.41, "fp32": 90.5, "tf32": 90.5, "fp16": 181.05,
                     "bf16": 181.05, "fp8": 362.0},
        # \b after "l40" keeps "l40s" out.
        name_patterns=(_all_of("l40"),),
        sources=(
            "NVIDIA L40 datasheet: FP32 90.5, TF32 90.5 | 181*, BF16/FP16 181.05 | 362.1*, "
            "FP8 362 | 724* (*sparse), 48 GB GDDR6 at 864 GB/s, 142 RT cores (= SMs)",
            "FP64 = 1/64 of FP32 (TechPowerUp); L2 96 MB = full AD102 (unverified)",
        ),
    ),
    DeviceSpec(
        key="l4", name="NVIDIA L4", arch="ada",
        interconnect_gbs=32,
        sm_count=58, memory_gb=24, memory_bw_gbs=300, l2_mb=48,
        peak_tflops={"fp64": 0.47, "fp32": 30.3, "tf32": 60.0, "fp16": 121.0,
                     "bf16": 121.0, "fp8": 242.5},
        name_patterns=(_all_of("l4"),),
        sources=(
            "NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, FP8 485* (*sparse, "
            "halved here), 24 GB GDDR6 at 300 GB/s",
            "deviceQuery on an L4: 58 multiprocessors, 7424 CUDA cores, 2040 MHz; L2 48 MB and "
            "FP64 1/64 of FP32 per TechPowerUp",
        ),
    ),
    DeviceSpec(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090", arch="ada",
        interconnect_gbs=32,
        sm_count=128, memory_gb=24, memory_bw_gbs=1008, l2_mb=72,
        peak_tflops={"fp64": 1.29, "fp32": 82.6, "tf32": 82.6, "fp16": 165.2,
                     "bf16": 165.2, "fp8": 330.3},
        # "RTX 4090 D" (China, 114 SMs) and the laptop part (AD103) are different chips.
        name_patterns=(_all_of("rtx 4090", without=("4090 d", "laptop", "mobile")),),
        sources=(
            "NVIDIA Ada Lovelace GPU Architecture whitepaper, Appendix A (GeForce RTX 4090): "
            "128 SMs, 72 MB L2, 24 GB GDDR6X at 1008 GB/s, FP32 82.6, TF32 82.6, "
            "FP16/BF16 165.2 with FP32 accumulate (330.3 with FP16 accumulate; GeForce halves "
            "the FP32-accumulate rate, and PyTorch accumulates in FP32), FP8 330.3 with FP32 "
            "accumulate (660.6 with FP16 accumulate); all dense",
            "FP64 1.29 TFLOPS (1/64 of FP32, TechPowerUp)",
        ),
    ),
    # ---------------------------------------------------------------- Turing
    DeviceSpec(
        key="t4", name="NVIDIA Tesla T4", arch="turing",
        interconnect_gbs=16,
        sm_count=40, memory_gb=16, memory_bw_gbs=320, l2_mb=4,
        peak_tflops={"fp64": 0.25, "fp32": 8.1, "fp16": 65.0},
        name_patterns=(_all_of("t4"),),
        sources=(
            "NVIDIA T4 datasheet: FP32 8.1, mixed precision FP16/FP32 tensor 65 TFLOPS, "
            "16 GB GDDR6 at 320 GB/s; no BF16/TF32/FP8 on Turing",
            "TechPowerUp Tesla T4 entry: 40 SMs, 4 MB L2, FP64 254 GFLOPS (1/32)",
        ),
    ),
    # ----------------------------------------------------------------- Volta
    DeviceSpec(
        key="v100-sxm2-16gb", name="NVIDIA V100 SXM2 16GB", arch="volta",
        interconnect_gbs=150,
        sm_count=80, memory_gb=16, memory_bw_gbs=900, l2_mb=6,
        peak_tflops={"fp64": 7.8, "fp32": 15.7, "fp16": 125.0},
        name_patterns=(_all_of("v100", "sxm2?", "16gb"),),
        sources=(
            "NVIDIA V100 datasheet, SXM2 column: FP64 7.8, FP32 15.7, tensor 125 TFLOPS "
            "(FP16 in, FP32 accumulate at full rate), 900 GB/s HBM2; no BF16/TF32/FP8 on Volta",
            "NVIDIA Volta whitepaper: 80 SMs, 6 MB L2",
        ),
    ),
    DeviceSpec(
        key="v100-sxm2-32gb", name="NVIDIA V100 SXM2 32GB", arch="volta",
        interconnect_gbs=150,
        sm_count=80, memory_gb=32, memory_bw_gbs=900, l2_mb=6,
        peak_tflops={"fp64": 7.8, "fp32": 15.7, "fp16": 125.0},
        name_patterns=(_all_of("v100", "sxm2?", "32gb"),),
        sources=(
            "NVIDIA V100 datasheet, SXM2 column: same compute and 900 GB/s as the 16 GB part",
            "NVIDIA Volta whitepaper: 80 SMs, 6 MB L2",
        ),
    ),
    DeviceSpec(
        key="v100-pcie-16gb", name="NVIDIA V100 PCIe 16GB", arch="volta",
        interconnect_gbs=16,
        sm_count=80, memory_gb=16, memory_bw_gbs=900, l2_mb=6,
        peak_tflops={"fp64": 7.0, "fp32": 14.0, "fp16": 112.0},
        name_patterns=(_all_of("v100", "pcie", "16gb"),),
        sources=(
            "NVIDIA V100 datasheet, PCIe column: FP64 7, FP32 14, tensor 112 TFLOPS, 900 GB/s "
            "(not cross-checked against a stored copy: unverified)",
            "NVIDIA Volta whitepaper: 80 SMs, 6 MB L2",
        ),
    ),
    DeviceSpec(
        key="v100-pcie-32gb", name="NVIDIA V100 PCIe 32GB", arch="volta",
        interconnect_gbs=16,
        sm_count=80, memory_gb=32, memory_bw_gbs=900, l2_mb=6,
        peak_tflops={"fp64": 7.0, "fp32": 14.0, "fp16": 112.0},
        name_patterns=(_all_of("v100", "pcie", "32gb"),),
        sources=(
            "NVIDIA V100 datasheet, PCIe column: FP64 7, FP32 14, tensor 112 TFLOPS, 900 GB/s "
            "(not cross-checked against a stored copy: unverified)",
            "NVIDIA Volta whitepaper: 80 SMs, 6 MB L2",
        ),
    ),
    # ------------------------------------------------------------- Blackwell
    DeviceSpec(
        key="b200", name="NVIDIA B200 (HGX)", arch="blackwell",
        interconnect_gbs=900,
        sm_count=148, memory_gb=180, memory_bw_gbs=7700, l2_mb=126,
        peak_tflops={"fp64": 37.0, "fp64_tc": 37.0, "fp32": 75.0, "tf32": 1100.0,
                     "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
        # \b keeps "GB200" out.
        name_patterns=(_all_of("b200"),),
        sources=(
            "NVIDIA GB200 NVL72 / HGX B200 spec table, HGX B200 per-GPU column: FP64 37, "
            "FP32 75, TF32 2.2 PF*, FP16/BF16 4.5 PF*, FP8 9 PF* (*sparse, halved here), "
            "180 GB HBM3e at 7.7 TB/s (as reproduced at zdszero.github.io)",
            "148 SMs and 126 MB L2 (unverified)",
        ),
    ),
)
# fmt: on

# key -> spec; built-ins first, in table order. register_device() adds or shadows.
_registry: dict[str, DeviceSpec] = {spec.key: spec for spec in _BUILTIN}
_BUILTIN_BY_KEY: dict[str, DeviceSpec] = dict(_registry)
_user_keys: set[str] = set()

_CUDA_STRING = re.compile(r"^cuda(:\d+)?$")


def known_devices() -> list[DeviceSpec]:
    """All specs lookups can return: built-ins (or their overrides), then user additions."""
    return list(_registry.values())


def register_device(spec: DeviceSpec, *, overwrite: bool = False) -> None:
    """Add ``spec`` to the table, so ``get_device`` finds it by key and name patterns.

    Raises ``ValueError`` if the key is taken (built-in or registered) unless
    ``overwrite=True``; overwriting a built-in shadows it until
    ``unregister_device`` is called. Registered specs are matched before
    built-ins, so a user entry can claim a name a built-in also matches.

    Example::

        >>> import ptp_callback.devices as d
        >>> d.register_device(d.DeviceSpec(key="rtx-3090", name="NVIDIA GeForce RTX 3090",
        ...     arch="ampere", sm_count=82, memory_gb=24, memory_bw_gbs=936, l2_mb=6,
        ...     peak_tflops={"fp32": 35.6, "tf32": 35.6, "fp16": 71.0, "bf16": 71.0},
        ...     name_patterns=(r"\\brtx 3090\\b",), sources=("GA102 whitepaper",)))
        >>> d.get_device("NVIDIA GeForce RTX 3090").key
        'rtx-3090'
        >>> d.unregister_device("rtx-3090")
    """
    if not isinstance(spec, DeviceSpec):
        raise TypeError(f"register_device() expects a DeviceSpec, got {type(spec).__name__}")
    if spec.key in _registry and not overwrite:
        raise ValueError(
            f"a device with key {spec.key!r} is already registered "
            f"({_registry[spec.key].name}); pass overwrite=True to replace it"
        )
    _registry[spec.key] = spec
    _user_keys.add(spec.key)


def unregister_device(key: str) -> None:
    """Remove a device added with ``register_device``; a shadowed built-in comes back."""
    key = _normalize_key(key)
    if key not in _user_keys:
        raise KeyError(f"{key!r} was not added with register_device()")
    _user_keys.discard(key)
    if key in _BUILTIN_BY_KEY:
        _registry[key] = _BUILTIN_BY_KEY[key]
    else:
        del _registry[key]


def _unknown(what: str, reason: str = "is not a known GPU") -> UnknownDeviceError:
    keys = ", ".join(_registry)
    return UnknownDeviceError(
        f"{what} {reason}. Known device keys: {keys}. For this machine's CPU, predict_step(device='cpu') "
        "measures it with a probe. To use another GPU, call ptp_callback.register_device(DeviceSpec(key=..., name=..., "
        "arch=..., sm_count=..., memory_gb=..., memory_bw_gbs=..., l2_mb=..., peak_tflops={...}, "
        "name_patterns=(...,), sources=(...,))) or pass a DeviceSpec directly as device=."
    )


def _match_name(name: str, what: str) -> DeviceSpec:
    """Find the single spec whose name_patterns match ``name``; user entries win."""
    user = [s for k, s in _registry.items() if k in _user_keys]
    builtin = [s for k, s in _registry.items() if k not in _user_keys]
    for tier in (user, builtin):
        hits = [s for s in tier if s.matches(name)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            # Never guess between two specs: say which ones collided.
            raise _unknown(what, "matches several devices (" + ", ".join(s.key for s in hits) + ")")
    raise _unknown(what)


def _from_torch_device(device: Any) -> DeviceSpec:
    import torch  # lazy: this module must import without torch

    if device.type != "cuda":
        raise _unknown(repr(device), "is not a CUDA device")
    if not torch.cuda.is_available():
        raise _unknown(repr(device), "cannot be identified because CUDA is not available")
    index = device.index if device.index is not None else torch.cuda.current_device()
    reported = torch.cuda.get_device_name(index)
    return _match_name(reported, f"{device!r} (reported as {reported!r})")


def get_device(device: Any) -> DeviceSpec:
    """Return the spec for ``device``.

    ``device`` may be a ``DeviceSpec`` (returned as is), a short key
    (``"h100-sxm"``, case-insensitive, ``_`` or spaces for ``-``), a
    ``torch.cuda.get_device_name()`` string (``"NVIDIA A100-SXM4-80GB"``),
    ``"cuda"``/``"cuda:N"``, or a CUDA ``torch.device``. Raises
    ``UnknownDeviceError`` rather than substituting a different GPU.

    Example::

        >>> get_device("NVIDIA A100 80GB PCIe").memory_bw_gbs
        1935.0
        >>> get_device("H100_PCIe").key
        'h100-pcie'
    """
    if isinstance(device, DeviceSpec):
        return device
    if isinstance(device, str):
        spec = _registry.get(_normalize_key(device))
        if spec is not None:
            return spec
        if _CUDA_STRING.match(device.strip().lower()):
            import torch

            return _from_torch_device(torch.device(device.strip().lower()))
        return _match_name(device, repr(device))
    if type(device).__module__ == "torch" and type(device).__name__ == "device":
        return _from_torch_device(device)
    raise TypeError(
        f"get_device() expects a device key, a GPU name, a torch.device or a DeviceSpec, "
        f"got {type(device).__name__}"
    )
