"""Benchmarks of predictions against measured rows: memory, speed, durations, verdicts."""
