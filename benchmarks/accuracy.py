"""Accuracy of ``predict_step`` against the measured H100 step times in ../shared/h100.

usage: python benchmarks/accuracy.py [--only a,b] [--markdown]

Rebuilds every workload of ../shared/bench/workloads.py that was measured in
../shared/h100/steps.jsonl (on the meta device: nothing is allocated), predicts each at each
measured precision for ``h100-sxm`` on this (CPU) machine, and prints: measured ms, predicted
ms and error per configuration; MAPE overall and per precision; the precision-blind baseline
(every precision predicted with the measured 32-true time); whether the predicted fastest
precision is the measured fastest; and the trace time per workload.

The coefficients were fitted on these same measurements (``benchmarks/fit_coefficients.py``,
which also reports a leave-one-workload-out error): the MAPE here is an in-sample figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h100_data import PRECISIONS, build_on_meta, load_measured, quiet_transformers  # noqa: E402

import ptp_callback as ptp  # noqa: E402


def gather_rows(only: set[str] | None = None) -> tuple[list[dict], dict[str, list[float]]]:
    """One row per measured configuration, and the trace times per workload."""
    measured = load_measured()
    names = list(dict.fromkeys(w for w, _p in measured))
    rows, trace_times = [], defaultdict(list)
    for name in names:
        if only and name not in only:
            continue
        model, batch, loss_fn = build_on_meta(name)
        for precision in PRECISIONS:
            m = measured.get((name, precision))
            if m is None:
                continue
            started = time.perf_counter()
            pred = ptp.predict_step(model, batch, loss_fn, None, precision, "h100-sxm")
            wall = time.perf_counter() - started
            trace_times[name].append(pred.trace_s)
            rows.append({
                "workload": name, "precision": precision, "measured_s": m.step_s, "predicted_s": pred.step_s,
                "error": pred.step_s / m.step_s - 1.0, "bound": pred.bound, "wall_s": wall,
                "blind_s": measured[(name, "32-true")].step_s if (name, "32-true") in measured else None,
            })
    return rows, trace_times


def mape(errors: list[float]) -> float:
    return 100.0 * sum(abs(e) for e in errors) / len(errors) if errors else float("nan")


def render(rows: list[dict], trace_times: dict[str, list[float]], markdown: bool) -> str:
    lines = []
    if markdown:
        # One row per workload: "measured -> predicted ms (error)" per precision.
        precisions = list(dict.fromkeys(r["precision"] for r in rows))
        lines += ["| workload | " + " | ".join(precisions) + " |", "|---|" + "---|" * len(precisions)]
        cells: dict[str, dict[str, str]] = defaultdict(dict)
        for r in rows:
            cells[r["workload"]][r["precision"]] = (
                f"{r['measured_s'] * 1e3:.1f} / {r['predicted_s'] * 1e3:.1f} ({100 * r['error']:+.0f}%)")
        for name, by_precision in cells.items():
            lines.append(f"| {name} | " + " | ".join(by_precision.get(p, "") for p in precisions) + " |")
        lines.append("")
        lines.append("cells: measured ms / predicted ms (error)")
    else:
        lines.append(f"{'workload':26s}  {'precision':10s}  {'measured ms':>11s}  {'predicted ms':>12s}  {'error %':>8s}")
        for r in rows:
            lines.append(f"{r['workload']:26s}  {r['precision']:10s}  {r['measured_s'] * 1e3:11.2f}  "
                         f"{r['predicted_s'] * 1e3:12.2f}  {100 * r['error']:+8.1f}")
    lines.append("")
    lines.append(f"MAPE overall: {mape([r['error'] for r in rows]):.1f}% over {len(rows)} configurations")
    per_precision = defaultdict(list)
    for r in rows:
        per_precision[r["precision"]].append(r["error"])
    lines.append("MAPE per precision: " + ", ".join(f"{p} {mape(e):.1f}%" for p, e in per_precision.items()))
    blind = [r["blind_s"] / r["measured_s"] - 1.0 for r in rows if r["blind_s"]]
    lines.append(f"precision-blind baseline (each precision predicted with its 32-true time): MAPE {mape(blind):.1f}%")
    by_workload = defaultdict(list)
    for r in rows:
        by_workload[r["workload"]].append(r)
    hits = 0
    for name, rs in by_workload.items():
        fastest_measured = min(rs, key=lambda r: r["measured_s"])["precision"]
        fastest_predicted = min(rs, key=lambda r: r["predicted_s"])["precision"]
        hits += fastest_measured == fastest_predicted
        lines.append(f"  {name:26s} fastest measured {fastest_measured:10s} predicted {fastest_predicted:10s} "
                     f"{'ok' if fastest_measured == fastest_predicted else 'MISS'}   trace "
                     f"{statistics.median(trace_times[name]):.2f}s (max {max(trace_times[name]):.2f}s)")
    lines.append(f"fastest precision predicted right for {hits}/{len(by_workload)} workloads")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (for README)")
    args = parser.parse_args()
    quiet_transformers()
    rows, trace_times = gather_rows(set(args.only.split(",")) if args.only else None)
    print(f"ptp_callback accuracy on ../shared/h100 (device h100-sxm), {time.strftime('%Y-%m-%d')}")
    print(render(rows, trace_times, args.markdown))


if __name__ == "__main__":
    main()
