"""Memory predictor accuracy on a recorded grid of real CPU trials (bench/data/predictor-grid.parquet).

For each completed trial of the grid, its peak is predicted from other trials of its family only:
  leave-one-out: from every other measured trial of the family;
  from 2 trials: from each pair of the family's other trials in turn (every pair, so no lucky choice),
                 and from the pair a sweep with oom.predict runs first (the family's extremes).
Errors, each as % of the measured peak and as % of the configuration-dependent part (the peak less
the family's smallest peak; reported as the mean absolute error over the mean dependent part, since a
single trial's part may be near zero): mean absolute error, worst absolute error, and the worst
under-prediction (measured above predicted: the error that lets a trial run out of memory).
Also how often the measured peak fell inside the predicted interval.

Usage:
  python -m bench predictor                     # evaluate the recorded grid
  python -m bench predictor --set record=true   # run bench/data/predictor-*.yaml's trials one at a time
                                             # (real trainers, minutes of CPU) and store their rows
                                             # as the recorded grid, then evaluate it
"""

from __future__ import annotations

import itertools
import time

import pyarrow as pa
import pyarrow.parquet as pq

from bench import DATA, Context, benchmark
from orchestrator.judging.memory import MemoryModel, family_label, informative_order, spec_of
from orchestrator.recording.sinks import TRIAL_SCHEMA, normalize_step, trial_row
from orchestrator.running.supervisor import run_trial
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan
from orchestrator.words.outcome import COMPLETED, peak_memory

GRID = DATA / "predictor-grid.parquet"


def record(ctx: Context) -> None:
    """Each planned trial of bench/data/predictor-*.yaml, one after another, under the supervisor and
    its memory sampler (as a sweep runs them, without Ray: a shared machine's load can keep Ray from
    starting); their trials.parquet rows become the recorded grid."""
    rows = []
    work = ctx.scratch
    for path in sorted(DATA.glob("predictor-*.yaml")):
        sweep = load_sweep(path)
        for spec in plan(sweep).trials:
            started = time.monotonic()
            result = run_trial(
                spec, trial_dir=work / spec.trial_key, guard=sweep.guard(), cpus=spec.num_threads
            )
            rows.append(trial_row(spec, result, [normalize_step(spec.trial_key, r) for r in result.steps]))
            peak, kind = peak_memory(rows[-1])
            print(f"{spec.trial_key}: {result.status}, {kind} {peak} GiB, {time.monotonic() - started:.0f} s")
    pq.write_table(pa.Table.from_pylist(rows, schema=TRIAL_SCHEMA), GRID)
    print(f"wrote {GRID}")


def errors(family_rows: list[dict], fit_on: list[list[int]], target: int) -> list[tuple[float, float]]:
    """(predicted, measured) of rows[target] from each set of row indices in fit_on."""
    measured = peak_memory(family_rows[target])[0]
    spec = spec_of(family_rows[target])
    return [(MemoryModel.fit([family_rows[i] for i in rows]).predict(spec), measured) for rows in fit_on]


def summary(pairs: list[tuple], smallest: float) -> dict[str, float]:
    """pairs: (Prediction, measured)."""
    abs_pct = [abs(p.peak_gib - m) / m * 100 for p, m in pairs]
    under_pct = [max(m - p.peak_gib, 0.0) / m * 100 for p, m in pairs]
    dependent = sum(m - smallest for _, m in pairs) / len(pairs)
    mean_abs = sum(abs(p.peak_gib - m) for p, m in pairs) / len(pairs)
    return {
        "n": len(pairs),
        "mean_pct": sum(abs_pct) / len(pairs),
        "worst_pct": max(abs_pct),
        "worst_under_pct": max(under_pct),
        "mean_dependent_pct": mean_abs / dependent * 100 if dependent > 0 else float("nan"),
        "inside_pct": sum(p.low_gib <= m <= p.high_gib for p, m in pairs) / len(pairs) * 100,
    }


def evaluate(rows: list[dict]) -> dict:
    families: dict[str, list[dict]] = {}
    for row in rows:
        if row["status"] == COMPLETED and peak_memory(row)[0] is not None:
            families.setdefault(family_label(spec_of(row)), []).append(row)
    header = "| family | measure | trials | fitted on | n | mean % peak | worst % peak | worst under % peak "
    print(header + "| mean % dependent part | inside interval % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    metrics = {}
    for label, family in families.items():
        peaks = [peak_memory(r)[0] for r in family]
        smallest = min(peaks)
        model = MemoryModel.fit(family)
        n = len(family)
        loo, pairs, extremes = [], [], []
        first_two = informative_order([spec_of(r) for r in family], MemoryModel.fit([], model.measure))[:2]
        first_two = [
            next(i for i, r in enumerate(family) if r["trial_key"] == s.trial_key) for s in first_two
        ]
        for target in range(n):
            others = [i for i in range(n) if i != target]
            loo += errors(family, [others], target)
            pairs += errors(family, [list(p) for p in itertools.combinations(others, 2)], target)
            if target not in first_two:
                extremes += errors(family, [first_two], target)
        for name, found in (("all others (LOO)", loo), ("any 2", pairs), ("the 2 extremes", extremes)):
            s = summary(found, smallest)
            print(
                f"| {label} | {model.measure} | {n} | {name} | {s['n']} | {s['mean_pct']:.2f} | "
                f"{s['worst_pct']:.2f} | {s['worst_under_pct']:.2f} | {s['mean_dependent_pct']:.1f} | "
                f"{s['inside_pct']:.0f} |"
            )
            if name == "all others (LOO)":
                metrics[f"{label} loo_mean_pct"] = s["mean_pct"]
                metrics[f"{label} loo_inside_pct"] = s["inside_pct"]
        print(f"  peaks {smallest:.3f}-{max(peaks):.3f} GiB; fit on all: " + ", ".join(
            f"{k} {v:.2f}" for k, v in model.families()[0].coefficients.items()
        ))  # fmt: skip
    return metrics


@benchmark(tags=("memory",), needs="data", params={"record": False}, smoke={})
def predictor(ctx: Context) -> dict:
    """The memory predictor on a recorded grid of CPU trials: each peak predicted from its family's others."""
    if ctx.args.record:
        record(ctx)
    return evaluate(pq.read_table(GRID).to_pylist())
