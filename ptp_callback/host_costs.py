"""What a training host spends outside the model's kernels: loop, loaders, copies, saves, teardown.

A fit is more than its steps. On the H100 fits this project measured (Lightning, a progress bar,
DataLoaders with 4 workers, default checkpointing) the time outside the traced steps was 15-40%
of the fit: the training loop's own per-batch work, each DataLoader iterator's worker start, the
copy of every batch into pinned memory and to the GPU, checkpoint saves (device-to-host copies of
weights and optimizer state into fresh memory, then the write), and the teardown (Lightning moves
the model back to the CPU). :class:`HostCosts` holds those rates and fixed costs for one host.

Where they come from:

* GPU hosts: the defaults of :data:`H100_HOST` were fitted on the whole Lightning fits recorded on
  an H100 host (``benchmarks/data/timelines.jsonl``, 2026-11-22) by
  ``python benchmarks/replay_timelines.py --fit-host``: a fixed cost plus bytes over a rate per
  kind of work, never a number per model. A fit measures its own values as it runs.
* any host: :func:`probe_host` measures this machine's DataLoader worker start and the write rate
  of the checkpoint directory (and, with a GPU, the device-to-host copy rate) in well under a
  second, cached on disk (``$PTP_CACHE_DIR`` or ``~/.cache/ptp_callback``) so later fits pay nothing.
  A forked worker's start grows with the training process's memory (the fork copies its page
  tables), so the cached start is set to the process each fit runs in by one fork timed then.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace

import torch

from .cache import cache_dir
from .rng import rng_preserved


@dataclass(frozen=True)
class HostCosts:
    """One host's costs outside the model's kernels (seconds; rates in bytes per second).

    ``loop_s`` / ``val_loop_s``: the training / validation loop's own work per batch that the
    device does not hide (hooks, progress bar, logging, the batch's host-to-device transfer call);
    ``step_loop_s``: its work once per optimizer step (the framework's optimizer hooks and
    closure, ``zero_grad``, the scheduler's step; 0: counted in ``loop_s``);
    ``loader_start_s``: a DataLoader iterator starting its worker processes until they can deliver;
    ``input_bytes_per_s``: a GPU batch's copy to the device from pageable memory, and
    ``pinned_input_bytes_per_s`` from the page-locked memory a ``pin_memory=True`` loader delivers
    (its pin thread copies the next batch while the device works; 0: as pageable); ``copy_bytes_per_s``:
    device-to-host copies into fresh host memory (checkpoints of GPU tensors, ``model.cpu()``);
    ``write_bytes_per_s`` and ``save_fixed_s``: ``torch.save`` to the checkpoint directory;
    ``remove_bytes_per_s``: deleting a checkpoint file that a new save replaces;
    ``end_s``: the fixed part of a fit's teardown (loader workers, loggers); ``end_workers_s`` the
    share of it that stopping loader workers takes, which a fit without workers does not pay;
    ``loader_stop_s``: a DataLoader iterator stopping its worker processes, where the probe measured
    it (0: ``end_workers_s`` stands for all of a fit's loaders);
    ``fork_write_s_per_byte``: where loader workers are forked, what the training process's first
    write to a page of its memory costs while they run (the operating system copies the page the
    worker still maps: a CPU step rewrites all of its memory, so each epoch's new workers cost it
    once).
    """

    loop_s: float
    val_loop_s: float
    loader_start_s: float
    input_bytes_per_s: float
    copy_bytes_per_s: float
    write_bytes_per_s: float
    save_fixed_s: float
    remove_bytes_per_s: float
    end_s: float
    end_workers_s: float = 0.0
    loader_stop_s: float = 0.0
    pinned_input_bytes_per_s: float = 0.0
    fork_write_s_per_byte: float = 0.0
    step_loop_s: float = 0.0
    source: str = ""

    def input_rate(self, pinned: bool) -> float:
        """Bytes per second of a batch's copy to the device, from pinned or pageable memory."""
        return self.pinned_input_bytes_per_s if pinned and self.pinned_input_bytes_per_s > 0 else self.input_bytes_per_s


# Fitted on the six Lightning fits of benchmarks/data/timelines.jsonl (NVIDIA H100 80GB HBM3 host,
# 16 cores, Lightning 2.6.6, Rich bar, 4 loader workers), 2026-11-24, with
# `python benchmarks/replay_timelines.py --fit-host` (least-squares lines then; its Theil-Sen lines
# of 2026-11-27, robust to one slow teardown or save, give copies at 1.25e9 B/s, a save's fixed
# part 0.045 s and the end 0.27 s on the same fits: within one save's run-to-run spread). Each is a
# host property: a cost per batch, per loader start, per byte copied or written -- none belongs to a model.
H100_HOST = HostCosts(
    loop_s=3.0e-3,
    val_loop_s=3.0e-3,
    loader_start_s=0.55,
    input_bytes_per_s=6.5e9,
    copy_bytes_per_s=1.19e9,
    write_bytes_per_s=0.68e9,
    save_fixed_s=0.08,
    remove_bytes_per_s=3.0e9,
    end_s=0.24,
    source="fitted on Lightning fits recorded on an H100 host (benchmarks/data/timelines.jsonl)",
)

# A CPU host before its probe: the loop's per-batch work is measured by the sanity check there.
# The end of a CPU fit (2-core Xeon, Lightning 2.6.6, 2026-11-24): 1.0-1.7 ms without loader
# workers, 21-65 ms with 2 of them (the H100 fits' end_s was fitted on fits that all had workers).
CPU_HOST = replace(H100_HOST, loop_s=0.0, val_loop_s=0.0, input_bytes_per_s=float("inf"),
                   copy_bytes_per_s=float("inf"), end_s=0.05, end_workers_s=0.048, source="defaults for a CPU host")


@dataclass(frozen=True)
class LoopWork:
    """A training framework's own work on a CPU, in the probed host's small ops
    (:func:`~ptp_callback.probe.probed_small_op_s`, as the probe prices a CPU's other fixed costs):
    per training batch, per optimizer step and per validation batch."""

    batch_ops: float
    step_ops: float
    val_batch_ops: float


# Measured by ``benchmarks/cpu_loop.py`` on a 2-core Xeon VM (2026-11-29, small op 1.85-1.98 us, two
# to six runs): a one-layer model trained with gradient accumulation over 1, 2, 4 and 8 batches, a line
# through each cycle's time against its batches, less the plan without it. A loop of Python hooks runs
# at neither a CPU op's nor a CUDA launch's speed: the H100 host's loop work scaled by the ratio of
# small-op times came out half of Lightning's.
#: Lightning with its progress bar and one metric logged a step (``self.log(..., prog_bar=True)``):
#: 394-416 small ops a batch, 221-266 an optimizer step, 200-215 a validation batch that logs one.
LIGHTNING_LOOP = LoopWork(batch_ops=400, step_ops=240, val_batch_ops=205)
#: The Hugging Face ``Trainer`` with its defaults (tqdm bar, a log every 500 steps, clipping at
#: 1.0, a linear schedule): 41-74 small ops a micro-batch, 220-269 an optimizer step, 21-41 an
#: evaluation batch.
HF_TRAINER_LOOP = LoopWork(batch_ops=55, step_ops=230, val_batch_ops=30)
#: A loop that ``track`` follows with an Accelerate ``accelerator`` (its prepared loader,
#: ``accumulate``, ``backward``, ``clip_grad_norm_``, the optimizer's wrapper, the tracker's bar):
#: 85-103 small ops a micro-batch, 154-196 an optimizer step. Its evaluation is the user's own loop.
ACCELERATE_LOOP = LoopWork(batch_ops=95, step_ops=175, val_batch_ops=0)


def cpu_host(small_op_s: float, loop: LoopWork = LIGHTNING_LOOP) -> HostCosts:
    """:data:`CPU_HOST` with a framework loop's work (``loop``, in this host's ``small_op_s``: the
    probe measures it). A fit whose sanity check runs replaces the validation batches' estimate by
    what they measure; one without (no validation, or ``num_sanity_val_steps=0``) would otherwise
    count no loop work at all, and on a CPU that work (hooks, logging, the progress bar: 1-5 ms a
    batch on a 2-core machine) can be most of a small model's batch."""
    return replace(CPU_HOST, loop_s=loop.batch_ops * small_op_s, step_loop_s=loop.step_ops * small_op_s,
                   val_loop_s=loop.val_batch_ops * small_op_s,
                   source=f"defaults for a CPU host, the loop's work {loop.batch_ops:g} small ops of "
                          f"{small_op_s * 1e6:.1f} us a batch and {loop.step_ops:g} an optimizer step")


def spare_cpu_cores() -> int:
    """Cores this process may run on that torch's intra-op threads leave idle (for loader workers)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(0, cores - torch.get_num_threads())


def probe_host(
    base: HostCosts,
    *,
    checkpoint_dir: str | None = None,
    buffered_saves: bool = False,
    num_workers: int = 0,
    device: torch.device | None = None,
    cache: bool = True,
) -> HostCosts:
    """``base`` with what this machine measures in its place: the worker start of a DataLoader
    with ``num_workers`` workers (and, training on the CPU, what a forked worker makes the
    process's writes cost), the write rate of ``checkpoint_dir``, and with a CUDA ``device`` the
    device-to-host copy rate. Each probe is cached on disk per host and setting.

    ``buffered_saves``: the framework serializes a checkpoint into memory and then writes it
    (Lightning's ``TorchCheckpointIO``), which the probe then does too: on an H100 host and on a
    2-core CPU that took about twice as long per byte as ``torch.save`` straight to the file."""
    costs = base
    if num_workers > 0:
        fork_now = fork_s()  # once: it is also the fork time a probe measured now is kept with
        start = _cached(f"loader-start-stop-{num_workers}-{_start_method()}",
                        lambda: _loader_start_stop_s(num_workers, fork_now), cache)
        costs = replace(costs, loader_start_s=loader_start_here(start, num_workers, fork_now))
        if device is None or device.type == "cpu":
            # A GPU host's end was fitted on fits whose teardown stopped their workers, and a GPU
            # step writes the device's memory, not the host's pages a forked worker maps.
            costs = replace(costs, loader_stop_s=start["stop_s"])
            fork = _cached(f"fork-write-1mb-tensors-{_start_method()}", lambda: {"s_per_byte": _fork_write_s_per_byte()}, cache)
            costs = replace(costs, fork_write_s_per_byte=fork["s_per_byte"])
    if checkpoint_dir:
        how = "buffered" if buffered_saves else "direct"
        write = _cached(f"write-median-{how}-{_filesystem_key(checkpoint_dir)}",
                        lambda: _write_rate(checkpoint_dir, buffered_saves), cache)
        costs = replace(costs, write_bytes_per_s=write["bytes_per_s"], save_fixed_s=write["fixed_s"],
                        remove_bytes_per_s=write["remove_bytes_per_s"])
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(device)
        copy = _cached(f"copy-{name}", lambda: {"bytes_per_s": _copy_rate(device)}, cache)
        inputs = _cached(f"input-{name}", lambda: _input_rates(device), cache)
        costs = replace(costs, copy_bytes_per_s=copy["bytes_per_s"], input_bytes_per_s=inputs["pageable"],
                        pinned_input_bytes_per_s=inputs["pinned"])
    return replace(costs, source=f"{base.source}; probed on {platform.node() or 'this host'}")


def _cached(key: str, measure, cache: bool) -> dict[str, float]:  # noqa: ANN001 - a zero-argument callable
    digest = hashlib.sha1(f"{platform.node()}|{key}".encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"host-{digest}.json")
    if cache and os.path.exists(path):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    value = measure()
    if cache:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                json.dump(value, f)
        except OSError:
            pass  # an unwritable cache only costs the next fit the probe again
    return value


def _start_method() -> str:
    """How loader workers will start: the method set, else the platform's default (the first listed),
    named without fixing it, so that the cache key is the same before and after a loader's first
    workers have fixed it."""
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


class _One(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.zeros(1)


@rng_preserved()  # an iterator with workers draws their seed from the user's generator (the data order)
def _loader_start_stop_s(num_workers: int, fork: float | None) -> dict[str, float]:
    """Seconds from creating a DataLoader iterator with worker processes to its first batch (``s``),
    and from there to its workers' exit (``stop_s``), kept with this process's fork time ``fork``
    (``fork_s``, where workers are forked). A fit's teardown stops each loader's workers
    that are still running (Lightning keeps a validation run's and, after the last epoch, the
    training loader's): on a 2-thread AMD EPYC VM (2026-11-29), in the teardown of a 2-epoch MLP fit
    with 2 workers a loader, the two loaders' workers stopped in 57 and 44 ms; the callback measured
    the same fit's end at 0.14 s, where 0.05 s was counted (a 2-core Xeon's whole end had taken
    21-65 ms)."""
    import warnings

    loader = torch.utils.data.DataLoader(_One(), batch_size=1, num_workers=num_workers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "suggested max number of workers": the user's setting, not ours
        started = time.perf_counter()
        iterator = iter(loader)
        next(iterator)
        ready = time.perf_counter()
        del iterator  # stops the workers
        stopped = time.perf_counter()
    measured = {"s": ready - started, "stop_s": stopped - ready}
    return measured if fork is None else {**measured, "fork_s": fork}


def fork_s() -> float | None:
    """Seconds this process takes to fork (the parent's side: the kernel copies the page tables of
    its private memory), or ``None`` where loader workers are not forked. The child exits at once.

    A DataLoader forks each worker from the training process, so a worker's start grows with the
    process: on a 2-core Xeon VM (2026-11-29) 4 workers started in 61 ms from a process of 0.3 GB of
    private memory and in 333 ms from one of 8.1 GB, where one fork took 3.4 and 88 ms."""
    if _start_method() != "fork" or not hasattr(os, "fork"):
        return None
    # (No warnings.catch_warnings() here: leaving it resets which warnings the process has shown.
    # Python 3.12's DeprecationWarning on forking a process with threads is not shown by default.)
    times: list[float] = []
    for _ in range(3):
        started = time.perf_counter()
        try:
            pid = os.fork()
        except OSError:  # no memory or process left for a copy: the probe's start stands
            break
        if pid == 0:
            os._exit(0)
        times.append(time.perf_counter() - started)
        _reap(pid)
        if times[-1] > 0.02:  # a large process: one fork is a clear reading, and not cheap
            break
    return statistics.median(times) if times else None


def _reap(pid: int, within_s: float = 5.0) -> None:
    """Wait for the forked child to exit (it exits at once; one stuck in another library's fork
    handler is killed after ``within_s``). A process that ignores SIGCHLD has no child to wait for."""
    import signal

    deadline = time.perf_counter() + within_s
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.perf_counter() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.0005)
    except ChildProcessError:
        pass  # reaped already: SIGCHLD ignored, or another handler waited for it


#: A worker's start is not set below this share of the cached one (a fork timed in an idle moment).
_LEAST_START_SHARE = 0.25


def loader_start_here(probed: dict[str, float], num_workers: int, fork_now: float | None) -> float:
    """The probed loader start (``probed``: its seconds, and the fork time of the process it was
    measured in) for a loader started from this process, whose fork takes ``fork_now`` (:func:`fork_s`;
    ``None``: workers are not forked here): each of its workers' forks costs the difference."""
    if "fork_s" not in probed or fork_now is None:
        return probed["s"]
    return max(_LEAST_START_SHARE * probed["s"], probed["s"] + num_workers * (fork_now - probed["fork_s"]))


class _ReadyBatches(torch.utils.data.Dataset):
    """Items that are whole batches of ``nbytes``, each after ``load_s`` of a worker's work (what
    building the real batch costs, measured on an example batch)."""

    def __init__(self, nbytes: int, load_s: float, length: int) -> None:
        self.batch, self.load_s, self.length = torch.zeros(max(1, nbytes // 4)), load_s, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        until = time.perf_counter() + self.load_s
        while time.perf_counter() < until:
            pass  # the worker's CPU work, as reading and collating the items takes it
        return self.batch.clone()


def worker_batch_seconds(num_workers: int, batch_bytes: int, load_s: float, *, batches: int = 30,
                         cache: bool = True) -> float | None:
    """On a CPU fit, what each batch from ``num_workers`` loader worker processes costs the training
    step's time: the training process receiving it (from shared memory) and the cores the workers
    take from the step's threads while they build the next ones. A short GEMM loop on all of this
    process's threads stands in for the step, timed with and without a batch taken before each
    pass (about 0.5 s, cached per worker count, batch size and load time, each rounded to a power
    of two: :func:`_load_bucket_s`).

    On a 2-thread Xeon VM (2026-11-27) a 128 x 784 MLP batch (0.4 MB, built in 0.6 ms in the
    process) cost its 13 ms step 4.0 ms from 2 workers, 4.7 ms from 1 (0.7 ms without workers);
    a 3 MB batch built in 2.3 ms cost 13.8 ms from 2 workers: many times the batch's build time,
    which is all the plan counted before.

    Fewer batches where the workers' build time would make the probe take over
    :data:`_PROBE_BUDGET_S`, and ``None`` (not measured) where even :data:`_FEWEST_BATCHES` would:
    such batches keep a step waiting whatever else they cost it, and the plan counts their build
    time instead."""
    size = 2 ** round(math.log2(max(1, batch_bytes)))
    load = _load_bucket_s(load_s)
    if load:
        batches = min(batches, int(_PROBE_BUDGET_S * num_workers / load) - _FIRST_BATCHES)
    if batches < _FEWEST_BATCHES:
        return None
    key = f"worker-batch-{num_workers}-{size}-{load}-{torch.get_num_threads()}-{_start_method()}"
    return _cached(key, lambda: {"s": _worker_batch_s(num_workers, size, load, batches)}, cache)["s"]


#: Seconds of the workers' building the probe may take, and the fewest batches it times after
#: :data:`_FIRST_BATCHES` (the workers' start): one example batch of an MLP that took 0.4 s to
#: collate once (0.6-2.5 ms in other fits) made its two loaders' probes take 15 s.
_PROBE_BUDGET_S = 1.0
_FIRST_BATCHES = 4
_FEWEST_BATCHES = 5


#: Build times under this are probed as none; above it, in powers of two of it.
_LOAD_UNIT_S = 1e-4


def _load_bucket_s(load_s: float) -> float:
    """A batch's build time as the probe runs it: the nearest power of two of 0.1 ms (0 below it).

    The build time is one batch timed at fit start, and it moves from fit to fit (an MLP's 0.4 MB
    batch: 0.6-2.5 ms); keyed to 0.1 ms, nearly every fit missed the cache and probed both of its
    loaders again, 1-2 s of a 20 s fit on a 2-thread VM. The probe cannot tell loads a factor of 2
    apart at that size: 2 workers' batches cost the step 3.0-4.1 ms built in no time, 3.7-5.5 ms
    in 1 ms, 3.2-4.8 ms in 1.4 ms, three probes each (AMD EPYC VM, 2026-11-28)."""
    if load_s < _LOAD_UNIT_S:
        return 0.0
    return _LOAD_UNIT_S * 2 ** round(math.log2(load_s / _LOAD_UNIT_S))


@rng_preserved()  # its operands and the loader's seed draw must not move the user's generators
def _worker_batch_s(num_workers: int, batch_bytes: int, load_s: float, batches: int) -> float:
    import warnings

    operand = torch.randn(384, 384)

    def step() -> None:
        for _ in range(8):
            torch.mm(operand, operand)

    for _ in range(5):
        step()
    started = time.perf_counter()
    for _ in range(batches):
        step()
    alone = time.perf_counter() - started
    data = _ReadyBatches(batch_bytes, load_s, batches + _FIRST_BATCHES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "suggested max number of workers": the user's setting, not ours
        iterator = iter(torch.utils.data.DataLoader(data, batch_size=None, num_workers=num_workers))
        for _ in range(_FIRST_BATCHES):  # the workers' start and their first batches
            next(iterator)
            step()
        started = time.perf_counter()
        for _ in range(batches):
            next(iterator)
            step()
        fed = time.perf_counter() - started
    del iterator  # shuts the workers down
    return max(0.0, fed - alone) / batches


@rng_preserved()  # as _loader_start_stop_s
def _fork_write_s_per_byte(nbytes: int = 16 * 2**20, tensor_bytes: int = 2**20, trials: int = 3) -> float:
    """Seconds per byte that rewriting memory takes while a loader worker runs, beyond rewriting it
    alone: a forked worker maps the parent's pages until it exits, and the parent's first write to
    each makes the operating system copy it (a GPT-2 fit's first batch of each epoch on a 2-thread
    Xeon VM took 1.1 s instead of 0.17). Under the ``spawn`` start method workers share no pages,
    and this measures about 0.

    ``nbytes`` are rewritten as tensors of ``tensor_bytes``, each an op of its own as in a step:
    the copies cost more per byte in tensors of a step's sizes than in one large one, where the
    threads fault in long runs. On that VM (2 threads, 2026-11-28) one 16 MB tensor took 2.5-3.3 ns
    a byte, tensors of 4 MB 2.9-3.4, of 1 MB 4.1-4.6, of 256 KB 5.1-5.4; the first batches of six
    Lightning fits' later epochs took 11.9-19.4 us per copied 4 KiB page in four runs, 2.9-4.7 ns a
    byte (``benchmarks/fork_copies.py``).

    The fastest of ``trials`` rewrites alone against the fastest of ``trials`` forks: other
    processes only ever add time, and one reading taken while they held the cores came out at
    nothing (a 16-core H100 host, 2026-11-26; the median of three such differences did too, under
    8 test processes, 2026-11-27). The result is cached for good."""
    alone, shared = [], []
    for _ in range(trials):
        tensors = [torch.empty(tensor_bytes // 4).fill_(1.0) for _ in range(max(1, nbytes // tensor_bytes))]
        started = time.perf_counter()
        for tensor in tensors:
            tensor.fill_(2.0)
        alone.append(time.perf_counter() - started)
        iterator = iter(torch.utils.data.DataLoader(_One(), batch_size=1, num_workers=1))
        next(iterator)  # the worker runs: it maps the tensors' pages too
        started = time.perf_counter()
        for tensor in tensors:
            tensor.fill_(3.0)
        shared.append(time.perf_counter() - started)
        del iterator  # shuts the worker down
    return max(0.0, min(shared) - min(alone)) / (len(tensors) * tensor_bytes)


def _filesystem_key(directory: str) -> str:
    path = os.path.abspath(directory)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return f"{os.stat(path).st_dev}"


def _save(state: dict[str, torch.Tensor], path: str, buffered: bool) -> None:
    if not buffered:
        torch.save(state, path)
        return
    buffer = io.BytesIO()  # as lightning.fabric's _atomic_save: the whole checkpoint in memory first
    torch.save(state, buffer)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())


def _write_rate(directory: str, buffered: bool = False, repeats: int = 3) -> dict[str, float]:
    """``torch.save`` of a small state once and of a 64 MB one ``repeats`` times to ``directory``
    (through an in-memory buffer when ``buffered``): fixed cost and bytes per second.

    The median of the repeats: on a 2-core VM one process timed the same 64 MB buffered save at
    270, 730 and 400 MB/s in a row, and the checkpoint saves of the fit that followed ran at about
    330 MB/s (in a fresh process, serializing into the buffer took 50-76 ms of such a save)."""
    target = directory if os.path.isdir(directory) else tempfile.gettempdir()
    small = {"w": torch.zeros(16)}
    big = {f"w{i}": torch.ones(2**20, dtype=torch.float32) for i in range(16)}  # 64 MB in 16 tensors
    saves: list[float] = []
    removes: list[float] = []
    for state in [small] + [big] * max(1, repeats):
        fd, path = tempfile.mkstemp(dir=target, suffix=".ptp-probe")
        os.close(fd)
        try:
            started = time.perf_counter()
            _save(state, path, buffered)
            saves.append(time.perf_counter() - started)
        finally:
            started = time.perf_counter()
            os.remove(path)
            removes.append(time.perf_counter() - started)
    nbytes = 64 * 2**20
    fixed = saves[0]
    return {"fixed_s": fixed, "bytes_per_s": nbytes / max(1e-6, statistics.median(saves[1:]) - fixed),
            "remove_bytes_per_s": nbytes / max(1e-6, statistics.median(removes[1:]))}


def _copy_rate(device: torch.device) -> float:
    """Device-to-host copies into fresh host memory, as ``torch.save`` and ``module.cpu()`` do.

    Four 64 MB tensors: above glibc's largest mmap threshold (32 MB), so each copy lands in fresh
    pages as a checkpoint's gigabytes do. On an H100 host 64 MB in 4 MB pieces copied at 1.3-7 GB/s
    (reused heap memory), 1-2 GB at 1.3-1.5 GB/s."""
    tensors = [torch.ones(2**24, device=device) for _ in range(4)]  # 256 MB
    torch.cuda.synchronize(device)  # the copies below must not wait on the fills
    started = time.perf_counter()
    copies = [t.cpu() for t in tensors]
    seconds = time.perf_counter() - started
    del copies, tensors
    return 256 * 2**20 / max(1e-6, seconds)


def _input_rates(device: torch.device) -> dict[str, float]:
    """Host-to-device copies of a batch, from pageable and from pinned memory.

    Pageable memory is staged through the driver's pinned buffers on the host's clock; a
    ``pin_memory=True`` loader has already page-locked the batch in its pin thread, off the
    training loop's path, so only the transfer is timed (64 MB in 16 MB tensors, as a loader's
    batch of images or tokens arrives). On an H100 host (2026-11-24) the pinned 154 MB batches
    of ResNet-18 and MobileNet fits took 5-6 ms each beyond the step and the loop's own work,
    about 25 GB/s; the 6.5 GB/s fitted on another day's fits added 24 ms a batch."""
    sources = [torch.ones(2**22) for _ in range(4)]
    rates = {}
    for kind in ("pageable", "pinned"):
        tensors = [t.pin_memory() for t in sources] if kind == "pinned" else sources
        tensors[0][:1024].to(device)  # the first transfer sets up the copy engine's path
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        copies = [t.to(device, non_blocking=kind == "pinned") for t in tensors]
        torch.cuda.synchronize(device)
        rates[kind] = 64 * 2**20 / max(1e-6, time.perf_counter() - started)
        del copies
    return rates


def as_dict(costs: HostCosts) -> dict[str, float | str]:
    """The costs as plain numbers (for logs and benchmark output)."""
    return asdict(costs)
