"""Simulated against measured: torch's allocated peak of a TRL or Unsloth step simulated on meta tensors
(trainers/simulate), the caching allocator's reserved peak replayed from its trace, and NVML as reserved
plus what the stack's processes hold outside torch's allocator (trainers/simulate/_outside.py: the
measured terms; the unmeasured ones' bound is printed after the table), against the H100 rows that measured them
(bench/data/h100-2026-11-26 and h100-2026-11-27, trials.csv: the stack's completed rows with
peak_torch_allocated_gib or peak_nvml_gib known), one row per stack and distinct configuration, with the seconds each simulation took on this host. Nothing
is fitted but that constant.

    python -m bench simulate                           # both stacks, each model as simulate() runs it
    python -m bench simulate --set stacks=unsloth      # one
    python -m bench simulate --set whole=true          # and every layer simulated: the layer cut's own error

A row's `steps` says what it measured: the largest of 3-10 steps, or one first step. Every trainer of
these rounds let torch create AdamW's moments inside the first `optimizer.step()` (rlsweep's trainers
allocate them before step 1 since: trainers/optimizer_state.py), so each configuration is simulated as
they ran (`--set optimizer_state=lazy`, the default here): one step against a first-step row, num_iterations
+ 1 against a row of several steps (up to the first that generates with the moments live). A row whose
`optimizer_state_primed` is true came from a trainer that made them before step 1, and is simulated so
(one step, the moments made before it), as the CLI's answers are; `--set optimizer_state=before` simulates
every row so.
"""

from __future__ import annotations

import csv
import time

from bench import ROOT, Context, benchmark

ROUNDS = ("bench/data/h100-2026-11-26/trials.csv", "bench/data/h100-2026-11-27/trials.csv")
STACKS = ("trl", "unsloth")
KEY = ("stack", "model", "K", "B", "max_prompt", "max_completion", "num_iterations", "quantization", "lora_r")


# Every row simulated, one line each (`out`): what bench/accuracy/false_fits.py judges the intervals on.
SIMULATED_ROWS = "bench/data/simulated-h100.csv"
OUT_COLUMNS = (
    "round", "stack", "model", "family", "K", "B", "max_prompt", "max_completion", "num_iterations", "quantization",
    "lora_r", "budget_gib", "status", "steps", "peak_nvml_gib", "peak_torch_reserved_gib", "peak_torch_allocated_gib",
    "optimizer_state", "simulated_allocated_gib", "simulated_reserved_gib", "simulated_needed_gib", "context_gib",
)  # fmt: skip


def rows(files=ROUNDS, stacks=STACKS, statuses=("completed",)) -> dict[tuple, list[dict]]:
    """The rows of `stacks` in these trials.csv files that measured torch's allocated peak or NVML's and
    ended in one of `statuses`, by stack and configuration."""
    found: dict[tuple, list[dict]] = {}
    for name in files:
        with (ROOT / name).open(newline="") as handle:
            for row in csv.DictReader(handle):
                measured = row["peak_torch_allocated_gib"] or row["peak_nvml_gib"]
                if row["stack"] in stacks and row["status"] in statuses and measured:
                    found.setdefault(tuple(row[k] for k in KEY), []).append(row)
    return found


def family(model: str) -> str | None:
    """The model's architecture family: its config's model_type."""
    from trainers.models import model_config

    return model_config(model).config.get("model_type")


@benchmark(
    tags=("memory", "simulate"),
    needs="cpu",
    params={
        "prompt_tokens": 34,  # the rows' prompts: 34 tokens each
        "rows": list(ROUNDS),  # trials.csv files of GPU rounds
        "stacks": list(STACKS),
        "whole": False,  # also simulate every layer of each model: the layer cut's own error, both times
        "optimizer_state": "lazy",  # AdamW's moments made in the first step (as the rows' trainers did) or before it
        "out": "",  # also write every row, completed and out of memory, simulated, to this CSV (SIMULATED_ROWS)
        "limit": 0,  # simulate only the first N configurations (0: every one)
    },
    choices={"optimizer_state": ("lazy", "before"), "stacks": STACKS},
    name="simulate",
    smoke={"stacks": ["trl"], "limit": 1},
)
def simulate_rows(ctx: Context) -> dict:
    """Simulated against measured: a step simulated on meta tensors against the H100 rows' peaks."""
    args = ctx.args
    from trainers.simulate import simulate
    from trainers.simulate._outside import counted_gib, outside, possible_gib
    from trainers.trial import TrialSpec

    print(
        "| stack | model | K | B | completion | iterations | allocated: simulated / measured (steps) | error "
        "| reserved: replayed / measured | error | NVML: reserved + outside torch / measured | error | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    errors: dict[tuple[str, str], list[float]] = {}
    written: list[dict] = []
    statuses = ("completed", "oom") if args.out else ("completed",)
    unmeasured: dict[str, tuple[float, list[str]]] = {}
    for key, measured in sorted(
        rows(args.rows, args.stacks, statuses).items(),
        key=lambda kv: (kv[0][0], kv[0][1], int(kv[0][2]) * int(kv[0][3]), int(kv[0][5]), int(kv[0][6])),
    )[: args.limit or None]:
        stack, model, k, b, prompt, completion, iterations, quantization, lora_r = key
        spec = TrialSpec(
            model=model, stack=stack, num_generations=int(k), batch_size=int(b), max_prompt_length=int(prompt),
            max_completion_length=int(completion), num_iterations=int(iterations), quantization=quantization,
            lora_r=int(lora_r), lora_alpha=2 * int(lora_r), lora_dropout=0.05, learning_rate=2e-4,
        )  # fmt: skip
        completed = [r for r in measured if r["status"] == "completed"]
        best = max(completed or measured, key=lambda r: int(r.get("steps") or 0))  # the steadiest row
        steps = int(best.get("steps") or 0)
        primed = (
            best.get("optimizer_state_primed", "").lower() == "true"
        )  # its trainer made them before step 1
        state = "before" if primed or args.optimizer_state == "before" else "lazy" if steps > 1 else "first"
        started = time.perf_counter()
        with ctx.timed("simulate"):
            step = simulate(spec, args.prompt_tokens, cache=False, optimizer_state=state)
        seconds = time.perf_counter() - started
        if args.whole:
            started = time.perf_counter()
            whole = simulate(spec, args.prompt_tokens, cache=False, whole=True, optimizer_state=state)
            print(
                f"  every layer: allocated {whole.allocated_gib:.3f} (cut {100 * (step.allocated_gib / whole.allocated_gib - 1):+.2f}%), "
                f"reserved {whole.reserved_gib:.3f} (cut {100 * (step.reserved_gib / whole.reserved_gib - 1):+.2f}%), "
                f"{time.perf_counter() - started:.1f} s against the cut's {seconds:.1f} s",
                flush=True,
            )
        kind = f"largest of {steps}" if steps > 1 else "first step"
        terms = outside(spec)
        nvml = step.reserved_gib + counted_gib(terms)
        unmeasured[stack] = possible_gib(terms) - counted_gib(terms), [t.name for t in terms if t.gib is None]
        for row in measured:
            written.append({
                **{k: row.get(k, "") for k in OUT_COLUMNS}, "family": family(model), "optimizer_state": state,
                "simulated_allocated_gib": f"{step.allocated_gib:.4f}", "simulated_reserved_gib": f"{step.reserved_gib:.4f}",
                "simulated_needed_gib": f"{step.needed_gib:.4f}", "context_gib": counted_gib(terms),
            })  # fmt: skip
        if not completed:
            continue
        cells = []
        for name, simulated, column in (
            ("allocated", step.allocated_gib, "peak_torch_allocated_gib"),
            ("reserved", step.reserved_gib, "peak_torch_reserved_gib"),
            ("nvml", nvml, "peak_nvml_gib"),
        ):
            value = float(best[column]) if best.get(column) else None
            error = None if value is None else 100 * (simulated - value) / value
            if error is not None:
                errors.setdefault((stack, name), []).append(error)
            said = f"{simulated:.3f} / {'-' if value is None else f'{value:.3f}'}"
            cells += [said + (f" ({kind}, round {best['round']})" if name == "allocated" else ""),
                      "-" if error is None else f"{error:+.1f}%"]  # fmt: skip
        print(
            f"| {stack} | {model.removeprefix('random:')} | {k} | {b} | {completion} | {iterations} | {' | '.join(cells)} "
            f"| {seconds:.1f} |",
            flush=True,
        )
    if args.out:
        with (ROOT / args.out).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, OUT_COLUMNS)
            writer.writeheader()
            writer.writerows(
                sorted(
                    written,
                    key=lambda r: (
                        r["stack"],
                        r["round"],
                        r["model"],
                        int(r["K"]) * int(r["B"]),
                        int(r["max_completion"]),
                    ),
                )
            )
    for (stack, name), values in errors.items():
        if values:
            print(
                f"{stack} {name}: mean |error| {sum(map(abs, values)) / len(values):.1f}%, range {min(values):+.1f}% to "
                f"{max(values):+.1f}% over {len(values)} configurations"
            )
    for stack, (bound, names) in unmeasured.items():
        if names:
            print(
                f"{stack}: outside torch, not measured and not counted: {', '.join(names)} (at most {bound:.2f} GiB here)"
            )
    metrics: dict = {"simulated_s": ctx.timings.get("simulate")}
    for (stack, name), values in errors.items():
        metrics[f"{stack} {name} mean_abs_error_pct"] = (
            sum(map(abs, values)) / len(values) if values else None
        )
    return metrics
