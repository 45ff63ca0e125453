"""The two lines a fit logs: its plan before step one, and each part's prediction beside what it measured.

Pure formatting of :class:`~ptp_callback.forecast.Part` records (no state, no I/O).

>>> from ptp_callback.forecast import Part
>>> parts = {"train": Part("train", 0.0, 0, 120.0, 1000, 0.12, False),
...          "save": Part("save", 0.0, 0, 9.0, 3, 3.0, False)}
>>> plan_line(parts, 129.0, "bf16-mixed", "NVIDIA H100 80GB HBM3")
'predicted fit 2m09s at bf16-mixed on NVIDIA H100 80GB HBM3: train 2m00s (1000 batches), checkpoints 9.0s (3 saves)'
>>> plan_line({"train": Part("train", 0.0, 0, 0.1, 1, 0.1, False), "save": Part("save", 0.0, 0, 3.0, 1, 3.0, False)},
...           3.1, "32-true", "a CPU")
'predicted fit 3.1s at 32-true on a CPU: train 100.0ms (1 batch), checkpoints 3.0s (1 save)'
"""

from __future__ import annotations

from dataclasses import replace

from .display import format_duration
from .forecast import Part

# The parts in the order a fit spends them, with the words the log uses.
LABELS: dict[str, tuple[str, str]] = {
    "ptp": ("ptp", ""),
    "startup": ("start-up", ""),
    "sanity": ("sanity check", ""),
    "warmup": ("warm-up", ""),
    "train": ("train", "batches"),
    "val": ("validation", "runs"),
    "epoch": ("epoch starts", "epochs"),
    "save": ("checkpoints", "saves"),
    "end": ("end", ""),
}


def communication_note(world_size: int, device_arch: str) -> str:
    """What a plan line adds for a run of several processes predicted for a CPU: their gloo
    communication is not predicted (a GPU's all-reduce is).

    >>> communication_note(2, "cpu"), communication_note(2, "hopper"), communication_note(1, "cpu")
    ("; the 2 processes' communication on a CPU is not in it", '', '')
    """
    if world_size > 1 and device_arch == "cpu":
        return f"; the {world_size} processes' communication on a CPU is not in it"
    return ""


def _amount(kind: str, count: int | None, train_unit: str) -> str:
    """``" (3 saves)"``, ``" (1 save)"``; nothing for a part that is not counted."""
    unit = train_unit if kind == "train" else LABELS[kind][1]
    if count == 1:
        unit = unit.removesuffix("es") if unit.endswith("ches") else unit.removesuffix("s")
    return f" ({count} {unit})" if unit and count else ""


def plan_line(parts: dict[str, Part], total_s: float | None, precision: str, device: str, *,
              noun: str = "fit", train_unit: str = "batches", earlier_s: float = 0.0) -> str:
    """``predicted fit 3m12s at bf16-mixed on <device>: train ..., validation ..., checkpoints ...``
    (``noun``: what the loop calls a run: Lightning's "fit", a loop's "run"; ``train_unit``: what
    it counts, "batches" or, for a loop that reports its optimizer steps, "steps"; ``earlier_s``: a
    resumed run's time before it resumed, which the total holds: the first part)."""
    shown = _earlier(earlier_s)
    for kind, (label, _unit) in LABELS.items():
        part = parts.get(kind)
        if part is None:
            continue
        seconds = part.spent_s + part.left_s
        # Small counted parts still show (a user wants to see that the 3 saves were counted),
        # unless they round to nothing.
        if seconds < 0.001 or (seconds < 0.05 and not (LABELS[kind][1] and part.left_count)):
            continue
        shown.append(f"{label} {format_duration(seconds)}{_amount(kind, part.left_count, train_unit)}")
    if total_s is None:  # a train loader without len(): laid out once its first epoch has ended
        train = parts.get("train")
        if train is not None and train.unit_s:
            one = {"batches": "batch", "steps": "step"}.get(train_unit, train_unit)
            shown.insert(0, f"train {format_duration(train.unit_s)} a {one}")
        head = f"predicted {noun} of unknown length at {precision} on {device}"
    else:
        head = f"predicted {noun} {format_duration(total_s)} at {precision} on {device}"
    return head + (": " + ", ".join(shown) if shown else "")


def report_line(predicted: dict[str, Part], measured: dict[str, Part], actual_s: float,
                before_step_one_s: float | None, *, noun: str = "fit", train_unit: str = "batches",
                stopped: tuple[int, int] | None = None, stopped_by: str | None = None,
                earlier_s: float = 0.0, other_device: str | None = None) -> str:
    """``fit took 3m20s, predicted before step one 3m12s (-4.0%): train 2m45s (predicted 2m40s), ...``.

    ``other_device``: the device predicted for, when the run is on another one: its prediction is
    then stated, not set against what this run measured.

    ``stopped``: (batches run, batches scheduled) of a fit that ended early (``stopped_by``: the
    exception that ended it, if one did). Its prediction was for the whole schedule; each counted
    part (batches, validation runs, epochs, saves) is then set beside its prediction for the
    occurrences that ran, and so is the whole. ``earlier_s``: as :func:`plan_line`'s.
    """
    if stopped:
        predicted = {kind: _for_what_ran(part, measured.get(kind)) for kind, part in predicted.items()}
        ran, scheduled = stopped
        how = f"stopped by {stopped_by}" if stopped_by else "stopped early"
        head = f"{noun} {how} after {ran} of {scheduled} training {train_unit} and took {format_duration(actual_s)}"
        if before_step_one_s is not None and actual_s > 0:
            those = earlier_s + sum(part.spent_s + part.left_s for part in predicted.values())
            head += f"; predicted before step one{f' for {other_device}' if other_device else ''} " \
                    f"{format_duration(before_step_one_s)} for the whole schedule, {format_duration(those)} " \
                    "for what ran" + ("" if other_device else f" ({100.0 * (those / actual_s - 1.0):+.1f}%)")
    else:
        head = f"{noun} took {format_duration(actual_s)}"
        if other_device and before_step_one_s is not None:
            head += f" here; predicted before step one for {other_device}: {format_duration(before_step_one_s)} " \
                    "(each part's prediction is for it too, not for this run's device)"
        elif before_step_one_s is not None and actual_s > 0:
            head += f", predicted before step one {format_duration(before_step_one_s)} " \
                    f"({100.0 * (before_step_one_s / actual_s - 1.0):+.1f}%)"
    shown = _earlier(earlier_s)
    for kind, (label, _unit) in LABELS.items():
        done = measured.get(kind)
        planned = predicted.get(kind)
        spent = done.spent_s if done is not None else 0.0
        expected = planned.spent_s + planned.left_s if planned is not None else None
        if spent < 0.05 and (expected is None or expected < 0.05):
            continue
        text = f"{label} {format_duration(spent)}"
        if expected is not None and kind not in ("ptp", "startup"):
            # nothing foreseen (a loader without length, an unexpected save) is not "predicted 0us"
            text += f" (predicted {format_duration(expected)})" if expected > 0 else " (not predicted)"
        shown.append(text)
    return head + (": " + ", ".join(shown) if shown else "")


def _earlier(seconds: float) -> list[str]:
    """The part a resumed run spent before it resumed, so that the parts add up to the total."""
    return [f"earlier runs {format_duration(seconds)}"] if seconds >= 0.05 else []


def _for_what_ran(planned: Part, done: Part | None) -> Part:
    """A counted part's prediction for as many occurrences as ran (no more than it planned)."""
    if not LABELS[planned.kind][1] or not planned.left_count:
        return planned
    ran = min(planned.left_count, done.count if done is not None else 0)
    return replace(planned, left_s=planned.left_s * ran / planned.left_count, left_count=ran)
