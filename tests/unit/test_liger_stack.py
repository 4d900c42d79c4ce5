"""The liger stack (TRL's GRPOTrainer with use_liger_kernel) computes plain TRL's loss: on the same batch and
the same LoRA weights, its chunked log-probs give the loss and every LoRA gradient of TRL's full-logits path,
for GRPO and GSPO; and the stack is one a trial can pick, with nothing else to install on a CPU host."""

from __future__ import annotations

import pytest
import torch

from trainers import stacks
from trainers.simulate._step import grpo_config
from trainers.stacks import _simulate_trl as trl_step
from trainers.trial import TrialSpec

# fp32 on CPU: the two paths sum the same terms in another order (the chunked one through an online
# log-sum-exp over vocabulary tiles). Measured: the losses equal, gradients within 1e-6 of each tensor's
# largest entry; the tolerance leaves room for another host's BLAS.
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-5  # of the gradient tensor's largest absolute entry


def _loss_and_lora_grads(mode: str, monkeypatch) -> dict[bool, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    import trl.trainer.grpo_trainer as grpo
    import trl.trainer.utils as trl_utils

    # Tiles far smaller than TRL's (8,192 tokens x 2,048 rows) so that the 8,192-token vocabulary of `tiny`
    # and the batch's rows both span several: the online log-sum-exp and the row chunks are exercised.
    monkeypatch.setattr(grpo, "_CHUNKED_LOGPROB_CHUNK_SIZE", 1000)
    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_TOKEN_CHUNK_SIZE", 17)
    spec = TrialSpec(stack="liger", mode=mode, model="tiny", quantization="none", num_generations=4,
                     batch_size=1, max_prompt_length=8, max_completion_length=12, num_iterations=2,
                     lora_dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    args = grpo_config(spec, torch.float32)
    model = trl_step._model(spec, torch.float32, False, "cpu", "eager")
    for name, param in model.named_parameters():
        if "lora_B" in name:  # PEFT starts B at zero, which leaves every A without a gradient
            param.data.normal_(0, 0.02)
    rows, prompt, completion = 4, 8, 12
    ids = torch.randint(0, model.config.vocab_size, (rows, prompt + completion))
    completion_mask = torch.ones(rows, completion, dtype=torch.long)
    completion_mask[1, 9:] = 0  # one completion ended early: its padding is masked
    inputs = {
        "prompt_ids": ids[:, :prompt], "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
        "completion_ids": ids[:, prompt:], "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -0.5, 0.3, -0.8]), "num_items_in_batch": completion_mask.sum().float(),
    }  # fmt: skip
    plain = trl_step._trainer(args, model, use_liger_kernel=False)
    with torch.no_grad():
        mask = torch.cat([inputs["prompt_mask"], completion_mask], 1)
        logps, _, _ = plain._get_per_token_logps_and_entropies(model, ids, mask, completion)
    # off-policy: the ratio moves away from 1 and some tokens clip
    inputs["old_per_token_logps"] = logps + 0.3 * torch.randn_like(logps)
    out = {}
    for liger in (False, True):
        trainer = trl_step._trainer(args, model, use_liger_kernel=liger)
        model.zero_grad(set_to_none=True)
        loss = trainer.compute_loss(model, dict(inputs))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        out[liger] = (loss.detach(), grads)
    return out


@pytest.mark.parametrize("mode", ["grpo", "gspo"])
def test_the_chunked_loss_and_its_lora_gradients_match_plain_trls_on_the_same_batch(mode, monkeypatch):
    out = _loss_and_lora_grads(mode, monkeypatch)
    (plain_loss, plain), (liger_loss, liger) = out[False], out[True]
    assert plain_loss.abs() > 1e-4  # a loss that says something
    assert torch.allclose(liger_loss, plain_loss, rtol=LOSS_RTOL, atol=0)
    assert (
        sorted(liger) == sorted(plain)
        and any("lora_A" in n for n in plain)
        and any("lora_B" in n for n in plain)
    )
    for name, grad in plain.items():
        scale = grad.abs().max()
        assert scale > 0, f"{name} got no gradient"
        assert (liger[name] - grad).abs().max() <= GRAD_RTOL * scale, name


def test_a_trial_on_the_liger_stack_asks_trl_for_liger_and_needs_no_triton_without_a_gpu():
    from trainers.stacks.liger import kernels_here

    stack = stacks.load("liger")
    assert stack.own_config(on_gpu=False) == {"use_liger_kernel": True}
    assert stack.availability() == (True, "")  # liger-kernel installed by make setup, no Triton here
    assert kernels_here(on_gpu=False).startswith("none: no NVIDIA GPU")
    assert TrialSpec(stack="liger", mode="gspo", quantization="nf4").problems() == []


def test_what_the_liger_stack_cannot_run_is_refused_naming_the_stacks_that_can():
    problems = TrialSpec(stack="liger", generation="vllm", vllm_mode="colocate").problems()
    assert any("generation: vllm" in p and "trl" in p and "liger does not" in p for p in problems), problems
    assert TrialSpec(stack="liger", adapter="none", quantization="none").problems() == [
        "adapter: none with stack liger: full fine-tuning runs on trl; set stack: trl or adapter: lora"
    ]
