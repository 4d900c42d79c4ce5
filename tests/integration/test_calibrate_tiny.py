"""`rlsweep calibrate` end to end on real `tiny` trainers on this CPU (RSS under a 4 GiB budget): the
probes it chose ran as one-step synthetic probes, each recorded like a sweep's trial with the prediction
made just before it, the fit map is drawn from them, and a second run on the same output dir runs no
trainer again."""

import pyarrow.parquet as pq
import pytest

from orchestrator.cli import main
from orchestrator.judging.calibrate import FEW_LONG, FEW_SHORT, MANY_LONG, MANY_SHORT
from orchestrator.recording.sinks import TRIAL_COLUMNS

pytestmark = pytest.mark.slow

BUDGET_GIB = 4


def test_calibrate_runs_its_probes_and_draws_the_fit_map_from_them(tmp_path, capsys):
    out = tmp_path / "calibrate"
    argv = ["calibrate", "--model", "tiny", "--stack", "trl", "--budget-gib", str(BUDGET_GIB), "--max-length",
            "512", "--set", "max_prompt_length=96", "--set", "num_threads=1", "--output-dir", str(out),
            "--no-plot", "--timeout-s", "300"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()

    trials = pq.read_table(out / "trials.parquet")
    assert trials.schema.names == TRIAL_COLUMNS  # a sweep's row shape: `fitmap --trials` reads it
    rows = trials.to_pylist()
    assert len(rows) == 4
    shapes = {(r["num_generations"], r["max_completion_length"]) for r in rows}
    assert len(shapes) == 4  # four distinct configurations
    (k0, c0) = min(shapes)
    assert any(k == k0 and c > c0 for k, c in shapes) and any(k > k0 and c == c0 for k, c in shapes)
    for row in rows:
        assert row["status"] == "completed", row["status_detail"]
        assert (row["max_steps"], row["probe_steps"], row["memory_budget_gib"]) == (1, 1, BUDGET_GIB)
        assert 0 < row["peak_rss_gib"] < BUDGET_GIB
        assert row["predicted_peak_gib"] is not None  # the prediction made just before it ran
        (steps,) = (out / "steps").rglob(f"{row['trial_key']}.parquet")
        assert pq.read_table(steps).column("probe_kind").to_pylist() == ["synthetic"]

    said = captured.err
    for number, role in enumerate((FEW_SHORT, FEW_LONG, MANY_SHORT, MANY_LONG), start=1):
        assert f"[{number}] {role}: K=" in said
    assert said.count("GiB RSS (CPU run) peak against predicted") == 4
    printed = captured.out
    assert "Probes: each measured peak against its prediction made just before it ran" in printed
    assert f"Fit map on a {BUDGET_GIB} GiB budget; peak RSS predicted from 4 trial(s) of {out}" in printed
    assert "Measured (4 trial(s) of these settings; the rest is predicted):" in printed
    assert (
        "Draw this map again, or for another card (--card NAME): "
        f"rlsweep fitmap --trials {out} --model tiny --stack trl --budget-gib {BUDGET_GIB} "
        "--set max_prompt_length=96 --set num_threads=1" in printed
    )

    # Again: every probe is in the output dir, so no trainer starts and the same map is drawn.
    events = {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("events.jsonl")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("events.jsonl")} == events
    again = capsys.readouterr()
    assert again.err.count("already measured") == 4
    assert f"peak RSS predicted from 4 trial(s) of {out}" in again.out
