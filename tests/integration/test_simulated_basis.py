"""Simulated steps as an answer's basis, run for real on meta tensors: a deep model read off two shallow
copies of itself agrees with every layer simulated, a step simulated once is read back from disk at once,
and a fit map of a family no trial measured is drawn from its stack's simulated steps and says so."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.cli import answer_block
from tests.helpers.trainer_child import ROOT
from trainers import stacks
from trainers.simulate import simulate
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow

DEEP = dict(model="Qwen/Qwen2.5-0.5B-Instruct", stack="trl", num_generations=2, batch_size=1,
            max_prompt_length=64, max_completion_length=64, learning_rate=2e-4)  # fmt: skip


def test_a_deep_model_read_off_two_shallow_copies_allocates_what_every_layer_simulated_allocates():
    # 24 layers: simulated at 4 and 8. (At a step of under 1 GiB the allocator's 2 MiB pages move
    # reserved by a few percent either way; at this one, 6.6 GiB, the line holds to 0.2%.)
    spec = TrialSpec(**(DEEP | dict(num_generations=8, batch_size=2, max_completion_length=256)))
    cut = simulate(spec, 34, cache=False)
    whole = simulate(spec, 34, cache=False, whole=True)
    assert cut.simulated["layers"] == "4 and 8 of 24, extrapolated" and "layers" not in whole.simulated
    assert cut.allocated_gib == pytest.approx(whole.allocated_gib, rel=1e-3)
    assert cut.reserved_gib == pytest.approx(whole.reserved_gib, rel=0.01)
    assert cut.phase == whole.phase


def test_a_simulated_step_is_kept_on_disk_and_read_back_without_simulating(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    spec = TrialSpec(**DEEP)
    first = simulate(spec, 34)
    assert len(list((tmp_path / "simulated").glob("*.json"))) == 1 and "cached" not in first.simulated
    again = simulate(spec, 34)
    assert again.simulated["cached"] is True
    assert (again.allocated_gib, again.reserved_gib, again.phase) == (
        first.allocated_gib,
        first.reserved_gib,
        first.phase,
    )
    # A kept step is found before transformers is imported: a cached answer costs under a second, not
    # the libraries' imports (6 s of `rlsweep fits` here before).
    code = (
        "import sys; from trainers.simulate import simulate; from trainers.trial import TrialSpec; "
        f"step = simulate(TrialSpec(**{DEEP!r}), 34); "
        "print(step.simulated.get('cached'), 'transformers' in sys.modules, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "RLSWEEP_CACHE": str(tmp_path)})  # fmt: skip
    assert done.stdout.split() == ["True", "False", "False"], done.stdout + done.stderr[-2000:]


def test_fitmap_draws_a_family_no_trial_measured_from_its_simulated_steps(tmp_path, monkeypatch, capsys):
    from tests.helpers.cli import run_cli

    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    code, text = run_cli(["fitmap", "--card", "16gb", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--stack", "trl",
                          "--k", "2,8", "--b", "1", "--simulate", "--no-plot"], capsys)  # fmt: skip
    assert code == 0, text
    assert "each stack's own step simulated on meta tensors (TRL Qwen/Qwen2.5-0.5B-Instruct" in text
    assert "rlsweep calibrate" not in text  # no prior-only family left to calibrate
    kept = list((tmp_path / "simulated").glob("*.json"))
    assert len(kept) == 4  # K 2 and 8 at the shortest and longest length: each simulated itself


def test_no_simulate_answers_from_the_prior_and_simulates_nothing(tmp_path, monkeypatch, capsys):
    from tests.helpers.cli import run_cli

    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    code, text = run_cli(["fitmap", "--card", "16gb", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--stack", "trl",
                          "--k", "2", "--b", "1", "--no-simulate", "--no-plot"], capsys)  # fmt: skip
    assert code == 0, text
    assert "the prior (no measured trials)" in text and "simulated" not in text
    assert not (tmp_path / "simulated").exists()


def test_a_first_simulated_answer_prints_the_answer_and_nothing_the_libraries_say(tmp_path):
    # A fresh cache: both stacks' steps simulated in the process (TRL's and Unsloth's imports, transformers'
    # checkpointing notice), as on a user's first question; what they print is not the answer's.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLSWEEP_", "PYTHONWARNINGS"))}
    env |= {"RLSWEEP_CACHE": str(tmp_path), "HOME": str(tmp_path), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "fits", "--model", "meta-llama/Llama-3.2-1B-Instruct",
         "--card", "16gb", "--k", "2", "--b", "1", "--length", "64"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("meta-llama/Llama-3.2-1B-Instruct, GRPO, K=2")
    # Llama: no GPU row of its family, so no upper bound on the simulator's error there (and the calibrate
    # line that would measure it, one per stack, under the answer)
    labels = [stacks.label(name) for name in stacks.names()]
    answers = [_block(lines, label) for label in labels]
    assert [a.split()[:2] for a in answers] == [[label, "uncertain"] for label in labels]
    assert all("simulated (" in a and "no llama GPU row" in a for a in answers)
    # every other line is the answer's own: the question wrapped, each stack's answer (its details
    # indented), its assumptions, how to read it, what would bound it, seconds per step on the card (its
    # block indented), the calibrate line per stack; nothing a library printed
    own = ("assumed: ", "K is TRL's num_generations", "Seconds per step", ", ".join(labels) + ": no change")
    calibrate = [line for line in lines if " is uncertain: measure it on the card with a few" in line]
    assert len(calibrate) == len(labels)
    assert all(line.startswith((" ", *own)) or line in calibrate for line in lines[1:]), lines
    # each names the phase that set its peak
    assert all(
        re.search(r"allocated [0-9.]+ GiB in (generation|decoding|scoring|training), ", a) for a in answers
    )


def _block(lines: list[str], label: str) -> str:
    """A stack's answer: its short line and the details wrapped under it, as one line."""
    return answer_block("\n".join(lines), label)
