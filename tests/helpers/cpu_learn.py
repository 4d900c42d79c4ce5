"""The default CPU sweep (sweeps/cpu-learn.yaml) as its sweep records it: its real SmolLM2 run
(bench/data/learning) written through the sweep's own writers (steps files, trials.parquet) beside
the sweep file, for the report tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.words.outcome import COMPLETED, TrialResult
from tools.inputs.learning_traces import LEARNING_TRACES, load_learning_trace, trace_eval_before
from trainers.trial import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
TRACE = LEARNING_TRACES / "learning-smollm2-learning.parquet"
KEY = "trl-grpo-smollm2-k4-b2"
STEPS = 20  # cpu-learn's max_steps, as many as the trace holds


def record_cpu_learn(
    out: Path, kept: int = STEPS, status: str = COMPLETED, detail: str = "", wall_s: float | None = None
) -> None:
    """cpu-learn's one trial in `out` as its sweep records it, with the trace's first `kept` steps; its
    wall time the trace's, from its first step's start to its last step's end, unless given."""
    shutil.copy(ROOT / "sweeps" / "cpu-learn.yaml", out / "sweep.yaml")
    spec = TrialSpec(stack="trl", mode="grpo", model="smollm2", quantization="none", num_generations=4,
                     batch_size=2, max_steps=STEPS, probe_steps=0, max_prompt_length=64,
                     max_completion_length=8, learning_rate=3e-4, trial_key=KEY, sweep="cpu-learn")  # fmt: skip
    accuracy, prompts = trace_eval_before(TRACE)
    started = {"eval_before": {"eval_pass_at_1": accuracy, "eval_prompts": prompts}, "device": "cpu"}
    steps = load_learning_trace(TRACE)[:kept]
    if wall_s is None:
        wall_s = steps[-1]["t_end"] - steps[0]["t_start"] if steps else 0.0
    recorder = Recorder([spec], [StepsFiles(out), TrialsFile(TrialsTable(out / "trials.parquet"))])
    recorder.start(KEY)
    for row in steps:
        recorder.step(KEY, row)
    recorder.end(KEY, TrialResult(status=status, status_detail=detail, started=started, wall_s=wall_s))
