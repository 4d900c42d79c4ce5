"""`rlsweep fits`: one question, one line per stack. Does this model fit GRPO with K completions per
prompt, B prompts per step and completions of this length on this card? Nothing runs.

    rlsweep fits --model Qwen/Qwen3-4B --card 16gb --k 8 --b 1 --length 1024

Each stack's answer (orchestrator/judging/answer.py, the one every verb gives) is fits / does not fit /
uncertain, the peak with its interval against the card's usable memory, what that interval is, and its
basis: measured (a trial of exactly these settings in --trials), implied by a measured trial (one that
needs at least as much memory fitted, or one that needs no more ran out of memory), simulated (the
stack's own step on meta tensors), or predicted by the memory model (fitted on --trials' rows of the
model's family, else its prior); one short line a stack, the details wrapped under it at 80 columns. A
measured row always wins over a prediction. Under the answer: under a stack that does not fit
or is uncertain, the nearest configurations that fit, each answered the same way
(orchestrator/judging/remedies.py); with --card, seconds per step on that card per stack
(orchestrator/judging/speed_step.py); the assumptions that move it, in TRL's names, and where a stack is
uncertain, the `rlsweep calibrate` line that would settle it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from orchestrator.cli._answers import print_remedies, print_speed, say
from orchestrator.cli._common import (
    config_source,
    console,
    out,
    progress,
    refused,
    simulating,
)
from orchestrator.cli._flags import (
    add_budget,
    add_card,
    add_knob,
    add_measure,
    add_set,
    add_simulate,
    add_stacks_and_trials,
    base_spec,
    card_budget,
    stacks_and_trials,
    taken,
)
from orchestrator.cli._trials import read_trials, versions_differ
from orchestrator.judging.answer import (
    SIMULATED,
    Answer,
    answer,
    answer_check,
    answer_digits,
    simulate_unmeasured,
)
from trainers import stacks

# What the verb's own flags set, and so no --set: each refused with its flag (one text on every verb).
TAKEN = taken("stack", "model", "num_generations", "batch_size", "max_completion_length", "memory_budget_gib")


def assumptions(spec) -> str:
    """The settings that move the answer, in TRL's names."""
    completions = spec.num_generations * spec.batch_size
    micro = spec.effective_micro_batch_size
    adapter = (
        f"LoRA r={spec.lora_r} ({spec.lora_target_modules})" if spec.adapter == "lora" else "full fine-tuning"
    )
    quant = {"nf4": "on a 4-bit NF4 base (QLoRA)", "none": f"on a {spec.dtype} base"}.get(
        spec.quantization, spec.quantization
    )
    return (
        f"per_device_train_batch_size {micro} completions (of {completions} a step: "
        f"gradient_accumulation_steps {completions // micro}; --set micro_batch_size=N), "
        f"max_prompt_length {spec.max_prompt_length}, {adapter} {quant}, gradient_checkpointing "
        f"{'on' if spec.gradient_checkpointing else 'off'}, generation by {spec.generation}, "
        f"num_iterations {spec.num_iterations}, optim {spec.optim}; change any with --set KNOB=VALUE"
    )


def print_answers(answers: list[Answer], digits: int) -> None:
    """Each stack's answer on one short line (stack, verdict, peak, interval, basis in one word; GiB to
    `digits` decimals), its interval named and its basis in full wrapped below it, within 80 columns."""
    width = max(len(a.stack) for a in answers)
    peaks = [a.peak_words(digits) for a in answers]
    reaches = [a.interval_words(digits) for a in answers]
    peak_width, reach_width = max(map(len, peaks)), max(map(len, reaches))
    for a, peak, reach in zip(answers, peaks, reaches, strict=True):
        out.print(
            f"  {a.stack:<{width}}  {a.verdict:<12}  {peak:>{peak_width}}  {reach:<{reach_width}}  {a.kind}",
            markup=False,
        )
        indent = "    "
        if a.interval:
            say(f"interval: {a.interval}", indent)
        basis, timing = a.basis, None
        if a.kind == SIMULATED and basis.endswith(")") and "; " in basis:  # its seconds, or read from disk
            head, _, timing = basis[:-1].rpartition("; ")
            basis = head + ")"
        say(basis, indent)
        if timing:  # on a line of its own: a cold run and a warm one wrap the rest alike
            out.print(f"{indent}({timing})", markup=False)
        if a.row is not None and a.row.get("_provenance"):  # a path: whole on its line
            out.print(f"{indent}from {a.row['_provenance']}", markup=False)
        if a.row is not None and (differ := versions_differ(a.row)):
            say(f"measured with other versions: {differ}", indent)


def cmd_fits(args: argparse.Namespace) -> int:
    """Per stack: does the model fit the card at K, B and the completion length."""
    from orchestrator.spec.sweep import SweepError
    from trainers.trial import check_value, knob_flags

    errors: list[str] = []
    try:
        budget, card_words = card_budget(args)
    except ValueError as exc:
        errors.append(str(exc))
        budget, card_words = None, None
    else:
        if budget is None:
            errors.append("name the card (--card 16gb; `rlsweep fits --help` lists them) or --budget-gib GIB")
    for knob in ("num_generations", "batch_size", "max_completion_length"):
        problem = check_value(knob, getattr(args, knob))
        if problem:
            errors.append(f"{knob_flags(knob)[-1]} {getattr(args, knob)}: {knob} {problem}")
    stack_names, bad = stacks_and_trials(args)
    errors += bad
    base = None
    try:
        base = base_spec(args.set, TAKEN)
    except SweepError as exc:  # every refused --set, each with its fix
        errors += exc.errors
    model = args.model.removeprefix("random:")
    source, unreadable = config_source(args.model) if not errors else (None, None)
    errors += [unreadable] if unreadable else []
    if base is not None and not errors:
        # the card is the trial's budget: what sizes a colocated vLLM's pool (its share of it)
        spec = dataclasses.replace(
            base, model=model, num_generations=args.num_generations, batch_size=args.batch_size, max_completion_length=args.max_completion_length,
            memory_budget_gib=budget,
        )  # fmt: skip
        errors += [p for p in spec.problems() if not p.startswith("stack")]
    if errors:
        return refused("fits", errors, "answered")
    rows, refusal = read_trials(args, "fits", "answered")
    if refusal is not None:
        return refusal
    simulate = simulating(args)
    if simulate and sys.stderr.isatty():  # live word at a terminal; piped, each answer says its seconds
        progress("simulating each stack's training step on meta tensors where no measured row answers...")
    if simulate:  # the stacks no measured row answers simulated side by side, then answered one by one
        simulate_unmeasured(
            [dataclasses.replace(spec, stack=f) for f in stack_names], rows, budget, args.measure
        )
    answers = [
        answer(dataclasses.replace(spec, stack=f), rows, budget, args.measure, simulate) for f in stack_names
    ]
    unknown = [a for a in answers if a.verdict == "unknown"]
    if len(unknown) == len(answers):
        console.print(f"fits: {model}: {unknown[0].basis}", markup=False)
        console.print("`rlsweep models` lists the models known here, with their sizes", markup=False)
        return 2
    where = card_words or f"a {budget:g} GiB budget"
    say(
        f"{model}, {spec.mode.upper()}, K={args.num_generations} completions per prompt x B={args.batch_size} prompts per step "
        f"({args.num_generations * args.batch_size} completions), completions of {args.max_completion_length} tokens, on {where}:"
    )
    if source:  # a path: whole on its line
        out.print(source, markup=False)
    print_answers(answers, answer_digits(budget))
    say(f"assumed: {assumptions(spec)}")
    say(
        "K is TRL's num_generations; B prompts per step, so B x K completions a step. An answer's interval "
        "is named under it; fits = the whole interval under the budget, does not fit = all of it above."
    )
    asked = dict(zip(stack_names, answers, strict=True))
    check = answer_check(spec, asked, rows, budget, args.measure, simulate)
    print_remedies(spec, asked, stack_names, budget, check, args.measure)
    print_speed(
        [("", [(stacks.label(f), dataclasses.replace(spec, stack=f)) for f in stack_names])], args.card
    )
    for a, stack in zip(answers, stack_names, strict=True):
        if a.verdict == "uncertain":
            target = f"--card {args.card.name}" if args.card is not None else f"--budget-gib {budget:g}"
            say(f"{a.stack} is uncertain: measure it on the card with a few synthetic probes:")
            out.print(
                f"    rlsweep calibrate --model {model} --stack {stack} {target} --k {args.num_generations} --b {args.batch_size}",
                markup=False,
            )
    return 0


def add_fits(sub) -> None:

    p = sub.add_parser(
        "fits",
        help="does a model fit GRPO at K, B and a completion length on a card: one line per stack; nothing runs",
        description=__doc__.split("\n\n")[0],
    )
    add_knob(p, "model", "a hub id (Qwen/Qwen3-4B), tiny, smollm2, random:ID or a folder", required=True)
    add_card(p)
    add_budget(p)
    add_knob(p, "num_generations", "completions per prompt (TRL's num_generations)", default=8)
    add_knob(p, "batch_size", "prompts per step", default=1)
    add_knob(p, "max_completion_length", "the longest completion in tokens", default=1024, metavar="TOKENS")
    add_set(p, sweep=False)
    add_stacks_and_trials(p, "whose rows answer first and fit the model")
    add_measure(p, "GPU (NVML)")
    add_simulate(p)
    p.set_defaults(func=cmd_fits)
