"""What our in-trainer measurement adds to a bare GRPOTrainer run of the same trial.

    python -m bench trainer_overhead [--set steps=20] [--set rounds=3]   (in a process of its own: it patches
    trainers.measure)

Builds the same tiny GRPO trial twice per round, in one process: once as a bare GRPOTrainer with
only a timestamp callback (the least any measurement can do), once as rlsweep runs it
(measured(GRPOTrainer) + StepMeter: token counting, generation timing, memory and RSS reads, event
writes). Rounds alternate the order. Reports median step time of each and the overhead ratio, and the time our hooks themselves take
per step (the direct cost, immune to the noise of a shared machine), and of that the part spent
waiting for the device before the step's clock starts and stops (trainers.measure.wait_for_device:
torch.cuda.synchronize on a GPU, only the is_available check on a CPU; this script runs on the CPU, so
the GPU figure, the time the CPU waits for queued kernels, is not measured by it).
Target: under 2% of step time (the goal: the direct figure; the A/B one is recorded beside it).
"""

from __future__ import annotations

from bench import Context, benchmark


@benchmark(
    tags=("trial", "overhead"),
    needs="cpu",
    params={"steps": 20, "rounds": 3},
    smoke={"steps": 6, "rounds": 1},
    goals={"overhead_direct_pct": "<= 2"},
    isolated=True,
)
def trainer_overhead(ctx: Context) -> dict:
    """What our in-trainer measurement adds to a bare GRPOTrainer run of the same trial."""
    from bench.cost._trainer_overhead import run  # torch, transformers, TRL: imported where it runs

    return run(ctx)
