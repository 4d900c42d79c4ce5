"""How long a GPU sweep will take, said before it starts: an H100 estimate from measured step times.

A trial's time on an H100 is
    start-up + first-step extra + generations x decode steps x ms per token + steps x train s per step,
with, per stack and model, the medians of the H100 rows of 2026-11-26 (bench/data/h100-2026-11-26/
trials.csv): ms per generated token (a generation's wall time over its decode steps,
which probes force to max_completion_length), train seconds per step (grown in proportion to the
completions' tokens beyond the largest step measured), the first step's extra (warm-up; Unsloth's
compile) and start-up (the trial's wall time less its steps: process, imports, model build). The
figures live in h100_times.json beside this module; bench/accuracy/duration.py fits them from the rows
(`derive_times`) and, under `make refit`, writes it, beside bench/accuracy/speed_model.py, which fits
h100_speed.json; tests/unit/test_duration.py checks that they agree. This module only estimates, at run
time. Decoding is latency-bound there (ms per token
barely moves from 2 to 16 sequences), so a generation's time grows with its length, not with K x B.

Two totals, one trial at a time (`estimate_sweep`):
- worst case: every trial runs (probed);
- expected: the memory phase as the frontier search would run it were the memory verdicts right (each
  trial's judging.answer where given, else the memory model's; `expected_probes`): sure OOMs pruned
  (oom.predict), the rest probed in bisection order, a fit implying what it dominates and an OOM
  pruning what dominates it; only the probed trials take time.
A trial of a stack and model with no H100 row is predicted by the per-stack speed model (speed_model.py,
h100_speed.json: the mechanism fitted on the same rows, from the model's bundled architecture), labelled
`predicted`; one whose model has no known architecture gets no estimate (said so); nor does a sweep
none of whose trials asks for a GPU, or whose models none has a speed.

A trial's figures are `measured` where its stack and model have H100 rows with a step at least as
large, `extrapolated` where its step is larger than theirs (the training step grown in proportion),
`predicted` by the speed model otherwise. On another card (`card`, an
orchestrator.judging.card_speed.AssumedCard) the times are scaled (decode by memory bandwidth, the
training step by compute) with each total's interval, and the memory phase is packed by that card's
memory; a packing asked for a larger card is estimated as this card packs it, and said.

By probe kind (`probe`; the sweep's `oom.probe` once it exists, see `sweep_probe_kind`): a `decode`
probe step generates to max_completion_length; a `synthetic` one (the default) prefills the full length
in chunks, decodes two short windows and runs one training step at full length
(orchestrator/judging/speed.py), so a memory probe costs about its start-up and warm-up. Its generation
part is extrapolated from the measured ms per token and the speed model's forward cost per token.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.judging.pruning import dominates
from orchestrator.judging.speed import DEFAULT_PROBE, WINDOW_TOKENS, check_probe_kind, prefill_chunks

TIMES_FILE = Path(__file__).with_name("h100_times.json")


def _hub(model: str) -> str:
    return model.removeprefix("random:")


def load_times(path: Path = TIMES_FILE) -> dict[str, Any]:
    return json.loads(path.read_text())


def steps_run(spec: Any, phases: Sequence[str]) -> int:
    """Steps a trial runs: max_steps with a speed phase; else its memory phase (probe steps, then one
    steady generation cycle), at most max_steps."""
    if "speed" in phases:
        return spec.max_steps
    return min(spec.max_steps, spec.probe_steps + (spec.num_iterations or 1))


def sweep_probe_kind(sweep: Any) -> str:
    """The sweep's memory probe kind: its `oom.probe_kind` setting (synthetic | decode)."""
    return check_probe_kind(sweep.oom.probe_kind)


MEASURED, EXTRAPOLATED, PREDICTED = "measured", "extrapolated", "predicted"


@dataclass(frozen=True)
class Rates:
    """One trial's parts at its full length on an H100, and where they come from (`basis`):
    `measured` (h100_times.json: this stack and model's H100 rows, its step no larger than theirs),
    `extrapolated` (those rows, its step larger than any of theirs: the training step grown in
    proportion to the tokens) or `predicted` (the speed model, from the model's architecture)."""

    basis: str
    startup_s: float
    warmup_s: float
    gen_s: float  # one generation decoded to max_completion_length
    train_s: float  # one training step at full length
    synthetic_gen_s: float  # a synthetic probe's chunked prefill and two decode windows


def trial_rates(spec: Any, times: dict[str, Any], speed: Any = None) -> Rates | None:
    """The trial's Rates: measured where h100_times.json has its stack and model, else predicted by
    `speed` (a SpeedModel; default h100_speed.json); None where neither can say (an unknown stack or
    architecture)."""
    from orchestrator.judging.speed_model import TRAIN_FORWARDS, load_speed_model, shape_of

    speed = speed or load_speed_model()
    figures = times["times"].get(f"{spec.stack}|{_hub(spec.model)}")
    seqs = spec.batch_size * spec.num_generations
    length = spec.max_completion_length
    try:
        shape = shape_of(spec.model)
    except ValueError:
        shape = None
    if figures is None:
        if shape is None or spec.stack not in speed.ms_per_launch:
            return None
        probe = speed.probe(spec, "synthetic")
        return Rates(
            PREDICTED, probe.startup_s, probe.warmup_s,
            speed.gen_s(spec.stack, shape, seqs, spec.max_prompt_length, length), probe.train_s,
            probe.generation_s,
        )  # fmt: skip
    grow = max(1.0, seqs * length / figures["train_completion_tokens"])
    ms = figures["ms_per_token"]
    synthetic = None
    if shape is not None:
        chunks = prefill_chunks(spec.max_prompt_length, length, seqs)
        tokens = seqs * (spec.max_prompt_length + length)
        forward = speed.train_s_per_token_billion / TRAIN_FORWARDS * tokens * shape.parameters / 1e9
        synthetic = chunks * ms / 1000 + forward + 2 * WINDOW_TOKENS * ms / 1000
    return Rates(
        MEASURED if grow == 1.0 else EXTRAPOLATED, figures["startup_s"], figures["first_step_extra_s"], length * ms / 1000,
        figures["train_s"] * grow, synthetic if synthetic is not None else length * ms / 1000,
    )  # fmt: skip


def scaled(rates: Rates | None, decode: float, train: float) -> Rates | None:
    """`rates` on another card (orchestrator/judging/card_speed.py): decode parts x `decode`, the
    training step x `train`; start-up and warm-up unchanged."""
    if rates is None:
        return None
    return replace(
        rates, gen_s=rates.gen_s * decode, synthetic_gen_s=rates.synthetic_gen_s * decode,
        train_s=rates.train_s * train,
    )  # fmt: skip


def trial_seconds(spec: Any, steps: int, rates: Rates | None, probe: str = DEFAULT_PROBE) -> float | None:
    """The trial's H100 seconds for `steps` steps at worst-case length (every generation runs to
    max_completion_length), its first probe_steps steps synthetic with a synthetic probe; None without
    rates."""
    if rates is None:
        return None
    synthetic = min(steps, spec.probe_steps) if check_probe_kind(probe) == "synthetic" else 0
    decoded = steps - synthetic
    generations = math.ceil(decoded / (spec.num_iterations or 1))
    return (
        rates.startup_s + rates.warmup_s
        + synthetic * (rates.synthetic_gen_s + rates.train_s)
        + generations * rates.gen_s + decoded * rates.train_s
    )  # fmt: skip


@dataclass
class Search:
    """What the memory phase does with each trial were the memory model right: trial_key -> probed,
    pruned (predicted or dominating a predicted OOM) or implied."""

    outcome: dict[str, str] = field(default_factory=dict)

    def count(self, what: str) -> int:
        return sum(1 for v in self.outcome.values() if v == what)


def expected_probes(
    specs: Sequence[Any],
    fits: Callable[[Any], bool | None],
    frontier: bool = True,
    prune_dominated: bool = True,
) -> Search:
    """The frontier search (orchestrator/judging/frontier.py) played out with `fits` as the oracle: fits(spec)
    True (fits), False (OOM) or None (a sure OOM by prediction: pruned without a probe). The next probe
    is the undecided trial with the largest min(up, down) (ties: larger up, then plan order), as
    bisection_order scores it before the model is fitted; without `frontier`, plan order and no
    implied fits."""
    search = Search()
    verdict = {s.trial_key: fits(s) for s in specs}
    undecided = []
    for s in specs:
        if verdict[s.trial_key] is None:
            search.outcome[s.trial_key] = "pruned"
        else:
            undecided.append(s)
    n = len(undecided)
    dom = [[i != j and dominates(undecided[i], undecided[j]) for j in range(n)] for i in range(n)]
    left = set(range(n))
    while left:
        if frontier:

            def score(i: int, left: set[int] = left) -> tuple:
                down = sum(dom[i][j] for j in left)
                up = sum(dom[j][i] for j in left)
                return (-min(up, down), -up, i)

            pick = min(left, key=score)
        else:
            pick = min(left)
        left.discard(pick)
        search.outcome[undecided[pick].trial_key] = "probed"
        if verdict[undecided[pick].trial_key]:
            decided = {j for j in left if dom[pick][j]} if frontier else set()
            what = "implied"
        else:
            decided = {j for j in left if dom[j][pick]} if prune_dominated else set()
            what = "pruned"
        for j in decided:
            search.outcome[undecided[j].trial_key] = what
        left -= decided
    return search


@dataclass
class Estimate:
    """A sweep's estimate on a card (`card`, an orchestrator.judging.card_speed.AssumedCard; None: the
    H100): seconds per trial (None: no figures), the worst case and the expected, one trial at a time,
    and the expected memory phase packed (`packed_s`, `per_gpu` at once). On a card other than the
    H100 with known speed figures the times are scaled and `ranges` holds each total's interval
    (orchestrator/judging/card_speed.py)."""

    seconds: dict[str, float | None]
    worst_s: float
    expected_s: float
    search: Search
    missing: list[str]
    times: dict[str, Any]
    used: set[str] = field(default_factory=set)  # the stack|model keys of h100_times.json the sweep uses
    basis: dict[str, str] = field(default_factory=dict)  # trial_key -> MEASURED | EXTRAPOLATED | PREDICTED
    probe: str = DEFAULT_PROBE
    packed_s: float | None = None
    per_gpu: int = 1
    predicted_models: list[str] = field(default_factory=list)
    card: Any = None
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # worst/expected/packed -> ends
    notes: list[str] = field(default_factory=list)
    sessions: int | None = None  # the probe sessions the expected memory phase runs in (None: no sessions)

    @property
    def scaled(self) -> bool:
        """Whether the times are the H100's scaled to another card."""
        return bool(self.ranges)

    def card_label(self) -> str:
        """Which card the times are for, short: 'H100', 'RTX 4090, scaled'."""
        if not self.scaled:
            return "H100"
        return f"{self.card.speed.name}, scaled"

    def _total(self, what: str, seconds: float) -> str:
        from orchestrator.words.text import duration

        if what not in self.ranges:
            return duration(seconds)
        low, high = self.ranges[what]
        return f"{duration(seconds)} (between {duration(low)} and {duration(high)})"

    def lines(self) -> list[str]:
        known = sum(1 for s in self.seconds.values() if s is not None)
        n = len(self.seconds)
        counts = {
            b: sum(1 for v in self.basis.values() if v == b) for b in (MEASURED, EXTRAPOLATED, PREDICTED)
        }
        probed, implied = self.search.count("probed"), self.search.count("implied")
        pruned = self.search.count("pruned")
        how = (
            "synthetic probes: chunked prefill to full length, two 8-token decode windows, one training step"
            if self.probe == "synthetic" else "decode probes: each probe step generates to max_completion_length"
        )  # fmt: skip
        on = f"an {self.times['card']}" if not self.scaled else self.card.speed.name
        lines = [f"estimated time on {on}, one trial at a time ({known} of {n} trials; {how}):"]
        if self.card is not None:
            lines.insert(0, f"card assumed: {self.card.words()}")
        lines += [
            f"  worst case, every trial run: {self._total('worst', self.worst_s)}",
            f"  expected, were the memory answers right: {self._total('expected', self.expected_s)} "
            f"({probed} probed, {implied} implied by a fit, {pruned} pruned as OOM)",
        ]
        if self.sessions is not None:
            lines.append(
                f"  the probes in {self.sessions} probe session{'s' if self.sessions != 1 else ''} (oom.session): "
                "start-up counted once a session, each probe's warm-up and step in full"
            )
        if self.packed_s is not None and self.per_gpu > 1:
            lines.append(
                f"  expected memory phase packed {self.per_gpu} to the card: "
                f"{self._total('packed', self.packed_s)} at best "
                "(if no probe waited for another's verdict and sharing slowed none; measured packed/alone 1.0-1.65)"
            )
        lines.append(
            f"  figures: measured on an H100 ({self.times['source']}"
            + (": " + ", ".join(
                f"{k.split('|')[0]} {k.split('|')[1].split('/')[-1]} {v['ms_per_token']:g} ms per token"
                for k, v in self.times["times"].items() if k in self.used
            ) if self.used else "")
            + f"): {counts[MEASURED]} trials within its rows, {counts[EXTRAPOLATED]} extrapolated from them "
            "(a larger step than any measured: the training step grown in proportion to its tokens), "
            f"{counts[PREDICTED]} predicted by the speed model"
            + (f" ({', '.join(sorted(set(self.predicted_models)))})" if self.predicted_models else "")
            + ("; a synthetic probe's prefill and windows are extrapolated from ms per token" if self.probe == "synthetic" else "")
        )  # fmt: skip
        if self.scaled:
            lines.append(f"  on the {self.card.speed.name}: {self.card.scale.basis()}")
        elif self.card is not None and not self.card.on_measured_card:
            lines.append(
                f"  not measured on {self.card.name}, and no speed figures for it "
                + ("(a card named by its memory: name the GPU, e.g. --card 4090, for a scaled estimate)"
                   if self.card.speed is None else "")
                + ": the times above are an H100's"
            )  # fmt: skip
        lines += [f"  {note}" for note in self.notes]
        if self.missing:
            lines.append(
                f"  no speed for {', '.join(sorted(set(self.missing)))} (no H100 row, no known architecture): "
                "those trials are not counted"
            )
        return lines


def estimate_sweep(
    sweep: Any,
    specs: Sequence[Any],
    rows: Sequence[dict] = (),
    times: dict | None = None,
    probe: str | None = None,
    speed: Any = None,
    card: Any = None,
    answers: dict | None = None,
) -> Estimate | None:
    """The sweep's estimate (module docstring), or None when no trial asks for a GPU or none has
    figures. rows: the trials.parquet rows already in its output dir (the memory model fits on them;
    the trials they finished take no time). probe: the memory probe kind (default the sweep's,
    sweep_probe_kind). speed: a SpeedModel (default h100_speed.json). card: the card assumed (an
    orchestrator.judging.card_speed.AssumedCard; default the H100), for packing and scaling. answers: each
    trial's memory answer under the sweep's budget (judging.answer), else the memory model's prediction."""
    from orchestrator.judging.cards import H100_TORCH_GIB
    from orchestrator.judging.memory import DOES_NOT_FIT, FITS, UNKNOWN, MemoryModel
    from orchestrator.words.outcome import FINAL_STATUSES
    from orchestrator.words.phases import PackingRefused, packing
    from trainers.record import GPU

    if not getattr(sweep.resources, "gpus_per_trial", 1):
        return None
    times = times or load_times()
    probe = check_probe_kind(probe or sweep_probe_kind(sweep))
    phases = sweep.phases_to_run()
    scale = card.scale if card is not None and not card.on_measured_card else None
    factors = {"point": (1.0, 1.0)}
    if scale is not None:
        (fd, ft), (sd, st) = scale.ends()
        factors = {"point": (scale.decode, scale.train), "low": (fd, ft), "high": (sd, st)}
    rates: dict[tuple[str, str], Rates | None] = {}
    seconds = {f: {} for f in factors}
    memory_steps = {f: {} for f in factors}
    basis, startup = {}, {}
    for s in specs:
        # rates depend on the shape, not on the trial: computed once per distinct shape
        shape_key = (s.stack, s.model, s.batch_size * s.num_generations, s.max_prompt_length,
                     s.max_completion_length)  # fmt: skip
        if shape_key not in rates:
            rates[shape_key] = trial_rates(s, times, speed)
        r = rates[shape_key]
        for f, (d, t) in factors.items():
            rf = scaled(r, d, t)
            seconds[f][s.trial_key] = trial_seconds(s, steps_run(s, phases), rf, probe)
            memory_steps[f][s.trial_key] = trial_seconds(s, steps_run(s, ("memory",)), rf, probe) or 0.0
        if r is not None:
            basis[s.trial_key], startup[s.trial_key] = r.basis, r.startup_s
    if all(v is None for v in seconds["point"].values()):
        return None
    missing = [f"{s.stack} {_hub(s.model)}" for s in specs if seconds["point"][s.trial_key] is None]
    predicted_models = [
        f"{s.stack} {_hub(s.model).split('/')[-1]}" for s in specs if basis.get(s.trial_key) == PREDICTED
    ]
    used = {f"{s.stack}|{_hub(s.model)}" for s in specs} & set(times["times"])
    done = {r["trial_key"] for r in rows if r.get("status") in FINAL_STATUSES}
    todo = [s for s in specs if s.trial_key not in done]
    worst = {f: sum(seconds[f][s.trial_key] or 0.0 for s in todo) for f in factors}
    extra = {"basis": basis, "probe": probe, "predicted_models": predicted_models, "card": card}

    def ranges(totals: dict[str, dict[str, float]]) -> dict[str, tuple[float, float]]:
        if scale is None:
            return {}
        return {what: (by["low"], by["high"]) for what, by in totals.items()}

    budget = sweep.memory.budget_gib
    if budget is None or "memory" not in phases:
        search = Search({s.trial_key: "probed" for s in todo})
        both = {"worst": worst, "expected": worst}
        return Estimate(
            seconds["point"], worst["point"], worst["point"], search, missing, times, used,
            ranges=ranges(both), **extra,
        )  # fmt: skip
    model = MemoryModel.fit(list(rows), None if rows else GPU, unmeasured=GPU)

    def fits(spec: Any) -> bool | None:
        said = (answers or {}).get(spec.trial_key)
        p = model.predict(spec) if said is None else None
        verdict, peak = (p.verdict(budget), p.peak_gib) if p else (said.verdict, said.peak_gib)
        if verdict == UNKNOWN:
            return True
        if sweep.oom.predict and verdict == DOES_NOT_FIT:
            return None
        return verdict == FITS if peak is None else peak <= budget

    search = expected_probes(todo, fits, sweep.oom.frontier, sweep.oom.prune_dominated)
    # With a speed phase every fit (probed or implied) runs its full steps, its memory phase included.
    fit_keys = {s.trial_key for s in todo if fits(s)} if "speed" in phases else set()
    probed = [k for k, v in search.outcome.items() if v == "probed" and k not in fit_keys]
    notes = []
    card_gib = card.usable_gib if card is not None else H100_TORCH_GIB
    headroom, asked = sweep.resources.memory_phase_headroom_gib, sweep.resources.memory_phase_per_gpu
    try:
        per_gpu = packing(budget, card_gib, headroom, True, asked).per_gpu
    except PackingRefused as exc:  # a sweep packed for a larger card: estimated as this one packs it
        per_gpu = exc.fits
        notes.append(f"packed {per_gpu} to the card here, as it holds: {exc} (or name that card with --card)")
    sessions, once = None, {}
    if sweep.oom.session and "speed" not in phases:  # probes in sessions: one start-up per session
        by_key = {s.trial_key: s for s in todo}
        once = session_startups([by_key[k] for k in probed], startup)
        sessions = len(once)
    totals: dict[str, dict[str, float]] = {"worst": worst, "expected": {}, "packed": {}}
    for f in factors:
        memory = sum(memory_steps[f][k] for k in probed)
        speed_part = sum(seconds[f][k] or 0.0 for k in fit_keys)
        if sessions is None:
            totals["expected"][f] = memory + speed_part
            totals["packed"][f] = memory / per_gpu + speed_part
        else:  # each slot starts its own session, at the same time as the others
            shapes = memory - sum(startup.get(k, 0.0) for k in probed)
            totals["expected"][f] = shapes + sum(once.values()) + speed_part
            totals["packed"][f] = shapes / per_gpu + sum(once.values()) + speed_part
    return Estimate(
        seconds["point"], worst["point"], totals["expected"]["point"], search, missing, times, used,
        packed_s=totals["packed"]["point"], per_gpu=per_gpu, ranges=ranges(totals), notes=notes,
        sessions=sessions, **extra,
    )  # fmt: skip


def session_startups(specs: Sequence[Any], startup: dict[str, float]) -> dict[str, float]:
    """The probe sessions `specs` run in (trainers.session.session_key) and each one's start-up: its
    trials' longest (startup: trial_key -> seconds)."""
    from trainers.session import session_key

    once: dict[str, float] = {}
    for s in specs:
        key = session_key(s)
        once[key] = max(once.get(key, 0.0), startup.get(s.trial_key, 0.0))
    return once
