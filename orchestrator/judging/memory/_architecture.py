"""A model's architecture as the memory model sees it (Shape), read from its config.json.

The sizes GRPO memory depends on: the decoder layers' attention (query heads, the KV heads of
grouped-query attention, an explicit head_dim as Qwen3's and Gemma 3's), the MLP or, in a
mixture-of-experts layer (Qwen3-MoE), the router and every expert (all resident; a token's activations
go through its num_experts_per_tok routed experts only), the vocabulary, whether the output head is the
embedding (tied), and the layers whose attention is a sliding window (Gemma 3's local layers: their KV
cache holds at most the window's tokens).

Which weights bitsandbytes stores in 4 bits follows trainers/models.py's rule (model_facts): every
nn.Linear but the output head. transformers 5.x keeps a Qwen3-MoE layer's experts as fused 3-D
parameters and its router as a parameter, not nn.Linear modules, so both stay at the compute dtype
under nf4. PEFT's all-linear LoRA does reach them (ParamWrapper, target_parameters gate_up_proj,
down_proj and the router's weight): r per expert on down_proj, 2 r per expert on the fused gate_up_proj
(gate's and up's adapters concatenated), r on the router. Only the decoder families in DESCRIBED are
described; another model_type is refused with the reason (UnknownArchitecture).
"""

from __future__ import annotations

from dataclasses import dataclass

# model_type -> (norm vectors per layer, whether q and k have their own per-head norms)
DESCRIBED = {
    "gemma3_text": (4, True),
    "llama": (2, False),
    "mistral": (2, False),
    "phi3": (2, False),
    "qwen2": (2, False),
    "qwen3": (2, True),
    "qwen3_moe": (2, True),
    "smollm3": (2, False),
}
# The leaf names of a layer's attention_shapes and mlp_shapes, in their order.
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
SLIDING = ("gemma3_text", "mistral", "phi3", "qwen2", "qwen3", "qwen3_moe", "smollm3")  # llama: none
GEMMA3_SLIDING_PATTERN = 6  # transformers' default: every 6th layer global, the others sliding


class UnknownArchitecture(ValueError):
    """A config whose model_type the memory model does not describe."""


@dataclass(frozen=True)
class Shape:
    """The sizes of a decoder-only transformer that memory depends on (a config.json's fields)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    experts: int = 0  # routed experts of each mixture-of-experts layer; 0: dense
    experts_per_token: int = 0
    expert_intermediate: int = 0
    moe_layers: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0  # layers whose KV cache holds at most sliding_window tokens
    qkv_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False

    @classmethod
    def from_config(cls, config: dict) -> Shape:
        """Raises KeyError naming a field the config lacks, UnknownArchitecture for a model_type not in
        DESCRIBED."""
        kind = config.get("model_type")
        if kind not in DESCRIBED:
            raise UnknownArchitecture(
                f"model_type {kind!r} is not an architecture the memory model describes (its terms follow "
                f"the decoder layers of {', '.join(DESCRIBED)}); use a model of one of those"
            )
        norms, qk_norm = DESCRIBED[kind]
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        experts = int(config.get("num_experts") or 0)
        window = config.get("sliding_window")
        sliding = sliding_layer_count(config, layers) if window and kind in SLIDING else 0
        return cls(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            experts=experts,
            experts_per_token=int(config["num_experts_per_tok"]) if experts else 0,
            expert_intermediate=int(config["moe_intermediate_size"]) if experts else 0,
            moe_layers=moe_layer_count(config, layers) if experts else 0,
            sliding_window=int(window) if sliding else None,
            sliding_layers=sliding,
            qkv_bias=bool(config.get("attention_bias", kind == "qwen2")),
            norms_per_layer=norms,
            qk_norm=qk_norm,
        )

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    def attention_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of one layer's attention projections: q, k, v, o."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [(h, q), (h, kv), (h, kv), (q, h)]

    def mlp_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of a dense layer's MLP: gate, up, down."""
        h, i = self.hidden, self.intermediate
        return [(h, i), (h, i), (i, h)]

    def linear_shapes(self) -> list[tuple[int, int]]:
        """Every nn.Linear of the decoder layers (PEFT's all-linear; what nf4 quantizes), one entry per
        layer's module."""
        return self.layers * self.attention_shapes() + self.dense_layers * self.mlp_shapes()

    @property
    def linear_params(self) -> int:
        return sum(a * b for a, b in self.linear_shapes())

    @property
    def expert_params(self) -> int:
        """The MoE layers' fused expert tensors (gate_up and down of every expert) and routers."""
        h = self.hidden
        return self.moe_layers * self.experts * (3 * h * self.expert_intermediate + h)

    @property
    def other_params(self) -> int:
        """Never quantized: embeddings, the head when untied, norms, attention biases, the experts."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = self.norms_per_layer * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        per_layer += q + 2 * kv if self.qkv_bias else 0
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * per_layer + self.hidden + self.expert_params

    @property
    def parameters(self) -> int:
        return self.linear_params + self.other_params

    def lora_params(self, rank: int, targets: tuple[str, ...] | None = None) -> int:
        """LoRA's A and B of every nn.Linear, and of each MoE layer's experts and router (module docstring);
        targets: the leaf names adapted (None: all-linear; a fused qkv_proj or gate_up_proj counted as its
        parts, the experts only under all-linear)."""
        h, e, i = self.hidden, self.experts, self.expert_intermediate
        if targets is not None:
            names = set(targets) | ({"q_proj", "k_proj", "v_proj"} if "qkv_proj" in targets else set())
            names |= {"gate_proj", "up_proj"} if "gate_up_proj" in targets else set()
            chosen = [s for s, n in zip(self.attention_shapes(), ATTENTION, strict=True) if n in names]
            mlp = [s for s, n in zip(self.mlp_shapes(), MLP, strict=True) if n in names]
            per_layer = [*(self.layers * chosen), *(self.dense_layers * mlp)]
            return sum(rank * (a + b) for a, b in per_layer)
        experts = 2 * rank * e * (h + 2 * i) + rank * e * (i + h) + rank * (h + e)
        return sum(rank * (a + b) for a, b in self.linear_shapes()) + self.moe_layers * experts

    def cached_tokens(self, tokens: int) -> int:
        """Tokens the KV cache holds over all layers for a sequence of `tokens`."""
        windowed = min(tokens, self.sliding_window) if self.sliding_layers else tokens
        return (self.layers - self.sliding_layers) * tokens + self.sliding_layers * windowed

    def layer_width(self) -> float:
        """The elements a layer keeps for backward per token (without checkpointing): about 10
        hidden-sized tensors (norms, attention, residuals) and 3 MLP-sized ones (gate, up, their
        product), averaged over the layers; an MoE layer's MLP-sized tensors are its routed experts'
        (num_experts_per_tok of them, each with its copy of the token's hidden state in and out) and
        the router's logits."""
        dense = 10 * self.hidden + 3 * self.intermediate
        routed = 10 * self.hidden + self.experts_per_token * (3 * self.expert_intermediate + 2 * self.hidden)
        return (self.dense_layers * dense + self.moe_layers * (routed + self.experts)) / self.layers

    def adapted_width(self) -> float:
        """The elements a layer's LoRA adapters take in per token, averaged over the layers: the input
        of every adapted nn.Linear (q, k and v each the hidden state, o the attention output, gate and
        up the hidden state, down the MLP's); in an MoE layer the router's and each routed expert's
        (gate_up the hidden state, down its MLP's). With lora_dropout > 0 PEFT's adapter computes
        lora_B(lora_A(dropout(x))): each of these inputs gets its own dropped-out copy, kept for
        backward with its mask."""
        attention = 3 * self.hidden + self.heads * self.head_dim
        dense = attention + 2 * self.hidden + self.intermediate
        routed = attention + self.hidden + self.experts_per_token * (self.hidden + self.expert_intermediate)
        return (self.dense_layers * dense + self.moe_layers * routed) / self.layers


def sliding_layer_count(config: dict, layers: int) -> int:
    """Layers with sliding-window attention (config has a sliding_window), as transformers builds them:
    its layer_types where given; Gemma 3: every layer but each sliding_window_pattern-th; Qwen2/3:
    with use_sliding_window, the layers from max_window_layers on; SmolLM3: with use_sliding_window,
    the layers without rotary embeddings; Mistral and Phi-3: every layer."""
    kind = config["model_type"]
    if config.get("layer_types"):
        return sum(t == "sliding_attention" for t in config["layer_types"])
    if kind == "gemma3_text":
        pattern = int(config.get("sliding_window_pattern", GEMMA3_SLIDING_PATTERN))
        return sum(bool((i + 1) % pattern) for i in range(layers))
    if kind in ("mistral", "phi3"):
        return layers
    if not config.get("use_sliding_window"):
        return 0
    if kind == "smollm3":
        return sum(not rope for rope in config.get("no_rope_layers") or [1] * layers)
    return max(layers - int(config.get("max_window_layers", layers)), 0)


def moe_layer_count(config: dict, layers: int) -> int:
    """Qwen3-MoE: the layers not in mlp_only_layers whose index + 1 is a multiple of decoder_sparse_step."""
    step = int(config.get("decoder_sparse_step", 1))
    dense = set(config.get("mlp_only_layers") or [])
    return sum(i not in dense and (i + 1) % step == 0 for i in range(layers))
