"""Simulated rows in the memory model's answers (orchestrator/judging/memory/_simulated.py): a family with
no measured trial is drawn from its stack's simulated steps and says so, with the simulator's error range
as its interval; once a trial of the family is measured, the measurement alone counts. The layer cut
(trainers/simulate/_layers.py) and the disk cache (trainers/simulate/_cache.py) by their rules."""

import dataclasses
from types import SimpleNamespace

import pytest

from orchestrator.judging.memory import SIMULATED, MemoryModel
from orchestrator.judging.memory._interval import UNCHECKED_ERROR
from orchestrator.judging.memory._simulated import design, enabled, row
from orchestrator.words.outcome import COMPLETED, GPU
from trainers.simulate import SimulatedStep, _cache, _layers
from trainers.stacks import memory_of
from trainers.trial import TrialSpec

BASE = TrialSpec(model="Qwen/Qwen2.5-3B-Instruct", stack="trl", num_generations=8, batch_size=2,
                 max_prompt_length=256, max_completion_length=512, learning_rate=2e-4)  # fmt: skip


def _step(reserved: float) -> SimulatedStep:
    return SimulatedStep(reserved - 1.0, reserved, "training", {"training": reserved - 1.0}, 2.0, 1.0)


def _simulated(spec: TrialSpec, lengths=(128, 256, 512, 1024)) -> list[dict]:
    # a step whose reserved peak grows with the completion length, as a simulated one does
    return [
        row(dataclasses.replace(spec, max_completion_length=n), _step(3.0 + n / 256), i)
        for i, n in enumerate(lengths)
    ]


def test_a_family_with_only_simulated_rows_is_predicted_on_the_simulated_basis_with_the_simulators_error():
    model = MemoryModel.fit(_simulated(BASE), GPU)
    p = model.predict(BASE)
    assert p.basis == SIMULATED and p.n_fitted == 4
    ((family, low, high, _),) = memory_of("trl").simulated_error
    assert family == "qwen2"  # Qwen2.5's family: its own rows' error range
    assert p.low_gib <= p.peak_gib * low and p.high_gib >= p.peak_gib * high
    assert p.describe().startswith("simulated ")


def test_a_measured_trial_of_the_family_supersedes_its_simulated_rows():
    measured = {"config": BASE.to_json(), "status": COMPLETED, "peak_device_gib": 9.5, "trial_key": "m"}
    model = MemoryModel.fit([*_simulated(BASE), measured], GPU)
    p = model.predict(BASE)
    assert p.basis == "fitted" and p.n_fitted == 1
    other = dataclasses.replace(BASE, model="Qwen/Qwen2.5-1.5B-Instruct")
    both = MemoryModel.fit([*_simulated(BASE), measured, *_simulated(other)], GPU)
    assert both.predict(other).basis == SIMULATED and both.predict(BASE).basis == "fitted"


def test_a_stack_no_gpu_row_checked_has_no_upper_bound():
    from orchestrator.judging.memory._interval import simulated_interval

    assert simulated_interval("a-stack-never-checked", 10.0, 0.0) == pytest.approx(
        (10.0 * UNCHECKED_ERROR[0], 10.0 * UNCHECKED_ERROR[1])
    )
    unsloth = dataclasses.replace(BASE, stack="unsloth")
    p = MemoryModel.fit(_simulated(unsloth), GPU).predict(unsloth)
    ((_, low, high, _),) = memory_of("unsloth").simulated_error
    assert p.basis == SIMULATED and p.low_gib <= p.peak_gib * low and p.high_gib >= p.peak_gib * high


def test_a_family_no_gpu_row_measured_never_reads_fits_from_simulated_rows():
    qwen3 = dataclasses.replace(BASE, model="Qwen/Qwen3-4B")
    p = MemoryModel.fit(_simulated(qwen3), GPU).predict(qwen3)
    assert p.basis == SIMULATED and p.high_gib == float("inf") and p.verdict(80.0) != "fits"


def test_a_few_asked_shapes_are_simulated_themselves_and_many_by_a_design_near_the_budget():
    few = [dataclasses.replace(BASE, num_generations=k) for k in (2, 4, 8)]
    assert design(few, 16.0) == few
    many = [
        dataclasses.replace(BASE, num_generations=k, batch_size=b, max_completion_length=n)
        for k in (2, 4, 8, 16, 32, 64) for b in (1, 2) for n in (128, 8192)
    ]  # fmt: skip
    shapes = design(many, 16.0)
    assert 4 <= len(shapes) <= 7
    ks = sorted({s.num_generations for s in shapes})
    assert ks[0] == 2 and ks[-1] == 64 and len(ks) == 3 and {s.batch_size for s in shapes} == {1, 2}
    assert all(128 <= s.max_completion_length <= 8192 and not s.problems() for s in shapes)
    # nearer the budget as a step holds fewer completions: K=2 B=1 gets the longest
    lengths = {(s.num_generations, s.batch_size): s.max_completion_length for s in shapes}
    assert lengths[(2, 1)] >= lengths[(64, 2)]


def test_simulation_is_on_unless_the_flag_or_the_environment_says_no(monkeypatch):
    monkeypatch.delenv("RLSWEEP_SIMULATE", raising=False)
    assert enabled() is True and enabled(False) is False
    monkeypatch.setenv("RLSWEEP_SIMULATE", "0")
    assert enabled() is False and enabled(True) is True


def test_a_layer_pattern_repeats_at_its_period_and_a_deep_model_is_cut_to_whole_periods():
    assert _layers.period(None) == 1
    assert _layers.period(["full_attention"] * 36) == 1
    assert (
        _layers.period((["sliding_attention"] * 5 + ["full_attention"]) * 5 + ["sliding_attention"] * 4) == 6
    )
    deep = SimpleNamespace(num_hidden_layers=36, layer_types=["full_attention"] * 36)
    assert _layers.depths(deep) == (4, 8, 36)
    gemma = SimpleNamespace(num_hidden_layers=34, layer_types=(["s"] * 5 + ["f"]) * 5 + ["s"] * 4)
    assert _layers.depths(gemma) == (6, 12, 34)
    assert _layers.depths(SimpleNamespace(num_hidden_layers=12, layer_types=None)) is None  # too shallow


def test_a_config_is_cut_only_inside_cut_to():
    config = SimpleNamespace(num_hidden_layers=36, layer_types=[f"kind{i % 2}" for i in range(36)])
    assert _layers.cut(config).num_hidden_layers == 36
    with _layers.cut_to(8):
        cut = _layers.cut(config)
    assert cut.num_hidden_layers == 8 and cut.layer_types == [f"kind{i % 2}" for i in range(8)]


def test_the_extrapolated_step_is_the_line_through_the_two_shallow_ones():
    small, large = _step(5.0), _step(7.0)  # 4 and 8 layers: 0.5 GiB a layer
    whole = _layers.extrapolated(small, large, (4, 8, 36), 2.0)
    assert whole.allocated_gib == pytest.approx(4.0 + 0.5 * 32)
    assert whole.reserved_gib == pytest.approx(whole.allocated_gib + 1.0)  # the deeper cut's overhead
    assert whole.simulated["layers"] == "4 and 8 of 36, extrapolated" and whole.phase == "training"


def test_the_cache_key_moves_with_what_shapes_the_step_and_not_with_how_long_a_trial_runs():
    config = {"model_type": "qwen2", "num_hidden_layers": 36}
    key = _cache.key(BASE, config, 34, {"as_cuda": True})
    assert _cache.key(dataclasses.replace(BASE, max_steps=99, seed=7), config, 34, {"as_cuda": True}) == key
    assert (
        _cache.key(dataclasses.replace(BASE, max_completion_length=1024), config, 34, {"as_cuda": True})
        != key
    )
    assert _cache.key(BASE, {**config, "num_hidden_layers": 28}, 34, {"as_cuda": True}) != key
    assert _cache.key(BASE, config, 35, {"as_cuda": True}) != key
    assert _cache.key(BASE, config, 34, {"as_cuda": False}) != key


def test_a_kept_step_reads_back_whole_and_a_torn_file_is_simulated_again(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    assert _cache.read("abc", SimulatedStep) is None
    _cache.write("abc", _step(6.0))
    assert _cache.read("abc", SimulatedStep) == _step(6.0)
    (tmp_path / "simulated" / "abc.json").write_text('{"allocated_gib": 5.0, ')
    assert _cache.read("abc", SimulatedStep) is None
    assert not list((tmp_path / "simulated").glob("*.tmp"))
