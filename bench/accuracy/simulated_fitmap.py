"""A fit map drawn from simulated steps, against the steps themselves: the map of a family no trial
measured (fitmap's default where the stack simulates: a handful of shapes near the budget, the memory
model's terms fitted on them), timed from an empty simulation cache, then each cell's boundary checked by
simulating that cell directly at the boundary length and one 64-token step past it (the fit's own error
where the answer turns). Simulated NVML = the replayed reserved peak + the H100's context.

    python -m bench simulated_fitmap [--set model=Qwen/Qwen3-4B] [--set card=16gb]
"""

from __future__ import annotations

import dataclasses
import os
import time

from bench import Context, benchmark


@benchmark(
    tags=("fitmap", "simulate"),
    needs="cpu",
    params={"model": "Qwen/Qwen3-4B", "card": "16gb", "stack": "trl"},
    # no smoke size: it simulates Qwen3-4B steps at every boundary (minutes on 2 cores)
)
def simulated_fitmap(ctx: Context) -> dict:
    args = ctx.args
    os.environ["RLSWEEP_CACHE"] = str(ctx.scratch / "cache")
    from orchestrator.judging.cards import card
    from orchestrator.judging.fitmap import fit_map
    from orchestrator.judging.memory._terms import FACE
    from orchestrator.words.outcome import GPU
    from trainers.simulate import simulate
    from trainers.trial import TrialSpec

    budget = card(args.card).usable_gib
    base = TrialSpec(model=args.model, stack=args.stack, learning_rate=2e-4)
    started = time.perf_counter()
    fm = fit_map(
        [], base, [args.model], [args.stack], budget, measure=GPU, simulate=True,
        progress=lambda line: print(f"  [{time.perf_counter() - started:5.1f} s] {line}", flush=True),
    )  # fmt: skip
    print(f"fit map drawn from simulated steps in {time.perf_counter() - started:.1f} s (cache empty at start); "
          f"basis: {fm.basis}")  # fmt: skip
    context = FACE["gpu"]["baseline"][0]
    print(
        f"\n| K | B | boundary (sure-OOM above) | simulated NVML at it | one step past | budget {budget:.2f} GiB |"
    )
    print("|---|---|---|---|---|---|")
    misses, holds = [], 0
    for x in fm.boundaries:
        if x.likely is None or x.likely >= x.hi:
            print(f"| {x.k} | {x.b} | {x.words()} | - | - | no boundary in {x.lo}-{x.hi} |")
            continue
        at = dataclasses.replace(base, num_generations=x.k, batch_size=x.b, max_completion_length=x.likely)
        past = dataclasses.replace(at, max_completion_length=x.likely + 64)
        nvml_at = simulate(at).reserved_gib + context
        nvml_past = simulate(past).reserved_gib + context
        right = nvml_at <= budget < nvml_past
        holds += right
        misses.append(100 * (nvml_at - budget) / budget)
        print(f"| {x.k} | {x.b} | {x.words()} | {nvml_at:.2f} | {nvml_past:.2f} | "
              f"{'boundary holds' if right else 'off'} |", flush=True)  # fmt: skip
    if misses:
        print(
            f"\nat the boundary, simulated NVML against the budget: {min(misses):+.1f}% to {max(misses):+.1f}%"
        )
    print(f"total {time.perf_counter() - started:.1f} s")
    return {
        "cells": len(fm.boundaries),
        "boundary_holds": holds,
        "boundary_checked": len(misses),
        "miss_pct_low": min(misses) if misses else None,
        "miss_pct_high": max(misses) if misses else None,
        "total_s": time.perf_counter() - started,
    }
