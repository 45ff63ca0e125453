"""The callback's own per-batch host work: its batch hooks alone, over 10,000 batches of a real fit.

usage: python benchmarks/hook_overhead.py [--batches N] [--repeats R]

Inside a real Lightning fit (CPU, a tiny model, a 40,000-batch schedule), a timing callback listed
before ``PrecisionTimeCallback`` calls the callback's ``on_train_batch_start`` and
``on_train_batch_end`` hooks N times in a row at the start of training, with the real trainer and
module, and reports microseconds per batch (the median of R rounds). Two settings:

* ``refresh_s=1.0`` (the default): the ETA text is recomputed at most once a second;
* ``refresh_s=0``: recomputed at every batch -- the worst case, the ETA's full arithmetic each time.

Also timed: one ``remaining_s()`` call (what a progress bar refresh costs) and the trace at fit start
(cold, then from the on-disk cache). The per-batch work must stay under 20 us.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import PrecisionTimeCallback


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class HookTimer(L.Callback):
    """At train start, drives the ptp callback's batch hooks ``n`` times and stops the fit."""

    def __init__(self, ptp: PrecisionTimeCallback, n: int) -> None:
        self.ptp, self.n = ptp, n
        self.per_batch_us = 0.0
        self.remaining_us = 0.0

    def on_train_start(self, trainer, pl_module):
        batch = (torch.randn(8, 32), torch.randint(0, 4, (8,)))
        start, end = self.ptp.on_train_batch_start, self.ptp.on_train_batch_end
        started = time.perf_counter()
        for i in range(self.n):
            start(trainer, pl_module, batch, i)
            end(trainer, pl_module, None, batch, i)
        self.per_batch_us = (time.perf_counter() - started) / self.n * 1e6
        started = time.perf_counter()
        for _ in range(1000):
            self.ptp.remaining_s(trainer)
        self.remaining_us = (time.perf_counter() - started) / 1000 * 1e6
        trainer.should_stop = True


def round_(n: int, refresh_s: float) -> tuple[float, float, float]:
    data = TensorDataset(torch.randn(40_000 * 8, 32), torch.randint(0, 4, (40_000 * 8,)))
    ptp = PrecisionTimeCallback(refresh_s=refresh_s, advise=False)
    timer = HookTimer(ptp, n)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, callbacks=[timer, ptp])
    trainer.fit(Tiny(), DataLoader(data, batch_size=8))
    trace_s = ptp.prediction.trace_s if ptp.prediction is not None else float("nan")
    return timer.per_batch_us, timer.remaining_us, trace_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("PTP_CACHE_DIR", tempfile.mkdtemp(prefix="ptp-overhead-"))
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    print(f"hook overhead, {args.batches} batches x {args.repeats} rounds, {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}")
    traces = []
    for refresh_s in (1.0, 0.0):
        rounds = [round_(args.batches, refresh_s) for _ in range(args.repeats)]
        traces += [r[2] for r in rounds]
        per_batch = statistics.median(r[0] for r in rounds)
        remaining = statistics.median(r[1] for r in rounds)
        print(f"  refresh_s={refresh_s:<4}: {per_batch:6.2f} us per batch (start + end hooks; rounds "
              f"{', '.join(f'{r[0]:.2f}' for r in rounds)}); remaining_s() {remaining:.1f} us")
    print(f"  trace at fit start: first {traces[0]:.3f} s, then {statistics.median(traces[1:]):.3f} s "
          f"(from the on-disk cache)")


if __name__ == "__main__":
    main()
