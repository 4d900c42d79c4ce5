"""tools/ray_slim.py on a small synthetic Ray wheel: what it leaves out, a RECORD that matches every kept
file, stripped binaries that still run, and a result pip installs. (The real wheel: docs/offline.md.)"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.ray_slim import main, ray_drop, record_problems, slim_wheel

NAME = "ray-9.9.9-py3-none-any.whl"  # any interpreter installs it
KEPT = {
    "ray/__init__.py": b"VERSION = '9.9.9'\n",
    "ray/tune/__init__.py": b"",
    "ray/dashboard/http_server_head.py": b"# the Jobs API's server\n",
    "ray/_private/thirdparty_files/attrs-1.0.dist-info/RECORD": b"attrs/__init__.py,,\n",
}
DROPPED = {
    "ray/jars/ray_dist.jar": b"PK java",
    "ray/dashboard/client/build/index.html": b"<html></html>",
    "ray/dashboard/client/build/static/main.js.map": b"{}",
    "ray/rllib/__init__.py": b"",
    "ray/serve/__init__.py": b"",
    "ray/llm/__init__.py": b"",
    "ray/_private/widgets.js.map": b"{}",
}
DIST_INFO = {
    "ray-9.9.9.dist-info/METADATA": b"Metadata-Version: 2.1\nName: ray\nVersion: 9.9.9\n",
    "ray-9.9.9.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
    b"Tag: py3-none-any\n",
    "ray-9.9.9.dist-info/top_level.txt": b"ray\n",
}
BINARY = "ray/core/src/ray/raylet/raylet"
C_SOURCE = "\n".join(
    [*(f"int helper_{i}(int x) {{ return x * {i} + 1; }}" for i in range(40)),
     '#include <stdio.h>\nint main(void) { printf("raylet ok %d\\n", helper_3(1)); return 0; }']
)  # fmt: skip


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(path: Path, files: dict[str, bytes], modes: dict[str, int] | None = None) -> Path:
    """A wheel of `files` with a correct RECORD (written last, as wheel builders do)."""
    modes = modes or {}
    record = "ray-9.9.9.dist-info/RECORD"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        lines = []
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (modes.get(name, 0o644) | stat.S_IFREG) << 16
            whl.writestr(info, data)
            lines.append(f"{name},{_hash(data)},{len(data)}\n")
        whl.writestr(record, "".join(lines) + f"{record},,\n")
    return path


@pytest.fixture(scope="module")
def elf(tmp_path_factory) -> bytes:
    """A small executable with debug symbols, built here (gcc -g)."""
    if shutil.which("gcc") is None or shutil.which("strip") is None:
        pytest.skip("needs gcc and strip (binutils) to build and strip an ELF file")
    folder = tmp_path_factory.mktemp("elf")
    (folder / "raylet.c").write_text(C_SOURCE)
    subprocess.run(["gcc", "-g", "-O0", "-o", str(folder / "raylet"), str(folder / "raylet.c")], check=True)
    return (folder / "raylet").read_bytes()


@pytest.fixture
def wheels(tmp_path, elf) -> tuple[Path, Path]:
    """(the synthetic wheel, its slim repack)."""
    files = {**KEPT, **DROPPED, BINARY: elf, **DIST_INFO}
    src = _wheel(tmp_path / NAME, files, {BINARY: 0o755})
    return src, slim_wheel(src, tmp_path / "slim")


def test_the_slim_wheel_leaves_out_only_what_run_never_reads(wheels):
    src, slim = wheels
    with zipfile.ZipFile(slim) as whl:
        names = set(whl.namelist())
    assert slim.name == src.name
    assert names == {*KEPT, BINARY, *DIST_INFO, "ray-9.9.9.dist-info/RECORD"}
    assert all(ray_drop(name) for name in DROPPED)
    assert not any(ray_drop(name) for name in (*KEPT, BINARY, *DIST_INFO))


def test_the_slim_wheels_record_gives_each_kept_file_its_own_hash_and_size(wheels):
    src, slim = wheels
    assert record_problems(src) == [] and record_problems(slim) == []
    with zipfile.ZipFile(slim) as whl:
        record = whl.read("ray-9.9.9.dist-info/RECORD").decode().splitlines()
        binary = whl.read(BINARY)
    assert f"{BINARY},{_hash(binary)},{len(binary)}" in record
    assert record[-1] == "ray-9.9.9.dist-info/RECORD,,"
    assert not any(line.split(",")[0] in DROPPED for line in record)


def test_a_stripped_binary_is_smaller_keeps_its_mode_and_still_runs(wheels, elf, tmp_path):
    _, slim = wheels
    with zipfile.ZipFile(slim) as whl:
        info = whl.getinfo(BINARY)
        binary = whl.read(info)
    assert binary[:4] == b"\x7fELF" and len(binary) < len(elf)
    assert (info.external_attr >> 16) & 0o777 == 0o755
    run = tmp_path / "raylet"
    run.write_bytes(binary)
    run.chmod(0o755)
    assert subprocess.run([str(run)], capture_output=True, text=True, check=True).stdout == "raylet ok 4\n"


def test_pip_installs_the_slim_wheel_and_its_package_imports(wheels, tmp_path):
    _, slim = wheels
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
         "--disable-pip-version-check", "--target", str(site), str(slim)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert os.access(site / BINARY, os.X_OK)
    assert not (site / "ray" / "rllib").exists()
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import ray, importlib.metadata as m; print(ray.VERSION, m.version('ray'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["9.9.9", "9.9.9"]


def test_a_record_that_disagrees_with_its_files_is_named_file_by_file(tmp_path):
    src = _wheel(tmp_path / NAME, {**KEPT, **DIST_INFO})
    bad = tmp_path / "bad" / NAME
    bad.parent.mkdir()
    with zipfile.ZipFile(src) as whl, zipfile.ZipFile(bad, "w") as out:
        for info in whl.infolist():
            data = whl.read(info)
            if info.filename == "ray/__init__.py":
                data = b"changed after RECORD was written\n"
            elif info.filename.endswith("RECORD") and info.filename.count("/") == 1:
                data += b"ray/gone.py,sha256=x,1\n"
            out.writestr(info, data)
    problems = record_problems(bad)
    assert problems[0].startswith("ray/__init__.py: RECORD says sha256=")
    assert problems[-1] == "ray/gone.py: in RECORD, not in the wheel"
    assert len(problems) == 2


def test_the_command_refuses_a_wheel_that_is_not_there(tmp_path, capsys):
    assert main([str(tmp_path / NAME), str(tmp_path / "out")]) == 2
    assert "no such wheel; download it first (docs/offline.md)" in capsys.readouterr().err


def test_the_command_writes_the_slim_wheel_and_says_its_size(wheels, tmp_path, capsys):
    src, _ = wheels
    assert main([str(src), str(tmp_path / "again")]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"{tmp_path / 'again' / NAME}: ") and "RECORD checked" in said
