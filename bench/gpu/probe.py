"""The first thing to run on a new GPU host, before any trial: what a trial's GPU paths need, each
checked in its own bounded child process so one hang or crash does not hide the rest.

- toolchain: a C compiler, Python's headers and libcuda visible to ldconfig (Triton builds its
  launcher with them at the first kernel), and a Triton kernel that compiles and runs;
- NVML's view of a CUDA process: whether nvmlDeviceGetComputeRunningProcesses lists the child's own
  PID (inside a container it may list the host's PIDs, or none), and the memory it reports for it;
- the CUDA context's size as the trainer measures it (trainers.device.measure_cuda_context);
- the exception torch raises for an allocation over the per-process fraction, and whether
  trainers.events.oom_cause reads it as out-of-memory, bare and wrapped by another exception;
- bitsandbytes' 4-bit linear layer on CUDA; `import unsloth` offline, timed;
- the versions a trial records.

    python bench/gpu/probe.py [--json probe.json] [--timeout 240]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECKS = {
    "triton": """
        import torch, triton, triton.language as tl

        @triton.jit
        def add(x, y, out, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

        x = torch.arange(1000, device="cuda", dtype=torch.float32)
        out = torch.empty_like(x)
        add[(4,)](x, x, out, 1000, BLOCK=256)
        assert torch.equal(out, 2 * x)
        result = {"ok": True, "triton": triton.__version__}
    """,
    "nvml_pid": """
        import os, pynvml, torch
        from trainers.nvml import resolve_nvml_handle
        pynvml.nvmlInit()
        handle = resolve_nvml_handle(pynvml, "0")
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB
        torch.cuda.synchronize()
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        listed = [{"pid": p.pid, "used_gib": (p.usedGpuMemory or 0) / 2**30} for p in procs]
        result = {
            "own_pid": os.getpid(),
            "listed": listed,
            "own_pid_listed": any(p["pid"] == os.getpid() for p in listed),
            "device_used_gib": pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30,
        }
    """,
    "cuda_context": """
        import pynvml, torch
        from trainers import device
        from trainers.nvml import resolve_nvml_handle
        pynvml.nvmlInit()
        handle = resolve_nvml_handle(pynvml, "0")
        before = device.device_used_before_cuda()
        ctx = device.measure_cuda_context(torch, pynvml, handle, before)
        result = {
            "context_gib": None if ctx.bytes is None else ctx.bytes / 2**30,
            "source": ctx.source,
            "device_used_before_gib": None if before is None else before / 2**30,
            "gpu": torch.cuda.get_device_name(0),
            "total_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
            "capability": list(torch.cuda.get_device_capability(0)),
        }
    """,
    "oom_type": """
        import torch
        from trainers.events import oom_cause
        torch.cuda.set_per_process_memory_fraction(0.01, 0)
        try:
            torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
            result = {"raised": None}
        except BaseException as exc:
            try:
                raise RuntimeError("a library wrapped it") from exc
            except RuntimeError as wrapped:
                wrapped_cause = oom_cause(wrapped)
            result = {
                "raised": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "mro": [c.__name__ for c in type(exc).__mro__],
                "message": str(exc)[:300],
                "oom_cause_bare": oom_cause(exc) is exc,
                "oom_cause_wrapped": wrapped_cause is exc,
            }
    """,
    "bnb_4bit": """
        import torch, bitsandbytes as bnb
        layer = bnb.nn.Linear4bit(256, 256, compute_dtype=torch.bfloat16, quant_type="nf4").cuda()
        y = layer(torch.randn(4, 256, device="cuda", dtype=torch.bfloat16))
        torch.cuda.synchronize()
        result = {"ok": bool(torch.isfinite(y).all()), "bitsandbytes": bnb.__version__,
                  "weight": type(layer.weight).__name__}
    """,
    "unsloth_import": """
        import time
        start = time.perf_counter()
        import unsloth  # noqa: F401 - patches transformers/TRL at import
        result = {"seconds": round(time.perf_counter() - start, 1), "unsloth": unsloth.__version__}
    """,
    "versions": """
        import importlib.metadata as md, platform, torch
        names = ["torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "unsloth",
                 "unsloth_zoo", "triton", "nvidia-ml-py", "datasets", "pydantic", "pyarrow"]
        found = {}
        for n in names:
            try:
                found[n] = md.version(n)
            except md.PackageNotFoundError:
                found[n] = None
        try:
            import pynvml
            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
        except Exception as exc:
            driver = f"unknown (NVML: {exc})"
        result = {"python": platform.python_version(), "cuda": torch.version.cuda,
                  "driver": driver, "packages": found}
    """,
}


def run_check(name: str, body: str, timeout: float) -> dict:
    """Run one check in its own interpreter, from a file: `python -c` text has no source that
    `inspect.getsourcelines` can read, which triton.jit needs for every kernel."""
    code = textwrap.dedent(body) + "\nimport json; print('RESULT ' + json.dumps(result))\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-probe-") as tmp:
        script = Path(tmp) / f"check_{name}.py"
        script.write_text(code)
        try:
            done = subprocess.run(
                [sys.executable, str(script)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=ROOT,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:g} s"}
    took = round(time.perf_counter() - start, 1)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[7:]), "wall_s": took}
    return {"error": f"exit {done.returncode}", "stderr_tail": done.stderr[-2000:], "wall_s": took}


def toolchain() -> dict:
    include = sysconfig.get_paths()["include"]
    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    return {
        "cc": shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"),
        "python_h": (Path(include) / "Python.h").exists(),
        "python_include": include,
        "libcuda_in_ldconfig": "libcuda.so" in ldconfig,
        "nvcc": shutil.which("nvcc"),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="also write the findings to this file")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per check (default 240)")
    args = parser.parse_args(argv)
    found = {"toolchain": toolchain()}
    print("toolchain", json.dumps(found["toolchain"]), flush=True)
    for name, body in CHECKS.items():
        found[name] = run_check(name, body, args.timeout)
        print(name, json.dumps(found[name])[:3000], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))
    return found


if __name__ == "__main__":
    main()
