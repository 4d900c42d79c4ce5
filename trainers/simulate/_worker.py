"""The simulation worker that trainers/simulate/_pool.py starts (`python -m trainers.simulate._worker N`):
it imports what every stack's simulated step runs once, reads the jobs on stdin, forks a child per step,
N at a time (the last N at once), and writes each answer as a line (_pool.py's docstring). It imports
trainers.simulate, which imports only _pool.py's asking side, so the imports run one way."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# What every stack's simulated step imports, imported by the worker before it forks a step.
PRELOAD = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "trl.trainer.grpo_trainer")


def _without_optional() -> None:
    """The optional libraries TRL and transformers import where installed, and no simulated step runs,
    left out of the worker (seconds of a first answer each): vLLM (TRL's generation by vLLM: a step with
    generation vllm counts vLLM's memory from its settings), MLflow (TRL's metrics logging; transformers'
    own switch, DISABLE_MLFLOW_INTEGRATION) and scikit-learn (transformers' assisted decoding's ROC curve)."""
    import importlib

    os.environ["DISABLE_MLFLOW_INTEGRATION"] = "TRUE"
    importlib.import_module("trl.import_utils").is_vllm_available = lambda *args, **kwargs: False
    importlib.import_module("transformers.utils").is_sklearn_available = lambda: False


def _child(job: dict[str, Any], path: str) -> None:
    """In a forked child: the job simulated, its answer written to `path`."""
    import dataclasses

    from trainers.simulate import CannotSimulate, simulate
    from trainers.trial import TrialSpec

    try:
        step = simulate(TrialSpec.from_dict(job["spec"]), job.get("prompt_tokens"))
        answer: dict[str, Any] = {"step": dataclasses.asdict(step)}
    except CannotSimulate as exc:
        answer = {"cannot": str(exc)}
    Path(path).write_text(json.dumps(answer, default=str))


def main() -> None:
    import importlib

    count = max(1, int(sys.argv[1]))
    out = sys.stdout
    sys.stdout = sys.stderr  # what the libraries print goes with their warnings, not into the answers
    jobs = [json.loads(line) for line in sys.stdin]
    _without_optional()
    for name in PRELOAD:
        importlib.import_module(name)
    import trainers.simulate  # noqa: F401

    preload = os.times()
    out.write(json.dumps({"index": -1, "preload_cpu_s": preload.user + preload.system}) + "\n")
    out.flush()

    running: dict[int, tuple[int, str]] = {}  # pid -> (the job's index, its answer's file)
    folder = tempfile.mkdtemp(prefix="rlsweep-simulate-")

    def reap() -> None:
        pid, _, usage = os.wait4(-1, 0)
        index, path = running.pop(pid)
        try:
            answer = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            answer = {"died": True}
        cpu = usage.ru_utime + usage.ru_stime  # the child's own CPU seconds, for bench/cost/first_answers.py
        out.write(json.dumps({"index": index, **answer, "cpu_s": cpu}) + "\n")
        out.flush()

    try:
        for index, job in enumerate(jobs):
            # N at a time, but the last N (or fewer) start together with those running: were each to wait
            # for a free CPU, the last to start would run alone on one while the others stood idle (3
            # steps on 2 CPUs: one CPU idle for a whole step); sharing the CPUs, they end together.
            while len(running) >= count and len(jobs) - index > count:
                reap()
            path = os.path.join(folder, f"{index}.json")
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child: this job, then gone without the parent's exit handlers
                code = 0
                try:
                    _child(job, path)
                except BaseException:  # noqa: BLE001 - said on stderr; the asking process simulates it
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            running[pid] = (index, path)
        while running:
            reap()
    finally:
        with contextlib.suppress(OSError):
            for name in os.listdir(folder):
                os.unlink(os.path.join(folder, name))
            os.rmdir(folder)


if __name__ == "__main__":
    main()
