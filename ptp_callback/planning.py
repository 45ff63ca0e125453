"""Planning a run before renting a GPU: a model's step and run time per precision and device.

What ``ptp predict`` computes, as a pure function of a :class:`PlanRequest` (tests call it):
the model is built on the meta device (no memory, no weights) from ``module:factory`` or from a
local Hugging Face ``config.json``, one training step is traced per precision (AdamW, as the
optimizer most runs use) and predicted on each device.

>>> rows = plan_rows(PlanRequest(model="mypkg.models:make", devices=("h100",), steps=1000))  # doctest: +SKIP
>>> rows.rows[0].step_s, rows.rows[0].run_s                                               # doctest: +SKIP

What a row's run time is: ``steps x (step + gradient all-reduce across --gpus)`` -- the model's
compute under the precision. Data loading, evaluation, checkpoints and start-up are not in it (the
run forecaster adds them once a run starts: ``ptp.track``, ``PrecisionTimeCallback``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .devices import DeviceSpec

__all__ = ["ALL_PRECISIONS", "PlanRequest", "PlanRow", "PlanTable", "load_model", "plan_rows"]

#: What ``--precision all`` predicts: the training precisions, fp32 with and without TF32.
ALL_PRECISIONS: tuple[str, ...] = ("32-true", "32-true+tf32", "bf16-mixed", "16-mixed", "bf16-true", "16-true")

# The dtype each precision needs a fast path for on the device (DeviceSpec.peak_tflops keys).
_NEEDS = {"32-true+tf32": "tf32", "bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "16-true": "fp16",
          "64-true": "fp64"}


@dataclass(frozen=True)
class PlanRequest:
    """What to predict. ``model``: ``module:factory`` (or ``path/file.py:factory``), or a local
    ``config.json`` (or the folder holding it); ``steps``, or ``epochs`` over ``samples`` training
    examples; ``usd_per_gpu_hour`` adds each run's cost: one price for every device, or a price per
    device name (``{"h100": 2.5, "a100": 1.3}``; devices without one get no cost)."""

    model: str
    batch_size: int | None = None
    seq_len: int | None = None
    precisions: tuple[str, ...] = ("bf16-mixed",)
    devices: tuple[str, ...] = ("h100",)
    gpus: int = 1
    steps: int | None = None
    epochs: float | None = None
    samples: int | None = None
    usd_per_gpu_hour: float | dict[str, float] | None = None


@dataclass(frozen=True)
class PlanRow:
    """One precision on one device (``step_s``/``run_s`` are ``None`` where it is not supported)."""

    precision: str
    device: str
    device_name: str
    supported: bool
    step_s: float | None
    run_s: float | None
    cost_usd: float | None
    note: str = ""


@dataclass(frozen=True)
class PlanTable:
    """The rows, and what they were computed from."""

    model: str
    parameters: int
    batch: str
    steps: int | None
    gpus: int
    rows: list[PlanRow]
    notes: list[str] = field(default_factory=list)


def plan_rows(request: PlanRequest) -> PlanTable:
    """Predict every requested precision on every requested device (see the module doc).

    Raises ``ValueError`` (one line, saying what to do) for a request that cannot be planned.
    """
    from .device_names import resolve_device_name

    _check_request(request)
    notes: list[str] = []
    devices: list[DeviceSpec] = []
    for name in request.devices:
        spec, note = resolve_device_name(name)
        devices.append(spec)
        if note:
            notes.append(note)
    prices: dict[str, float] = {}
    if isinstance(request.usd_per_gpu_hour, dict):
        for name, price in request.usd_per_gpu_hour.items():
            key = resolve_device_name(name)[0].key
            if key not in {spec.key for spec in devices}:
                raise ValueError(f"--usd-per-gpu-hour {name}={price}: {key} is not among the devices predicted "
                                 f"({', '.join(spec.key for spec in devices)}); add it to --device")
            prices[key] = float(price)
    elif request.usd_per_gpu_hour is not None:
        prices = {spec.key: float(request.usd_per_gpu_hour) for spec in devices}
    named = [label for label in request.precisions if label != "all"]
    precisions = tuple(dict.fromkeys([*(ALL_PRECISIONS if "all" in request.precisions else ()), *named]))
    specs = {label: _precision_spec(label) for label in precisions}
    model, batch, description, step_fn = load_model(request.model, request.batch_size, request.seq_len)
    with _quiet_transformers():
        return _plan(request, model, batch, description, step_fn, devices, specs, notes, prices)


def _plan(request: PlanRequest, model: torch.nn.Module, batch: Any, description: str, step_fn: Any,
          devices: list[DeviceSpec], specs: dict[str, Any], notes: list[str], prices: dict[str, float]) -> PlanTable:
    from .arguments import check_model
    from .comm import ddp_exposed_seconds
    from .predict import simulate
    from .step import resolve_device
    from .trace_cache import cached_trace_step
    from .tracer import TraceError

    check_model(model, f"ptp predict {request.model}")
    steps = _steps(request, batch)
    grad_bytes = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)  # fp32 gradients all-reduced
    rows: list[PlanRow] = []
    for label, spec in specs.items():
        trace = None
        for device in devices:
            needed = _NEEDS.get(label)
            if needed and device.peak(needed) is None:
                rows.append(PlanRow(label, device.key, device.name, False, None, None, None,
                                    f"no {needed} on {device.key}"))
                continue
            if trace is None:
                try:
                    trace, _cached = cached_trace_step(model, batch, step_fn, None, spec, target_type="cuda")
                except TraceError as exc:
                    raise ValueError(f"ptp predict {request.model}: {exc}") from None
            _, coefficients = resolve_device(device)
            step = simulate(trace, device, coefficients)
            comm = 0.0
            if request.gpus > 1 and device.interconnect_gbs:
                comm = ddp_exposed_seconds(grad_bytes, step.breakdown["phase"]["backward"], world_size=request.gpus,
                                           link_gbs=device.interconnect_gbs)
            step_s = step.step_s + comm
            run_s = step_s * steps if steps is not None else None
            price = prices.get(device.key)
            cost = run_s / 3600.0 * request.gpus * price if run_s is not None and price is not None else None
            rows.append(PlanRow(label, device.key, device.name, True, step_s, run_s, cost))
    params = sum(p.numel() for p in dict.fromkeys(model.parameters()))
    return PlanTable(request.model, params, description, steps, request.gpus, rows, notes)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers logs notes about configs as a model first runs: not the planner's output."""
    module = sys.modules.get("transformers")
    if module is None:
        yield
        return
    level = module.logging.get_verbosity()
    module.logging.set_verbosity_error()
    try:
        yield
    finally:
        module.logging.set_verbosity(level)


def _check_request(request: PlanRequest) -> None:
    for name in ("batch_size", "seq_len", "steps", "samples"):
        value = getattr(request, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value}: expected a positive number")
    if request.gpus < 1:
        raise ValueError(f"--gpus {request.gpus}: expected 1 or more")
    if request.epochs is not None and (request.epochs <= 0 or request.samples is None):
        raise ValueError("--epochs needs --samples (the training set's size) and a positive number of epochs")
    if request.samples is not None and request.epochs is None:
        raise ValueError("--samples needs --epochs")
    if request.steps is not None and request.epochs is not None:
        raise ValueError("give --steps or --epochs, not both")
    prices = request.usd_per_gpu_hour
    for price in (prices.values() if isinstance(prices, dict) else [] if prices is None else [prices]):
        if not math.isfinite(price) or price < 0:
            raise ValueError(f"--usd-per-gpu-hour {price}: expected a price >= 0")


def _precision_spec(label: str) -> Any:
    """A precision as the planner reads it: TF32 only when named (``32-true+tf32``), not from this
    machine's torch flags; cuDNN convolutions at torch's default (TF32 allowed)."""
    from .precision import PrecisionSpec

    raw = label.strip().lower()
    if raw in ("32-true+tf32", "tf32", "32-tf32"):
        return PrecisionSpec.from_setting("32-true", matmul_tf32=True, conv_tf32=True)
    try:
        return PrecisionSpec.from_setting(raw, matmul_tf32=False, conv_tf32=True)
    except ValueError:
        raise ValueError(f"--precision {label}: expected 'all' or some of {', '.join(ALL_PRECISIONS)}, "
                         "64-true") from None


def _steps(request: PlanRequest, batch: Any) -> int | None:
    if request.steps is not None:
        return request.steps
    if request.epochs is None or request.samples is None:
        return None
    per_step = _leading_dim(batch) * request.gpus
    return math.ceil(request.epochs * math.ceil(request.samples / per_step))


def _leading_dim(batch: Any) -> int:
    from torch.utils._pytree import tree_flatten

    leaves, _ = tree_flatten(batch)
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    raise ValueError("cannot tell the batch size of the example batch: give --steps instead of --epochs")


# ------------------------------------------------------------------------------------ the model
def load_model(source: str, batch_size: int | None, seq_len: int | None) -> tuple[torch.nn.Module, Any, str, Any]:
    """``(model on the meta device, example batch, a description of the batch, step_fn or None)``."""
    if source.endswith(".json") or os.path.isdir(source):
        return _from_config(source, batch_size, seq_len)
    if ":" not in source:
        raise ValueError(f"{source!r}: expected module:factory (a function returning the model, or the model and "
                         "an example batch) or the path of a config.json")
    return _from_factory(source, batch_size, seq_len)


def _from_factory(source: str, batch_size: int | None, seq_len: int | None) -> tuple[torch.nn.Module, Any, str, Any]:
    module_name, _, attr = source.rpartition(":")
    try:
        if module_name.endswith(".py"):
            if not os.path.isfile(module_name):
                raise ValueError(f"{source!r}: no file {module_name}")
            spec = importlib.util.spec_from_file_location(os.path.basename(module_name)[:-3], module_name)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())  # as `python -m` would: modules beside the user
            try:
                module = importlib.import_module(module_name)
            finally:
                sys.path.remove(os.getcwd())
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is theirs to fix
        raise ValueError(f"{source!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise ValueError(f"{source!r}: {module_name} has no function {attr!r}")
    if not callable(factory):
        raise ValueError(f"{source!r}: {attr!r} in {module_name} is not a function ({type(factory).__name__})")
    accepted = _parameters(factory)
    kwargs = {k: v for k, v in (("batch_size", batch_size), ("seq_len", seq_len)) if v is not None and k in accepted}
    try:
        with torch.device("meta"):
            built = factory(**kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{source!r}: the factory raised {type(exc).__name__}: {exc}") from None
    model, batch, step_fn = (tuple(built) + (None,))[:3] if isinstance(built, tuple) and len(built) in (2, 3) \
        else (built, None, None)
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if batch is not None and value is not None and name not in accepted:
            raise ValueError(f"--{name.replace('_', '-')} {value}: {source} returns its own batch and takes no "
                             f"{name} argument; add one to it or drop --{name.replace('_', '-')}")
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"{source!r} returned {type(model).__name__}; expected an nn.Module, (model, batch) or "
                         "(model, batch, step_fn)")
    if step_fn is not None and not callable(step_fn):
        raise ValueError(f"{source!r}: the third value it returned is not a step_fn(model, batch) -> loss")
    if batch is None:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "vocab_size"):
            raise ValueError(f"{source!r} returned a model without an example batch: return (model, batch) from it")
        batch = _token_batch(model, config, batch_size, seq_len)
    return model, batch, _describe(batch), step_fn


def _parameters(fn: Any) -> set[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return {"batch_size", "seq_len"}
    return {p.name for p in params}


def _from_config(source: str, batch_size: int | None, seq_len: int | None) -> tuple[torch.nn.Module, Any, str, Any]:
    path = source if source.endswith(".json") else os.path.join(source, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{source!r}: no such config file" if source.endswith(".json")
                         else f"{source!r}: no config.json in that folder")
    try:
        import transformers
    except ImportError:
        raise ValueError("reading a config.json needs transformers: pip install 'ptp-callback[hf]'") from None
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{source!r}: not a Hugging Face model config ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    names = list(getattr(config, "architectures", None) or [])
    cls = getattr(transformers, names[0], None) if names else None
    try:
        with torch.device("meta"):
            model = cls(config) if cls is not None else transformers.AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{source!r}: cannot build the model ({type(exc).__name__}: {exc})") from None
    batch = _token_batch(model, config, batch_size, seq_len)
    return model, batch, _describe(batch) + f" ({type(model).__name__})", None


def _token_batch(model: torch.nn.Module, config: Any, batch_size: int | None, seq_len: int | None) -> dict[str, Any]:
    """Token ids and labels for a language model (class labels for a sequence classifier)."""
    try:
        inputs = [name for name in inspect.signature(model.forward).parameters if name != "self"]
    except (TypeError, ValueError):
        inputs = ["input_ids", "labels"]
    if "input_ids" not in inputs or "labels" not in inputs:
        raise ValueError(f"{type(model).__name__} does not train on token ids and labels (its forward takes "
                         f"{', '.join(inputs[:4])}, ...): from a config.json `ptp predict` builds token batches only; "
                         "give this model as a factory returning it and an example batch (`file.py:factory`)")
    longest = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512
    b, s = batch_size or 8, seq_len or min(512, int(longest))
    if s > longest:
        raise ValueError(f"--seq-len {s}: the model takes at most {longest} positions")
    ids = torch.zeros(b, s, dtype=torch.long, device="meta")
    if type(model).__name__.endswith("ForSequenceClassification"):
        return {"input_ids": ids, "labels": torch.zeros(b, dtype=torch.long, device="meta")}
    return {"input_ids": ids, "labels": ids}


def _describe(batch: Any) -> str:
    """``batch input_ids 8x1024, labels 8x1024`` / ``batch 64x1024, 64``."""
    def shape(t: Any) -> str:
        return "x".join(str(d) for d in t.shape) if isinstance(t, torch.Tensor) else type(t).__name__

    if isinstance(batch, dict):
        return "batch " + ", ".join(f"{k} {shape(v)}" for k, v in batch.items())
    if isinstance(batch, (tuple, list)):
        return "batch " + ", ".join(shape(v) for v in batch)
    return "batch " + shape(batch)
