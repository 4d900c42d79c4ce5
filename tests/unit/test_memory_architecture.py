"""The memory model's architecture description (orchestrator/judging/memory/_architecture.py): the
parameters, 4-bit weights, sliding-window layers and mixture of experts of every bundled model, checked
against the model transformers builds; the terms that follow them, computed by hand from a config."""

from __future__ import annotations

import json

import pytest

from orchestrator.judging.memory import MemoryModel
from orchestrator.judging.memory._architecture import Shape
from orchestrator.judging.memory._terms import terms
from trainers.models import _without_meta, bundled_models, model_facts
from trainers.trial import TrialSpec
from trainers.units import GIB


def config_of(hub: str) -> dict:
    return json.loads(bundled_models()[hub].read_text())


def test_every_bundled_models_parameters_and_4bit_weights_are_those_transformers_builds():
    for hub in bundled_models():
        shape, facts = Shape.from_config(config_of(hub)), model_facts(hub)
        assert (shape.parameters, shape.linear_params) == (facts.parameters, facts.quantizable), hub


@pytest.mark.parametrize("use_sliding_window", [False, True])
def test_the_sliding_window_layers_are_those_transformers_builds(use_sliding_window):
    from transformers import AutoConfig

    for hub in bundled_models():
        config = {**config_of(hub), "use_sliding_window": use_sliding_window}
        if use_sliding_window and not config.get("sliding_window"):
            config["sliding_window"] = 512
        built = AutoConfig.for_model(**_without_meta(config))
        layer_types = getattr(built, "layer_types", None)
        if layer_types is None:  # Mistral's and Phi-3's attention take config.sliding_window in every
            # layer; Llama's takes none
            window = config["model_type"] in ("mistral", "phi3") and built.sliding_window
            expected = built.num_hidden_layers if window else 0
        else:
            expected = sum(t == "sliding_attention" for t in layer_types)
        assert Shape.from_config(config).sliding_layers == expected, (hub, use_sliding_window)


def test_a_mixture_of_experts_keeps_every_expert_at_bf16_under_nf4_and_routes_a_tokens_activations():
    shape = Shape.from_config(config_of("Qwen/Qwen3-30B-A3B"))
    # lora_dropout 0: PEFT refuses dropout on the fused experts (TrialSpec's validation says so)
    spec = TrialSpec(model="random:Qwen/Qwen3-30B-A3B", gradient_checkpointing=False, lora_dropout=0.0)
    sizes = terms(spec, shape, "gpu")
    # Its config by hand: 48 layers, hidden 2048, 32 query heads and 4 KV heads of 128, 128 experts of
    # MLP 768 with 8 routed a token, vocab 151936 untied, q and k norms. nf4 quantizes the attention
    # (nn.Linear); the fused experts (gate_up 2 x 768 x 2048 and down 2048 x 768 each) and the routers
    # (128 x 2048) stay bf16, as do the embeddings, the head and the norms.
    attention = 48 * (2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048)
    experts = 48 * 128 * (3 * 2048 * 768 + 2048)
    others = 151936 * 2048 * 2 + 48 * (2 * 2048 + 2 * 128) + 2048
    assert sizes["weights"] == pytest.approx((attention * 0.5 + (experts + others) * 2) / GIB)
    # LoRA r 16 (fp32 weight, gradient, 2 moments) on the attention and, through PEFT's ParamWrapper,
    # on each expert's fused gate_up (2 r: 2 x 768 out, 2048 in) and down (768 in, 2048 out) and the router
    attention_lora = 16 * ((2048 + 4096) * 2 + (2048 + 512) * 2)
    expert_lora = 2 * 16 * 128 * (2048 + 1536) + 16 * 128 * (768 + 2048) + 16 * (2048 + 128)
    lora = 48 * (attention_lora + expert_lora) * 16
    assert sizes["lora"] == pytest.approx(lora / GIB)
    # Without checkpointing, a token keeps per layer 10 hidden-sized tensors, each of its 8 routed
    # experts' 3 MLP-sized ones and its hidden state in and out, and the router's 128 logits; bf16, the
    # default micro-batch of 8 sequences of 256 + 128 tokens.
    width = 10 * 2048 + 8 * (3 * 768 + 2 * 2048) + 128
    assert sizes["activations"] == pytest.approx(8 * 384 * 48 * width * 2 / GIB)


def test_gemmas_sliding_layers_cache_at_most_the_window_and_its_262k_vocabulary_sizes_the_logits():
    shape = Shape.from_config(config_of("google/gemma-3-12b-it"))
    spec = TrialSpec(model="random:google/gemma-3-12b-it", max_completion_length=2048)
    sizes = terms(spec, shape, "gpu")
    # 48 layers, each 6th global (8), the other 40 a 1024-token window; 8 KV heads of 256, bf16 keys and
    # values; B x K = 8 sequences of 256 + 2048 tokens.
    cached = 8 * 2304 + 40 * 1024
    assert sizes["kv_cache"] == pytest.approx(2 * 8 * 256 * 2 * 8 * cached / GIB)
    # TRL's micro-batch of 8 completions of 2048 + 1 rows over 262208 entries, fp32 logits and gradient
    assert sizes["logits"] == pytest.approx(8 * 2049 * 262208 * 8 / GIB)
    assert max(sizes, key=sizes.get) == "logits"


def test_an_architecture_the_model_does_not_describe_is_unknown_with_the_reason(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 100})
    )
    prediction = MemoryModel.fit([], measure="GPU").predict(TrialSpec(model=str(tmp_path)))
    assert prediction.verdict(16.0) == "unknown"
    assert "model_type 'gpt2' is not an architecture the memory model describes" in prediction.unknown
    assert "qwen3_moe" in prediction.unknown and str(tmp_path) in prediction.unknown


def test_loras_parameters_are_those_peft_makes_on_a_small_mixture_of_experts_and_a_dense_model():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    small = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512}  # fmt: skip
    experts = {"moe_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2}
    for hub, extra in (("Qwen/Qwen3-30B-A3B", experts), ("Qwen/Qwen3-8B", {})):
        config = {**config_of(hub), **small, **extra}
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model(**_without_meta(config)))
        lora = LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
        peft = get_peft_model(built, lora)
        made = sum(p.numel() for name, p in peft.named_parameters() if "lora_" in name)
        assert Shape.from_config(config).lora_params(4) == made, hub
