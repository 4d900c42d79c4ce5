"""Frontier search (orchestrator/judging/frontier.py): implied fits, the model's veto, the bisection
order and FrontierGate, without Ray."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from orchestrator.judging.frontier import (
    FitVerdict,
    FrontierGate,
    Skip,
    bisection_order,
    fit_chance,
    implying,
    measured_fit,
    model_disagrees,
    skip_status,
)
from orchestrator.judging.memory import Prediction
from orchestrator.judging.pruning import HOLD, RUN, Pruner
from orchestrator.recording.sinks import trial_row
from orchestrator.words.outcome import COMPLETED, IMPLIED, OOM, PRUNED
from trainers.record import PEAK_SOURCES
from trainers.trial import TrialSpec


def trial(key: str, **changes) -> TrialSpec:
    return TrialSpec(**{"num_generations": 2, "batch_size": 1, "sweep": "s", "trial_key": key, **changes})


def fit_of(spec: TrialSpec, peak: float | None = 0.7) -> FitVerdict:
    return FitVerdict(spec.trial_key, spec.to_dict(), peak)


def prediction(peak: float) -> Prediction:
    return Prediction(peak, peak - 0.05, peak + 0.05, "RSS", 3, "fitted")


class Ledger:
    """trials.parquet's rows as the gate reads them (orchestrator.recording.sinks.TrialsTable)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def done(self, key: str) -> bool:
        return key in self.rows


def finish(gate, ledger: Ledger, spec: TrialSpec, status: str, peak: float = 0.7) -> None:
    row = {
        "trial_key": spec.trial_key,
        "status": status,
        "status_detail": "",
        "peak_rss_gib": peak,
        "memory_budget_gib": spec.memory_budget_gib,
        "config": spec.to_json(),
    }
    gate.record(spec, row)
    ledger.rows[spec.trial_key] = row


def test_a_configuration_that_a_measured_fit_dominates_is_implied_by_it():
    large = trial("large", num_generations=8, max_completion_length=64)
    small = trial("small", num_generations=4, max_completion_length=32)
    assert implying(small, [fit_of(large)]).trial_key == "large"


def test_a_fit_implies_neither_itself_nor_a_larger_nor_an_incomparable_configuration():
    fit = trial("f", num_generations=4, batch_size=2)
    larger, incomparable = (
        trial("l", num_generations=8, batch_size=2),
        trial("i", num_generations=2, batch_size=4),
    )
    other_mode = trial("m", num_generations=2, mode="gspo")
    assert all(implying(x, [fit_of(fit)]) is None for x in (fit, larger, incomparable, other_mode))


def test_only_a_completed_row_within_its_budget_is_a_measured_fit():
    config = trial("k").to_json()
    row = {"status": COMPLETED, "config": config, "peak_rss_gib": 0.8, "memory_budget_gib": 0.9}
    assert measured_fit(row)
    assert not measured_fit({**row, "peak_rss_gib": 0.95})  # completed over its budget: not a fit
    assert not measured_fit({**row, "status": IMPLIED})  # an implication implies nothing of its own
    assert not measured_fit({**row, "status": OOM})


def test_the_memory_model_disagrees_only_when_it_predicts_the_peak_over_the_budget():
    assert model_disagrees(prediction(0.95), 0.9)
    assert not model_disagrees(prediction(0.85), 0.9)  # its interval may cross the budget: no veto
    assert not model_disagrees(None, 0.9) and not model_disagrees(prediction(0.95), None)
    unknown = Prediction(None, None, None, "RSS", 0, "prior", unknown="no config")
    assert not model_disagrees(unknown, 0.9)


def test_a_skip_is_its_detail_string_and_names_its_status():
    skip = Skip("fits: implied by f", IMPLIED, "f")
    assert skip == "fits: implied by f" and skip_status(skip) == (IMPLIED, "f")
    assert skip_status("dominated by x (oom)") == (PRUNED, None)


def test_bisection_on_one_axis_probes_the_middle_first():
    chain = [trial(f"k{k}", num_generations=k) for k in (2, 4, 8, 16, 32)]
    assert bisection_order(chain, decided=lambda s: False)[0].num_generations == 8


def test_decided_configurations_come_first_and_those_waiting_on_a_trial_in_flight_last():
    chain = [trial(f"k{k}", num_generations=k) for k in (2, 4, 8)]
    other = trial("gspo", mode="gspo")
    order = bisection_order(
        [*chain, other], decided=lambda s: s.trial_key == "k8", in_flight=[trial("f", num_generations=4)]
    )
    assert [s.trial_key for s in order][0] == "k8"
    assert [s.trial_key for s in order][1] == "gspo"  # the K chain waits on K=4 in flight


def search(specs: list[TrialSpec], fits: dict[str, bool]) -> tuple[dict[str, str], int]:
    """The frontier search over `specs` with every probe answered from `fits`: (verdict per key, probes)."""
    pruner, measured, verdicts, probes = Pruner(), [], {}, 0
    queue = list(specs)
    while queue:
        spec = bisection_order(queue, lambda s: bool(pruner.pruned_by(s) or implying(s, measured)))[0]
        queue.remove(spec)
        if pruner.pruned_by(spec):
            verdicts[spec.trial_key] = "oom"
        elif implying(spec, measured):
            verdicts[spec.trial_key] = "fits"
        else:
            probes += 1
            verdicts[spec.trial_key] = "fits" if fits[spec.trial_key] else "oom"
            if fits[spec.trial_key]:
                measured.append(fit_of(spec))
            else:
                pruner.record_oom(spec.trial_key, spec)
    return verdicts, probes


GRID = [
    trial(f"k{k}b{b}l{length}", num_generations=k, batch_size=b, max_completion_length=length)
    for k, b, length in itertools.product((2, 4, 8, 16), (1, 2, 4, 8), (16, 32, 64))
]


def test_with_sessions_one_sessions_trials_come_before_the_next_ones_each_in_bisection_order():
    line = [
        trial(f"{stack}{k}", stack=stack, num_generations=k)
        for k in (2, 4, 8, 16, 32)
        for stack in ("trl", "unsloth")
    ]
    undecided = lambda spec: False  # noqa: E731
    alone = bisection_order(line, undecided)
    grouped = bisection_order(line, undecided, group=lambda spec: spec.stack)
    assert [s.stack for s in grouped] == ["trl"] * 5 + ["unsloth"] * 5
    for stack in ("trl", "unsloth"):
        assert [s for s in grouped if s.stack == stack] == [s for s in alone if s.stack == stack]


@pytest.mark.parametrize("budget", [0.8, 0.9, 1.0, 1.2])
def test_frontier_search_on_a_48_configuration_grid_gives_probing_alls_verdicts_in_under_two_fifths_of_the_probes(
    budget,
):
    def peak(s: TrialSpec) -> float:  # memory grows with the completions' tokens, as logits do
        return 0.62 + 0.0003 * s.batch_size * s.num_generations * (40 + s.max_completion_length)

    fits = {s.trial_key: peak(s) <= budget for s in GRID}
    verdicts, probes = search(GRID, fits)
    assert verdicts == {k: "fits" if f else "oom" for k, f in fits.items()}
    assert probes <= 0.4 * len(GRID)


def test_the_probes_grow_with_the_frontier_not_the_grid():
    def fits(specs, cut):
        return {s.trial_key: s.num_generations * s.batch_size <= cut for s in specs}

    small = [trial(f"k{k}b{b}", num_generations=k, batch_size=b) for k in (2, 4, 8) for b in (1, 2, 4)]
    large = [
        trial(f"k{k}b{b}", num_generations=k, batch_size=b) for k in (2, 4, 8, 16, 32, 64) for b in (1, 2, 4)
    ]
    # the same frontier (K x B <= 8) in a grid twice as large costs at most a bisection step more
    assert search(large, fits(large, 8))[1] <= search(small, fits(small, 8))[1] + 2


def test_the_gate_records_a_trial_a_measured_fit_dominates_as_implied_with_the_fit_and_the_prediction():
    ledger = Ledger()
    gate = FrontierGate(Pruner(), Path("unused.json"), ledger)
    large, small = (
        trial("large", num_generations=8, memory_budget_gib=0.9),
        trial("small", memory_budget_gib=0.9),
    )
    assert gate(large) == RUN
    finish(gate, ledger, large, COMPLETED, peak=0.8)
    verdict = gate(small)
    assert skip_status(verdict) == (IMPLIED, "large")
    assert verdict.startswith("fits: implied by large (measured 0.80 GiB), which dominates it")


def test_the_gate_probes_an_implied_trial_when_the_memory_model_predicts_it_over_the_budget():
    class Veto:
        made: dict = {}

        def before(self, spec):
            return prediction(0.95)

    ledger = Ledger()
    gate = FrontierGate(Pruner(), Path("unused.json"), ledger, forecast=Veto())
    large, small = (
        trial("large", num_generations=8, memory_budget_gib=0.9),
        trial("small", memory_budget_gib=0.9),
    )
    finish(gate, ledger, large, COMPLETED, peak=0.8)
    assert gate(small) == RUN


def test_the_gate_holds_a_trial_dominated_by_one_in_flight_and_prunes_one_that_dominates_an_oom(tmp_path):
    ledger = Ledger()
    gate = FrontierGate(Pruner(), tmp_path / "pruning.json", ledger)
    middle, small, large = (
        trial("m", num_generations=8),
        trial("s", num_generations=4),
        trial("l", num_generations=16),
    )
    assert gate(middle) == RUN
    assert gate(small) == HOLD and gate(large) == HOLD  # either way, `middle`'s verdict decides them
    finish(gate, ledger, middle, OOM)
    assert gate(large).startswith("dominated by m")
    assert gate(small) == RUN


def test_a_trial_whose_memory_verdict_is_known_runs_its_speed_phase_rather_than_being_implied():
    ledger = Ledger()
    gate = FrontierGate(Pruner(), Path("unused.json"), ledger)
    large, small = trial("large", num_generations=8), trial("small")
    finish(gate, ledger, large, COMPLETED)
    ledger.rows["small"] = {"trial_key": "small", "status": IMPLIED, "config": small.to_json()}
    assert gate(small) == RUN
    assert [s.trial_key for s in gate.order([small, large])] == ["small", "large"]  # plan order kept


def test_an_implied_row_names_its_fit_and_holds_null_for_everything_measured():
    spec = trial("small", memory_budget_gib=0.9)
    row = trial_row(spec, None, [], status=IMPLIED, detail="fits: implied by large", prediction=prediction(0.7),
                    implied_by="large")  # fmt: skip
    assert (row["status"], row["implied_by"], row["predicted_peak_gib"]) == (IMPLIED, "large", 0.7)
    measured = ["wall_s", "trainer_s", "steps_completed", "median_step_s", "phase", "training_verdict"]
    assert all(row[c] is None for c in measured + [column for _, column, _ in PEAK_SOURCES])


def test_the_chance_to_fit_comes_only_from_a_model_fitted_on_measured_trials():
    assert fit_chance(prediction(0.7), 0.9) == pytest.approx(1.0)
    assert fit_chance(prediction(1.1), 0.9) == pytest.approx(0.0)
    assert fit_chance(prediction(0.9), 0.9) == pytest.approx(0.5)
    prior = Prediction(0.7, 0.6, 0.8, "RSS", 0, "prior")
    assert fit_chance(prior, 0.9) is None and fit_chance(prediction(0.7), None) is None


def test_a_model_that_knows_the_frontier_sends_the_first_probe_to_it():
    chain = [trial(f"k{k}", num_generations=k) for k in (2, 4, 8, 16, 32, 64, 128)]
    # the model says K <= 32 fits: probing K=32 first implies five trials at once
    first = bisection_order(chain, lambda s: False, chance=lambda s: float(s.num_generations <= 32))[0]
    assert first.num_generations == 32
