"""The ETA in the progress bar of real Lightning fits on this CPU, against the truth and two baselines.

usage: python benchmarks/lightning_eta.py [--quick] [--repeats N] [--only a,b]

Fits the way users run them -- Lightning's default ``ModelCheckpoint``, DataLoaders with 2 worker
processes, validation every epoch, several epochs -- each about 20-40 s on 2 CPU cores:

* ``mlp``: an MLP, 32-true, 3 epochs, validation each epoch, a checkpoint each epoch;
* ``cnn``: a convnet with batch norm, 32-true, 3 epochs, the same;
* ``gpt_acc``: a tiny GPT-2, 32-true, gradient accumulation 2, validation twice an epoch
  (so the checkpoint follows each validation), persistent workers, 2 epochs;
* ``lstm``: a 2-layer LSTM language model, 32-true, validation twice an epoch, 2 epochs;
* ``mlp_time``: the MLP with only ``max_time`` (20 s) to end it: epochs of 50 batches, each
  validated and saved (its length does not scale with ``--quick``; the naive extrapolation has no
  total to extrapolate to);
* ``finetune``: the MLP's layers as a frozen backbone under a new head, which Lightning's
  ``BackboneFinetuning`` unfreezes at the second of 3 epochs (its batches then cost more).

Each round runs every fit three times: once with the callback and the TQDM bar, recording at every
training batch's end what the bar shows (the callback's ETA as last refreshed, once a second),
Lightning's own bar estimate, and the naive ``elapsed / batches done x batches left``; then with and
without the callback and no bar, for its overhead (order alternating between rounds). At 10, 25, 50,
75 and 90% of the fit's duration each estimate shown then is compared with the true remaining time
(from the moment it was computed to ``on_fit_end``). The table gives medians over rounds; the
prediction before step one is the callback's whole-fit total at the first batch. A machine this
small is noisy: the same fit can take 30% longer from one run to the next.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import BackboneFinetuning, ModelCheckpoint, TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import PrecisionTimeCallback

FRACTIONS = (0.10, 0.25, 0.50, 0.75, 0.90)


# ---------------------------------------------------------------------------------------- models
class Classifier(L.LightningModule):
    """Cross-entropy on ``self.net``, the loss in the bar."""

    net: nn.Module

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class MLP(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10))


class Finetuned(MLP):
    """The MLP's hidden layers as a backbone that ``BackboneFinetuning`` freezes, then unfreezes."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone, self.head = self.net[:-1], self.net[-1]

    def configure_optimizers(self):  # as Lightning's fine-tuning docs write it: the trainable ones
        return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=1e-3)


class CNN(Classifier):
    def __init__(self) -> None:
        super().__init__()

        def conv(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

        self.net = nn.Sequential(conv(3, 32, 1), conv(32, 64, 2), conv(64, 64, 2), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(64, 10))


class TinyGPT(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        self.model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=128, vocab_size=1000))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.model(input_ids=x, labels=x).loss
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_loss", self.model(input_ids=x, labels=x).loss, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


class LSTMLM(L.LightningModule):
    """A 2-layer LSTM language model: next-token cross-entropy over 64 tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(1000, 128), nn.Linear(256, 1000)
        self.rnn = nn.LSTM(128, 256, num_layers=2, batch_first=True)

    def _loss(self, batch):
        (x,) = batch
        hidden, _ = self.rnn(self.embed(x[:, :-1]))
        return F.cross_entropy(self.head(hidden).flatten(0, 1), x[:, 1:].flatten())

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


@dataclass(frozen=True)
class Fit:
    name: str
    module: Callable[[], L.LightningModule]
    data: Callable[[float], tuple[TensorDataset, TensorDataset]]
    batch: int
    trainer: dict[str, Any]
    loader: dict[str, Any] = field(default_factory=dict)
    callbacks: Callable[[], list[L.Callback]] = list


def _tensors(kind: str, n: int, generator: torch.Generator) -> TensorDataset:
    if kind == "mlp":
        return TensorDataset(torch.randn(n, 784, generator=generator), torch.randint(0, 10, (n,), generator=generator))
    if kind == "cnn":
        return TensorDataset(torch.randn(n, 3, 32, 32, generator=generator),
                             torch.randint(0, 10, (n,), generator=generator))
    if kind == "lstm":
        return TensorDataset(torch.randint(0, 1000, (n, 65), generator=generator))
    return TensorDataset(torch.randint(0, 1000, (n, 64), generator=generator))


def _data(kind: str, train: int, val: int) -> Callable[[float], tuple[TensorDataset, TensorDataset]]:
    def make(scale: float) -> tuple[TensorDataset, TensorDataset]:
        g = torch.Generator().manual_seed(0)
        return _tensors(kind, max(64, int(train * scale)), g), _tensors(kind, val, g)
    return make


FITS = [
    Fit("mlp", MLP, _data("mlp", 25_600, 2_560), 128, dict(precision="32-true", max_epochs=3)),
    Fit("cnn", CNN, _data("cnn", 12_800, 1_280), 64, dict(precision="32-true", max_epochs=3)),
    Fit("gpt_acc", TinyGPT, _data("gpt", 6_400, 320), 16,
        dict(precision="32-true", max_epochs=2, accumulate_grad_batches=2, val_check_interval=0.5),
        dict(persistent_workers=True)),
    Fit("lstm", LSTMLM, _data("lstm", 3_200, 320), 32, dict(precision="32-true", max_epochs=2, val_check_interval=0.5)),
    # Only the time limit ends it: 50-batch epochs, each validated and saved, for 20 s of training.
    Fit("mlp_time", MLP, _data("mlp", 6_400, 1_280), 128, dict(precision="32-true", max_time={"seconds": 20},
                                                              max_epochs=-1)),
    Fit("finetune", Finetuned, _data("mlp", 25_600, 2_560), 128, dict(precision="32-true", max_epochs=3),
        callbacks=lambda: [BackboneFinetuning(unfreeze_backbone_at_epoch=1)]),
]


# --------------------------------------------------------------------------------------- probes
class Clock(L.Callback):
    """First in the list: on_fit_start and on_fit_end before any other callback's."""

    start = end = 0.0

    def on_fit_start(self, *args) -> None:
        self.start = time.perf_counter()

    def on_fit_end(self, *args) -> None:
        self.end = time.perf_counter()


def tqdm_remaining(bar: Any) -> float | None:
    """Seconds left that a tqdm bar shows (its current epoch only), as ``format_meter`` computes it."""
    if bar is None:
        return None
    d = bar.format_dict
    rate = d.get("rate")
    if rate is None and d.get("elapsed"):
        rate = (d["n"] - (d.get("initial") or 0)) / d["elapsed"]
    return (d["total"] - d["n"]) / rate if rate and d.get("total") else None


class Shown(L.Callback):
    """Last in the list: at every batch end, what each estimate shows and when it was computed."""

    def __init__(self, ptp: PrecisionTimeCallback) -> None:
        self.ptp = ptp
        self.samples: list[tuple[float, float | None, float, float | None, float | None]] = []

    def on_train_batch_end(self, trainer, *args) -> None:
        now = time.perf_counter()
        forecaster = self.ptp.forecaster
        done = forecaster.position if forecaster else 0
        total = forecaster.schedule.total_batches if forecaster else None
        elapsed = now - (forecaster.t0 if forecaster and forecaster.t0 else now)
        naive = elapsed / done * (total - done) if done and total else None
        bar = tqdm_remaining(getattr(trainer.progress_bar_callback, "train_progress_bar", None))
        self.samples.append((now, self.ptp.last_remaining_s, self.ptp._last_refresh, naive, bar))


@dataclass
class Run:
    fit_s: float
    wall_s: float
    before_step_one: float | None = None
    errors: dict[str, dict[float, float | None]] = field(default_factory=dict)  # estimate -> fraction -> error
    summary: str = ""


def _error(shown: float | None, actual: float) -> float | None:
    return None if shown is None or actual <= 0 else shown / actual - 1.0


def run(fit: Fit, kind: str, scale: float) -> Run:
    """``kind``: "eta" (callback + TQDM bar, sampled), "with" or "without" the callback (no bar)."""
    torch.manual_seed(0)
    train, val = fit.data(scale)
    loaders = [DataLoader(d, batch_size=fit.batch, shuffle=i == 0, num_workers=2, **fit.loader)
               for i, d in enumerate((train, val))]
    clock = Clock()
    ptp = PrecisionTimeCallback() if kind != "without" else None
    shown = Shown(ptp) if kind == "eta" else None
    callbacks = [clock] + ([ptp] if ptp else []) + ([TQDMProgressBar(), shown] if shown else [])
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_model_summary=False,
                            enable_progress_bar=kind == "eta", default_root_dir=root,
                            callbacks=callbacks + fit.callbacks() + [ModelCheckpoint(dirpath=root)], **fit.trainer)
        started = time.perf_counter()
        trainer.fit(fit.module(), *loaders)
        wall = time.perf_counter() - started
    result = Run(clock.end - clock.start, wall)
    if ptp is not None and ptp.forecaster is not None and ptp.forecaster.before_step_one_s is not None:
        result.before_step_one = _error(ptp.forecaster.before_step_one_s, result.fit_s)
        result.summary = ptp.summary
    if shown is not None:
        for name in ("ptp", "naive", "bar"):
            result.errors[name] = {}
        for fraction in FRACTIONS:
            moment = clock.start + fraction * result.fit_s
            before = [s for s in shown.samples if s[0] <= moment]
            if not before:
                continue
            t, ours, refreshed, naive, bar = before[-1]
            result.errors["ptp"][fraction] = _error(ours, clock.end - refreshed)  # what the bar shows, from when
            result.errors["naive"][fraction] = _error(naive, clock.end - t)
            result.errors["bar"][fraction] = _error(bar, clock.end - t)
    return result


# ---------------------------------------------------------------------------------------- report
def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _pct(value: float | None) -> str:
    return "     -" if value is None else f"{100 * value:+6.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fits of a few seconds (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        import transformers

        transformers.logging.set_verbosity_error()
    os.environ.setdefault("PTP_CACHE_DIR", tempfile.mkdtemp(prefix="ptp-eta-"))
    fits = [f for f in FITS if not args.only or f.name in args.only.split(",")]
    scale = 0.1 if args.quick else 1.0
    print(f"ETA in the bar of real CPU Lightning fits, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, lightning {L.__version__}; {args.repeats} rounds, medians")
    runs: dict[str, dict[str, list[Run]]] = {f.name: {"eta": [], "with": [], "without": []} for f in fits}
    for r in range(args.repeats):
        for fit in fits:
            for kind in ("eta", "with", "without") if r % 2 == 0 else ("eta", "without", "with"):
                result = run(fit, kind, scale)
                runs[fit.name][kind].append(result)
                print(f"  round {r + 1} {fit.name:8s} {kind:8s} fit {result.fit_s:6.1f} s, trainer.fit "
                      f"{result.wall_s:6.1f} s", flush=True)
    head = "fit      actual s  step-one " + "".join(f"  {int(100 * f):>2d}%: ptp / naive / bar  " for f in FRACTIONS)
    print("\n" + head + "  overhead")
    all_errors: list[float] = []
    for fit in fits:
        eta = runs[fit.name]["eta"]
        cells = []
        for fraction in FRACTIONS:
            values = {name: _median([x.errors[name].get(fraction) for x in eta]) for name in ("ptp", "naive", "bar")}
            if values["ptp"] is not None:
                all_errors.append(abs(values["ptp"]))
            cells.append(f"{_pct(values['ptp'])} /{_pct(values['naive'])} /{_pct(values['bar'])}  ")
        with_s = _median([x.wall_s for x in runs[fit.name]["with"]])
        without_s = _median([x.wall_s for x in runs[fit.name]["without"]])
        overhead = with_s / without_s - 1.0 if with_s and without_s else None
        print(f"{fit.name:8s} {_median([x.fit_s for x in eta]):8.1f}  {_pct(_median([x.before_step_one for x in eta]))}  "
              + "".join(cells) + f"{_pct(overhead)}")
    if all_errors:
        print(f"\nETA error (bar, median over rounds): median {100 * statistics.median(all_errors):.1f}%, "
              f"max {100 * max(all_errors):.1f}% over {len(all_errors)} fit x fraction points")
    for fit in fits:
        if runs[fit.name]["eta"] and runs[fit.name]["eta"][-1].summary:
            print(f"  {fit.name}: {runs[fit.name]['eta'][-1].summary}")


if __name__ == "__main__":
    sys.exit(main())
