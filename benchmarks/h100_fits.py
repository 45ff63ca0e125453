"""Whole-fit predictions against the measured Lightning fits of ../shared/h100/fits.jsonl.

usage: python benchmarks/h100_fits.py

Each fit of ``fits.jsonl`` (``../shared/bench/lightning_e2e.py``: one epoch of ``max_steps`` x
accumulation batches, validation every ``val_check_interval`` batches on ``limit_val_batches``,
a 2-batch sanity check) is predicted as the callback predicts it before step one -- the training
and validation steps traced for ``h100-sxm``, the schedule built with Lightning's rules, the
measured warm-up and teardown allowances -- on this CPU machine, and compared with the measured
time from ``on_fit_start`` to ``on_fit_end``, part by part (sanity check, training, validation).

The warm-up and teardown allowances were read off these same fits (``ptp_callback/eta.py``), and
the step coefficients fitted on the same workloads' step times: an in-sample check of the
whole-fit arithmetic, not of generalization.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h100_data import build_on_meta, shared_path, quiet_transformers  # noqa: E402

from ptp_callback.display import format_duration  # noqa: E402
from ptp_callback.eta import plan_fit, predict_fit  # noqa: E402
from ptp_callback.precision import PrecisionSpec  # noqa: E402
from ptp_callback.schedule import build_schedule  # noqa: E402
from ptp_callback.step import resolve_device  # noqa: E402
from ptp_callback.predict import simulate  # noqa: E402
from ptp_callback.tracer import trace_step  # noqa: E402


def measured_parts(events: list) -> dict[str, float]:
    t = {}
    for name, at in events:
        t.setdefault(name, []).append(at)
    batches = t["b"]
    val = sum(e - s for s, e in zip(t.get("val_start", []), t.get("val_end", [])))
    return {"total": t["fit_end"][-1], "sanity": t["sanity_end"][0] - t["sanity_start"][0],
            "train": batches[-1] - t["train_start"][0] - val, "val": val}


def gather_rows() -> list[dict]:
    spec, coef = resolve_device("h100-sxm")
    rows = []
    with open(shared_path("h100", "fits.jsonl")) as f:
        fits = [json.loads(line) for line in f]
    for fit in fits:
        model, batch, loss_fn = build_on_meta(fit["workload"])
        precision = PrecisionSpec.from_setting(fit["precision"], matmul_tf32=False)
        accumulate = fit.get("accumulate_grad_batches", 1)
        step = simulate(trace_step(model, batch, loss_fn, None, precision), spec, coef)
        val = simulate(trace_step(model, batch, loss_fn, None, precision, train=False), spec, coef)
        schedule = build_schedule(batches_per_epoch=fit["max_steps"] * accumulate, accumulate=accumulate,
                                  max_epochs=None, max_steps=fit["max_steps"],
                                  val_check_batch=fit["val_check_interval"], check_val_every_n_epoch=1,
                                  val_batches_per_run=fit["limit_val_batches"], sanity_batches=2)
        plan = plan_fit(step, val, on_gpu=True, autocast=precision.autocast_dtype is not None, sanity=True)
        predicted = predict_fit(schedule, plan)
        rows.append({"fit": f"{fit['workload']} {fit['precision']}", "measured": measured_parts(fit["events"]),
                     "predicted": {"total": predicted.total_s, "sanity": predicted.sanity_s,
                                   "train": predicted.train_s, "val": predicted.val_s}})
    return rows


def render(rows: list[dict]) -> str:
    lines = [f"{'fit':34s} {'measured':>9s} {'predicted':>9s} {'error':>7s}   parts measured/predicted: "
             "sanity, train, validation"]
    errors = []
    for r in rows:
        m, p = r["measured"], r["predicted"]
        error = p["total"] / m["total"] - 1.0
        errors.append(abs(error))
        parts = ", ".join(f"{format_duration(m[k])}/{format_duration(p[k])}" for k in ("sanity", "train", "val"))
        lines.append(f"{r['fit']:34s} {m['total']:8.1f}s {p['total']:8.1f}s {100 * error:+6.1f}%   {parts}")
    lines.append(f"mean |error| {100 * sum(errors) / len(errors):.1f}% over {len(errors)} fits")
    return "\n".join(lines)


def main() -> None:
    quiet_transformers()
    print(f"whole-fit prediction vs ../shared/h100/fits.jsonl (h100-sxm), {time.strftime('%Y-%m-%d')}")
    print(render(gather_rows()))


if __name__ == "__main__":
    main()
