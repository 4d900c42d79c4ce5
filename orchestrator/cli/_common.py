"""Shared pieces of the verbs: the consoles, the guard flags, the argparse types (a stack, a budget)."""

from __future__ import annotations

import argparse
import math
import os
import sys

from rich.console import Console

from orchestrator.words.settings import GUARD as GUARD
from orchestrator.words.settings import GuardSettings
from tasks.names import did_you_mean
from trainers import stacks
from trainers.trial import canonical, check_value

# Piped to a file or CI log, rich would assume 80 columns and fold the tables: give them room, unless
# COLUMNS says how wide (rich reads it where the width is left unset).
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").strip().isdigit() else 150


console = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


out = Console(highlight=False, soft_wrap=True, width=_WIDTH)


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
    """The guard settings of `rlsweep trial`'s flags (probe steps left unset: the shared default; the
    trial's own, probe_steps_within's, is the spec's)."""
    return GuardSettings(
        budget_gib=args.memory_budget_gib,
        margin_gib=args.memory_margin_gib,
        sample_hz=args.sample_hz,
        timeout_s=args.timeout_s,
        probe_steps=GUARD.probe_steps if args.probe_steps is None else args.probe_steps,
    )


def config_source(model: str) -> tuple[str | None, str | None]:
    """(where model's architecture was read, a line for the output; None for the bundled ones), or
    (None, why its config.json cannot be read here: what was tried and the fix, e.g. the fetch command)."""
    from trainers.models import model_config

    try:
        found = model_config(model)
    except ValueError as exc:
        return None, f"--model {model}: {str(exc).removeprefix('model: ')}"
    if found.where == "bundled":
        return None, None
    c = found.config
    shape = f"{c.get('model_type')}, {c.get('num_hidden_layers')} layers x {c.get('hidden_size')} hidden"
    return f"{model}: architecture ({shape}) read from {found.where}", None


def refused(verb: str, errors: list[str], nothing: str) -> int:
    """Print a verb's refused input to stderr, every error on its own line, and return exit code 2."""
    console.print(f"{verb}: {len(errors)} error(s), nothing {nothing}:", markup=False)
    for error in errors:
        console.print(f"  {error}", markup=False)
    return 2


def stack_name(value: str) -> str:
    """A registered stack's name in any case (argparse type; `TRL` is trl), else the error with the
    nearest names."""
    name = canonical("stack", value)
    if name not in stacks.STACKS:
        raise argparse.ArgumentTypeError(f"unknown stack {value!r}; {did_you_mean(value, stacks.STACKS)}")
    return name


def knob_arg(name: str, kind=str):
    """The argparse type of a flag that sets trial knob `name`: the text read by `kind`, then as the trial
    holds it (trainers.trial.canonical: `--stack TRL` is trl); the knob's own rules judge it later."""

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


def simulating(args: argparse.Namespace) -> bool:
    from orchestrator.judging.memory._simulated import enabled

    return enabled(getattr(args, "simulate", None))


def progress(line: str) -> None:
    """Live progress of long work, on stderr (the answer stays on stdout)."""
    console.print(line, markup=False)


def simulated_for(args: argparse.Namespace, specs, budget_gib: float | None) -> list[dict]:
    """Rows of `specs`' steps simulated on meta, for a verb whose probes run on this host: only where its
    probes measure a GPU's memory (on a CPU host they measure RSS, which no simulation gives), and none
    with --no-simulate. Each family that cannot be simulated is said, and falls back to the prior."""
    from orchestrator.judging.memory import MemoryModel, simulated_rows

    if not simulating(args):
        return []
    measure = MemoryModel.fit([]).measure
    rows, why_not = simulated_rows(specs, (), measure, progress, budget_gib)
    for family, why in why_not.items():
        progress(f"not simulated: {family}: {why}")
    return rows


def card_unmeasurable(args: argparse.Namespace, verb: str, predict: str) -> str | None:
    """Why `verb`'s probes cannot measure the card --card names on this host (None where they can, or no
    card is named): on a host NVML finds no GPU on, a probe measures the host's RSS, not the card's
    memory. The reason names the commands that would answer: the verb on the card's machine, `predict`
    (a verb that predicts without probes, e.g. `rlsweep fits --card 4090 --model M`) here, or --budget-gib
    to measure this host's RSS under the card's size."""
    from trainers.nvml import local_gpus

    chosen = getattr(args, "card", None)
    if chosen is None or local_gpus():
        return None
    typed = chosen.typed or chosen.name
    return (
        f"--card {typed}: this host has no GPU (NVML finds none), so {verb}'s probes would measure this "
        f"host's RSS, not the memory of the card ({typed}: {chosen.name}, {chosen.usable_gib:g} GiB), and a probe for a GPU card cannot run here. Run "
        f"the same command on the machine with the card; here, `{predict}` predicts without probes, or "
        f"--budget-gib {chosen.usable_gib:g} instead of --card measures this host's RSS under that budget"
    )
