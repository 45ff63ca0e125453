"""What a prediction needs of a DataLoader: one example batch, untouched iterators, and its costs.

An example batch is built the way the loader would build one -- its first ``batch_size`` items
passed through its ``collate_fn`` -- without creating an iterator (no worker processes, no sampler
draw) and with every random-number generator restored afterwards, so the user's data order is
exactly what it would have been. Building it is timed: that is the loader's per-batch work, which
its workers hide or the training loop waits for. A process's first batch can take longer than the
ones after it (a dataset's lazy set-up, the first allocations of its items' memory: on a 2-thread
AMD EPYC VM, 2026-11-29, a batch of 4,096 cloned 16 KB items took 140 ms the first time and
86-103 ms the next three), so where that first build was quick enough to repeat, the next
``batch_size`` items are built too and the quicker of the two builds is the cost.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .rng import rng_preserved
from .run_plan import LoaderFacts


def first_loader(loaders: Any) -> Any:
    """The first DataLoader of a loader, a list or dict of them, or a combined loader, that is not
    empty (Lightning skips an empty one); ``None`` when there is none."""
    if loaders is None:
        return None
    flattened = getattr(loaders, "flattened", None)
    if flattened:
        candidates = list(flattened)
    elif isinstance(loaders, (list, tuple)):
        candidates = list(loaders)
    elif isinstance(loaders, dict):
        candidates = list(loaders.values())
    else:
        candidates = [loaders]
    return next((loader for loader in candidates if not _empty(loader)), None)


def _empty(loader: Any) -> bool:
    try:
        return len(loader) == 0
    except Exception:  # noqa: BLE001 - no len() (TypeError, an IterableDataset's NotImplementedError): not known empty
        return False


# A first build that took longer than this is not repeated: the time is the user's fit's.
REPEAT_BELOW_S = 0.5


def example_batch(loader: Any, transform: Callable[[Any], Any] | None = None) -> tuple[Any, float]:
    """One batch shaped like the loader's, and the seconds it took to build (its items and collate).

    A map-style dataset with a batch size gives the items its sampler draws first collated directly
    (and the next ones, timed, where that was quick: see the module doc); anything else
    (an iterable dataset, a batch sampler) is read from a fresh iterator, in this process (no
    workers started: :func:`_built_here`); a one-shot iterator (a
    generator) is never read: that batch would be missing from the loop. ``transform`` applies the
    framework's own batch hooks. Every generator's state is restored afterwards.
    """
    with rng_preserved():
        started = time.perf_counter()
        dataset = getattr(loader, "dataset", None)
        batch_size = getattr(loader, "batch_size", None)
        if batch_size and _map_style(dataset):
            first, second = _drawn(loader, batch_size)
            batch = loader.collate_fn([dataset[i] for i in first])
            seconds = time.perf_counter() - started
            if seconds < REPEAT_BELOW_S and second:
                started = time.perf_counter()
                loader.collate_fn([dataset[i] for i in second])
                seconds = min(seconds, time.perf_counter() - started)
        elif isinstance(loader, Iterator):  # not `iter(loader) is loader`: that starts a DataLoader's workers
            raise ValueError(f"the loader is a one-shot iterator ({type(loader).__name__}): a batch read from it "
                             "would be missing from your loop; pass the DataLoader (or anything iterable again)")
        else:
            batch = next(iter(_built_here(loader)))
            seconds = time.perf_counter() - started
        if transform is not None:
            with contextlib.suppress(Exception):  # user hooks written for the loop's state
                batch = transform(batch)
    return batch, seconds


def _map_style(dataset: Any) -> bool:
    """A dataset read by index (an ``IterableDataset`` inherits a ``__getitem__`` that raises, and
    may define ``__len__``)."""
    from torch.utils.data import IterableDataset

    return (not isinstance(dataset, IterableDataset) and hasattr(dataset, "__getitem__")
            and hasattr(dataset, "__len__") and len(dataset) > 0)


def _drawn(loader: Any, batch_size: int) -> tuple[list[int], list[int]]:
    """The items of the loader's first two batches, as its sampler draws them: a shuffling sampler's
    random ones (a dataset stored in order of length, padded per batch by its collator, has its
    shortest items first: a batch of those was priced at a fifth of a real one's time), a subset
    sampler's own; in order for a sequential one. A sampler's own generator is left as it was."""
    from torch.utils.data import SequentialSampler

    sampler = getattr(loader, "sampler", None)
    if sampler is None or isinstance(sampler, SequentialSampler):
        indices = range(min(2 * batch_size, len(loader.dataset)))
    else:
        generator = getattr(sampler, "generator", None)
        state = generator.get_state() if isinstance(generator, torch.Generator) else None
        try:
            indices = list(itertools.islice(iter(sampler), 2 * batch_size))
        finally:
            if state is not None:
                generator.set_state(state)
    indices = list(indices)
    return indices[:batch_size], indices[batch_size:] if len(indices) == 2 * batch_size else []


def _built_here(loader: Any) -> Any:
    """A DataLoader with worker processes as one that builds its batches in this process, from the
    same dataset, sampler and ``collate_fn``. Its workers' start is no batch's build time (two took
    58 ms to deliver an iterable dataset's first batch on a 2-thread Xeon, where building one took
    0.9 ms: every batch of the fit was planned 8x its time), and a loader with
    ``persistent_workers`` keeps the iterator, and the workers, that a read of its own starts."""
    from torch.utils.data import DataLoader, IterableDataset

    if not isinstance(loader, DataLoader) or not loader.num_workers:
        return loader
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last,
                          collate_fn=loader.collate_fn)
    if loader.batch_sampler is not None:
        return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=loader.collate_fn)
    return DataLoader(loader.dataset, sampler=loader.sampler, batch_size=None, collate_fn=loader.collate_fn)


def batch_bytes(batch: Any) -> int:
    """Bytes of the tensors in a batch (any nesting of lists, tuples, dicts and dataclasses)."""
    from torch.utils._pytree import tree_flatten

    leaves, _ = tree_flatten(batch)
    total = sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
    if not total and hasattr(batch, "__dict__"):
        total = batch_bytes(vars(batch))
    return total


def loader_facts(loader: Any, batch: Any = None, load_s: float = 0.0) -> LoaderFacts:
    """The plan's view of a DataLoader: workers, persistence, one batch's build time and bytes, pinning."""
    return LoaderFacts(
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        load_s=load_s,
        batch_bytes=batch_bytes(batch) if batch is not None else 0,
        pin_memory=bool(getattr(loader, "pin_memory", False)),
    )
