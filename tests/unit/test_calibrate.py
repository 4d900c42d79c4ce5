"""`rlsweep calibrate`'s choice of probes (orchestrator/judging/calibrate.py): each role changes one thing
from the first probe, so the probes pin distinct terms of the memory model, and every probe is predicted
to fit the budget with room to spare."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.judging.calibrate import (
    FEW_LONG,
    FEW_SHORT,
    HEADROOM,
    MANY_LONG,
    MANY_SHORT,
    MAX_PROBE_TOKENS,
    CalibrationError,
    choose,
)
from orchestrator.judging.memory import FITS, MemoryModel
from orchestrator.judging.memory._model import model_shape
from orchestrator.judging.memory._terms import terms
from trainers.trial import TrialSpec

# (measure, model, stack, quantization, budget GiB): cards people calibrate on, and tiny on this CPU.
CASES = [
    ("GPU", "Qwen/Qwen2.5-1.5B-Instruct", "trl", "nf4", 15.6),
    ("GPU", "Qwen/Qwen2.5-7B-Instruct", "unsloth", "nf4", 15.6),
    ("GPU", "Qwen/Qwen2.5-3B-Instruct", "trl", "none", 23.99),
    ("RSS", "tiny", "trl", "none", 4.0),
]
PER_TOKEN = ("kv_cache", "activations", "logits", "logit_chunk")


def _plan(measure, model, stack, quantization, budget, probes=4):
    base = TrialSpec(model=model, stack=stack, quantization=quantization)
    return choose(base, MemoryModel.fit([], measure), budget, probes)


def _sizes(probe, measure):
    shape, _ = model_shape(probe.spec.model)
    return terms(probe.spec, shape, "cpu" if measure == "RSS" else "gpu")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[2]}-{c[1]}-{c[4]:g}")
def test_every_probe_is_predicted_to_fit_the_budget_with_room_to_spare(case):
    budget = case[-1]
    plan = _plan(*case)
    assert [p.role for p in plan.probes] == [FEW_SHORT, FEW_LONG, MANY_SHORT, MANY_LONG], plan.notes
    for probe in plan.probes:
        prediction = probe.prediction
        assert prediction.verdict(budget) == FITS, (probe.role, prediction.describe())
        assert prediction.peak_gib <= (1 - HEADROOM) * budget
        spec = probe.spec
        assert spec.num_generations * spec.batch_size * spec.max_completion_length <= MAX_PROBE_TOKENS
        assert (spec.probe_steps, spec.max_steps, spec.memory_budget_gib) == (1, 1, budget)
        assert spec.probe_kind == "synthetic"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[2]}-{c[1]}-{c[4]:g}")
def test_each_probe_changes_one_thing_from_the_first_so_its_terms_move_alone(case):
    plan = _plan(*case)
    first, long, many = (plan.role(r) for r in (FEW_SHORT, FEW_LONG, MANY_SHORT))
    sizes = {p.role: _sizes(p, case[0]) for p in (first, long, many)}
    # few, long: the completion alone grows; the per-token terms with it, the per-sequence one not
    assert long.spec.num_generations == first.spec.num_generations
    assert long.spec.max_completion_length > first.spec.max_completion_length
    assert sizes[FEW_LONG]["sampling_logits"] == sizes[FEW_SHORT]["sampling_logits"]
    assert sum(sizes[FEW_LONG][t] for t in PER_TOKEN) > sum(sizes[FEW_SHORT][t] for t in PER_TOKEN)
    # many, short: K alone grows; the per-sequence term with it
    assert many.spec.max_completion_length == first.spec.max_completion_length
    assert many.spec.num_generations > first.spec.num_generations
    assert sizes[MANY_SHORT]["sampling_logits"] > sizes[FEW_SHORT]["sampling_logits"]
    # the three peaks separate the constant, per-sequence and per-token parts: their terms span three
    # directions, so no two of them are one probe scaled
    matrix = np.array([list(sizes[r].values()) for r in (FEW_SHORT, FEW_LONG, MANY_SHORT)])
    assert np.linalg.matrix_rank(matrix) == 3


def test_the_fourth_probe_grows_both_and_is_the_largest_predicted_peak_of_its_kind():
    plan = _plan("GPU", "Qwen/Qwen2.5-1.5B-Instruct", "trl", "nf4", 15.6)
    first, both = plan.role(FEW_SHORT).spec, plan.role(MANY_LONG).spec
    assert both.num_generations > first.num_generations
    assert both.max_completion_length > first.max_completion_length
    assert plan.role(MANY_LONG).prediction.peak_gib > plan.role(FEW_SHORT).prediction.peak_gib


def test_three_probes_leave_out_the_fourth():
    plan = _plan("RSS", "tiny", "trl", "none", 4.0, probes=3)
    assert [p.role for p in plan.probes] == [FEW_SHORT, FEW_LONG, MANY_SHORT]


def test_a_role_nothing_fits_is_left_out_and_said_why():
    # smollm2 on a 4 GiB CPU budget: the prior's interval at K=2, completion 128 already reaches past it
    plan = _plan("RSS", "smollm2", "trl", "none", 4.0)
    assert [p.role for p in plan.probes] == [FEW_SHORT]
    assert "reaches past the budget; it runs anyway, as the smallest configuration" in plan.notes[0]
    left_out = [n for n in plan.notes if " left out: " in n]
    assert [n.split(" left out")[0] for n in left_out] == [FEW_LONG, MANY_SHORT, MANY_LONG]
    assert all("is predicted to fit 4 GiB" in n for n in left_out)


def test_a_budget_the_smallest_probe_is_predicted_over_is_refused_with_the_fix():
    with pytest.raises(
        CalibrationError, match="over the 4 GiB budget, and it is the smallest asked for"
    ) as caught:
        _plan("GPU", "Qwen/Qwen2.5-14B-Instruct", "trl", "nf4", 4.0)
    said = str(caught.value)
    assert said.endswith("Give a larger budget or a smaller model")
    assert "quantization=nf4" not in said and "no GPU here" not in said  # nf4 already; a GPU's figures


def test_a_cpu_hosts_refusal_says_its_probes_would_measure_rss_and_offers_only_fixes_that_apply():
    with pytest.raises(CalibrationError) as caught:
        _plan("RSS", "Qwen/Qwen2.5-14B-Instruct", "trl", "none", 4.0)
    said = str(caught.value)
    assert "no GPU here: the probes would measure this host's RSS" in said
    assert said.endswith("or --set quantization=nf4")


def test_probes_chosen_after_one_measured_stay_within_the_room_the_fitted_model_leaves():
    # a fitted model: the first probe measured at its predicted peak; the rest are chosen from it
    base = TrialSpec(model="tiny", stack="trl", quantization="none")
    first = _plan("RSS", "tiny", "trl", "none", 4.0).role(FEW_SHORT)
    row = {
        "config": first.spec.to_json(), "status": "completed", "peak_rss_gib": first.prediction.peak_gib,
        "memory_budget_gib": 4.0,
    }  # fmt: skip
    plan = choose(base, MemoryModel.fit([row], "RSS"), 4.0)
    assert plan.role(FEW_SHORT).prediction.basis == "fitted"
    for probe in plan.probes:
        assert probe.prediction.verdict(4.0) == FITS
        assert probe.prediction.peak_gib <= (1 - HEADROOM) * 4.0
