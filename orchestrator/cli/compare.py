"""`rlsweep compare`: two sweeps' trials side by side."""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli._common import console, out


def cmd_compare(args: argparse.Namespace) -> int:
    from orchestrator.views.compare import compare_outputs

    try:
        result = compare_outputs(args.dir_a, args.dir_b, console=None if args.csv or args.json else out)
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    if args.csv:
        result.to_csv(sys.stdout, index=False)
    elif args.json:
        print(result.to_json(orient="records", indent=1))
    return 0


def add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="two sweeps' trials side by side, matched on their settings, with B/A ratios; "
        "unmatched trials with the settings that separate them",
    )
    p.add_argument("dir_a", help="sweep output dir A (holds trials.parquet)")
    p.add_argument("dir_b", help="sweep output dir B; ratios are B / A")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="print the comparison as CSV (one row per trial)")
    form.add_argument("--json", action="store_true", help="print the comparison as JSON records")
    p.set_defaults(func=cmd_compare)
