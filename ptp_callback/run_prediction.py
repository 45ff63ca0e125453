"""A whole run predicted before step one: trace the steps, predict them, cost the rest of the run.

The one flow every adapter shares (Lightning, Accelerate, a plain loop, the HF ``Trainer``): trace
the training step (and the validation step) of the real model under the run's precision -- from
the on-disk trace cache when the same step was traced before -- predict them on the target
device, take the host's costs (probed once per machine, cached), and turn it all into the
:class:`~ptp_callback.run_plan.RunPlan` the forecaster starts from.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from .allocator import settle_cpu_allocator
from .coefficients import CostCoefficients
from .devices import DeviceSpec
from .host_costs import (CPU_HOST, H100_HOST, HostCosts, LoopWork, cpu_host, probe_host, spare_cpu_cores,
                         worker_batch_seconds)
from .precision import PrecisionSpec
from .predict import StepPrediction, simulate
from .probe import probed_small_op_s
from .run_plan import LoaderFacts, RunPlan, StepCosts, plan_run
from .schedule import FitSchedule
from .step import resolve_device
from .trace_cache import cached_trace_step
from .tracer import OpRecord, OptimizerArg, StepFn, Trace, TraceError, TraceWarning

if TYPE_CHECKING:
    from .advisor import PrecisionOption


@dataclass(frozen=True)
class CheckpointFacts:
    """What the plan needs of the run's checkpoints: where they go, whether the optimizer state is
    saved, whether each save replaces (deletes) the previous file, and whether a save serializes
    the checkpoint into memory before writing it (``buffered``, Lightning's way)."""

    directory: str | None = None
    weights_only: bool = False
    replaces_previous: bool = False
    buffered: bool = False
    weights_bytes: float | None = None  # when a save writes less than every parameter (a PEFT model's adapters)


@dataclass
class RunPrediction:
    """Everything predicted before step one (``trace_s``: seconds spent tracing now, 0 if cached)."""

    trace: Trace
    step: StepPrediction
    val_step: StepPrediction | None
    plan: RunPlan
    device: DeviceSpec
    coefficients: CostCoefficients
    host: HostCosts
    checkpoint_bytes: float
    trace_s: float
    cached: bool
    notes: list[str] = field(default_factory=list)
    saves_optimizer_state: bool = False  # a checkpoint holds the optimizer's state


def predict_run(
    model: torch.nn.Module,
    train_batch: Any,
    step_fn: StepFn | None,
    optimizer: OptimizerArg,
    precision: PrecisionSpec,
    device: str | torch.device | DeviceSpec,
    *,
    run_device: torch.device | None = None,
    val_batch: Any = None,
    val_step_fn: StepFn | None = None,
    train_loader: LoaderFacts = LoaderFacts(),
    val_loader: LoaderFacts = LoaderFacts(),
    sanity_batches: int = 0,
    checkpoint: CheckpointFacts | None = None,
    host: HostCosts | None = None,
    communication: Callable[[StepPrediction, DeviceSpec], float] | None = None,
    loader_started_before_first_epoch: bool = False,
    model_to_cpu_at_end: bool = False,
    framework_loop: LoopWork | None = None,
    val_workers_live_on: bool = False,
    compiled: bool = False,
    extra_key: str = "",
) -> RunPrediction:
    """Predict a run before its first step (see the module doc).

    ``device`` is the device predicted for; ``run_device`` the one training runs on here (its host
    costs are probed when it is the predicted one). ``communication(step, device)`` gives the
    seconds of gradient communication one optimizer step adds (data-parallel training).
    ``extra_key`` is what else the step's trace depends on (a framework's step method, for the
    trace cache). ``framework_loop``: the framework loop that runs the batches (Lightning's hooks, logging,
    progress bar: :data:`~ptp_callback.host_costs.LIGHTNING_LOOP`), whose own work a CPU host
    estimates from its per-op time (:func:`cpu_host`).
    ``val_workers_live_on``: a validation run's loader workers outlive it (see
    :func:`~ptp_callback.run_plan.plan_run`). ``compiled``: ``torch.compile`` compiles the model, so
    the sanity check's time is mostly its compilation, which no validation run pays again (a CPU
    MLP's check took 3.0 s; a validation run afterwards 0.65 s): it does not refine the plan.
    """
    trains_on_cpu = run_device is not None and run_device.type == "cpu"
    if trains_on_cpu:
        settle_cpu_allocator()  # the allocator state the CPU cost model assumes, for the whole fit
    spec, coef = resolve_device(device)
    target_type = spec.trace_target
    on_gpu = target_type == "cuda"
    started = time.perf_counter()
    trace, cached = cached_trace_step(model, train_batch, step_fn, optimizer, precision, target_type=target_type,
                                      extra_key=extra_key)
    step = simulate(trace, spec, coef)
    val_step = None
    notes = list(trace.notes)
    if val_batch is not None:
        try:
            val_trace, val_cached = cached_trace_step(model, val_batch, val_step_fn, None, precision,
                                                      target_type=target_type, train=False, extra_key=extra_key)
        except TraceError as exc:
            val_trace, val_cached = _forward_of(trace), True
            note = f"{exc}; its batches are priced as the training step's forward"
            warnings.warn(f"ptp: {note}", TraceWarning, stacklevel=2)
            notes.append(note)
        val_step = simulate(val_trace, spec, coef)
        cached = cached and val_cached
    trace_s = time.perf_counter() - started
    if host is None:
        base = H100_HOST if on_gpu else CPU_HOST
        if not on_gpu and framework_loop is not None and "host_speed" in coef.extra:  # a probed CPU
            base = cpu_host(probed_small_op_s(coef), framework_loop)
        if run_device is not None and (run_device.type == "cuda") == on_gpu:  # training runs here: measure it
            host = probe_host(base, checkpoint_dir=checkpoint.directory if checkpoint else None,
                              buffered_saves=bool(checkpoint and checkpoint.buffered),
                              num_workers=max(train_loader.num_workers, val_loader.num_workers), device=run_device)
        else:
            host = base
    if trains_on_cpu and not on_gpu:
        train_loader, val_loader = _with_worker_costs(train_loader), _with_worker_costs(val_loader)
    comm_s = communication(step, spec) if communication is not None else 0.0
    checkpoint_bytes = 0.0
    state_bytes = float(trace.param_bytes + trace.optimizer_state_bytes)
    if checkpoint is not None:
        weights = float(trace.param_bytes if checkpoint.weights_bytes is None else checkpoint.weights_bytes)
        checkpoint_bytes = weights + (0.0 if checkpoint.weights_only else float(trace.optimizer_state_bytes))
    plan = plan_run(StepCosts.of(step), StepCosts.of(val_step) if val_step is not None else None, host,
                    on_gpu=on_gpu, autocast=precision.autocast_dtype is not None, train_loader=train_loader,
                    val_loader=val_loader, sanity_batches=sanity_batches, checkpoint_bytes=checkpoint_bytes,
                    saves_replace_previous=bool(checkpoint and checkpoint.replaces_previous),
                    state_bytes_to_cpu_at_end=state_bytes if model_to_cpu_at_end and on_gpu else 0.0,
                    comm_s=comm_s, loader_started_before_first_epoch=loader_started_before_first_epoch,
                    sanity_calibrates=not on_gpu and not compiled, spare_cores=None if on_gpu else spare_cpu_cores(),
                    step_memory_bytes=0.0 if on_gpu else step_memory_bytes(trace),
                    val_workers_live_on=val_workers_live_on)
    return RunPrediction(trace, step, val_step, plan, spec, coef, host, checkpoint_bytes, 0.0 if cached else trace_s,
                         cached, notes, saves_optimizer_state=checkpoint is not None and not checkpoint.weights_only)


def step_as_it_is(prediction: RunPrediction, model: torch.nn.Module, batch: Any, step_fn: StepFn | None,
                  optimizer: OptimizerArg, precision: PrecisionSpec, *, extra_key: str = "") -> StepPrediction:
    """The training step of ``model`` traced again (other parameters train now, another optimizer
    group updates them), predicted at the costs ``prediction`` was made with."""
    trace, _cached = cached_trace_step(model, batch, step_fn, optimizer, precision,
                                       target_type=prediction.device.trace_target, extra_key=extra_key)
    return simulate(trace, prediction.device, prediction.coefficients)


def _forward_of(trace: Trace) -> Trace:
    """A training step's forward alone: what a validation step that cannot be traced (one that counts
    what its model decides with ``int(...)``) stands in for; the same model on a batch of the same kind."""
    return replace(trace, ops=[op for op in trace.ops if op.phase == "forward"])


def _with_worker_costs(loader: LoaderFacts) -> LoaderFacts:
    """A CPU fit's loader with what its workers' batches cost the step, measured here (cached)."""
    if loader.num_workers <= 0 or loader.worker_batch_s:
        return loader
    try:
        cost = worker_batch_seconds(loader.num_workers, loader.batch_bytes, loader.load_s)
    except Exception:  # noqa: BLE001 - workers that cannot start here: the plan's estimate from the build time stands
        return loader
    return loader if cost is None else replace(loader, worker_batch_s=cost)


def step_memory_bytes(trace: Trace) -> float:
    """The host memory a CPU training step writes: its parameters and their gradients, the
    optimizer's state, and every new tensor of its forward pass (the activations backward reads;
    a 4-layer GPT-2 step: 347 MB, 0.87 s at 2.5 ns a byte; its first batch of a later epoch took 0.95 s
    beyond a steady one).

    Or, where it is more, what the step's peak of new memory (``Trace.peak_new_bytes``: gradients,
    activations and the optimizer's temporaries at once) takes beside the parameters and the
    optimizer's state: a model with much state and few activations writes its gradients and the
    temporaries of its update over pages the last step used (an ``EmbeddingBag`` recommender's
    AdamW step: 77 MB so, 52 MB by the forward's tensors; its first batch of a later epoch
    copied 82 MB, 2-thread Xeon, 2026-11-28)."""
    forward = sum(op.out_bytes + _lstm_workspace_bytes(op) for op in trace.ops
                  if op.phase == "forward" and not _in_place(op.name))
    by_forward = 2.0 * trace.param_bytes + trace.optimizer_state_bytes + forward
    return max(by_forward, float(trace.param_bytes + trace.optimizer_state_bytes + trace.peak_new_bytes))


# What oneDNN's LSTM layer keeps for its backward (the gates and states of every step), per hidden
# cell, step and sequence: 62 bytes in fp32 (15.5 values), 44.5 in bf16 (torch 2.15, 2-thread Xeon,
# 2026-11-26: 32.8 MB for a layer of 256 over 64 steps and 32 sequences, 64.6 MB at 512, 65.4 MB
# over 128 steps).
_LSTM_WORKSPACE_BYTES_PER_CELL = {4: 62.0, 2: 44.5}


def _lstm_workspace_bytes(op: OpRecord) -> float:
    """The workspace of a oneDNN LSTM layer in a training step, which the fake op returns empty
    (``mkldnn_rnn_layer``'s fourth output): for a 2-layer LSTM's step the largest thing it writes."""
    if op.name != "aten.mkldnn_rnn_layer.default" or len(op.out_shapes) < 4 or any(op.out_shapes[3]):
        return 0.0
    seq, batch, hidden = op.out_shapes[0][0], op.out_shapes[2][0], op.out_shapes[2][-1]
    return seq * batch * hidden * _LSTM_WORKSPACE_BYTES_PER_CELL[2 if op.out_dtypes[0] in ("bf16", "fp16") else 4]


def _in_place(name: str) -> bool:
    """``aten.add_.Tensor``: the op writes a tensor it was given (already counted)."""
    parts = name.split(".")
    return len(parts) > 1 and parts[1].endswith("_")


def advice_cost_s(prediction: RunPrediction) -> float:
    """Seconds the precision advice costs: a trace and a prediction per candidate precision."""
    return 6 * (prediction.trace_s + 0.05)


def run_advice(prediction: RunPrediction, options: list[PrecisionOption], current: str, schedule: FitSchedule,
               fit_s: float | None) -> str | None:
    """The advice line when another of ``options`` is predicted to make this run noticeably shorter,
    else ``None``. Only the steps' compute still to come changes with the precision; the rest of
    the run is kept as it is."""
    from .advisor import advice

    work = schedule.remaining(schedule.start_batch)
    optimizer_s = prediction.step.breakdown["phase"].get("optimizer", 0.0)
    compute = (work.train_batches or 0) * (prediction.step.step_s - optimizer_s) + \
        (work.optimizer_steps or 0) * optimizer_s
    return advice(options, current, fit_s, fixed_s=max(0.0, (fit_s or 0.0) - compute))


def precision_advice(
    prediction: RunPrediction,
    model: torch.nn.Module,
    batch: Any,
    step_fn: StepFn | None,
    optimizer: OptimizerArg,
    *,
    current: PrecisionSpec,
    schedule: FitSchedule,
    fit_s: float | None,
    measured_step_s: float | None = None,
    corrections: dict[str, float] | None = None,
    extra_key: str = "",
) -> str | None:
    """One line of advice: which precision is predicted to make this run shortest, and by how much.

    Only the steps' compute changes with the precision: the rest of the run (loader waits, saves,
    validation's loaders, the loop's own work) is kept as it is. When no other precision is
    predicted noticeably faster, the line says that the current one is the one to keep.
    """
    from .advisor import compare_precisions

    # At the costs the run was predicted with: its device's spec resolves to them (a CPU's to its
    # probe's coefficients, see step.resolve_device).
    options = compare_precisions(model, batch, step_fn, optimizer, current=current, device=prediction.device,
                                 corrections=corrections, measured_step_s=measured_step_s, extra_key=extra_key)
    text = run_advice(prediction, options, current.label, schedule, fit_s)
    if text is not None:
        return text
    from .advisor import keep_line

    return keep_line(options, current.label, prediction.device.name)
