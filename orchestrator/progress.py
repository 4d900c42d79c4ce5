"""Live progress in the terminal: trials by status, and each running trial's step, speed and memory.
A recorder sink (orchestrator/recorder.py).

On a terminal a rich Live table redraws in place; elsewhere (CI logs, tests) one line per finished trial.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from orchestrator.outcome import peak_memory
from trainers.spec import TrialSpec


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


class Progress:
    def __init__(self, total: int, console: Console | None = None, done: dict[str, str] | None = None):
        self.console = console or Console(stderr=True)
        self.total = total
        self.status: dict[str, str] = dict(done or {})  # trial_key -> status of finished trials
        self.running: dict[str, dict[str, Any]] = {}
        self.live: Live | None = None
        self.t0 = time.monotonic()

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self.render(), console=self.console, refresh_per_second=2, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(*exc)
            self.live = None

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())

    def on_start(self, spec: TrialSpec) -> None:
        self.running[spec.trial_key] = {"max_steps": spec.max_steps, "step": 0}
        self._refresh()

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        info = self.running.setdefault(spec.trial_key, {"max_steps": None})
        info.update(step=row.get("step"), tokens_per_s=row.get("tokens_per_s"), peak_gib=peak_memory(row)[0])
        self._refresh()

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        key, status, detail = spec.trial_key, row["status"], row.get("status_detail") or ""
        self.running.pop(key, None)
        self.status[key] = status
        if self.live is None:
            first_line = detail.splitlines()[0][:160] if detail else ""
            counts = " ".join(f"{s}={n}" for s, n in sorted(Counter(self.status.values()).items()))
            self.console.print(f"[{len(self.status)}/{self.total}] {key}: {status} {first_line}  ({counts})")
        self._refresh()

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.status.values()))

    def render(self) -> Table:
        counts = Counter(self.status.values())
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none finished"
        pending = self.total - len(self.status) - len(self.running)
        table = Table(
            title=f"{len(self.running)} running, {summary}, {pending} pending "
            f"({time.monotonic() - self.t0:.0f} s)",
            title_justify="left",
        )
        for column in ("running trial", "step", "tokens/s", "peak GiB"):
            table.add_column(column)
        for key, info in self.running.items():
            table.add_row(
                key,
                f"{info.get('step') or 0}/{info.get('max_steps') or '?'}",
                _fmt(info.get("tokens_per_s"), ".0f"),
                _fmt(info.get("peak_gib")),
            )
        return table
