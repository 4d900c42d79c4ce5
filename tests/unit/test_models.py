import json
import re
from pathlib import Path

import pytest

from trainers.models import bundled_models, count_parameters, load_tokenizer, parse_model, resolve_model

# Each model's total parameters as published, with where the figure comes from. A figure rounded to its
# last digit ("0.6B") allows half a unit of that digit; a precise one, 1%.
PUBLISHED_PARAMS = {
    "Qwen/Qwen2.5-0.5B-Instruct": ("0.49B", "model card: 0.49B"),
    "Qwen/Qwen2.5-1.5B-Instruct": ("1.54B", "model card: 1.54B"),
    "Qwen/Qwen2.5-3B-Instruct": ("3.09B", "model card: 3.09B"),
    "Qwen/Qwen2.5-7B-Instruct": ("7.61B", "model card: 7.61B"),
    "Qwen/Qwen2.5-14B-Instruct": ("14.7B", "model card: 14.7B"),
    "Qwen/Qwen2.5-32B-Instruct": ("32.5B", "model card: 32.5B (the weights hold 32.76B, 0.8% more)"),
    "meta-llama/Llama-3.2-1B-Instruct": ("1.24B", "model card: 1.23B; Hub safetensors: 1.24B"),
    "meta-llama/Llama-3.2-3B-Instruct": ("3.21B", "model card: 3.21B"),
    "meta-llama/Llama-3.1-8B-Instruct": ("8.03B", "Hub safetensors: 8.03B (the card says 8B)"),
    "Qwen/Qwen3-0.6B": ("0.6B", "model card: 0.6B, rounded"),
    "Qwen/Qwen3-1.7B": ("1.7B", "model card: 1.7B, rounded"),
    "Qwen/Qwen3-4B": ("4.0B", "model card: 4.0B, rounded"),
    "Qwen/Qwen3-8B": ("8.2B", "model card: 8.2B"),
    "Qwen/Qwen3-14B": ("14.8B", "model card: 14.8B"),
    "Qwen/Qwen3-32B": ("32.8B", "model card: 32.8B"),
    "Qwen/Qwen3-30B-A3B": ("30.5B", "model card: 30.5B in total"),
    "google/gemma-3-1b-it": (
        "1000M",
        "Gemma 3 technical report, table 1: 302M embedding + 698M non-embedding",
    ),
    "google/gemma-3-4b-it": (
        "3884M",
        "Gemma 3 technical report, table 1: 675M + 3,209M (language model only)",
    ),
    "google/gemma-3-12b-it": (
        "11771M",
        "Gemma 3 technical report, table 1: 1,012M + 10,759M (language model)",
    ),
    "mistralai/Mistral-7B-Instruct-v0.3": ("7.25B", "Hub safetensors: 7.25B"),
    "microsoft/Phi-4-mini-instruct": ("3.8B", "model card: 3.8B, rounded"),
    "HuggingFaceTB/SmolLM3-3B": ("3.08B", "Hub safetensors: 3.08B (the card says 3B)"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": (
        "1.78B",
        "Hub safetensors: 1.78B (the name gives the 1.5B class)",
    ),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ("7.62B", "Hub safetensors: 7.62B"),
}
# Parameters without the embeddings (input, and output where untied), as the Qwen model cards publish them.
PUBLISHED_NON_EMBEDDING = {
    "Qwen/Qwen3-0.6B": "0.44B",
    "Qwen/Qwen3-1.7B": "1.4B",
    "Qwen/Qwen3-4B": "3.6B",
    "Qwen/Qwen3-8B": "6.95B",
    "Qwen/Qwen3-14B": "13.2B",
    "Qwen/Qwen3-32B": "31.2B",
    "Qwen/Qwen3-30B-A3B": "29.9B",
    "Qwen/Qwen2.5-14B-Instruct": "13.1B",
    "Qwen/Qwen2.5-32B-Instruct": "31.0B",
}


def published(figure: str) -> tuple[float, float]:
    """'8.2B' -> (8.2e9, relative tolerance): half a unit of the last digit, at least 1%."""
    number, unit = figure[:-1], {"B": 1e9, "M": 1e6}[figure[-1]]
    decimals = len(number.partition(".")[2])
    value = float(number) * unit
    return value, max(0.01, 0.5 * 10**-decimals * unit / value)


def test_the_bundled_models_are_exactly_the_published_list():
    assert set(bundled_models()) == set(PUBLISHED_PARAMS)


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMS))
def test_random_models_have_published_size(hub_id):
    value, tolerance = published(PUBLISHED_PARAMS[hub_id][0])
    n = count_parameters(f"random:{hub_id}")
    assert abs(n - value) / value <= tolerance, (n, PUBLISHED_PARAMS[hub_id])


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_NON_EMBEDDING))
def test_qwen_models_have_the_published_non_embedding_size(hub_id):
    config = json.loads(bundled_models()[hub_id].read_text())
    embeddings = config["vocab_size"] * config["hidden_size"] * (1 if config["tie_word_embeddings"] else 2)
    value, tolerance = published(PUBLISHED_NON_EMBEDDING[hub_id])
    n = count_parameters(f"random:{hub_id}") - embeddings
    assert abs(n - value) / value <= tolerance, n


def test_qwen3_moe_activates_the_published_3_3b_a_token():
    # One token's path: everything but the 120 of 128 experts per layer it is not routed to. The card's
    # "3.3B activated" is 1.6% under this count (3.35B): truncated, so 2% here.
    config = json.loads(bundled_models()["Qwen/Qwen3-30B-A3B"].read_text())
    expert = 3 * config["hidden_size"] * config["moe_intermediate_size"]  # gate, up and down projections
    idle = (config["num_experts"] - config["num_experts_per_tok"]) * expert * config["num_hidden_layers"]
    active = count_parameters("random:Qwen/Qwen3-30B-A3B") - idle
    assert active == 3_353_032_704 and abs(active - 3.3e9) / 3.3e9 < 0.02


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


@pytest.mark.slow
def test_random_qwen3_builds_with_its_thinking_tags_and_its_turn_end_as_eos(tmp_path):
    # Builds and loads in 6 s on this 2-core machine idle, 36 s under load.
    from transformers import AutoModelForCausalLM

    path = resolve_model("random:Qwen/Qwen3-0.6B", str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = load_tokenizer(path)
    assert sum(p.numel() for p in model.parameters()) == 596_049_920
    assert len(tok) == model.config.vocab_size == 151936
    assert model.config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.config.pad_token_id == tok.pad_token_id == tok.convert_tokens_to_ids("<|endoftext|>")
    # <think> is one token that decoding keeps even when it skips the special ones, as Qwen3's does.
    think = tok("<think>", add_special_tokens=False)["input_ids"]
    assert len(think) == 1 and tok.decode(think + [tok.eos_token_id], skip_special_tokens=True) == "<think>"


def test_every_shipped_task_fits_the_default_prompt_limit_with_tinys_tokenizer(tmp_path):
    from tasks import available_tasks, load_task, task_problems
    from trainers.models import TINY_CONFIG, build_tokenizer
    from trainers.runtime import RefusedError, check_prompt_lengths
    from trainers.trial import TrialSpec

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


CONVERSATION = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]
# Each family's rendering of CONVERSATION with the generation prompt, written out from its published
# chat template (tokenizer_config.json); Llama 3.2's and SmolLM3's date pinned to 24 Nov 2026.
RENDERED = {
    "meta-llama/Llama-3.2-1B-Instruct": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 24 Nov 2026\n\nAnswer briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "meta-llama/Llama-3.1-8B-Instruct": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nAnswer briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "Qwen/Qwen2.5-0.5B-Instruct": (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    "Qwen/Qwen3-0.6B": (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    "google/gemma-3-1b-it": (
        "<bos><start_of_turn>user\nAnswer briefly.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"
    ),
    "mistralai/Mistral-7B-Instruct-v0.3": "<s>[INST] Answer briefly.\n\nWhat is 2+2?[/INST]",
    "microsoft/Phi-4-mini-instruct": "<|system|>Answer briefly.<|end|><|user|>What is 2+2?<|end|><|assistant|>",
    "HuggingFaceTB/SmolLM3-3B": (
        "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 24 Nov 2026\n"
        "Reasoning Mode: /think\n\n## Custom Instructions\n\nAnswer briefly.\n\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    ),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": (
        "<｜begin▁of▁sentence｜>Answer briefly.<｜User｜>What is 2+2?<｜Assistant｜><think>\n"
    ),
}


def family_tokenizer(hub_id: str, vocab_size: int = 4096):
    """hub_id's family tokenizer, its vocabulary cut to vocab_size so the test builds it in a second."""
    from trainers.chat_templates import family_of
    from trainers.models import build_tokenizer

    return build_tokenizer(vocab_size, family_of(json.loads(bundled_models()[hub_id].read_text())))


def render(tokenizer, messages, **kwargs) -> str:
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, strftime_now=lambda fmt: "24 Nov 2026", **kwargs
    )


def test_every_bundled_model_names_a_family_that_the_rendering_test_covers():
    from trainers.chat_templates import FAMILIES

    families = {json.loads(path.read_text())["_chat_family"] for path in bundled_models().values()}
    covered = {json.loads(bundled_models()[hub].read_text())["_chat_family"] for hub in RENDERED}
    assert families == covered == set(FAMILIES) - {"chatml"}


@pytest.mark.parametrize("hub_id", sorted(RENDERED))
def test_each_family_renders_a_conversation_as_its_published_template_does(hub_id):
    tokenizer = family_tokenizer(hub_id)
    assert render(tokenizer, CONVERSATION) == RENDERED[hub_id]
    # Every special token and thinking tag is one token, as in the real vocabulary.
    from trainers.chat_templates import family_of

    family = family_of(json.loads(bundled_models()[hub_id].read_text()))
    for token in [*family.special_tokens(), *family.plain]:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token
    assert len(tokenizer) == 4096


def test_qwen3_drops_earlier_reasoning_and_closes_an_empty_think_when_thinking_is_off():
    tokenizer = family_tokenizer("Qwen/Qwen3-8B")
    turns = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\n2 and 2 make 4\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    history = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    asked = "<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"
    assert render(tokenizer, turns) == history + asked
    assert render(tokenizer, turns, enable_thinking=False) == history + asked + "<think>\n\n</think>\n\n"


def test_smollm3_prompts_are_as_long_as_the_published_tokenizer_renders_them():
    # Lengths of HuggingFaceTB/SmolLM3-3B's own rendering of one user turn "What is 2+2?" on
    # "04 September 2026", captured from its tokenizer: 1369 characters thinking (the long default
    # persona), 297 not. No <|im_end|> closes the system block: the published template has it only
    # in its tools branch.
    tokenizer = family_tokenizer("HuggingFaceTB/SmolLM3-3B")
    question = [{"role": "user", "content": "What is 2+2?"}]

    def text(**kwargs):
        return tokenizer.apply_chat_template(
            question, add_generation_prompt=True, tokenize=False,
            strftime_now=lambda fmt: "04 September 2026", **kwargs,
        )  # fmt: skip

    assert len(text()) == 1369 and len(text(enable_thinking=False)) == 297
    assert text(enable_thinking=False).endswith(
        "named SmolLM, trained by Hugging Face.\n\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n"
    )


def test_an_unknown_chat_family_is_refused_with_the_known_ones():
    from trainers.chat_templates import family_of

    with pytest.raises(ValueError) as refused:
        family_of({"_chat_family": "qwen4"})
    assert str(refused.value) == (
        "_chat_family: 'qwen4' is not a known chat family; use one of chatml, deepseek-r1, gemma3, "
        "llama3.1, llama3.2, mistral-v0.3, phi4, qwen2.5, qwen3, smollm3"
    )


def test_model_facts_count_linear_weights_in_4_bits_and_the_rest_in_bf16():
    from trainers.models import NF4_BYTES_PER_WEIGHT, model_facts

    assert NF4_BYTES_PER_WEIGHT == 0.5 + 1 / 64 + 4 / 16384
    # Llama 3.2 1B by hand: 16 layers of q, k, v, o (2048x2048, 2048x512 twice, 2048x2048) and gate, up,
    # down (2048x8192 each); its output head is the tied embedding, 128256x2048, which stays bf16.
    linear = 16 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192)
    facts = model_facts("meta-llama/Llama-3.2-1B-Instruct")
    assert (facts.quantizable, facts.parameters) == (linear, 1_235_814_400)
    assert (facts.vocab, facts.layers, facts.kv_heads) == (128256, 16, 8)
    assert facts.bf16_bytes == 2 * 1_235_814_400
    assert facts.nf4_bytes == round(linear * NF4_BYTES_PER_WEIGHT) + 2 * (1_235_814_400 - linear)
    # Qwen3-30B-A3B: transformers keeps the experts as fused 3-D tensors, no nn.Linear, so bitsandbytes
    # quantizes only attention (48 layers of 2048x4096 twice and 2048x512 twice): nf4 saves little.
    moe = model_facts("Qwen/Qwen3-30B-A3B")
    assert moe.quantizable == 48 * (2 * 2048 * 4096 + 2 * 2048 * 512)
    assert moe.kv_heads == 4 and round(moe.nf4_bytes / 1024**3, 2) == 55.62


def run_cli(*args: str):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_rlsweep_models_prints_one_bundled_models_row():
    from trainers.models import NF4_BYTES_PER_WEIGHT

    done = run_cli("models", "random:Qwen/Qwen3-8B")
    assert done.returncode == 0, done.stderr
    # Qwen3-8B by hand: 36 layers of q, o (4096x4096), k, v (4096x1024), gate, up, down (4096x12288);
    # 8,190,735,360 parameters in all.
    linear = 36 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12288)
    nf4 = (linear * NF4_BYTES_PER_WEIGHT + 2 * (8_190_735_360 - linear)) / 1024**3
    cells = ["Qwen/Qwen3-8B", "8.19", "151936", "36", "8", f"{nf4:.2f}", f"{2 * 8_190_735_360 / 1024**3:.2f}"]
    rows = [line for line in done.stdout.splitlines() if "Qwen/Qwen3-8B" in line]
    assert [cell.strip() for cell in rows[-1].strip("│ ").split("│")] == cells == [
        "Qwen/Qwen3-8B", "8.19", "151936", "36", "8", "5.66", "15.26",
    ]  # fmt: skip
    assert "nf4 = bitsandbytes 4-bit with double quantization" in done.stdout


def test_rlsweep_models_lists_every_bundled_model(capsys):
    from orchestrator.cli import main

    assert main(["models"]) == 0
    listed = [
        line.split("│")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("│")
    ]
    assert sorted(listed) == sorted(bundled_models())


def test_rlsweep_models_says_how_to_fetch_the_config_of_a_model_that_is_not_bundled(capsys):
    from orchestrator.cli import main

    assert main(["models", "Qwen/Qwen3-9B"]) == 2  # HF_HUB_OFFLINE (tests/unit/conftest.py), nothing cached
    said = capsys.readouterr().err.replace("\n", "")
    assert said.startswith("'Qwen/Qwen3-9B' is not bundled and its config.json is not in the HF cache (")
    assert "HF_HUB_OFFLINE is set, so it was not fetched from " in said
    assert "fetch it once where the hub is reachable with `hf download Qwen/Qwen3-9B config.json`" in said
    assert "did you mean" not in said  # no twin by name: tests/unit/test_hub_config.py, by architecture


def test_models_doc_lists_exactly_the_bundled_models():
    page = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = page.partition("# Models\n")[2]
    listed = re.findall(r"`random:([^`<]+)`", section)
    assert sorted(listed) == sorted(bundled_models())


def test_every_shipped_sweep_that_downloads_names_its_random_twin():
    from orchestrator.spec.load import load_sweep
    from trainers.trial import TrialSpec

    sweeps = sorted((Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml"))
    downloading = 0
    for path in sweeps:
        sweep = load_sweep(str(path))
        models = sweep.axes().get("model") or [sweep.fixed.get("model", TrialSpec().model)]
        for model in models:
            if parse_model(model).kind != "hub":
                continue
            downloading += 1
            line = next(line for line in path.read_text().splitlines() if f"model: {model}" in line)
            assert line.endswith(f"no download: --set model=random:{model}"), (path.name, line)
            assert model in bundled_models()
            assert load_sweep(str(path), [f"model=random:{model}"]).fixed["model"] == f"random:{model}"
    assert downloading == 3  # original-16gb, workstation-16gb and vllm-memory


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMS))
def test_every_bundled_config_states_whether_the_built_model_ties_its_embeddings(hub_id):
    # The memory model reads tie_word_embeddings from the config (absent reads as untied). Gemma 3's
    # published configs leave it out (transformers' Gemma3TextConfig ties by default): ours state it.
    from trainers.models import meta_model

    built = meta_model(f"random:{hub_id}")
    tied = built.get_output_embeddings().weight is built.get_input_embeddings().weight
    assert json.loads(bundled_models()[hub_id].read_text())["tie_word_embeddings"] is tied
