import json

import pytest

from trainers.trial import TrialSpec, TrialSpecError, knob_default, mode_warnings


def problems(**overrides):
    return TrialSpec(**overrides).problems()


def test_default_spec_is_valid_and_roundtrips():
    spec = TrialSpec()
    assert spec.problems() == []
    assert TrialSpec.from_dict(json.loads(spec.to_json())) == spec


def test_k_of_one_is_refused_with_the_rule_and_its_fix():
    (msg,) = problems(num_generations=1)
    assert msg == "num_generations: must be >= 2, got 1; give 2 or more"
    (msg,) = problems(learning_rate=0.0)
    assert msg == "learning_rate: must be > 0.0, got 0.0; give a number above 0"
    (msg,) = problems(lora_dropout=1.0)
    assert msg == "lora_dropout: must be < 1.0, got 1.0; give a number below 1"


def test_micro_batch_must_divide_completions_per_step():
    (msg,) = problems(batch_size=2, num_generations=3, micro_batch_size=4)
    assert msg.startswith("micro_batch_size: 4 does not divide batch_size x num_generations = 2 x 3 = 6")
    assert "choose a divisor of 6" in msg


def test_length_over_model_context_is_refused():
    (msg,) = problems(max_prompt_length=4000, max_completion_length=200)
    assert "4200 tokens exceeds tiny's context of 4096" in msg
    assert "lower max_prompt_length or max_completion_length" in msg


def test_unknown_model_string_gets_did_you_mean():
    (msg,) = problems(model="tyni")
    assert "'tyni'" in msg and "did you mean 'tiny'" in msg
    (msg,) = problems(model="random:Qwen/Qwen2.5-3B-Instruc")
    assert "did you mean 'random:Qwen/Qwen2.5-3B-Instruct'" in msg


def test_unknown_choice_and_unknown_key():
    (msg,) = problems(stack="trll")
    assert "stack: unknown value 'trll'; did you mean 'trl'" in msg
    with pytest.raises(TrialSpecError) as info:
        TrialSpec.from_dict({"num_generation": 4})
    assert "num_generation: unknown setting; did you mean 'num_generations'" in str(info.value)


def test_every_error_reported_at_once():
    errors = problems(num_generations=1, batch_size=0, learning_rate=-1.0, quantization="int8")
    fields = sorted(e.split(":")[0] for e in errors)
    assert fields == ["batch_size", "learning_rate", "num_generations", "quantization"]


def test_wrong_types_named_with_an_example_of_the_right_one():
    (msg,) = problems(batch_size="2")
    assert (
        msg
        == f"batch_size: must be int, got '2' (str); give a whole number, e.g. {knob_default('batch_size')}"
    )
    assert problems(gradient_checkpointing="yes") == [
        "gradient_checkpointing: must be true or false, got 'yes'"
    ]


def test_unknown_task_and_task_setting():
    (msg,) = problems(task="arithmatic")
    assert "did you mean 'arithmetic'" in msg
    (msg,) = problems(task_args={"num_sample": 3})
    assert msg.startswith(
        "task_args.num_sample: not a setting of task 'arithmetic'; did you mean 'num_samples'"
    )


def test_batch_semantics():
    spec = TrialSpec(batch_size=2, num_generations=4, micro_batch_size=2)
    assert (spec.completions_per_step, spec.effective_micro_batch_size, spec.gradient_accumulation_steps) == (
        8,
        2,
        4,
    )


def test_on_policy_mode_comparison_warns():
    assert any("num_iterations" in w for w in mode_warnings(TrialSpec(mode="gspo")))
    assert not any("num_iterations" in w for w in mode_warnings(TrialSpec(mode="gspo", num_iterations=2)))


def test_probe_steps_with_vllm_generation_are_refused_only_on_unsloth_whose_vllm_path_is_unproven():
    spec = TrialSpec(stack="unsloth", generation="vllm", probe_steps=2)
    assert spec.problems() == [
        "probe_steps: 2 with generation: vllm on unsloth; a decoded probe forces full-length completions "
        "through vLLM's min_tokens and a synthetic one times its window through TRL's vLLM generation, neither "
        "of which this stack's own vLLM path is shown to use, so they would not be the worst case they claim; "
        "set probe_steps: 0 (oom.probe_steps: 0 in a sweep) or stack trl"
    ]
    assert not TrialSpec(stack="unsloth", generation="vllm", probe_steps=0).problems()
    assert not TrialSpec(stack="trl", generation="vllm", probe_steps=2).problems()


def test_vllm_settings_with_transformers_generation_are_refused_naming_each_and_the_fix():
    spec = TrialSpec(vllm_mode="server", vllm_gpu_memory_utilization=0.3, vllm_enable_sleep_mode=True)
    assert spec.problems() == [
        f"{name}: {value!r} with generation: transformers does nothing (vLLM settings apply only to vLLM "
        f"generation); set generation: vllm or remove {name}"
        for name, value in (("vllm_mode", "server"), ("vllm_gpu_memory_utilization", 0.3), ("vllm_enable_sleep_mode", True))
    ]  # fmt: skip


def test_a_colocated_pool_taking_the_budget_is_refused_with_the_share_and_the_fix():
    spec = TrialSpec(generation="vllm", vllm_gpu_memory_utilization=0.95, memory_budget_gib=16.0)
    assert spec.problems() == [
        "vllm_gpu_memory_utilization: 0.95 gives colocated vLLM's pool that share of the 16 GiB budget, which "
        "must stay under 0.9 so training has the rest; lower it (0.2 to 0.5 is usual) or use vllm_mode: server"
    ]
    assert not TrialSpec(generation="vllm", vllm_mode="server", vllm_gpu_memory_utilization=0.95).problems()


def test_an_8_bit_model_with_vllm_is_refused_naming_the_model_and_the_fix():
    spec = TrialSpec(generation="vllm", model="org/model-bnb-8bit", quantization="none")
    assert [e for e in spec.problems() if e.startswith("model:")][-1] == (
        "model: 'org/model-bnb-8bit' looks 8-bit; vLLM does not load bitsandbytes 8-bit weights (TRL refuses "
        "in-flight 8-bit quantization): use the 16-bit checkpoint (quantization: nf4 for QLoRA) or "
        "generation: transformers"
    )


def test_server_mode_and_sleep_mode_are_refused_on_unsloth_whose_fast_inference_is_colocate():
    spec = TrialSpec(stack="unsloth", generation="vllm", vllm_mode="server", vllm_enable_sleep_mode=True)
    assert spec.problems() == [
        "vllm_mode: server with stack unsloth, which runs vLLM only as colocate; set vllm_mode: colocate "
        "or stack trl",
        "vllm_enable_sleep_mode: true with stack unsloth; only TRL exposes vLLM's sleep mode: set "
        "vllm_enable_sleep_mode: false or stack trl",
    ]


def test_grad_accum_makes_batch_size_a_micro_batch_of_completions():
    spec = TrialSpec(batch_size=2, num_generations=8, grad_accum=2)
    assert (spec.completions_per_step, spec.effective_micro_batch_size, spec.gradient_accumulation_steps) == (
        4,
        2,
        2,
    )
    assert spec.generation_batch_size == 8  # whole groups of K: one group of 8 over two steps of 4
    assert spec.problems() == []


def test_grad_accum_refuses_a_micro_batch_size_and_a_generation_that_does_not_split():
    (msg,) = problems(batch_size=2, num_generations=4, grad_accum=2, micro_batch_size=1)
    assert msg.startswith("micro_batch_size: 1 with grad_accum 2") and "leave micro_batch_size unset" in msg
    (msg,) = problems(batch_size=3, num_generations=4, grad_accum=2)
    assert msg.startswith("grad_accum: a generation of 8 completions") and "batch_size dividing 8" in msg


def test_stack_dtype_overrides_dtype_for_its_stack_only():
    mapping = {"trl": "fp16"}
    assert TrialSpec(stack="trl", dtype="auto", stack_dtype=mapping).effective_dtype == "fp16"
    assert TrialSpec(stack="unsloth", dtype="auto", stack_dtype=mapping).effective_dtype == "auto"
    (msg,) = problems(stack_dtype={"trll": "fp16"})
    assert msg.startswith("stack_dtype: unknown stack 'trll'; did you mean 'trl'")
    (msg,) = problems(stack_dtype={"trl": "float16"})
    assert msg.startswith("stack_dtype.trl: unknown dtype 'float16'")


def test_lr_scheduler_and_data_seed_are_checked_and_default_to_constant_and_seed():
    spec = TrialSpec(seed=5)
    assert (spec.lr_scheduler, spec.task_seed) == ("constant", 5)
    assert TrialSpec(seed=5, data_seed=17).task_seed == 17
    (msg,) = problems(lr_scheduler="cosin")
    assert msg.startswith("lr_scheduler: unknown value 'cosin'; did you mean 'cosine'")


def test_a_generation_spread_over_steps_is_off_policy_and_does_not_warn():
    # K 8 over steps of 2 x 2 completions: the second step trains on the first step's generation.
    spread = TrialSpec(mode="gspo", batch_size=2, num_generations=8, grad_accum=2)
    assert not any("num_iterations" in w for w in mode_warnings(spread))
    whole = TrialSpec(mode="gspo", batch_size=2, num_generations=4, grad_accum=2)
    assert any("num_iterations" in w for w in mode_warnings(whole))


def test_a_mixture_of_experts_with_lora_dropout_is_refused_before_peft_refuses_it():
    """PEFT adapts Qwen3-MoE's fused experts with lora.ParamWrapper, which raises on any dropout: the
    trial would fail after minutes of model building. Validation says so first, with the fix."""
    spec = TrialSpec(model="random:Qwen/Qwen3-30B-A3B", lora_dropout=0.05)
    assert [p for p in spec.problems() if p.startswith("lora_dropout")] == [
        "lora_dropout: 0.05 with random:Qwen/Qwen3-30B-A3B, a mixture of experts whose experts transformers "
        "fuses into 3-D tensors: PEFT adapts those with its ParamWrapper, which refuses dropout "
        '("lora.ParamWrapper does not work with lora_dropout != 0"); set lora_dropout: 0'
    ]
    assert not [
        p
        for p in TrialSpec(model="random:Qwen/Qwen3-30B-A3B", lora_dropout=0.0).problems()
        if "lora_dropout" in p
    ]
    assert not [
        p
        for p in TrialSpec(model="random:Qwen/Qwen3-8B", lora_dropout=0.05).problems()
        if "lora_dropout" in p
    ]
