"""gpu-check's table from synthetic trial results (no GPU here), and its refusal without a GPU."""

import argparse
import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli import main
from orchestrator.cli.gpu_check import build_table, parse_modes
from orchestrator.judging.intervals import ratio_interval
from orchestrator.running import gpu_check, supervisor
from orchestrator.running.gpu_check import check_specs, markdown_table, notes, ratios, summarize
from tests.helpers.stacks import registered
from trainers.trial import TrialSpec

FAKE = [sys.executable, str(Path(__file__).parents[2] / "tools" / "inputs" / "fake_trainer.py")]


def result(step_s, tokens_per_s, torch_reserved, nvml_peak, status="completed", detail=""):
    steps = [
        {
            "step": i + 1,
            "step_s": s,
            "gen_s": s / 2,
            "tokens_per_s": t,
            "torch_peak_reserved_gib": r,
            "torch_peak_allocated_gib": r - 0.5,
            "device_peak_gib": None,
        }
        for i, (s, t, r) in enumerate(zip(step_s, tokens_per_s, torch_reserved, strict=True))
    ]
    return {
        "status": status,
        "status_detail": detail,
        "steps": steps,
        "peak": {"device_peak_gib": nvml_peak},
        "started": {"gpu_name": "NVIDIA Test GPU"},
    }


def test_summary_takes_peaks_over_all_steps_and_medians_after_warmup():
    row = summarize("trl", "grpo", result([9.0, 2.0, 3.0, 4.0], [10, 300, 200, 100], [5, 6, 7, 6.5], 8.0))
    assert row.step_s == 3.0 and row.tokens_per_s == 200  # step 1 (9 s, warm-up) left out
    assert row.torch_peak_reserved_gib == 7 and row.torch_peak_allocated_gib == 6.5
    assert row.device_peak_gib == 8.0 and row.steps == 4 and row.gpu_name == "NVIDIA Test GPU"


def test_unmeasured_values_stay_missing_not_zero():
    row = summarize("unsloth", "gspo", {"status": "unavailable", "status_detail": "no unsloth", "steps": []})
    assert row.steps == 0
    assert row.device_peak_gib is None and row.tokens_per_s is None and row.step_s is None


def test_table_has_a_row_per_stack_and_mode_with_ratios_and_reasons():
    rows = [
        summarize("trl", "grpo", result([5, 2, 2], [10, 100, 100], [9, 10, 10], 12.0)),
        summarize("unsloth", "grpo", result([5, 1, 1], [10, 250, 250], [3, 4, 4], 6.0)),
        summarize("trl", "gspo", result([5, 2, 2], [10, 100, 100], [9, 10, 10], 12.0)),
        summarize("unsloth", "gspo", {"status": "oom", "status_detail": "CUDA out of\nmemory", "steps": []}),
    ]
    too_few = "too few cycles to compare (2 and 2 cycles)"  # 3 steps, the first warm-up
    assert ratios(rows)[("unsloth", "grpo")] == {
        "memory": pytest.approx(0.5),
        "speed": pytest.approx(2.5),
        "speed_words": too_few,
        # one peak a side, each may move by 2.5% either way: 6 / 12 within 6*0.975/(12*1.025)..6*1.025/(12*0.975)
        "memory_words": f"0.50× (spread {6 * 0.975 / (12 * 1.025):.2f}–{6 * 1.025 / (12 * 0.975):.2f}×)",
    }
    assert ratios(rows)[("unsloth", "gspo")] == {
        "memory": None,
        "speed": None,
        "speed_words": "—",
        "memory_words": "—",
    }

    console = Console(record=True, width=250)
    console.print(build_table(rows))
    text = console.export_text()
    assert "NVIDIA Test GPU" in text
    assert (
        "peak memory 0.50× (spread 0.48–0.53×)" in text and f"tokens/s {too_few}" in text
    )  # never a bare ratio
    assert "unsloth gspo: oom: CUDA out of memory" in text
    assert "gspo: no Unsloth/TRL ratio" in text
    lines = [line for line in text.splitlines() if line.startswith("│")]
    assert len(lines) == 4
    unsloth_grpo = next(line for line in lines if "unsloth" in line and "grpo" in line)
    assert "6.00" in unsloth_grpo and "250.0" in unsloth_grpo

    md = markdown_table(rows)
    assert md.count("\n| ") == 5  # header + 4 rows
    assert "| unsloth | gspo | oom | 0 | - |" in md


def test_the_check_is_the_fixed_comparison_of_the_stacks_in_grpo():
    specs = check_specs(gpu_check.Path("/tmp/x"))
    assert sorted((s.stack, s.mode) for s in specs) == [
        ("liger", "grpo"), ("trl", "grpo"), ("unsloth", "grpo")
    ]  # fmt: skip
    for s in specs:
        assert s.model == "random:Qwen/Qwen2.5-1.5B-Instruct" and s.quantization == "nf4"
        assert (s.num_generations, s.batch_size, s.max_steps, s.num_iterations) == (4, 2, 5, 1)
        assert s.problems() == []


def test_asking_for_both_modes_runs_them_off_policy_where_they_differ():
    specs = check_specs(gpu_check.Path("/tmp/x"), parse_modes("grpo,gspo"))
    assert sorted((s.stack, s.mode) for s in specs) == [
        ("liger", "grpo"), ("liger", "gspo"), ("trl", "grpo"), ("trl", "gspo"), ("unsloth", "grpo"),
        ("unsloth", "gspo"),
    ]  # fmt: skip
    assert {s.num_iterations for s in specs} == {2}
    assert all(s.problems() == [] for s in specs)


@pytest.mark.parametrize("text", ["grpo,ppo", "", " , "])
def test_a_mode_that_is_not_grpo_or_gspo_is_refused_with_the_choices(text):
    with pytest.raises(argparse.ArgumentTypeError, match="one of grpo, gspo.*--modes grpo,gspo"):
        parse_modes(text)


@pytest.mark.skipif(gpu_check.gpu_problem() is None, reason="a GPU is present: main() would run the check")
def test_without_a_gpu_main_says_so_and_runs_nothing(tmp_path, capsys):
    assert main(["gpu-check", "--output-dir", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out
    assert "no NVIDIA GPU found" in out and "make sweep" in out
    assert not (tmp_path / "out").exists()


def test_the_cli_verb_takes_its_options_from_the_command_line(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "gpu-check", "--output-dir", str(tmp_path / "x"), "--timeout", "5"],
        capture_output=True, text=True, cwd=root, timeout=120,
    )  # fmt: skip
    assert "unrecognized arguments" not in run.stderr
    # No GPU here: the check refuses with its reason and writes nothing.
    assert run.returncode == 2 and "NVIDIA GPU" in run.stdout, run.stdout + run.stderr
    assert not (tmp_path / "x").exists()
    help_text = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "gpu-check", "--help"],
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout
    assert "--output-dir" in help_text and "--timeout" in help_text and "outputs/gpu-" in help_text


def test_a_registered_third_stack_is_checked_and_compared_with_trl():
    with registered():
        specs = check_specs(Path("/tmp/x"))
        rows = [
            summarize("trl", "grpo", result([5, 2, 2], [10, 100, 100], [9, 10, 10], 12.0)),
            summarize("third", "grpo", result([5, 4, 4], [10, 40, 60], [9, 10, 10], 18.0)),
        ]
        lines = notes(rows)
    assert [(s.stack, s.mode) for s in specs][-1] == ("third", "grpo")
    assert len(specs) == 4  # trl, unsloth, liger and the stub
    # third over trl: NVML peak 18 / 12, median tokens/s after warm-up 50 / 100
    assert ratios(rows) == {
        ("third", "grpo"): {
            "memory": pytest.approx(1.5),
            "speed": pytest.approx(0.5),
            "speed_words": "too few cycles to compare (2 and 2 cycles)",
            "memory_words": f"1.50× (spread {18 * 0.975 / (12 * 1.025):.2f}–{18 * 1.025 / (12 * 0.975):.2f}×)",
        }
    }
    assert (
        "grpo: Third/TRL peak memory 1.50× (spread 1.43–1.58×), tokens/s too few cycles to compare "
        "(2 and 2 cycles)" in lines
    )


def test_a_check_with_enough_steps_states_the_speed_ratio_with_its_interval():
    base = [100.0, 98.0, 103.0, 101.0, 99.0, 102.0, 97.0, 100.5, 101.5]
    fast = [2 * t for t in base]
    rows = [
        summarize("trl", "grpo", result([5] + [2] * 9, [10, *base], [9] * 10, 12.0)),
        summarize("unsloth", "grpo", result([5] + [1] * 9, [10, *fast], [4] * 10, 6.0)),
    ]
    expected = ratio_interval([fast], [base])
    assert expected.low < 2.0 < expected.high  # every cycle exactly twice as fast: the interval holds 2
    assert (
        ratios(rows)[("unsloth", "grpo")]["speed_words"]
        == f"2.00× (95% CI {expected.low:.2f}–{expected.high:.2f}×)"
    )


def test_a_trial_cut_at_its_time_limit_is_a_timeout_row_and_each_trial_leaves_the_rows_so_far_on_disk(
    tmp_path, monkeypatch
):
    real_run_trial = supervisor.run_trial
    on_disk = []  # results.json's statuses as each trial starts

    def with_fake_trainer(spec, **kwargs):
        saved = tmp_path / "results.json"
        on_disk.append([r["status"] for r in json.loads(saved.read_text())] if saved.exists() else None)
        return real_run_trial(spec, trainer_cmd=FAKE, **kwargs)

    monkeypatch.setattr(supervisor, "run_trial", with_fake_trainer)
    fakes = {"grpo": {"fake": "finish"}, "gspo": {"fake": "stall", "at_step": 3}}
    specs = [
        TrialSpec(mode=mode, max_steps=5, trial_key=mode, output_dir=str(tmp_path / mode), task_args=fake)
        for mode, fake in fakes.items()
    ]
    rows = gpu_check.run_check(specs, 5, Console(file=io.StringIO()), tmp_path)

    assert on_disk == [None, ["completed"]]  # the first trial's row was on disk before the second ran
    timed_out = rows[1]
    assert (timed_out.status, timed_out.steps) == ("timeout", 3)
    assert timed_out.tokens_per_s == 101.0  # median of steps 2 and 3 (102, 100): step 1 is warm-up
    assert "with 3 of 5 steps measured (kept)" in timed_out.detail
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [(r["mode"], r["status"], r["steps"]) for r in saved] == [
        ("grpo", "completed", 5),
        ("gspo", "timeout", 3),
    ]
    assert "| trl | gspo | timeout | 3 | - | - | - | 101.0 |" in (tmp_path / "results.md").read_text()


def test_the_table_shows_when_each_trials_first_step_ended_and_its_warmup():
    timed = result([54.0, 2.1, 1.9, 2.0], [10, 300, 310, 305], [5, 6, 6, 6], 8.0)
    timed["started_at"] = 1000.0
    timed["steps"][0]["t_end"] = 1097.0  # imports and model load, then a 54 s first step that compiled
    row = summarize("unsloth", "grpo", timed)
    assert (row.time_to_first_step_s, row.warmup_s) == (pytest.approx(97.0), pytest.approx(52.0))
    md = markdown_table([row])
    assert "| first step at s | warm-up s |" in md and "| 97.0 | 52.0 |" in md
    unmeasured = summarize("unsloth", "gspo", {"status": "oom", "status_detail": "x", "steps": []})
    assert (unmeasured.time_to_first_step_s, unmeasured.warmup_s) == (None, None)
