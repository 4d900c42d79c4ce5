"""Where the time goes on the H100 rows: each decoding family's milliseconds per token by the number of
sequences decoded together, generation's share of the step, and the latency-bound judgement the report
makes (orchestrator/views/report/_time.py), from the trials in bench/data/h100-2026-11-26 (round 1: the
16 GiB matrix, four trials at once, and the 1.5B trials; no GPU needed).

    python -m bench time_split
"""

from __future__ import annotations

import json

import pandas as pd

from bench import DATA as BENCH_DATA
from bench import Context, benchmark
from orchestrator.views.report._time import families, time_paragraphs

DATA = BENCH_DATA / "h100-2026-11-26" / "round1"


def rows() -> tuple[pd.DataFrame, pd.DataFrame]:
    trials, steps = [], []
    for folder in sorted(DATA.glob("*/")):
        if (folder / "steps.parquet").is_file():
            s = pd.read_parquet(folder / "steps.parquet")
            config = json.loads((folder / "trial.json").read_text())["config"]
            trials.append({**config, "trial_key": s.trial_key[0]})
            steps.append(s)
    return pd.DataFrame(trials), pd.concat(steps)


@benchmark(tags=("speed", "report"), needs="data", smoke={})
def time_split(ctx: Context) -> dict:
    """Where the time goes on the H100 rows: ms per token by sequences, generation's share, latency-bound."""
    trials, steps = rows()
    found = families(trials, steps)
    for family in found:
        by_n = "  ".join(f"{n:g} seq {family.median_at(n):.1f} ms" for n in sorted(set(family.sequences)))
        growth = "-" if family.growth is None else f"x{family.growth:.2f}"
        print(
            f"{family.label}: {by_n}; growth {growth}; gen share {family.share:.2f}; "
            f"latency-bound {family.latency_bound}"
        )
    print()
    for paragraph in time_paragraphs(trials, steps):
        print(paragraph)
    return {
        "families": len(found),
        "latency_bound_families": sum(bool(f.latency_bound) for f in found),
        **{f"gen_share {f.label}": f.share for f in found},
    }
