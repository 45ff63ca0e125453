"""Tests for ptp_callback.devices: lookup by key/name, errors, registry, table sanity."""

from __future__ import annotations

import math

import pytest

from ptp_callback import devices
from ptp_callback.devices import (
    DTYPE_KEYS,
    DeviceSpec,
    UnknownDeviceError,
    get_device,
    known_devices,
    register_device,
    unregister_device,
)


@pytest.fixture(autouse=True)
def _clean_registry():
    """Undo any register_device() a test made, so tests stay independent."""
    before = set(devices._user_keys)
    yield
    for key in set(devices._user_keys) - before:
        unregister_device(key)


def _spec(key: str = "test-gpu", **overrides) -> DeviceSpec:
    fields = dict(
        key=key,
        name="Test GPU",
        arch="ampere",
        sm_count=10,
        memory_gb=8,
        memory_bw_gbs=400,
        l2_mb=4,
        peak_tflops={"fp32": 10.0, "bf16": 40.0},
        name_patterns=(r"\btest gpu\b",),
        sources=("unit test",),
    )
    fields.update(overrides)
    return DeviceSpec(**fields)


# ------------------------------------------------------------ name lookup

# What torch.cuda.get_device_name() reports on real machines -> expected key.
REAL_NAMES = [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA H200 141GB HBM3e", "h200-sxm"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L40", "l40"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA A10", "a10"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA B200", "b200"),
]


@pytest.mark.parametrize("name, key", REAL_NAMES)
def test_real_device_names(name, key):
    assert get_device(name).key == key


@pytest.mark.parametrize("name, key", REAL_NAMES)
def test_real_device_names_match_exactly_one_spec(name, key):
    # Guards the regex ordering/anchoring: no name may be claimed twice.
    hits = [s.key for s in known_devices() if s.matches(name)]
    assert hits == [key]


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GH200 480GB",  # Grace Hopper: "h200" inside "gh200" must not match
        "NVIDIA GB200",  # "b200" inside "gb200"
        "NVIDIA H100",  # form factor unknown: SXM, PCIe and NVL differ a lot
        "NVIDIA A100",  # 40 vs 80 GB have different bandwidth
        "NVIDIA A100-SXM4",
        "Tesla V100S-PCIE-32GB",  # V100S is a different (faster) part
        "NVIDIA GeForce RTX 4090 D",  # 114 SMs, not the 128-SM 4090
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA GeForce RTX 3090",
        "AMD Instinct MI300X",
        "",
    ],
)
def test_names_that_must_not_match(name):
    with pytest.raises(UnknownDeviceError):
        get_device(name)


def test_every_spec_finds_itself_by_key_and_by_its_name():
    for spec in known_devices():
        assert get_device(spec.key) is spec
        assert get_device(spec.name) is spec, spec.name


def test_every_spec_survives_a_copy_to_another_process():
    import pickle

    # strategy="ddp_spawn" pickles the callback, and the spec it predicts for, into each process
    for spec in known_devices():
        copy = pickle.loads(pickle.dumps(spec))
        assert copy == spec and copy.peak("bf16") == spec.peak("bf16")
        assert copy.interconnect_gbs == spec.interconnect_gbs


# ------------------------------------------------------------- key lookup


@pytest.mark.parametrize(
    "text, key",
    [
        ("h100-sxm", "h100-sxm"),
        ("H100-SXM", "h100-sxm"),
        ("h100_sxm", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("  h100 sxm  ", "h100-sxm"),
        ("A100_SXM_80GB", "a100-sxm-80gb"),
        ("a100 pcie 40gb", "a100-pcie-40gb"),
        ("L4", "l4"),
        ("l40s", "l40s"),
        ("T4", "t4"),
        ("RTX_4090", "rtx-4090"),
        ("v100 sxm2 32gb", "v100-sxm2-32gb"),
        ("H200_NVL", "h200-nvl"),
    ],
)
def test_short_keys_and_variants(text, key):
    assert get_device(text).key == key


def test_devicespec_is_returned_as_is():
    spec = _spec()
    assert get_device(spec) is spec


def test_wrong_type_raises_type_error():
    with pytest.raises(TypeError):
        get_device(3.5)


def test_torch_cpu_device_is_rejected():
    torch = pytest.importorskip("torch")
    with pytest.raises(UnknownDeviceError, match="not a CUDA device"):
        get_device(torch.device("cpu"))


def test_torch_cuda_device_reads_device_name(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA A100-SXM4-40GB")
    assert get_device(torch.device("cuda", 0)).key == "a100-sxm-40gb"
    assert get_device("cuda:0").key == "a100-sxm-40gb"


def test_torch_cuda_device_with_unknown_name_reports_it(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA Mystery 9000")
    with pytest.raises(UnknownDeviceError, match="NVIDIA Mystery 9000"):
        get_device(torch.device("cuda", 1))


# ---------------------------------------------------------------- errors


def test_unknown_name_error_text():
    with pytest.raises(UnknownDeviceError) as info:
        get_device("NVIDIA Quantum Flux 5000")
    message = str(info.value)
    assert "NVIDIA Quantum Flux 5000" in message
    for spec in known_devices():
        assert spec.key in message
    assert "register_device" in message
    assert "DeviceSpec" in message
    assert isinstance(info.value, ValueError)


def test_ambiguous_user_patterns_raise_instead_of_guessing():
    register_device(_spec("gpu-a", name_patterns=(r"\bshared\b",)))
    register_device(_spec("gpu-b", name_patterns=(r"\bshared\b",)))
    with pytest.raises(UnknownDeviceError, match="several devices"):
        get_device("Shared GPU")


# -------------------------------------------------------------- registry


def test_register_device_by_key_and_pattern():
    spec = _spec("my-gpu", name_patterns=(r"\bmy gpu 9000\b",))
    register_device(spec)
    assert get_device("my-gpu") is spec
    assert get_device("MY_GPU") is spec
    assert get_device("Vendor My GPU 9000") is spec
    assert spec in known_devices()


def test_register_duplicate_key_raises():
    register_device(_spec("dup-gpu"))
    with pytest.raises(ValueError, match="already registered"):
        register_device(_spec("dup-gpu"))


def test_register_builtin_key_needs_overwrite_and_can_be_undone():
    original = get_device("h100-sxm")
    with pytest.raises(ValueError, match="overwrite=True"):
        register_device(_spec("h100-sxm"))
    custom = _spec("h100-sxm", name="Throttled H100", name_patterns=(r"\bh100\b.*\bhbm3\b",))
    register_device(custom, overwrite=True)
    assert get_device("h100-sxm") is custom
    # A user entry wins over the built-in for the same reported name.
    assert get_device("NVIDIA H100 80GB HBM3") is custom
    assert sum(s.key == "h100-sxm" for s in known_devices()) == 1
    unregister_device("h100-sxm")
    assert get_device("h100-sxm") is original


def test_unregister_unknown_key_raises():
    with pytest.raises(KeyError):
        unregister_device("t4")  # built-in, never registered by the user


def test_register_rejects_non_spec():
    with pytest.raises(TypeError):
        register_device({"key": "x"})  # type: ignore[arg-type]


# ------------------------------------------------------------- DeviceSpec


def test_devicespec_validation():
    with pytest.raises(ValueError, match="unknown peak_tflops keys"):
        _spec(peak_tflops={"fp32": 1.0, "bfloat": 2.0})
    with pytest.raises(ValueError, match="must include 'fp32'"):
        _spec(peak_tflops={"bf16": 2.0})
    with pytest.raises(ValueError, match="positive"):
        _spec(peak_tflops={"fp32": 0.0})
    with pytest.raises(ValueError, match="sm_count"):
        _spec(sm_count=0)
    with pytest.raises(ValueError, match="bad name pattern"):
        _spec(name_patterns=("(unclosed",))


def test_devicespec_is_frozen_and_normalised():
    spec = _spec("My_GPU", peak_tflops={"fp32": 10, "bf16": 40}, name_patterns=[r"\bx\b"])
    assert spec.key == "my-gpu"
    assert spec.name_patterns == (r"\bx\b",)
    with pytest.raises(Exception):
        spec.key = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.peak_tflops["fp32"] = 1.0  # type: ignore[index]
    hash(spec)  # usable in sets/dicts despite the mapping field


def test_peak_helpers_and_aliases():
    torch = pytest.importorskip("torch")
    h100 = get_device("h100-sxm")
    assert h100.peak("bf16") == h100.peak("bfloat16") == h100.peak(torch.bfloat16)
    assert h100.peak(torch.float8_e4m3fn) == h100.peak("fp8")
    assert h100.peak("float32") == h100.peak("fp32")
    assert h100.peak_flops("bf16") == pytest.approx(h100.peak("bf16") * 1e12)
    assert h100.memory_bw == pytest.approx(h100.memory_bw_gbs * 1e9)
    with pytest.raises(ValueError, match="unknown dtype"):
        h100.peak("int3")


@pytest.mark.parametrize(
    "key, dtype",
    [
        ("v100-sxm2-16gb", "bf16"),
        ("v100-sxm2-16gb", "tf32"),
        ("v100-pcie-16gb", "fp8"),
        ("t4", "bf16"),
        ("t4", "tf32"),
        ("a100-sxm-80gb", "fp8"),
        ("a100-pcie-40gb", "fp8"),
        ("a10g", "fp8"),
        ("l4", "fp64_tc"),
    ],
)
def test_peak_is_none_without_fast_path(key, dtype):
    spec = get_device(key)
    assert spec.peak(dtype) is None
    assert spec.peak_flops(dtype) is None


# ---------------------------------------------------------- table sanity


def test_table_keys_unique_and_normalised():
    keys = [s.key for s in known_devices()]
    assert len(keys) == len(set(keys))
    for key in keys:
        assert key == key.lower() and " " not in key and "_" not in key


@pytest.mark.parametrize("spec", devices._BUILTIN, ids=lambda s: s.key)
def test_every_builtin_spec_is_complete(spec):
    assert spec.sources and all(src.strip() for src in spec.sources)
    assert spec.name_patterns
    assert spec.arch in {"hopper", "ampere", "ada", "turing", "volta", "blackwell"}
    assert spec.peak("fp32") and spec.peak("fp32") > 0
    assert spec.memory_bw_gbs > 0 and spec.memory_gb > 0 and spec.sm_count > 0
    assert set(spec.peak_tflops) <= DTYPE_KEYS
    assert all(math.isfinite(v) and v > 0 for v in spec.peak_tflops.values())


@pytest.mark.parametrize("spec", devices._BUILTIN, ids=lambda s: s.key)
def test_dense_not_sparse_ratios(spec):
    """Catch sparse (2x) numbers sneaking in and dtypes on the wrong GPUs."""
    fp32 = spec.peak("fp32")
    half = spec.peak("bf16") or spec.peak("fp16")
    assert half is not None, "every GPU here has FP16 tensor cores"
    # Dense half-precision tensor rate over the FP32 CUDA-core rate, per architecture.
    # A sparse (2x) figure would blow through these caps (e.g. Hopper 29.6x, A100 32x).
    max_ratio = {
        "hopper": 16, "ampere": 16.5, "ada": 4.5, "volta": 8.5, "turing": 8.5, "blackwell": 31,
    }
    assert 1.9 <= half / fp32 <= max_ratio[spec.arch], half / fp32
    if spec.peak("tf32") is not None:
        # TF32 runs at half the FP16 rate (L40S datasheet rounding: 183 vs 362.05 / 2).
        assert spec.peak("tf32") <= 1.02 * half / 2
    if spec.peak("fp8") is not None:
        assert spec.arch in {"hopper", "ada", "blackwell"}
        assert spec.peak("fp8") == pytest.approx(2 * half, rel=0.05)
    if spec.arch in {"volta", "turing"}:
        assert spec.peak("bf16") is None and spec.peak("tf32") is None
    if spec.arch == "ampere":
        assert spec.peak("fp8") is None
    if spec.peak("fp16") and spec.peak("bf16"):
        assert spec.peak("fp16") == spec.peak("bf16")


def test_reference_values():
    h100 = get_device("h100-sxm")
    assert h100.peak("bf16") < 1000  # dense, not the 1979 sparse datasheet figure
    assert h100.peak("bf16") == pytest.approx(989.4, rel=0.01)
    assert h100.peak("tf32") == pytest.approx(494.7, rel=0.01)
    assert h100.peak("fp8") == pytest.approx(1978.9, rel=0.01)
    assert h100.peak("fp32") == pytest.approx(67, rel=0.02)
    assert h100.peak("fp64") == pytest.approx(34, rel=0.02)
    assert (h100.memory_bw_gbs, h100.sm_count, h100.l2_mb, h100.memory_gb) == (3352, 132, 50, 80)

    pcie = get_device("h100-pcie")
    assert pcie.peak("bf16") == pytest.approx(756, rel=0.01)
    assert pcie.peak("fp8") == pytest.approx(1513, rel=0.01)
    assert (pcie.memory_bw_gbs, pcie.sm_count) == (2000, 114)

    for key, bw in [("a100-sxm-40gb", 1555), ("a100-sxm-80gb", 2039), ("a100-pcie-80gb", 1935)]:
        a100 = get_device(key)
        assert a100.memory_bw_gbs == bw
        assert (a100.peak("bf16"), a100.peak("tf32"), a100.peak("fp32"), a100.peak("fp64")) == (
            312,
            156,
            19.5,
            9.7,
        )
        assert (a100.sm_count, a100.l2_mb) == (108, 40)

    # V100 SXM2 16 GB and 32 GB share compute and bandwidth.
    v16, v32 = get_device("v100-sxm2-16gb"), get_device("v100-sxm2-32gb")
    assert v16.peak_tflops == v32.peak_tflops and v16.memory_bw_gbs == v32.memory_bw_gbs == 900


def test_one_name_pattern_given_as_a_string_is_one_pattern():
    spec = DeviceSpec(key="g11-test", name="G11", arch="ampere", sm_count=10, memory_gb=8, memory_bw_gbs=100,
                      l2_mb=1, peak_tflops={"fp32": 1.0}, name_patterns=r"\bg11\b", sources=("test",))
    assert spec.name_patterns == (r"\bg11\b",)  # not its letters, each matching any GPU's name
    assert spec.matches("NVIDIA G11") and not spec.matches("NVIDIA A100-SXM4-80GB")


def test_an_unknown_device_says_how_to_predict_for_this_machines_cpu():
    with pytest.raises(UnknownDeviceError, match=r"predict_step\(device='cpu'\)"):
        get_device("xyz")
