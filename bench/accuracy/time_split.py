"""Where the time goes on the H100 rows: each decoding family's milliseconds per token by the number of
sequences decoded together, generation's share of the step, and the latency-bound judgement the report
makes (orchestrator/views/report/_time.py), from the trials in bench/data/h100-2026-11-26 (round 1: the
16 GiB matrix, four trials at once, and the 1.5B trials; no GPU needed).

    .venv/bin/python bench/bench_time_split.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.views.report._time import families, time_paragraphs  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "h100-2026-11-26" / "round1"


def rows() -> tuple[pd.DataFrame, pd.DataFrame]:
    trials, steps = [], []
    for folder in sorted(DATA.glob("*/")):
        if (folder / "steps.parquet").is_file():
            s = pd.read_parquet(folder / "steps.parquet")
            config = json.loads((folder / "trial.json").read_text())["config"]
            trials.append({**config, "trial_key": s.trial_key[0]})
            steps.append(s)
    return pd.DataFrame(trials), pd.concat(steps)


def main() -> None:
    trials, steps = rows()
    for family in families(trials, steps):
        by_n = "  ".join(f"{n:g} seq {family.median_at(n):.1f} ms" for n in sorted(set(family.sequences)))
        growth = "-" if family.growth is None else f"x{family.growth:.2f}"
        print(
            f"{family.label}: {by_n}; growth {growth}; gen share {family.share:.2f}; "
            f"latency-bound {family.latency_bound}"
        )
    print()
    for paragraph in time_paragraphs(trials, steps):
        print(paragraph)


if __name__ == "__main__":
    main()
