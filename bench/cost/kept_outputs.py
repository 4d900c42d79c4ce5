"""A simulated step with its ops' outputs kept (trainers/simulate/_count.py) against the same step with every
meta kernel run: the same answer, figure for figure, on every family and stack, and what it saves.

Each (model, stack) is simulated twice, each time in a process forked from one that imported what every
step runs (as the simulation worker does: trainers/simulate/_worker.py), nothing read from or written to
the cache: once as rlsweep does, once with no op kept. Printed per row: each way's CPU seconds and whether
every field of the two answers (allocated, reserved, needed, resting, the peak's phase and each phase's
peak) is the same; then the CPU seconds summed both ways.

    python -m bench kept_outputs [--set models=HUB_ID,...] [--set stacks=trl,unsloth,liger]
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time

from bench import Context, benchmark

MODELS = [
    "Qwen/Qwen3-4B",
    "Qwen/Qwen2.5-3B-Instruct",
    "meta-llama/Llama-3.2-3B-Instruct",
    "google/gemma-3-4b-it",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "microsoft/Phi-4-mini-instruct",
    "HuggingFaceTB/SmolLM3-3B",
    "Qwen/Qwen3-30B-A3B",
]
COMPARED = ("allocated_gib", "reserved_gib", "needed_gib", "resting_gib", "phase", "phase_gib")


def _one(model: str, stack: str, keep: bool) -> dict:
    """In a forked child: the step, kept or with every kernel run, and its CPU seconds."""
    from trainers.simulate import CannotSimulate, _count, simulate
    from trainers.trial import TrialSpec

    spec = TrialSpec(model=model, stack=stack, num_generations=8, batch_size=1, max_completion_length=1024,
                     memory_budget_gib=24.0)  # fmt: skip
    if not keep:
        _count._keepable = lambda func: None
    started = time.process_time()
    try:
        step = dataclasses.asdict(simulate(spec, cache=False))
        answer = {k: step[k] for k in COMPARED}
    except CannotSimulate as exc:
        answer = {"cannot": str(exc)}
    return {"answer": answer, "cpu_s": time.process_time() - started}


def _forked(model: str, stack: str, keep: bool) -> dict:
    """_one in a child forked from this process, so each way starts from the same imports."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as said:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                with open(said.name, "w") as out:
                    json.dump(_one(model, stack, keep), out, default=str)
            except BaseException:  # noqa: BLE001 - said on stderr, the row reads as failed
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        text = said.read()
        return json.loads(text) if status == 0 and text else {"failed": status}


@benchmark(
    tags=("simulate", "memory"),
    params={"models": MODELS, "stacks": ["trl", "unsloth", "liger"]},
    smoke={"models": ["Qwen/Qwen3-0.6B"], "stacks": ["trl"]},
    goals={"identical": "== true", "cpu_ratio": ">= 1.5"},
    smoke_goals={"identical": "== true"},
    isolated=True,
)
def kept_outputs(ctx: Context) -> dict:
    """The step with its ops' outputs kept against every meta kernel run: the same answer, and the CPU saved."""
    import importlib

    from trainers.simulate import _worker

    os.environ["RLSWEEP_CACHE"] = str(ctx.scratch / "cache")
    _worker._without_optional()
    for name in _worker.PRELOAD:
        importlib.import_module(name)
    import trainers.simulate  # noqa: F401

    same, kept_s, run_s, steps, cannot = True, 0.0, 0.0, 0, 0
    print(f"{'model':36s} {'stack':8s} {'kept s':>7s} {'run s':>7s}  same answer")
    for model in ctx.args.models:
        for stack in ctx.args.stacks:
            kept, run = _forked(model, stack, True), _forked(model, stack, False)
            if "failed" in kept or "failed" in run:
                same = False
                print(f"{model:36s} {stack:8s} failed (status {kept.get('failed')}, {run.get('failed')})")
                continue
            equal = kept["answer"] == run["answer"]
            same = same and equal
            if "cannot" in kept["answer"] and equal:  # not simulated either way: said, not counted
                cannot += 1
                print(f"{model:36s} {stack:8s} not simulated either way: {kept['answer']['cannot'][:60]}")
                continue
            steps += 1
            kept_s, run_s = kept_s + kept["cpu_s"], run_s + run["cpu_s"]
            note = "" if equal else f"  kept {kept['answer']} / run {run['answer']}"
            print(f"{model:36s} {stack:8s} {kept['cpu_s']:7.2f} {run['cpu_s']:7.2f}  {equal}{note}")
    ratio = run_s / kept_s if kept_s else None
    print(f"{steps} steps simulated both ways, {cannot} that neither way could simulate")
    if ratio:
        print(f"CPU seconds over the {steps}: {kept_s:.1f} kept, {run_s:.1f} every kernel run: {ratio:.2f}x")
    return {"identical": same and steps > 0, "cpu_ratio": ratio, "cpu_kept_s": kept_s, "cpu_run_s": run_s,
            "steps": steps, "not_simulated": cannot}  # fmt: skip
