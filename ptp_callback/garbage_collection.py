"""Keep Python's cyclic garbage collector off the objects a trace never touches.

A trace makes tens of thousands of short- and long-lived Python objects (fake tensors, autograd
nodes, op records). In a process that already holds torch, Lightning, transformers and the user's
model -- several hundred thousand objects -- that is enough to trigger a full collection in the
middle of the trace, which scans every one of them: a third of a language model's one-second trace
on a 2-core machine (``benchmarks/trace_speed.py``). The objects that existed before the trace
cannot become garbage because of it, so the trace's collections skip them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collect_new_objects_only() -> Iterator[None]:
    """Inside: collections scan only objects made inside (``gc.freeze`` on entry, ``gc.unfreeze``
    on exit); the collector is not turned off, and the process's own freezing is left alone."""
    if gc.get_freeze_count() or not gc.isenabled():
        # The process freezes objects itself (a server before forking) or runs without the collector:
        # unfreezing on exit would undo its choice.
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
