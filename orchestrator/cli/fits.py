"""`rlsweep fits`: one question, one line per stack. Does this model fit GRPO with K completions per
prompt, B prompts per step and completions of this length on this card? Nothing runs.

    rlsweep fits --model Qwen/Qwen3-4B --card 16gb --k 8 --b 1 --length 1024

Each stack's answer is fits / does not fit / uncertain, the peak with its 90% interval against the
card's usable memory, and its basis: measured (a trial of exactly these settings in --trials), implied by
a measured trial (one that needs at least as much memory fitted, or one that needs no more ran out of
memory), or predicted by the memory model (fitted on --trials' rows of the model's family, else its
prior). A measured row always wins over a prediction. Under the answer: the assumptions that move it,
in TRL's names, and where a stack is uncertain, the `rlsweep calibrate` line that would settle it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from orchestrator.cli._common import (
    add_set,
    add_simulate,
    budget_gib,
    config_source,
    console,
    out,
    progress,
    refused,
    simulating,
)
from orchestrator.cli.fitmap import (
    add_card,
    add_stacks_and_trials,
    base_spec,
    card_budget,
    measured_rows,
    stacks_and_trials,
)
from trainers import stacks

# What the verb's own flags set, and so no --set: each with the flag to use instead.
TAKEN = {
    "framework": "the stacks are --stack (e.g. --stack trl,unsloth)",
    "model": "the model is --model (e.g. --model Qwen/Qwen2.5-3B-Instruct)",
    "num_generations": "K is --k (e.g. --k 8)",
    "batch_size": "B is --b (e.g. --b 2)",
    "max_completion_length": "the completion length is --length (e.g. --length 1024)",
    "memory_budget_gib": "the budget is --budget-gib or --card",
}
MEASURED, IMPLIED, SIMULATED, PREDICTED = "measured", "implied", "simulated", "predicted"


@dataclasses.dataclass(frozen=True)
class Answer:
    """One stack's answer: its verdict, peak and interval (GiB, None where not known), basis in words."""

    stack: str
    verdict: str
    basis: str
    peak_gib: float | None = None
    low_gib: float | None = None
    high_gib: float | None = None


def _measured_answer(spec, rows: list[dict], budget: float) -> Answer | None:
    """The answer measured rows give (judging.fitmap.on_card: what a row says of this card): a row of
    exactly these settings, else a fit of one that needs at least as much, else an out-of-memory of one
    that needs no more."""
    from orchestrator.judging.fitmap import MEASURED_FITS, MEASURED_OOM, on_card
    from orchestrator.judging.memory import spec_of
    from orchestrator.judging.pruning import dominates
    from orchestrator.words.outcome import COMPLETED, OOM, TIMEOUT

    label = stacks.label(spec.framework)
    same = bigger_fit = smaller_oom = None
    for row in rows:
        if not row.get("config") or row.get("status") not in (COMPLETED, OOM, TIMEOUT):
            continue  # measured rows only: an implied one is no measurement
        # Neither the budget it ran under nor how many steps it ran is a setting of the step: its peak
        # is judged against this card.
        other = dataclasses.replace(
            spec_of(row), memory_budget_gib=spec.memory_budget_gib, max_steps=spec.max_steps,
            probe_steps=spec.probe_steps,
        )  # fmt: skip
        if other.framework != spec.framework or other.model.removeprefix("random:") != spec.model:
            continue
        found = (row, *on_card(row, budget))
        over, under = dominates(other, spec), dominates(spec, other)
        if over and under and found[1] in (MEASURED_FITS, MEASURED_OOM):
            same = same or found
        elif over and found[1] == MEASURED_FITS:
            bigger_fit = bigger_fit or found
        elif under and found[1] == MEASURED_OOM:
            smaller_oom = smaller_oom or found
    for found, how in ((same, MEASURED), (bigger_fit, IMPLIED), (smaller_oom, IMPLIED)):
        if found is not None:
            return _row_answer(label, how, *found)
    return None


def _row_answer(label: str, how: str, row, said: str, peak, ran_under) -> Answer:
    """A measured row's answer for this card (`said`: on_card's), as measured or implied by it."""
    from orchestrator.judging.fitmap import MEASURED_FITS
    from orchestrator.judging.memory import DOES_NOT_FIT, FITS
    from orchestrator.words.outcome import OOM

    key = row.get("trial_key")
    if said == MEASURED_FITS:
        if how == MEASURED:
            return Answer(label, FITS, f"{MEASURED} ({key})", peak, peak, peak)
        return Answer(
            label, FITS, f"{IMPLIED}: {key} needs at least as much and measured {peak:.2f} GiB", high_gib=peak
        )
    ran_out = row.get("status") == OOM
    low = peak if peak is not None else ran_under
    if how == MEASURED:
        said = f"out of memory under {ran_under:g} GiB" if ran_out else f"{key} measured {peak:.2f} GiB"
        return Answer(label, DOES_NOT_FIT, f"{MEASURED}: {said}", low_gib=low)
    said = f"ran out of memory under {ran_under:g} GiB" if ran_out else f"measured {peak:.2f} GiB"
    return Answer(label, DOES_NOT_FIT, f"{IMPLIED}: {key} needs no more and {said}", low_gib=low)


def simulated_answer(spec, budget: float) -> Answer | str:
    """The answer of `spec`'s step simulated on meta tensors (trainers/simulate): NVML as the replayed
    reserved peak plus the GPU's context (the memory model's baseline), with the simulator's error range
    on GPU rows (memory._simulated); the reason where the stack or model cannot be simulated here."""
    from orchestrator.judging.memory import DOES_NOT_FIT, FITS, UNCERTAIN
    from orchestrator.judging.memory._interval import simulated_interval
    from orchestrator.judging.memory._terms import FACE
    from trainers.simulate import CannotSimulate, simulate

    try:
        step = simulate(spec)
    except CannotSimulate as exc:
        return str(exc)
    context = FACE["gpu"]["baseline"][0]
    peak = step.reserved_gib + context
    low, high = simulated_interval(spec.framework, peak, 0.0)
    verdict = FITS if high <= budget else DOES_NOT_FIT if low > budget else UNCERTAIN
    said = (
        f"{SIMULATED} ({stacks.label(spec.framework)}'s own step on meta tensors: allocated "
        f"{step.allocated_gib:.2f} GiB in {step.phase}, reserved {step.reserved_gib:.2f}, + context {context:.2f}; "
        f"{'simulated before, read from disk' if step.simulated.get('cached') else f'{step.seconds:.0f} s'})"
    )
    return Answer(stacks.label(spec.framework), verdict, said, peak, low, high)


def answer(spec, rows: list[dict], budget: float, measure: str | None, simulate: bool = False) -> Answer:
    """One stack's answer for `spec` (a TrialSpec) against `budget` GiB: measured rows first, then (with
    `simulate`) its step simulated, then the memory model fitted on the rows."""
    from orchestrator.judging.fitmap import _hub_row
    from orchestrator.judging.memory import MemoryModel
    from orchestrator.words.outcome import GPU

    rows = [_hub_row(r) for r in rows]
    found = _measured_answer(spec, rows, budget)
    if found is not None:
        return found
    why_not = None
    if simulate:
        simulated = simulated_answer(spec, budget)
        if isinstance(simulated, Answer):
            return simulated
        why_not = simulated
    model = MemoryModel.fit(rows, measure or GPU, unmeasured=GPU)
    p = model.predict(spec)
    label = stacks.label(spec.framework)
    if p.unknown is not None:
        return Answer(label, "unknown", p.unknown)
    basis = (
        f"{PREDICTED} (fitted on {p.n_fitted} trials)"
        if p.basis == "fitted"
        else (f"{PREDICTED} (the prior: no trial of its family measured)")
    ) + (f"; not simulated: {why_not}" if why_not else "")
    return Answer(label, p.verdict(budget), basis, p.peak_gib, p.low_gib, p.high_gib)


def assumptions(spec) -> str:
    """The settings that move the answer, in TRL's names."""
    completions = spec.num_generations * spec.batch_size
    micro = spec.effective_micro_batch_size
    adapter = (
        f"LoRA r={spec.lora_r} ({spec.lora_target_modules})" if spec.adapter == "lora" else "full fine-tuning"
    )
    quant = {"nf4": "on a 4-bit NF4 base (QLoRA)", "none": f"on a {spec.dtype} base"}.get(
        spec.quantization, spec.quantization
    )
    return (
        f"per_device_train_batch_size {micro} completions (of {completions} a step: "
        f"gradient_accumulation_steps {completions // micro}; --set micro_batch_size=N), "
        f"max_prompt_length {spec.max_prompt_length}, {adapter} {quant}, gradient_checkpointing "
        f"{'on' if spec.gradient_checkpointing else 'off'}, generation by {spec.generation}, "
        f"num_iterations {spec.num_iterations}, optim {spec.optim}; change any with --set KNOB=VALUE"
    )


def _figure(a: Answer) -> str:
    if (
        a.peak_gib is not None
        and a.low_gib is not None
        and a.high_gib is not None
        and a.low_gib != a.high_gib
    ):
        # a simulated answer's interval is the range of its error on the H100 rows, not a 90% one
        kind = "H100 error range" if a.basis.startswith(SIMULATED) else "90%"
        return f"{a.peak_gib:5.1f} GiB ({kind}: {a.low_gib:.1f}-{a.high_gib:.1f})"
    if a.peak_gib is not None:
        return f"{a.peak_gib:5.1f} GiB"
    if a.high_gib is not None:
        return f"<= {a.high_gib:.1f} GiB"
    if a.low_gib is not None:
        return f"> {a.low_gib:.1f} GiB"
    return "peak unknown"


def cmd_fits(args: argparse.Namespace) -> int:
    """Per stack: does the model fit the card at K, B and the completion length."""
    from orchestrator.spec.sweep import SweepError
    from trainers.trial import check_value

    errors: list[str] = []
    try:
        budget, card_words = card_budget(args)
    except ValueError as exc:
        errors.append(str(exc))
        budget, card_words = None, None
    else:
        if budget is None:
            errors.append("name the card (--card 16gb; `rlsweep fits --help` lists them) or --budget-gib GIB")
    for flag, value, knob in (
        ("--k", args.k, "num_generations"), ("--b", args.b, "batch_size"),
        ("--length", args.length, "max_completion_length"),
    ):  # fmt: skip
        problem = check_value(knob, value)
        if problem:
            errors.append(f"{flag} {value}: {knob} {problem}")
    frameworks, bad = stacks_and_trials(args)
    errors += bad
    base = None
    try:
        base = base_spec(args.set, TAKEN)
    except SweepError as exc:  # every refused --set, each with its fix
        errors += exc.errors
    model = args.model.removeprefix("random:")
    source, unreadable = config_source(args.model) if not errors else (None, None)
    errors += [unreadable] if unreadable else []
    if base is not None and not errors:
        spec = dataclasses.replace(
            base, model=model, num_generations=args.k, batch_size=args.b, max_completion_length=args.length
        )
        errors += [p for p in spec.problems() if not p.startswith("framework")]
    if errors:
        return refused("fits", errors, "answered")
    rows = measured_rows(args.trials) if args.trials is not None else []
    simulate = simulating(args)
    if simulate and sys.stderr.isatty():  # live word at a terminal; piped, each answer says its seconds
        progress("simulating each stack's training step on meta tensors where no measured row answers...")
    answers = [
        answer(dataclasses.replace(spec, framework=f), rows, budget, args.measure, simulate)
        for f in frameworks
    ]
    unknown = [a for a in answers if a.verdict == "unknown"]
    if len(unknown) == len(answers):
        console.print(f"fits: {model}: {unknown[0].basis}", markup=False)
        console.print("`rlsweep models` lists the models known here, with their sizes", markup=False)
        return 2
    where = card_words or f"a {budget:g} GiB budget"
    out.print(
        f"{model}, {spec.mode.upper()}, K={args.k} completions per prompt x B={args.b} prompts per step "
        f"({args.k * args.b} completions), completions of {args.length} tokens, on {where}:",
        markup=False,
    )
    if source:
        out.print(source, markup=False)
    width = max(len(a.stack) for a in answers)
    for a in answers:
        out.print(f"  {a.stack:<{width}}  {a.verdict:<13} {_figure(a)}  {a.basis}", markup=False)
    out.print(f"assumed: {assumptions(spec)}", markup=False)
    simulated = any(a.basis.startswith(SIMULATED) for a in answers)
    out.print(
        "K is TRL's num_generations; B prompts per step, so B x K completions a step. Intervals are 90%"
        + (
            " (a simulated step's: the range the simulator erred by on the H100's measured rows)"
            if simulated
            else ""
        )
        + ": fits = the whole interval under the budget, does not fit = all of it above.",
        markup=False,
    )
    for a, framework in zip(answers, frameworks, strict=True):
        if a.verdict == "uncertain":
            target = f"--card {args.card.name}" if args.card is not None else f"--budget-gib {budget:g}"
            out.print(
                f"{a.stack} is uncertain: measure it on the card with `rlsweep calibrate --model {model} "
                f"--stack {framework} {target} --k {args.k} --b {args.b}` (a few synthetic probes)",
                markup=False,
            )
    return 0


def add_fits(sub) -> None:
    from orchestrator.judging.memory import MEASURES

    p = sub.add_parser(
        "fits",
        help="does a model fit GRPO at K, B and a completion length on a card: one line per stack; nothing runs",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--model", required=True, help="a hub id (Qwen/Qwen3-4B), tiny, smollm2, random:ID or a folder"
    )
    add_card(p)
    p.add_argument("--budget-gib", type=budget_gib, help="the memory to fit in, GiB (instead of --card)")
    p.add_argument(
        "--k", type=int, default=8, help="completions per prompt (TRL's num_generations; default 8)"
    )
    p.add_argument("--b", type=int, default=1, help="prompts per step (default 1)")
    p.add_argument("--length", type=int, default=1024, help="max_completion_length in tokens (default 1024)")
    add_set(p, sweep=False)
    add_stacks_and_trials(p, "whose rows answer first and fit the model")
    p.add_argument("--measure", choices=MEASURES, help="which peak; default GPU (NVML)")
    add_simulate(p)
    p.set_defaults(func=cmd_fits)
