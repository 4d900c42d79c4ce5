"""The suite's environment, the same under pytest-xdist's workers as in one process:
- answers from the memory model unless a test asks for a simulated step (each simulation costs seconds;
  the tests of simulated answers pass --simulate or simulate=True);
- no COLUMNS: xdist's workers are given COLUMNS=80, which the verbs' tables honour (orchestrator/cli/
  _common.py); the tests of widths set it themselves."""

import os

os.environ.setdefault("RLSWEEP_SIMULATE", "0")
os.environ.pop("COLUMNS", None)
