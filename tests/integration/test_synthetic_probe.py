"""A synthetic probe measures the peak a decoded probe does (trainers/probe.py): the same configuration
probed both ways, each trial in its own trainer process, on both stacks. The peaks must agree within the
run-to-run spread of RSS peaks on a CPU (CPU_RSS_SPREAD, or what the repeats here show if more), and differ
by more than twice that between a short and a long completion, so the agreement is not two baselines that
ignore the length.

Each probe is `rlsweep trial`, run in this process as a sweep's supervisor runs its trials: every trainer
forked from its stack's fork server, whose imports are done once (orchestrator/running/launcher.py); a
forked trainer's peak RSS is a cold one's within their spread (tests/integration/test_forked_trainer.py).
Cold, each of the twelve paid its interpreter's start and its imports (221 s of the module's 12 trials
on a 2-core CI host).

make test runs `tiny` at 24 and 256 tokens; make test-all adds `smollm2` at 32 against 96 and 160 tokens
(bench/accuracy/synthetic_probe.py prints the same comparison as a table, with seconds).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics

import pytest

from orchestrator.cli import main
from orchestrator.running.launcher import COLD_START_ENV
from tests.helpers.trainer_child import CPU_RSS_SPREAD
from trainers.record import peak_memory

pytestmark = pytest.mark.slow
STACKS = ("trl", "unsloth")


def probe(tmp_path, model: str, stack: str, length: int, kind: str, run: int) -> dict:
    folder = tmp_path / f"{model}-{stack}-c{length}-{kind}{run}"
    argv = ["trial", "--stack", stack, "--model", model,
            "--num-generations", "8", "--batch-size", "2", "--max-prompt-length", "96",
            "--max-completion-length", str(length), "--max-steps", "1", "--probe-steps", "1",
            "--probe-kind", kind, "--num-threads", "1", "--seed", str(run), "--timeout-s", "900",
            "--output-dir", str(folder)]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(argv)
    log = folder / "trainer.log"
    assert code == 0, printed.getvalue()[-2000:] + (log.read_text()[-2000:] if log.exists() else "")
    outcome = json.loads((folder / "trial.json").read_text())["outcome"]
    assert outcome["status"] == "completed", outcome
    peak, _ = peak_memory(outcome)
    return {"peak": peak, "folder": folder}


def compare(tmp_path, model: str, stack: str, short: int, long: int) -> dict:
    runs = {
        (kind, length): [probe(tmp_path, model, stack, length, kind, i) for i in range(repeats)]
        for kind in ("decode", "synthetic")
        for length, repeats in ((long, 2), (short, 1))
    }
    return {key: [r["peak"] for r in value] for key, value in runs.items()} | {"runs": runs}


def check(peaks: dict, short: int, long: int, model: str) -> None:
    decoded, synthetic = peaks[("decode", long)], peaks[("synthetic", long)]
    middle = statistics.median(decoded)
    tolerance = max(
        max(decoded) - min(decoded), max(synthetic) - min(synthetic), CPU_RSS_SPREAD[model] * middle
    )
    assert abs(statistics.median(synthetic) - middle) <= tolerance, (decoded, synthetic, tolerance)
    for kind in ("decode", "synthetic"):  # the length moves the peak by more than the tolerance
        grown = statistics.median(peaks[(kind, long)]) - peaks[(kind, short)][0]
        assert grown > 2 * tolerance, (kind, peaks, tolerance)


@pytest.fixture(scope="module")
def tiny_peaks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv(COLD_START_ENV, raising=False)  # forked, as a sweep's trials are
        return {stack: compare(folder, "tiny", stack, 24, 256) for stack in STACKS}


@pytest.mark.parametrize("stack", STACKS)
def test_a_synthetic_probe_peaks_where_a_decoded_one_does_on_tiny(tiny_peaks, stack):
    check(tiny_peaks[stack], 24, 256, "tiny")


@pytest.mark.parametrize("stack", STACKS)
def test_a_synthetic_probe_records_its_kind_its_phase_and_its_decode_windows(tiny_peaks, stack):
    import pandas as pd

    runs = tiny_peaks[stack]["runs"]
    step = pd.read_parquet(runs[("synthetic", 256)][0]["folder"] / "steps.parquet").iloc[0]
    assert step["probe_kind"] == "synthetic" and bool(step["probe"])
    assert step["peak_phase"] in ("generation", "training")
    assert step["decode_ms_per_token_at_prompt"] > 0 and step["decode_ms_per_token_at_full"] > 0
    assert step["completion_len_max"] == 256  # trained on completions of exactly max_completion_length
    assert pd.isna(step["ms_per_token"]) and pd.isna(step["decode_steps"])  # nothing decoded to 256
    assert pd.isna(step["reward_mean"])  # random rewards of random completions: not a measurement
    decoded = pd.read_parquet(runs[("decode", 256)][0]["folder"] / "steps.parquet").iloc[0]
    assert decoded["probe_kind"] == "decode" and decoded["decode_steps"] == 256
    assert decoded["reward_mean"] >= 0


@pytest.mark.heavy
@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("short,long", [(32, 96), (32, 160)])  # 256 tokens already peak at 12.5 GiB RSS
def test_a_synthetic_probe_peaks_where_a_decoded_one_does_on_smollm2(tmp_path, stack, short, long):
    check(compare(tmp_path, "smollm2", stack, short, long), short, long, "smollm2")
