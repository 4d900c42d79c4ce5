"""The stack was named `framework` (and its dtype `framework_dtype`) before: a sweep file, a --set, a
trials.parquet, a steps partition, a result file or a spec.json of that time still reads, as `stack`, and
a reader of user input says in one line that the name was renamed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from orchestrator.cli import _trials
from orchestrator.recording.portable import read_rows
from orchestrator.recording.sinks import TrialsTable
from orchestrator.spec.load import load_sweep, trial_set_errors
from orchestrator.spec.plan import NOT_HASHED, expand, trial_key
from orchestrator.views.compare import compare_outputs
from orchestrator.views.report import load_outputs, write_report
from tests.helpers.synthetic_sweep import write_synthetic_sweep
from trainers import _renamed
from trainers.trial import KEYED_WHEN_SET, KNOBS, TrialSpec

ROOT = Path(__file__).resolve().parents[2]
SWEEP = """name: old
grid:
  {stack}: [trl, unsloth]
  num_generations: [2, 4]
fixed:
  model: tiny
  max_steps: 2
  {stack}_dtype: {{trl: fp16}}
"""


@pytest.fixture(autouse=True)
def _fresh_notes(monkeypatch):
    monkeypatch.setattr(_renamed, "_SAID", set())  # each note is said once a process


def _old_style(new: Path, old: Path) -> None:
    """A copy of sweep outputs `new` as written before the rename: a `framework` column, config JSON
    (a row's own, else its knobs') with `framework` and `framework_dtype`, steps under steps/framework=<f>."""
    shutil.copytree(new, old)
    table = pq.read_table(old / "trials.parquet")
    configs = []
    for row in table.to_pylist():
        knobs = ("stack", "mode", "num_generations", "batch_size", "seed", "trial_key")
        config = json.loads(row["config"]) if row.get("config") else None
        config = config or TrialSpec(**{k: row[k] for k in knobs if row.get(k) is not None}).to_dict()
        config["framework"] = config.pop("stack")
        config["framework_dtype"] = config.pop("stack_dtype")
        configs.append(config)
    texts = pa.array([json.dumps(c) for c in configs], pa.string())
    table = table.set_column(table.schema.get_field_index("config"), "config", texts)
    table = table.rename_columns(["framework" if n == "stack" else n for n in table.column_names])
    pq.write_table(table, old / "trials.parquet")
    for folder in (old / "steps").glob("stack=*"):
        folder.rename(folder.with_name(folder.name.replace("stack=", "framework=")))


def test_an_old_sweep_file_reads_framework_as_stack_with_the_same_keys_and_says_it_was_renamed(
    tmp_path, capsys
):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(SWEEP.format(stack="framework"))
    new.write_text(SWEEP.format(stack="stack"))
    from_old = expand(load_sweep(old))
    notes = capsys.readouterr().err
    assert "note: grid.framework was renamed stack; read as stack here, write stack instead" in notes
    assert "note: fixed.framework_dtype was renamed stack_dtype" in notes
    assert [t.trial_key for t in from_old] == [t.trial_key for t in expand(load_sweep(new))]
    assert {t.stack for t in from_old} == {"trl", "unsloth"}
    assert all(t.stack_dtype == {"trl": "fp16"} for t in from_old)
    assert capsys.readouterr().err == ""  # the new names: no note


def test_set_framework_reads_as_stack_off_the_grid_with_a_note(capsys):
    sweep = load_sweep(ROOT / "sweeps" / "cpu-smoke.yaml", ["framework=unsloth"])
    assert "note: --set framework was renamed stack" in capsys.readouterr().err
    assert {t.stack for t in expand(sweep)} == {"unsloth"}
    old_grid = load_sweep(ROOT / "sweeps" / "cpu-smoke.yaml", ["grid.framework=[trl]", "optim=framework"])
    assert {(t.stack, t.optim) for t in expand(old_grid)} == {("trl", "stack")}
    assert "note: fixed.optim: framework was renamed stack" in capsys.readouterr().err


def test_a_verbs_set_framework_is_its_stack_knob_and_says_so(capsys):
    base: dict = {}
    errors = trial_set_errors(["framework_dtype={TRL: FP16}"], base, {})
    assert errors == [] and base == {"stack_dtype": {"trl": "fp16"}}
    taken = {"stack": "the stacks are --stack (e.g. --stack trl,unsloth)"}
    assert trial_set_errors(["framework=trl"], {}, taken) == [
        "--set framework=trl: the stacks are --stack (e.g. --stack trl,unsloth)"
    ]
    assert "note: --set framework_dtype was renamed stack_dtype" in capsys.readouterr().err
    assert trial_set_errors(["optim=framework"], base, {}) == [] and base["optim"] == "stack"
    assert "note: --set optim: framework was renamed stack; read as stack here" in capsys.readouterr().err


def test_a_spec_json_written_with_framework_loads_as_the_same_trial():
    spec = TrialSpec(stack="unsloth", stack_dtype={"trl": "fp16"}, optim="stack")
    old = {**spec.to_dict(), "framework": "unsloth", "framework_dtype": {"trl": "fp16"}, "optim": "framework"}
    del old["stack"], old["stack_dtype"]
    assert TrialSpec.from_dict(old) == spec


def test_a_script_that_builds_a_trial_spec_with_framework_gets_the_same_trial_and_reads_it_back():
    spec = TrialSpec(framework="unsloth", framework_dtype={"trl": "fp16"})  # as bench scripts build it
    assert spec == TrialSpec(stack="unsloth", stack_dtype={"trl": "fp16"})
    assert (spec.framework, spec.framework_dtype) == ("unsloth", {"trl": "fp16"})


def test_a_trial_key_hashes_stack_dtype_and_optim_stack_under_their_published_names():
    spec = TrialSpec(stack_dtype={"trl": "fp16"}, optim="stack")
    rest = {k: getattr(spec, k) for k in KNOBS if k not in NOT_HASHED and k not in KEYED_WHEN_SET}
    rest = {k: v for k, v in rest.items() if k not in ("generation", "vllm_gpu_memory_utilization")}
    rest |= {"fast_inference": False, "gpu_memory_utilization": spec.vllm_gpu_memory_utilization}
    rest |= {"framework_dtype": {"trl": "fp16"}, "optim": "framework", "model": "tiny"}
    digest = hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:12]
    assert trial_key(spec) == f"trl-grpo-tiny-k4-b2-{digest}"


def test_an_old_trials_parquet_reads_as_stack_in_the_report_compare_and_the_resume_ledger(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    write_synthetic_sweep(new)
    _old_style(new, old)
    assert "framework" in pq.read_schema(old / "trials.parquet").names
    read_new, read_old = load_outputs(new), load_outputs(old)
    assert "framework" not in read_old.trials
    assert read_old.trials["stack"].tolist() == read_new.trials["stack"].tolist()
    assert len(read_old.steps) == len(read_new.steps) > 0  # steps/framework=* found
    assert [json.loads(c)["stack"] for c in read_old.trials["config"]] == read_new.trials["stack"].tolist()

    md = write_report(old, console=Console(record=True, width=200))["report_md"].read_text()
    assert "| Stack |" in md and "Framework" not in md

    compared = compare_outputs(new, old, console=Console(record=True, width=220))
    assert set(compared["present"]) == {"both"}

    ledger = TrialsTable(old / "trials.parquet")
    assert all(row["stack"] in ("trl", "unsloth") and "framework" not in row for row in ledger.rows.values())
    assert all("framework" not in row["config"] for row in ledger.rows.values())


def test_an_old_trials_parquet_reads_through_trials_as_stack_as_fits_and_fitmap_read_it(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    write_synthetic_sweep(new)
    _old_style(new, old)
    rows = read_rows(old / "trials.parquet")
    assert rows and all("framework" not in row and row["stack"] in ("trl", "unsloth") for row in rows)
    loaded = _trials.load([str(old)])
    specs = [TrialSpec.from_dict(json.loads(row["config"])) for row in loaded]
    assert [s.stack for s in specs] == [row["stack"] for row in loaded]
    assert {s.stack for s in specs} == {"trl", "unsloth"}


def test_sync_mlflow_logs_an_old_trials_parquet_and_its_old_steps_partition_under_stack(tmp_path):
    from mlflow.tracking import MlflowClient

    from orchestrator.cli import main
    from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
    from orchestrator.spec.load import parse_sweep, resolved_yaml
    from orchestrator.words.outcome import COMPLETED, TrialResult

    sweep = parse_sweep({"name": "aged", "fixed": {"max_steps": 2, "stack": "unsloth"}})
    (spec,) = expand(sweep)
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir()
    (new / "sweep.yaml").write_text(resolved_yaml(sweep))
    recorder = Recorder([spec], [StepsFiles(new), TrialsFile(TrialsTable(new / "trials.parquet"))])
    steps = [{"step": n, "generated": True, "step_s": 1.0 + n, "loss": 0.1 * n} for n in (1, 2)]
    recorder.start(spec.trial_key)
    for row in steps:
        recorder.step(spec.trial_key, row)
    recorder.end(
        spec.trial_key, TrialResult(status=COMPLETED, status_detail="2 steps", steps=steps, wall_s=4.0)
    )
    _old_style(new, old)
    assert (old / "steps" / "framework=unsloth").is_dir()

    uri = f"sqlite:///{tmp_path / 'synced.db'}"
    assert main(["sync-mlflow", str(old), "--tracking-uri", uri]) == 0
    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "aged"]
    (run,) = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`rlsweep.trial_key` = '{spec.trial_key}'"
    )
    assert run.data.params["stack"] == "unsloth" and "framework" not in run.data.params
    assert run.data.tags["stack"] == "unsloth"
    assert len(client.get_metric_history(run.info.run_id, "step/step_s")) == 2  # steps/framework= was read
