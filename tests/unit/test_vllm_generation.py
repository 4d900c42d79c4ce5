"""trainers/generation.py and trainers/stacks/_vllm_cpu.py without starting vLLM: what a vLLM trial
asks of TRL, its CPU KV cache from the budget, and the CPU-only patch left off where CUDA is."""

import sys
import types

import pytest

from trainers.generation import cpu_kvcache_space_gib, prepare_vllm, trl_vllm_kwargs
from trainers.runtime import UnavailableError
from trainers.stacks import _vllm_cpu
from trainers.stacks.unsloth import fast_inference_kwargs
from trainers.trial import TrialSpec
from trainers.units import GIB


def test_trl_gets_the_share_of_the_budget_not_of_the_card_and_the_server_on_loopback():
    spec = TrialSpec(generation="vllm", vllm_gpu_memory_utilization=0.5, memory_budget_gib=16.0)
    kwargs = trl_vllm_kwargs(spec, card_total_bytes=80 * GIB)
    # 0.5 of 16 GiB is 8 GiB, which is 0.1 of an 80 GiB card
    assert kwargs == {
        "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": pytest.approx(0.1),
        "vllm_enable_sleep_mode": False, "vllm_max_model_length": 256 + 128,
    }  # fmt: skip
    server = TrialSpec(generation="vllm", vllm_mode="server", vllm_server_port=8123)
    assert trl_vllm_kwargs(server, None) == {
        "use_vllm": True, "vllm_mode": "server", "vllm_gpu_memory_utilization": 0.5,
        "vllm_enable_sleep_mode": False, "vllm_max_model_length": 384,
        "vllm_server_host": "127.0.0.1", "vllm_server_port": 8123,
    }  # fmt: skip
    assert trl_vllm_kwargs(TrialSpec(), 80 * GIB) == {"use_vllm": False}


@pytest.mark.parametrize(
    "share,budget,gib", [(0.25, 4.0, 1), (0.3, 16.0, 5), (0.2, 2.0, 1), (0.5, None, None)]
)
def test_the_cpu_kv_cache_is_the_share_of_the_budget_in_whole_gib_rounded_up(share, budget, gib):
    spec = TrialSpec(generation="vllm", vllm_gpu_memory_utilization=share, memory_budget_gib=budget)
    assert cpu_kvcache_space_gib(spec) == gib


def test_qlora_with_vllm_on_a_cpu_is_unavailable_with_the_fix():
    with pytest.raises(UnavailableError) as caught:
        prepare_vllm(TrialSpec(generation="vllm", quantization="nf4"), on_gpu=False)
    assert str(caught.value) == (
        "quantization: nf4 with generation: vllm needs vLLM's bitsandbytes support, which its CPU build "
        "lacks; set quantization: none (LoRA) on this host, or run QLoRA with vLLM on a GPU"
    )


def test_the_cpu_patch_is_not_applied_where_torch_sees_cuda(monkeypatch):
    import torch

    fake_utils = types.SimpleNamespace(dispatch_cpu_unquantized_gemm=object())
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.utils", fake_utils)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    original = fake_utils.dispatch_cpu_unquantized_gemm
    assert _vllm_cpu.keep_plain_linear() is False
    assert fake_utils.dispatch_cpu_unquantized_gemm is original
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers", types.SimpleNamespace(utils=fake_utils))
    assert _vllm_cpu.keep_plain_linear() is True
    layer = torch.nn.Linear(4, 3)
    fake_utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    # the weight stays a Parameter TRL can load into, and the layer computes with it as it is now
    assert isinstance(layer.weight, torch.nn.Parameter) and layer.cpu_linear is torch.nn.functional.linear


@pytest.mark.parametrize(
    "share,budget,card_gib", [(0.2, 16.0, 80), (0.3, 16.0, 24), (0.5, None, 80), (0.5, 40.0, 24)]
)
def test_both_stacks_give_vllm_the_same_share_length_and_mode(share, budget, card_gib):
    spec = TrialSpec(generation="vllm", vllm_gpu_memory_utilization=share, memory_budget_gib=budget)
    trl = trl_vllm_kwargs(spec, card_gib * GIB)
    unsloth = fast_inference_kwargs(spec, card_gib * GIB)
    # the pool: share x budget (capped at the card) over the card, on both
    expected = share * min(budget or card_gib, card_gib) / card_gib
    assert trl["vllm_gpu_memory_utilization"] == pytest.approx(expected)
    assert unsloth["gpu_memory_utilization"] == pytest.approx(expected)
    # Unsloth's max_seq_length is prompt + completion (trainers/stacks/unsloth.py), TRL's vLLM length too
    assert trl["vllm_max_model_length"] == spec.max_prompt_length + spec.max_completion_length
    assert (trl["use_vllm"], trl["vllm_mode"], unsloth["fast_inference"]) == (True, "colocate", True)
    assert fast_inference_kwargs(TrialSpec(), card_gib * GIB) == {}


def test_vllm_on_a_cpu_without_a_budget_is_unavailable_rather_than_taking_a_share_of_the_node():
    with pytest.raises(UnavailableError) as caught:
        prepare_vllm(
            TrialSpec(generation="vllm", quantization="none", vllm_gpu_memory_utilization=0.3), on_gpu=False
        )
    assert str(caught.value) == (
        "memory_budget_gib: unset with generation: vllm on a CPU, where vLLM would take vllm_gpu_memory_utilization "
        "(0.3) of the whole NUMA node's memory for its KV cache; set memory_budget_gib (e.g. 4: its KV cache is "
        "then that share of it)"
    )


def test_a_transformers_trial_keeps_vllm_out_of_the_trainer_and_a_vllm_trial_does_not():
    """TRL imports its vLLM backend whenever vLLM is installed: a transformers trial would measure that
    import (0.13 GiB of RSS on tiny). The child hides vLLM from TRL unless the trial generates with it."""
    import subprocess
    import sys

    code = (
        "import sys, importlib.util\n"
        "from trainers.generation import hide_vllm_unless_used\n"
        "from trainers.trial import TrialSpec\n"
        "hide_vllm_unless_used(TrialSpec(generation=sys.argv[1]))\n"
        "from trl.import_utils import is_vllm_available\n"
        "print(sys.modules.get('vllm', 'absent') is None, importlib.util.find_spec('vllm') is None, is_vllm_available())\n"
    )
    run = lambda generation: subprocess.run(  # noqa: E731
        [sys.executable, "-c", code, generation], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert run("transformers") == ["True", "True", "False"]
    installed = subprocess.run(  # asked in a fresh interpreter: this one's sys.modules may hold test stubs
        [sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec('vllm') is not None)"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip() == "True"  # fmt: skip
    assert run("vllm") == ["False", str(not installed), str(installed)]
