"""`rlsweep solve` on real `tiny` trainers under an RSS budget: the answer's neighbours are both measured
(the smaller completes within the budget, the larger passes it), the trials are recorded like a sweep's,
and a second run measures nothing again."""

import json

import pyarrow.parquet as pq
import pytest

from orchestrator.cli import main
from orchestrator.judging.intervals import margin
from orchestrator.recording.sinks import TRIAL_COLUMNS

pytestmark = pytest.mark.slow

# As tests/integration/test_oom_sweep.py measured (tiny, quantization none, 16-token completions, one
# probe step): RSS peak 0.69-0.78 GiB at K=2, 0.88 GiB at K=32, over 0.9 GiB at K=64.
BUDGET_GIB = 0.85


def test_solve_certifies_the_largest_k_with_both_neighbours_measured_and_resumes(tmp_path, capsys):
    out = tmp_path / "solve"
    argv = ["solve", "--budget-gib", str(BUDGET_GIB), "--maximize", "num_generations", "--values", "2", "64",
            "--model", "tiny", "--output-dir", str(out), "--timeout-s", "300"]  # fmt: skip
    argv += [f"--set={s}" for s in ("batch_size=1", "max_prompt_length=96", "max_completion_length=16",
                                    "quantization=none", "probe_steps=1", "num_threads=1")]  # fmt: skip
    assert main(argv) == 0

    trials = pq.read_table(out / "trials.parquet")
    assert trials.schema.names == TRIAL_COLUMNS  # a sweep's row shape
    rows = {r["num_generations"]: r for r in trials.to_pylist()}
    assert sorted(rows) == [2, 64]
    small, large = rows[2], rows[64]
    assert small["status"] == "completed" and small["peak_rss_gib"] < BUDGET_GIB, small["status_detail"]
    assert large["status"] == "oom" and large["status_detail"].startswith("guard: RSS "), large[
        "status_detail"
    ]
    assert small["max_steps"] == small["probe_steps"] == 1 and small["memory_budget_gib"] == BUDGET_GIB
    # Each row records the prediction made just before it ran: K=2 from the prior (nothing measured
    # yet), K=64 from the model fitted on K=2.
    assert (small["predicted_basis"], small["predicted_from_trials"]) == ("prior", 0)
    assert (large["predicted_basis"], large["predicted_from_trials"]) == ("fitted", 1)
    assert small["predicted_low_gib"] < small["predicted_peak_gib"] < small["predicted_high_gib"]
    for row in (small, large):
        (steps,) = (out / "steps").rglob(f"{row['trial_key']}.parquet")
        assert pq.read_table(steps).num_rows == row["steps_completed"]

    answer = json.loads((out / "solve.json").read_text())
    assert answer["certified"] and answer["fit"]["value"] == 2 and answer["above"]["value"] == 64
    printed = capsys.readouterr().out
    assert (
        f"largest K that fits {BUDGET_GIB:g} GiB: 2, measured {small['peak_rss_gib']:.2f} GiB RSS peak, "
        f"{margin(small['peak_rss_gib'], BUDGET_GIB).words()} ({small['trial_key']})"
    ) in printed
    assert "next K above it: 64, does not fit (out of memory: guard: RSS " in printed

    # Again: both values are in the output dir, so no trainer starts and the answer is the same.
    events = {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("events.jsonl")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("events.jsonl")} == events
    assert "already measured K=2, K=64" in capsys.readouterr().err
    assert json.loads((out / "solve.json").read_text())["answer"] == answer["answer"]
