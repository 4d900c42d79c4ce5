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
