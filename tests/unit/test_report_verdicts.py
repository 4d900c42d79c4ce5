"""Training verdicts in the report: recomputed from the steps files for a sweep that predates the
columns, in summary.csv, as a mark in the feasibility matrix, and in their own section; beside them, the
completions a sandbox killed, a reward-hacking signal."""

import pandas as pd
import pyarrow.parquet as pq
import yaml
from rich.console import Console

from orchestrator.judging.verdict import VerdictSettings, judge
from orchestrator.views.report import load_outputs, write_report
from orchestrator.views.report._feasibility import feasibility_matrix
from orchestrator.views.report._feasibility_tables import matrix_views
from tests.helpers.synthetic_sweep import with_held_out_accuracy, write_synthetic_sweep

FLAT = "trl-grpo-k2-b2-s1"  # a completed trial whose groups never vary
SETTINGS = {"min_steps": 3, "no_signal_steps": 4}


def old_sweep_with_a_flat_trial(out):
    """A synthetic sweep (trials.parquet without verdict columns) whose trial FLAT has no reward variance."""
    write_synthetic_sweep(out)
    path = out / "steps" / "stack=trl" / "mode=grpo" / f"{FLAT}.parquet"
    table = pq.read_table(path).to_pandas()
    table["frac_reward_zero_std"] = 1.0
    pq.write_table(pq.read_table(path).from_pandas(table, preserve_index=False), path)
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "synthetic", "verdict": SETTINGS}))
    return pq.read_table(path).to_pylist()


def test_an_old_sweeps_completed_trials_get_verdicts_from_their_steps_under_its_sweep_yaml(tmp_path):
    flat_steps = old_sweep_with_a_flat_trial(tmp_path)
    trials = load_outputs(tmp_path).trials.set_index("trial_key")
    expected = judge(flat_steps, VerdictSettings(**SETTINGS), max_steps=5, device_total_gib=16.0)
    assert expected.verdict == "no_signal"
    assert trials.loc[FLAT, "training_verdict"] == "no_signal"
    assert trials.loc[FLAT, "training_verdict_detail"] == expected.detail
    completed = trials[trials["status"] == "completed"]
    assert set(completed.drop(FLAT)["training_verdict"]) == {"ok"}  # 4 non-probe steps >= min_steps 3
    assert trials[trials["status"] != "completed"]["training_verdict"].isna().all()


def synthetic_sweep_whose_completed_trials_read(out, verdict: str, detail: str) -> None:
    """A synthetic sweep whose trials.parquet records this verdict for every completed trial."""
    write_synthetic_sweep(out)
    table = pq.read_table(out / "trials.parquet").to_pandas()
    table["training_verdict"] = [verdict if s == "completed" else None for s in table["status"]]
    table["training_verdict_detail"] = detail
    table.to_parquet(out / "trials.parquet")


def test_a_verdict_stored_in_trials_parquet_is_taken_as_it_is(tmp_path):
    synthetic_sweep_whose_completed_trials_read(tmp_path, "diverged", "as recorded")
    trials = load_outputs(tmp_path).trials
    assert set(trials.loc[trials["status"] == "completed", "training_verdict"]) == {"diverged"}


def test_the_report_marks_the_flat_trials_cell_lists_it_and_shows_its_curves(tmp_path):
    old_sweep_with_a_flat_trial(tmp_path)
    console = Console(record=True, width=200)
    paths = write_report(tmp_path, console=console)
    summary = pd.read_csv(paths["summary_csv"]).set_index("run_name")
    assert summary.loc[FLAT, "training_verdict"] == "no_signal"
    assert summary.loc[FLAT, "training_verdict_detail"].startswith("no_signal: frac_reward_zero_std >= 0.95")

    grid = next(g for g in feasibility_matrix(load_outputs(tmp_path).trials) if g.stack == "trl"
                and g.mode == "grpo")  # fmt: skip
    assert grid.labels.loc[2, 2].endswith(" GiB ⚠ no signal")
    assert "⚠" not in grid.labels.loc[2, 1] and "⚠" not in grid.labels.loc[4, 1]
    assert grid.verdict_note.startswith(
        "⚠: a completed trial of the cell ran but its training verdict flags it"
    )
    terminal = console.export_text()
    assert "⚠ no signal" in terminal and "check that it learns" in terminal
    assert (
        "Training: 5 ok, 1 no_signal" in terminal and f"{FLAT}: no_signal: frac_reward_zero_std" in terminal
    )

    markdown = paths["report_md"].read_text()
    section = markdown.split("## Does it learn: training verdicts")[1].split("\n## ")[0]
    assert "6 completed trials judged from their steps: 1 no signal, 5 ok." in section
    assert f"| {FLAT} |" in section and "no signal" in section
    assert f"plots/curves_{FLAT}.png" in section
    assert "⚠ no signal" in paths["report_html"].read_text()


def test_no_mark_and_no_note_when_every_completed_trial_is_ok(tmp_path):
    write_synthetic_sweep(tmp_path)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"name": "synthetic", "verdict": SETTINGS}))
    grids = feasibility_matrix(load_outputs(tmp_path).trials)
    assert all(g.verdict_note == "" for g in grids)
    assert not any("⚠" in str(label) for g in grids for label in g.labels.to_numpy().ravel())
    assert all("⚠" not in view.caption for view in matrix_views(grids))


def with_sandbox_kills(out, kills: dict[str, list[float]]) -> None:
    """Give these trials' steps a sandbox_kills column (the code task's), per step in step order."""
    for key, values in kills.items():
        path = next(out.glob(f"steps/stack=*/mode=*/{key}.parquet"))
        table = pq.read_table(path).to_pandas().sort_values("step")
        table["sandbox_kills"] = values[: len(table)]
        pq.write_table(pq.read_table(path).from_pandas(table, preserve_index=False), path)


def test_the_report_says_which_trials_the_sandbox_killed_completions_of(tmp_path):
    write_synthetic_sweep(tmp_path)
    steps = load_outputs(tmp_path).steps
    hacking, clean = FLAT, "trl-grpo-k4-b1-s1"
    counts = steps.groupby("trial_key").size()
    with_sandbox_kills(tmp_path, {hacking: [0.0, 1.0] + [3.0] * (counts[hacking] - 2),
                                  clean: [0.0] * counts[clean]})  # fmt: skip
    paths = write_report(tmp_path, console=Console(record=True, width=200))
    summary = pd.read_csv(paths["summary_csv"]).set_index("run_name")
    total = 1 + 3 * (counts[hacking] - 2)
    assert summary.loc[hacking, "sandbox_kills"] == total
    assert summary.loc[clean, "sandbox_kills"] == 0
    assert summary.drop([hacking, clean])["sandbox_kills"].isna().all()  # no sandbox: not measured, not 0
    markdown = paths["report_md"].read_text()
    section = markdown.split("### Reward hacking: completions the sandbox killed")[1].split("\n## ")[0]
    assert f"The sandbox killed {total} training completions in 1 of the 2 trials that ran one" in section
    assert f"| {hacking} |" in section and f"| {clean} |" not in section
    assert "Reward hacking: completions the sandbox killed" in paths["report_html"].read_text()


def test_the_report_says_the_sandbox_killed_nothing_and_is_silent_without_a_sandbox(tmp_path):
    write_synthetic_sweep(tmp_path)
    paths = write_report(tmp_path, console=Console(record=True, width=200))
    assert "Reward hacking" not in paths["report_md"].read_text()
    counts = load_outputs(tmp_path).steps.groupby("trial_key").size()
    with_sandbox_kills(tmp_path, {FLAT: [0.0] * counts[FLAT]})
    paths = write_report(tmp_path, console=Console(record=True, width=200))
    assert "The sandbox killed no training completion in the 1 trial that ran one." in (
        paths["report_md"].read_text()
    )


def learning_trials() -> pd.DataFrame:
    """Completed trials with held-out accuracy figures: TRL and Unsloth on a GPU, Unsloth's CPU fallback."""
    base = {"status": "completed", "mode": "grpo", "num_generations": 4, "batch_size": 2, "seed": 1,
            "accuracy_target": 0.5, "median_tokens_per_s": 100.0, "peak_device_gib": 4.0}  # fmt: skip
    rows = [
        base | {"trial_key": "trl-slow", "stack": "trl", "learning_rate": 1e-5,
                "steps_to_accuracy_target": 40, "seconds_to_accuracy_target": 80.0,
                "gpu_seconds_to_accuracy_target": 80.0, "best_eval_pass_at_1": 0.6,
                "best_eval_pass_at_1_lo": 0.48, "best_eval_pass_at_1_hi": 0.71, "best_eval_step": 50},
        base | {"trial_key": "unsloth-fast", "stack": "unsloth", "learning_rate": 1e-5,
                "effective_config": '{"unsloth_backend": "gpu"}',
                "steps_to_accuracy_target": 20, "seconds_to_accuracy_target": 30.0,
                "gpu_seconds_to_accuracy_target": 30.0, "best_eval_pass_at_1": 0.7,
                "best_eval_pass_at_1_lo": 0.58, "best_eval_pass_at_1_hi": 0.8, "best_eval_step": 40},
        base | {"trial_key": "trl-never", "stack": "trl", "learning_rate": 1e-6,
                "best_eval_pass_at_1": 0.3, "best_eval_pass_at_1_lo": 0.2, "best_eval_pass_at_1_hi": 0.42,
                "best_eval_step": 10},
        base | {"trial_key": "unsloth-cpu", "stack": "unsloth", "learning_rate": 1e-6,
                "effective_config": '{"unsloth_backend": "cpu"}', "best_eval_pass_at_1": 0.35,
                "best_eval_pass_at_1_lo": 0.25, "best_eval_pass_at_1_hi": 0.46, "best_eval_step": 10},
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_configurations_rank_by_time_to_the_accuracy_target_then_by_best_accuracy():
    from orchestrator.views.report._learning import learning_table

    table = learning_table(learning_trials())
    assert list(table["Trial"]) == ["unsloth-fast", "trl-slow", "unsloth-cpu", "trl-never"]
    fast = table.iloc[0]
    assert fast["Best held-out accuracy (95%)"] == "0.70 (0.58–0.80) at step 40"
    assert fast["Time to accuracy 0.5"] == "step 20, 30.0 s (30.0 GPU-s)"
    assert table.iloc[3]["Time to accuracy 0.5"] == "not reached"
    assert table.iloc[2]["Stack"] == "Unsloth (its TRL fallback on CPU)"
    assert fast["Peak memory"] == "4.00 GiB GPU (NVML)"


def test_the_stacks_sit_side_by_side_and_unslothss_cpu_fallback_is_not_compared():
    from orchestrator.views.report._learning import learning_blocks, side_by_side

    pairs = side_by_side(learning_trials()).set_index("Seed")
    assert len(pairs) == 2  # the two learning rates, each run by both stacks
    gpu, cpu = pairs.iloc[0], pairs.iloc[1]
    assert gpu["TRL: time to accuracy 0.5"] == "step 40, 80.0 s (80.0 GPU-s)"
    assert gpu["Unsloth: time to accuracy 0.5"] == "step 20, 30.0 s (30.0 GPU-s)"
    assert cpu["TRL: best accuracy"] == "0.30 (0.20–0.42) at step 10"
    assert cpu["Unsloth: best accuracy"] == "not compared (its TRL fallback on CPU)"
    blocks = learning_blocks(learning_trials())
    text = " ".join(b.text for b in blocks if b.kind == "p")
    assert "1 Unsloth trial(s) ran without a GPU, so Unsloth ran its TRL fallback on CPU" in text
    assert "not compared with TRL's" in text


def test_a_learning_trial_is_listed_as_learning_and_carries_no_warning_mark(tmp_path):
    synthetic_sweep_whose_completed_trials_read(tmp_path, "learning", "learning: reward +0.1 per 10 steps")
    grids = feasibility_matrix(load_outputs(tmp_path).trials)
    assert not any("⚠" in str(label) for g in grids for label in g.labels.to_numpy().ravel())
    console = Console(record=True, width=200)
    markdown = write_report(tmp_path, console=console)["report_md"].read_text()
    terminal = console.export_text()  # the answer on the terminal: how many learn, and the first ones' detail
    assert "Training: 6 learning" in terminal
    assert terminal.count(": learning: reward +0.1 per 10 steps") == 3
    section = markdown.split("## Does it learn: training verdicts")[1].split("\n## ")[0]
    assert "6 completed trials judged from their steps: 6 learning." in section
    assert "### Trials that learn" in section and "### Trials flagged" not in section
    assert "## Which configuration learns: held-out accuracy" in markdown
    assert "No completed or timed-out trial measured held-out accuracy" in markdown


def test_a_memory_sweeps_probes_are_said_to_be_not_judged_rather_than_too_short(tmp_path):
    synthetic_sweep_whose_completed_trials_read(tmp_path, "too_short", "too_short: 1 step judged")
    table = pq.read_table(tmp_path / "trials.parquet").to_pandas()
    completed = table["status"] == "completed"
    table.loc[completed, "phase"] = "memory"
    table.to_parquet(tmp_path / "trials.parquet")
    console = Console(record=True, width=200)
    markdown = write_report(tmp_path, console=console)["report_md"].read_text()
    terminal = console.export_text()
    assert f"Training: not judged ({completed.sum()} memory probes: probe steps, not training)" in terminal
    assert "too_short" not in terminal
    section = markdown.split("## Does it learn: training verdicts")[1].split("\n## ")[0]
    assert f"{completed.sum()} memory-phase probe(s) not judged" in section
    assert "No training run completed or kept a step before its time limit, so none was judged." in section


def test_a_sweep_with_training_runs_and_probes_counts_the_probes_apart(tmp_path):
    synthetic_sweep_whose_completed_trials_read(tmp_path, "learning", "learning: reward +0.1 per 10 steps")
    table = pq.read_table(tmp_path / "trials.parquet").to_pandas()
    first = table.index[table["status"] == "completed"][0]
    table.loc[first, "phase"] = "memory"
    table.to_parquet(tmp_path / "trials.parquet")
    console = Console(record=True, width=200)
    write_report(tmp_path, console=console)
    assert (
        "Training: 5 learning; not judged (1 memory probe: probe steps, not training)"
        in console.export_text()
    )


def _headings(markdown: str) -> list[str]:
    return [line[3:] for line in markdown.splitlines() if line.startswith("## ")]


def test_a_learning_sweeps_report_opens_on_which_configuration_learns(tmp_path):
    write_synthetic_sweep(tmp_path)
    with_held_out_accuracy(tmp_path)
    console = Console(record=True, width=200)
    markdown = write_report(tmp_path, console=console)["report_md"].read_text()
    headings = _headings(markdown)
    assert headings[:2] == [
        "Which configuration learns: held-out accuracy",
        "Does it learn: training verdicts",
    ]
    fits = headings.index("What fits: the feasibility frontier")
    assert fits > headings.index("Fastest configurations that completed")
    terminal = console.export_text()  # the terminal in the report's order
    order = [
        terminal.index(words)
        for words in ("Which configuration learns", "Training: ", "Feasibility frontier")
    ]
    assert order == sorted(order)


def test_a_sweep_under_a_memory_budget_still_opens_on_what_fits(tmp_path):
    write_synthetic_sweep(tmp_path)
    with_held_out_accuracy(tmp_path)
    table = pq.read_table(tmp_path / "trials.parquet").to_pandas()
    table["memory_budget_gib"] = 12.0
    table.to_parquet(tmp_path / "trials.parquet")
    markdown = write_report(tmp_path, console=Console(quiet=True))["report_md"].read_text()
    assert _headings(markdown)[0] == "What fits: the feasibility frontier"


def test_every_section_is_in_both_reading_orders():
    from orchestrator.views.report._content import LEARNING_SECTIONS, SECTIONS

    assert sorted(s.__name__ for s in LEARNING_SECTIONS) == sorted(s.__name__ for s in SECTIONS)
    assert len(LEARNING_SECTIONS) == len(SECTIONS)


def test_the_learning_section_shows_the_stacks_curves_on_one_axis_under_its_ranking():
    from pathlib import Path

    from orchestrator.views.report._learning import learning_blocks

    blocks = learning_blocks(learning_trials(), Path("plots/learning_curves.png"))
    kinds = [b.kind for b in blocks]
    image = blocks[kinds.index("image")]
    assert kinds.index("table") < kinds.index("image")
    assert image.path == Path("plots/learning_curves.png")
    assert image.text == "Held-out accuracy over the steps, the stacks on one axis"
    assert "image" not in [b.kind for b in learning_blocks(learning_trials())]  # no plot drawn: none shown


def test_a_stack_that_ran_its_fallback_is_read_from_its_registry_entry(monkeypatch):
    from orchestrator.views.report._learning import cpu_fallback
    from trainers import stacks

    unsloth = learning_trials().set_index("trial_key").loc["unsloth-cpu"]
    assert cpu_fallback(unsloth)
    monkeypatch.setitem(stacks.STACKS, "unsloth", stacks.StackEntry("unsloth", "Unsloth", "x:Y"))
    assert not cpu_fallback(unsloth)  # without fallback_when the entry says nothing ran a fallback
