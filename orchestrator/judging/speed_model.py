"""A per-stack speed model of the mechanism, for configurations with no measured rows.

Decoding through transformers' generate over bitsandbytes 4-bit weights is launch-bound: each decode
step launches every layer's kernels once, and at these batch sizes the GPU waits on the launches, not
on the arithmetic (ms per token hardly moves from 2 to 16 sequences). So a decode step costs

    ms = (a[stack] x launches(model) + kappa x KV cache GB read at that context) x packing

launches(model): the modules one decode step calls: per layer each nn.Linear (4 attention projections;
3 MLP ones, or a mixture-of-experts layer's router and its routed experts' 3 each), each norm (the
layer's, and Qwen3's and Gemma 3's per-head q/k norms) and the attention; plus the output head. a[stack]
is ms per module call (Unsloth's fused kernels call fewer, so its a is smaller); kappa the small context
term (attention reads the KV cache of every sequence); packing = 1 + rho x (trials sharing the GPU - 1),
since the rows were measured with 1 to 6 trials on the card; predictions are for a trial alone.

The training step scales with tokens:

    train_s = o[stack] x launches(model) + c x tokens x parameters (in billions)

o: a step's fixed cost per module (forward, backward, optimizer; what a small step is made of);
c: seconds per token and billion parameters (the forward, the recomputed forward under gradient
checkpointing and the backward). A forward over `tokens` tokens (the synthetic probe's prefill chunk)
is the launch floor of one decode step plus c / TRAIN_FORWARDS x tokens x parameters.

Start-up and the first step's warm-up are per stack: the medians of the stack's H100 rows
(h100_times.json), the same for every model.

Fitted (`fit`) on the H100 rows of bench/data/h100-2026-11-26 (`h100_observations`): decode on every
completed row (a one-step row's generation less its stack's generation warm-up, measured on the runs
with several generating steps), the training step on the rows with steady steps (a first step's
training includes compilation). Coefficients are non-negative least squares on relative errors, rho by
a grid. bench/accuracy/speed_model.py writes the fit to h100_speed.json and prints its errors on rows it
was not fitted on.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.judging.memory._architecture import Shape
from orchestrator.judging.speed import (
    WINDOW_TOKENS,
    ProbeCost,
    check_probe_kind,
    prefill_chunks,
)
from trainers.record import renamed_keys

SPEED_FILE = Path(__file__).with_name("h100_speed.json")
RUNS = "bench/data/h100-2026-11-26"
TRAIN_FORWARDS = 4  # a training step's passes in forwards: forward, recomputed forward, backward (2)
KV_BYTES = 2  # bf16 KV cache
RHO_GRID = [i / 100 for i in range(0, 101)]


def launches(shape: Shape) -> int:
    """Module calls of one decode step (module docstring)."""
    norms = shape.norms_per_layer + (2 if shape.qk_norm else 0)
    attention = len(shape.attention_shapes()) + 1  # q, k, v, o and the attention itself
    dense = 3
    moe = 1 + 3 * shape.experts_per_token
    return shape.dense_layers * (attention + norms + dense) + shape.moe_layers * (attention + norms + moe) + 1


def kv_gb(shape: Shape, sequences: int, context: float) -> float:
    """GB of KV cache one decode step reads at `context` tokens (every sequence, every layer)."""
    per_token = 2 * shape.kv_heads * shape.head_dim * KV_BYTES
    return sequences * shape.cached_tokens(int(context)) * per_token / 1e9


@dataclass(frozen=True)
class Observation:
    """One H100 row, as the fit sees it."""

    stack: str
    model: str
    round: str
    sequences: int  # completions per step
    prompt_tokens: int  # the longest prompt of the task, in tokens
    completion: int  # decode steps (random weights never stop early)
    concurrent: int  # trials on the GPU at once
    gen_s: float  # one generation, first-step warm-up removed
    train_s: float | None  # a steady training step; None where only the first step ran
    num_iterations: int
    steady: bool  # from steady steps; False: a first step less its stack's warm-up


def _steps_of(run: Path) -> tuple[str, list[dict]] | None:
    """(stack, generating steps in order) of a run folder, from its events or steps.parquet."""
    config_file = run / "trial.json" if (run / "trial.json").exists() else run / "spec.json"
    if not config_file.exists():
        return None
    config = json.loads(config_file.read_text())
    stack = renamed_keys(config.get("config", config))[0]["stack"]
    if (run / "events.jsonl").exists():
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line]
        steps = [e for e in events if e.get("event") == "step"]
    elif (run / "steps.parquet").exists():
        import pyarrow.parquet as pq

        steps = pq.read_table(run / "steps.parquet").to_pylist()
    else:
        return None
    steps = sorted(
        (s for s in steps if s.get("generated") and s.get("gen_s") and s.get("train_s")),
        key=lambda s: s["step"],
    )
    return stack, steps


def first_step_warmup(runs_root: Path) -> dict[str, dict[str, float]]:
    """Per stack, what a first step pays once: {"gen": ..., "train": ...}, each the median over runs
    with two or more generating steps of the first step's seconds less the median of the later ones
    (generation: CUDA's first calls, kernel selection; training: compilation, Unsloth's above all)."""
    extra: dict[str, dict[str, list[float]]] = {}
    folders = {p.parent for p in runs_root.glob("round*/**/*") if p.name in ("steps.parquet", "events.jsonl")}
    for folder in sorted(folders):
        found = _steps_of(folder)
        if found is None or len(found[1]) < 2:
            continue
        stack, steps = found
        for part in ("gen", "train"):
            later = statistics.median(s[f"{part}_s"] for s in steps[1:])
            extra.setdefault(stack, {}).setdefault(part, []).append(steps[0][f"{part}_s"] - later)
    return {s: {p: statistics.median(v) for p, v in parts.items()} for s, parts in sorted(extra.items())}


def h100_observations(root: Path) -> list[Observation]:
    """The completed rows of trials.csv under root/RUNS. A row with steady steps gives its medians; a
    row whose only step is the first gives that step less its stack's first-step warm-up
    (first_step_warmup), its training step only where that leaves a positive time."""
    runs = root / RUNS
    warmup = first_step_warmup(runs)
    out = []
    with open(runs / "trials.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["status"] != "completed":
                continue
            steady = int(r["steps"]) >= 3
            gen = float(r["median_gen_s"]) - (0.0 if steady else warmup[r["stack"]]["gen"])
            train = float(r["median_train_s"]) - (0.0 if steady else warmup[r["stack"]]["train"])
            out.append(Observation(
                stack=r["stack"], model=r["model"].removeprefix("random:"), round=r["round"],
                sequences=int(r["completions_per_step"]), prompt_tokens=int(r["longest_prompt_tokens"]),
                completion=int(r["max_completion"]), concurrent=int(r["concurrent_trials"]), gen_s=gen,
                train_s=train if train > 0 else None, num_iterations=int(r["num_iterations"]), steady=steady,
            ))  # fmt: skip
    return out


def shape_of(model: str) -> Shape:
    """The architecture of a model whose hub id has a bundled config (trainers/model_configs: `random:<hub
    id>` or the hub id itself), or ValueError: the speed model predicts GPU models only (not `tiny` or a
    local folder)."""
    from orchestrator.judging.memory._model import model_shape
    from trainers.models import bundled_models

    hub = model.removeprefix("random:")
    if hub not in bundled_models():
        raise ValueError(
            f"model: {model!r} has no bundled architecture for the speed model; it predicts the hub models of "
            f"trainers/model_configs ({len(bundled_models())} of them, e.g. Qwen/Qwen3-4B)"
        )
    shape, why = model_shape(f"random:{hub}")
    if shape is None:
        raise ValueError(why)
    return shape


@dataclass(frozen=True)
class SpeedModel:
    """Fitted coefficients (module docstring); predictions are for one trial alone on an H100."""

    ms_per_launch: dict[str, float]  # a[stack]
    ms_per_kv_gb: float  # kappa
    packing_slowdown: float  # rho
    train_s_per_launch: dict[str, float]  # o[stack]
    train_s_per_token_billion: float  # c
    startup_s: dict[str, float]
    warmup_s: dict[str, float]
    source: str = RUNS

    # -- the mechanism ---------------------------------------------------------------------------
    def _stack(self, stack: str) -> str:
        if stack not in self.ms_per_launch:
            raise ValueError(
                f"stack: {stack!r} has no fitted speed (stacks: {', '.join(self.ms_per_launch)}); "
                "measure a row of it on a GPU and refit: python -m bench --refit speed_model"
            )
        return stack

    def decode_ms(
        self, stack: str, shape: Shape, sequences: int, context: float, concurrent: int = 1
    ) -> float:
        """ms per decode step at `context` tokens."""
        base = self.ms_per_launch[self._stack(stack)] * launches(shape)
        return (base + self.ms_per_kv_gb * kv_gb(shape, sequences, context)) * (
            1 + self.packing_slowdown * (concurrent - 1)
        )

    def gen_s(
        self, stack: str, shape: Shape, sequences: int, prompt: int, completion: int, concurrent: int = 1
    ) -> float:
        """A generation: the prefill (about one decode step) and `completion` decode steps, ms linear in
        the context, so their mean is the ms at the middle of the completion."""
        middle = self.decode_ms(stack, shape, sequences, prompt + completion / 2, concurrent)
        return (completion * middle + self.decode_ms(stack, shape, sequences, prompt, concurrent)) / 1000

    def train_s(self, stack: str, shape: Shape, tokens: int) -> float:
        """One training step over `tokens` (prompt + completion tokens of every sequence)."""
        return (
            self.train_s_per_launch[self._stack(stack)] * launches(shape)
            + self.train_s_per_token_billion * tokens * shape.parameters / 1e9
        )

    def forward_s(self, stack: str, shape: Shape, tokens: int, context: float, sequences: int) -> float:
        """One forward over `tokens` tokens (a prefill chunk): the launch floor plus its arithmetic."""
        return self.decode_ms(stack, shape, sequences, context) / 1000 + (
            self.train_s_per_token_billion / TRAIN_FORWARDS * tokens * shape.parameters / 1e9
        )

    # -- a trial ---------------------------------------------------------------------------------
    def probe(self, spec: Any, kind: str = "synthetic", prompt_tokens: int | None = None) -> ProbeCost:
        """One memory probe of `spec` (a TrialSpec) by its kind (orchestrator.judging.speed): start-up,
        warm-up, its generation part and one training step at full length. prompt_tokens: the prompts'
        length (default the spec's max_prompt_length, the worst case)."""
        kind = check_probe_kind(kind)
        stack, shape = self._stack(spec.stack), shape_of(spec.model)
        seqs = spec.batch_size * spec.num_generations
        prompt = spec.max_prompt_length if prompt_tokens is None else prompt_tokens
        length = spec.max_completion_length
        if kind == "decode":
            generation = self.gen_s(stack, shape, seqs, prompt, length)
        else:
            chunks = prefill_chunks(prompt, length, seqs)
            per_chunk = (prompt + length) / chunks
            generation = (
                sum(
                    self.forward_s(stack, shape, int(seqs * per_chunk), (i + 0.5) * per_chunk, seqs)
                    for i in range(chunks)
                )
                + WINDOW_TOKENS
                * (
                    self.decode_ms(stack, shape, seqs, prompt)
                    + self.decode_ms(stack, shape, seqs, prompt + length)
                )
                / 1000
            )
        train = self.train_s(stack, shape, seqs * (prompt + length))
        return ProbeCost(kind, self.startup_s[stack], self.warmup_s[stack], generation, train)

    # -- storage ---------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {k: _rounded(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SpeedModel:
        return cls(**data)


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return float(f"{value:.4g}") if isinstance(value, float) else value


def load_speed_model(path: Path = SPEED_FILE) -> SpeedModel:
    return SpeedModel.from_json(json.loads(path.read_text()))


# -- the fit ------------------------------------------------------------------------------------------
def _nnls_relative(rows: list[list[float]], targets: list[float]) -> np.ndarray:
    from scipy.optimize import nnls

    a = np.array(rows) / np.array(targets)[:, None]
    return nnls(a, np.ones(len(targets)))[0]


def _decode_design(
    obs: Observation, shape: Shape, rho: float, stacks: Sequence[str]
) -> tuple[list[float], float]:
    """One row's decode equation: [launch columns per stack..., KV column] x packing = ms per step."""
    packing = 1 + rho * (obs.concurrent - 1)
    kv = kv_gb(shape, obs.sequences, obs.prompt_tokens + obs.completion / 2)
    stack_cols = [launches(shape) * packing * (obs.stack == s) for s in stacks]
    return [*stack_cols, kv * packing], obs.gen_s / (obs.completion + 1) * 1000


def fit(observations: Sequence[Observation], times: dict[str, Any]) -> SpeedModel:
    """The coefficients from `observations` (h100_observations); start-up and warm-up per stack from
    `times` (h100_times.json's per stack-and-model figures)."""
    shapes = {o.model: shape_of(o.model) for o in observations}
    STACKS = tuple(sorted({o.stack for o in observations}))  # the stacks the rows measured  # noqa: N806
    best = None
    for rho in RHO_GRID:
        rows, targets = zip(
            *(_decode_design(o, shapes[o.model], rho, STACKS) for o in observations), strict=True
        )
        coef = _nnls_relative(list(rows), list(targets))
        err = sum((np.dot(r, coef) / t - 1) ** 2 for r, t in zip(rows, targets, strict=True))
        if best is None or err < best[0] - 1e-12:
            best = (err, rho, coef)
    _, rho, coef = best
    steady = [o for o in observations if o.train_s is not None]
    train_rows = [
        [*(launches(shapes[o.model]) * (o.stack == s) for s in STACKS),
         o.sequences * (o.prompt_tokens + o.completion) * shapes[o.model].parameters / 1e9]
        for o in steady
    ]  # fmt: skip
    train = _nnls_relative(train_rows, [o.train_s for o in steady])
    per_stack = {s: [v for k, v in times["times"].items() if k.startswith(s + "|")] for s in STACKS}
    return SpeedModel(
        ms_per_launch={s: float(coef[i]) for i, s in enumerate(STACKS)},
        ms_per_kv_gb=float(coef[len(STACKS)]),
        packing_slowdown=rho,
        train_s_per_launch={s: float(train[i]) for i, s in enumerate(STACKS)},
        train_s_per_token_billion=float(train[len(STACKS)]),
        startup_s={s: float(statistics.median(f["startup_s"] for f in per_stack[s])) for s in STACKS},
        warmup_s={s: float(statistics.median(f["first_step_extra_s"] for f in per_stack[s])) for s in STACKS},
    )


def predicted_gen_s(model: SpeedModel, obs: Observation) -> float:
    """The model's generation seconds for an observed row, packed as the row was."""
    return model.gen_s(
        obs.stack, shape_of(obs.model), obs.sequences, obs.prompt_tokens, obs.completion, obs.concurrent
    )


def predicted_train_s(model: SpeedModel, obs: Observation) -> float:
    return model.train_s(obs.stack, shape_of(obs.model), obs.sequences * (obs.prompt_tokens + obs.completion))


def held_out_errors(
    observations: Sequence[Observation], times: dict[str, Any], group: str = "row"
) -> list[tuple[Observation, float, float | None]]:
    """(row, generation error, training-step error or None) of each row predicted by a model fitted
    without it (group "row": leave-one-out) or without its round (group "round"); errors relative,
    (predicted - measured) / measured. A row whose stack no other row measures is left out."""
    out = []
    for i, obs in enumerate(observations):
        rest = [
            o for j, o in enumerate(observations)
            if (j != i if group == "row" else o.round != obs.round)
        ]  # fmt: skip
        if not any(o.stack == obs.stack for o in rest):
            continue
        if obs.train_s is not None and not any(o.stack == obs.stack and o.train_s is not None for o in rest):
            continue
        model = fit(rest, times)
        gen = predicted_gen_s(model, obs) / obs.gen_s - 1
        train = predicted_train_s(model, obs) / obs.train_s - 1 if obs.train_s is not None else None
        out.append((obs, gen, train))
    return out
