"""`python -m bench [NAME|TAG ...] [--smoke] [--gpu] [--refit] [--set PARAM=VALUE ...] [--list]`: selects
benchmarks, runs them one after another, writes each one's record and checks its goals; exit 1 where a
goal was missed or a benchmark failed, 2 on bad arguments (before anything runs)."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench import _records
from bench._harness import BENCHMARKS, ROOT, Benchmark, Context

KINDS = ("cost", "accuracy")  # the folders under bench/ whose modules register benchmarks


class BadInput(Exception):
    """A bad argument: the message names the field, the value, the rule and the fix."""


def discover() -> dict[str, Benchmark]:
    """Import every benchmark module of bench/cost and bench/accuracy (each registers its benchmarks)."""
    for kind in KINDS:
        package = importlib.import_module(f"bench.{kind}")
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"bench.{kind}.{info.name}")
    return BENCHMARKS


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0


def select(words: list[str], *, smoke: bool, gpu: bool, known: dict[str, Benchmark]) -> list[Benchmark]:
    """The benchmarks that NAMEs and TAGs pick (a tag: one of its tags, its folder or its need; none given:
    every one), without those needing a GPU unless
    `gpu`, and in a smoke run without those that have no smoke size. A name asked for that cannot run so is
    an error; a tag's members that cannot are left out."""
    tags = sorted({t for b in known.values() for t in (*b.tags, b.kind, b.needs)})
    picked: dict[str, Benchmark] = {}
    for word in words:
        if word in known:
            b = known[word]
            if b.needs == "gpu" and not gpu:
                raise BadInput(f"benchmark {word!r} needs a GPU; add --gpu on a host with an NVIDIA GPU")
            if smoke and b.smoke is None:
                raise BadInput(f"benchmark {word!r} has no smoke settings; run it without --smoke")
            picked[word] = b
        elif word in tags:
            picked.update({b.name: b for b in known.values() if word in (*b.tags, b.kind, b.needs)})
        else:
            raise BadInput(
                f"NAME|TAG {word!r} is neither a benchmark nor a tag; names and tags: python -m bench --list"
            )
    chosen = picked.values() if words else known.values()
    named = set(words)
    return [
        b
        for b in sorted(chosen, key=lambda b: (b.kind, b.name))
        if b.name in named or ((gpu or b.needs != "gpu") and (not smoke or b.smoke is not None))
    ]


def coerce(key: str, text: str, default: Any) -> Any:
    """VALUE of `--set KEY=VALUE` as the type of KEY's default."""
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, list | tuple) and default and isinstance(default[0], int | float):
            return [type(default[0])(x) for x in text.split(",")]
        if default is None:
            for kind in (int, float):
                try:
                    return kind(text)
                except ValueError:
                    pass
        return text
    except ValueError:
        kind = (
            "true or false"
            if isinstance(default, bool)
            else type(default[0] if isinstance(default, list | tuple) else default).__name__
        )
        raise BadInput(
            f"--set {key}={text}: {key} takes {kind} (its default is {default!r}); e.g. --set {key}={default!r}"
        ) from None


def settings(chosen: list[Benchmark], pairs: list[str], smoke: bool) -> dict[str, dict[str, Any]]:
    """Each benchmark's parameters: its defaults, its smoke settings in a smoke run, then `--set`s (a list
    of strings takes one item per --set; a list of numbers is comma-separated)."""
    out = {b.name: b.settings(smoke) for b in chosen}
    given: set[str] = set()
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--set {pair!r}: takes PARAM=VALUE; e.g. --set steps=4")
        owners = [b for b in chosen if key in b.params]
        if not owners:
            names = sorted({p for b in chosen for p in b.params})
            raise BadInput(
                f"--set {pair}: no selected benchmark has a parameter {key!r}; "
                f"theirs: {', '.join(names) or 'none'} (python -m bench --list shows each one's)"
            )
        for b in owners:
            default = b.params[key]
            if isinstance(default, list | tuple) and not (default and isinstance(default[0], int | float)):
                out[b.name][key] = ([] if key not in given else list(out[b.name][key])) + [text]
            else:
                out[b.name][key] = coerce(key, text, default)
        given.add(key)
    for b in chosen:
        for key, allowed in b.choices.items():
            value = out[b.name][key]
            bad = [v for v in (value if isinstance(value, list | tuple) else [value]) if v not in allowed]
            if bad:
                raise BadInput(
                    f"--set {key}={','.join(map(str, bad))}: {b.name}'s {key} is one of {', '.join(map(str, allowed))}; "
                    f"e.g. --set {key}={allowed[0]}"
                )
        for key, (test, rule) in b.rules.items():
            if not test(out[b.name][key]):
                raise BadInput(
                    f"--set {key}={out[b.name][key]}: {b.name}'s {key} takes {rule}; e.g. --set {key}={b.params[key]}"
                )
    return out


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy (a benchmark's printed tables go into its record)."""

    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def isolated(b: Benchmark, params: dict[str, Any], context: Context) -> dict:
    """Run `b` in a process of its own (bench/_child.py), its output echoed; fills the context's timings
    and tables; returns its metrics."""
    settings, out = context.scratch / "settings.json", context.scratch / "found.json"
    given = {
        "params": params,
        "smoke": context.smoke,
        "refit": context.refit,
        "scratch": str(context.scratch),
    }
    settings.write_text(json.dumps(given))
    command = [sys.executable, "-m", "bench._child", b.module, b.name, str(settings), str(out)]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        for line in child.stdout:
            print(line, end="", flush=True)
    if child.returncode or not out.is_file():
        raise RuntimeError(f"{b.name}'s process ended with exit status {child.returncode} (its output above)")
    found = json.loads(out.read_text())
    context.timings.update(found["timings"])
    context.tables.update(found["tables"])
    return found["metrics"]


def run_one(b: Benchmark, params: dict[str, Any], *, smoke: bool, refit: bool, records: Path) -> dict:
    """Run one benchmark, check its goals, write its record; returns the record."""
    context = Context(b.name, SimpleNamespace(**params), smoke=smoke, refit=refit)
    started = datetime.now(UTC)
    record: dict[str, Any] = {
        "name": b.name,
        "kind": b.kind,
        "module": b.module,
        "smoke": smoke,
        "refit": refit,
        "started": started.isoformat(timespec="seconds"),
        "commit": _records.commit(),
        "host": _records.host(),
        "card": _records.card(),
        "versions": _records.versions(),
        "parameters": params,
    }
    environ, cwd = dict(os.environ), os.getcwd()  # put back after it: a benchmark may set its own
    tee, t0 = _Tee(sys.stdout), time.monotonic()
    metrics, error = None, None
    stdout, sys.stdout = sys.stdout, tee
    try:
        metrics = isolated(b, params, context) if b.isolated else b.fn(context)
    except KeyboardInterrupt:
        raise
    except BaseException:  # a benchmark that raises or exits is a failed run, recorded; the next one runs
        error = traceback.format_exc(limit=8)
        print(error, file=sys.stderr)
    finally:
        sys.stdout = stdout
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
    if error is None and not isinstance(metrics, dict):
        error = f"{b.module}.{b.fn.__name__} returned {type(metrics).__name__}, not a dict of metrics"
    goals = [g.check(metrics or {}) for g in (b.smoke_goals if smoke else b.goals)]
    record |= {
        "wall_s": round(time.monotonic() - t0, 3),
        "timings_s": {k: round(v, 3) for k, v in context.timings.items()},
        "metrics": metrics if isinstance(metrics, dict) else None,
        "goals": goals,
        "error": error,
        "passed": error is None and all(g["passed"] for g in goals),
        "tables": context.tables,
        "output": tee.kept.getvalue()[-_records.OUTPUT_CHARS :],
        "scratch": None if context.given_scratch is None else str(context.given_scratch),
    }
    path = _records.write(records, record)
    record["path"] = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return record


def listing(known: dict[str, Benchmark]) -> str:
    lines = []
    for b in sorted(known.values(), key=lambda b: (b.kind, b.name)):
        smoke = "no smoke size" if b.smoke is None else f"smoke {b.smoke or 'defaults'}"
        goals = ", ".join(f"{g.metric} {g.op} {g.value}" for g in b.goals) or "no goal"
        writes = f"; writes {', '.join(b.writes)} under --refit" if b.writes else ""
        lines.append(f"{b.kind}/{b.name}  [{b.needs}; {', '.join(b.tags) or 'no tag'}]  {b.doc}")
        lines.append(f"    params {b.params or '{}'}; {smoke}; goals: {goals}{writes}")
    return "\n".join(lines)


def main(
    argv: list[str] | None = None, records: Path = _records.RECORDS, known: dict[str, Benchmark] | None = None
) -> int:
    """`known`: the benchmarks to choose from (default: every module of bench/cost and bench/accuracy)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Select benchmarks (by name, tag, folder or need), run them one after another, write each "
        "one's record (bench/records/NAME.json; --smoke: bench/records/smoke/) and check its goals. Exit 1 "
        "where a goal was missed or a benchmark failed, 2 on a bad argument (before anything runs).",
        epilog="--set PARAM=VALUE sets PARAM of every selected benchmark that has it, typed as its default; "
        "a list of numbers is comma-separated, a list of strings takes one item per --set.",
    )
    parser.add_argument("select", nargs="*", metavar="NAME|TAG", help="benchmarks or tags (default: all)")
    parser.add_argument("--smoke", action="store_true", help="each one's smoke settings (left out: none)")
    parser.add_argument("--gpu", action="store_true", help="include the benchmarks that need a GPU")
    parser.add_argument("--refit", action="store_true", help="let fitters rewrite the shipped files they fit")
    parser.add_argument(
        "--set", action="append", default=[], metavar="PARAM=VALUE", help="a parameter (repeatable)"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks, their tags and goals")
    args = parser.parse_args(argv)
    try:
        known = discover() if known is None else known
        chosen = select(args.select, smoke=args.smoke, gpu=args.gpu, known=known)
        if args.list:
            print(listing({b.name: b for b in chosen}))
            return 0
        if args.gpu and not has_gpu():
            raise BadInput(
                "--gpu: no NVIDIA GPU here (nvidia-smi -L failed); run it on a GPU host, or drop --gpu"
            )
        if not chosen:
            raise BadInput(
                f"NAME|TAG {' '.join(args.select) or '(none)'}: selects no benchmark here; see python -m bench --list"
            )
        params = settings(chosen, args.set, args.smoke)
    except BadInput as e:
        print(f"python -m bench: {e}", file=sys.stderr)
        return 2
    done = []
    for i, b in enumerate(chosen, 1):
        print(f"\n=== [{i}/{len(chosen)}] {b.kind}/{b.name}{' (smoke)' if args.smoke else ''}", flush=True)
        record = run_one(b, params[b.name], smoke=args.smoke, refit=args.refit, records=records)
        done.append(record)
        missed = [
            f"{g['metric']} {g['rule']} (measured {g['measured']})"
            for g in record["goals"]
            if not g["passed"]
        ]
        verdict = (
            "passed"
            if record["passed"]
            else (
                "FAILED: " + (record["error"] or "").strip().splitlines()[-1]
                if record["error"]
                else "MISSED " + "; ".join(missed)
            )
        )
        print(f"--- {b.name}: {verdict} ({record['wall_s']:.1f} s) -> {record['path']}", flush=True)
    print("\n| benchmark | wall (s) | goals | passed |\n|---|---|---|---|")
    for r in done:
        goals = ", ".join(f"{g['metric']} {g['rule']}: {g['measured']}" for g in r["goals"]) or "-"
        print(f"| {r['name']} | {r['wall_s']:.1f} | {goals} | {'yes' if r['passed'] else 'NO'} |")
    return 0 if all(r["passed"] for r in done) else 1
