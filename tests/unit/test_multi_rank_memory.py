"""The memory model over several ranks: a family per strategy and rank count, and one rank's
share of the weights, the LoRA state and the completions."""

import pytest

from orchestrator.judging.memory._model import family_label, family_of
from orchestrator.judging.memory._terms import Shape, terms
from trainers.trial import TrialSpec
from trainers.units import GIB

# A small decoder: 2 layers, hidden 64, 4 heads of 16 (2 for k/v), MLP 128, vocabulary 1000, untied.
SHAPE = Shape(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=1000, tied=False)
LINEAR = 2 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 64 * 128 + 64 * 128 + 128 * 64)  # q k v o gate up down
OTHER = 1000 * 64 * 2 + 64 * (2 * 2 + 1)
LORA = 2 * 8 * ((64 + 64) + (64 + 32) * 2 + (64 + 64) + (64 + 128) * 2 + (128 + 64))  # r=8, every linear


def spec(**overrides) -> TrialSpec:
    base = dict(quantization="none", dtype="bf16", lora_r=8, batch_size=2, num_generations=4)
    return TrialSpec(**(base | overrides))


@pytest.mark.parametrize(
    "distributed,weights_bytes,lora_bytes",
    [
        ("ddp", (LINEAR + OTHER) * 2, LORA * 16),
        ("zero2", (LINEAR + OTHER) * 2, LORA * (4 + 12 / 2)),
        ("zero3", (LINEAR + OTHER) * 2 / 2, LORA * 16 / 2),
        ("fsdp", (LINEAR + OTHER) * 2 / 2, LORA * 16 / 2),
    ],
)
def test_one_ranks_share_of_weights_and_lora_state_follows_the_strategy(
    distributed, weights_bytes, lora_bytes
):
    got = terms(spec(num_processes=2, distributed=distributed), SHAPE, "gpu")
    assert got["weights"] == pytest.approx(weights_bytes / GIB)
    assert got["lora"] == pytest.approx(lora_bytes / GIB)


def test_each_rank_generates_and_trains_on_its_share_of_the_completions():
    one, two = terms(spec(), SHAPE, "gpu"), terms(spec(num_processes=2, distributed="ddp"), SHAPE, "gpu")
    # 8 completions a step: all 8 on one GPU; 4 on each of two.
    tokens = 256 + 128
    assert one["kv_cache"] == pytest.approx(2 * 2 * 2 * 16 * 2 * 8 * tokens / GIB)
    assert two["kv_cache"] == pytest.approx(2 * 2 * 2 * 16 * 2 * 4 * tokens / GIB)
    assert two["logits"] == pytest.approx(one["logits"] / 2)


def test_the_strategy_and_the_rank_count_make_a_family_of_their_own():
    one, ddp2, zero3 = (
        spec(),
        spec(num_processes=2, distributed="ddp"),
        spec(num_processes=2, distributed="zero3"),
    )
    assert len({family_of(one), family_of(ddp2), family_of(zero3)}) == 3
    assert family_label(zero3) == "trl grpo tiny none bf16 checkpointed 2 GPUs zero3"


def test_full_fine_tuning_trains_every_weight_and_keeps_a_reference_copy_with_beta():
    full = terms(spec(adapter="none"), SHAPE, "gpu")
    # bf16 weights; their bf16 gradient and AdamW's two fp32 moments: 2 + 8 bytes a parameter.
    assert full["weights"] == pytest.approx((LINEAR + OTHER) * 2 / GIB)
    assert full["lora"] == pytest.approx((LINEAR + OTHER) * (2 + 8) / GIB)
    with_ref = terms(spec(adapter="none", beta=0.04), SHAPE, "gpu")
    assert with_ref["weights"] == pytest.approx((LINEAR + OTHER) * 2 * 2 / GIB)
    zero3 = terms(spec(adapter="none", num_processes=2, distributed="zero3"), SHAPE, "gpu")
    assert zero3["lora"] == pytest.approx((LINEAR + OTHER) * (2 + 8) / 2 / GIB)
    assert family_label(spec(adapter="none")) == "trl grpo tiny none bf16 checkpointed full fine-tuning"
