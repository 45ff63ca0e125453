"""Precision strings and TF32 flags."""

from __future__ import annotations

import pytest
import torch

from ptp_callback.precision import PrecisionSpec, weights_precision


@pytest.mark.parametrize(
    "given, name, param, autocast, scaler",
    [
        ("32-true", "32-true", torch.float32, None, False),
        (32, "32-true", torch.float32, None, False),
        ("16-mixed", "16-mixed", torch.float32, torch.float16, True),
        (16, "16-mixed", torch.float32, torch.float16, True),
        ("bf16-mixed", "bf16-mixed", torch.float32, torch.bfloat16, False),
        ("bf16", "bf16-mixed", torch.float32, torch.bfloat16, False),
        ("16-true", "16-true", torch.float16, None, False),
        ("bf16-true", "bf16-true", torch.bfloat16, None, False),
        ("64-true", "64-true", torch.float64, None, False),
    ],
)
def test_lightning_strings(given, name, param, autocast, scaler):
    spec = PrecisionSpec.from_setting(given)
    assert (spec.name, spec.param_dtype, spec.autocast_dtype, spec.grad_scaler) == (name, param, autocast, scaler)


def test_a_models_weights_say_its_true_half_precision_only_when_all_share_one_dtype():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    assert weights_precision(model) == "32-true"
    assert weights_precision(model.to(torch.float16)) == "16-true"
    assert weights_precision(model.to(torch.bfloat16)) == "bf16-true"
    model[1].float()  # a bf16 base with an fp32 head: each weight keeps its own dtype under 32-true
    assert weights_precision(model) == "32-true"


def test_unknown_precision_says_what_is_expected():
    with pytest.raises(ValueError, match=r"precision='fp8-magic' is not a known precision; expected one of 32-true"):
        PrecisionSpec.from_setting("fp8-magic")


def test_tf32_flags_are_read_at_call_time_and_overridable():
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert PrecisionSpec.from_setting("32-true").matmul_tf32
        torch.set_float32_matmul_precision("highest")
        assert not PrecisionSpec.from_setting("32-true").matmul_tf32
        assert PrecisionSpec.from_setting("32-true", matmul_tf32=True).matmul_tf32
        assert PrecisionSpec.from_setting("32-tf32").matmul_tf32  # the name used in ../shared/h100
        assert PrecisionSpec.from_setting("32-true", conv_tf32=False).conv_tf32 is False
    finally:
        torch.set_float32_matmul_precision(previous)


def test_label_spells_out_tf32():
    assert PrecisionSpec.from_setting("32-true", matmul_tf32=True).label == "32-true+tf32"
    assert PrecisionSpec.from_setting("bf16-mixed").label == "bf16-mixed"


@pytest.mark.parametrize("device", ["t4", "v100-sxm2-16gb"])
@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_bf16_before_ampere_is_flagged(device, precision):
    from ptp_callback.devices import get_device
    from ptp_callback.precision import support_notes

    notes = support_notes(PrecisionSpec.from_setting(precision), get_device(device))
    assert len(notes) == 1 and "no bf16 tensor cores" in notes[0] and "Ampere" in notes[0]
    assert ("16-mixed" if precision == "bf16-mixed" else "16-true") in notes[0]


def test_a_registered_ampere_gpu_without_a_bf16_rate_is_told_to_add_it_not_that_it_lacks_tensor_cores():
    from ptp_callback.devices import DeviceSpec
    from ptp_callback.precision import support_notes

    spec = DeviceSpec(key="own-ampere", name="Own Ampere", arch="ampere", sm_count=10, memory_gb=8,
                      memory_bw_gbs=100, l2_mb=1, peak_tflops={"fp32": 10.0}, sources=("test",))
    (note,) = support_notes(PrecisionSpec.from_setting("bf16-mixed"), spec)
    assert "gives no bf16 peak (peak_tflops['bf16'])" in note and "tensor cores" not in note


def test_supported_precisions_have_no_note():
    from ptp_callback.devices import get_device
    from ptp_callback.precision import support_notes

    for device in ("h100-sxm", "a100-sxm-80gb", "l4"):
        for precision in ("32-true", "16-mixed", "bf16-mixed", "bf16-true"):
            assert support_notes(PrecisionSpec.from_setting(precision), get_device(device)) == ()
    assert support_notes(PrecisionSpec.from_setting("16-mixed"), get_device("t4")) == ()
    tf32 = PrecisionSpec.from_setting("32-true", matmul_tf32=True)
    assert "TF32 has no effect" in support_notes(tf32, get_device("v100-sxm2-16gb"))[0]


@pytest.mark.parametrize("typed, hint", [
    ("tf32", "matmul_tf32=True"), ("fp16", "16-mixed (autocast to fp16) or 16-true"),
    ("bf16-mix", "did you mean bf16-mixed"),
])
def test_a_precision_typed_another_way_says_what_to_pass(typed, hint):
    with pytest.raises(ValueError, match="is not a known precision") as info:
        PrecisionSpec.from_setting(typed)
    assert hint in str(info.value)
