"""Frontier search against probing every configuration: trainer-seconds to a complete memory verdict.

Runs one budgeted sweep twice with `rlsweep run`, memory phase only (fresh output dirs, no MLflow):
    probe all:  --set oom.frontier=false --set oom.prune_dominated=false   (every configuration probed)
    frontier:   --set oom.frontier=true  --set oom.prune_dominated=true    (implied fits, pruned ooms,
                bisection order: orchestrator/judging/frontier.py)
and prints, for each, the statuses, the probed trials (a trainer started), the trainer-seconds (the sum of
the trials' wall_s: trainer start to exit, imports and model load included) and the sweep's wall time;
then whether the memory verdicts per trial are identical (fits: completed or implied; oom: oom or
pruned), the ratio frontier / probe all (target <= 0.35), the same ratio with the frontier's probes
timed in the probe-all run (robust to the load of other work changing between the runs), and that every
implied row names its implying trial, holds a prediction and nulls for what was not measured.

Usage: python -m bench frontier [--set sweep=SWEEP.yaml] [--set overrides=k=v ...]
Default: sweeps/frontier-tiny.yaml (50 configurations: K 2-32 x B 1-16 x completion 16/128 on `tiny`,
budget 0.775 GiB). Misses its goals (exit 1) when the verdicts differ or an implied row is malformed; a differing trial is
printed with both runs' readings (a configuration whose peak sits within run-to-run noise of the budget
gets either verdict by chance, however it is probed).
"""

from __future__ import annotations

from collections import Counter

from bench import Context, benchmark
from orchestrator.words.outcome import COMPLETED, IMPLIED, OOM, PRUNED

DEFAULTS = ["tracking.enabled=false", "phases=[memory]"]
PROBE_ALL = ["oom.frontier=false", "oom.prune_dominated=false"]
FRONTIER = ["oom.frontier=true", "oom.prune_dominated=true"]
VERDICT = {COMPLETED: "fits", IMPLIED: "fits", OOM: "oom", PRUNED: "oom"}
NOT_MEASURED = ("wall_s", "peak_rss_gib", "peak_device_gib", "trainer_s", "steps_completed", "median_step_s")


def implied_row_problems(rows: list[dict]) -> list[str]:
    """What is wrong with the implied rows: each names a measured fit, holds a prediction, and has null
    (never 0) for what a probe measures."""
    by_key = {r["trial_key"]: r for r in rows}
    problems = []
    for r in rows:
        if r["status"] != IMPLIED:
            continue
        source = by_key.get(r["implied_by"] or "")
        if source is None or source["status"] != COMPLETED:
            problems.append(f"{r['trial_key']}: implied_by {r['implied_by']!r} is not a measured fit")
        if r["predicted_peak_gib"] is None:
            problems.append(f"{r['trial_key']}: no predicted peak")
        problems += [f"{r['trial_key']}: {c} = {r[c]!r}" for c in NOT_MEASURED if r[c] is not None]
    return problems


@benchmark(
    tags=("sweep", "memory"),
    params={"sweep": "sweeps/frontier-tiny.yaml", "overrides": []},
    goals={"verdicts_identical": "== true", "implied_rows_well_formed": "== true", "ratio": "<= 0.35"},
    # no smoke size: 8 of the 50 configurations (--set overrides=grid.num_generations=[2,32] --set
    # overrides=grid.batch_size=[1,16]) took 3 minutes on 2 loaded cores
)
def frontier(ctx: Context) -> dict:
    """Frontier search against probing every configuration: trainer-seconds to a complete memory verdict."""
    sweep_file = ctx.args.sweep
    overrides = DEFAULTS + ctx.args.overrides
    work = ctx.scratch
    runs = {
        "probe all": ctx.sweep(sweep_file, overrides + PROBE_ALL, work / "probe-all", silent=True),
        "frontier": ctx.sweep(sweep_file, overrides + FRONTIER, work / "frontier", silent=True),
    }
    seconds, verdicts = {}, {}
    for name, (wall, rows) in runs.items():
        seconds[name] = sum(r["wall_s"] or 0.0 for r in rows)
        verdicts[name] = {r["trial_key"]: VERDICT.get(r["status"], r["status"]) for r in rows}
        probed = sum(r["wall_s"] is not None for r in rows)
        statuses = dict(sorted(Counter(r["status"] for r in rows).items()))
        print(
            f"{name:10s} trials {len(rows)}, probed {probed}, trainer-seconds {seconds[name]:7.1f}, "
            f"sweep wall {wall:6.1f} s, statuses {statuses}"
        )
    every, frontier = runs["probe all"][1], runs["frontier"][1]
    peaks = {r["trial_key"]: r["peak_rss_gib"] for r in every}
    print("per trial (probe all: status, RSS peak | frontier: status, implied_by or probed peak):")
    for r in sorted(
        frontier, key=lambda r: (r["num_generations"], r["batch_size"], r["max_completion_length"])
    ):
        key = r["trial_key"]
        other = next(x for x in every if x["trial_key"] == key)
        mine = f"implied by {r['implied_by']}" if r["status"] == IMPLIED else f"peak {r['peak_rss_gib']}"
        print(
            f"  K={r['num_generations']:<2} B={r['batch_size']} L={r['max_completion_length']:<3} "
            f"{other['status']:9s} {peaks[key] or 0:.3f} | {r['status']:9s} {mine}"
            + (f" (predicted {r['predicted_peak_gib']:.3f})" if r["predicted_peak_gib"] is not None else "")
        )
    same = verdicts["probe all"] == verdicts["frontier"]
    differ = sorted(
        k for k in verdicts["probe all"] if verdicts["probe all"][k] != verdicts["frontier"].get(k)
    )
    for key in differ:  # measured both ways: how far from the budget the two readings were
        a, b = (next(r for r in rows if r["trial_key"] == key) for rows in (every, frontier))
        print(
            f"  differs: {key}: probe all {a['status']} at {a['peak_rss_gib']}, frontier {b['status']} at "
            f"{b['peak_rss_gib']} (budget {a['memory_budget_gib']})"
        )
    skipped = [r for r in frontier if r["status"] in (IMPLIED, PRUNED)]
    agree = sum(VERDICT[r["status"]] == verdicts["probe all"][r["trial_key"]] for r in skipped)
    print(f"implied and pruned verdicts that agree with probing them: {agree} of {len(skipped)}")
    problems = implied_row_problems(frontier)
    ratio = seconds["frontier"] / seconds["probe all"]
    print(f"memory verdicts identical (fits: completed/implied; oom: oom/pruned): {same} {differ or ''}")
    print(f"implied rows well formed: {not problems} {problems or ''}")
    print(f"ratio trainer-seconds frontier / probe all: {ratio:.2f} (target <= 0.35)")
    # The load of other work moves a trial's wall_s between the runs: the same ratio with the probed
    # trials timed in the probe-all run (the same configurations, under the same load) is the steadier one.
    walls = {r["trial_key"]: r["wall_s"] or 0.0 for r in every}
    probed_there = sum(walls[r["trial_key"]] for r in frontier if r["wall_s"] is not None)
    print(
        f"ratio with the frontier's probes timed in the probe-all run: {probed_there / seconds['probe all']:.2f}"
        f" ({probed_there:.1f} of {seconds['probe all']:.1f} trainer-seconds)"
    )
    print(f"outputs: {work}")
    return {
        "verdicts_identical": same,
        "implied_rows_well_formed": not problems,
        "ratio": ratio,
        "ratio_timed_in_probe_all": probed_there / seconds["probe all"],
        "skipped_agreeing": agree,
        "skipped": len(skipped),
    }
