"""trainers/forkserver.py: which trials fork, and a forked process's memory read as a cold one's."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainers import forkserver
from trainers.forkserver import profile_for
from trainers.trial import TrialSpec

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    "settings,profile",
    [
        ({}, "trl"),
        ({"stack": "unsloth"}, "unsloth"),
        ({"generation": "vllm"}, None),  # vLLM's import or hiding is the trial's own
        ({"num_processes": 2}, None),  # accelerate's launcher starts the ranks
    ],
)
def test_a_trial_forks_from_its_stacks_profile_unless_it_generates_with_vllm_or_runs_several_ranks(
    settings, profile
):
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


def test_a_trial_forks_where_vllm_is_installed_unless_it_generates_with_it():
    # Cold and forked trainers read the same peak RSS there too (test_forked_trainer): a gap once seen
    # was the reward worker's unique set counted in some peaks and not in others (orchestrator/running/
    # _readers.py CHILDREN_REFRESH_ON_HIGH), cold and forked alike.
    assert profile_for(TrialSpec(model="tiny")) == "trl"  # `make setup` installs vLLM's CPU build here
    assert profile_for(TrialSpec(model="tiny", stack="unsloth")) == "unsloth"
    assert profile_for(TrialSpec(model="tiny", generation="vllm")) is None


# A host with one GPU, as the fork server's preload sees it: torch says a GPU is there, CUDA's
# initialization (torch.cuda._lazy_init, where every CUDA question goes first) marks torch initialized
# as the real one does, and NVML (a fake: no GPU here) answers the device's compute capability 9.0.
GPU_HOST = """
import json, sys, types
import torch

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
if not hasattr(torch._C, "_cuda_getCurrentRawStream"):  # a CPU build lacks what bitsandbytes binds
    torch._C._cuda_getCurrentRawStream = lambda device: 0
asked = []


def lazy_init():
    asked.append("cuda")
    torch.cuda._initialized = True


torch.cuda._lazy_init = lambda: lazy_init()
nvml = types.ModuleType("pynvml")
nvml.NVMLError = RuntimeError
nvml.nvmlInit = lambda: None if {nvml_works} else (_ for _ in ()).throw(RuntimeError("no driver"))
nvml.nvmlShutdown = lambda: None
nvml.nvmlDeviceGetCount = lambda: 1
nvml.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
nvml.nvmlDeviceGetCudaComputeCapability = lambda handle: (9, 0)
sys.modules["pynvml"] = nvml
original = torch.cuda.get_device_capability

from trainers import forkserver

forkserver.PROFILES["probe"] = ("torch", "peft")  # PEFT imports bitsandbytes, which asks the capability
why = forkserver.preload({profile!r})
print(json.dumps({{
    "refused": why,
    "cuda_asked": len(asked),
    "bitsandbytes_preloaded": "bitsandbytes" in sys.modules,
    "trl_preloaded": "trl.trainer.grpo_trainer" in sys.modules,
    "capability_restored": torch.cuda.get_device_capability is original,
}}))
"""


def preload_on_a_gpu_host(nvml_works: bool, profile: str = "trl") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", GPU_HOST.format(nvml_works=nvml_works, profile=profile)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_on_a_gpu_host_the_trl_preload_imports_everything_without_initializing_cuda():
    # bitsandbytes asks each device's compute capability as PEFT imports it, and transformers' trainer
    # utilities import PEFT: through torch that initialized CUDA, and every trainer on an H100 started
    # cold ("importing trainers.measure initialized CUDA"). NVML answers it now.
    found = preload_on_a_gpu_host(nvml_works=True)
    assert found == {
        "refused": None,
        "cuda_asked": 0,
        "bitsandbytes_preloaded": True,
        "trl_preloaded": True,
        "capability_restored": True,
    }


def test_where_nvml_cannot_answer_a_preload_that_initializes_cuda_refuses_to_serve():
    found = preload_on_a_gpu_host(nvml_works=False, profile="probe")
    assert found["cuda_asked"] >= 1
    assert found["refused"] == "importing peft initialized CUDA"


@pytest.mark.parametrize(
    "device,index",
    [(None, 0), (1, 1), ("cuda", 0), ("cuda:2", 2)],
)
def test_a_device_is_numbered_without_asking_cuda(device, index):
    assert forkserver.device_index(device) == index
