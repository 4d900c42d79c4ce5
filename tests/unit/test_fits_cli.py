"""`rlsweep fits`: a user's one question (this model, this card, K, B, a length) answered in one line per
stack, measured rows first (the H100 rows of bench/data), the prediction only where nothing measured
answers; bad input refused with exit 2 before anything is predicted."""

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

H100 = str(Path(__file__).parents[2] / "bench" / "data" / "h100-2026-11-26")
# The settings of those rows (random Qwen2.5-3B, nf4 LoRA r16 with dropout 0.05, two iterations).
ROWS = ["--set", "num_iterations=2", "--set", "lora_dropout=0.05", "--trials", H100]
QWEN3B = ["--model", "Qwen/Qwen2.5-3B-Instruct", "--card", "16gb"]


def _line(text: str, stack: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith("  " + stack + " ")]
    return line


def _words(line: str) -> list[str]:
    """An answer line's fields: stack, verdict, peak, interval, basis (two spaces or more apart)."""
    return [w for w in line.strip().split("  ") if w.strip()]


def test_each_stack_answers_in_one_short_line_its_interval_named_and_its_basis_below(capsys):
    code, text = run_cli(["fits", "--model", "Qwen/Qwen3-4B", "--card", "16gb", "--k", "8", "--b", "1",
                          "--length", "1024"], capsys)  # fmt: skip
    assert code == 0, text
    trl, unsloth = _line(text, "TRL"), _line(text, "Unsloth")
    for line in (trl, unsloth):
        stack, verdict, peak, interval, basis = (w.strip() for w in _words(line))
        assert verdict in ("fits", "does not fit", "uncertain") and peak.endswith(" GiB"), line
        assert "-" in interval and basis == "predicted", line  # no measured trial of Qwen3
    flat = " ".join(text.split())  # the details wrap
    assert flat.count("interval: the memory model's 90% prediction interval (the prior)") == 3
    assert "predicted (the prior: no trial of its family measured)" in flat
    assert "K=8 completions per prompt x B=1 prompts per step" in flat
    assert "per_device_train_batch_size 8" in flat and "max_prompt_length 256" in flat
    assert "gradient_checkpointing on" in flat and "An answer's interval is named under it" in flat
    long = [x for x in text.splitlines() if len(x) > 80 and not x.startswith("    rlsweep calibrate")]
    assert not long, long  # readable at 80 columns: only a command to paste runs past it
    if "uncertain" in trl:  # the line that would settle it
        assert "rlsweep calibrate --model Qwen/Qwen3-4B --stack trl --card 16GB --k 8 --b 1" in text


def test_a_measured_row_answers_before_any_prediction(capsys):
    code, text = run_cli(["fits", *QWEN3B, "--k", "4", "--b", "2", "--length", "128", *ROWS], capsys)
    assert code == 0, text
    assert [w.strip() for w in _words(_line(text, "TRL"))] == ["TRL", "fits", "5.0 GiB", "5.0", "measured"]
    assert "measured (trl-grpo-rand-qwen2.5-3b-k4-b2-" in text and "interval: the measured peak" in text


def test_a_measured_out_of_memory_is_the_headline_however_the_prediction_reads(capsys):
    # Round 2 ran TRL out of memory at 512 tokens under 16 GiB; the prior's interval straddles the budget.
    code, text = run_cli(["fits", *QWEN3B, "--k", "8", "--b", "2", "--length", "512", *ROWS], capsys)
    assert code == 0, text
    assert [w.strip() for w in _words(_line(text, "TRL"))] == [
        "TRL",
        "does not fit",
        "-",
        "> 16.0",
        "measured",
    ]
    assert "measured: out of memory under 16 GiB" in text
    # and K=16 at that length needs at least as much: implied by the same measurement
    code, text = run_cli(["fits", *QWEN3B, "--k", "16", "--b", "2", "--length", "512", *ROWS], capsys)
    assert "does not fit" in _line(text, "TRL") and "implied: trl-grpo-rand-qwen2.5-3b-k8-b2-" in text


def test_a_smaller_configuration_is_implied_to_fit_by_a_measured_larger_one(capsys):
    code, text = run_cli(["fits", *QWEN3B, "--k", "4", "--b", "1", "--length", "128", *ROWS], capsys)
    assert code == 0, text
    assert [w.strip() for w in _words(_line(text, "TRL"))] == ["TRL", "fits", "-", "<= 5.0", "implied"]
    assert "implied: trl-grpo-rand-qwen2.5-3b-k4-b2-" in text


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--k", "0"], "--k 0: num_generations"),
        (["--length", "-5"], "--length -5: max_completion_length"),
        (["--stack", "trl,nope"], "--stack trl,nope: unknown stack 'nope'"),
        (["--set", "num_generations=4"], "num_generations (K) is set by --num-generations or --k"),
        (["--budget-gib", "8"], "--card 16GB and --budget-gib 8: give one"),
    ],
)
def test_bad_input_is_refused_with_exit_2_naming_the_flag_and_the_fix(capsys, argv, says):
    code, text = run_cli(["fits", *QWEN3B, *argv], capsys)
    assert code == 2 and says in text and "nothing answered" in text


def test_a_model_with_no_config_here_is_refused_with_the_command_that_fetches_it(capsys):
    code, text = run_cli(["fits", "--model", "acme/NoSuchModel-7B", "--card", "16gb"], capsys)
    assert code == 2 and "fits: 1 error(s), nothing answered:" in text and "Traceback" not in text
    assert "`hf download acme/NoSuchModel-7B config.json`" in text


def test_the_fit_map_states_its_assumptions_defines_k_and_b_and_names_the_calibrate_line(capsys):
    code, text = run_cli(["fitmap", "--card", "16gb", "--model", "Qwen/Qwen3-4B", "--k", "8", "--b", "1",
                          "--no-plot"], capsys)  # fmt: skip
    assert code == 0, text
    assert "assumed: per_device_train_batch_size = B x K" in text and "max_prompt_length 256" in text
    assert "K is TRL's num_generations" in text and "90% prediction interval" in text
    assert "rlsweep calibrate --model Qwen/Qwen3-4B --stack trl --card 16GB" in text


def test_an_out_of_memory_under_16_gib_does_not_answer_for_a_24_gib_card(capsys):
    # Round 2's TRL 512-token trial ran out under a 16 GiB budget: it needs more than 16, maybe under 24.
    argv = ["fits", "--model", "Qwen/Qwen2.5-3B-Instruct", "--card", "24gb", "--k", "8", "--b", "2"]
    code, text = run_cli([*argv, "--length", "512", *ROWS], capsys)
    assert code == 0, text
    assert "measured" not in _line(text, "TRL") and "implied" not in _line(text, "TRL")
