"""Real Unsloth trainer processes on `tiny`, in Unsloth's CPU fallback: 3 steps of GRPO and of GSPO
(QLoRA), each forked from Unsloth's fork server as a sweep's trainers are (Unsloth imported there once),
and `unavailable` when Unsloth refuses to start (a cold child, its environment its own)."""

import pytest

from tests.helpers.trainer_child import STEP_COLUMNS, gpu_visible, run_child, run_forked_child

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["grpo", "gspo"])
def test_three_steps_event_stream(tmp_path, mode):
    proc, events = run_forked_child(tmp_path, stack="unsloth", mode=mode, quantization="nf4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["event"] for e in events] == ["started", "step", "step", "step", "finished"]
    started = events[0]
    assert started["stack"] == "unsloth" and started["versions"]["unsloth"]
    effective = started["effective_config"]
    assert effective["unsloth_backend"] == "cpu"  # no GPU here: Unsloth's documented CPU fallback
    assert effective["importance_sampling_level"] == ("sequence" if mode == "gspo" else "token")
    assert effective["load_in_4bit"] is True and effective["bnb_4bit_quant_type"] == "nf4"
    assert effective["unquantized_linear_modules"] == ["lm_head"]  # transformers keeps the head 16-bit
    assert effective["lora_target_modules"] == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    assert effective["num_generations"] == 2 and effective["completions_per_step"] == 4

    steps = events[1:4]
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        assert set(STEP_COLUMNS) <= set(s)
        # the generation hook fired inside Unsloth's trainer: tokens counted, generation timed
        assert s["completions"] == 4
        assert s["completion_tokens"] == pytest.approx(s["completion_len_mean"] * 4)
        assert s["prompt_tokens"] > 0 and 0 < s["gen_s"] < s["step_s"]
        assert s["torch_allocated_gib"] is None  # not measurable without CUDA: null, never 0
        assert s["learning_rate"] == pytest.approx(2e-4)
    assert events[-1]["steps"] == 3


@pytest.mark.skipif(gpu_visible(), reason="with a GPU, UNSLOTH_DISABLE_CPU_FALLBACK does not stop Unsloth")
def test_unsloth_that_cannot_start_is_unavailable_with_the_fix(tmp_path, monkeypatch):
    # On a host without GPU this makes `import unsloth` raise instead of falling back to CPU.
    monkeypatch.setenv("UNSLOTH_DISABLE_CPU_FALLBACK", "1")
    proc, events = run_child(tmp_path, stack="unsloth")
    assert proc.returncode == 1
    assert [e["event"] for e in events] == ["error"]
    error = events[0]
    assert error["unavailable"] is True and error["type"] == "UnavailableError"
    assert "unset UNSLOTH_DISABLE_CPU_FALLBACK" in error["message"]
