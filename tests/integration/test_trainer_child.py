"""Real trainer processes: `python -m trainers spec.json` on the tiny model, 3 steps, each forked from the
stack's fork server as a sweep's trainers are (run_forked_child: the imports done once, not in every
test); the invalid spec's child starts cold."""

import json

import pytest

from tests.helpers.trainer_child import STEP_COLUMNS, run_child, run_forked_child

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "mode,quantization", [("grpo", "nf4"), ("gspo", "nf4"), ("grpo", "none"), ("gspo", "none")]
)
def test_three_steps_event_stream(tmp_path, mode, quantization):
    proc, events = run_forked_child(tmp_path, mode=mode, quantization=quantization)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kinds = [e["event"] for e in events]
    assert kinds == ["started", "step", "step", "step", "finished"]
    started = events[0]
    assert started["versions"]["torch"] and started["versions"]["trl"] and started["versions"]["transformers"]
    effective = started["effective_config"]
    assert effective["importance_sampling_level"] == ("sequence" if mode == "gspo" else "token")
    assert effective["load_in_4bit"] is (quantization == "nf4")
    assert effective["num_generations"] == 2 and effective["completions_per_step"] == 4
    # LoRA r 16 on tiny's 2 layers (hidden 256, 4 heads, 2 KV heads of 64, MLP 512): r x (in + out)
    # for q, k, v, o, gate, up, down
    assert effective["lora_r"] == 16
    assert effective["trainable_params"] == 2 * 16 * ((256 + 256) * 2 + (256 + 128) * 2 + (256 + 512) * 3)
    # nothing on stdout may be mistaken for an event: the stream is its own file (a forked trainer's
    # stdout is its log, stderr included)
    assert '"event"' not in proc.stdout

    steps = events[1:4]
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        assert set(STEP_COLUMNS) <= set(s)
        # counted, not estimated: tokens match TRL's own completion lengths for B x K completions
        assert s["completions"] == 4
        assert s["completion_tokens"] == pytest.approx(s["completion_len_mean"] * 4)
        assert s["completion_len_max"] <= 12
        assert s["prompt_tokens"] > 0
        assert s["tokens_per_s"] == pytest.approx((s["prompt_tokens"] + s["completion_tokens"]) / s["step_s"])
        assert 0 < s["gen_s"] < s["step_s"]
        assert s["rss_gib"] > 0 and s["rss_peak_gib"] >= s["rss_gib"] * 0.5
        # no GPU here: what cannot be measured is null, never 0
        assert s["torch_allocated_gib"] is None and s["torch_peak_reserved_gib"] is None
        assert s["learning_rate"] == pytest.approx(2e-4)


def test_invalid_spec_ends_with_error_event_before_any_model(tmp_path):
    proc, events = run_child(tmp_path, micro_batch_size=3)
    assert proc.returncode == 1
    assert [e["event"] for e in events] == ["error"]
    assert "micro_batch_size: 3 does not divide" in events[0]["message"]


def test_probe_steps_force_max_length_and_are_flagged(tmp_path):
    proc, events = run_forked_child(tmp_path, probe_steps=2, max_steps=3, probe_kind="decode")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["event"] for e in events] == ["started", "step", "step", "step", "finished"]
    steps = [e for e in events if e["event"] == "step"]
    assert [s["probe"] for s in steps] == [True, True, False]
    # A random model never emits EOS, so lengths cannot tell; the generation setting that forces them can.
    assert [s["min_new_tokens"] for s in steps] == [12, 12, None]
    assert all(s["completion_len_mean"] == 12 for s in steps[:2])


def test_events_json_is_one_object_per_line_ending_in_exactly_one_final_event(tmp_path):
    proc, events = run_forked_child(tmp_path, max_steps=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == events
    assert [e["event"] for e in events] == ["started", "step", "finished"]
    assert events[-1]["steps"] == 1


def test_lora_weights_change_only_when_rewards_vary(tmp_path):
    # A random model never answers right: accuracy alone has zero variance, so no advantage and no update.
    # The shaped `digits` reward varies between samples, so the adapters must move.
    _, flat = run_forked_child(tmp_path / "flat", max_steps=2, task_args={"rewards": {"accuracy": 1.0}})
    _, shaped = run_forked_child(
        tmp_path / "shaped", max_steps=2, task_args={"rewards": {"accuracy": 1.0, "digits": 1.0}}
    )
    kinds = ["started", "step", "step", "finished"]
    assert [e["event"] for e in flat] == [e["event"] for e in shaped] == kinds
    assert flat[-1]["lora_b_abs_sum"] == 0.0
    assert shaped[-1]["lora_b_abs_sum"] > 0.0
    # Adam's moments were allocated before step 1 (trainers/optimizer_state.py), so step 1 ran with the
    # state every later step holds; allocating them early moved no weight (flat's B is still zero).
    for events in (flat, shaped):
        state = [e["optimizer_state_gib"] for e in events if e["event"] == "step"]
        assert state[0] > 0 and state[0] == state[1]
    steps = [e for e in shaped if e["event"] == "step"]
    assert all("rewards/digits/mean" in s and "rewards/accuracy/mean" in s for s in steps)
    assert any(s["reward_std"] > 0 for s in steps)


def test_throughput_is_per_generation_cycle_when_completions_are_reused(tmp_path):
    # num_iterations 2: step 1 generates, step 2 optimises again over the same completions, and so on.
    proc, events = run_forked_child(tmp_path, num_iterations=2, max_steps=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["event"] for e in events] == ["started", "step", "step", "step", "step", "finished"]
    steps = [e for e in events if e["event"] == "step"]
    assert [s["generated"] for s in steps] == [True, False, True, False]
    for first, second in (steps[0:2], steps[2:4]):
        # What the reuse step did not do is null, never 0.
        assert second["prompt_tokens"] is None and second["completion_tokens"] is None
        assert second["gen_s"] is None and first["tokens_per_s"] is None
        # Rewards ran (in the scoring worker) only on the step that generated; none was over its limit.
        assert first["reward_timeouts"] == 0 and second["reward_timeouts"] is None
        # The task runs no sandbox: the completions it killed are not measured, null, never 0.
        assert first["sandbox_kills"] is None and second["sandbox_kills"] is None
        tokens = first["prompt_tokens"] + first["completion_tokens"]
        assert second["tokens_per_s"] == pytest.approx(tokens / (first["step_s"] + second["step_s"]))
        assert second["cycle_steps"] == 2
        assert second["reward_mean"] is not None or first["reward_mean"] is not None


def test_every_step_is_a_cycle_when_each_step_generates(tmp_path):
    proc, events = run_forked_child(tmp_path, max_steps=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["event"] for e in events] == ["started", "step", "step", "finished"]
    for s in (e for e in events if e["event"] == "step"):
        assert s["generated"] and s["cycle_steps"] == 1
        assert s["tokens_per_s"] == pytest.approx((s["prompt_tokens"] + s["completion_tokens"]) / s["step_s"])


def test_a_synthetic_probe_step_updates_the_weights_and_then_puts_them_back(tmp_path):
    proc, events = run_forked_child(tmp_path, probe_steps=1, max_steps=1, probe_kind="synthetic")
    assert proc.returncode == 0, proc.stderr[-3000:]
    step = next(e for e in events if e["event"] == "step")
    assert step["probe_kind"] == "synthetic" and step["min_new_tokens"] is None  # nothing decoded long
    assert step["update_ratio"] > 0  # random rewards gave the optimizer a real step to take
    finished = next(e for e in events if e["event"] == "finished")
    assert finished["lora_b_abs_sum"] == 0  # LoRA's B starts at zero: the step's update was undone
