"""The flags several verbs share, each declared once with one meaning: --card, --budget-gib, --stack,
--output-dir, and the trial knobs a verb takes as its own flags (K, B, the completion length, the model),
spelled as the knob declares them (trainers.trial.knob_flags: --num-generations and its short form --k).

Every verb adds these from here, so a flag reads and is refused alike wherever it appears, and a knob a
verb's own flag sets is refused in --set with one text (taken). VERB_OWN lists each verb's flags of
its own; tests/unit/test_flag_vocabulary.py fails on a verb's flag that none of these owns. OLD names the
spellings kept for one release: hidden from help, each noted on stderr with the flag that replaces it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from orchestrator.cli._common import budget_gib, knob_arg, stack_name
from orchestrator.judging.cards import CARDS, Card, UnknownCard, card
from trainers import stacks
from trainers.trial import KNOBS, knob_flags, knob_letter

# Old spellings, parsed for one release (hidden from help, a note on stderr): each with its flag.
OLD = {
    "--framework": "--stack",
    "--stacks": "--stack",
    "--framework-dtype": "--stack-dtype",
    "--out": "--output-dir",
    "--model-name": "--model",
}

# The flags this module adds, beside the knobs' own (knob_flags).
SHARED = (
    "--card",
    "--budget-gib",
    "--stack",
    "--output-dir",
    "--set",
    "--trials",
    "--simulate",
    "--no-simulate",
    "--measure",
)

# Each verb's flags of its own (the vocabulary's last part): settings of that verb alone.
VERB_OWN = {
    "run": ("--dry-run", "--no-report"),
    "validate": ("--list",),
    "predict": ("--explain", "--trial"),
    "fitmap": ("--no-plot",),
    "calibrate": ("--probes", "--no-plot", "--session", "--no-session"),
    "sync-mlflow": ("--tracking-uri",),
    "report": ("--base-stack",),
    "compare": ("--csv", "--json"),
    "export": ("-o",),
    "gpu-check": ("--timeout", "--modes"),
    "submit": (
        "--address",
        "--tracking-uri",
        "--no-wait",
        "--status",
        "--stop",
        "--attach",
        "--slurm",
        "--partition",
        "--nodes",
        "--gpus-per-node",
        "--cpus-per-node",
        "--time",
        "--account",
        "--sbatch",
        "--dry-run",
    ),  # fmt: skip
    "solve": ("--headroom-gib", "--maximize", "--values", "--from", "--to"),
    "score": ("--task", "--seed", "--output"),
    "trial": ("--stop-on",),
}
# The guard's flags (_common.add_guard_flags), on every verb that runs trials without a sweep file.
GUARD_FLAGS = ("--timeout-s", "--memory-margin-gib", "--sample-hz")


def vocabulary(verb: str) -> set[str]:
    """Every flag `verb` may have: -h/--help, the shared ones, every knob's (and its --no- form: a bool
    knob's flag), the guard's, the old spellings and the verb's own."""
    knobs = {flag for name in KNOBS for flag in knob_flags(name)}
    knobs |= {"--no-" + flag[2:] for flag in knobs}
    shared = {*SHARED, *length_range_flags()}
    return {"-h", "--help", *shared, *knobs, *GUARD_FLAGS, *OLD, *VERB_OWN.get(verb, ())}


def unowned_flags(verb: str, parser: argparse.ArgumentParser) -> list[str]:
    """The flags of `verb`'s parser the vocabulary does not own, in the parser's order."""
    owned = vocabulary(verb)
    return [flag for action in parser._actions for flag in action.option_strings if flag not in owned]


def _note_old_spellings(action: argparse.Action) -> None:
    """Make `action` say, before it acts, that an old spelling it was given by is now its flag."""
    base = type(action)

    class Noted(base):
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string in OLD:
                print(
                    f"rlsweep: {option_string} is now {OLD[option_string]}; the old spelling works until the "
                    "next release",
                    file=sys.stderr,
                )
            super().__call__(parser, namespace, values, option_string)

    Noted.__name__ = base.__name__
    action.__class__ = Noted


def _add(parser, flags: tuple[str, ...], **kwargs) -> argparse.Action:
    """`flags` as one argument; each old spelling of its first flag parses as that argument (a required
    flag given by it counts as given, an append appends) but stays out of help: it is in the parser's
    table of option strings, not in the argument's own."""
    action = parser.add_argument(*flags, **kwargs)
    olds = [old for old, new in OLD.items() if new == flags[0]]
    for old in olds:
        parser._option_string_actions[old] = action
    if olds:
        _note_old_spellings(action)
    return action


def add_set(parser: argparse.ArgumentParser, sweep: bool = True) -> None:
    """--set of a verb that reads a sweep file (any setting of it), or, sweep=False, of one that builds its
    trials from flags (trial knobs only): each help's examples are ones that verb takes."""
    if sweep:
        metavar = "KEY=VALUE"
        help = (
            "override a setting (dotted key, YAML value), e.g. --set memory.budget_gib=8 or "
            "--set grid.num_generations=[2,4] or --set max_steps=3 (a bare trial knob goes to fixed)"
        )
    else:
        metavar = "KNOB=VALUE"
        help = (
            "a trial setting (YAML value; repeatable), e.g. --set lora_r=8 or --set quantization=none "
            "or --set learning_rate=2e-4; the verb's own flags set the rest"
        )
    parser.add_argument("--set", action="append", default=[], metavar=metavar, help=help)


def add_simulate(parser: argparse.ArgumentParser) -> None:
    """--simulate / --no-simulate: where a family has no measured trial, answer from its stack's own step
    simulated on meta tensors (default: on, unless RLSWEEP_SIMULATE=0)."""
    parser.add_argument(
        "--simulate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="where no measured trial answers, run each stack's own training step on meta tensors (no GPU; "
        "seconds a shape, kept on disk) and answer from it, basis 'simulated'; --no-simulate answers from "
        "the memory model's prior (default: simulate, unless RLSWEEP_SIMULATE=0)",
    )


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


def add_measure(parser, default: str) -> None:
    """--measure: which peak a prediction is of (GPU memory or the host's RSS); default: `default`'s words."""
    from orchestrator.judging.memory import MEASURES

    parser.add_argument("--measure", choices=MEASURES, help=f"which peak to predict; default {default}")


def add_knob(parser, name: str, help: str | None = None, axis: bool = False, **kwargs) -> None:
    """Trial knob `name`'s flag into args.<name> (--num-generations and --k): one value as the trial holds
    it (judged later by the knob's rules), or, axis, comma-separated values (axis_values reads them)."""
    kwargs.setdefault("type", str if axis else knob_arg(name, int if KNOBS[name].type == "int" else str))
    kwargs.setdefault("metavar", knob_letter(name).upper() + (",..." if axis else ""))
    text = help or KNOBS[name].metadata["help"]
    if "default" in kwargs and kwargs["default"] is not None:
        text += " (default: %(default)s)"
    _add(
        parser,
        knob_flags(name),
        dest=name,
        help=text,
        **kwargs,
    )


def length_range_flags() -> tuple[str, str]:
    """The completion length's range flags, from its short form: --min-length and --max-length."""
    word = knob_flags("max_completion_length")[-1].removeprefix("--")
    return f"--min-{word}", f"--max-{word}"


def add_length_range(parser, lo: int, hi: int, what: str = "searched") -> None:
    """A range of completion lengths (max_completion_length): --min-length and --max-length."""
    low, high = length_range_flags()
    parser.add_argument(
        low,
        dest="min_length",
        type=int,
        default=lo,
        help=f"shortest completion {what} (default: %(default)s)",
    )
    parser.add_argument(
        high,
        dest="max_length",
        type=int,
        default=hi,
        help=f"longest completion {what} (default: %(default)s)",
    )


def add_stack(parser, dest: str = "stack", many: bool = False, **kwargs) -> None:
    """--stack into `dest`: one stack as the trial holds it (`--stack TRL` is trl), or, many, a comma list
    (the first the base; default every registered stack, the base first). --stacks and --framework: OLD."""
    if many:
        kwargs.setdefault("default", ",".join(sorted(stacks.names(), key=lambda name: name != stacks.BASE)))
        kwargs.setdefault("type", str)
        kwargs.setdefault("metavar", "STACKS")
        kwargs.setdefault(
            "help",
            "stacks, comma-separated; the first is the base (default: every registered stack, %(default)s)",
        )
    kwargs.setdefault("type", knob_arg("stack"))
    kwargs.setdefault("metavar", "STACK")
    kwargs.setdefault("help", f"the stack: {', '.join(stacks.names())}")
    _add(parser, ("--stack",), dest=dest, **kwargs)


# --card's words on a verb that takes --budget-gib too.
BUDGET_OR_CARD = (
    ", instead of --budget-gib (the maker's size: a card that also drives a display has less, give "
    "--budget-gib as docs/oom.md says)"
)


def card_arg(value: str) -> Card:
    """A registered card (argparse type), else the error naming the value, the cards and the fix."""
    try:
        return dataclasses.replace(card(value), typed=value)
    except UnknownCard as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_card(parser, also: str = BUDGET_OR_CARD, **kwargs) -> None:
    """--card NAME: the card asked about; its usable memory is the budget each answer is judged against
    (orchestrator/judging/cards.py). also: what else the verb takes from it (default: --budget-gib's
    place). kwargs: add_argument's (type: a Card, card_arg, unless given)."""
    kwargs.setdefault("type", card_arg)
    _add(
        parser, ("--card",), metavar="NAME",
        help=f"the card asked about: its usable memory is the budget each answer is judged against{also}; "
        f"{', '.join(CARDS)} (case-insensitive; aliases like 24gb, 4090, rtx4090, l4, a100-80gb, h100)",
        **kwargs,
    )  # fmt: skip


def add_budget(parser, also: str = "", **kwargs) -> None:
    """--budget-gib: the memory budget in GiB each answer is judged against, instead of --card."""
    _add(
        parser,
        ("--budget-gib",),
        type=budget_gib,
        help=f"the memory budget in GiB to judge against, instead of --card{also}",
        **kwargs,
    )


def add_output_dir(parser, help: str, **kwargs) -> None:
    """--output-dir: the folder the verb writes (--out: OLD)."""
    _add(parser, ("--output-dir",), help=help, **kwargs)


# The flag that sets each knob a verb may set by its own flags, where it is not the knob's own, and an
# example value of each (else the knob's default).
_TAKEN_FLAG = {"stack": "--stack", "memory_budget_gib": "--budget-gib or --card"}
_EXAMPLE = {
    "stack": "--stack trl",
    "model": "--model Qwen/Qwen2.5-3B-Instruct",
    "memory_budget_gib": "--card 24gb",
}


def taken(*names: str) -> dict[str, str]:
    """For a verb whose own flags set knobs `names`: each knob's refusal in --set, naming its flag and an
    example, one text on every verb."""
    from trainers.trial import knob_default

    said = {}
    for name in names:
        flags = knob_flags(name)
        example = _EXAMPLE.get(name) or f"{flags[-1]} {knob_default(name)}"
        letter = f" ({knob_letter(name)})" if knob_letter(name) != name else ""
        said[name] = (
            f"{name}{letter} is set by {_TAKEN_FLAG.get(name) or ' or '.join(flags)}: give it there instead of --set "
            f"(e.g. {example})"
        )
    return said


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


def add_stacks_and_trials(parser: argparse.ArgumentParser, trials_do: str) -> None:
    """--stack (a comma list: every registered stack by default, the base first) and --trials
    (measured trials `trials_do`, e.g. 'to fit the model on and draw')."""
    add_stack(parser, dest="stacks", many=True)
    add_trials(parser, trials_do)


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


def base_spec(sets: list[str], taken: dict[str, str]):
    """The TrialSpec every configuration of the map shares: TrialSpec's defaults with --set's knobs, each
    checked by the trainer's own rules (SweepError with every problem, its rule and its fix). taken: the
    knobs the verb's own flags set (taken()), each with the flag to use instead."""
    from orchestrator.spec.load import trial_set_errors
    from orchestrator.spec.sweep import SweepError
    from trainers.trial import TrialSpec

    values: dict = {}
    errors = trial_set_errors(sets, values, taken)
    if errors:
        raise SweepError(errors)
    return TrialSpec(**values)


def axis_values(text: str, knob: str) -> list[int]:
    """An axis flag's comma-separated values (--k 4,8), each checked by the rule of its knob (ValueError
    naming the flag, the value, the rule and the fix)."""
    from trainers.trial import check_value, knob_flags

    flag = knob_flags(knob)[-1]

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

    low, high = length_range_flags()
    errors = [
        f"{flag} {value}: max_completion_length {problem}"
        for flag, value in ((low, lo), (high, hi))
        if (problem := check_value("max_completion_length", value))
    ]
    if not errors and lo > hi:
        errors.append(f"{low} {lo} is above {high} {hi}; give a range, e.g. {low} 128")
    return errors
