"""The optimizer a simulated step builds on meta tensors: torch's AdamW for adamw_torch (and the fused
one, which allocates the same state), and for bitsandbytes' 8-bit AdamW (adamw_8bit, paged_adamw_8bit,
whose kernels cannot run on meta) a stand-in that allocates exactly the state bitsandbytes 0.50's
Optimizer2State.init_state allocates and does no arithmetic (its update is in place, no temporaries):

  a weight of at least MIN_8BIT_SIZE elements: state1 and state2 uint8 of its shape, absmax1 and absmax2
  fp32 of one value per BLOCK elements (blockwise quantization), and the two 256-value dynamic maps
  (qmap1, qmap2), one pair shared by every weight;
  a smaller weight: state1 and state2 fp32 of its shape (bitsandbytes keeps those in 32 bits).

bitsandbytes makes its state inside the first step, as torch's AdamW does; a real trial's later steps
carry it throughout, so where the simulation allocates the optimizer's state before the step (its
"before", the steady step), `allocate` makes it then.

Paged state (paged_adamw_8bit) is the same size, in CUDA unified memory outside torch's allocator, which
the driver may move to host memory under pressure; the simulation counts it resident on the card.
"""

from __future__ import annotations

import math
from typing import Any

MIN_8BIT_SIZE = 4096  # bitsandbytes' Optimizer8bit min_8bit_size default
BLOCK = 256  # its blockwise quantization's block (F.quantize_blockwise, optimizer_update_8bit_blockwise)
QMAP = 256  # values of each dynamic quantization map


def optimizer(name: str, params: list, learning_rate: float, weight_decay: float) -> Any:
    """The optimizer `name` (transformers' optim value) over `params`, as a simulated step builds it."""
    import torch

    if "8bit" in name:
        return _eight_bit_stand_in()(params, lr=learning_rate, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay, foreach=True)


def eight_bit_state_bytes(numel: int) -> int:
    """Bytes bitsandbytes' 8-bit AdamW keeps for one weight of `numel` elements (the shared maps aside)."""
    if numel < MIN_8BIT_SIZE:
        return 2 * 4 * numel
    return 2 * numel + 2 * 4 * math.ceil(numel / BLOCK)


def _eight_bit_stand_in():
    import torch

    class EightBitAdamWStandIn(torch.optim.Optimizer):
        """bitsandbytes' AdamW8bit's state on meta (module docstring); steps change nothing."""

        def __init__(self, params, lr: float, weight_decay: float):
            super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
            self.maps: tuple | None = None

        @torch.no_grad()
        def step(self, closure=None):
            self.allocate(lambda p: p.grad is not None)

        def allocate(self, wanted=lambda p: p.requires_grad) -> None:
            """Each `wanted` weight's state, where it has none yet (a step: those with a gradient)."""
            for group in self.param_groups:
                for p in group["params"]:
                    if not wanted(p) or self.state[p]:
                        continue
                    if self.maps is None:
                        self.maps = tuple(
                            torch.zeros(QMAP, dtype=torch.float32, device=p.device) for _ in "12"
                        )
                    state = self.state[p]
                    state["step"] = 0
                    if p.numel() < MIN_8BIT_SIZE:
                        state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                        continue
                    blocks = math.ceil(p.numel() / BLOCK)
                    state["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                    state["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                    state["qmap1"], state["qmap2"] = self.maps
                    state["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                    state["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)

    return EightBitAdamWStandIn
