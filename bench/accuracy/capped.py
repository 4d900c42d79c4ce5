"""One configuration near a card's budget, simulated and measured capped and uncapped: does the caching
allocator's replay under the card's capacity (trainers/simulate/_allocator.py) read what the card reads?

The simulation: torch's allocated peak, the uncapped replay's reserved peak, `needed` (the least the
step runs in: live tensors plus the fragmentation no release removes) and the reserved it holds under
the budget's capacity for torch (the budget less the context), each + the context as NVML would read it.
The measurement (--trials, folders of `rlsweep trial` outputs): each trial.json's status, budget, NVML
and torch reserved peaks. bench/gpu/round4.sh's `capped` item runs the configuration with the budget
(memory_budget_gib: trainers/device.py caps torch's allocator there) and without, then this.

    python -m bench capped --set stack=trl --set model=random:Qwen/Qwen2.5-3B-Instruct --set k=16 --set b=1 \\
        --set length=576 --set budget_gib=16 [--set trials=DIR ...]

Parameters: length (max_completion_length), prompt (max_prompt_length), prompt_tokens (the synthetic
prompts' tokens), trials (folders holding trial.json files).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import Context, benchmark

CONTEXT_GIB = 0.76  # the H100's NVML less torch's reserved on every row (bench/accuracy/simulate.py)


@benchmark(
    tags=("memory", "simulate"),
    needs="cpu",
    params={
        "stack": "trl",
        "model": "random:Qwen/Qwen2.5-3B-Instruct",
        "k": 16,
        "b": 1,
        "length": 576,
        "prompt": 256,
        "prompt_tokens": 34,
        "iterations": 1,
        "budget_gib": 16.0,
        "trials": [],
    },
    smoke={},
)
def capped(ctx: Context) -> dict:
    args = ctx.args
    from trainers.simulate import simulate
    from trainers.trial import TrialSpec

    spec = TrialSpec(
        model=args.model, stack=args.stack, num_generations=args.k, batch_size=args.b,
        max_prompt_length=args.prompt, max_completion_length=args.length, num_iterations=args.iterations,
        quantization="nf4", lora_r=16, lora_alpha=32, lora_dropout=0.05, learning_rate=2e-4,
    )  # fmt: skip
    step = simulate(spec, args.prompt_tokens)
    capacity = args.budget_gib - CONTEXT_GIB
    capped = step.under_cap(capacity)
    print(
        f"{args.stack} {args.model} K={args.k} B={args.b} {args.length} tokens, budget {args.budget_gib:g} GiB:"
    )
    print(f"| figure | simulated GiB | + context {CONTEXT_GIB} |")
    print("|---|---|---|")
    for name, value in (
        ("allocated", step.allocated_gib),
        ("reserved, uncapped", step.reserved_gib),
        ("needed (fails below)", step.needed_gib),
        (f"reserved under {capacity:.2f} for torch", capped),
    ):
        cells = ("runs out", "-") if value is None else (f"{value:.3f}", f"{value + CONTEXT_GIB:.3f}")
        print(f"| {name} | {' | '.join(cells)} |")
    found = sorted(p for folder in args.trials for p in Path(folder).rglob("trial.json"))
    if found:
        print("\n| trial | budget GiB | status | NVML peak | torch reserved peak |")
        print("|---|---|---|---|---|")
    for path in found:
        record = json.loads(path.read_text())
        outcome, budget = record.get("outcome", {}), record.get("config", {}).get("memory_budget_gib")
        nvml, reserved = outcome.get("peak_device_gib"), outcome.get("peak_torch_reserved_gib")
        print(
            f"| {path.parent.name} | {budget or 'none'} | {outcome.get('status')} | "
            f"{'-' if nvml is None else f'{nvml:.3f}'} | {'-' if reserved is None else f'{reserved:.3f}'} |"
        )
    return {
        "allocated_gib": step.allocated_gib,
        "reserved_uncapped_gib": step.reserved_gib,
        "needed_gib": step.needed_gib,
        "reserved_capped_gib": capped,
        "trials_read": len(found),
    }
