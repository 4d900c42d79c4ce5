"""Each memory term moves a prediction the way its mechanism says, and what a stack does with memory
comes from its registry entry (trainers.stacks.StackMemory), not from its name."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.judging.memory._model import MemoryModel, model_shape
from orchestrator.judging.memory._terms import terms
from orchestrator.running.host_memory import offloaded_checkpoints_gib, predicted_rss_gib
from tests.helpers.stacks import THIRD, registered
from trainers.stacks import StackMemory, memory_of
from trainers.trial import TrialSpec
from trainers.units import GIB

QWEN3B = "Qwen/Qwen2.5-3B-Instruct"


def sizes(stack: str = "trl", model: str = QWEN3B, device: str = "gpu", **knobs) -> dict[str, float]:
    shape, _ = model_shape(model)
    return terms(TrialSpec(stack=stack, model=model, **knobs), shape, device)


def test_a_longer_completion_raises_the_full_logits_term_linearly_in_completion_plus_one_rows():
    at = {
        c: sizes(num_generations=8, batch_size=2, max_completion_length=c)["logits"] for c in (256, 512, 1024)
    }
    # 16 completions x (c + 1) rows x 151,936 vocabulary x 8 B: the growth per token does not change
    assert (at[512] - at[256]) / 256 == pytest.approx((at[1024] - at[512]) / 512)
    assert at[512] - at[256] == pytest.approx(16 * 256 * 151936 * 8 / GIB)
    assert at[1024] / at[256] == pytest.approx(1025 / 257)


def test_chunked_log_probs_hold_less_than_the_full_logits_and_stop_growing_at_the_chunk_cap():
    knobs = dict(num_generations=8, batch_size=2)
    full = {c: sizes("trl", max_completion_length=c, **knobs)["logits"] for c in (1024, 4096)}
    chunk = {c: sizes("unsloth", max_completion_length=c, **knobs)["logit_chunk"] for c in (1024, 4096)}
    assert all(chunk[c] < full[c] / 10 for c in chunk)
    assert chunk[4096] == chunk[1024]  # past the chunk's row cap a longer completion adds nothing here
    assert full[4096] > 3.9 * full[1024]


def test_tied_embeddings_count_the_vocabulary_once_and_untied_twice_in_the_weights():
    tied, _ = model_shape(QWEN3B)  # Qwen2.5-3B ties its head to the embeddings
    untied = dataclasses.replace(tied, tied=False)
    spec = TrialSpec(model=QWEN3B)
    extra = terms(spec, untied, "gpu")["weights"] - terms(spec, tied, "gpu")["weights"]
    assert tied.tied and extra == pytest.approx(tied.vocab * tied.hidden * 2 / GIB)  # bf16, never 4-bit


def test_offloaded_checkpoints_leave_the_gpu_for_the_hosts_ram():
    knobs = dict(num_generations=8, batch_size=2, max_completion_length=512, lora_dropout=0.0)
    kept = sizes("trl", **knobs)["activations"] - sizes("unsloth", **knobs)["activations"]
    spec = TrialSpec(stack="unsloth", model=f"random:{QWEN3B}", **knobs)
    assert kept > 0 and offloaded_checkpoints_gib(spec) == pytest.approx(kept)
    trl = TrialSpec(stack="trl", model=f"random:{QWEN3B}", **knobs)
    assert offloaded_checkpoints_gib(trl) == 0
    assert (
        predicted_rss_gib(spec).gib
        > predicted_rss_gib(dataclasses.replace(spec, max_completion_length=128)).gib
    )


def test_lora_dropout_keeps_no_copies_in_checkpointed_layers_on_a_gpu():
    knobs = dict(num_generations=8, batch_size=2, max_completion_length=128, max_prompt_length=34)
    # checkpointed forward keeps no intermediates; the recomputed layer's copies come after the logits'
    # peak (they moved TRL 3B K8 c512, measured oom at 16 GiB, to a wrong `fits`)
    with_dropout, without = (sizes(lora_dropout=p, **knobs)["activations"] for p in (0.05, 0.0))
    assert with_dropout == pytest.approx(without)
    plain = dict(knobs, gradient_checkpointing=False)
    with_dropout, without = (sizes(lora_dropout=p, **plain)["activations"] for p in (0.05, 0.0))
    shape, _ = model_shape(QWEN3B)
    # not checkpointed: every layer's q/k/v/gate/up inputs (hidden), o's, down's, each a bf16 copy and
    # a bool mask, for 16 sequences of 162 tokens
    width = 3 * 2048 + 16 * 128 + 2 * 2048 + 11008
    assert shape.adapted_width() == width
    assert with_dropout - without == pytest.approx(16 * 162 * shape.layers * width * 3 / GIB)
    full = sizes(lora_dropout=0.05, adapter="none", quantization="none", **plain)["activations"]
    assert full == pytest.approx(without)  # no adapter, no dropout copies


def test_without_checkpointing_every_layer_keeps_its_dropout_copies_on_a_cpu():
    shape, _ = model_shape("tiny")
    knobs = dict(
        model="tiny", num_generations=8, batch_size=1, max_completion_length=16, max_prompt_length=36
    )
    with_dropout, without = (sizes(device="cpu", lora_dropout=p, **knobs)["activations"] for p in (0.05, 0.0))
    assert with_dropout - without == pytest.approx(8 * 52 * shape.layers * shape.adapted_width() * 5 / GIB)


def test_more_completions_raise_every_per_sequence_term_in_proportion():
    small, large = (sizes(num_generations=k, batch_size=2, max_completion_length=256) for k in (4, 8))
    for name in ("kv_cache", "sampling_logits", "activations", "logits"):
        assert large[name] == pytest.approx(2 * small[name]), name
    for name in ("baseline", "weights", "lora"):
        assert large[name] == small[name], name


def test_a_third_stack_declaring_chunked_log_probs_and_offload_gets_those_terms_without_a_name_check():
    entry = dataclasses.replace(THIRD, memory=StackMemory(offloads_checkpoints=True, chunked_logprobs=True))
    knobs = dict(num_generations=8, batch_size=2, max_completion_length=512)
    with registered(entry):
        assert memory_of("third").chunked_logprobs
        third = sizes("third", **knobs)
    assert third == sizes("unsloth", **knobs)
    with registered():  # the default: the plain transformers path, like TRL's
        assert sizes("third", **knobs) == sizes("trl", **knobs)


def test_a_stack_whose_full_logits_stay_in_the_compute_dtype_holds_half_of_trls():
    entry = dataclasses.replace(THIRD, memory=StackMemory(fp32_logits=False))
    with registered(entry):
        bf16 = sizes("third", num_generations=8, max_completion_length=256)["logits"]
    assert bf16 == pytest.approx(sizes("trl", num_generations=8, max_completion_length=256)["logits"] / 2)


def test_the_host_baseline_comes_from_the_stacks_entry_and_an_unmeasured_stack_takes_the_largest():
    spec = TrialSpec(stack="trl", model=f"random:{QWEN3B}")
    with registered(dataclasses.replace(THIRD, memory=StackMemory(host_baseline_gib=2.5))):
        own = predicted_rss_gib(dataclasses.replace(spec, stack="third"))
    with registered():
        unmeasured = predicted_rss_gib(dataclasses.replace(spec, stack="third"))
    trl = predicted_rss_gib(spec)
    assert own.how.startswith("third baseline 2.50 GiB")
    assert unmeasured.how.startswith(f"third baseline {memory_of('unsloth').host_baseline_gib:.2f} GiB")
    assert trl.how.startswith(f"trl baseline {memory_of('trl').host_baseline_gib:.2f} GiB")


def test_a_prediction_rises_with_each_terms_mechanism_through_the_fitted_model():
    model = MemoryModel("GPU")
    base = TrialSpec(stack="trl", model=QWEN3B, num_generations=8, batch_size=2, max_completion_length=256)
    peak = model.predict(base).peak_gib
    assert model.predict(dataclasses.replace(base, max_completion_length=512)).peak_gib > peak
    assert model.predict(dataclasses.replace(base, stack="unsloth")).peak_gib < peak
    assert model.predict(dataclasses.replace(base, quantization="none")).peak_gib > peak
