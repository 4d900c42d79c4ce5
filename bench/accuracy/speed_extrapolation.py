"""How well a full-length step is predicted from decode speed at shorter lengths
(orchestrator/judging/speed.py, `predict_step`), checked on the H100 rows of bench/data/h100-2026-11-26.

No row holds a synthetic probe's two decode windows, so they are emulated from rows of the same
configuration (stack, model, completions per step, prompt) at shorter completion lengths: a row of
length L decoded at a mean of gen_s / (L + 1) ms per step over contexts P .. P + L (the prefill counted
as one step), i.e. at the middle of its completion. With one shorter row that ms is both readings (no
context growth measured); with two, the line through their middles gives the readings at P and at the
target's full length P + L. The target's generation (its first-step warm-up removed where only its
first step ran, as in orchestrator/judging/speed_model.py) is compared with predict_step's gen_s, and
its step (generation + its own measured training step, which the synthetic probe measures) with
step_s. The rows were measured with 1 to 6 trials sharing the card (`concurrent`): a pair of rows
packed differently differs by that too.

    python -m bench speed_extrapolation
"""

from __future__ import annotations

import itertools
import statistics

from bench import ROOT, Context, benchmark
from orchestrator.judging.speed import decode_seconds, predict_step
from orchestrator.judging.speed_model import h100_observations, load_speed_model


@benchmark(tags=("speed",), needs="data", smoke={})
def speed_extrapolation(ctx: Context) -> dict:
    """A full-length step predicted from decode speed at shorter lengths, on the H100 rows."""
    rows = h100_observations(ROOT)
    groups: dict[tuple, dict[int, object]] = {}
    for r in rows:
        # one row per length: the first of a configuration's rows at that length (round order)
        groups.setdefault((r.stack, r.model, r.sequences, r.prompt_tokens), {}).setdefault(r.completion, r)
    print(
        "| stack | model | seqs | from (length, trials on card) | to | readings ms (prompt, full) | gen s measured | predicted | error | error, packing-adjusted | step s measured | predicted | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    gen_errors, step_errors, adjusted_errors = [], [], []
    rho = load_speed_model().packing_slowdown
    for (stack, model, seqs, prompt), by_length in sorted(groups.items()):
        lengths = sorted(by_length)
        if len(lengths) < 2:
            continue
        for target_length in lengths[1:]:
            target = by_length[target_length]
            shorter = [by_length[n] for n in lengths if n < target_length]
            sources = [(s,) for s in shorter] + list(itertools.combinations(shorter, 2))
            for source in sources:
                mid = [
                    (r.prompt_tokens + r.completion / 2, r.gen_s / (r.completion + 1) * 1000) for r in source
                ]
                if len(mid) == 1:
                    at_prompt = at_full = mid[0][1]
                else:
                    (c1, m1), (c2, m2) = mid
                    slope = (m2 - m1) / (c2 - c1)
                    at_prompt = m1 + slope * (prompt - c1)
                    at_full = m1 + slope * (prompt + target_length - c1)
                if min(at_prompt, at_full) <= 0:
                    continue
                gen = decode_seconds(at_prompt, at_full, target_length) + at_prompt / 1000
                gen_err = gen / target.gen_s - 1
                gen_errors.append(abs(gen_err))
                # the same, the sources' ms moved to the target's packing by the speed model's rho
                packing = [
                    (1 + rho * (target.concurrent - 1)) / (1 + rho * (r.concurrent - 1)) for r in source
                ]
                adjusted = gen * statistics.mean(packing) / target.gen_s - 1
                adjusted_errors.append(abs(adjusted))
                step_cells = "- | - | -"
                if target.train_s is not None:
                    forecast = predict_step(at_prompt, at_full, target_length, target.train_s)
                    measured_step = target.gen_s + target.train_s
                    predicted_step = forecast.step_s
                    step_errors.append(abs(predicted_step / measured_step - 1))
                    step_cells = f"{measured_step:.1f} | {predicted_step:.1f} | {predicted_step / measured_step - 1:+.1%}"
                frm = ", ".join(f"{r.completion} ({r.concurrent})" for r in source)
                print(
                    f"| {stack} | {model.split('/')[-1]} | {seqs} | {frm} | {target_length} ({target.concurrent}) | "
                    f"{at_prompt:.1f}, {at_full:.1f} | {target.gen_s:.1f} | {gen:.1f} | {gen_err:+.1%} | {adjusted:+.1%} | {step_cells} |"
                )
    print(
        f"\ngeneration: {len(gen_errors)} predictions, mean |error| {statistics.mean(gen_errors):.1%}, "
        f"worst {max(gen_errors):.1%}, within 10%: {sum(e <= 0.10 for e in gen_errors)} of {len(gen_errors)}"
    )
    print(
        f"generation, packing-adjusted (rho {rho:g}): mean |error| {statistics.mean(adjusted_errors):.1%}, "
        f"worst {max(adjusted_errors):.1%}, within 10%: {sum(e <= 0.10 for e in adjusted_errors)} of {len(adjusted_errors)}"
    )
    if step_errors:
        print(
            f"step (with the row's own training step): {len(step_errors)} predictions, mean |error| "
            f"{statistics.mean(step_errors):.1%}, worst {max(step_errors):.1%}"
        )
    return {
        "gen_predictions": len(gen_errors),
        "gen_mean_abs_error": statistics.mean(gen_errors),
        "gen_worst_abs_error": max(gen_errors),
        "gen_packing_adjusted_mean_abs_error": statistics.mean(adjusted_errors),
        "step_mean_abs_error": statistics.mean(step_errors) if step_errors else None,
    }
