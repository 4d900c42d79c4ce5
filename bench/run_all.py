"""Run every benchmark in bench/ one after another (`make bench`); figures go to docs/benchmarks.md by hand,
with the command that made them."""

import subprocess
import sys
from pathlib import Path

here = Path(__file__).parent
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name}", flush=True)
    if subprocess.run([sys.executable, str(script)], cwd=here.parent).returncode:
        failed.append(script.name)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
