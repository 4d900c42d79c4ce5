"""The default GPU sweep searches the frontier, and says how long it will take before it starts
(orchestrator/judging/duration.py)."""

import re
from pathlib import Path

import pytest

from bench.accuracy.duration import SOURCE, derive_times
from orchestrator.cli import main
from orchestrator.judging.duration import estimate_sweep, expected_probes, load_times
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan

ROOT = Path(__file__).resolve().parents[2]
FRONTIER = ROOT / "sweeps" / "frontier-16gb.yaml"


@pytest.fixture(autouse=True)
def no_gpu_detected(monkeypatch):
    """Every estimate here assumes the card it is given, else the H100, whatever GPU the host has."""
    import orchestrator.cli._plan as plan

    monkeypatch.setattr(plan, "detected_gpu", lambda: None)


def test_the_default_gpu_sweep_is_a_frontier_search_to_8k_tokens_and_k_64_and_validates():
    assert "sweeps/frontier-16gb.yaml" in (ROOT / "Makefile").read_text().split("SWEEP ?=")[1].splitlines()[0]
    sweep = load_sweep(FRONTIER)
    axes = sweep.axes()
    assert max(axes["max_completion_length"]) == 8192 and max(axes["num_generations"]) == 64
    assert set(axes["stack"]) == {"trl", "unsloth"}
    assert sweep.oom.frontier and sweep.oom.predict and sweep.phases_to_run() == ("memory",)
    assert sweep.memory.budget_gib == 16
    result = plan(sweep)
    assert result.problems == [] and len(result.trials) == 168
    assert {t.max_steps for t in result.trials} == {1} and {t.probe_steps for t in result.trials} == {1}
    assert (ROOT / "sweeps" / "original-16gb.yaml").is_file()


def test_the_estimate_figures_trace_to_the_h100_rows():
    assert load_times() == derive_times(ROOT / SOURCE)
    times = load_times()["times"]
    # a generation's wall time over its decode steps, medians of round 1's steady rows
    assert times["trl|Qwen/Qwen2.5-3B-Instruct"]["ms_per_token"] == pytest.approx(107, abs=2)
    assert times["unsloth|Qwen/Qwen2.5-3B-Instruct"]["ms_per_token"] == pytest.approx(75, abs=5)
    assert (
        times["unsloth|Qwen/Qwen2.5-1.5B-Instruct"]["ms_per_token"]
        < times["trl|Qwen/Qwen2.5-1.5B-Instruct"]["ms_per_token"]
    )


def test_run_prints_the_estimate_before_any_trial_starts(capsys, monkeypatch, tmp_path):
    import orchestrator.running.driver as driver

    def no_run(*args, **kwargs):
        printed = capsys.readouterr()
        raise SystemExit(printed.out + printed.err)

    monkeypatch.setattr(driver, "run_sweep", no_run)
    with pytest.raises(SystemExit) as ended:
        main(["run", str(FRONTIER), "--output-dir", str(tmp_path / "out"), "--no-report"])
    said = str(ended.value)
    assert "estimated time on an H100" in said and "synthetic probes" in said
    assert "expected, were the memory answers right" in said and "ms per token" in said
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_the_estimate_and_a_cpu_sweep_gets_none(capsys):
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    said = capsys.readouterr().out
    assert "worst case, every trial run" in said and "bench/data/h100-2026-11-26/trials.csv" in said
    assert main(["run", "--dry-run", str(ROOT / "sweeps" / "cpu-smoke.yaml")]) == 0
    assert "estimated time on an H100" not in capsys.readouterr().out


def test_a_sweep_whose_trials_the_model_calls_sure_fits_or_ooms_expects_less_than_the_worst_case():
    sweep = load_sweep(FRONTIER)
    estimate = estimate_sweep(sweep, plan(sweep).trials)
    assert estimate.search.count("probed") < 168 / 3
    assert estimate.search.count("pruned") > 0 and estimate.search.count("implied") > 0
    assert estimate.expected_s < estimate.worst_s / 3
    # probing everything (no frontier, no prediction) expects the worst case
    every = load_sweep(
        FRONTIER,
        ["oom.frontier=false", "oom.predict=false", "oom.prune_dominated=false", "oom.session=false"],
    )
    flat = estimate_sweep(every, plan(every).trials)
    assert flat.search.count("probed") == 168 and flat.expected_s == pytest.approx(flat.worst_s)


def test_probe_sessions_count_each_sessions_start_up_once_and_each_probe_in_full_otherwise():
    sweep = load_sweep(FRONTIER)
    alone = load_sweep(FRONTIER, ["oom.session=false"])
    trials = plan(sweep).trials
    with_sessions, without = estimate_sweep(sweep, trials), estimate_sweep(alone, trials)
    assert with_sessions.search.outcome == without.search.outcome  # the same probes
    assert with_sessions.sessions == 2 and without.sessions is None  # one per stack: the same model
    startup = {s: f["startup_s"] for s, f in ((k.split("|")[0], f) for k, f in load_times()["times"].items()
                                              if k.endswith("Qwen2.5-3B-Instruct"))}  # fmt: skip
    probed = [t for t in trials if with_sessions.search.outcome[t.trial_key] == "probed"]
    saved = sum(startup[t.stack] for t in probed) - sum(startup[f] for f in {t.stack for t in probed})
    assert without.expected_s - with_sessions.expected_s == pytest.approx(saved)
    once = sum(startup[f] for f in {t.stack for t in probed})  # packed: the slots start theirs at once
    assert with_sessions.packed_s == pytest.approx((with_sessions.expected_s - once) / 4 + once)
    assert any("2 probe sessions" in line for line in with_sessions.lines())


def test_synthetic_probes_expect_less_time_than_decoded_ones_for_the_same_probes():
    sweep = load_sweep(FRONTIER)
    synthetic = estimate_sweep(sweep, plan(sweep).trials, probe="synthetic")
    decoded = estimate_sweep(sweep, plan(sweep).trials, probe="decode")
    assert synthetic.search.outcome == decoded.search.outcome
    assert synthetic.expected_s < decoded.expected_s and synthetic.worst_s < decoded.worst_s
    # packing four 16 GiB probes on the 79 GiB H100 divides the memory phase, no more
    alone = estimate_sweep(load_sweep(FRONTIER, ["oom.session=false"]), plan(sweep).trials, probe="synthetic")
    assert alone.per_gpu == 4 and alone.packed_s == pytest.approx(alone.expected_s / 4)
    assert "synthetic probes" in "\n".join(synthetic.lines())
    assert "decode probes" in "\n".join(decoded.lines())
    with pytest.raises(ValueError, match="oom.probe_kind: 'sampled' is not a probe kind"):
        estimate_sweep(sweep, plan(sweep).trials, probe="sampled")


def test_the_played_out_search_probes_a_line_by_bisection():
    specs = [
        {"trial_key": f"L{n}", "max_completion_length": n, "num_generations": 2, "batch_size": 1}
        for n in range(1, 17)
    ]

    class Spec(dict):
        trial_key = property(lambda self: self["trial_key"])

    specs = [Spec(s) for s in specs]
    search = expected_probes(specs, lambda s: s["max_completion_length"] <= 9)
    assert search.count("probed") <= 5 and len(search.outcome) == 16


def test_dry_run_of_models_with_no_h100_row_prints_predicted_times_not_unknown(capsys, tmp_path):
    sweep = tmp_path / "families.yaml"
    sweep.write_text(
        "name: families\ntask: arithmetic\n"
        "grid:\n  stack: [unsloth, trl]\n"
        "  model: [random:meta-llama/Llama-3.2-1B-Instruct, random:google/gemma-3-1b-it, random:Qwen/Qwen3-1.7B]\n"
        "fixed:\n  num_generations: 16\n  batch_size: 1\n  max_steps: 1\n  max_prompt_length: 256\n"
        "  max_completion_length: 512\n  quantization: nf4\n"
        "resources:\n  gpus_per_trial: 1\nmemory:\n  budget_gib: 16\nphases: [memory]\noom:\n  probe_steps: 1\n"
    )
    assert main(["run", "--dry-run", str(sweep), "--output-dir", str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    assert "unknown" not in said
    assert "estimated (H100)" in said and len(re.findall(r"\d s predicted", said)) == 6
    assert "0 trials within its rows" in said and "6 predicted by the speed model" in said
    assert "trl gemma-3-1b-it" in said and "synthetic probes" in said


def test_dry_run_of_the_frontier_says_its_times_come_from_measured_rows(capsys):
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    said = capsys.readouterr().out
    assert "estimated (H100)" in said and re.search(r"\d s measured", said)
    assert not re.search(r"\d s predicted", said)
    assert "32 trials within its rows, 136 extrapolated from them" in said
    assert "0 predicted by the speed model" in said
