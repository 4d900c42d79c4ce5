"""A disk that fills up while the report is written: a message naming the file and the free space, exit
status 1, and the sweep's Parquet untouched. The full disk is made by the write layer raising ENOSPC
(mounting a small tmpfs needs root, which the tests do not have)."""

import errno
import re
import shutil
from pathlib import Path

import matplotlib.figure
import pyarrow.parquet as pq
import pytest

from orchestrator.cli import main
from tests.helpers.synthetic_sweep import write_synthetic_sweep

ENOSPC = OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file name


@pytest.fixture
def sweep(tmp_path):
    write_synthetic_sweep(tmp_path, gpu=False)
    return tmp_path, (tmp_path / "trials.parquet").read_bytes(), pq.read_table(tmp_path / "trials.parquet")


def assert_disk_full_message(text: str, path: Path) -> None:
    assert f"no space left writing the report file {path} (" in text, text
    free = float(re.search(r"\(([0-9.]+) MiB free on its filesystem", text).group(1))
    assert free == pytest.approx(shutil.disk_usage(path.parent).free / 2**20, abs=512)
    assert "trials.parquet and steps/ are intact" in text and "rlsweep report" in text
    assert "Traceback" not in text


def test_a_full_disk_at_report_html_names_the_file_and_the_free_space(sweep, monkeypatch, capsys):
    out, parquet_bytes, table = sweep
    write_text = Path.write_text

    def full_at_html(self, *args, **kwargs):
        if self.name == "report.html":
            raise ENOSPC
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_at_html)
    assert main(["report", str(out)]) == 1
    assert_disk_full_message(capsys.readouterr().err.replace("\n", ""), out / "report.html")
    assert (out / "trials.parquet").read_bytes() == parquet_bytes
    assert pq.read_table(out / "trials.parquet").equals(table)


def test_a_full_disk_at_a_plot_names_the_plot(sweep, monkeypatch, capsys):
    out, parquet_bytes, _ = sweep

    def full(self, path, *args, **kwargs):
        raise ENOSPC

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    assert main(["report", str(out)]) == 1
    text = capsys.readouterr().err.replace("\n", "")
    (first_plot,) = re.findall(r"report file (\S+) \(", text)
    assert Path(first_plot).parent == out / "plots" and first_plot.endswith(".png")
    assert_disk_full_message(text, Path(first_plot))
    assert (out / "trials.parquet").read_bytes() == parquet_bytes


def test_other_os_errors_are_not_called_a_full_disk(sweep, monkeypatch):
    out, _, _ = sweep
    monkeypatch.setattr(
        Path, "write_text", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied"))
    )
    with pytest.raises(PermissionError):
        main(["report", str(out)])
