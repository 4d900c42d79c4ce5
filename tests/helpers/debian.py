"""A Debian package a test needs (chromium, slurm-wlm): installed with apt-get when its commands are
missing and the test runs as root with apt-get available, unless the environment forbids it; else the
test skips and says why."""

import os
import shutil
import subprocess

import pytest

INSTALL_TIMEOUT_S = 600
# Two test workers may install at once: the second waits for dpkg's lock instead of failing.
APT_GET = ["apt-get", "-o", f"DPkg::Lock::Timeout={INSTALL_TIMEOUT_S}"]


def debian_package(package: str, commands: list[str], forbid: str) -> None:
    """Make sure `commands` are on PATH, from `package`; the environment variable `forbid`=0 forbids
    installing it."""
    if all(shutil.which(c) for c in commands):
        return
    if os.environ.get(forbid) == "0":
        pytest.skip(f"{package} not found and {forbid}=0 forbids installing it (apt-get install {package})")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{package} not found; install Debian's package: sudo apt-get install -y {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for command in ([*APT_GET, "update", "-qq"], [*APT_GET, "install", "-y", "-qq", package]):
            subprocess.run(command, check=True, capture_output=True, timeout=INSTALL_TIMEOUT_S, env=env)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        tail = getattr(exc, "stderr", b"") or b""
        pytest.skip(
            f"could not install {package} with apt-get: {exc}; {tail.decode(errors='replace')[-300:]}"
        )
    missing = [c for c in commands if not shutil.which(c)]
    if missing:
        pytest.skip(f"apt-get installed {package} but {', '.join(missing)} not on PATH")
