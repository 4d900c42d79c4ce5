"""False "fits" of the simulated answers, counted on every GPU row in bench/data: each row of
bench/data/simulated-h100.csv (the H100 rows, completed and out of memory, each with its step simulated
on meta tensors: `python -m bench simulate --set out=bench/data/simulated-h100.csv`) judged as
`rlsweep fits` judges it (orchestrator/judging/answer.py judged(): the capped replay's least it runs in, the
simulator's error on GPU rows of the family), at the row's own budget and on every smaller card in
orchestrator/judging/cards.py. A false "fits" is an answer "fits" where the row did not fit: out of
memory at its budget, or a measured NVML peak over the smaller card's memory (strict: the cap would
release some of reserved there, so a step may fit a card under its uncapped peak; counted against all
the same).

Two ways: as shipped (each family's own error range, the rows among those that made it) and with the
row's family left out (the range across the other families, as an unmeasured family gets it).

    python -m bench false_fits            # coverage per stack, then false fits, both ways
"""

from __future__ import annotations

from bench import Context, benchmark
from tools.inputs.simulated_rows import coverage, error_ranges, judged, load


@benchmark(tags=("memory", "simulate"), needs="data", smoke={}, goals={"false_fits_as_shipped": "<= 0"})
def false_fits(ctx: Context) -> dict:
    """False "fits" of the simulated answers on every GPU row, as shipped and with the family left out."""
    rows = load()
    metrics: dict = {"rows": len(rows)}
    print("| stack | families measured: GPU rows | simulated error (measured / simulated least + context) |")
    print("|---|---|---|")
    ranges = error_ranges(rows)
    for stack, families in sorted(coverage(rows).items()):
        said = ", ".join(f"{f}: {n}" for f, n in sorted(families.items()))
        error = "; ".join(f"{f} {low:.2f}-{high:.2f} ({n} rows)" for f, low, high, n in ranges.get(stack, ()))
        print(f"| {stack} | {said} | {error} |")
    for leave_out in (False, True):
        found = judged(rows, leave_out)
        false = [j for j in found if j.false_fit]
        how = "family left out" if leave_out else "as shipped"
        counts = {v: sum(j.verdict == v for j in found) for v in ("fits", "uncertain", "does not fit")}
        print(
            f"{how}: {len(false)} false fits of {len(found)} answers ({len(rows)} rows x their budget and "
            f"each smaller card): "
            + ", ".join(f"{n} {v}" for v, n in counts.items())
            + f"; {sum(j.false_no_fit for j in found)} false does-not-fit"
        )
        for j in false:
            print(f"  false fits: {j.stack} {j.row} at {j.budget_gib:g} GiB")
        key = "family_left_out" if leave_out else "as_shipped"
        metrics[f"false_fits_{key}"] = len(false)
        metrics[f"answers_{key}"] = len(found)
        metrics[f"false_no_fits_{key}"] = sum(j.false_no_fit for j in found)
    return metrics
