"""The GPU memory model against the peaks an H100 measured (bench/data/h100-2026-11-26/trials.csv).

The CSV is the single source: one row a trial of the two H100 runs of November 26 2026 (round 1: the
16 GiB matrix, TRL and Unsloth, Qwen2.5-3B K 2/4/8 x B 1/2 at completion 128, and gpu-check's 1.5B
trials; round 2: the 16 GiB frontier at completion 256-1024 and gpu-check; round 3: gpu-check alone and the
frontier at 1024-2048), with the NVML peak of
the trainer process, the longest prompt its task held (trial.json's effective_config: 34 tokens, under a
max_prompt_length of 256; the model counts a batch's prompts at it), its status (an `oom` trial's peak was at least its budget; a `timeout` one's at
least the peak it measured) and the prior's prediction made then without measured rows
(prior_predicted_gib). Every trial's events, steps and trial.json lie beside it in round1/, round2/ and round3/.
tools/inputs/h100_rows.py load() reads it; trial_rows() turns it into trials.parquet rows (the knobs as the trial's config)
that MemoryModel.fit and MemoryModel.calibrate read.

Round 1 calibrates; rounds 2 and 3 are held out (GPU measurements the model has not seen):
- the calibrated prior: MemoryModel.calibrate on round 1 (_terms.CALIBRATED holds what it prints);
- leave-one-out on round 1: each row predicted by a model calibrated and fitted on the other round-1
  rows only (the calibration is redone without it);
- round 2: each row predicted by the model fitted on round 1 (the calibrated prior, then each
  family's round-1 trials), with its verdict against the trial's budget (16 GiB);
- round 3 (gpu-check alone, the frontier at completion 1024 and 2048): the same, and by the model
  fitted on rounds 1 and 2;
- leave one model size out, and leave one completion length out, over every round's rows: each
  group's rows predicted by a model calibrated and fitted on the other groups only, with whether the
  interval holds the measured peak (coverage at its stated rate) and how far it reaches;
- leave one trial out over every round's rows, the same (each row's family keeps its other rows). Every row is Qwen2.5 (1.5B, 3B), NF4,
  on one H100: a family (architecture) left out cannot be tested from these rows.

Usage: python -m bench gpu_memory
"""

from __future__ import annotations

from bench import Context, benchmark
from orchestrator.judging.memory import RATE, MemoryModel, spec_of
from orchestrator.judging.memory._terms import CALIBRATED
from orchestrator.words.outcome import COMPLETED, GPU, OOM, TIMEOUT
from tools.inputs.h100_rows import PEAK, load, trial_rows


def label(row: dict) -> str:
    s = spec_of(row)
    return (
        f"{s.stack:7} {s.model.split('/')[-1].removesuffix('-Instruct'):13} K{s.num_generations} "
        f"B{s.batch_size} c{s.max_completion_length}"
    )


def leave_one_out(rows: list[dict]) -> list[tuple[dict, float]]:
    """(row, predicted peak) for each completed row, from a model calibrated and fitted on the others."""
    out = []
    for i, row in enumerate(rows):
        if row["status"] != COMPLETED:
            continue
        others = rows[:i] + rows[i + 1 :]
        model = MemoryModel.fit(others, GPU, prior_values=MemoryModel.calibrate(others, GPU))
        out.append((row, model.predict(spec_of(row)).peak_gib))
    return out


def size_of(row: dict) -> str:
    return spec_of(row).model.split("-")[-2]  # random:Qwen/Qwen2.5-3B-Instruct -> 3B


def completion_of(row: dict) -> int:
    return spec_of(row).max_completion_length


def leave_group_out(rows: list[dict], group) -> list[tuple[dict, object, str]]:
    """(row, prediction, its group) for each completed row, from a model calibrated and fitted on the
    rows of the other groups only (group(row): a model size, a completion length)."""
    out = []
    for value in sorted({group(r) for r in rows}, key=str):
        others = [r for r in rows if group(r) != value]
        if not any(r["status"] == COMPLETED for r in others):
            continue
        model = MemoryModel.fit(others, GPU, prior_values=MemoryModel.calibrate(others, GPU))
        for row in rows:
            if group(row) == value and row["status"] == COMPLETED:
                out.append((row, model.predict(spec_of(row)), str(value)))
    return out


def held_out_groups(rows: list[dict], group, title: str) -> float:
    """Each group's completed rows predicted by a model that never saw the group: error, interval,
    whether the interval holds the measured peak, how far it reaches below and above the prediction
    (% of it), and the GiB it extrapolates beyond its family's measured rows (- where the family had
    none: the prior's interval)."""
    print(f"\nleave one {title} out (calibrated and fitted on the other {title}s' rows, all rounds):")
    print(
        f"  {'trial':36} {'measured':>8} {'predicted (interval)':>22} {'error':>7} {'inside':>6} "
        f"{'reach':>13} {'beyond':>6}"
    )
    errors, inside, reach = [], 0, {"within its family's rows": [], "extrapolated": [], "no rows (prior)": []}
    for row, p, _ in leave_group_out(rows, group):
        error = (p.peak_gib - row[PEAK]) / row[PEAK]
        errors.append(error)
        hit = p.low_gib <= row[PEAK] <= p.high_gib
        inside += hit
        below, above = (p.peak_gib - p.low_gib) / p.peak_gib, (p.high_gib - p.peak_gib) / p.peak_gib
        kind = (
            "no rows (prior)"
            if p.beyond_gib is None
            else "extrapolated"
            if p.beyond_gib > 0.005
            else ("within its family's rows")
        )
        reach[kind].append((max(below, above), hit))
        interval = f"{p.peak_gib:.2f} ({p.low_gib:.2f}-{p.high_gib:.2f})"
        beyond = "-" if p.beyond_gib is None else f"{p.beyond_gib:.2f}"
        shown = f"-{below:.1%}/+{above:.1%}"
        print(
            f"  {label(row):36} {row[PEAK]:8.2f} {interval:>22} {error:+7.1%} {'yes' if hit else 'no':>6} "
            f"{shown:>13} {beyond:>6}"
        )
    print(
        f"  {len(errors)} rows: mean abs {sum(map(abs, errors)) / len(errors):.1%}, worst {max(map(abs, errors)):.1%}, "
        f"inside the interval {inside}/{len(errors)} ({inside / len(errors):.0%}; stated {RATE:.0%})"
    )
    for kind, values in reach.items():
        if values:
            widths = [w for w, _ in values]
            print(
                f"    {kind}: {len(values)} rows, inside {sum(h for _, h in values)}/{len(values)}, "
                f"reach {min(widths):.1%}-{max(widths):.1%}"
            )
    return inside / len(errors)


@benchmark(tags=("memory",), needs="data", smoke={})
def gpu_memory(ctx: Context) -> dict:
    """The GPU memory model against the H100's peaks: calibrated, leave-one-out, rounds held out."""
    raw = load()
    round1, round2 = trial_rows(raw, 1), trial_rows(raw, 2)

    calibrated = MemoryModel.calibrate(round1, GPU)
    print("calibrated on round 1 (coefficient; _terms.CALIBRATED):")
    for name, (value, _) in calibrated.items():
        print(f"  {name:16} {value:6.3f}  ({CALIBRATED[name]:.3f})")

    print("\nleave-one-out on round 1 (calibrated and fitted on the other round-1 rows):")
    print(f"  {'trial':36} {'measured':>8} {'predicted':>9} {'error':>7} {'prior then':>10}")
    errors = []
    for row, peak in leave_one_out(round1):
        error = (peak - row[PEAK]) / row[PEAK]
        errors.append(error)
        then = (row["prior_predicted_gib"] - row[PEAK]) / row[PEAK]
        print(f"  {label(row):36} {row[PEAK]:8.2f} {peak:9.2f} {error:+7.1%} {then:+10.1%}")
    print(f"  mean abs {sum(map(abs, errors)) / len(errors):.1%}, worst {max(map(abs, errors)):.1%}")

    round3 = trial_rows(raw, 3)
    held_out(MemoryModel.fit(round1, GPU), round2, "round 2, from the model fitted on round 1")
    held_out(MemoryModel.fit(round1, GPU), round3, "round 3, from the model fitted on round 1")
    held_out(
        MemoryModel.fit(round1 + round2, GPU), round3, "round 3, from the model fitted on rounds 1 and 2"
    )
    every = trial_rows(raw)
    print(f"\nthe interval's stated rate: {RATE:.0%} (orchestrator/judging/memory/_interval.py)")
    return {
        "round1_loo_mean_abs_error": sum(map(abs, errors)) / len(errors),
        "round1_loo_worst_abs_error": max(map(abs, errors)),
        "inside_rate_trial_left_out": held_out_groups(every, lambda r: r["trial_key"], "trial"),
        "inside_rate_size_left_out": held_out_groups(every, size_of, "model size"),
        "inside_rate_length_left_out": held_out_groups(every, completion_of, "completion length"),
        "stated_rate": RATE,
    }


def held_out(model: MemoryModel, rows: list[dict], title: str) -> None:
    """Each row's prediction by a model that has not seen it, with its verdict against the trial's budget."""
    print(f"\nheld out: {title} (verdict against the trial's budget):")
    print(
        f"  {'trial':36} {'status':9} {'measured':>8} {'predicted (interval)':>22} {'error':>7} {'verdict':>12}"
    )
    held, inside = [], 0
    for row in rows:
        p = model.predict(spec_of(row))
        interval = f"{p.peak_gib:.2f} ({p.low_gib:.2f}-{p.high_gib:.2f})"
        measured = row[PEAK]
        if row["status"] == COMPLETED:
            error = (p.peak_gib - measured) / measured
            held.append(error)
            inside += p.low_gib <= measured <= p.high_gib
            shown = f"{error:+7.1%}"
        elif row["status"] == OOM:
            shown = "   >=" if p.peak_gib >= row["memory_budget_gib"] else "  under"
            measured = row["memory_budget_gib"]
        else:  # TIMEOUT: killed before its first step; the peak is a lower bound
            assert row["status"] == TIMEOUT
            shown = "   >=" if p.peak_gib >= measured else "  under"
        print(
            f"  {label(row):36} {row['status']:9} {measured:8.2f} {interval:>22} {shown:>7} "
            f"{p.verdict(row['memory_budget_gib']):>12}"
        )
    print(
        f"  completed: mean abs {sum(map(abs, held)) / len(held):.1%}, worst {max(map(abs, held)):.1%}, "
        f"inside the interval {inside}/{len(held)}"
    )
