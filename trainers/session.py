"""A probe session's protocol, shared by the trainer child (trainers/_session.py) and its supervisor
(orchestrator/running/session.py).

A session is one trainer child that loads a model once and then runs probe shapes one after another,
each a trial of its own (its own spec.json, events file, status and peak). Shapes share a session
when their settings differ only in SHAPE_FIELDS (K, B, the lengths) and in their bookkeeping:
session_key says which. The child is started as `python -m trainers --session <spec.json>` with the
first shape's settings and its events path pointed at the session's own stream; there it emits READY
once the model is loaded (its start-up) and again after each shape, once the shape's memory is
released and the peak marks are reset, and POISONED where the process cannot run another shape (a
CUDA error that poisons the context). The supervisor sends each shape as a line on the child's stdin
(the path of its spec.json) only after a READY, so a shape's window of memory samples starts after the
previous shape's memory was released.
"""

from __future__ import annotations

import json
from typing import Any

SESSION_FLAG = "--session"
READY, POISONED = "ready", "poisoned"

# What may differ between the shapes of one session: the shape of a probe step, and the per-trial
# bookkeeping. Every other setting (model, stack, quantization, adapter, dtype, budget, ...) is the
# session's: a field added later splits sessions until it is named here.
SHAPE_FIELDS = frozenset(
    (
        "num_generations",
        "batch_size",
        "micro_batch_size",
        "grad_accum",
        "max_prompt_length",
        "max_completion_length",
    )
)
BOOKKEEPING_FIELDS = frozenset(
    ("max_steps", "probe_steps", "hold_at_step", "events_path", "output_dir", "trial_key", "sweep")
)


def session_key(spec: Any) -> str:
    """The settings a session is started with (TrialSpec.to_dict less the shape and bookkeeping): two
    trials run in one session exactly when their keys are equal."""
    kept = {k: v for k, v in spec.to_dict().items() if k not in SHAPE_FIELDS | BOOKKEEPING_FIELDS}
    return json.dumps(kept, sort_keys=True, default=str)
