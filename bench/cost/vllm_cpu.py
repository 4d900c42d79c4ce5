"""Tokens/s of one TRL trial generating with vLLM (colocate, vLLM's CPU build) against the same trial
generating through transformers, on this host's CPU.

    python -m bench vllm_cpu [--set steps=4] [--set completion=64] [--set k=8]

Runs the trainer child (`python -m trainers spec.json`) twice on `tiny`, one thread each, once per
generation; reports each run's median tokens/s over its generation cycles after the first (engine
warm-up, first kernels), its median gen_s and train_s, and the ratio vLLM / transformers. One run of
each: a CPU figure on a shared 2-core host, which says nothing of a GPU's ratio (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench import ROOT, Context, benchmark
from trainers.events import read_events
from trainers.trial import TrialSpec


def run(generation: str, args, scratch: Path) -> dict:
    extra = {"vllm_gpu_memory_utilization": 0.25, "memory_budget_gib": 4.0} if generation == "vllm" else {}
    spec = TrialSpec(
        model="tiny", generation=generation, quantization="none", num_generations=args.k, batch_size=2,
        max_completion_length=args.completion, max_steps=args.steps, num_threads=1,
        task_args={"rewards": {"accuracy": 1.0, "digits": 1.0}},
        events_path=str(scratch / f"{generation}.jsonl"), output_dir=str(scratch / generation),
        model_cache_dir=str(ROOT / ".cache"), **extra,
    )  # fmt: skip
    path = scratch / f"{generation}.json"
    path.write_text(spec.to_json())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "trainers", str(path)], env=env, capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(f"{generation}: trainer failed\n{proc.stderr[-3000:]}")
    events, _ = read_events(spec.events_path)
    steps = [e for e in events if e["event"] == "step"][1:]  # the first step warms up
    return {
        "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps),
        "gen_s": statistics.median(s["gen_s"] for s in steps),
        "train_s": statistics.median(s["train_s"] for s in steps),
        "steps_measured": len(steps),
    }


@benchmark(tags=("vllm", "trial"), needs="cpu", params={"steps": 4, "completion": 64, "k": 8})
def vllm_cpu(ctx: Context) -> dict:
    args = ctx.args
    figures = {g: run(g, args, ctx.scratch) for g in ("transformers", "vllm")}
    figures["ratio_vllm_over_transformers"] = (
        figures["vllm"]["tokens_per_s"] / figures["transformers"]["tokens_per_s"]
    )
    print(json.dumps(figures, indent=2))
    return figures
