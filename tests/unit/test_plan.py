"""Planning: stable readable keys, smallest configurations first."""

import json
from pathlib import Path

import pytest

from orchestrator.plan import expand, model_short, trial_key
from orchestrator.sweep import load_sweep, parse_sweep
from trainers.spec import TrialSpec


@pytest.mark.parametrize(
    ("model", "short"),
    [
        ("tiny", "tiny"),
        ("random:Qwen/Qwen2.5-3B-Instruct", "rand-qwen2.5-3b"),
        ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b"),
        ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
        ("/data/models/My_Model-hf/", "my-model"),
    ],
)
def test_model_short(model, short):
    assert model_short(model) == short


def test_key_is_readable_and_stable():
    spec = TrialSpec(
        framework="trl", mode="gspo", model="random:Qwen/Qwen2.5-3B-Instruct", num_generations=4, batch_size=2
    )
    key = trial_key(spec)
    assert key.startswith("trl-gspo-rand-qwen2.5-3b-k4-b2-")
    assert len(key.rsplit("-", 1)[1]) == 6
    assert key == trial_key(TrialSpec(**spec.to_dict())), "same config, same key"
    # bookkeeping does not change the key; any other knob does
    assert trial_key(TrialSpec(**{**spec.to_dict(), "sweep": "other", "output_dir": "/x"})) == key
    assert trial_key(TrialSpec(**{**spec.to_dict(), "learning_rate": 1e-5})) != key


def test_expand_orders_small_first_and_sets_keys():
    sweep = parse_sweep(
        {
            "name": "p",
            "grid": {
                "framework": ["unsloth", "trl"],
                "num_generations": [8, 2, 4],
                "batch_size": [2, 1],
                "max_completion_length": [64, 32],
            },
            "fixed": {"model": "tiny", "max_steps": 2},
        }
    )
    trials = expand(sweep)
    assert len(trials) == 2 * 3 * 2 * 2
    sizes = [(t.completions_per_step, t.max_prompt_length + t.max_completion_length) for t in trials]
    assert sizes == sorted(sizes)
    assert len({t.trial_key for t in trials}) == len(trials)
    assert all(t.sweep == "p" and t.max_steps == 2 and t.probe_steps == 2 for t in trials)
    assert trials[0].completions_per_step == 2 and trials[-1].completions_per_step == 16


def test_repeated_values_give_one_trial():
    sweep = parse_sweep({"name": "r", "grid": {"num_generations": [2, 2, 4]}})
    assert len(expand(sweep)) == 2


def test_knobs_added_later_leave_the_existing_sweeps_trial_keys_unchanged():
    # tests/fixtures/trial_keys.json: every sweep's keys before grad_accum, lr_scheduler,
    # framework_dtype and data_seed existed; at their defaults those knobs must not move a key.
    root = Path(__file__).resolve().parents[2]
    published = json.loads((root / "tests" / "fixtures" / "trial_keys.json").read_text())
    for path, keys in published.items():
        assert [t.trial_key for t in expand(load_sweep(root / path))] == keys, path


@pytest.mark.parametrize(
    "knob,value",
    [("grad_accum", 2), ("lr_scheduler", "linear"), ("framework_dtype", {"trl": "fp16"}), ("data_seed", 17)],
)
def test_a_knob_added_later_changes_the_key_once_set(knob, value):
    assert trial_key(TrialSpec(**{knob: value})) != trial_key(TrialSpec())
