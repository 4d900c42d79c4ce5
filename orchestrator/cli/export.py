"""`rlsweep export OUTPUT_DIR [-o FILE]`: a sweep's trials as one portable result file to share.

One Parquet file, one row per trial: the card, the versions, the settings, the status, the peaks, the
step times and the verdicts (trials.parquet's columns, docs/schema.md), its schema's version in the
file's metadata. No host name, user name, path, environment value or token goes in
(orchestrator/recording/portable.py). `--trials FILE` (or a folder of such files, or s3://) reads it in
`fits` and `fitmap`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import out, refused


def cmd_export(args: argparse.Namespace) -> int:
    from orchestrator.recording.portable import SCHEMA_NAME, SCHEMA_VERSION, ResultFileError, write_export
    from orchestrator.words.storage import URI, filesystem_and_path, output_location

    location = output_location(args.output_dir)
    ledger = location / "trials.parquet"
    if not ledger.exists():
        return refused(
            "export", [f"{args.output_dir}: holds no trials.parquet; give a sweep's output folder "
                       "(the --output-dir of `rlsweep run`, `solve` or `calibrate`)"], "written",
        )  # fmt: skip
    target = Path(args.o) if args.o else Path(f"{location.name or 'trials'}.results.parquet")
    if URI.match(str(args.o or "")):
        return refused(
            "export", [f"-o {args.o}: write the file here, then copy it (e.g. `aws s3 cp`)"], "written"
        )
    if target.exists() and target.is_dir():
        return refused("export", [f"-o {target}: is a folder; give a file name, e.g. -o {target}/trials.parquet"],
                       "written")  # fmt: skip
    from orchestrator.recording.portable import read_rows

    fs, where = filesystem_and_path(ledger)
    try:
        if fs is None:
            rows = read_rows(Path(where), str(ledger))
        else:
            with fs.open_input_file(where) as f:
                rows = read_rows(f, str(ledger))
    except ResultFileError as exc:
        return refused("export", [str(exc)], "written")
    n = write_export(rows, target)
    out.print(f"wrote {target}: {n} trial(s), schema {SCHEMA_NAME}/{SCHEMA_VERSION}", markup=False)
    out.print(
        f"anyone can ask with it: rlsweep fits --trials {target} --model M --card NAME ...", markup=False
    )
    return 0


def add_export(sub) -> None:
    p = sub.add_parser(
        "export",
        help="a sweep's trials as one portable Parquet file to share (no hosts, users, paths or tokens)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("output_dir", help="a sweep's output dir (holds trials.parquet), local or s3://")
    p.add_argument(
        "-o", metavar="FILE", help="the file to write (default ./<output dir's name>.results.parquet)"
    )
    p.set_defaults(func=cmd_export)
