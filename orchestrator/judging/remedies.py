"""What would make it fit: for a configuration that does not fit a budget (or is uncertain), the
nearest configurations that do, each checked the same way the verb checked the one asked.

One change at a time, in the user's terms, each the least change of its kind that fits:

  micro-batch   gradient accumulation: fewer completions per forward/backward (micro_batch_size)
  K, B          fewer completions per prompt, fewer prompts per step
  length        the longest completion that fits
  stack         another stack, as asked
  optimizer     8-bit or paged 8-bit optimizer state (where the trial spec has an `optim` knob)
  LoRA rank     a smaller rank
  generation    vLLM or not (vLLM in server mode holds its pool on another GPU)

and, where none of them fits alone, changes taken together (greedily: each round the nearest change of
each kind with the lowest peak, up to TOGETHER rounds), and the smallest registered card (orchestrator/judging/cards.py) the configuration as
asked fits.

`check(spec, budget)` is the verb's own answer for a configuration (fits: measured rows, else its step
simulated, else the memory model; fitmap: the memory model it drew the map with): an object with
`verdict`, `peak_gib`, `high_gib` and `basis`. A check may be slow (a simulated step, seconds to a
minute on a busy CPU), so `propose` (a fast predictor, e.g. the memory model's prior; peak GiB or None)
orders each kind's candidates and skips those it calls far over the budget, and at most `per_kind`
checks are spent on a kind (where a check is slow). Every suggestion printed has been checked by `check`, never by `propose`.

    found = remedies(spec, budget, check, stacks=["trl", "unsloth"], propose=fast_peak)
    for r in found.fits: print(r.words())
    found.card  # a Remedy on the smallest card where nothing fits on this one, else None
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

FITS, DOES_NOT_FIT, UNCERTAIN = "fits", "does not fit", "uncertain"
# The optimizer states a spec's `optim` knob (TRL's name) may hold that need less memory than AdamW's
# two fp32 moments: bitsandbytes' 8-bit AdamW and its paged variant (pages to host memory at a peak).
SMALLER_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit")
OPTIMIZER_KNOBS = ("optim", "optimizer")
LENGTH_STEP = 64  # a suggested completion length is a multiple of this
# How far over the budget a candidate may be proposed and still be checked: none. The proposer is
# scaled to the check's own answer at the configuration asked, so its misses on a neighbour are small,
# and each check it spares is a simulated step (tens of seconds on a busy CPU).
PROPOSE_SLACK = 1.0
LENGTH_AIM = 1.1
TOGETHER = 12  # the most rounds of changes taken together where no one change fits  # the longest length proposed is the one predicted this far under the budget


@dataclass(frozen=True)
class Remedy:
    """One configuration that fits: what changed (`kind`, `words`: the change in the user's terms with
    its flag), the spec, and the check's answer for it."""

    kind: str
    words: str
    spec: Any
    verdict: str
    peak_gib: float | None
    high_gib: float | None
    basis: str

    def figure(self) -> str:
        if self.peak_gib is not None:
            return f"{self.peak_gib:.1f} GiB"
        if self.high_gib is not None:
            return f"<= {self.high_gib:.1f} GiB"
        return ""


@dataclass
class Remedies:
    """What `remedies` found: the changes that fit (`fits`, nearest of each kind), the smallest card
    the configuration fits where none of them does (`card`, `card_name`), and the checks spent."""

    fits: list[Remedy] = field(default_factory=list)
    card: Remedy | None = None
    card_name: str | None = None
    checks: int = 0
    none_on_card: str | None = None  # where no registered card fits either: why
    together: Remedy | None = None  # where no one change fits: changes taken together that do


def _optimizer_knob(spec: Any) -> str | None:
    names = {f.name for f in dataclasses.fields(spec)}
    return next((k for k in OPTIMIZER_KNOBS if k in names), None)


def _halvings(value: int, floor: int) -> list[int]:
    out, v = [], value // 2
    while v >= floor:
        out.append(v)
        v //= 2
    if out and out[-1] != floor and value > floor:
        out.append(floor)
    return out


def _candidates(spec: Any, stacks: Sequence[str]) -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    """(kind, [(words, spec)...] nearest first) for each kind of change that applies to `spec`."""
    r = dataclasses.replace
    per_rank = spec.completions_per_rank
    micro = spec.effective_micro_batch_size
    if not spec.grad_accum:
        smaller = [m for m in range(micro - 1, 0, -1) if per_rank % m == 0]
        yield "micro-batch", [
            (f"gradient accumulation: --set micro_batch_size={m} ({per_rank // m} passes of {m})",
             r(spec, micro_batch_size=m))
            for m in smaller
        ]  # fmt: skip
    yield "K", [(f"K={k} (--k {k})", r(spec, num_generations=k)) for k in _halvings(spec.num_generations, 2)]
    if not spec.grad_accum:
        yield "B", [(f"B={b} (--b {b})", r(spec, batch_size=b)) for b in range(spec.batch_size - 1, 0, -1)]
    yield "length", []  # searched apart (_longest_length)
    yield (
        "stack",
        [(f"{_label(s)}, as asked (--stack {s})", r(spec, stack=s)) for s in stacks if s != spec.stack],
    )
    knob = _optimizer_knob(spec)
    if knob is not None:
        yield (
            "optimizer",
            [
                (f"{o} optimizer state (--set {knob}={o})", r(spec, **{knob: o}))
                for o in SMALLER_OPTIMIZERS
                if getattr(spec, knob) != o
            ],
        )
    if spec.adapter == "lora":
        yield (
            "LoRA rank",
            [(f"LoRA r={x} (--set lora_r={x})", r(spec, lora_r=x)) for x in _halvings(spec.lora_r, 4)],
        )
    if spec.generation == "vllm":
        yield "generation", [("generation by transformers (--set generation=transformers)",
                              r(spec, generation="transformers"))]  # fmt: skip
    else:
        yield "generation", [
            ("vLLM on a 2nd GPU (--set generation=vllm --set vllm_mode=server)",
             r(spec, generation="vllm", vllm_mode="server")),
        ]  # fmt: skip


def _label(stack: str) -> str:
    from trainers import stacks

    return stacks.label(stack)


def _valid(spec: Any) -> bool:
    return not spec.problems()


def remedies(
    spec: Any,
    budget_gib: float,
    check: Callable[[Any, float], Any],
    stacks: Sequence[str] = (),
    propose: Callable[[Any], float | None] | None = None,
    per_kind: int | None = None,
    cards: bool = True,
) -> Remedies:
    """The nearest configurations to `spec` that fit `budget_gib` by `check` (module docstring);
    per_kind: the most checks spent on one kind of change (None: as many as it takes)."""
    found = Remedies()

    def checked(words: str, kind: str, candidate: Any, budget: float = budget_gib) -> Remedy | None:
        found.checks += 1
        a = check(candidate, budget)
        if a.verdict != FITS:
            return None
        return Remedy(kind, words, candidate, a.verdict, a.peak_gib, a.high_gib, a.basis)

    def worth_checking(candidate: Any) -> bool:
        if propose is None:
            return True
        peak = propose(candidate)
        return peak is None or peak <= budget_gib * PROPOSE_SLACK

    for kind, options in _candidates(spec, stacks):
        if kind == "length":
            remedy = _longest_length(spec, budget_gib, check, propose, per_kind, found)
            if remedy is not None:
                found.fits.append(remedy)
            continue
        spent = 0
        for words, candidate in options:
            if per_kind is not None and spent >= per_kind:
                break
            if not _valid(candidate) or not worth_checking(candidate):
                continue
            spent += 1
            remedy = checked(words, kind, candidate)
            if remedy is not None:
                found.fits.append(remedy)
                break
    if not found.fits:
        found.together = _together(spec, budget_gib, check, stacks, propose, found)
    if cards and not found.fits:
        _smallest_card(spec, budget_gib, checked, found)
    return found


def _together(
    spec: Any,
    budget_gib: float,
    check: Callable,
    stacks: Sequence[str],
    propose: Callable | None,
    found: Remedies,
) -> Remedy | None:
    """Where no one change fits: changes taken together, greedily, for up to TOGETHER rounds: each round
    takes the nearest change of each kind (another stack aside) and keeps the one with the lowest peak
    (by `propose` where given, else by `check`), then checks the whole."""
    current, chosen = spec, {}
    for _ in range(TOGETHER):
        options = []
        for kind, choices in _candidates(current, ()):
            nearest = next(((w, c) for w, c in (choices if kind != "length" else _length_options(current))
                            if _valid(c)), None)  # fmt: skip
            if nearest is not None:
                options.append((kind, *nearest))
        if not options:
            return None

        def peak(option) -> float:
            if propose is not None:
                p = propose(option[2])
            else:
                found.checks += 1
                p = check(option[2], budget_gib).peak_gib
            return float("inf") if p is None else p

        kind, words, current = min(options, key=peak)
        chosen[kind] = words
        if propose is not None and (p := propose(current)) is not None and p > budget_gib:
            continue  # a slow check waits until the proposer calls the whole near enough
        found.checks += 1
        a = check(current, budget_gib)
        if a.verdict == FITS:
            said = "; ".join(chosen.values())
            return Remedy("together", said, current, a.verdict, a.peak_gib, a.high_gib, a.basis)
    return None


def _length_options(spec: Any) -> list[tuple[str, Any]]:
    """Halvings of the completion length, for changes taken together."""
    return [
        (f"completions of {n} tokens (--length {n})", dataclasses.replace(spec, max_completion_length=n))
        for n in _halvings(spec.max_completion_length, LENGTH_STEP)
    ][:1]


def _smallest_card(spec: Any, budget_gib: float, checked: Callable, found: Remedies) -> None:
    """The smallest registered card larger than the budget on which `spec` as asked fits."""
    from orchestrator.judging.cards import CARDS

    seen: set[float] = set()
    for card in sorted(CARDS.values(), key=lambda c: (c.usable_gib, not c.measured)):
        if card.usable_gib <= budget_gib or card.usable_gib in seen:
            continue
        seen.add(card.usable_gib)
        # a budget the spec holds (colocated vLLM's pool is a share of it) becomes the card's
        sized = (
            spec
            if spec.memory_budget_gib is None
            else dataclasses.replace(spec, memory_budget_gib=card.usable_gib)
        )
        remedy = checked(f"--card {card.name} ({card.usable_gib:.2f} GiB)", "card", sized, card.usable_gib)
        if remedy is not None:
            found.card, found.card_name = remedy, card.name
            return
    found.none_on_card = "no registered card fits it as asked"


def _longest_length(
    spec: Any,
    budget_gib: float,
    check: Callable,
    propose: Callable | None,
    per_kind: int | None,
    found: Remedies,
) -> Remedy | None:
    """The longest completion (a multiple of LENGTH_STEP, shorter than asked) that `check` says fits:
    with `propose`, its longest fitting length is checked (then 3/4 of it, up to per_kind checks);
    without, a bisection on `check` itself."""
    asked = spec.max_completion_length
    if asked <= LENGTH_STEP:
        return None

    def at(length: int) -> Any:
        return dataclasses.replace(spec, max_completion_length=length)

    def fits(length: int) -> Any:
        found.checks += 1
        a = check(at(length), budget_gib)
        return a if a.verdict == FITS else None

    def remedy(length: int, a: Any) -> Remedy:
        return Remedy(
            "length", f"completions of {length} tokens (--length {length})", at(length), a.verdict,
            a.peak_gib, a.high_gib, a.basis,
        )  # fmt: skip

    lengths = list(range(LENGTH_STEP, asked, LENGTH_STEP))
    if propose is not None:
        # aim inside the budget by the check's own interval's width: a fit needs its high end under it
        under = [n for n in lengths if (p := propose(at(n))) is not None and p <= budget_gib / LENGTH_AIM]
        start = under[-1] if under else LENGTH_STEP
        for _ in range(per_kind or 3):
            a = fits(start)
            if a is not None:
                return remedy(start, a)
            start = max(LENGTH_STEP, (start * 3 // 4) // LENGTH_STEP * LENGTH_STEP)
        return None
    lo, hi, best = 0, len(lengths) - 1, None
    while lo <= hi:  # the longest fitting, fits being true up to a point
        mid = (lo + hi) // 2
        a = fits(lengths[mid])
        if a is not None:
            best, lo = (lengths[mid], a), mid + 1
        else:
            hi = mid - 1
    return remedy(*best) if best is not None else None


@dataclass(frozen=True)
class Judged:
    """A memory model's answer in the shape `check` returns (fitmap's basis)."""

    verdict: str
    peak_gib: float | None
    high_gib: float | None
    basis: str


def model_check(model: Any, basis: str = "predicted") -> Callable[[Any, float], Judged]:
    """`check` by a MemoryModel's prediction (the fit map's basis): its verdict against the budget."""

    def check(spec: Any, budget: float) -> Judged:
        p = model.predict(spec)
        if p.unknown is not None:
            return Judged("unknown", None, None, p.unknown)
        return Judged(p.verdict(budget), p.peak_gib, p.high_gib, basis)

    return check


def lines(found: Remedies, width: int = 80) -> list[str]:
    """The remedies, each within `width` columns: the change, then its peak."""
    out = []
    for r in found.fits:
        out.append(_line(r.words, r.figure(), width))
    if found.together is not None:
        out.append(_line(found.together.words, found.together.figure(), width))
    if found.card is not None:
        out.append(_line(f"as asked, on {found.card.words}", found.card.figure(), width))
    elif found.none_on_card and not found.fits and found.together is None:
        out.append(f"    nothing tried fits, and {found.none_on_card}")
    return out


def title(found: Remedies, stack: str) -> str:
    """The line above `lines`: what kind of answer follows."""
    if found.fits:
        return f"{stack} would fit with one change"
    if found.together is not None:
        return f"{stack}: no one change fits; these together do"
    return f"{stack}: no change tried fits"


def _line(words: str, figure: str, width: int) -> str:
    import textwrap

    text = textwrap.fill(
        words, width - 2, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False
    )
    last = text.rsplit("\n", 1)[-1]
    room = width - len(last) - 2
    if len(figure) <= room:
        return f"{text}  {figure:>{room}}"
    return f"{text}\n      {figure}"
