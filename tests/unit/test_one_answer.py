"""One configuration, one answer: `fits`, `fitmap`, `predict`, `solve` and `run --dry-run`, each asked
through its command line about the same configurations, give the same verdict, peak and interval
(orchestrator/judging/answer.py). On the memory model's GPU prior (--no-simulate: no GPU row of the
`tiny` model, so every verb predicts), and on the stack's own step simulated on meta tensors, where
fitmap (which draws a map from a few simulated shapes) is left out. Solve is run as on a GPU host, its
probes stood in for (no probe runs on this CPU host); its answers before any probe are what is compared.
"""

from __future__ import annotations

import pytest

from orchestrator.judging.memory import DOES_NOT_FIT, FITS, UNCERTAIN
from orchestrator.words.outcome import COMPLETED, TrialResult
from tests.helpers.cli import run_cli

VERDICTS = (FITS, DOES_NOT_FIT, UNCERTAIN)
BUDGET = "2"
LENGTH = 2048
# On the GPU prior under 2 GiB at 2048 tokens: K=2 fits, K=8 is uncertain, K=32 does not fit.
KS = (2, 8, 32)


def _fits(capsys, k: int, length: int, simulate: str) -> tuple[str, str, str]:
    code, text = run_cli(
        ["fits", "--model", "tiny", "--stack", "trl", "--budget-gib", BUDGET, "--k", str(k), "--b", "1",
         "--length", str(length), simulate],
        capsys,
    )  # fmt: skip
    assert code == 0, text
    (line,) = [x for x in text.splitlines() if x.startswith("  TRL ")]
    _, verdict, peak, interval, kind = [w.strip() for w in line.strip().split("  ") if w.strip()]
    assert kind == ("predicted" if simulate == "--no-simulate" else "simulated"), line  # no row measured
    return verdict, peak.removesuffix(" GiB"), interval


def _sweep(tmp_path, ks, length: int) -> str:
    path = tmp_path / "one.yaml"
    path.write_text(
        "name: one\ntask: arithmetic\n"
        f"grid:\n  num_generations: [{', '.join(map(str, ks))}]\n"
        f"fixed:\n  stack: trl\n  model: tiny\n  batch_size: 1\n  max_completion_length: {length}\n"
        f"memory:\n  budget_gib: {BUDGET}\nresources:\n  gpus_per_trial: 1\n"
    )
    return str(path)


def _table_answers(text: str, peak_at: int, interval_at: int) -> dict[int, tuple[str, str, str]]:
    """{K: (verdict, peak, interval)} from a table's rows (trial keys hold `-k<K>-`): the cells at
    `peak_at` and `interval_at` places from the verdict's."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        key = next((c for c in cells if c.startswith("trl-grpo-tiny-k")), None)
        verdicts = [i for i, c in enumerate(cells) if c in VERDICTS]
        if key is None or not verdicts:
            continue
        i = verdicts[0]
        k = int(key.split("-k")[1].split("-")[0])
        found[k] = (cells[i], cells[i + peak_at], cells[i + interval_at])
    return found


def _predict(capsys, sweep: str, out, simulate: str) -> dict:
    code, text = run_cli(["predict", sweep, "--output-dir", str(out), simulate], capsys)
    assert code == 0, text
    return _table_answers(text, -2, -1)  # peak GiB, interval, verdict


def _dry_run(capsys, sweep: str, out, simulate: str) -> dict:
    code, text = run_cli(["run", sweep, "--dry-run", "--output-dir", str(out), simulate], capsys)
    assert code == 0, text
    return _table_answers(text, 1, 2)  # memory, GiB, interval


@pytest.fixture
def gpu_host_solve(monkeypatch):
    """solve as on a host whose probes read a GPU, each probe stood in for: nothing runs here, and the
    candidates' answers before any probe are printed as on that host."""
    import orchestrator.running.solve as running
    import trainers.nvml

    def run_recorded(spec, recorder, out, guard, verb, run=None):
        recorder.start(spec.trial_key)
        result = TrialResult(status=COMPLETED, status_detail="", wall_s=1.0, peak={"gpu_peak_gib": 0.1})
        recorder.end(spec.trial_key, result)
        return result

    monkeypatch.setattr(running, "run_recorded", run_recorded)
    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 1)


def _solve(capsys, out, ks, length: int, simulate: str) -> dict:
    code, text = run_cli(
        ["solve", "--maximize", "num_generations", "--values", *map(str, ks), "--model", "tiny", "--stack",
         "trl", "--budget-gib", BUDGET, "--set", f"max_completion_length={length}", "--set", "batch_size=1",
         "--output-dir", str(out),
         simulate],
        capsys,
    )  # fmt: skip
    found = {}
    for k in ks:
        (line,) = [x for x in text.splitlines() if x.startswith(f"K={k}: ")]
        verdict, figures, _ = line.removeprefix(f"K={k}: ").rsplit(", ", 2)
        peak, interval = figures.removesuffix(")").split(" GiB (")
        found[k] = (verdict, peak, interval)
    return found


def _fitmap_verdicts(capsys, ks, length: int) -> dict[int, str]:
    """{K: the map's verdict at `length`}: fits up to its sure end, does not fit past its possible end."""
    code, text = run_cli(
        ["fitmap", "--model", "tiny", "--stack", "trl", "--budget-gib", BUDGET, "--k", ",".join(map(str, ks)),
         "--b", "1", "--min-length", "128", "--max-length", str(length), "--no-plot", "--no-simulate"],
        capsys,
    )  # fmt: skip
    assert code == 0, text

    def reach(word: str) -> int | None:  # '≥2048': fits all the way; '<128': not even the shortest
        return None if word.startswith("<") else int(word.lstrip("≥"))

    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        cell = next((c for c in cells if "–" in c and "(" in c), None)
        if cell is None or not cells[0].isdigit():
            continue
        sure, possible = map(reach, cell.split("(")[1].rstrip(")").split("–"))
        k = int(cells[0])
        found[k] = (
            FITS if sure is not None and length <= sure
            else DOES_NOT_FIT if possible is None or length > possible
            else UNCERTAIN
        )  # fmt: skip
    return found


def test_the_five_verbs_give_one_verdict_peak_and_interval_on_the_memory_models_prior(
    tmp_path, capsys, gpu_host_solve
):
    sweep = _sweep(tmp_path, KS, LENGTH)
    fits = {k: _fits(capsys, k, LENGTH, "--no-simulate") for k in KS}
    assert [fits[k][0] for k in KS] == [FITS, UNCERTAIN, DOES_NOT_FIT]  # the three verdicts, each asked
    assert _predict(capsys, sweep, tmp_path / "predict", "--no-simulate") == fits
    assert _dry_run(capsys, sweep, tmp_path / "dry", "--no-simulate") == fits
    assert _solve(capsys, tmp_path / "solve", KS, LENGTH, "--no-simulate") == fits
    assert _fitmap_verdicts(capsys, KS, LENGTH) == {k: verdict for k, (verdict, _, _) in fits.items()}


def test_the_verbs_give_one_answer_from_the_stacks_own_step_simulated(tmp_path, capsys, gpu_host_solve):
    ks, length = (2, 4), 32  # short steps: a few seconds each to simulate, once (then read from disk)
    sweep = _sweep(tmp_path, ks, length)
    fits = {k: _fits(capsys, k, length, "--simulate") for k in ks}  # each from its own simulated step
    assert _predict(capsys, sweep, tmp_path / "predict", "--simulate") == fits
    assert _dry_run(capsys, sweep, tmp_path / "dry", "--simulate") == fits
    assert _solve(capsys, tmp_path / "solve", ks, length, "--simulate") == fits


def test_card_is_the_card_asked_about_in_every_verb_and_the_plan_says_the_sweeps_own_budget(tmp_path, capsys):
    """--card sets the budget the answers are for, in the plan as in fits and predict; where the sweep's
    own memory.budget_gib (2 GiB here) is another figure, the plan and predict say which its trials run
    under and how to run them under the card's."""
    sweep = _sweep(tmp_path, KS, LENGTH)
    card = ["--card", "16gb", "--no-simulate"]
    fits = {}
    for k in KS:
        code, text = run_cli(["fits", "--model", "tiny", "--stack", "trl", "--k", str(k), "--b", "1",
                              "--length", str(LENGTH), *card], capsys)  # fmt: skip
        assert code == 0, text
        (line,) = [x for x in text.splitlines() if x.startswith("  TRL ")]
        verdict, peak, interval = [w.strip() for w in line.strip().split("  ") if w.strip()][1:4]
        fits[k] = (verdict, peak.removesuffix(" GiB"), interval)
    assert fits[32][0] != _predict(capsys, sweep, tmp_path / "p", "--no-simulate")[32][0]  # 2 GiB's differs
    for verb in (["run", sweep, "--dry-run"], ["predict", sweep]):
        code, text = run_cli([*verb, "--output-dir", str(tmp_path / "out"), *card], capsys)
        assert code == 0, text
        flat = " ".join(text.split())
        assert "memory.budget_gib 2 GiB" in flat and "--set memory.budget_gib=16 runs them" in flat
        at = (1, 2) if verb[0] == "run" else (-2, -1)
        assert _table_answers(text, *at) == fits
