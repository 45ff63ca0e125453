"""The most memory a traced step's new tensors hold at once.

A trace runs the step's real Python on fake tensors, so the fake tensors live and die as the real
ones would: an activation is freed once backward has used it, a gradient of an activation once
the layer below has read it. Following the storages the recorded ops create (not those they write
in place: a parameter's update, an optimizer moment's) until they are freed gives the step's peak
of new memory: activations, gradients and the optimizer's temporaries.

A CPU fit needs it: after a DataLoader forks its workers, the training process's first write to
each page it shares with them makes the operating system copy that page, and a step writes every
page its peak once held (:func:`~ptp_callback.run_prediction.step_memory_bytes`).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch


def _storage(tensor: torch.Tensor) -> Any:
    try:
        return tensor.untyped_storage()
    except Exception:  # noqa: BLE001 - a tensor without a storage of its own (sparse, nested, a wrapper subclass)
        return None


class LiveBytes:
    """Bytes of the storages that recorded ops created and that are still alive, and their peak.

    >>> live = LiveBytes()
    >>> a = torch.empty(256)
    >>> live.track([], [a])
    >>> b = torch.empty(512)
    >>> live.track([a], [b])
    >>> live.track([b], [b.add_(1)])  # written in place: not new
    >>> live.now, live.peak
    (3072, 3072)
    >>> del a
    >>> live.now, live.peak
    (2048, 3072)
    """

    def __init__(self) -> None:
        self._alive: dict[int, int] = {}  # id of a storage -> its bytes
        self.now = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        self.now -= self._alive.pop(key, 0)

    def track(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        """Count the storages of an op's ``outputs`` that none of its ``inputs`` shares (its new tensors)."""
        written = {id(s) for s in map(_storage, inputs) if s is not None}
        for tensor in outputs:
            storage = _storage(tensor)
            key = id(storage)
            if storage is None or key in written or key in self._alive:
                continue
            try:
                nbytes = int(storage.nbytes())
                # The storage's Python object lives exactly as long as the last tensor viewing it.
                release = weakref.finalize(storage, self._release, key)
            except Exception:  # noqa: BLE001 - not followed: it cannot count toward the peak
                continue
            release.atexit = False
            self._alive[key] = nbytes
            self.now += nbytes
        self.peak = max(self.peak, self.now)
