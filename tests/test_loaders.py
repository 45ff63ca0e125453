"""An example batch from a real DataLoader without touching its iterator or anyone's RNG."""

from __future__ import annotations

import random
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from ptp_callback import loaders
from ptp_callback.loaders import batch_bytes, example_batch, first_loader, loader_facts


def test_an_example_batch_leaves_every_generator_as_it_was():
    data = TensorDataset(torch.arange(100.0).unsqueeze(1))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2, persistent_workers=True)
    torch.manual_seed(1), random.seed(1), np.random.seed(1)
    expected = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(1), random.seed(1), np.random.seed(1)
    (x,), seconds = example_batch(loader)
    assert x.shape == (8, 1) and seconds >= 0.0
    assert (torch.rand(1), random.random(), np.random.rand()) == expected


class LazyOpen(torch.utils.data.Dataset):
    """Opens its storage on the first read, as file-backed datasets do: only the first batch pays."""

    def __init__(self, open_s: float) -> None:
        self.open_s, self.opened, self.reads = open_s, False, 0

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        if not self.opened:
            time.sleep(self.open_s)
            self.opened = True
        self.reads += 1
        return torch.full((4,), float(i))


def test_a_batch_is_timed_as_the_loader_builds_it_after_its_first():
    data = LazyOpen(open_s=0.3)
    batch, seconds = example_batch(DataLoader(data, batch_size=8))
    assert torch.equal(batch[:, 0], torch.arange(8.0))  # in order: the loader's first batch
    assert data.reads == 16 and seconds < 0.15


def test_a_slow_first_batch_is_not_built_twice(monkeypatch):
    monkeypatch.setattr(loaders, "REPEAT_BELOW_S", 0.0)
    data = LazyOpen(open_s=0.0)
    example_batch(DataLoader(data, batch_size=8))
    assert data.reads == 8
    monkeypatch.setattr(loaders, "REPEAT_BELOW_S", 10.0)
    small = LazyOpen(open_s=0.0)  # fewer items than two batches: nothing to build again
    example_batch(DataLoader(small, batch_size=40))
    assert small.reads == 40


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(5):
            yield torch.full((3,), float(i))


def test_an_iterable_dataset_is_read_from_a_fresh_iterator():
    (batch, _seconds) = example_batch(DataLoader(Stream(), batch_size=2))
    assert batch.shape == (2, 3)


class WhereBuilt(IterableDataset):
    """Yields batches that say which process built them: -1 this one, else the worker's id."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        while True:
            yield torch.full((4,), -1.0 if info is None else float(info.id))


def test_a_loader_with_workers_is_read_in_this_process_and_its_iterator_left_unmade():
    # Its workers' start is no batch's build time, and a persistent loader would keep the iterator.
    loader = DataLoader(WhereBuilt(), batch_size=None, num_workers=2, persistent_workers=True)
    batch, _ = example_batch(loader)
    assert batch.tolist() == [-1.0] * 4
    assert loader._iterator is None
    sampled = DataLoader(TensorDataset(torch.arange(10.0)), batch_sampler=[[3, 1]], num_workers=2)
    assert example_batch(sampled)[0][0].tolist() == [3.0, 1.0]


def test_the_framework_hooks_transform_the_batch():
    batch, _ = example_batch(DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2), lambda b: [b[0] * 3])
    assert torch.equal(batch[0], torch.full((2, 2), 3.0))


def test_loader_facts_and_batch_bytes():
    loader = DataLoader(TensorDataset(torch.ones(16, 4), torch.zeros(16, dtype=torch.long)), batch_size=8,
                        num_workers=2, persistent_workers=True)
    batch, seconds = example_batch(loader)
    facts = loader_facts(loader, batch, seconds)
    assert (facts.num_workers, facts.persistent_workers, facts.pin_memory) == (2, True, False)
    assert facts.batch_bytes == 8 * 4 * 4 + 8 * 8  # float32 features + int64 labels
    # pin_memory=True: batches arrive page-locked, whether or not this machine has a GPU to pin for
    pinned = DataLoader(TensorDataset(torch.ones(16, 4)), batch_size=8, pin_memory=True)
    assert loader_facts(pinned).pin_memory
    assert batch_bytes({"a": [torch.ones(2, dtype=torch.float16)], "b": 3}) == 4


def test_first_loader_of_collections():
    a, b = DataLoader([1]), DataLoader([2])
    assert first_loader([a, b]) is a and first_loader({"x": b}) is b and first_loader(a) is a
    assert first_loader(None) is None


class NoLength(IterableDataset):
    """An iterable whose length is unknown: its loader's len() raises NotImplementedError."""

    def __len__(self):
        raise NotImplementedError

    def __iter__(self):
        return iter(torch.randn(8, 2))


def test_the_first_loader_is_the_first_not_known_to_be_empty():
    empty = DataLoader(TensorDataset(torch.randn(0, 2)), batch_size=4)
    full = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    unsized = DataLoader(NoLength(), batch_size=4)
    assert first_loader([empty, full]) is full and first_loader({"a": empty, "b": full}) is full
    assert first_loader([unsized, full]) is unsized  # no length: not known to be empty
    assert first_loader(empty) is None and first_loader(None) is None


class ByLength(torch.utils.data.Dataset):
    """Token sequences stored shortest first, as a dataset sorted by length is."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(2 + 2 * i, dtype=torch.long)


def pad(items):
    return torch.nn.utils.rnn.pad_sequence(items, batch_first=True)


def test_an_example_batch_holds_the_items_the_loaders_sampler_draws():
    torch.manual_seed(0)
    batch, _ = example_batch(DataLoader(ByLength(), batch_size=8, shuffle=True, collate_fn=pad))
    # a random batch, padded to its longest item (the first 8 items: 16 tokens)
    assert batch.shape[1] > 2 + 2 * 7
    # a subset sampler's own items only; its generator left as it was for the loop's own draw
    generator = torch.Generator().manual_seed(1)
    subset = torch.utils.data.SubsetRandomSampler(range(40, 48), generator=generator)
    state = generator.get_state()
    batch, _ = example_batch(DataLoader(ByLength(), batch_size=8, sampler=subset, collate_fn=pad))
    assert batch.shape[1] == 2 + 2 * 47 and torch.equal(generator.get_state(), state)


class CountedStream(IterableDataset):
    """An iterable dataset that knows its length (it still has no items by index)."""

    def __len__(self):
        return 16

    def __iter__(self):
        return iter(torch.randn(16, 2))


def test_an_iterable_dataset_with_a_length_is_read_from_its_iterator():
    x, _ = example_batch(DataLoader(CountedStream(), batch_size=4))
    assert x.shape == (4, 2)
