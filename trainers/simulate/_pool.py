"""Several steps simulated at once: a verb that asks for more than one step (fits' stacks, a fit map's
shapes) has them simulated side by side on the host's CPUs, and the answers read back in the asking
process as if it had simulated them itself (trainers.simulate's `_FRESH`).

    simulate_each(specs)    # then simulate(spec) returns each without simulating again

One worker, `python -m trainers.simulate._worker N` (trainers/simulate/_worker.py), imports what every stack's simulated step runs (torch,
transformers, PEFT, bitsandbytes, TRL's trainer) once, then forks a child per step, N at a time: each
child simulates with trainers.simulate.simulate as the asking process would, the disk cache included,
and ends. So the libraries are imported once for all the steps, every step starts from the same
process (one stack's imports never reach another's step: Unsloth rewrites TRL's trainer as it imports),
and the asking process imports none of them. The worker only simulates, so TRL's optional vLLM import is
left out of it, and so are MLflow and scikit-learn, which no step runs either (_without_optional). The worker reads the jobs, one JSON
line each, on stdin, and writes each answer as its child ends, a line with the job's index: the step, or
why it cannot be simulated. A step whose child died is left to the asking process, which simulates it
itself (and says why where it cannot).

RLSWEEP_SIMULATE_WORKERS: how many steps at once (default: the CPUs this process may run on, at most
one a step); 0 simulates in the asking process, one step after another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ENV = "RLSWEEP_SIMULATE_WORKERS"
ROOT = Path(__file__).resolve().parents[2]


def problem() -> str | None:
    """What is wrong with RLSWEEP_SIMULATE_WORKERS, with its fix (None where it is unset or a whole number
    of 0 or more): the verbs refuse it before any work (orchestrator/cli main)."""
    said = os.environ.get(ENV, "").strip()
    if not said or (said.isdigit() and int(said) >= 0):
        return None
    return (
        f"{ENV}={said!r}: the steps simulated at once must be a whole number, 0 or more (0: one after "
        f"another in the asking process); set e.g. {ENV}=2, or unset it for one a CPU"
    )


def workers(todo: int) -> int:
    """How many steps of `todo` are simulated at once: RLSWEEP_SIMULATE_WORKERS, else the CPUs this
    process may run on; never more than the steps (0 where the variable is not a whole number: problem())."""
    said = os.environ.get(ENV, "").strip()
    if said:
        wanted = int(said) if problem() is None else 0
    else:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(0, min(wanted, todo))


def run(jobs: list[dict[str, Any]], count: int) -> dict[int, dict[str, Any]]:
    """Each job ({"spec": TrialSpec.to_dict(), "prompt_tokens": int | None}) simulated by the worker,
    `count` at a time; the answers by the job's index ({"step": SimulatedStep's fields} or {"cannot":
    why}). A job whose child died, or all where the worker did, has no answer."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    answers: dict[int, dict[str, Any]] = {}
    # what the libraries print is not the answer's: kept off the terminal
    with tempfile.TemporaryFile() as said:
        worker = subprocess.Popen(
            [sys.executable, "-m", "trainers.simulate._worker", str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=said, text=True, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            worker.stdin.write("".join(json.dumps(job) + "\n" for job in jobs))
            worker.stdin.close()
            for line in worker.stdout:
                answer = json.loads(line)
                index = answer.pop("index")
                if "died" not in answer:
                    answers[index] = answer  # index -1: the worker's own CPU seconds, before its first fork
        except (OSError, ValueError):  # a broken pipe or a torn line: the worker died
            pass
        finally:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    return answers
