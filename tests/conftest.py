"""The suite's environment: answers from the memory model unless a test asks for a simulated step (each
simulation costs seconds; the tests of simulated answers pass --simulate or simulate=True)."""

import os

os.environ.setdefault("RLSWEEP_SIMULATE", "0")
