"""Numbers a training step reads from its model's values in Python, which a trace does not have.

A step logs its loss (``loss.item()``, ``float(acc)``), or hands its outputs to NumPy for a metric
(``out.softmax(-1).cpu().numpy()``). A fake tensor has no values, so such a step could not be traced
and its fit fell back to measured timing. The trace gives each such read a stand-in:
:data:`STAND_IN` for every floating-point value. A step logs most of them, and checks some against
bounds that a normal step stays within (``if loss.item() > 1e4``); 1.0 is inside any such bound,
and no divisor of zero. Integer and boolean values the model decides get no stand-in: they size
tensors or pick branches, and stop the trace (a check for NaN or infinity, or that an invariant
holds, is answered as for a healthy step instead: ``known_values.py``). Values the trace does know
(the batch's labels, a router's spread choices) read as themselves.

On a GPU each such read copies from the device, after all the work queued before it: the trace
records a host sync there (``ptp.sync``), one for reads in a row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

STAND_IN = 1.0


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    # NumPy has no bfloat16: a real ``.numpy()`` refuses one, a step converts it first (``.float()``)
    with unset_fake_temporarily():
        return torch.empty(0, dtype=torch.float32 if dtype == torch.bfloat16 else dtype).numpy().dtype


@contextlib.contextmanager
def numpy_reads(on_read: Callable[[], None]) -> Iterator[None]:
    """While active, ``.numpy()`` of a fake tensor returns its known values, or an array of
    :data:`STAND_IN` for floating-point values the model computed (``on_read()`` is called for
    each); integer or boolean values the model computed fail as before."""
    had_own = "numpy" in FakeTensor.__dict__
    original = FakeTensor.__dict__.get("numpy")

    def numpy(self: FakeTensor, *, force: bool = False) -> Any:
        if self.constant is not None:
            with unset_fake_temporarily():
                return self.constant.numpy(force=force)
        if not self.is_floating_point():
            raise RuntimeError(".numpy() is not supported for tensor subclasses.")  # what torch says
        on_read()
        return np.full(tuple(self.shape), STAND_IN, dtype=_numpy_dtype(self.dtype))

    FakeTensor.numpy = numpy  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had_own:
            FakeTensor.numpy = original  # type: ignore[method-assign]
        else:
            del FakeTensor.numpy
