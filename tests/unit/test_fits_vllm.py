"""Generation by vLLM counted in a simulated answer (orchestrator/judging/memory/_vllm.py, judging.answer.judged):
vLLM's pool as the share of the card its own code asks for, its weights shared or its own, sleep mode's
release between generations, server mode on other GPUs, and the starts vLLM refuses; and `fits` with
`generation=vllm` answers from the prior without asking for a setting it refuses."""

import dataclasses

import pytest

from orchestrator.judging.answer import judged
from orchestrator.judging.memory._model import model_shape
from orchestrator.judging.memory._vllm import held, one_sequence_gib, weights_gib
from tests.helpers.cli import run_cli
from trainers.simulate import SimulatedStep
from trainers.trial import TrialSpec

CONTEXT = 0.76
SPEC = TrialSpec(model="Qwen/Qwen3-4B", stack="trl", learning_rate=2e-4, generation="vllm",
                 vllm_gpu_memory_utilization=0.3, memory_budget_gib=24.0)  # fmt: skip


def _step() -> SimulatedStep:
    # a trainer at rest on 3 GiB that peaks at 6 GiB training and at 9 GiB generating with transformers
    return SimulatedStep(9.0, 9.5, "generation", {"generation": 9.0, "training": 6.0}, 3.0, 1.0, {}, 9.2)


def test_colocated_vllm_holds_its_share_of_the_card_throughout_beside_its_own_weights():
    vllm = held(SPEC, 24.0, CONTEXT, 3.0)
    assert vllm.generating == pytest.approx(0.3 * 24.0) and vllm.training == (vllm.generating,) * 2
    assert vllm.shared_weights == 0 and vllm.refused is None


def test_a_stack_whose_trainer_is_built_on_vllms_weights_counts_them_once_in_a_pool_of_the_free_memory():
    unsloth = dataclasses.replace(SPEC, stack="unsloth")
    vllm = held(unsloth, 24.0, CONTEXT, 3.0)
    shape, _ = model_shape(unsloth.model)
    assert vllm.generating == pytest.approx(0.3 * (24.0 - CONTEXT))
    assert vllm.shared_weights > 1.0 and vllm.shared_weights == pytest.approx(weights_gib(unsloth, shape))


def test_sleep_mode_releases_the_weights_and_kv_cache_while_training_keeping_at_most_the_rest():
    vllm = held(dataclasses.replace(SPEC, vllm_enable_sleep_mode=True), 24.0, CONTEXT, 3.0)
    shape, _ = model_shape(SPEC.model)
    rest = 0.3 * 24.0 - weights_gib(SPEC, shape) - one_sequence_gib(SPEC, shape)
    assert vllm.training == pytest.approx((0.0, rest)) and vllm.generating == pytest.approx(0.3 * 24.0)


def test_vllm_in_server_mode_holds_nothing_on_the_trainers_card():
    vllm = held(dataclasses.replace(SPEC, vllm_mode="server"), 24.0, CONTEXT, 3.0)
    assert (vllm.generating, vllm.training, vllm.refused) == (0.0, (0.0, 0.0), None)


def test_vllm_refuses_to_start_where_its_request_passes_the_free_memory_and_the_fix_is_said():
    vllm = held(dataclasses.replace(SPEC, vllm_gpu_memory_utilization=0.8), 24.0, CONTEXT, 6.0)
    assert vllm.refused and "lower vllm_gpu_memory_utilization to 0.71 or less" in vllm.refused
    small = held(dataclasses.replace(SPEC, vllm_gpu_memory_utilization=0.05), 24.0, CONTEXT, 3.0)
    assert small.refused and "raise vllm_gpu_memory_utilization" in small.refused


def test_the_answer_with_vllm_counts_its_pool_and_not_transformers_generation():
    transformers = judged(dataclasses.replace(SPEC, generation="transformers"), _step(), 24.0)
    vllm = judged(SPEC, _step(), 24.0)
    # the trainer's 6 GiB training peak (+ its 0.5 reserved over allocated) beside the 7.2 GiB pool, not 9.5
    assert vllm.peak_gib == pytest.approx(6.0 + 0.5 + 0.3 * 24.0 + CONTEXT)
    assert transformers.peak_gib == pytest.approx(9.5 + CONTEXT) != vllm.peak_gib
    assert "vLLM's pool 0.3 x 24.0 GiB = 7.2" in vllm.basis
    refused = judged(dataclasses.replace(SPEC, vllm_gpu_memory_utilization=0.9), _step(), 24.0)
    assert refused.verdict == "does not fit" and "refused: vLLM asks for" in refused.basis


def test_fits_with_vllm_answers_from_the_prior_without_asking_for_a_budget_it_refuses(capsys):
    code, text = run_cli(["fits", "--model", "Qwen/Qwen3-4B", "--card", "24gb", "--set", "generation=vllm",
                          "--set", "vllm_gpu_memory_utilization=0.8", "--no-simulate"], capsys)  # fmt: skip
    assert code == 0, text
    assert "memory_budget_gib" not in text and "generation by vllm" in text
    assert "TRL " in text and "Unsloth " in text


def test_the_prior_counts_vllms_pool_and_weights_by_the_same_rules():
    from orchestrator.judging.memory._terms import terms

    shape, _ = model_shape(SPEC.model)
    trl = terms(SPEC, shape, "gpu")
    assert trl["vllm_pool"] == pytest.approx(0.3 * 24.0) and trl["weights"] > 1.0 and trl["kv_cache"] == 0
    unsloth = terms(dataclasses.replace(SPEC, stack="unsloth"), shape, "gpu")
    assert unsloth["vllm_pool"] == pytest.approx(0.3 * (24.0 - CONTEXT)) and unsloth["weights"] == 0


def test_fitmap_with_vllm_sizes_the_pool_from_the_card_rather_than_refusing(capsys, tmp_path):
    code, text = run_cli(["fitmap", "--card", "24gb", "--model", "Qwen/Qwen3-4B", "--stack", "unsloth",
                          "--set", "generation=vllm", "--set", "vllm_gpu_memory_utilization=0.5",
                          "--no-simulate", "--output-dir", str(tmp_path)], capsys)  # fmt: skip
    assert code == 0, text
    assert "memory_budget_gib" not in text and "no cell of the map can be predicted" not in text
