"""What a trial's processes hold outside torch's caching allocator, per process, at the trial's peak: NVML's
reading of each process (the trainer and every child, by PID) beside torch's reserved, so each term of
trainers/simulate/_outside.py is checked on the card (bench/gpu/round4.sh, item `outside`).

    python bench/gpu/outside_alloc.py sample --root-pid PID --out samples.csv    # until PID exits
    python bench/gpu/outside_alloc.py header                                      # the table's header
    python bench/gpu/outside_alloc.py table --samples samples.csv --trial DIR    # one markdown row

`sample` reads, every --interval seconds, the root process and all its descendants (psutil) and NVML's
per-process list (every device's compute processes): one CSV row per process and reading (time, pid,
parent, command, NVML MiB or blank where NVML lists it not, RSS MiB). Without a GPU it writes the
processes with blank NVML (the rehearsal). `table` takes the trial's step with the largest
torch_peak_reserved_gib (its events.jsonl under DIR), the reading inside that step where the processes'
NVML sum is highest, and prints: the process with the most NVML (the trainer), its NVML less torch's
reserved (outside torch, in the trainer), each other process holding GPU memory (children: PID, command,
MiB), and the simulated terms for the trial's spec (counted and the unmeasured bound).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("t", "pid", "ppid", "command", "nvml_mib", "rss_mib")
HEADER = (
    "| trial | torch reserved peak GiB | trainer NVML GiB | trainer outside torch GiB | children holding GPU memory "
    "(pid command MiB) | children GiB | simulated outside: counted / at most GiB | unmeasured terms |\n"
    "|---|---|---|---|---|---|---|---|"
)


def _nvml_by_pid() -> dict[int, float]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver or no library: the rehearsal's host
        return {}
    used: dict[int, float] = {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.usedGpuMemory is not None:
                    used[process.pid] = used.get(process.pid, 0.0) + process.usedGpuMemory / 2**20
    finally:
        pynvml.nvmlShutdown()
    return used


def sample(root_pid: int, out: Path, interval: float) -> int:
    import psutil

    root = psutil.Process(root_pid)
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
            now = time.time()
            nvml = _nvml_by_pid()
            try:
                family = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for process in family:
                try:
                    command = " ".join(process.cmdline()[:4])[-80:]
                    writer.writerow((f"{now:.3f}", process.pid, process.ppid(), command,
                                     f"{nvml[process.pid]:.0f}" if process.pid in nvml else "",
                                     f"{process.memory_info().rss / 2**20:.0f}"))  # fmt: skip
                except psutil.Error:
                    continue
            handle.flush()
            time.sleep(interval)
    return 0


def _peak_step(trial: Path) -> dict | None:
    steps = []
    for events in trial.rglob("events.jsonl"):
        for line in events.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "step":
                steps.append(event)
    # on a GPU the step with torch's largest reserved; without one (the rehearsal) the largest RSS
    return max(
        steps, key=lambda e: e.get("torch_peak_reserved_gib") or e.get("rss_peak_gib") or 0, default=None
    )


def table(samples: Path, trial: Path, label: str | None) -> int:
    with samples.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    step = _peak_step(trial)
    label = label or trial.name
    if step is None:
        print(f"| {label} | - (no step recorded) | | | | | | |")
        return 0
    start, end = step.get("t_start", float("-inf")), step.get("t_end", float("inf"))
    readings: dict[str, list[dict]] = {}
    for row in rows:
        if start <= float(row["t"]) <= end:
            readings.setdefault(row["t"], []).append(row)
    if not readings:  # a step shorter than the interval: the readings around it
        readings = {t: [r for r in rows if r["t"] == t] for t in {r["t"] for r in rows}}

    def total(group: list[dict]) -> float:
        return sum(float(r["nvml_mib"]) for r in group if r["nvml_mib"])

    at_peak = max(readings.values(), key=total)
    holding = sorted((r for r in at_peak if r["nvml_mib"]), key=lambda r: -float(r["nvml_mib"]))
    reserved = step.get("torch_peak_reserved_gib")
    trainer = holding[0] if holding else None
    children = holding[1:]
    simulated = _simulated_terms(trial)
    trainer_gib = float(trainer["nvml_mib"]) / 1024 if trainer else None
    listed = "; ".join(f"{r['pid']} {r['command'][-40:]} {r['nvml_mib']}" for r in children) or "none"
    known = trainer_gib is not None and reserved is not None
    print(
        f"| {label} | {'-' if reserved is None else f'{reserved:.3f}'} "
        f"| {'-' if trainer_gib is None else f'{trainer_gib:.3f}'} | {f'{trainer_gib - reserved:.3f}' if known else '-'} "
        f"| {listed} "
        f"| {sum(float(r['nvml_mib']) for r in children) / 1024:.3f} | {simulated} |"
        + ("" if holding else f" (no NVML reading: {len(at_peak)} processes seen)")
    )
    return 0


def _simulated_terms(trial: Path) -> str:
    """The trial's simulated outside terms: counted / at most | the unmeasured ones' names."""
    spec_files = sorted(trial.rglob("spec.json"))
    if not spec_files:
        return "- | -"
    sys.path.insert(0, str(ROOT))
    from trainers.simulate._outside import counted_gib, outside, possible_gib
    from trainers.trial import TrialSpec

    spec = TrialSpec.load(spec_files[0])
    terms = outside(spec)
    names = ", ".join(t.name for t in terms if t.gib is None) or "none"
    return f"{counted_gib(terms):.2f} / {possible_gib(terms):.2f} | {names}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    taking = verbs.add_parser("sample", help="read the processes until the root exits")
    taking.add_argument("--root-pid", type=int, required=True)
    taking.add_argument("--out", type=Path, required=True)
    taking.add_argument("--interval", type=float, default=0.5, help="seconds between readings (default 0.5)")
    showing = verbs.add_parser("table", help="one markdown row at the trial's peak")
    showing.add_argument("--samples", type=Path, required=True)
    showing.add_argument("--trial", type=Path, required=True, help="the trial's output folder")
    showing.add_argument("--label")
    verbs.add_parser("header", help="the table's header")
    args = parser.parse_args()
    if args.verb == "sample":
        return sample(args.root_pid, args.out, args.interval)
    if args.verb == "header":
        print(HEADER)
        return 0
    return table(args.samples, args.trial, args.label)


if __name__ == "__main__":
    raise SystemExit(main())
