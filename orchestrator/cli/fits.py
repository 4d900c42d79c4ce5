"""`rlsweep fits`: one question, one line per stack. Does this model fit GRPO with K completions per
prompt, B prompts per step and completions of this length on this card? Nothing runs.

    rlsweep fits --model Qwen/Qwen3-4B --card 16gb --k 8 --b 1 --length 1024

Each stack's answer is fits / does not fit / uncertain, the peak with its 90% interval against the
card's usable memory, and its basis: measured (a trial of exactly these settings in --trials), implied by
a measured trial (one that needs at least as much memory fitted, or one that needs no more ran out of
memory), or predicted by the memory model (fitted on --trials' rows of the model's family, else its
prior). A measured row always wins over a prediction. Under the answer: under a stack that does not fit
or is uncertain, the nearest configurations that fit, each answered the same way
(orchestrator/judging/remedies.py); with --card, seconds per step on that card per stack
(orchestrator/judging/speed_step.py); the assumptions that move it, in TRL's names, and where a stack is
uncertain, the `rlsweep calibrate` line that would settle it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from orchestrator.cli._answers import print_remedies, print_speed
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
from orchestrator.cli._trials import versions_differ
from orchestrator.cli.fitmap import (
    add_card,
    add_stacks_and_trials,
    base_spec,
    card_budget,
    read_trials,
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
    interval: str = ""  # what the interval is, where it is not a 90% one (a simulated step's)
    provenance: str | None = None  # the measured row's: its source, run, card, date and versions
    versions_differ: str | None = None  # its packages where they are not this host's


# A card with no budget emulated is the card asked about when its own memory (gpu_total_gib, torch's
# figure) is within this share of the card's: torch sees a little less than the maker's nominal figure.
SAME_CARD_SHARE = 0.03


def same_card(row: dict, budget: float, measure: str | None) -> bool:
    """Whether a measured row ran on the card asked about, its budget meaning the same: under a budget of
    `budget` GiB (memory_budget_gib), or with none on a card of that memory, its peak read the way the
    question reads it (`measure`, default the GPU's NVML peak: a CPU trial's RSS is not a card's)."""
    from orchestrator.words.outcome import GPU
    from trainers.record import finite_or_none, peak_memory

    _, kind = peak_memory(row)
    if kind != (measure or GPU):
        return False
    emulated = finite_or_none(row.get("memory_budget_gib"))
    if emulated is not None:
        return abs(emulated - budget) < 0.01
    total = finite_or_none(row.get("gpu_total_gib"))
    return total is not None and abs(total - budget) <= SAME_CARD_SHARE * budget


def measured_as(row: dict, spec):
    """A measured row's settings as `spec`'s would be set (None where the row is no measurement, or of
    another stack or model): neither the budget it ran under nor how many steps it ran is a setting of the
    step, so its peak is judged against the card asked about."""
    from orchestrator.judging.memory import spec_of
    from orchestrator.words.outcome import COMPLETED, OOM, TIMEOUT

    if not row.get("config") or row.get("status") not in (COMPLETED, OOM, TIMEOUT):
        return None  # measured rows only: an implied one is no measurement
    other = dataclasses.replace(
        spec_of(row), memory_budget_gib=spec.memory_budget_gib, max_steps=spec.max_steps,
        probe_steps=spec.probe_steps,
    )  # fmt: skip
    if other.framework != spec.framework or other.model.removeprefix("random:") != spec.model:
        return None
    return other


def _measured_answer(spec, rows: list[dict], budget: float, measure: str | None = None) -> Answer | None:
    """The answer measured rows give (judging.fitmap.on_card: what a row says of this card): a row of
    exactly these settings, else a fit of one that needs at least as much, else an out-of-memory of one
    that needs no more. Only a row of the same card (same_card) is `measured`; one of another card or
    budget only implies, as a dominating fit or a dominated out-of-memory does."""
    from orchestrator.judging.fitmap import MEASURED_FITS, MEASURED_OOM, on_card
    from orchestrator.judging.pruning import dominates

    label = stacks.label(spec.framework)
    found: dict[tuple[bool, str], tuple] = {}
    for row in rows:
        other = measured_as(row, spec)
        if other is None:
            continue
        said = (row, *on_card(row, budget))
        here = same_card(row, budget, measure)
        over, under = dominates(other, spec), dominates(spec, other)
        if over and under and said[1] in (MEASURED_FITS, MEASURED_OOM):
            found.setdefault((here, "same"), said)
        elif over and said[1] == MEASURED_FITS:
            found.setdefault((here, "bigger_fit"), said)
        elif under and said[1] == MEASURED_OOM:
            found.setdefault((here, "smaller_oom"), said)
    for here in (True, False):
        for kind in ("same", "bigger_fit", "smaller_oom"):
            if (here, kind) in found:
                how = MEASURED if here and kind == "same" else IMPLIED
                row = found[(here, kind)][0]
                a = _row_answer(label, how, *found[(here, kind)])
                if not here and kind == "same":
                    peak = found[(here, kind)][2]
                    said = f"measured {peak:.2f} GiB" if peak is not None else f"ended {row.get('status')}"
                    a = dataclasses.replace(a, basis=f"{IMPLIED}: {row.get('trial_key')}, these settings, "
                                            f"{said} on another card or budget: {_ran_on(row)}")  # fmt: skip
                elif not here:
                    a = dataclasses.replace(a, basis=f"{a.basis} (on another card or budget: {_ran_on(row)})")
                return dataclasses.replace(
                    a, provenance=row.get("_provenance"), versions_differ=versions_differ(row)
                )
    return None


def _ran_on(row: dict) -> str:
    budget, total = row.get("memory_budget_gib"), row.get("gpu_total_gib")
    card = row.get("gpu_name") or "CPU"
    if budget is not None:
        return f"{card} under a {budget:g} GiB budget"
    return f"{card}, {total:.2f} GiB" if total is not None else card


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
    """The answer of `spec`'s step simulated on meta tensors (trainers/simulate) on a card of `budget` GiB
    (judged()); the reason where the stack or model cannot be simulated here."""
    from trainers.simulate import CannotSimulate, simulate

    try:
        step = simulate(spec)
    except CannotSimulate as exc:
        return str(exc)
    return judged(spec, step, budget)


def judged(spec, step, budget: float, error: tuple[float, float, str] | None = None) -> Answer:
    """A simulated step's answer on a card of `budget` GiB: its allocations replayed under the card's
    capacity for torch (the budget less what the processes hold outside torch's allocator, trainers/simulate/
    _outside.py's counted terms, and less what a
    colocated vLLM holds: memory._vllm), as the caching allocator runs there (it releases its cache and
    retries before it gives up: trainers/simulate/_allocator.py). It fits where the least it runs in
    (live tensors plus the fragmentation no release removes, + context + vLLM's), the trainer's part
    times the simulator's error on GPU rows of the model's family (or across families where none:
    memory._interval.simulated_error; `error` gives another), is under the budget in every phase. The
    peak shown is NVML's under that cap."""
    from orchestrator.judging.memory import DOES_NOT_FIT, FITS, UNCERTAIN
    from orchestrator.judging.memory._interval import architecture, simulated_error
    from orchestrator.judging.memory._vllm import beside_vllm
    from trainers.simulate._outside import counted_gib, outside, possible_gib

    # outside torch's allocator: the terms GPU rows measured (the CUDA context); the unmeasured are named
    terms = outside(spec)
    context = counted_gib(terms)
    unmeasured = [t.name for t in terms if t.gib is None]
    parts = beside_vllm(spec, step, budget, context)
    vllm, needed, reserved, beside = parts.vllm, parts.needed, parts.reserved, parts.beside
    capacity = budget - context - beside[1]
    capped = None if needed > capacity else min(reserved, capacity)
    peak = max((reserved if capped is None else capped) + beside[1], sum(parts.generating)) + context
    low_error, high_error, named = error or simulated_error(spec.framework, architecture(spec.model))
    low, high = parts.least(context, low_error, upper=False), parts.least(context, high_error)
    verdict = FITS if high <= budget else DOES_NOT_FIT if low > budget else UNCERTAIN
    if vllm is not None and vllm.refused:
        verdict = DOES_NOT_FIT
    if capped is None:
        cap = f"more than the {budget:g} GiB card leaves torch"
    elif capped < reserved:
        cap = f"under the card's cap reserved stays at {capped:.2f}, the cache released and retried"
    else:
        cap = "under the card's cap the same, the cache never released"
    said = (
        f"{SIMULATED} ({stacks.label(spec.framework)}'s own step on meta tensors: allocated "
        f"{step.allocated_gib:.2f} GiB in {step.phase}, reserved {step.reserved_gib:.2f} uncapped, "
        + (f"trainer {parts.trained:.2f} without generating, " if vllm else "")
        + f"{'the trainer ' if vllm else ''}runs in {needed:.2f} at least ({cap}), + context {context:.2f}"
        + (f"; {vllm.words}" if vllm and vllm.words else "")
        + (f"; refused: {vllm.refused}" if vllm and vllm.refused else "")
        + (
            f"; not counted, never measured: {', '.join(unmeasured)} (up to {possible_gib(terms) - context:.1f} GiB)"
            if unmeasured
            else ""
        )
        + f"; {'simulated before, read from disk' if step.simulated.get('cached') else f'{step.seconds:.0f} s'})"
    )
    return Answer(stacks.label(spec.framework), verdict, said, peak, low, high, named)


def answer_check(spec, asked: dict, rows: list[dict], budget: float, measure: str | None, simulate: bool):
    """`answer` as remedies' check (spec, budget) -> Answer, remembered, seeded with the answers given."""
    memo = {(dataclasses.replace(spec, framework=f).to_json(), budget): a for f, a in asked.items()}

    def check(candidate, budget_gib):
        key = (candidate.to_json(), budget_gib)
        if key not in memo:
            memo[key] = answer(candidate, rows, budget_gib, measure, simulate)
        return memo[key]

    return check


def simulate_unmeasured(specs: list, rows: list[dict], budget: float, measure: str | None) -> None:
    """The steps of `specs` that no measured row answers simulated at once, in worker processes
    (trainers.simulate.simulate_each), so that `answer` reads each as simulated."""
    from orchestrator.judging.fitmap import _hub_row
    from trainers.simulate import simulate_each

    rows = [_hub_row(r) for r in rows]
    simulate_each([s for s in specs if _measured_answer(s, rows, budget, measure) is None])


def answer(spec, rows: list[dict], budget: float, measure: str | None, simulate: bool = False) -> Answer:
    """One stack's answer for `spec` (a TrialSpec) against `budget` GiB: measured rows first, then (with
    `simulate`) its step simulated, then the memory model fitted on the rows."""
    from orchestrator.judging.fitmap import _hub_row
    from orchestrator.judging.memory import MemoryModel
    from orchestrator.words.outcome import GPU

    rows = [_hub_row(r) for r in rows]
    found = _measured_answer(spec, rows, budget, measure)
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
        if a.interval:  # a simulated answer's: the least it runs in, by the simulator's error on GPU rows
            reach = (
                f"{a.low_gib:.1f} or more"
                if a.high_gib == float("inf")
                else f"{a.low_gib:.1f}-{a.high_gib:.1f}"
            )
            return f"{a.peak_gib:5.1f} GiB (needs {reach}: {a.interval})"
        return f"{a.peak_gib:5.1f} GiB (90%: {a.low_gib:.1f}-{a.high_gib:.1f})"
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
        # the card is the trial's budget: what sizes a colocated vLLM's pool (its share of it)
        spec = dataclasses.replace(
            base, model=model, num_generations=args.k, batch_size=args.b, max_completion_length=args.length,
            memory_budget_gib=budget,
        )  # fmt: skip
        errors += [p for p in spec.problems() if not p.startswith("framework")]
    if errors:
        return refused("fits", errors, "answered")
    rows, refusal = read_trials(args, "fits", "answered")
    if refusal is not None:
        return refusal
    simulate = simulating(args)
    if simulate and sys.stderr.isatty():  # live word at a terminal; piped, each answer says its seconds
        progress("simulating each stack's training step on meta tensors where no measured row answers...")
    if simulate:  # the stacks no measured row answers simulated side by side, then answered one by one
        simulate_unmeasured(
            [dataclasses.replace(spec, framework=f) for f in frameworks], rows, budget, args.measure
        )
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
        if a.provenance:
            out.print(f"  {'':<{width}}  from {a.provenance}", markup=False)
        if a.versions_differ:
            out.print(f"  {'':<{width}}  measured with other versions: {a.versions_differ}", markup=False)
    out.print(f"assumed: {assumptions(spec)}", markup=False)
    simulated = any(a.basis.startswith(SIMULATED) for a in answers)
    out.print(
        "K is TRL's num_generations; B prompts per step, so B x K completions a step. Intervals are 90%"
        + (
            " (a simulated step's: the least it runs in under the card's cap, by the simulator's error on "
            "GPU rows of the model's family, or across families where none was measured)"
            if simulated
            else ""
        )
        + ": fits = the whole interval under the budget, does not fit = all of it above.",
        markup=False,
    )
    asked = dict(zip(frameworks, answers, strict=True))
    check = answer_check(spec, asked, rows, budget, args.measure, simulate)
    print_remedies(spec, asked, frameworks, budget, check, args.measure)
    print_speed(
        [("", [(stacks.label(f), dataclasses.replace(spec, framework=f)) for f in frameworks])], args.card
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
