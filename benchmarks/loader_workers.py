"""What a DataLoader's workers take per batch, beside the build the callback times at fit start.

usage: python benchmarks/loader_workers.py [--workers 4] [--only a,b] [--out FILE.jsonl]
       python benchmarks/loader_workers.py --show [FILE.jsonl]

The callback predicts a fit's data-loader wait from one batch built in the training process at fit
start (``ptp_callback.loaders.example_batch``: the loader's first items through its
``collate_fn``). Workers build each batch in another process, into shared memory, and the
training process then maps it (and with ``pin_memory=True`` copies it into page-locked memory).
For each dev workload's batch, from an in-memory dataset that clones one item (as the recorded
Lightning fits' datasets did), this prints the build timed the callback's way and the interval at
which ``--workers`` workers deliver batches to a consumer that does nothing (``pin_memory=True``,
shuffled), times the number of workers: what one batch costs a worker, as long as the workers,
not the consumer, are what limits the interval.

``--show`` prints a recorded file: ``data/loader_workers_h200_2026-11-27.jsonl`` (an NVIDIA H200
machine's 16-core host, torch 2.11, 4 workers, two rounds) gives 1.3-4.6x the in-process build
per worker batch. The interval is taken over 40 batches after the workers' first 8, so it can
overstate a long fit's steady rate: the recorded fits of the wide MLP ran at 16.0-18.2 ms a batch,
where this measured its workers delivering one every 24 ms. ``--show`` also prints each recorded
fit's median interval between training batches (``data/timelines*.jsonl``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from h100_data import DATA, workloads  # noqa: E402
from ptp_callback.loaders import example_batch  # noqa: E402

BATCHES = {"mlp_wide_b4096": 4096, "resnet18_b256": 256, "vgg16_b64": 64, "gpt2_small_b16_s1024": 16}
RECORDED = os.path.join(DATA, "loader_workers_h200_2026-11-27.jsonl")


class OneItem(Dataset):
    """``n`` copies of one example (a fresh clone each), like the recorded fits' datasets."""

    def __init__(self, batch: tuple[torch.Tensor, ...], n: int) -> None:
        self.item = tuple(t[0] for t in batch)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.clone() for t in self.item)


def measure(name: str, batch_size: int, workers: int, batches: int = 40) -> dict:
    make_batch = workloads()[name][1]
    dataset = OneItem(make_batch(torch.device("cpu")), batch_size * (batches + 4 * workers + 8))
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=True, shuffle=True)
    _, build_s = example_batch(loader)
    it = iter(loader)
    for _ in range(2 * workers):  # the workers' start and first batches
        next(it)
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    interval = (time.perf_counter() - started) / batches
    del it
    return {"workload": name, "batch": batch_size, "workers": workers, "example_batch_ms": round(1e3 * build_s, 1),
            "interval_ms": round(1e3 * interval, 1), "worker_batch_ms": round(1e3 * interval * workers, 1),
            "host_cores": os.cpu_count(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}


def show(rows: list[dict]) -> None:
    print(f"{'workload':24s} {'workers':>7s} {'built in process':>17s} {'a worker':>9s} {'ratio':>6s}")
    for r in rows:
        ratio = r["worker_batch_ms"] / max(r["example_batch_ms"], 1e-3)
        print(f"{r['workload']:24s} {r['workers']:7d} {r['example_batch_ms']:14.1f} ms {r['worker_batch_ms']:6.1f} ms "
              f"{ratio:5.1f}x")


def recorded_fit_intervals() -> dict[str, list[float]]:
    """Per workload, the median interval between training batches (ms) of each recorded Lightning
    fit in ``data/timelines*.jsonl`` (4 workers, ``pin_memory=True``)."""
    out: dict[str, list[float]] = {}
    for path in sorted(glob.glob(os.path.join(DATA, "timelines*.jsonl"))):
        with open(path) as f:
            for line in f:
                fit = json.loads(line)
                ends = [e[1] for e in fit["events"] if e[0] == "b"]
                if len(ends) > 10:
                    gaps = [b - a for a, b in zip(ends, ends[1:])]
                    out.setdefault(fit["workload"], []).append(1e3 * statistics.median(gaps))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", help="append the measurements to this JSON-lines file")
    parser.add_argument("--show", nargs="?", const=RECORDED, metavar="FILE", help="print a recorded file")
    args = parser.parse_args(argv)
    if args.show:
        with open(args.show) as f:
            show([json.loads(line) for line in f if line.strip()])
        print("\nrecorded Lightning fits (data/timelines*.jsonl): median interval between training batches")
        for name, intervals in recorded_fit_intervals().items():
            if name in BATCHES:
                print(f"  {name:24s} {len(intervals):2d} fits: {', '.join(f'{x:.1f}' for x in sorted(intervals))} ms")
        return 0
    names = [n for n in args.only.split(",") if n] or list(BATCHES)
    rows = [measure(name, BATCHES[name], args.workers) for name in names]
    show(rows)
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
