"""The plan of a fit: what each unit of its work will cost, predicted before step one.

:func:`plan_run` turns the traced and predicted training and validation steps, the host's costs
(:mod:`~ptp_callback.host_costs`), the data loaders and the checkpoint into a :class:`RunPlan`,
which the forecaster multiplies by the schedule's counts:

* a training batch: the step without its optimizer phase, the loop's per-batch work, the batch's
  copy to a GPU, and the data-loader wait (without workers the loader runs inside the loop; with
  ``n`` workers only what they cannot hide: ``load_s / n - compute``, and on a CPU fit whatever of
  their work the cores the step leaves idle cannot hold: the rest runs on the step's own cores);
* an optimizer step: the step's optimizer phase plus gradient communication across GPUs;
* a validation run: its loader's start, then its batches (the validation step and the loop),
  and inside an epoch, on a CPU fit whose validation workers are forked each run, the same copy
  of the step's memory in the training batch after it (``val_fork_s``);
* an epoch boundary: the training loader's start (once only with ``persistent_workers``) and, on a
  CPU fit whose workers are forked, the step's copy of every page of its memory that the new
  workers map (``HostCosts.fork_write_s_per_byte``: it lands in the epoch's first batch);
* a checkpoint save: fixed cost, GPU tensors copied to the host, bytes written;
* the sanity check: the validation loader's start and its batches;
* the first batches' warm-up: on a GPU kernel loading and cuDNN's heuristics; on a CPU fit with
  loader workers the first epoch's copy of the step's memory, as at a later epoch's start (the
  first epoch's workers are forked too, and the sanity check's validation workers live on);
* the end's teardown (moving the model back to the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from .host_costs import HostCosts

# Extra seconds of a GPU fit's first steps (kernel loading, cuDNN heuristics), from the Lightning
# fits recorded on an H100 (benchmarks/data/fits.jsonl, timelines.jsonl): about 0.2 s for the
# sanity check's and 0.1 s for the first training batch's, plus 0.7 s and 0.15 s under autocast.
# The first fit in a process pays them; later fits in the same process much less.
GPU_WARMUP_SANITY_S = (0.2, 0.7)
GPU_WARMUP_TRAIN_S = (0.1, 0.15)
# New kernels in the first training step per new kernel of the forward: each GEMM and convolution
# has two backward kernels (data and weight gradients), elementwise ops one, plus the optimizer's.
# The H100 fits with the largest warm-ups (a convnet of many distinct depthwise convolutions under
# 16-mixed: 6.0 s after a 3.1 s excess in its sanity check; GPT-2 under bf16-mixed: 1.6 s after
# 0.8 s) agree with it.
TRAIN_KERNELS_PER_FORWARD_KERNEL = 2.0


@dataclass(frozen=True)
class RunPlan:
    """What each unit of a fit's work costs, predicted before step one (seconds).

    ``train_batch_s``: one training (micro-)batch -- forward, backward, the training loop's own
    work and the data-loader wait; ``optimizer_step_s`` once per optimizer step; ``val_batch_s`` one
    validation batch and ``val_run_s`` the fixed part of a validation run (its loader's start);
    ``epoch_s`` each epoch boundary (``first_epoch_s`` the first one, when it differs: a loader
    started before the first epoch, persistent workers that start once); ``save_s`` one checkpoint
    save (``first_save_s`` the first, when it differs: later saves also delete the checkpoint they
    replace); ``sanity_s`` the sanity check, of which ``sanity_warmup_s`` is GPU warm-up;
    ``warmup_s`` what the first training batches take beyond steady ones; ``end_s`` the teardown
    after the last batch; ``val_fork_s`` what the training batch after a validation run inside an
    epoch pays for it on a CPU whose validation loader forks workers each run (see :func:`plan_run`);
    ``val_workers_persist``: the validation loader's workers persist between runs, so only the
    sanity check (or the first run) starts them and a run has no fixed part to speak of.

    Refinements the forecaster applies before step one: ``sanity_calibrates`` -- the sanity
    check's steady batches measure a validation batch, its loop's work included (on a CPU, where no
    GPU warm-up hides it), from the last of the validation loader's ``sanity_loader_workers``
    workers' first batch on (gaps before it time the workers' start); ``warmup_per_sanity_excess``
    -- on a GPU, what the sanity check took beyond its predicted batches is the first use of the
    forward's kernels, and the first training step uses about that many times more new kernels
    (the backward's data and weight gradients, the optimizer).
    """

    train_batch_s: float
    optimizer_step_s: float = 0.0
    val_batch_s: float = 0.0
    val_run_s: float = 0.0
    epoch_s: float = 0.0
    first_epoch_s: float | None = None
    save_s: float = 0.0
    first_save_s: float | None = None
    sanity_s: float = 0.0
    sanity_warmup_s: float = 0.0
    warmup_s: float = 0.0
    end_s: float = 0.0
    sanity_calibrates: bool = False
    sanity_loader_workers: int = 0
    warmup_per_sanity_excess: float = 0.0
    val_fork_s: float = 0.0
    val_workers_persist: bool = False


@dataclass(frozen=True)
class LoaderFacts:
    """What the plan needs to know of a DataLoader.

    ``load_s``: seconds to build one batch in the training process (reading and collating the
    items: measured on an example batch); ``batch_bytes``: the bytes of one batch's tensors;
    ``pin_memory``: the loader delivers batches in page-locked memory; ``worker_batch_s``: on a CPU
    fit, what a batch from the workers costs the step (measured:
    :func:`~ptp_callback.host_costs.worker_batch_seconds`; 0: not measured).
    """

    num_workers: int = 0
    persistent_workers: bool = False
    load_s: float = 0.0
    batch_bytes: int = 0
    pin_memory: bool = False
    worker_batch_s: float = 0.0


@dataclass(frozen=True)
class StepCosts:
    """A predicted step reduced to what the plan uses (seconds)."""

    step_s: float
    optimizer_s: float = 0.0

    @classmethod
    def of(cls, prediction: object) -> StepCosts:
        """From a :class:`~ptp_callback.predict.StepPrediction`."""
        phases = getattr(prediction, "breakdown", {}).get("phase", {})
        return cls(float(getattr(prediction, "step_s")), float(phases.get("optimizer", 0.0)))


def plan_run(
    train: StepCosts,
    val: StepCosts | None,
    host: HostCosts,
    *,
    on_gpu: bool,
    autocast: bool = False,
    train_loader: LoaderFacts = LoaderFacts(),
    val_loader: LoaderFacts = LoaderFacts(),
    sanity_batches: int = 0,
    checkpoint_bytes: float = 0.0,
    saves_replace_previous: bool = False,
    state_bytes_to_cpu_at_end: float = 0.0,
    comm_s: float = 0.0,
    loader_started_before_first_epoch: bool = False,
    sanity_calibrates: bool = False,
    spare_cores: int | None = None,
    step_memory_bytes: float = 0.0,
    val_workers_live_on: bool = False,
) -> RunPlan:
    """Per-unit costs of a fit (see the module doc).

    ``checkpoint_bytes``: what one save writes (weights and optimizer state, as saved);
    ``saves_replace_previous``: each save after the first deletes the checkpoint it replaces
    (``ModelCheckpoint(save_top_k=1)``, the default);
    ``state_bytes_to_cpu_at_end``: what the framework copies back to the host at teardown
    (Lightning's ``Strategy.teardown`` moves the optimizer's state and the model to the CPU); ``loader_started_before_first_epoch``: the training
    loader's workers are already running when the first epoch starts (Lightning starts them while
    setting up). ``step_memory_bytes``: the host memory a CPU training step writes (parameters,
    gradients, optimizer state, activations). ``spare_cores``: on a CPU fit, the cores the step's
    threads leave idle for loader workers (``None`` on a GPU, where the step runs on the device and
    the cores are the workers').

    ``val_workers_live_on``: the framework keeps a validation run's loader workers until the next
    run (Lightning ends a run at the loader's length, so its iterator is never exhausted, which
    would stop them). A loader without persistent workers forks new ones each run: on a CPU the
    first training batch after a run inside an epoch then copies every page of the step's memory
    they map, as an epoch's first batch does after its loader's new workers (an LSTM's 2-core
    fit: 485-535 ms against 82 ms steady, with or without checkpoints).
    """
    compute = train.step_s - train.optimizer_s
    input_s = train_loader.batch_bytes / host.input_rate(train_loader.pin_memory) if on_gpu else 0.0
    train_batch = compute + host.loop_s + input_s + _data_wait(train_loader, compute, spare_cores)
    val_batch = 0.0
    if val is not None:
        val_compute = val.step_s
        val_input = val_loader.batch_bytes / host.input_rate(val_loader.pin_memory) if on_gpu else 0.0
        val_batch = val_compute + host.val_loop_s + val_input + _data_wait(val_loader, val_compute, spare_cores)
    val_start = _loader_start(host, val_loader)
    # Persistent workers start with the sanity check (or the first run) and serve every later run:
    # a GRU's H100 fit (2026-11-27) ran its 5-batch validation runs in 0.17 s, 0.14 s of them batches.
    persist = val is not None and val_loader.num_workers > 0 and val_loader.persistent_workers
    epoch = 0.0 if train_loader.persistent_workers else _loader_start(host, train_loader)
    fork_write = 0.0 if on_gpu else step_memory_bytes * host.fork_write_s_per_byte
    if epoch:
        epoch += fork_write
    forks_each_run = val_workers_live_on and val is not None and val_loader.num_workers > 0 \
        and not val_loader.persistent_workers
    # The first epoch's copies fall in its first batches' warm-up, which a CPU fit measures.
    first_epoch = 0.0 if loader_started_before_first_epoch else _loader_start(host, train_loader)
    copy_s = checkpoint_bytes / host.copy_bytes_per_s if on_gpu else 0.0
    save = host.save_fixed_s + copy_s + checkpoint_bytes / host.write_bytes_per_s if checkpoint_bytes else 0.0
    later_save = save + (checkpoint_bytes / host.remove_bytes_per_s if saves_replace_previous else 0.0)
    warmup = sanity_warmup = 0.0
    loaders_with_workers = (train_loader.num_workers > 0) + (val is not None and val_loader.num_workers > 0)
    if on_gpu:
        warmup = GPU_WARMUP_TRAIN_S[0] + autocast * GPU_WARMUP_TRAIN_S[1]
        sanity_warmup = GPU_WARMUP_SANITY_S[0] + autocast * GPU_WARMUP_SANITY_S[1]
    elif loaders_with_workers:
        # The first epoch's first batch writes over pages that its forked workers map, as a later
        # epoch's does (a persistent loader's too: its workers start with that epoch). Priced as a
        # later epoch's: before the first step fewer of the step's pages exist to be shared, and on
        # a 2-thread Xeon (2026-11-28, 2 workers) the first epoch's took 0.3-1.1x what the later
        # epochs' first batches took beyond a steady one in six fits without a sanity check
        # (benchmarks/fork_copies.py), 0.2-1.2x in three with one (benchmarks/lightning_eta.py).
        warmup = fork_write
    sanity = val_start + sanity_batches * val_batch + sanity_warmup if sanity_batches else 0.0
    if host.loader_stop_s:  # measured: the teardown stops each loader's workers, one loader at a time
        end = host.end_s - host.end_workers_s + loaders_with_workers * host.loader_stop_s
    else:
        end = host.end_s - (0.0 if loaders_with_workers else host.end_workers_s)
    end += state_bytes_to_cpu_at_end / host.copy_bytes_per_s if on_gpu else 0.0
    return RunPlan(
        train_batch_s=train_batch,
        optimizer_step_s=train.optimizer_s + comm_s + host.step_loop_s,
        val_batch_s=val_batch,
        val_run_s=0.0 if persist else val_start,
        epoch_s=epoch,
        first_epoch_s=first_epoch if first_epoch != epoch else None,
        save_s=later_save,
        first_save_s=save if later_save != save else None,
        sanity_s=sanity,
        sanity_warmup_s=sanity_warmup if sanity_batches else 0.0,
        warmup_s=warmup,
        end_s=end,
        sanity_calibrates=sanity_calibrates,
        sanity_loader_workers=max(0, val_loader.num_workers),
        warmup_per_sanity_excess=TRAIN_KERNELS_PER_FORWARD_KERNEL if on_gpu else 0.0,
        val_workers_persist=persist,
        val_fork_s=fork_write if forks_each_run else 0.0,
    )


def _data_wait(loader: LoaderFacts, compute_s: float, spare_cores: int | None = None) -> float:
    """Seconds a batch waits for data: all of its loading without workers; with ``n`` workers
    only what they cannot hide behind the step. On a CPU fit the workers share the cores with
    the step: what the idle cores cannot hold takes the step's cores from it (on a 2-core machine
    with 2 intra-op threads, all of it: workers there were no faster than loading in the loop). Where
    it was measured (``worker_batch_s``), that cost stands instead: on a 2-core machine it was many
    times the batch's build time."""
    if loader.num_workers <= 0:
        return loader.load_s
    behind = max(0.0, loader.load_s / loader.num_workers - compute_s)
    if spare_cores is None:
        return behind
    if loader.worker_batch_s:  # measured on this machine: receiving the batch, and the cores taken
        return max(behind, loader.worker_batch_s)
    return max(behind, loader.load_s - spare_cores * compute_s)


def _loader_start(host: HostCosts, loader: LoaderFacts) -> float:
    """A new iterator of ``loader``: its workers start, then one of them builds the first batch."""
    if loader.num_workers <= 0:
        return 0.0
    return host.loader_start_s + loader.load_s
