"""Precision strings and TF32 flags."""

from __future__ import annotations

import pytest
import torch

from ptp_callback.precision import PrecisionSpec


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
