"""``RunTracker``: a training loop's events turned into run-forecaster events, and the ETA shown.

:func:`ptp_callback.track` builds one for a loop you write (plain PyTorch, Accelerate); the HF
``Trainer`` callback builds one and feeds it from the Trainer's hooks. Either way the tracker holds
no arithmetic: :class:`~ptp_callback.forecast.RunForecaster` does it, and the tracker predicts the run
before step one, translates the loop's events, shows the result and never breaks the loop (a failure
inside becomes one :class:`~ptp_callback.notices.PtpWarning` and measured timing alone).

========================== =========================================================================
shown                      meaning
========================== =========================================================================
tqdm bar ``eta=``          remaining time of the whole run and its precision (local main process)
line at the first batch    the run predicted before step one, part by part
line at ``close()``        each part's prediction beside what it measured
``tracker.postfix()``      ``{"eta": "04:12 bf16-mixed"}`` for your own bar's ``set_postfix``
``tracker.remaining_s()``  remaining seconds (``None`` while unknown)
========================== =========================================================================

Feeding it: ``tracker.iterate(loader)`` times every (micro-)batch, the data wait and each epoch's
start; where the loop pulls its batches itself, ``tracker.step()`` after each optimizer step instead
(the tracker then counts optimizer steps). ``with tracker.phase("eval")`` and
``with tracker.phase("save")`` time evaluations and checkpoint saves; the ETA counts the ones still
to come that the tracker was told of (``LoopShape.eval_every`` / ``save_every``).

>>> from ptp_callback.tracker import LoopShape, RunTracker
>>> shape = LoopShape(batches_per_epoch=4, epochs=2)
>>> schedule, saves = shape.schedule()
>>> tracker = RunTracker(schedule, saves=saves, shape=shape, bar=False, verbose=False)
>>> tracker.start()
>>> for epoch in range(2):
...     for batch in tracker.iterate(range(4)):
...         pass                                      # the training step
>>> tracker.close()
>>> tracker.forecaster.position
8
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from .cadence import Every, positions_every, with_evaluations
from .devices import DeviceSpec
from .forecast import RunForecaster
from .host_costs import LoopWork
from .notices import OnceWarnings, PrecisionAdvice, PrecisionHazard, PtpWarning
from .precision import PrecisionSpec
from .report import communication_note, plan_line, report_line
from .run_plan import LoaderFacts
from .run_prediction import CheckpointFacts, RunPrediction, predict_run, run_advice, step_as_it_is
from .run_readouts import RunReadouts
from .schedule import FitSchedule, FitStart, build_schedule, steps_at
from .tracer import StepFn
from .training_parameters import TrainingParametersWatch, training_parameters

__all__ = ["LoopShape", "RunTracker", "TraceInputs", "data_parallel_communication"]

_SYNC_EVERY = 100  # batches between device syncs that keep measured intervals honest (see _batch_ended)
_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


@dataclass(frozen=True)
class LoopShape:
    """A hand-written loop's length and cadences, in the numbers its author knows.

    ``batches_per_epoch``: ``len(train_loader)`` (micro-batches, on this process); ``accumulate``:
    micro-batches per optimizer step (the last step of an epoch takes what is left, as Accelerate
    does); ``epochs`` / ``max_steps``: whichever ends the run first; ``eval_every`` / ``save_every``:
    every ``n`` optimizer steps, ``"epoch"`` or ``None``; ``eval_batches``: batches per evaluation.
    """

    batches_per_epoch: int | None
    accumulate: int = 1
    epochs: int | None = None
    max_steps: int | None = None
    eval_every: Every = None
    eval_batches: int | None = None
    save_every: Every = None

    def schedule(self, start: FitStart = FitStart(), unit: str = "batch") -> tuple[FitSchedule, tuple[int, ...]]:
        """The run's schedule and save positions, counted in micro-batches or in optimizer steps."""
        per_epoch, accumulate = self.batches_per_epoch, self.accumulate
        if unit == "step":
            per_epoch = None if per_epoch is None else math.ceil(per_epoch / accumulate)
            accumulate = 1
        base = build_schedule(batches_per_epoch=per_epoch, accumulate=accumulate, max_epochs=self.epochs,
                              max_steps=self.max_steps, val_check_batch=None, check_val_every_n_epoch=1,
                              val_batches_per_run=0, start=start)
        schedule = with_evaluations(base, positions_every(base, self.eval_every), self.eval_batches)
        return schedule, positions_every(schedule, self.save_every)


@dataclass(frozen=True)
class TraceInputs:
    """What the step is traced from: the model, an example batch, the step, the optimizer, the
    precision, the device predicted for and the one the loop runs on. ``context`` is entered around
    every trace (Accelerate: the model's forward without its own autocast wrapper)."""

    model: torch.nn.Module
    batch: Any
    step_fn: StepFn | None
    optimizer: Any
    precision: PrecisionSpec
    device: str | torch.device | DeviceSpec
    run_device: torch.device
    val_batch: Any = None
    val_step_fn: StepFn | None = None
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


class RunTracker(RunReadouts):
    """Turns a training loop's events into forecaster events and shows the run's ETA.

    Built by :func:`ptp_callback.track` (plain and Accelerate loops) and by the HF ``Trainer``
    callback; see the module doc for what it shows. An adapter whose loop has hooks of its own
    passes them to :meth:`feed` and calls :meth:`refresh`.

    Args:
        schedule, saves: the run's schedule and checkpoint save positions.
        precision_label: the precision shown beside the ETA.
        shape: the loop's settings, when the tracker may rebuild the schedule (a resume, ``step()``).
        advise: predict the other precisions (``"auto"``: when that costs under 1% of the run).
        bar, verbose: show a tqdm bar; print the plan and the report.
        main_process: only the main process predicts, shows and prints.
        advice_as_warning: give the advice as a ``PrecisionAdvice`` warning instead of a line.
        warmup_batches: first batches never used as steady measurements.
        refresh_s: the longest the ETA text goes without being recomputed (sooner early in the fit).
        clock: seconds since an arbitrary origin; injectable for tests.
    """

    def __init__(self, schedule: FitSchedule, *, saves: tuple[int, ...] = (), precision_label: str = "",
                 shape: LoopShape | None = None, advise: bool | str = "auto", bar: bool = True, verbose: bool = True,
                 main_process: bool = True, advice_as_warning: bool = False, warmup_batches: int = 3,
                 refresh_s: float = 1.0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.shape, self.advise, self.precision_label = shape, advise, precision_label
        self.show_bar, self.verbose, self.main_process = bar, verbose, main_process
        self.advice_as_warning, self.warmup_batches = advice_as_warning, warmup_batches
        self.refresh_s, self.clock = refresh_s, clock
        self.unit = "batch"
        self.forecaster = self._new_forecaster(schedule, saves)
        self.prediction: RunPrediction | None = None
        self.inputs: TraceInputs | None = None
        self._extra_key = ""
        self.device_note: str | None = None
        self.plan_note = ""  # what the plan line adds: "; EarlyStoppingCallback may end it sooner"
        self._stopped_by: str | None = None  # the exception that left a ``with track(...)`` block
        self.plan_text = self.summary = ""
        self.advice_text: str | None = None
        self.active = True
        self.closed = False
        self._early: list[tuple[str, float]] = []  # events before the first batch, replayed on a rebuild
        self._started = False  # training has started (first iterate / step)
        self._iterated = False
        self._batch_open = False
        self._in_epoch: int | None = None  # batches of the epoch iterate() is in (None: between epochs)
        self._epochs_done = 0
        self._left_at: int | None = None  # batches of the last epoch when the loop left it early
        self._phase: str | None = None
        self._warnings = OnceWarnings(main_process)
        self._bar: Any = None
        self._sync_device: torch.device | None = None
        self._watch: TrainingParametersWatch | None = None  # the parameters that train

    # ------------------------------------------------------------------ failures never break a loop
    def _fail(self, what: str, exc: BaseException) -> None:
        """Stop feeding the forecaster after an internal failure: one warning, the loop goes on."""
        self.active = False
        self.warn_once(what, f"{what} failed ({type(exc).__name__}: {exc}); no ETA for the rest of the run")

    def warn_once(self, key: str, message: str, category: type[Warning] = PtpWarning) -> None:
        """One warning per ``key`` (on the main process only)."""
        self._warnings.warn(key, message, category)

    def feed(self, event: str, t: float | None = None) -> None:
        """One forecaster event (``"batch_end"``, ``"val_start"`` ...) at ``t`` (now by default), for
        adapters whose loop has hooks of its own; a failure stops the tracker with one warning."""
        if not self.active or self.closed:
            return
        try:
            getattr(self.forecaster, event)(self.clock() if t is None else t)
        except Exception as exc:  # noqa: BLE001 - never break the loop
            self._fail("timing the run", exc)

    def _write(self, line: str) -> None:
        if self.verbose and self.main_process:
            from tqdm import tqdm

            tqdm.write(f"ptp: {line}", file=sys.stderr)

    # ------------------------------------------------------------------------------- prediction
    def start(self, t: float | None = None) -> None:
        """The run starts now (before the prediction: its cost is the tracker's own work)."""
        t = self.clock() if t is None else t
        self.forecaster.fit_start(t)
        self._early.append(("fit_start", t))

    def predict(self, inputs: TraceInputs, *, train_loader: LoaderFacts = LoaderFacts(),
                val_loader: LoaderFacts = LoaderFacts(), checkpoint: CheckpointFacts | None = None,
                world_size: int = 1, extra_key: str = "", loop: LoopWork | None = None) -> None:
        """Predict the run before step one (on failure: one warning, measured timing only).
        ``loop``: the framework loop that runs the batches, whose own work a CPU run is planned with."""
        self.inputs, self._extra_key = inputs, extra_key
        started = self.clock()
        try:
            with inputs.context():
                self.prediction = predict_run(
                    inputs.model, inputs.batch, inputs.step_fn, inputs.optimizer, inputs.precision, inputs.device,
                    run_device=inputs.run_device, val_batch=inputs.val_batch,
                    val_step_fn=inputs.val_step_fn or inputs.step_fn, train_loader=train_loader,
                    val_loader=val_loader, checkpoint=checkpoint,
                    communication=data_parallel_communication(inputs.model, world_size), extra_key=extra_key,
                    framework_loop=loop)
        except Exception as exc:  # noqa: BLE001 - a model that cannot be traced still trains
            self.warn_once("predict", f"could not predict the run ({type(exc).__name__}: {exc}); "
                                  "the ETA uses measured batches only")
        seconds = self.clock() - started
        self.forecaster.own_work(seconds)
        self._early.append(("own_work", seconds))
        if inputs.run_device.type == "cuda":
            self._sync_device = inputs.run_device
        if self.prediction is not None:
            self._watch = TrainingParametersWatch(self.prediction, self.forecaster, self._training_parameters())
            self.plan_note += communication_note(world_size, self.prediction.device.arch)
            self.forecaster.set_plan(self.prediction.plan, self.clock())
            for hazard in self.prediction.trace.hazards:
                self.warn_once(hazard, hazard, PrecisionHazard)
            if self.advise and self._advice_cost_s() < 0.005 * (self.forecaster.predicted_total_s or 0.0):
                self._advise(self.forecaster.predicted_total_s)

    def _device_name(self) -> str:
        return self.prediction.device.name if self.prediction is not None else "?"

    # ------------------------------------------------------------------------- precision advice
    def _advise(self, fit_s: float | None, measured_step_s: float | None = None) -> None:
        prediction, inputs = self.prediction, self.inputs
        if not self.advise or prediction is None or inputs is None or not self.main_process:
            return
        self.advise = False  # once per run
        from .advisor import compare_precisions

        started = self.clock()
        try:
            with inputs.context():
                options = compare_precisions(inputs.model, inputs.batch, inputs.step_fn, inputs.optimizer,
                                             current=inputs.precision, device=prediction.device,
                                             measured_step_s=measured_step_s, extra_key=self._extra_key)
            text = run_advice(prediction, options, self.precision_label, self.forecaster.schedule, fit_s)
        except Exception as exc:  # noqa: BLE001
            self.warn_once("advice", f"precision advice failed ({type(exc).__name__}: {exc})")
            text = None
        if not self.closed:
            self.forecaster.own_work(self.clock() - started)
        if text:
            self.advice_text = text
            if self.advice_as_warning:
                self.warn_once("advice-text", text, PrecisionAdvice)
            else:
                self._write(text)

    # ---------------------------------------------------------------------------------- the loop
    def begin_training(self) -> None:
        """The first batch is about to come: training starts, the plan is shown, the bar opens."""
        self._started = True
        now = self.clock()
        self.forecaster.train_start(now)
        forecaster = self.forecaster
        if self.device_note:
            self._write(self.device_note)
        if self.prediction is not None:
            self.plan_text = plan_line(forecaster.initial_parts, forecaster.predicted_total_s, self.precision_label,
                                       self._device_name(), noun="run", train_unit=self._unit_name(),
                                       earlier_s=forecaster.elapsed_before_s) + self.plan_note
            self._write(self.plan_text)
        if self.show_bar and self.main_process:
            from tqdm import tqdm

            schedule = forecaster.schedule
            self._bar = tqdm(total=schedule.total_batches, initial=schedule.start_batch,
                             desc="train" if self.unit == "batch" else "train steps", bar_format=_BAR_FORMAT,
                             dynamic_ncols=True, file=sys.stderr)
        self.refresh(now, force=True)

    def iterate(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield ``loader``'s batches, timing each one, the wait for it and the epoch's start.

        One call is one epoch. Leaving the loop early (``break``) ends the epoch there.
        """
        if not self.active or self.closed:
            yield from loader
            return
        clock = self.clock
        try:
            self._iterated = True
            if not self._started:
                self.begin_training()
            self._check_length()
            self.follow_training_parameters()
            self.forecaster.epoch_start(clock())
            self._in_epoch, self._left_at = 0, None
        except Exception as exc:  # noqa: BLE001
            self._fail("timing the epoch", exc)
        for batch in loader:
            if self.active:
                try:
                    self.forecaster.batch_start(clock())
                    self._batch_open = True
                except Exception as exc:  # noqa: BLE001
                    self._fail("timing a batch", exc)
            try:
                yield batch
            except GeneratorExit:  # the loop left early: this batch and the epoch end here
                self._end_epoch(left_early=True)
                raise
            if self._batch_open and self.active:
                self._batch_ended()
        self._end_epoch()

    def follow_training_parameters(self, now: float | None = None) -> bool:
        """The batch's cost as the parameters that train now make it (the loop may have unfrozen a
        backbone), its step traced again if they changed; ``True`` when the cost changed. At each
        epoch's start (:meth:`iterate`; an adapter whose loop has hooks of its own, at its epoch's
        first batch), and inside an epoch (``now``) when the ETA is recomputed (:meth:`refresh`), at
        most once a second."""
        inputs, watch = self.inputs, self._watch
        if inputs is None or watch is None or self.prediction is None or not self.active or self.closed:
            return False
        if now is not None and not watch.look_due(now):
            return False
        started, changed = self.clock(), False

        def step_now() -> Any:
            with inputs.context():
                return step_as_it_is(self.prediction, inputs.model, inputs.batch, inputs.step_fn, inputs.optimizer,
                                     inputs.precision, extra_key=self._extra_key)

        try:
            changed = watch.check(self._training_parameters(), step_now, self.forecaster.schedule.accumulate)
        except Exception as exc:  # noqa: BLE001 - the ETA keeps the batch's cost it had
            self.warn_once("parameters", f"following the parameters that train failed ({type(exc).__name__}: "
                                         f"{exc}); the ETA keeps the batch's cost")
        self.forecaster.own_work(self.clock() - started)
        return changed

    def _training_parameters(self) -> Any:
        assert self.inputs is not None
        return training_parameters(self.inputs.model, [self.inputs.optimizer])

    def _batch_ended(self) -> None:
        try:
            forecaster = self.forecaster
            if self._sync_device is not None and forecaster.batches.seen % _SYNC_EVERY == self.warmup_batches:
                # Kernels run behind the host: without a sync now and then, measured intervals would
                # time the host filling the launch queue. One every _SYNC_EVERY batches costs little.
                torch.cuda.synchronize(self._sync_device)
            now = self.clock()
            forecaster.batch_end(now)
            self._batch_open = False
            if self._in_epoch is not None:
                self._in_epoch += 1
            self._advanced(now)
        except Exception as exc:  # noqa: BLE001
            self._fail("timing a batch", exc)

    def _advanced(self, now: float) -> None:
        """One unit of the loop (a batch or a step) is done: the bar moves, the ETA refreshes when due."""
        if self._bar is not None:
            self._bar.update(1)
        self.refresh(now)

    def _end_epoch(self, left_early: bool = False) -> None:
        if not self.active or self._in_epoch is None:
            return
        if self._batch_open:
            self._batch_ended()
        try:
            self.forecaster.epoch_end(self.clock())
            self._epochs_done += 1
            # A state saved now resumes inside that epoch (a time budget or a signal left it), unless
            # another epoch starts first.
            self._left_at = self._in_epoch if left_early else None
            self._in_epoch = None
            total = self.forecaster.schedule.total_batches
            if self._bar is not None and self._bar.total != total:  # the epoch's length is known now
                self._bar.total = total
                self._bar.refresh()
        except Exception as exc:  # noqa: BLE001
            self._fail("timing the epoch", exc)

    def step(self) -> None:
        """One optimizer step is done (call it where the loop steps, e.g. under
        ``accelerator.sync_gradients``). Not needed with :meth:`iterate`, which counts batches."""
        if not self.active or self.closed or self._iterated:
            return
        try:
            if self.unit != "step":
                self._use_step_units()
            if not self._started:
                self.begin_training()
            forecaster = self.forecaster
            if forecaster.schedule.total_batches is None:
                self.warn_once("no-length", "the run's length is unknown (a train loader without len() and no "
                                            "max_steps): no ETA; pass max_steps=, or loop with "
                                            "tracker.iterate(loader) so that an epoch's end is seen")
            self._check_length()
            now = self.clock()
            if forecaster.batches.seen == 0 and not self._batch_open:
                forecaster.batch_start(now)  # the first step began at the latest when training started
            forecaster.batch_end(now)
            self._batch_open = self._more_to_come()
            if self._batch_open:
                forecaster.batch_start(now)  # the next step starts now: its whole time is training
            self._advanced(now)
        except Exception as exc:  # noqa: BLE001
            self._fail("timing a step", exc)

    def _check_length(self) -> None:
        total = self.forecaster.schedule.total_batches
        if total is not None and self.forecaster.position >= total:
            unit = "batches" if self.unit == "batch" else "optimizer steps"
            self.warn_once("past-the-end", f"the loop goes on past the {total} {unit} the tracker was told of "
                                           "(epochs=, max_steps=); the ETA counts none of what follows")

    def _more_to_come(self) -> bool:
        total = self.forecaster.schedule.total_batches
        return total is None or self.forecaster.position < total

    @contextlib.contextmanager
    def phase(self, kind: str) -> Iterator[None]:
        """Time an evaluation (``"eval"``) or a checkpoint save (``"save"``) of the loop."""
        if kind not in ("eval", "save"):
            raise ValueError(f"tracker.phase({kind!r}): expected 'eval' or 'save'")
        if not self.active or self.closed or self._phase is not None:
            yield  # nested phases are timed as the outer one
            return
        self._phase = kind
        try:
            self._phase_start(kind, self.clock())
        except Exception as exc:  # noqa: BLE001
            self._fail(f"timing the {kind} phase", exc)
        try:
            yield
        finally:
            self._phase = None
            if self.active:
                try:
                    now = self.clock()
                    (self.forecaster.val_end if kind == "eval" else self.forecaster.save_end)(now)
                    if self.unit == "step" and self._started and self._more_to_come():
                        self.forecaster.batch_start(now)  # the next step starts after the phase
                    self.refresh(now, force=True)
                except Exception as exc:  # noqa: BLE001
                    self._fail(f"timing the {kind} phase", exc)

    def _phase_start(self, kind: str, now: float) -> None:
        if self._batch_open and self.unit == "batch":
            self._batch_ended()  # an evaluation or save inside the loop's body follows its batch
        schedule, forecaster = self.forecaster.schedule, self.forecaster
        told = self.shape is not None and (self.shape.eval_every if kind == "eval" else self.shape.save_every)
        if kind == "eval":
            if not schedule.val_after_batches and not told:
                self.warn_once("eval-unannounced", "an evaluation ran that the tracker was not told of; the ETA "
                                               "counts no later ones: pass eval_every= (steps or 'epoch')")
            forecaster.val_start(now)
        else:
            if not forecaster.saves and not told:
                self.warn_once("save-unannounced", "a checkpoint save ran that the tracker was not told of; the ETA "
                                               "counts no later ones: pass save_every= (steps or 'epoch')")
            forecaster.save_start(now)

    def save_started(self) -> None:
        """A checkpoint save has begun (the next event ends it); for hooks without an end."""
        if self.active and not self.closed and self._phase is None:
            try:
                self._phase_start("save", self.clock())
            except Exception as exc:  # noqa: BLE001
                self._fail("timing a save", exc)

    # ---------------------------------------------------------------------------------- the ETA
    def refresh(self, now: float | None = None, *, force: bool = False) -> None:
        """Recompute the ETA text when due (every ``refresh_s``, more often early in the run:
        :meth:`~ptp_callback.forecast.RunForecaster.refresh_due`) and show it in the bar."""
        if not self.active:
            return
        try:
            if not self.refresh_eta(now, force):
                return
            if self.follow_training_parameters(self.clock() if now is None else now):  # (a change inside an epoch)
                self.refresh_eta(force=True)
        except Exception as exc:  # noqa: BLE001 - never break the loop
            self._fail("computing the ETA", exc)
            return
        if self._bar is not None and self.eta_text:
            self._bar.set_postfix_str(f"eta={self.eta_text}", refresh=False)

    def remaining_s(self) -> float | None:
        """Seconds left in the run now (``None`` while unknown)."""
        if not self.active:
            return None
        try:
            return self.forecaster.remaining_s(self.clock())
        except Exception as exc:  # noqa: BLE001 - never break the loop
            self._fail("computing the ETA", exc)
            return None

    def postfix(self) -> dict[str, str]:
        """The ETA for your own tqdm bar: ``bar.set_postfix(loss=..., **tracker.postfix())``.

        ``{"eta": "04:12 bf16-mixed"}`` (recomputed when due: :meth:`refresh`); ``{}`` while unknown.
        """
        if self.active and not self.closed:
            self.refresh()
        return {"eta": self.eta_text} if self.eta_text else {}

    # ----------------------------------------------------------------------------------- the end
    def close(self) -> None:
        """The run is over: print each part's prediction beside what it measured (and the advice)."""
        if self.closed:
            return
        self.closed = True
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if not self.active:
            return
        try:
            if self._in_epoch is not None:
                self._end_epoch()
            forecaster = self.forecaster
            now = self.clock()
            forecaster.train_end(now)
            forecaster.fit_end(now)
            actual = forecaster.elapsed_s(now)  # a resumed run's earlier time included, as in its predictions
            other = self._other_device(self.inputs.run_device if self.inputs is not None else None)
            self.summary = report_line(forecaster.initial_parts, forecaster.parts(now), actual,
                                       forecaster.before_step_one_s if self.prediction is not None else None,
                                       noun="run", train_unit=self._unit_name(), stopped=forecaster.stopped_early,
                                       stopped_by=self._stopped_by, earlier_s=forecaster.elapsed_before_s,
                                       other_device=other)
            self._write(self.summary)
            if self.advise is True or self.advise and self._advice_cost_s() < 0.01 * actual:
                measured = None if other else forecaster.batches.mean_s()
                per_step = measured * (self.shape.accumulate if self.shape and self.unit == "batch" else 1) \
                    if measured else None
                self._advise(actual, per_step)
        except Exception as exc:  # noqa: BLE001
            self._fail("the end-of-run report", exc)

    def __enter__(self) -> RunTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            self._stopped_by = exc_type.__name__  # the report says what ended the run
        self.close()

    def _unit_name(self) -> str:
        """What the schedule counts: micro-batches, or the optimizer steps ``step()`` reports."""
        return "steps" if self.unit == "step" else "batches"

    # ------------------------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """What a resumed run starts from: the measured unit costs, the time spent and where the loop is."""
        forecaster = self.forecaster
        running = 1 if self._batch_open and self.unit == "batch" else 0  # saved in its body: it will be done
        epochs, in_epoch = self._epochs_done, (self._in_epoch or 0) + running
        if self._left_at is not None:  # saved after leaving an epoch early: the rest of it is still to run
            epochs, in_epoch = epochs - 1, self._left_at
        return {"forecaster": forecaster.state_dict(self.clock()), "position": forecaster.position + running,
                "epochs_done": epochs, "batch_in_epoch": in_epoch, "unit": self.unit}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved run: its measurements, and -- before the first batch -- its position."""
        try:
            if self.shape is not None and not self._started and "position" in state:
                start = self._resume_start(state)
                self._rebuild(start, str(state.get("unit", self.unit)))
            forecaster = self.forecaster
            forecaster.load_state_dict(state.get("forecaster", {}))
            if not self._started and forecaster.plan is not None:
                forecaster.set_plan(forecaster.plan, self.clock())  # the plan shown: what is left, as measured
        except Exception as exc:  # noqa: BLE001
            self._fail("restoring the tracker", exc)

    def _resume_start(self, state: dict[str, Any]) -> FitStart:
        assert self.shape is not None
        unit = str(state.get("unit", self.unit))
        per_epoch = self.shape.batches_per_epoch
        accumulate = self.shape.accumulate
        if unit == "step" and per_epoch is not None:
            per_epoch, accumulate = math.ceil(per_epoch / accumulate), 1
        position, epoch, in_epoch = int(state["position"]), int(state["epochs_done"]), int(state["batch_in_epoch"])
        if unit == "step" and per_epoch:
            epoch, in_epoch = divmod(position, per_epoch)  # step() sees no epochs: where the steps done lead
        elif per_epoch is not None and in_epoch >= per_epoch:
            epoch, in_epoch = epoch + 1, 0
        step = steps_at(position, batches_per_epoch=per_epoch, accumulate=accumulate)
        return FitStart(position=position, step=step, epoch=epoch, epochs_counted=epoch, batch_in_epoch=in_epoch)

    def _use_step_units(self) -> None:
        """``step()`` feeds optimizer steps: count the run in them."""
        self._rebuild(self.forecaster.schedule.start if self.shape is None else FitStart(), "step")

    def _rebuild(self, start: FitStart, unit: str) -> None:
        """A new forecaster for another start or unit, fed again the events seen so far."""
        if self.shape is None:
            self.unit = unit
            return
        schedule, saves = self.shape.schedule(start, unit)
        old, old_unit = self.forecaster, self.unit
        self.unit = unit
        forecaster = self._new_forecaster(schedule, saves)
        for name, value in self._early:
            getattr(forecaster, name)(value)
        plan = old.plan
        if plan is not None and unit == "step" and old_unit == "batch":
            plan = replace(plan, train_batch_s=plan.train_batch_s * self.shape.accumulate)  # a step's micro-batches
        self.forecaster = forecaster
        if self._watch is not None:
            self._watch.forecaster = forecaster
        if plan is not None:
            forecaster.set_plan(plan, self.clock())

    def _new_forecaster(self, schedule: FitSchedule, saves: tuple[int, ...]) -> RunForecaster:
        # A loader without len(): only iterate() sees where an epoch ends (step() sees no epochs).
        unsized = self.shape is not None and self.shape.batches_per_epoch is None and self.unit == "batch"
        return RunForecaster(schedule, saves=saves, warmup_batches=self.warmup_batches,
                             relayout=self._relayout if unsized else None)

    def _relayout(self, batches_per_epoch: int) -> tuple[FitSchedule, tuple[int, ...]]:
        """The run laid out again with epochs as long as the first whole one (a loader without
        ``len()``): its evaluations and saves every epoch or every ``n`` steps included."""
        assert self.shape is not None
        self.shape = replace(self.shape, batches_per_epoch=batches_per_epoch)
        return self.shape.schedule(self.forecaster.schedule.start, self.unit)


# --------------------------------------------------------------------------------------- helpers
def data_parallel_communication(model: torch.nn.Module, world_size: int) -> Callable[[Any, DeviceSpec], float]:
    """Seconds DDP's gradient all-reduce adds to an optimizer step on ``world_size`` GPUs
    (what outlasts the backward; nothing on a CPU, whose gloo all-reduce is measured instead)."""
    from .comm import ddp_exposed_seconds

    grad_bytes = sum(p.numel() * (4 if p.dtype == torch.float32 else p.element_size())
                     for p in model.parameters() if p.requires_grad)

    def seconds(step: Any, device: DeviceSpec) -> float:
        link = getattr(device, "interconnect_gbs", None)
        if world_size <= 1 or not link or device.arch == "cpu":
            return 0.0
        return ddp_exposed_seconds(grad_bytes, step.breakdown["phase"]["backward"], world_size=world_size,
                                   link_gbs=link)

    return seconds
