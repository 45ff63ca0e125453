"""Traces kept on disk, so that the second fit of the same model pays nothing to trace it.

A trace depends only on what the step runs: the model's structure (module types, their settings
and on/off attributes such as ``gradient_checkpointing``, parameter and buffer shapes and dtypes,
which parameters train), the code of every module's
``forward`` and of the step function, the batch's shapes and dtypes (and whether its attention
masks pad, :mod:`~ptp_callback.mask_checks`), the precision, the optimizer
(class and hyperparameters), the target device type, the torch version and this package's own
code (a trace holds each op's priced bytes and kernels, so an upgrade traces again).
:func:`trace_key` hashes exactly that; :func:`cached_trace_step` returns the stored trace for a
key it has seen and traces (and stores) otherwise.

What the key cannot see -- a helper function the model's ``forward`` calls, edited between two
fits -- would reuse a stale trace: delete the cache directory (``$PTP_CACHE_DIR``, see
:mod:`ptp_callback.cache`) or set ``PTP_TRACE_CACHE=0`` to trace every time.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import pickle
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

import torch

from .batches import batch_leaves
from .cache import cache_dir
from .clipping import ClippedGradients
from .manual_step import ManualOptimization
from .mask_checks import mask_facts
from .precision import PrecisionSpec, as_precision
from .tracer import OptimizerArg, StepFn, Trace, default_step_fn, trace_step

_KEEP = 200  # traces kept; the oldest go first
_VERSION = "1"


def enabled() -> bool:
    """False when ``PTP_TRACE_CACHE=0``."""
    return os.environ.get("PTP_TRACE_CACHE", "1") not in ("0", "false", "no")


@functools.cache
def _package_digest() -> str:
    """A digest of this package's source files: how a trace is recorded and priced."""
    digest = hashlib.sha256()
    package = os.path.dirname(os.path.abspath(__file__))
    try:
        for name in sorted(os.listdir(package)):
            if name.endswith(".py"):
                with open(os.path.join(package, name), "rb") as f:
                    digest.update(name.encode() + b"\0" + f.read())
    except OSError:  # not installed as files (a zip): the release number stands in for the code
        from . import __version__

        return __version__
    return digest.hexdigest()[:16]


def _code_digest(fn: Any, digest: Any) -> None:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        try:
            digest.update(marshal.dumps(code))
        except ValueError:  # a code object marshal cannot write: its name and line still count
            digest.update(f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}".encode())
    else:
        digest.update(repr(fn).encode())


def code_key(*functions: Any) -> str:
    """A stable digest of functions' code (for what a step depends on beyond the model)."""
    digest = hashlib.sha256()
    for fn in functions:
        _code_digest(fn, digest)
    return digest.hexdigest()[:32]


def _batch_signature(batch: Any) -> str:
    """Each leaf's path with its shape and dtype (a tensor) or its ``repr``, and what the batch's
    values decide in the trace (:func:`~ptp_callback.mask_checks.mask_facts`)."""
    parts = [f"{path}={tuple(x.shape)}:{x.dtype}" if isinstance(x, torch.Tensor) else f"{path}={repr(x)[:64]}"
             for path, x in batch_leaves(batch)]
    return f"{type(batch).__qualname__}|{'|'.join(parts)}|{mask_facts(batch)}"


def _optimizer_signature(optimizer: OptimizerArg) -> str:
    if optimizer is None:
        return "default"
    if isinstance(optimizer, ManualOptimization):
        return "manual|" + "|".join(_optimizer_signature(o) for o in optimizer.optimizers)
    if isinstance(optimizer, ClippedGradients):
        return (f"clipped|{optimizer.algorithm}|{optimizer.limit!r}|{optimizer.norm_type!r}|"
                + _optimizer_signature(optimizer.optimizer))
    if isinstance(optimizer, torch.optim.Optimizer):
        groups = [(len(g["params"]), sorted((k, repr(v)) for k, v in g.items() if k != "params"))
                  for g in optimizer.param_groups]
        return f"{type(optimizer).__qualname__}|{groups}"
    return f"factory|{getattr(optimizer, '__qualname__', repr(optimizer))}"


def trace_key(
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None,
    optimizer: OptimizerArg,
    precision: PrecisionSpec,
    *,
    target_type: str,
    train: bool,
) -> str:
    """A hash of everything the trace of this step depends on (see the module doc)."""
    digest = hashlib.sha256()
    digest.update(f"{_VERSION}|{_package_digest()}|{torch.__version__}|{sys.version_info[:2]}|{target_type}|{train}|"
                  f"{precision.on_target(target_type)}".encode())
    digest.update(repr(model).encode())
    classes: dict[type, None] = {}
    for module in model.modules():
        classes[type(module)] = None
        config = getattr(module, "config", None)
        if config is not None and not isinstance(config, (torch.nn.Module, Mapping)):
            digest.update(repr(config).encode())
    for cls in classes:
        digest.update(cls.__qualname__.encode())
        _code_digest(getattr(cls, "forward", None), digest)
    digest.update(_switches(model).encode())
    for name, p in model.named_parameters(remove_duplicate=False):
        digest.update(f"{name}:{tuple(p.shape)}:{p.dtype}:{p.requires_grad}|".encode())
    for name, b in model.named_buffers(remove_duplicate=False):
        digest.update(f"{name}:{tuple(b.shape)}:{b.dtype}|".encode())
    _code_digest(step_fn or default_step_fn, digest)
    digest.update(_batch_signature(batch).encode())
    digest.update(_optimizer_signature(optimizer).encode())
    return digest.hexdigest()[:32]


def _switches(model: torch.nn.Module) -> str:
    """The on/off attributes of the model's modules (``training`` aside: the trace sets it), how
    each checkpoints, and the hooks on it: what a ``forward`` runs without it showing in ``repr`` --
    Hugging Face's ``gradient_checkpointing`` (its layers then run their forward again in the
    backward), timm's ``grad_checkpointing``, a ``use_cache`` or ``fused`` flag, NEFTune's noise on
    the embeddings' output."""
    parts = []
    for name, module in model.named_modules():
        state = vars(module)
        flags = sorted(k for k, v in state.items() if isinstance(v, bool) and v and k != "training")
        checkpointing = state.get("_gradient_checkpointing_func")
        if isinstance(checkpointing, functools.partial):  # its use_reentrant (the function's repr has an address)
            flags.append(f"checkpoint{sorted(checkpointing.keywords.items())}")
        flags.extend(_hooks(state))
        if flags:
            parts.append(f"{name}:{','.join(flags)}")
    return "|".join(parts)


def _hooks(state: dict[str, Any]) -> list[str]:
    """The module's forward and backward hooks, by their functions' names (an address would differ
    from process to process)."""
    names = []
    for kind in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks"):
        for hook in (state.get(kind) or {}).values():
            function = hook.func if isinstance(hook, functools.partial) else hook
            function = getattr(function, "__func__", function)  # a bound method: its function
            qualified = getattr(function, "__qualname__", type(function).__qualname__)
            names.append(f"{kind.strip('_')}={getattr(function, '__module__', '')}.{qualified}")
    return names


def cached_trace_step(
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None = None,
    optimizer: OptimizerArg = None,
    precision: str | int | PrecisionSpec = "32-true",
    *,
    target_type: str = "cuda",
    train: bool = True,
    extra_key: str = "",
) -> tuple[Trace, bool]:
    """:func:`~ptp_callback.tracer.trace_step`, or the stored trace of an identical step.

    Returns the trace and whether it came from the cache. ``extra_key`` adds what else the step
    depends on (e.g. the code of a LightningModule's ``training_step``).
    """
    spec = as_precision(precision)
    if not enabled():
        return trace_step(model, batch, step_fn, optimizer, spec, target_type=target_type, train=train), False
    try:
        key = trace_key(model, batch, step_fn, optimizer, spec, target_type=target_type, train=train)
        key = hashlib.sha256(f"{key}|{extra_key}".encode()).hexdigest()[:32]
    except Exception:  # noqa: BLE001 - an unhashable model is traced every time
        return trace_step(model, batch, step_fn, optimizer, spec, target_type=target_type, train=train), False
    path = os.path.join(cache_dir(), "traces", f"{key}.pkl")
    try:
        with open(path, "rb") as f:
            trace = pickle.load(f)
        if isinstance(trace, Trace):
            os.utime(path)  # recently used: kept longest
            return trace, True
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        pass
    trace = trace_step(model, batch, step_fn, optimizer, spec, target_type=target_type, train=train)
    _store(path, trace)
    return trace, False


def _store(path: str, trace: Trace) -> None:
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(trace, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
        files = sorted((os.path.getmtime(os.path.join(directory, n)), n) for n in os.listdir(directory)
                       if n.endswith(".pkl"))
        for _mtime, name in files[:-_KEEP]:
            os.remove(os.path.join(directory, name))
    except Exception:  # noqa: BLE001 - caching is best effort: a trace that cannot be stored is traced again
        pass
