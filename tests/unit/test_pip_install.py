"""tools/pip_install.py: `make setup`'s pip install without the conflict block of unsloth's
undeclared dependencies (pip's output on this project's CPU setup, recorded), and with every other
conflict kept and failing."""

import io
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from tools.pip_install import filter_conflicts, run

RECORDED = (Path(__file__).parents[1] / "fixtures" / "pip_install_unsloth_cpu.txt").read_text()
BEFORE = "Successfully installed msgspec-0.19.0\n"
INCOMPATIBLE = (
    "trl 0.24.0 requires transformers>=4.56.1, but you have transformers 4.46.0 which is incompatible.\n"
)
CONFLICT_HEADER_LINE = RECORDED.splitlines()[0]
OTHER_MISSING = "trl 0.24.0 requires accelerate>=1.4.0, which is not installed.\n"


def _filtered(text: str) -> tuple[str, bool]:
    out = io.StringIO()
    healthy = filter_conflicts(io.StringIO(text), out)
    return out.getvalue(), healthy


def test_the_recorded_block_of_unsloths_undeclared_dependencies_is_dropped_and_the_rest_kept():
    assert RECORDED.startswith("ERROR: pip's dependency resolver") and RECORDED.count("\n") == 13
    assert _filtered(BEFORE + RECORDED + "done\n") == (BEFORE + "done\n", True)


def test_a_block_with_an_incompatible_version_is_printed_whole_and_unhealthy():
    text = RECORDED + INCOMPATIBLE
    assert _filtered(BEFORE + text) == (BEFORE + text, False)


def test_a_block_with_another_packages_missing_dependency_is_printed_whole_and_unhealthy():
    text = RECORDED.replace(
        "unsloth-zoo 2026.10.9 requires hf_transfer",
        OTHER_MISSING.strip() + "\nunsloth-zoo 2026.10.9 requires hf_transfer",
    )
    assert text.count("\n") == 14
    assert _filtered(text) == (text, False)


def test_output_without_a_block_passes_through_unchanged():
    assert _filtered(BEFORE + "WARNING: something else\n") == (BEFORE + "WARNING: something else\n", True)


def _printing(text: str, exit_code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.stderr.write({text!r}); sys.exit({exit_code})"]


def test_run_exits_0_and_prints_no_error_on_a_healthy_cpu_install():
    out = io.StringIO()
    assert run(_printing(BEFORE + RECORDED, 0), out) == 0
    assert out.getvalue() == BEFORE


def test_run_exits_1_and_prints_the_block_when_pip_reports_another_conflict():
    out = io.StringIO()
    assert run(_printing(RECORDED + INCOMPATIBLE, 0), out) == 1
    assert out.getvalue() == RECORDED + INCOMPATIBLE + (
        "pip reported dependency conflicts other than unsloth's undeclared dependencies (above)\n"
    )


def test_run_keeps_pips_own_failing_exit_code():
    out = io.StringIO()
    assert run(_printing("ERROR: No matching distribution found for nosuch\n", 2), out) == 2
    assert out.getvalue() == "ERROR: No matching distribution found for nosuch\n"
    assert run(_printing("", 3), io.StringIO()) == 3


def _wheel(folder: Path, name: str, requires: list[str]) -> str:
    """A wheel of an empty package `name` 1.0 that declares `requires`."""
    dist_info = f"{name.replace('-', '_')}-1.0.dist-info"
    path = folder / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                       + "".join(f"Requires-Dist: {r}\n" for r in requires))  # fmt: skip
        wheel.writestr(
            f"{dist_info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{dist_info}/RECORD", "")
    return str(path)


def test_with_real_pip_a_no_deps_unsloth_passes_quietly_and_another_missing_dependency_fails(tmp_path):
    # The Makefile's CPU path in small: unsloth-zoo goes in with --no-deps, then a package it depends
    # on; pip then lists unsloth-zoo's missing dependency as a conflict and exits 0.
    venv.create(tmp_path / "venv", with_pip=False)
    pip = [sys.executable, "-m", "pip", "--python", str(tmp_path / "venv" / "bin" / "python"), "install"]
    pip += ["--no-index", "--no-cache-dir", "-q"]
    run([*pip, "--no-deps", _wheel(tmp_path, "unsloth-zoo", ["common", "triton>=3.0.0"])], io.StringIO())
    common = _wheel(tmp_path, "common", [])
    unfiltered = subprocess.run([*pip, common], capture_output=True, text=True)
    assert (unfiltered.returncode, unfiltered.stderr.splitlines()) == (
        0,
        [CONFLICT_HEADER_LINE, "unsloth-zoo 1.0 requires triton>=3.0.0, which is not installed."],
    )
    out = io.StringIO()
    assert run([*pip, "--force-reinstall", common], out) == 0
    assert out.getvalue() == ""

    run([*pip, "--no-deps", _wheel(tmp_path, "other", ["common", "nosuch"])], io.StringIO())
    out = io.StringIO()
    assert run([*pip, "--force-reinstall", common], out) == 1
    assert out.getvalue().splitlines() == [
        CONFLICT_HEADER_LINE,
        "unsloth-zoo 1.0 requires triton>=3.0.0, which is not installed.",
        "other 1.0 requires nosuch, which is not installed.",
        "pip reported dependency conflicts other than unsloth's undeclared dependencies (above)",
    ]
