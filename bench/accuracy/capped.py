"""One configuration near a card's budget, simulated and measured capped and uncapped: does the caching
allocator's replay under the card's capacity (trainers/simulate/_allocator.py) read what the card reads?

The simulation: torch's allocated peak, the uncapped replay's reserved peak, `needed` (the least the
step runs in: live tensors plus the fragmentation no release removes) and the reserved it holds under
the budget's capacity for torch (the budget less the context), each + the context as NVML would read it.
The measurement (--trials, folders of `rlsweep trial` outputs): each trial.json's status, budget, NVML
and torch reserved peaks. bench/gpu_round4.sh's `capped` item runs the configuration with the budget
(memory_budget_gib: trainers/device.py caps torch's allocator there) and without, then this.

    python bench/bench_capped.py --stack trl --model random:Qwen/Qwen2.5-3B-Instruct -k 16 -b 1 \\
        --length 576 --budget-gib 16 [--trials DIR ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CONTEXT_GIB = 0.76  # the H100's NVML less torch's reserved on every row (bench/bench_simulate.py)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="trl")
    parser.add_argument("--model", default="random:Qwen/Qwen2.5-3B-Instruct")
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("-b", type=int, default=1)
    parser.add_argument("--length", type=int, default=576, help="max_completion_length")
    parser.add_argument("--prompt", type=int, default=256, help="max_prompt_length")
    parser.add_argument("--prompt-tokens", type=int, default=34, help="the synthetic prompts' tokens")
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--budget-gib", type=float, default=16.0)
    parser.add_argument("--trials", nargs="*", default=[], help="folders holding trial.json files")
    args = parser.parse_args()
    from trainers.simulate import simulate
    from trainers.trial import TrialSpec

    spec = TrialSpec(
        model=args.model, framework=args.stack, num_generations=args.k, batch_size=args.b,
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
