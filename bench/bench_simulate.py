"""Simulated against measured: torch's allocated peak of a TRL step simulated on meta tensors
(trainers/simulate) against the H100 rows that measured it (bench/data/h100-2026-11-26 and
h100-2026-11-27, trials.csv: TRL, completed, peak_torch_allocated_gib known), one row per distinct
configuration, with the seconds each simulation took on this host. Nothing is fitted.

    python bench/bench_simulate.py

A row's `steps` says what it measured: the largest of 3-5 steps (the optimizer's state live through the
step, as the simulation has it), or one first step before the optimizer had a state (rounds 2 and 4:
those read short by the moments, and so does the comparison).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = ("bench/data/h100-2026-11-26/trials.csv", "bench/data/h100-2026-11-27/trials.csv")
KEY = ("model", "K", "B", "max_prompt", "max_completion", "num_iterations", "quantization", "lora_r")


def rows() -> dict[tuple, list[dict]]:
    """The TRL rows that measured torch's allocated peak, by configuration."""
    found: dict[tuple, list[dict]] = {}
    for name in ROUNDS:
        with (ROOT / name).open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["stack"] == "trl" and row["status"] == "completed" and row["peak_torch_allocated_gib"]:
                    found.setdefault(tuple(row[k] for k in KEY), []).append(row)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=34, help="the rows' prompts: 34 tokens each")
    args = parser.parse_args()
    from trainers.simulate import simulate
    from trainers.trial import TrialSpec

    print(
        "| model | K | B | completion | iterations | simulated allocated GiB | phase | measured allocated GiB (steps) | error | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    errors = []
    for key, measured in sorted(
        rows().items(), key=lambda kv: (kv[0][0], int(kv[0][1]) * int(kv[0][2]), int(kv[0][4]))
    ):
        model, k, b, prompt, completion, iterations, quantization, lora_r = key
        spec = TrialSpec(
            model=model, framework="trl", num_generations=int(k), batch_size=int(b), max_prompt_length=int(prompt),
            max_completion_length=int(completion), num_iterations=int(iterations), quantization=quantization,
            lora_r=int(lora_r), lora_alpha=2 * int(lora_r), lora_dropout=0.05, learning_rate=2e-4,
        )  # fmt: skip
        started = time.perf_counter()
        step = simulate(spec, args.prompt_tokens)
        seconds = time.perf_counter() - started
        shown = []
        for row in measured:
            steps = int(row["steps"]) if row.get("steps") else 0
            kind = f"largest of {steps}" if steps > 1 else "first step"
            value = float(row["peak_torch_allocated_gib"])
            shown.append(f"{value:.3f} ({kind}, round {row['round']})")
            if steps > 1:
                errors.append(100 * (step.allocated_gib - value) / value)
        steady = [float(r["peak_torch_allocated_gib"]) for r in measured if int(r.get("steps") or 0) > 1]
        ref = steady[0] if steady else float(measured[0]["peak_torch_allocated_gib"])
        print(
            f"| {model.removeprefix('random:')} | {k} | {b} | {completion} | {iterations} | {step.allocated_gib:.3f} "
            f"| {step.phase} | {'; '.join(shown)} | {100 * (step.allocated_gib - ref) / ref:+.1f}% | {seconds:.1f} |",
            flush=True,
        )
    if errors:
        print(f"\nagainst the steady rows: mean |error| {sum(map(abs, errors)) / len(errors):.1f}%, "
              f"range {min(errors):+.1f}% to {max(errors):+.1f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
