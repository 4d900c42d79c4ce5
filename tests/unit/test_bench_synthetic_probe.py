"""bench/accuracy/synthetic_probe.py's table, drawn from the probes GPU round 4 ran on an H100
(bench/data/h100-2026-11-27/probes): every probe that left a record is a row, the one that ran out of
memory before its first step too (on the GPU its empty steps table once ended the bench in a traceback)."""

from argparse import Namespace
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
ROUND4 = ROOT / "bench" / "data" / "h100-2026-11-27"
MODEL = "random:Qwen/Qwen2.5-3B-Instruct"


@pytest.fixture(scope="module")
def bench():
    from bench.accuracy import synthetic_probe

    return synthetic_probe


def _args(**more) -> Namespace:
    settings = dict(
        out=ROUND4 / "probes" / "p3b", k=8, b=2, decodes=1, synthetics=1, max_prompt_length=256,
        budget_gib=16.0, trial_args="", decode_lengths="128", jobs=4,
    )  # fmt: skip
    return Namespace(**(settings | more))


def _cells(table: str, stack: str, length: int) -> list[str]:
    (line,) = [x for x in table.splitlines() if x.startswith(f"| {MODEL} | {stack} | {length} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_a_probe_that_ran_out_of_memory_before_its_step_is_a_row_with_its_peak(bench):
    refs = bench.reference_rows(ROOT / "bench/data/h100-2026-11-26/trials.csv")
    table = bench.table(_args(), refs, [MODEL], ["trl", "unsloth"], [128, 256, 512])
    oom = _cells(table, "trl", 512)
    assert oom[4] == "16.051 (oom)"  # the guard's NVML reading past the 16 GiB budget
    assert oom[7].startswith("oom (>= 16.031)")  # round 2's decoded probe ran out of memory there too
    assert oom[9] == "-"  # no step, so no phase


def test_the_synthetic_probe_matches_the_decoded_one_on_nvml_allocated_and_reserved(bench):
    table = bench.table(_args(), [], [MODEL], ["trl", "unsloth"], [128])
    header = [c.strip() for c in bench.HEADER.splitlines()[0].strip("|").split("|")]
    for stack, difference in (("trl", "-0.2%"), ("unsloth", "+0.1%")):
        row = dict(zip(header, _cells(table, stack, 128), strict=True))
        assert row["synthetic - decoded (medians)"] == difference
        allocated = row["torch allocated decoded / synthetic"].split(" / ")
        assert float(allocated[1]) == pytest.approx(float(allocated[0]), rel=0.002)
        reserved = row["reserved decoded / synthetic"].split(" / ")
        assert float(reserved[1]) == pytest.approx(float(reserved[0]), rel=0.002)


def test_figures_of_a_probe_without_a_step_are_null_not_an_error(bench):
    figures = bench.figures(ROUND4 / "probes" / "p3b" / "random_Qwen_Qwen2.5-3B-Instruct-trl-c512-synthetic0")
    assert figures["status"] == "oom" and figures["peak"] == pytest.approx(16.051, abs=0.001)
    assert figures["allocated"] is None and figures["step_s"] is None and figures["phase"] is None
