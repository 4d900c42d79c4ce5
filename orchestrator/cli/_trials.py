"""--trials: where measured trials come from, each source read into trials.parquet rows with its provenance.

A source is a sweep's output folder (its trials.parquet), a trials.parquet, a result file of `rlsweep
export` or a folder of them, a folder of trial folders with trial.json (bench/data's), any of the files
and folders on S3 (s3://BUCKET/PATH, through pyarrow's filesystem and the AWS_* environment the cluster
path uses), or a tracking server's experiment (mlflow+http://HOST:PORT/EXPERIMENT). --trials may be given
several times; RLSWEEP_TRIALS (sources separated by commas) stands in where no --trials is given.

Every Parquet file passes portable.read_rows (schema, types and values checked; nothing executed); one
that breaks a rule refuses the whole command (exit 2) naming the file, the rule and the fix.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from trainers.record import renamed_row

ENV = "RLSWEEP_TRIALS"

# Folders a sweep's output holds beside its trials.parquet whose Parquet files are not trial rows.
NOT_TRIALS = ("steps", "ray", "plots", "simulated")


def sources(given: Any) -> list[str]:
    """--trials' sources (a list, one path, or None: RLSWEEP_TRIALS's, else none)."""
    if given is None or given == []:
        given = [s.strip() for s in os.environ.get(ENV, "").split(",") if s.strip()]
    elif not isinstance(given, (list, tuple)):
        given = [given]
    return [str(s) for s in given]


def source_errors(given: Any) -> list[str]:
    """Sources that name nothing here (a local path that does not exist), each with its fix."""
    from orchestrator.publishing.served_rows import ServedTrialsError, is_served, split
    from orchestrator.words.storage import URI

    errors = []
    for text in sources(given):
        if is_served(text):
            try:
                split(text)
            except ServedTrialsError as exc:
                errors.append(str(exc))
        elif not URI.match(text) and not Path(text).expanduser().exists():
            errors.append(
                f"--trials {text}: no such file or folder; give a trials.parquet, a sweep's output folder, "
                "a result file of `rlsweep export` (or a folder of them), s3://BUCKET/PATH or "
                "mlflow+http://HOST:PORT/EXPERIMENT"
            )
    return errors


def _trial_json_rows(path: Path) -> list[dict]:
    rows = []
    from orchestrator.recording.portable import ResultFileError

    for trial in sorted(path.rglob("trial.json")):
        try:
            record = json.loads(trial.read_text())
            config = dict(record.get("config") or {})
            outcome = dict(record.get("outcome", {}))
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise ResultFileError(
                f"{trial}: not a trial folder's trial.json ({str(exc)[:120]}); leave it out of --trials"
            ) from None
        if isinstance(outcome.get("versions"), dict):  # trials.parquet holds it as JSON text
            outcome["versions"] = json.dumps(outcome["versions"], sort_keys=True)
        rows.append(
            {
                **outcome,
                "config": json.dumps(config),
                "memory_budget_gib": config.get("memory_budget_gib"),
                "trial_key": config.get("trial_key"),
            }
        )
    return rows


def _parquet_files(fs, root: str) -> list[str]:
    """The trial files under a folder of a pyarrow filesystem: its trials.parquet alone where it has one,
    else every .parquet below it outside a sweep's other folders."""
    import pyarrow.fs as pafs

    own = f"{root.rstrip('/')}/trials.parquet"
    if fs.get_file_info(own).type == pafs.FileType.File:
        return [own]
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted(
        info.path
        for info in found
        if info.type == pafs.FileType.File
        and info.path.endswith(".parquet")
        and not any(
            part in NOT_TRIALS or part.startswith(".") for part in info.path[len(root) :].split("/")[:-1]
        )
        and not info.base_name.startswith(".")
        and info.base_name != "steps.parquet"
    )


def _read(fs, path: str, shown: str) -> list[dict]:
    from orchestrator.recording.portable import provenance, read_rows

    with fs.open_input_file(path) as f:
        rows = read_rows(f, shown)
    for row in rows:
        row["_source"] = shown
        row["_provenance"] = provenance(row, shown)
    return rows


def load(given: Any) -> list[dict]:
    """Every row of the sources (ResultFileError or ServedTrialsError, naming the source and the fix,
    where one cannot be used: nothing of it is read into the answer)."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    from orchestrator.publishing.served_rows import is_served, served_rows
    from orchestrator.recording.portable import ResultFileError, provenance
    from orchestrator.words.storage import URI

    rows: list[dict] = []
    for text in sources(given):
        if is_served(text):
            for row in served_rows(text):
                row["_provenance"] = provenance(row, text, row.pop("_provenance_run", None))
                rows.append(row)
            continue
        if URI.match(text):
            try:
                fs, root = pafs.FileSystem.from_uri(text)
                info = fs.get_file_info(root)
            except (OSError, ValueError, pa.ArrowException) as exc:
                raise ResultFileError(f"--trials {text}: cannot be reached ({str(exc)[:160]}); check the URI "
                                      "and the AWS_* settings (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...)") from None  # fmt: skip
            prefix = text.split("://", 1)[0] + "://"
        else:
            fs, root = pafs.LocalFileSystem(), str(Path(text).expanduser().resolve())
            info = fs.get_file_info(root)
            prefix = ""
        if info.type == pafs.FileType.File:
            rows += _read(fs, root, prefix + root)
            continue
        if info.type == pafs.FileType.NotFound:
            raise ResultFileError(f"--trials {text}: no such file or folder there; give the file or folder "
                                  "the trials were exported or written to")  # fmt: skip
        own = f"{root.rstrip('/')}/trials.parquet"
        local = isinstance(fs, pafs.LocalFileSystem)
        if local and fs.get_file_info(own).type != pafs.FileType.File and any(Path(root).rglob("trial.json")):
            found = _trial_json_rows(Path(root))
            for row in found:
                row["_source"] = text
                row["_provenance"] = provenance(row, text)
            rows += found
            continue
        files = _parquet_files(fs, root)
        if not files:
            raise ResultFileError(f"--trials {text}: holds no trials.parquet and no result file (.parquet); "
                                  "give a sweep's output folder or a folder of `rlsweep export` files")  # fmt: skip
        for path in files:
            rows += _read(fs, path, prefix + path)
    return [renamed_row(row) for row in rows]  # rows written before a field was renamed: today's names


def versions_differ(row: dict) -> str | None:
    """The row's peak-moving packages whose versions are not this host's, in words (None: the same, or
    not recorded)."""
    import importlib.metadata

    try:
        theirs = json.loads(row.get("versions") or "null") or {}
    except ValueError:
        return None
    differ = []
    from orchestrator.recording.portable import peak_packages

    for name in peak_packages():
        if not theirs.get(name):
            continue
        try:
            ours = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            ours = "not installed"
        if str(theirs[name]).split("+")[0] != ours.split("+")[0]:
            differ.append(f"{name} {theirs[name]} (here {ours})")
    return ", ".join(differ) or None


def provenance_lines(rows: list[dict], keys: set[str]) -> list[str]:
    """Where the rows of `keys` came from, a line per source, card and date (with their count), then a
    line per set of other versions they were measured with."""
    said: dict[str, int] = {}
    flagged: dict[str, int] = {}
    for row in rows:
        if row.get("trial_key") in keys:
            where = row.get("_provenance") or "a source not named"
            said[where] = said.get(where, 0) + 1
            differ = versions_differ(row)
            if differ:
                flagged[differ] = flagged.get(differ, 0) + 1
    lines = [f"from {where}: {n} trial(s)" for where, n in said.items()]
    lines += [f"measured with other versions ({n} trial(s)): {differ}" for differ, n in flagged.items()]
    return lines


def measured_rows(given) -> list[dict]:
    """The measured trials --trials names (cli/_trials.py: folders, trials.parquet, result files, s3://,
    mlflow+http://), each row with its provenance; ResultFileError or ServedTrialsError where a source
    cannot be used."""
    return load(given)


def read_trials(args: argparse.Namespace, verb: str, nothing: str) -> tuple[list[dict], int | None]:
    """(--trials' rows, None), or ([], 2) after printing why a source was refused (its file, rule, fix)."""
    from orchestrator.cli._common import refused
    from orchestrator.publishing.served_rows import ServedTrialsError
    from orchestrator.recording.portable import ResultFileError

    try:
        return measured_rows(args.trials), None
    except (ResultFileError, ServedTrialsError) as exc:
        return [], refused(verb, [str(exc)], nothing)
