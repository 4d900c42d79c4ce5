"""A report to send: it says under its title what was trained (the model and where its weights came from,
the task, its rewards and their weights, the learning rate, the lengths, K, B, the steps, a link to the
sweep file), warns where completions ran into their length limit on most steps, and a learning sweep's
report leaves out the sections that have nothing to say. The sweep is the default CPU sweep as its
sweep records it from its real SmolLM2 run (tests/helpers/cpu_learn.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from rich.console import Console

from orchestrator.views.report import write_report
from orchestrator.views.report._document import Block
from orchestrator.views.report._html import render_html
from orchestrator.views.report._trained import CUT_SHARE, cut_steps, model_source
from tests.helpers.cpu_learn import TRACE, record_cpu_learn
from tests.helpers.html_outline import outline
from tests.helpers.synthetic_sweep import write_synthetic_sweep
from tools.inputs.learning_traces import load_learning_trace


@pytest.fixture(scope="module")
def cpu_learn_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu-learn")
    record_cpu_learn(out)
    paths = write_report(out, console=Console(quiet=True))
    return paths["report_md"].read_text(), paths["report_html"].read_text()


def _top(markdown: str) -> str:
    """What the report says between its title and its first section."""
    return markdown.split("\n## ", 1)[0]


def test_the_report_says_what_was_trained_under_its_title(cpu_learn_report):
    top = _top(cpu_learn_report[0])
    assert "**Trained**: smollm2 (registry package: HuggingFaceTB/SmolLM2-135M-Instruct" in top
    assert "TRL, GRPO, LoRA r 16 on an unquantized base" in top
    # the task's settings and rewards as sweeps/cpu-learn.yaml sets them
    assert "**Task**: arithmetic (operand_digits 1, answer_rule last, prompt_style question" in top
    assert "rewards accuracy × 1, digits × 0.5 (as the sweep sets them)" in top
    for said in ("learning rate 0.0003", "prompts up to 64 tokens", "completions up to 8 tokens",
                 "TRL's num_generations) 4", "B x K completions a step) 2", "steps 20"):  # fmt: skip
        assert said in top, said
    assert '<a href="sweep.yaml">sweep.yaml</a>' in cpu_learn_report[1]


def test_the_report_warns_where_completions_hit_the_length_limit_on_most_steps(cpu_learn_report):
    steps = load_learning_trace(TRACE)
    cut = sum(row["clipped_ratio"] >= CUT_SHARE for row in steps)
    assert cut * 2 > len(steps)  # the default CPU sweep's 8-token completions: most steps cut there
    top = _top(cpu_learn_report[0])
    assert "**Warning: completions hit the length limit on most steps**" in top
    assert f"on {cut} of {len(steps)} steps (at 8 tokens)" in top


def test_a_learning_sweeps_report_leaves_out_sections_with_nothing_to_say(cpu_learn_report):
    markdown, page = cpu_learn_report
    headings = [text for tag, text in outline(page).items if tag == "h2"]
    assert headings[:2] == [
        "Which configuration learns: held-out accuracy",
        "Does it learn: training verdicts",
    ]
    # one stack, nothing ran out of memory, no budget: no comparison, no frontier, no heatmap
    for empty in ("The stacks against TRL", "What fits: the feasibility frontier",
                  "What fits: every configuration, the stacks side by side", "Feasibility heatmaps"):  # fmt: skip
        assert empty not in headings
    assert "No configuration ran on both" not in markdown and "No memory budget is known" not in markdown


def test_a_sweep_run_for_what_fits_keeps_every_section(tmp_path):
    write_synthetic_sweep(tmp_path)
    markdown = write_report(tmp_path, console=Console(quiet=True))["report_md"].read_text()
    assert (
        "\n## What fits: the feasibility frontier\n" in markdown and "\n## Feasibility heatmaps\n" in markdown
    )
    assert "**Trained**: Qwen/Qwen2.5-0.5B-Instruct (Hugging Face hub, real weights)" in _top(markdown)


def test_a_step_hit_the_limit_when_half_its_completions_were_cut_or_else_its_mean_length_reached_it():
    steps = pd.DataFrame({
        "probe": [True, False, False, False, False],
        "clipped_ratio": [1.0, 0.5, 0.25, None, None],
        "completion_len_mean": [64.0, 60.0, 64.0, 64.0, 31.0],
    })  # fmt: skip
    assert cut_steps(steps, 64) == (2, 4)  # the probe left out; step 3's 0.25 decides, not its mean
    assert cut_steps(steps.drop(columns=["clipped_ratio"]), 64) == (2, 4)
    assert cut_steps(steps.iloc[0:0], 64) == (0, 0)


def test_each_kind_of_model_names_where_its_weights_came_from():
    assert model_source("tiny").startswith("bundled config")
    assert model_source("smollm2").startswith("registry package")
    assert (
        model_source("random:Qwen/Qwen3-4B")
        == "random twin of Qwen/Qwen3-4B: its bundled config, random weights"
    )
    assert model_source("Qwen/Qwen3-4B") == "Hugging Face hub, real weights"
    assert model_source("./my-model") == "a local folder"


def test_a_link_in_a_paragraph_is_a_link_in_report_html():
    page = render_html([Block("p", "See [sweep.yaml](sweep.yaml) & **more**.")], "t")
    assert '<p>See <a href="sweep.yaml">sweep.yaml</a> &amp; <strong>more</strong>.</p>' in page


def test_without_its_sweep_file_the_report_names_the_task_and_claims_no_rewards(tmp_path):
    record_cpu_learn(tmp_path)
    (tmp_path / "sweep.yaml").unlink()
    top = _top(write_report(tmp_path, console=Console(quiet=True))["report_md"].read_text())
    task = next(line for line in top.splitlines() if line.startswith("**Task**"))
    assert task == "**Task**: arithmetic." and "sweep.yaml" not in top
