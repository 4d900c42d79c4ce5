"""`pip install ARGS` for `make setup`, without the conflict block a healthy CPU install prints.

On a host without GPU the Makefile installs unsloth and unsloth_zoo with --no-deps (their declared
dependencies are CUDA wheels), and a later `pip install` whose packages they depend on ends with pip's
"ERROR: pip's dependency resolver does not currently take into account ..." block listing those
undeclared dependencies, though pip exits 0 and the install is healthy. This drops that block when
each of its lines is "unsloth[-zoo] VERSION requires DEP, which is not installed."; any other line of
the block is printed as pip wrote it and the install fails (exit 1). Pip's own exit code is kept.
"""

import re
import subprocess
import sys
from collections.abc import Iterable
from typing import TextIO

CONFLICT_HEADER = "ERROR: pip's dependency resolver does not currently take into account"
# pip's line for a dependency it did not find (pip/_internal/commands/install.py, _warn_about_conflicts)
UNSLOTH_MISSING = re.compile(r"^unsloth(-zoo)? \S+ requires .+, which is not installed\.$")
# any line of the block: "NAME VERSION requires REQUIREMENT, ..."
CONFLICT_LINE = re.compile(r"^\S+ \S+ requires ")


def filter_conflicts(lines: Iterable[str], out: TextIO) -> bool:
    """Write `lines` to `out` less a conflict block made only of unsloth's undeclared dependencies;
    False when a conflict block held anything else (that block is written whole)."""
    healthy = True
    block: list[str] = []

    def flush() -> None:
        nonlocal healthy
        if block and not all(UNSLOTH_MISSING.match(line.rstrip("\n")) for line in block[1:]):
            healthy = False
            out.writelines(block)
        block.clear()

    for line in lines:
        if line.startswith(CONFLICT_HEADER):
            flush()
            block.append(line)
        elif block and CONFLICT_LINE.match(line):
            block.append(line)
        else:
            flush()
            out.write(line)
    flush()
    return healthy


def run(command: list[str], out: TextIO = sys.stdout) -> int:
    """Run `command` (pip), its stdout and stderr filtered to `out`: pip's exit code when not 0, else
    1 when a conflict block held anything but unsloth's undeclared dependencies, else 0."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        healthy = filter_conflicts(proc.stdout, out)
    if proc.returncode:
        return proc.returncode
    if not healthy:
        out.write("pip reported dependency conflicts other than unsloth's undeclared dependencies (above)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run([sys.executable, "-m", "pip", "install", *sys.argv[1:]]))
