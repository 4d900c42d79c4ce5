"""Benchmarks of what the harness costs: seconds, overheads, scaling."""
