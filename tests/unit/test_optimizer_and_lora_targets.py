"""The optimizer and the LoRA targets are knobs: checked, keyed only when set, passed to both stacks'
GRPOConfig and LoRA, sized in the memory model, named in `fits`' assumed line; a knob that does nothing
in the configuration asked is refused with the reason."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers.cli import run_cli
from trainers.trial import TrialSpec


def test_the_default_optimizer_and_targets_leave_every_trial_key_as_it_was():
    from orchestrator.spec.plan import trial_key

    spec = TrialSpec(model="tiny")
    asked = dataclasses.replace(spec, optim="adamw_torch", lora_target_modules="all-linear")
    assert trial_key(asked) == trial_key(spec)
    assert trial_key(dataclasses.replace(spec, optim="adamw_8bit")) != trial_key(spec)
    assert trial_key(dataclasses.replace(spec, lora_target_modules="attention")) != trial_key(spec)


@pytest.mark.parametrize(
    "settings, said",
    [
        ({"optim": "adam8"}, "optim: unknown value 'adam8'"),
        ({"lora_target_modules": "q_proj,qq_proj"}, "'qq_proj' is no decoder linear layer"),
        ({"lora_target_modules": ""}, "an empty name is no decoder linear layer"),
        ({"adapter": "none", "quantization": "none", "stack": "trl", "lora_target_modules": "attention"},
         "lora_target_modules: 'attention' with adapter: none does nothing"),
    ],
)  # fmt: skip
def test_a_bad_optimizer_or_target_is_refused_with_its_fix(settings, said):
    problems = " ".join(TrialSpec(model="tiny", **settings).problems())
    assert said in problems


@pytest.mark.parametrize("targets", ["all-linear", "attention", "mlp", "q_proj,v_proj"])
def test_targets_a_stack_can_adapt_pass(targets):
    assert TrialSpec(model="tiny", lora_target_modules=targets).problems() == []


def test_the_optimizer_reaches_grpo_config_and_stack_leaves_the_stacks_own():
    import torch

    from trainers.runtime import grpo_config_kwargs

    for optim in ("adamw_torch", "adamw_8bit", "paged_adamw_8bit"):
        kwargs = grpo_config_kwargs(TrialSpec(optim=optim), torch.float32, on_gpu=False)
        assert kwargs["optim"] == optim
    assert "optim" not in grpo_config_kwargs(TrialSpec(optim="stack"), torch.float32, on_gpu=False)


def test_stack_means_each_stacks_own_default():
    from trainers.trial import optim_of

    assert optim_of(TrialSpec(stack="trl", optim="stack")) == "adamw_torch_fused"
    assert optim_of(TrialSpec(stack="unsloth", optim="stack")) == "adamw_8bit"
    assert optim_of(TrialSpec(stack="unsloth")) == "adamw_torch"


def test_peft_gets_all_linear_or_the_names():
    from trainers.trial import peft_targets

    assert peft_targets("all-linear") == "all-linear"
    assert peft_targets("attention") == ["q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj"]
    assert peft_targets("q_proj, v_proj") == ["q_proj", "v_proj"]


def test_unsloth_adapts_the_named_layers_the_model_has():
    from trainers.stacks.unsloth import lora_targets

    linear = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    assert lora_targets(TrialSpec(), linear) == linear
    assert lora_targets(TrialSpec(lora_target_modules="mlp"), linear) == ["down_proj", "gate_proj", "up_proj"]
    with pytest.raises(ValueError, match="names none of tiny's linear layers"):
        lora_targets(TrialSpec(lora_target_modules="qkv_proj"), linear)


def test_the_memory_model_sizes_8bit_moments_and_fewer_targets():
    from orchestrator.judging.memory._architecture import Shape
    from orchestrator.judging.memory._terms import ADAM_8BIT_BYTES, terms
    from trainers.models import model_config
    from trainers.units import GIB

    spec = TrialSpec(model="random:Qwen/Qwen2.5-0.5B-Instruct")
    shape = Shape.from_config(model_config(spec.model).config)
    lora = shape.lora_params(16)
    attention = shape.lora_params(16, ("q_proj", "k_proj", "v_proj", "o_proj"))
    mlp = shape.lora_params(16, ("gate_proj", "up_proj", "down_proj"))
    assert attention + mlp == lora  # a dense model: the two groups are every linear layer
    assert shape.lora_params(16, ("qkv_proj",)) == shape.lora_params(16, ("q_proj", "k_proj", "v_proj"))
    full = terms(spec, shape, "gpu")["lora"]
    eight = terms(dataclasses.replace(spec, optim="adamw_8bit"), shape, "gpu")["lora"]
    assert full - eight == pytest.approx(lora * (8 - ADAM_8BIT_BYTES) / GIB)
    fewer = terms(dataclasses.replace(spec, lora_target_modules="attention"), shape, "gpu")["lora"]
    assert fewer == pytest.approx(full * attention / lora)


def test_the_simulated_8bit_state_is_bitsandbytes_own_layout():
    import bitsandbytes as bnb
    import torch

    from trainers.simulate._optim import eight_bit_state_bytes, optimizer

    for shape in ((16, 896), (64, 32)):  # 8-bit moments, and one under bitsandbytes' 4,096-value floor
        real, meta = (
            torch.nn.Parameter(torch.zeros(shape)),
            torch.nn.Parameter(torch.zeros(shape, device="meta")),
        )
        real.grad, meta.grad = torch.zeros_like(real), torch.zeros_like(meta)
        ours = optimizer("adamw_8bit", [meta], 1e-3, 0.0)
        theirs = bnb.optim.AdamW8bit([real], lr=1e-3)
        ours.step()
        theirs.step()
        layout = {k: (tuple(v.shape), v.dtype) for k, v in theirs.state[real].items() if torch.is_tensor(v)}
        assert {
            k: (tuple(v.shape), v.dtype) for k, v in ours.state[meta].items() if torch.is_tensor(v)
        } == layout
        own = sum(
            v.numel() * v.element_size()
            for k, v in theirs.state[real].items()
            if k.startswith("state") or k.startswith("absmax")
        )
        assert eight_bit_state_bytes(real.numel()) == own


def test_an_idle_knob_set_by_name_is_refused_with_the_reason(capsys):
    argv = ["fits", "--model", "tiny", "--budget-gib", "4", "--no-simulate"]
    code, text = run_cli([*argv, "--set", "vllm_mode=colocate"], capsys)
    assert code == 2
    assert "--set vllm_mode: does nothing with generation: transformers" in text
    assert "add --set generation=vllm or remove --set vllm_mode" in text
    code, text = run_cli(
        [*argv, "--set", "adapter=none", "--set", "quantization=none", "--set", "lora_r=16"], capsys
    )
    assert code == 2 and "--set lora_r: does nothing with adapter: none" in text


def test_fits_names_the_optimizer_and_the_targets_it_assumed(capsys):
    argv = ["fits", "--model", "tiny", "--budget-gib", "4", "--no-simulate"]
    code, text = run_cli(
        [*argv, "--set", "optim=paged_adamw_8bit", "--set", "lora_target_modules=q_proj,v_proj"], capsys
    )
    assert code == 0, text
    said = " ".join(text.split())
    assert "LoRA r=16 (q_proj,v_proj)" in said and "optim paged_adamw_8bit" in said


@pytest.mark.slow  # two steps simulated on meta: a minute on 2 busy cores
def test_a_simulated_step_holds_the_8bit_state_in_place_of_adamws_moments():
    from trainers.models import meta_model
    from trainers.simulate import simulate
    from trainers.simulate._optim import eight_bit_state_bytes
    from trainers.units import GIB

    spec = TrialSpec(model="random:Qwen/Qwen2.5-0.5B-Instruct", num_generations=2, max_completion_length=64)
    adamw = simulate(spec, cache=False)
    eight = simulate(dataclasses.replace(spec, optim="adamw_8bit"), cache=False)
    # the LoRA weights as the TRL simulation trains them on a 4-bit base: bf16, AdamW's moments the same
    lora = [p.numel() for n, p in _lora_weights(meta_model(spec.model), spec)]
    moments = sum(2 * 2 * n for n in lora)
    expected = (moments - sum(eight_bit_state_bytes(n) for n in lora)) / GIB
    assert adamw.resting_gib - eight.resting_gib == pytest.approx(expected, rel=0.1)


def _lora_weights(model, spec):
    from peft import LoraConfig, get_peft_model

    from trainers.trial import peft_targets

    config = LoraConfig(
        r=spec.lora_r, target_modules=peft_targets(spec.lora_target_modules), task_type="CAUSAL_LM"
    )
    return [(n, p) for n, p in get_peft_model(model, config).named_parameters() if p.requires_grad]


@pytest.mark.parametrize(
    "raw, said",
    [
        ({"fixed": {"vllm_mode": "colocate"}}, "fixed.vllm_mode: does nothing, no trial generates with vLLM"),
        ({"grid": {"lora_r": [8, 16]}, "fixed": {"adapter": "none", "quantization": "none"}},
         "grid.lora_r: does nothing, every trial fine-tunes in full"),
    ],
)  # fmt: skip
def test_a_sweep_naming_a_knob_that_does_nothing_is_refused(raw, said):
    from orchestrator.spec.load import parse_sweep
    from orchestrator.spec.sweep import SweepError

    with pytest.raises(SweepError) as refused:
        parse_sweep({"name": "idle", **raw})
    assert any(said in error for error in refused.value.errors)
    parse_sweep(
        {"name": "busy", "grid": {"generation": ["transformers", "vllm"]}, "fixed": {"vllm_mode": "colocate"}}
    )
