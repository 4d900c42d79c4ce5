"""cpu-smoke's memory predictions against its measured peaks, under a budget that everything fits.

Runs `rlsweep run sweeps/cpu-smoke.yaml --set memory.budget_gib=4 --set oom.predict=true --set
resources.max_concurrent=1` (one trial at a time: every prediction is made from the trials finished
before it; about 3 minutes on 2 cores), or reads a finished run's trials.parquet (`--from DIR`), and
prints, per trial:
  recorded   the prediction its row keeps (made before it ran, from the trials measured then, by
             the code that ran the sweep);
  from one   each family's K=48 trial predicted by this code from its K=24 trial alone (what the live
             frontier search predicts: it measures K=24 first);
  from two   each family's K=48 trial predicted from its K=2 and K=24 trials alone (the two a
             smallest-first order measures before it): a fit on two points extrapolated to twice the
             larger K, where the prior's slope matters most.
Errors are (predicted - measured) / measured, of the RSS peak (a CPU run); goal: within 10%.

Usage:
  python -m bench cpu_smoke_predict                     # run the sweep into a scratch folder
  python -m bench cpu_smoke_predict --set source=DIR    # a finished run's folder
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from bench import Context, benchmark
from orchestrator.judging.memory import MemoryModel, spec_of
from orchestrator.words.outcome import RSS

SETTINGS = ["memory.budget_gib=4", "oom.predict=true", "resources.max_concurrent=1"]


def run(ctx: Context, out: Path) -> None:
    sets = [arg for setting in SETTINGS for arg in ("--set", setting)]
    ctx.rlsweep(
        "run",
        "sweeps/cpu-smoke.yaml",
        *sets,
        "--output-dir",
        str(out),
        "--no-report",
        check=True,
        quiet=False,
    )


def family(row: dict) -> str:
    return row["trial_key"].rsplit("-k", 1)[0]


@benchmark(
    tags=("memory", "sweep"),
    needs="cpu",
    params={"source": ""},
    goals={"recorded_worst_abs_error": "<= 0.10"},
)
def cpu_smoke_predict(ctx: Context) -> dict:
    args = ctx.args
    source = Path(args.source) if args.source else ctx.scratch
    if not args.source:
        run(ctx, source)
    rows = pq.read_table(source / "trials.parquet").to_pylist()
    print(f"{'trial':40} {'measured':>8} {'recorded (from n)':>26} {'error':>7}")
    recorded = []
    for row in sorted(rows, key=lambda r: (family(r), r["num_generations"])):
        peak, predicted = row["peak_rss_gib"], row["predicted_peak_gib"]
        if peak is None or predicted is None:
            continue
        error = (predicted - peak) / peak
        recorded.append(error)
        shown = f"{predicted:.3f} ({row['predicted_low_gib']:.3f}-{row['predicted_high_gib']:.3f}) n={row['predicted_from_trials']}"
        print(f"{row['trial_key']:40} {peak:8.3f} {shown:>26} {error:+7.1%}")
    print(
        f"recorded: mean abs {sum(map(abs, recorded)) / len(recorded):.1%}, worst {max(map(abs, recorded)):.1%}"
    )
    metrics = {
        "recorded_mean_abs_error": sum(map(abs, recorded)) / len(recorded),
        "recorded_worst_abs_error": max(map(abs, recorded)),
    }
    for title, measured_k in (("one", (24,)), ("two", (2, 24))):
        metrics[f"from_{title}_worst_abs_error"] = from_k(rows, title, measured_k)
    return metrics


def from_k(rows: list[dict], title: str, measured_k: tuple[int, ...]) -> float | None:
    """Each family's K=48 trial predicted, with this code, from its trials at measured_k alone."""
    heading = f"K=48 from its K={' and K='.join(map(str, measured_k))}"
    print(f"\n{heading:40} {'measured':>8} {'predicted (interval)':>26} {'error':>7}")
    errors = []
    for name in sorted({family(r) for r in rows}):
        by_k = {r["num_generations"]: r for r in rows if family(r) == name and r["peak_rss_gib"] is not None}
        if not {*measured_k, 48} <= set(by_k):
            continue
        p = MemoryModel.fit([by_k[k] for k in measured_k], RSS).predict(spec_of(by_k[48]))
        peak = by_k[48]["peak_rss_gib"]
        error = (p.peak_gib - peak) / peak
        errors.append(error)
        print(f"{name:40} {peak:8.3f} {p.describe().removeprefix('predicted '):>26} {error:+7.1%}")
    if errors:
        print(
            f"from {title}: mean abs {sum(map(abs, errors)) / len(errors):.1%}, worst {max(map(abs, errors)):.1%}"
        )
    return max(map(abs, errors)) if errors else None
