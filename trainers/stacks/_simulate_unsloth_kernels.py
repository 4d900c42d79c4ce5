"""What Unsloth runs on a GPU that cannot run on meta or this CPU, stood in for by the allocations CUDA
makes for it (docs/oom.md, "Simulated steps"; used by trainers/stacks/_simulate_unsloth.py).

- OffloadingCheckpointer: unsloth_zoo's UnslothCheckpointFunction (gradient_checkpointing.py), whose
  copies go through CUDA streams and pinned host buffers. Each decoder layer's input is copied to the
  host and nothing is kept on the GPU for it (0 bytes), except the last layer's (kept on the GPU after
  the first pass: CURRENT_GC_INDEX == LAST_GC_INDEX) and inputs of 2 MiB or less (MINIMUM_SIZE). In
  backward the input comes back into a persistent GPU buffer the size of the largest input (two with
  double buffering, which Unsloth turns on after the first pass when more than 512 MiB are free: on any
  card rlsweep measures), the layer is recomputed from a view of it and back-propagated.
- The fused chunked log-prob op (unsloth_zoo.fused_losses.fused_linear): its fake kernel allocates its
  outputs; its CUDA path also holds one fp32 buffer of logits (a chunk of rows by the vocabulary, or a
  tile of it) while it runs: that transient is added (_chunk_transient).
- torch.compile (torch_compile_with_fallback) is eager here: what is compiled on a GPU is a few tensors
  of [rows, completion] per chunk of the loss (eager allocates at least what the compiled graph does).
- autotune_batch_and_chunks runs as on an H100, with the card's free memory (CUDA_FREE_GIB), not the 8 GB
  it assumes without a GPU.
- decode_buffers: Unsloth's fast decoding (unsloth/models/llama.py LlamaAttention_fast_forward_inference,
  _decode_graphs.alloc_decode_buffers) copies each layer's KV cache at its first decoding step into a
  buffer of its own, KV_CACHE_INCREMENT (512) tokens longer, with a few one-token scratch tensors, while
  the cache it copies from is still held. The buffers stay on the attention modules after generate and
  each is dropped when the next forward (scoring or training) reaches its layer
  (LlamaAttention_fast_forward deletes `paged_attention`): release_on_forward.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

# An H100's total memory (torch.cuda.mem_get_info's total: 79.19 GiB) less its context (0.76 GiB): what
# autotune_batch_and_chunks reads as free before the step's activations.
CUDA_FREE_GIB = 78.4
MINIMUM_OFFLOAD_BYTES = 2 * 1024 * 1024
H100_FLASH_MIN_ROWS = 4096  # unsloth_zoo.fused_losses.fused_linear._flash_min_rows on a card over 24.5 GiB  # unsloth_zoo.gradient_checkpointing's MINIMUM_SIZE


class OffloadingCheckpointer:
    """transformers' _gradient_checkpointing_func for every decoder layer, allocating what unsloth_zoo's
    offloading checkpointer allocates on a GPU (module docstring)."""

    def __init__(self, device: str):
        self.device = device
        self.layers = 0
        self.index = 0
        self.buffers: list = []

    def prepare(self, layers: int, numel: int, dtype: Any) -> None:
        """The persistent GPU buffers (two: double buffering), as a step after the first holds them."""
        import torch

        self.layers = layers
        if numel * dtype.itemsize > MINIMUM_OFFLOAD_BYTES:
            self.buffers = [torch.empty(numel, dtype=dtype, device=self.device) for _ in range(2)]

    def __call__(self, function, *args, use_reentrant=None, **kwargs):
        if kwargs:
            function = partial(function, **kwargs)
        hidden = args[0]
        offload = False
        if hidden.requires_grad:
            self.index = self.index % self.layers + 1
            size = hidden.numel() * hidden.element_size()
            offload = size > MINIMUM_OFFLOAD_BYTES and self.index != self.layers and bool(self.buffers)
        return _Checkpoint.apply(function, self if offload else None, *args)


def _checkpoint_class():
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    class Checkpoint(torch.autograd.Function):
        @staticmethod
        def forward(ctx, function, offloader, hidden, *rest):
            ctx.function, ctx.offloader, ctx.shape = function, offloader, hidden.shape
            ctx.host = None
            if offloader is None:
                ctx.save_for_backward(hidden, *rest)
            else:
                ctx.save_for_backward(*rest)
                if not hidden.is_meta:  # the host's copy, outside the device's memory
                    with _disable_current_modes():
                        ctx.host = hidden.detach().clone()
            with torch.no_grad():
                return function(hidden, *rest)

        @staticmethod
        def backward(ctx, *grads):
            saved = list(ctx.saved_tensors)
            if ctx.offloader is None:
                hidden, rest = saved[0], saved[1:]
            else:
                buffer = ctx.offloader.buffers[0]
                hidden = buffer[: ctx.shape.numel()].view(ctx.shape)  # the copy back: a view of the buffer
                if ctx.host is not None:
                    hidden.copy_(ctx.host)
                rest = saved
            hidden = hidden.detach().requires_grad_(True)
            with torch.enable_grad():
                outputs = ctx.function(hidden, *rest)
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            pairs = [
                (o, g) for o, g in zip(outputs, grads, strict=True) if torch.is_tensor(o) and o.requires_grad
            ]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return (None, None, hidden.grad) + (None,) * len(rest)

    return Checkpoint


class _LazyCheckpoint:
    def apply(self, *args):
        global _Checkpoint
        _Checkpoint = _checkpoint_class()
        return _Checkpoint.apply(*args)


_Checkpoint: Any = _LazyCheckpoint()


def _chunk_transient(fused_linear):
    """fused_linear_logprobs with its kernels' transient as on an H100 (_logprobs_impl): from 4,096 rows
    (_flash_min_rows on a card over 24.5 GiB) the tiled pass's one buffer of _tiled_layout's rows x vocab
    tile in fp32, with an fp32 [rows, hidden] accumulator where it computes the hidden states' gradient in
    forward; below, one buffer of fused_linear_rows' rows x the vocabulary (padded to 8) in fp32. Freed
    when the op returns. Backward allocates the gradient alone (the fake kernel's): with a frozen output
    head the forward computed it (UNSLOTH_LOGPROB_FORWARD_GRAD)."""
    import torch

    original = fused_linear.fused_linear_logprobs

    def stand_in(hidden, weight, targets, **kwargs):
        rows, width, vocab = hidden.numel() // hidden.shape[-1], hidden.shape[-1], weight.shape[0]
        f32 = {"dtype": torch.float32, "device": weight.device}
        if rows >= H100_FLASH_MIN_ROWS:
            tile_rows, tile = fused_linear._tiled_layout(rows, vocab, 0, 4, weight.device)
            transient = [torch.empty((tile_rows, tile), **f32)]
            if torch.is_grad_enabled() and hidden.requires_grad:
                transient.append(torch.empty((tile_rows, width), **f32))
        else:
            chunk = fused_linear.fused_linear_rows(rows, width, vocab, 4, weight.device)
            transient = [torch.empty((min(chunk, rows), -(-vocab // 8) * 8), **f32)]
        out = original(hidden, weight, targets, **kwargs)
        del transient
        return out

    return stand_in


def _autotune_on_the_card(original):
    """autotune_batch_and_chunks reading an H100's free memory (CUDA_FREE_GIB)."""
    import torch

    def stand_in(*args, **kwargs):
        available, mem_get_info = torch.cuda.is_available, torch.cuda.mem_get_info
        torch.cuda.is_available = lambda: True
        torch.cuda.mem_get_info = lambda *a: (int(CUDA_FREE_GIB * 2**30), int(79.19 * 2**30))
        try:
            return original(*args, **kwargs)
        finally:
            torch.cuda.is_available, torch.cuda.mem_get_info = available, mem_get_info

    return stand_in


@contextlib.contextmanager
def unsloth_on_meta(zoo: Any, as_cuda: bool):
    """Unsloth's own arrangements, undone on exit: torch.compile eager; sequence packing and the prefix
    grouper off (the padded loop they replace allocates the same for rows of one length, and their
    self-checks read values); with as_cuda the fused log-prob op's transient and the card's free memory."""
    import os

    import torch
    import unsloth_zoo.fused_losses.fused_linear as fused_linear
    import unsloth_zoo.temporary_patches.utils as zoo_utils

    from trainers.simulate._meta import patcher, restore

    saved: list = []
    patch = patcher(saved)
    environ = {"UNSLOTH_GRPO_SEQ_PACKING": "0", "UNSLOTH_GRPO_PREFIX_GROUPER": "0"}
    before = {name: os.environ.get(name) for name in environ}
    os.environ.update(environ)
    autocast_enabled = torch.is_autocast_enabled
    patch(torch, "is_autocast_enabled", lambda *a: False if a and a[0] == "meta" else autocast_enabled(*a))
    patch(zoo_utils, "torch_compile_with_fallback", lambda *a, **k: lambda function: function)
    if as_cuda:
        patch(fused_linear, "fused_linear_logprobs", _chunk_transient(fused_linear))
        patch(zoo, "autotune_batch_and_chunks", _autotune_on_the_card(zoo.autotune_batch_and_chunks))
    try:
        yield
    finally:
        restore(saved)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _weight(proj, dtype):
    """A LoRA projection's base weight as Unsloth's matmul uses it: a 4-bit one dequantized to a fresh
    compute-dtype temporary (fast_dequantize without its global buffer, as LoRA_MLP's dropout path and
    its backward call it), a 16-bit one as it is."""
    import torch

    weight = proj.base_layer.weight
    state = getattr(weight, "quant_state", None)
    if state is None:
        return weight
    return torch.empty(tuple(state.shape), dtype=dtype, device=weight.device)


def _lora(proj):
    adapter = proj.active_adapters[0]
    dropout = proj.lora_dropout[adapter]
    return (
        proj.lora_A[adapter].weight,
        proj.lora_B[adapter].weight,
        proj.scaling[adapter],
        getattr(dropout, "p", 0.0),
    )


def _dropout(x, p):
    import torch

    if not p:
        return x, None
    return torch.native_dropout(x, p, True)


def _replay(t, mask, p, scale=1.0):
    import torch

    return torch.ops.aten.native_dropout_backward(t, mask, scale / (1.0 - p))


def _mlp_class():
    import torch
    import torch.nn.functional as F

    class LoRAMLP(torch.autograd.Function):
        """unsloth.kernels.fast_lora.LoRA_MLP (SwiGLU) by its allocations: e and g saved, h made by the
        fused SwiGLU kernel, dropout masks kept; in backward the SwiGLU gradient kernel writes into DW, e
        and g in place and dX is written into X's storage."""

        @staticmethod
        def forward(ctx, X, module, *lora_params):
            dtype = X.dtype
            projs = (module.gate_proj, module.up_proj, module.down_proj)
            (gA, gB, gS, gp), (uA, uB, uS, up), (dA, dB, dS, dp) = (_lora(p) for p in projs)

            def matmul(x, xd, proj, A, B, S):
                out = x @ _weight(proj, dtype).t()
                out2d = out.view(-1, out.shape[-1])
                xa = xd.reshape(-1, xd.shape[-1]) @ A.to(dtype).t()
                out2d.addmm_(xa, B.to(dtype).t(), alpha=S)
                return out

            Xd, gate_mask = _dropout(X, gp)
            e = matmul(X, Xd, projs[0], gA, gB, gS)
            Xd, up_mask = _dropout(X, up)
            g = matmul(X, Xd, projs[1], uA, uB, uS)
            del Xd
            h = F.silu(e).mul_(g)  # the fused SwiGLU kernel: one [rows, intermediate] output
            hd, down_mask = _dropout(h, dp)
            i = matmul(h, hd, projs[2], dA, dB, dS)
            del hd, h
            ctx.module = module
            ctx.save_for_backward(X, e, g, gate_mask, up_mask, down_mask, *lora_params)
            return i

        @staticmethod
        def backward(ctx, dY):
            X, e, g, gate_mask, up_mask, down_mask, *_ = ctx.saved_tensors
            module = ctx.module
            projs = (module.gate_proj, module.up_proj, module.down_proj)
            (gA, gB, gS, gp), (uA, uB, uS, up), (dA, dB, dS, dp) = (_lora(p) for p in projs)
            dtype = X.dtype
            shape = X.shape
            dY = dY.reshape(-1, dY.shape[-1])
            X2, e, g = X.view(-1, shape[-1]), e.view(-1, e.shape[-1]), g.view(-1, g.shape[-1])
            DW = dY @ _weight(projs[2], dtype)
            lora = (dY @ dB.to(dtype)) @ dA.to(dtype)
            DW.add_(_replay(lora, down_mask.view(-1, down_mask.shape[-1]), dp, dS) if dp else lora * dS)
            del lora
            # swiglu_DWf_DW_dfg_kernel: h into DW, df into e, de into g, in place
            h, df, de = DW, e, g
            if dp:
                h = _replay(h, down_mask.view(-1, down_mask.shape[-1]), dp)
            grads = {}
            grads["dA"] = (h.t() @ (dY @ dB.to(dtype))).t() * dS
            grads["dB"] = ((dA.to(dtype) @ h.t()) @ dY).t() * dS
            up_dB, gate_dB = df @ uB.to(dtype), de @ gB.to(dtype)
            Xd = _replay(X2, up_mask.view(-1, shape[-1]), up) if up else X2
            grads["uA"] = (Xd.t() @ up_dB).t() * uS
            grads["uB"] = ((uA.to(dtype) @ Xd.t()) @ df).t() * uS
            Xd = _replay(X2, gate_mask.view(-1, shape[-1]), gp) if gp else X2
            grads["gA"] = (Xd.t() @ gate_dB).t() * gS
            grads["gB"] = ((gA.to(dtype) @ Xd.t()) @ de).t() * gS
            del Xd
            dX = torch.matmul(df, _weight(projs[1], dtype), out=X2)
            dX.add_(
                _replay(up_dB @ uA.to(dtype), up_mask.view(-1, shape[-1]), up, uS)
                if up
                else up_dB @ uA.to(dtype) * uS
            )
            dX.addmm_(de, _weight(projs[0], dtype))
            dX.add_(
                _replay(gate_dB @ gA.to(dtype), gate_mask.view(-1, shape[-1]), gp, gS)
                if gp
                else gate_dB @ gA.to(dtype) * gS
            )
            order = ("gA", "gB", "uA", "uB", "dA", "dB")
            return (dX.view(shape), None) + tuple(
                grads[k].to(p.dtype) for k, p in zip(order, _mlp_params(module), strict=True)
            )

    return LoRAMLP


def _mlp_params(module):
    (gA, gB, *_), (uA, uB, *_), (dA, dB, *_) = (
        _lora(p) for p in (module.gate_proj, module.up_proj, module.down_proj)
    )
    return gA, gB, uA, uB, dA, dB


def _linear_class():
    import torch
    import torch.nn.functional as F

    class LoRALinear(torch.autograd.Function):
        """unsloth.kernels.fast_lora's LoRA_W (and LoRA_QKV, one projection at a time) by its allocations:
        the base matmul on a dequantized temporary, the adapters cast to the input's dtype, X and the
        dropout mask saved; backward recomputes the dropped input from the mask."""

        @staticmethod
        def forward(ctx, X, proj, A, B):
            dtype = X.dtype
            _, _, S, p = _lora(proj)
            out = F.linear(X, _weight(proj, dtype), proj.base_layer.bias)
            Xd, mask = _dropout(X, p)
            xa = Xd.reshape(-1, Xd.shape[-1]) @ A.to(dtype).t()
            del Xd
            out.view(-1, out.shape[-1]).addmm_(xa, B.to(dtype).t(), alpha=S)
            ctx.proj = proj
            ctx.save_for_backward(X, mask, A, B)
            return out

        @staticmethod
        def backward(ctx, dY):
            X, mask, A, B = ctx.saved_tensors
            _, _, S, p = _lora(ctx.proj)
            dtype = X.dtype
            X2 = X.view(-1, X.shape[-1])
            dY2 = dY.reshape(-1, dY.shape[-1])
            Xd = _replay(X2, mask.view(-1, X.shape[-1]), p) if p else X2
            dYB = dY2 @ B.to(dtype)
            dA = (dYB.t() @ Xd) * S
            dB = (dY2.t() @ (Xd @ A.to(dtype).t())) * S
            del Xd
            dX = dY2 @ _weight(ctx.proj, dtype)
            lora = dYB @ A.to(dtype)
            dX.add_(_replay(lora, mask.view(-1, X.shape[-1]), p, S) if p else lora * S)
            return dX.view(X.shape), None, dA.to(A.dtype), dB.to(B.dtype)

    return LoRALinear


MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def fast_lora(model, fused_mlp: bool = True) -> int:
    """Unsloth's LoRA kernels' stand-ins: with fused_mlp (Unsloth's own model files) every SwiGLU MLP whose
    three projections carry LoRA runs LoRAMLP (LoRA_MLP); every other LoRA projection LoRALinear (LoRA_W,
    LoRA_QKV; on FastModel's path unsloth_zoo's compiled lora_forward, which allocates as LoRA_W does: the
    adapters cast to the base output's dtype, never the input to theirs). Returns how many modules run
    one."""
    from types import MethodType

    mlp, linear = _mlp_class(), _linear_class()
    count = 0
    in_mlp = set()
    for module in model.modules():
        projs = [getattr(module, name, None) for name in MLP_PROJECTIONS]
        if not fused_mlp or not all(p is not None and hasattr(p, "lora_A") for p in projs):
            continue
        if getattr(getattr(module, "config", None), "hidden_act", "silu") not in ("silu", "swish"):
            continue
        module.forward = MethodType(lambda self, x: mlp.apply(x, self, *_mlp_params(self)), module)
        in_mlp.update(id(p) for p in projs)
        count += 1
    for module in model.modules():
        if hasattr(module, "lora_A") and hasattr(module, "base_layer") and id(module) not in in_mlp:
            if len(module.active_adapters) != 1 or module.active_adapters[0] not in module.lora_A:
                continue
            module.forward = MethodType(
                lambda self, x, *a, **k: linear.apply(x, self, *_lora(self)[:2]), module
            )
            count += 1
    return count


KV_CACHE_INCREMENT = 512  # unsloth.models.llama.KV_CACHE_INCREMENT


def decode_buffers(model: Any, rows: int, tokens: int, device: str) -> list[list]:
    """Each decoder layer's decoding buffers as Unsloth's eager decode path allocates them at the first
    decoding step after a prefill of `tokens` tokens for `rows` sequences (module docstring)."""
    import torch

    config = model.config.get_text_config()
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    attention = heads * head_dim
    dtype = torch.bfloat16
    layers = []
    for _ in range(config.num_hidden_layers):
        held = [
            torch.empty((KV_CACHE_INCREMENT + tokens + 1, 2, rows, kv_heads, head_dim), dtype=dtype, device=device),
            torch.empty((2, rows, 1, attention), dtype=dtype, device=device),  # temp_QA
            torch.empty((2, rows, 1, kv_heads * head_dim), dtype=dtype, device=device),  # temp_KV
            torch.empty((rows, heads, 1, head_dim), dtype=dtype, device=device),  # RH_Q
            torch.empty((rows, heads, 1, KV_CACHE_INCREMENT + tokens + (-tokens) % 8), dtype=dtype, device=device),
        ]  # fmt: skip
        if attention != config.hidden_size:
            held.append(torch.empty((rows, 1, config.hidden_size), dtype=dtype, device=device))  # temp_O
        layers.append(held)
    return layers


def release_on_forward(model: Any, buffers: list[list]) -> None:
    """Drop layer i's decoding buffers when a forward first reaches decoder layer i, as Unsloth's
    attention forward deletes them (module docstring); all at once at the model's next forward where its
    decoder layers cannot be told apart."""
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    if len(layers) != len(buffers):
        layers, buffers[:] = [model], [[t for held in buffers for t in held]]
    hooks = []

    def drop(index: int, module, args):
        buffers[index].clear()
        hooks[index].remove()

    for index, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(partial(drop, index)))
