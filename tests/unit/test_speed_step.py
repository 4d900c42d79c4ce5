"""Seconds per step on a card (orchestrator/judging/speed_step.py, under `rlsweep fits` and `fitmap`):
the speed model's figures, decode headlined as launch-bound, the interval widened by the model's own
held-out error (computed from bench/data, not typed in), vLLM's generation its own term, a card known by
its memory alone answered over the cards it could be."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.cli._flags import card_arg
from orchestrator.judging.card_speed import MEASURED, SPEEDS, Scale
from orchestrator.judging.duration import load_times
from orchestrator.judging.speed_model import h100_observations, held_out_errors, load_speed_model, shape_of
from orchestrator.judging.speed_step import card_speeds, load_error, step_time
from tests.helpers.cli import run_cli
from trainers.trial import TrialSpec

ROOT = Path(__file__).parents[2]
SPEC = TrialSpec(
    model="Qwen/Qwen3-4B", stack="trl", num_generations=8, batch_size=1, max_completion_length=1024
)


def test_the_stored_error_is_the_speed_models_leave_one_row_out_error_on_bench_data():
    errors = held_out_errors(h100_observations(ROOT), load_times(), "row")
    stored = load_error()
    gens = [g for _, g, _ in errors]
    trains = [t for _, _, t in errors if t is not None]
    assert stored["rows"] == len(errors)
    assert stored["generation"]["low"] == pytest.approx(min(gens), abs=1e-4)
    assert stored["generation"]["high"] == pytest.approx(max(gens), abs=1e-4)
    assert stored["training"]["low"] == pytest.approx(min(trains), abs=1e-4)
    assert stored["training"]["high"] == pytest.approx(max(trains), abs=1e-4)


def test_on_the_h100_the_step_is_the_speed_models_and_its_interval_its_error():
    speed, error = load_speed_model(), load_error()
    t = step_time(SPEC, MEASURED)
    shape = shape_of(SPEC.model)
    gen = speed.gen_s("trl", shape, 8, 256, 1024)
    assert t.generation.seconds == pytest.approx(gen)
    assert t.generation.low == pytest.approx(gen / (1 + error["generation"]["high"]))
    assert t.generation.high == pytest.approx(gen / (1 + error["generation"]["low"]))
    assert t.total[1] < t.total[0] < t.total[2]


def test_on_a_slower_card_decode_is_headlined_launch_bound_and_its_interval_reaches_the_scaled_figure():
    h100, rtx = step_time(SPEC, MEASURED), step_time(SPEC, SPEEDS["rtx4090"])
    scale = Scale.to(SPEEDS["rtx4090"])
    assert rtx.generation.seconds == pytest.approx(h100.generation.seconds)  # launch-bound: as on the H100
    assert rtx.generation.high == pytest.approx(h100.generation.high * scale.decode)
    assert rtx.training.seconds > h100.training.seconds  # the arithmetic scaled by compute


def test_gradient_accumulation_pays_the_per_call_cost_once_a_pass():
    one = step_time(SPEC, MEASURED).training.seconds
    four = step_time(dataclasses.replace(SPEC, micro_batch_size=2), MEASURED).training.seconds
    assert four > one


def test_vllm_generation_is_its_own_term_with_no_figure_it_has_not_measured():
    t = step_time(dataclasses.replace(SPEC, generation="vllm"), SPEEDS["rtx4090"])
    assert t.vllm is not None and t.vllm.seconds is None and t.total is None


def test_a_card_known_by_its_memory_could_be_each_named_card_of_that_size():
    assert [s.name for s in card_speeds(card_arg("24gb"))] == ["RTX 3090", "RTX 4090"]
    assert [s.name for s in card_speeds(card_arg("4090"))] == ["RTX 4090"]


def test_fits_and_fitmap_say_seconds_per_step_on_the_card(capsys):
    code, text = run_cli(
        ["fits", "--model", "Qwen/Qwen3-4B", "--card", "24gb", "--k", "8", "--b", "1"], capsys
    )
    assert code == 0, text
    block = text[text.index("Seconds per step") :].split("\nTRL is uncertain")[0]
    assert "could be RTX 3090, RTX" in block and "generation" in block and "training" in block
    assert "launch-bound" in block and "held-out" in block
    assert all(len(line) <= 80 for line in block.splitlines()), block
    code, text = run_cli(
        ["fitmap", "--card", "4090", "--model", "Qwen/Qwen3-4B", "--k", "8", "--b", "1", "--no-plot"], capsys
    )
    assert code == 0, text
    said = " ".join(text.split())
    assert "Seconds per step at K=8, B=1 and the longest completion that fits, on the RTX 4090" in said
