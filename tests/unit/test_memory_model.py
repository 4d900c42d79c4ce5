"""The memory model (orchestrator/judging/memory): fitting on synthetic rows from an independent formula,
censored out-of-memory rows, the prior, refusals, the pruning rule, the informative order."""

from __future__ import annotations

import json

import pytest

from orchestrator.judging.memory import (
    DOES_NOT_FIT,
    FITS,
    UNCERTAIN,
    UNKNOWN,
    MemoryModel,
    Prediction,
    informative_order,
)
from orchestrator.judging.memory._terms import CALIBRATED
from tests.helpers.memory_rows import GRID, KV_WIDTH, H, I, L, V, row, trial, true_peak
from tests.helpers.stacks import registered
from trainers.models import TINY_CONFIG
from trainers.trial import TrialSpec
from trainers.units import GIB


def test_fitting_predicts_unseen_configurations_of_an_independent_formula_within_one_percent():
    model = MemoryModel.fit([row(s) for s in GRID])
    for unseen in (
        trial(num_generations=16, batch_size=3, max_completion_length=64),
        trial(num_generations=4, batch_size=4, max_completion_length=256, micro_batch_size=4),
    ):
        prediction = model.predict(unseen)
        assert prediction.basis == "fitted" and prediction.n_fitted == len(GRID)
        assert prediction.peak_gib == pytest.approx(true_peak(unseen), rel=0.01)
        assert prediction.low_gib <= true_peak(unseen) <= prediction.high_gib


def test_fitting_recovers_the_runtime_the_kv_cache_and_the_logits_coefficients():
    (family,) = MemoryModel.fit([row(s) for s in GRID]).families()
    assert family.coefficients["kv_cache"] == pytest.approx(1.0, rel=0.05)
    assert family.coefficients["logits"] == pytest.approx(2.6, rel=0.05)
    assert family.terms["static"] == pytest.approx(0.9, rel=0.02)
    assert family.n_fitted == len(GRID) and family.loo_worst < 0.02


def test_a_prediction_is_the_sum_of_its_parts():
    prediction = MemoryModel.fit([row(s) for s in GRID]).predict(trial(num_generations=12))
    assert sum(prediction.terms.values()) == pytest.approx(prediction.peak_gib)
    assert set(prediction.terms) == {"static", "generation", "training"}


def test_an_oom_trial_pulls_the_fit_up_to_its_budget():
    small = [trial(f"k{k}", num_generations=k) for k in (2, 4)]
    large = trial("k48", num_generations=48)
    budget = true_peak(large) * 1.5  # the large trial ran out of memory above what the formula says
    measured = [row(s) for s in small]
    before = MemoryModel.fit(measured).predict(large)
    after = MemoryModel.fit([*measured, row(large, "oom", memory_budget_gib=budget)]).predict(large)
    assert before.peak_gib < budget
    assert after.peak_gib >= budget * 0.99
    assert after.n_fitted == 2  # an oom trial is a bound, not a measurement


def test_a_timed_out_trial_counts_as_a_peak_at_least_the_one_it_measured_not_as_a_measurement():
    small = [row(trial(f"k{k}", num_generations=k)) for k in (2, 4)]
    large = trial("k48", num_generations=48)
    reached = true_peak(large) * 1.5  # what it measured before its time limit, above what the formula says
    before = MemoryModel.fit(small).predict(large)
    after = MemoryModel.fit([*small, row(large, "timeout", peak=reached)]).predict(large)
    assert before.peak_gib < reached
    assert after.peak_gib >= reached * 0.99
    assert after.n_fitted == 2


def test_an_oom_trial_already_predicted_over_its_budget_changes_nothing():
    small = [row(trial(f"k{k}", num_generations=k)) for k in (2, 4)]
    large = trial("k48", num_generations=48)
    low_budget = true_peak(large) * 0.5
    plain = MemoryModel.fit(small).predict(large)
    censored = MemoryModel.fit([*small, row(large, "oom", memory_budget_gib=low_budget)]).predict(large)
    assert censored.peak_gib == pytest.approx(plain.peak_gib)


def test_with_no_trials_the_prior_predicts_and_says_so():
    model = MemoryModel.fit([], measure="RSS")
    small, large = model.predict(trial(num_generations=2)), model.predict(trial(num_generations=8))
    assert (small.basis, small.n_fitted, small.unknown, small.measure) == ("prior", 0, None, "RSS")
    # the prior's growth from K=2 to K=8 (B=2: 12 more completions of 256 + 128 tokens, fp32 on a
    # CPU), written out: the logits of the 128 completion tokens, the KV cache and sampled logits of
    # a generation, the activations, each once, and LoRA dropout's copy of each adapted input (q, k, v,
    # o, gate, up: hidden-sized in tiny; down: the MLP's) with its bool mask in every layer
    tokens, extra = 256 + 128, 12
    growth = (
        extra * 128 * V * 4
        + 2 * L * KV_WIDTH * 4 * extra * tokens
        + extra * V * 4
        + extra * tokens * L * (10 * H + 3 * I) * 4
        + extra * tokens * L * (6 * H + I) * (4 + 1)
    ) / GIB
    assert large.peak_gib - small.peak_gib == pytest.approx(growth, rel=1e-9)
    assert small.low_gib < small.peak_gib < small.high_gib


def test_other_statuses_and_rows_without_the_measure_are_ignored():
    rows = [row(GRID[0]), {**row(GRID[1]), "status": "failed"}, {**row(GRID[2]), "peak_rss_gib": None}]
    assert MemoryModel.fit(rows, measure="RSS").predict(GRID[3]).n_fitted == 1


def test_a_model_without_a_config_is_unknown_with_the_reason():
    prediction = MemoryModel.fit([], measure="GPU").predict(trial(model="someorg/some-model"))
    assert prediction.peak_gib is None and prediction.low_gib is None and prediction.high_gib is None
    assert "someorg/some-model" in prediction.unknown and "config.json" in prediction.unknown
    assert prediction.verdict(16) == UNKNOWN
    assert prediction.describe().startswith("unknown: model:")


def test_a_bundled_hub_id_is_predicted_from_its_bundled_config():
    prediction = MemoryModel.fit([], measure="GPU").predict(trial(model="Qwen/Qwen2.5-0.5B-Instruct"))
    # Its config.json by hand: 24 layers, hidden 896, 14 heads of 64, 2 KV heads, MLP 4864, vocab 151936,
    # tied embeddings, q, k and v biases (Qwen2); the defaults: NF4, bf16 on a GPU, LoRA r 16, B x K = 8
    # sequences of 256 + 128 tokens, micro-batch 8, gradient checkpointing; the GPU prior's coefficients.
    linear = 24 * (896 * 896 * 2 + 896 * 128 * 2 + 896 * 4864 * 3)
    weights = linear * 0.5 + (151936 * 896 + 896 * 49 + 24 * (896 + 2 * 128)) * 2
    lora = 24 * 16 * ((896 + 896) * 2 + (896 + 128) * 2 + (896 + 4864) * 3) * 16
    c = CALIBRATED
    static = c["baseline"] + (c["weights"] * weights + c["lora"] * lora) / GIB
    generation = (c["kv_cache"] * 2 * 24 * 2 * 64 * 2 * 8 * 384 + c["sampling_logits"] * 8 * 151936 * 4) / GIB
    # Checkpointed: each layer's input kept, plus the one layer backward recomputes (10 hidden-sized and
    # 3 MLP-sized tensors a token); TRL's completion + 1 rows of fp32 logits with their fp32 gradient.
    activations = 8 * 384 * (24 * 896 + 10 * 896 + 3 * 4864) * 2
    # LoRA dropout (0.05) adds nothing: checkpointed layers keep no dropped-out copies at the peak
    training = (c["activations"] * activations + c["logits"] * 8 * 129 * 151936 * 8) / GIB
    assert (prediction.unknown, prediction.basis) == (None, "prior")
    assert prediction.terms == pytest.approx(
        {"static": static, "generation": generation, "training": training}
    )
    assert prediction.peak_gib == pytest.approx(static + generation + training)


def test_colocated_vllm_without_a_budget_is_unknown_until_its_family_has_two_measured_trials():
    vllm = dict(stack="unsloth", generation="vllm", probe_steps=0)
    model = MemoryModel.fit([row(trial("a", num_generations=2, **vllm))])
    prediction = model.predict(trial(num_generations=4, **vllm))
    assert prediction.verdict(16) == UNKNOWN
    assert prediction.unknown == (
        "generation: vllm reserves vllm_gpu_memory_utilization (0.5) of the card up front and no "
        "memory_budget_gib sizes it; set memory_budget_gib (the pool is then that share of it) or measure 2 "
        "trials of this family first (1 so far)"
    )
    rows = [row(trial(k, num_generations=n, **vllm)) for k, n in (("a", 2), ("b", 8))]
    assert MemoryModel.fit(rows).predict(trial(num_generations=4, **vllm)).unknown is None


def test_colocated_vllm_under_a_budget_replaces_the_generation_terms_with_its_pool_on_a_gpu():
    spec = trial(model="Qwen/Qwen2.5-0.5B-Instruct", generation="vllm", vllm_gpu_memory_utilization=0.3,
                 memory_budget_gib=16.0)  # fmt: skip
    plain = MemoryModel.fit([], measure="GPU").predict(trial(model="Qwen/Qwen2.5-0.5B-Instruct"))
    prediction = MemoryModel.fit([], measure="GPU").predict(spec)
    # vLLM's KV cache and sampling live in its pool: 0.3 of the 16 GiB budget, all vLLM takes on a GPU
    assert prediction.unknown is None
    assert prediction.terms["generation"] == pytest.approx(0.3 * 16)
    assert prediction.terms["static"] == pytest.approx(plain.terms["static"])
    assert prediction.terms["training"] == pytest.approx(plain.terms["training"])


def test_colocated_vllm_on_a_cpu_holds_the_kv_cache_the_budget_gives_it_and_its_copy_of_the_weights():
    spec = trial(
        generation="vllm", vllm_gpu_memory_utilization=0.25, memory_budget_gib=4.0, quantization="none"
    )
    prediction = MemoryModel.fit([], measure="RSS").predict(spec)
    # tiny by hand: 2 layers of q, k, v, o (256x256, 256x128 twice, 256x256) and MLP 3 x 256x512, the
    # embedding tied to the head (vocab x 256 once), 5 norms of 256, Qwen2's q, k, v biases (256 + 128 +
    # 128 a layer); fp32 on a CPU
    params = 2 * (256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3) + V * 256 + 256 * 5 + 2 * (256 + 128 + 128)
    assert (L, H, I) == (2, 256, 512) and TINY_CONFIG["tie_word_embeddings"]
    assert prediction.terms["generation"] == pytest.approx(1 + params * 4 / GIB)  # 1 GiB: ceil(0.25 x 4)


def test_an_unknown_measure_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="measure: unknown 'VRAM'; one of GPU, torch reserved, RSS"):
        MemoryModel.fit([], measure="VRAM")


@pytest.mark.parametrize(
    "budget,verdict",
    [
        (16.0, DOES_NOT_FIT),
        (16.8, UNCERTAIN),
        (17.0, UNCERTAIN),
        (19.0, FITS),
        (20.0, FITS),
        (None, UNCERTAIN),
    ],
)
def test_the_verdict_reads_the_whole_interval(budget, verdict):
    prediction = Prediction(17.9, 16.8, 19.0, "GPU", 5, "fitted")
    assert prediction.verdict(budget) == verdict


def test_describe_gives_the_peak_and_its_interval():
    assert Prediction(17.9, 16.8, 19.0, "GPU", 5, "fitted").describe() == "predicted 17.9 GiB (16.8-19.0)"
    assert Prediction(0.834, 0.79, 0.88, "RSS", 2, "fitted").describe() == "predicted 0.83 GiB (0.79-0.88)"


def test_families_each_get_their_own_coefficients():
    trl = [row(s) for s in GRID]
    unsloth = [row(TrialSpec(**{**s.to_dict(), "stack": "unsloth"}), peak=true_peak(s) + 0.3) for s in GRID]
    model = MemoryModel.fit(trl + unsloth)
    labels = sorted(f.label for f in model.families())
    assert labels == ["trl grpo tiny nf4 auto checkpointed", "unsloth grpo tiny nf4 auto checkpointed"]
    spec = trial(num_generations=12, batch_size=3)
    shifted = model.predict(TrialSpec(**{**spec.to_dict(), "stack": "unsloth"})).peak_gib
    assert shifted - model.predict(spec).peak_gib == pytest.approx(0.3, abs=0.02)


def test_a_registered_third_stack_makes_a_family_of_its_own():
    with registered():
        third = [row(TrialSpec(**{**s.to_dict(), "stack": "third"}), peak=true_peak(s) + 0.7) for s in GRID]
        model = MemoryModel.fit([row(s) for s in GRID] + third)
        spec = trial(num_generations=12, batch_size=3)
        shifted = model.predict(TrialSpec(**{**spec.to_dict(), "stack": "third"})).peak_gib
    labels = sorted(f.label for f in model.families())
    assert labels == ["third grpo tiny nf4 auto checkpointed", "trl grpo tiny nf4 auto checkpointed"]
    assert shifted - model.predict(spec).peak_gib == pytest.approx(0.7, abs=0.02)


def test_the_informative_order_runs_each_familys_extremes_first():
    specs = [trial(f"k{k}", num_generations=k) for k in (2, 4, 8, 16, 32)]
    order = [s.trial_key for s in informative_order(specs, MemoryModel.fit([], measure="RSS"))]
    assert order[:2] == ["k2", "k32"]
    assert order[2] == "k16"  # the peak farthest from both extremes (the logits grow with K)
    assert sorted(order) == sorted(s.trial_key for s in specs)


def test_one_measured_trial_pins_its_neighbourhood_not_a_far_configuration():
    near, far = trial("near", num_generations=2), trial("far", num_generations=24)
    model = MemoryModel.fit([row(near)])
    close, distant = model.predict(near), model.predict(far)
    assert close.peak_gib == pytest.approx(true_peak(near), rel=0.02)
    width = lambda p: (p.high_gib - p.low_gib) / p.peak_gib  # noqa: E731
    assert width(distant) > 2 * width(close)  # the slope is still the prior's guess
    assert distant.low_gib <= true_peak(far) <= distant.high_gib


def test_a_lora_trial_with_beta_adds_no_reference_model():
    # TRL's GRPOTrainer sets ref_model None for a PEFT model and scores the reference with the adapters
    # off (trl/trainer/grpo_trainer.py); Unsloth's trainer is TRL's, regenerated: one base either way.
    model = MemoryModel.fit([], measure="GPU")
    without = model.predict(trial(model="Qwen/Qwen2.5-3B-Instruct", beta=0.0))
    with_kl = model.predict(trial(model="Qwen/Qwen2.5-3B-Instruct", beta=0.04))
    assert with_kl.terms == without.terms
    assert (with_kl.peak_gib, with_kl.low_gib, with_kl.high_gib) == (
        without.peak_gib,
        without.low_gib,
        without.high_gib,
    )


def _gpu_terms(stack: str, **knobs) -> dict[str, float]:
    from orchestrator.judging.memory._model import model_shape
    from orchestrator.judging.memory._terms import terms

    shape, _ = model_shape("Qwen/Qwen2.5-3B-Instruct")
    return terms(trial(stack=stack, model="Qwen/Qwen2.5-3B-Instruct", **knobs), shape, "gpu")


def test_on_a_gpu_trl_holds_fp32_logits_of_completion_plus_one_rows_and_their_fp32_gradient():
    sizes = _gpu_terms("trl", num_generations=8, batch_size=1, max_completion_length=128)
    # TRL 1.14: logits_to_keep = 128 + 1 rows a completion, cast to fp32 by accelerate's
    # convert_outputs_to_fp32, kept by the Triton log-softmax with an fp32 gradient in backward.
    assert sizes["logits"] == pytest.approx(8 * 129 * 151936 * (4 + 4) / GIB)
    assert sizes["logit_chunk"] == 0


def test_unsloths_peak_grows_by_its_chunk_not_the_full_logits():
    knobs = dict(num_generations=8, batch_size=2)
    short, long = (_gpu_terms("unsloth", max_completion_length=c, **knobs) for c in (512, 1024))
    assert short["logits"] == long["logits"] == 0
    # unsloth_zoo chunked_logprob_rows: min(2 GiB / (151936 x 8 B), max(512, rows / 8)) rows of fp32
    # logits and their bf16 gradient: 16 x 512 / 8 = 1024 rows, then the 1766-row cap at 1024 tokens.
    assert short["logit_chunk"] == pytest.approx(1024 * 151936 * (4 + 2) / GIB)
    assert long["logit_chunk"] == pytest.approx(1766 * 151936 * (4 + 2) / GIB)
    full = _gpu_terms("trl", max_completion_length=1024, **knobs)["logits"]
    assert long["logit_chunk"] < full / 10


def test_unsloth_offloads_its_checkpointed_hidden_states_and_keeps_only_the_recomputed_layer():
    knobs = dict(num_generations=8, batch_size=2, max_completion_length=128)
    trl, unsloth = _gpu_terms("trl", **knobs), _gpu_terms("unsloth", **knobs)
    kept = 16 * (256 + 128) * 36 * 2048 * 2 / GIB  # one bf16 hidden state a layer a token
    assert trl["activations"] - unsloth["activations"] == pytest.approx(kept)


def test_the_gpu_prior_is_what_calibrating_on_round_1s_h100_trials_gives():
    from tools.inputs.h100_rows import load, trial_rows

    calibrated = MemoryModel.calibrate(trial_rows(load(), 1), "GPU")
    assert {name: round(value, 3) for name, (value, _) in calibrated.items()} == CALIBRATED


def test_the_prior_predicts_trls_logits_growth_from_the_vocabulary_and_completion_length():
    # Round 1 on an H100: TRL 3B at completion 128 grew 6.92 - 4.986 GiB from 8 to 16 completions,
    # 0.24 GiB a completion (the old prior: 0.18); its prompts were 34 tokens.
    model = MemoryModel("GPU")
    knobs = dict(
        stack="trl", model="random:Qwen/Qwen2.5-3B-Instruct", num_generations=4, max_prompt_length=34
    )
    small, large = (model.predict(trial(batch_size=b, **knobs)).peak_gib for b in (2, 4))
    assert (large - small) / 8 == pytest.approx((6.92 - 4.986) / 8, rel=0.1)


def _h100_row(peak: float, longest: int | None, **knobs) -> dict:
    spec = trial(stack="unsloth", model="random:Qwen/Qwen2.5-3B-Instruct", quantization="nf4", **knobs)
    config = {"longest_prompt_tokens": longest} if longest is not None else {}
    return {
        "status": "completed",
        "config": json.dumps(spec.to_dict()),
        "peak_device_gib": peak,
        "effective_config": json.dumps(config),
    }


def test_the_terms_count_prompts_at_the_longest_one_the_tasks_trials_measured_not_at_max_prompt_length():
    # A batch is padded to its longest prompt: round 1's arithmetic prompts were 34 tokens under a
    # max_prompt_length of 256, and counting 256 made the activations and KV cache grow too slowly
    # with the completion (Unsloth at completion 1024 predicted 13% under).
    knobs = dict(num_generations=8, batch_size=2, max_prompt_length=256, max_completion_length=1024)
    model = MemoryModel.fit([_h100_row(4.22, 34, **(knobs | {"max_completion_length": 128}))], "GPU")
    spec = trial(stack="unsloth", model="random:Qwen/Qwen2.5-3B-Instruct", **knobs)
    assert model.counted(spec).max_prompt_length == 34
    words = {line.term: line.formula for line in model.explain(spec)}
    assert "1058 tokens" in words["activations"]
    # without a measured prompt (or another task's) the bound is counted
    unmeasured = MemoryModel.fit([_h100_row(4.22, None, **knobs)], "GPU")
    assert unmeasured.counted(spec).max_prompt_length == 256
    other_task = trial(stack="unsloth", model="random:Qwen/Qwen2.5-3B-Instruct", task="gsm8k", **knobs)
    assert model.counted(other_task).max_prompt_length == 256


def test_calibrating_keeps_the_face_value_of_a_term_the_rows_do_not_pin():
    # Round 1 ran NF4 weights only: it cannot tell bf16 weights (AgileRL's A100 rows) from the
    # baseline, so their coefficient stays at its face value; TRL's logits it pins.
    from tools.inputs.h100_rows import load, trial_rows

    calibrated = MemoryModel.calibrate(trial_rows(load(), 1), "GPU")
    for name in ("weights", "lora", "kv_cache", "activations"):
        assert calibrated[name][0] == pytest.approx(1.0, abs=1e-3)
    assert calibrated["logits"][0] != pytest.approx(1.0, abs=0.05)
