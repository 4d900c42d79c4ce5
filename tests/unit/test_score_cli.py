"""`rlsweep score` scores a file of completions with any task's rewards, outside training: every reward,
the weighted total, the time, and why a reward is zero; bad input is refused line by line."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from orchestrator.cli import main
from tasks import TASKS, load_task
from tasks.code import _sandbox
from tasks.countdown import DEFAULT_REWARDS as COUNTDOWN_WEIGHTS
from tasks.gsm8k import DEFAULT_REWARDS as GSM8K_WEIGHTS
from tasks.reasoning_gym import installed
from tools.inputs.hostile_code import ACTS, DELETE_OUTSIDE, HOSTILE, READ_SECRET, WRITE_OUTSIDE

ROOT = Path(__file__).resolve().parents[2]

TAGGED = "<think>worked it out</think><answer>{}</answer>"


@pytest.fixture
def gsm8k_file(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    rows = [
        {"question": f"What is {n} times 3?", "answer": f"{n} * 3 = {n * 3}\n#### {n * 3}"} for n in range(10)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def score(capsys, tmp_path, task: str, lines: list[dict], *sets: str) -> list[dict]:
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = ["score", "--task", task, str(completions)]
    for item in sets:
        argv += ["--set", item]
    code = main(argv)
    _sandbox.close_all()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [json.loads(line) for line in captured.out.splitlines()]


def right_answer(task: str, row: dict) -> str:
    """Each task's correct completion of `row`, worked out here from the prompt or the row's own solution."""
    prompt = row["prompt"][-1]["content"]
    if task == "arithmetic":
        a, b = map(int, re.search(r"What is (\d+)\+(\d+)\?", prompt).groups())
        return str(a + b)
    if task == "countdown":
        return TAGGED.format(row["solution"])
    if task == "gsm8k":
        return TAGGED.format(int(re.search(r"What is (\d+) times 3", prompt).group(1)) * 3)
    if task == "reasoning_gym":
        return TAGGED.format(row["answer"])
    name = re.search(r"function `(\w+)\(", prompt).group(1)
    solutions = {
        "hamming_distance": "def hamming_distance(a, b):\n    return sum(x != y for x, y in zip(a, b))"
    }
    return f"```python\n{solutions[name]}\n```"


WEIGHTS = {
    "arithmetic": {"accuracy": 1.0},
    "countdown": COUNTDOWN_WEIGHTS,
    "gsm8k": GSM8K_WEIGHTS,
    "reasoning_gym": {"accuracy": 1.0, "format": 0.2},
    "code": {"tests": 1.0, "perfect": 0.5, "format": 0.1},
}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_scores_a_right_and_an_empty_completion(task, capsys, tmp_path, gsm8k_file):
    if task == "reasoning_gym" and not installed():
        pytest.skip("reasoning-gym is not installed")
    args = {"path": str(gsm8k_file), "num_eval": 2} if task == "gsm8k" else {}
    sets = [f"{key}={value}" for key, value in args.items()]
    row = load_task(task, args).train[0]
    lines = score(
        capsys,
        tmp_path,
        task,
        [{"row": 0, "completion": right_answer(task, row)}, {"row": 0, "completion": ""}],
        *sets,
    )
    weights = WEIGHTS[task]
    assert [line["row"] for line in lines] == [0, 0]
    assert lines[0]["rewards"] == dict.fromkeys(weights, 1.0)
    assert lines[0]["total"] == pytest.approx(sum(weights.values()))
    assert lines[0]["why_zero"] == {}
    assert lines[1]["rewards"] == dict.fromkeys(weights, 0.0)
    assert lines[1]["total"] == 0.0
    expected_why = (
        {"tests": "no code block", "perfect": "no code block", "format": "0 code blocks, not one"}
        if task == "code"
        else dict.fromkeys(weights, "scored 0")
    )
    assert lines[1]["why_zero"] == expected_why
    # only a task that runs completions in a sandbox says whether it killed them
    assert [line.get("killed", "no sandbox") for line in lines] == (
        [None, None] if task == "code" else ["no sandbox"] * 2
    )
    assert all(0 <= line["seconds"] < 30 for line in lines)


LOOP_COMPLETION = {"row": 3, "completion": "```python\nwhile True:\n    pass\n```"}


def test_a_timed_out_code_completion_says_the_sandbox_killed_it_scores_0_and_costs_its_timeout(
    capsys, tmp_path
):
    (line,) = score(capsys, tmp_path, "code", [LOOP_COMPLETION], "reward_timeout_s=1")
    assert line["killed"] == "time limit"
    assert line["rewards"] == {"tests": 0.0, "perfect": 0.0, "format": 0.0}  # well formatted, yet 0
    assert line["total"] == 0.0
    assert line["why_zero"]["tests"] == "sandbox killed it: time limit"
    assert line["why_zero"]["format"] == (
        "sandbox killed it: time limit (task_args.pay_format_when_killed: true pays it)"
    )
    assert 1.0 <= line["seconds"] < 3.0


def test_a_blocked_forbidden_call_scores_0_in_total_like_a_killed_run(capsys, tmp_path):
    codes = [WRITE_OUTSIDE, DELETE_OUTSIDE, READ_SECRET]
    lines = [{"row": 3, "completion": f"```python\n{code}```"} for code in codes]
    scored = score(capsys, tmp_path, "code", lines, "reward_timeout_s=1")
    assert [line["total"] for line in scored] == [0.0, 0.0, 0.0]  # well formatted, yet 0
    assert [line["killed"] for line in scored] == [
        "forbidden call (write outside its directory: /rlsweep-no-such-folder/planted)",
        "forbidden call (delete outside its directory: /rlsweep-no-such-folder/victim)",
        "forbidden call (read outside its directory: /tmp/.ssh/id_ed25519)",
    ]
    assert scored[0]["why_zero"]["format"] == (
        "sandbox killed it: forbidden call (write outside its directory: /rlsweep-no-such-folder/planted) "
        "(an act: no reward pays it)"
    )


def test_with_pay_format_when_killed_a_killed_code_completion_scores_its_format_and_still_says_killed(
    capsys, tmp_path
):
    sets = ("reward_timeout_s=0.5", "pay_format_when_killed=true")
    (line,) = score(capsys, tmp_path, "code", [LOOP_COMPLETION], *sets)
    assert line["killed"] == "time limit"
    assert line["rewards"] == {"tests": 0.0, "perfect": 0.0, "format": 1.0}
    assert line["total"] == pytest.approx(0.1)
    # an act is never paid, pay_format_when_killed or not
    (act,) = score(
        capsys, tmp_path, "code", [{"row": 3, "completion": f"```python\n{WRITE_OUTSIDE}```"}], *sets
    )
    assert act["rewards"] == {"tests": 0.0, "perfect": 0.0, "format": 0.0} and act["total"] == 0.0


def test_task_args_given_with_set_shape_the_rows_as_a_sweep_would(capsys, tmp_path):
    # reasoning_format: the completion must be <reasoning>...</reasoning><answer>...</answer>
    row = load_task("code", {"reasoning_format": True}).train[0]
    assert "<reasoning>" in row["prompt"][0]["content"]
    body = right_answer("code", row).strip("`").removeprefix("python\n")
    lines = score(
        capsys,
        tmp_path,
        "code",
        [{"row": 0, "completion": f"<reasoning>count mismatches</reasoning><answer>{body}</answer>"}],
        "reasoning_format=true",
        "task_args.rewards={tests: 1.0, format: 0.5}",
    )
    assert lines[0]["rewards"] == {"tests": 1.0, "format": 1.0}
    assert lines[0]["total"] == pytest.approx(1.5)


def test_bad_lines_are_refused_before_any_is_scored(capsys, tmp_path):
    completions = tmp_path / "bad.jsonl"
    completions.write_text(
        '{"row": 0, "completion": "7"}\nnot json\n{"row": 10000, "completion": "7"}\n{"row": 1}\n'
    )
    assert main(["score", "--task", "arithmetic", str(completions)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f'{completions}:2: not JSON (Expecting value); give one {{"row": N, "completion": "..."}} per line',
        f"{completions}:3: row must be an integer in [0, 511] (a training row of the task), got 10000",
        f"{completions}:4: completion must be a string, got NoneType",
    ]


def test_a_missing_file_or_a_bad_setting_exits_2_with_the_fix(capsys, tmp_path):
    assert main(["score", "--task", "code", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: no such file; give a JSONL" in capsys.readouterr().err
    completions = tmp_path / "c.jsonl"
    completions.write_text('{"row": 0, "completion": "x"}\n')
    assert main(["score", "--task", "code", "--set", "rewards={tets: 1}", str(completions)]) == 2
    assert "task_args.rewards.tets: unknown reward; did you mean 'tests'?" in capsys.readouterr().err


def test_the_hostile_set_scores_zero_and_the_scoring_process_carries_on(tmp_path):
    """`rlsweep score` in its own process, as a trainer would score: it exits 0, every hostile completion
    scores 0 with its reason, no secret of its environment reaches its output, and when it has exited
    no sandbox process of it is left."""
    secret = "s3cr3t-hostile-set"
    completions = tmp_path / "hostile.jsonl"
    lines = [{"row": i, "completion": f"```python\n{code}\n```"} for i, code in enumerate(HOSTILE.values())]
    completions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {**os.environ, "HF_TOKEN": secret, "AWS_SECRET_ACCESS_KEY": secret}
    argv = [sys.executable, "-m", "orchestrator.cli", "score", "--task", "code", str(completions)]
    argv += ["--set", "reward_timeout_s=1", "--set", "rewards={tests: 1.0, perfect: 0.5}"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    stdout, stderr = proc.communicate(timeout=120)
    done = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr
    scored = [json.loads(line) for line in done.stdout.splitlines()]
    assert [s["row"] for s in scored] == list(range(len(HOSTILE)))
    assert [s["total"] for s in scored] == [0.0] * len(HOSTILE)
    assert all(set(s["why_zero"]) == {"tests", "perfect"} for s in scored)
    killed = dict(zip(HOSTILE, (s["killed"] for s in scored), strict=True))
    assert killed == {
        "endless loop": "time limit",
        "fork bomb": "process limit (BlockingIOError)",
        "memory bomb": killed["memory bomb"],  # MemoryError (address space) or SIGKILL (cgroup)
        "10 GB write": "file size limit (SIGXFSZ)",
        "detached daemon": killed["detached daemon"],  # 1 or 2 processes: its first child may not have exited
        "socket": "forbidden call (network attempt: a name lookup)",
    }
    assert killed["memory bomb"].startswith("memory limit")
    assert killed["detached daemon"] in (
        "left running after the call: 1 process",
        "left running after the call: 2 processes",
    )
    assert secret not in done.stdout + done.stderr
    owner = _sandbox.owner_tag(proc.pid)
    assert [p.pid for p in psutil.process_iter(["cmdline"]) if owner in (p.info["cmdline"] or [])] == []


def test_each_act_scores_0_in_total_is_named_and_leaves_no_file_process_or_connection(tmp_path):
    """One well formatted completion per kind of act, scored by `rlsweep score --task code` in its own
    process with the default rewards (format included): each totals 0 with its act named, the secret it
    reads reaches no output, and nothing is left: no planted file, no process, no connection made."""
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t-outside-its-folder")
    tmp_path.chmod(0o755)
    secret.chmod(0o644)  # only the sandbox, not file permissions, stands in the way
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    connect = f"socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=0.5)"
    codes = {
        kind: code.format(path=str(secret)) if kind == "read outside" else code
        for kind, (code, _) in ACTS.items()
    }
    codes["network attempt"] = codes["network attempt"].replace(
        'socket.create_connection(("1.1.1.1", 80), timeout=0.5)', connect
    )
    assert connect in codes["network attempt"]
    completions = tmp_path / "acts.jsonl"
    completions.write_text(
        "".join(json.dumps({"row": 3, "completion": f"```python\n{c}```"}) + "\n" for c in codes.values())
    )
    argv = [sys.executable, "-m", "orchestrator.cli", "score", "--task", "code", str(completions)]
    # every act ends its run at its first test: 3 s only keeps a loaded machine from timing one out
    proc = subprocess.Popen(
        [*argv, "--set", "reward_timeout_s=3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    scored = dict(zip(ACTS, (json.loads(line) for line in stdout.splitlines()), strict=True))
    for kind, (_, act) in ACTS.items():
        line = scored[kind]
        assert line["total"] == 0.0, kind
        assert line["rewards"] == {"tests": 0.0, "perfect": 0.0, "format": 0.0}, kind
        assert line["killed"].startswith(act.format(path=secret)), (kind, line["killed"])
        assert (
            line["why_zero"]["format"] == f"sandbox killed it: {line['killed']} (an act: no reward pays it)"
        )
    assert "s3cr3t" not in stdout + stderr
    assert not Path("/rlsweep-no-such-folder").exists()
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()
    owner = _sandbox.owner_tag(proc.pid)
    assert [p.pid for p in psutil.process_iter(["cmdline"]) if owner in (p.info["cmdline"] or [])] == []
