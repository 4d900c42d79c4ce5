"""The benchmark registry and what a benchmark is handed when it runs.

A benchmark is one function of its own logic, registered with `@benchmark(...)`: its tags, its needs
(`data`: reads measured rows only; `cpu`: runs trainers or sweeps on this host; `gpu`: needs an NVIDIA
GPU), its parameters and their defaults, its smoke settings (the parameters a `--smoke` run uses; None:
it has no smoke size and a smoke run leaves it out), its goals (`{"metric": "<= 0.40"}`) and the shipped
files it writes (only under `--refit`). It receives a `Context` and returns its metrics (a dict; None for
a figure it did not measure, never 0).
"""

from __future__ import annotations

import json
import operator
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
NEEDS = ("data", "cpu", "gpu")
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
    "==": operator.eq,
}


@dataclass(frozen=True)
class Goal:
    """`metric op value`, e.g. `ratio <= 0.40`; a metric that was not measured (None) misses it."""

    metric: str
    op: str
    value: Any

    @classmethod
    def parse(cls, metric: str, rule: str) -> Goal:
        op = next((o for o in sorted(OPS, key=len, reverse=True) if rule.strip().startswith(o)), None)
        if op is None:
            raise ValueError(f"goal {metric!r}: {rule!r} does not start with one of {', '.join(OPS)}")
        text = rule.strip()[len(op) :].strip()
        value = json.loads(text.lower()) if text.lower() in ("true", "false") else float(text)
        return cls(metric, op, value)

    def check(self, metrics: dict) -> dict:
        measured = metrics.get(self.metric)
        passed = measured is not None and bool(OPS[self.op](measured, self.value))
        return {
            "metric": self.metric,
            "rule": f"{self.op} {self.value}",
            "measured": measured,
            "passed": passed,
        }


@dataclass(frozen=True)
class Benchmark:
    name: str
    fn: Callable[[Context], dict]
    module: str
    doc: str
    tags: tuple[str, ...]
    needs: str
    params: dict[str, Any]
    smoke: dict[str, Any] | None
    goals: tuple[Goal, ...]
    smoke_goals: tuple[Goal, ...]
    writes: tuple[str, ...]
    choices: dict[str, tuple]
    rules: dict[str, tuple[Callable[[Any], bool], str]]
    isolated: bool

    @property
    def kind(self) -> str:
        """Its folder under bench/: cost, accuracy (a module elsewhere: its package, or its own name)."""
        parts = self.module.split(".")
        return parts[-2] if len(parts) > 1 else parts[0]

    def settings(self, smoke: bool) -> dict[str, Any]:
        return {**self.params, **(self.smoke or {})} if smoke else dict(self.params)


BENCHMARKS: dict[str, Benchmark] = {}


def benchmark(
    *,
    tags: tuple[str, ...] = (),
    needs: str = "cpu",
    params: dict[str, Any] | None = None,
    smoke: dict[str, Any] | None = None,
    goals: dict[str, str] | None = None,
    smoke_goals: dict[str, str] | None = None,
    writes: tuple[str, ...] = (),
    choices: dict[str, tuple] | None = None,
    rules: dict[str, tuple[Callable[[Any], bool], str]] | None = None,
    isolated: bool = False,
    name: str | None = None,
) -> Callable[[Callable[[Context], dict]], Callable[[Context], dict]]:
    """Register a benchmark function (its name: the function's, or `name`). `smoke_goals` are the goals a
    smoke run checks (default: `goals`; a smoke size can be too small for a goal that holds at full size).
    `choices`: a parameter's allowed values (each item of a list), and `rules`: (a test of its value, the
    rule in words), both checked before anything runs. `isolated`: it runs in a process of its own
    (bench/_child.py: it patches the code it times, or times its own process)."""
    if needs not in NEEDS:
        raise ValueError(f"needs {needs!r}: one of {', '.join(NEEDS)}")

    def register(fn: Callable[[Context], dict]) -> Callable[[Context], dict]:
        key = name or fn.__name__
        if key in BENCHMARKS and BENCHMARKS[key].module != fn.__module__:
            raise ValueError(f"benchmark {key!r} registered twice: {BENCHMARKS[key].module}, {fn.__module__}")
        full = tuple(Goal.parse(m, r) for m, r in (goals or {}).items())
        unknown = set(smoke or {}) - set(params or {})
        if unknown:
            raise ValueError(f"benchmark {key!r}: smoke settings {sorted(unknown)} are not parameters")
        text = (fn.__doc__ or sys.modules[fn.__module__].__doc__ or "").strip()
        BENCHMARKS[key] = Benchmark(
            name=key,
            fn=fn,
            module=fn.__module__,
            doc=text.splitlines()[0] if text else "",
            tags=tuple(tags),
            needs=needs,
            params=dict(params or {}),
            smoke=None if smoke is None else dict(smoke),
            goals=full,
            smoke_goals=full
            if smoke_goals is None
            else tuple(Goal.parse(m, r) for m, r in smoke_goals.items()),
            writes=tuple(writes),
            choices={k: tuple(v) for k, v in (choices or {}).items()},
            rules=dict(rules or {}),
            isolated=isolated,
        )
        return fn

    return register


@dataclass
class Context:
    """What a benchmark is handed: its parameters (`args`, by name), whether this is a smoke run or a
    refit, a scratch folder of its own, timers and the runs of `rlsweep` it may start."""

    name: str
    args: SimpleNamespace
    smoke: bool = False
    refit: bool = False
    given_scratch: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)
    root: Path = ROOT
    data: Path = DATA

    @property
    def scratch(self) -> Path:
        """A folder of this run's own, made on first use (kept: the record names it)."""
        if self.given_scratch is None:
            self.given_scratch = Path(tempfile.mkdtemp(prefix=f"bench-{self.name}-"))
        return self.given_scratch

    @contextmanager
    def timed(self, label: str) -> Iterator[None]:
        """Adds the wall seconds of the block to `timings[label]` (recorded with the run)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[label] = self.timings.get(label, 0.0) + time.monotonic() - start

    def rlsweep(
        self, *args: str, check: bool = False, quiet: bool = True, silent: bool = False
    ) -> subprocess.CompletedProcess:
        """`rlsweep ARGS` from this checkout (the module, not an installed copy), cwd the repository root;
        `quiet`: its stderr dropped, `silent`: its stdout too."""
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=self.root,
            check=check,
            stdout=subprocess.DEVNULL if silent else None,
            stderr=subprocess.DEVNULL if quiet or silent else None,
        )

    def sweep(
        self, sweep_file: str | Path, overrides: list[str], out: Path, silent: bool = False
    ) -> tuple[float, list[dict]]:
        """(wall seconds, trials.parquet rows) of one `rlsweep run SWEEP --set ... --output-dir OUT`."""
        import pyarrow.parquet as pq

        t0 = time.monotonic()
        self.rlsweep(
            "run",
            str(sweep_file),
            "--output-dir",
            str(out),
            *[f"--set={o}" for o in overrides],
            silent=silent,
        )
        return time.monotonic() - t0, pq.read_table(out / "trials.parquet").to_pylist()

    def trial(self, flags: list[str], out: Path) -> dict:
        """One `rlsweep trial FLAGS --output-dir OUT`, skipped where OUT already holds its trial.json;
        returns that trial.json."""
        if not (out / "trial.json").is_file():
            subprocess.run(
                [sys.executable, "-m", "orchestrator.cli", "trial", *flags, "--output-dir", str(out)],
                cwd=self.root,
                check=True,
                capture_output=True,
            )
        return json.loads((out / "trial.json").read_text())

    def shipped(self, path: Path, text: str) -> bool:
        """A fitter's output, a file the package ships: rewritten under --refit (`make refit`); otherwise only
        compared. True where the file holds `text` (the fit of the rows as they are now)."""
        current = path.read_text() if path.is_file() else None
        where = path.relative_to(self.root) if path.is_relative_to(self.root) else path
        if self.refit:
            path.write_text(text)
            print(f"{where}: {'unchanged' if current == text else 'rewritten'} (--refit)", flush=True)
            return True
        if current != text:
            print(f"{where} differs from the fit of the rows now; `make refit` rewrites it", flush=True)
        return current == text

    def table(self, title: str, header: list[str], rows: list[list[Any]]) -> str:
        """A markdown table, printed and kept in the record under `tables[title]`."""
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |" for row in rows]
        text = "\n".join(lines)
        self.tables[title] = text
        print(text, flush=True)
        return text
