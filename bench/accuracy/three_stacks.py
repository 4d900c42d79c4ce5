"""The three stacks side by side, simulated on meta tensors (trainers/simulate): plain TRL, Liger (TRL's
use_liger_kernel: its chunked log-probs) and Unsloth, for each model and completion length at one K and B,
QLoRA nf4: torch's allocated peak, the caching allocator's reserved peak replayed from its trace, and NVML as
reserved plus the H100's context (0.76 GiB), then, per budget, the longest simulated length whose NVML fits
it. Nothing here is measured on a GPU: the simulated figures, with their H100 error ranges for TRL and
Unsloth (StackMemory.simulated_error; Liger's has none measured yet).

    python -m bench three_stacks                                  # Qwen3-4B, Qwen3-8B, Llama-3.1-8B
    python -m bench three_stacks --set models=random:Qwen/Qwen3-4B --set lengths=1024,2048
"""

from __future__ import annotations

import time

from bench import Context, benchmark

H100_CONTEXT_GIB = 0.76  # NVML less torch's reserved on every H100 row (bench/accuracy/simulate.py)
MODELS = "random:Qwen/Qwen3-4B,random:Qwen/Qwen3-8B,random:meta-llama/Llama-3.1-8B-Instruct"
STACKS = "trl,liger,unsloth"


@benchmark(
    tags=("memory", "simulate", "stacks"),
    needs="cpu",
    params={
        "models": MODELS,
        "stacks": STACKS,
        "lengths": "1024,2048,4096,8192",
        "k": 8,
        "b": 1,
        "max_prompt_length": 256,
        "num_iterations": 2,
        "budgets": "16,24",
    },
    smoke={"models": "random:Qwen/Qwen3-4B", "stacks": "trl", "lengths": "1024"},
)
def three_stacks(ctx: Context) -> dict:
    args = ctx.args
    from trainers.simulate import CannotSimulate, simulate
    from trainers.trial import TrialSpec

    lengths = [int(x) for x in args.lengths.split(",")]
    budgets = [float(x) for x in args.budgets.split(",")]
    metrics: dict = {}
    print(
        f"K={args.k} B={args.b}, prompts {args.max_prompt_length}, num_iterations {args.num_iterations}, nf4 LoRA r=16"
    )
    print("| model | stack | " + " | ".join(f"{n} tokens: allocated / NVML" for n in lengths) + " | "
          + " | ".join(f"fits {b:g} GiB up to" for b in budgets) + " | s |")  # fmt: skip
    print("|---|---|" + "---|" * (len(lengths) + len(budgets) + 1))
    for model in args.models.split(","):
        for stack in args.stacks.split(","):
            cells, nvml, started = [], {}, time.perf_counter()
            for length in lengths:
                spec = TrialSpec(stack=stack, model=model, num_generations=args.k, batch_size=args.b,
                                 max_prompt_length=args.max_prompt_length, max_completion_length=length,
                                 num_iterations=args.num_iterations, quantization="nf4", lora_r=16)  # fmt: skip
                try:
                    step = simulate(spec)
                except CannotSimulate as exc:
                    cells.append(f"- ({exc})")
                    continue
                nvml[length] = step.reserved_gib + H100_CONTEXT_GIB
                cells.append(f"{step.allocated_gib:.2f} / {nvml[length]:.2f}")
            fits = []
            for budget in budgets:
                under = 0  # the longest length that fits, every shorter one fitting too
                for n in lengths:
                    if n not in nvml or nvml[n] > budget:
                        break
                    under = n
                fits.append(f"{under:,}" if under else f"< {lengths[0]:,}")
            name = model.removeprefix("random:")
            for budget, under in zip(budgets, fits, strict=True):
                metrics[f"{name} {stack} fits {budget:g} GiB up to"] = under
            print(f"| {name} | {stack} | " + " | ".join(cells + fits)
                  + f" | {time.perf_counter() - started:.0f} |", flush=True)  # fmt: skip
    return metrics
