"""`make setup` on a host without a package index: the Makefile's check-index target (run by setup
before its first pip call) says what to do instead of failing inside pip. Runs the target alone, with
this environment's Python standing in for the virtualenv's; nothing is installed."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _make(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args, f"PY={sys.executable}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _pip_env(**extra: str) -> dict[str, str]:
    """This environment without its own pip configuration (config files, find-links), plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"} | extra


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_index_stops_setup_with_the_wheel_kit_instructions():
    url = f"http://127.0.0.1:{_closed_port()}/simple"
    done = _make("check-index", env=_pip_env(PIP_INDEX_URL=url))
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        f"setup: pip cannot reach its package index ({url}) or any other source it is configured with, "
        "so it cannot install here.",
        "  Build a wheel kit on a machine with network and the same Python and platform (docs/offline.md),",
        "  copy it here, then: make setup WHEELS=/path/to/wheelkit",
    ]


def test_a_reachable_index_lets_setup_go_on(tmp_path):
    page = tmp_path / "simple" / "pip"
    page.mkdir(parents=True)
    (page / "index.html").write_text('<a href="pip-24.0-py3-none-any.whl">pip-24.0-py3-none-any.whl</a>\n')
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        done = _make("check-index", env=_pip_env(PIP_INDEX_URL=url))
    finally:
        server.shutdown()
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_with_a_wheel_kit_setup_checks_no_index_and_installs_from_the_kit_only(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/simple"  # would fail the check if it were asked
    done = _make("check-index", f"WHEELS={tmp_path}", env=_pip_env(PIP_INDEX_URL=url))
    assert (done.returncode, done.stdout) == (0, f"setup: installing from {tmp_path} only, no index\n")


def test_setup_checks_the_index_before_its_first_pip_call(tmp_path):
    # Dry run (-n) on a virtualenv path that does not exist: the recipe in order, nothing run.
    done = _make("-n", "setup", f"VENV={tmp_path / 'venv'}", env=_pip_env())
    lines = done.stdout.splitlines()
    first_pip = next(i for i, line in enumerate(lines) if " -m pip install" in line)
    check = next(i for i, line in enumerate(lines) if "index versions pip" in line)
    assert check < first_pip, done.stdout
