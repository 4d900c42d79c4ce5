"""Sweep files: every error at once, named by its place; overrides; every shipped sweep validates."""

from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.spec.load import apply_overrides, load_sweep, parse_sweep
from orchestrator.spec.plan import plan
from orchestrator.spec.sweep import SweepError

SWEEPS = sorted((Path(__file__).parents[2] / "sweeps").glob("*.yaml"))


def errors_of(raw: dict) -> list[str]:
    with pytest.raises(SweepError) as info:
        parse_sweep(raw)
    return info.value.errors


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_shipped_sweeps_validate(path):
    sweep = load_sweep(path)
    result = plan(sweep)
    assert result.problems == []
    assert result.trials
    assert path.read_text().startswith("# Run:"), "each sweep file opens with the command that runs it"


def test_shipped_sweeps_cli(capsys):
    assert main(["validate", *map(str, SWEEPS)]) == 0
    assert capsys.readouterr().out.count(": ok") == len(SWEEPS)


def test_every_error_at_once_with_places():
    errors = errors_of(
        {
            "name": "x",
            "grid": {"num_generations": [2, 4, 1], "stack": ["trl", "unslot"], "batch_siz": [1]},
            "fixed": {"learning_rate": -1, "quantization": "nf4"},
            "resources": {"gpus_per_trial": -1, "max_concurent": 2},
            "timeout_s": 0,
        }
    )
    text = "\n".join(errors)
    assert "grid.num_generations[2]: must be >= 2, got 1" in text
    assert "grid.stack[1]: unknown value 'unslot'; did you mean 'unsloth'" in text
    assert "grid.batch_siz: unknown setting; did you mean 'batch_size'" in text
    assert "fixed.learning_rate: must be > 0.0, got -1" in text
    assert "resources.gpus_per_trial:" in text
    assert "resources.max_concurent: unknown key; did you mean 'max_concurrent'" in text
    assert "timeout_s:" in text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"grid": {}}, "name: field required"),
        ({"name": "bad name!"}, "name: string should match pattern"),
        ({"name": "x", "memroy": {}}, "memroy: unknown key; did you mean 'memory'"),
        ({"name": "x", "memory": {"budget_gib": 0}}, "memory.budget_gib: input should be greater than 0"),
        ({"name": "x", "oom": {"prune_dominated": "maybe"}}, "oom.prune_dominated:"),
        ({"name": "x", "grid": {"num_generations": []}}, "grid.num_generations: empty list"),
        ({"name": "x", "grid": {"mode": ["grpo"]}, "fixed": {"mode": "gspo"}}, "fixed.mode: also in grid"),
        ({"name": "x", "fixed": {"trial_key": "a"}}, "fixed.trial_key: set by the orchestrator"),
        (
            {"name": "x", "fixed": {"gradient_checkpointing": "yes"}},
            "fixed.gradient_checkpointing: must be true or false",
        ),
        ({"name": "x", "grid": {"max_steps": [1.5]}}, "grid.max_steps[0]: must be int"),
        (
            {"name": "x", "tracking": {"mlflow_url": "x"}},
            "tracking.mlflow_url: unknown key; did you mean 'mlflow_uri'",
        ),
        (
            {"name": "x", "task": "arithmetic", "fixed": {"task": "gsm8k"}},
            "fixed.task: also set at the top level",
        ),
        ({"name": "x", "fixed": {"task": "arithmetic"}}, None),
    ],
)
def test_malformed(raw, expected):
    if expected is None:
        parse_sweep(raw)  # fixed.task with the default top-level task is fine
        return
    text = "\n".join(errors_of(raw)).lower()
    assert expected.lower() in text


def test_not_a_mapping_and_bad_yaml(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    for name, expected in (("list.yaml", "expected a mapping"), ("broken.yaml", "not valid YAML")):
        with pytest.raises(SweepError, match=expected):
            load_sweep(tmp_path / name)
    with pytest.raises(SweepError, match="cannot read"):
        load_sweep(tmp_path / "missing.yaml")


def test_impossible_combinations_reported_once_with_an_example(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "combo",
                "grid": {"num_generations": [2, 3], "batch_size": [1, 2], "mode": ["grpo", "gspo"]},
                "fixed": {"micro_batch_size": 2, "model": "tiny"},
            }
        )
    )
    result = plan(load_sweep(sweep))
    # K=3 with B=1 gives 3 completions, which micro_batch_size 2 does not divide; once per distinct problem
    divides = [p for p in result.problems if p.startswith("micro_batch_size")]
    assert len(divides) == 1
    assert "(in 2 of 8 trials, e.g. " in divides[0]
    assert main(["validate", str(sweep)]) == 2
    assert "impossible combination" in capsys.readouterr().err


def test_overrides():
    raw = {"name": "x", "grid": {"max_steps": [1, 2], "mode": ["grpo"]}, "memory": {"budget_gib": 4}}
    new = apply_overrides(
        raw,
        [
            "memory.budget_gib=8",
            "max_steps=3",
            "grid.num_generations=[2, 4]",
            "tracking.mlflow_uri=sqlite:///x.db",
        ],
    )
    sweep = parse_sweep(new)
    assert sweep.memory.budget_gib == 8
    assert sweep.fixed["max_steps"] == 3 and "max_steps" not in sweep.grid
    assert sweep.grid["num_generations"] == [2, 4]
    assert sweep.tracking.mlflow_uri == "sqlite:///x.db"
    assert raw["memory"]["budget_gib"] == 4, "the loaded file is not modified"
    with pytest.raises(SweepError, match="expected key=value"):
        apply_overrides(raw, ["memory.budget_gib"])
    assert "resources.gpus: unknown key" in "\n".join(errors_of(apply_overrides(raw, ["resources.gpus=2"])))


def test_defaults_and_sections():
    sweep = parse_sweep({"name": "d"})
    assert sweep.resources.gpus_per_trial == 1
    assert sweep.oom.probe_steps == 2 and sweep.oom.prune_dominated
    assert sweep.resolved_output_dir().name == "d"
    assert sweep.experiment_name() == "d"
    base = sweep.base()
    assert base["probe_steps"] == 2 and base["sweep"] == "d"


def test_memory_and_oom_settings_reach_every_trial():
    raw = {"name": "m", "grid": {"num_generations": [2, 4]}}
    default = plan(parse_sweep(raw)).trials
    assert all(t.probe_steps == 2 and t.memory_budget_gib is None for t in default)  # budget: the device's
    assert parse_sweep(raw).memory.margin_gib == 0.0  # the budget is the card: no allowance over it
    sweep = parse_sweep(apply_overrides(raw, ["memory.budget_gib=0.8", "oom.probe_steps=0"]))
    assert all(t.probe_steps == 0 and t.memory_budget_gib == 0.8 for t in plan(sweep).trials)


def test_a_headroom_that_leaves_nothing_of_the_budget_is_refused_naming_both_and_a_fix():
    raw = {"name": "m", "grid": {"num_generations": [2]}, "memory": {"budget_gib": 8, "headroom_gib": 8}}
    (error,) = errors_of(raw)
    assert "memory.headroom_gib: 8 gib leaves nothing of the 8 gib budget" in error  # SweepError lowercases
    assert "lower it (e.g. 0.8)" in error and "'headroom_gib': 8" in error
    assert parse_sweep({**raw, "memory": {"budget_gib": 8, "headroom_gib": 1}}).memory.headroom_gib == 1.0
