"""Stacks as plug-ins: one registry (trainers.stacks) that validation, the trainer child, the report and
compare read; a test-only third stack taken through a synthetic sweep's report and compare, its figures
checked against ones computed here from the synthetic Parquet."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest
from rich.console import Console

from orchestrator.judging.intervals import MIN_CYCLES
from orchestrator.views.compare import compare_outputs
from orchestrator.views.report import load_outputs, summary_table, write_report
from tests.helpers import synthetic_sweep
from tests.helpers.html_outline import outline
from tests.helpers.stacks import THIRD_UNAVAILABLE, ThirdStack, registered
from tests.helpers.synthetic_sweep import GRID, trial_key, write_synthetic_sweep
from trainers import stacks
from trainers.__main__ import main
from trainers.trial import TrialSpec

THIRD_GRID = [
    ("third", "grpo", 2, 1, 1, "completed", 5),  # TRL completed it too (seeds 1 and 2)
    ("third", "grpo", 4, 1, 1, "oom", 1),  # TRL completed it
    ("third", "grpo", 4, 2, 1, "completed", 5),  # TRL ran out of memory; Unsloth completed it
]
THIRD_FACTORS = (1.25, 0.5)  # the third stack's memory and speed against TRL's in the synthetic sweep


@pytest.fixture
def third(monkeypatch):
    monkeypatch.setitem(synthetic_sweep.STACK_FACTORS, "third", THIRD_FACTORS)
    with registered():
        yield stacks.load("third")


def test_an_unknown_stack_names_the_field_the_value_and_the_registered_stacks():
    with pytest.raises(ValueError) as info:
        stacks.get("unslot")
    assert (
        str(info.value)
        == "stack: unknown value 'unslot'; did you mean 'unsloth'? available: liger, trl, unsloth"
    )


def test_a_stack_name_is_registered_once():
    another = stacks.StackEntry("trl", "Another TRL", "tests.helpers.stacks:ThirdStack")
    with pytest.raises(
        ValueError, match=r"^stack 'trl' is registered already \(trainers.stacks.trl:TrlStack\)$"
    ):
        stacks.register(another)
    assert stacks.names() == ("trl", "unsloth", "liger")


def test_the_registry_imports_no_stack_module_until_a_stack_is_loaded():
    import subprocess
    import sys

    code = (
        "import sys; from trainers.trial import TrialSpec; TrialSpec(stack='unsloth').validate(); "
        "print(sorted(m for m in sys.modules if m.startswith('trainers.stacks.'))); "
        "from trainers import stacks; stacks.load('trl'); "
        "print(sorted(m for m in sys.modules if m.startswith('trainers.stacks.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "['trainers.stacks._base', 'trainers.stacks.trl']"]


def test_a_registered_stack_is_a_stack_a_trial_spec_accepts_and_leaves_with_it():
    with registered():
        assert TrialSpec(stack="third").problems() == []
        assert TrialSpec(stack_dtype={"third": "fp16"}).problems() == []
    assert TrialSpec(stack="third").problems() == [
        "stack: unknown value 'third'; did you mean 'trl'? available: liger, trl, unsloth"
    ]


def test_vllm_generation_names_the_stacks_that_generate_with_vllm():
    with registered():
        assert TrialSpec(stack="third", generation="vllm").problems() == [
            "generation: vllm needs a stack that generates with vLLM (trl, unsloth); stack third does "
            "not: set generation: transformers or change stack"
        ]


def _child(tmp_path, **knobs) -> tuple[int, dict]:
    events = tmp_path / "events.jsonl"
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(TrialSpec(events_path=str(events), **knobs).to_json())
    code = main([str(spec_path)])
    return code, json.loads(events.read_text().splitlines()[-1])


def test_the_trainer_child_runs_the_stack_the_registry_names(tmp_path, third):
    code, final = _child(tmp_path, stack="third")
    assert code == 1
    assert (final["event"], final["type"], final["message"]) == (
        "error",
        "UnavailableError",
        THIRD_UNAVAILABLE,
    )
    assert final["unavailable"] is True


def test_a_stack_missing_a_package_is_unavailable_before_it_builds(tmp_path, monkeypatch, third):
    monkeypatch.setattr(ThirdStack, "packages", ("rlsweep_no_such_package",))
    assert third.availability() == (
        False,
        "rlsweep_no_such_package not installed; install them with `make setup`",
    )
    code, final = _child(tmp_path, stack="third")
    assert code == 1 and final["unavailable"] is True
    assert final["message"] == (
        "stack third: rlsweep_no_such_package not installed; install them with `make setup`"
    )


def test_the_trainer_child_refuses_an_unregistered_stack_naming_the_choices(tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"stack": "third", "events_path": str(tmp_path / "events.jsonl")}))
    code = main([str(spec_path)])
    final = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])
    assert code == 1 and final["type"] == "TrialSpecError"
    assert (
        "stack: unknown value 'third'; did you mean 'trl'? available: liger, trl, unsloth" in final["message"]
    )


# ------------------------------------------------------------------------------------------------
# Three stacks through the report and compare
# ------------------------------------------------------------------------------------------------
def _figures(trials: pd.DataFrame, steps: pd.DataFrame, stack: str, k: int, b: int) -> tuple[float, float]:
    """(worst peak over seeds, median tokens/s over the seeds' regular steps) of one grpo configuration."""
    return _figures_and_cycles(trials, steps, stack, k, b)[:2]


def _figures_and_cycles(
    trials: pd.DataFrame, steps: pd.DataFrame, stack: str, k: int, b: int
) -> tuple[float, float, int]:
    """_figures and the measured generation cycles behind the median (regular steps with a tokens/s)."""
    mine = trials.query("stack == @stack and mode == 'grpo' and num_generations == @k and batch_size == @b")
    regular = steps[steps["trial_key"].isin(mine["trial_key"]) & ~steps["probe"]]
    return (
        mine["peak_device_gib"].max(),
        regular["tokens_per_s"].median(),
        int(regular["tokens_per_s"].notna().sum()),
    )


def _memory_ratio_words(trials: pd.DataFrame, stack: str, base: str, k: int, b: int) -> str:
    """The memory ratio in words, computed here: each side's worst peak over its seeds, each allowed to
    move by its seeds' relative spread (at least 2.5%) either way; "no clear difference" where the range
    covers 1."""
    sides = []
    for name in (stack, base):
        mine = trials[(trials["stack"] == name) & (trials["mode"] == "grpo")]
        peaks = mine[(mine["num_generations"] == k) & (mine["batch_size"] == b)]["peak_device_gib"]
        spread = max(0.025, (peaks.max() - peaks.min()) / peaks.mean() if len(peaks) > 1 else 0.0)
        sides.append((peaks.max(), spread))
    (top, s_top), (bottom, s_bottom) = sides
    low, high = top * (1 - s_top) / (bottom * (1 + s_bottom)), top * (1 + s_top) / (bottom * (1 - s_bottom))
    spread_words = f"spread {low:.2f}–{high:.2f}×"
    return (
        f"no clear difference ({spread_words})"
        if low <= 1 <= high
        else f"{top / bottom:.2f}× ({spread_words})"
    )


def _speed_ratio_words(cycles_a: int, cycles_b: int) -> str:
    """The synthetic sweeps measure fewer cycles than an interval needs: the ratio reads so."""
    assert min(cycles_a, cycles_b) < MIN_CYCLES
    return f"too few cycles to compare ({cycles_a} and {cycles_b} cycles)"


def _few(tokens: float, cycles: int) -> str:
    """A median from fewer cycles than an interval needs."""
    assert cycles < MIN_CYCLES
    return f"{_tokens(tokens)} ({cycles} cycles: too few for an interval)"


def _spare(peak: float, budget: float) -> str:
    return f"{peak:.2f} GiB; {budget - peak:.2f} GiB ({(budget - peak) / budget * 100:.2g}%) to spare"


def _tokens(value: float) -> str:  # as people read tokens/s: whole thousands-separated numbers from 100 up
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _markdown_table(md: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after `heading`, as {header: cell}."""
    lines = md[md.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    header = [c.strip() for c in table[0].strip("|").split("|")]
    return [
        dict(zip(header, (c.strip() for c in row.strip("|").split("|")), strict=True)) for row in table[2:]
    ]


def test_three_stacks_go_through_the_report_each_against_trl(tmp_path, third):
    trials = write_synthetic_sweep(tmp_path, grid=[*GRID, *THIRD_GRID])
    paths = write_report(tmp_path, console=Console(record=True, width=250))
    steps = load_outputs(tmp_path).steps
    page = outline(paths["report_html"].read_text())
    headings = [text for tag, text in page.items if tag in ("h2", "h3")]
    at = headings.index("The stacks against TRL")
    assert headings[at : at + 3] == ["The stacks against TRL", "Unsloth against TRL", "Third against TRL"]
    matrix = next(cells for tag, cells in page.items if tag == "table" and "K × B" in cells)
    assert matrix == ["K × B", "grpo · third", "grpo · trl", "grpo · unsloth", "gspo · trl", "gspo · unsloth"]

    md = paths["report_md"].read_text()
    (frontier,) = [
        r for r in _markdown_table(md, "## What fits: the feasibility frontier") if r["Stack"] == "third"
    ]
    third_peak_2_1, third_tokens_2_1, third_cycles_2_1 = _figures_and_cycles(trials, steps, "third", 2, 1)
    third_peak_4_2, third_tokens_4_2, third_cycles_4_2 = _figures_and_cycles(trials, steps, "third", 4, 2)
    trl_peak_2_1, trl_tokens_2_1, trl_cycles_2_1 = _figures_and_cycles(trials, steps, "trl", 2, 1)
    trl_peak_4_1, trl_tokens_4_1, trl_cycles_4_1 = _figures_and_cycles(trials, steps, "trl", 4, 1)

    oom_peak = trials.set_index("trial_key").loc[trial_key("third", "grpo", 4, 1, 1), "peak_device_gib"]
    assert frontier == {
        "Stack": "third",
        "Mode": "grpo",
        "Largest that fits": "K=4 B=2 (8 completions/step)",
        "Its peak": _spare(third_peak_4_2, trials["gpu_total_gib"].min()),  # no budget set: the card
        "Smallest that does not": "K=4 B=1 (4 completions/step): out of memory",
        "Peak there": f"{oom_peak:.2f} GiB",
        "Memory": "GPU (NVML)",
        "Completed / OOM / pruned": "2 / 1 / 0",
    }

    rows = _markdown_table(md, "### Third against TRL")
    assert [(r["K"], r["B"]) for r in rows] == [("2", "1"), ("4", "1"), ("4", "2")]
    both, only_trl, only_third = rows
    assert both == {
        "Mode": "grpo",
        "K": "2",
        "B": "1",
        "TRL peak (GiB)": f"{trl_peak_2_1:.2f}",
        "Third peak (GiB)": f"{third_peak_2_1:.2f}",
        "Memory Third ÷ TRL": _memory_ratio_words(trials, "third", "trl", 2, 1),
        "Memory": "GPU (NVML)",
        "TRL tokens/s": both["TRL tokens/s"],  # an interval: checked below
        "Third tokens/s": _few(third_tokens_2_1, third_cycles_2_1),
        "Tokens/s Third ÷ TRL": _speed_ratio_words(third_cycles_2_1, trl_cycles_2_1),
        "Fits": "both",
    }
    trl_seeds = trials.query("stack == 'trl' and mode == 'grpo' and num_generations == 2 and batch_size == 1")
    assert both["TRL tokens/s"].startswith(f"{_tokens(trl_tokens_2_1)} (95% CI ")
    assert both["TRL tokens/s"].endswith(f"; {trl_cycles_2_1} cycles, {len(trl_seeds)} seeds)")
    assert (only_trl["TRL peak (GiB)"], only_trl["Third peak (GiB)"]) == (
        f"{trl_peak_4_1:.2f}",
        "out of memory",
    )
    assert (only_trl["TRL tokens/s"], only_trl["Third tokens/s"]) == (
        _few(trl_tokens_4_1, trl_cycles_4_1),
        "—",
    )
    assert (only_trl["Memory Third ÷ TRL"], only_trl["Fits"]) == ("—", "only TRL")
    assert (only_third["TRL peak (GiB)"], only_third["Third peak (GiB)"]) == (
        "out of memory",
        f"{third_peak_4_2:.2f}",
    )
    assert (only_third["Third tokens/s"], only_third["Fits"]) == (
        _few(third_tokens_4_2, third_cycles_4_2),
        "only Third",
    )
    # Unsloth against TRL is unchanged by the third stack: the configurations both ran
    assert [(r["K"], r["B"]) for r in _markdown_table(md, "### Unsloth against TRL")] == [
        ("2", "1"),
        ("4", "2"),
    ]


def test_the_report_compares_the_stacks_against_a_chosen_base(tmp_path, third):
    trials = write_synthetic_sweep(tmp_path, grid=[*GRID, *THIRD_GRID])
    paths = write_report(tmp_path, console=Console(record=True, width=250), base="unsloth")
    steps = load_outputs(tmp_path).steps
    headings = [text for tag, text in outline(paths["report_html"].read_text()).items if tag in ("h2", "h3")]
    at = headings.index("The stacks against Unsloth")
    assert headings[at : at + 3] == [
        "The stacks against Unsloth",
        "TRL against Unsloth",
        "Third against Unsloth",
    ]
    rows = _markdown_table(paths["report_md"].read_text(), "### Third against Unsloth")
    assert [(r["K"], r["B"], r["Fits"]) for r in rows] == [("2", "1", "both"), ("4", "2", "both")]
    for row, (k, b) in zip(rows, [(2, 1), (4, 2)], strict=True):
        (third_peak, _, third_cycles), (base_peak, _, base_cycles) = (
            _figures_and_cycles(trials, steps, stack, k, b) for stack in ("third", "unsloth")
        )
        assert row["Memory Third ÷ Unsloth"] == _memory_ratio_words(trials, "third", "unsloth", k, b)
        assert row["Memory Third ÷ Unsloth"].startswith(f"{third_peak / base_peak:.2f}× (spread ")
        assert row["Tokens/s Third ÷ Unsloth"] == _speed_ratio_words(third_cycles, base_cycles)


def test_an_unknown_base_is_refused_before_the_report_is_written(tmp_path):
    write_synthetic_sweep(tmp_path)
    with pytest.raises(ValueError) as info:
        write_report(tmp_path, console=Console(record=True), base="trll")
    assert str(info.value) == "base: unknown value 'trll'; did you mean 'trl'? available: liger, trl, unsloth"
    assert not (tmp_path / "report.md").exists()


def test_compare_pairs_the_third_stacks_trials_across_two_sweeps(tmp_path, third):
    a, b = tmp_path / "a", tmp_path / "b"
    write_synthetic_sweep(a, grid=[*GRID, *THIRD_GRID])
    write_synthetic_sweep(b, grid=[*GRID, *THIRD_GRID[:1]], speedup=1.7, memory_scale=1.4, rng_seed=1)
    result = compare_outputs(a, b).set_index("trial_key")
    sa, sb = (summary_table(load_outputs(d)).set_index("run_name") for d in (a, b))
    key = trial_key("third", "grpo", 2, 1, 1)
    row = result.loc[key]
    assert (row["stack"], row["present"]) == ("third", "both")
    tokens_a, tokens_b = sa.loc[key, "median_tokens_per_s"], sb.loc[key, "median_tokens_per_s"]
    assert row["tokens_per_s_ratio"] == pytest.approx(tokens_b / tokens_a)
    peak_a, peak_b = sa.loc[key, "peak_device_gib"], sb.loc[key, "peak_device_gib"]
    assert row["peak_gib_ratio"] == pytest.approx(peak_b / peak_a)
    only_a = set(result.index[result["present"] == "only A"])
    assert only_a == {trial_key("third", "grpo", 4, 1, 1), trial_key("third", "grpo", 4, 2, 1)}


def test_rlsweep_report_takes_the_base_stack_from_the_command_line(tmp_path, monkeypatch, capsys):
    from orchestrator.cli import main as rlsweep

    write_synthetic_sweep(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert rlsweep(["report", str(tmp_path), "--base-stack", "unsloth"]) == 0
    assert "## TRL against Unsloth" in (tmp_path / "report.md").read_text()
    with pytest.raises(SystemExit) as exit_:
        rlsweep(["report", str(tmp_path), "--base-stack", "trll"])
    assert exit_.value.code == 2
    assert (
        "argument --base-stack: unknown stack 'trll'; did you mean 'trl'? available: liger, trl, unsloth"
    ) in capsys.readouterr().err
