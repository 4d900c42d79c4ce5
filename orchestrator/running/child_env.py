"""The trainer child's environment: the allocator setting both stacks run with, the compile caches every
trial on the host shares, thread counts, the switch that keeps TRL from importing MLflow, and what each
registered stack says its children need (trainers.stacks.StackEntry's env and compile_caches). The
supervisor, the launcher's fork server and the vLLM server start their children with it.
"""

from __future__ import annotations

import os

from orchestrator.words.storage import PROJECT_ROOT
from trainers.models import cache_home
from trainers.nvml import CUDA_DEVICE_ORDER
from trainers.stacks import STACKS

# torch's caching allocator setting for both stacks. Unsloth sets expandable_segments:True in its own
# process at import (unsloth_zoo/__init__.py: PYTORCH_ALLOC_CONF on torch >= 2.10, else
# PYTORCH_CUDA_ALLOC_CONF), unless the variable is already set; it changes reserved memory and what
# NVML reads. Set before the child starts, both stacks run with it; a user's own setting wins.
ALLOC_CONF = "expandable_segments:True"

# The compilers' caches, shared by every trial on the host (a sweep's, gpu-check's, `rlsweep trial`'s)
# under <rlsweep cache>/compile/: each variable and its folder there, the stacks' own first (Unsloth's,
# registered in trainers/stacks/__init__.py). On an H100 Unsloth compiled each decoder block at the
# first step, 50-54 s of every trial. Unsloth (unsloth_zoo/compiler.py) writes the source of its patched modules into UNSLOTH_COMPILE_LOCATION, by default `unsloth_compiled_cache`
# relative to the working directory: the trial's own folder, so no trial saw another's. It regenerates
# that source in every process and rewrites a file only when its bytes differ (a header names the
# unsloth, unsloth_zoo, transformers and TRL versions), under a per-file lock (filelock), and imports the
# bytes it verified under the same lock: trials sharing the folder are safe. The compiling itself
# (Dynamo, AOTAutograd, Inductor, Triton) is torch's: Dynamo traces in every process; Inductor's FX graph
# and AOTAutograd caches (TORCHINDUCTOR_CACHE_DIR, default /tmp/torchinductor_<user>) and Triton's
# kernels (TRITON_CACHE_DIR) are reused across processes and written atomically (a temporary file, then a
# rename), so concurrent trials share them too; here they outlive /tmp and move with RLSWEEP_CACHE.
COMPILE_CACHES = (
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("TRITON_CACHE_DIR", "triton"),
)


def compile_cache_env() -> dict[str, str]:
    """Each compile cache's variable (the registered stacks', then torch's) and its folder under rlsweep's
    cache (RLSWEEP_CACHE)."""
    caches = [*(cache for entry in STACKS.values() for cache in entry.compile_caches), *COMPILE_CACHES]
    return {name: str(cache_home() / "compile" / folder) for name, folder in caches}


def child_env(cuda_visible_devices: str | None, cpus: int | None) -> dict[str, str]:
    env = dict(os.environ)
    # torch >= 2.10 reads PYTORCH_ALLOC_CONF, older torch PYTORCH_CUDA_ALLOC_CONF: one value in both.
    alloc_conf = env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF") or ALLOC_CONF
    env["PYTORCH_ALLOC_CONF"] = env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    env.update(CUDA_DEVICE_ORDER)  # an index means the GPU NVML (the sampler) means by it
    if cpus:
        # Two busy torch threads per process on a 2-core host stall for seconds.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cpus)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The trainer reports to no tracker (report_to "none"; the driver logs to MLflow): without this, TRL
    # imports mlflow anyway because it is installed (trl.extras.profiling), ~2 s of every trial's start.
    env["DISABLE_MLFLOW_INTEGRATION"] = "TRUE"
    for entry in STACKS.values():  # what each stack's children need (Unsloth: no statistics download)
        env.update(entry.env)
    # One value per host (the fork server is keyed by the environment): a user's own folder wins.
    for name, folder in compile_cache_env().items():
        env.setdefault(name, folder)
    return env
