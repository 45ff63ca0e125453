"""GPU names as people type them: ``h100``, ``H100``, ``a100 80gb``, ``4090``.

:func:`~ptp_callback.devices.get_device` takes exact keys (``h100-sxm``) and the strings
``torch.cuda.get_device_name()`` returns; it never guesses. People planning a run type a family
name instead. :func:`resolve_device_name` turns that into one device of the table:

* an exact key or a full GPU name: that device (no note);
* words that fit several devices (``h100`` fits ``h100-sxm``, ``h100-pcie`` and ``h100-nvl``): the
  family's most common variant from :data:`MOST_COMMON` -- with a one-line note that says so and
  names the others -- or, for a family without one, an error listing the candidates;
* words that fit one device (``4090``): that device;
* anything else: an :class:`~ptp_callback.devices.UnknownDeviceError` with a did-you-mean.

>>> spec, note = resolve_device_name("H100")
>>> spec.key
'h100-sxm'
>>> note
'H100 -> h100-sxm (NVIDIA H100 SXM5 80GB), the most common variant; others: h100-pcie, h100-nvl'
>>> resolve_device_name("h100-pcie")[1] is None
True
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import torch

from .devices import DeviceSpec, UnknownDeviceError, get_device, known_devices

__all__ = ["MOST_COMMON", "is_run_device", "resolve_device_name", "resolve_target"]

#: The variant a bare family name means: the one rented and bought most (8-GPU SXM servers for the
#: data-centre parts, the 80 GB A100 that clouds list first, the 16 GB V100 of the p3-class
#: instances). A user who means another variant names it (``h100-pcie``); the note says so.
MOST_COMMON: dict[str, str] = {
    "h100": "h100-sxm",
    "h200": "h200-sxm",
    "a100": "a100-sxm-80gb",
    "v100": "v100-sxm2-16gb",
}

_VENDOR_WORDS = ("nvidia", "geforce", "tesla")


def _words(text: str) -> list[str]:
    """``"NVIDIA H100 sxm"`` -> ``["h100", "sxm"]``."""
    words = [w for w in re.split(r"[\s_\-]+", text.strip().lower()) if w]
    return [w for w in words if w not in _VENDOR_WORDS]


def _candidates(words: list[str]) -> list[DeviceSpec]:
    """Devices whose key has every typed word (``a100 80gb`` -> both 80 GB A100s)."""
    typed = set(words)
    return [spec for spec in known_devices() if typed and typed <= set(spec.key.split("-"))]


def _most_common(words: list[str], found: list[DeviceSpec], keys: dict[str, DeviceSpec]) -> DeviceSpec | None:
    """Of several devices that fit, the family's most common variant -- or the one closest to it
    (``a100 40gb``: the SXM one, as the family's most common variant is an SXM card)."""
    default = keys.get(MOST_COMMON.get(words[0], ""))
    if default is None:
        return None
    if default in found:
        return default
    closeness = {spec.key: len(set(spec.key.split("-")) & set(default.key.split("-"))) for spec in found}
    best = max(closeness.values())
    nearest = [spec for spec in found if closeness[spec.key] == best]
    return nearest[0] if len(nearest) == 1 else None


def resolve_device_name(name: str) -> tuple[DeviceSpec, str | None]:
    """The device ``name`` means and, when it picked one of several, a one-line note saying which.

    Raises :class:`~ptp_callback.devices.UnknownDeviceError` (one line, with a did-you-mean) when
    nothing fits, or when several fit and the family has no most common variant.
    """
    text = str(name).strip()
    keys = {spec.key: spec for spec in known_devices()}
    as_key = re.sub(r"[\s_]+", "-", text.lower())
    if as_key in keys:
        return keys[as_key], None
    words = _words(text)
    found = _candidates(words)
    if len(found) == 1:
        return found[0], None
    if len(found) > 1:
        chosen = _most_common(words, found, keys)
        if chosen is not None:
            others = ", ".join(s.key for s in found if s is not chosen)
            return chosen, f"{text} -> {chosen.key} ({chosen.name}), the most common variant; others: {others}"
        raise UnknownDeviceError(f"{text!r} fits several GPUs ({', '.join(s.key for s in found)}); name one of them")
    try:
        return get_device(text), None  # a full name, as torch.cuda.get_device_name() reports it
    except UnknownDeviceError:
        pass
    close = difflib.get_close_matches(as_key, list(keys) + list(MOST_COMMON), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UnknownDeviceError(f"{text!r} is not a known GPU; {hint}`ptp devices` lists them all, "
                             "ptp_callback.register_device(DeviceSpec(...)) adds one"
                             + ("; this machine's CPU is predicted with predict_step(device='cpu') or `ptp probe`"
                                if as_key.startswith("cpu") else ""))


def resolve_target(device: Any) -> tuple[Any, str | None]:
    """A callback's ``device=``: a GPU's name resolved as :func:`resolve_device_name` does (with its
    note); ``"cpu"``, ``"cuda[:n]"``, a ``torch.device``, a ``DeviceSpec`` or ``None`` as given."""
    if isinstance(device, str) and device.split(":")[0] not in ("cpu", "cuda"):
        return resolve_device_name(device)
    if device is not None and not isinstance(device, (str, torch.device, DeviceSpec)):
        raise UnknownDeviceError(f"device={device!r}: expected a GPU's name ('h100', 'a100-sxm-80gb'), 'cpu', "
                                 "a torch.device, a DeviceSpec, or None for the device the run is on")
    return device, None


def is_run_device(device: DeviceSpec, run: torch.device) -> bool:
    """Whether ``device``, the one predicted for, is the one the run is on: only then can what the
    run measures correct its predictions, or its prediction be set against the run's time."""
    if run.type == "cpu" or device.arch == "cpu":
        return run.type == "cpu" and device.arch == "cpu"
    try:
        return get_device(torch.cuda.get_device_name(run)).key == device.key
    except Exception:  # noqa: BLE001 - a GPU the table does not know is not the one predicted for
        return False
