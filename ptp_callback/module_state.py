"""What a traced step leaves on the modules it ran: nothing.

A trace runs the step's Python on fake tensors, and a forward may keep what it computes on its
module: a table cached as a plain attribute (``self.table = torch.sin(...)`` the first time, or
when the dtype changes: torchvision's ``AnchorGenerator.cell_anchors``), a buffer registered on
the fly, an entry in a dict it memoizes in. Kept, those are fake tensors, and the real step that
follows computes with them: its loss is a fake tensor, its gradients never reach the weights, or
it fails. :func:`module_state_kept` puts every module's attributes back as they were, and the
lists and dicts among them as they held, once the trace is over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

_MISSING = object()


def _contents(value: Any) -> Any:
    """A shallow copy of a list or dict attribute (``_parameters``, ``_buffers`` and ``_modules``
    among them), to put back what a step adds to it in place; ``_MISSING`` for anything else."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return _MISSING


def _same(value: Any, saved: Any) -> bool:
    if isinstance(value, list):
        return len(value) == len(saved) and all(a is b for a, b in zip(value, saved))
    return value.keys() == saved.keys() and all(value[k] is saved[k] for k in saved)


def _restore(module: torch.nn.Module, attributes: dict[str, Any], contents: dict[str, Any]) -> None:
    current = vars(module)
    for name in [name for name in current if name not in attributes]:
        del current[name]
    for name, value in attributes.items():
        if current.get(name, _MISSING) is not value:
            current[name] = value
    for name, saved in contents.items():
        value = attributes[name]
        if _same(value, saved):
            continue
        if isinstance(value, list):
            value[:] = saved
        else:
            value.clear()
            value.update(saved)


@contextlib.contextmanager
def module_state_kept(model: torch.nn.Module) -> Iterator[None]:
    """Put back every attribute of ``model``'s modules on exit: ones the step added are removed,
    reassigned ones restored, lists and dicts given back their items (the objects themselves stay)."""
    saved = []
    for module in model.modules():
        attributes = dict(vars(module))
        contents = {name: copy for name, value in attributes.items() if (copy := _contents(value)) is not _MISSING}
        saved.append((module, attributes, contents))
    try:
        yield
    finally:
        for module, attributes, contents in saved:
            _restore(module, attributes, contents)


@contextlib.contextmanager
def stood_in(owner: Any, **attributes: Any) -> Iterator[None]:
    """``owner``'s ``attributes`` replaced on the instance while inside (a Lightning module's
    ``log``, a Trainer's ``log`` while its ``compute_loss`` is traced), then restored as they were."""
    saved = {name: owner.__dict__.get(name) for name in attributes}
    owner.__dict__.update(attributes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                owner.__dict__.pop(name, None)
            else:
                owner.__dict__[name] = value
