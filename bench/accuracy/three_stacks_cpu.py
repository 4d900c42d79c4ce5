"""The three stacks on CPU, measured: step time and peak RSS of plain TRL, Liger and Unsloth, one sweep.

    python -m bench three_stacks_cpu                     # the sweep into a scratch folder (28 min on 2 loaded cores)
    python -m bench three_stacks_cpu --set model=tiny --set lengths=16 --set steps=3   # a quick rehearsal
    python -m bench three_stacks_cpu --set source=DIR    # a finished run's folder

Runs one `rlsweep run` of a grid of the stacks (trl, unsloth, liger) x completion lengths (32, 128) on
SmolLM2-135M-Instruct (`smollm2`, fp32 weights as sweeps/cpu-learn.yaml has them: bitsandbytes on CPU is
slow), K=4 x B=1, one-digit sums, one trial at a time with both cores (resources.max_concurrent=1), so the
stacks' figures come from one invocation and their ratios compare within it. Every step but the last is a
synthetic probe (oom.probe_kind: synthetic, trainers/probe.py): the KV cache filled to the full length by
chunked prefill, two short decode windows, then the real training step on completions of exactly the
length asked, the same token count on every stack. The training step is where the stacks differ (Liger's
chunked log-probs); decoding every token instead (probe_kind: decode) took 217 s of generation for one
128-token step of K=4 x B=2 on this host under load, too slow for a benchmark of minutes. It then reads
the run's trials.parquet and steps/ and prints, per stack and length:

  step s     the median step_s of the measured steps (the probe steps after the first, which warms caches),
             in brackets their min-max (the interval: repeated steps of one trial); train s likewise, the
             training step alone (train_s);
  peak RSS   the trial's RSS high-water mark (trials.parquet's peak_rss_gib, the sampler's VmHWM), in
             brackets the min-max of the measured steps' own peaks (steps' rss_peak_gib, sampled in each step);
  vs TRL     the stack's median over TRL's at the same length, in brackets the min-max of the ratios of
             steps paired by step number (the same seed, so the same prompts, on both).

What runs on CPU (docs/benchmarks.md, "Three stacks simulated"): Liger is TRL's GRPOTrainer with
use_liger_kernel=True, its log-probs in TRL's chunks, without Liger's Triton kernels (they need a GPU);
Unsloth runs its loading and patching, then TRL's stock GRPOTrainer (its CPU fallback). Nothing here says
what a GPU measures.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from bench import ROOT, Context, benchmark

STACKS = ("trl", "unsloth", "liger")


def sweep(args) -> dict:
    """The sweep file: the stacks x lengths grid, every other setting fixed."""
    return {
        "name": "three-stacks-cpu",
        "task": "arithmetic",
        "task_args": {"operand_digits": 1, "answer_rule": "last", "prompt_style": "question",
                      "rewards": {"accuracy": 1.0, "digits": 0.5}, "num_samples": 512, "num_eval": 64},
        "grid": {"stack": list(args.stacks), "max_completion_length": list(args.lengths)},
        "fixed": {"mode": "grpo", "model": args.model, "quantization": "none", "num_generations": args.k,
                  "batch_size": args.b, "max_steps": args.steps, "max_prompt_length": 64,
                  "lora_r": 16, "lora_alpha": 32, "learning_rate": 3.0e-4},
        "resources": {"gpus_per_trial": 1, "cpus_per_trial": args.cpus, "max_concurrent": 1},
        "oom": {"probe_steps": args.steps - 1, "probe_kind": "synthetic"},
        "timeout_s": 900,
    }  # fmt: skip


def run(args, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep(args), sort_keys=False))
    command = [
        sys.executable,
        "-m",
        "orchestrator.cli",
        "run",
        str(path),
        "--output-dir",
        str(out),
        "--no-report",
    ]
    subprocess.run(command, cwd=ROOT, check=True)


def measured_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The probe steps after the first: full-length completions, caches warm."""
    probes = steps[steps["probe"].fillna(False).astype(bool)].sort_values("step")
    return probes.iloc[1:]


def figures(source: Path) -> dict[tuple[str, int], dict]:
    """(stack, length) -> its trial's figures and its measured steps, read from a finished run's folder."""
    trials = pd.read_parquet(source / "trials.parquet")
    out = {}
    for trial in trials.to_dict("records"):
        files = list((source / "steps").rglob(f"{trial['trial_key']}.parquet"))
        steps = measured_steps(pd.read_parquet(files[0])) if files else pd.DataFrame()
        out[(trial["stack"], int(trial["max_completion_length"]))] = {
            "status": trial["status"],
            "peak": trial["peak_rss_gib"],
            "step_s": dict(zip(steps.get("step", []), steps.get("step_s", []), strict=True)),
            "train_s": [x for x in steps.get("train_s", []) if pd.notna(x)],
            "rss": [x for x in steps.get("rss_peak_gib", []) if pd.notna(x)],
            "tokens": sorted({int(x) for x in steps.get("completion_tokens", []) if pd.notna(x)}),
        }
    return out


def interval(values) -> str:
    values = list(values)
    if not values:
        return "not measured"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(found: dict[tuple[str, int], dict]) -> list[str]:
    lines = [
        "| stack | completion tokens | status | steps | step s, median (min-max) | vs TRL (paired steps) "
        "| train s | peak RSS GiB (steps' peaks min-max) | vs TRL |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for length in sorted({n for _, n in found}):
        base = found.get(("trl", length))
        for stack in [s for s in STACKS if (s, length) in found]:
            f = found[(stack, length)]
            ratio = "-"
            if stack != "trl" and base and f["step_s"] and base["step_s"]:
                paired = [f["step_s"][i] / base["step_s"][i] for i in f["step_s"] if i in base["step_s"]]
                median = statistics.median(f["step_s"].values()) / statistics.median(base["step_s"].values())
                ratio = f"x{median:.2f} ({min(paired):.2f}-{max(paired):.2f})" if paired else f"x{median:.2f}"
            rss = "not measured" if pd.isna(f["peak"]) else f"{f['peak']:.3f}"
            rss_ratio = "-"
            if stack != "trl" and base and pd.notna(f["peak"]) and pd.notna(base["peak"]):
                rss_ratio = f"x{f['peak'] / base['peak']:.3f}"
            if f["rss"]:
                rss += f" ({min(f['rss']):.3f}-{max(f['rss']):.3f})"
            tokens = ",".join(map(str, f["tokens"])) or "-"
            lines.append(
                f"| {stack} | {length} ({tokens} a step) | {f['status']} | {len(f['step_s'])} "
                f"| {interval(f['step_s'].values())} | {ratio} | {interval(f['train_s'])} | {rss} | {rss_ratio} |"
            )
    return lines


@benchmark(
    tags=("stacks", "sweep"),
    needs="cpu",
    params={
        "source": "",
        "out": "",
        "model": "smollm2",
        "stacks": list(STACKS),
        "lengths": [32, 128],
        "steps": 4,
        "k": 4,
        "b": 1,
        "cpus": 2,
    },
    choices={"stacks": STACKS},
    rules={"steps": (lambda n: n >= 3, "3 or more (the first probe step warms up and the last is no probe)")},
    # no smoke size: its sweep takes 3 minutes even at tiny, 16 tokens, 3 steps, TRL and Liger
)
def three_stacks_cpu(ctx: Context) -> dict:
    args = ctx.args
    source = Path(args.source or args.out or ctx.scratch)
    if not args.source:
        run(args, source)
    print(f"from {source}")
    found = figures(source)
    ctx.tables["three stacks on CPU"] = "\n".join(table(found))
    print(ctx.tables["three stacks on CPU"])
    return {
        f"{stack} {length} {name}": value
        for (stack, length), f in found.items()
        for name, value in (
            ("step_s_median", statistics.median(f["step_s"].values()) if f["step_s"] else None),
            ("peak_rss_gib", None if pd.isna(f["peak"]) else float(f["peak"])),
        )
    }
