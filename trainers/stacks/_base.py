"""The Stack interface, and the trial assembly every stack shares, written once.

A stack says whether it can run here (and why not), builds a measured GRPO trainer from a TrialSpec, and
reports the knobs it read back and its package versions; run() is the same for all: build, emit
`started`, train, emit `finished`. Heavy libraries (torch, transformers, TRL, a stack's own) are imported
inside the methods that need them, so importing a stack module stays light.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from trainers.events import FINISHED, STARTED, EventWriter

if TYPE_CHECKING:
    from trainers.stacks import StackEntry
    from trainers.trial import TrialSpec

# The packages every stack trains with: their versions go into each trial's `started` event.
SHARED_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "datasets")


@dataclass
class Prepared:
    """What a stack knows before it loads a model: the device, the dtype, the task and the model path."""

    on_gpu: bool
    dtype: Any
    task: Any
    model_path: str


@dataclass
class Built:
    """A stack's trial, ready to train: the measured trainer, its step meter, the longest prompt, and
    the stack's own read-back knobs (added to the `started` event's effective_config)."""

    trainer: Any
    meter: Any
    longest_prompt: int
    read_back: dict[str, Any] = field(default_factory=dict)


class Stack(ABC):
    """One training stack. Subclass it in one module, then register its entry in trainers.stacks (the
    name, label and vllm_modes are the entry's: trainers.stacks.load builds the Stack with it)."""

    packages: ClassVar[tuple[str, ...]] = ()  # its own packages, beyond SHARED_PACKAGES
    install_fix: ClassVar[str] = "install them with `make setup`"

    def __init__(self, entry: StackEntry):
        self.entry = entry
        self.name = entry.name

    def availability(self) -> tuple[bool, str]:
        """(True, "") where every package it needs is installed, else (False, what is missing and the fix).
        Finds the packages without importing them (importing Unsloth patches TRL process-wide)."""
        missing = [p for p in (*SHARED_PACKAGES, *self.packages) if importlib.util.find_spec(p) is None]
        if missing:
            return False, f"{', '.join(missing)} not installed; {self.install_fix}"
        return True, ""

    def versions(self) -> dict[str, str | None]:
        """Each package it trains with and its installed version (None: not installed)."""
        out: dict[str, str | None] = {}
        for package in (*SHARED_PACKAGES, *self.packages):
            try:
                out[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                out[package] = None
        return out

    @abstractmethod
    def build(self, spec: TrialSpec, events: EventWriter) -> Built:
        """Load the task, the model and its adapters, and return the measured trainer (assemble())."""

    def generation_probe(self):
        """How a synthetic probe (trainers/probe.py) measures this stack's generation at full length: a
        callable with trainers.probe.probe_generation's signature. The default goes through the model's
        own generate (transformers', or the one the stack patched in); a stack whose generation works
        otherwise returns its own."""
        from trainers.probe import probe_generation

        return probe_generation

    def simulate_step(self, spec: TrialSpec, prompt_tokens: int, counter: Any, **how: Any) -> dict:
        """One training step of `spec` run through this stack's own code on meta tensors, counted by
        `counter` (trainers/simulate; `how`: device, attention, as_cuda, as trainers.simulate.simulate
        passes them). A stack that cannot yet says why (trainers.simulate.CannotSimulate)."""
        from trainers.simulate import CannotSimulate

        raise CannotSimulate(f"the {self.entry.label} stack has no simulated step yet")

    def outside_allocator(self, spec: TrialSpec) -> list:
        """GPU memory the trial's processes hold outside torch's caching allocator, term by term, each with
        its source (trainers/simulate/_outside.py Outside): the terms every trainer has; a stack whose
        code allocates more outside torch (children that initialise CUDA) adds its own."""
        from trainers.simulate._outside import shared_terms

        return shared_terms()

    def effective_knobs(self, built: Built, spec: TrialSpec) -> dict[str, Any]:
        """The knobs as the built trainer holds them (what the library read back), plus the stack's own."""
        from trainers.runtime import effective_config

        return (
            effective_config(built.trainer, built.trainer.model, spec)
            | {"longest_prompt_tokens": built.longest_prompt}
            | built.read_back
        )

    def run(self, spec: TrialSpec, events: EventWriter, setup: bool = True) -> None:
        """One trial: build, report what it runs with (`started`), train, report the end (`finished`).
        setup: set the process up first (a probe session's shapes run in a process set up once)."""
        from trainers.device import device_info, setup_process
        from trainers.runtime import check_strategy, lora_b_abs_sum
        from trainers.startup import mark, marks

        # Threads, seeds and the budget's card before build(): a stack that patches at import (Unsloth)
        # imports inside build() and reads the card it will train on there.
        if setup:
            setup_process(spec)
        built = self.build(spec, events)
        mark("trainer")
        effective = self.effective_knobs(built, spec)
        check_strategy(spec, effective.get("distributed_type"))
        # Held-out accuracy before any training: the baseline against which the trial's learning is judged.
        evaluator = built.meter.evaluator
        before = evaluator.run(built.trainer) if evaluator is not None else None
        events.emit(
            STARTED,
            stack=self.name,
            versions=self.versions(),
            **device_info(),
            effective_config=effective,
            startup=marks(),  # where the start-up went (trainers/startup.py)
            eval_before=before,
        )
        built.trainer.train()
        events.emit(
            FINISHED,
            steps=built.meter.steps_emitted,
            # null for full fine-tuning: no LoRA weights to measure
            lora_b_abs_sum=lora_b_abs_sum(built.trainer.model) if spec.adapter == "lora" else None,
        )


def prepare(spec: TrialSpec) -> Prepared:
    """Device and dtype (the process is set up: Stack.run), then data and rewards: a bad task fails in
    seconds, before a model is loaded."""
    import torch

    from tasks import load_task
    from trainers.models import resolve_model
    from trainers.runtime import choose_dtype

    return Prepared(
        on_gpu=torch.cuda.is_available(),
        dtype=choose_dtype(spec),
        task=load_task(spec.task, spec.task_args, seed=spec.task_seed),
        model_path=resolve_model(spec.model, spec.model_cache_dir),
    )


def grpo_config(config_class: type, asked: dict[str, Any], task: Any) -> Any:
    """The stack's GRPOConfig from our batch semantics (runtime.grpo_config_kwargs) and the task's reward
    weights."""
    return config_class(**asked, reward_weights=[weight for _, weight in task.rewards.values()])


def assemble(
    spec: TrialSpec,
    events: EventWriter,
    *,
    trainer_class: type,
    model: Any,
    config: Any,
    task: Any,
    tokenizer: Any,
    meter_class: type | None = None,
    generation_probe: Any = None,
    **trainer_kwargs: Any,
) -> tuple[Any, Any]:
    """The measured trainer and its step meter: the evaluator, the meter (with the supervisor's
    channel), trainer_class wrapped by measure.measured, the meter attached. Returns (trainer, meter)."""
    from trainers.control import SupervisorChannel
    from trainers.evaluate import Evaluator
    from trainers.measure import StepMeter, measured

    meter = (meter_class or StepMeter)(
        events,
        spec.max_prompt_length,
        probe_steps=spec.probe_steps,
        probe_kind=spec.probe_kind,
        evaluator=Evaluator.for_trial(task, tokenizer, spec),
        channel=SupervisorChannel(spec.hold_at_step),
    )
    trainer = measured(trainer_class)(
        model=model,
        reward_funcs=[func for func, _ in task.rewards.values()],
        args=config,
        train_dataset=task.train,
        processing_class=tokenizer,
        callbacks=[meter],
        **trainer_kwargs,
    )
    if generation_probe is not None:
        trainer.generation_probe = generation_probe
    meter.attach(trainer)
    return trainer, meter
