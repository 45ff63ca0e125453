"""A batch's structure, walked the same way wherever the trace needs it.

Batches come as tensors, tuples, lists, named tuples, dataclasses and mappings, Hugging Face's
``BatchEncoding`` (a ``UserDict``, which ``torch.utils._pytree`` takes for one opaque leaf) among
them. The trace replaces each tensor with a fake one, the trace cache keys on each tensor's shape
and dtype, and the mask checks read values by key: all three walk the batch here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import is_dataclass, replace
from typing import Any


def map_batch(fn: Callable[[Any], Any], batch: Any) -> Any:
    """The batch with ``fn`` applied to every leaf; a mapping comes back as a plain ``dict``."""
    if isinstance(batch, Mapping):
        return {k: map_batch(fn, v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(map_batch(fn, v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_batch(fn, v) for v in batch)
    if is_dataclass(batch) and not isinstance(batch, type):
        return replace(batch, **{k: map_batch(fn, v) for k, v in vars(batch).items()})
    return fn(batch)


def batch_leaves(batch: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, leaf)`` for every leaf, the path as ``input_ids`` or ``0.labels`` (keys and indices)."""
    if isinstance(batch, Mapping):
        items: Any = batch.items()
    elif isinstance(batch, (list, tuple)):
        items = enumerate(batch)
    elif is_dataclass(batch) and not isinstance(batch, type):
        items = vars(batch).items()
    else:
        yield path, batch
        return
    for key, value in items:
        yield from batch_leaves(value, f"{path}.{key}" if path else str(key))
