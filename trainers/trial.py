"""The trial contract: every knob of one GRPO/GSPO trial, its default, its help, and its checks.

A TrialSpec is plain data (JSON in, JSON out) so the orchestrator can write it to a file and the
trainer child (`python -m trainers spec.json`) can read it back without importing Ray or MLflow.
Cross-field rules live in `problems()`, one place, each message naming the value, the rule and a fix;
the allowed values, each value's own rule (value_problem) and the rules of a trial's shape (ranks, batches,
adapters) are in _trial_rules.py.
Not the sweep file's spec: that is orchestrator/spec (SweepSpec), which plans many TrialSpecs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks import task_problems
from tasks.names import did_you_mean
from trainers._renamed import (  # noqa: F401  (the renamed names are part of this face)
    RENAMED,
    accept_old_names,
    new_value,
    renamed_keys,
    renamed_note,
    renamed_value_notes,
    say_renamed,
)
from trainers._trial_rules import (  # noqa: F401  (the allowed values and mode_warnings are part of this face)
    ADAPTERS,
    DISTRIBUTED,
    DTYPES,
    FIXED_GRPO,
    GENERATIONS,
    LOSS_TYPES,
    LR_SCHEDULERS,
    MODES,
    OPTIMS,
    QUANTIZATIONS,
    SCALE_REWARDS,
    VLLM_KNOBS,
    VLLM_MAX_SHARE,
    VLLM_MODES,
    _adapter_errors,
    _batch_errors,
    _expert_dropout_errors,
    _generation_errors,
    _lora_errors,
    _rank_errors,
    _stack_dtype_errors,
    _warmup_errors,
    idle_set_errors,
    lora_modules,
    mode_warnings,
    only,
    optim_of,
    or_stack,
    peft_targets,
    probe_steps_within,
    value_problem,
)
from trainers.models import model_problems
from trainers.probe import PROBE_KINDS, SYNTHETIC  # noqa: F401  (the probe kinds are part of this face)
from trainers.stacks import BASE, STACKS


def _knob(default: Any, help: str, **meta: Any) -> Any:
    """A TrialSpec field. meta: choices/min/gt/max/lt (checks), role (bookkeeping/execution), short (the
    flag's other spelling beside --<name>, e.g. --k; knob_flags), letter (its name in tables, e.g. K), and
    keyed="when_set" for knobs added after trial keys were published: their default stays out of the
    trial-key hash, so adding them changes no existing key."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@accept_old_names
@dataclass
class TrialSpec:
    # --- what runs -------------------------------------------------------------------------
    stack: str = _knob(
        BASE, "Training stack: a registered one (trainers.stacks: TRL, Unsloth, ...).", choices=STACKS
    )
    mode: str = _knob(
        "grpo",
        "grpo: token-level importance sampling; gspo: sequence-level (GSPO paper, loss_type grpo).",
        choices=MODES,
    )
    model: str = _knob(
        "tiny",
        "Hub id or local directory (real weights), 'random:<hub id>' (real architecture, random "
        "weights, no download) or 'tiny' (a few-million-parameter Qwen2 for CPU).",
    )
    task: str = _knob("arithmetic", "Prompt dataset and reward: see tasks.available_tasks().")
    task_args: dict = _knob({}, "Task settings, e.g. {'num_samples': 512} or rewards with weights.")
    # --- batch semantics (one definition for both stacks) ----------------------------------
    num_generations: int = _knob(
        4, "K: completions sampled per prompt (GRPO's group size).", min=2, short="--k", letter="K"
    )
    batch_size: int = _knob(
        2,
        "B: prompts per optimizer step. Completions per step = B x K. With grad_accum set, TRL's "
        "per_device_train_batch_size instead: completions per forward/backward.",
        min=1,
        short="--b",
        letter="B",
    )
    micro_batch_size: int | None = _knob(
        None, "Completions per forward/backward; default B x K. Must divide B x K.", min=1
    )
    grad_accum: int | None = _knob(
        None,
        "TRL's own batch semantics (the original benchmark's --grad-accum): batch_size is then a "
        "micro-batch of completions, an optimizer step accumulates grad_accum of them (batch_size x "
        "grad_accum completions, so a group of K may span steps), and each generation is the fewest "
        "whole groups of K covering one step. Unset: batch_size counts prompts.",
        min=1,
        keyed="when_set",
    )
    num_processes: int = _knob(
        1,
        "Ranks the trial runs as (accelerate launch --num_processes): one GPU each on a GPU host, one "
        "process each (gloo) without a GPU. B, micro-batches and K keep their meaning: B prompts per "
        "optimizer step over all ranks, micro_batch_size completions per forward/backward on each rank.",
        min=1,
        keyed="when_set",
    )
    distributed: str = _knob(
        "none",
        "How the ranks share the model: none (one rank), ddp, fsdp, zero2 or zero3 (DeepSpeed ZeRO).",
        choices=DISTRIBUTED,
        keyed="when_set",
    )
    max_prompt_length: int = _knob(256, "Longest prompt in tokens; longer prompts are refused.", min=1)
    max_completion_length: int = _knob(128, "Longest completion in tokens.", min=1, short="--length")
    max_steps: int = _knob(10, "Optimizer steps to run.", min=1)
    # --- optimisation ----------------------------------------------------------------------
    learning_rate: float = _knob(2e-4, "AdamW learning rate for the LoRA weights.", gt=0.0)
    lr_scheduler: str = _knob(
        "constant",
        "Learning-rate schedule (transformers' lr_scheduler_type): constant keeps steps comparable "
        "(no warmup: with warmup_ratio use constant_with_warmup); linear decays to 0 over max_steps (TRL's "
        "default, the original benchmark's); cosine.",
        choices=LR_SCHEDULERS,
        keyed="when_set",
    )
    warmup_ratio: float = _knob(
        0.0,
        "Share of max_steps over which the learning rate rises linearly from 0 (transformers 5's "
        "warmup_steps below 1); 0: no warmup. Needs lr_scheduler linear, cosine or constant_with_warmup.",
        min=0.0,
        lt=1.0,
        keyed="when_set",
    )
    adapter: str = _knob(
        "lora",
        "lora: train LoRA adapters on the frozen base; none: full fine-tuning (every weight trained, "
        "AdamW state for all of them, and with beta > 0 a reference model: a second copy of the weights).",
        choices=ADAPTERS,
        keyed="when_set",
    )
    lora_r: int = _knob(16, "LoRA rank.", min=1)
    lora_alpha: int = _knob(32, "LoRA alpha (scale = alpha / r).", min=1)
    lora_dropout: float = _knob(0.05, "LoRA dropout.", min=0.0, lt=1.0)
    lora_target_modules: str = _knob(
        "all-linear", "Layers LoRA adapts: all-linear (every linear layer but the head), attention, mlp, or "
        "leaf names, comma-separated (q_proj,v_proj).", keyed="when_set",
    )  # fmt: skip
    optim: str = _knob("adamw_torch", "Optimizer (transformers' optim): adamw_torch, adamw_8bit or paged_adamw_8bit "
        "(bitsandbytes' 8-bit moments), or stack: the stack's own (TRL adamw_torch_fused, Unsloth adamw_8bit).",
        choices=OPTIMS, keyed="when_set")  # fmt: skip
    quantization: str = _knob(
        "nf4", "nf4: QLoRA (bitsandbytes 4-bit NF4); none: LoRA on the base.", choices=QUANTIZATIONS
    )
    dtype: str = _knob(
        "auto", "auto: bf16 where the GPU supports it, else fp16 on GPU, fp32 on CPU.", choices=DTYPES
    )
    stack_dtype: dict = _knob(
        {},
        "dtype per stack, over dtype, e.g. {trl: fp16} (the original benchmark: TRL fp16, Unsloth "
        "bf16 where the GPU supports it).",
        keyed="when_set",
    )
    beta: float = _knob(
        0.0,
        "KL coefficient; > 0 adds a reference forward pass (the base with the LoRA adapters off, no second model).",
        min=0.0,
    )
    num_iterations: int = _knob(1, "Optimisation passes per generation batch (mu); > 1 is off-policy.", min=1)
    temperature: float = _knob(1.0, "Sampling temperature.", gt=0.0)
    loss_type: str = _knob("grpo", "TRL loss_type; gspo mode wants grpo.", choices=LOSS_TYPES)
    epsilon: float = _knob(
        0.2, "TRL's clip epsilon: the importance ratio is clipped to [1 - epsilon, 1 + epsilon_high].", gt=0.0,
        keyed="when_set",
    )  # fmt: skip
    epsilon_high: float | None = _knob(
        None,
        "TRL's upper clip epsilon (DAPO's clip-higher uses 0.28); unset: epsilon.",
        gt=0.0,
        keyed="when_set",
    )
    scale_rewards: str = _knob(
        "group",
        "TRL's reward scaling of advantages: group (by each group's std), batch (by the batch's std) or none "
        "(Dr. GRPO); true is group, false none, as TRL reads them.",
        choices=SCALE_REWARDS,
        keyed="when_set",
    )
    mask_truncated_completions: bool = _knob(
        False, "TRL's mask_truncated_completions: completions cut at max_completion_length add no loss (DAPO).",
        keyed="when_set",
    )  # fmt: skip
    gradient_checkpointing: bool = _knob(
        True, "Recompute activations in backward (less memory, slower). Ignored on CPU."
    )
    seed: int = _knob(42, "Seed for data, LoRA init and sampling (GRPOConfig.seed).", min=0)
    data_seed: int | None = _knob(
        None,
        "Seed for the task's problems; default seed. The original benchmark drew its data with 17 and "
        "left TRL's trainer seed at 42.",
        min=0,
        keyed="when_set",
    )
    # --- measurement -----------------------------------------------------------------------
    probe_steps: int = _knob(
        0, "Leading steps whose completions are forced to max_completion_length (worst-case memory).", min=0
    )
    probe_kind: str = _knob(
        SYNTHETIC,
        "How probe steps reach max_completion_length: synthetic (KV cache filled by chunked prefill, two short "
        "decode windows, the training step on random full-length completions: seconds) or decode (every token "
        "decoded with EOS masked: minutes at long lengths). Both measure the same peak (trainers/probe.py).",
        choices=PROBE_KINDS,
        keyed="when_set",
    )
    memory_budget_gib: float | None = _knob(
        None, "Emulate a smaller GPU: cap this process's CUDA memory at this many GiB.", gt=0.0
    )
    eval_every: int = _knob(0, "Evaluate on the held-out set every N steps (0: only if eval_at_end).", min=0)
    eval_at_end: bool = _knob(False, "Evaluate on the held-out set after the last step.")
    eval_samples: int = _knob(32, "Held-out prompts per evaluation.", min=1)
    eval_k: int = _knob(1, "Samples per held-out prompt (pass@k for k > 1).", min=1)
    generation: str = _knob(
        "transformers",
        "How completions are generated: transformers (the training model's generate) or vllm (TRL's "
        "use_vllm; Unsloth's fast_inference, its colocate mode). vLLM's pool counts in the budget.",
        choices=GENERATIONS,
    )
    vllm_mode: str = _knob(
        "colocate",
        "generation vllm: colocate (vLLM in the trainer's process and GPU) or server (`trl vllm-serve` on "
        "the trial's last GPU, training on the others; TRL only, needs gpus_per_trial >= 2).",
        choices=VLLM_MODES,
        keyed="when_set",
    )
    vllm_gpu_memory_utilization: float = _knob(
        0.5,
        "generation vllm, colocate: vLLM's share of memory, of the budget when memory_budget_gib is set "
        "(else of the card; on CPU of the budget, through VLLM_CPU_KVCACHE_SPACE). Sweepable.",
        gt=0.0,
        max=1.0,
    )
    vllm_enable_sleep_mode: bool = _knob(
        False,
        "generation vllm, colocate, TRL: vLLM releases its weights and KV cache while training (TRL's "
        "vllm_enable_sleep_mode); torch's counters then over-report, the NVML peak is the one shown.",
        keyed="when_set",
    )
    num_threads: int | None = _knob(
        None, "CPU threads for torch (default: the CPUs this trial holds).", min=1, role="execution"
    )
    # --- bookkeeping -----------------------------------------------------------------------
    trial_key: str = _knob("", "Stable readable id of this trial within its sweep.", role="bookkeeping")
    sweep: str = _knob("", "Name of the sweep this trial belongs to.", role="bookkeeping")
    output_dir: str = _knob("", "Where the trainer may write scratch files.", role="bookkeeping")
    events_path: str = _knob(
        "", "File the trainer appends newline-delimited JSON events to.", role="bookkeeping"
    )
    model_cache_dir: str = _knob(
        "", "Where built models (tiny, random:) are cached; default ~/.cache/rlsweep.", role="execution"
    )
    vllm_server_port: int | None = _knob(
        None,
        "vllm_mode server: the port of the trial's vLLM server on 127.0.0.1, chosen by its supervisor.",
        min=1,
        role="bookkeeping",
    )
    hold_at_step: int | None = _knob(
        None,
        "After this step the trainer waits for the supervisor's word on stdin: continue, or stop "
        "there (a sweep's memory phase; trainers/control.py).",
        min=1,
        role="bookkeeping",
    )

    # ---------------------------------------------------------------------------------------
    @property
    def completions_per_step(self) -> int:
        """Completions per optimizer step over all ranks."""
        if self.grad_accum:
            return self.batch_size * self.grad_accum * self.num_processes
        return self.batch_size * self.num_generations

    @property
    def completions_per_rank(self) -> int:
        """Completions each rank trains on per optimizer step (_batch_errors: they split evenly)."""
        return self.completions_per_step // self.num_processes

    @property
    def effective_micro_batch_size(self) -> int:
        """Completions per forward/backward on each rank."""
        if self.grad_accum:
            return self.batch_size
        return self.micro_batch_size or self.completions_per_rank

    @property
    def generation_batch_size(self) -> int:
        """Completions per generation: the fewest whole groups of K that cover one optimizer step."""
        k = self.num_generations
        return math.ceil(self.completions_per_step / k) * k

    @property
    def effective_dtype(self) -> str:
        return self.stack_dtype.get(self.stack, self.dtype)

    @property
    def task_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.completions_per_rank // self.effective_micro_batch_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        data = renamed_keys(data)[0]  # a spec.json or config written before a knob was renamed
        errors = unknown_key_errors(data)
        if errors:
            raise TrialSpecError(errors)
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> TrialSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def problems(self, skip: frozenset[str] = frozenset()) -> list[str]:
        """Every rule this spec breaks, as 'field: message' lines (empty when valid). The values are read
        in place (no copy of the spec) and each checked once: a sweep's plan asks this of every trial.
        skip: knobs whose given value was refused (this spec holds a stand-in): rules reading them are
        not checked."""
        errors = field_errors(vars(self))
        return errors or _cross_field_errors(self, checked=True, skip=skip)

    def validate(self) -> TrialSpec:
        errors = self.problems()
        if errors:
            raise TrialSpecError(errors)
        return self


class TrialSpecError(ValueError):
    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("invalid trial:\n  " + "\n  ".join(errors))


KNOBS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(TrialSpec)}
# Knobs the harness fills in for each trial (its identity and files): never a setting a user sweeps.
BOOKKEEPING = tuple(name for name, f in KNOBS.items() if f.metadata.get("role") == "bookkeeping")
# Knobs whose default is left out of the trial-key hash (see _knob).
KEYED_WHEN_SET = tuple(name for name, f in KNOBS.items() if f.metadata.get("keyed") == "when_set")
# Knobs that say where and how a trial runs, not what it computes: two trials differing only in
# these are the same configuration.
EXECUTION = tuple(name for name, f in KNOBS.items() if f.metadata.get("role") == "execution")


def unknown_key_errors(data: dict[str, Any], prefix: str = "") -> list[str]:
    return [f"{prefix}{key}: unknown setting; {did_you_mean(key, KNOBS)}" for key in data if key not in KNOBS]


def canonical(name: str, value: Any) -> Any:
    """A knob's value as the trial holds it, from the value as a user wrote it: a choice in any case is
    that choice (`TRL` is trl, `GRPO` grpo: the report and errors write the names capitalised), in
    stack_dtype too; anything else unchanged, for check_value to judge. Every reader of user input
    (a sweep file, --set, a verb's flags) passes its values through this before checking them."""
    value = new_value(name, value)  # `optim: framework` (its old name) is `optim: stack`
    choices = KNOBS[name].metadata.get("choices") if name in KNOBS else None
    if choices is not None and isinstance(value, str) and value not in choices:
        return next((choice for choice in choices if choice.lower() == value.lower()), value)
    if name == "scale_rewards" and str(value).lower() in ("true", "false"):  # TRL's bools: True is group
        return "group" if str(value).lower() == "true" else "none"
    if name == "stack_dtype" and isinstance(value, dict):
        return {canonical("stack", k): canonical("dtype", v) for k, v in value.items()}
    return value


def knob_flags(name: str) -> tuple[str, ...]:
    """A knob's command-line flags, as every verb spells them: --<name> (the long flag, help and errors
    name it), then its short form where it declares one (--num-generations, --k)."""
    short = KNOBS[name].metadata.get("short")
    return ("--" + name.replace("_", "-"), *((short,) if short else ()))


def knob_letter(name: str) -> str:
    """A knob's name in a table or plot: its declared letter (num_generations: K), else its name."""
    return KNOBS[name].metadata.get("letter", name)


def knob_default(name: str) -> Any:
    f = KNOBS[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


# check_value's answers by (knob, type, value): a sweep's plan checks each trial's every knob, and a grid
# repeats few values many times. The type is in the key, so True and 1 (equal, one hash) stay apart.
_CHECKED: dict[tuple[str, type, Any], str | None] = {}
_CHECKED_MAX = 1 << 16
_NOT_CHECKED = object()


def check_value(name: str, value: Any) -> str | None:
    """The rule a single knob value breaks, or None. Used by TrialSpec and by sweep validation."""
    if isinstance(KNOBS[name].metadata.get("choices"), dict):
        # A registry (stack: trainers.stacks.STACKS) changes as stacks register: never kept.
        return _check_value(name, value)
    try:
        key = (name, type(value), value)
        answer = _CHECKED.get(key, _NOT_CHECKED)
    except TypeError:  # a list or mapping: not kept
        return _check_value(name, value)
    if answer is _NOT_CHECKED:
        answer = _check_value(name, value)
        # 0.0 == -0.0 (one key): a zero's answer is kept only when it is no problem, since a problem's
        # message shows the value as it was given
        if len(_CHECKED) < _CHECKED_MAX and (answer is None or type(value) is not float or value != 0):
            _CHECKED[key] = answer
    return answer


def _check_value(name: str, value: Any) -> str | None:
    """The rule `value` breaks, then its fix ("must be >= 2, got 0; give 2 or more"), or None."""
    return value_problem(KNOBS[name].metadata, knob_default(name), KNOBS[name].type, value)


def field_errors(data: dict[str, Any]) -> list[str]:
    errors = []
    for name, value in data.items():
        if name in KNOBS:
            try:  # check_value's own look-up, inlined: a plan makes this call for every knob of every trial
                problem = _CHECKED.get((name, type(value), value), _NOT_CHECKED)
            except TypeError:
                problem = _NOT_CHECKED
            if problem is _NOT_CHECKED:
                problem = check_value(name, value)
            if problem:
                errors.append(f"{name}: {problem}")
    return errors


# The knobs each cross-field rule reads: one skipped (its value refused) leaves out the rules reading it.
_SHAPE = frozenset(("num_processes", "distributed", "stack", "grad_accum", "batch_size", "num_generations",
                    "micro_batch_size"))  # fmt: skip
_GENERATION = frozenset(("generation", "stack", "model", "probe_steps", "memory_budget_gib", *VLLM_KNOBS))


def _cross_field_errors(
    spec: TrialSpec, checked: bool = False, skip: frozenset[str] = frozenset()
) -> list[str]:
    """checked: the caller found no field error already; skip: as problems() takes it."""
    errors: list[str] = []
    if not checked and field_errors({k: getattr(spec, k) for k in KNOBS}):
        return errors  # cross-field checks need well-typed values
    errors += _rank_errors(spec) or _batch_errors(spec) if skip.isdisjoint(_SHAPE) else []
    errors += _stack_dtype_errors(spec.stack_dtype) if "stack_dtype" not in skip else []
    model_errors = []
    if skip.isdisjoint(("model", "max_prompt_length", "max_completion_length")):
        model_errors = model_problems(spec.model, spec.max_prompt_length + spec.max_completion_length)
    errors += model_errors
    errors += task_problems(spec.task, spec.task_args) if skip.isdisjoint(("task", "task_args")) else []
    if not model_errors and skip.isdisjoint(("model", "lora_dropout")):
        errors += _expert_dropout_errors(spec)
    errors += _adapter_errors(spec) if skip.isdisjoint(("adapter", "quantization", "stack")) else []
    errors += _lora_errors(spec, knob_default) if "adapter" not in skip else []
    errors += _generation_errors(spec, knob_default) if skip.isdisjoint(_GENERATION) else []
    errors += _warmup_errors(spec) if skip.isdisjoint(("warmup_ratio", "lr_scheduler")) else []
    if spec.eval_k > 1 and spec.temperature <= 0 and skip.isdisjoint(("eval_k", "temperature")):
        errors.append("eval_k: pass@k needs sampling, temperature must be > 0")
    return errors
