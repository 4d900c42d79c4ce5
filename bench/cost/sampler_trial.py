"""What the memory sampler costs a real trial: the same trial through the supervisor with the sampler
at `--hz` (default 20) and with it all but off (one look every 100 s: the start-up sample only),
alternated ABBA in one run so a drift in the machine hits both sides alike.

Figure: median step time over steps 2..N (step 1 pays for warm-up) with / without - 1, in percent,
with each trial's median beside it (the run-to-run spread to read the ratio against).

    python -m bench sampler_trial [--set stack=trl] [--set model=random:Qwen/Qwen2.5-0.5B-Instruct]
        [--set steps=8] [--set pairs=2] [--set hz=20]     # pairs: on/off pairs, alternated ABBA
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench import Context, benchmark
from orchestrator.running.supervisor import run_trial
from orchestrator.words.settings import GuardSettings
from trainers.record import STEP
from trainers.trial import TrialSpec

OFF_HZ = 0.01  # one sample at start-up, none after: the sampler's thread sleeps through the trial


def one_trial(spec: TrialSpec, hz: float, folder: Path) -> dict:
    result = run_trial(
        spec, trial_dir=folder, guard=GuardSettings(sample_hz=hz, probe_steps=spec.probe_steps)
    )
    steps = [s[STEP.step_s] for s in result.steps[1:] if s.get(STEP.step_s) is not None]
    return {
        "hz": hz,
        "status": result.status,
        "step_s_median": statistics.median(steps) if steps else None,
        "step_s": steps,
        "samples": (result.peak or {}).get("samples"),
    }


@benchmark(
    tags=("sampler", "overhead", "trial"),
    needs="cpu",
    params={
        "stack": "trl",
        "model": "random:Qwen/Qwen2.5-0.5B-Instruct",
        "quantization": "nf4",
        "steps": 8,
        "pairs": 2,
        "hz": 20.0,
    },
)
def sampler_trial(ctx: Context) -> dict:
    args = ctx.args

    root = ctx.scratch
    spec = TrialSpec(
        stack=args.stack,
        model=args.model,
        quantization=args.quantization,
        max_steps=args.steps,
        probe_steps=1,
        trial_key="sampler-cost",
    )
    runs: list[dict] = []
    for pair in range(args.pairs):
        for on in (False, True) if pair % 2 == 0 else (True, False):
            hz = args.hz if on else OFF_HZ
            runs.append(one_trial(spec, hz, root / f"{pair}-{'on' if on else 'off'}"))
            print(json.dumps(runs[-1]), flush=True)
    on = [r["step_s_median"] for r in runs if r["hz"] == args.hz and r["step_s_median"] is not None]
    off = [r["step_s_median"] for r in runs if r["hz"] == OFF_HZ and r["step_s_median"] is not None]
    result = {
        "spec": {"stack": args.stack, "model": args.model, "steps": args.steps},
        "runs": runs,
        "step_s_on_median": statistics.median(on) if on else None,
        "step_s_off_median": statistics.median(off) if off else None,
    }
    if on and off:
        result["slowdown_pct"] = (result["step_s_on_median"] / result["step_s_off_median"] - 1) * 100
        print(
            f"step time with the {args.hz:g} Hz sampler {result['step_s_on_median']:.3f} s vs "
            f"{result['step_s_off_median']:.3f} s without -> {result['slowdown_pct']:+.2f} %; "
            f"per trial on {on}, off {off}"
        )
    return result
