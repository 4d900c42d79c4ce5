"""`rlsweep models [HUB_ID]`: the architectures `random:<hub id>` builds, with their sizes, and the real
model shipped offline (`smollm2`)."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from orchestrator.views.tables import fits, print_table
from trainers.models import (
    NF4_BYTES_PER_WEIGHT,
    SMOLLM2,
    SMOLLM2_CONFIG,
    SMOLLM2_GGUF,
    SMOLLM2_HUB_ID,
    SMOLLM2_PACKAGE,
    bundled_models,
    model_facts,
    smollm2_problems,
)
from trainers.units import GIB

WEIGHTS_RULE = (
    f"weights: bf16 = 2 bytes a parameter; nf4 = bitsandbytes 4-bit with double quantization, as the trainers "
    f"load it: each nn.Linear weight but the output head at {NF4_BYTES_PER_WEIGHT:.5f} bytes (4 bits, an 8-bit "
    "absmax per 64 weights, an fp32 scale per 256 absmaxes), everything else bf16 (embeddings, output head, "
    "norms, biases, and fused MoE expert tensors, which are no nn.Linear). Weights only: training adds LoRA, "
    "optimizer state, activations and the KV cache (`rlsweep predict`)."
)


def family_name(hub_id: str) -> str:
    return json.loads(bundled_models()[hub_id].read_text())["_chat_family"]


def not_bundled(hub_id: str) -> tuple[list[str], str | None]:
    """A model that is not bundled (a hub id, or the path of a config.json or its folder): (lines saying
    where its config.json was read and its random twin by architecture and size, the name to show facts
    of), or (why its config.json cannot be read and the command that fetches it, None)."""
    from trainers.models import model_config, nearest_twin, parse_model

    hub_id = hub_id.removeprefix("random:")
    try:
        found = model_config(hub_id)  # a hub id's from the HF cache or fetched; a path's from disk
    except ValueError as exc:
        return [str(exc).removeprefix("model: ")], None
    try:
        twin, why = nearest_twin(found.config, hub_id, bundled_models())
    except ValueError as exc:  # a config without the sizes: its facts say why below
        return [f"{hub_id}: not bundled; architecture read from {found.where}; no twin: {exc}"], hub_id
    return [
        f"{hub_id}: not bundled; architecture read from {found.where}. fits, fitmap and predict use it as "
        f"is (--model {hub_id}); a run "
        + (
            "downloads its weights on first use."
            if parse_model(hub_id).kind == "hub"
            else "loads its folder."
        ),
        f"Random weights without a download: {why}: --set model=random:{twin}",
    ], hub_id


def real_model_line() -> str:
    """What `smollm2` is, its size, and whether it is installed here."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = f"{SMOLLM2_PACKAGE} {version(SMOLLM2_PACKAGE)} installed"
    except PackageNotFoundError:
        installed = f"{SMOLLM2_PACKAGE} not installed"
    problems = smollm2_problems()
    ready = "ready" if not problems else problems[0].removeprefix("model: ")
    config = SMOLLM2_CONFIG
    return (
        f"real weights offline: model {SMOLLM2} = {SMOLLM2_HUB_ID}, {model_facts(SMOLLM2).parameters / 1e9:.3f}B "
        f"parameters, vocab {config['vocab_size']}, {config['num_hidden_layers']} layers, "
        f"{config['num_key_value_heads']} KV heads, context {config['max_position_embeddings']}: the Q4_1 GGUF "
        f"file {SMOLLM2_GGUF} ({installed}; {ready}), dequantised to float32 once into the rlsweep cache"
    )


def quiet_transformers() -> None:
    """Phi-4-mini's published rope fields draw a notice from transformers as a model is built from them,
    no news here: transformers' verbosity set to errors, without importing it where it is not imported
    yet (the facts shipped or kept answer without it: trainers/_facts.py)."""
    import os
    import sys

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()


# The figures' headers, two lines each, so the table fits 80 columns.
FIGURES = ("params\n(B)", "vocab", "layers", "KV\nheads", "nf4\nGiB", "bf16\nGiB")


def models_table(facts, console, title: str | None = None) -> Table:
    """The models' table: a row per model with its full hub id where that fits the console's width; else
    each organisation on a row of its own ('google/') above its models' names ('gemma-3-4b-it'). title:
    instead of the bundled models' (a model not bundled: its own config.json)."""

    def table(grouped: bool) -> Table:
        said = title or f"{len(facts)} bundled model(s): use as random:<hub id>"
        if grouped and title is None:  # the organisation's row, then its models
            said = f"{len(facts)} bundled model(s): use as random:<organisation>/<name>"
        t = Table(title=said, title_justify="left", show_edge=not grouped, pad_edge=not grouped)
        t.add_column("hub id", overflow="fold")
        for header in FIGURES:
            t.add_column(header, justify="right")
        org = None
        for one in facts:
            name = one.hub_id
            if grouped:
                head, _, name = one.hub_id.rpartition("/")
                if head and head != org:
                    t.add_row(f"{head}/", *[""] * len(FIGURES))
                org = head
            t.add_row(
                name, f"{one.parameters / 1e9:.2f}", str(one.vocab), str(one.layers), str(one.kv_heads),
                f"{one.nf4_bytes / GIB:.2f}", f"{one.bf16_bytes / GIB:.2f}",
            )  # fmt: skip
        return t

    full = table(grouped=False)
    return full if fits(console, full) else table(grouped=True)


def cmd_models(args: argparse.Namespace) -> int:
    from orchestrator.cli._common import console, out

    quiet_transformers()

    if args.hub_id in (SMOLLM2, SMOLLM2_HUB_ID):
        out.print(real_model_line(), markup=False)
        return 0
    said = None
    if args.hub_id:
        hub_id = args.hub_id.removeprefix("random:")
        if hub_id not in bundled_models():
            said, hub_id = not_bundled(args.hub_id)
            if hub_id is None:
                console.print(said[0], markup=False)
                return 2
        try:
            facts = [model_facts(hub_id)]
        except (ValueError, KeyError, TypeError) as exc:  # a config transformers builds no model from
            for line in said or []:
                console.print(line, markup=False)
            reason = str(exc).splitlines()[0].split(". ")[0] if str(exc) else type(exc).__name__
            console.print(
                f"{hub_id}: transformers builds no model from its config.json: {reason}", markup=False
            )
            return 2
    else:  # by organisation, family, then size
        facts = sorted(
            map(model_facts, bundled_models()),
            key=lambda f: (f.hub_id.split("/")[0].lower(), family_name(f.hub_id), f.parameters),
        )
    table = models_table(facts, out, "not bundled: its own config.json" if said else None)
    print_table(out, table)
    out.print(WEIGHTS_RULE, markup=False)
    for line in said or []:
        out.print(line, markup=False)
    if not args.hub_id:
        out.print(real_model_line(), markup=False)
    return 0


def add_models(sub) -> None:
    p = sub.add_parser(
        "models",
        help="the models random:<hub id> builds without a download: parameters, shape, weights' size; and "
        "smollm2, the real model shipped offline",
    )
    p.add_argument("hub_id", nargs="?", help="one model (e.g. Qwen/Qwen3-8B); default: every bundled model")
    p.set_defaults(func=cmd_models)
