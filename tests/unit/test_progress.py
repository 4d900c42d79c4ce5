"""Progress when output is not a terminal: a start line, a heartbeat per running trial at a steady
interval with its elapsed time, steps done and ETA, an end line, and no counts repeated."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from orchestrator.views.progress import Progress, duration
from trainers.trial import TrialSpec


def test_a_long_trial_gets_heartbeats_with_steps_done_and_an_eta():
    console = Console(record=True, width=200, force_terminal=False)
    spec = TrialSpec(trial_key="slow", max_steps=10)
    with Progress(1, console, heartbeat=0.2) as progress:
        progress.on_start(spec)
        time.sleep(0.5)
        before_steps = console.export_text(clear=False)
        for n, step_s in ((1, 9.0), (2, 2.0), (3, 4.0)):
            progress.on_step(spec, {"step": n, "probe": n == 1, "step_s": step_s, "rss_peak_gib": 0.5})
        time.sleep(0.5)
        progress.on_end(spec, {"status": "completed", "status_detail": "10 steps"}, [])
    lines = console.export_text().splitlines()
    assert lines[0] == "start [1/1] slow"
    assert re.search(r"^  slow: running \d+ s, no step yet \(starting the trainer", before_steps, re.M)
    # ETA: 7 steps left at the median of the steps after the probe (2 and 4 s): 21 s.
    beats = [line for line in lines if line.startswith("  slow: running") and "step 3/10" in line]
    assert beats and all(line.endswith(f"ETA {duration(7 * 3.0)}") for line in beats)
    assert lines[-1] == "[1/1] slow: completed 10 steps"


def test_a_terminal_gets_no_heartbeat_lines():
    console = Console(record=True, width=200, force_terminal=True)
    with Progress(1, console, heartbeat=0.1) as progress:
        progress.on_start(TrialSpec(trial_key="quiet", max_steps=2))
        time.sleep(0.4)
    assert not re.search(r"quiet: running", console.export_text())


def test_durations_read_in_seconds_minutes_and_hours():
    assert [duration(s) for s in (45, 200, 3900)] == ["45 s", "3 min 20 s", "1 h 05 min"]


def test_a_phase_counts_its_own_trials_even_those_an_earlier_phase_finished():
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    progress = Progress(2, console)
    first, second = TrialSpec(trial_key="a", max_steps=4), TrialSpec(trial_key="b", max_steps=4)
    progress.begin("memory", 2)
    for spec in (first, second):
        progress.on_start(spec)
        progress.on_end(spec, {"status": "completed", "status_detail": "fits: 2 memory-phase steps"}, [])
    progress.begin("speed", 1)  # only `b` fitted... and runs again
    progress.on_start(second)
    assert "1 running, 1 finished, 0 pending" in progress.render().title
    progress.on_end(second, {"status": "completed", "status_detail": "4 steps"}, [])
    lines = console.file.getvalue().splitlines()
    assert lines == [
        "start [memory 1/2] a",
        "[memory 1/2] a: completed fits: 2 memory-phase steps",
        "start [memory 2/2] b",
        "[memory 2/2] b: completed fits: 2 memory-phase steps",
        "start [speed 1/1] b",
        "[speed 1/1] b: completed 4 steps",
    ]
    assert progress.counts() == {"completed": 2}
