"""`rlsweep gpu-check`: the stacks against each other on this GPU. This module reads the verb's options and
prints the table; orchestrator/running/gpu_check.py runs the check (its docstring says what it runs) and
writes results.json and results.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from orchestrator.cli._flags import add_output_dir


def parse_modes(text: str) -> tuple[str, ...]:
    """`--modes grpo,gspo` as a tuple, or argparse's error naming the value, the rule and the fix."""
    from orchestrator.running.gpu_check import MODES
    from trainers.trial import canonical

    modes = tuple(dict.fromkeys(canonical("mode", m.strip()) for m in text.split(",") if m.strip()))
    wrong = [m for m in modes if m not in MODES]
    if wrong or not modes:
        raise argparse.ArgumentTypeError(
            f"{text!r}: each mode must be one of {', '.join(MODES)}, comma-separated (e.g. --modes grpo,gspo)"
        )
    return modes


def build_table(rows: list) -> Table:
    """The check's rows (running.gpu_check.Row) as the table it prints, its notes as the caption."""
    from orchestrator.running.gpu_check import HEADERS, cells, notes, title

    table = Table(title=title(rows))
    for header in HEADERS:
        table.add_column(header, justify="left" if header in ("stack", "mode", "status") else "right")
    for r in rows:
        table.add_row(*cells(r))
    table.caption = "\n".join(notes(rows))
    return table


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from orchestrator.running.gpu_check import check_specs, gpu_problem, run_check
    from orchestrator.words.outcome import COMPLETED

    console = Console()
    problem = gpu_problem()
    if problem:
        console.print(
            f"gpu-check compares the stacks on an NVIDIA GPU: {problem}. Run it on a GPU host; "
            "on this one, `make sweep` trains a real model on CPU (sweeps/cpu-learn.yaml)."
        )
        return 2
    output_dir = Path(args.output_dir)
    rows = run_check(check_specs(output_dir, args.modes), args.timeout, console, output_dir)
    console.print(build_table(rows))
    console.print(f"results: {output_dir / 'results.json'}, {output_dir / 'results.md'}")
    return 0 if all(r.status == COMPLETED for r in rows) else 1


def add_gpu_check(sub) -> None:
    from orchestrator.running.gpu_check import COMPARED_MODES_ITERATIONS, DEFAULT_MODES, TRIAL_TIMEOUT_S

    p = sub.add_parser(
        "gpu-check",
        help="the registered stacks (TRL, Unsloth), GRPO vs GSPO on this GPU: one table (needs a GPU)",
    )
    add_output_dir(p, "where trials and results go (default: %(default)s)", default="outputs/gpu-check")
    p.add_argument(
        "--timeout", type=float, default=TRIAL_TIMEOUT_S, help="seconds per trial (default: %(default)g)"
    )
    p.add_argument(
        "--modes",
        type=parse_modes,
        default=DEFAULT_MODES,
        help="comma-separated modes to run for each stack (default: grpo; grpo,gspo runs both with "
        f"num_iterations={COMPARED_MODES_ITERATIONS})",
    )
    p.set_defaults(func=cmd_gpu_check)
