"""`rlsweep fitmap`: where each stack stops fitting a card, predicted in seconds; nothing runs. Under the
map: where not even the shortest completion surely fits, the nearest configurations that do (by the
map's own memory model), and with --card, seconds per step there (orchestrator/cli/_answers.py)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
from dataclasses import replace
from pathlib import Path

from orchestrator.cli._answers import print_map_remedies, print_map_speed, say
from orchestrator.cli._common import (
    add_set,
    add_simulate,
    add_stack,
    budget_gib,
    config_source,
    console,
    examples,
    out,
    progress,
    refused,
    simulating,
    stack_name,
)
from orchestrator.judging.cards import CARDS, Card, UnknownCard, card
from orchestrator.judging.memory import SIMULATED
from trainers import stacks

# The models a map shows unless --model names others: 1.5B to 14B, the sizes people plan GRPO runs with.
DEFAULT_MODELS = (
    "Qwen/Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
)


def card_arg(value: str) -> Card:
    """A registered card (argparse type), else the error naming the value, the cards and the fix."""
    try:
        return replace(card(value), typed=value)
    except UnknownCard as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_card(parser: argparse.ArgumentParser, budget_flag: str = "--budget-gib") -> None:
    """--card NAME: a card's usable memory as the budget (orchestrator/judging/cards.py)."""
    parser.add_argument(
        "--card",
        type=card_arg,
        metavar="NAME",
        help=f"judge against this card's usable memory instead of {budget_flag}: "
        f"{', '.join(CARDS)} (case-insensitive; aliases like 24gb, 4090, rtx4090, l4, a100-80gb, h100). The maker's size: a card that also drives a display has less, give {budget_flag} as docs/oom.md says",
    )


def card_budget(args: argparse.Namespace) -> tuple[float | None, str | None]:
    """(budget GiB, the card's words) of --card or --budget-gib (None, None: neither); ValueError when
    both are given, or a card with --measure RSS."""
    from orchestrator.words.outcome import RSS

    chosen = getattr(args, "card", None)
    if chosen is not None:
        if getattr(args, "budget_gib", None) is not None:
            raise ValueError(
                f"--card {chosen.name} and --budget-gib {args.budget_gib:g}: give one (the card is "
                f"{chosen.usable_gib:.2f} GiB)"
            )
        if getattr(args, "measure", None) == RSS:  # a card's memory is the GPU's, never a host's RSS
            raise ValueError(
                f"--card {chosen.name} and --measure {RSS}: a card is answered in GPU memory; drop --measure, "
                f"or give --budget-gib {chosen.usable_gib:g} to judge the host's {RSS} against that much"
            )
        return chosen.usable_gib, chosen.describe()
    return getattr(args, "budget_gib", None), None


def measured_rows(given) -> list[dict]:
    """The measured trials --trials names (cli/_trials.py: folders, trials.parquet, result files, s3://,
    mlflow+http://), each row with its provenance; ResultFileError or ServedTrialsError where a source
    cannot be used."""
    from orchestrator.cli._trials import load

    return load(given)


def read_trials(args: argparse.Namespace, verb: str, nothing: str) -> tuple[list[dict], int | None]:
    """(--trials' rows, None), or ([], 2) after printing why a source was refused (its file, rule, fix)."""
    from orchestrator.publishing.served_rows import ServedTrialsError
    from orchestrator.recording.portable import ResultFileError

    try:
        return measured_rows(args.trials), None
    except (ResultFileError, ServedTrialsError) as exc:
        return [], refused(verb, [str(exc)], nothing)


def add_stacks_and_trials(parser: argparse.ArgumentParser, trials_do: str) -> None:
    """--stack (--stacks and --framework too: every registered stack by default, the base first) and --trials
    (measured trials `trials_do`, e.g. 'to fit the model on and draw')."""
    add_stack(
        parser,
        dest="stacks",
        type=str,
        metavar="STACKS",
        default=",".join(sorted(stacks.names(), key=lambda name: name != stacks.BASE)),
        help="stacks, comma-separated; the first is the base (default: every registered stack, %(default)s; "
        "--stacks and --framework work too)",
    )
    add_trials(parser, trials_do)


def add_trials(parser: argparse.ArgumentParser, trials_do: str) -> None:
    """--trials SOURCE (repeatable; RLSWEEP_TRIALS by default): measured trials `trials_do`."""
    parser.add_argument(
        "--trials",
        action="append",
        metavar="SOURCE",
        help=f"measured trials {trials_do}: a trials.parquet, a sweep's output dir, a result file of "
        "`rlsweep export` or a folder of them, a folder of trial folders with trial.json "
        "(bench/data/h100-2026-11-26), any of these on s3://, or mlflow+http://HOST:PORT/EXPERIMENT; "
        "give it again for more; default $RLSWEEP_TRIALS (comma-separated)",
    )


def stacks_and_trials(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(--stack as registered names, the errors of --stack and --trials, each naming its fix)."""
    stack_names, errors = [], []
    for stack in args.stacks.split(","):
        try:
            stack_names.append(stack_name(stack.strip()))
        except argparse.ArgumentTypeError as exc:
            errors.append(f"--stack {args.stacks}: {exc}")
    from orchestrator.cli._trials import source_errors

    errors += source_errors(args.trials)
    return stack_names, errors


# What the map's own flags set, and so no --set: each with the flag to use instead.
TAKEN = {
    "stack": "the stacks are --stack: give them there (e.g. --stack trl,unsloth)",
    "model": "the models are --model: give each there (e.g. --model Qwen/Qwen2.5-3B-Instruct)",
    "num_generations": "K is the map's axis --k: give its values there (e.g. --k 4,8,16)",
    "batch_size": "B is the map's axis --b: give its values there (e.g. --b 1,2)",
    "max_completion_length": "the map searches the completion length: bound it with --min-length and "
    "--max-length",
    "memory_budget_gib": "the budget is --budget-gib or --card: give it there",
}


def base_spec(sets: list[str], taken: dict[str, str] | None = None):
    """The TrialSpec every configuration of the map shares: TrialSpec's defaults with --set's knobs, each
    checked by the trainer's own rules (SweepError with every problem, its rule and its fix). taken: the
    knobs the verb's own flags set (default the map's, TAKEN), each with the flag to use instead."""
    from orchestrator.spec.load import trial_set_errors
    from orchestrator.spec.sweep import SweepError
    from trainers.trial import TrialSpec

    values: dict = {}
    errors = trial_set_errors(sets, values, TAKEN if taken is None else taken)
    if errors:
        raise SweepError(errors)
    return TrialSpec(**values)


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


def axis_values(flag: str, text: str, knob: str) -> list[int]:
    """--k / --b's comma-separated values, each checked by the rule of its knob (ValueError naming the
    flag, the value, the rule and the fix)."""
    from trainers.trial import check_value

    values, errors = [], []
    for item in text.split(","):
        try:
            value = int(item)
        except ValueError:
            errors.append(f"{flag} {text}: {item.strip()!r} is not a whole number; give e.g. {flag} 4,8")
            continue
        problem = check_value(knob, value)
        if problem:
            errors.append(f"{flag} {text}: {knob} {problem}")
        values.append(value)
    if errors:
        raise ValueError("\n".join(errors))
    return values


def length_errors(lo: int, hi: int) -> list[str]:
    """--min-length and --max-length: completion lengths by max_completion_length's rule, lo <= hi."""
    from trainers.trial import check_value

    errors = [
        f"{flag} {value}: max_completion_length {problem}"
        for flag, value in (("--min-length", lo), ("--max-length", hi))
        if (problem := check_value("max_completion_length", value))
    ]
    if not errors and lo > hi:
        errors.append(f"--min-length {lo} is above --max-length {hi}; give a range, e.g. --min-length 128")
    return errors


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
        base = dataclasses.replace(base_spec(args.set), memory_budget_gib=budget)
    except SweepError as exc:
        errors += exc.errors
    ks = bs = []
    for flag, text, knob in (("--k", args.k, "num_generations"), ("--b", args.b, "batch_size")):
        try:
            values = axis_values(flag, text, knob)
        except ValueError as exc:
            errors += str(exc).splitlines()
        else:
            ks, bs = (values, bs) if flag == "--k" else (ks, values)
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

        args.out.mkdir(parents=True, exist_ok=True)
        tag = _slug(fm.card or f"{budget:g}GiB")
        for model in fm.models:
            path = fit_map_plot(fm, model, args.out / f"fitmap_{tag}_{_slug(model)}.png")
            out.print(f"Map: {path}", markup=False)
    if not getattr(args, "after_probes", False):  # rlsweep calibrate times its own run
        out.print(f"({time.monotonic() - started:.1f} s, nothing ran)")
    return 0


def speed_line(chosen: Card, pairs) -> str:
    """The decode speed on the card named with --card (orchestrator.judging.card_speed.decode_line)."""
    from orchestrator.judging.card_speed import decode_line, speed_of

    return decode_line(chosen.name, speed_of(chosen.typed or chosen.name, chosen.name), pairs)


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
    from orchestrator.judging.memory import MEASURES

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
    p.add_argument("--budget-gib", type=budget_gib, help="the memory to fit in, GiB (instead of --card)")
    p.add_argument(
        "--model", action="append", help=f"a model (repeatable); default {', '.join(DEFAULT_MODELS)}"
    )
    p.add_argument("--k", default=",".join(map(str, KS)), help="K values, comma-separated")
    p.add_argument("--b", default=",".join(map(str, BS)), help="B values, comma-separated")
    p.add_argument("--min-length", type=int, default=LENGTHS[0], help="shortest completion searched")
    p.add_argument("--max-length", type=int, default=LENGTHS[1], help="longest completion searched")
    add_set(p, sweep=False)
    add_stacks_and_trials(p, "to fit the model on and draw")
    p.add_argument("--measure", choices=MEASURES, help="which peak; default GPU with --card")
    add_simulate(p)
    p.add_argument(
        "--out", type=Path, default=Path("outputs/fitmap"), help="where the PNGs go (default outputs/fitmap)"
    )
    p.add_argument("--no-plot", action="store_true", help="print the table only")
    p.set_defaults(func=cmd_fitmap)
