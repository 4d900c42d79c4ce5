"""`rlsweep trial` and the supervisor with the real trainer child (no Ray)."""

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from orchestrator.cli import main
from tests.helpers.trainer_child import gpu_visible

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
# The original benchmark's metrics.csv header, in its order.
ORIGINAL_METRICS_COLUMNS = [
    "step",
    "step_time_sec",
    "estimated_tokens_per_step",
    "estimated_tokens_per_sec",
    "cuda_memory_allocated_gb",
    "cuda_memory_reserved_gb",
    "cuda_peak_memory_allocated_gb",
]


def test_trial_writes_steps_metrics_and_trial_json(tmp_path, capsys):
    args = "--stack trl --mode gspo --model tiny --max-steps 2 --num-generations 2 --batch-size 1"
    args += " --max-completion-length 8 --max-prompt-length 96 --quantization none --lora-r 4"
    args += " --probe-kind decode"  # both steps are probes: decoded, so each has its throughput
    code = main(["trial", *args.split(), "--output-dir", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "step 1/2" in printed and "step 2/2" in printed
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    assert len(steps) == 2 and (steps.rss_peak_gib > 0).all()
    tokens = steps.prompt_tokens + steps.completion_tokens
    assert steps.tokens_per_s.tolist() == pytest.approx((tokens / steps.step_s).tolist())
    trial = json.loads((tmp_path / "trial.json").read_text())
    csv = pd.read_csv(tmp_path / "metrics.csv")
    assert list(csv.columns[:7]) == ORIGINAL_METRICS_COLUMNS
    # The original's estimate: (max prompt + max completion length) x K x per_device_train_batch_size.
    config, effective = trial["config"], trial["effective_config"]
    estimate = (config["max_prompt_length"] + config["max_completion_length"]) * config["num_generations"]
    estimate *= effective["per_device_train_batch_size"]
    assert estimate == (96 + 8) * 2 * 2
    assert (csv.estimated_tokens_per_step == estimate).all()
    assert csv.estimated_tokens_per_sec.to_numpy() == pytest.approx(estimate / csv.step_time_sec.to_numpy())
    assert csv.step_time_sec.tolist() == pytest.approx(steps.step_s.tolist())
    for column in ("cuda_memory_allocated_gb", "cuda_peak_memory_allocated_gb"):
        assert csv[column].isna().all(), "not measurable on CPU: empty, never 0"
    assert trial["config"]["lora_r"] == 4 and trial["effective_config"]["lora_r"] == 4
    assert trial["outcome"]["status"] == "completed" and trial["outcome"]["versions"]["torch"]


def test_invalid_trial_refused_before_anything_starts(tmp_path, capsys):
    code = main(["trial", "--num-generations", "3", "--batch-size", "1", "--micro-batch-size", "2",
                 "--model", "nosuch", "--output-dir", str(tmp_path / "t")])  # fmt: skip
    assert code == 2
    printed = capsys.readouterr().err
    assert "micro_batch_size" in printed and "model" in printed
    assert not (tmp_path / "t").exists()


@pytest.mark.skipif(gpu_visible(), reason="with a GPU, UNSLOTH_DISABLE_CPU_FALLBACK does not stop Unsloth")
def test_trial_of_an_unsloth_that_cannot_start_writes_an_unavailable_trial_json(
    tmp_path, monkeypatch, capsys
):
    # On a host without GPU this makes `import unsloth` raise instead of falling back to CPU.
    monkeypatch.setenv("UNSLOTH_DISABLE_CPU_FALLBACK", "1")
    code = main(["trial", "--stack", "unsloth", "--model", "tiny", "--max-steps", "2",
                 "--output-dir", str(tmp_path)])  # fmt: skip
    assert code == 1
    outcome = json.loads((tmp_path / "trial.json").read_text())["outcome"]
    assert outcome["status"] == "unavailable"
    assert outcome["status_detail"].startswith("unsloth failed to start: NotImplementedError: ")
    assert outcome["status_detail"].endswith(
        "; unset UNSLOTH_DISABLE_CPU_FALLBACK to let Unsloth train on CPU, or run on a host with a GPU"
    )
    assert outcome["steps_completed"] == 0
    # no step ran: not judged and no throughput, null, never 0
    assert outcome["training_verdict"] is None and outcome["median_tokens_per_s"] is None
    assert "unavailable: unsloth failed to start" in capsys.readouterr().err


def test_no_trainer_survives_a_sigkill_of_its_supervisor(tmp_path):
    script = f"""
import sys; sys.path.insert(0, {str(ROOT)!r})
from orchestrator.running.supervisor import run_trial
from trainers.trial import TrialSpec
run_trial(TrialSpec(model="tiny", max_steps=500, num_generations=2, batch_size=1, max_prompt_length=96,
                    max_completion_length=8, quantization="none", trial_key="k"), trial_dir={str(tmp_path)!r})
"""
    driver = subprocess.Popen([sys.executable, "-c", script])
    pid_file, events = tmp_path / "trainer.pid", tmp_path / "events.jsonl"
    deadline = time.monotonic() + 120
    while not (events.exists() and '"step"' in events.read_text()) and time.monotonic() < deadline:
        time.sleep(0.3)
    trainer = int(pid_file.read_text())
    assert psutil.pid_exists(trainer), "the trainer should be training now"
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(trainer).wait(timeout=30)
    assert not psutil.pid_exists(trainer)


def test_median_throughput_is_the_median_of_whole_generation_cycles(tmp_path):
    # num_iterations 2, as the shipped sweeps: every other step reuses the completions of the one before.
    args = "--stack trl --model tiny --max-steps 6 --num-generations 2 --batch-size 2 --num-iterations 2"
    args += " --max-completion-length 8 --quantization none --lora-r 4 --probe-steps 2 --probe-kind decode"
    assert main(["trial", *args.split(), "--output-dir", str(tmp_path)]) == 0
    steps = pd.read_parquet(tmp_path / "steps.parquet").sort_values("step")
    assert steps["generated"].tolist() == [True, False] * 3
    # Independently: a cycle starts at a step that generated; its figure is its tokens over all its time.
    steps["cycle"] = steps["generated"].cumsum()
    cycles = steps.groupby("cycle").agg(
        tokens=("prompt_tokens", "sum"), completion=("completion_tokens", "sum"), seconds=("step_s", "sum"),
        probe=("probe", "first"),
    )  # fmt: skip
    figures = (cycles.tokens + cycles.completion) / cycles.seconds
    outcome = json.loads((tmp_path / "trial.json").read_text())["outcome"]
    assert outcome["median_tokens_per_s"] == pytest.approx(figures[~cycles.probe].median(), rel=1e-9)
    assert steps["tokens_per_s"].notna().tolist() == [False, True] * 3  # on the step closing each cycle
