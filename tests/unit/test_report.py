"""The sweep report from synthetic Parquet holding every status: files, figures, matrix, metrics."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from rich.console import Console

from orchestrator.judging.intervals import MIN_CYCLES, median_interval
from orchestrator.views.report import load_outputs, summary_metrics, summary_table, write_report
from orchestrator.views.report._configs import aggregate_repeats
from orchestrator.views.report._feasibility import feasibility_matrix, frontier, infer_budget_gib
from orchestrator.views.report._feasibility_tables import frontier_view, matrix_views
from orchestrator.views.report._ranked import ranked_table
from tests.helpers.html_outline import outline
from tests.helpers.images import assert_varied_png
from tests.helpers.synthetic_sweep import GRID, trial_key, write_synthetic_sweep

ORIGINAL_TEN = [
    "run_name",
    "framework",  # the original benchmark's own name for the stack, not renamed
    "mode",
    "num_generations",
    "batch_size",
    "seed",
    "step_count",
    "avg_step_time_sec",
    "avg_estimated_tokens_per_sec",
    "peak_cuda_memory_allocated_gb",
]


def _console() -> Console:
    return Console(record=True, width=200, force_terminal=False)


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    trials = write_synthetic_sweep(out, gpu=True)
    console = _console()
    paths = write_report(out, console=console)
    return out, trials, paths, console.export_text()


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu")
    trials = write_synthetic_sweep(out, gpu=False)
    console = _console()
    paths = write_report(out, console=console)
    return out, trials, paths, console.export_text()


def _steps(out: Path, key: str) -> pd.DataFrame:
    return load_outputs(out).steps.query("trial_key == @key")


def test_summary_csv_starts_with_the_original_ten_columns_and_holds_every_trial(gpu_report):
    out, trials, paths, _ = gpu_report
    summary = pd.read_csv(paths["summary_csv"])
    assert list(summary.columns[:10]) == ORIGINAL_TEN
    assert list(summary.columns[10:22]) == [
        "status",
        "status_detail",
        "peak_device_gib",
        "median_tokens_per_s",
        "median_tokens_per_s_lo",
        "median_tokens_per_s_hi",
        "cycles_measured",
        "p10_tokens_per_s",
        "p90_tokens_per_s",
        "budget_margin_gib",
        "budget_margin_pct",
        "tight",
    ]
    assert sorted(summary["run_name"]) == sorted(trials["trial_key"])
    assert dict(zip(summary["run_name"], summary["status"], strict=True)) == dict(
        zip(trials["trial_key"], trials["status"], strict=True)
    )


def test_summary_csv_figures_are_measured_from_the_steps(gpu_report):
    out, _, paths, _ = gpu_report
    summary = pd.read_csv(paths["summary_csv"]).set_index("run_name")
    key = trial_key("trl", "grpo", 2, 2, 1)
    steps = _steps(out, key)
    regular = steps[~steps["probe"]]
    row = summary.loc[key]
    assert row["avg_estimated_tokens_per_sec"] == pytest.approx(regular["tokens_per_s"].mean())
    assert row["avg_step_time_sec"] == pytest.approx(regular["step_s"].mean())
    assert row["peak_cuda_memory_allocated_gb"] == pytest.approx(steps["torch_peak_allocated_gib"].max())
    assert row["p10_tokens_per_s"] <= row["median_tokens_per_s"] <= row["p90_tokens_per_s"]
    assert row["step_count"] == len(steps)
    # A trial that never ran has no speed figure rather than a zero.
    assert pd.isna(summary.loc[trial_key("unsloth", "gspo", 2, 1, 1), "avg_estimated_tokens_per_sec"])


def test_summary_csv_and_mlflow_carry_the_median_tokens_per_s_interval_its_cycles_and_the_margin(tmp_path):
    write_synthetic_sweep(tmp_path, grid=[("trl", "grpo", 2, 1, 1, "completed", 12)])
    outputs = load_outputs(tmp_path)
    regular = outputs.steps[~outputs.steps["probe"]]["tokens_per_s"].tolist()
    expected = median_interval([regular])
    summary = summary_table(outputs).iloc[0]
    assert (summary["median_tokens_per_s_lo"], summary["median_tokens_per_s_hi"]) == (
        expected.low,
        expected.high,
    )
    assert summary["cycles_measured"] == 11
    trial = {
        **outputs.trials.iloc[0].to_dict(),
        "budget_margin_gib": 1.5,
        "budget_margin_pct": 9.375,
        "tight": False,
    }
    metrics = summary_metrics(trial, outputs.steps)
    assert (metrics["median_tokens_per_s_lo"], metrics["median_tokens_per_s_hi"]) == (
        expected.low,
        expected.high,
    )
    assert (
        metrics["cycles_measured"],
        metrics["budget_margin_gib"],
        metrics["budget_margin_pct"],
        metrics["tight"],
    ) == (
        11.0,
        1.5,
        9.375,
        0.0,
    )


def test_a_trial_with_too_few_cycles_has_no_interval_in_summary_csv_or_mlflow(gpu_report):
    out, trials, paths, _ = gpu_report
    summary = pd.read_csv(paths["summary_csv"]).set_index("run_name")
    key = trial_key("trl", "grpo", 2, 2, 1)  # 5 steps, the first a probe: 4 cycles
    assert summary.loc[key, "cycles_measured"] == 4 < MIN_CYCLES
    assert summary.loc[key, ["median_tokens_per_s_lo", "median_tokens_per_s_hi"]].isna().all()
    metrics = summary_metrics(trials.set_index("trial_key").loc[key].to_dict() | {"trial_key": key},
                              load_outputs(out).steps)  # fmt: skip
    assert "median_tokens_per_s_lo" not in metrics and metrics["cycles_measured"] == 4.0


def test_cpu_sweep_leaves_cuda_memory_null_and_labels_rss(cpu_report):
    out, trials, paths, printed = cpu_report
    summary = pd.read_csv(paths["summary_csv"])
    assert summary["peak_cuda_memory_allocated_gb"].isna().all()
    assert summary["peak_device_gib"].isna().all()
    assert summary.loc[summary["status"] == "completed", "peak_rss_gib"].notna().all()
    grids = feasibility_matrix(trials)
    assert {g.memory_kind for g in grids if (g.statuses == "completed").any().any()} == {"RSS"}
    assert "RSS" in printed
    assert "GPU: no GPU (CPU run)" in paths["report_md"].read_text()


def test_feasibility_matrix_cells_hold_peaks_and_outcomes(gpu_report):
    _, trials, _, printed = gpu_report
    grids = {(g.stack, g.mode): g for g in feasibility_matrix(trials, budget_gib=16.0)}
    assert set(grids) == {(f, m) for f, m, *_ in GRID}
    trl = grids[("trl", "grpo")]
    assert list(trl.labels.index) == [2, 4, 8] and list(trl.labels.columns) == [1, 2]
    seeds = trials.query("stack == 'trl' and mode == 'grpo' and num_generations == 2 and batch_size == 1")
    assert trl.values.loc[2, 1] == pytest.approx(seeds["peak_device_gib"].max())  # worst seed
    assert trl.labels.loc[2, 1] == f"{seeds['peak_device_gib'].max():.2f} GiB"
    assert trl.labels.loc[4, 2] == "OOM" and trl.statuses.loc[4, 2] == "oom"
    assert trl.labels.loc[8, 2] == "pruned"
    assert trl.labels.loc[8, 1] == ""  # never planned
    assert not trl.over_budget(2, 1)  # every peak is under the 16 GiB card
    assert grids[("unsloth", "grpo")].labels.loc[8, 2] == "failed"
    assert grids[("unsloth", "gspo")].labels.loc[2, 1] == "unavailable"
    assert grids[("trl", "gspo")].labels.loc[2, 1] == "stopped"
    assert trl.memory_kind == "GPU"
    for word in ("OOM", "pruned", "failed", "unavailable", "stopped", "Budget 16 GiB: 0 completed"):
        assert word in printed


def test_a_budget_marks_the_completed_cells_over_it_as_not_fitting(tmp_path):
    trials = write_synthetic_sweep(tmp_path)
    assert infer_budget_gib(trials) == trials["gpu_total_gib"].min()
    lowest = trials.loc[trials["status"] == "completed", "peak_device_gib"].min()
    grids = feasibility_matrix(trials, budget_gib=lowest)
    completed = trials[trials["status"] == "completed"]
    over_cells = completed[completed["peak_device_gib"] > lowest].drop_duplicates(
        ["stack", "mode", "num_generations", "batch_size"]
    )
    marked = [(g.stack, g.mode, k, b) for g in grids for k in g.values.index for b in g.values.columns
              if g.over_budget(k, b)]  # fmt: skip
    assert sorted(marked) == sorted(
        zip(
            over_cells["stack"],
            over_cells["mode"],
            over_cells.num_generations,
            over_cells.batch_size,
            strict=True,
        )
    )
    (view,) = matrix_views(grids)
    cells = view.table.drop(columns="K × B").to_numpy().ravel()
    assert sum(str(c).endswith(": over budget") for c in cells) == len(marked)
    assert f"Budget {lowest:g} GiB: {len(marked)} completed configuration(s) over it" in view.caption
    # report.md, report.html and the terminal all mark them
    console = _console()
    paths = write_report(tmp_path, console=console, budget_gib=lowest)
    md, page = paths["report_md"].read_text(), paths["report_html"].read_text()
    matrix = md.split("## What fits: every configuration")[1].split("\n## ")[0]
    assert matrix.count(": over budget") == len(marked)
    assert page.count('<td class="over">') >= len(marked)
    assert console.export_text().count(": over budget") >= len(marked)
    emulated = trials.assign(effective_config='{"memory_budget_gib": 6.0, "seed": 1}')
    assert infer_budget_gib(emulated) == 6.0


def test_repeats_across_seeds_are_aggregated_fastest_first(gpu_report):
    out, trials, _, _ = gpu_report
    outputs = load_outputs(out)
    ranked = aggregate_repeats(outputs)
    completed = trials[trials["status"] == "completed"]
    assert len(ranked) == len(completed.drop_duplicates(["stack", "mode", "num_generations", "batch_size"]))
    assert ranked["tokens_median"].is_monotonic_decreasing
    repeat = ranked.query("stack == 'trl' and num_generations == 2 and batch_size == 1").iloc[0]
    assert repeat["seeds"] == "1, 2"
    pooled = outputs.steps[outputs.steps["trial_key"].isin(repeat["trial_keys"]) & ~outputs.steps["probe"]]
    assert repeat["tokens_median"] == pytest.approx(pooled["tokens_per_s"].median())
    assert repeat["tokens_p10"] <= repeat["tokens_median"] <= repeat["tokens_p90"]


def test_summary_metrics_for_mlflow(gpu_report, cpu_report):
    out, trials, _, _ = gpu_report
    key = trial_key("unsloth", "grpo", 4, 2, 1)
    row = trials.set_index("trial_key").loc[key].to_dict() | {"trial_key": key}
    steps = load_outputs(out).steps  # every trial's steps: the function picks this trial's
    metrics = summary_metrics(row, steps)
    mine = steps[steps["trial_key"] == key].sort_values("step")
    assert metrics["peak_device_gib"] == pytest.approx(row["peak_device_gib"])
    assert metrics["median_tokens_per_s"] == pytest.approx(mine.loc[~mine["probe"], "tokens_per_s"].median())
    assert metrics["final_reward"] == pytest.approx(mine["reward_mean"].iloc[-1])
    assert all(np.isfinite(v) for v in metrics.values())

    cpu_out, cpu_trials, _, _ = cpu_report
    cpu_row = cpu_trials.set_index("trial_key").loc[key].to_dict() | {"trial_key": key}
    cpu_metrics = summary_metrics(cpu_row, load_outputs(cpu_out).steps)
    assert "peak_device_gib" not in cpu_metrics and "peak_torch_allocated_gib" not in cpu_metrics
    assert cpu_metrics["peak_memory_gib"] == pytest.approx(cpu_row["peak_rss_gib"])

    never_ran = trials.set_index("trial_key").loc[trial_key("unsloth", "gspo", 2, 1, 1)].to_dict()
    assert "final_reward" not in summary_metrics(never_ran, pd.DataFrame())


def test_report_files_read_as_words_with_every_image_embedded(gpu_report):
    out, trials, paths, _ = gpu_report
    md = paths["report_md"].read_text()
    page = paths["report_html"].read_text()
    for words in ("out of memory", "skipped (pruned)", "failed", "unavailable", "stopped", "gib", "tokens/s"):
        assert words in md.lower() and words in page.lower()
    assert "RuntimeError: shape mismatch" in md  # the failed trial's detail, in one line
    for text in (md, page):
        assert '{"' not in text  # no raw JSON from versions / effective_config
    assert "torch 2.13.0" in md
    # Ranked table: completed configurations only, fastest first; only TRL grpo K=2 B=1 (two seeds, 8
    # measured cycles) has the cycles for an interval and a rank, the others (4 cycles) say so.
    ranked = aggregate_repeats(load_outputs(out))
    rows = re.findall(r"^\| (\d+|— \(too few cycles\)) \| (\w+) \| (\w+) \|", md, flags=re.M)
    assert len(rows) == len(ranked)
    assert [r[0] for r in rows] == [
        "1" if c >= MIN_CYCLES else "— (too few cycles)" for c in ranked["cycles"]
    ]
    assert list(ranked["cycles"]).count(8) == 1
    # Self-contained: every PNG is embedded, none linked.
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == len(paths["plots"])
    assert 'src="plots/' not in page and "http" not in page
    for data in embedded[:2]:
        assert Image.open(io.BytesIO(base64.b64decode(data))).format == "PNG"


def test_plots_are_valid_varied_images_for_each_kind(gpu_report):
    out, trials, paths, _ = gpu_report
    names = {p.name for p in paths["plots"]}
    assert {"throughput.png", "memory_vs_completions.png"} <= names
    assert sum(n.startswith("feasibility_") for n in names) == len(feasibility_matrix(trials))
    with_steps = trials.loc[trials["steps_completed"] > 0, "trial_key"]
    assert {f"curves_{k}.png" for k in with_steps} <= names
    for path in paths["plots"]:
        assert path.parent == out / "plots"
        assert_varied_png(path)


def test_all_failed_sweep_still_reports(tmp_path):
    grid = [
        ("trl", "grpo", 2, 1, 1, "failed", 2),
        ("trl", "grpo", 4, 1, 1, "oom", 0),
        ("unsloth", "grpo", 2, 1, 1, "unavailable", 0),
    ]
    write_synthetic_sweep(tmp_path, gpu=False, grid=grid)
    console = _console()
    paths = write_report(tmp_path, console=console)
    md = paths["report_md"].read_text()
    assert "No trial completed" in md
    assert "out of memory" in md and "unavailable" in md
    assert "throughput.png" not in {p.name for p in paths["plots"]}
    assert "OOM" in console.export_text()
    assert pd.read_csv(paths["summary_csv"])["status"].tolist() == ["failed", "oom", "unavailable"]
    for path in paths["plots"]:
        assert_varied_png(path)


def test_sweep_without_steps_or_trials(tmp_path):
    no_steps = tmp_path / "no_steps"
    write_synthetic_sweep(no_steps, grid=[("trl", "grpo", 2, 1, 1, "pruned", 0)])
    paths = write_report(no_steps, console=_console())
    assert "No trial recorded steps" in paths["report_md"].read_text()

    empty = tmp_path / "empty"
    write_synthetic_sweep(empty, grid=[])
    console = _console()
    paths = write_report(empty, console=console)
    assert "0 trials" in paths["report_md"].read_text()
    assert list(pd.read_csv(paths["summary_csv"]).columns[:10]) == ORIGINAL_TEN
    assert "No trials" in console.export_text()


def test_unreadable_step_file_becomes_a_warning(tmp_path):
    write_synthetic_sweep(tmp_path, grid=GRID[:2])
    broken = tmp_path / "steps" / "stack=trl" / "mode=grpo" / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    (broken.parent / ".tmp-inflight.parquet").write_bytes(b"partial")  # the atomic writer's temp file
    outputs = load_outputs(tmp_path)
    assert len(outputs.warnings) == 1 and "broken.parquet" in outputs.warnings[0]
    assert set(outputs.steps["trial_key"]) == {
        trial_key("trl", "grpo", 2, 1, 1),
        trial_key("trl", "grpo", 2, 1, 2),
    }


def test_missing_trials_parquet_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"output_dir: no trials.parquet in .*rlsweep run"):
        write_report(tmp_path, console=_console())


def test_settings_that_vary_keep_configurations_apart_and_show_in_words(tmp_path):
    grid = [("trl", "grpo", 2, 1, seed, "completed", 3) for seed in (1, 2)]
    trials = write_synthetic_sweep(tmp_path, grid=grid)
    # Same K and B, two models, two learning rates: four configurations, none of them repeats.
    rows = []
    for model in ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"):
        for seed, lr in ((1, 1e-4), (2, 2e-4)):
            source = trials[trials["seed"] == seed].iloc[0]
            key = f"{source['trial_key']}-{model[-15:-9]}-{lr:g}"
            config = f'{{"seed": {seed}, "learning_rate": {lr}, "trial_key": "{key}"}}'
            rows.append(source.to_dict() | {"model": model, "effective_config": config, "trial_key": key})
    varied = pd.DataFrame(rows).astype({"stack": "category", "model": "category"})
    varied.to_parquet(tmp_path / "trials.parquet")
    outputs = load_outputs(tmp_path)
    ranked = aggregate_repeats(outputs)
    assert len(ranked) == 4 and set(ranked["seeds"]) == {"1", "2"}
    assert set(ranked["other"]) == {"learning rate 0.0001", "learning rate 0.0002"}
    assert len(feasibility_matrix(varied)) == 2  # one grid per model, despite Categorical columns
    md = write_report(tmp_path, console=_console())["report_md"].read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Rank"))
    assert "| Model |" in header and "| Other settings |" in header
    assert "learning rate 0.0002" in md


def test_budget_read_from_the_trials_rows():
    rows = pd.DataFrame({"memory_budget_gib": [0.8, 0.8, None], "gpu_total_gib": [None, None, None]})
    assert infer_budget_gib(rows) == 0.8
    assert infer_budget_gib(pd.DataFrame({"gpu_total_gib": [80.0, 40.0]})) == 40.0


def test_configurations_that_fit_the_budget_rank_first_and_the_others_are_marked(gpu_report):
    out, trials, _, _ = gpu_report
    outputs = load_outputs(out)
    peaks = aggregate_repeats(outputs)["peak_gib"].sort_values()
    budget = float(peaks.iloc[len(peaks) // 2])  # about half the completed configurations fit
    ranked = aggregate_repeats(outputs, budget)
    fits = ranked["fits"].tolist()
    assert fits == sorted(fits, reverse=True) and True in fits and False in fits  # fitting ones first
    assert (ranked["fits"] == (ranked["peak_gib"] <= budget)).all()
    for part in (ranked[ranked["fits"]], ranked[~ranked["fits"].astype(bool)]):  # fastest first in each part
        assert part["tokens_median"].is_monotonic_decreasing
    md = write_report(out, console=_console(), budget_gib=budget)["report_md"].read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Rank"))
    assert f"| Fits {budget:g} GiB |" in header
    fastest = md.split("## Fastest configurations")[1].split("\n## ")[0]
    assert fastest.count("| no: over budget |") == (~ranked["fits"].astype(bool)).sum()


def test_a_cpu_run_names_no_gpu_rather_than_calling_the_cpu_a_gpu():
    from orchestrator.recording.sinks import device_info

    assert device_info({"device": "cpu", "gpu_name": None, "gpu_total_gib": None}) == (None, None)
    assert device_info({"device": "cuda", "gpu_name": "NVIDIA H100", "gpu_total_gib": 79.1}) == (
        "NVIDIA H100",
        79.1,
    )


def test_curves_join_the_steps_that_measured_a_figure_across_steps_that_did_not(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from orchestrator.views.report._plots import trial_curves

    # num_iterations 2: rewards and lengths are logged on generating steps only.
    steps = pd.DataFrame(
        {
            "step": [1, 2, 3, 4],
            "reward_mean": [0.1, np.nan, 0.3, np.nan],
            "reward_std": [0.05, np.nan, 0.05, np.nan],
            "loss": [0.5, 0.4, 0.3, 0.2],
            "probe": [False] * 4,
        }
    )
    drawn = {}
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        drawn["axes"] = fig.axes
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    trial_curves(pd.Series({"trial_key": "t", "status": "completed"}), steps, tmp_path / "curves.png")
    reward, loss = drawn["axes"][0], drawn["axes"][1]
    assert list(reward.lines[0].get_xdata()) == [1.0, 3.0]  # one line through both rewards
    assert list(loss.lines[0].get_xdata()) == [1.0, 2.0, 3.0, 4.0]


def test_the_report_opens_on_the_frontier_then_the_side_by_side_matrix(gpu_report):
    out, trials, paths, printed = gpu_report
    page = outline(paths["report_html"].read_text())
    columns = list(frontier_view(frontier(trials, 16.0)).columns)
    # the title, then the frontier's heading and its table before anything else
    assert page.items[0] == ("h1", "Sweep report: synthetic")
    assert page.items[1:3] == [("h2", "What fits: the feasibility frontier"), ("table", columns)]
    assert page.items[3:6] == [
        ("h2", "What fits: every configuration, the stacks side by side"),
        ("h3", "Qwen/Qwen2.5-0.5B-Instruct"),
        # one matrix per model: TRL and Unsloth next to each other within each mode
        ("table", ["K × B", "grpo · trl", "grpo · unsloth", "gspo · trl", "gspo · unsloth"]),
    ]
    assert page.items[6] == ("h2", "Unsloth against TRL")
    assert all(page.scrolling)  # every table scrolls inside its box when wider than the window
    md = paths["report_md"].read_text()
    assert md.index("## What fits: the feasibility frontier") < md.index(
        "| Stack | Mode | Largest that fits |"
    )
    assert md.index("| Stack | Mode | Largest that fits |") < md.index("## Fastest configurations")
    # the terminal opens on the same frontier table, then the matrix and the comparison
    assert printed.index("Feasibility frontier") < printed.index("grpo · unsloth") < printed.index("Report:")
    assert "Largest that fits" in printed and "Unsloth against TRL" in printed


def test_the_fastest_table_names_seeds_in_words_and_no_setting_that_follows_from_k_and_b(tmp_path):
    grid = [("trl", "grpo", 2, 1, 1, "completed", 3), ("trl", "grpo", 2, 1, 2, "completed", 3),
            ("trl", "grpo", 4, 1, 1, "completed", 3)]  # fmt: skip
    trials = write_synthetic_sweep(tmp_path, grid=grid)
    # What a trainer reads back: TRL's own names of K and B vary with them, and say nothing new.
    trials["effective_config"] = [
        json.dumps({"seed": int(t.seed), "num_generations": int(t.num_generations),
                    "completions_per_step": int(t.num_generations * t.batch_size), "learning_rate": 2e-4})
        for t in trials.itertuples()
    ]  # fmt: skip
    trials.to_parquet(tmp_path / "trials.parquet")
    ranked = aggregate_repeats(load_outputs(tmp_path))
    assert set(ranked["other"]) == {""}
    table = ranked_table(ranked).set_index("K")
    assert "Other settings" not in table.columns
    assert (table.loc[2, "Seeds"], table.loc[4, "Seeds"]) == ("2 seeds (1, 2)", "seed 1")
    assert "Peak memory, GPU (NVML), GiB" in table.columns


def test_a_timeout_has_its_words_label_and_colour_and_its_cells_are_styled_in_html_and_the_terminal():
    from orchestrator.views.report._html import HTML_STYLE, _status_css
    from orchestrator.views.report._terminal import _cell
    from orchestrator.words.outcome import (
        COMPLETED,
        STATUS_COLOURS,
        STATUS_LABELS,
        STATUS_WORDS,
        STATUSES,
        TIMEOUT,
    )

    assert all(s in STATUS_WORDS and s in STATUS_LABELS for s in STATUSES)
    assert set(STATUS_COLOURS) == set(STATUSES) - {COMPLETED}
    assert (STATUS_WORDS[TIMEOUT], STATUS_LABELS[TIMEOUT]) == ("timed out", "timeout")
    assert _status_css("timeout") == "timeout" and "td.timeout {" in HTML_STYLE
    assert _cell("timeout").style == "dark_orange"


def test_the_report_and_summary_csv_show_each_stacks_time_to_its_first_step_and_its_warmup(gpu_report):
    out, trials, paths, _ = gpu_report
    summary = pd.read_csv(paths["summary_csv"]).set_index("run_name")
    unsloth, oom = trial_key("unsloth", "grpo", 2, 1, 1), trial_key("trl", "grpo", 4, 2, 1)
    assert (summary.loc[unsloth, "time_to_first_step_s"], summary.loc[unsloth, "warmup_s"]) == (60.0, 50.0)
    # the oom trial ran one step: a time to it, no warm-up
    assert summary.loc[oom, "time_to_first_step_s"] == 20.0 and pd.isna(summary.loc[oom, "warmup_s"])
    ran = trials.loc[trials["steps_completed"] > 0]
    counts = ran["stack"].value_counts()
    for text in (paths["report_md"].read_text(), paths["report_html"].read_text()):
        assert (f"TRL first step done 20.0 s after the trainer started, 2.0 s of it warm-up "
                f"(median of {counts['trl']} trials)") in text  # fmt: skip
        assert (f"Unsloth first step done 60.0 s after the trainer started, 50.0 s of it warm-up "
                f"(median of {counts['unsloth']} trials)") in text  # fmt: skip
    row = trials.set_index("trial_key").loc[unsloth].to_dict() | {"trial_key": unsloth}
    metrics = summary_metrics(row, None)  # the MLflow run's figures
    assert (metrics["time_to_first_step_s"], metrics["warmup_s"]) == (60.0, 50.0)
