"""Every example in the package's docstrings runs as written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ptp_callback
from ptp_callback import integrations

MODULES = sorted(
    [f"ptp_callback.{m.name}" for m in pkgutil.iter_modules(ptp_callback.__path__) if m.name != "integrations"]
    + [f"ptp_callback.integrations.{m.name}" for m in pkgutil.iter_modules(integrations.__path__)]
)


@pytest.mark.parametrize("name", MODULES)
def test_the_module_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an optional extra that is not installed
        pytest.skip(f"{name}: {exc}")
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
