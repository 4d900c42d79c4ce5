"""A sweep whose trial was killed at its wall-clock limit, in the report: the default CPU sweep
(sweeps/cpu-learn.yaml) on a loaded host, its real SmolLM2 run (bench/data/learning) recorded through
the sweep's own writers with 19 of its 20 steps. The report judges it, draws its curves, ranks its held-out
accuracy and says what fits on the steps it kept, rather than "unknown"."""

import pandas as pd
import pyarrow.parquet as pq
from rich.console import Console

from orchestrator.views.report import load_outputs, write_report
from orchestrator.views.report._feasibility import feasibility_matrix, frontier
from orchestrator.views.report._feasibility_tables import NO_ANSWER, frontier_view
from orchestrator.words.outcome import TIMEOUT
from tests.helpers.cpu_learn import KEY, record_cpu_learn

KEPT = "the 19 of 20 steps measured before the time limit"


def cpu_learn_timed_out(out, kept: int) -> None:
    """cpu-learn's trial as its sweep records it: killed at 900 s with its first `kept` steps."""
    detail = f"killed at the wall-clock limit of 900 s with {kept} of 20 steps measured (kept)"
    record_cpu_learn(out, kept=kept, status=TIMEOUT, detail=detail, wall_s=900.0)


def test_a_timeout_that_kept_19_of_20_steps_is_judged_drawn_ranked_and_fits_on_those_steps(tmp_path):
    cpu_learn_timed_out(tmp_path, kept=19)
    console = Console(record=True, width=240)
    paths = write_report(tmp_path, console=console)
    summary = pd.read_csv(paths["summary_csv"]).set_index("run_name")
    trial = summary.iloc[0]
    assert trial["status"] == TIMEOUT and trial["training_verdict"] == "learning"
    assert trial["training_verdict_detail"].endswith(f"; judged on {KEPT}")

    plots = {p.name for p in paths["plots"]}
    assert f"curves_{KEY}.png" in plots and "learning_curves.png" in plots  # reward, loss, accuracy drawn
    markdown = paths["report_md"].read_text()
    assert f"{KEY} (timed out: on {KEPT})" in markdown  # ranked in "Which configuration learns"
    section = markdown.split("## Does it learn: training verdicts")[1].split("\n## ")[0]
    assert "1 trials judged from their steps (1 timed out, judged on the steps measured" in section
    assert f"Curves {KEY}" in markdown

    fit = frontier_view(frontier(load_outputs(tmp_path).trials)).iloc[0]
    assert fit["Largest that fits"] == f"K=4 B=2 (8 completions/step), fits on {KEPT}"
    assert fit["Completed / OOM / pruned"] == "0 / 0 / 0 (+1 timed out)"
    assert NO_ANSWER not in markdown and NO_ANSWER not in console.export_text()
    (grid,) = feasibility_matrix(load_outputs(tmp_path).trials)
    assert grid.labels.loc[4, 2].endswith(" GiB (timeout: 19 of 20 steps)") and grid.fits(4, 2)


def test_a_timeout_over_the_budget_on_its_kept_steps_does_not_fit():
    row = {"stack": "trl", "mode": "grpo", "model": "smollm2", "quantization": "none",
           "num_generations": 4, "batch_size": 2, "status": TIMEOUT, "steps_completed": 19, "max_steps": 20,
           "peak_rss_gib": 2.82, "trial_key": KEY}  # fmt: skip
    over = frontier(pd.DataFrame([row]), budget_gib=2.0).iloc[0]
    assert pd.isna(over["largest_fit"]) and over["oom_over_budget"]
    assert over["oom_detail"] == f"timed out, on {KEPT}, but its peak 2.82 GiB passed the 2 GiB budget"
    assert frontier(pd.DataFrame([row]), budget_gib=4.0).iloc[0]["fit_kept"] == KEPT


def test_a_timeout_that_kept_no_step_has_no_verdict_and_leaves_the_frontier_unknown(tmp_path):
    cpu_learn_timed_out(tmp_path, kept=0)
    trials = load_outputs(tmp_path).trials
    assert trials.loc[0, "status"] == TIMEOUT and pd.isna(trials.loc[0, "training_verdict"])
    assert frontier_view(frontier(trials)).iloc[0]["Largest that fits"] == NO_ANSWER


def test_a_timeout_recorded_before_timeouts_were_judged_gets_its_verdict_in_the_report(tmp_path):
    cpu_learn_timed_out(tmp_path, kept=19)
    table = pq.read_table(tmp_path / "trials.parquet").to_pandas()
    table["training_verdict"] = table["training_verdict_detail"] = None  # as the old recorder wrote it
    table.to_parquet(tmp_path / "trials.parquet")
    trials = load_outputs(tmp_path).trials
    assert trials.loc[0, "training_verdict"] == "learning"
    assert trials.loc[0, "training_verdict_detail"].endswith(f"; judged on {KEPT}")
