"""How fast on another card: the H100's measured times scaled to a named card, with the basis and an
interval, or plainly "not measured on this card".

Every time figure here (h100_times.json, h100_speed.json) was measured on one H100 80GB HBM3 (SXM). For
another card a part of a trial's time is scaled by the ratio of the figure that bounds it:

- decode (a generation, a synthetic probe's prefill and windows): by memory bandwidth, H100's / the
  card's (each decode step reads the weights and the KV cache);
- the training step: by dense BF16 tensor throughput, H100's / the card's;
- start-up and the first step's warm-up (process, imports, model build, compilation) stay the H100's:
  they are bound by the host, not the card.

On the H100 decode was launch-bound (orchestrator/judging/speed_model.py: ms per token hardly moves from 2
to 16 sequences), and neither part was measured against a card's bandwidth or compute, so the scaled
figure is one end of the interval and the H100's own figure the other: a launch-bound part runs about
as fast on any card (with as fast a host), a bandwidth- or compute-bound part at the ratio.

A card registered by its memory alone (orchestrator/judging/cards.py: `24GB` is a 3090 or a 4090) has
no one speed: the estimate says so and asks for the card's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MEASURED_CARD = "H100-80GB"  # the card h100_times.json and h100_speed.json were measured on


@dataclass(frozen=True)
class CardSpeed:
    """A card's public figures: memory bandwidth (GB/s) and dense BF16 tensor throughput (TFLOPS; with
    FP32 accumulation, as training runs it)."""

    name: str
    bandwidth_gbs: float
    tflops: float


# Public figures, each from its maker's page named beside it. Dense (no sparsity) BF16/FP16 tensor
# TFLOPS with FP32 accumulation; GeForce cards run FP32 accumulation at half their FP16-accumulate rate.
_SPEEDS = (
    # NVIDIA H100 Tensor Core GPU datasheet (SXM): 3.35 TB/s; BF16 1,979 TFLOPS with sparsity.
    (("h10080gb", "h100", "h10080", "h100sxm", "h10080gbhbm3"), CardSpeed("H100 80GB HBM3", 3350, 989)),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): 4.8 TB/s; BF16 1,979 TFLOPS with sparsity.
    (("h200", "h200sxm", "h200141gb"), CardSpeed("H200", 4800, 989)),
    # NVIDIA A100 Tensor Core GPU datasheet: 80GB SXM 2,039 GB/s, 40GB 1,555 GB/s; BF16 312 TFLOPS.
    (("a10080gb", "a10080", "a10080gib"), CardSpeed("A100 80GB", 2039, 312)),
    (("a10040gb", "a10040", "a10040gib"), CardSpeed("A100 40GB", 1555, 312)),
    # NVIDIA L4 datasheet: 300 GB/s; BF16 242 TFLOPS with sparsity.
    (("l4", "nvidial4"), CardSpeed("L4", 300, 121)),
    # NVIDIA A10 datasheet: 600 GB/s; BF16 125 TFLOPS (250 with sparsity).
    (("a10", "nvidiaa10"), CardSpeed("A10", 600, 125)),
    # NVIDIA L40S datasheet: 864 GB/s; BF16 362 TFLOPS (733 with sparsity).
    (("l40s",), CardSpeed("L40S", 864, 362)),
    # NVIDIA RTX A6000 datasheet: 768 GB/s; tensor 309.7 TFLOPS with sparsity.
    (("a6000", "rtxa6000"), CardSpeed("RTX A6000", 768, 154.8)),
    # NVIDIA Ada Lovelace architecture whitepaper, appendix: RTX 4090 1,008 GB/s, FP16 tensor with FP32
    # accumulate 165.2 TFLOPS; RTX 4080 716.8 GB/s, 97.5 TFLOPS.
    (("rtx4090",), CardSpeed("RTX 4090", 1008, 165.2)),
    (("rtx4080",), CardSpeed("RTX 4080", 716.8, 97.5)),
    # NVIDIA Ampere GA102 whitepaper: RTX 3090 936 GB/s, FP16 tensor with FP32 accumulate 71 TFLOPS.
    (("rtx3090",), CardSpeed("RTX 3090", 936, 71)),
    # NVIDIA RTX Blackwell GPU architecture whitepaper: RTX 5090 1,792 GB/s, FP16 tensor with FP32
    # accumulate 209.5 TFLOPS.
    (("rtx5090",), CardSpeed("RTX 5090", 1792, 209.5)),
    # NVIDIA T4 datasheet: 320 GB/s; FP16 tensor 65 TFLOPS (Turing: no BF16, so training runs in FP16).
    (("t4", "teslat4", "nvidiat4"), CardSpeed("T4", 320, 65)),
    # NVIDIA V100 datasheet (SXM2): 900 GB/s at 16 and 32 GB; tensor 125 TFLOPS (Volta: no BF16, FP16).
    (("v10016gb", "v10032gb", "v100", "teslav100"), CardSpeed("V100", 900, 125)),
    # NVIDIA RTX A4000 datasheet: 448 GB/s, tensor 153.4 TFLOPS with sparsity; RTX A5000: 768 GB/s, 222.2.
    (("a4000", "rtxa4000"), CardSpeed("RTX A4000", 448, 76.7)),
    (("a5000", "rtxa5000"), CardSpeed("RTX A5000", 768, 111.1)),
)
SPEEDS: dict[str, CardSpeed] = {key: speed for keys, speed in _SPEEDS for key in keys}
MEASURED = SPEEDS["h100"]


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def speed_of(typed: str, card_name: str) -> CardSpeed | None:
    """The speed figures of the card a user named (`typed`, resolved by cards.card to `card_name`): by
    the name typed (`4090` is the RTX 4090, the maker's prefix optional), else by the card's registered
    name; None for a card known by its memory alone (`24GB`) or one without figures here."""
    key = _key(typed)
    for k in (key, "rtx" + key, "nvidia" + key, _key(card_name)):
        if k in SPEEDS:
            return SPEEDS[k]
    return None


@dataclass(frozen=True)
class Scale:
    """The factors that turn an H100 time into `card`'s: decode (bandwidth ratio) and the training
    step (compute ratio); 1 and 1 on the H100 itself."""

    card: CardSpeed
    decode: float
    train: float

    @classmethod
    def to(cls, card: CardSpeed) -> Scale:
        return cls(card, MEASURED.bandwidth_gbs / card.bandwidth_gbs, MEASURED.tflops / card.tflops)

    @property
    def measured(self) -> bool:
        return self.card == MEASURED

    def ends(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The (decode, train) factors at the interval's fast end and its slow end (module docstring):
        between the H100's own figure (launch-bound) and the scaled one."""
        return (min(1.0, self.decode), min(1.0, self.train)), (max(1.0, self.decode), max(1.0, self.train))

    def basis(self) -> str:
        """What the scaled figures rest on, in words."""
        m, c = MEASURED, self.card
        return (
            f"scaled from the H100's measured times: decode x{self.decode:.2f} (memory bandwidth "
            f"{m.bandwidth_gbs:,.0f} / {c.bandwidth_gbs:,.0f} GB/s), training step x{self.train:.2f} (dense "
            f"BF16 {m.tflops:g} / {c.tflops:g} TFLOPS), start-up and warm-up as on the H100; the interval "
            "runs from the H100's own times (launch-bound, as decode was there) to the fully scaled ones"
        )


@dataclass(frozen=True)
class AssumedCard:
    """The card an estimate is made for: `name` (cards.Card.name), its usable memory (for packing),
    its speed figures (None: not known by name, `24GB`), and how it was chosen (`how`: 'given with
    --card 4090', 'detected here', 'no GPU detected here')."""

    name: str
    usable_gib: float
    speed: CardSpeed | None
    how: str

    @property
    def scale(self) -> Scale | None:
        """The factors from the H100's times to this card's; None where its speed is not known."""
        return Scale.to(self.speed) if self.speed is not None else None

    @property
    def on_measured_card(self) -> bool:
        return self.speed == MEASURED

    def words(self) -> str:
        """'RTX 4090 (given with --card 4090)'."""
        name = self.speed.name if self.speed is not None else self.name
        return f"{name} ({self.how})"


# The decode step the speed line quotes where no H100 row has the stack and model: a trial alone, 8
# sequences at 512 tokens of context (decode is launch-bound there: the figure hardly moves with either).
LINE_SEQUENCES, LINE_CONTEXT = 8, 512


def h100_decode_ms(stack: str, model: str, times: dict, speed) -> tuple[float, str] | None:
    """ms per generated token on the H100 and its basis: its rows' median (h100_times.json, `measured`)
    or the speed model's (`predicted`); None where neither can say."""
    from orchestrator.judging.speed_model import shape_of

    figures = times["times"].get(f"{stack}|{model.removeprefix('random:')}")
    if figures is not None:
        return figures["ms_per_token"], "measured"
    try:
        shape = shape_of(model)
        return speed.decode_ms(stack, shape, LINE_SEQUENCES, LINE_CONTEXT), "predicted"
    except ValueError:
        return None


def decode_line(name: str, speed_figures: CardSpeed | None, pairs, times=None, speed=None) -> str:
    """One line: ms per generated token on the card `name` (speed figures `speed_figures`, None: not
    known by name) for each (stack, model) of `pairs`, with its basis and, on another card than the
    H100, the interval (module docstring), headed by the launch-bound end (the H100's own figure); or
    plainly that the card's speed is not known."""
    from orchestrator.judging.duration import load_times
    from orchestrator.judging.speed_model import load_speed_model
    from trainers import stacks

    if speed_figures is None:
        return (
            f"Speed: not measured on {name}, and no speed figures for it (a card named by its memory: name "
            "the GPU, e.g. --card 4090, for an estimate scaled from the H100's)"
        )
    times, speed = times or load_times(), speed or load_speed_model()
    scale = Scale.to(speed_figures)
    parts = []
    for stack, model in pairs:
        found = h100_decode_ms(stack, model, times, speed)
        who = f"{stacks.label(stack)} {model.split('/')[-1]}"
        if found is None:
            parts.append(f"{who} unknown (no H100 row, no known architecture)")
            continue
        ms, basis = found
        if scale.measured:
            parts.append(f"{who} {ms:.0f} ({basis})")
        else:
            low, high = sorted((ms, ms * scale.decode))
            parts.append(f"{who} {ms:.0f} ({low:.0f}-{high:.0f}; {basis} on an H100)")
    how = (
        "its rows' median, or the speed model's"
        if scale.measured
        else "launch-bound, so headed by the H100's own figure (as fast with as fast a host), up to the "
        f"H100's x{scale.decode:.2f} by memory bandwidth ({MEASURED.bandwidth_gbs:,.0f} / "
        f"{speed_figures.bandwidth_gbs:,.0f} GB/s)"
    )
    return f"Decode on the {speed_figures.name}, ms per generated token ({how}): " + ", ".join(parts)
