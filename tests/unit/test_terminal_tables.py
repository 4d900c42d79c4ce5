"""Tables fit the terminal at 80 and 120 columns (COLUMNS honoured when piped), and their rows stay
distinguishable: names shortened to what tells rows apart, a column the same in every row said once
above the table, cells that wrap rather than being cut (orchestrator/views/tables.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli import _common, main
from orchestrator.views.tables import Column, lay_out

ROOT = Path(__file__).resolve().parents[2]
FRONTIER = ROOT / "sweeps" / "frontier-16gb.yaml"
BOX = "│┃━─┏┗┡└"


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(ch in line for ch in BOX)]


def column_of(text: str, index: int) -> list[str]:
    """Column `index` of a rich table, a row's cell whole where it wrapped onto several lines (a row
    starts where the first cell holds something)."""
    values: list[str] = []
    for line in text.splitlines():
        if "│" not in line:
            continue
        cells = [c.strip() for c in line.strip()[1:-1].split("│")]
        if cells[0]:
            values.append("")
        if values and index < len(cells):
            values[-1] += cells[index]
    return values


def rows_of(text: str) -> list[list[str]]:
    """Each body row's cells of a rich table (lines with a '│' and a first cell that is a number)."""
    cells = [[c.strip() for c in line.strip()[1:-1].split("│")] for line in text.splitlines() if "│" in line]
    return [c for c in cells if c and c[0].isdigit()]


@pytest.fixture
def width(monkeypatch):
    """Set the verbs' console to a terminal's width."""

    def set_width(columns: int) -> None:
        monkeypatch.setattr(_common.out, "width", columns)

    return set_width


@pytest.mark.parametrize("columns", [80, 120])
def test_rlsweep_models_piped_with_columns_set_fits_and_names_every_model_whole(columns):
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "models"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = table_lines(done.stdout)
    assert lines and max(map(len, lines)) <= columns
    assert "…" not in done.stdout
    for name in ("gemma-3-1b-it", "gemma-3-4b-it", "gemma-3-12b-it", "DeepSeek-R1-Distill-Qwen-7B"):
        assert sum(name in line for line in lines) == 1


def test_piped_output_without_columns_keeps_its_wide_default():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    code = "from orchestrator.cli._common import out; print(out.width)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "150"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env, "COLUMNS": "93"}, capture_output=True, text=True
    )
    assert done.stdout.strip() == "93"


@pytest.mark.parametrize("columns", [80, 120])
def test_the_frontier_dry_run_shows_its_varying_axes_and_says_the_shared_model_once(
    columns, width, capsys, monkeypatch
):
    import orchestrator.cli._plan as plan

    monkeypatch.setattr(plan, "detected_gpu", lambda: None)
    width(columns)
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    said = capsys.readouterr().out
    assert max(map(len, table_lines(said))) <= columns
    assert "same in every row: mode grpo, model random:Qwen/Qwen2.5-3B-Instruct, steps 1" in said
    assert not any("Qwen" in line for line in table_lines(said))
    header = next(line for line in said.splitlines() if "┃" in line and "length" in line)
    assert all(word in header for word in ("stack", "K", "B", "length"))
    rows = rows_of(said)
    assert len(rows) == 50  # the first 40 and the last 10 of 168
    headers = [c.strip() for c in header.strip()[1:-1].split("┃")]
    at = [headers.index(h) for h in ("stack", "K", "B", "length")]
    axes = [tuple(r[i] for i in at) for r in rows]
    assert len(set(axes)) == len(axes)  # rows told apart by their axes, not by a hash


def test_the_trial_key_is_shown_where_the_width_allows_and_said_left_out_where_not(width, capsys):
    width(80)
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    narrow = capsys.readouterr().out
    assert "trl-grpo-rand" not in narrow and "(trial left out to fit 80 columns" in narrow
    width(180)  # the plan's memory answers (verdict, peak, interval) take room: a wide terminal
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    wide = capsys.readouterr().out
    assert "trl-grpo-rand-qwen2.5-3b-k2-b1-" in wide and "left out" not in wide


@pytest.mark.parametrize("columns", [80, 120])
def test_the_fit_map_of_two_models_of_one_organisation_fits_and_cuts_no_cell(columns, width, capsys):
    width(columns)
    models = ["meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"]
    argv = ["fitmap", "--card", "16gb", "--model", models[0], "--model", models[1], "--no-plot"]
    if columns == 120:  # two stacks' columns leave room for whole names at 120 (three fold them)
        argv += ["--stack", "trl,unsloth"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    lines = table_lines(said)
    assert max(map(len, lines)) <= columns and "…" not in "\n".join(lines)
    if columns == 120:  # names shortened to what tells them apart, each on its rows whole
        assert sum("Llama-3.2-3B-Instruct" in line for line in lines) == 12
        assert sum("Llama-3.1-8B-Instruct" in line for line in lines) == 12
        assert "meta-llama/" not in "\n".join(lines)


def test_the_reports_learning_table_at_80_columns_keeps_every_trial_whole(tmp_path):
    from orchestrator.views.report import write_report
    from tests.helpers.synthetic_sweep import with_held_out_accuracy, write_synthetic_sweep

    write_synthetic_sweep(tmp_path)
    with_held_out_accuracy(tmp_path)
    console = Console(record=True, width=80)
    write_report(tmp_path, console=console)
    text = console.export_text()
    learning = text[text.index("Which configuration learns") : text.index("Training: ")]
    assert max(map(len, table_lines(learning))) <= 80 and "…" not in learning
    trials = column_of(learning, 1)
    assert {"trl-grpo-k2-b1-s1", "trl-grpo-k2-b1-s2", "unsloth-grpo-k4-b2-s1"} <= set(trials)
    assert len(set(trials)) == len(trials)


def test_a_table_says_a_shared_column_once_and_shortens_names_only_where_they_do_not_fit():
    columns = [Column("model", name=True), Column("K", right=True), Column("mode")]
    rows = [["random:Qwen/Qwen3-1.7B", "2", "grpo"], ["random:Qwen/Qwen3-4B", "4", "grpo"]]
    wide = lay_out(Console(width=120), columns, rows)
    assert wide.same_line() == "same in every row: mode grpo"
    assert [c.header for c in wide.table.columns] == ["model", "K"]
    assert list(wide.table.columns[0].cells) == ["random:Qwen/Qwen3-1.7B", "random:Qwen/Qwen3-4B"]
    narrow = lay_out(Console(width=20), columns, rows)
    assert list(narrow.table.columns[0].cells) == ["Qwen3-1.7B", "Qwen3-4B"]
    one = lay_out(Console(width=20), columns, rows[:1])
    assert one.same == [] and len(one.table.columns) == 3


@pytest.mark.parametrize("columns", [80, 120])
def test_predict_at_80_and_120_columns_tells_its_trials_apart_by_their_settings(columns, width, capsys):
    width(columns)
    sweep = str(ROOT / "sweeps" / "workstation-16gb.yaml")
    assert main(["predict", sweep, "--card", "24gb"]) == 0
    said = capsys.readouterr().out
    assert max(map(len, table_lines(said))) <= columns and "…" not in "\n".join(table_lines(said))
    assert "same in every row: model Qwen/Qwen2.5-3B-Instruct" in said
    header = next(line for line in said.splitlines() if "┃" in line and "stack" in line)
    assert all(word in header for word in ("mode", "K", "B", "GiB", "interval", "verdict"))


def test_a_knob_the_listed_trials_share_but_the_plan_varies_stays_a_column(tmp_path, width, capsys):
    from orchestrator.cli._plan import print_plan
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan

    sweep = tmp_path / "mid.yaml"
    seeds = ", ".join(str(s) for s in range(60))
    sweep.write_text(
        f"name: mid\ntask: arithmetic\ngrid:\n  seed: [{seeds}]\n  lora_r: [8, 16]\n"
        "fixed: {model: tiny, max_steps: 2}\n"
    )
    trials = plan(load_sweep(sweep)).trials
    eights = [t for t in trials if t.lora_r == 8]
    sixteens = [t for t in trials if t.lora_r == 16]
    # lora_r 16 only between the first 40 and the last 10 listed
    width(120)
    print_plan([*eights[:45], *sixteens, *eights[45:]], tmp_path / "out", None, ["seed", "lora_r"])
    said = capsys.readouterr().out
    same = next(line for line in said.splitlines() if line.startswith("same in every row"))
    assert "lora_r" not in same and "model tiny" in same
    assert "lora_r" in next(line for line in said.splitlines() if "┃" in line and "seed" in line)
