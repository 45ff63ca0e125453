"""The measured H100 ground truth in ../shared and the workloads that produced it, for benchmarks.

Loads ``../shared/h100/steps.jsonl`` (step times and per-op profiles per workload x precision)
and rebuilds each workload of ``../shared/bench/workloads.py`` on the meta device, so that the
predictor is asked about the very model and batch that were measured, without allocating them.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch

SHARED = os.environ.get("PTP_SHARED", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
PRECISIONS = ("32-true", "32-tf32", "16-mixed", "bf16-mixed", "bf16-true", "16-true")


@dataclass(frozen=True)
class Measured:
    """One measured configuration of ``steps.jsonl``."""

    workload: str
    precision: str
    step_s: float
    runs: tuple[float, ...]
    profile: tuple[tuple[str, int, float], ...]
    first_step_s: float


def shared_path(*parts: str) -> str:
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: run from the project root with ../shared beside it, or set PTP_SHARED")
    return path


def load_measured() -> dict[tuple[str, str], Measured]:
    """Every measured (workload, precision) of steps.jsonl that has a step time."""
    rows: dict[tuple[str, str], Measured] = {}
    with open(shared_path("h100", "steps.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if "step_s_median" not in d:
                continue
            rows[(d["workload"], d["precision"])] = Measured(
                d["workload"], d["precision"], d["step_s_median"],
                tuple(d.get("step_s_runs") or (d["step_s_median"],)),
                tuple(tuple(r) for r in d.get("profile_top", ())), d.get("first_step_s", float("nan")))
    return rows


def load_micro() -> dict[str, float]:
    with open(shared_path("h100", "micro.json")) as f:
        return json.load(f)


def workloads() -> dict[str, tuple[Any, Any, Any]]:
    """``name -> (make_model, make_batch, loss_fn)`` from ../shared/bench/workloads.py."""
    bench = shared_path("bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from workloads import WORKLOADS  # type: ignore[import-not-found]

    return WORKLOADS


def quiet_transformers() -> None:
    """Silence transformers' warnings about random-weight configs (the workloads build many)."""
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:
        pass


def build_on_meta(name: str) -> tuple[torch.nn.Module, Any, Any]:
    """The workload's model and batch on the meta device (no memory), and its loss function."""
    make_model, make_batch, loss_fn = workloads()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            model = make_model()
    return model, make_batch(torch.device("meta")), loss_fn
