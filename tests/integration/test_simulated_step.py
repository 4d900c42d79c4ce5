"""A training step simulated on meta tensors through a stack's own code (trainers/simulate), TRL's, Liger's and
Unsloth's: the same step on real CPU tensors allocates what meta counted, the length moves it, and a
change in the stack's code moves it too, since the simulation runs that code rather than a formula of it."""

import pytest
import torch

from trainers.simulate import CannotSimulate, simulate
from trainers.stacks._base import Stack
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow

GRANULE = 512


def _spec(**knobs) -> TrialSpec:
    base = dict(model="tiny", stack="trl", num_generations=4, batch_size=2, max_completion_length=64,
                num_iterations=2, quantization="none", lora_r=16, learning_rate=2e-4)  # fmt: skip
    return TrialSpec(**(base | knobs))


def _counted(spec: TrialSpec, device: str):
    """The step's AllocationCounter, its trace kept: on meta or real CPU tensors, without the CUDA
    kernels' stand-ins and with eager attention, so that both devices run the same ops."""
    from trainers import stacks
    from trainers.simulate._count import AllocationCounter
    from trainers.simulate._meta import on_meta

    counter = AllocationCounter(trace=True)
    with on_meta(as_cuda=False):
        stacks.load(spec.stack).simulate_step(
            spec, 34, counter, device=device, attention="eager", as_cuda=False
        )
    return counter


def _lifetimes(trace: list[tuple], floor: int = 4096) -> list[tuple[int, int | None]]:
    """Each allocation of at least `floor` bytes, in order: its size and how many such allocations had
    been made when it was freed (None: still live when the step's last one was made). Smaller ones are
    the kernels' own scratch (CPU kernels make a few scalars that meta's do not)."""
    live: dict[int, int] = {}
    made: list[list] = []
    for event in trace:
        if event[0] == "a" and event[2] >= floor:
            live[event[1]] = len(made)
            made.append([event[2], None])
        elif event[0] == "f" and event[1] in live:
            made[live.pop(event[1])][1] = len(made)
    return [(size, None if end == len(made) else end) for size, end in made]


@pytest.mark.parametrize(
    "model, stack",
    [
        ("tiny", "trl"),
        ("tiny", "unsloth"),
        ("tiny", "liger"),
        pytest.param("smollm2", "trl", marks=pytest.mark.heavy),
    ],
)
def test_a_step_on_meta_allocates_op_for_op_what_the_same_step_allocates_on_real_cpu_tensors(model, stack):
    # The scoring forward, the stack's loss, backward, clipping and AdamW (and Unsloth's checkpointer
    # and LoRA MLP stand-ins): every allocation of 4 KiB or more is made in the same order, of the same
    # size, and freed at the same point; only meta holds no memory.
    spec = _spec(model=model, stack=stack, max_completion_length=32)
    meta, cpu = _counted(spec, "meta"), _counted(spec, "cpu")
    big = _lifetimes(meta.trace)
    assert len(big) > 500 and big == _lifetimes(cpu.trace)
    assert meta.resting_bytes == cpu.resting_bytes > 0
    for phase in ("scoring", "training"):
        assert abs(meta.phase_peaks[phase] - cpu.phase_peaks[phase]) <= 2 * GRANULE
    assert max(meta.phase_peaks, key=meta.phase_peaks.get) == "training"


def test_the_simulated_peak_grows_with_the_completion_length_on_a_4_bit_model():
    short = simulate(_spec(quantization="nf4", max_completion_length=64), 34, cache=False)
    long = simulate(_spec(quantization="nf4", max_completion_length=256), 34, cache=False)
    assert long.allocated_gib > short.allocated_gib > long.resting_gib > 0
    # the caching allocator's replay reserves at least what is allocated, and grows with it
    assert long.reserved_gib >= long.allocated_gib and short.reserved_gib >= short.allocated_gib
    assert long.reserved_gib > short.reserved_gib
    assert short.simulated == {"micro_batch": 8, "prompt_tokens": 34, "num_iterations": 2}


def test_a_change_in_trls_code_that_allocates_more_moves_the_simulated_peak(monkeypatch):
    from trl import GRPOTrainer

    before = simulate(_spec(), 34, cache=False)  # the disk cache keys on TRL's version, not a patch of it
    original = GRPOTrainer._get_per_token_logps_and_entropies
    extra = 8 * 64 * 4096 * 4  # a fp32 tensor TRL does not make, saved for backward

    def heavier(self, model, *args, **kwargs):
        logps, entropies, aux = original(self, model, *args, **kwargs)
        if torch.is_grad_enabled():
            held = torch.empty(8, 64, 4096, device="meta", requires_grad=True)
            logps = logps + (held * held).sum()
        return logps, entropies, aux

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", heavier)
    after = simulate(_spec(), 34, cache=False)
    assert after.allocated_gib * 2**30 >= before.allocated_gib * 2**30 + extra - GRANULE


def test_a_stack_without_a_simulated_step_says_so():
    from trainers import stacks

    stacks.register(stacks.StackEntry("stub", "Stub", "tests.integration.test_simulated_step:StubStack"))
    try:
        with pytest.raises(CannotSimulate, match="Stub stack has no simulated step yet"):
            simulate(_spec(stack="stub"), 34)
    finally:
        stacks.unregister("stub")


class StubStack(Stack):
    def build(self, spec, events):
        raise NotImplementedError


def test_an_unsloth_step_runs_on_meta_through_unsloths_loss_with_every_phase_counted():
    step = simulate(_spec(stack="unsloth", quantization="nf4"), 34, cache=False)
    assert set(step.phase_gib) == {"generation", "decoding", "scoring", "training"}
    assert step.allocated_gib == max(step.phase_gib.values()) > step.resting_gib > 0
    # Unsloth's decoding copies the full cache into buffers 512 tokens longer: more than generation held
    assert step.phase_gib["decoding"] > step.phase_gib["generation"]
    assert step.reserved_gib >= step.allocated_gib
    assert step.simulated == {
        "micro_batch": 8, "prompt_tokens": 34, "num_iterations": 2,
        "unsloth_path": "qwen2: unsloth/models/qwen2.py FastQwen2Model, unsloth decoding, unsloth kernels LoRA",
    }  # fmt: skip


def test_a_change_in_unsloths_loss_code_that_allocates_more_moves_the_simulated_peak(monkeypatch):
    before = simulate(_spec(stack="unsloth"), 34, cache=False)  # imports Unsloth, then unsloth_zoo may be
    import unsloth_zoo.rl_replacements as zoo

    original = zoo.grpo_chunked_hidden_states_logprobs
    extra = 8 * 64 * 4096 * 4  # a fp32 tensor Unsloth does not make, saved for backward

    def heavier(*args, **kwargs):
        logps = original(*args, **kwargs)
        if torch.is_grad_enabled():
            held = torch.empty(8, 64, 4096, device="meta", requires_grad=True)
            logps = logps + (held * held).sum()
        return logps

    monkeypatch.setattr(zoo, "grpo_chunked_hidden_states_logprobs", heavier)
    after = simulate(_spec(stack="unsloth"), 34, cache=False)
    assert after.allocated_gib * 2**30 >= before.allocated_gib * 2**30 + extra - GRANULE


def test_fits_answers_from_the_simulated_step_where_a_stack_has_one_and_says_why_not_where_not(capsys):
    from tests.helpers.cli import answer_block, run_cli

    code, text = run_cli(["fits", "--model", "tiny", "--budget-gib", "2", "--k", "4", "--b", "2", "--length", "64",
                          "--simulate"], capsys)  # fmt: skip
    assert code == 0, text
    trl, unsloth = answer_block(text, "TRL"), answer_block(text, "Unsloth")
    assert trl.split()[1] == "fits" and "simulated (TRL's own step on meta tensors" in trl
    assert "qwen2 GPU rows" in trl  # tiny is a qwen2: that family's own rows
    assert "simulated (Unsloth's own step on meta tensors" in unsloth


def test_unsloths_decoding_buffers_are_512_tokens_past_the_cache_and_go_as_the_next_forward_reaches_each_layer():
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainers.simulate._count import AllocationCounter
    from trainers.simulate._meta import on_meta
    from trainers.stacks._simulate_unsloth_kernels import (
        KV_CACHE_INCREMENT,
        decode_buffers,
        release_on_forward,
    )

    config = AutoConfig.for_model("llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    rows, tokens, head_dim = 4, 100, 8
    counter = AllocationCounter()
    with counter, on_meta(as_cuda=False):
        buffers = decode_buffers(model, rows, tokens, "meta")
        paged = (KV_CACHE_INCREMENT + tokens + 1) * 2 * rows * 2 * head_dim * 2  # bf16 K and V, each layer
        assert [b[0].untyped_storage().nbytes() for b in buffers] == [paged] * 3
        held = counter.live_bytes
        release_on_forward(model, buffers)
        seen = []
        model.model.layers[1].register_forward_pre_hook(lambda m, a: seen.append(counter.live_bytes))
        model(input_ids=torch.zeros(1, 2, dtype=torch.long, device="meta"))
        assert held - seen[0] >= paged  # layer 0's went as the forward reached it, layer 1's just after this
        assert buffers == [[], [], []]


def test_a_decoding_step_of_a_4_bit_model_runs_on_meta_and_allocates_each_4_bit_layers_output():
    # A decoding step's few rows go to bitsandbytes' custom kernel, which allocates its output alone; its
    # fake kernel ended the process on meta, so the output is allocated in its place.
    from transformers import DynamicCache

    from trainers.simulate._meta import on_meta, qlora_model

    model = qlora_model(_spec(quantization="nf4"), torch.bfloat16)
    with on_meta(as_cuda=True), torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(
            input_ids=torch.zeros(2, 5, dtype=torch.long, device="meta"),
            past_key_values=cache,
            use_cache=True,
        )
        out = model(
            input_ids=torch.zeros(2, 1, dtype=torch.long, device="meta"),
            past_key_values=cache,
            use_cache=True,
        )
    assert out.logits.shape == (2, 1, model.config.vocab_size) and cache.get_seq_length() == 6


def test_moments_made_in_the_first_step_leave_it_short_and_the_steady_step_as_if_made_before():
    # torch's AdamW makes its moments inside the first optimizer.step(): that step's peak lacks them (a
    # one-step run's, "first"); the step that generates with them live ("lazy": num_iterations + 1
    # steps, the one between training on the first batch again) peaks as a step with them made before.
    spec = _spec(quantization="nf4")
    before, first, lazy = (
        simulate(spec, 34, cache=False, optimizer_state=s) for s in ("before", "first", "lazy")
    )
    moments = 2 * sum(_trainable_bytes(spec))  # two moments the size and dtype of each trainable weight
    assert first.allocated_gib * 2**30 <= before.allocated_gib * 2**30 - moments + 64 * GRANULE
    assert lazy.allocated_gib == pytest.approx(before.allocated_gib, abs=64 * GRANULE / 2**30)
    with pytest.raises(ValueError, match="optimizer_state 'late'"):
        simulate(spec, 34, cache=False, optimizer_state="late")


def _trainable_bytes(spec):
    from trainers.stacks._simulate_trl import _model

    model = _model(spec, torch.bfloat16, True, "meta", "sdpa")
    return [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("stack", ["trl", "unsloth", "liger"])
def test_a_step_answered_from_kept_outputs_is_the_step_with_every_meta_kernel_run(stack, monkeypatch):
    import dataclasses

    from trainers.simulate import _count

    spec = _spec(stack=stack, quantization="4bit")

    def fields(step):
        return {k: v for k, v in dataclasses.asdict(step).items() if k not in ("seconds", "simulated")}

    kept = simulate(spec, cache=False)
    monkeypatch.setattr(_count, "_keepable", lambda func: False)
    assert fields(simulate(spec, cache=False)) == fields(kept)
