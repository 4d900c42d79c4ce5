"""Run-to-run spread of peak memory: the same configuration repeated with other seeds on both stacks.

Runs `rlsweep trial` (tiny model, cpu-smoke's settings, 4 steps, 1 probe step) for K in KS, both stacks,
SEEDS seeds each, into OUT/<stack>-k<K>-s<seed> (a trial already there is not run again), then prints
each configuration's peaks and their spread (max - min, in MiB and as % of the mean). The largest
relative spread sets orchestrator/judging/intervals.py's TIGHT_SPREAD (docs/benchmarks.md).

    python -m bench peak_spread --set out=/tmp/trust-spread   # out: default a scratch folder
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench import Context, benchmark

KS = (2, 24)
STACKS = ("trl", "unsloth")
SEEDS = (1, 2, 3)
SETTINGS = ["--model", "tiny", "--max-steps", "4", "--batch-size", "1", "--max-prompt-length", "96",
            "--max-completion-length", "16", "--quantization", "nf4", "--probe-steps", "1"]  # fmt: skip


def peak(folder: Path) -> tuple[float | None, str | None]:
    """(peak GiB, which memory) of a finished trial folder, by the record's precedence."""
    from trainers.record import peak_memory

    return peak_memory(json.loads((folder / "trial.json").read_text())["outcome"])


@benchmark(tags=("memory", "trial"), needs="cpu", params={"out": ""})
def peak_spread(ctx: Context) -> dict:
    out = Path(ctx.args.out) if ctx.args.out else ctx.scratch
    widest = None
    print(
        "| stack | K | peaks (GiB), seeds "
        + ", ".join(map(str, SEEDS))
        + " | spread (MiB) | spread (% of mean) |"
    )
    print("|---|---|---|---|---|")
    for k in KS:
        for stack in STACKS:
            peaks = []
            for seed in SEEDS:
                folder = out / f"{stack}-k{k}-s{seed}"
                ctx.trial(
                    ["--stack", stack, "--seed", str(seed), "--num-generations", str(k), *SETTINGS],
                    folder,
                )
                value, kind = peak(folder)
                peaks.append(value)
            spread = max(peaks) - min(peaks)
            print(
                f"| {stack} | {k} | {', '.join(f'{p:.4f}' for p in peaks)} ({kind}) | {spread * 1024:.1f} | "
                f"{spread / statistics.mean(peaks) * 100:.2f} |"
            )
            share = spread / statistics.mean(peaks)
            widest = share if widest is None else max(widest, share)
    return {"largest_spread_share": widest}
