"""Pure formatters: durations, ETA strings and the prediction table. No state, no I/O."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .predict import StepPrediction


def format_duration(seconds: float | None) -> str:
    """``3725.2 -> "1h02m05s"``, ``65 -> "1m05s"``, ``4.25 -> "4.2s"``, ``0.0123 -> "12.3ms"``; ``None`` -> ``"?"``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f}ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f}us"
    if seconds < 60.0:
        return f"{seconds:.1f}s"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s"


def format_clock(seconds: float | None) -> str:
    """``3725 -> "1:02:05"`` (tqdm's style), ``None`` -> ``"?"``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def eta_text(remaining_s: float | None, precision: str) -> str:
    """What a progress bar shows as the ETA: ``"04:12 bf16-mixed"``; ``""`` while the remaining time is unknown."""
    return f"{format_clock(remaining_s)} {precision}".strip() if remaining_s is not None else ""


def format_prediction_table(pred: StepPrediction) -> str:
    """A short table: step time, bound, FLOPs, bytes, then seconds by phase and by op class."""
    lines = [
        f"predicted step {format_duration(pred.step_s)} on {pred.device_name} at {pred.precision} "
        f"({pred.bound}-bound: host {format_duration(pred.host_s)}, device {format_duration(pred.device_s)})",
        f"  {pred.flops / 1e12:.2f} TFLOP, {pred.bytes / 1e9:.2f} GB moved, {len(pred.ops)} ops, "
        f"traced in {pred.trace_s:.2f}s",
    ]
    for title, parts in (("phase", pred.breakdown["phase"]), ("class", pred.breakdown["class"])):
        shown = [(k, v) for k, v in parts.items() if v > 0.0005 * pred.step_s]
        lines.append(f"  by {title:5s}: " + ", ".join(
            f"{k} {format_duration(v)} ({100 * v / pred.step_s:.0f}%)" for k, v in shown))
    lines += [f"  note: {warning}" for warning in getattr(pred, "warnings", ())]
    return "\n".join(lines)
