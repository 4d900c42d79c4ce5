"""docs/schema.md's column tables are the record's fields (trainers/record.py), row for row: name, type,
unit, who measures it and what it means. A field added to the record without its row fails, and so does
a row the record does not have; its MLflow table names each curve TRL logs as MLflow logs it."""

from pathlib import Path

import pytest

from orchestrator.publishing.tracking import STEP_ALIASES, STEP_METRICS
from orchestrator.recording.sinks import STEP_RECORD
from trainers.record import TRIAL_FIELDS, TRL_NAMES, Field

DOC = (Path(__file__).resolve().parents[2] / "docs" / "schema.md").read_text()
HEADER = "| column | type | unit | measured by | meaning |"


def markdown_row(f: Field) -> str:
    return f"| {f.name} | {f.type} | {f.unit} | {f.measured_by} | {f.meaning} |"


def table_rows(section: str) -> list[str]:
    """The rows of the column table under `## <section>`."""
    body = DOC.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = body.splitlines()
    start = lines.index(HEADER) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize("section,fields", [("trials.parquet", TRIAL_FIELDS), ("steps parquet", STEP_RECORD)])
def test_the_docs_column_table_lists_exactly_the_records_fields(section, fields):
    assert table_rows(section) == [markdown_row(f) for f in fields]


def test_the_docs_mlflow_table_names_each_curve_trl_logs_by_trls_name_and_its_old_one():
    body = DOC.split("\n## MLflow\n", 1)[1].split("\n## ", 1)[0]
    lines = body.splitlines()
    start = (
        lines.index("| steps column | MLflow metric (TRL's name) | also logged as, this release only |") + 2
    )
    rows = [line for line in lines[start:] if line.startswith("| ")]
    named = [f.name for f in STEP_RECORD if f.name in TRL_NAMES]
    expected = [f"| {name} | {STEP_METRICS[name]} | {STEP_ALIASES[name]} |" for name in named]
    assert rows == [*expected, "| rewards/<name>/mean | rewards/<name>/mean | step/rewards/<name>/mean |"]
    reward = "rewards/accuracy/mean"  # the last row, for every reward the tasks define
    assert (STEP_METRICS[reward], STEP_ALIASES[reward]) == (reward, f"step/{reward}")
