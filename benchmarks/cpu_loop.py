"""A framework loop's own work on this CPU (Lightning, the Hugging Face ``Trainer``, an Accelerate
loop), against the plan's estimate of it.

usage: python benchmarks/cpu_loop.py [--batches 2000] [--rounds 2] [--only lightning,hf,accelerate]

Each framework runs in a process of its own (see ``lightning_parts``).

A one-layer model (``nn.Linear(8, 2)``, batch 4, AdamW), whose step is a small fraction of a
millisecond, trains on the CPU in a real ``Trainer.fit`` / ``Trainer.train`` / Accelerate loop; the
bars write to a discarded stream. Printed, in milliseconds, medians over ``--rounds``:

* Lightning in four settings with one batch a step: neither progress bar nor logging, one
  ``self.log("loss", loss, prog_bar=True)`` a step, the TQDM bar alone, and both: the median
  interval between training batch ends, the traced step's prediction, what the interval spends
  beyond it, and what the plan adds to a batch (its loop work per batch and per optimizer step).
* Per framework (Lightning with bar and logging; the ``Trainer`` with its defaults: a tqdm bar, a
  log every 500 steps, clipping at 1.0, a linear schedule; a loop as
  ``examples/accelerate_loop.py`` runs it, with ``ptp.track``'s bar), the loop's work per batch
  and per optimizer step: the fit runs with gradient accumulation over 1, 2, 4 and 8 batches, a
  line through each cycle's median time against its number of batches gives the time per batch
  and per step, less what the plan gives them without the loop's work (the traced forward and
  backward with the loader's own fetch, and the traced optimizer step); and per validation
  (evaluation) batch, its median interval less the plan's validation batch without the loop
  (Lightning, the ``Trainer``: an Accelerate loop's evaluation is the user's own). Beside each, in
  the probe's small ops (this machine's cached probe), and the plan's estimate
  (``host_costs.cpu_host`` with ``LIGHTNING_LOOP`` / ``HF_TRAINER_LOOP`` / ``ACCELERATE_LOOP``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from ptp_callback.probe import probed_small_op_s  # noqa: E402
from ptp_callback.run_prediction import RunPrediction  # noqa: E402

SETTINGS = (("neither", False, False), ("log", False, True), ("bar", True, False), ("bar + log", True, True))
ACCUMULATIONS = (1, 2, 4, 8)


def lightning_parts() -> tuple:
    """Lightning, a one-layer module and a callback that stamps batch ends: imported only in the
    process that times Lightning (importing it sets ``PYTORCH_NVML_BASED_CUDA_CHECK``, after which
    every ``torch.cuda.is_available()`` loads NVML again: 0.35 ms a step of the ``Trainer``'s, which
    asks once a step through its gradient clipping, on a machine without a GPU)."""
    import lightning as L

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
            self.val_ends: list[float] = []

        def on_train_batch_end(self, *args) -> None:
            self.ends.append(time.perf_counter())

        def on_validation_batch_end(self, *args) -> None:
            self.val_ends.append(time.perf_counter())

    return L, OneLayer, BatchEnds


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def median_interval(stamps: list[float], every: int = 1, skip: int = 20) -> float:
    """Median time between every ``every``-th stamp, after the first ``skip`` (warm-up)."""
    kept = stamps[skip:][::every]
    return statistics.median(b - a for a, b in zip(kept, kept[1:]))


class Fit:
    """One fit's median intervals and the prediction it was planned with (seconds)."""

    def __init__(self, cycle_s: float, val_batch_s: float | None, prediction: RunPrediction) -> None:
        self.cycle_s, self.val_batch_s, self.prediction = cycle_s, val_batch_s, prediction
        # The plan's units without the loop's work: a batch's compute and its wait for the loader
        # (which the plan prices apart), an optimizer step, a validation batch.
        plan, host = prediction.plan, prediction.host
        self.batch_s = plan.train_batch_s - host.loop_s
        self.optimizer_s = plan.optimizer_step_s - host.step_loop_s
        self.val_step_s = plan.val_batch_s - host.val_loop_s
        self.small_op_s = probed_small_op_s(prediction.coefficients)


def lightning_fit(batches: int, bar: bool, log: bool, accumulate: int = 1, val_batches: int = 0) -> Fit:
    from ptp_callback import PrecisionTimeCallback

    L, OneLayer, BatchEnds = lightning_parts()
    data = TensorDataset(torch.randn(batches * 4, 8), torch.randint(0, 2, (batches * 4,)))
    ends, ptp = BatchEnds(), PrecisionTimeCallback(advise=False)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=bar, callbacks=[ends, ptp],
                        accumulate_grad_batches=accumulate, limit_val_batches=val_batches or 1.0,
                        num_sanity_val_steps=0)
    with quiet():
        trainer.fit(OneLayer(log), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    val = median_interval(ends.val_ends) if val_batches else None
    return Fit(median_interval(ends.ends, accumulate), val, ptp.prediction)


def hf_fit(batches: int, accumulate: int = 1, val_batches: int = 0) -> Fit:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging as hf_logging

    from ptp_callback.integrations.transformers import PrecisionTimeTrainerCallback

    hf_logging.set_verbosity_error()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(8, 2)

        def forward(self, x, labels):
            return {"loss": F.cross_entropy(self.net(x), labels)}

    class Rows(torch.utils.data.Dataset):
        def __init__(self, n: int) -> None:
            self.x, self.y = torch.randn(n, 8), torch.randint(0, 2, (n,))

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": self.x[i], "labels": self.y[i]}

    class Ends(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.val_ends: list[float] = []

        def on_step_end(self, *args, **kwargs) -> None:
            self.ends.append(time.perf_counter())

        def on_prediction_step(self, *args, **kwargs) -> None:
            self.val_ends.append(time.perf_counter())

    ends, ptp = Ends(), PrecisionTimeTrainerCallback(advise=False)
    steps = batches // accumulate
    settings = dict(eval_strategy="steps", eval_steps=steps) if val_batches else dict(eval_strategy="no")
    args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="cpu_loop_"), max_steps=steps,
                             per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             gradient_accumulation_steps=accumulate, use_cpu=True, report_to="none",
                             save_strategy="no", **settings)
    trainer = Trainer(model=Model(), args=args, train_dataset=Rows(batches * 4),
                      eval_dataset=Rows(val_batches * 4) if val_batches else None, callbacks=[ends, ptp])
    with quiet():
        trainer.train()
    val = median_interval(ends.val_ends) if val_batches else None
    return Fit(median_interval(ends.ends, 1, skip=20 // accumulate + 1), val, ptp.tracker.prediction)


def accelerate_fit(batches: int, accumulate: int = 1, val_batches: int = 0) -> Fit:
    """A loop as ``examples/accelerate_loop.py`` runs it, with ``ptp.track``'s bar; its evaluation
    is the user's own loop (not timed: ``val_batch_s`` is ``None``)."""
    from accelerate import Accelerator

    import ptp_callback as ptp

    accelerator = Accelerator(gradient_accumulation_steps=accumulate)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(batches * 4, 8), torch.randint(0, 2, (batches * 4,)))
    model, optimizer, train = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=4))

    def step_fn(module, batch):
        x, y = batch
        return F.cross_entropy(module(x), y)

    ends: list[float] = []
    with quiet():
        tracker = ptp.track(model, ptp.ClippedGradients(optimizer, 1.0), train, step_fn, epochs=1,
                            accelerator=accelerator, advise=False)
        for batch in tracker.iterate(train):
            with accelerator.accumulate(model):
                accelerator.backward(step_fn(model, batch))
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
            ends.append(time.perf_counter())
        tracker.close()
    return Fit(median_interval(ends, accumulate), None, tracker.prediction)


def loop_work(fit: Callable[..., Fit], batches: int, rounds: int) -> tuple[float, float, float, float, Fit]:
    """The loop's work per batch, per optimizer step and per validation batch (seconds, medians of
    ``rounds``), this machine's small op, and one of the fits."""
    per_batch, per_step, per_val = [], [], []
    for _ in range(rounds):
        fits = {a: fit(batches, accumulate=a, val_batches=batches // 4 if a == 1 else 0) for a in ACCUMULATIONS}
        design = np.array([[a, 1.0] for a in ACCUMULATIONS])
        (batch_s, step_s), *_ = np.linalg.lstsq(design, np.array([fits[a].cycle_s for a in ACCUMULATIONS]), rcond=None)
        one = fits[1]
        per_batch.append(batch_s - one.batch_s)
        per_step.append(step_s - one.optimizer_s)
        if one.val_batch_s is not None:
            per_val.append(one.val_batch_s - one.val_step_s)
    return (statistics.median(per_batch), statistics.median(per_step),
            statistics.median(per_val) if per_val else math.nan, one.small_op_s, one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="lightning,hf,accelerate",
                        help="frameworks, comma-separated: lightning, hf, accelerate")
    args = parser.parse_args()
    only = args.only.split(",")
    if len(only) > 1:  # each framework in a process of its own (see lightning_parts)
        print(f"a framework loop's own work on this CPU, {time.strftime('%Y-%m-%d')}, {torch.get_num_threads()} "
              f"threads; medians of {args.rounds} rounds (ms)", flush=True)
        for key in only:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--batches", str(args.batches),
                            "--rounds", str(args.rounds), "--only", key], check=True)
        return
    if only == ["lightning"]:
        import lightning as L

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # its lines and the callback's

        print(f"Lightning {L.__version__}, one batch a step:\n"
              f"{'setting':12s} {'interval':>9s} {'step':>7s} {'loop':>7s} {'planned loop':>13s}")
        for name, bar, log in SETTINGS:
            fits = [lightning_fit(args.batches, bar, log) for _ in range(args.rounds)]
            interval = statistics.median(f.cycle_s for f in fits)
            step = statistics.median(f.prediction.step.step_s for f in fits)
            planned = statistics.median(f.prediction.host.loop_s + f.prediction.host.step_loop_s for f in fits)
            print(f"{name:12s} {1e3 * interval:9.3f} {1e3 * step:7.3f} {1e3 * (interval - step):7.3f} "
                  f"{1e3 * planned:13.3f}")
        name, fit = "Lightning (bar + log)", lambda n, **kw: lightning_fit(n, True, True, **kw)
    elif only == ["hf"]:
        import transformers

        name, fit = f"HF Trainer {transformers.__version__} (defaults)", hf_fit
    else:
        import accelerate

        name, fit = f"Accelerate {accelerate.__version__} (ptp.track's bar)", accelerate_fit
    batch, step, val, small, one = loop_work(fit, args.batches, args.rounds)
    host = one.prediction.host
    print(f"{name}: small op {1e6 * small:.2f} us; loop work measured / planned ms (measured in small ops): "
          f"per batch {1e3 * batch:.3f} / {1e3 * host.loop_s:.3f} ({batch / small:.0f}), "
          f"per optimizer step {1e3 * step:.3f} / {1e3 * host.step_loop_s:.3f} ({step / small:.0f}), "
          f"per validation batch {1e3 * val:.3f} / {1e3 * host.val_loop_s:.3f} ({val / small:.0f})", flush=True)


if __name__ == "__main__":
    main()
