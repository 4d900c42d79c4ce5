"""GPU memory a trial's processes hold outside torch's caching allocator: what NVML reads beyond torch's
reserved. The simulated step gives reserved (trainers/simulate); these terms turn it into NVML's figure.
Each term names the process that holds it, the source it was read from, and what measured it; a term
the source allows but no GPU row has measured has `gib` None (not counted) and `possible_gib`, the most
the source allows, so an answer can say what it has not seen.

    terms = outside(spec)            # the stack's (Stack.outside_allocator): shared_terms() and its own
    counted_gib(terms), possible_gib(terms)

Read from the installed sources (torch 2.13, bitsandbytes 0.50.2, TRL 1.14, unsloth 2026.10.9):

- the trainer's CUDA context with the kernels its libraries load into it (torch's, cuBLAS/cuBLASLt's,
  bitsandbytes', Triton's): NVML less torch's reserved on the H100 rows of bench/data (0.74-0.77 GiB on
  28 of 30, median 0.746; 0.62 and 0.82 on two whose NVML and torch peaks fell at different moments), of
  which a bare context is 0.51 GiB (docs/gpu-results.md; bench/data/h100-2026-11-27's
  nvidia-smi-apps files: each trainer's first reading, 518 MiB).
- cuBLAS and cuBLASLt workspaces: inside reserved. torch gives each handle its workspace from the caching
  allocator (torch.backends.cuda.cublas_workspace_size / cublaslt_workspace_size set their sizes;
  torch._C._cuda_clearCublasWorkspaces hands them back to it), so they are counted there, not here.
- bitsandbytes: its NF4 ops allocate their outputs with torch (bitsandbytes/backends/cuda/ops.py); it
  calls cudaMallocManaged only for paged optimizers (functional.get_paged) and creates a cuBLASLt context
  of its own only for int8 matmul (functional.CUBLAS_Context): neither runs in a trial (AdamW, NF4).
- Triton's autotuning (TRL's log-prob kernel, Inductor's kernels) benchmarks in the trainer on torch
  tensors: inside reserved. The kernels it loads are in the context's figure above.
- children that initialise CUDA: a stack's own (trainers/stacks/*: Stack.outside_allocator). Inductor
  compiles in a sidecar process (torch/_inductor/compile_worker/__main__.py) that calls pre_fork_setup ->
  caching_device_properties -> torch.cuda.get_device_properties before it forks its workers: CUDA is
  initialised there, a context on the card where that creates one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A bare CUDA context on an H100 (NVML's reading of a process that has initialised CUDA and allocated
# nothing: 518 MiB in bench/data/h100-2026-11-27's nvidia-smi-apps files; docs/gpu-results.md 0.51 GiB).
H100_BARE_CONTEXT_GIB = 0.51
# NVML less torch's reserved in the trainer on the H100 rows (0.74-0.77 GiB on 28 of 30): its context and
# the libraries' kernels loaded into it.
H100_TRAINER_OUTSIDE_GIB = 0.76


@dataclass(frozen=True)
class Outside:
    """One allocation outside torch's caching allocator (module docstring)."""

    name: str
    process: str  # "trainer", or the child that holds it
    gib: float | None  # counted into NVML's figure; None: not measured (possible_gib is the source's most)
    possible_gib: float
    source: str
    measured: str = ""  # what measured it; "" where nothing has


def shared_terms() -> list[Outside]:
    """The terms every stack's trainer has (module docstring)."""
    return [
        Outside(
            "CUDA context and the libraries' kernels", "trainer", H100_TRAINER_OUTSIDE_GIB,
            H100_TRAINER_OUTSIDE_GIB, "the CUDA driver, per process that initialises CUDA",
            "NVML less torch's reserved on 28 of bench/data's 30 H100 rows (0.74-0.77 GiB)",
        ),
        Outside(
            "cuBLAS and cuBLASLt workspaces", "trainer", 0.0, 0.0,
            "torch allocates them from its caching allocator (torch.backends.cuda.cublas_workspace_size): "
            "inside reserved",
        ),
        Outside(
            "bitsandbytes' own buffers", "trainer", 0.0, 0.0,
            "bitsandbytes/functional.py: managed memory for paged optimizers only, its cuBLASLt context "
            "for int8 matmul only; NF4 allocates through torch",
        ),
        Outside(
            "Triton's autotuning", "trainer", 0.0, 0.0,
            "benchmarks on torch tensors in the trainer: inside reserved (its kernels: the context's term)",
        ),
    ]  # fmt: skip


def inductor_compile_workers(workers: int, why: str) -> Outside:
    """Inductor's compile sidecar and its `workers` forked workers, where a stack compiles with more than
    one compile thread: the sidecar initialises CUDA (module docstring); whether each forked worker holds
    a context as well, no GPU row has measured (the H100 rows' nvidia-smi-apps files list no process beside
    each trainer). Not counted; at most a bare context each."""
    return Outside(
        f"Inductor's compile sidecar and {workers} workers", "Inductor compile workers", None,
        (workers + 1) * H100_BARE_CONTEXT_GIB,
        "torch/_inductor/compile_worker/__main__.py: pre_fork_setup -> torch.cuda.get_device_properties "
        f"before forking; {why}",
    )  # fmt: skip


def counted_gib(terms: list[Outside]) -> float:
    """What the measured terms add to torch's reserved in NVML's figure."""
    return sum(t.gib for t in terms if t.gib is not None)


def possible_gib(terms: list[Outside]) -> float:
    """The most the terms could add, unmeasured ones at the source's bound."""
    return sum(t.gib if t.gib is not None else t.possible_gib for t in terms)


def outside(spec: Any) -> list[Outside]:
    """`spec`'s terms: its stack's (trainers/stacks/_base.py Stack.outside_allocator)."""
    from trainers import stacks

    return stacks.load(spec.stack).outside_allocator(spec)
