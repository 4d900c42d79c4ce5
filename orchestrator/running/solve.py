"""`rlsweep solve`'s probe trials: orchestrator/judging/solve.py's search given real trials, each run
through the same supervised path as `rlsweep trial` (no Ray) under the budget's guard and recorded like
a sweep's (trials.parquet, steps/, one folder per trial under trials/), so a second run on the same
output dir measures no value twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from orchestrator.judging.answer import answer as memory_answer
from orchestrator.judging.answer import answer_digits
from orchestrator.judging.memory import Forecast
from orchestrator.judging.solve import (
    SYMBOLS,
    Answer,
    Measured,
    SolveRequest,
    gib_text,
    measured_from_row,
    search,
)
from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.running.supervisor import run_trial
from orchestrator.words.outcome import STOPPED
from orchestrator.words.runlock import output_dir_lock
from trainers.events import STEP


def run_recorded(spec, recorder: Recorder, out, guard, verb: str, run=run_trial):
    """One trial of `verb` (solve, calibrate) through the supervisor into out/trials/<key>, its steps and
    its row written by `recorder` as they come; a Ctrl-C leaves its row `stopped` for a resumed run.
    run: run_trial, or a stand-in with its keywords (orchestrator/running/session.py in_session)."""
    recorder.start(spec.trial_key)
    try:
        result = run(
            spec,
            trial_dir=out / "trials" / spec.trial_key,
            guard=guard,
            on_event=lambda kind, row: recorder.step(spec.trial_key, row) if kind == STEP else None,
            cpus=spec.num_threads,
        )
    except KeyboardInterrupt:
        recorder.stop_running(f"interrupted (Ctrl-C); a resumed {verb} runs it again")
        raise
    recorder.end(spec.trial_key, result)
    return result


def run_solve(request: SolveRequest, *, say: Callable[[str], None] = print) -> Answer:
    """Search request.values with real probe trials, recorded in request.output_dir (its lock held
    throughout); writes solve.json with the answer. The first probe is the candidate the memory model
    (fitted on the output dir's trials; the prior before any) predicts as the largest that fits, and
    each trial's row records the prediction made just before it ran."""
    out = request.output_dir
    out.mkdir(parents=True, exist_ok=True)
    budget = request.guard.budget_gib
    symbol = SYMBOLS[request.knob]
    specs = {v: request.spec(v) for v in request.values}
    with output_dir_lock(out):
        ledger = TrialsTable(out / "trials.parquet")
        known = {
            v: measured_from_row(v, ledger.rows[s.trial_key], budget, request.headroom_gib)
            for v, s in specs.items()
            if s.trial_key in ledger.rows and ledger.rows[s.trial_key]["status"] != STOPPED
        }
        if known:
            say(f"resuming {out}: already measured {', '.join(f'{symbol}={v}' for v in sorted(known))}")
        sources = {}
        for value, row in sorted(request.answered.items()):
            if value in known:
                continue  # this output dir's own measurement first
            known[value] = measured_from_row(value, row, budget, request.headroom_gib)
            sources[value] = row.get("_provenance") or "a source not named"
            say(f"{symbol}={value}: measured by {row['trial_key']} from {sources[value]}: not probed")
        forecast = Forecast(ledger.rows, simulated=request.simulated)
        # each candidate's answer before any probe: the one fits, predict and fitmap give (judging.answer)
        rows = [*ledger.rows.values(), *request.rows]
        said = [
            memory_answer(specs[v], rows, budget, request.measure, request.simulate) for v in request.values
        ]
        digits = answer_digits(budget)
        for value, a in zip(request.values, said, strict=True):
            figure = a.peak_words(digits) if a.peak_gib is not None else f"{a.interval_words(digits)} GiB"
            reach = f" ({a.interval_words(digits)})" if a.peak_gib is not None else ""
            say(f"{symbol}={value}: {a.verdict}, {figure}{reach}, {a.kind}")
        guess = answered_guess(said, budget - request.headroom_gib)
        recorder = Recorder(specs.values(), [StepsFiles(out), TrialsFile(ledger)], predictions=forecast.made)

        def measure(value: int) -> Measured:
            spec = specs[value]
            say(f"probe {symbol}={value}: trial {spec.trial_key}, {forecast.before(spec).describe()}")
            run_recorded(spec, recorder, out, request.guard, "solve")
            found = measured_from_row(value, ledger.rows[spec.trial_key], budget, request.headroom_gib)
            verdict = {True: "fits", False: "does not fit", None: "no memory answer"}[found.fits]
            say(f"  {found.status}, peak {gib_text(found.peak_gib)}: {verdict}")
            return found

        answer = search(request.knob, request.values, measure, budget, known, guess)
        answer.headroom_gib = request.headroom_gib
        answer.sources = sources
        if answer.fit is not None and answer.above is None:
            answer.beyond = _beyond(request, forecast, budget)
        (out / "solve.json").write_text(json.dumps(answer.to_dict(), indent=2))
    return answer


def answered_guess(answers: list, budget_gib: float) -> int | None:
    """The index of the largest candidate whose answer (judging.answer) puts its peak within the budget
    (an implied answer: its bound), 0 when none does, None when no candidate has an answer."""
    from orchestrator.judging.memory import UNKNOWN

    known = [i for i, a in enumerate(answers) if a.verdict != UNKNOWN]
    if not known:
        return None

    def within(a) -> bool:
        figure = a.peak_gib if a.peak_gib is not None else a.high_gib
        return figure is not None and figure <= budget_gib

    return max((i for i in known if within(answers[i])), default=0)


def _beyond(request: SolveRequest, forecast: Forecast, budget_gib: float) -> str | None:
    """The next doubling above the last candidate, predicted with its interval (None when no trial
    could hold it)."""
    value = request.values[-1] * 2
    spec = request.spec(value)
    if spec.problems():
        return None
    prediction = forecast.model().predict(spec)
    return (
        f"{SYMBOLS[request.knob]}={value}, not measured: {prediction.describe()} from "
        f"{prediction.n_fitted} measured trial(s), {prediction.verdict(budget_gib)} in {budget_gib:g} GiB"
    )
