"""A portable result file: a sweep's trials as one Parquet file another team (or the public) can read with
`--trials`, and the reading of one, which executes nothing in it.

The file's columns are trials.parquet's (trainers/record.py TRIAL_FIELDS, the one field list), with the
same types; its schema metadata holds SCHEMA_KEY = SCHEMA_VERSION, so a reader knows what the columns
mean. Text is scrubbed on the way out (_scrub.py: paths, URLs, addresses, tokens, this host's and user's
names, environment values); a local model folder is named by its architecture and a digest, not its
path; `config` keeps the trial's knobs only (the execution settings, such as the model cache's folder,
are left out).

Reading (read_rows) takes Parquet only (no pickle, no pandas metadata, no extension type), checks the
footer's schema before a row is read (every column one of the record's, with its type; the version
known), then each row (a known status, finite non-negative figures, a config of known knobs with
allowed values, JSON where JSON is due, bounded sizes). A file that breaks a rule raises ResultFileError
naming the file, the rule and the fix, and nothing of it is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.recording._scrub import Scrubber
from orchestrator.recording.sinks import TRIAL_SCHEMA
from orchestrator.words.outcome import STATUSES
from trainers import record
from trainers.trial import KNOBS, check_value

SCHEMA_KEY = b"rlsweep.schema"
SCHEMA_NAME = "rlsweep.trials"
SCHEMA_VERSION = 1
# What a file of this version holds (the record's trial fields at version 1), in its metadata too.
SCHEMA_FIELDS_KEY = b"rlsweep.fields"
# Knobs left out of an exported config: where things are on the machine that ran it (the bookkeeping and
# execution knobs that hold a path or a port; the trial's key and its sweep's name stay).
KEPT_BOOKKEEPING = ("trial_key", "sweep")
LOCAL_KNOBS = tuple(
    name
    for name, f in KNOBS.items()
    if f.metadata.get("role") in ("bookkeeping", "execution")
    and (f.type in (str, "str") or name.endswith("_port"))
    and name not in KEPT_BOOKKEEPING
)
JSON_FIELDS = tuple(f.name for f in record.TRIAL_FIELDS if f.unit == record.JSON_TEXT)
# Bounds a reader holds a file to: a result file is small (a sweep of 1,000 trials is about 1 MB).
MAX_FILE_BYTES = 256 * 2**20
MAX_DATA_BYTES = 2 * 2**30  # its data uncompressed, as the footer says: no decompression bomb is read
MAX_ROWS = 200_000
MAX_TEXT = 64 * 1024
FIX = "export it again with `rlsweep export OUTPUT_DIR` (rlsweep's own writer), or leave it out of --trials"


class ResultFileError(ValueError):
    """A result file refused: str() names the file, the rule it broke and the fix."""


# The packages whose versions move a peak, besides each registered stack's own (peak_packages()): a row
# from others is used and flagged.
BASE_PACKAGES = ("torch", "transformers", "peft", "bitsandbytes")


def stack_packages() -> tuple[str, ...]:
    """Every registered stack's own packages (its StackEntry's), each once."""
    from trainers import stacks

    return tuple(dict.fromkeys(p for name in stacks.names() for p in stacks.get(name).packages))


def peak_packages() -> tuple[str, ...]:
    """BASE_PACKAGES and every registered stack's packages (its StackEntry's), each once."""
    return tuple(dict.fromkeys((*BASE_PACKAGES, *stack_packages())))


def _model_name(model: str | None) -> str | None:
    """A model as a shared file may name it: a hub id, `random:<hub id>`, `tiny`, `smollm2`; a local folder
    or config.json as `local:<model_type>-<digest>` (its architecture, never its path)."""
    from trainers.models import _HUB_ID

    if model is None:
        return None
    bare = model.removeprefix("random:")
    if model in ("tiny", "smollm2") or (_HUB_ID.match(bare) and not Path(bare).expanduser().exists()):
        return model
    kind = "model"
    where = Path(bare).expanduser()
    config = where / "config.json" if where.is_dir() else where
    with contextlib.suppress(OSError, ValueError, AttributeError):
        kind = str(json.loads(config.read_text()).get("model_type") or kind)
    digest = hashlib.sha256(model.encode()).hexdigest()[:12]
    return f"local:{Scrubber().scrub(kind)[:40]}-{digest}"


def portable_row(row: Mapping[str, Any], scrubber: Scrubber) -> dict[str, Any]:
    """A trials.parquet row as a result file holds it: every record field, text scrubbed."""
    out: dict[str, Any] = {}
    for f in record.TRIAL_FIELDS:
        value = row.get(f.name)
        if value is None or f.type != record.STRING:
            out[f.name] = value
        elif f.name == "model":
            out[f.name] = _model_name(value)
        elif f.name == "config":
            out[f.name] = _portable_config(value, scrubber)
        elif f.unit == record.JSON_TEXT:
            try:
                out[f.name] = json.dumps(scrubber.scrub_json(json.loads(value)), sort_keys=True)
            except ValueError:
                out[f.name] = None
        else:
            out[f.name] = scrubber.scrub(str(value))
    return out


def _portable_config(text: str, scrubber: Scrubber) -> str | None:
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    kept = {k: v for k, v in config.items() if k not in LOCAL_KNOBS}
    if "model" in kept:
        kept["model"] = _model_name(kept["model"])
    return json.dumps({**scrubber.scrub_json(kept), "model": kept.get("model")}, sort_keys=True)


def export_table(rows: Iterable[Mapping[str, Any]], scrubber: Scrubber | None = None) -> pa.Table:
    scrubber = scrubber or Scrubber()
    table = pa.Table.from_pylist([portable_row(r, scrubber) for r in rows], schema=TRIAL_SCHEMA)
    return table.replace_schema_metadata(
        {
            SCHEMA_KEY: f"{SCHEMA_NAME}/{SCHEMA_VERSION}".encode(),
            SCHEMA_FIELDS_KEY: ",".join(TRIAL_SCHEMA.names).encode(),
        }
    )


def write_export(rows: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write the rows as a result file at `path`; returns how many."""
    table = export_table(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return table.num_rows


# -- reading ----------------------------------------------------------------------------------------------


def _refuse(where: str, rule: str, fix: str = FIX) -> ResultFileError:
    return ResultFileError(f"{where}: {rule}; {fix}")


def _check_schema(where: str, schema: pa.Schema, exported: bool) -> None:
    meta = schema.metadata or {}
    if exported:
        said = meta.get(SCHEMA_KEY, b"").decode(errors="replace")
        name, _, version = said.partition("/")
        if name != SCHEMA_NAME or not version.isdigit():
            raise _refuse(where, f"its schema metadata says {said[:60]!r}, not {SCHEMA_NAME}/<version>")
        if int(version) > SCHEMA_VERSION:
            raise _refuse(
                where,
                f"it is a {SCHEMA_NAME}/{version} file and this rlsweep reads up to version {SCHEMA_VERSION}",
                "upgrade rlsweep (pip install -U rlsweep) to read it",
            )
    for key in meta:
        if key not in (SCHEMA_KEY, SCHEMA_FIELDS_KEY):  # pandas' metadata, extension types, anything else
            raise _refuse(where, f"its schema carries metadata {key.decode(errors='replace')[:40]!r} "
                          "a result file does not")  # fmt: skip
    for column in schema:
        name = record.RENAMED.get(column.name, column.name)  # a column under its old name (read as the new)
        expected = TRIAL_SCHEMA.field(name).type if name in TRIAL_SCHEMA.names else None
        if expected is None:
            raise _refuse(
                where, f"column {column.name[:60]!r} is not a trial field (docs/schema.md lists them)"
            )
        if column.type != expected:
            raise _refuse(
                where, f"column {column.name!r} is {column.type}, and the record's type is {expected}"
            )
    for needed in ("trial_key", "status", "config"):
        if needed not in schema.names:
            raise _refuse(where, f"it has no {needed!r} column, which every trial row has")


def _check_row(where: str, n: int, row: dict[str, Any]) -> None:
    at = f"{where}: row {n} ({str(row.get('trial_key'))[:80]})"
    if row.get("status") not in STATUSES:
        raise _refuse(at, f"status {str(row.get('status'))[:40]!r} is not one of {', '.join(STATUSES)}")
    for name, value in row.items():
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise _refuse(at, f"{name} is {value}: a figure is a finite number, or null when not measured")
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise _refuse(at, f"{name} holds {len(value)} characters, over the {MAX_TEXT} a trial field may")
        if name.endswith("_gib") and "margin" not in name and isinstance(value, float) and value < 0:
            raise _refuse(at, f"{name} is {value}: memory is never negative")
    for name in JSON_FIELDS:
        if row.get(name) is not None:
            try:
                json.loads(row[name])
            except ValueError:
                raise _refuse(at, f"{name} is not JSON") from None
    try:
        config = json.loads(row["config"]) if row.get("config") else {}
    except ValueError:
        raise _refuse(at, "config is not JSON") from None
    if not isinstance(config, dict):
        raise _refuse(at, "config is not a JSON object of knobs")
    for knob, value in config.items():
        if knob not in KNOBS:
            raise _refuse(at, f"config names {knob[:60]!r}, not a knob of this rlsweep (trainers/trial.py)",
                          "upgrade rlsweep to read it, or leave the file out of --trials")  # fmt: skip
        problem = check_value(knob, value) if value is not None and knob not in LOCAL_KNOBS else None
        if problem:
            raise _refuse(at, f"config {knob} {problem}")


def read_rows(source: Any, where: str | None = None) -> list[dict[str, Any]]:
    """The validated rows of a result file or a trials.parquet (`source`: a local path, or a file object
    of a remote one). ResultFileError, naming the file (`where`), the rule and the fix, on any problem."""
    where = where or str(source)
    try:
        size = Path(source).stat().st_size if isinstance(source, (str, Path)) else source.size()
    except (OSError, AttributeError):
        size = None
    if size is not None and size > MAX_FILE_BYTES:
        raise _refuse(where, f"it is {size} bytes, over the {MAX_FILE_BYTES} a result file may be")
    try:
        parquet = pq.ParquetFile(source)
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _refuse(where, f"it is not a Parquet file pyarrow can read ({str(exc)[:120]})") from None
    exported = SCHEMA_KEY in (schema.metadata or {})
    _check_schema(where, schema, exported)
    if parquet.metadata.num_rows > MAX_ROWS:
        raise _refuse(where, f"it holds {parquet.metadata.num_rows} rows, over the {MAX_ROWS} a file may")
    data = sum(parquet.metadata.row_group(i).total_byte_size for i in range(parquet.metadata.num_row_groups))
    if data > MAX_DATA_BYTES:
        raise _refuse(
            where, f"its data is {data} bytes uncompressed, over the {MAX_DATA_BYTES} a file may be"
        )
    try:
        rows = [record.renamed_row(row) for row in parquet.read().to_pylist()]
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _refuse(where, f"its data cannot be read ({str(exc)[:120]})") from None
    for n, row in enumerate(rows, 1):
        _check_row(where, n, row)
    return rows


def provenance(row: Mapping[str, Any], source: str, run_id: str | None = None) -> str:
    """Where a row comes from, in words: its source (file or server), run id, card, date and versions."""
    ran = row.get("status") in ("completed", "oom", "timeout", "failed")
    card = row.get("gpu_name") or ("CPU" if ran else f"not run ({row.get('status')})")
    budget = row.get("memory_budget_gib")
    if budget is not None:
        card += f" under a {budget:g} GiB budget"
    ended = row.get("ended_at") or row.get("started_at")
    if isinstance(ended, (int, float)):  # a trial.json's epoch milliseconds
        ended = datetime.fromtimestamp(ended / 1000, UTC)
    if isinstance(ended, datetime):
        date = ended.astimezone(UTC).strftime("%Y-%m-%d")
    else:
        date = str(ended)[:10] if ended else "date not recorded"
    try:
        versions = json.loads(row.get("versions") or "null") or {}
    except ValueError:
        versions = {}
    said = ", ".join(
        f"{k} {v}"
        for k, v in sorted(versions.items())
        if k in ("torch", "transformers", *stack_packages()) and v
    )
    run = f", run {run_id}" if run_id else ""
    return f"{source}{run}: {card}, {date}, {said or 'versions not recorded'}"
