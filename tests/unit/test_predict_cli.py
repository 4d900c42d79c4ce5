"""`rlsweep predict`: each planned trial's predicted peak, interval and verdict, without running
anything; from the sweep's trials.parquet when it has one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.judging.memory import MemoryModel
from orchestrator.judging.memory._terms import CALIBRATED
from orchestrator.recording.sinks import TrialsTable, trial_row
from orchestrator.spec.load import load_sweep, parse_sweep
from orchestrator.spec.plan import plan
from trainers.trial import TrialSpec

CPU_SMOKE = str(Path(__file__).parents[2] / "sweeps" / "cpu-smoke.yaml")


def test_predict_on_cpu_smoke_prints_every_trial_from_the_prior_in_seconds(tmp_path, capsys):
    started = time.monotonic()
    code = main(
        ["predict", CPU_SMOKE, "--budget-gib", "0.85", "--output-dir", str(tmp_path), "--measure", "RSS"]
    )
    elapsed = time.monotonic() - started
    printed = capsys.readouterr().out
    assert code == 0 and elapsed < 30
    assert "the prior" in printed and "budget 0.85 GiB" in printed
    # the basis the same for every trial: said once above the table, each trial on its own row
    assert "basis predicted" in next(
        line for line in printed.splitlines() if line.startswith("same in every row")
    )
    assert "interval (predicted): the memory model's 90% prediction interval (the prior)" in printed
    for spec in plan(load_sweep(CPU_SMOKE)).trials:
        assert sum(spec.trial_key in line for line in printed.splitlines()) == 1
    assert not list(tmp_path.iterdir()), "predict writes nothing"


def test_predict_reads_the_sweeps_trials_and_shows_measured_beside_predicted(tmp_path, capsys):
    trials = plan(load_sweep(CPU_SMOKE)).trials
    ledger = TrialsTable(tmp_path / "trials.parquet")
    measured = {}
    # K=2 of every stack and mode, K=24 of the first stack's: the basis differs by row
    for spec in trials[:8]:
        row = trial_row(spec, None, [], status="completed")
        row["peak_rss_gib"] = measured[spec.trial_key] = 0.8 + 0.005 * spec.num_generations
        ledger.upsert(row)
    assert main(["predict", CPU_SMOKE, "--budget-gib", "1.0", "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    model = MemoryModel.fit(ledger.rows.values())
    for spec in trials:
        line = next(line for line in printed.splitlines() if spec.trial_key in line)
        if spec.trial_key in measured:  # its own row answers: it fits, at most the peak measured (no budget)
            peak = f"{measured[spec.trial_key]:.3f}"
            assert f"<= {peak}" in line and "implied" in line and line.rstrip().endswith(peak)
        else:
            assert f"{model.predict(spec).peak_gib:.3f}" in line and "predicted" in line
    assert "interval (predicted): the memory model's 90% prediction interval (fitted on" in printed


def test_predict_refuses_a_model_whose_config_it_cannot_read_with_the_command_that_fetches_it(
    tmp_path, capsys
):
    sweep = tmp_path / "hub.yaml"
    sweep.write_text("name: hub\nfixed: {model: someorg/unseen-model}\n")
    assert main(["predict", str(sweep), "--output-dir", str(tmp_path / "out"), "--measure", "GPU"]) == 2
    printed = capsys.readouterr().err
    assert "predict: 1 error(s), nothing predicted:" in printed
    assert "--model someorg/unseen-model: 'someorg/unseen-model' is not bundled" in printed
    assert "`hf download someorg/unseen-model config.json`" in printed


def test_predict_names_what_it_cannot_predict(tmp_path, capsys):
    config = tmp_path / "bert" / "config.json"
    config.parent.mkdir()
    config.write_text('{"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12}')
    sweep = tmp_path / "bert.yaml"
    sweep.write_text(f"name: bert\nfixed: {{model: {config}}}\n")
    assert main(["predict", str(sweep), "--output-dir", str(tmp_path / "out"), "--measure", "GPU"]) == 0
    printed = capsys.readouterr().out.replace("\n", "")
    assert (
        "unknown or not simulated (1 trials" in printed
        and "model_type 'bert' is not an architecture" in printed
    )


def test_oom_predict_without_a_budget_is_refused_with_the_fix():
    with pytest.raises(Exception, match="oom.predict: true, but no memory.budget_gib"):
        parse_sweep({"name": "x", "oom": {"predict": True}})
    assert parse_sweep({"name": "x", "oom": {"predict": True}, "memory": {"budget_gib": 8}}).oom.predict


def test_a_trial_row_records_the_prediction_or_nulls():
    spec = TrialSpec(trial_key="k")
    prediction = MemoryModel.fit([], measure="RSS").predict(spec)
    row = trial_row(spec, None, [], status="pruned", prediction=prediction)
    assert (row["predicted_peak_gib"], row["predicted_low_gib"], row["predicted_high_gib"]) == (
        prediction.peak_gib,
        prediction.low_gib,
        prediction.high_gib,
    )
    assert (row["predicted_from_trials"], row["predicted_basis"]) == (0, "prior")
    bare = trial_row(spec, None, [], status="pruned")
    assert all(bare[k] is None for k in bare if k.startswith("predicted_"))
    assert sum(k.startswith("predicted_") for k in bare) == 5


WORKSTATION = str(Path(__file__).parents[2] / "sweeps" / "workstation-16gb.yaml")


def test_a_gpu_sweep_is_predicted_in_gpu_memory_on_a_host_without_a_gpu(tmp_path, capsys, monkeypatch):
    import orchestrator.spec.plan as plan_module
    import trainers.nvml

    monkeypatch.setattr(plan_module, "local_gpus", lambda: 0)  # this host: no GPU
    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 0)
    assert main(["predict", WORKSTATION, "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "peak GPU predicted from no trials.parquet yet: the prior" in printed
    # TRL, K=8, B=1 on Qwen2.5-3B-Instruct (its config.json: 36 layers, hidden 2048, 16 heads, 2 KV
    # heads of 128, MLP 11008, vocabulary 151936, tied embeddings), NF4, bf16, LoRA r16 on the 7
    # linear modules, prompt 256 + completion 128, micro-batch 8, written out by hand:
    layers, hidden, kv, mlp, vocab, tokens, micro = 36, 2048, 256, 11008, 151936, 384, 8
    linear = layers * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * mlp)
    # bf16: the tied embeddings, the norms and Qwen2's q, k and v biases
    weights = linear * 0.5 + (vocab * hidden + hidden * (2 * layers + 1) + layers * (hidden + 2 * kv)) * 2
    lora = layers * 16 * (2 * 2 * hidden + 2 * (hidden + kv) + 3 * (hidden + mlp)) * 16
    kv_cache = 2 * layers * kv * 2 * micro * tokens
    sampling_logits = micro * vocab * 4
    # checkpointed: one hidden state a layer, plus one layer's 10 hidden- and 3 MLP-sized tensors
    activations = micro * tokens * (layers * hidden + 10 * hidden + 3 * mlp) * 2
    # and nothing for LoRA dropout (0.05): checkpointed layers keep no dropped-out copies at the peak
    logits = micro * (128 + 1) * vocab * 8  # TRL's fp32 completion + 1 rows of logits and their fp32 gradient
    c = CALIBRATED  # the GPU prior: the face values calibrated on round 1's H100 trials
    sizes = dict(
        weights=weights,
        lora=lora,
        kv_cache=kv_cache,
        sampling_logits=sampling_logits,
        activations=activations,
        logits=logits,
    )
    expected = c["baseline"] + sum(c[name] * size for name, size in sizes.items()) / 1024**3
    line = next(
        line for line in printed.splitlines() if line.lstrip().startswith("trl-grpo-qwen2.5-3b-k8-b1")
    )
    assert f"{expected:.1f}" in line  # a card's answer in tenths; the figure itself to the MiB:
    spec = next(s for s in plan(load_sweep(WORKSTATION)).trials if s.trial_key in line)
    assert abs(MemoryModel.fit([], "GPU", unmeasured="GPU").predict(spec).peak_gib - expected) < 5e-4
