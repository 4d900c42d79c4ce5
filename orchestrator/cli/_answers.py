"""What `fits` and `fitmap` say under their answers: the nearest configurations that fit
(orchestrator/judging/remedies.py) and seconds per step on the card (orchestrator/judging/speed_step.py),
each line within 80 columns."""

from __future__ import annotations

import dataclasses
import textwrap

from orchestrator.cli._common import out

WIDTH = 80
NOT_FITTING = ("does not fit", "uncertain")


def say(text: str, indent: str = "", more: str | None = None) -> None:
    """`text` wrapped at WIDTH columns, plainly."""
    wrapped = textwrap.fill(
        text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  " if more is None else more,
        break_on_hyphens=False, break_long_words=False,
    )  # fmt: skip
    out.print(wrapped, markup=False)


def basis_kind(basis: str) -> str:
    """A check's basis in one word: simulated, predicted, measured, implied."""
    return basis.split(" ")[0].rstrip(":;")


def prior_proposer(spec, answer, measure):
    """A fast peak for remedies' proposals: the memory model's prior scaled to `answer`'s peak at `spec`
    (a simulated step's, usually)."""
    from orchestrator.judging.memory import MemoryModel
    from orchestrator.words.outcome import GPU

    prior = MemoryModel.fit([], measure or GPU, unmeasured=GPU)
    at_asked = prior.predict(spec).peak_gib
    ratio = answer.peak_gib / at_asked if answer.peak_gib and at_asked else 1.0

    def propose(candidate):
        peak = prior.predict(candidate).peak_gib
        return None if peak is None else peak * ratio

    return propose


def print_found(found, stack: str, where: str = "") -> None:
    """A stack's remedies under their title line (`where`: the cell they are for, on a map)."""
    from orchestrator.judging.remedies import lines, title

    shown = [*found.fits, *(x for x in (found.together, found.card) if x is not None)]
    kinds = sorted({basis_kind(r.basis) for r in shown})
    how = f", each {' or '.join(kinds)} as above" if kinds else ""
    say(f"{title(found, stack + where)}{how}:")
    for line in lines(found, WIDTH):
        out.print(line, markup=False)


def print_remedies(spec, asked: dict, stack_names: list[str], budget: float, check, measure) -> None:
    """Under each stack of `asked` ({stack: Answer}) that does not fit or is uncertain: the nearest
    configurations that fit, each checked by `check`, the verb's own answer."""
    from orchestrator.judging.remedies import remedies

    # no GPU row bounds the simulator's error on this family: no change could be called a fit, so none is
    # searched for (each would be a simulation spent for nothing)
    unbounded = [a.stack for a in asked.values() if a.verdict in NOT_FITTING and a.high_gib == float("inf")]
    if unbounded:
        say(
            f"{', '.join(unbounded)}: no change can be called a fit until the simulator's error on this "
            "family is measured (no upper bound yet); the calibrate lines below measure it on the card"
        )
    for stack, a in asked.items():
        if a.verdict not in NOT_FITTING or a.stack in unbounded:
            continue
        mine = dataclasses.replace(spec, stack=stack)
        # a simulated check takes seconds to a minute a shape: the prior proposes which to simulate
        slow = basis_kind(a.basis) == "simulated"
        found = remedies(
            mine,
            budget,
            check,
            stack_names,
            prior_proposer(mine, a, measure) if slow else None,
            per_kind=1 if slow else None,
        )
        print_found(found, a.stack)


def print_speed(groups: list[tuple[str, list[tuple[str, object]]]], card, title: str = "") -> None:
    """Seconds per step on `card` (a cards.Card; None: say how to get them) for each (label, spec) of
    each group (a heading, '' for none)."""
    from orchestrator.judging.speed_step import basis_words, card_speeds, card_words, range_words, step_time

    if card is None:
        out.print("Seconds per step: name the card (e.g. --card 4090) for them", markup=False)
        return
    speeds = card_speeds(card)
    say(f"Seconds per step{title}, {card_words(card, speeds)}:")
    if not speeds:
        return
    width = max(len(label) for _, pairs in groups for label, _ in pairs)
    indent, known = "    ", 0
    for heading, pairs in groups:
        if heading:
            out.print(f"  {heading}", markup=False)
        for label, spec in pairs:
            times = [step_time(spec, s) for s in speeds]
            if any(t is None for t in times):
                say(f"{label:<{width}}  unknown: no fitted speed for this stack, or no architecture", indent)
                continue
            known += 1
            say(f"{label:<{width}}  {range_words(times)}", indent, indent + " " * (width + 2))
    if known:
        say(basis_words(speeds), "  ", "  ")


def print_map_remedies(fm, base, budget: float, min_length: int) -> None:
    """Under a map: for each stack and model with cells where not even the shortest completion surely
    fits, the nearest configurations that fit at its smallest such cell, checked by the map's own
    memory model."""
    from orchestrator.judging.remedies import model_check, remedies
    from trainers import stacks

    check = model_check(
        fm.model,
        "predicted" if not any(b.startswith("simulated") for b in fm.basis.values()) else "simulated",
    )
    for stack in fm.stacks:
        for model in fm.models:
            cells = [x for x in fm.boundaries if (x.stack, x.model) == (stack, model)
                     and x.unknown is None and x.sure is None]  # fmt: skip
            if not cells:
                continue
            cell = min(cells, key=lambda x: (x.k * x.b, x.k))
            spec = dataclasses.replace(
                base, stack=stack, model=model, num_generations=cell.k, batch_size=cell.b,
                max_completion_length=min_length,
            )  # fmt: skip
            found = remedies(spec, budget, check, fm.stacks)
            more = f", {len(cells) - 1} more such cell(s)" if len(cells) > 1 else ""
            where = f" at K={cell.k} B={cell.b} (not surely {min_length} tokens{more})"
            print_found(found, f"{stacks.label(stack)} {model.split('/')[-1]}", where)


def print_map_speed(fm, base, card, ks: list[int], bs: list[int]) -> None:
    """Seconds per step on the card for each stack and model of a map, at one K and B (8 and the
    smallest B where the map has them) and the longest completion that fits there (the longest
    searched where it fits all the way: `≥8192`)."""
    from orchestrator.judging.fitmap import length_words
    from trainers import stacks

    k = 8 if 8 in ks else sorted(ks)[len(ks) // 2]
    b = min(bs)
    groups = []
    for model in fm.models:
        pairs = []
        for stack in fm.stacks:
            x = fm.boundary(stack, model, k, b)
            if x.unknown is not None or x.likely is None:
                continue
            spec = dataclasses.replace(
                base, stack=stack, model=model, num_generations=k, batch_size=b,
                max_completion_length=x.likely,
            )  # fmt: skip
            pairs.append((f"{stacks.label(stack)} at {length_words(x.likely, x.lo, x.hi)}", spec))
        if pairs:
            groups.append((model, pairs))
    if groups:
        print_speed(groups, card, f" at K={k}, B={b} and the longest completion that fits")


def speed_line(chosen, pairs) -> str:
    """The decode speed on the card named with --card (orchestrator.judging.card_speed.decode_line)."""
    from orchestrator.judging.card_speed import decode_line, speed_of

    return decode_line(chosen.name, speed_of(chosen.typed or chosen.name, chosen.name), pairs)
