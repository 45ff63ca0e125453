"""Device names as people type them: a family resolves to its most common variant, or a did-you-mean."""

from __future__ import annotations

import pytest

from ptp_callback.device_names import MOST_COMMON, resolve_device_name
from ptp_callback.devices import UnknownDeviceError, get_device


@pytest.mark.parametrize("typed, key", [
    ("h100", "h100-sxm"), ("H100", "h100-sxm"), ("NVIDIA H100", "h100-sxm"), ("a100", "a100-sxm-80gb"),
    ("h200", "h200-sxm"), ("v100", "v100-sxm2-16gb"), ("A100 40GB", "a100-sxm-40gb"), ("a100 pcie", "a100-pcie-80gb"),
])
def test_a_family_resolves_to_its_most_common_variant_with_a_note(typed, key):
    spec, note = resolve_device_name(typed)
    assert spec.key == key
    assert note.startswith(f"{typed} -> {key} (") and "the most common variant; others: " in note
    assert "\n" not in note


@pytest.mark.parametrize("typed, key", [
    ("h100-pcie", "h100-pcie"), ("H100_SXM", "h100-sxm"), ("l4", "l4"), ("4090", "rtx-4090"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"), ("b200", "b200"),
])
def test_exact_keys_full_names_and_unique_words_resolve_silently(typed, key):
    spec, note = resolve_device_name(typed)
    assert (spec.key, note) == (key, None)


def test_every_most_common_variant_is_in_the_table():
    for family, key in MOST_COMMON.items():
        assert get_device(key).key.startswith(family)


@pytest.mark.parametrize("typed, suggestion", [("h10", "h100"), ("rtx4090", "rtx-4090"), ("a1000", "a100")])
def test_an_unknown_name_is_one_line_with_a_did_you_mean(typed, suggestion):
    with pytest.raises(UnknownDeviceError) as info:
        resolve_device_name(typed)
    message = str(info.value)
    assert "\n" not in message and f"{typed!r} is not a known GPU" in message
    assert "did you mean" in message and suggestion in message.split("did you mean", 1)[1]
    assert "`ptp devices`" in message


def test_nothing_close_gets_no_guess():
    with pytest.raises(UnknownDeviceError, match="'hopper' is not a known GPU; `ptp devices`"):
        resolve_device_name("hopper")


def test_a_callbacks_device_of_the_wrong_type_is_refused_with_what_to_pass():
    from ptp_callback.device_names import resolve_target

    with pytest.raises(UnknownDeviceError, match=r"device=3: expected a GPU's name .* 'cpu', a torch.device"):
        resolve_target(3)
    assert resolve_target("cpu") == ("cpu", None) and resolve_target(None) == (None, None)
