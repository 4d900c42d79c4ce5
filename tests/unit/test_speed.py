"""A full-length step's time from a synthetic probe's short decode windows, and the per-stack speed
model for configurations with no measured rows (orchestrator/judging/speed.py, speed_model.py)."""

import math
from pathlib import Path

import pytest

from orchestrator.judging.duration import load_times
from orchestrator.judging.speed import (
    decode_seconds,
    predict_step,
    predict_step_from_record,
    prefill_chunks,
)
from orchestrator.judging.speed_model import (
    fit,
    h100_observations,
    held_out_errors,
    launches,
    load_speed_model,
    shape_of,
)
from trainers.trial import TrialSpec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rows():
    return h100_observations(ROOT)


def row(rows, stack, completion):
    return next(r for r in rows if r.stack == stack and r.completion == completion and r.sequences == 16)


def test_equal_readings_predict_a_rows_generation_from_its_own_ms_per_token(rows):
    # Unsloth 3B, 16 sequences, 2048 tokens: its mean ms per decode step as both readings gives back
    # its generation (prefill as one step, as the rows count it)
    measured = row(rows, "unsloth", 2048)
    ms = measured.gen_s / (measured.completion + 1) * 1000
    forecast = predict_step(ms, ms, measured.completion, measured.train_s)
    assert forecast.gen_s == pytest.approx(measured.gen_s)
    assert forecast.step_s == pytest.approx(measured.gen_s + measured.train_s)


def test_decode_time_is_the_mean_of_the_two_readings_over_the_completion():
    # ms linear in the context: the first step at the prompt's reading, the last one step short of full
    assert decode_seconds(50.0, 150.0, 1000) == pytest.approx((1000 * 50 + 100 * 999 / 2) / 1000)
    assert decode_seconds(50.0, 150.0, 1000) == pytest.approx(100.0, rel=1e-3)
    assert decode_seconds(80.0, 80.0, 1) == pytest.approx(0.08)


def test_a_cycle_generates_once_for_all_its_steps():
    forecast = predict_step(80.0, 80.0, 1024, 2.0, steps_per_generation=2)
    assert forecast.cycle_s == pytest.approx(forecast.gen_s + 4.0)
    assert forecast.step_s == pytest.approx(forecast.cycle_s / 2)
    assert forecast.prefill_s == pytest.approx(0.08)  # one decode step at the prompt, unmeasured
    assert predict_step(80.0, 80.0, 1024, 2.0, prefill_s=0.5).prefill_s == 0.5
    assert "extrapolated" in forecast.basis


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((0.0, 80.0, 1024, 1.0), "decode_ms_per_token_at_prompt"),
        ((80.0, math.nan, 1024, 1.0), "decode_ms_per_token_at_full"),
        ((80.0, 80.0, 0, 1.0), "max_completion_length"),
        ((80.0, 80.0, 1024, None), "train_s"),
    ],
)
def test_a_missing_or_impossible_reading_is_refused_by_name(args, field):
    with pytest.raises(ValueError, match=f"^{field}: .* must be a positive"):
        predict_step(*args)


def test_a_probe_steps_record_is_read_and_a_decoded_step_has_no_forecast():
    step = {"decode_ms_per_token_at_prompt": 60.0, "decode_ms_per_token_at_full": 90.0, "train_s": 3.0,
            "decode_window_tokens": 8}  # fmt: skip
    forecast = predict_step_from_record(step, 2048, steps_per_generation=2)
    assert forecast.decode_s == pytest.approx(decode_seconds(60.0, 90.0, 2048))
    assert forecast.steps_per_generation == 2 and forecast.train_s == 3.0
    assert predict_step_from_record({"gen_s": 130.0, "train_s": 3.0}, 2048) is None
    nan = dict(step, decode_ms_per_token_at_full=float("nan"))
    assert predict_step_from_record(nan, 2048) is None


def test_the_speed_model_file_is_the_fit_of_the_h100_rows(rows):
    assert load_speed_model().to_json() == fit(rows, load_times()).to_json()


def test_the_rows_are_every_completed_h100_trial_with_first_step_warm_up_removed(rows):
    import csv

    with open(ROOT / "bench/data/h100-2026-11-26/trials.csv", newline="") as f:
        completed = [r for r in csv.DictReader(f) if r["status"] == "completed"]
    assert len(rows) == len(completed)
    first_only = [r for r in rows if not r.steady]
    assert first_only and all(r.gen_s < float(c["median_gen_s"]) for r, c in zip(rows, completed, strict=True)
                              if not r.steady)  # fmt: skip


def test_decode_costs_grow_with_the_module_calls_of_a_token_and_unsloth_calls_cheaper():
    model = load_speed_model()
    llama, gemma = shape_of("meta-llama/Llama-3.2-1B-Instruct"), shape_of("random:google/gemma-3-1b-it")
    # Gemma 3 1B: 26 layers with four norms and per-head q/k norms each; Llama 3.2 1B: 16 layers, two
    assert launches(gemma) > launches(llama)
    assert model.decode_ms("trl", gemma, 16, 512) > model.decode_ms("trl", llama, 16, 512)
    assert model.decode_ms("unsloth", llama, 16, 512) < model.decode_ms("trl", llama, 16, 512)
    # launch-bound: the batch changes the KV term only
    assert model.decode_ms("trl", llama, 2, 512) <= model.decode_ms("trl", llama, 64, 512)
    assert model.decode_ms("trl", llama, 64, 512) < 1.5 * model.decode_ms("trl", llama, 2, 512)
    # a step over more tokens, or a bigger model, trains longer
    qwen4b = shape_of("Qwen/Qwen3-4B")
    assert model.train_s("trl", qwen4b, 16 * 1024) > model.train_s("trl", qwen4b, 16 * 256)
    assert model.train_s("trl", qwen4b, 16 * 1024) > model.train_s("trl", llama, 16 * 1024)


def test_a_model_without_a_bundled_architecture_or_a_stack_without_rows_has_no_speed():
    with pytest.raises(ValueError, match="model: 'tiny' has no bundled architecture"):
        shape_of("tiny")
    with pytest.raises(ValueError, match="stack: 'jax' has no fitted speed"):
        load_speed_model().decode_ms("jax", shape_of("Qwen/Qwen3-4B"), 8, 256)


def test_every_row_is_predicted_by_a_model_fitted_without_it(rows):
    for group in ("row", "round"):
        errors = held_out_errors(rows, load_times(), group)
        assert len(errors) == len(rows)
        assert all(math.isfinite(gen) for _, gen, _ in errors)
        assert [train is None for _, _, train in errors] == [r.train_s is None for r in rows]


def test_a_synthetic_probe_costs_its_start_up_and_warm_up_and_little_more():
    model = load_speed_model()
    spec = TrialSpec(stack="unsloth", model="random:Qwen/Qwen3-4B", num_generations=16, batch_size=1,
                     max_prompt_length=256, max_completion_length=4096)  # fmt: skip
    synthetic, decoded = model.probe(spec, "synthetic"), model.probe(spec, "decode")
    assert synthetic.startup_s == decoded.startup_s and synthetic.train_s == decoded.train_s
    assert synthetic.generation_s < decoded.generation_s / 10
    assert synthetic.total_s < decoded.total_s
    assert prefill_chunks(256, 4096, 16) == 136  # (256 + 4096) / 32-token chunks (512 rows / 16), rounded up
    assert prefill_chunks(256, 4096, 1) == 9  # one sequence: 512-token chunks
    with pytest.raises(ValueError, match="oom.probe_kind: 'fast' is not a probe kind"):
        model.probe(spec, "fast")
