"""Per-step measurement inside the trainer process, shared by both stacks.

`measured(GRPOTrainer)` subclasses a (possibly Unsloth-patched) GRPOTrainer so that generation is
timed and the tokens it actually produced are counted, and so that probe steps force every
completion to max_completion_length. `StepMeter` is a TrainerCallback that brackets each optimizer
step (time, torch memory, RSS and its peak) and emits one `step` event when TRL logs that step; then
it asks the supervisor's channel (trainers/control.py) whether to end training there.

Throughput is a figure of a generation cycle: TRL generates once and then optimises over those
completions for num_iterations passes (and steps_per_generation micro-batches), so with
num_iterations > 1 some optimizer steps generate nothing. A cycle runs from a step that generated to
the step before the next one that does; its tokens_per_s (tokens generated in the cycle / the wall
time of all its steps) is reported on the step that closes it, and is null on the others. A step that
generated nothing carries null token counts and generation time, never 0.

It also records what the original benchmark's metrics.csv held: its token estimate and a CUDA peak
running since training began.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import psutil
from transformers import TrainerCallback

from tasks.bounded import SCORING
from trainers._readings import ALLOC_COUNTERS, _alloc_counters, _peak_so_far, _vm_hwm_bytes, wait_for_device
from trainers._session import reset_vm_hwm as _reset_vm_hwm
from trainers._update import trainable_snapshot, undo_update, update_ratio
from trainers.control import closes_steady_cycle
from trainers.device import refresh_allocator_cap
from trainers.events import STEP, EventWriter
from trainers.optimizer_state import materialize as materialize_optimizer_state
from trainers.optimizer_state import state_gib as optimizer_state_gib
from trainers.probe import (
    DECODE,
    SYNTHETIC,
    WINDOW_TOKENS,
    GenerationProbe,
    end_synthetic_cycle,
    probe_generation,
    random_completions,
    random_rewards,
    vocabulary,
)
from trainers.record import STEP as F  # the step record's field names, defined once
from trainers.record import TRL_NAMES
from trainers.units import GIB

# TRL's log keys → our column names (docs/schema.md). Keys TRL omits on some steps stay null.
TRL_SIGNALS = {trl: field for field, trl in TRL_NAMES.items()}


def original_token_estimate(
    max_prompt_length: int, max_completion_length: int, num_generations: int, per_device_train_batch_size: int
) -> int:
    """The original benchmark's estimated tokens per step: (max prompt + max completion length) x K x
    its --batch-size, which was TRL's per_device_train_batch_size. From configured limits, not a count
    (tokens_per_s counts what was processed)."""
    return (max_prompt_length + max_completion_length) * num_generations * per_device_train_batch_size


class StepCounters:
    """What generation did during the current optimizer step."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.gen_s = 0.0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.completions = 0
        self.texts: set[tuple[int, ...]] = set()  # the step's distinct completions, by their token ids
        self.decode_steps = 0  # each generation call's longest completion, summed
        self.gen_t_start: float | None = None  # wall clock of the first generation call's start
        self.gen_t_end: float | None = None  # and of the last one's end
        self.vllm_min_tokens: int | None = None  # min_tokens of the SamplingParams colocated vLLM received
        # A synthetic probe's generation phase, when the step had one.
        self.probe: GenerationProbe | None = None
        self.gen_peak_bytes: int | None = None  # the step's memory peak up to the end of its generation


def _token_tuple(ids: Any) -> tuple[int, ...]:
    """A completion's token ids as a hashable tuple (a list or a tensor of them)."""
    return tuple(ids.tolist() if hasattr(ids, "tolist") else ids)


def _reading_min_tokens(generate, counters: StepCounters):
    """vLLM's LLM.generate, noting the min_tokens of the sampling parameters each call received."""

    def generate_noting_min_tokens(*args, **kwargs):
        params = kwargs.get("sampling_params", args[1] if len(args) > 1 else None)
        counters.vllm_min_tokens = getattr(params, "min_tokens", None)
        return generate(*args, **kwargs)

    return generate_noting_min_tokens


def measured(trainer_cls):
    """A subclass of trainer_cls whose generation is timed, counted, and forced long on probe steps."""

    class Measured(trainer_cls):
        counters: StepCounters
        force_max_length: bool = False
        probe_kind: str = DECODE  # how a forced step reaches max length: decode every token, or synthetic
        # The stack's way to measure its generation at full length (Stack.generation_probe): by default
        # trainers.probe.probe_generation, through the model's own generate.
        generation_probe = staticmethod(probe_generation)

        @property
        def synthetic_now(self) -> bool:
            return self.force_max_length and self.probe_kind == SYNTHETIC

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            if not self.synthetic_now or not self.model.training:
                return super()._generate_single_turn(prompt_ids, *args, **kwargs)
            return self._synthetic_turn(prompt_ids, *args, **kwargs)

        def _synthetic_turn(self, prompt_ids, *args, **kwargs):
            """A synthetic probe's generation (trainers/probe.py): the stack's generation measured at full
            length without decoding every token; returns completions of exactly max_completion_length."""
            length = self.args.max_completion_length
            vocab, special = vocabulary(self.model, self.processing_class)
            completions = random_completions(len(prompt_ids), length, vocab, special)
            vllm = getattr(self, "vllm_generation", None) is not None
            measured = (
                self._vllm_window(prompt_ids, *args, **kwargs)
                if vllm
                else self._transformers_probe(prompt_ids, length, special)
            )
            counters = getattr(self, "counters", None)
            if counters is not None:
                counters.probe = measured
            # With vLLM, TRL corrects for its sampling with per-token log-probs: give it a tensor of the shape
            # (their values only weight a loss whose update is undone).
            return completions, [[0.0] * length for _ in completions] if vllm else None

        def _transformers_probe(self, prompt_ids, length, special):
            import contextlib

            import torch
            from trl.models.utils import unwrap_model_for_generation

            with contextlib.ExitStack() as stack:
                model = stack.enter_context(
                    unwrap_model_for_generation(
                        self.model_wrapped,
                        self.accelerator,
                        gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                        generation_kwargs=getattr(self, "generation_kwargs", None),
                    )
                )
                stack.enter_context(torch.no_grad())
                dist = getattr(self, "_dist", None)
                if dist is not None:
                    stack.enter_context(dist.summon_full_params(self.model_wrapped, recurse=False))
                return self.generation_probe(
                    model, prompt_ids, length, self._tokenizer.pad_token_id, self.generation_config, special
                )

        def _vllm_window(self, prompt_ids, *args, **kwargs):
            """vLLM's pool is allocated whole when vLLM starts, so its memory does not grow with the
            completions: one short window through the stack's own vLLM path, timed per token (its prefill
            included); no reading at full length."""
            vllm = self.vllm_generation
            saved = vllm.generation_kwargs
            window = WINDOW_TOKENS
            vllm.generation_kwargs = saved | {"max_tokens": window, "min_tokens": window}
            start = time.perf_counter()
            try:
                super()._generate_single_turn(prompt_ids, *args, **kwargs)
            finally:
                vllm.generation_kwargs = saved
            return GenerationProbe(ms_per_token_at_prompt=1000 * (time.perf_counter() - start) / window)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            if not self.synthetic_now or not self.model.training:
                return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return random_rewards(len(prompts), len(self.reward_funcs), self.accelerator.device)

        def _generate(self, prompts):
            forced = (
                self.args.max_completion_length if self.force_max_length and not self.synthetic_now else None
            )
            config = getattr(self, "generation_config", None)
            if config is not None:
                # min_new_tokens masks EOS until max length: the worst-case memory of this shape.
                config.min_new_tokens = forced
            vllm = getattr(self, "vllm_generation", None)
            if vllm is not None:
                # vLLM's SamplingParams.min_tokens does the same; TRL merges generation_kwargs into the
                # SamplingParams of every call (colocate) and sends them to the server (server mode).
                kept = {k: v for k, v in vllm.generation_kwargs.items() if k != "min_tokens"}
                vllm.generation_kwargs = kept | ({"min_tokens": forced} if forced else {})
            start, wall_start = time.perf_counter(), time.time()
            out = super()._generate(prompts)
            refresh_allocator_cap()  # generation loads kernels (cuBLAS, Triton) outside torch's allocator
            counters = getattr(self, "counters", None)
            if counters is not None and self.model.training:
                prompt_ids, completion_ids = out[0], out[1]
                counters.gen_s += time.perf_counter() - start
                counters.prompt_tokens += sum(len(ids) for ids in prompt_ids)
                counters.completion_tokens += sum(len(ids) for ids in completion_ids)
                counters.completions += len(completion_ids)
                counters.texts.update(_token_tuple(ids) for ids in completion_ids)
                # Every sequence of the batch waits for the longest: the decoding steps the call ran. Nothing
                # was decoded to a synthetic probe's lengths: its windows (counters.probe) say the speed.
                if not self.synthetic_now:
                    counters.decode_steps += max((len(ids) for ids in completion_ids), default=0)
                counters.gen_peak_bytes = max(counters.gen_peak_bytes or 0, _peak_so_far())
                if counters.gen_t_start is None:
                    counters.gen_t_start = wall_start
                counters.gen_t_end = time.time()
            return out

    Measured.__name__ = Measured.__qualname__ = f"Measured{trainer_cls.__name__}"
    return Measured


class Cycle:
    """The generation cycle in progress: its tokens, the wall time of its steps so far, its probe flag."""

    def __init__(self):
        self.tokens = 0
        self.seconds = 0.0
        self.steps = 0
        self.probe = False
        self.synthetic = False  # its completions came from a synthetic probe (trainers/probe.py)


def closes_cycle(trainer, state) -> bool:
    """Whether the optimizer step that just ended is the last of its generation cycle: the trainer's next
    micro-batch generates anew (TRL: `_step % (steps_per_generation * num_iterations) == 0`), or
    training ends. A trainer without those counters generates every step."""
    if state.max_steps and state.global_step >= state.max_steps:
        return True
    micro_steps = getattr(trainer, "_step", None)
    args = getattr(trainer, "args", None)
    per_generation = getattr(args, "steps_per_generation", None)
    if micro_steps is None or not per_generation:
        return True
    return micro_steps % (per_generation * getattr(trainer, "num_iterations", 1)) == 0


# What a synthetic probe's step has no measurement of: its rewards were drawn at random for completions
# drawn at random (trainers/probe.py), so their mean, spread and variety mean nothing.
SYNTHETIC_UNMEASURED = (F.reward_mean, F.reward_std, F.frac_reward_zero_std, F.distinct_completion_share)


class StepMeter(TrainerCallback):
    """Brackets each optimizer step and emits its `step` event once TRL has logged the step."""

    def __init__(
        self,
        events: EventWriter,
        max_prompt_length: int,
        probe_steps: int = 0,
        evaluator=None,
        channel=None,
        probe_kind: str = DECODE,
    ):
        self.events = events
        self.channel = channel  # trainers.control.SupervisorChannel: asked after each step's event
        self.max_prompt_length = max_prompt_length
        self.probe_steps = probe_steps
        self.probe_kind = probe_kind
        self.evaluator = evaluator
        self.cuda_peak_since_start = 0
        self.trainer = None
        self.counters = StepCounters()
        self.process = psutil.Process()
        self.pending: dict[str, Any] | None = None
        self.steps_emitted = 0
        self.cycle = Cycle()
        self.optimizer_state_gib: float | None = None

    def attach(self, trainer) -> None:
        self.trainer = trainer
        trainer.counters = self.counters
        trainer.probe_kind = self.probe_kind
        llm = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
        if llm is not None:
            llm.generate = _reading_min_tokens(llm.generate, self.counters)

    def on_train_begin(self, args, state, control, **kwargs):
        import torch

        refresh_allocator_cap()  # what the model's load put outside torch (bitsandbytes, cuBLAS)
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()  # the running peak counts from here, as the original's

    def _fold_cuda_peak(self) -> None:
        """Fold the peak since the last reset into the running peak (per-step resets would lose it)."""
        import torch

        self.cuda_peak_since_start = max(self.cuda_peak_since_start, torch.cuda.max_memory_allocated())

    def on_step_begin(self, args, state, control, **kwargs):
        import torch

        self.counters.reset()
        SCORING.reset()
        self.probe = state.global_step < self.probe_steps
        if self.trainer is not None:
            self.trainer.force_max_length = self.probe
        if self.trainer is not None and state.global_step == 0:
            # The optimizer's moments, live through every later step, are live through this one too
            # (trainers/optimizer_state.py): a step measured alone reads the steady peak.
            materialize_optimizer_state(self.trainer)
        self.optimizer_state_gib = optimizer_state_gib(self.trainer)
        self.hwm_reset = _reset_vm_hwm()
        if torch.cuda.is_available():
            self._fold_cuda_peak()  # what ran between steps (logging, evaluation) counts too
            torch.cuda.reset_peak_memory_stats()
        self.alloc_start = _alloc_counters()
        self.weights_before = trainable_snapshot(self.trainer)
        refresh_allocator_cap()
        wait_for_device()  # work queued before the step (logging, evaluation) is not the step's
        self.t_start = time.time()
        self.perf_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        import torch

        wait_for_device()
        step_s = time.perf_counter() - self.perf_start
        refresh_allocator_cap()
        c = self.counters
        generated = c.completions > 0
        cycle = self.cycle
        if generated:
            cycle.probe = self.probe
            cycle.synthetic = c.probe is not None
        cycle.tokens += c.prompt_tokens + c.completion_tokens
        cycle.seconds += step_s
        cycle.steps += 1
        if cycle.synthetic:
            end_synthetic_cycle(self.trainer)
        closes = closes_cycle(self.trainer, state)
        rss = self.process.memory_info().rss
        hwm = _vm_hwm_bytes()
        estimate = original_token_estimate(
            self.max_prompt_length,
            args.max_completion_length,
            args.num_generations,
            args.per_device_train_batch_size,
        )
        row: dict[str, Any] = {
            F.step: state.global_step,
            # The completions this step trained on were forced to full length (its cycle's generation was).
            F.probe: cycle.probe,
            # A synthetic probe forced nothing to max length (its decode windows are not completions).
            F.min_new_tokens: None if c.probe is not None else self._forced_min_tokens(),
            F.t_start: self.t_start,
            F.t_end: time.time(),
            F.step_s: step_s,
            F.generated: generated,
            F.gen_s: c.gen_s if generated else None,
            F.train_s: step_s - c.gen_s,
            F.prompt_tokens: c.prompt_tokens if generated else None,
            F.completion_tokens: c.completion_tokens if generated else None,
            F.completions: c.completions if generated else None,
            F.decode_steps: c.decode_steps if generated and c.probe is None else None,
            F.distinct_completion_share: len(c.texts) / c.completions if generated else None,
            F.ms_per_token: 1000 * c.gen_s / c.decode_steps if generated and c.decode_steps else None,
            F.gen_share: c.gen_s / step_s if generated and step_s > 0 else None,
            F.gen_t_start: c.gen_t_start if generated else None,
            F.gen_t_end: c.gen_t_end if generated else None,
            F.cycle_steps: cycle.steps if closes else None,
            # A synthetic probe's completions were not generated: its cycle has no throughput.
            F.tokens_per_s: cycle.tokens / cycle.seconds
            if closes and cycle.tokens and cycle.seconds and not cycle.synthetic
            else None,
            F.estimated_tokens_per_step: estimate,
            F.estimated_tokens_per_sec: estimate / step_s if step_s > 0 else None,
            F.optimizer_state_gib: self.optimizer_state_gib,
            F.rss_gib: rss / GIB,
            # Without a resettable mark the process-lifetime peak is the honest upper bound.
            F.rss_peak_gib: max(hwm, rss) / GIB if hwm else None,
        } | self._probe_fields(cycle, c, generated)
        if torch.cuda.is_available():
            self._fold_cuda_peak()
            row |= {
                F.torch_allocated_gib: torch.cuda.memory_allocated() / GIB,
                F.torch_reserved_gib: torch.cuda.memory_reserved() / GIB,
                F.torch_peak_allocated_gib: torch.cuda.max_memory_allocated() / GIB,
                F.torch_peak_reserved_gib: torch.cuda.max_memory_reserved() / GIB,
                F.torch_peak_allocated_since_start_gib: self.cuda_peak_since_start / GIB,
            }
        else:
            row |= dict.fromkeys(
                (
                    F.torch_allocated_gib,
                    F.torch_reserved_gib,
                    F.torch_peak_allocated_gib,
                    F.torch_peak_reserved_gib,
                    F.torch_peak_allocated_since_start_gib,
                )
            )
        if closes:
            self.cycle = Cycle()
        alloc_end = _alloc_counters()
        for key, column in ALLOC_COUNTERS.items():
            row[column] = alloc_end[key] - self.alloc_start[key] if alloc_end and self.alloc_start else None
        row[F.update_ratio] = update_ratio(self.weights_before, self.trainer)
        if cycle.synthetic:  # a synthetic probe measures; its update on random completions is undone
            undo_update(self.weights_before, self.trainer)
        self.weights_before = None
        if self.evaluator is not None and self.evaluator.due(state.global_step, state.max_steps):
            row |= self.evaluator.run(self.trainer)
        # Scoring calls stopped at task_args.reward_timeout_s (tasks/bounded.py), evaluation's included.
        row[F.reward_timeouts] = SCORING.timeouts if SCORING.calls else None
        # Training completions the code task's sandbox killed; null where no sandbox scored any.
        row[F.sandbox_kills] = SCORING.sandbox_kills if SCORING.sandboxed else None
        row[F.sandbox_kill_reasons] = json.dumps(SCORING.kill_reasons) if SCORING.sandboxed else None
        self.pending = row

    def _probe_fields(self, cycle: Cycle, c: StepCounters, generated: bool) -> dict[str, Any]:
        """How a probe step measured (probe_kind), which phase set its peak, and a synthetic probe's decode
        windows; null where the step was no probe or did not generate."""
        probe = c.probe
        phase = None
        if generated and c.gen_peak_bytes is not None:
            # The step's peak so far equals generation's unless training went above it.
            phase = "training" if _peak_so_far() > c.gen_peak_bytes else "generation"
        return {
            F.probe_kind: (SYNTHETIC if cycle.synthetic else DECODE) if cycle.probe else None,
            F.gen_peak_gib: c.gen_peak_bytes / GIB if generated and c.gen_peak_bytes is not None else None,
            F.peak_phase: phase,
            F.decode_ms_per_token_at_prompt: probe.ms_per_token_at_prompt if probe else None,
            F.decode_ms_per_token_at_full: probe.ms_per_token_at_full if probe else None,
            F.decode_window_tokens: probe.window_tokens if probe else None,
            F.prefill_chunk_tokens: probe.chunk_tokens if probe else None,
        }

    def _forced_min_tokens(self) -> int | None:
        """The minimum completion length generation was held to in this step: what vLLM's SamplingParams
        carried (read as vLLM received them), else transformers' min_new_tokens; None when not forced."""
        if getattr(self.trainer, "vllm_generation", None) is not None:
            return self.counters.vllm_min_tokens or None
        return getattr(getattr(self.trainer, "generation_config", None), "min_new_tokens", None)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if self.pending is None or "train_runtime" in logs:
            return
        row = self.pending
        self.pending = None
        for key, column in TRL_SIGNALS.items():
            value = logs.get(key)
            row[column] = None if value is None or (isinstance(value, float) and math.isnan(value)) else value
        for key, value in logs.items():
            if key.startswith("rewards/") and key.endswith("/mean"):
                row[key] = value
        if row.get(F.probe_kind) == SYNTHETIC:
            # Random rewards of random completions: no reward was measured on this step.
            for key in [*SYNTHETIC_UNMEASURED, *(k for k in row if k.startswith("rewards/"))]:
                row[key] = None
        self.events.emit(STEP, **row)
        self.steps_emitted += 1
        if self.channel is not None and self.channel.stop_after(state.global_step, closes_steady_cycle(row)):
            control.should_training_stop = True
