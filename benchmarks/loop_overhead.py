"""Where a Lightning training batch spends time that the same step in a plain loop does not.

usage: python benchmarks/loop_overhead.py [--device cuda] [--only W:P,...] [--steps N] [--out FILE]

On the H100 fits of 2026-11-27, a Lightning batch of a step whose host work is close to its
device work took longer than the same step timed alone (MaxViT-T 32-true: 162 ms against 135 ms;
Qwen2 bf16-mixed: 72 against 63), while device-bound steps (GPT-2, Llama) took the same. Each
workload's synchronized step is timed here in five settings, the same model, optimizer and
batch in each:

``plain``          the step alone, as ``data/steps.jsonl`` was measured (sync after each step);
``plain+loader``   each step first takes its batch from a DataLoader with 4 workers and
                   ``pin_memory`` and copies it to the device, as Lightning does;
``plain+workers``  the same loader busy building batches, but the step uses its own batch
                   (the workers' memory traffic and the pinning thread without the copy);
``lightning``      ``Trainer.fit`` with a loader without workers, no progress bar, no logger, no
                   checkpoint, no validation; a callback syncs at each batch's end;
``lightning+bar``  as the recorded fits ran it: 4 pinned workers and the progress bar on.

Precisions are Lightning's (``32-true``, ``16-mixed``, ``bf16-mixed``, ``bf16-true``, ``16-true``).
Prints the median milliseconds per step in each setting and its ratio to ``plain``; ``--out``
appends one JSON line per workload. Meant for a GPU; on a CPU, ``--smoke`` checks the script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from h100_data import quiet_transformers, workloads  # noqa: E402
from profile_steps import build_step, sync  # noqa: E402

DEFAULT = ("maxvit_t_b64:32-true", "qwen2_gqa_200m_b4_s2048:bf16-mixed", "gpt2_small_b16_s1024:bf16-mixed",
           "squeezenet1_1_b256:16-mixed")
SMOKE = ("mlp_small_b64:32-true",)


class Repeated(Dataset):
    """One example, copied for every index (the recorded fits' datasets)."""

    def __init__(self, example: tuple[torch.Tensor, ...], n: int) -> None:
        self.example, self.n = example, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.clone() for t in self.example)


def _loader(batch: tuple[torch.Tensor, ...], steps: int, workers: int) -> DataLoader:
    example = tuple(t[0].cpu() for t in batch)
    return DataLoader(Repeated(example, batch[0].shape[0] * steps), batch_size=batch[0].shape[0],
                      num_workers=workers, pin_memory=workers > 0, shuffle=True)


def plain(name: str, precision: str, device: torch.device, steps: int, feed: str) -> list[float]:
    """Synchronized steps of a plain loop; ``feed``: "" (one batch), "loader" or "workers"."""
    step = build_step(workloads()[name], precision, device)
    batch = step.batch
    loader = iter(_loader(batch, steps + 8, 4)) if feed else None
    times = []
    for i in range(steps + 5):
        b = batch
        if loader is not None:
            fetched = next(loader)
            if feed == "loader":  # the loader's items are copies of the step's batch: its dtypes already
                b = tuple(t.to(device, non_blocking=True) for t in fetched)
        # Timed from the batch in hand, as a Lightning batch runs from on_train_batch_start (after
        # the fetch and the copy's launch) to its synchronized end.
        started = time.perf_counter()
        step(b)
        sync(device)
        if i >= 5:
            times.append(time.perf_counter() - started)
    return times


def lightning(name: str, precision: str, device: torch.device, steps: int, busy: bool) -> list[float]:
    """``Trainer.fit`` batch times (start to synchronized end); ``busy``: 4 pinned workers and a bar."""
    import lightning as L

    make_model, make_batch, loss_fn = workloads()[name]

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model()

        def training_step(self, b: Any, i: int) -> torch.Tensor:
            return loss_fn(self.model, b)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class Times(L.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.started = 0.0

        def on_train_batch_start(self, *a: Any) -> None:
            self.started = time.perf_counter()

        def on_train_batch_end(self, *a: Any) -> None:
            sync(device)
            self.times.append(time.perf_counter() - self.started)

    batch = make_batch(torch.device("cpu"))
    times = Times()
    trainer = L.Trainer(accelerator=device.type, devices=1, precision=precision, max_steps=steps + 5, logger=False,
                        enable_checkpointing=False, enable_progress_bar=busy, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[times])
    torch.manual_seed(0)
    trainer.fit(Module(), _loader(batch, steps + 5, 4 if busy else 0))
    return times.times[5:]


SETTINGS: dict[str, Callable[[str, str, torch.device, int], list[float]]] = {
    "plain": lambda n, p, d, s: plain(n, p, d, s, ""),
    "plain+loader": lambda n, p, d, s: plain(n, p, d, s, "loader"),
    "plain+workers": lambda n, p, d, s: plain(n, p, d, s, "workers"),
    "lightning": lambda n, p, d, s: lightning(n, p, d, s, False),
    "lightning+bar": lambda n, p, d, s: lightning(n, p, d, s, True),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", help="comma-separated workload:precision pairs")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--smoke", action="store_true", help="a tiny workload, a few steps (checks the script)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    quiet_transformers()
    torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device)
    pairs = args.only.split(",") if args.only else (SMOKE if args.smoke else DEFAULT)
    steps = 4 if args.smoke else args.steps
    label = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{time.strftime('%Y-%m-%d')} on {label}: median ms per synchronized step ({steps} steps after 5)")
    for pair in pairs:
        name, precision = pair.split(":")
        row: dict[str, Any] = {"workload": name, "precision": precision, "device": label, "torch": torch.__version__}
        cells = []
        for setting, run in SETTINGS.items():
            try:
                row[setting] = statistics.median(run(name, precision, device, steps))
            except Exception as ex:  # noqa: BLE001 -- one failed setting must not lose the others
                row[setting] = None
                print(f"  {pair} {setting}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            value, base = row[setting], row.get("plain")
            ratio = f" ({value / base:.2f}x)" if value and base and setting != "plain" else ""
            cells.append(f"{setting} {1e3 * value:.1f}{ratio}" if value else f"{setting} -")
        print(f"{name} {precision}: " + ", ".join(cells), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
