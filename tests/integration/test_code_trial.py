"""A 2-step trial with the code task completes on both stacks on CPU: per-reward columns (tests,
perfect, format) and the completions the sandbox killed in every step row, pass@1 and pass@k at the end;
a hostile policy's acts score 0 and are named in the step rows."""

import json
import os
import socket
from pathlib import Path

import pandas as pd
import psutil
import pytest

from orchestrator.cli import main
from tools.inputs.hostile_code import ACTS

pytestmark = pytest.mark.slow
TASK_ARGS = {"num_samples": 8, "num_eval": 2, "reward_timeout_s": 1.0, "reward_workers": 2}


@pytest.mark.parametrize("stack", ["trl", "unsloth"])
def test_a_code_trial_records_each_reward_and_pass_at_k(stack, tmp_path, capsys):
    args = f"--stack {stack} --mode grpo --model tiny --max-steps 2 --num-generations 2"
    args += (
        " --batch-size 2 --max-completion-length 16 --max-prompt-length 256 --quantization none --lora-r 4"
    )
    args += " --eval-at-end --eval-samples 2 --eval-k 2 --probe-steps 0"  # every step scored
    code = main(
        [
            "trial",
            *args.split(),
            "--task",
            "code",
            "--task-args",
            json.dumps(TASK_ARGS),
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0, capsys.readouterr()
    steps = pd.read_parquet(tmp_path / "steps.parquet").sort_values("step")
    assert list(steps.step) == [1, 2]
    for name in ("tests", "perfect", "format"):
        assert steps[f"rewards/{name}/mean"].notna().all(), name
        assert steps[f"rewards/{name}/mean"].between(0, 1).all(), name
    assert steps["rewards/accuracy/mean"].isna().all()  # not a reward of this task: null, not 0
    # every step scored its completions in the sandbox, and the sandbox killed none of them: 0, not null
    assert list(steps.sandbox_kills) == [0.0, 0.0]
    last = steps.iloc[-1]
    assert last.eval_k == 2 and last.eval_prompts == 2
    # a random tiny model writes no fenced block that passes a problem's tests
    assert last.eval_pass_at_1 == 0.0 and last.eval_pass_at_k == 0.0
    trial = json.loads((tmp_path / "trial.json").read_text())
    assert trial["outcome"]["status"] == "completed"


@pytest.mark.parametrize("stack", ["trl", "unsloth"])
def test_a_policy_that_tries_to_get_out_is_paid_nothing_and_its_acts_are_named(
    stack, tmp_path, capsys, monkeypatch
):
    """A 2-step trial whose 8 completions (4 a step) are one of each kind of act (tests/helpers/
    hostile_policy replaces what the tiny model wrote as the rewards see it): a read outside its folder,
    a write and a delete outside it, a signal to its parent, a process and a thread left running, a
    connection to a server here, a program started. Every reward of both steps is 0, the step rows name
    each act, and nothing is left: no planted file, no process of theirs, no connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    connect = f"socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=0.5)"
    kinds = ["read outside", "signal to its parent", "process left running", "thread left running"]
    kinds += ["write outside", "delete outside", "network attempt", "program started"]
    codes = [ACTS[kind][0] for kind in kinds]
    codes[0] = codes[0].format(path="/etc/hostname")
    codes[6] = codes[6].replace('socket.create_connection(("1.1.1.1", 80), timeout=0.5)', connect)
    assert connect in codes[6]
    helper = Path(__file__).resolve().parents[1] / "helpers" / "hostile_policy"
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(helper), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("RLSWEEP_TEST_HOSTILE_CODES", json.dumps(codes))
    monkeypatch.setenv("RLSWEEP_COLD_START", "1")  # a trainer of its own, started with this environment
    before = owned_sandbox_processes()
    args = f"--stack {stack} --mode grpo --model tiny --max-steps 2 --num-generations 2"
    args += " --batch-size 2 --max-completion-length 8 --max-prompt-length 256 --quantization none --lora-r 4"
    args += " --probe-steps 0"  # every step scored
    code = main(
        [
            "trial",
            *args.split(),
            "--task",
            "code",
            "--task-args",
            json.dumps(TASK_ARGS),
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0, capsys.readouterr()
    steps = pd.read_parquet(tmp_path / "steps.parquet").sort_values("step")
    assert list(steps.step) == [1, 2]
    for name in ("tests", "perfect", "format"):
        assert list(steps[f"rewards/{name}/mean"]) == [0.0, 0.0], name
    assert list(steps.reward_mean) == [0.0, 0.0]  # the weighted total TRL trains on
    assert list(steps.sandbox_kills) == [4.0, 4.0]
    reasons = [json.loads(text) for text in steps.sandbox_kill_reasons]
    assert all(sum(r.values()) == 4 for r in reasons)
    named = sorted(reason for r in reasons for reason in r)
    # the harness, its parent, is process 1 of the sandbox's PID namespace (or its pid without one)
    signal = next(reason for reason in named if reason.startswith(ACTS["signal to its parent"][1]))
    expected = [
        ACTS[kind][1].format(path="/etc/hostname") for kind in kinds if kind != "signal to its parent"
    ]
    assert named == sorted([*expected, signal])
    assert not Path("/rlsweep-no-such-folder").exists()
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()
    assert owned_sandbox_processes() <= before


def owned_sandbox_processes() -> set[int]:
    """Every process of any code sandbox on the host (the harness and what it forked carry its owner tag)."""
    tagged = lambda p: any(arg.startswith("--owner=") for arg in p.info["cmdline"] or [])  # noqa: E731
    return {p.pid for p in psutil.process_iter(["cmdline"]) if tagged(p)}
