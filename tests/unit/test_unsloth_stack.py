"""The Unsloth stack's guards that need no Unsloth process: a missing install is `unavailable` with the
fix, and knobs Unsloth's GPU GRPOConfig rewrites are put back. (Unsloth's GPU config cannot be built
on a host without GPU, so its rewrite is reproduced on a plain object here; the CPU rewrite is
checked for real in tests/integration/test_stack_parity.py.)"""

import sys
from enum import StrEnum
from types import SimpleNamespace

import pytest

from trainers.runtime import UnavailableError
from trainers.stacks.unsloth import import_unsloth, restore_asked


def test_missing_unsloth_is_unavailable_with_the_install_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "unsloth", None)  # what an environment without unsloth raises
    with pytest.raises(UnavailableError, match=r"unsloth cannot be imported .*make setup"):
        import_unsloth()


class Optim(StrEnum):
    ADAMW_TORCH = "adamw_torch"
    ADAMW_8BIT = "adamw_8bit"


def test_rewritten_knobs_are_put_back_and_reported():
    asked = {
        "per_device_train_batch_size": 2,
        "generation_batch_size": 8,
        "num_generations": 4,
        "epsilon_high": 0.2,
        "mask_truncated_completions": False,
        "optim": "adamw_torch",
        "output_dir": "/tmp/x",
    }
    # As Unsloth's GPU config leaves it: batch raised to K (and TRL's derived steps_per_generation with
    # it), DAPO's epsilon_high and truncation mask, its 8-bit optimizer.
    config = SimpleNamespace(
        **(
            asked
            | {"per_device_train_batch_size": 4, "epsilon_high": 0.28, "mask_truncated_completions": True}
        ),
        steps_per_generation=2,
    )
    config.optim = Optim.ADAMW_8BIT
    changed = restore_asked(config, asked)
    assert changed == {
        "per_device_train_batch_size": [2, 4],
        "epsilon_high": [0.2, 0.28],
        "mask_truncated_completions": [False, True],
        "optim": ["adamw_torch", "adamw_8bit"],
    }
    assert config.per_device_train_batch_size == 2 and config.steps_per_generation == 4
    assert config.epsilon_high == 0.2 and config.mask_truncated_completions is False
    assert config.optim is Optim.ADAMW_TORCH  # the enum type the config uses, not a bare string
    assert restore_asked(config, asked) == {}


class _Loaded(Exception):
    """Stops run() right after the model load it captured."""


def test_unsloth_loads_the_exact_hub_model_named_not_its_own_prequantized_copy(monkeypatch, tmp_path):
    from trainers import stacks
    from trainers.events import EventWriter
    from trainers.stacks import unsloth as unsloth_stack
    from trainers.trial import TrialSpec

    calls = []

    def from_pretrained(**kwargs):
        calls.append(kwargs)
        raise _Loaded

    fake = SimpleNamespace(FastLanguageModel=SimpleNamespace(from_pretrained=from_pretrained))
    monkeypatch.setattr(unsloth_stack, "import_unsloth", lambda: fake)
    spec = TrialSpec(stack="unsloth", model="Qwen/Qwen2.5-3B-Instruct", quantization="nf4")
    with pytest.raises(_Loaded):
        stacks.load("unsloth").run(spec, EventWriter(str(tmp_path / "events.jsonl")))
    # Unsloth's mapper would otherwise load unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit (its mapper.py).
    assert calls[0]["model_name"] == "Qwen/Qwen2.5-3B-Instruct"
    assert calls[0]["use_exact_model_name"] is True
    assert calls[0]["load_in_4bit"] is True


def test_the_effective_config_names_the_checkpoint_loaded_and_the_linear_layers_left_in_16_bit():
    import torch
    from bitsandbytes.nn import Linear4bit
    from transformers import BitsAndBytesConfig

    from trainers.runtime import effective_config
    from trainers.trial import TrialSpec

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = Linear4bit(8, 8)
            self.down_proj = torch.nn.Linear(8, 8)  # a dynamic quant's module kept in 16 bit

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([Layer(), Layer()])
    model.lm_head = torch.nn.Linear(8, 16)
    model.config = SimpleNamespace(
        _name_or_path="unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit",
        quantization_config=BitsAndBytesConfig(load_in_4bit=True),
    )
    args = SimpleNamespace(
        per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=4, world_size=1
    )
    out = effective_config(SimpleNamespace(args=args), model, TrialSpec())
    assert out["resolved_checkpoint"] == "unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit"
    assert out["unquantized_linear_modules"] == ["down_proj", "lm_head"]
