import json
from pathlib import Path

import pytest

from trainers.models import bundled_models, count_parameters, load_tokenizer, parse_model, resolve_model

PUBLISHED_PARAMS = {  # from the model cards
    "Qwen/Qwen2.5-0.5B-Instruct": 494e6,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54e9,
    "Qwen/Qwen2.5-3B-Instruct": 3.09e9,
    "Qwen/Qwen2.5-7B-Instruct": 7.62e9,
    "meta-llama/Llama-3.2-1B-Instruct": 1.24e9,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21e9,
}


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMS))
def test_random_models_have_published_size(hub_id):
    assert hub_id in bundled_models()
    n = count_parameters(f"random:{hub_id}")
    assert abs(n - PUBLISHED_PARAMS[hub_id]) / PUBLISHED_PARAMS[hub_id] < 0.01


def test_model_strings_classified():
    assert parse_model("tiny").kind == "tiny"
    assert parse_model("random:Qwen/Qwen2.5-3B-Instruct").kind == "random"
    assert parse_model("Qwen/Qwen2.5-3B-Instruct").kind == "hub"
    with pytest.raises(ValueError, match="did you mean"):
        parse_model("random:Qwen/Qwen2.5-4B-Instruct")


def test_tiny_build_is_cached_deterministic_and_decodes_every_id(tmp_path):
    import torch
    from safetensors.torch import load_file

    first = resolve_model("tiny", str(tmp_path / "a"))
    again = resolve_model("tiny", str(tmp_path / "a"))
    other = resolve_model("tiny", str(tmp_path / "b"))
    assert first == again
    wa, wb = load_file(f"{first}/model.safetensors"), load_file(f"{other}/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    config = json.loads((Path(first) / "config.json").read_text())
    assert 1e6 < count_parameters("tiny") < 10e6

    tok = load_tokenizer(first)
    assert len(tok) == config["vocab_size"]
    assert tok("1234")["input_ids"] == [tok.convert_tokens_to_ids(c) for c in "1234"]  # one digit, one token
    assert tok.eos_token_id == config["eos_token_id"] and tok.pad_token_id is not None
    for token_id in range(config["vocab_size"]):
        assert isinstance(tok.decode([token_id]), str)
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert tok.decode(tok("What is 12+34?")["input_ids"]) == "What is 12+34?"


@pytest.mark.slow
def test_random_qwen_half_billion_builds_and_loads(tmp_path):
    from transformers import AutoModelForCausalLM

    path = resolve_model("random:Qwen/Qwen2.5-0.5B-Instruct", str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(path)
    assert abs(sum(p.numel() for p in model.parameters()) - 494e6) / 494e6 < 0.01
    assert len(load_tokenizer(path)) == model.config.vocab_size == 151936


def test_every_shipped_task_fits_the_default_prompt_limit_with_tinys_tokenizer(tmp_path):
    from tasks import available_tasks, load_task, task_problems
    from trainers.models import TINY_CONFIG, build_tokenizer
    from trainers.runtime import RefusedError, check_prompt_lengths
    from trainers.spec import TrialSpec

    gsm8k = tmp_path / "gsm8k.jsonl"  # no hub here: a local file of GSM8K-sized questions
    question = (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    )
    gsm8k.write_text("\n".join([json.dumps({"question": question * 3, "answer": "#### 72"})] * 3))
    args = {"gsm8k": {"path": str(gsm8k), "num_eval": 1}}
    tokenizer = build_tokenizer(TINY_CONFIG["vocab_size"])
    limit = TrialSpec().max_prompt_length
    for name in available_tasks():
        if task_problems(name, args.get(name, {})):  # reasoning-gym not installed
            continue
        task = load_task(name, args.get(name, {}))
        longest = check_prompt_lengths(task.train, tokenizer, limit)
        # About 3-4 characters a token, as with real tokenizers (the byte-level one gave 1).
        chars = max(
            len(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False))
            for p in task.train["prompt"]
        )
        assert longest < limit and chars / longest > 2.5, (name, longest, chars)
    with pytest.raises(RefusedError) as refused:
        check_prompt_lengths(task.train, tokenizer, longest - 1)
    assert str(refused.value).startswith(
        f"max_prompt_length: the task's longest prompt is {longest} tokens, over the limit of {longest - 1}; "
        f"raise max_prompt_length to at least {longest} (trial: --max-prompt-length {longest}"
    )


def test_a_tiny_build_from_the_byte_level_tokenizer_era_is_not_reused(tmp_path):
    import hashlib

    from trainers.models import TINY_CONFIG

    # Where builder version 1 (one token per byte) cached tiny: its key was the config and the version.
    old_digest = hashlib.sha256(json.dumps([TINY_CONFIG, 1], sort_keys=True).encode()).hexdigest()[:10]
    old = tmp_path / "models" / f"tiny-tiny-{old_digest}"
    old.mkdir(parents=True)
    (old / "complete").write_text("tiny\n")
    built = resolve_model("tiny", str(tmp_path))
    assert Path(built) != old and Path(built).parent == old.parent
    assert len(load_tokenizer(built)("Using the numbers")["input_ids"]) < len("Using the numbers") / 2


def test_total_params_counts_4bit_weights_unpacked_so_nf4_and_none_agree():
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from trainers.models import total_params

    path = resolve_model("tiny")
    nf4 = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    quantized = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, quantization_config=nf4)
    expected = count_parameters("tiny")  # counted from the config on the meta device
    assert sum(p.numel() for p in quantized.parameters()) < expected  # packed: two values per byte
    assert total_params(plain) == total_params(quantized) == expected
