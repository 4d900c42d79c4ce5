"""The memory model per architecture family on CPU: a scaled-down model of each family swept over K, B
and completion length with real trainer trials, and the predictor's error per family.

Each family's model is a bundled config (trainers/model_configs) with small dimensions (SCALED below:
2 layers, hidden 192-256, the real ratio of attention heads to KV heads, an explicit head_dim where the
family has one, a scaled vocabulary, Gemma's sliding-window layers, a mixture of experts with 8
experts), built by the same builder as `random:` models into a local folder and trained through the
normal trial path (the supervisor and its RSS sampler, one trial at a time, one probe step with
completions forced to full length). Every family runs GRID; REPEATED runs twice more, for the
run-to-run spread of an RSS peak.

Errors, as % of the measured peak, from bench/accuracy/predictor.py's evaluation: leave-one-out (from
every other trial of the family) and from the family's 2 extremes (the pair a sweep runs first).

Usage:
  python -m bench memory_families                     # evaluate bench/data/memory-families.parquet
  python -m bench memory_families --set record=all    # build the models, run the trials (about 20 min
                                                      # of a loaded 2-core CPU), store their rows, evaluate
  python -m bench memory_families --set record=qwen3_moe   # only these families' trials, again
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench import DATA, Context, benchmark
from bench.accuracy.predictor import evaluate
from orchestrator.recording.sinks import TRIAL_SCHEMA, normalize_step, trial_row
from orchestrator.running.supervisor import run_trial
from orchestrator.spec.plan import trial_key
from orchestrator.words.outcome import peak_memory
from orchestrator.words.settings import GuardSettings
from trainers.models import _build, bundled_models
from trainers.trial import TrialSpec

ROWS = DATA / "memory-families.parquet"
SMALL = {"num_hidden_layers": 2, "intermediate_size": 512, "max_position_embeddings": 4096}
# family -> (the bundled config it scales down, its overrides): heads : KV heads as in the real model
SCALED = {
    "qwen2": ("Qwen/Qwen2.5-7B-Instruct", {"hidden_size": 224, "num_attention_heads": 14,
                                           "num_key_value_heads": 2, "vocab_size": 32768}),
    "qwen3": ("Qwen/Qwen3-8B", {"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
                                "head_dim": 64, "vocab_size": 32768}),
    "qwen3_moe": ("Qwen/Qwen3-30B-A3B", {"hidden_size": 256, "num_attention_heads": 8,
                                         "num_key_value_heads": 1, "head_dim": 64, "num_experts": 8,
                                         "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                                         "vocab_size": 32768}),
    "llama": ("meta-llama/Llama-3.1-8B-Instruct", {"hidden_size": 256, "num_attention_heads": 8,
                                                   "num_key_value_heads": 2, "vocab_size": 32768}),
    "mistral": ("mistralai/Mistral-7B-Instruct-v0.3", {"hidden_size": 256, "num_attention_heads": 8,
                                                       "num_key_value_heads": 2, "vocab_size": 32768}),
    "phi3": ("microsoft/Phi-4-mini-instruct", {"hidden_size": 192, "num_attention_heads": 6,
                                               "num_key_value_heads": 2, "rope_scaling": None,
                                               "vocab_size": 32768}),
    "smollm3": ("HuggingFaceTB/SmolLM3-3B", {"hidden_size": 256, "num_attention_heads": 8,
                                             "num_key_value_heads": 2, "no_rope_layers": [1, 0],
                                             "vocab_size": 32768}),
    "gemma3": ("google/gemma-3-12b-it", {"hidden_size": 256, "num_attention_heads": 4,
                                         "num_key_value_heads": 2, "head_dim": 128, "sliding_window": 64,
                                         "sliding_window_pattern": 2, "query_pre_attn_scalar": 128,
                                         "vocab_size": 65536}),
}  # fmt: skip
# (K, B, completion length): the family's 2 extremes (smallest and largest peak) and 4 between
GRID = [(2, 1, 32), (8, 1, 32), (2, 2, 128), (8, 1, 128), (4, 2, 64), (8, 2, 128)]
REPEATED = (8, 2, 128)
FIXED = {
    "task": "arithmetic",
    "max_steps": 1,
    "probe_steps": 1,
    "max_prompt_length": 96,
    "quantization": "nf4",
}
# PEFT's LoRA on fused experts (ParamWrapper) refuses lora_dropout != 0, the trials' default 0.05
OWN = {"qwen3_moe": {"lora_dropout": 0.0}}


def scaled_config(family: str) -> dict:
    hub, overrides = SCALED[family]
    config = json.loads(bundled_models()[hub].read_text())
    return {**config, **SMALL, **overrides, "_name_or_path": f"scaled/{family}", "torch_dtype": "float32"}


def build(family: str, root: Path) -> Path:
    folder = root / family
    if not (folder / "complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        _build(scaled_config(family), folder)
        (folder / "complete").write_text(family + "\n")
    return folder


def family_of_row(row: dict) -> str:
    return Path(json.loads(row["config"])["model"]).name


def at(row: dict, folder: Path) -> dict:
    """The row with its model at `folder` (where this host builds the family: its config.json is the
    architecture the memory model reads), wherever it was recorded."""
    config = {**json.loads(row["config"]), "model": str(folder)}
    return {**row, "config": json.dumps(config)}


def record(ctx: Context, root: Path, families: list[str]) -> None:
    """Run `families`' trials; their rows replace those families' rows in ROWS."""
    rows = pq.read_table(ROWS).to_pylist() if ROWS.exists() else []
    rows = [r for r in rows if family_of_row(r) not in families]
    work = ctx.scratch
    for family in families:
        model = str(build(family, root))
        runs = [*GRID, REPEATED, REPEATED]
        for run, (k, b, c) in enumerate(runs):
            knobs = {**FIXED, **OWN.get(family, {})}
            spec = TrialSpec(model=model, num_generations=k, batch_size=b, max_completion_length=c, **knobs)
            spec.trial_key = f"{trial_key(spec)}-r{run}"
            started = time.monotonic()
            result = run_trial(
                spec,
                trial_dir=work / spec.trial_key,
                guard=GuardSettings(probe_steps=1, timeout_s=900),
                cpus=1,
            )
            rows.append(trial_row(spec, result, [normalize_step(spec.trial_key, r) for r in result.steps]))
            peak, kind = peak_memory(rows[-1])
            print(f"{family} K={k} B={b} C={c}: {result.status}, {kind} {peak} GiB, "
                  f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
            pq.write_table(pa.Table.from_pylist(rows, schema=TRIAL_SCHEMA), ROWS)
    print(f"wrote {ROWS}")


def spread(rows: list[dict]) -> None:
    """The run-to-run spread of REPEATED's peak per family (% of its mean)."""
    print("| family | repeats of K=8 B=2 C=128 | peaks GiB | spread % |\n|---|---|---|---|")
    for family in SCALED:
        peaks = [
            peak_memory(r)[0]
            for r in rows
            if r["trial_key"].split("-r")[-1] in {"5", "6", "7"} and family_of_row(r) == family
        ]
        if peaks:
            mean = sum(peaks) / len(peaks)
            print(f"| {family} | {len(peaks)} | {', '.join(f'{p:.3f}' for p in peaks)} | "
                  f"{(max(peaks) - min(peaks)) / mean * 100:.2f} |")  # fmt: skip


@benchmark(tags=("memory",), needs="data", params={"record": ""}, smoke={})
def memory_families(ctx: Context) -> dict:
    """The memory model per architecture family on CPU: the recorded grid's errors per family (`record`:
    `all` or families, comma-separated, to run their trials again first: real trainers, minutes)."""
    root = Path(tempfile.gettempdir()) / "rlsweep-bench-families"
    if ctx.args.record:
        unknown = set(ctx.args.record.split(",")) - {"all", *SCALED}
        if unknown:
            raise ValueError(
                f"record={ctx.args.record}: unknown families {sorted(unknown)}; one of {', '.join(SCALED)}, or all"
            )
        record(ctx, root, list(SCALED) if ctx.args.record == "all" else ctx.args.record.split(","))
    rows = [at(row, build(family_of_row(row), root)) for row in pq.read_table(ROWS).to_pylist()]
    # the evaluation fits on one run of each configuration; the repeats measure the spread
    metrics = evaluate([r for r in rows if r["trial_key"].split("-r")[-1] not in {"6", "7"}])
    spread(rows)
    return metrics
