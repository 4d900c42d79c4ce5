"""Portable result files: `rlsweep export` writes one Parquet file with a versioned schema that `--trials`
reads back; a malformed or hostile file is refused (exit 2, the file, the rule, the fix) and nothing of it
is used; two machines' trials answer one question, the matching card's row measured and the other's only
implied."""

import json
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.recording.portable import SCHEMA_KEY, read_rows, write_export
from orchestrator.recording.sinks import TRIAL_COLUMNS, TrialsTable
from tests.helpers.cli import answer_block as _line
from tests.helpers.cli import run_cli

REPO = Path(__file__).parents[2]
FRONTIER = REPO / "bench" / "data" / "h100-2026-11-27" / "frontier"
H100 = REPO / "bench" / "data" / "h100-2026-11-26"
# The H100 rows' settings (random Qwen2.5-3B, nf4 LoRA r16 with dropout 0.05, two iterations).
ROWS = ["--set", "num_iterations=2", "--set", "lora_dropout=0.05", "--no-simulate"]
QUESTION = ["fits", "--model", "Qwen/Qwen2.5-3B-Instruct", "--k", "4", "--b", "2", "--length", "128", *ROWS]
TRL_KEY = "trl-grpo-rand-qwen2.5-3b-k4-b2-"


def _h100_rows() -> list[dict]:
    from orchestrator.cli._trials import load

    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in load([str(H100)])]


def test_export_writes_one_file_of_the_record_s_columns_with_its_schema_version(tmp_path, capsys):
    target = tmp_path / "shared" / "frontier.parquet"
    code, text = run_cli(["export", str(FRONTIER), "-o", str(target)], capsys)
    assert code == 0, text
    assert f"wrote {target}: 90 trial(s), schema rlsweep.trials/1" in text
    parquet = pq.ParquetFile(target)
    assert parquet.schema_arrow.metadata[SCHEMA_KEY] == b"rlsweep.trials/1"
    assert parquet.schema_arrow.names == TRIAL_COLUMNS
    ours = {r["trial_key"]: r for r in TrialsTable(FRONTIER / "trials.parquet").rows.values()}
    for row in read_rows(target):
        mine = ours[row["trial_key"]]
        for name in (
            "status",
            "peak_device_gib",
            "median_step_s",
            "gpu_name",
            "training_verdict",
            "ended_at",
        ):
            assert row[name] == mine[name], name
        assert json.loads(row["versions"] or "null") == json.loads(mine["versions"] or "null")
        assert json.loads(row["config"])["num_generations"] == mine["num_generations"]


def test_an_exported_file_answers_as_the_folder_it_came_from_and_names_its_provenance(tmp_path, capsys):
    target = tmp_path / "h100.parquet"
    write_export(_h100_rows(), target)
    _, from_folder = run_cli([*QUESTION, "--card", "16gb", "--trials", str(H100)], capsys)
    code, from_file = run_cli([*QUESTION, "--card", "16gb", "--trials", str(target)], capsys)
    assert code == 0, from_file
    first = _line(from_file, "TRL").split(" interval: ")[0]  # the answer; its provenance names its file
    assert first == _line(from_folder, "TRL").split(" interval: ")[0]
    assert "5.0 GiB 5.0 measured interval: the measured peak measured (" + TRL_KEY in _line(from_file, "TRL")
    assert (
        f"from {target}: NVIDIA H100 80GB HBM3 under a 16 GiB budget, 2026-11-26, torch 2.11.0" in from_file
    )
    assert "measured with other versions: torch 2.11.0 (here " in from_file  # used, and flagged


def test_a_folder_of_result_files_and_the_environment_variable_are_sources_too(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "pool"
    write_export(_h100_rows(), folder / "team-a" / "h100.parquet")
    monkeypatch.setenv("RLSWEEP_TRIALS", str(folder))
    code, text = run_cli([*QUESTION, "--card", "16gb"], capsys)
    assert code == 0, text
    assert "measured (" + TRL_KEY in _line(text, "TRL") and f"from {folder}/team-a/h100.parquet" in text


def _rtx4090_rows() -> list[dict]:
    """The H100 rows as another machine's: an RTX 4090's own 24 GiB, no budget emulated, peaks 5% higher."""
    rows = []
    for row in _h100_rows():
        config = json.loads(row["config"])
        config["memory_budget_gib"] = None
        rows.append({**row, "gpu_name": "NVIDIA GeForce RTX 4090", "gpu_total_gib": 23.99, "memory_budget_gib": None,
                     "peak_device_gib": row["peak_device_gib"] and row["peak_device_gib"] * 1.05,
                     "config": json.dumps(config), "ended_at": None, "started_at": None})  # fmt: skip
    return rows


def test_two_machines_answer_one_question_the_matching_card_s_row_measured_the_other_implied(
    tmp_path, capsys
):
    h100, rtx = tmp_path / "h100-box", tmp_path / "4090-box"
    for folder, rows in ((h100, _h100_rows()), (rtx, _rtx4090_rows())):
        folder.mkdir()
        table = TrialsTable(folder / "trials.parquet")
        for row in rows:
            table.rows[row["trial_key"]] = {c: row.get(c) for c in TRIAL_COLUMNS}
        table.write()
    both = ["--trials", str(h100), "--trials", str(rtx)]
    code, text = run_cli([*QUESTION, "--card", "24gb", *both], capsys)
    assert code == 0, text
    assert "measured (" + TRL_KEY in _line(text, "TRL") and "5.2 GiB" in _line(text, "TRL")
    assert f"from {rtx}/trials.parquet: NVIDIA GeForce RTX 4090" in text
    # the same question on a 16 GiB card: the H100's rows ran under a 16 GiB budget, so they are measured
    code, text = run_cli([*QUESTION, "--card", "16gb", *both], capsys)
    assert "5.0 GiB 5.0 measured" in _line(text, "TRL") and "measured (" + TRL_KEY in _line(text, "TRL")
    assert f"from {h100}/trials.parquet" in text
    # with the H100's alone, the 24 GiB card's answer is only implied: another card, another budget
    code, text = run_cli([*QUESTION, "--card", "24gb", "--trials", str(h100)], capsys)
    assert "implied: " + TRL_KEY in _line(text, "TRL") and "measured (" not in _line(text, "TRL")
    assert "on another card or budget: NVIDIA H100 80GB HBM3 under a 16 GiB budget" in _line(text, "TRL")
    # and its out-of-memory under 16 GiB says nothing of 24 GiB (judging.answer.on_card's rule)
    bigger = ["fits", "--model", "Qwen/Qwen2.5-3B-Instruct", "--k", "8", "--b", "2", "--length", "512", *ROWS]
    code, text = run_cli([*bigger, "--card", "24gb", "--trials", str(h100)], capsys)
    assert "measured" not in _line(text, "TRL") and "implied" not in _line(text, "TRL")


def _valid(tmp_path) -> pa.Table:
    path = tmp_path / "valid.parquet"
    write_export(_h100_rows()[:3], path)
    return pq.read_table(path)


def _hostile(tmp_path, name: str) -> Path:
    """A file breaking one rule a result file is held to."""
    path = tmp_path / f"{name}.parquet"
    table = _valid(tmp_path)
    meta = table.schema.metadata
    if name == "not_parquet":
        path.write_bytes(b"\x80\x04\x95 a pickle, say: cos\nsystem\n(S'touch /tmp/pwned'\ntR.")
        return path
    if name == "pandas_metadata":  # pandas would read this to rebuild objects
        table = table.replace_schema_metadata({**meta, b"pandas": b'{"columns": []}'})
    elif name == "unknown_column":
        table = table.append_column("payload", pa.array(["x"] * table.num_rows))
    elif name == "wrong_type":
        i = table.schema.get_field_index("peak_device_gib")
        table = table.set_column(i, "peak_device_gib", pa.array(["12"] * table.num_rows))
    elif name == "future_version":
        table = table.replace_schema_metadata({**meta, SCHEMA_KEY: b"rlsweep.trials/99"})
    elif name in ("nan_peak", "bad_status", "unknown_knob", "bad_knob_value"):
        rows = table.to_pylist()
        config = json.loads(rows[0]["config"])
        if name == "nan_peak":
            rows[0]["peak_device_gib"] = float("nan")
        elif name == "bad_status":
            rows[0]["status"] = "__import__('os').system('id')"
        elif name == "unknown_knob":
            rows[0]["config"] = json.dumps({**config, "__reduce__": "os.system"})
        else:
            rows[0]["config"] = json.dumps({**config, "num_generations": -3})
        table = pa.Table.from_pylist(rows, schema=table.schema)
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    "name,rule",
    [
        ("not_parquet", "is not a Parquet file pyarrow can read"),
        ("pandas_metadata", "carries metadata 'pandas'"),
        ("unknown_column", "column 'payload' is not a trial field"),
        ("wrong_type", "column 'peak_device_gib' is string, and the record's type is double"),
        ("future_version", "it is a rlsweep.trials/99 file and this rlsweep reads up to version 1"),
        ("nan_peak", "peak_device_gib is nan: a figure is a finite number"),
        ("bad_status", "status \"__import__('os').system('id')\" is not one of completed"),
        ("unknown_knob", "config names '__reduce__', not a knob"),
        ("bad_knob_value", "config num_generations"),
    ],
)
def test_a_malformed_or_hostile_file_is_refused_naming_the_file_the_rule_and_a_fix(
    tmp_path, capsys, name, rule
):
    bad = _hostile(tmp_path, name)
    good = tmp_path / "good.parquet"
    write_export(_h100_rows(), good)
    code, text = run_cli([*QUESTION, "--card", "16gb", "--trials", str(good), "--trials", str(bad)], capsys)
    assert code == 2, text
    assert "fits: 1 error(s), nothing answered:" in text and str(bad) in text and rule in text
    assert ("upgrade rlsweep" in text) or ("rlsweep export OUTPUT_DIR" in text)
    assert (
        "Traceback" not in text and "GiB  measured" not in text
    )  # nothing answered, from it or the good one
    assert not Path("/tmp/pwned").exists()


def test_export_leaves_out_paths_hosts_users_environment_values_and_tokens(tmp_path, monkeypatch):
    import getpass

    secret = "S3cretValue-" + "9f2c41d7e0ab"
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWx12"
    monkeypatch.setenv("RLSWEEP_PLANTED_SECRET", secret)
    home = f"/home/{getpass.getuser()}/runs/private-project"
    host = socket.gethostname()
    row = _h100_rows()[0]
    config = json.loads(row["config"])
    row |= {
        "status_detail": f"failed on {host} as {getpass.getuser()}: {home}/log.txt; HF_TOKEN={token}; "
        f"see http://{host}:8265/jobs; key {secret}; mail alice@example.com from 10.1.2.3",
        "effective_config": json.dumps({"output_dir": f"{home}/out", "hub_token": token, "bf16": True}),
        "config": json.dumps({**config, "model_cache_dir": f"{home}/cache"}),
        "model": f"{home}/my-model",
    }
    target = tmp_path / "x.parquet"
    write_export([row], target)
    table = pq.read_table(target)
    text = json.dumps(table.to_pylist(), default=str) + str(table.schema.metadata)
    for planted in (home, "private-project", host, getpass.getuser(), token, secret, "alice@example.com",
                    "10.1.2.3"):  # fmt: skip
        assert planted not in text, planted
    (kept,) = table.to_pylist()
    assert kept["peak_device_gib"] == row["peak_device_gib"] and kept["status"] == row["status"]
    assert "<path>" in kept["status_detail"] and "HF_TOKEN=<redacted>" in kept["status_detail"]
    assert kept["model"].startswith("local:") and "model_cache_dir" not in json.loads(kept["config"])


def test_predict_fits_its_memory_model_on_a_result_file_besides_the_sweep_s_own(tmp_path, capsys):
    target = tmp_path / "frontier.parquet"
    assert run_cli(["export", str(FRONTIER), "-o", str(target)], capsys)[0] == 0
    sweep = str(REPO / "sweeps" / "frontier-16gb.yaml")
    argv = ["predict", sweep, "--output-dir", str(tmp_path / "none"), "--no-simulate"]
    _, alone = run_cli(argv, capsys)
    code, text = run_cli([*argv, "--trials", str(target)], capsys)
    assert code == 0, text
    assert f"predicted from no trials.parquet yet, and 90 of {target}" in text
    assert "fitted on" in text and "fitted on" not in alone  # the prior alone without them


@pytest.mark.parametrize(
    "source,says",
    [
        ("mlflow+ftp://host/x", "an MLflow source is mlflow+http://HOST:PORT/EXPERIMENT"),
        ("mlflow+http://127.0.0.1:9", "an MLflow source is mlflow+http://HOST:PORT/EXPERIMENT"),
        ("/no/such/place", "no such file or folder; give a trials.parquet"),
    ],
)
def test_a_source_that_names_nothing_is_refused_before_anything_is_read(capsys, source, says):
    code, text = run_cli([*QUESTION, "--card", "16gb", "--trials", source], capsys)
    assert code == 2 and f"--trials {source}: {says}" in text and "Traceback" not in text


def test_a_tracking_server_that_does_not_answer_is_refused_in_seconds_naming_the_fix(capsys):
    from tests.helpers.services import free_port

    source = f"mlflow+http://127.0.0.1:{free_port()}/team"  # nothing listens there
    code, text = run_cli([*QUESTION, "--card", "16gb", "--trials", source], capsys)
    assert code == 2 and f"--trials {source}: the tracking server at http://127.0.0.1:" in text
    assert "did not answer" in text and "is reachable from here" in text


def test_the_fit_map_names_where_the_trials_on_it_come_from(tmp_path, capsys):
    target = tmp_path / "h100.parquet"
    write_export(_h100_rows(), target)
    code, text = run_cli(["fitmap", "--card", "16gb", "--model", "Qwen/Qwen2.5-3B-Instruct", "--trials", str(target),
                          *ROWS, "--no-plot"], capsys)  # fmt: skip
    assert code == 0, text
    assert f"from {target}: NVIDIA H100 80GB HBM3 under a 16 GiB budget, 2026-11-26, torch 2.11.0" in text
    assert "measured with other versions (" in text and "torch 2.11.0 (here " in text


def test_calibrate_refuses_a_hostile_trials_file_before_any_probe_runs(tmp_path, capsys):
    bad = _hostile(tmp_path, "unknown_column")
    out = tmp_path / "calibrate"
    argv = [
        "calibrate",
        "--model",
        "tiny",
        "--stack",
        "trl",
        "--budget-gib",
        "4",
        "--output-dir",
        str(out),
        "--trials",
        str(bad),
    ]
    code, text = run_cli(argv, capsys)
    assert code == 2 and "calibrate: 1 error(s), nothing run:" in text and str(bad) in text, text
    assert not (out / "trials.parquet").exists()  # no probe ran


def test_a_file_whose_data_would_decompress_past_the_bound_is_refused_unread(tmp_path, monkeypatch):
    import orchestrator.recording.portable as portable

    path = tmp_path / "big.parquet"
    write_export(_h100_rows(), path)
    monkeypatch.setattr(portable, "MAX_DATA_BYTES", 1000)  # the footer's figure is checked, not the data
    with pytest.raises(portable.ResultFileError, match=r"bytes uncompressed, over the 1000 a file may be"):
        read_rows(path)
