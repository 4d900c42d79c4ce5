"""Coefficients of the memory terms, fitted by bounded linear least squares (scipy's lsq_linear).

The objective, over non-negative coefficients c: each measured trial's relative error
(terms . c - peak) / (NOISE x peak), plus each coefficient's distance from its prior in units of its
spread (so a family with few trials keeps the prior where its trials say nothing), plus every
out-of-memory trial the fit predicts below its budget, pulled up to the budget with CENSOR_WEIGHT
times a measurement's weight (a censored observation: its peak was at least the budget; a trial killed
at its time limit is one too, at the peak it measured). The censored rows are found by iterating: fit, add
the oom trials predicted under their budget, fit again.
"""

from __future__ import annotations

import numpy as np

NOISE = 0.02  # a measured peak's relative noise between repeats of one configuration
CENSOR_ROUNDS = 5
# An oom trial's bound weighs this many times a measurement: it is a fact (the guard saw the peak
# pass the budget), so the fit bends its measured trials rather than predict it under the budget.
CENSOR_WEIGHT = 10.0


def fit(
    measured: np.ndarray,
    peaks: np.ndarray,
    censored: np.ndarray,
    budgets: np.ndarray,
    prior: np.ndarray,
    spread: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, their covariance) for measured (n x p) -> peaks (n), censored (m x p) at least
    budgets (m), prior (p) with spread (p)."""
    from scipy.optimize import lsq_linear  # 1 s of import: paid by the first fit, not by every CLI start

    width = len(prior)
    rows = [measured / (NOISE * peaks[:, None]), np.diag(1.0 / spread)]
    targets = [np.full(len(peaks), 1.0 / NOISE), prior / spread]
    active = np.zeros(len(budgets), dtype=bool)
    coefficients, a = prior, np.diag(1.0 / spread)
    for _ in range(CENSOR_ROUNDS):
        extra_rows = CENSOR_WEIGHT * censored[active] / (NOISE * budgets[active, None])
        a = np.vstack([*rows, extra_rows.reshape(-1, width)])
        b = np.concatenate([*targets, np.full(int(active.sum()), CENSOR_WEIGHT / NOISE)])
        coefficients = lsq_linear(a, b, bounds=(0.0, np.inf), method="bvls").x
        below = censored @ coefficients < budgets
        if not (below & ~active).any():
            break
        active |= below
    return coefficients, np.linalg.pinv(a.T @ a)


def predictive_sd(terms: np.ndarray, covariance: np.ndarray, peak: float) -> float:
    """The standard deviation of a predicted peak: the coefficients' uncertainty along `terms`, and a
    measurement's own noise."""
    return float(np.sqrt(terms @ covariance @ terms + (NOISE * peak) ** 2))
