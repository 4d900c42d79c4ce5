"""A short trial's probe steps: how many steps a decoded probe's completions are trained on, and the
warning, with its fix, where they would be every step of the trial."""

from __future__ import annotations

import pytest

from trainers._trial_rules import decoded_probe_span, mode_warnings
from trainers.trial import TrialSpec


def spec(**knobs) -> TrialSpec:
    return TrialSpec(model="tiny", num_generations=2, batch_size=1, **knobs)


@pytest.mark.parametrize(
    "probe_steps, num_iterations, kind, span",
    [
        (1, 2, "decode", 2),
        (2, 2, "decode", 2),
        (3, 2, "decode", 4),
        (1, 1, "decode", 1),
        (1, 2, "synthetic", 1),
    ],
)
def test_a_decoded_probe_spans_its_generation_cycles_and_a_synthetic_one_its_own_steps(
    probe_steps, num_iterations, kind, span
):
    assert (
        decoded_probe_span(spec(probe_steps=probe_steps, num_iterations=num_iterations, probe_kind=kind))
        == span
    )


def test_a_two_step_trial_whose_decoded_probe_is_reused_is_warned_with_the_steps_it_needs():
    warned = mode_warnings(spec(max_steps=2, probe_steps=1, num_iterations=2, probe_kind="decode"))
    said = [w for w in warned if w.startswith("probe_kind: decode")]
    assert len(said) == 1 and "all 2 steps are (verdict too_short)" in said[0]
    assert "set max_steps to 3 or more, or probe_kind: synthetic" in said[0]


def test_a_two_step_trial_with_a_synthetic_probe_or_three_steps_is_not_warned():
    for knobs in ({"probe_kind": "synthetic"}, {"probe_kind": "decode", "max_steps": 3}):
        asked = {"max_steps": 2, "probe_steps": 1, "num_iterations": 2} | knobs
        assert not any("too_short" in w for w in mode_warnings(spec(**asked))), knobs
