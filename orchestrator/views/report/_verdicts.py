"""The report's training verdicts: how many of each, the trials that learn, the flagged ones with why and
their curves, and the completions a task's sandbox killed (a reward-hacking signal)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from orchestrator.views.report._document import Block, fmt
from orchestrator.words.outcome import TIMEOUT
from orchestrator.words.phases import MEMORY
from orchestrator.words.verdicts import LEARNING, PROBLEMS, VERDICT_WORDS, VERDICTS


def flagged_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Judged trials whose training verdict flags them, worst first (verdict.PROBLEMS)."""
    flagged = summary[summary["training_verdict"].isin(PROBLEMS)].copy()
    flagged["_rank"] = [PROBLEMS.index(v) for v in flagged["training_verdict"]]
    flagged = flagged.sort_values(["_rank", "run_name"])
    return _verdict_rows(flagged)


def learning_verdict_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Judged trials whose verdict is `learning` (a positive, not a flag), with the evidence."""
    return _verdict_rows(summary[summary["training_verdict"] == LEARNING].sort_values("run_name"))


def _verdict_rows(flagged: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Trial": flagged["run_name"],
            "Stack": flagged["stack"],
            "Mode": flagged["mode"],
            "K": flagged["num_generations"],
            "B": flagged["batch_size"],
            "Verdict": [VERDICT_WORDS[v] for v in flagged["training_verdict"]],
            "Why": list(flagged["training_verdict_detail"]),
        }
    )


def memory_probes(trials: pd.DataFrame) -> set[str]:
    """The trial keys of memory-phase rows: probe steps only, not training runs, so not judged."""
    if "phase" not in trials:
        return set()
    return set(trials.loc[trials["phase"].eq(MEMORY), "trial_key"].astype(str))


def verdict_blocks(
    summary: pd.DataFrame, curves: dict[str, Any], probes: set[str] = frozenset()
) -> list[Block]:
    """The training verdicts: how many of each, the flagged trials with why, and their curves; the
    memory probes (`probes`, trial keys) counted apart, as not judged."""
    blocks = [Block("h2", "Does it learn: training verdicts")]
    probe = summary["run_name"].astype(str).isin(probes)
    verdicts = summary.loc[~probe, "training_verdict"].dropna()
    probes = int(summary.loc[probe, "training_verdict"].notna().sum())
    if probes:  # probe steps only: not a training run, so no verdict is read into them
        blocks.append(
            Block("p", f"{probes} memory-phase probe(s) not judged: probe steps, not training runs.")
        )
    if verdicts.empty:
        return [
            *blocks,
            Block("p", "No training run completed or kept a step before its time limit, so none was judged."),
        ]
    counts = verdicts.value_counts()
    parts = [f"{counts[v]} {VERDICT_WORDS[v]}" for v in VERDICTS if v in counts]
    cut = int(summary.loc[verdicts.index, "status"].eq(TIMEOUT).sum()) if "status" in summary else 0
    judged = f"{len(verdicts)} {'' if cut else 'completed '}trials judged from their steps" + (
        f" ({cut} timed out, judged on the steps measured before the time limit)" if cut else ""
    )
    blocks.append(
        Block(
            "p",
            f"{judged}: {', '.join(parts)}. learning: the "
            "reward's trend rises (its 95% interval above zero) and, where held-out accuracy was measured "
            "twice or more, its last reading beats its first (the difference's 95% interval above zero); "
            "ok: nothing wrong, and no evidence of learning. The problems: diverged: a NaN or a spike in "
            "loss, grad_norm or kl, or a step that changed the trained weights by their own size; memory "
            "creep: peak memory rising towards the budget; no signal: groups "
            "whose rewards are all equal (no advantage, nothing learned from the reward); truncated: "
            "completions cut at max_completion_length; collapsed: the reward rises while held-out accuracy "
            "or completion entropy falls, or the completions converge to one text. Thresholds: the sweep's "
            "verdict section.",
        )
    )
    learned = learning_verdict_table(summary)
    if not learned.empty:
        blocks += [Block("h3", "Trials that learn"), Block("table", table=learned)]
    table = flagged_table(summary)
    if table.empty:
        return blocks
    blocks += [Block("h3", "Trials flagged"), Block("table", table=table)]
    for key, verdict in zip(table["Trial"], table["Verdict"], strict=True):
        if curves.get(str(key)):
            blocks.append(Block("image", f"Curves {key} ({verdict})", path=curves[str(key)]))
    return blocks


def sandbox_kill_blocks(summary: pd.DataFrame) -> list[Block]:
    """Reward hacking: the training completions each trial's sandbox killed (summary's sandbox_kills,
    from the steps' field); nothing when no trial ran a task with a sandbox."""
    if "sandbox_kills" not in summary:
        return []
    kills = pd.to_numeric(summary["sandbox_kills"], errors="coerce")
    measured = summary[kills.notna()]
    if measured.empty:
        return []
    blocks = [Block("h3", "Reward hacking: completions the sandbox killed")]
    killed = measured[kills[kills.notna()] > 0]
    trials = f"{len(measured)} trial{'s' if len(measured) != 1 else ''} that ran one"
    if killed.empty:
        return [*blocks, Block("p", f"The sandbox killed no training completion in the {trials}.")]
    total = int(kills[killed.index].sum())
    blocks.append(
        Block(
            "p",
            f"The sandbox killed {total} training completion{'s' if total != 1 else ''} in {len(killed)} of "
            f"the {trials}: runs stopped at the time, memory, file size or process limit, or by an act (a "
            "forbidden call, a process or thread left running). Each scored 0 in every reward (format too, "
            "unless task_args.pay_format_when_killed and the kill was a limit, not an act). A policy that "
            "probes the sandbox writes them; kills that rise over the steps (the steps' sandbox_kills; "
            "sandbox_kill_reasons names each) are one learning that they pay.",
        )
    )
    ordered = killed.assign(_kills=kills[killed.index]).sort_values(
        ["_kills", "run_name"], ascending=[False, True]
    )
    table = pd.DataFrame(
        {
            "Trial": ordered["run_name"],
            "Stack": ordered["stack"],
            "Mode": ordered["mode"],
            "K": ordered["num_generations"],
            "B": ordered["batch_size"],
            "Completions killed": [int(k) for k in ordered["_kills"]],
            "Final reward": [fmt(r, 3) for r in ordered["final_reward"]],
        }
    )
    return [*blocks, Block("table", table=table)]
