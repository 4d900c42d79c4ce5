"""One GRPO/GSPO trial on TRL with Liger Kernel (`use_liger_kernel=True`), on the TRL stack's terms.

What the switch does in TRL 1.14 (trl/trainer/grpo_trainer.py, read from the installed source):
  - the log-probs of the loss and of the scoring pass go through TRL's chunked path (`_chunked_logps`):
    the backbone's hidden states are projected to the vocabulary in tiles of 2,048 rows x 8,192 tokens
    (trl/trainer/utils.py `_ChunkedLogProbFunction`, plain PyTorch with an online log-sum-exp), so the
    [rows x vocabulary] logits are never held whole; with LoRA the frozen output head gets no gradient;
  - transformers' Trainer.train patches Liger's Triton kernels into the model (RMSNorm, SwiGLU, RoPE and
    its fused linear cross-entropy forward: transformers/integrations/liger.py).
TRL 1.14 builds no Liger loss module (LigerFusedLinearGRPOLoss is not on its GRPO path): the loss is TRL's
own, so every TRL loss option runs as it does on the TRL stack. The two refusals TRL makes with the
switch on (a LoRA adapter on lm_head, prompt-learning PEFT) cannot be asked for here: rlsweep's LoRA is
PEFT's "all-linear", which leaves the output head out, and it trains no prompt-learning adapter.

Liger's Triton kernels need an NVIDIA GPU and Triton. Where either is missing, the trial runs the chunked
log-probs alone and says so (`liger_kernels` in the `started` event's effective_config): the loss path is
the one a GPU runs, the layers are transformers' own.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from trainers.events import EventWriter
from trainers.stacks._base import Built
from trainers.stacks.trl import TrlStack

if TYPE_CHECKING:
    from trainers.trial import TrialSpec

INSTALL_FIX = (
    "install it with `make setup` (liger-kernel, pinned in the Makefile; Triton comes with CUDA torch)"
)


def kernels_here(on_gpu: bool) -> str:
    """'triton' where Liger's Triton kernels can run, else why not (what `liger_kernels` reports)."""
    if not on_gpu:
        return "none: no NVIDIA GPU (Liger's Triton kernels need one); chunked log-probs only"
    if importlib.util.find_spec("triton") is None:
        return "none: triton not installed; chunked log-probs only"
    return "triton"


def skip_triton_kernels() -> None:
    """Leave the model's layers as transformers builds them: Trainer.train would import Liger's Triton
    kernels (liger_kernel.transformers imports triton) to patch them in. This process only (a trainer child)."""
    import transformers.trainer

    transformers.trainer.apply_liger_kernel = lambda model, kernel_config: None


class LigerStack(TrlStack):
    packages = ("liger_kernel",)
    install_fix = INSTALL_FIX

    def own_config(self, on_gpu: bool) -> dict:
        return {"use_liger_kernel": True}

    def own_read_back(self, trainer) -> dict:
        return {"use_liger_kernel": trainer.use_liger_kernel, "liger_kernels": self.kernels}

    def build(self, spec: TrialSpec, events: EventWriter) -> Built:
        import torch

        self.kernels = kernels_here(torch.cuda.is_available())
        if self.kernels != "triton":
            skip_triton_kernels()
        return super().build(spec, events)

    def simulate_step(self, spec: TrialSpec, prompt_tokens: int, counter, **how) -> dict:
        """TRL's step with its chunked log-probs, on meta (trainers/stacks/_simulate_liger.py)."""
        from trainers.stacks._simulate_liger import simulate_step

        return simulate_step(spec, prompt_tokens, counter, **how)
