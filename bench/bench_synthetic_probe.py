"""Synthetic against decoded memory probes: the same configuration probed both ways, peaks and seconds.

For each model, stack and completion length, runs `rlsweep trial` (one probe step, max_steps 1) DECODES
times with probe_kind decode and once with probe_kind synthetic, each in its own process, into
OUT/<model>-<stack>-c<length>-<kind><i> (a trial already there is not run again), then prints one row per
configuration: the decoded peaks (their spread is the run-to-run spread), the synthetic peak, its
difference from the decoded median as a share of it, which phase set the synthetic step's peak, and each
probe's wall time (the trial's, start-up included) and step time.

The peak is the record's (trainers/record.py peak_memory: NVML on a GPU, else torch reserved, else RSS).
On a CPU the trainer's RSS high-water mark of its probe step (`rss_peak_gib` of step 1) is printed too.

    python bench/bench_synthetic_probe.py --out /tmp/synthetic --models tiny --lengths 64,256,1024
    python bench/bench_synthetic_probe.py --out /tmp/synthetic --models smollm2 --lengths 64,256,512
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

STACKS = ("trl", "unsloth")
SETTINGS = ["--max-steps", "1", "--probe-steps", "1", "--max-prompt-length", "96", "--task", "arithmetic"]


def run(
    folder: Path, model: str, stack: str, length: int, kind: str, k: int, b: int, threads: int
) -> float | None:
    """Run one probe into folder (unless it is there); its wall seconds, None when it was there."""
    if (folder / "trial.json").is_file():
        return None
    command = [sys.executable, "-m", "orchestrator.cli", "trial", "--framework", stack, "--model-name", model,
               "--num-generations", str(k), "--batch-size", str(b), "--max-completion-length", str(length),
               "--probe-kind", kind, "--num-threads", str(threads), *SETTINGS,
               "--output-dir", str(folder)]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    wall = time.perf_counter() - start
    (folder / "bench-wall.json").write_text(json.dumps({"wall_s": wall}))
    return wall


def figures(folder: Path) -> dict:
    """The probe's record peak, its step-1 RSS high-water mark, phase, step time and wall."""
    import pandas as pd

    from trainers.record import peak_memory

    outcome = json.loads((folder / "trial.json").read_text())["outcome"]
    peak, source = peak_memory(outcome)
    step = pd.read_parquet(folder / "steps.parquet").iloc[0]
    wall = json.loads((folder / "bench-wall.json").read_text())["wall_s"]
    return {
        "peak": peak,
        "source": source,
        "rss_step": float(step["rss_peak_gib"]),
        "gen_peak": float(step["gen_peak_gib"]),
        "phase": step.get("peak_phase"),
        "step_s": float(step["step_s"]),
        "wall_s": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="tiny")
    parser.add_argument("--stacks", default=",".join(STACKS))
    parser.add_argument("--lengths", default="64,256,1024")
    parser.add_argument(
        "--decodes", type=int, default=2, help="decoded probes per configuration (the spread)"
    )
    parser.add_argument("--synthetics", type=int, default=1, help="synthetic probes per configuration")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per trial")
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("-b", type=int, default=2)
    args = parser.parse_args()
    print(
        f"K={args.k} B={args.b}, prompt <= 96 tokens, one probe step; peaks in GiB ({args.decodes} decoded)"
    )
    print(
        "| model | stack | completion | decoded peaks | synthetic peaks | synthetic - decoded (medians) | "
        "decoded spread | phase (synthetic) | step s decoded / synthetic | wall s decoded / synthetic |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for stack in args.stacks.split(","):
            for length in map(int, args.lengths.split(",")):
                name = f"{model.replace(':', '_').replace('/', '_')}-{stack}-c{length}"
                decoded = []
                for i in range(args.decodes):
                    folder = args.out / f"{name}-decode{i}"
                    run(folder, model, stack, length, "decode", args.k, args.b, args.threads)
                    decoded.append(figures(folder))
                synthetic = []
                for i in range(args.synthetics):
                    folder = args.out / f"{name}-synthetic{i}"
                    run(folder, model, stack, length, "synthetic", args.k, args.b, args.threads)
                    synthetic.append(figures(folder))
                syn = {**synthetic[0], "peak": statistics.median(s["peak"] for s in synthetic)}
                peaks = [d["peak"] for d in decoded]
                middle = statistics.median(peaks)
                spread = max(peaks) - min(peaks)
                print(
                    f"| {model} | {stack} | {length} | {', '.join(f'{p:.3f}' for p in peaks)} ({decoded[0]['source']}) "
                    f"| {', '.join(format(x['peak'], '.3f') for x in synthetic)} "
                    f"| {100 * (syn['peak'] - middle) / middle:+.1f}% "
                    f"| {100 * spread / middle:.1f}% "
                    f"| {statistics.median(d['gen_peak'] for d in decoded):.3f} / "
                    f"{statistics.median(x['gen_peak'] for x in synthetic):.3f} | {syn['phase']} "
                    f"| {statistics.median(d['step_s'] for d in decoded):.1f} / {syn['step_s']:.1f} "
                    f"| {statistics.median(d['wall_s'] for d in decoded):.0f} / {syn['wall_s']:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
