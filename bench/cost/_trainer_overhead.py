"""The heavy part of bench/cost/trainer_overhead.py (its docstring says what it measures), imported only
when that benchmark runs, so `python -m bench --list` does not import torch and TRL."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from bench import Context
from tasks import load_task
from trainers import measure
from trainers.events import EventWriter
from trainers.measure import StepMeter, measured
from trainers.models import load_tokenizer, resolve_model
from trainers.runtime import grpo_config_kwargs
from trainers.trial import TrialSpec


class TimedMeter(StepMeter):
    """StepMeter that also accounts the time its own hooks take (the direct cost of measuring)."""

    hook_s = 0.0

    def _timed(self, hook, *args, **kwargs):
        start = time.perf_counter()
        try:
            return hook(*args, **kwargs)
        finally:
            TimedMeter.hook_s += time.perf_counter() - start

    def on_step_begin(self, *a, **k):
        return self._timed(super().on_step_begin, *a, **k)

    def on_step_end(self, *a, **k):
        return self._timed(super().on_step_end, *a, **k)

    def on_log(self, *a, **k):
        return self._timed(super().on_log, *a, **k)


class TimedWait:
    """trainers.measure.wait_for_device, accounting the time it takes (StepMeter calls it by name)."""

    wait_s = 0.0

    def __init__(self, wait):
        self.wait = wait

    def __call__(self) -> None:
        start = time.perf_counter()
        try:
            self.wait()
        finally:
            TimedWait.wait_s += time.perf_counter() - start


class Stopwatch(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_begin(self, args, state, control, **kw):
        self.t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter() - self.t)


def one_run(spec: TrialSpec, instrumented: bool, workdir: str) -> list[float]:
    torch.manual_seed(spec.seed)
    task = load_task(spec.task, spec.task_args, seed=spec.seed)
    path = resolve_model(spec.model)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lora = LoraConfig(
        r=spec.lora_r,
        lora_alpha=spec.lora_alpha,
        lora_dropout=spec.lora_dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    config = GRPOConfig(**grpo_config_kwargs(spec, torch.float32, on_gpu=False) | {"output_dir": workdir})
    watch = Stopwatch()
    callbacks = [watch]
    trainer_cls = GRPOTrainer
    if instrumented:
        meter = TimedMeter(EventWriter(str(Path(workdir) / "events.jsonl")), spec.max_prompt_length)
        callbacks.append(meter)
        trainer_cls = measured(GRPOTrainer)
    trainer = trainer_cls(
        model=model,
        reward_funcs=[f for f, _ in task.rewards.values()],
        args=config,
        train_dataset=task.train,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=callbacks,
    )
    if instrumented:
        meter.attach(trainer)
    trainer.train()
    return watch.times[2:]  # the first steps warm caches in both variants


def run(ctx: Context) -> dict:
    """bench/cost/trainer_overhead.py's run (this module imports torch, transformers and TRL: seconds)."""
    args = ctx.args
    torch.set_num_threads(1)
    measure.wait_for_device = TimedWait(measure.wait_for_device)
    spec = TrialSpec(
        model="tiny",
        quantization="none",
        num_generations=4,
        batch_size=2,
        max_completion_length=32,
        max_steps=args.steps,
    )
    bare, ours = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            for instrumented in order:
                (ours if instrumented else bare).extend(one_run(spec, instrumented, tmp))
    b, o = statistics.median(bare), statistics.median(ours)
    print(f"steps measured: bare {len(bare)}, rlsweep {len(ours)}")
    print(f"median step time: bare GRPOTrainer {b * 1000:.1f} ms, rlsweep-measured {o * 1000:.1f} ms")
    print(f"overhead, A/B: {(o / b - 1) * 100:+.2f}% of step time (target < 2%; noisy on a shared host)")
    steps = args.rounds * args.steps
    print(
        f"overhead, direct: our hooks took {TimedMeter.hook_s / steps * 1000:.2f} ms per step = "
        f"{TimedMeter.hook_s / steps / o * 100:.2f}% of the median step"
    )
    device = "cuda" if torch.cuda.is_available() else "cpu (no GPU: the synchronize is skipped)"
    print(
        f"of which waiting for the device: {TimedWait.wait_s / steps * 1e6:.1f} us per step = "
        f"{TimedWait.wait_s / steps / o * 100:.4f}% of the median step, on {device}"
    )
    return {
        "step_s_bare": b,
        "step_s_measured": o,
        "overhead_ab_pct": (o / b - 1) * 100,
        "overhead_direct_pct": TimedMeter.hook_s / steps / o * 100,
        "wait_for_device_pct": TimedWait.wait_s / steps / o * 100,
    }
