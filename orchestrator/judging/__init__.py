"""Judging trials: stability verdicts, pruning, the memory model and solve."""
