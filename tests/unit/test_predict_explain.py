"""`rlsweep predict --explain`: one trial's prediction term by term against the budget; and predict,
--explain and solve's predictions for every bundled model, in seconds."""

from __future__ import annotations

import json

from orchestrator.cli import main
from orchestrator.judging.memory import Forecast, MemoryModel
from orchestrator.judging.memory._terms import CALIBRATED, TERMS
from orchestrator.judging.solve import make_request, predicted_guess
from trainers.models import bundled_models
from trainers.trial import TrialSpec
from trainers.units import GIB


def sweep_file(tmp_path, body: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: explain\n{body}\nresources: {{gpus_per_trial: 1}}\n")
    return str(path)


def table_rows(printed: str) -> dict[str, list[str]]:
    """The explain table's rows by term, each cell whole again (rich wraps the long ones)."""
    rows: dict[str, list[str]] = {}
    for line in printed.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) != 6:
            continue
        if cells[0]:
            rows[cells[0]] = cells
        else:
            last = rows[list(rows)[-1]]
            last[:] = [f"{a} {b}".strip() for a, b in zip(last, cells, strict=True)]
    return rows


def test_explain_prints_each_term_with_its_bytes_in_words_and_the_total_against_the_budget(tmp_path, capsys):
    sweep = sweep_file(tmp_path, "fixed: {model: Qwen/Qwen2.5-0.5B-Instruct}")
    args = [
        "predict",
        sweep,
        "--explain",
        "--budget-gib",
        "2",
        "--measure",
        "GPU",
        "--output-dir",
        str(tmp_path),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    rows = table_rows(printed)
    assert list(rows) == list(TERMS)
    # Qwen2.5-0.5B by hand (its config; the trial defaults: B x K = 8 sequences of 256 + 128 tokens,
    # micro-batch 8, bf16, checkpointed): 2 x 24 layers x 2 KV heads x 64 head dim x 2 bytes x 8 x 384
    assert rows["kv_cache"][1:] == [
        "generation",
        "2 (K and V) x 2 KV heads x 64 head dim x 2 B (bf16) x 8 sequences x 24 layers x 384 tokens",
        f"{2 * 2 * 64 * 2 * 8 * 24 * 384 / GIB:.3f}",
        f"{CALIBRATED['kv_cache']:.2f}",
        f"{CALIBRATED['kv_cache'] * 2 * 2 * 64 * 2 * 8 * 24 * 384 / GIB:.3f}",
    ]
    # TRL's completion logits: 8 x (128 + 1) rows x 151936 entries x fp32 logits and their fp32 gradient
    assert rows["logits"][2] == (
        "1,032 rows (micro-batch 8 x (128 + 1)) x 151,936 vocab x 8 B (TRL's fp32 logits, accelerate's cast of "
        "bf16 autocast, and their fp32 gradient)"
    )
    assert rows["logits"][3] == f"{8 * 129 * 151936 * 8 / GIB:.3f}" == "1.168"
    # the baseline: 1 GiB at the GPU prior's calibrated coefficient
    assert rows["baseline"][3:] == ["1.000", f"{CALIBRATED['baseline']:.2f}", f"{CALIBRATED['baseline']:.3f}"]
    prediction = MemoryModel.fit([], measure="GPU").predict(TrialSpec(model="Qwen/Qwen2.5-0.5B-Instruct"))
    total = next(line for line in printed.splitlines() if line.startswith("total:"))
    assert total.startswith(f"total: {prediction.describe()} (prior; static {prediction.terms['static']:.3f}")
    assert total.endswith(f"budget 2 GiB: {prediction.verdict(2.0)}")


def test_explain_of_a_sweep_of_several_trials_asks_which_one(tmp_path, capsys):
    sweep = sweep_file(tmp_path, "grid: {num_generations: [2, 4]}\nfixed: {model: tiny}")
    assert main(["predict", sweep, "--explain", "--output-dir", str(tmp_path)]) == 2
    printed = capsys.readouterr().out
    assert (
        "plans 2 trials and --explain explains one; pick it with --trial KEY (e.g. --trial trl-grpo-tiny-k2"
        in (printed)
    )
    assert main(["predict", sweep, "--explain", "--trial", "nope", "--output-dir", str(tmp_path)]) == 2
    assert "--trial nope: not a trial of" in capsys.readouterr().out


def test_explain_picks_the_trial_named_by_its_key(tmp_path, capsys):
    sweep = sweep_file(tmp_path, "grid: {num_generations: [2, 16]}\nfixed: {model: tiny}")
    assert main(["predict", sweep, "--output-dir", str(tmp_path)]) == 0
    key = next(word for word in capsys.readouterr().out.split() if word.startswith("trl-grpo-tiny-k16"))
    assert main(["predict", sweep, "--explain", "--trial", key, "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{key}: peak") and "x 32 sequences x" in table_rows(printed)["kv_cache"][2]


def test_trial_without_explain_is_refused_with_the_fix(tmp_path, capsys):
    sweep = sweep_file(tmp_path, "fixed: {model: tiny}")
    assert main(["predict", sweep, "--trial", "x", "--output-dir", str(tmp_path)]) == 2
    assert "add --explain" in capsys.readouterr().out


def test_explain_of_a_model_with_no_config_here_is_refused_with_the_fetch_line(tmp_path, capsys):
    sweep = sweep_file(tmp_path, "fixed: {model: someorg/unseen-model}")
    assert main(["predict", sweep, "--explain", "--measure", "GPU", "--output-dir", str(tmp_path)]) == 2
    printed = capsys.readouterr().err
    assert (
        "'someorg/unseen-model' is not bundled" in printed
        and "hf download someorg/unseen-model config.json" in printed
    )


def test_predict_explain_and_solves_predictions_answer_for_every_bundled_model(tmp_path, capsys):
    models = [f"random:{hub}" for hub in bundled_models()]
    # lora_dropout 0: PEFT refuses dropout on the mixture of experts' fused experts (TrialSpec says so)
    sweep = sweep_file(
        tmp_path,
        f"grid: {{model: [{', '.join(models)}]}}\nfixed: {{lora_dropout: 0.0}}\nmemory: {{budget_gib: 24}}",
    )
    assert main(["predict", sweep, "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "unknown" not in printed and "basis predicted" in printed and "(the prior)" in printed
    for model in models:
        short = model.split("/")[-1]
        assert (
            main(
                [
                    "predict",
                    sweep,
                    "--explain",
                    "--set",
                    f"grid.model=[{model}]",
                    "--output-dir",
                    str(tmp_path),
                ]
            )
            == 0
        )
        explained = capsys.readouterr().out
        assert "total: predicted" in explained and "budget 24 GiB" in explained, short
        request = make_request(
            "num_generations",
            24,
            settings={"model": model, "lora_dropout": 0.0},
            output_dir=str(tmp_path / short),
        )
        forecast = Forecast({}, "GPU")
        predictions = [forecast.model().predict(request.spec(v)) for v in request.values]
        assert all(p.unknown is None for p in predictions) and predicted_guess(predictions, 24) is not None


def test_the_words_follow_the_device_the_stack_and_the_architecture():
    from orchestrator.judging.memory._architecture import Shape
    from orchestrator.judging.memory._explain import formulas
    from trainers.models import TINY_CONFIG

    tiny = Shape.from_config(TINY_CONFIG)
    cpu = formulas(TrialSpec(model="tiny"), tiny, "cpu")
    assert cpu["logits"].endswith("x 4 B (fp32 logits, no Triton on a CPU)")
    assert cpu["baseline"].startswith("the Python process")
    # on a CPU checkpointing is ignored: every layer's 10 x 256 + 3 x 512 = 4,096 values a token
    assert "x 2 layers x 4,096 values x 4 B (fp32)" in cpu["activations"]
    # and LoRA dropout's (0.05) copy of each layer's adapted inputs (q, k, v, o, gate, up: 256; down: 512)
    assert cpu["activations"].endswith(
        "x 2 layers x 2,048 adapted inputs x (4 B copy + 1 B mask) (LoRA dropout 0.05)"
    )
    gpu = formulas(TrialSpec(model="tiny"), tiny, "gpu")
    assert "dropout" not in gpu["activations"]  # checkpointed: no copies at the peak
    unsloth = formulas(TrialSpec(model="tiny", stack="unsloth"), tiny, "gpu")
    assert unsloth["logits"].startswith("0 (Unsloth never builds the full logits")
    # 8 x 128 completion rows: one chunk of max(512, 1024 / 8) rows, fp32 logits and their bf16 gradient
    assert unsloth["logit_chunk"].startswith(
        "512 of the 1,024 completion rows x 8,192 vocab x (4 B fp32 logits + 2 B"
    )
    moe = Shape.from_config(json.loads(bundled_models()["Qwen/Qwen3-30B-A3B"].read_text()))
    words = formulas(TrialSpec(model="random:Qwen/Qwen3-30B-A3B"), moe, "gpu")
    assert "others (embeddings, untied head, norms, 48 layers x 128 experts) x 2 B (bf16)" in words["weights"]
    gemma = Shape.from_config(json.loads(bundled_models()["google/gemma-3-1b-it"].read_text()))
    words = formulas(TrialSpec(model="random:google/gemma-3-1b-it"), gemma, "gpu")
    # 26 layers, 22 of them a 512-token window; sequences of 256 + 128 = 384 tokens fit inside it
    assert words["kv_cache"].endswith("x 8 sequences x (4 layers x 384 + 22 sliding layers x 384 tokens)")


def test_the_words_say_which_share_a_rank_holds_under_its_strategy():
    from orchestrator.judging.memory._architecture import Shape
    from orchestrator.judging.memory._explain import formulas
    from trainers.models import TINY_CONFIG

    spec = TrialSpec(num_processes=2, distributed="zero3", num_generations=4, batch_size=2)
    words = formulas(spec, Shape.from_config(TINY_CONFIG), "gpu")
    assert words["weights"].endswith(" x 1/2 (zero3: this rank's share)")
    assert (
        "fp32 weight x 1/2 (zero3: this rank's share) + 12 B gradient and AdamW's 2 moments x 1/2"
        in words["lora"]
    )
    assert " x 4 sequences x " in words["kv_cache"]  # 8 completions a step, 4 on each rank
