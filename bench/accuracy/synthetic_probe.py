"""Synthetic against decoded memory probes: the same configuration probed both ways, peaks and seconds.

For each model, stack and completion length, runs `rlsweep trial` (one probe step, max_steps 1) DECODES
times with probe_kind decode (only at --decode-lengths, default every length) and once with probe_kind
synthetic, each in its own process, into OUT/<model>-<stack>-c<length>-<kind><i> (a trial already there
is not run again), then prints one row per configuration: the decoded peaks (their spread is the
run-to-run spread), the synthetic peak, its difference from the decoded median as a share of it, which
phase set the synthetic step's peak, and each probe's wall time (the trial's, start-up included) and
step time. With --reference (a trials.csv of earlier GPU rounds, bench/data/h100-*/trials.csv) the row
also gives the decoded peak measured there for the same model, stack, K, B and length, and the synthetic
peak's difference from it.

The peak is the record's (trainers/record.py peak_memory: NVML on a GPU, else torch reserved, else RSS).
On a CPU the trainer's RSS high-water mark of its probe step (`rss_peak_gib` of step 1) is printed too.

Probes run cheapest first (by length, then model as given, synthetic before decoded) and --jobs at a
time (memory probes can share a GPU: per-process NVML peaks matched alone and packed, docs/gpu-results.md;
walls and step times are then packed ones). With --deadline-s no probe starts after that many seconds
from the bench's start, each probe's trial is limited to the time left (its `--timeout-s`), and the
configurations not probed both ways read `-`. `table` rewrites the table there after every probe, so a
run cut short keeps the rows so far.

Parameters (`--set NAME=VALUE`) keep the options' names: out (default: a scratch folder), models, stacks,
lengths, decode_lengths, decodes, synthetics, k, b, max_prompt_length, budget_gib, trial_args, jobs,
deadline_s, min_probe_s, reference, table.

    python -m bench synthetic_probe --set out=/tmp/synthetic --set models=tiny --set lengths=64,256,1024
    python -m bench synthetic_probe --set out=/tmp/synthetic --set models=smollm2 --set lengths=64,256,512
    # the GPU rows' configurations (docs/gpu-results.md, "Round 4, prepared"):
    python -m bench synthetic_probe --set out=/tmp/w/p --set models=random:Qwen/Qwen2.5-3B-Instruct \\
        --set lengths=128,256,512,1024,2048 --set decode_lengths=128,256 --set decodes=1 --set k=8 --set b=2 \\
        --set max_prompt_length=256 --set budget_gib=16 --set jobs=6 --set deadline_s=240 \\
        --set reference=bench/data/h100-2026-11-26/trials.csv --set table=/tmp/out/probes.md \\
        --set trial_args="--quantization nf4 --lora-r 16 --lora-alpha 32 --lora-dropout 0.05 --num-iterations 2"
"""

from __future__ import annotations

import csv
import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench import Context, benchmark

STACKS = ("trl", "unsloth")
SETTINGS = ["--max-steps", "1", "--probe-steps", "1", "--task", "arithmetic"]


@dataclass(frozen=True)
class Probe:
    model: str
    stack: str
    length: int
    kind: str  # decode | synthetic
    index: int

    @property
    def config(self) -> str:
        return f"{self.model.replace(':', '_').replace('/', '_')}-{self.stack}-c{self.length}"

    @property
    def name(self) -> str:
        return f"{self.config}-{self.kind}{self.index}"


def plan(
    models: list[str],
    stacks: list[str],
    lengths: list[int],
    decode_lengths: set[int],
    decodes: int,
    synthetics: int = 1,
):
    """Every probe, cheapest first: by length, then model as given, then stack; synthetic before decoded."""
    probes = []
    for length in sorted(lengths):
        for model in models:
            for stack in stacks:
                probes.extend(Probe(model, stack, length, "synthetic", i) for i in range(synthetics))
                if length in decode_lengths:
                    probes.extend(Probe(model, stack, length, "decode", i) for i in range(decodes))
    return probes


def run(folder: Path, probe: Probe, args, timeout_s: float | None) -> str:
    """Run one probe into folder (unless its trial.json is there); what happened, for the log."""
    if (folder / "trial.json").is_file():
        return "there already"
    command = [sys.executable, "-m", "orchestrator.cli", "trial", "--stack", probe.stack,
               "--model", probe.model, "--num-generations", str(args.k), "--batch-size", str(args.b),
               "--max-completion-length", str(probe.length), "--probe-kind", probe.kind,
               "--max-prompt-length", str(args.max_prompt_length), *SETTINGS,
               *(["--memory-budget-gib", str(args.budget_gib)] if args.budget_gib else []),
               *(["--timeout-s", str(int(timeout_s))] if timeout_s else []),
               *shlex.split(args.trial_args), "--output-dir", str(folder)]  # fmt: skip
    start = time.perf_counter()
    # the trial ends itself at --timeout-s; the margin lets it write its record first
    limit = timeout_s + 60 if timeout_s else None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        rc = done.returncode
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
    except subprocess.TimeoutExpired:
        rc, tail = None, ["killed at the bench's limit"]
    wall = time.perf_counter() - start
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench-wall.json").write_text(json.dumps({"wall_s": wall}))
    return f"exit {rc} in {wall:.0f} s: {tail[0][:160]}"


def figures(folder: Path) -> dict | None:
    """The probe's status, record peak, torch reserved peak, step 1's torch allocated peak and RSS
    high-water mark, phase, step time and wall; None when it left no record. A probe that ended before
    its first step (out of memory in generation, killed by the deadline) has a record and no step."""
    import pandas as pd

    from trainers.record import peak_memory

    if not (folder / "trial.json").is_file():
        return None
    outcome = json.loads((folder / "trial.json").read_text())["outcome"]
    peak, source = peak_memory(outcome)
    steps = folder / "steps.parquet"
    frame = pd.read_parquet(steps) if steps.is_file() else None
    step = frame.iloc[0] if frame is not None and len(frame) else None
    wall_file = folder / "bench-wall.json"
    return {
        "status": outcome.get("status"),
        "peak": peak,
        "source": source,
        "reserved": outcome.get("peak_torch_reserved_gib"),
        "allocated": _value(step, "torch_peak_allocated_gib"),
        "rss_step": None if step is None else float(step["rss_peak_gib"]),
        "gen_peak": _value(step, "gen_peak_gib"),
        "phase": None if step is None else step.get("peak_phase"),
        "step_s": None if step is None else float(step["step_s"]),
        "wall_s": json.loads(wall_file.read_text())["wall_s"] if wall_file.is_file() else None,
    }


def _value(step, column: str) -> float | None:
    """A step's figure as a float; None where the step, the column or its value is missing (NaN too)."""
    if step is None:
        return None
    value = step.get(column)
    return None if value is None or value != value else float(value)


def reference_rows(path: Path | None) -> list[dict]:
    if path is None:
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def reference_peak(rows: list[dict], model: str, stack: str, length: int, k: int, b: int) -> str:
    """The earlier rounds' decoded NVML peaks of this configuration ('-' if none): completed rows as
    numbers, an `oom` as '>= peak'."""
    found = [
        r
        for r in rows
        if r["model"] == model and r["stack"] == stack and int(r["max_completion"]) == length
        and int(r["K"]) == k and int(r["B"]) == b and r["status"] in ("completed", "oom") and r["peak_nvml_gib"]
    ]  # fmt: skip
    return (
        ", ".join(
            (
                f"{float(r['peak_nvml_gib']):.3f}"
                if r["status"] == "completed"
                else f"oom (>= {r['peak_nvml_gib']})"
            )
            + f" (round {r['round']})"
            for r in found
        )
        or "-"
    )


def _num(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _pct(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{100 * (value - base) / base:+.1f}%"


HEADER = (
    "| model | stack | completion | decoded peaks | synthetic peaks (status) | synthetic - decoded (medians) | "
    "decoded spread | earlier decoded (reference) | synthetic - earlier median | phase (synthetic) | "
    "generation peak decoded / synthetic (medians) | torch allocated decoded / synthetic | reserved decoded / synthetic "
    "| step s decoded / synthetic | wall s decoded / synthetic |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def row(args, refs: list[dict], model: str, stack: str, length: int) -> str | None:
    """One configuration's table row from whatever of its probes left a record (None: none did)."""
    config = Probe(model, stack, length, "", 0).config
    decoded = [f for f in (figures(args.out / f"{config}-decode{i}") for i in range(args.decodes)) if f]
    syns = [f for f in (figures(args.out / f"{config}-synthetic{i}") for i in range(args.synthetics)) if f]
    syn = syns[0] if syns else None
    if not decoded and syn is None:
        return None
    syn_peaks = [x["peak"] for x in syns if x["status"] == "completed" and x["peak"] is not None]
    fits = [d for d in decoded if d["status"] == "completed" and d["peak"] is not None]
    peaks = [d["peak"] for d in fits]
    middle = statistics.median(peaks) if peaks else None
    spread = f"{100 * (max(peaks) - min(peaks)) / middle:.1f}%" if len(peaks) > 1 else "-"
    shown = ", ".join(
        f"{d['status'] if d['status'] != 'completed' else ''} {_num(d['peak'])}".strip() for d in decoded
    )
    source = f" ({decoded[0]['source']})" if decoded and decoded[0]["source"] else ""
    sp = statistics.median(syn_peaks) if syn_peaks else None
    ref = reference_peak(refs, model, stack, length, args.k, args.b)
    measured = [float(x.split()[0]) for x in ref.split(", ") if x[0].isdigit()]
    ref_middle = statistics.median(measured) if measured else None

    def med(key: str, spec: str, probes=decoded) -> str:
        values = [d[key] for d in probes if d[key] is not None]
        return _num(statistics.median(values), spec) if values else "-"

    synthetic_peaks = ", ".join(_num(p) for p in syn_peaks) if syn_peaks else _num(syn and syn["peak"])

    return (
        f"| {model} | {stack} | {length} | {shown or '-'}{source} "
        f"| {synthetic_peaks} ({syn['status'] if syn else 'not run'}) | {_pct(sp, middle)} | {spread} "
        f"| {ref} | {_pct(sp, ref_middle)} | {(syn and syn['phase']) or '-'} "
        f"| {med('gen_peak', '.3f')} / {med('gen_peak', '.3f', syns)} "
        f"| {med('allocated', '.3f')} / {_num(syn and syn['allocated'])} "
        f"| {med('reserved', '.3f')} / {_num(syn and syn['reserved'])} "
        f"| {med('step_s', '.1f')} / {_num(syn and syn['step_s'], '.1f')} "
        f"| {med('wall_s', '.0f')} / {_num(syn and syn['wall_s'], '.0f')} |"
    )


def table(args, refs, models, stacks, lengths) -> str:
    rows = [row(args, refs, m, s, n) for n in sorted(lengths) for m in models for s in stacks]
    head = (
        f"K={args.k} B={args.b}, prompt <= {args.max_prompt_length} tokens, one probe step, "
        f"{f'budget {args.budget_gib:g} GiB' if args.budget_gib else 'no budget'}, {args.trial_args or 'TrialSpec defaults'}; "
        f"peaks in GiB ({f'{args.decodes} decoded at ' + (args.decode_lengths or 'every length') if args.decodes else 'none decoded'}, "
        f"{args.jobs} probe(s) at a time)"
    )
    return "\n".join([head, "", HEADER, *(r for r in rows if r)]) + "\n"


@benchmark(
    tags=("memory", "probe"),
    needs="cpu",
    params={
        "out": "",
        "models": "tiny",
        "stacks": ",".join(STACKS),
        "lengths": "64,256,1024",
        "decode_lengths": "",
        "decodes": 2,
        "synthetics": 1,
        "k": 8,
        "b": 2,
        "max_prompt_length": 96,
        "budget_gib": None,
        "trial_args": "",
        "jobs": 1,
        "deadline_s": None,
        "min_probe_s": 20.0,
        "reference": "",
        "table": "",
    },
    # no smoke size: each probe is a trainer start (about 70 s for two on 2 loaded cores)
)
def synthetic_probe(ctx: Context) -> dict:
    args = ctx.args
    args.out = Path(args.out) if args.out else ctx.scratch
    args.reference = Path(args.reference) if args.reference else None
    args.table = Path(args.table) if args.table else None
    models, stacks = args.models.split(","), args.stacks.split(",")
    lengths = [int(n) for n in args.lengths.split(",")]
    decode_lengths = {int(n) for n in args.decode_lengths.split(",") if n} or set(lengths)
    refs = reference_rows(args.reference)
    start = time.monotonic()
    lock = threading.Lock()

    def one(probe: Probe) -> None:
        left = None if args.deadline_s is None else args.deadline_s - (time.monotonic() - start)
        if left is not None and left < args.min_probe_s:
            print(
                f"[{time.monotonic() - start:.0f} s] {probe.name}: not started ({left:.0f} s left)",
                flush=True,
            )
            return
        said = run(args.out / probe.name, probe, args, left)
        print(f"[{time.monotonic() - start:.0f} s] {probe.name}: {said}", flush=True)
        if args.table:
            with lock:
                args.table.write_text(table(args, refs, models, stacks, lengths))

    probes = plan(models, stacks, lengths, decode_lengths, args.decodes, args.synthetics)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, probes))
    text = table(args, refs, models, stacks, lengths)
    if args.table:
        args.table.write_text(text)
    print(text, flush=True)
    ctx.tables["synthetic against decoded probes"] = text
    return {
        "probes": len(probes),
        "probes_recorded": sum((args.out / p.name / "trial.json").is_file() for p in probes),
    }
