"""The measured training steps of ``data/steps.jsonl`` with their traces, cached on disk.

Tracing all 13 workloads at 6 precisions takes minutes; the coefficient fits and the
cross-validation only need the traces, which depend on the tracer's source, the workloads and
the library versions -- not on the coefficients. So each trace is pickled in ``.ptp_cache/``
(git-ignored), keyed by a fingerprint of those, and re-traced only when one of them changes.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fit_coefficients import StepCase  # noqa: E402
from h100_data import DATA, PRECISIONS, build_on_meta, load_measured, quiet_transformers  # noqa: E402
from op_data import CACHE  # noqa: E402

from ptp_callback.precision import PrecisionSpec  # noqa: E402
from ptp_callback.tracer import Trace, trace_step  # noqa: E402

_TRACER_FILES = ("tracer.py", "costs.py", "attention.py", "recurrent.py", "cuda_autocast.py", "precision.py",
                 "manual_step.py", "meta_dispatch.py", "fused.py", "repeated_blocks.py", "conv_dispatch.py",
                 "optimizer_precision.py", "clipping.py", "grouped_gemm.py", "batches.py", "mask_checks.py",
                 "known_values.py", "module_conversion.py")


def spec_of(precision: str) -> PrecisionSpec:
    """The data's precision names with the measured flags: TF32 matmuls only in ``32-tf32``,
    cuDNN's TF32 convolutions always (PyTorch's default, kept by the measurement)."""
    return PrecisionSpec.from_setting(precision, matmul_tf32=precision == "32-tf32", conv_tf32=True)


def _fingerprint() -> str:
    digest = hashlib.sha1()
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ptp_callback")
    for name in _TRACER_FILES:
        with open(os.path.join(root, name), "rb") as f:
            digest.update(f.read())
    with open(os.path.join(DATA, "workloads.py"), "rb") as f:
        digest.update(f.read())
    versions = [torch.__version__]
    for module in ("transformers", "torchvision"):
        try:
            versions.append(__import__(module).__version__)
        except ImportError:
            versions.append("-")
    digest.update("|".join(versions).encode())
    return digest.hexdigest()[:16]


def cached_trace(workload: str, precision: str, *, verbose: bool = False) -> Trace:
    """The trace of one measured configuration (traced on the CPU proxy for a CUDA target)."""
    folder = os.path.join(CACHE, f"traces-{_fingerprint()}")
    path = os.path.join(folder, f"{workload}--{precision}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    quiet_transformers()
    model, batch, loss_fn = build_on_meta(workload)
    started = time.perf_counter()
    trace = trace_step(model, batch, loss_fn, None, spec_of(precision), target_type="cuda", trace_on="cpu")
    if verbose:
        print(f"  traced {workload} {precision} in {time.perf_counter() - started:.1f}s", flush=True)
    os.makedirs(folder, exist_ok=True)
    for stale in os.listdir(CACHE):
        if stale.startswith("traces-") and stale != os.path.basename(folder):
            import shutil

            shutil.rmtree(os.path.join(CACHE, stale), ignore_errors=True)
    with open(path, "wb") as f:
        pickle.dump(trace, f)
    return trace


def load_cases(only: set[str] | None = None, verbose: bool = True) -> list[StepCase]:
    """Every measured (workload, precision) with its trace."""
    measured = load_measured()
    cases = []
    for (workload, precision), m in measured.items():
        if only and workload not in only:
            continue
        cases.append(StepCase(workload, precision, m.step_s, cached_trace(workload, precision, verbose=verbose),
                              m.profile))
    order = {p: i for i, p in enumerate(PRECISIONS)}
    return sorted(cases, key=lambda c: (c.workload, order.get(c.precision, 99)))
