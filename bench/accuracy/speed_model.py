"""Fits the per-stack speed model (orchestrator/judging/speed_model.py) on the H100 rows of
bench/data/h100-2026-11-26, writes it to orchestrator/judging/h100_speed.json, prints its errors on rows
it was not fitted on (leave one row out, leave one round out), its predictions for models with no row,
and the estimate of the default GPU sweep (sweeps/frontier-16gb.yaml) by probe kind.

    python -m bench speed_model            # fit and compare with the shipped files
    python -m bench --refit speed_model    # the same, the shipped files rewritten (make refit)

`--set step_error_only=true` does only the error of the seconds per step `rlsweep fits` and `fitmap` say
(orchestrator/judging/speed_step.py): every row predicted by the model fitted on the others (leave one
row out), its step against the measured one and whether the stated interval held it; it writes the
held-out errors the interval is widened by to orchestrator/judging/h100_speed_error.json.

    python -m bench speed_model --set step_error_only=true
"""

from __future__ import annotations

import json
import statistics

from bench import ROOT, Context, benchmark
from orchestrator.judging.duration import estimate_sweep, load_times
from orchestrator.judging.speed_model import (
    SPEED_FILE,
    fit,
    h100_observations,
    held_out_errors,
    launches,
    predicted_gen_s,
    predicted_train_s,
    shape_of,
)
from orchestrator.judging.speed_step import ERROR_FILE
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan
from orchestrator.words.text import duration

UNMEASURED = ["meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-1b-it", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B",
              "Qwen/Qwen3-4B", "Qwen/Qwen2.5-7B-Instruct"]  # fmt: skip


def held_out_error(errors: list) -> dict:
    """The error summary speed_step widens its intervals by: per part, the range and mean |error| of
    the rows' leave-one-row-out errors ((predicted - measured) / measured)."""
    out: dict = {"rows": len(errors), "held_out": "row", "source": "bench/data/h100-2026-11-26"}
    for part, values in (("generation", [g for _, g, _ in errors]),
                         ("training", [t for _, _, t in errors if t is not None])):  # fmt: skip
        out[part] = {
            "low": round(min(values), 4), "high": round(max(values), 4),
            "mean_abs": round(statistics.mean(abs(v) for v in values), 4), "n": len(values),
        }  # fmt: skip
    return out


def step_error(ctx: Context, rows: list, times: dict) -> tuple[dict, bool, dict]:
    """The seconds per step on every GPU row, leave one row out (module docstring): prints the table,
    writes ERROR_FILE (under --refit); returns what it fits, whether the shipped file holds it, and the
    step's figures."""
    errors = held_out_errors(rows, times, "row")
    summary = held_out_error(errors)
    current = ctx.shipped(ERROR_FILE, json.dumps(summary, indent=1) + "\n")
    print(f"{ERROR_FILE.relative_to(ROOT)}: {summary}\n")
    print(
        "| stack | model | seqs | length | trials on card | step s measured | predicted | error | interval | held |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    held, steps = 0, []
    for i, (obs, _, _) in enumerate(errors):
        if obs.train_s is None:
            continue
        rest = [o for j, o in enumerate(rows) if o is not obs]
        model = fit(rest, times)
        others = held_out_error([e for j, e in enumerate(errors) if j != i])
        per = obs.num_iterations
        gen, train = predicted_gen_s(model, obs) / per, predicted_train_s(model, obs)
        measured = obs.gen_s / per + obs.train_s
        low = gen / (1 + others["generation"]["high"]) + train / (1 + others["training"]["high"])
        high = gen / (1 + others["generation"]["low"]) + train / (1 + others["training"]["low"])
        inside = low <= measured <= high
        held += inside
        steps.append(abs((gen + train) / measured - 1))
        print(
            f"| {obs.stack} | {obs.model.split('/')[-1]} | {obs.sequences} | {obs.completion} | {obs.concurrent} | "
            f"{measured:.2f} | {gen + train:.2f} | {(gen + train) / measured - 1:+.1%} | {low:.2f}-{high:.2f} | "
            f"{'yes' if inside else 'no'} |"
        )
    print(
        f"step: {len(steps)} rows, mean |error| {statistics.mean(steps):.1%}, worst {max(steps):.1%}, within 10%: "
        f"{sum(e <= 0.10 for e in steps)} of {len(steps)}; measured inside the interval (the other rows' error "
        f"range): {held} of {len(steps)}"
    )
    figures = {
        "step_rows": len(steps),
        "step_mean_abs_error": statistics.mean(steps),
        "step_worst_abs_error": max(steps),
        "step_inside_interval": held,
    }
    return summary, current, figures


@benchmark(
    tags=("refit", "speed"),
    needs="data",
    params={"step_error_only": False},
    smoke={},
    goals={"shipped_is_current": "== true"},
    writes=(str(SPEED_FILE.relative_to(ROOT)), str(ERROR_FILE.relative_to(ROOT))),
)
def speed_model(ctx: Context) -> dict:
    """The speed model fitted on the H100 rows, its held-out errors and the default GPU sweep's estimate."""
    if ctx.args.step_error_only:
        _, current, figures = step_error(ctx, h100_observations(ROOT), load_times())
        return {"shipped_is_current": current, **figures}
    times = load_times()
    rows = h100_observations(ROOT)
    model = fit(rows, times)
    fitted = ctx.shipped(SPEED_FILE, json.dumps(model.to_json(), indent=1) + "\n")
    print(f"{SPEED_FILE.relative_to(ROOT)} from {len(rows)} rows: {model.to_json()}\n")
    # the error the CLI's seconds per step are widened by, refitted with the model
    _, current, metrics = step_error(ctx, rows, times)
    metrics["shipped_is_current"] = fitted and current
    print()
    for group in ("row", "round"):
        errors = held_out_errors(rows, times, group)
        print(f"held out by {group}:")
        print(
            "| stack | model | seqs | length | trials on card | steady | gen s | gen error | train s | train error |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for obs, gen, train in errors:
            train_cells = f"{obs.train_s:.2f} | {train:+.1%}" if train is not None else "- | -"
            print(
                f"| {obs.stack} | {obs.model.split('/')[-1]} | {obs.sequences} | {obs.completion} | "
                f"{obs.concurrent} | {'yes' if obs.steady else 'first step'} | {obs.gen_s:.1f} | {gen:+.1%} | {train_cells} |"
            )
        gens = [abs(g) for _, g, _ in errors]
        trains = [abs(t) for _, _, t in errors if t is not None]
        print(
            f"generation: mean |error| {statistics.mean(gens):.1%}, worst {max(gens):.1%}, within 10%: "
            f"{sum(g <= 0.10 for g in gens)} of {len(gens)}; training step: mean |error| "
            f"{statistics.mean(trains):.1%}, worst {max(trains):.1%}, within 10%: "
            f"{sum(t <= 0.10 for t in trains)} of {len(trains)}\n"
        )
        metrics[f"gen_mean_abs_error_by_{group}"] = statistics.mean(gens)
        metrics[f"train_mean_abs_error_by_{group}"] = statistics.mean(trains)
    print("predicted for models with no row, alone on an H100, 16 sequences, prompt 256, completion 512:")
    for hub in UNMEASURED:
        shape = shape_of(hub)
        parts = []
        for stack in ("trl", "unsloth"):
            ms = model.decode_ms(stack, shape, 16, 256 + 256)
            parts.append(
                f"{stack} {ms:.0f} ms/token, train step {model.train_s(stack, shape, 16 * 768):.2f} s"
            )
        print(
            f"  {hub} ({shape.layers} layers, {launches(shape)} module calls per token): {'; '.join(parts)}"
        )
    sweep = load_sweep(ROOT / "sweeps/frontier-16gb.yaml", [])
    for probe in ("decode", "synthetic"):
        estimate = estimate_sweep(sweep, plan(sweep).trials, times=times, probe=probe, speed=model)
        print(f"\nsweeps/frontier-16gb.yaml, {probe} probes:")
        print("\n".join(estimate.lines()))
        print(f"  (expected {duration(estimate.expected_s)}; packed: {duration(estimate.packed_s)})")
        metrics[f"frontier_16gb_expected_s_{probe}"] = estimate.expected_s
    return metrics
