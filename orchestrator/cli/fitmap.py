"""`rlsweep fitmap`: where each stack stops fitting a card, predicted in seconds; nothing runs. Under the
map: where not even the shortest completion surely fits, the nearest configurations that do (by the
map's own memory model), and with --card, seconds per step there (orchestrator/cli/_answers.py)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
from pathlib import Path

from orchestrator.cli._answers import print_map_remedies, print_map_speed, say
from orchestrator.cli._common import (
    config_source,
    console,
    examples,
    knob_arg,
    out,
    progress,
    refused,
    simulating,
)
from orchestrator.cli._flags import (
    add_budget,
    add_card,
    add_knob,
    add_length_range,
    add_measure,
    add_output_dir,
    add_set,
    add_simulate,
    add_stacks_and_trials,
    axis_values,
    base_spec,
    card_budget,
    length_errors,
    stacks_and_trials,
    taken,
)
from orchestrator.cli._trials import read_trials
from orchestrator.judging.memory import SIMULATED
from trainers import stacks

# The models a map shows unless --model names others: 1.5B to 14B, the sizes people plan GRPO runs with.
DEFAULT_MODELS = (
    "Qwen/Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
)


# What the map's own flags set, and so no --set: each refused with its flag (one text on every verb).
TAKEN = taken("stack", "model", "num_generations", "batch_size", "max_completion_length", "memory_budget_gib")


def map_assumptions(base) -> str:
    """The settings every cell of a map shares that move its answer, in TRL's names."""
    micro = (
        f"per_device_train_batch_size {base.micro_batch_size} completions"
        if base.micro_batch_size
        else "per_device_train_batch_size = B x K (all of a step's completions at once, no accumulation)"
    )
    adapter = (
        f"LoRA r={base.lora_r} ({base.lora_target_modules})" if base.adapter == "lora" else "full fine-tuning"
    )
    return (
        f"{micro}, max_prompt_length {base.max_prompt_length}, {adapter} on a {base.quantization} base, "
        f"gradient_checkpointing {'on' if base.gradient_checkpointing else 'off'}, generation by "
        f"{base.generation}, num_iterations {base.num_iterations}, optim {base.optim}; change any with --set KNOB=VALUE"
    )


def unknown_models(fm) -> dict[str, str]:
    """The map's models it can say nothing of because of the model itself (no config here): why."""
    why = {}
    for model in fm.models:
        cells = [x for x in fm.boundaries if x.model == model]
        if cells and all(x.unknown is not None and x.unknown.startswith("model:") for x in cells):
            why[model] = cells[0].unknown
    return why


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "x"


def cmd_fitmap(args: argparse.Namespace) -> int:
    """Per model and stack, the longest completion that fits the card at each K and B, from the memory
    model alone (fitted on --trials where given); a table, and one PNG per model."""
    from orchestrator.judging.fitmap import fit_map
    from orchestrator.spec.sweep import SweepError
    from orchestrator.words.outcome import GPU

    started = time.monotonic()
    try:
        budget, card_words = card_budget(args)
    except ValueError as exc:
        console.print(str(exc), markup=False)
        return 2
    if budget is None:
        console.print(
            "fitmap: name the card (--card 24GB; rlsweep fitmap --help lists them) or --budget-gib GIB"
        )
        return 2
    errors: list[str] = []
    try:
        # the card is each cell's budget: what sizes a colocated vLLM's pool (its share of it)
        base = dataclasses.replace(base_spec(args.set, TAKEN), memory_budget_gib=budget)
    except SweepError as exc:
        errors += exc.errors
    axes = {}
    for knob in ("num_generations", "batch_size"):
        try:
            axes[knob] = axis_values(getattr(args, knob), knob)
        except ValueError as exc:
            errors += str(exc).splitlines()
    ks, bs = axes.get("num_generations", []), axes.get("batch_size", [])
    errors += length_errors(args.min_length, args.max_length)
    stack_names, bad = stacks_and_trials(args)
    errors += bad
    if errors:
        return refused("fitmap", errors, "drawn")
    rows, refusal = read_trials(args, "fitmap", "drawn")
    if refusal is not None:
        return refusal
    models = args.model or list(DEFAULT_MODELS)
    fm = fit_map(
        rows, base, models, stack_names, budget, ks, bs, (args.min_length, args.max_length),
        measure=args.measure or (GPU if args.card is not None or not rows else None), unmeasured=GPU,
        card=args.card.name if args.card is not None else None, simulate=simulating(args), progress=progress,
    )  # fmt: skip
    unknown = unknown_models(fm)
    if unknown:  # each reason names its fix: the fetch command, a stand-in, the nearest names
        console.print(f"fitmap: {len(unknown)} model(s) it knows nothing of, nothing drawn:", markup=False)
        for model, why in unknown.items():
            console.print(f"  --model {model}: {why}", markup=False)
        console.print("`rlsweep models` lists the models it knows, with their sizes", markup=False)
        return 2
    if all(x.unknown is not None for x in fm.boundaries):
        console.print("fitmap: no cell of the map can be predicted, nothing drawn:", markup=False)
        for reason in dict.fromkeys(x.unknown for x in fm.boundaries):
            console.print(f"  {reason}", markup=False)
        return 2
    from orchestrator.cli._trials import sources

    named = ", ".join(sources(args.trials))
    source = f"{len(rows)} trial(s) of {named}" if rows else "the prior (no measured trials)"
    simulated = [f"{stacks.label(f)} {m}" for (f, m), said in fm.basis.items() if said.startswith(SIMULATED)]
    if simulated:
        source = (
            f"each stack's own step simulated on meta tensors ({', '.join(simulated)}; the interval: the "
            "simulator's error on GPU rows and its fit's)" + (f", and {source}" if rows else "")
        )
    where = card_words or f"a {budget:g} GiB budget"
    out.print(f"Fit map on {where}; peak {fm.measure} predicted from {source}", markup=False)
    if simulated:  # the one answer at a point simulates that shape itself (judging.answer)
        say(
            "The map is the memory model fitted on those steps at a few shapes: a cell near its boundary can "
            "read otherwise than `rlsweep fits` at that K, B and length, which simulates that configuration's "
            "own step (the answer predict, solve and run --dry-run give too)"
        )
    out.print(f"assumed: {map_assumptions(base)}", markup=False)
    for line in filter(None, (config_source(model)[0] for model in fm.models)):
        out.print(line, markup=False)
    _print_frame(fm.table(), str)
    out.print(
        "Each cell: the longest completion (tokens) whose predicted peak fits, then (surely fits up to – "
        "surely out of memory above), the 90% prediction interval's high and low ends against the budget. "
        f"Lengths {args.min_length}-{args.max_length} searched. K is TRL's num_generations (completions per "
        "prompt), B the prompts per step: B x K completions a step.",
        markup=False,
    )
    for line in fm.against_base():  # where each stack fits longer completions than the first, and shorter
        out.print(line, markup=False)
    reasons: dict[str, list] = {}
    for x in fm.boundaries:
        if x.unknown is not None:
            reasons.setdefault(x.unknown, []).append(x)
    why = [
        f"unknown ({len(cells)} cell(s), e.g. {cells[0].stack} {cells[0].model} K={cells[0].k} "
        f"B={cells[0].b}): {reason}"
        for reason, cells in reasons.items()
    ]
    for line in why:
        out.print(line, markup=False)
    for (stack, model), basis in fm.basis.items():
        if basis == "prior":
            target = f"--card {args.card.name}" if args.card is not None else f"--budget-gib {budget:g}"
            out.print(
                f"{stack} {model}: no measured trial of its family; the prior predicts. To measure it "
                f"on this card: rlsweep calibrate --model {model} --stack {stack} {target}",
                markup=False,
            )
    print_map_remedies(fm, base, budget, args.min_length)
    if args.card is not None:
        print_map_speed(fm, base, args.card, ks, bs)
    if fm.measured:
        out.print(f"Measured ({len(fm.measured)} trial(s) of these settings; the rest is predicted):")
        _print_frame(
            fm.measured_table(),
            lambda v: "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v),
        )
        from orchestrator.cli._trials import provenance_lines

        for line in provenance_lines(rows, {p.trial_key for p in fm.measured}):
            out.print(line, markup=False)
    if fm.not_drawn:
        out.print(f"{fm.not_drawn} measured trial(s) of other models, stacks or settings are not on this map")
    if not args.no_plot:
        from orchestrator.views.report._plots import fit_map_plot

        args.output_dir.mkdir(parents=True, exist_ok=True)
        tag = _slug(fm.card or f"{budget:g}GiB")
        for model in fm.models:
            path = fit_map_plot(fm, model, args.output_dir / f"fitmap_{tag}_{_slug(model)}.png")
            out.print(f"Map: {path}", markup=False)
    if not getattr(args, "after_probes", False):  # rlsweep calibrate times its own run
        out.print(f"({time.monotonic() - started:.1f} s, nothing ran)")
    return 0


def _print_frame(frame, cell) -> None:
    """A map's table within the terminal's width (orchestrator.views.tables): model ids shortened to
    what tells them apart where the full ones do not fit, a column the same in every row said above it."""
    from orchestrator.views.tables import Column, lay_out, print_table

    columns = [
        Column(
            str(c), right=c in ("K", "B"), name=c == "model", keep=c in ("K", "B"),
            short=str(c).replace("longest completion (sure–OOM above)", "tokens (sure–OOM)"),
        )
        for c in frame.columns
    ]  # fmt: skip
    rows = [[cell(v) for v in values] for values in frame.itertuples(index=False)]
    laid = lay_out(out, columns, rows, show_edge=False)
    if laid.same:
        out.print(laid.same_line(), markup=False)
    print_table(out, laid.table)


def add_fitmap(sub) -> None:
    from orchestrator.judging.fitmap import BS, KS, LENGTHS

    p = sub.add_parser(
        "fitmap",
        help="where each stack stops fitting a card: the longest completion per model, K and B, predicted; "
        "nothing runs",
        **examples(
            "rlsweep fitmap --card 24gb",
            "rlsweep fitmap --card 4090 --stack TRL,Unsloth --model Qwen/Qwen2.5-7B-Instruct --k 4,8,16",
            "rlsweep fitmap --budget-gib 16 --b 1 --set lora_r=8 --set quantization=none",
            "rlsweep fitmap --card h100 --trials bench/data/h100-2026-11-26 --model Qwen/Qwen2.5-3B-Instruct",
        ),
    )
    add_card(p)
    add_budget(p)
    add_knob(
        p, "model", action="append", type=knob_arg("model"),
        help=f"a model (repeatable); default {', '.join(DEFAULT_MODELS)}",
    )  # fmt: skip
    add_knob(p, "num_generations", "K values, comma-separated", axis=True, default=",".join(map(str, KS)))
    add_knob(p, "batch_size", "B values, comma-separated", axis=True, default=",".join(map(str, BS)))
    add_length_range(p, *LENGTHS)
    add_set(p, sweep=False)
    add_stacks_and_trials(p, "to fit the model on and draw")
    add_measure(p, "GPU with --card")
    add_simulate(p)
    add_output_dir(p, "where the PNGs go (default: %(default)s)", type=Path, default=Path("outputs/fitmap"))
    p.add_argument("--no-plot", action="store_true", help="print the table only")
    p.set_defaults(func=cmd_fitmap)
