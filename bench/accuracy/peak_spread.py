"""Run-to-run spread of peak memory: the same configuration repeated with other seeds on both stacks.

Runs `rlsweep trial` (tiny model, cpu-smoke's settings, 4 steps, 1 probe step) for K in KS, both stacks,
SEEDS seeds each, into OUT/<stack>-k<K>-s<seed> (a trial already there is not run again), then prints
each configuration's peaks and their spread (max - min, in MiB and as % of the mean). The largest
relative spread sets orchestrator/judging/intervals.py's TIGHT_SPREAD (docs/benchmarks.md).

    python bench/bench_peak_spread.py --out /tmp/trust-spread
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

KS = (2, 24)
STACKS = ("trl", "unsloth")
SEEDS = (1, 2, 3)
SETTINGS = ["--model-name", "tiny", "--max-steps", "4", "--batch-size", "1", "--max-prompt-length", "96",
            "--max-completion-length", "16", "--quantization", "nf4", "--probe-steps", "1"]  # fmt: skip


def peak(folder: Path) -> tuple[float | None, str | None]:
    """(peak GiB, which memory) of a finished trial folder, by the record's precedence."""
    from trainers.record import peak_memory

    return peak_memory(json.loads((folder / "trial.json").read_text())["outcome"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
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
                folder = args.out / f"{stack}-k{k}-s{seed}"
                if not (folder / "trial.json").is_file():
                    command = [sys.executable, "-m", "orchestrator.cli", "trial", "--framework", stack,
                               "--seed", str(seed), "--num-generations", str(k), *SETTINGS,
                               "--output-dir", str(folder)]  # fmt: skip
                    subprocess.run(command, check=True, capture_output=True)
                value, kind = peak(folder)
                peaks.append(value)
            spread = max(peaks) - min(peaks)
            print(
                f"| {stack} | {k} | {', '.join(f'{p:.4f}' for p in peaks)} ({kind}) | {spread * 1024:.1f} | "
                f"{spread / statistics.mean(peaks) * 100:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
