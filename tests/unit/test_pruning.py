"""Dominance, the Pruner (and its JSON state), the wait policy and the out-of-memory gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.judging.memory import Forecast, Prediction
from orchestrator.judging.pruning import (
    DOMINANCE_KNOBS,
    HOLD,
    RUN,
    OomGate,
    Pruner,
    dominates,
    oom_reading,
    pick_next,
    predict_verdict,
    should_wait,
)
from trainers.trial import KNOBS, TrialSpec


def spec(**changes) -> dict:
    base = TrialSpec(num_generations=2, batch_size=1, trial_key="t", sweep="s").to_dict()
    return base | changes


def test_every_dominance_knob_is_a_trialspec_field():
    assert set(DOMINANCE_KNOBS) <= set(KNOBS)


@pytest.mark.parametrize(
    "knob",
    ["num_generations", "batch_size", "max_prompt_length", "max_completion_length", "lora_r", "max_steps"],
)
def test_larger_in_one_memory_knob_dominates_not_the_reverse(knob):
    small, large = spec(), spec(**{knob: spec()[knob] * 2})
    assert dominates(large, small) and not dominates(small, large)


def test_effective_micro_batch_defaults_to_b_times_k():
    # unset micro = B*K = 4 completions at once: more than micro 2, as much as an explicit 4
    unset, two, four = (
        spec(num_generations=4),
        spec(num_generations=4, micro_batch_size=2),
        spec(num_generations=4, micro_batch_size=4),
    )
    assert dominates(unset, two) and not dominates(two, unset)
    assert dominates(unset, four) and dominates(four, unset)


def test_mixed_directions_do_not_dominate():
    a, b = spec(num_generations=8, batch_size=1), spec(num_generations=2, batch_size=2)
    assert not dominates(a, b) and not dominates(b, a)


def test_ignored_knobs_and_equal_knobs():
    base = spec()
    for ignored in (
        {"seed": 7},
        {"learning_rate": 1e-5},
        {"lora_alpha": 64},
        {"trial_key": "other", "output_dir": "/x"},
    ):
        assert dominates(base | ignored, base) and dominates(base, base | ignored)
    for must_match in (
        {"stack": "unsloth"},
        {"model": "random:Qwen/Qwen2.5-0.5B-Instruct"},
        {"quantization": "none"},
        {"beta": 0.04},
        {"gradient_checkpointing": False},
        {"memory_budget_gib": 8.0},
        {"task_args": {"num_samples": 9}},
        {"a_knob_added_later": 1},
    ):
        big = base | must_match | {"num_generations": 8}
        assert not dominates(big, base), must_match


def test_accepts_trialspec_objects():
    assert dominates(TrialSpec(num_generations=8), TrialSpec(num_generations=4))
    with pytest.raises(TypeError, match="expected a TrialSpec or a dict"):
        dominates(3, TrialSpec())


def test_pruner_prunes_dominating_configs_with_the_detail():
    pruner = Pruner()
    oom = spec(num_generations=4, batch_size=2, trial_key="k4-b2")
    pruner.record_oom("k4-b2", oom, "RSS 1.52 GiB, budget 1.00 GiB")
    assert pruner.pruned_by(spec(num_generations=8, batch_size=2, trial_key="k8-b2")) == (
        "k4-b2",
        "dominated by k4-b2 (oom at RSS 1.52 GiB, budget 1.00 GiB)",
    )
    assert pruner.pruned_by(spec(num_generations=4, batch_size=2, seed=1, trial_key="k4-b2-s1"))[0] == "k4-b2"
    assert pruner.pruned_by(spec(num_generations=2, batch_size=2, trial_key="k2-b2")) is None
    assert pruner.pruned_by(oom) is None  # the trial itself, when resumed, is not "pruned by itself"
    pruner.record_oom("k2-b4", spec(num_generations=2, batch_size=4, trial_key="k2-b4"))
    assert (
        pruner.pruned_by(spec(num_generations=2, batch_size=8, trial_key="x"))[1]
        == "dominated by k2-b4 (oom)"
    )


def test_pruning_off_prunes_nothing_but_keeps_verdicts():
    pruner = Pruner(enabled=False)
    pruner.record_oom("a", spec(), "x")
    assert pruner.pruned_by(spec(num_generations=8, trial_key="b")) is None
    assert len(pruner.verdicts) == 1


def test_pruner_json_roundtrip_and_atomic_save(tmp_path):
    pruner = Pruner()
    pruner.record_oom(
        "a", spec(trial_key="a", task_args={"num_samples": 64}), "RSS 2.00 GiB, budget 1.00 GiB"
    )
    pruner.record_oom("b", TrialSpec(num_generations=8, trial_key="b"))
    pruner.record_oom("a", spec(trial_key="a", num_generations=3), "again")  # re-recorded: replaced
    again = Pruner.from_json(pruner.to_json())
    assert again.verdicts == pruner.verdicts and [v.trial_key for v in again.verdicts] == ["b", "a"]

    path = tmp_path / "state" / "pruning.json"
    assert Pruner.load(path).verdicts == []  # nothing saved yet: a fresh sweep
    pruner.save(path)
    loaded = Pruner.load(path, enabled=False)
    assert loaded.verdicts == pruner.verdicts and loaded.enabled is False
    assert [p.name for p in path.parent.iterdir()] == ["pruning.json"]  # no temp file left
    candidate = spec(num_generations=16, trial_key="c")
    assert Pruner.load(path).pruned_by(candidate) == pruner.pruned_by(candidate)


def test_wait_policy():
    small, large, other = (
        spec(num_generations=2, trial_key="s"),
        spec(num_generations=8, trial_key="l"),
        spec(batch_size=4, num_generations=2, trial_key="o"),
    )
    assert should_wait(large, [small]) and not should_wait(small, [large])
    assert not should_wait(large, [])
    # 'large' dominates running 'small' and waits; 'o' (B=4, K=2) also dominates it; a sibling
    # with a smaller batch dominates nothing running and goes first
    sibling = spec(num_generations=4, batch_size=1, lora_r=8, trial_key="x")
    assert pick_next([large, other, sibling], [small]) == 2
    assert pick_next([large, other], [small]) is None
    assert pick_next([large, other], []) == 0


# --- OomGate: the sweep's decide() hook ------------------------------------------------------------


class Ledger:
    """trials.parquet's rows as OomGate reads them (orchestrator.recording.sinks.TrialsTable)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def done(self, key: str) -> bool:
        return key in self.rows


def trial(key: str, **changes) -> TrialSpec:
    return TrialSpec(**{"num_generations": 2, "batch_size": 1, "sweep": "s", "trial_key": key, **changes})


GUARD_DETAIL = "guard: RSS 1.52 GiB passed budget 1.00 GiB (+0.00 GiB margin)"


def finish(gate: OomGate, ledger: Ledger, spec: TrialSpec, status: str, detail: str = "") -> None:
    row = {"trial_key": spec.trial_key, "status": status, "status_detail": detail, "peak_rss_gib": 1.52}
    row["config"] = spec.to_json()
    gate.record(spec, row)
    ledger.rows[spec.trial_key] = row


def test_gate_prunes_what_dominates_an_oom_and_saves_the_verdict(tmp_path):
    ledger = Ledger()
    gate = OomGate(Pruner(), tmp_path / "pruning.json", ledger)
    small, large, other = (
        trial("small", num_generations=4),
        trial("large", num_generations=8),
        trial("b2", batch_size=2),
    )
    assert gate(small) == RUN
    finish(gate, ledger, small, "oom", GUARD_DETAIL)
    assert gate(large) == "dominated by small (oom at RSS 1.52 GiB, budget 1.00 GiB)"
    assert gate(other) == RUN  # K=2 B=2 does not dominate K=4 B=1
    assert [v.trial_key for v in Pruner.load(tmp_path / "pruning.json").verdicts] == ["small"]


def test_gate_holds_a_trial_while_a_sibling_it_dominates_runs():
    ledger = Ledger()
    gate = OomGate(Pruner(), Path("unused.json"), ledger)
    small, large, other = trial("small"), trial("large", num_generations=4), trial("q", mode="gspo")
    assert gate(small) == RUN
    assert gate(large) == HOLD  # if `small` ends oom, `large` is pruned without running
    assert gate(other) == RUN  # another mode is not dominated: no reason to wait
    finish(gate, ledger, small, "completed")
    assert gate(large) == RUN


def test_gate_waits_for_nobody_without_pruning_or_when_told_not_to():
    for gate in (
        OomGate(Pruner(enabled=False), Path("unused.json"), Ledger()),
        OomGate(Pruner(), Path("unused.json"), Ledger(), wait_for_smaller=False),
    ):
        assert gate(trial("small")) == RUN
        assert gate(trial("large", num_generations=4)) == RUN


def test_gate_with_pruning_off_runs_dominating_trials_but_keeps_verdicts(tmp_path):
    ledger = Ledger()
    gate = OomGate(Pruner(enabled=False), tmp_path / "pruning.json", ledger)
    small = trial("small")
    finish(gate, ledger, small, "oom", GUARD_DETAIL)
    assert gate(trial("large", num_generations=4)) == RUN
    # the verdict was kept: a resume with pruning on uses it
    again = OomGate.load(tmp_path / "pruning.json", ledger, enabled=True)
    assert gate(trial("large", num_generations=4)) == RUN
    assert again(trial("large", num_generations=4)).startswith("dominated by small")


def test_gate_load_takes_oom_rows_missing_from_the_file(tmp_path):
    # the trial's row reached trials.parquet but pruning.json was lost: the ledger is enough
    ledger = Ledger()
    small = trial("small")
    ledger.rows["small"] = {
        "trial_key": "small",
        "status": "oom",
        "status_detail": "OutOfMemoryError: CUDA out of memory",
        "config": small.to_json(),
        "peak_device_gib": 15.9,
        "memory_budget_gib": 16.0,
    }
    gate = OomGate.load(tmp_path / "pruning.json", ledger)
    assert (
        gate(trial("large", batch_size=2))
        == "dominated by small (oom at GPU peak 15.90 GiB, budget 16.00 GiB)"
    )


@pytest.mark.parametrize(
    ("row", "reading"),
    [
        ({"status_detail": GUARD_DETAIL}, "RSS 1.52 GiB, budget 1.00 GiB"),
        (
            {
                "status_detail": "guard: GPU process memory 16.80 GiB passed budget 16.00 GiB (+0.75 GiB margin)"
            },
            "GPU process memory 16.80 GiB, budget 16.00 GiB",
        ),
        (
            {"status_detail": "CUDA out of memory", "peak_rss_gib": 2.0, "peak_device_gib": None},
            "RSS peak 2.00 GiB",
        ),
        ({"status_detail": "killed by SIGKILL", "peak_rss_gib": float("nan")}, None),
        # the record's precedence (trainers.record.peak_memory): torch reserved before RSS
        (
            {
                "status_detail": "CUDA out of memory",
                "peak_torch_reserved_gib": 2.5,
                "peak_rss_gib": 3.0,
                "memory_budget_gib": 3.0,
            },
            "torch reserved peak 2.50 GiB, budget 3.00 GiB",
        ),  # fmt: skip
    ],
)
def test_oom_reading(row, reading):
    assert oom_reading(row) == reading


def test_pruner_state_round_trips_through_an_object_store_path(tmp_path):
    import pyarrow.fs as pafs

    from orchestrator.judging.pruning import Pruner
    from orchestrator.words.storage import RemotePath

    remote = RemotePath(pafs.LocalFileSystem(), str(tmp_path / "bucket"), "s3") / "pruning.json"
    pruner = Pruner()
    pruner.record_oom(
        "trl-grpo-tiny-k4-b1-abc", {"model": "tiny", "num_generations": 4, "batch_size": 1}, "RSS 1 GiB"
    )
    pruner.save(remote)
    loaded = Pruner.load(remote)
    assert [v.trial_key for v in loaded.verdicts] == ["trl-grpo-tiny-k4-b1-abc"]
    assert Pruner.load(RemotePath(pafs.LocalFileSystem(), str(tmp_path / "none.json"), "s3")).verdicts == []


# --- pruning by prediction (oom.predict) ----------------------------------------------------------


def test_a_trial_predicted_wholly_over_the_budget_is_pruned_with_its_prediction():
    over = Prediction(17.9, 16.8, 19.0, "GPU", 4, "fitted")
    assert predict_verdict(over, 16.0) == "predicted 17.9 GiB (16.8-19.0) > budget 16 GiB"


@pytest.mark.parametrize("budget", [16.8, 17.9, 18.99, 19.0, 25.0, None])
def test_a_trial_whose_interval_reaches_the_budget_is_never_pruned(budget):
    assert predict_verdict(Prediction(17.9, 16.8, 19.0, "GPU", 4, "fitted"), budget) is None


def test_an_unknown_prediction_prunes_nothing():
    unknown = Prediction(None, None, None, "GPU", 0, "prior", unknown="model: no config.json")
    assert predict_verdict(unknown, 1.0) is None


def measured(spec: TrialSpec, peak: float) -> dict:
    return {
        "trial_key": spec.trial_key,
        "status": "completed",
        "config": spec.to_json(),
        "peak_rss_gib": peak,
    }


def test_the_gate_predicts_every_trial_from_the_ledger_and_prunes_only_with_predict_on():
    ledger = Ledger()
    for k, peak in ((2, 0.80), (4, 0.85), (8, 0.95)):  # RSS grows 0.025 GiB a completion
        ledger.rows[f"k{k}"] = measured(trial(f"k{k}", num_generations=k), peak)
    budget = 1.2
    large, middling = (
        trial("k48", num_generations=48, memory_budget_gib=budget),
        trial("k12", num_generations=12, memory_budget_gib=budget),
    )
    forecast = Forecast(ledger.rows)
    watching = OomGate(Pruner(), Path("unused.json"), ledger, forecast=forecast, predict=False)
    assert watching(large) == RUN
    assert forecast.made["k48"].n_fitted == 3 and forecast.made["k48"].basis == "fitted"
    assert forecast.made["k48"].low_gib > budget  # 0.75 + 0.025 x 48 = 1.95 GiB by the measured line

    pruning = OomGate(Pruner(), Path("unused.json"), ledger, forecast=Forecast(ledger.rows), predict=True)
    verdict = pruning(large)
    assert verdict.startswith("predicted ") and verdict.endswith("> budget 1.2 GiB")
    assert pruning(middling) == RUN  # 0.75 + 0.025 x 12 = 1.05 GiB: under the budget


def test_with_sessions_the_gate_asks_about_one_sessions_trials_before_the_next_ones_in_plan_order():
    from orchestrator.judging.pruning import grouped

    plan_order = ["trl-k2", "unsloth-k2", "trl-k4", "unsloth-k4", "trl-k8"]
    stack = lambda name: name.split("-")[0]  # noqa: E731
    assert grouped(plan_order, stack) == ["trl-k2", "trl-k4", "trl-k8", "unsloth-k2", "unsloth-k4"]
    assert grouped(plan_order, None) == plan_order
    # after a trial of the session that ran last, its session's go on first
    assert grouped(plan_order[1:], stack, "trl") == ["trl-k4", "trl-k8", "unsloth-k2", "unsloth-k4"]
