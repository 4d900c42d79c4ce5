"""A trial's model on the meta device as its stack holds it on a GPU, and what must be arranged for the
stack's own code to run there allocating what CUDA would. Every patch is listed in docs/oom.md
("Simulated steps"), with why it leaves CUDA's allocations as they are or where it puts CUDA's back.
"""

from __future__ import annotations

import contextlib
from typing import Any

# bitsandbytes' 4-bit matmul on an H100 (its CUDA backend's gemm_4bit heuristic for sm90): up to this many
# rows its own kernel, above them the weight dequantized to a compute-dtype temporary and a plain linear.
BNB_CUSTOM_KERNEL_MAX_ROWS = 64


def model_config(spec: Any) -> dict:
    """The config.json the spec's model is built from (trainers.models.model_config: bundled, a folder's or
    a path's, the HF cache's or fetched), or CannotSimulate saying why there is none here."""
    from trainers.models import model_config as found
    from trainers.simulate._errors import CannotSimulate

    try:
        return found(spec.model).config
    except ValueError as exc:
        raise CannotSimulate(f"model {spec.model!r}: no config.json here to build it from ({exc})") from None


def qlora_model(spec: Any, dtype: Any, device: str = "meta", attention: str = "sdpa"):
    """The spec's model built on `device` (meta: shapes without memory) in `dtype`: with quantization nf4, every nn.Linear but
    the output head a bitsandbytes Linear4bit whose weight bitsandbytes' own quantize_4bit packed (its
    fake kernels: packed uint8, absmax, the nested absmax), double quantization, blocksize 64, as
    BitsAndBytesConfig(load_in_4bit, nf4, double quant) loads it."""
    import torch
    from bitsandbytes.nn import Linear4bit, Params4bit
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainers.models import _without_meta
    from trainers.simulate._layers import cut

    config = cut(AutoConfig.for_model(**_without_meta(model_config(spec))))
    config._attn_implementation = attention
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if spec.quantization != "nf4":
        return model
    head = model.get_output_embeddings()
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is not torch.nn.Linear or child is head:
                continue
            quantized = Linear4bit(
                child.in_features, child.out_features, bias=child.bias is not None, compute_dtype=dtype,
                compress_statistics=True, quant_type="nf4", device=device,
            )  # fmt: skip
            weight = Params4bit(
                torch.empty_like(child.weight), requires_grad=False, quant_type="nf4",
                compress_statistics=True, blocksize=64,
            )._quantize(device)  # fmt: skip
            quantized.weight = weight
            if child.bias is not None:
                quantized.bias = child.bias
            setattr(module, child_name, quantized)
    model.is_loaded_in_4bit = True
    model.config.quantization_config = {"load_in_4bit": True, "quant_method": "bitsandbytes"}
    return model


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention as CUDA runs it: with no mask, the flash kernel (output and fp32
    logsumexp; GQA without repeating the keys); with a mask, the memory-efficient kernel. On meta torch
    would take the math path and allocate the whole score matrix, which no CUDA kernel does."""
    import torch

    aten = torch.ops.aten
    if attn_mask is None:
        return aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale
        )[0]
    if key.shape[1] != query.shape[1]:  # the efficient kernel takes no GQA: transformers repeats first
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, 1), value.repeat_interleave(repeat, 1)
    return aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale
    )[0]


class _Gemm4bit:
    """torch.ops.bitsandbytes.gemm_4bit as its CUDA backend allocates on an H100: above
    BNB_CUSTOM_KERNEL_MAX_ROWS rows the weight is dequantized to a temporary of the compute dtype, then
    a linear; the fake kernel alone would allocate the output only."""

    def __init__(self, op):
        self.op = op

    def default(self, A, B, shape, absmax, blocksize, quant_type, bias=None, **kw):
        import torch

        rows = A.numel() // max(1, A.shape[-1])
        if rows <= BNB_CUSTOM_KERNEL_MAX_ROWS:
            # the custom kernel allocates its output alone: as its fake kernel would, without calling it
            # (on meta it ends the process in a decoding step's few rows)
            return torch.empty((*A.shape[:-1], shape[0]), dtype=A.dtype, device=A.device)
        weight = torch.empty(tuple(shape), dtype=A.dtype, device=A.device)
        return torch.nn.functional.linear(A, weight, bias)


def patcher(saved: list):
    """patch(owner, name, value): set it, keeping what it replaced in `saved` (undone by restore)."""

    def patch(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    return patch


def restore(saved: list) -> None:
    for owner, name, value in reversed(saved):
        setattr(owner, name, value)


@contextlib.contextmanager
def on_meta(as_cuda: bool = True):
    """The patches every stack's simulation shares, undone on exit (docs/oom.md, "Simulated steps"):
    what meta needs to run the code at all, and with as_cuda the kernels CUDA runs in place of those the
    host would (attention, bitsandbytes' matmul). A stack's own are its simulator's (patches())."""
    import torch
    import torch.nn.functional as F
    import transformers.masking_utils as masking

    saved: list[tuple[Any, str, Any]] = []

    patch = patcher(saved)

    item, tolist = torch.Tensor.item, torch.Tensor.tolist
    patch(torch.Tensor, "item", lambda self: 0 if self.is_meta else item(self))
    patch(torch.Tensor, "tolist", lambda self: [0] * self.numel() if self.is_meta else tolist(self))
    patch(masking, "fast_all", lambda tensor: True)  # an all-ones mask, as a batch of one prompt length
    patch(masking, "find_packed_sequence_indices", lambda position_ids: None)
    if as_cuda:
        patch(F, "scaled_dot_product_attention", _sdpa)
        import bitsandbytes  # noqa: F401

        patch(torch.ops.bitsandbytes, "gemm_4bit", _Gemm4bit(torch.ops.bitsandbytes.gemm_4bit))
    try:
        yield
    finally:
        restore(saved)
