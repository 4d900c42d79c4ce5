"""The time-to-verdict benchmark's floor (bench/cost/time_to_verdict.py): the least phased / every-step
ratio any phasing could read, were it to spend nothing on trials that do not fit and stop each fitting
trial at the earliest step the settled stop can (its probe steps, then MIN_CYCLES cycles)."""

from bench.cost.time_to_verdict import earliest_settle, floor
from orchestrator.judging.intervals import MIN_CYCLES


def row(status: str, wall_s: float, trainer_s: float | None, steps: int) -> dict:
    return {"status": status, "wall_s": wall_s, "trainer_s": trainer_s, "steps_completed": steps,
            "probe_steps": 1, "num_iterations": 2}  # fmt: skip


def test_the_earliest_settled_step_is_the_probe_then_min_cycles_cycles_of_num_iterations_steps():
    assert earliest_settle(row("completed", 1.0, 1.0, 10)) == 1 + MIN_CYCLES * 2


def test_below_the_earliest_settled_step_the_floor_is_the_fitting_trials_whole_share():
    rows = [row("completed", 12.0, 2.0, 10), row("oom", 3.0, 1.0, 1), row("pruned", 0.0, None, 0)]
    assert floor(rows) == 12.0 / 15.0


def test_past_it_a_fitting_trials_steps_count_only_up_to_the_earliest_settled_step():
    rows = [row("completed", 20.0, 12.0, 60), row("oom", 4.0, 1.0, 1)]
    expected = (20.0 - 12.0 + 12.0 * (1 + MIN_CYCLES * 2) / 60) / 24.0
    assert abs(floor(rows) - expected) < 1e-12
