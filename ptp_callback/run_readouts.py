"""What an adapter shows and reports, read off its :class:`~ptp_callback.forecast.RunForecaster`.

The bar's ETA text (recomputed when due, not on every batch) and the fit as predicted before step
one, for the fit-end report and for scripts that compare it with the real run. Shared by the
Lightning callback and :class:`~ptp_callback.tracker.RunTracker`, which set ``forecaster``,
``prediction``, ``clock``, ``refresh_s`` and ``precision_label``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .device_names import is_run_device
from .display import eta_text
from .run_prediction import advice_cost_s

if TYPE_CHECKING:
    import torch

    from .forecast import RunForecaster
    from .run_prediction import RunPrediction


class RunReadouts:
    """The ETA text and the predicted fit of an adapter that holds a forecaster."""

    forecaster: RunForecaster | None
    prediction: RunPrediction | None
    clock: Callable[[], float]
    refresh_s: float
    precision_label: str
    eta_text = ""
    last_remaining_s: float | None = None
    calibrated_total_s: float | None = None  # the whole fit once ten batches were measured
    _last_refresh = -math.inf

    def refresh_eta(self, now: float | None = None, force: bool = False) -> bool:
        """Recompute the ETA text when due (every ``refresh_s``, more often early in the fit:
        :meth:`~ptp_callback.forecast.RunForecaster.refresh_due`); ``True`` when it was."""
        now = self.clock() if now is None else now
        forecaster = self.forecaster
        if forecaster is None or not force and not forecaster.refresh_due(now, self._last_refresh, self.refresh_s):
            return False
        self._last_refresh = now
        remaining = self.last_remaining_s = forecaster.remaining_s(now)
        self.eta_text = eta_text(remaining, self.precision_label)
        if self.calibrated_total_s is None and remaining is not None and forecaster.batches.samples >= 10:
            self.calibrated_total_s = forecaster.total_s(now)
        return True

    def _other_device(self, run: torch.device | None) -> str | None:
        """The name of the device predicted for when the run is on another one (``None`` when it is on
        it, or nothing was predicted): its speed then says nothing of the one predicted for, and its
        prediction is stated at the end instead of being set against the run's time."""
        if self.prediction is None or run is None or is_run_device(self.prediction.device, run):
            return None
        return self.prediction.device.name

    def _advice_cost_s(self) -> float:
        """Seconds predicting the other precisions would take (``inf`` before the run is predicted)."""
        return advice_cost_s(self.prediction) if self.prediction is not None else math.inf

    @property
    def predicted_fit_s(self) -> float | None:
        """The whole fit as predicted before step one (at fit start until the first batch starts)."""
        f = self.forecaster
        return None if f is None else (f.before_step_one_s if f.before_step_one_s is not None else f.predicted_total_s)

    @property
    def initial_fit_s(self) -> float | None:
        """The whole fit as predicted at fit start, before the sanity check."""
        return None if self.forecaster is None else self.forecaster.predicted_total_s

    @property
    def step_prediction(self) -> Any:
        """The predicted training step (:class:`~ptp_callback.predict.StepPrediction`), once predicted."""
        return None if self.prediction is None else self.prediction.step

    @property
    def plan(self) -> Any:
        """The run's predicted parts per unit (:class:`~ptp_callback.run_plan.RunPlan`), once predicted."""
        return None if self.prediction is None else self.prediction.plan

    @property
    def fit_prediction(self) -> Any:
        """Each part of the fit as predicted when the plan was set (``RunForecaster.initial_parts``)."""
        return None if self.forecaster is None else self.forecaster.initial_parts
