"""`make gpu-check`: the first thing to run on a new GPU. A fixed short comparison of the registered
stacks (trainers.stacks: TRL and Unsloth) in GRPO: random-weight Qwen2.5-1.5B-Instruct, QLoRA NF4, K=4,
B=2, 5 steps, one trial at a time through the trial supervisor, printed as one table: peak memory (NVML
for the whole process, torch's allocator), tokens/s and step time per stack.

Sized to answer in about 4 minutes on an H100: each step there takes 6-12 s (generation 90-95% of it)
and an Unsloth trial spends about 1.5 minutes importing and compiling before its first step, so 10 steps
of four trials took over 10 minutes (docs/benchmarks.md, "gpu-check"). GSPO is asked for with
`--modes grpo,gspo`: it then runs with num_iterations=2 for both modes, since with one pass per
generation the two compute the same gradient and their comparison would measure noise.

Medians skip the first step, which pays for warm-up (CUDA context, kernel compilation, caches).

This module runs the check and writes its results; orchestrator/cli/gpu_check.py reads the verb's
options and prints the table.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.judging.intervals import memory_ratio_interval, ratio_interval
from orchestrator.words.outcome import COMPLETED
from orchestrator.words.settings import GuardSettings
from trainers import stacks
from trainers.record import STEP, startup_figures
from trainers.trial import TrialSpec

MODES = ("grpo", "gspo")
DEFAULT_MODES = ("grpo",)
CHECK = {
    "model": "random:Qwen/Qwen2.5-1.5B-Instruct",
    "quantization": "nf4",
    "num_generations": 4,
    "batch_size": 2,
    "max_steps": 5,
}
# Passes per generation when modes are compared: GRPO and GSPO differ only off-policy (trainers/trial.py).
COMPARED_MODES_ITERATIONS = 2
TRIAL_TIMEOUT_S = 600.0


@dataclass
class Row:
    stack: str
    mode: str
    status: str
    detail: str
    gpu_name: str | None
    steps: int
    device_peak_gib: float | None  # NVML: everything the process holds on the GPU
    torch_peak_reserved_gib: float | None  # torch's caching allocator, reserved
    torch_peak_allocated_gib: float | None  # torch's tensors
    tokens_per_s: float | None  # median, prompt + completion tokens per step second
    step_s: float | None  # median
    gen_s: float | None  # median time in generation per step
    time_to_first_step_s: float | None = None  # trainer start to the end of step 1 (record.startup_figures)
    warmup_s: float | None = None  # step 1 less the median of the later steps: compilation, first calls
    speeds: tuple[float, ...] = ()  # tokens/s of the timed steps (the median's sample, for ratio intervals)


def check_specs(output_dir: Path, modes: tuple[str, ...] = DEFAULT_MODES) -> list[TrialSpec]:
    """The check's trials: each registered stack in each mode asked for (stack by stack)."""
    iterations = {"num_iterations": COMPARED_MODES_ITERATIONS} if len(modes) > 1 else {}
    return [
        TrialSpec(
            stack=stack,
            mode=mode,
            trial_key=f"{stack}-{mode}",
            sweep="gpu-check",
            output_dir=str(output_dir / f"{stack}-{mode}"),
            **CHECK,
            **iterations,
        )
        for stack in stacks.names()
        for mode in modes
    ]


def gpu_problem() -> str | None:
    """Why this host cannot run the check (no NVIDIA GPU visible to NVML), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - any NVML failure means no usable GPU here
        return f"no NVIDIA GPU found (NVML: {exc})"
    return None if count else "no NVIDIA GPU found (NVML sees 0 devices)"


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _peak(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def summarize(stack: str, mode: str, result: dict[str, Any]) -> Row:
    """One table row from a trial result (orchestrator.running.supervisor.TrialResult.to_dict())."""
    steps = result.get("steps") or []
    timed = steps[1:] if len(steps) > 1 else steps  # the first step pays for warm-up
    peak = result.get("peak") or {}
    return Row(
        stack=stack,
        mode=mode,
        status=result["status"],
        detail=result.get("status_detail") or "",
        gpu_name=(result.get("started") or {}).get("gpu_name"),
        steps=len(steps),
        device_peak_gib=_peak(
            [peak.get(STEP.device_peak_gib), *(s.get(STEP.device_peak_gib) for s in steps)]
        ),
        torch_peak_reserved_gib=_peak([s.get(STEP.torch_peak_reserved_gib) for s in steps]),
        torch_peak_allocated_gib=_peak([s.get(STEP.torch_peak_allocated_gib) for s in steps]),
        tokens_per_s=_median([s.get(STEP.tokens_per_s) for s in timed]),
        step_s=_median([s.get(STEP.step_s) for s in timed]),
        gen_s=_median([s.get(STEP.gen_s) for s in timed]),
        speeds=tuple(s[STEP.tokens_per_s] for s in timed if s.get(STEP.tokens_per_s) is not None),
        **startup_figures(steps, result.get("started_at")),
    )


def ratios(rows: list[Row], base: str = stacks.BASE) -> dict[tuple[str, str], dict[str, float | None]]:
    """Per (stack, mode), each stack relative to the base: peak NVML memory and tokens/s (None where
    either is missing), the tokens/s ratio in words with its 95% interval (intervals.Ratio.words:
    "no clear difference", "too few cycles to compare") and the memory ratio in words with the range the
    run-to-run spread of a peak allows (intervals.MemoryRatio.words)."""
    by_key = {(r.stack, r.mode): r for r in rows}
    out = {}
    for r in rows:
        reference = by_key.get((base, r.mode))
        if r.stack == base or reference is None:
            continue
        out[(r.stack, r.mode)] = {
            "memory": _ratio(r.device_peak_gib, reference.device_peak_gib),
            "speed": _ratio(r.tokens_per_s, reference.tokens_per_s),
            "speed_words": ratio_interval([r.speeds], [reference.speeds]).words(),
            "memory_words": memory_ratio_interval(
                _listed(r.device_peak_gib), _listed(reference.device_peak_gib)
            ).words(),
        }
    return out


def _listed(value: float | None) -> list[float]:
    return [] if value is None else [value]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


HEADERS = (
    "stack",
    "mode",
    "status",
    "steps",
    "peak NVML GiB",
    "peak torch reserved GiB",
    "peak torch allocated GiB",
    "tokens/s",
    "step s",
    "gen s",
    "first step at s",
    "warm-up s",
)


def cells(r: Row) -> list[str]:
    return [
        r.stack,
        r.mode,
        r.status,
        str(r.steps),
        _fmt(r.device_peak_gib),
        _fmt(r.torch_peak_reserved_gib),
        _fmt(r.torch_peak_allocated_gib),
        _fmt(r.tokens_per_s, 1),
        _fmt(r.step_s),
        _fmt(r.gen_s),
        _fmt(r.time_to_first_step_s, 1),
        _fmt(r.warmup_s, 1),
    ]


def title(rows: list[Row]) -> str:
    gpus = sorted({r.gpu_name for r in rows if r.gpu_name})
    setup = f"{CHECK['model']}, nf4, K={CHECK['num_generations']}, B={CHECK['batch_size']}, {CHECK['max_steps']} steps"
    return f"GPU check on {', '.join(gpus) or 'unknown GPU'}: {setup}"


def markdown_table(rows: list[Row]) -> str:
    """The same table as Markdown, for docs/gpu-results.md."""
    lines = [f"**{title(rows)}**", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join([*lines, "", *(f"- {n}" for n in notes(rows))]) + "\n"


def notes(rows: list[Row]) -> list[str]:
    base = stacks.label(stacks.BASE)
    out = [
        f"{mode}: {stacks.label(name)}/{base} peak memory {v['memory_words']}, tokens/s {v['speed_words']}"
        if v["memory"] is not None or v["speed"] is not None
        else f"{mode}: no {stacks.label(name)}/{base} ratio (a stack has no measurement)"
        for (name, mode), v in ratios(rows).items()
    ]
    # A failed trial's detail carries a stderr tail: one line, bounded, so the table stays readable.
    out += [
        f"{r.stack} {r.mode}: {r.status}: {' '.join(r.detail.split())[:300]}"
        for r in rows
        if r.status != COMPLETED
    ]
    return ["medians over steps 2..N (step 1 is warm-up); '-' = not measured", *out]


def write_results(rows: list[Row], output_dir: Path) -> None:
    """results.json and results.md of the rows so far, each replaced whole (a run cut mid-write keeps
    the previous one)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("results.json", json.dumps([asdict(r) for r in rows], indent=2)),
                       ("results.md", markdown_table(rows))):  # fmt: skip
        tmp = output_dir / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, output_dir / name)


def run_check(specs: list[TrialSpec], timeout_s: float, console: Console, output_dir: Path) -> list[Row]:
    """Each trial in turn, through the supervisor (child process, memory sampler, budget, timeout);
    the results so far are written after each (write_results), so a run cut short keeps its rows."""
    from orchestrator.running.supervisor import run_trial

    rows = []
    for spec in specs:
        console.print(f"[bold]{spec.stack} {spec.mode}[/bold]: {spec.max_steps} steps of {spec.model} ...")
        guard = GuardSettings(timeout_s=timeout_s, probe_steps=spec.probe_steps)
        result = run_trial(spec, trial_dir=spec.output_dir, guard=guard).to_dict()
        row = summarize(spec.stack, spec.mode, result)
        console.print(f"  {row.status} in {result.get('wall_s', 0):.0f} s")
        rows.append(row)
        write_results(rows, output_dir)
    return rows
