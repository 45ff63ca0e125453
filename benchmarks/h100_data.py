"""The measured H100 ground truth shipped in ``benchmarks/data`` and the workloads that produced it.

``data/`` holds what one NVIDIA H100 80GB HBM3 (SXM) measured with PyTorch 2.11 (``env.json``):
``steps.jsonl`` (one training step per workload x precision, with per-op profiles for the first
eight workloads), ``ops.jsonl`` (per-op device times over seeded shape grids), ``micro.json``
(device ceilings) and ``fits.jsonl`` (whole Lightning fits), and ``workloads.py``, the model,
batch and loss definitions that were measured. :func:`build_on_meta` rebuilds a workload on the
meta device, so that the predictor is asked about the very model and batch that were measured,
without allocating them. ``PTP_BENCH_DATA`` points the benchmarks at another copy.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch

DATA = os.environ.get("PTP_BENCH_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
# Workload families, for leave-one-family-out scores (by architecture, never used by the predictor).
FAMILIES: dict[str, tuple[str, ...]] = {
    "convnets": ("resnet18_b256", "mobilenet_v3_large_b256", "vgg16_b64", "shufflenet_v2_b256", "squeezenet1_1_b256"),
    "vision transformers and hybrids": ("maxvit_t_b64",),
    "encoder LMs": ("bert_base_b32_s512",),
    "decoder LMs": ("gpt2_small_b16_s1024", "llama_400m_b8_s2048", "qwen2_gqa_200m_b4_s2048"),
    "recurrent": ("gru_lm_b32_s512",),
    "MLPs": ("mlp_small_b64", "mlp_wide_b4096"),
}


def family_of(workload: str) -> str:
    for family, members in FAMILIES.items():
        if workload in members:
            return family
    raise KeyError(f"{workload!r} belongs to no family in h100_data.FAMILIES")
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
    """A file of ``data/`` (``shared_path("h100", "steps.jsonl")`` -> ``data/steps.jsonl``)."""
    path = os.path.join(DATA, *[p for p in parts if p not in ("h100", "bench")])
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: the benchmarks read benchmarks/data (or $PTP_BENCH_DATA)")
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
    """``name -> (make_model, make_batch, loss_fn)`` from ``data/workloads.py``."""
    if DATA not in sys.path:
        sys.path.insert(0, DATA)
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
