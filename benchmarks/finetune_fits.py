"""Fine-tuning fits on a GPU: a frozen backbone that ``BackboneFinetuning`` unfreezes part-way.

usage: python benchmarks/finetune_fits.py [--device cuda|cpu] [--only resnet18,gpt2] [--out FILE]
       python benchmarks/finetune_fits.py --show FILE     (the table of recorded fits)

Real Lightning fits the way fine-tuning recipes write them: a backbone whose parameters
``BackboneFinetuning`` freezes before training and unfreezes at the second of 3 epochs (each epoch
validated and saved by Lightning's default ``ModelCheckpoint``), an optimizer over the trainable
parameters, loaders with worker processes. Two models:

* ``resnet18``: torchvision's ResNet-18 under a new 100-class head, ``bf16-mixed``, 128 images of
  128x128 a batch (batch norm's own parameters keep training while the backbone is frozen, as
  ``BackboneFinetuning``'s default ``train_bn=True`` has it, so the backward still runs through it);
* ``gpt2``: a 12-layer GPT-2 (124M) backbone under a 2-class head on its mean hidden state,
  ``bf16-mixed``, 16 sequences of 512 tokens (frozen: the forward alone).

For each fit it prints the callback's whole-fit prediction before step one against the fit's
length, the ETA in the bar at 10-90% of the fit (and the naive extrapolation), and how much more an
unfrozen batch cost than a frozen one: predicted at fit start (the step traced a second time with
the backbone trainable) and measured (median batch-to-batch interval of the unfrozen epochs over
the frozen epoch's). ``--device cpu`` runs small versions of both (a check of the script).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import BackboneFinetuning, ModelCheckpoint, TQDMProgressBar
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lightning_eta import FRACTIONS, Clock, Shown, _error, _pct  # noqa: E402

from ptp_callback import PrecisionTimeCallback  # noqa: E402

UNFREEZE_EPOCH = 1


class Pool(Dataset):
    """``length`` items drawn from a small pool of random ones (building them is not the point)."""

    def __init__(self, items: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        self.items, self.length = items, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.items[index % len(self.items)]


class Finetuned(L.LightningModule):
    """Cross-entropy of ``head(backbone(x))``; the optimizer holds the trainable parameters."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), prog_bar=True)

    def configure_optimizers(self):  # as Lightning's fine-tuning docs write it
        return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=1e-4)


class MeanHidden(nn.Module):
    """A GPT-2 body whose output is its mean hidden state."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.body(input_ids=ids).last_hidden_state.mean(dim=1)


def resnet18(small: bool) -> tuple[L.LightningModule, Dataset, Dataset, int]:
    from torchvision.models import resnet18 as tv_resnet18

    net = tv_resnet18(num_classes=100)
    module = Finetuned(nn.Sequential(*list(net.children())[:-1], nn.Flatten()), nn.Linear(512, 100))
    side, batch = (32, 16) if small else (128, 128)
    g = torch.Generator().manual_seed(0)
    items = [(torch.randn(3, side, side, generator=g), torch.tensor(i % 100)) for i in range(256)]
    return module, Pool(items, batch * (12 if small else 150)), Pool(items, batch * (2 if small else 10)), batch


def gpt2(small: bool) -> tuple[L.LightningModule, Dataset, Dataset, int]:
    from transformers import GPT2Config, GPT2Model

    layers, width, seq, batch = (2, 128, 64, 4) if small else (12, 768, 512, 16)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=width // 64, n_positions=seq, vocab_size=50257)
    module = Finetuned(MeanHidden(GPT2Model(config)), nn.Linear(width, 2))
    g = torch.Generator().manual_seed(0)
    items = [(torch.randint(0, 50257, (seq,), generator=g), torch.tensor(i % 2)) for i in range(256)]
    return module, Pool(items, batch * (12 if small else 60)), Pool(items, batch * (2 if small else 5)), batch


FITS = {"resnet18": (resnet18, "bf16-mixed"), "gpt2": (gpt2, "bf16-mixed")}


class Batches(L.Callback):
    """Each training batch's end, by epoch; and the cost change the callback expects at the first batch."""

    def __init__(self, ptp: PrecisionTimeCallback) -> None:
        self.ptp = ptp
        self.ends: dict[int, list[float]] = {}
        self.expected: tuple[int, float] | None = None

    def on_train_batch_start(self, trainer, *args) -> None:
        if self.expected is None and trainer.global_step == 0 and self.ptp.forecaster is not None:
            self.expected = self.ptp.forecaster._cost_change or (-1, 1.0)

    def on_train_batch_end(self, trainer, *args) -> None:
        self.ends.setdefault(trainer.current_epoch, []).append(time.perf_counter())


def _median_interval(ends: list[float]) -> float | None:
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    return statistics.median(gaps) if gaps else None


@dataclass
class Record:
    fit: str
    precision: str
    device: str
    date: str
    fit_s: float
    before_step_one: float | None
    eta: dict[str, dict[str, float | None]] = field(default_factory=dict)  # estimate -> fraction -> error
    factor_predicted: float | None = None
    factor_measured: float | None = None
    batch_s: dict[str, float | None] = field(default_factory=dict)  # epoch -> median batch interval
    summary: str = ""


def run(name: str, device: str) -> Record:
    make, precision = FITS[name]
    small = device == "cpu"
    torch.manual_seed(0)
    module, train, val, batch = make(small)
    workers = 2 if small else 4
    loaders = [DataLoader(d, batch_size=batch, shuffle=i == 0, num_workers=workers, pin_memory=not small)
               for i, d in enumerate((train, val))]
    clock, ptp = Clock(), PrecisionTimeCallback()
    shown, batches = Shown(ptp), Batches(ptp)
    precision = "32-true" if small else precision
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator=device, devices=1, precision=precision, max_epochs=3, logger=False,
                            enable_model_summary=False, default_root_dir=root,
                            callbacks=[clock, ptp, BackboneFinetuning(unfreeze_backbone_at_epoch=UNFREEZE_EPOCH),
                                       batches, TQDMProgressBar(), shown, ModelCheckpoint(dirpath=root)])
        trainer.fit(module, *loaders)
    fit_s = clock.end - clock.start
    forecaster = ptp.forecaster
    record = Record(name, precision, torch.cuda.get_device_name() if device == "cuda" else "cpu",
                    time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), round(fit_s, 3),
                    _error(forecaster.before_step_one_s, fit_s) if forecaster else None, summary=ptp.summary)
    for estimate, index in (("ptp", 1), ("naive", 3)):
        record.eta[estimate] = {}
        for fraction in FRACTIONS:
            moment = clock.start + fraction * fit_s
            before = [s for s in shown.samples if s[0] <= moment]
            if before:
                sample = before[-1]
                since = sample[2] if estimate == "ptp" else sample[0]  # the callback's: from its refresh
                record.eta[estimate][f"{fraction:.2f}"] = _error(sample[index], clock.end - since)
    record.batch_s = {str(epoch): _median_interval(ends) for epoch, ends in sorted(batches.ends.items())}
    frozen = record.batch_s.get("0")
    unfrozen = [s for e, s in record.batch_s.items() if int(e) >= UNFREEZE_EPOCH and s]
    if frozen and unfrozen:
        record.factor_measured = statistics.median(unfrozen) / frozen
    if batches.expected is not None:
        record.factor_predicted = batches.expected[1]
    return record


def show(records: list[Record]) -> None:
    head = "fit       precision   fit s  step-one  " + "".join(f"{round(100 * f):>3d}%: ptp / naive  " for f in FRACTIONS)
    print(head + "  unfrozen/frozen batch: predicted / measured")
    for r in records:
        at = [f"{f:.2f}" for f in FRACTIONS]
        cells = "".join(f"{_pct(r.eta.get('ptp', {}).get(k))} /{_pct(r.eta.get('naive', {}).get(k))}  " for k in at)
        factors = " / ".join("-" if v is None else f"{v:.2f}x" for v in (r.factor_predicted, r.factor_measured))
        print(f"{r.fit:9s} {r.precision:10s} {r.fit_s:6.1f}  {_pct(r.before_step_one)}  {cells}  {factors}")
    for r in records:
        print(f"  {r.fit} ({r.device}, {r.date}): {r.summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="", help="also append one JSON line per fit")
    parser.add_argument("--show", default="", help="print the table of a file of recorded fits and stop")
    args = parser.parse_args()
    if args.show:
        with open(args.show) as f:
            show([Record(**json.loads(line)) for line in f if line.strip()])
        return
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        import transformers

        transformers.logging.set_verbosity_error()
    os.environ.setdefault("PTP_CACHE_DIR", tempfile.mkdtemp(prefix="ptp-finetune-"))
    print(f"Fine-tuning fits on {torch.cuda.get_device_name() if args.device == 'cuda' else 'this CPU'}, "
          f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, lightning {L.__version__}")
    records = []
    for name in [n for n in FITS if not args.only or n in args.only.split(",")]:
        record = run(name, args.device)
        records.append(record)
        print(f"  {name}: fit {record.fit_s:.1f} s", flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(asdict(record)) + "\n")
    print()
    show(records)


if __name__ == "__main__":
    sys.exit(main())
