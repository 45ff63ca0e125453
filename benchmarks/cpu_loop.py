"""Lightning's own work per training batch on this CPU, against the plan's estimate of it.

usage: python benchmarks/cpu_loop.py [--batches 2000] [--rounds 2]

A one-layer model (``nn.Linear(8, 2)``, batch 4, AdamW), whose step is a small fraction of a
millisecond, trains in a real ``Trainer.fit`` on the CPU in four settings: neither progress bar
nor logging, one ``self.log("loss", loss, prog_bar=True)`` per step, the TQDM bar alone, and both
(the bar writes to a discarded stream). Printed for each: the median interval between training
batch ends, the traced step's prediction, what the interval spends beyond that step (the loop's
work), and the plan's loop estimate for this machine (``host_costs.cpu_host``: the probe's time
per small op times :data:`~ptp_callback.host_costs.CPU_LOOP_SMALL_OPS`), all in milliseconds,
medians over ``--rounds``. The probe is this machine's cached one.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lightning as L  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from ptp_callback import PrecisionTimeCallback  # noqa: E402

SETTINGS = (("neither", False, False), ("log", False, True), ("bar", True, False), ("bar + log", True, True))


class OneLayer(L.LightningModule):
    def __init__(self, log: bool) -> None:
        super().__init__()
        self.net = nn.Linear(8, 2)
        self.logs = log

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.logs:
            self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class BatchEnds(L.Callback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, *args) -> None:
        self.ends.append(time.perf_counter())


def one_fit(batches: int, bar: bool, log: bool) -> tuple[float, float, float]:
    """(median batch interval, predicted step, planned loop work) in seconds."""
    data = TensorDataset(torch.randn(batches * 4, 8), torch.randint(0, 2, (batches * 4,)))
    ends, ptp = BatchEnds(), PrecisionTimeCallback(advise=False)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=bar, callbacks=[ends, ptp])
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer.fit(OneLayer(log), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    intervals = [b - a for a, b in zip(ends.ends, ends.ends[1:])]
    prediction = ptp.prediction
    return statistics.median(intervals), prediction.step.step_s, prediction.host.loop_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # its lines and the callback's
    print(f"Lightning's loop work per training batch on this CPU, {time.strftime('%Y-%m-%d')}, "
          f"{torch.get_num_threads()} threads, Lightning {L.__version__}; medians of {args.rounds} rounds (ms)")
    print(f"{'setting':12s} {'interval':>9s} {'step':>7s} {'loop':>7s} {'planned loop':>13s}")
    for name, bar, log in SETTINGS:
        runs = [one_fit(args.batches, bar, log) for _ in range(args.rounds)]
        interval, step, planned = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{name:12s} {1e3 * interval:9.3f} {1e3 * step:7.3f} {1e3 * (interval - step):7.3f} {1e3 * planned:13.3f}")


if __name__ == "__main__":
    main()
