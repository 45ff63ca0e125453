"""Replay recorded Lightning fits through the run forecaster: its ETA against the naive one.

usage: python benchmarks/replay_timelines.py [FILE ...] [--fit-host] [--no-plan] [--in-sample]

Each FILE holds one recorded fit a line (default: ``benchmarks/data/timelines.jsonl``, whole
Lightning fits on an H100 host with default checkpointing, a progress bar and 4 loader workers;
``benchmarks/data/fits.jsonl`` has the same format with fewer events). For every fit:

1. the fit's schedule and checkpoint saves are laid out from its recorded ``Trainer`` settings by
   Lightning's rules (and checked against the events it recorded);
2. its plan is predicted as the callback predicts it before step one: the workload (the same
   model and batch, ``benchmarks/data/workloads.py``) traced here and predicted at the recorded
   precision for the GPU the fit ran on (its ``device``; ``h100-sxm`` where none is recorded), and
   the H100 host's costs (loop per batch, loader start, device-to-host copy and save rate, teardown)
   fitted on the *other* workloads' fits only -- those in the FILEs and in the default file, the
   fits the product's H100 defaults come from (``--in-sample`` uses every fit; their saves' rate per
   byte only where their checkpoints are not all far smaller than this fit's,
   :data:`EXTRAPOLATION_LIMIT`);
3. the recorded events are fed to :class:`~ptp_callback.forecast.RunForecaster` with their recorded
   times (no GPU needed), and at 5/10/25/50/75/90% of the fit's duration its remaining time is
   compared with the true remaining time, beside the naive extrapolation
   ``elapsed / batches done x batches left``;
4. "before step one" is the forecaster's whole-fit total at the first training batch's start
   (what it knows then: its plan, and the start-up and sanity check it measured).

In a fit recorded with the callback, there is no ETA ("?") until the callback's own work at fit
start was done (its first event): until then the recorded callback was still tracing the model.

``--fit-host`` prints the host costs fitted on all the fits (the defaults of
``ptp_callback.host_costs.H100_HOST``); ``--no-plan`` replays with measurements only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, replace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ptp_callback.checkpoints import CheckpointSettings, save_positions  # noqa: E402
from ptp_callback.forecast import RunForecaster  # noqa: E402
from ptp_callback.host_costs import H100_HOST, HostCosts  # noqa: E402
from ptp_callback.run_plan import LoaderFacts, RunPlan, StepCosts, plan_run  # noqa: E402
from ptp_callback.schedule import FitSchedule, build_schedule  # noqa: E402

FRACTIONS = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90)
# Fits of equal epochs sampled at an epoch boundary make the naive extrapolation exact by
# symmetry (at 50% of a two-epoch fit it is right to the millisecond): every 1% shows the rest.
DENSE = tuple(i / 100 for i in range(10, 91))
DEFAULT = os.path.join(HERE, "data", "timelines.jsonl")


# ----------------------------------------------------------------------------------- records
def load(paths: list[str]) -> list[dict]:
    """Fits from files of either recorded format, normalized to the timelines' keys."""
    records = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                if "trainer" not in rec:  # fits.jsonl: settings at the top level, no checkpointing
                    keys = ("max_steps", "max_epochs", "val_check_interval", "limit_val_batches",
                            "accumulate_grad_batches", "limit_train_batches")
                    rec["trainer"] = {k: rec[k] for k in keys if k in rec}
                    rec["checkpoint"] = False
                    rec["workers"] = 2
                    rec.setdefault("with_ptp", False)
                rec.setdefault("workers", 4)
                rec["events"] = [list(e) for e in rec["events"]]
                records.append(rec)
    return records


def lightning_schedule(rec: dict) -> tuple[FitSchedule, tuple[int, ...]]:
    """The recorded fit's schedule and save positions, by Lightning 2.6's rules."""
    kw = dict(rec["trainer"])
    acc = kw.get("accumulate_grad_batches", 1)
    max_steps = kw.get("max_steps")
    per_epoch = kw.get("limit_train_batches") or (max_steps or 0) * acc  # the dataset is that long
    max_epochs = kw.get("max_epochs")
    max_time = kw.get("max_time")
    max_time_s = None
    if isinstance(max_time, dict):
        max_time_s = 86400 * max_time.get("days", 0) + 3600 * max_time.get("hours", 0) + \
            60 * max_time.get("minutes", 0) + max_time.get("seconds", 0)
    if max_epochs is None:  # Lightning: 1000 epochs unless max_steps or max_time bounds the fit
        max_epochs = None if (max_steps or max_time_s) else 1000
    if max_epochs == -1:
        max_epochs = None
    val_batches = kw.get("limit_val_batches", 0)
    vci = kw.get("val_check_interval", 1.0)
    val_check_batch = max(1, int(per_epoch * vci)) if isinstance(vci, float) else vci
    schedule = build_schedule(batches_per_epoch=per_epoch, accumulate=acc, max_epochs=max_epochs, max_steps=max_steps,
                              val_check_batch=val_check_batch, check_val_every_n_epoch=1,
                              val_batches_per_run=val_batches, sanity_batches=min(2, val_batches),
                              max_time_s=max_time_s)
    settings = checkpoint_settings(rec)
    return schedule, save_positions(schedule, settings) if settings else ()


def checkpoint_settings(rec: dict) -> CheckpointSettings | None:
    """The recorded fit's ``ModelCheckpoint`` (``None``: it saved none)."""
    if rec.get("checkpoint") is False:
        return None
    kw = rec["trainer"]
    val_batches = kw.get("limit_val_batches", 0)
    ckpt = dict(rec.get("checkpoint") or {})
    return CheckpointSettings(
        every_n_train_steps=ckpt.get("every_n_train_steps") or 0,
        every_n_epochs=ckpt.get("every_n_epochs", 0 if ckpt.get("every_n_train_steps") else 1),
        on_epoch_end=kw.get("val_check_interval", 1.0) == 1.0 and val_batches > 0 or val_batches == 0,
        save_last=bool(ckpt.get("save_last")) and ckpt.get("save_last") != "link",
        save_top_k=ckpt.get("save_top_k", 1))


def time_limit_cycle(rec: dict, schedule: FitSchedule) -> tuple[FitSchedule, tuple[int, ...]] | None:
    """For a fit that only ``max_time`` ends, a few of its epochs and their saves, as the callback
    lays them out (``integrations.lightning_schedule.time_limit_cycle``)."""
    cycle = schedule.time_limit_cycle()
    if cycle is None:
        return None
    settings = checkpoint_settings(rec)
    return cycle, save_positions(cycle, settings) if settings else ()


def check_schedule(rec: dict, schedule: FitSchedule, saves: tuple[int, ...]) -> str:
    """'' when the events match the schedule, else what differs."""
    ev = rec["events"]
    seen = {name: sum(1 for e in ev if e[0] == name) for name in ("b", "val_start", "ckpt", "epoch_start")}
    want = {"b": schedule.total_batches, "val_start": len(schedule.val_after_batches), "ckpt": len(saves),
            "epoch_start": len(schedule.epoch_starts)}
    if not any(e[0] == "epoch_start" for e in ev):
        want.pop("epoch_start")
        seen.pop("epoch_start")
    if schedule.max_time_s is not None:
        return ""
    diff = {k: (seen[k], want[k]) for k in want if seen[k] != want[k]}
    return "" if not diff else "schedule differs from the events (seen, expected): " + str(diff)


# ------------------------------------------------------------------------------- the engine
@dataclass(frozen=True)
class Engine:
    """What the engine predicts for a recorded workload and precision on the H100."""

    train: StepCosts
    val: StepCosts
    checkpoint_bytes: float
    param_bytes: float
    batch_bytes: int
    load_s: float
    autocast: bool
    trace_s: float


_ENGINE: dict[tuple[str, str, str], Engine] = {}


def engine(workload: str, precision: str, gpu: str = "h100-sxm") -> Engine:
    """Trace the workload here (meta device) and predict its steps for ``gpu`` (a device table
    name or the name torch reported where the fit ran)."""
    key = (workload, precision, gpu)
    if key in _ENGINE:
        return _ENGINE[key]
    import torch

    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.predict import simulate
    from ptp_callback.step import resolve_device
    from ptp_callback.tracer import trace_step
    from h100_data import workloads

    make_model, make_batch, loss = workloads()[workload]
    # The recorded fits ran with float32_matmul_precision("highest") and cuDNN's default TF32 convs.
    spec = PrecisionSpec.from_setting(precision, matmul_tf32=False, conv_tf32=True)
    device, coef = resolve_device(gpu)
    with torch.device("meta"):
        model = make_model()
    batch = make_batch(torch.device("meta"))
    started = time.perf_counter()
    train = trace_step(model, batch, loss, None, spec, target_type="cuda")
    val = trace_step(model, batch, loss, None, spec, target_type="cuda", train=False)
    trace_s = time.perf_counter() - started
    cpu_batch = make_batch(torch.device("cpu"))
    # The recorded fits' datasets clone one in-memory item: on the 16-core H100 host their 4 workers
    # kept up (the gaps between batches were ~1 ms). Building a batch on this machine would time
    # another host, so the replay takes no data-loader wait.
    load_s = 0.0
    result = Engine(
        train=StepCosts.of(simulate(train, device, coef)),
        val=StepCosts.of(simulate(val, device, coef)),
        checkpoint_bytes=float(train.param_bytes + train.optimizer_state_bytes),
        param_bytes=float(train.param_bytes),
        batch_bytes=sum(t.numel() * t.element_size() for t in cpu_batch),
        load_s=load_s,
        autocast=spec.autocast_dtype is not None,
        trace_s=trace_s,
    )
    _ENGINE[key] = result
    return result


def gpu_of(record: dict) -> str:
    """The GPU a fit was recorded on (``fits.jsonl`` names none: an H100 SXM ran its fits)."""
    return record.get("device") or "h100-sxm"


# ------------------------------------------------------------------------- observed host costs
def _after(ev: list, i: int) -> float:
    return ev[i + 1][1] - ev[i][1] if i + 1 < len(ev) else 0.0


@dataclass
class Observed:
    """Host costs as one recorded fit shows them (seconds)."""

    train_excess: list[float]   # steady batch minus the engine's prediction, per fit
    batch_bytes: list[int]
    loader_starts: list[float]  # validation runs and epoch boundaries, less their batches
    saves: list[tuple[float, float]]  # (bytes, seconds) of each fit's first save
    removes: list[tuple[float, float]]  # (bytes, seconds) a later save took beyond the first
    ends: list[tuple[float, float]]   # (param bytes, seconds after train_end)
    warmups: list[float]


def observe(rec: dict, eng: Engine, host_loop_s: float | None = None) -> Observed:
    ev = rec["events"]
    schedule, _ = lightning_schedule(rec)
    steady, first = [], None
    for i, e in enumerate(ev):
        if e[0] != "b":
            continue
        j = i - 1
        while j >= 0 and ev[j][0] not in ("b", "bs"):
            j -= 1
        if j < 0:
            continue
        start = j if ev[j][0] == "bs" else None
        if start is not None and j > 0 and ev[j - 1][0] == "b":
            duration = e[1] - ev[j - 1][1]
        elif ev[j][0] == "b" and i == j + 1:
            duration = e[1] - ev[j][1]
        else:
            duration = None
        if first is None:
            first = e[1] - ev[j][1]
        elif duration is not None:
            steady.append(duration)
    mean = statistics.mean(steady[3:] or steady)
    per_batch = eng.train.step_s - eng.train.optimizer_s + eng.train.optimizer_s * (
        (schedule.total_steps or 0) / max(1, schedule.total_batches or 1))
    loop = mean - per_batch
    loop_here = loop if host_loop_s is None else host_loop_s
    n_val = schedule.val_batches_per_run or 0
    starts = []
    for i, e in enumerate(ev):
        if e[0] == "val_start":
            j = i
            while ev[j][0] != "b":
                j -= 1
            k = i
            while ev[k][0] != "val_end":
                k += 1
            run = ev[k + 1][1] - ev[j][1] if k + 1 < len(ev) and ev[k + 1][0] == "bs" else ev[k][1] - ev[j][1]
            # A save due at that batch (``every_n_train_steps``) runs before the validation: not its cost.
            saved = sum(_after(ev, m) for m in range(j, i) if ev[m][0] == "ckpt")
            starts.append(run - saved - n_val * (eng.val.step_s + loop_here) - eng.load_s)
        if e[0] == "epoch_start" and i > 0 and any(x[0] == "epoch_end" for x in ev[:i]):
            j = i
            while ev[j][0] != "epoch_end":
                j -= 1
            saved = sum(_after(ev, m) for m in range(j, i) if ev[m][0] == "ckpt")
            starts.append(ev[i + 1][1] - ev[j][1] - saved - eng.load_s)
    saves = [(eng.checkpoint_bytes, _after(ev, i)) for i, e in enumerate(ev) if e[0] == "ckpt"]
    removes = [(b, s - saves[0][1]) for b, s in saves[1:]] if replaces_previous(rec) else []
    t = {n: t for n, t, *_ in ev}
    # Lightning's teardown moves the parameters and the optimizer's state to the CPU
    ends = [(eng.checkpoint_bytes, t["fit_end"] - t["train_end"])] if "train_end" in t else []
    return Observed([loop], [eng.batch_bytes], starts, saves[:1], removes, ends,
                    [max(0.0, first - mean)] if first is not None else [])


def replaces_previous(rec: dict) -> bool:
    """ModelCheckpoint keeping ``save_top_k=1`` (the default) deletes the file each save replaces."""
    return (rec.get("checkpoint") or {}).get("save_top_k", 1) == 1


HOST_BOUND_STEP_S = 0.02


# A line through the saves of checkpoints at most this many times smaller than the one to predict
# is not extrapolated to it: their seconds are mostly fixed costs and noise (140 MB saves of 0.3 s
# on one machine and 1.0 s on another), and a slope through them put a 1.5 GB save at 10.7 s that
# took 4.1 s. The reference host's rate per byte is kept, with a fixed cost fitted to them.
EXTRAPOLATION_LIMIT = 4.0


def fit_host(records: list[dict], base: HostCosts = H100_HOST, *, save_bytes: float | None = None) -> HostCosts:
    """Host costs fitted on recorded fits: medians and robust lines of a fixed cost plus bytes
    over a rate, per kind of work (see ``Observed``). ``save_bytes``: the checkpoint the costs
    will predict the saves of (see :data:`EXTRAPOLATION_LIMIT`)."""
    engines = [engine(r["workload"], r["precision"], gpu_of(r)) for r in records]
    obs = [observe(r, e) for r, e in zip(records, engines)]
    # The loop's own time per batch shows only in host-bound fits: in a 100 ms step, a few percent
    # of step-prediction error is more than the whole loop. Without one, the default stays.
    host_bound = [o.train_excess[0] for o, e in zip(obs, engines)
                  if e.train.step_s < HOST_BOUND_STEP_S and o.batch_bytes[0] < 2**20]
    loop = statistics.median(host_bound) if host_bound else base.loop_s
    big = [(o.train_excess[0] - loop) / o.batch_bytes[0] for o in obs if o.batch_bytes[0] >= 2**20]
    input_rate = 1.0 / statistics.median(big) if big and statistics.median(big) > 0 else base.input_bytes_per_s
    obs = [observe(r, e, loop) for r, e in zip(records, engines)]
    starts = [s for o in obs for s in o.loader_starts]
    # The teardown copies the model and the optimizer's state to the host: a fixed cost plus a pure
    # copy rate. A save copies the same way, then serializes and writes: the rest of its per-byte time.
    end_fixed, copy_per_byte = _line([e for o in obs for e in o.ends], base.end_s, 1.0 / base.copy_bytes_per_s)
    saves = [s for o in obs for s in o.saves]
    fixed, per_byte = _line(saves, base.save_fixed_s, copy_per_byte + 1.0 / base.write_bytes_per_s)
    if saves and save_bytes and EXTRAPOLATION_LIMIT * max(b for b, _ in saves) < save_bytes:
        per_byte = copy_per_byte + 1.0 / base.write_bytes_per_s
        fixed = statistics.median(s - b * per_byte for b, s in saves)
    write_per_byte = per_byte - copy_per_byte
    removes = [s / b for o in obs for b, s in o.removes]
    remove_per_byte = statistics.median(removes) if removes else 1.0 / base.remove_bytes_per_s
    return replace(
        base,
        loop_s=loop,
        val_loop_s=loop,
        input_bytes_per_s=input_rate,
        loader_start_s=max(0.0, statistics.median(starts)) if starts else base.loader_start_s,
        copy_bytes_per_s=1.0 / copy_per_byte,
        write_bytes_per_s=1.0 / write_per_byte if write_per_byte > 0 else math.inf,
        save_fixed_s=max(0.0, fixed),
        remove_bytes_per_s=1.0 / remove_per_byte if remove_per_byte > 0 else math.inf,
        end_s=max(0.0, end_fixed),
        source=f"fitted on {len(records)} recorded fits",
    )


def host_for(rec: dict, records: list[dict], pool: list[dict], *, in_sample: bool = False) -> HostCosts:
    """The host costs a recorded fit is replayed with: fitted on the other workloads' fits of its
    machine (``records``) for what the callback measures there (:func:`~ptp_callback.host_costs.probe_host`),
    and on those of ``pool`` for the rest."""
    bytes_saved = engine(rec["workload"], rec["precision"], gpu_of(rec)).checkpoint_bytes
    def others(fits: list[dict]) -> list[dict]:
        return fits if in_sample else [r for r in fits if r["workload"] != rec["workload"]]
    pooled = fit_host(others(pool), save_bytes=bytes_saved) if others(pool) else H100_HOST
    if pool is records or not others(records):
        return pooled
    own = fit_host(others(records), save_bytes=bytes_saved)
    return replace(pooled, loader_start_s=own.loader_start_s, copy_bytes_per_s=own.copy_bytes_per_s,
                   write_bytes_per_s=own.write_bytes_per_s, save_fixed_s=own.save_fixed_s)


def _line(points: list[tuple[float, float]], fixed: float, per_byte: float) -> tuple[float, float]:
    """``seconds = fixed + per_byte * bytes`` by Theil-Sen: the median of the pairwise slopes, then
    the median intercept (the defaults when underdetermined). A fit's teardown or save can run
    0.5 s longer than the same fit's other run (Llama 400M's teardown: 1.57 and 2.08 s), and one
    such point would tilt a least-squares line for every other model."""
    slopes = [(s2 - s1) / (b2 - b1) for i, (b1, s1) in enumerate(points) for b2, s2 in points[i + 1:]
              if abs(b2 - b1) > 1.0]
    if not slopes:
        return fixed, per_byte
    slope = statistics.median(slopes)
    if slope <= 0:
        return fixed, per_byte
    return statistics.median(s - slope * b for b, s in points), slope


def plan_for(rec: dict, host: HostCosts) -> RunPlan:
    """The plan the callback would make before step one for this recorded fit on the H100."""
    eng = engine(rec["workload"], rec["precision"], gpu_of(rec))
    schedule, _ = lightning_schedule(rec)
    loader = LoaderFacts(num_workers=rec["workers"], persistent_workers=bool((rec.get("loader") or {}).get(
        "persistent_workers")), load_s=eng.load_s, batch_bytes=eng.batch_bytes)
    return plan_run(eng.train, eng.val, host, on_gpu=True, autocast=eng.autocast, train_loader=loader,
                    val_loader=replace(loader, persistent_workers=loader.persistent_workers),
                    sanity_batches=schedule.sanity_batches or 0,
                    checkpoint_bytes=eng.checkpoint_bytes if rec.get("checkpoint") is not False else 0.0,
                    saves_replace_previous=replaces_previous(rec),
                    state_bytes_to_cpu_at_end=eng.checkpoint_bytes, loader_started_before_first_epoch=True)


# ---------------------------------------------------------------------------------- replay
EVENTS = {"sanity_start": "sanity_start", "sanity_end": "sanity_end", "train_start": "train_start",
          "epoch_start": "epoch_start", "bs": "batch_start", "b": "batch_end", "val_start": "val_start",
          "val_end": "val_end", "epoch_end": "epoch_end", "ckpt": "save_start", "train_end": "train_end",
          "fit_end": "fit_end"}


@dataclass(frozen=True)
class Replay:
    """One fit replayed: (fraction, forecaster error, naive error) and the totals."""

    points: list[tuple[float, float | None, float | None]]
    actual_s: float
    before_step_one_s: float | None
    at_fit_start_s: float | None


def replay(rec: dict, plan: RunPlan | None, fractions: tuple[float, ...] = FRACTIONS) -> Replay:
    schedule, saves = lightning_schedule(rec)
    events = rec["events"]
    fit_end = next(t for name, t, *_ in events if name == "fit_end")
    forecaster = RunForecaster(schedule, saves=saves, cycle=time_limit_cycle(rec, schedule))
    forecaster.fit_start(0.0)
    handlers = {k: getattr(forecaster, v) for k, v in EVENTS.items()}
    first_event = events[0][1] if events else 0.0
    if plan is not None:
        # The plan exists once the callback's own work at fit start is done: at the first event.
        forecaster.own_work(first_event if rec.get("with_ptp") else 0.0)
        forecaster.set_plan(plan, first_event)
    has_batch_starts = any(e[0] == "bs" for e in events)
    step_one = None
    points = []
    i = done = 0
    for fraction in fractions:
        now = fraction * fit_end
        while i < len(events) and events[i][1] <= now:
            name = events[i][0]
            if name in handlers:
                handlers[name](events[i][1])
            if name == "train_start" and not has_batch_starts:  # a recording without batch starts
                step_one = forecaster.total_s(events[i][1])
            done += name == "b"
            i += 1
        true = fit_end - now
        # Until its work at fit start is done the callback shows nothing: no ETA to score.
        planning = plan is not None and rec.get("with_ptp") and now < first_event
        left = None if planning else forecaster.remaining_s(now)
        mine = None if left is None else left / true - 1.0
        naive = None
        if done and schedule.total_batches:
            naive = (now / done * (schedule.total_batches - done)) / true - 1.0
        points.append((fraction, mine, naive))
    return Replay(points, fit_end, forecaster.before_step_one_s if has_batch_starts else step_one,
                  forecaster.predicted_total_s)


def _pct(x: float | None) -> str:
    return "   ?  " if x is None else f"{100 * x:+6.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=[DEFAULT])
    parser.add_argument("--fit-host", action="store_true", help="print the host costs fitted on all the fits")
    parser.add_argument("--no-plan", action="store_true", help="replay with measurements only")
    parser.add_argument("--in-sample", action="store_true", help="fit the host costs on every fit")
    args = parser.parse_args(argv)
    records = load(args.files)
    print(f"replay of {len(records)} recorded fits ({', '.join(os.path.relpath(f) for f in args.files)}), "
          f"{time.strftime('%Y-%m-%d')}; engine predictions for each fit's GPU traced on this machine")
    if args.fit_host:
        host = fit_host(records)
        for key, value in host.__dict__.items():
            print(f"  {key:20s} {value}")
        return 0
    # The default file's fits join a FILE's for what the product does not measure on its machine: a
    # few fits alone would fit, say, the rate of a batch's copy to the device on one model whose
    # steps the engine mispredicts (MaxViT's, which put a SqueezeNet fit's batches at 2.6x).
    pool = records if any(os.path.samefile(f, DEFAULT) for f in args.files) else records + load([DEFAULT])
    errors, worst, beaten, compared, starts, pending = [], 0.0, 0, 0, [], 0
    dense: list[tuple[float, float]] = []  # (ptp, naive) |errors| at every 1% from 10% to 90%
    header = "fit".ljust(44) + "".join(f"{int(100 * f):>4d}%: ptp / naive  " for f in FRACTIONS)
    header += " step-one  fit-start"
    print(header)
    for rec in records:
        problem = check_schedule(rec, *lightning_schedule(rec))
        plan = None
        if not args.no_plan:
            plan = plan_for(rec, host_for(rec, records, pool, in_sample=args.in_sample))
        result = replay(rec, plan)
        dense += [(abs(m), abs(n)) for _f, m, n in replay(rec, plan, DENSE).points if m is not None and n is not None]
        cells = []
        for fraction, mine, naive in result.points:
            cells.append(f"{_pct(mine)} / {_pct(naive)}   ")
            pending += mine is None and fraction >= 0.10
            if mine is not None:
                errors.append(abs(mine))
                if fraction >= 0.10:
                    worst = max(worst, abs(mine))
            if fraction >= 0.10 and mine is not None and naive is not None:
                compared += 1
                beaten += abs(mine) <= abs(naive)
        step_one = None if result.before_step_one_s is None else result.before_step_one_s / result.actual_s - 1.0
        at_start = None if result.at_fit_start_s is None else result.at_fit_start_s / result.actual_s - 1.0
        if step_one is not None:
            starts.append(abs(step_one))
        label = f"{rec['workload']} {rec['precision']}{' +ptp' if rec.get('with_ptp') else ''}"
        print(label[:43].ljust(44) + "".join(cells) + f"{_pct(step_one)}   {_pct(at_start)}")
        if problem:
            print("    " + problem)
    if errors:
        print(f"ETA error |median| {100 * statistics.median(errors):.1f}% over {len(errors)} points; "
              f"worst at 10-90% of a fit {100 * worst:.1f}%; at least as good as the naive extrapolation at "
              f"{beaten}/{compared} points from 10% on"
              + (f"; no ETA yet (the callback still at its fit-start work) at {pending}" if pending else ""))
    if dense:
        print(f"at every 1% from 10% to 90% of each fit: |error| median {100 * statistics.median(m for m, _ in dense):.1f}% "
              f"(naive {100 * statistics.median(n for _, n in dense):.1f}%), at least as good as naive at "
              f"{sum(m <= n for m, n in dense)}/{len(dense)} points")
    if starts:
        print(f"before step one: |error| mean {100 * statistics.mean(starts):.1f}%, max {100 * max(starts):.1f}% "
              f"over {len(starts)} fits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
