"""The fit map's boundary against every GPU trial measured so far (bench/data/h100-2026-11-26/trials.csv):
for each row, the memory model's verdict on that row's configuration against that row's budget (its
memory.budget_gib: 16 GiB for the 3B rows; the card's 79.18 GiB where none was set), beside what the row
measured (completed: fits; oom: does not fit; timeout before a step: undecided). Two predictors:
  prior          no measured trial (what `rlsweep fitmap --card` says before any run);
  leave-one-out  fitted on every other row of the file (what it says once the others ran).
A verdict agrees when it says fits and the trial completed, or does not fit and it ran out of memory;
`uncertain` (the prediction interval crosses the budget) is neither right nor wrong, and counted apart.
The predicted peak's error is against the measured NVML peak of the completed rows.

    python -m bench fitmap_boundary
"""

from __future__ import annotations

import csv
import json

from bench import DATA as BENCH_DATA
from bench import Context, benchmark
from orchestrator.judging.cards import H100_TORCH_GIB
from orchestrator.judging.memory import DOES_NOT_FIT, FITS, MemoryModel
from orchestrator.words.outcome import GPU
from trainers.trial import TrialSpec

DATA = BENCH_DATA / "h100-2026-11-26" / "trials.csv"
MEASURED = {"completed": FITS, "oom": DOES_NOT_FIT}


def row_spec(row: dict) -> TrialSpec:
    return TrialSpec(
        stack=row["stack"],
        mode="gspo" if "gspo" in row["run"] else "grpo",
        model=row["model"],
        num_generations=int(row["K"]),
        batch_size=int(row["B"]),
        max_prompt_length=int(row["max_prompt"]),
        max_completion_length=int(row["max_completion"]),
        num_iterations=int(row["num_iterations"]),
        quantization=row["quantization"],
        lora_r=int(row["lora_r"]),
        memory_budget_gib=float(row["budget_gib"]) if row["budget_gib"] else None,
    )


def ledger_row(row: dict) -> dict:
    """The CSV row as a trials.parquet row (what MemoryModel.fit reads)."""
    spec = row_spec(row)
    return {
        "config": spec.to_json(),
        "status": row["status"],
        "peak_device_gib": float(row["peak_nvml_gib"]) if row["peak_nvml_gib"] else None,
        "memory_budget_gib": spec.memory_budget_gib,
        "gpu_total_gib": H100_TORCH_GIB,
    }


@benchmark(tags=("memory", "fitmap"), needs="data", smoke={})
def fitmap_boundary(ctx: Context) -> dict:
    """The fit map's boundary against every GPU trial: the prior's and leave-one-out's verdicts."""
    rows = list(csv.DictReader(DATA.open()))
    ledger = [ledger_row(r) for r in rows]
    prior = MemoryModel.fit([], GPU)
    tally = {name: {"agree": 0, "disagree": 0, "uncertain": 0, "undecided": 0} for name in ("prior", "loo")}
    print(f"{'stack':8} {'model':6} {'K':>2} {'B':>2} {'L':>5} {'budget':>6} {'measured':>9} {'peak':>6} "
          f"{'prior':>22} {'leave-one-out':>24}")  # fmt: skip
    for i, row in enumerate(rows):
        spec = row_spec(row)
        budget = spec.memory_budget_gib or H100_TORCH_GIB
        measured = MEASURED.get(row["status"])
        loo = MemoryModel.fit(ledger[:i] + ledger[i + 1 :], GPU)
        cells = []
        for name, model in (("prior", prior), ("loo", loo)):
            p = model.predict(spec)
            verdict = p.verdict(budget)
            if measured is None:
                word = "undecided"
            elif verdict not in (FITS, DOES_NOT_FIT):
                word = "uncertain"
            else:
                word = "agree" if verdict == measured else "disagree"
            tally[name][word] += 1
            cells.append(f"{p.peak_gib:5.2f} {verdict[:12]:>12} {word[:8]:>8}" if word != "undecided" else
                         f"{p.peak_gib:5.2f} {verdict[:12]:>12} {'-':>8}")  # fmt: skip
        size = row["model"].split("-")[-2] if "-" in row["model"] else row["model"]
        peak = row["peak_nvml_gib"] or "-"
        print(f"{row['stack']:8} {size:6} {row['K']:>2} {row['B']:>2} {row['max_completion']:>5} {budget:6.2f} "
              f"{row['status']:>9} {peak:>6} {cells[0]:>22} {cells[1]:>24}")  # fmt: skip
    for name, counts in tally.items():
        label = "prior" if name == "prior" else "leave-one-out"
        print(f"{label}: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" of {len(rows)} rows")
    print(json.dumps(tally))
    return {f"{name}_{word}": n for name, counts in tally.items() for word, n in counts.items()}
