"""Accuracy of the step-time predictions against the measured H100 steps of ``data/steps.jsonl``.

usage: python benchmarks/accuracy.py [--only a,b] [--markdown] [--no-cv]

Every measured workload (13, rebuilt on the meta device from ``data/workloads.py``) at each
measured precision, predicted for ``h100-sxm`` from its trace on the CPU proxy. Three figures:

* in-sample: the shipped coefficients (``ptp_callback.coefficients.HOPPER``). Their per-op
  values were fitted on ``ops.jsonl`` only; the few per-step constants of
  ``fit_coefficients.STEP_PARAMS`` (loop host time, host speed, kernel floor, launch latency)
  on all 13 workloads' steps.
* leave-one-workload-out: for each workload, those per-step constants refitted from their
  starting values on the other twelve only, then the workload predicted.
* leave-one-family-out: the same with a whole family held out (convnets; vision transformers
  and hybrids; encoder LMs; decoder LMs; recurrent; MLPs, ``h100_data.FAMILIES``).

The per-op coefficients never see a workload step, so they need no refit per fold; refit them
from scratch with ``python benchmarks/fit_coefficients.py``. For each, per precision: MAPE;
per workload: MAPE; the speed-ratio score (each precision's speed-up over 32-true predicted
within 10% of the measured speed-up), whether the fastest precision is predicted right and how
much slower than the fastest the precision predicted fastest measured (where two precisions run
the same kernels, as 32-true and 32-tf32 do for a convnet's convolutions, their measured order is
noise), also among the runs that train: the recorded 16-true runs used AdamW's default eps, which is 0 in
float16, so their weights were inf/NaN from the first step (``Trace.hazards``).
Traces are cached in ``.ptp_cache/`` (``step_data.py``): the first run traces all 78
configurations (several minutes), later ones take seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fit_coefficients import StepTimeline, fit_steps  # noqa: E402
from h100_data import FAMILIES, PRECISIONS, family_of  # noqa: E402

from ptp_callback.coefficients import HOPPER, CostCoefficients  # noqa: E402


@dataclass(frozen=True)
class Row:
    workload: str
    precision: str
    measured_s: float
    predicted_s: float
    # False where the recorded run could not train (its optimizer divides by zero in its precision:
    # ``Trace.hazards``), so it was timed on inf/NaN weights.
    trains: bool = True

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def mape(errors: list[float]) -> float:
    return 100.0 * sum(abs(e) for e in errors) / len(errors) if errors else float("nan")


def predict(timelines: list[StepTimeline], coef: CostCoefficients) -> list[Row]:
    return [Row(t.case.workload, t.case.precision, t.case.measured_s, t.step_s(coef), not t.case.trace.hazards)
            for t in timelines]


def held_out(timelines: list[StepTimeline], groups: dict[str, set[str]]) -> list[Row]:
    """Each group predicted by per-step constants refitted without it (from their start values)."""
    rows = []
    for _name, members in groups.items():
        train = [t for t in timelines if t.case.workload not in members]
        coef = fit_steps(train, HOPPER)
        rows += predict([t for t in timelines if t.case.workload in members], coef)
    return rows


def speed_ratio_score(rows: list[Row]) -> tuple[int, int]:
    """(pairs within 10%, pairs): each precision's speed-up over 32-true, predicted vs measured."""
    base = {r.workload: r for r in rows if r.precision == "32-true"}
    hits = total = 0
    for r in rows:
        b = base.get(r.workload)
        if b is None or r.precision == "32-true":
            continue
        measured = b.measured_s / r.measured_s
        predicted = b.predicted_s / r.predicted_s
        total += 1
        hits += abs(predicted / measured - 1.0) <= 0.10
    return hits, total


def by_workload(rows: list[Row]) -> dict[str, list[Row]]:
    grouped: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        grouped[r.workload].append(r)
    return grouped


def fastest_right(rows: list[Row]) -> tuple[int, int, list[str]]:
    workloads = by_workload(rows)
    misses = []
    for name, rs in workloads.items():
        measured = min(rs, key=lambda r: r.measured_s).precision
        predicted = min(rs, key=lambda r: r.predicted_s).precision
        if measured != predicted:
            misses.append(f"{name} (measured {measured}, predicted {predicted})")
    return len(workloads) - len(misses), len(workloads), misses


def fastest_regret(rows: list[Row]) -> list[float]:
    """Per workload, how much longer than the fastest measured precision the one predicted fastest
    measured: what following the prediction costs (0 where it is the fastest)."""
    return [min(rs, key=lambda r: r.predicted_s).measured_s / min(r.measured_s for r in rs) - 1.0
            for rs in by_workload(rows).values()]


def summary(title: str, rows: list[Row]) -> list[str]:
    lines = [f"{title}: MAPE {mape([r.error for r in rows]):.1f}% over {len(rows)} configurations"]
    per_precision = defaultdict(list)
    per_workload = defaultdict(list)
    for r in rows:
        per_precision[r.precision].append(r.error)
        per_workload[r.workload].append(r.error)
    lines.append("  per precision: " + ", ".join(f"{p} {mape(per_precision[p]):.1f}%" for p in PRECISIONS
                                                 if p in per_precision))
    worst = max(per_workload, key=lambda w: mape(per_workload[w]))
    lines.append("  per workload: " + ", ".join(f"{w} {mape(e):.1f}%" for w, e in per_workload.items()))
    lines.append(f"  worst workload: {worst} {mape(per_workload[worst]):.1f}%; max single error "
                 f"{100 * max(abs(r.error) for r in rows):.1f}%")
    per_family = defaultdict(list)
    for r in rows:
        per_family[family_of(r.workload)].append(r.error)
    lines.append("  per family: " + ", ".join(f"{f} {mape(e):.1f}%" for f, e in per_family.items()))
    hits, total = speed_ratio_score(rows)
    right, workloads, misses = fastest_right(rows)
    lines.append(f"  speed-up over 32-true within 10% of measured: {hits}/{total} pairs ({100 * hits / max(1, total):.0f}%)")
    lines.append(f"  fastest precision right: {right}/{workloads}" + (f"; missed: {'; '.join(misses)}" if misses else ""))
    regret = sorted(fastest_regret(rows))
    lines.append(f"  the precision predicted fastest measured {100 * regret[len(regret) // 2]:.1f}% (median) and at "
                 f"most {100 * regret[-1]:.1f}% slower than the fastest measured")
    untrained = sorted({r.precision for r in rows if not r.trains}, key=PRECISIONS.index)
    if untrained:
        training = [r for r in rows if r.trains]
        hits, total = speed_ratio_score(training)
        right, workloads, misses = fastest_right(training)
        lines.append(f"  among the runs that train ({', '.join(untrained)} left out: the recorded runs' optimizer "
                     f"divides by zero there, so they were timed on inf/NaN weights): speed-up within 10% "
                     f"{hits}/{total} pairs ({100 * hits / max(1, total):.0f}%), fastest precision right "
                     f"{right}/{workloads}" + (f"; missed: {'; '.join(misses)}" if misses else ""))
    return lines


def table(rows: list[Row], markdown: bool) -> list[str]:
    precisions = [p for p in PRECISIONS if any(r.precision == p for r in rows)]
    cells: dict[str, dict[str, str]] = defaultdict(dict)
    for r in rows:
        cells[r.workload][r.precision] = f"{r.measured_s * 1e3:.1f} / {r.predicted_s * 1e3:.1f} ({100 * r.error:+.0f}%)"
    if markdown:
        lines = ["| workload | " + " | ".join(precisions) + " |", "|---|" + "---|" * len(precisions)]
        lines += [f"| {w} | " + " | ".join(c.get(p, "") for p in precisions) + " |" for w, c in cells.items()]
    else:
        lines = [f"{'workload':26s} " + " ".join(f"{p:>24s}" for p in precisions)]
        lines += [f"{w:26s} " + " ".join(f"{c.get(p, ''):>24s}" for p in precisions) for w, c in cells.items()]
    return lines + ["cells: measured ms / predicted ms (error)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--no-cv", action="store_true", help="in-sample figures only")
    args = parser.parse_args()
    import step_data

    started = time.perf_counter()
    cases = step_data.load_cases(set(args.only.split(",")) if args.only else None)
    timelines = [StepTimeline(c, HOPPER) for c in cases]
    for timeline in timelines:
        timeline.check(HOPPER)
    print(f"ptp_callback step-time accuracy vs data/steps.jsonl (NVIDIA H100 SXM, PyTorch 2.11), predicting h100-sxm; "
          f"{time.strftime('%Y-%m-%d')}; {len(cases)} configurations ({time.perf_counter() - started:.0f}s to load)")
    in_sample = predict(timelines, HOPPER)
    print("\nIn-sample (shipped coefficients):")
    print("\n".join(table(in_sample, args.markdown)))
    print("\n".join(summary("in-sample", in_sample)))
    if args.no_cv:
        return
    workloads = sorted({t.case.workload for t in timelines})
    lowo = held_out(timelines, {w: {w} for w in workloads})
    print("\nLeave-one-workload-out (per-step constants refitted without the workload):")
    print("\n".join(table(lowo, args.markdown)))
    print("\n".join(summary("leave-one-workload-out", lowo)))
    families = {f: set(m) & set(workloads) for f, m in FAMILIES.items() if set(m) & set(workloads)}
    lofo = held_out(timelines, families)
    print("\nLeave-one-family-out (per-step constants refitted without the family):")
    print("\n".join(summary("leave-one-family-out", lofo)))
    print(f"\n({time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    main()
