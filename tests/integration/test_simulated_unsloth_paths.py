"""The Unsloth simulator follows Unsloth's path per family (trainers/stacks/_unsloth_paths.py): a family
Unsloth runs through its own model file decodes with Unsloth's buffers and its fused LoRA kernels; one it
sends to FastModel decodes through transformers' generate, its LoRA through unsloth_zoo's compiled forward."""

import json

import pytest

from trainers.simulate import simulate
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow

SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=2048, tie_word_embeddings=True,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip


def _spec(tmp_path, model_type: str, architecture: str, **extra) -> TrialSpec:
    path = tmp_path / model_type / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(SMALL | {"model_type": model_type, "architectures": [architecture]} | extra))
    return TrialSpec(model=str(path), stack="unsloth", num_generations=4, batch_size=2, max_completion_length=64,
                     num_iterations=2, quantization="none", lora_r=8, learning_rate=2e-4)  # fmt: skip


def test_a_fast_family_decodes_with_unsloths_buffers_and_a_fastmodel_family_through_generate(tmp_path):
    fast = simulate(_spec(tmp_path, "llama", "LlamaForCausalLM"), 34, cache=False)
    generic = simulate(_spec(tmp_path, "smollm3", "SmolLM3ForCausalLM"), 34, cache=False)
    assert (
        "decoding" in fast.phase_gib and "FastLlamaModel, unsloth decoding" in fast.simulated["unsloth_path"]
    )
    assert "decoding" not in generic.phase_gib, generic.phase_gib
    assert (
        "FastBaseModel (FastModel), transformers decoding, unsloth_zoo's lora_forward LoRA"
        in generic.simulated["unsloth_path"]
    )
    # the same shapes otherwise: generation's cache alike, Unsloth's buffers beside it on the fast path only
    assert fast.phase_gib["decoding"] > fast.phase_gib["generation"]
