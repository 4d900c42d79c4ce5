"""GPU cards by name: each common card's usable memory, registered in one place (CARDS), so a budget can
be given as `--card 24GB` without looking numbers up. A new card is one `_card(...)` line below.

Usable memory is the card's total as torch reports it (torch.cuda.get_device_properties().total_memory,
the figure mem_get_info's total and trials.parquet's gpu_total_gib read): what the driver leaves a
process, less than the maker's nominal figure and less than nvidia-smi's total.

The CUDA context and what libraries hold outside torch's allocator are NOT subtracted here. A budget
(memory.budget_gib, the predictor's verdicts) is compared with the process's whole NVML peak, and that
peak already holds both: the memory model predicts the NVML peak of the process (context and
outside-allocator memory included), the guard kills on the process's NVML memory passing the budget, and
under an emulated budget the allocator cap is the budget less what the process holds outside torch
(trainers/device.py, AllocatorCap). Subtracting them from the card as well would count them twice. On the
H100 (bench/data/h100-2026-11-26) the context measured 0.51 GiB and 0.75 GiB more lay outside torch's
allocator by the end of a step; both are inside each trial's measured peak_device_gib.

measured: the usable figure was read on that card by a trial here; the others are the maker's nominal
capacity (memory sized in binary units: a "24 GB" card holds 24 GiB of chips), not measured: the driver
keeps some of it (0.82 GiB of the H100's 80), so a boundary within a GiB of such a card's figure is
optimistic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tasks.names import did_you_mean

GIB_PER_MIB = 1 / 1024
# The H100's nvidia-smi total (81559 MiB) less torch's total_memory on it (79.18 GiB): what torch does not
# see of nvidia-smi's figure, measured there and taken for the H200 (whose torch figure is not measured).
H100_SMI_GIB = 81559 * GIB_PER_MIB
H100_TORCH_GIB = 79.1787109375  # gpu_total_gib of every H100 trial in bench/data/h100-2026-11-26
SMI_TO_TORCH_GIB = H100_SMI_GIB - H100_TORCH_GIB


@dataclass(frozen=True)
class Card:
    """A card: its name, its usable memory (GiB), where the figure comes from, and the names it answers to."""

    name: str
    usable_gib: float
    source: str
    measured: bool
    aliases: tuple[str, ...] = ()
    typed: str = field(default="", compare=False)  # the name a user asked for it by (`4090` of 24GB)

    def describe(self) -> str:
        """'H100-80GB (79.18 GiB usable, measured: ...)'."""
        kind = "measured" if self.measured else "not measured"
        return f"{self.name} ({self.usable_gib:.2f} GiB usable; {kind}: {self.source})"


CARDS: dict[str, Card] = {}
_BY_ALIAS: dict[str, Card] = {}


def _key(text: str) -> str:
    """How a card's name is matched: case, spaces, dashes and underscores ignored (`A100 80GB` = `a100-80gb`)."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _card(name: str, usable_gib: float, source: str, measured: bool = False, aliases: tuple[str, ...] = ()):
    card = Card(name, usable_gib, source, measured, aliases)
    for alias in (name, *aliases):
        key = _key(alias)
        if key in _BY_ALIAS:
            raise ValueError(f"card alias {alias!r} of {name} is {_BY_ALIAS[key].name}'s already")
        _BY_ALIAS[key] = card
    CARDS[name] = card
    return card


_NOMINAL = "the maker's figure"
_card("16GB", 16.0, f"{_NOMINAL} (RTX 4060 Ti 16GB, 4070 Ti Super, 4080, 5060 Ti, 5070 Ti, 5080)",
      aliases=("16gib", "rtx4080", "rtx4080super", "rtx4070tisuper", "rtx4060ti16gb", "rtx5080", "rtx5070ti",
               "rtx5060ti"))  # fmt: skip
_card("24GB", 24.0, f"{_NOMINAL} (RTX 3090, 3090 Ti, 4090)",
      aliases=("24gib", "rtx3090", "rtx3090ti", "rtx4090"))  # fmt: skip
_card("T4", 16.0, f"{_NOMINAL} (NVIDIA T4 16 GB; nvidia-smi shows 15360 MiB with ECC on)",
      aliases=("teslat4", "nvidiat4"))  # fmt: skip
_card("V100-16GB", 16.0, f"{_NOMINAL} (Tesla V100 16 GB)", aliases=("v10016", "v10016gib", "teslav10016gb"))
_card("A4000", 16.0, f"{_NOMINAL} (RTX A4000 16 GB)", aliases=("rtxa4000",))
_card("A5000", 24.0, f"{_NOMINAL} (RTX A5000 24 GB)", aliases=("rtxa5000",))
_card("L4", 24.0, f"{_NOMINAL} (NVIDIA L4 24 GB)", aliases=("nvidial4",))
_card("A10", 24.0, f"{_NOMINAL} (NVIDIA A10 24 GB)", aliases=("nvidiaa10", "a10g"))
_card("V100-32GB", 32.0, f"{_NOMINAL} (Tesla V100 32 GB)", aliases=("v10032", "v10032gib", "teslav10032gb"))
_card("32GB", 32.0, f"{_NOMINAL} (RTX 5090)", aliases=("32gib", "rtx5090"))
_card("A100-40GB", 40.0, f"{_NOMINAL} (A100 40 GB)", aliases=("a10040", "a10040gib", "40gb", "40gib"))
_card("48GB", 48.0, f"{_NOMINAL} (L40S, L40, RTX A6000, RTX 6000 Ada)",
      aliases=("48gib", "l40s", "l40", "a6000", "rtxa6000", "rtx6000ada"))  # fmt: skip
_card("A100-80GB", 80.0, f"{_NOMINAL} (A100 80 GB)", aliases=("a10080", "a10080gib"))
_card("H100-80GB", H100_TORCH_GIB,
      "torch's total_memory on an H100 80GB HBM3 (nvidia-smi: 81559 MiB), bench/data/h100-2026-11-26",
      measured=True, aliases=("h100", "h10080", "h100sxm", "h10080gbhbm3", "80gb", "80gib"))  # fmt: skip
_card("H200", 143771 * GIB_PER_MIB - SMI_TO_TORCH_GIB,
      f"nvidia-smi's 143771 MiB less what torch did not see of the H100's nvidia-smi total "
      f"({SMI_TO_TORCH_GIB:.2f} GiB); torch's own figure not measured",
      aliases=("h200141gb", "h200sxm", "141gb"))  # fmt: skip


class UnknownCard(ValueError):
    """A card name the registry does not know; the message names it, the known cards and the fix."""


# What a card's name may go without: `--card 4090` is the RTX 4090, `--card l4` NVIDIA's L4.
_MAKER_PREFIXES = ("", "rtx", "nvidia")


def card(name: str) -> Card:
    """The card `name` names (any alias, case and dashes ignored, the maker's prefix optional: `4090`
    is `rtx4090`), else UnknownCard."""
    key = _key(name)
    found = next((_BY_ALIAS[p + key] for p in _MAKER_PREFIXES if key and p + key in _BY_ALIAS), None)
    if found is None:
        started = [c for c in CARDS if key and _key(c).startswith(key)]  # `a100`: which of the two
        hint = (
            f"did you mean {' or '.join(repr(c) for c in started)}? available: {', '.join(CARDS)}"
            if started
            else did_you_mean(name, CARDS)
        )
        raise UnknownCard(
            f"--card {name!r}: not a known card; {hint}. Use one of these names (or an "
            f"alias: rtx4090, l40s, h100, a100-80gb...), or give the memory itself with --budget-gib GIB"
        )
    return found


def known_cards() -> str:
    """Every card with its usable memory, one a line (for --help and errors)."""
    return "\n".join(c.describe() for c in CARDS.values())
