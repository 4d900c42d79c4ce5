"""Real TRL trials generating with vLLM's CPU build (installed by `make setup` on a host without GPU):
colocate mode, LoRA, a probe step whose forced length reached vLLM's sampling parameters."""

import pytest

from tests.helpers.trainer_child import needs_vllm, run_child

pytestmark = [pytest.mark.slow, needs_vllm]
# Two steps, the first a probe, generating with colocated vLLM on a quarter of a 4 GiB budget.
COLOCATED = {
    "generation": "vllm",
    "vllm_gpu_memory_utilization": 0.25,
    "memory_budget_gib": 4.0,
    "quantization": "none",
    "max_steps": 2,
    "probe_steps": 1,
    "task_args": {"rewards": {"accuracy": 1.0, "digits": 1.0}},  # rewards that vary, so the adapters move
}


@pytest.mark.heavy
def test_a_trl_trial_trains_two_steps_generating_with_colocated_vllm_and_probes_through_min_tokens(tmp_path):
    proc, events = run_child(tmp_path, **COLOCATED, probe_kind="decode")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["event"] for e in events] == ["started", "step", "step", "finished"]
    effective = events[0]["effective_config"]
    assert effective["use_vllm"] is True and effective["vllm_mode"] == "colocate"
    # CPU: no card to scale to; the KV cache is a quarter of the 4 GiB budget, in whole GiB
    assert effective["vllm_gpu_memory_utilization"] == 0.25
    assert effective["vllm_cpu_kvcache_space_gib"] == 1
    first, second = events[1:3]
    # min_tokens as vLLM's SamplingParams held it on the probe step (12 = max_completion_length), none after
    assert [first["min_new_tokens"], second["min_new_tokens"]] == [12, None]
    assert first["completion_len_mean"] == 12 and first["completions"] == 4
    for step in (first, second):
        assert step["train_s"] == pytest.approx(step["step_s"] - step["gen_s"])
        assert 0 < step["gen_s"] < step["step_s"]
    # the adapters trained: TRL synced them into vLLM after step 1 (the CPU patch keeps that possible)
    assert events[-1]["lora_b_abs_sum"] > 0


@pytest.mark.heavy
def test_a_synthetic_probe_times_a_window_through_colocated_vllm_and_trains_on_full_length(tmp_path):
    proc, events = run_child(tmp_path, **COLOCATED, probe_kind="synthetic")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = [e for e in events if e["event"] == "step"]
    assert first["probe_kind"] == "synthetic" and first["completion_len_mean"] == 12
    # vLLM's pool is allocated whole: one window after the prompt, no reading at full length
    assert first["decode_ms_per_token_at_prompt"] > 0 and first["decode_ms_per_token_at_full"] is None
    assert first["min_new_tokens"] is None and first["reward_mean"] is None
    assert second["probe_kind"] is None and second["reward_mean"] is not None
