"""A test-only third stack, registered for one test and removed after it (trainers.stacks.STACKS)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

from trainers.runtime import UnavailableError
from trainers.simulate._step import Accelerator, StepHooks, run_step
from trainers.stacks import StackEntry, register, unregister
from trainers.stacks._base import Stack

THIRD_UNAVAILABLE = "third: a test-only stack; it trains nothing"


class ThirdStack(Stack):
    def build(self, spec, events):
        raise UnavailableError(THIRD_UNAVAILABLE)

    def simulate_step(self, spec, prompt_tokens, counter, **how):
        """Its step through the shared skeleton (trainers/simulate/_step.py) with hooks of its own."""
        return run_step(ThirdHooks(), spec, prompt_tokens, counter, **how)


class ThirdHooks(StepHooks):
    """A plain stack's parts of the step: transformers' model as built, its output head alone trained, a
    policy-gradient loss over the completion's log-probs."""

    def model(self, spec, args, dtype, device, attention):
        from trainers.simulate._meta import qlora_model

        model = qlora_model(spec, dtype, device, attention)
        for param in model.parameters():
            param.requires_grad_(False)
        model.get_output_embeddings().weight.requires_grad_(True)
        return model

    def trainer(self, args, model):
        return SimpleNamespace(args=args, model=model, accelerator=Accelerator())

    def _logps(self, model, inputs):
        import torch

        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        completion = inputs["completion_ids"].shape[1]
        logits = model(input_ids=ids, logits_to_keep=completion + 1).logits[:, :-1].float()
        return logits.log_softmax(-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)

    def score(self, trainer, model, inputs):
        return self._logps(model, inputs)

    def loss(self, trainer, model, inputs):
        return -(self._logps(model, inputs) * inputs["advantages"][:, None]).mean()


THIRD = StackEntry("third", "Third", "tests.helpers.stacks:ThirdStack")
# A stub that claims every capability a StackEntry can (tests/unit/test_stack_registry.py): rules that
# refuse a stack name the stacks that can, read from the registry.
CAPABLE = StackEntry(
    "capable",
    "Capable",
    "tests.helpers.stacks:ThirdStack",
    vllm_modes=("colocate", "server"),
    full_finetune=True,
    multi_rank=True,
    vllm_min_tokens=True,
    vllm_sleep_mode=True,
    preload=("trainers.__main__", "tests.helpers.stacks"),
)


@contextmanager
def registered(entry: StackEntry = THIRD) -> Iterator[StackEntry]:
    """`entry` in the registry for the with-block, and gone from it after."""
    register(entry)
    try:
        yield entry
    finally:
        unregister(entry.name)


class ShapeStack(Stack):
    """A test-only stack for probe sessions (trainers/_session.py): it 'loads' a model once per session
    (counted in `loads`), finishes every shape, and raises torch's out-of-memory error for K >= 64."""

    loads = 0

    def build(self, spec, events):
        from trainers._session import held, hold

        if held(spec) is None:
            ShapeStack.loads += 1
            hold(spec, object())

    def run(self, spec, events, setup=True):
        import torch

        from trainers.events import FINISHED, STARTED

        self.build(spec, events)
        if spec.num_generations >= 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        events.emit(STARTED, stack=self.name)
        events.emit(FINISHED, steps=0)


SHAPES = StackEntry("shapes", "Shapes", "tests.helpers.stacks:ShapeStack")
