"""rlsweep's benchmarks of itself: `python -m bench [NAME|TAG ...] [--smoke] [--gpu] [--refit] [--list]`.

bench/cost/ (what the harness costs: seconds, overheads), bench/accuracy/ (predictions against measured
rows), bench/gpu/ (the GPU kit and its rounds' scripts), bench/data/ (measured rows and inputs),
bench/records/ (each benchmark's latest record). A benchmark is a function registered with `benchmark`.
"""

from bench._harness import DATA, ROOT, Context, benchmark

__all__ = ["DATA", "ROOT", "Context", "benchmark"]
