"""trainers/forkserver.py: which trials fork, and a forked process's memory read as a cold one's."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainers import forkserver
from trainers.forkserver import profile_for
from trainers.spec import TrialSpec

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    "settings,profile",
    [
        ({}, "trl"),
        ({"framework": "unsloth"}, "unsloth"),
        ({"generation": "vllm"}, None),  # vLLM's import or hiding is the trial's own
        ({"num_processes": 2}, None),  # accelerate's launcher starts the ranks
    ],
)
def test_a_trial_forks_from_its_stacks_profile_unless_it_generates_with_vllm_or_runs_several_ranks(
    settings, profile, monkeypatch
):
    monkeypatch.setattr(forkserver, "vllm_installed", lambda: False)
    assert profile_for(TrialSpec(model="tiny", **settings)) == profile


FORK_AND_READ = """
import json, os, sys
import numpy  # file-backed pages: numpy's and OpenBLAS's libraries
from trainers.forkserver import map_resident, resident_file_ranges

def rss_file_kib():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssFile:"))

runs = resident_file_ranges()
before = rss_file_kib()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    bare = rss_file_kib()
    map_resident(runs)
    os.write(write, json.dumps([bare, rss_file_kib()]).encode())
    os._exit(0)
os.waitpid(pid, 0)
bare, mapped = json.loads(os.read(read, 1000))
print(json.dumps({"server": before, "bare": bare, "mapped": mapped}))
"""


def test_a_forked_process_maps_the_servers_resident_file_pages_again():
    out = subprocess.run([sys.executable, "-c", FORK_AND_READ], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kib = json.loads(out.stdout)
    # The fork alone leaves most file pages unmapped (its RSS would read low); mapped again, the child
    # holds what the server held (a page or two of the server's own reading may differ).
    assert kib["bare"] < kib["server"] * 0.9
    assert kib["mapped"] == pytest.approx(kib["server"], rel=0.05)


def test_the_server_keeps_vllm_out_of_what_it_preloads_as_a_cold_trainer_does():
    # In a fresh interpreter: hiding vLLM in this test process would hide it from later tests.
    code = (
        "import sys; from trainers import forkserver; "
        "assert forkserver.preload('bare') is None; "
        "print(sys.modules.get('vllm', 'absent'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "None"  # `import vllm` fails there, so TRL loads no vLLM backend


def test_every_trial_starts_cold_where_vllm_is_installed(monkeypatch):
    # A forked trainer's peak RSS was 2.3% under a cold one's there (forkserver.vllm_installed says more).
    monkeypatch.setattr(forkserver, "vllm_installed", lambda: True)
    assert profile_for(TrialSpec(model="tiny")) is None
    assert profile_for(TrialSpec(model="tiny", framework="unsloth")) is None
