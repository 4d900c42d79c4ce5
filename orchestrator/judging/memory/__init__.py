"""The memory model: a trial's peak memory predicted before it runs.

Per family (stack, mode, model, quantization, dtype, gradient checkpointing, fast_inference),
peak = static + generation + training parts, each a sum of analytical terms computed from the model's
config times coefficients fitted on the trials measured so far (non-negative, pulled towards a prior;
an `oom` trial counts as a peak at least its budget, a `timeout` one as a peak at least the one it
measured). With no trial measured, the prior predicts, and says so (basis "prior"). Where no number can be given (no config for the model, vLLM's pool without
measured trials) the prediction is `unknown`, with the reason.

    model = MemoryModel.fit(trials_rows)        # trials.parquet rows as dicts
    p = model.predict(spec)                     # Prediction
    p.describe(), p.verdict(16.0)               # 'predicted 17.9 GiB (16.8-19.0)', 'uncertain'

In a sweep, Forecast makes each trial's prediction just before it runs, from the trials finished
before it (the trial's row records it), and informative_order puts the trials that teach the model
most first.
"""

from orchestrator.judging.memory._family import SIMULATED
from orchestrator.judging.memory._forecast import Forecast, informative_order
from orchestrator.judging.memory._interval import RATE
from orchestrator.judging.memory._model import (
    DOES_NOT_FIT,
    FAMILY,
    FITS,
    FITTED,
    MEASURES,
    PRIOR,
    UNCERTAIN,
    UNKNOWN,
    FamilyFit,
    MemoryModel,
    Prediction,
    family_label,
    spec_of,
)
from orchestrator.judging.memory._simulated import simulated_rows
from orchestrator.judging.memory._terms import GENERATION, PARTS, STATIC, TRAINING

__all__ = [
    "DOES_NOT_FIT",
    "FAMILY",
    "FITS",
    "FITTED",
    "GENERATION",
    "MEASURES",
    "PARTS",
    "PRIOR",
    "RATE",
    "SIMULATED",
    "STATIC",
    "TRAINING",
    "UNCERTAIN",
    "UNKNOWN",
    "FamilyFit",
    "Forecast",
    "MemoryModel",
    "Prediction",
    "family_label",
    "informative_order",
    "simulated_rows",
    "spec_of",
]
