"""What a CPU fit's first batch pays after its loader forks new workers, beside the plan's price.

usage: python benchmarks/fork_copies.py [--only a,b] [--epochs 3]

A DataLoader's workers are forked: they share the training process's pages until they exit, and
the process's first write to each shared page makes the operating system copy it. The first
training batch after new workers start (each epoch without ``persistent_workers``) writes the
step's memory at that cost. The plan prices it before step one as the step's memory
(``run_prediction.step_memory_bytes``: parameters, optimizer state, and the forward's tensors or
the traced peak of the step's new tensors, whichever is more) times this machine's probed cost
per byte (``host_costs``: rewriting one 16 MB tensor while a forked worker maps it), for the first
epoch's first batch (``RunPlan.warmup_s``) and for each later one.

Each model is fitted by Lightning on this CPU for ``--epochs`` epochs of 2-worker batches, without
validation or checkpoints, with ``PrecisionTimeCallback``. Printed per model: the step memory the
plan uses, the priced copy, the first batch's time beyond the median batch in the first epoch
and in the later ones (median), the minor page faults of the later epochs' first batches beyond a
steady batch's (in MB of 4 KiB pages), and the time per such page.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings

import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lightning_eta import CNN, MLP, LSTMLM, Classifier, TinyGPT  # noqa: E402

from ptp_callback import PrecisionTimeCallback  # noqa: E402
from ptp_callback.run_prediction import step_memory_bytes  # noqa: E402

PAGE = 4096


class Encoder(Classifier):
    """A 2-layer transformer encoder over 64 tokens, mean-pooled: activations more than weights."""

    def __init__(self) -> None:
        super().__init__()

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Embedding(2000, 128)
                layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)
                self.encoder, self.head = nn.TransformerEncoder(layer, 2), nn.Linear(128, 10)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.head(self.encoder(self.embed(x)).mean(1))

        self.net = Net()


class Recommender(Classifier):
    """An ``EmbeddingBag`` of 50,000 rows and an MLP: weights and optimizer state, few activations."""

    def __init__(self) -> None:
        super().__init__()

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bag = nn.EmbeddingBag(50_000, 64, mode="mean")
                self.mlp = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.mlp(self.bag(x))

        self.net = Net()


def _labelled(x: torch.Tensor, g: torch.Generator) -> TensorDataset:
    return TensorDataset(x, torch.randint(0, 10, (len(x),), generator=g))


def _data(name: str, g: torch.Generator) -> tuple[TensorDataset, int]:
    """Each model's training set (60-80 batches an epoch) and batch size."""
    if name == "mlp":
        return _labelled(torch.randn(8_000, 784, generator=g), g), 128
    if name == "cnn":
        return _labelled(torch.randn(3_200, 3, 32, 32, generator=g), g), 64
    if name == "gpt":
        return TensorDataset(torch.randint(0, 1000, (1_280, 64), generator=g)), 16
    if name == "lstm":
        return TensorDataset(torch.randint(0, 1000, (2_000, 65), generator=g)), 32
    if name == "encoder":
        return _labelled(torch.randint(0, 2000, (2_000, 64), generator=g), g), 32
    return _labelled(torch.randint(0, 50_000, (16_000, 40), generator=g), g), 256


MODELS = {"mlp": MLP, "cnn": CNN, "gpt": TinyGPT, "lstm": LSTMLM, "encoder": Encoder, "recommender": Recommender}


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class FirstBatches(L.Callback):
    """Each training batch's seconds and minor page faults, by epoch."""

    def __init__(self) -> None:
        self.epochs: list[list[tuple[float, int]]] = []

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.epochs.append([])

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        self._started, self._faults = time.perf_counter(), _minor_faults()

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        self.epochs[-1].append((time.perf_counter() - self._started, _minor_faults() - self._faults))


def measure(name: str, epochs: int) -> dict[str, float]:
    torch.manual_seed(0)
    data, batch = _data(name, torch.Generator().manual_seed(0))
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=2)
    ptp, batches = PrecisionTimeCallback(), FirstBatches()
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=False, enable_checkpointing=False,
                            enable_model_summary=False, enable_progress_bar=False, limit_val_batches=0,
                            num_sanity_val_steps=0, default_root_dir=root, callbacks=[ptp, batches])
        trainer.fit(MODELS[name](), loader)
    steady = [b for epoch in batches.epochs for b in epoch[3:]]
    steady_s = statistics.median(s for s, _ in steady)
    steady_faults = statistics.median(f for _, f in steady)
    later = batches.epochs[1:]
    pages = statistics.median(max(0, e[0][1] - steady_faults) for e in later)
    extra = statistics.median(e[0][0] - steady_s for e in later)
    prediction = ptp.prediction
    assert prediction is not None, "the callback made no prediction"
    return {"memory": step_memory_bytes(prediction.trace), "priced": prediction.plan.warmup_s,
            "first": batches.epochs[0][0][0] - steady_s, "later": extra, "copied": pages * PAGE,
            "per_page": extra / pages if pages else float("nan"), "steady": steady_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        import transformers

        transformers.logging.set_verbosity_error()
    os.environ.setdefault("PTP_CACHE_DIR", tempfile.mkdtemp(prefix="ptp-fork-"))
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    print(f"first batch after new loader workers, real CPU Lightning fits, {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, {torch.get_num_threads()} threads, torch {torch.__version__}; 2 workers, "
          f"{args.epochs} epochs")
    print(f"{'model':12s} {'step ms':>8s} {'memory MB':>10s} {'priced ms':>10s} {'1st epoch ms':>13s} "
          f"{'later ms':>9s} {'copied MB':>10s} {'us/page':>8s}")
    ratios = []
    for name in names:
        r = measure(name, args.epochs)
        ratios.append(r["later"] / r["priced"] if r["priced"] else float("nan"))
        print(f"{name:12s} {1e3 * r['steady']:8.1f} {r['memory'] / 1e6:10.1f} {1e3 * r['priced']:10.1f} "
              f"{1e3 * r['first']:13.1f} {1e3 * r['later']:9.1f} {r['copied'] / 1e6:10.1f} {1e6 * r['per_page']:8.1f}",
              flush=True)
    print(f"later epochs' first-batch extra over the priced copy: median {statistics.median(ratios):.2f}x "
          f"({min(ratios):.2f}-{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
