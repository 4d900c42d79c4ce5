"""Shared pieces of the verbs: the consoles, --set and the guard flags."""

from __future__ import annotations

import argparse
import math
import sys

from rich.console import Console

from orchestrator.words.settings import GUARD as GUARD
from orchestrator.words.settings import GuardSettings
from tasks.names import did_you_mean
from trainers import stacks
from trainers.trial import canonical, check_value

# Piped to a file or CI log, rich would assume 80 columns and fold the tables: give them room.
_WIDTH = None if sys.stdout.isatty() else 150


console = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


out = Console(highlight=False, soft_wrap=True, width=_WIDTH)


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


# A verb's examples, shown under its --help (epilog=): each line one a user can paste.
def examples(*lines: str) -> dict:
    """add_parser's keywords for an 'examples:' section listing `lines`, kept as written."""
    return {
        "epilog": "examples:\n" + "\n".join(f"  {line}" for line in lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def add_guard_flags(parser: argparse.ArgumentParser, timeout_help: str) -> None:
    """The guard's flags of a verb that runs trials without a sweep file (trial_guard reads them)."""
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=GUARD.timeout_s,
        help=f"{timeout_help} (default: {GUARD.timeout_s:g})",
    )
    parser.add_argument(
        "--memory-margin-gib",
        type=float,
        default=GUARD.margin_gib,
        help=f"budget guard allowance over the budget in GiB (default: {GUARD.margin_gib:g})",
    )
    parser.add_argument(
        "--sample-hz",
        type=float,
        default=GUARD.sample_hz,
        help=f"memory sampling rate (default: {GUARD.sample_hz:g})",
    )


def trial_guard(args: argparse.Namespace) -> GuardSettings:
    """The guard settings of `rlsweep trial`'s flags."""
    return GuardSettings(
        budget_gib=args.memory_budget_gib,
        margin_gib=args.memory_margin_gib,
        sample_hz=args.sample_hz,
        timeout_s=args.timeout_s,
        probe_steps=args.probe_steps,
    )


def refused(verb: str, errors: list[str], nothing: str) -> int:
    """Print a verb's refused input, every error on its own line, and return exit code 2."""
    out.print(f"{verb}: {len(errors)} error(s), nothing {nothing}:", markup=False)
    for error in errors:
        out.print(f"  {error}", markup=False)
    return 2


def stack_name(value: str) -> str:
    """A registered stack's name in any case (argparse type; `TRL` is trl), else the error with the
    nearest names."""
    name = canonical("framework", value)
    if name not in stacks.STACKS:
        raise argparse.ArgumentTypeError(f"unknown stack {value!r}; {did_you_mean(value, stacks.STACKS)}")
    return name


# The stack's flag on every verb that takes one: --stack first (help and errors name it), then the other
# spellings it is taken as (--framework: the trial knob's name).
STACK_FLAGS = ("--stack", "--stacks", "--framework")


def add_stack(parser: argparse.ArgumentParser, dest: str = "framework", **kwargs) -> None:
    """--stack (STACK_FLAGS) into `dest`; kwargs: add_argument's (default: one stack, as the trial holds it,
    `--stack TRL` is trl, judged by the knob's rules)."""
    kwargs.setdefault("type", knob_arg("framework"))
    kwargs.setdefault("metavar", "STACK")
    kwargs.setdefault("help", f"the stack: {', '.join(stacks.names())} (--stacks and --framework work too)")
    parser.add_argument(*STACK_FLAGS, dest=dest, **kwargs)


def knob_arg(name: str, kind=str):
    """The argparse type of a flag that sets trial knob `name`: the text read by `kind`, then as the trial
    holds it (trainers.trial.canonical: `--framework TRL` is trl); the knob's own rules judge it later."""

    def read(text: str):
        return canonical(name, kind(text))

    read.__name__ = getattr(kind, "__name__", name)  # argparse's "invalid int value" names the kind
    return read


def budget_gib(value: str) -> float:
    """A memory budget in GiB given on a command line (argparse type): a finite number above 0, by the
    rule of the trial's own budget (memory_budget_gib); else the error naming the value, rule and fix."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number; give the budget in GiB, e.g. 16"
        ) from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(
            f"must be a finite number, got {value}; give the budget in GiB, e.g. 16"
        )
    problem = check_value("memory_budget_gib", number)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem} (GiB, e.g. 16)")
    return number
