"""The random-number generators a prediction must leave as it found them.

A model's forward may draw from NumPy or Python's ``random`` (Wav2Vec2's SpecAugment masks,
LayerDrop in some models) and a loader's ``collate_fn`` or dataset from any of them. A trace or an
example batch that advanced them would change the user's run: the fit with the callback would
draw other masks, other dropout layers and another data order than the same fit without it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def rng_preserved() -> Iterator[None]:
    """Restore the torch, CUDA, Python and NumPy generators on exit."""
    import numpy as np

    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    py_state = random.getstate()
    np_state = np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        random.setstate(py_state)
        np.random.set_state(np_state)
