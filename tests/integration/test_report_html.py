"""report.html rendered by a real browser (headless Chromium): the page opens on the feasibility frontier
and draws text, tables and images.

Chromium comes from Debian's `chromium` package. If it is missing, the test installs it when it runs
as root with apt-get available (set RLSWEEP_INSTALL_CHROMIUM=0 to forbid that), else it skips and
says why.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from orchestrator.views.report import frontier, write_report
from orchestrator.views.report._feasibility_tables import frontier_view
from tests.helpers.debian import debian_package
from tests.helpers.html_outline import outline
from tests.helpers.synthetic_sweep import write_synthetic_sweep

RENDER_TIMEOUT_S = 120


def _chromium() -> str:
    debian_package("chromium", ["chromium"], "RLSWEEP_INSTALL_CHROMIUM")
    return shutil.which("chromium")


@pytest.mark.slow
def test_report_html_renders_in_headless_chromium(tmp_path):
    chromium = _chromium()
    out = tmp_path / "sweep"
    trials = write_synthetic_sweep(out)
    paths = write_report(out, console=Console(record=True, width=160))
    # The page opens on the answer: its first section heading and first table are the frontier.
    page = outline(paths["report_html"].read_text())
    first_table = next(header for tag, header in page.items if tag == "table")
    assert next(text for tag, text in page.items if tag == "h2") == "What fits: the feasibility frontier"
    assert first_table == list(frontier_view(frontier(trials, 16.0)).columns)
    assert page.items.index(("table", first_table)) == 2  # right under the title and that heading
    shot = tmp_path / "report.png"
    # A private profile dir keeps the run from touching the user's Chromium profile.
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1200,4000",  # the answer's tables, then the heatmaps
        paths["report_html"].resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RENDER_TIMEOUT_S, cwd=tmp_path)
    assert shot.is_file(), f"chromium wrote no screenshot (rc {done.returncode}): {done.stderr[-800:]}"
    with Image.open(shot) as image:
        assert image.size == (1200, 4000)
        pixels = np.asarray(image.convert("RGB"), dtype=float)
    assert pixels.std() > 10  # not a blank page
    # Colour beyond grey text means the embedded plots and status cells were drawn.
    colourful = (pixels.max(axis=2) - pixels.min(axis=2)) > 60
    assert colourful.mean() > 0.01
