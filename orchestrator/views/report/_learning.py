"""Which configuration learns: the figure users optimise. Each judged trial's (completed, or timed out on
the steps it kept: outcome.JUDGED_STATUSES) best held-out accuracy
with its Wilson interval and the time until held-out accuracy reached the sweep's target
(trials.parquet's accuracy fields, trainers/record.accuracy_figures), ranked beside its speed and
memory, then the stacks side by side per configuration. A stack that ran a fallback rather than its own
trainer (its registry entry's fallback_when: Unsloth on a host without a GPU runs its TRL fallback, and
effective_config's `unsloth_backend` reads `cpu`) has its figures shown, never compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.views.report._document import Block, fmt
from orchestrator.views.report._outputs import parse_json, plain
from orchestrator.words.outcome import JUDGED_STATUSES, TIMEOUT, cut_short
from trainers import stacks
from trainers.record import MEMORY_LABELS, SPEC, TRIAL, TRIAL_FIELDS, finite_or_none, peak_memory

FALLBACK = "its TRL fallback on CPU"
NOT_COMPARED = f"not compared ({FALLBACK})"
# What two stacks' trials must share to sit side by side: every setting but the stack (and the key and
# the JSON of all settings, which name it).
SETTINGS = [f.name for f in TRIAL_FIELDS if f.measured_by == SPEC and f.name not in
            {TRIAL.stack, TRIAL.trial_key, TRIAL.config, TRIAL.sweep}]  # fmt: skip


def cpu_fallback(trial: pd.Series) -> bool:
    """A trial whose stack ran its fallback (its registry entry's fallback_when: Unsloth's TRL fallback
    without a GPU), not the stack's own trainer."""
    name = trial.get(TRIAL.stack)
    when = stacks.STACKS[name].fallback_when if name in stacks.STACKS else None
    return when is not None and parse_json(trial.get(TRIAL.effective_config)).get(when[0]) == when[1]


def stack_words(trial: pd.Series) -> str:
    name = str(trial.get(TRIAL.stack))
    return f"{stacks.label(name)} ({FALLBACK})" if cpu_fallback(trial) else stacks.label(name)


def _measured(trials: pd.DataFrame) -> pd.DataFrame:
    """Judged trials (completed, or timed out on the steps they kept) that measured held-out accuracy (a
    sweep that predates the fields has none)."""
    if TRIAL.best_eval_pass_at_1 not in trials or trials.empty:
        return trials.iloc[0:0]
    best = pd.to_numeric(trials[TRIAL.best_eval_pass_at_1], errors="coerce")
    return trials[trials[TRIAL.status].isin(JUDGED_STATUSES) & best.notna()]


def trial_words(trial: pd.Series) -> str:
    """The trial's key, and for one cut short by its time limit the steps it stands on: 'k (timed out: on
    the 19 of 20 steps measured before the time limit)'."""
    key = str(trial.get(TRIAL.trial_key))
    if trial.get(TRIAL.status) != TIMEOUT:
        return key
    kept = finite_or_none(trial.get(TRIAL.steps_completed))
    asked = finite_or_none(trial.get(TRIAL.max_steps))
    return f"{key} (timed out: on {cut_short(int(kept or 0), int(asked) if asked else None)})"


def accuracy_words(trial: pd.Series) -> str:
    """'0.78 (0.66–0.86) at step 30'."""
    best = finite_or_none(trial.get(TRIAL.best_eval_pass_at_1))
    if best is None:
        return "not measured"
    low, high = trial.get(TRIAL.best_eval_pass_at_1_lo), trial.get(TRIAL.best_eval_pass_at_1_hi)
    return f"{best:.2f} ({fmt(low, 2)}–{fmt(high, 2)}) at step {plain(trial.get(TRIAL.best_eval_step))}"


def target_words(trial: pd.Series) -> str:
    """'step 20, 40.0 s' (and GPU-seconds where a GPU ran), or 'not reached'."""
    steps = finite_or_none(trial.get(TRIAL.steps_to_accuracy_target))
    if steps is None:
        return "not reached"
    words = f"step {int(steps)}, {fmt(trial.get(TRIAL.seconds_to_accuracy_target))} s"
    gpu_s = finite_or_none(trial.get(TRIAL.gpu_seconds_to_accuracy_target))
    return f"{words} ({fmt(gpu_s)} GPU-s)" if gpu_s is not None else words


def _peak_words(trial: pd.Series) -> str:
    peak, kind = peak_memory(trial.to_dict())
    return "—" if peak is None else f"{peak:.2f} GiB {MEMORY_LABELS[kind]}"


def ranked_learning(trials: pd.DataFrame) -> pd.DataFrame:
    """Completed trials that measured held-out accuracy, those that reached the target first, sooner
    first (GPU-seconds where every one of them ran on a GPU, else seconds), then the rest, the best
    accuracy first."""
    measured = _measured(trials).copy()
    if measured.empty:
        return measured
    gpu_s = pd.to_numeric(measured.get(TRIAL.gpu_seconds_to_accuracy_target), errors="coerce")
    seconds = pd.to_numeric(measured[TRIAL.seconds_to_accuracy_target], errors="coerce")
    reached = seconds.notna()
    time = gpu_s if reached.any() and gpu_s[reached].notna().all() else seconds
    measured["_reached"] = ~reached
    measured["_time"] = time
    measured["_best"] = -pd.to_numeric(measured[TRIAL.best_eval_pass_at_1], errors="coerce")
    return measured.sort_values(["_reached", "_time", "_best", TRIAL.trial_key])


def learning_table(trials: pd.DataFrame) -> pd.DataFrame:
    ranked = ranked_learning(trials)
    target = _target(ranked)
    return pd.DataFrame(
        {
            "Rank": range(1, len(ranked) + 1),
            "Trial": [trial_words(t) for _, t in ranked.iterrows()],
            "Stack": [stack_words(t) for _, t in ranked.iterrows()],
            "Mode": ranked[TRIAL.mode],
            "K": ranked[TRIAL.num_generations],
            "B": ranked[TRIAL.batch_size],
            "Best held-out accuracy (95%)": [accuracy_words(t) for _, t in ranked.iterrows()],
            f"Time to {target}": [target_words(t) for _, t in ranked.iterrows()],
            "Tokens/s": [
                fmt(v) for v in ranked.get(TRIAL.median_tokens_per_s, pd.Series(index=ranked.index))
            ],
            "Peak memory": [_peak_words(t) for _, t in ranked.iterrows()],
        }
    )


def _target(trials: pd.DataFrame) -> str:
    targets = pd.to_numeric(trials.get(TRIAL.accuracy_target), errors="coerce").dropna().unique()
    return f"accuracy {targets[0]:g}" if len(targets) == 1 else "the target"


def side_by_side(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and seed that more than one stack ran, each stack's best accuracy and
    time to the target side by side; Unsloth's TRL fallback on CPU reads NOT_COMPARED."""
    measured = _measured(trials)
    if measured.empty:
        return pd.DataFrame()
    names = [n for n in stacks.names() if n in set(measured[TRIAL.stack])]
    names += sorted(set(measured[TRIAL.stack]) - set(names))
    target = _target(measured)
    cells: dict[tuple, dict[str, Any]] = {}
    for _, trial in measured.iterrows():
        key = tuple(plain(trial.get(c)) for c in SETTINGS)
        row = cells.setdefault(key, {"Mode": trial.get(TRIAL.mode), "K": trial.get(TRIAL.num_generations),
                                     "B": trial.get(TRIAL.batch_size), "Seed": trial.get(TRIAL.seed)})  # fmt: skip
        label = stacks.label(str(trial[TRIAL.stack]))
        if cpu_fallback(trial):
            row[f"{label}: best accuracy"] = row[f"{label}: time to {target}"] = NOT_COMPARED
        else:
            row[f"{label}: best accuracy"] = accuracy_words(trial)
            row[f"{label}: time to {target}"] = target_words(trial)
    rows = [r for r in cells.values() if sum(k.endswith("best accuracy") for k in r) > 1]
    order = ["Mode", "K", "B", "Seed"]
    for name in names:
        label = stacks.label(name)
        order += [f"{label}: best accuracy", f"{label}: time to {target}"]
    return pd.DataFrame(rows, columns=order).fillna("—") if rows else pd.DataFrame()


def learning_blocks(trials: pd.DataFrame, curves: Path | None = None) -> list[Block]:
    """The section: the ranking, what it is, the stacks' held-out accuracy over the steps on one axis
    (`curves`, _plots.learning_curves_plot), and the stacks side by side."""
    blocks = [Block("h2", "Which configuration learns: held-out accuracy")]
    table = learning_table(trials)
    if table.empty:
        return [
            *blocks,
            Block(
                "p",
                "No completed or timed-out trial measured held-out accuracy (eval_pass_at_1), so none is "
                "ranked.",
            ),
        ]
    target = _target(ranked_learning(trials))
    blocks += [
        Block("table", table=table),
        Block(
            "p",
            f"Ranked by the training time until held-out accuracy (pass@1) first reached {target} (the "
            "sweep's verdict.accuracy_target): the sum of step times to that evaluation, start-up and "
            "evaluation left out; GPU-seconds (seconds x GPUs) where a GPU ran. Trials that never reached "
            "it follow, best accuracy first. Best held-out accuracy: the highest of the trial's evaluations "
            "with its 95% Wilson interval over the evaluated prompts (the best of several noisy readings "
            "leans high). A trial that timed out is ranked on the steps it measured before its time limit. "
            "Tokens/s and peak memory as in the sections on speed and memory.",
        ),
    ]
    if curves:
        blocks.append(Block("image", "Held-out accuracy over the steps, the stacks on one axis", path=curves))
    fallback = _measured(trials)
    fallback = fallback[[cpu_fallback(t) for _, t in fallback.iterrows()]]
    if not fallback.empty:
        blocks.append(
            Block(
                "p",
                f"{len(fallback)} Unsloth trial(s) ran without a GPU, so Unsloth ran {FALLBACK} (its own "
                "kernels need a GPU): their figures are TRL's on this host, not Unsloth's, and are not "
                "compared with TRL's.",
            )
        )
    pairs = side_by_side(trials)
    if not pairs.empty:
        blocks += [Block("h3", "The stacks side by side"), Block("table", table=pairs)]
    return blocks
