"""The liger stack's GRPO step simulated on meta tensors: TRL's simulated step (trainers/stacks/_simulate_trl.py)
with the one thing `use_liger_kernel` changes in it, the log-probs: TRL's `_chunked_logps` calls the backbone,
selects the completion rows by the completion mask and projects them to the vocabulary through
`_ChunkedLogProbFunction` in tiles (trl/trainer/utils.py), for the loss and for the scoring pass alike.

Two arrangements let that code run on meta. Asking whether autocast is on for the device "meta" is an
error in torch: it is off there (the simulated model is in bf16, the dtype autocast would give on a GPU
under bf16 mixed precision, so the tiles are of the same dtype). And selecting rows by a boolean mask asks for the mask's nonzero
indices, whose count depends on values meta does not hold. The simulated batch's completion mask is all
ones (every completion at full length, as the synthetic probe forces them), so the selection is every row:
on meta it allocates the selected rows, the output of the one op torch dispatches (the nonzero indices are
the op's own temporary, [rows, mask dims] int64, as the counter leaves any op's temporaries uncounted).

Not simulated: Liger's Triton kernels in the layers (RMSNorm, SwiGLU, RoPE), which no host without a GPU
can run; the layers are transformers' own. TRL 1.14 compiles nothing on this path (no torch.compile), so
there is no compiled form to compare with an eager one.
"""

from __future__ import annotations

import contextlib
from typing import Any

from trainers.simulate._step import run_step
from trainers.stacks._simulate_trl import TrlHooks


def _select_all(tensor, mask):
    """`tensor[mask]` for a boolean `mask` of all ones on meta: the selected rows, copied into one new
    tensor as the index op's output is."""
    import torch

    dims = mask.dim()
    out = torch.empty((mask.numel(), *tensor.shape[dims:]), dtype=tensor.dtype, device=tensor.device)
    out.view(tensor.shape).copy_(tensor)
    return out


@contextlib.contextmanager
def _liger_on_meta():
    """Autocast off on meta; boolean-mask selection of a meta tensor by a meta mask: every row (module
    docstring)."""
    import torch

    from trainers.simulate._meta import patcher, restore

    saved: list = []
    getitem = torch.Tensor.__getitem__

    def selected(self, index):
        if (
            isinstance(index, torch.Tensor)
            and index.dtype == torch.bool
            and index.is_meta
            and self.is_meta
            and tuple(self.shape[: index.dim()]) == tuple(index.shape)
        ):
            return _select_all(self, index)
        return getitem(self, index)

    autocast = torch.is_autocast_enabled

    def autocast_on(*device_type):
        return False if device_type == ("meta",) else autocast(*device_type)

    patch = patcher(saved)
    patch(torch.Tensor, "__getitem__", selected)
    patch(torch, "is_autocast_enabled", autocast_on)
    try:
        yield
    finally:
        restore(saved)


class LigerHooks(TrlHooks):
    """TRL's hooks with use_liger_kernel: its chunked log-probs in the loss and the scoring pass, arranged
    for meta (_liger_on_meta) on top of TRL's own arrangements."""

    use_liger_kernel = True

    @contextlib.contextmanager
    def patches(self, as_cuda):
        with super().patches(as_cuda), _liger_on_meta():
            yield


def simulate_step(spec: Any, prompt_tokens: int, counter: Any, **how: Any) -> dict[str, Any]:
    """TRL's simulated step (its model, generation, scoring, loss, backward, clipping and optimizer) on the
    step's skeleton with TRL's chunked log-probs, as `use_liger_kernel` runs them."""
    return run_step(LigerHooks(), spec, prompt_tokens, counter, **how)
