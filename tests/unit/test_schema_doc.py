"""docs/schema.md documents every column the sinks write (a new column without a row here fails)."""

import re
from pathlib import Path

import pytest

from orchestrator.recording.sinks import STEP_SCHEMA, TRIAL_SCHEMA

DOC = (Path(__file__).resolve().parents[2] / "docs" / "schema.md").read_text()


def documented(section: str) -> set[str]:
    body = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| ") and not line.startswith("| column") and not line.startswith("|---"):
            names.update(n.strip(" `") for n in line.split("|")[1].split(","))
    return names


@pytest.mark.parametrize("section,schema", [("trials.parquet", TRIAL_SCHEMA), ("steps", STEP_SCHEMA)])
def test_every_written_column_has_a_row(section, schema):
    heading = next(h for h in re.findall(r"^## (.+)$", DOC, re.M) if h.startswith(section))
    missing = set(schema.names) - documented(heading)
    assert not missing, f"docs/schema.md '{heading}' lacks: {sorted(missing)}"
