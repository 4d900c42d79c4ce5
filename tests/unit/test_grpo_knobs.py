"""The GRPO knobs users tune in TRL (epsilon, epsilon_high, scale_rewards, mask_truncated_completions,
warmup_ratio): settings read as TRL users write them, passed to both stacks' GRPOConfig, refused with
their rule and fix, and left out of the keys of trials that keep TRL's defaults; TRL's names rlsweep
names otherwise, or holds at one value, point there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from trl import GRPOConfig

from orchestrator.spec.load import load_sweep, trial_set_errors
from orchestrator.spec.plan import plan, trial_key
from orchestrator.spec.sweep import FOREIGN_NAMES
from tests.helpers.cli import run_cli
from trainers.runtime import EFFECTIVE_KNOBS, grpo_config_kwargs
from trainers.stacks._base import grpo_config
from trainers.stacks.unsloth import restore_asked
from trainers.trial import FIXED_GRPO, TrialSpec, canonical

SMOKE = str(Path(__file__).parents[2] / "sweeps" / "cpu-smoke.yaml")
TUNED = {
    "epsilon": 0.1,
    "epsilon_high": 0.28,
    "scale_rewards": "batch",
    "mask_truncated_completions": True,
    "warmup_ratio": 0.25,
    "lr_scheduler": "linear",
    "max_steps": 8,
}


def _config(spec: TrialSpec) -> GRPOConfig:
    return GRPOConfig(**grpo_config_kwargs(spec, torch.float32, on_gpu=False))


def test_a_spec_with_the_knobs_set_yields_a_grpo_config_holding_them():
    config = _config(TrialSpec(**TUNED))
    assert (config.epsilon, config.epsilon_high, config.scale_rewards) == (0.1, 0.28, "batch")
    assert config.mask_truncated_completions is True
    assert config.warmup_steps == 0.25 and config.get_warmup_steps(8) == 2  # a quarter of max_steps


def test_a_default_spec_yields_trls_defaults():
    config, trl = _config(TrialSpec()), {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for name in ("epsilon", "scale_rewards", "mask_truncated_completions", "max_grad_norm"):
        assert getattr(config, name) == trl[name], name
    assert config.epsilon_high == config.epsilon == 0.2  # TRL's unset epsilon_high is epsilon
    assert config.get_warmup_steps(10) == 0


def test_an_unset_epsilon_high_follows_epsilon():
    assert _config(TrialSpec(epsilon=0.3)).epsilon_high == 0.3


def test_unsloths_rewrites_of_the_knobs_are_put_back_and_reported():
    # What Unsloth's GRPOConfig does unless told: DAPO's epsilon_high and truncation mask, Dr. GRPO's
    # unscaled rewards, its 10% warmup. The Unsloth stack builds from the same kwargs, then restores.
    spec = TrialSpec(**TUNED)
    asked = grpo_config_kwargs(spec, torch.float32, on_gpu=False)
    config = grpo_config(GRPOConfig, asked, type("Task", (), {"rewards": {"correct": (None, 1.0)}})())
    config.epsilon_high, config.mask_truncated_completions = 0.5, False
    config.scale_rewards, config.warmup_steps = "none", 0.1
    changed = restore_asked(config, asked)
    assert (config.epsilon_high, config.mask_truncated_completions) == (0.28, True)
    assert (config.scale_rewards, config.warmup_steps) == ("batch", 0.25)
    assert changed["epsilon_high"] == [0.28, 0.5] and changed["warmup_steps"] == [0.25, 0.1]
    assert {"epsilon", "epsilon_high", "scale_rewards", "mask_truncated_completions", "warmup_steps"} <= set(
        EFFECTIVE_KNOBS
    )


def test_the_settings_rlsweep_fixes_are_what_both_stacks_are_given():
    kwargs = grpo_config_kwargs(TrialSpec(), torch.float32, on_gpu=False)
    assert {k: kwargs[k] for k in FIXED_GRPO} == FIXED_GRPO
    assert FIXED_GRPO["max_grad_norm"] == 1.0 and "max_grad_norm" in EFFECTIVE_KNOBS


def test_yaml_and_set_take_the_knobs_as_trl_users_write_them(tmp_path):
    path = tmp_path / "tuned.yaml"
    path.write_text(
        "name: tuned\nfixed: {model: tiny, epsilon: 0.1, epsilon_high: 0.28, scale_rewards: false,\n"
        "  mask_truncated_completions: true, warmup_ratio: 0.1, lr_scheduler: constant_with_warmup}\n"
    )
    (trial,) = plan(load_sweep(path)).trials
    assert (trial.epsilon, trial.epsilon_high, trial.scale_rewards) == (0.1, 0.28, "none")
    assert trial.mask_truncated_completions and trial.warmup_ratio == 0.1
    base: dict = {}
    sets = ["epsilon=2e-1", "scale_rewards=True", "mask_truncated_completions=true", "warmup_ratio=0.05"]
    assert trial_set_errors([*sets, "lr_scheduler=cosine"], base, {}) == []
    assert base["scale_rewards"] == "group" and base["epsilon"] == 0.2 and base["warmup_ratio"] == 0.05
    assert canonical("scale_rewards", "Batch") == "batch"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("epsilon=-1", "fixed.epsilon: must be > 0.0, got -1.0; give a number above 0"),
        ("epsilon_high=0", "fixed.epsilon_high: must be > 0.0, got 0.0; give a number above 0"),
        ("warmup_ratio=1", "fixed.warmup_ratio: must be < 1.0, got 1.0; give a number below 1"),
        ("scale_rewards=mean", "fixed.scale_rewards: unknown value 'mean'"),
        ("mask_truncated_completions=2", "fixed.mask_truncated_completions: must be true or false, got 2"),
    ],
)
def test_a_bad_value_is_refused_with_exit_2_naming_the_field_the_value_the_rule_and_the_fix(
    item, message, capsys
):
    code, text = run_cli(["validate", SMOKE, "--set", item], capsys)
    assert code == 2 and message in " ".join(text.split()), text


def test_a_warmup_a_constant_schedule_would_drop_is_refused_with_the_schedule_that_takes_it(capsys):
    code, text = run_cli(["validate", SMOKE, "--set", "warmup_ratio=0.1"], capsys)
    assert code == 2
    assert (
        "warmup_ratio: 0.1 with lr_scheduler constant does nothing (transformers' constant schedule has no "
        "warmup); set lr_scheduler: constant_with_warmup (or linear, cosine), or warmup_ratio: 0"
    ) in " ".join(text.split())
    code, _ = run_cli(
        ["validate", SMOKE, "--set", "warmup_ratio=0.1", "--set", "lr_scheduler=linear"], capsys
    )
    assert code == 0


@pytest.mark.parametrize("knob", ["epsilon", "epsilon_high", "scale_rewards", "mask_truncated_completions"])
def test_a_knob_at_trls_default_leaves_the_key_alone_and_moves_it_once_changed(knob):
    value = {
        "epsilon": 0.2,
        "epsilon_high": None,
        "scale_rewards": "group",
        "mask_truncated_completions": False,
    }
    other = {
        "epsilon": 0.3,
        "epsilon_high": 0.28,
        "scale_rewards": "none",
        "mask_truncated_completions": True,
    }
    assert trial_key(TrialSpec(**{knob: value[knob]})) == trial_key(TrialSpec())
    assert trial_key(TrialSpec(**{knob: other[knob]})) != trial_key(TrialSpec())


def test_warmup_moves_the_key_once_set():
    plain = TrialSpec(lr_scheduler="linear")
    assert trial_key(TrialSpec(lr_scheduler="linear", warmup_ratio=0.1)) != trial_key(plain)


@pytest.mark.parametrize(
    ("trl_name", "hint"),
    [
        ("model_name_or_path", "model_name_or_path is TRL's name; rlsweep sets model"),
        ("use_peft", "use_peft is TRL's name; rlsweep sets adapter: lora"),
        ("eval_steps", "eval_steps is TRL's name; rlsweep sets eval_every"),
        ("warmup_steps", "warmup_steps is TRL's name; rlsweep sets warmup_ratio"),
        (
            "max_grad_norm",
            "max_grad_norm is TRL's name; rlsweep fixes max_grad_norm at 1.0 on both stacks: remove it",
        ),
        ("weight_decay", "weight_decay is TRL's name; rlsweep fixes weight_decay at 0.0"),
        ("logging_steps", "logging_steps is TRL's name; rlsweep fixes logging_steps at 1 (every step"),
    ],
)
def test_trls_names_rlsweep_names_otherwise_or_fixes_say_so(trl_name, hint, capsys):
    code, text = run_cli(["validate", SMOKE, "--set", f"{trl_name}=x"], capsys)
    assert code == 2 and f"--set {trl_name}: unknown setting; {hint}" in " ".join(text.split()), text
    assert "did you mean" not in text


def test_a_trl_name_for_an_rlsweep_setting_points_to_one_that_exists():
    assert FOREIGN_NAMES["model_name_or_path"].startswith("model ")
    assert FOREIGN_NAMES["eval_steps"].startswith("eval_every ")
