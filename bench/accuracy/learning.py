"""GRPO on a real pretrained model on CPU: does it learn, and does each training verdict read right?

    python -m bench learning [--set runs=learning,diverged,no_signal,truncated] [--set steps=30]
        [--set record=true] [--set out=DIR] [--set from_out=true]

(steps: of the learning run, the others take 8; timeout_s: each trial's wall-clock limit; out: default a
scratch folder; from_out: judge and record the runs already in `out`)

Trains SmolLM2-135M-Instruct (model `smollm2`, the GGUF `make setup` installs) with GRPO and LoRA through
`rlsweep trial`, the path a user runs, one trial per run below, and prints each trial's verdict with its
detail, its reward per step, and held-out accuracy before training and at each evaluation (the trial's
eval_before_* and the steps' eval_pass_at_1, 64 one-digit sums):

  learning   one-digit sums, the answer read as the last integer, rewarded for the right answer (1.0) and
             its digits (0.5), completions of up to 8 tokens: the run that should learn (sweeps/cpu-learn.yaml's
             settings). Target: held-out accuracy +15 points or more, its 95% interval excluding zero,
             within 100 steps.
  diverged   the same at a learning rate far too high (1.0)
  no_signal  four-digit sums the model never gets right: no reward variance in any group
  truncated  one-digit sums cut at 1 token, scored by digit overlap (rewards: digits), which still varies

With `record`, a run whose verdict is the one it stands for has its steps written to
bench/data/learning/<verdict>-smollm2-<run>.parquet (and its before-training evaluation beside it,
.json): the real traces tests/unit/test_verdict.py judges. A run that reads another verdict is reported,
never recorded.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from bench import ROOT, Context, benchmark
from tools.inputs.learning_traces import LEARNING_TRACES

SUMS = {
    "operand_digits": 1,
    "answer_rule": "last",
    "prompt_style": "question",
    "num_samples": 512,
    "num_eval": 64,
}
COMMON = ["--stack", "trl", "--mode", "grpo", "--model", "smollm2", "--quantization", "none",
          "--task", "arithmetic", "--max-prompt-length", "64", "--lora-r", "16", "--lora-alpha", "32",
          "--num-threads", "2", "--probe-steps", "0"]  # fmt: skip
# run -> (the verdict it stands for, its own arguments)
RUNS = {
    "learning": ("learning", {"task_args": SUMS | {"rewards": {"accuracy": 1.0, "digits": 0.5}}, "args": [
                 "--num-generations", "4", "--batch-size", "2", "--max-completion-length", "8",
                 "--learning-rate", "3e-4", "--eval-every", "10", "--eval-samples", "64"]}),
    "diverged": ("diverged", {"task_args": SUMS, "args": ["--num-generations", "4", "--batch-size", "2",
                 "--max-completion-length", "16", "--learning-rate", "1.0"]}),
    "no_signal": ("no_signal", {"task_args": SUMS | {"operand_digits": 4}, "args": ["--num-generations", "4",
                  "--batch-size", "2", "--max-completion-length", "16", "--learning-rate", "3e-4"]}),
    "truncated": ("truncated", {"task_args": SUMS | {"rewards": {"digits": 1.0}}, "args": ["--num-generations",
                  "4", "--batch-size", "2", "--max-completion-length", "1", "--learning-rate", "1e-4"]}),
}  # fmt: skip


def run(ctx: Context, name: str, steps: int, out: Path, timeout_s: int) -> dict:
    """One `rlsweep trial` of RUNS[name]; its trial.json outcome and its steps."""
    _, how = RUNS[name]
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    args = ["trial", *COMMON, *how["args"], "--max-steps", str(steps),
            "--task-args", json.dumps(how["task_args"]), "--timeout-s", str(timeout_s), "--output-dir", str(folder)]  # fmt: skip
    started = time.monotonic()
    ctx.rlsweep(*args, quiet=False)
    return finished(folder) | {"wall_s": time.monotonic() - started}


def finished(folder: Path) -> dict:
    """A run already in its folder: its trial.json outcome and its steps (wall time: the trial's)."""
    import pyarrow.parquet as pq

    outcome = json.loads((folder / "trial.json").read_text())["outcome"]
    rows = pq.read_table(folder / "steps.parquet").to_pylist()
    return {"outcome": outcome, "rows": sorted(rows, key=lambda r: r["step"]), "wall_s": outcome["wall_s"],
            "steps_file": folder / "steps.parquet"}  # fmt: skip


def show(name: str, result: dict) -> None:
    o, rows = result["outcome"], result["rows"]
    print(f"\n== {name}: {o['status']} ({o['status_detail']}), {len(rows)} steps in {result['wall_s']:.0f} s")
    print(f"   verdict {o.get('training_verdict')}: {o.get('training_verdict_detail')}")
    rewards = " ".join(f"{r['reward_mean']:.2f}" if r.get("reward_mean") is not None else "-" for r in rows)
    print(f"   reward by step: {rewards}")
    evals = [(r["step"], r["eval_pass_at_1"]) for r in rows if r.get("eval_pass_at_1") is not None]
    before = o.get("eval_before_pass_at_1")
    print(f"   held-out pass@1: before {before if before is None else f'{before:.3f}'}; "
          + ", ".join(f"step {s} {p:.3f}" for s, p in evals))  # fmt: skip
    times = [r["step_s"] for r in rows if r.get("step_s") is not None]
    if times:
        print(f"   step_s median {sorted(times)[len(times) // 2]:.1f} s, time to first step "
              f"{o.get('time_to_first_step_s') or float('nan'):.0f} s")  # fmt: skip


def record(name: str, result: dict) -> Path | None:
    """The run's steps as a fixture, when the verdict code as it is now reads the verdict the run stands
    for (judged again here: the trial's own verdict is the code's of when it ran)."""
    from orchestrator.judging.verdict import judge

    verdict, _ = RUNS[name]
    o = result["outcome"]
    now = judge(result["rows"], eval_before=(o.get("eval_before_pass_at_1"), o.get("eval_before_prompts")))
    if now.verdict != verdict:
        print(f"   not recorded: it reads {now.verdict}, not {verdict}")
        return None
    target = LEARNING_TRACES / f"{verdict}-smollm2-{name.replace('_', '')}.parquet"
    shutil.copyfile(result["steps_file"], target)
    before = {
        "eval_before_pass_at_1": o.get("eval_before_pass_at_1"),
        "eval_before_prompts": o.get("eval_before_prompts"),
    }
    target.with_suffix(".json").write_text(json.dumps(before, indent=1) + "\n")
    print(f"   recorded {target.relative_to(ROOT)}")
    return target


@benchmark(
    rules={"runs": (lambda v: set(v.split(",")) <= set(RUNS), "runs of " + ", ".join(RUNS))},
    tags=("verdict", "trial"),
    needs="cpu",
    params={
        "runs": ",".join(RUNS),
        "steps": 30,
        "timeout_s": 3600,
        "record": False,
        "out": "",
        "from_out": False,
    },
    goals={"verdicts_wrong": "<= 0"},
)
def learning(ctx: Context) -> dict:
    args = ctx.args
    out = Path(args.out) if args.out else ctx.scratch
    metrics: dict = {"verdicts_wrong": 0}
    for name in args.runs.split(","):
        if args.from_out:
            result = finished(out / name)
        else:
            result = run(ctx, name, args.steps if name == "learning" else 8, out, args.timeout_s)
        show(name, result)
        verdict = result["outcome"].get("training_verdict")
        metrics[f"{name} verdict"] = verdict
        metrics["verdicts_wrong"] += verdict != RUNS[name][0]
        if args.record:
            record(name, result)
    return metrics
