"""Read a Lightning ``Trainer`` into a :class:`ptp_callback.schedule.FitSchedule`.

Call :func:`read_schedule` from ``Callback.on_fit_start`` **on every rank**: it may load the train and
val dataloaders (``_FitLoop.setup_data`` / ``_EvaluationLoop.setup_data``, the same calls
``trainer.estimated_stepping_batches`` and the fit loop make), which run ``has_len_all_ranks`` and
``strategy.barrier`` collectives in DDP. Calling it on rank 0 only would hang the other ranks.

Example::

    class ShowETA(lightning.pytorch.Callback):
        def on_fit_start(self, trainer, pl_module):
            self.schedule = read_schedule(trainer)          # every rank

        def on_train_batch_end(self, trainer, *args):
            done = trainer.fit_loop.epoch_loop.batch_progress.total.ready
            left = self.schedule.remaining(done)             # train batches, steps, val runs left
            ...

Rules reproduced from Lightning 2.6 (file / function):

* epoch length: ``trainer.num_training_batches`` = ``_FitLoop.max_batches`` after
  ``_FitLoop.setup_data`` (``len(dataloader)``, so ``drop_last`` and the DDP sampler are included,
  then ``limit_train_batches`` via ``data_connector._parse_num_batches``);
* optimizer steps: ``training_epoch_loop._should_accumulate``: a step when the in-epoch batch counter is
  a multiple of ``accumulate_grad_batches`` *or* the batch is the epoch's last (unless
  ``strategy.handles_gradient_accumulation``, e.g. DeepSpeed);
* stopping: ``_FitLoop.done`` / ``_TrainingEpochLoop.done``: ``global_step >= max_steps`` right after
  the batch that steps (mid-epoch if need be), ``epoch_progress.current.processed >= max_epochs``
  between epochs; ``max_epochs=None`` means 1000 without ``max_steps``/``Timer``, else unbounded
  (``loops.utilities._parse_loop_limits``);
* validation: ``_TrainingEpochLoop._should_check_val_fx`` runs after a batch (also the very last batch of
  the fit) when ``(current_epoch + 1) % check_val_every_n_epoch == 0`` and ``(batch_idx + 1) %
  val_check_batch == 0`` -- or ``(total_batch_idx + 1) % val_check_batch == 0`` when
  ``check_val_every_n_epoch is None``; ``val_check_batch`` comes from ``_FitLoop.setup_data``
  (``int(num_training_batches * val_check_interval)`` for a float, at least 1);
  ``trainer._val_check_time_interval`` (seconds) replaces all that for a time interval;
  a validation run needs ``trainer.enable_validation`` and a non-empty val loader
  (``_EvaluationLoop.skip``);
* sanity check: ``Trainer._run_sanity_check``: ``sum(min(num_sanity_val_steps, n))`` batches, skipped
  when the val loop is restarting (a resume that is mid-epoch or ``max_steps``-based);
* resume: the loops are restored *after* ``on_fit_start`` (``Trainer._run``: ``restore_training_state``),
  so at ``on_fit_start`` the position comes from the loaded checkpoint's ``loops.fit_loop`` counters,
  replayed through ``_FitLoop.reset`` / ``_TrainingEpochLoop.reset`` / ``advance`` restart logic
  (see :func:`_resume_start`).

Limits: early stopping and ``max_time`` stop the fit early (``max_time_s`` is reported, not applied);
with FSDP / DeepSpeed / ModelParallel (``strategy.restore_checkpoint_after_setup``) the checkpoint is not
loaded yet at ``on_fit_start``, so a resume is read as a fresh fit; a checkpoint saved in the middle of a
validation run makes Lightning finish that run first (not counted); a manual-optimization step is assumed to
step each of its optimizers once per batch (``optimizer_steps_per_batch``). A train loader that
``reload_dataloaders_every_n_epochs`` gives another length is followed from the epoch it starts
(:func:`rest_of_fit`), the epochs after it taken to be as long.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

import lightning.pytorch as pl
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import GradientAccumulationScheduler, StochasticWeightAveraging, Timer

from ptp_callback.checkpoints import CheckpointSettings, save_positions, saves_per_validation_run
from ptp_callback.forecast import RunForecaster
from ptp_callback.run_prediction import CheckpointFacts
from ptp_callback.schedule import EPOCH_END, FitSchedule, FitStart, build_schedule

__all__ = ["accumulation_at", "announce_weights_only_saves", "fit_forecaster", "read_checkpoints", "read_schedule",
           "rest_of_fit", "time_limit_at_epoch_ends", "time_limit_cycle", "time_limit_used", "with_epoch_length"]


def read_schedule(trainer: "pl.Trainer", *, start: FitStart | None = None) -> FitSchedule:
    """The schedule of the ``trainer.fit`` that is starting; call at ``on_fit_start`` on every rank.

    May load the train dataloader (as ``trainer.estimated_stepping_batches`` does) and the val
    dataloader (as the fit loop does at ``on_train_start``); Lightning then reuses them. When that would
    lose a stateful train dataloader's checkpointed state (Lightning issue #20550), the loader is
    dropped again so that Lightning reloads and restores it.

    ``start``: the rest of a running fit from there (:func:`rest_of_fit`), not the fit from its start.
    """
    fit_loop = trainer.fit_loop
    lm = trainer.lightning_module
    ckpt_state = _checkpoint_fit_loop_state(trainer)

    # --- training data --------------------------------------------------------------------------
    loaded_train = False
    if fit_loop._combined_loader is None:
        try:
            fit_loop.setup_data()  # collective in DDP; no-op without training_step / limit_train_batches=0
        except BaseException:
            # setup_data keeps the loader it made before raising (a val_check_interval longer than an
            # epoch); Lightning's own call would then skip the check and fit without validation.
            _drop_train_loader(fit_loop)
            raise
        loaded_train = fit_loop._combined_loader is not None
    if loaded_train and ckpt_state is not None and ckpt_state.get("state_dict", {}).get("combined_loader"):
        _drop_train_loader(fit_loop)  # keep Lightning's restore of the loader state working

    # no loader means no training: limit_train_batches=0 (setup_data returns before loading)
    has_loader = loaded_train or fit_loop._combined_loader is not None
    n_train = trainer.num_training_batches if has_loader else 0
    B = None if n_train == float("inf") else int(n_train)

    # --- validation ---------------------------------------------------------------------------------
    val_loop = fit_loop.epoch_loop.val_loop
    enable_val = trainer.enable_validation
    if enable_val and val_loop._combined_loader is None:
        stage = trainer.state.stage
        trainer.validating = True  # as _FitLoop.on_run_start does around the same call
        try:
            val_loop.setup_data()  # collective in DDP
        except BaseException:
            val_loop._combined_loader = None  # as for the train loader: Lightning's call must raise again
            raise
        finally:
            trainer.state.stage = stage
    val_counts = list(val_loop._max_batches) if enable_val else []
    val_per_run = _sum_or_none(val_counts)
    time_interval = getattr(trainer, "_val_check_time_interval", None)
    vcb = _val_check_batch(trainer) if enable_val else None

    # --- limits ---------------------------------------------------------------------------------------
    max_epochs, max_steps = _limits(trainer)
    step_on_end = not trainer.strategy.handles_gradient_accumulation

    # --- resume ------------------------------------------------------------------------------------------
    per_batch = optimizer_steps_per_batch(trainer)
    running, restarting = start is not None, False
    if start is None:
        loaded = ckpt_state is not None
        state = ckpt_state if loaded else fit_loop.state_dict()
        restarting = loaded and _restarting(state, iteration_based=trainer.max_steps != -1)
        start = _resume_start(
            state,
            loaded=loaded,
            restarting=restarting,
            batches_per_epoch=B,
            iteration_based=trainer.max_steps != -1,
            automatic_optimization=lm.automatic_optimization,
            val_check=_pre_val_check(trainer, enable_val, vcb),
        )
        start = replace(start, step=start.step // per_batch)
    acc = accumulation_at(trainer, start.epoch)

    sanity = 0
    if enable_val and trainer.num_sanity_val_steps > 0 and not running and not restarting:
        sanity = _sum_or_none([min(trainer.num_sanity_val_steps, n) for n in val_counts])

    return build_schedule(
        batches_per_epoch=B,
        accumulate=acc,
        max_epochs=max_epochs,
        max_steps=max_steps,
        val_check_batch=None if time_interval is not None else vcb,
        check_val_every_n_epoch=trainer.check_val_every_n_epoch,
        val_batches_per_run=val_per_run if enable_val else 0,
        val_every_s=float(time_interval) if time_interval is not None and enable_val else None,
        sanity_batches=sanity,
        max_time_s=_max_time(trainer),
        start=start,
        step_on_epoch_end=step_on_end,
    )


# ---------------------------------------------------------------------------------------------------


def fit_forecaster(trainer: "pl.Trainer", warmup_batches: int) -> tuple[RunForecaster, CheckpointFacts | None]:
    """The forecaster of the fit that is starting, on its schedule and saves (:func:`read_schedule`,
    :func:`read_checkpoints`: call on every rank), and what its checkpoints need for their plan."""
    schedule = read_schedule(trainer)
    saves, every_s, checkpoint, per_val_run = read_checkpoints(trainer, schedule)
    forecaster = RunForecaster(schedule, saves=saves, save_every_s=every_s, saves_per_val_run=per_val_run,
                               warmup_batches=warmup_batches,
                               relayout=lambda n: with_epoch_length(trainer, schedule, n),
                               cycle=time_limit_cycle(trainer, schedule),
                               time_limit_at_epoch_ends=time_limit_at_epoch_ends(trainer))
    return forecaster, checkpoint


def optimizer_steps_per_batch(trainer: "pl.Trainer") -> int:
    """Global steps one training batch makes: Lightning counts each ``optimizer.step()`` of a
    manual-optimization step, which is taken to step each of its optimizers once (a GAN's)."""
    if trainer.lightning_module.automatic_optimization:
        return 1
    return max(1, len(trainer.optimizers))


def read_checkpoints(trainer: "pl.Trainer", schedule: FitSchedule) -> tuple[tuple[int, ...], float | None,
                                                                           CheckpointFacts | None, int]:
    """The saves every ``ModelCheckpoint`` of the trainer will make: their positions on the schedule,
    a time-triggered interval if any, what the plan needs to cost them, and the saves after each
    validation run of a fit that validates every so many seconds. Call after :func:`read_schedule`
    (it needs the validation loaders' lengths)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    if trainer.fast_dev_run:  # ModelCheckpoint._should_skip_saving_checkpoint: it saves nothing then
        return (), None, None, 0
    positions: list[int] = []
    per_val_run = 0
    every_s: float | None = None
    facts: CheckpointFacts | None = None
    per_batch = optimizer_steps_per_batch(trainer)
    for cb in trainer.checkpoint_callbacks:
        if not isinstance(cb, ModelCheckpoint):
            continue
        interval = cb._train_time_interval
        settings = CheckpointSettings(
            # every n global steps: every n / gcd(n, k) batches when a batch makes k of them
            every_n_train_steps=cb._every_n_train_steps // math.gcd(cb._every_n_train_steps, per_batch)
            if cb._every_n_train_steps else cb._every_n_train_steps,
            every_n_epochs=cb._every_n_epochs,
            on_epoch_end=cb._should_save_on_train_epoch_end(trainer),
            save_last=cb.save_last is True,  # "link" only links the file
            save_top_k=cb.save_top_k,
            every_s=interval.total_seconds() if interval is not None else None,
            weights_only=cb.save_weights_only,
        )
        positions.extend(save_positions(schedule, settings))
        if schedule.val_every_s:
            per_val_run += saves_per_validation_run(settings)
        if settings.every_s:
            every_s = settings.every_s if every_s is None else min(every_s, settings.every_s)
        if facts is None:
            # save_top_k=k keeps k files: once k exist, each new save deletes one (-1 keeps all)
            facts = CheckpointFacts(directory=cb.dirpath, weights_only=cb.save_weights_only,
                                    replaces_previous=cb.save_top_k > 0, buffered=saves_through_memory(trainer))
    return tuple(sorted(positions)), every_s, facts, per_val_run


def announce_weights_only_saves(trainer: "pl.Trainer", on_save: Callable[[], None]) -> Callable[[], None]:
    """Call ``on_save`` as each weights-only ``ModelCheckpoint`` of the trainer starts a save; returns
    what undoes it. Lightning calls no callback's ``on_save_checkpoint`` for a weights-only save (only
    the module's), so those checkpoints' ``_save_checkpoint`` is wrapped, on the instance, for the fit."""
    wrapped = []
    for cb in trainer.checkpoint_callbacks:
        original = getattr(cb, "_save_checkpoint", None)
        if not getattr(cb, "save_weights_only", False) or original is None or "_save_checkpoint" in vars(cb):
            continue

        def save(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            on_save()
            return _original(*args, **kwargs)

        cb._save_checkpoint = save
        wrapped.append(cb)

    def undo() -> None:
        for cb in wrapped:
            vars(cb).pop("_save_checkpoint", None)

    return undo


def saves_through_memory(trainer: "pl.Trainer") -> bool:
    """Whether the trainer's checkpoint IO is Lightning's own ``TorchCheckpointIO``, whose
    ``_atomic_save`` serializes the whole checkpoint into a ``BytesIO`` and then writes it."""
    try:
        return isinstance(trainer.strategy.checkpoint_io, TorchCheckpointIO)
    except AttributeError:  # a strategy without checkpoint IO
        return False


def rest_of_fit(trainer: "pl.Trainer", position: int) -> tuple[FitSchedule, tuple[int, ...]]:
    """At ``on_train_epoch_start``: the schedule of the fit from the epoch starting now, with the
    train loader's length as it is now (``reload_dataloaders_every_n_epochs`` may have changed it),
    and the saves on it. ``position``: the training batches the fit has run."""
    start = FitStart(position=position, step=trainer.global_step // optimizer_steps_per_batch(trainer),
                     epoch=trainer.current_epoch, epochs_counted=trainer.current_epoch)
    schedule = read_schedule(trainer, start=start)
    return schedule, read_checkpoints(trainer, schedule)[0]


def follow_epoch_start(trainer: "pl.Trainer", forecaster: RunForecaster, clock: Callable[[], float]) -> None:
    """At ``on_train_epoch_start`` after the first: where ``reload_dataloaders_every_n_epochs`` gave
    the train loader a new length, a ``GradientAccumulationScheduler`` another accumulation, or a
    callback other limits (``fit_loop.max_epochs``, ``max_steps``), the forecaster goes on with the
    rest of the fit laid out on them (its reading counted as the callback's own work)."""
    schedule = forecaster.schedule
    length = trainer.num_training_batches
    reloaded = trainer.reload_dataloaders_every_n_epochs and length != float("inf") and \
        length != schedule.batches_per_epoch
    accumulation = _scheduled_accumulation(trainer, trainer.current_epoch)
    limits = (schedule.max_epochs, schedule.max_steps)
    if forecaster.position == forecaster.first_batch or not reloaded and \
            accumulation in (None, schedule.accumulate) and _limits(trainer) == limits:
        return
    started = clock()
    try:
        forecaster.continue_with(*rest_of_fit(trainer, forecaster.position))
    finally:
        forecaster.own_work(clock() - started)


def with_epoch_length(trainer: "pl.Trainer", schedule: FitSchedule,
                      batches_per_epoch: int) -> tuple[FitSchedule, tuple[int, ...]]:
    """A schedule read for a train iterable without ``len``, laid out with epochs of
    ``batches_per_epoch`` (what its first epoch ran), and the saves on it."""
    relaid = schedule.with_epoch_length(batches_per_epoch)
    return relaid, read_checkpoints(trainer, relaid)[0]


def time_limit_cycle(trainer: "pl.Trainer",
                     schedule: FitSchedule) -> tuple[FitSchedule, tuple[int, ...]] | None:
    """For a fit that only ``max_time`` ends: a few of its epochs laid out
    (:meth:`~ptp_callback.schedule.FitSchedule.time_limit_cycle`), and the saves on them (``None``
    for any other fit, or when its epochs have no known length)."""
    cycle = schedule.time_limit_cycle()
    return None if cycle is None else (cycle, read_checkpoints(trainer, cycle)[0])


def time_limit_at_epoch_ends(trainer: "pl.Trainer") -> bool:
    """Whether the fit's ``Timer`` checks its limit at epoch ends only (``interval="epoch"``; the
    one ``Trainer(max_time=...)`` adds checks at the end of each training batch)."""
    timer = _timer(trainer)
    return timer is not None and str(getattr(timer._interval, "value", timer._interval)) == "epoch"


def time_limit_used(trainer: "pl.Trainer") -> float:
    """Seconds of ``max_time`` that earlier runs of a resumed fit used (``Timer``'s restored offset)."""
    timer = _timer(trainer)
    return float(getattr(timer, "_offset", 0.0) or 0.0) if timer is not None else 0.0


def _timer(trainer: "pl.Trainer") -> Timer | None:
    """The ``Timer`` that limits the fit: ``Trainer(max_time=...)`` adds one
    (callback_connector._configure_timer_callback); a user's own takes its place."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, Timer) and cb._duration is not None), None)


def _limits(trainer: "pl.Trainer") -> tuple[int | None, int | None]:
    """``(max_epochs, max_steps)`` as the schedule counts them: ``None`` for no limit, with the epoch
    a callback will add, and steps in batches where a batch steps several optimizers (one manual
    step steps every optimizer)."""
    max_epochs = trainer.max_epochs
    max_epochs = None if max_epochs is None or max_epochs == -1 else max_epochs + _epochs_to_be_added(trainer)
    max_steps = None if trainer.max_steps == -1 else trainer.max_steps
    per_batch = optimizer_steps_per_batch(trainer)
    if per_batch > 1 and max_steps is not None:
        max_steps = -(-max_steps // per_batch)
    return max_epochs, max_steps


def accumulation_at(trainer: "pl.Trainer", epoch: int) -> int:
    """Batches per optimizer step in ``epoch``: what a ``GradientAccumulationScheduler`` sets at that
    epoch's start (this callback's hooks may run before its), else the trainer's setting."""
    scheduled = _scheduled_accumulation(trainer, epoch)
    return scheduled if scheduled is not None else trainer.accumulate_grad_batches


def _scheduled_accumulation(trainer: "pl.Trainer", epoch: int) -> int | None:
    """What a ``GradientAccumulationScheduler`` sets for ``epoch`` (``None`` without one: the
    trainer's setting, which SWA's batch-norm epoch also changes, for one pass without steps)."""
    scheduler = next((cb for cb in trainer.callbacks if isinstance(cb, GradientAccumulationScheduler)), None)
    return scheduler.get_accumulate_grad_batches(epoch) if scheduler is not None else None


def _epochs_to_be_added(trainer: "pl.Trainer") -> int:
    """Epochs a callback whose ``on_fit_start`` comes after this one's will add: ``StochasticWeightAveraging``
    runs one more over a model with batch norms, to update their statistics."""
    return sum(1 for cb in trainer.callbacks if isinstance(cb, StochasticWeightAveraging)
               and getattr(cb, "_model_contains_batch_norm", False) is None  # its on_fit_start is yet to run
               and cb.pl_module_contains_batch_norm(trainer.lightning_module))


def _sum_or_none(counts: list[int | float]) -> int | None:
    total = sum(counts)
    return None if math.isinf(total) else int(total)


def _val_check_batch(trainer: "pl.Trainer") -> int | None:
    """``trainer.val_check_batch`` as the pure layer wants it (``EPOCH_END`` for Lightning's ``inf``)."""
    vcb = trainer.val_check_batch
    if vcb is None:
        return None
    if vcb == float("inf"):
        # _should_check_val_fx: an unsized loader validates on its last batch; with an int
        # limit_train_batches, when (batch_idx + 1) % limit == 0 -- the epoch's last batch as well
        return EPOCH_END
    return int(vcb)


def _max_time(trainer: "pl.Trainer") -> float | None:
    # The Timer's clock includes time restored from a checkpoint (Timer._offset: time_limit_used).
    timer = _timer(trainer)
    return float(timer._duration) if timer is not None else None


def _drop_train_loader(fit_loop: Any) -> None:
    if fit_loop._data_fetcher is not None:
        fit_loop._data_fetcher.teardown()
    fit_loop._data_fetcher = None
    fit_loop._combined_loader = None
    fit_loop._last_train_dl_reload_epoch = float("-inf")


def _checkpoint_fit_loop_state(trainer: "pl.Trainer") -> dict | None:
    """The checkpoint's ``loops.fit_loop`` state when ``fit(ckpt_path=...)`` loaded one, else ``None``.

    ``_CheckpointConnector.resume_start`` loads the file before ``on_fit_start`` and keeps it in
    ``_loaded_checkpoint`` until ``resume_end``; the loops themselves are restored only after the hook.
    """
    ckpt = getattr(trainer._checkpoint_connector, "_loaded_checkpoint", None) or {}
    return (ckpt.get("loops") or {}).get("fit_loop")


# --- replay of Lightning's restart logic ---------------------------------------------------------------

_ZERO = {"ready": 0, "started": 0, "processed": 0, "completed": 0}


def _tracker(state: dict, key: str, part: str) -> dict:
    return dict(_ZERO, **state.get(key, {}).get(part, {}))


def _restarting(state: dict, iteration_based: bool) -> bool:
    """``_FitLoop.restarting`` setter: restart when the last epoch is unfinished or max_steps is set."""
    cur = _tracker(state, "epoch_progress", "current")
    unfinished = cur["ready"] != cur["processed"] or cur["started"] != cur["processed"]
    return unfinished or iteration_based


def _pre_val_check(trainer: "pl.Trainer", enable_val: bool, vcb: int | None) -> Callable[..., bool]:
    """``_TrainingEpochLoop._should_check_val_fx`` evaluated on the restored (pre-batch) counters."""
    every_n = trainer.check_val_every_n_epoch
    time_based = getattr(trainer, "_val_check_time_interval", None) is not None
    int_limit = isinstance(trainer.limit_train_batches, int)

    def check(epoch: int, in_epoch: int, total: int, is_last: bool) -> bool:
        if not enable_val or vcb is None and not time_based:
            return False
        if every_n is not None and (epoch + 1) % every_n != 0:
            return False
        if vcb == EPOCH_END and is_last:
            return True
        if time_based:
            return False  # the clock was just reset in setup_data
        if vcb == EPOCH_END:
            return int_limit and in_epoch % trainer.limit_train_batches == 0
        assert vcb is not None
        return (total if every_n is None else in_epoch) % vcb == 0

    return check


def _resume_start(
    state: dict,
    *,
    loaded: bool,
    restarting: bool,
    batches_per_epoch: int | None,
    iteration_based: bool,
    automatic_optimization: bool,
    val_check: Callable[..., bool],
) -> FitStart:
    """Replay the restart bookkeeping Lightning does on ``state`` before its first training batch.

    Mirrors, in order: ``_FitLoop.update_restart_stage`` / ``reset`` / ``on_run_start``,
    ``_TrainingEpochLoop.update_restart_stage`` / ``reset`` and the restart branch at the top of
    ``_TrainingEpochLoop.advance``. On a fresh trainer every counter is 0 and this gives ``FitStart()``.
    """
    R = restarting
    ep_tot = _tracker(state, "epoch_progress", "total")
    ep = _tracker(state, "epoch_progress", "current")
    bp_tot = _tracker(state, "epoch_loop.batch_progress", "total")
    bp = _tracker(state, "epoch_loop.batch_progress", "current")
    is_last = bool(state.get("epoch_loop.batch_progress", {}).get("is_last_batch", False))
    vp_tot = _tracker(state, "epoch_loop.val_loop.batch_progress", "total")
    val_is_last = bool(state.get("epoch_loop.val_loop.batch_progress", {}).get("is_last_batch", False))

    def same(t: dict, d_started: int, d_processed: int, d_completed: int) -> bool:
        # started == ready + d_started, processed == started + d_processed, completed == processed + ...
        return (
            t["started"] == t["ready"] + d_started
            and t["processed"] == t["started"] + d_processed
            and t["completed"] == t["processed"] + d_completed
        )

    # _FitLoop.update_restart_stage
    fit_stage = "none"
    if R and same(ep_tot, -1, 0, 0):
        fit_stage = "epoch_start"
    elif R and same(ep_tot, 0, -1, 0):
        fit_stage = "mid_epoch"
    elif R and same(ep_tot, 0, 0, -1):
        fit_stage = "epoch_end"
    elif loaded and same(ep_tot, 0, 0, -1):
        fit_stage = "resumed_epoch_end"
    # _TrainingEpochLoop.update_restart_stage
    batch_stage = "none"
    if R and same(bp_tot, 0, 0, -1):
        batch_stage = "train_batch_end"
    elif R and same(bp_tot, 0, 0, 0):
        batch_stage = "last"
    # _EvaluationLoop.update_restart_stage
    val_mid = R and same(vp_tot, 0, -1, 0)

    # _FitLoop.reset
    if fit_stage == "epoch_start":
        ep.update(ready=ep["completed"], started=ep["completed"], processed=ep["completed"])
    if fit_stage == "resumed_epoch_end":
        ep["completed"] += 1
    if batch_stage == "train_batch_end" and is_last:
        if fit_stage == "mid_epoch":
            ep["processed"] += 1
            ep["completed"] += 1
        elif not val_is_last:
            ep["completed"] += 1
    # _FitLoop.on_run_start
    if not iteration_based:
        ep["completed"] = ep["processed"]
    epoch, counted = ep["completed"], ep["processed"]

    # _TrainingEpochLoop.reset
    B = batches_per_epoch
    if batch_stage == "train_batch_end":
        bp["completed"] += 1
        bp_tot["completed"] += 1
        if B is not None and bp["completed"] >= B:
            bp = dict(_ZERO)
            is_last = False
    if R:
        bp.update(ready=bp["completed"], started=bp["completed"], processed=bp["completed"])
    else:
        bp = dict(_ZERO)
        is_last = False
    r, position = bp["ready"], bp_tot["ready"]

    # _TrainingEpochLoop.advance, first iteration: a restart that lands on a validation batch either
    # finishes that validation or skips it, and trains nothing in that iteration.
    trains_first = True
    if R and val_check(epoch, r, position, is_last) and (val_mid or batch_stage == "last"):
        trains_first = False
    first_end: int | None
    if B is None:
        first_end = None
    elif trains_first:
        # the data fetcher counts on from r, so the epoch ends once its counter reaches B -- but a loop
        # that restarts on an already finished epoch still trains one batch (index r + 1) first
        first_end = max(B, r + 1)
    else:
        first_end = r if (r >= B or is_last) else B

    if automatic_optimization:
        opt = state.get("epoch_loop.automatic_optimization.optim_progress", {})
        step = int(opt.get("optimizer", {}).get("step", {}).get("total", {}).get("completed", 0))
    else:
        step = _tracker(state, "epoch_loop.manual_optimization.optim_step_progress", "total")["completed"]

    return FitStart(
        position=position,
        step=step,
        epoch=epoch,
        epochs_counted=counted,
        batch_in_epoch=r,
        first_epoch_end=None if first_end == B else first_end,
    )
