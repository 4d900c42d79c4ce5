"""`rlsweep calibrate`'s choice of probes: a handful of configurations of one model and stack that pin
the memory model's terms for them, each predicted to fit the budget.

Within one family (a model, a stack and every other knob fixed) a peak moves with three things: a
constant (the weights, the LoRA state, the process's baseline), the sequences of a step (K x B: the
sampling logits, the prompts' share of the KV cache and the activations) and the completion tokens
of a step (K x B x completion: the rest of the KV cache, the activations, the logits). Each role
below changes one of them from the first probe, so the peaks separate the three:

  few, short   the smallest K and completion: the constant part;
  few, long    the same K, the longest completion predicted to fit: the per-token terms;
  many, short  the same completion, the largest K predicted to fit: the per-sequence terms;
  many, long   (a fourth probe) more sequences and longer completions at once, the largest predicted
               peak that fits: the map's boundary, and a held-out check on the other three.

"Predicted to fit" is the prediction interval's high end within the budget (Prediction.verdict
`fits`) and the predicted peak within (1 - HEADROOM) of it, so a probe is not chosen where the model cannot say it fits; the first probe, the smallest
configuration there is, runs where its predicted peak is within the budget even when its interval is
wider (nothing smaller could teach the model), and not at all when its peak is over the budget.
`rlsweep calibrate` chooses each probe again from the model fitted on the probes measured before it,
so later probes come closer to the budget as the interval narrows.

    plan = choose(base, MemoryModel.fit(rows), budget_gib=15.6)
    plan.probes, plan.notes
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from orchestrator.judging.fitmap import KS, LENGTHS
from orchestrator.judging.memory import FITS, MemoryModel, Prediction
from orchestrator.judging.solve import ladder
from trainers.trial import TrialSpec

FEW_SHORT, FEW_LONG, MANY_SHORT, MANY_LONG = "few, short", "few, long", "many, short", "many, long"
# What each role pins (module docstring), in the order they run.
ROLES = {
    FEW_SHORT: "the constant part: weights, LoRA state, baseline",
    FEW_LONG: "the per-token terms: KV cache, activations, logits",
    MANY_SHORT: "the per-sequence terms: sampling logits, the prompts' tokens",
    MANY_LONG: "both at once, near the budget: a check on the others",
}
PROBES = (3, 4)  # how many probes calibrate may run: the first three roles, or all four
DEFAULT_PROBES = 4
# Completion tokens a probe trains on at most (K x B x completion): a synthetic probe's step is then
# seconds on a GPU (the training step on those tokens is what takes the time).
MAX_PROBE_TOKENS = 32768
# Besides its interval's high end, a probe's predicted peak leaves this share of the budget free: an
# interval fitted on one or two probes is narrow by construction (on the first CPU run, tiny's `few,
# long` was predicted 0.72-0.87 GiB after one probe and measured 0.91).
HEADROOM = 0.15


class CalibrationError(ValueError):
    """Nothing can be calibrated: why, and what to do."""


@dataclass(frozen=True)
class Probe:
    role: str
    spec: TrialSpec
    prediction: Prediction

    @property
    def pins(self) -> str:
        return ROLES[self.role]

    def words(self) -> str:
        """'K=2 B=1 completion 128'."""
        s = self.spec
        return f"K={s.num_generations} B={s.batch_size} completion {s.max_completion_length}"


@dataclass
class Plan:
    probes: list[Probe]
    notes: list[str] = field(default_factory=list)  # roles left out, and why

    def role(self, name: str) -> Probe | None:
        return next((p for p in self.probes if p.role == name), None)


def choose(
    base: TrialSpec,
    model: MemoryModel,
    budget_gib: float,
    probes: int = DEFAULT_PROBES,
    ks: list[int] | tuple[int, ...] = KS,
    b: int = 1,
    lengths: tuple[int, int] = LENGTHS,
    max_tokens: int = MAX_PROBE_TOKENS,
) -> Plan:
    """The probes (module docstring) of base's model and stack: K from `ks`, B fixed at `b`, completion
    lengths on the doubling ladder lengths[0]..lengths[1]; CalibrationError when not even the first can
    run under the budget."""
    if probes not in PROBES:
        raise ValueError(f"probes: {probes}; calibrate runs {' or '.join(map(str, PROBES))}")
    ks = sorted(set(ks))
    lo, hi = lengths
    cs = ladder(lo, hi)
    cache: dict[tuple[int, int], tuple[TrialSpec, Prediction] | None] = {}

    def candidate(k: int, c: int) -> tuple[TrialSpec, Prediction] | None:
        """(spec, prediction) of K=k at completion c, None where no trial can hold it."""
        if (k, c) not in cache:
            spec = dataclasses.replace(
                base, num_generations=k, batch_size=b, max_completion_length=c, probe_steps=1, max_steps=1,
                memory_budget_gib=budget_gib,
            )  # fmt: skip
            cache[(k, c)] = None if spec.problems() else (spec, model.predict(spec))
        return cache[(k, c)]

    def fits(k: int, c: int) -> bool:
        found = candidate(k, c)
        return (
            found is not None
            and k * b * c <= max_tokens
            and found[1].verdict(budget_gib) == FITS
            and found[1].peak_gib <= (1 - HEADROOM) * budget_gib
        )

    k0 = ks[0]
    first = candidate(k0, lo)
    if first is None:
        spec = dataclasses.replace(base, num_generations=k0, batch_size=b, max_completion_length=lo)
        raise CalibrationError(
            f"the first probe (K={k0} B={b} completion {lo}) cannot run: {spec.problems()[0]}"
        )
    spec, prediction = first
    if prediction.unknown is not None:
        raise CalibrationError(f"no prediction to choose probes by: {prediction.unknown}")
    if prediction.peak_gib > budget_gib:
        fixes = ["a larger budget", "a smaller model"]
        if k0 > 2 or b > 1:
            fixes.append("fewer completions (--k 2 --b 1)")
        if base.quantization != "nf4":
            fixes.append("--set quantization=nf4")
        where = (
            " (no GPU here: the probes would measure this host's RSS, not a card's memory; run it on the "
            "machine with the card)"
            if model.measure == "RSS"
            else ""
        )
        raise CalibrationError(
            f"the smallest probe (K={k0} B={b} completion {lo}) is {prediction.describe()}, over the "
            f"{budget_gib:g} GiB budget{where}, and it is the smallest asked for. Give "
            f"{', '.join(fixes[:-1])} or {fixes[-1]}"
        )
    plan = Plan([Probe(FEW_SHORT, spec, prediction)])
    if prediction.verdict(budget_gib) != FITS:
        plan.notes.append(
            f"{FEW_SHORT}: {prediction.describe()} reaches past the budget; it runs anyway, as the smallest "
            "configuration there is, and the probes after it are chosen from what it measures"
        )
    longs = [c for c in cs if c > lo and fits(k0, c)]
    manys = [k for k in ks if k > k0 and fits(k, lo)]
    wanted = {FEW_LONG: longs and (k0, longs[-1]), MANY_SHORT: manys and (manys[-1], lo)}
    if probes == 4:
        both = [(k, c) for k in ks for c in cs if k > k0 and c > lo and fits(k, c)]
        wanted[MANY_LONG] = both and max(both, key=lambda kc: (cache[kc][1].peak_gib, kc[0] * kc[1]))
    why = {
        FEW_LONG: f"no completion above {lo} (of {', '.join(map(str, cs))}) at K={k0}",
        MANY_SHORT: f"no K above {k0} (of {', '.join(map(str, ks))}) at completion {lo}",
        MANY_LONG: f"no K above {k0} with a completion above {lo}",
    }
    for role, kc in wanted.items():
        if kc:
            plan.probes.append(Probe(role, *cache[kc]))
            continue
        then = "the probes before it pin the terms without it" if role == MANY_LONG else \
            f"the prior's values stand for {ROLES[role]}"  # fmt: skip
        plan.notes.append(
            f"{role} left out: {why[role]} is predicted to fit {budget_gib:g} GiB (the interval's high end "
            f"within it, the peak within {1 - HEADROOM:.0%} of it) with at most {max_tokens} completion tokens; {then}"
        )
    return plan


__all__ = [
    "HEADROOM",
    "DEFAULT_PROBES",
    "FEW_LONG",
    "FEW_SHORT",
    "MANY_LONG",
    "MANY_SHORT",
    "MAX_PROBE_TOKENS",
    "PROBES",
    "ROLES",
    "CalibrationError",
    "Plan",
    "Probe",
    "choose",
]
