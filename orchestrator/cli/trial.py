"""`rlsweep trial`: one trial without Ray or MLflow, written as a sweep writes it."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import yaml

from orchestrator.cli._common import add_guard_flags, console, knob_arg, out, trial_guard
from orchestrator.cli._flags import add_knob, add_output_dir, add_stack
from orchestrator.judging.verdict import STOPPABLE, VerdictSettings, stop_check
from orchestrator.words.outcome import MEMORY_LABELS, peak_memory
from orchestrator.words.settings import GUARD as GUARD
from trainers.events import STARTED, STEP
from trainers.trial import BOOKKEEPING, KNOBS, TrialSpec, knob_default, knob_flags, probe_steps_within

# Bookkeeping knobs are not flags, except --trial-key: a standalone trial may be given its key.
TRIAL_SKIP = tuple(k for k in BOOKKEEPING if k != "trial_key")


def _knob_type(f: dataclasses.Field):
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if isinstance(default, bool):
        return None
    if isinstance(default, dict):
        return yaml.safe_load
    if default is None:
        return int if "int" in str(f.type) else float if "float" in str(f.type) else str
    return type(default)


def add_trial_knobs(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    """A flag per TrialSpec knob, spelled as the knob declares it (knob_flags; the stack's: the shared
    --stack); `defaults` overrides TrialSpec's default of a knob (the guard's)."""
    group = parser.add_argument_group("trial settings (TrialSpec; defaults as shown)")
    for name, f in KNOBS.items():
        if name in TRIAL_SKIP:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        default = defaults.get(name, default)
        help_text = f"{f.metadata.get('help', '')} (default: {default!r})"
        if "choices" in f.metadata:
            help_text += f" [{'|'.join(f.metadata['choices'])}]"
        if name == "stack":  # the stack: the flag every verb shares
            add_stack(group, help=help_text, default=defaults.get(name))
            continue
        flags = knob_flags(name)
        kind = _knob_type(f)
        if kind is None:
            group.add_argument(
                *flags,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=defaults.get(name),
                help=help_text,
            )
        else:  # its default is TrialSpec's, said in the help (probe_steps': set by cmd_trial)
            add_knob(group, name, help_text, type=knob_arg(name, kind))


def _probe_word(row: dict[str, Any]) -> str:
    """' probe' on a probe step, ' probe (synthetic: peak in training)' where the step says how it probed."""
    if not row.get("probe"):
        return ""
    said = [
        w
        for w in (row.get("probe_kind"), f"peak in {row['peak_phase']}" if row.get("peak_phase") else None)
        if w
    ]
    return " probe" + (f" ({': '.join(said)})" if said else "")


def _step_line(spec: TrialSpec, row: dict[str, Any]) -> str:
    def f(key: str, fmt: str = ".3f") -> str:
        value = row.get(key)
        return "-" if value is None else format(value, fmt)

    peak, kind = peak_memory(row)
    memory = "-" if peak is None else f"{peak:.2f} GiB {MEMORY_LABELS[kind]}"
    return (
        f"step {row.get('step')}/{spec.max_steps}{_probe_word(row)}  "
        f"step_s {f('step_s', '.2f')}  tokens/s {f('tokens_per_s', '.0f')}  loss {f('loss', '.4f')}  "
        f"reward {f('reward_mean')}  peak {memory}"
    )


class _StepLines:
    """`rlsweep trial`'s recorder sink for the terminal: a line per step; keeps the trial's row."""

    row: dict[str, Any] = {}

    def on_start(self, spec: TrialSpec) -> None:
        pass

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        out.print(_step_line(spec, row), markup=False)

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        self.row = row


def cmd_trial(args: argparse.Namespace) -> int:
    from orchestrator.recording.recorder import Recorder, TrialFolder
    from orchestrator.running.supervisor import run_trial
    from orchestrator.spec.plan import trial_key
    from orchestrator.words.outcome import COMPLETED

    values = {k: v for k, v in vars(args).items() if k in KNOBS and v is not None}
    if args.probe_steps is None:
        values["probe_steps"] = probe_steps_within(
            values.get("max_steps", knob_default("max_steps")), GUARD.probe_steps
        )
    spec = TrialSpec(**values)
    problems = spec.problems()
    if problems:
        console.print(f"invalid trial, nothing started ({len(problems)} problem(s)):", markup=False)
        for problem in problems:
            console.print(f"  {problem}", markup=False)
        return 2
    spec.trial_key = spec.trial_key or trial_key(spec)
    output = Path(args.output_dir or Path("outputs") / "trials" / spec.trial_key).resolve()
    output.mkdir(parents=True, exist_ok=True)
    console.print(f"trial {spec.trial_key} -> {output}")
    console.print("starting the trainer: model build, then the first generation (no step line until then)")

    verdict = VerdictSettings(stop_on=tuple(args.stop_on))
    lines = _StepLines()
    recorder = Recorder([spec], [TrialFolder(output), lines], verdict=verdict)  # a sweep's writer

    def show(kind: str, row: dict[str, Any]) -> None:
        if kind == STEP:
            recorder.step(spec.trial_key, row)
        elif kind == STARTED:
            console.print(f"started on {row.get('device') or row.get('gpu_name') or 'cpu'}")

    recorder.start(spec.trial_key)
    try:
        result = run_trial(
            spec, trial_dir=output, guard=dataclasses.replace(trial_guard(args), probe_steps=spec.probe_steps),
            on_event=show, cpus=spec.num_threads,
            stop_check=stop_check(verdict),
        )  # fmt: skip
    except KeyboardInterrupt:
        console.print("interrupted; trainer killed")
        return 130
    recorder.end(spec.trial_key, result)
    row = lines.row
    colour = "green" if result.status == COMPLETED else "red"
    console.print(f"[{colour}]{result.status}[/{colour}]: {result.status_detail}", markup=True)
    if row.get("training_verdict"):
        console.print(f"training verdict {row['training_verdict_detail']}", markup=False)
    console.print(f"wrote {output}/steps.parquet, metrics.csv, trial.json")
    return 0 if result.status == COMPLETED else 1


def add_trial(sub) -> None:
    p = sub.add_parser(
        "trial", help="run one trial without Ray; writes steps.parquet, metrics.csv, trial.json"
    )
    add_output_dir(p, "where the trial's files go (default outputs/trials/<trial_key>)")
    add_guard_flags(p, "wall-clock limit in seconds")
    p.add_argument(
        "--stop-on",
        nargs="+",
        choices=STOPPABLE,
        default=[],
        help="end the trial as soon as one of these training verdicts holds (it stays completed; "
        "thresholds: the verdict section's defaults, docs/schema.md)",
    )
    add_trial_knobs(p, {"probe_steps": GUARD.probe_steps})
    # left unset, the probe steps leave a trial of two steps or more one to train (probe_steps_within)
    p.set_defaults(func=cmd_trial, probe_steps=None)
