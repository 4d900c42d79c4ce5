"""A trial's allowed values and the cross-field rules of its shape: adapters, ranks and their sharing,
batches, dtypes per stack, and the warnings of legal settings that are probably not meant.
trainers/trial.py's TrialSpec.problems() runs them; each `spec` here is a TrialSpec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tasks.names import did_you_mean
from trainers.models import parse_model
from trainers.probe import DECODE
from trainers.stacks import STACKS, label, supporting

MODES = ("grpo", "gspo")
QUANTIZATIONS = ("nf4", "none")
DTYPES = ("auto", "bf16", "fp16", "fp32")
LR_SCHEDULERS = ("constant", "linear", "cosine", "constant_with_warmup")
# TRL 1.14's scale_rewards (its True is group, False none: trainers.trial.canonical reads them so).
SCALE_REWARDS = ("group", "batch", "none")
# GRPOConfig arguments no knob sets: every trial of both stacks gets these (trainers/runtime.py), Unsloth's
# own default (weight decay 0.001) put back; an unknown-name hint names them.
FIXED_GRPO = {
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "logging_steps": 1,
    "save_strategy": "no",
}
# How a trial's ranks share the model: none (one process), ddp (a replica per rank), fsdp (PyTorch FSDP:
# weights, gradients and optimizer state sharded), zero2 / zero3 (DeepSpeed ZeRO stage 2: optimizer
# state and gradients sharded; stage 3: the weights too).
DISTRIBUTED = ("none", "ddp", "fsdp", "zero2", "zero3")
# The optimizers a trial may ask for (transformers' `optim` names; `stack`: the stack's own default, its
# StackEntry's default_optim: TRL's adamw_torch_fused, Unsloth's adamw_8bit). The 8-bit ones are
# bitsandbytes' (blockwise 8-bit moments); paged: their state in CUDA unified memory, which the driver may
# move to host memory under pressure.
OPTIMS = ("adamw_torch", "adamw_8bit", "paged_adamw_8bit", "stack")
# LoRA targets: every linear layer but the head (PEFT's all-linear), attention or the MLP alone, or
# leaf module names, comma-separated (q_proj,v_proj).
LORA_TARGET_GROUPS = {
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj", "gate_up_proj"),
}
LORA_MODULES = tuple(name for names in LORA_TARGET_GROUPS.values() for name in names)


def lora_modules(targets: str) -> tuple[str, ...] | None:
    """The leaf module names a lora_target_modules value adapts (None: every linear layer, all-linear);
    a name missing from a model is left out by the stack (Phi-3 has qkv_proj, not q_proj)."""
    if targets == "all-linear":
        return None
    if targets in LORA_TARGET_GROUPS:
        return LORA_TARGET_GROUPS[targets]
    return tuple(dict.fromkeys(name.strip() for name in targets.split(",")))


def peft_targets(targets: str) -> list[str] | str:
    """PEFT's target_modules for a lora_target_modules value: all-linear, or the leaf names (PEFT adapts
    those the model has, and refuses only a list none of which it has)."""
    names = lora_modules(targets)
    return "all-linear" if names is None else list(names)


def optim_of(spec: Any) -> str:
    """The optimizer a trial runs: its optim, or its stack's own default for `stack`."""
    return STACKS[spec.stack].default_optim if spec.optim == "stack" else spec.optim


def _lora_errors(spec: Any, knob_default: Callable[[str], Any]) -> list[str]:
    """LoRA targets no stack can adapt, and LoRA settings that do nothing under full fine-tuning."""
    targets = spec.lora_target_modules
    if targets not in ("all-linear", *LORA_TARGET_GROUPS):
        names = lora_modules(targets) or ()
        unknown = [n for n in names if n and n not in LORA_MODULES]
        if unknown or not names or "" in names:
            return [
                f"lora_target_modules: {targets!r}: {', '.join(map(repr, unknown)) or 'an empty name'} is no "
                f"decoder linear layer; give all-linear, attention, mlp or names of {', '.join(LORA_MODULES)}, "
                "comma-separated (e.g. q_proj,v_proj)"
            ]
    if spec.adapter == "none":
        return [
            f"{name}: {getattr(spec, name)!r} with adapter: none does nothing (full fine-tuning trains every "
            f"weight, no LoRA adapter); set adapter: lora or remove {name}"
            for name in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
            if getattr(spec, name) != knob_default(name)
        ]
    return []


def idle_set_errors(
    asked: list[str], values: dict[str, Any], knob_default: Callable[[str], Any]
) -> list[str]:
    """Knobs a user set by name (`asked`: --set KNOB=VALUE) that do nothing in the configuration `values`
    makes (its other knobs at their defaults), even at their default value: vLLM's with transformers
    generation, LoRA's under full fine-tuning. Each with the reason and the fix."""
    generation = values.get("generation", knob_default("generation"))
    adapter = values.get("adapter", knob_default("adapter"))
    errors = []
    for name in dict.fromkeys(asked):
        if name in VLLM_KNOBS and generation != "vllm":
            errors.append(
                f"--set {name}: does nothing with generation: {generation} (vLLM settings apply only to vLLM "
                f"generation); add --set generation=vllm or remove --set {name}"
            )
        elif name.startswith("lora_") and adapter == "none":
            errors.append(
                f"--set {name}: does nothing with adapter: none (full fine-tuning, no LoRA adapter); set "
                f"adapter=lora or remove --set {name}"
            )
    return errors


ADAPTERS = ("lora", "none")
GENERATIONS = ("transformers", "vllm")
VLLM_MODES = ("colocate", "server")
# The vLLM knobs: set with generation: transformers they would do nothing, so they are refused.
VLLM_KNOBS = ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode")
# A colocated pool at or past this share of the budget leaves training too little to be a trial.
VLLM_MAX_SHARE = 0.9
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")


def either(names: tuple[str, ...]) -> str:
    """Stack names as a fix offers them: 'trl', 'trl or third'."""
    return " or ".join(names)


def or_stack(names: tuple[str, ...]) -> str:
    """A fix's other way out, ' or stack trl' (names: the stacks that can), or '' where none can."""
    return f" or stack {either(names)}" if names else ""


def only(names: tuple[str, ...], verb: str, labels: bool = False) -> str:
    """Who can, in a message: 'only trl runs', 'only trl, third run' ('only TRL exposes' with labels, as
    the report writes them), or 'no registered stack runs'; verb in the singular."""
    if not names:
        return f"no registered stack {verb}"
    who = ", ".join(map(label, names) if labels else names)
    return f"only {who} {verb if len(names) == 1 else verb.removesuffix('s')}"


def _adapter_errors(spec: Any) -> list[str]:
    if spec.adapter != "none":
        return []
    if spec.quantization != "none":
        return [
            f"adapter: none (full fine-tuning) with quantization {spec.quantization}: 4-bit weights cannot be "
            "trained; set quantization: none, or adapter: lora (QLoRA)"
        ]
    if not STACKS[spec.stack].full_finetune:
        able = supporting("full_finetune")
        fix = f"runs on {', '.join(able)}; set stack: {either(able)} or" if able else "runs on no stack; set"
        return [f"adapter: none with stack {spec.stack}: full fine-tuning {fix} adapter: lora"]
    return []


def _rank_errors(spec: Any) -> list[str]:
    """The strategy that goes with the rank count, the stack that can run ranks, and B x K split
    evenly over the ranks (B prompts per optimizer step over all of them)."""
    n = spec.num_processes
    if n == 1 and spec.distributed != "none":
        return [
            f"distributed: {spec.distributed} with num_processes 1: a strategy shares the model between "
            "ranks; set num_processes (sweep: resources.gpus_per_trial) to 2 or more, or distributed: none"
        ]
    if n > 1 and spec.distributed == "none":
        return [
            f"distributed: none with num_processes {n}: say how the {n} ranks share the model; set "
            f"distributed to one of {', '.join(d for d in DISTRIBUTED if d != 'none')}, or num_processes: 1"
        ]
    if n > 1 and not STACKS[spec.stack].multi_rank:
        able = supporting("multi_rank")
        fix = f"stack: {either(able)} or num_processes: 1" if able else "num_processes: 1"
        return [
            f"stack: {spec.stack} with num_processes {n}: {only(able, 'runs')} a trial over several "
            f"ranks (accelerate's launcher); set {fix}"
        ]
    if spec.grad_accum or spec.completions_per_step % n == 0:
        return []
    bk = spec.completions_per_step
    batches = [b for b in range(1, 4 * n * spec.batch_size + 1) if b * spec.num_generations % n == 0]
    nearest_b = sorted(batches, key=lambda b: (abs(b - spec.batch_size), b))[:2]
    nearest_n = sorted((d for d in range(1, bk + 1) if bk % d == 0), key=lambda d: (abs(d - n), d))[:2]
    return [
        f"num_processes: batch_size x num_generations = {spec.batch_size} x {spec.num_generations} = {bk} "
        f"completions per optimizer step do not split evenly over {n} ranks; choose batch_size "
        f"{' or '.join(map(str, sorted(nearest_b)))}, or num_processes {' or '.join(map(str, sorted(nearest_n)))}"
    ]


def _batch_errors(spec: Any) -> list[str]:
    if spec.grad_accum:
        if spec.micro_batch_size is not None:
            return [
                f"micro_batch_size: {spec.micro_batch_size} with grad_accum {spec.grad_accum}: with "
                "grad_accum set, batch_size is the micro-batch; leave micro_batch_size unset"
            ]
        generation = spec.generation_batch_size
        n = spec.num_processes
        if generation % (spec.batch_size * n):
            over = f" x num_processes {n}" if n > 1 else ""
            ranks = f" on each of {n} ranks" if n > 1 else ""
            return [
                f"grad_accum: a generation of {generation} completions (whole groups of "
                f"num_generations {spec.num_generations} covering batch_size x grad_accum{over} = "
                f"{spec.completions_per_step}) does not split into micro-batches of batch_size "
                f"{spec.batch_size}{ranks}; TRL needs it to: choose a batch_size dividing {generation // n}"
            ]
        return []
    bk = spec.completions_per_step
    per_rank = spec.completions_per_rank
    if per_rank % spec.effective_micro_batch_size:
        if spec.num_processes > 1:
            return [
                f"micro_batch_size: {spec.micro_batch_size} does not divide the {per_rank} completions each "
                f"rank trains on per step (batch_size x num_generations = {spec.batch_size} x "
                f"{spec.num_generations} = {bk} over num_processes {spec.num_processes}); choose a divisor "
                f"of {per_rank} (e.g. {_divisor_hint(per_rank, spec.micro_batch_size)}) or leave it unset"
            ]
        return [
            f"micro_batch_size: {spec.micro_batch_size} does not divide batch_size x num_generations = "
            f"{spec.batch_size} x {spec.num_generations} = {bk}; choose a divisor of {bk} "
            f"(e.g. {_divisor_hint(bk, spec.micro_batch_size)}) or leave it unset"
        ]
    return []


def _warmup_errors(spec: Any) -> list[str]:
    """A warmup the schedule would drop: transformers' constant schedule takes no warmup steps."""
    if spec.warmup_ratio and spec.lr_scheduler == "constant":
        return [
            f"warmup_ratio: {spec.warmup_ratio:g} with lr_scheduler constant does nothing (transformers' "
            "constant schedule has no warmup); set lr_scheduler: constant_with_warmup (or linear, cosine), "
            "or warmup_ratio: 0"
        ]
    return []


def _stack_dtype_errors(mapping: dict) -> list[str]:
    errors = []
    for stack, dtype in mapping.items():
        if stack not in STACKS:
            errors.append(f"stack_dtype: unknown stack {stack!r}; {did_you_mean(str(stack), STACKS)}")
        elif dtype not in DTYPES:
            errors.append(f"stack_dtype.{stack}: unknown dtype {dtype!r}; {did_you_mean(str(dtype), DTYPES)}")
    return errors


def _divisor_hint(n: int, near: int | None) -> int:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - (near or n)))


def probe_steps_within(max_steps: int, probe_steps: int) -> int:
    """The probe steps a trial of max_steps takes when the probe steps are left to their default: at most
    max_steps - 1 where it has two steps or more, so at least its last step trains on completions of its
    own (a trial of probe steps alone has no step to judge: verdict too_short); a one-step trial is a
    probe."""
    return probe_steps if max_steps <= 1 else min(probe_steps, max_steps - 1)


def decoded_probe_span(spec: Any) -> int:
    """The steps a decoded probe's completions are trained on: its probe steps, rounded up to whole
    generation cycles of num_iterations steps (a synthetic probe's cycle is its own steps alone:
    trainers.probe.end_synthetic_cycle)."""
    if spec.probe_kind != DECODE or spec.num_iterations <= 1:
        return spec.probe_steps
    return -(-spec.probe_steps // spec.num_iterations) * spec.num_iterations


def mode_warnings(spec: Any) -> list[str]:
    """Settings that are legal but probably not what the user meant."""
    warnings = []
    if spec.max_steps > 1 and spec.probe_steps >= spec.max_steps:
        warnings.append(
            f"probe_steps: {spec.probe_steps} of max_steps {spec.max_steps}: every step is a probe (its "
            "completions forced to the length limit), so none is judged for training (verdict too_short); "
            f"set probe_steps (oom.probe_steps in a sweep) to {spec.max_steps - 1} or fewer to let it train"
        )
    elif spec.max_steps > 1 and spec.probe_steps and decoded_probe_span(spec) >= spec.max_steps:
        warnings.append(
            f"probe_kind: decode with num_iterations {spec.num_iterations}: the steps that reuse a decoded "
            f"probe's completions are probes too, so all {spec.max_steps} steps are (verdict too_short); "
            f"set max_steps to {decoded_probe_span(spec) + 1} or more, or probe_kind: synthetic (no step "
            "reuses a synthetic probe's completions) to let it train"
        )
    # TRL reuses a generation off-policy when an optimizer step does not consume it whole.
    steps_per_generation = spec.generation_batch_size // (
        spec.effective_micro_batch_size * spec.num_processes
    )
    off_policy = spec.gradient_accumulation_steps % (steps_per_generation * spec.num_iterations) != 0
    if spec.mode == "gspo" and spec.loss_type != "grpo":
        warnings.append(
            f"loss_type: {spec.loss_type!r} with gspo weights sequences by length; the GSPO paper uses 'grpo'"
        )
    if not off_policy:
        warnings.append(
            "mode: grpo and gspo differ only off-policy; with num_iterations=1 and each generation used "
            "within one optimizer step they compute the same gradient, so a grpo/gspo comparison measures noise. Set num_iterations >= 2 to compare them."
        )
    return warnings


def _generation_errors(spec: Any, knob_default: Callable[[str], Any]) -> list[str]:
    """vLLM settings that do nothing or cannot work, each with its fix (knob_default: a knob's default,
    trainers.trial's)."""
    if spec.generation == "transformers":
        return [
            f"{name}: {getattr(spec, name)!r} with generation: transformers does nothing (vLLM settings apply "
            f"only to vLLM generation); set generation: vllm or remove {name}"
            for name in VLLM_KNOBS
            if getattr(spec, name) != knob_default(name)
        ]
    errors = []
    modes = STACKS[spec.stack].vllm_modes
    if not modes:
        errors.append(
            f"generation: vllm needs a stack that generates with vLLM "
            f"({', '.join(n for n, st in STACKS.items() if st.vllm_modes)}); stack {spec.stack} does "
            "not: set generation: transformers or change stack"
        )
    elif spec.vllm_mode not in modes:
        errors.append(
            f"vllm_mode: {spec.vllm_mode} with stack {spec.stack}, which runs vLLM only as "
            f"{', '.join(modes)}; set vllm_mode: {modes[0]}"
            + or_stack(tuple(n for n, st in STACKS.items() if spec.vllm_mode in st.vllm_modes))
        )
    if spec.probe_steps and not STACKS[spec.stack].vllm_min_tokens:
        errors.append(
            f"probe_steps: {spec.probe_steps} with generation: vllm on {spec.stack}; a decoded probe forces "
            "full-length completions through vLLM's min_tokens and a synthetic one times its window through "
            "TRL's vLLM generation, neither of which this stack's own vLLM path is shown to use, so they "
            "would not be the worst case they claim; set probe_steps: 0 (oom.probe_steps: 0 in a sweep)"
            + or_stack(supporting("vllm_min_tokens"))
        )
    if spec.vllm_enable_sleep_mode and not STACKS[spec.stack].vllm_sleep_mode:
        able = supporting("vllm_sleep_mode")
        errors.append(
            f"vllm_enable_sleep_mode: true with stack {spec.stack}; {only(able, 'exposes', labels=True)} "
            "vLLM's sleep mode: set vllm_enable_sleep_mode: false" + or_stack(able)
        )
    if spec.vllm_mode == "colocate" and spec.vllm_gpu_memory_utilization >= VLLM_MAX_SHARE:
        budget = f"{spec.memory_budget_gib:g} GiB budget" if spec.memory_budget_gib else "card"
        errors.append(
            f"vllm_gpu_memory_utilization: {spec.vllm_gpu_memory_utilization:g} gives colocated vLLM's pool "
            f"that share of the {budget}, which must stay under {VLLM_MAX_SHARE:g} so training has the rest; "
            "lower it (0.2 to 0.5 is usual) or use vllm_mode: server"
        )
    if spec.model.lower().rstrip("/").endswith(("8bit", "int8", "w8a8")):
        errors.append(
            f"model: {spec.model!r} looks 8-bit; vLLM does not load bitsandbytes 8-bit weights (TRL refuses "
            "in-flight 8-bit quantization): use the 16-bit checkpoint (quantization: nf4 for QLoRA) or "
            "generation: transformers"
        )
    return errors


def _expert_dropout_errors(spec: Any) -> list[str]:
    """LoRA dropout on a mixture of experts whose experts transformers fuses (qwen3_moe): PEFT refuses it."""
    if spec.lora_dropout and (parse_model(spec.model).config or {}).get("model_type") == "qwen3_moe":
        return [
            f"lora_dropout: {spec.lora_dropout:g} with {spec.model}, a mixture of experts whose experts "
            "transformers fuses into 3-D tensors: PEFT adapts those with its ParamWrapper, which refuses "
            'dropout ("lora.ParamWrapper does not work with lora_dropout != 0"); set lora_dropout: 0'
        ]
    return []


def value_problem(meta: Mapping[str, Any], default: Any, annotation: Any, value: Any) -> str | None:
    """The rule one knob's `value` breaks, then its fix ("must be >= 2, got 0; give 2 or more"), or None:
    its type (the default's, else `annotation`'s int or float), its choices and bounds (`meta`, the knob's
    metadata). trainers/trial.py's check_value asks it for each knob."""
    if value is None:
        return (
            None if default is None else f"must be set, got null; give a value, or leave it out ({default!r})"
        )
    expected = type(default) if default is not None else (int if "int" in str(annotation) else float)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if expected is bool and not isinstance(value, bool):
        return f"must be true or false, got {value!r}"
    if expected is not bool and isinstance(value, bool) or not isinstance(value, expected):
        kind = {int: "a whole number", float: "a number", str: "text"}.get(expected, expected.__name__)
        example = f", e.g. {default!r}" if default is not None else ""
        return f"must be {expected.__name__}, got {value!r} ({type(value).__name__}); give {kind}{example}"
    if "choices" in meta and value not in meta["choices"]:
        return f"unknown value {value!r}; {did_you_mean(str(value), meta['choices'])}"
    if "min" in meta and value < meta["min"]:
        return f"must be >= {meta['min']}, got {value!r}; give {meta['min']} or more"
    if "gt" in meta and value <= meta["gt"]:
        return f"must be > {meta['gt']}, got {value!r}; give a number above {meta['gt']:g}"
    if "max" in meta and value > meta["max"]:
        return f"must be <= {meta['max']}, got {value!r}; give {meta['max']} or less"
    if "lt" in meta and value >= meta["lt"]:
        return f"must be < {meta['lt']}, got {value!r}; give a number below {meta['lt']:g}"
    return None
