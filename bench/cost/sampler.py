"""What the memory sampler costs a trainer: a CPU-bound loop in a child process, timed with the
sampler at `--hz` (default 20) against no sampler, alternating on/off in one run (ABBA order, so a
drift in machine load hits both sides alike).

Figures:
- slowdown: median(loop wall time with sampler) / median(loop wall time without) - 1, in percent;
  the target is < 1 %. Wall time is what a step costs, but on a loaded machine it swings by tens of
  percent from pair to pair: read it with the per-pair figures.
- CPU slowdown: the same ratio of the loop's CPU time (time.process_time in the child): the
  interference that is not scheduling (caches), stable under load.
- sampler CPU: the supervisor's CPU time while sampling, per sample and as a share of one core: on
  a machine with no idle core, at most this much is taken from the trainer.

`sampler_gpu` (python -m bench --gpu sampler_gpu) times a loop of 4096x4096 bf16 matrix products on the GPU instead (the child holds a
CUDA context, so on a GPU host the sampler reads it through NVML, as it reads a trainer).

    python -m bench sampler [--set hz=20] [--set pairs=6] [--set work_s=1.0]
    python -m bench --gpu sampler_gpu
"""

from __future__ import annotations

import platform
import resource
import statistics
import subprocess
import sys
import textwrap

import psutil

from bench import Context, benchmark
from orchestrator.running.telemetry import MemorySampler

# One line in = a loop count; one line out = the loop's wall and CPU seconds (timed inside the
# child, so process start-up and pipe latency are not counted).
CHILD = textwrap.dedent(
    """
    import sys, time
    for line in sys.stdin:
        n = int(line)
        start, cpu = time.perf_counter(), time.process_time()
        x = 0
        for i in range(n):
            x += i * i
        print(time.perf_counter() - start, time.process_time() - cpu, flush=True)
    """
)


CHILD_CUDA = textwrap.dedent(
    """
    import sys, time, torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    for line in sys.stdin:
        n = int(line)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            b = a @ a
        torch.cuda.synchronize()
        print(time.perf_counter() - start, time.process_time() - cpu, flush=True)
    """
)


def run_loop(child: subprocess.Popen, n: int) -> tuple[float, float]:
    child.stdin.write(f"{n}\n")
    child.stdin.flush()
    wall, cpu = child.stdout.readline().split()
    return float(wall), float(cpu)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


PARAMS = {"hz": 20.0, "pairs": 6, "work_s": 1.0}  # sampling rate, on/off pairs alternated ABBA, s per loop


@benchmark(tags=("sampler", "overhead"), params=PARAMS, smoke={"pairs": 2, "work_s": 0.5},
           goals={"slowdown_pct": "<= 1"}, smoke_goals={})  # fmt: skip
def sampler(ctx: Context) -> dict:
    """What the memory sampler costs a CPU-bound trainer loop, on against off, ABBA."""
    return measure(ctx, "cpu")


@benchmark(tags=("sampler", "overhead"), needs="gpu", params=PARAMS, smoke={"pairs": 2, "work_s": 0.5},
           goals={"slowdown_pct": "<= 1"}, smoke_goals={})  # fmt: skip
def sampler_gpu(ctx: Context) -> dict:
    """What the memory sampler costs a loop of GPU matrix products (read through NVML), on against off."""
    return measure(ctx, "cuda")


def measure(ctx: Context, kind: str) -> dict:
    """The loop in a child (`cpu`: Python, `cuda`: GPU matmuls), timed with the sampler on and off."""
    args = ctx.args
    args.child = kind
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_CUDA if args.child == "cuda" else CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if args.child == "cuda":
            run_loop(child, 50)  # warm-up: cuBLAS handles and kernels
            n = max(1, int(200 * args.work_s / run_loop(child, 200)[0]))
        else:
            run_loop(child, 200_000)  # warm-up
            n = int(2_000_000 * args.work_s / run_loop(child, 2_000_000)[1])
        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        cpu, samples, backend = 0.0, 0, None
        for pair in range(args.pairs):
            for on in (False, True) if pair % 2 == 0 else (True, False):
                if not on:
                    times[False].append(run_loop(child, n))
                    continue
                sampler = MemorySampler(child.pid, hz=args.hz).start()
                cpu0 = cpu_seconds()  # steady state: opening the backends (once a trial) not counted
                times[True].append(run_loop(child, n))
                sampler.stop()
                cpu += cpu_seconds() - cpu0
                samples += sampler.peak()["samples"] - 1  # start() took one
                backend = sampler.backend
    finally:
        child.stdin.close()
        child.wait(30)

    off, on = (statistics.median(t[0] for t in times[side]) for side in (False, True))
    off_cpu, on_cpu = (statistics.median(t[1] for t in times[side]) for side in (False, True))
    result = {
        "hz": args.hz,
        "child": args.child,
        "backend": backend,
        "pairs": args.pairs,
        "loop_s_off_median": off,
        "loop_s_on_median": on,
        "slowdown_pct": (on / off - 1) * 100,
        "pair_ratio_pct": [(b[0] / a[0] - 1) * 100 for a, b in zip(times[False], times[True], strict=True)],
        "loop_cpu_s_off_median": off_cpu,
        "loop_cpu_s_on_median": on_cpu,
        "cpu_slowdown_pct": (on_cpu / off_cpu - 1) * 100,
        "sampler_cpu_us_per_sample": cpu / samples * 1e6,
        "sampler_cpu_pct_of_core": cpu / sum(t[0] for t in times[True]) * 100,
        "load_average": psutil.getloadavg(),
        "samples": samples,
        "machine": f"{platform.machine()}, {psutil.cpu_count()} CPUs, Python {platform.python_version()}",
    }
    print(
        f"sampler at {args.hz:g} Hz ({backend}): loop {on:.3f} s with vs {off:.3f} s without "
        f"(median of {args.pairs}) -> slowdown {result['slowdown_pct']:+.2f} % wall, "
        f"{result['cpu_slowdown_pct']:+.2f} % CPU; "
        f"sampler CPU {result['sampler_cpu_us_per_sample']:.0f} us/sample = "
        f"{result['sampler_cpu_pct_of_core']:.2f} % of one core"
    )
    print("per pair, wall (%):", " ".join(f"{r:+.2f}" for r in result["pair_ratio_pct"]))
    print(f"machine: {result['machine']}, load average {result['load_average'][0]:.2f}")
    return result
