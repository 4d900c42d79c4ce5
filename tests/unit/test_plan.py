"""Planning: stable readable keys that never merge two trials, smallest configurations first."""

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from orchestrator.spec import plan as plan_module
from orchestrator.spec.load import load_sweep, parse_sweep
from orchestrator.spec.plan import config_mismatches, expand, plan, trial_key
from orchestrator.spec.sweep import SweepError
from orchestrator.words.names import model_short
from trainers.trial import BOOKKEEPING, EXECUTION, KEYED_WHEN_SET, KNOBS, TrialSpec


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
        stack="trl", mode="gspo", model="random:Qwen/Qwen2.5-3B-Instruct", num_generations=4, batch_size=2
    )
    key = trial_key(spec)
    assert key.startswith("trl-gspo-rand-qwen2.5-3b-k4-b2-")
    assert len(key.rsplit("-", 1)[1]) == 12, "a 48-bit digest"
    assert key == trial_key(TrialSpec(**spec.to_dict())), "same config, same key"
    # bookkeeping does not change the key; any other knob does
    assert trial_key(TrialSpec(**{**spec.to_dict(), "sweep": "other", "output_dir": "/x"})) == key
    assert trial_key(TrialSpec(**{**spec.to_dict(), "learning_rate": 1e-5})) != key


def test_expand_orders_small_first_and_sets_keys():
    sweep = parse_sweep(
        {
            "name": "p",
            "grid": {
                "stack": ["unsloth", "trl"],
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
    assert all(
        t.sweep == "p" and t.max_steps == 2 and t.probe_steps == 1 for t in trials
    )  # one step left to train
    assert trials[0].completions_per_step == 2 and trials[-1].completions_per_step == 16


def test_repeated_values_give_one_trial():
    sweep = parse_sweep({"name": "r", "grid": {"num_generations": [2, 2, 4]}})
    assert len(expand(sweep)) == 2


def test_a_trial_key_ignores_bookkeeping_and_execution_knobs_and_follows_every_other():
    base = TrialSpec()
    changed = {"trial_key": "x", "sweep": "s", "output_dir": "/o", "events_path": "/e", "model_cache_dir": "/c",
               "num_threads": 3, "hold_at_step": 3, "vllm_server_port": 8000}  # fmt: skip
    assert set(changed) == set(BOOKKEEPING + EXECUTION)
    assert trial_key(TrialSpec(**changed)) == trial_key(base)
    for name in KNOBS:
        if name in changed or name in KEYED_WHEN_SET or name == "task_args":
            continue
        value = getattr(base, name)
        other = (
            not value if isinstance(value, bool)
            else value + 1 if isinstance(value, (int, float))
            else "bf16" if name == "dtype" else "none" if name == "quantization" else "gspo" if name == "mode"
            else "unsloth" if name == "stack" else "dapo" if name == "loss_type" else f"{value}-other"
        )  # fmt: skip
        assert trial_key(dataclasses.replace(base, **{name: other})) != trial_key(base), name


def test_a_ten_thousand_trial_grid_keeps_every_trial():
    # With 24-bit digests two pairs of these seeds shared a key and two trials vanished without a word.
    trials = expand(parse_sweep({"name": "many", "grid": {"seed": list(range(10_000))}}))
    assert sorted(t.seed for t in trials) == list(range(10_000))


def test_models_with_one_short_name_get_different_keys():
    assert model_short("org-a/Model-Instruct") == model_short("org-b/model")
    assert trial_key(TrialSpec(model="org-a/Model-Instruct")) != trial_key(TrialSpec(model="org-b/model"))


def test_two_configurations_with_one_key_are_refused_naming_both(monkeypatch):
    monkeypatch.setattr(plan_module, "trial_key", lambda spec: "trl-grpo-tiny-k4-b2-000000000000")
    sweep = parse_sweep({"name": "c", "grid": {"seed": [1, 2], "beta": [0.0]}})
    with pytest.raises(SweepError) as info:
        expand(sweep)
    (error,) = info.value.errors
    assert error.startswith(
        "trial key trl-grpo-tiny-k4-b2-000000000000: two different configurations (seed: 1 vs 2)"
    )


def test_a_repeated_value_is_one_trial_even_with_one_key(monkeypatch):
    monkeypatch.setattr(plan_module, "trial_key", lambda spec: "same")
    assert len(expand(parse_sweep({"name": "r", "grid": {"seed": [3, 3]}}))) == 1


def stored_row(spec: TrialSpec, **changes) -> dict:
    """A trials.parquet row as the ledger writes it: config is the spec minus events_path/output_dir."""
    config = {k: v for k, v in spec.to_dict().items() if k not in ("events_path", "output_dir")}
    return {"trial_key": spec.trial_key, "config": json.dumps({**config, **changes}, sort_keys=True)}


def test_config_mismatches_names_the_keys_whose_stored_config_differs():
    trials = expand(
        parse_sweep({"name": "m", "grid": {"num_generations": [2, 4]}, "fixed": {"max_steps": 3}})
    )
    same, changed = trials
    rows = [
        stored_row(
            same, num_threads=8, model_cache_dir="/elsewhere", sweep="renamed"
        ),  # not the configuration
        stored_row(changed, max_steps=5, learning_rate=1e-5),
        {"trial_key": "gone-from-the-plan", "config": "{}"},
    ]
    found = config_mismatches(rows, trials)
    assert list(found) == [changed.trial_key]
    assert found[changed.trial_key] == (
        f"{changed.trial_key}: the output dir holds this trial with another configuration (stored vs "
        "planned: learning_rate: 1e-05 vs 0.0002; max_steps: 5 vs 3); resume into a fresh --output-dir, "
        "or rerun the sweep as it was"
    )


def test_config_mismatches_takes_a_knob_missing_from_an_old_row_as_its_default():
    (spec,) = expand(parse_sweep({"name": "o"}))
    config = json.loads(stored_row(spec)["config"])
    del config["eval_k"]  # a knob added after the row was written
    assert config_mismatches([{"trial_key": spec.trial_key, "config": json.dumps(config)}], [spec]) == {}
    config["retired_knob"] = 1
    found = config_mismatches([{"trial_key": spec.trial_key, "config": json.dumps(config)}], [spec])
    assert "retired_knob: 1 vs (not a setting)" in found[spec.trial_key]


def test_knobs_added_later_leave_the_existing_sweeps_trial_keys_unchanged():
    # tests/fixtures/trial_keys.json: every sweep's keys when the 48-bit keys were introduced; knobs
    # added since (KEYED_WHEN_SET) must not move a key at their defaults. original-16gb.yaml was re-keyed
    # when it took the original benchmark's answer rule (task_args.answer_rule: original): a change of its
    # configuration, not of a default.
    root = Path(__file__).resolve().parents[2]
    published = json.loads((root / "tests" / "fixtures" / "trial_keys.json").read_text())
    for path, keys in published.items():
        assert [t.trial_key for t in expand(load_sweep(root / path))] == keys, path


@pytest.mark.parametrize(
    "knob,value",
    [("grad_accum", 2), ("lr_scheduler", "linear"), ("stack_dtype", {"trl": "fp16"}), ("data_seed", 17)],
)
def test_a_knob_added_later_changes_the_key_once_set(knob, value):
    assert trial_key(TrialSpec(**{knob: value})) != trial_key(TrialSpec())


def test_server_mode_with_one_gpu_a_trial_is_refused_naming_the_resource_and_the_fix():
    raw = {"name": "s", "fixed": {"generation": "vllm", "vllm_mode": "server"}}
    sweep = parse_sweep({**raw, "resources": {"gpus_per_trial": 1}})
    problem = (
        "vllm_mode: server with resources.gpus_per_trial 1; server mode trains on all the trial's GPUs but one "
        "and serves vLLM on that one, so it needs at least 2: set resources.gpus_per_trial: 2 or vllm_mode: colocate"
    )
    assert any(p.startswith(problem) for p in plan(sweep).problems)
    two = parse_sweep({**raw, "resources": {"gpus_per_trial": 2}})
    assert not any(p.startswith("vllm_mode") for p in plan(two).problems)


def test_a_trial_key_hashes_generation_under_its_published_name_fast_inference():
    spec = TrialSpec(generation="vllm", vllm_gpu_memory_utilization=0.3)
    rest = {k: getattr(spec, k) for k in KNOBS if k not in plan_module.NOT_HASHED and k not in KEYED_WHEN_SET}
    rest = {k: v for k, v in rest.items() if k not in ("generation", "vllm_gpu_memory_utilization")}
    rest |= {"fast_inference": True, "gpu_memory_utilization": 0.3, "model": "tiny"}
    digest = hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:12]
    assert trial_key(spec) == f"trl-grpo-tiny-k4-b2-{digest}"


def test_a_grid_of_vllm_shares_gives_its_transformers_trials_once():
    sweep = parse_sweep(
        {
            "name": "v",
            "grid": {"generation": ["transformers", "vllm"], "vllm_gpu_memory_utilization": [0.2, 0.3, 0.5]},
        }
    )
    trials = expand(sweep)
    assert sorted((t.generation, t.vllm_gpu_memory_utilization) for t in trials) == [
        ("transformers", 0.5), ("vllm", 0.2), ("vllm", 0.3), ("vllm", 0.5)
    ]  # fmt: skip
    assert not plan(sweep).problems
