"""Whole-fit prediction and ETA of ``PrecisionTimeCallback`` in real Lightning fits on this CPU.

usage: python benchmarks/lightning_eta.py [--quick] [--repeats N] [--only a,b] [--omp-passive]

Runs four small Lightning fits on the CPU (synthetic in-memory data) and prints one row per fit:

* actual s: wall time from ``on_fit_start`` to ``on_fit_end``, taken by a timing callback placed
  *first* in the callbacks list (so it starts before, and stops before, the callback's own
  fit-start / fit-end hooks: the same span the callback reports as "fit took");
* predicted s: ``callback.predicted_fit_s``, the whole fit predicted before step one, and its error
  ``(predicted - actual) / actual``;
* ETA error at 5/10/25/50% of the fit's training batches: at the first training-batch end at or
  after that fraction, ``callback.remaining_s(trainer)`` against the actual remaining time (fit end
  minus that moment);
* Lightning bar error at the same moments: the remaining time the TQDM train bar shows (current
  epoch only, computed as tqdm does: ``(total - n) / rate`` with tqdm's fallback
  ``rate = (n - initial) / elapsed``, since Lightning's bars use ``smoothing=0`` and ``format_dict``
  then has no rate), against the actual remaining time of the *whole* fit: what a user reads;
* overhead: ``trainer.fit`` wall time with / without the callback (no progress bar, same other
  callbacks), ``median(with) / median(without) - 1``; it includes the callback's tracing at fit start
  and its precision advice at fit end.

The machine may be shared, so all runs are interleaved: each round runs every fit once as an ETA run
(with the TQDM bar), then with / without the callback (the order alternating between rounds), and
the table reports medians over rounds. The ETA runs use ``refresh_s=0`` (ETA recomputed every
batch), and so do the overhead runs (an upper bound of the per-batch cost).

On a shared machine, mind OpenMP's waiting: with its default (spinning) policy, a neighbour process
holding one of the two cores made a 2-thread MLP step ~14x slower (346 ms instead of 24 ms), which
no median can repair. ``--omp-passive`` reruns the script with ``OMP_WAIT_POLICY=PASSIVE``, which
degrades to about one core's speed instead, but costs a quiet machine 30-70% on these small-op fits
(tiny GPT 26 -> 44 ms per step), so the pre-step-one error is then measured against a slowed fit.
Each run's log line gives the CPU share that other processes (and the hypervisor's steal) took
during it (``others``), from ``/proc/stat`` minus this process's own CPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import logging
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import lightning as L  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from lightning.pytorch.callbacks import TQDMProgressBar  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from ptp_callback import PrecisionTimeCallback  # noqa: E402

FRACTIONS = (0.05, 0.10, 0.25, 0.50)


# ------------------------------------------------------------------------------------------- models
class _Classifier(L.LightningModule):
    """Cross-entropy training and validation of ``self.net``, logged to the bar."""

    net: nn.Module

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), prog_bar=True)


class MLP(_Classifier):
    def __init__(self, width: int = 1024) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                                 nn.Linear(width, 10))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def _conv(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class CNN(_Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(_conv(3, 32, 1), _conv(32, 64, 2), _conv(64, 64, 2), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(64, 10))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class TinyGPT(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=128, vocab_size=1000)
        self.model = GPT2LMHeadModel(config)

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


# --------------------------------------------------------------------------------------------- fits
@dataclass
class FitConfig:
    """One benchmark fit: how to build its module and loaders, and the Trainer settings."""

    name: str
    module: Callable[[], L.LightningModule]
    loaders: Callable[[], tuple[DataLoader, DataLoader]]
    trainer_kwargs: dict[str, Any]
    note: str = ""


@lru_cache(maxsize=None)
def _datasets(kind: str, n_train: int, n_val: int) -> tuple[TensorDataset, TensorDataset]:
    """Synthetic data, built once per shape and reused by every run of a fit."""
    g = torch.Generator().manual_seed(0)

    def make(n: int) -> TensorDataset:
        if kind == "mlp":
            return TensorDataset(torch.randn(n, 784, generator=g), torch.randint(0, 10, (n,), generator=g))
        if kind == "cnn":
            return TensorDataset(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g))
        return TensorDataset(torch.randint(0, 1000, (n, 64), generator=g))  # token ids

    return make(n_train), make(n_val)


def _loaders(kind: str, n_train: int, n_val: int, batch: int, val_batch: int) -> Callable[[], tuple[DataLoader, DataLoader]]:
    def build() -> tuple[DataLoader, DataLoader]:
        train, val = _datasets(kind, n_train, n_val)
        return DataLoader(train, batch_size=batch, shuffle=True), DataLoader(val, batch_size=val_batch)
    return build


def build_fits(quick: bool) -> list[FitConfig]:
    """The four fits, sized for ~20-40 s each alone on 2 CPU cores (``quick``: a few seconds)."""
    s = 0.1 if quick else 1.0

    def n(samples: int, batch: int) -> int:  # whole batches, at least 20 of them
        return max(20, round(samples * s / batch)) * batch

    gpt_steps = max(40, round(1000 * s))
    return [
        FitConfig("mlp_32", MLP, _loaders("mlp", n(51_200, 128), 2_560, 128, 256),
                  dict(precision="32-true", max_epochs=3, val_check_interval=0.5)),
        FitConfig("mlp_bf16_acc", MLP, _loaders("mlp", n(166_400, 128), 2_560, 128, 256),
                  dict(precision="bf16-mixed", max_epochs=2, accumulate_grad_batches=2)),
        FitConfig("cnn_32", CNN, _loaders("cnn", n(35_200, 64), 1_280, 64, 64),
                  dict(precision="32-true", max_epochs=2, limit_val_batches=20)),
        FitConfig("gpt_tiny_bf16", TinyGPT, _loaders("gpt", gpt_steps * 16, 160, 16, 16),
                  dict(precision="bf16-mixed", max_steps=gpt_steps, val_check_interval=gpt_steps // 4)),
    ]


# --------------------------------------------------------------------------------------- callbacks
class FitClock(L.Callback):
    """First in the list: the fit's start and end, before any other callback's hooks run."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()

    def on_fit_end(self, trainer, pl_module) -> None:
        self.end = time.perf_counter()


def tqdm_remaining(bar: Any) -> float | None:
    """Seconds left that a tqdm bar shows, computed as ``tqdm.format_meter`` does."""
    if bar is None:
        return None
    d = bar.format_dict
    n, total, elapsed, rate = d.get("n"), d.get("total"), d.get("elapsed"), d.get("rate")
    if rate is None and elapsed:
        rate = (n - (d.get("initial") or 0)) / elapsed
    if not rate or not total:
        return None
    return (total - n) / rate


class EtaProbe(L.Callback):
    """Placed after the ptp callback and the bar: samples both ETAs at given fractions of the fit."""

    def __init__(self, ptp: PrecisionTimeCallback, fractions: tuple[float, ...] = FRACTIONS) -> None:
        self.ptp = ptp
        self.fractions = fractions
        self.samples: dict[float, dict[str, Any]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        schedule = self.ptp.schedule
        total = schedule.total_batches if schedule is not None else None
        if not total or len(self.samples) == len(self.fractions):
            return
        done = int(trainer.fit_loop.epoch_loop.batch_progress.total.ready)
        for frac in self.fractions:
            if frac not in self.samples and done >= frac * total:
                now = time.perf_counter()
                bar = trainer.progress_bar_callback
                self.samples[frac] = {
                    "t": now, "done": done, "total": total,
                    "ours": self.ptp.remaining_s(trainer),
                    "bar": tqdm_remaining(getattr(bar, "train_progress_bar", None)),
                }


# --------------------------------------------------------------------------------------------- runs
@dataclass
class RunResult:
    kind: str  # "eta", "with", "without"
    fit_s: float  # FitClock: on_fit_start -> on_fit_end
    wall_s: float  # trainer.fit() call
    predicted_s: float | None = None
    calibrated_s: float | None = None
    ours: dict[float, float | None] = field(default_factory=dict)  # ETA errors
    bar: dict[float, float | None] = field(default_factory=dict)
    summary: str = ""
    ptp_warnings: list[str] = field(default_factory=list)
    others: float | None = None  # share of the machine's CPU time others (and steal) took during the fit


def _cpu_snapshot() -> tuple[float, float] | None:
    """(machine busy CPU seconds incl. steal, this process's CPU seconds), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0.0] * 8)[:8]
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    own = os.times()
    return (user + nice + system + irq + softirq + steal) / tick, own.user + own.system


def _others_share(before: tuple[float, float] | None, after: tuple[float, float] | None, wall: float) -> float | None:
    if before is None or after is None or wall <= 0:
        return None
    others = (after[0] - before[0]) - (after[1] - before[1])
    return max(0.0, others) / (wall * (os.cpu_count() or 1))


def _rel(predicted: float | None, actual: float) -> float | None:
    return None if predicted is None or actual <= 0 else (predicted - actual) / actual


def run_fit(fit: FitConfig, kind: str) -> RunResult:
    """One fit: ``eta`` (callback + TQDM bar + probes), ``with`` or ``without`` the callback (no bar)."""
    torch.manual_seed(0)
    module = fit.module()
    train_loader, val_loader = fit.loaders()
    clock = FitClock()
    ptp = PrecisionTimeCallback(refresh_s=0.0) if kind in ("eta", "with") else None
    callbacks: list[L.Callback] = [clock]
    probe = None
    if ptp is not None:
        callbacks.append(ptp)
    if kind == "eta":
        probe = EtaProbe(ptp)
        callbacks += [TQDMProgressBar(), probe]
    trainer = L.Trainer(accelerator="cpu", devices=1, callbacks=callbacks, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, num_sanity_val_steps=2, enable_progress_bar=kind == "eta",
                        **fit.trainer_kwargs)
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        _ignore_lightning_noise()
        cpu_before = _cpu_snapshot()
        started = time.perf_counter()
        trainer.fit(module, train_loader, val_loader)
        wall = time.perf_counter() - started
        cpu_after = _cpu_snapshot()
    found = sorted({str(w.message) for w in caught if w.category.__name__ == "PtpWarning"})
    assert clock.start is not None and clock.end is not None
    result = RunResult(kind, clock.end - clock.start, wall, ptp_warnings=found,
                       others=_others_share(cpu_before, cpu_after, wall))
    if ptp is not None:
        result.predicted_s = ptp.predicted_fit_s
        result.calibrated_s = ptp.calibrated_total_s
        result.summary = ptp.summary
    if probe is not None:
        for frac in FRACTIONS:
            sample = probe.samples.get(frac)
            if sample is None:
                result.ours[frac] = result.bar[frac] = None
                continue
            actual_left = clock.end - sample["t"]
            result.ours[frac] = _rel(sample["ours"], actual_left)
            result.bar[frac] = _rel(sample["bar"], actual_left)
    return result


def _ignore_lightning_noise() -> None:
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    warnings.filterwarnings("ignore", category=PossibleUserWarning)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


# -------------------------------------------------------------------------------------- gather rows
def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def gather_rows(fits: list[FitConfig], repeats: int, log: Callable[[str], None] = print) -> list[dict]:
    """One row per fit (medians over ``repeats`` interleaved rounds), with the raw runs under ``runs``."""
    runs: dict[str, list[RunResult]] = {f.name: [] for f in fits}
    total = len(fits) * repeats * 3
    k = 0
    for r in range(repeats):
        for fit in fits:
            order = ("eta", "with", "without") if r % 2 == 0 else ("eta", "without", "with")
            for kind in order:
                k += 1
                result = run_fit(fit, kind)
                runs[fit.name].append(result)
                extra = ""
                if result.predicted_s is not None:
                    extra = f", predicted {result.predicted_s:.1f} s"
                others = "" if result.others is None else f", others {100 * result.others:.0f}% cpu"
                log(f"[{k:2d}/{total}] round {r + 1} {fit.name:14s} {kind:7s} fit {result.fit_s:6.1f} s, "
                    f"trainer.fit {result.wall_s:6.1f} s{extra}{others}")
    rows = []
    for fit in fits:
        eta = [x for x in runs[fit.name] if x.kind == "eta"]
        with_ = [x.wall_s for x in runs[fit.name] if x.kind == "with"]
        without = [x.wall_s for x in runs[fit.name] if x.kind == "without"]
        med_with, med_without = _median(with_), _median(without)
        rows.append({
            "fit": fit.name,
            "actual_s": _median([x.fit_s for x in eta]),
            "predicted_s": _median([x.predicted_s for x in eta]),
            "pre_error": _median([_rel(x.predicted_s, x.fit_s) for x in eta]),
            "calibrated_error": _median([_rel(x.calibrated_s, x.fit_s) for x in eta]),
            "ours": {f: _median([x.ours.get(f) for x in eta]) for f in FRACTIONS},
            "bar": {f: _median([x.bar.get(f) for x in eta]) for f in FRACTIONS},
            "with_s": med_with, "without_s": med_without,
            "overhead": (med_with / med_without - 1.0) if med_with and med_without else None,
            "runs": runs[fit.name],
        })
    return rows


# ------------------------------------------------------------------------------------------- render
def _pct(value: float | None, width: int = 6) -> str:
    return f"{'-':>{width}s}" if value is None else f"{100 * value:+{width}.1f}"


def _share(runs: list[RunResult]) -> str:
    values = [x.others for x in runs if x.others is not None]
    if not values:
        return "n/a"
    return f"{100 * statistics.median(values):.0f}% (median; max {100 * max(values):.0f}%)"


def render(rows: list[dict]) -> str:
    fr = "/".join(f"{round(100 * f)}" for f in FRACTIONS)
    header = (f"{'fit':14s} {'actual s':>8s} {'pred s':>7s} {'pre err%':>8s}   "
              f"{'ours ETA err% @ ' + fr:^31s}   {'Lightning bar err% @ ' + fr:^31s}  {'ovh %':>6s}")
    lines = [header, "-" * len(header)]
    for r in rows:
        ours = " ".join(_pct(r["ours"][f], 7) for f in FRACTIONS)
        bar = " ".join(_pct(r["bar"][f], 7) for f in FRACTIONS)
        actual = f"{r['actual_s']:8.1f}" if r["actual_s"] is not None else f"{'-':>8s}"
        pred = f"{r['predicted_s']:7.1f}" if r["predicted_s"] is not None else f"{'-':>7s}"
        lines.append(f"{r['fit']:14s} {actual} {pred} {_pct(r['pre_error'], 8)}   {ours}   {bar}  "
                     f"{_pct(r['overhead'], 6)}")
    lines.append("")

    def med_abs(values: list[float | None]) -> str:
        m = _median([abs(v) for v in values if v is not None])
        return "n/a" if m is None else f"{100 * m:.1f}%"

    overhead = _median([r["overhead"] for r in rows])
    lines.append(f"summary: median |pre-step-one error| {med_abs([r['pre_error'] for r in rows])}, "
                 f"median |ETA error @10%| {med_abs([r['ours'][0.10] for r in rows])} "
                 f"(Lightning bar {med_abs([r['bar'][0.10] for r in rows])}), "
                 f"median overhead {'n/a' if overhead is None else f'{100 * overhead:+.1f}%'}")
    lines.append("")
    lines.append("details (trainer.fit medians for the overhead; ETA runs: fit s / predicted s / calibrated "
                 "error per round; the callback's fit-end summary of the last ETA run):")
    for r in rows:
        with_s = "-" if r["with_s"] is None else f"{r['with_s']:.2f}"
        without_s = "-" if r["without_s"] is None else f"{r['without_s']:.2f}"
        eta_runs = [x for x in r["runs"] if x.kind == "eta"]
        per_round = ", ".join(
            f"{x.fit_s:.1f}/{'-' if x.predicted_s is None else f'{x.predicted_s:.1f}'}/{_pct(_rel(x.calibrated_s, x.fit_s), 0).strip()}%"
            for x in eta_runs)
        lines.append(f"  {r['fit']}: with {with_s} s, without {without_s} s (runs: "
                     f"with {', '.join(f'{x.wall_s:.1f}' for x in r['runs'] if x.kind == 'with')}; without "
                     f"{', '.join(f'{x.wall_s:.1f}' for x in r['runs'] if x.kind == 'without')}); "
                     f"ETA runs {per_round}; median calibrated error {_pct(r['calibrated_error'], 0).strip()}%; "
                     f"others took {_share(r['runs'])} of the CPU")
        if eta_runs and eta_runs[-1].summary:
            lines.append(f"    {eta_runs[-1].summary}")
        for message in sorted({m for x in r["runs"] for m in x.ptp_warnings}):
            lines.append(f"    warning: {message}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- cli
def lightning_eta_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shrink every fit to a few seconds (smoke test)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="interleaved rounds per fit (default 3, 1 with --quick)")
    parser.add_argument("--only", default=None, help="comma-separated fit names to run")
    parser.add_argument("--omp-passive", action="store_true",
                        help="rerun with OMP_WAIT_POLICY=PASSIVE (robust to a busy neighbour, slower when alone)")
    return parser


def environment() -> str:
    from ptp_callback.probe import probe_device

    import lightning

    probe = probe_device(torch.device("cpu"))  # read from cache (or measured now, before any timing)
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    gemm = ", ".join(f"{k} {1e3 * max(v.values()):.0f}" for k, v in probe.gemm_tflops.items())
    return "\n".join([
        f"date {datetime.datetime.now().isoformat(timespec='seconds')}, python {platform.python_version()}, "
        f"torch {torch.__version__}, lightning {lightning.__version__}, threads {torch.get_num_threads()} "
        f"(cpus {os.cpu_count()}), OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, load avg {', '.join(f'{x:.2f}' for x in load)}",
        f"cpu probe used by the callback: {probe.device_name}, GEMM GFLOP/s {gemm}, copy {probe.copy_gbps:.1f} GB/s, "
        f"small op {1e6 * probe.small_op_s:.1f} us",
    ])


def main() -> None:
    args = lightning_eta_parser().parse_args()
    if args.omp_passive and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        # OpenMP reads it once, when torch loads it (already imported): start again with it set.
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, *sys.argv])
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    _ignore_lightning_noise()
    with contextlib.suppress(ImportError):
        import transformers

        transformers.logging.set_verbosity_error()  # the tiny GPT2 config's token-id notices
    fits = build_fits(args.quick)
    if args.only:
        wanted = set(args.only.split(","))
        fits = [f for f in fits if f.name in wanted]
    print(environment())
    print(f"{len(fits)} fits x {repeats} rounds x (eta, with, without){' [quick]' if args.quick else ''}")
    sys.stdout.flush()
    started = time.perf_counter()
    rows = gather_rows(fits, repeats, log=lambda s: print(s, flush=True))
    print()
    print(render(rows))
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load avg at end {', '.join(f'{x:.2f}' for x in load)}")


if __name__ == "__main__":
    main()
