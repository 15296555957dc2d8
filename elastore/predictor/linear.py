"""Least-squares filter fitting shared by the ProRenaTa predictors."""

from __future__ import annotations

import numpy as np

from elastore.predictor.base import FloatArray

HUBER_C = 1.345  # the usual 95 %-efficiency Huber constant, in robust-sigma units


def fit_filter(
    design: FloatArray, target: FloatArray, *, weights: FloatArray | None = None,
    huber: bool = False, ridge: float = 1e-6, iterations: int = 3,
) -> FloatArray:
    """Weighted ridge least squares, optionally Huber-reweighted (IRLS).

    Rows with a NaN anywhere are ignored. ``ridge`` is relative to the mean diagonal of
    the normal matrix, so it is scale-free. Returns zeros if no row is usable.
    """
    ok = ~np.isnan(target) & ~np.isnan(design).any(axis=1)
    a, y = design[ok], target[ok]
    p = design.shape[1]
    if a.shape[0] == 0:
        return np.zeros(p)
    base = np.ones(len(y)) if weights is None else weights[ok]
    w = base.copy()
    beta = np.zeros(p)
    for _ in range(iterations if huber else 1):
        aw = a * w[:, None]
        normal = a.T @ aw
        lam = ridge * max(float(np.trace(normal)) / p, 1e-12)
        beta = np.linalg.solve(normal + lam * np.eye(p), aw.T @ y)
        if not huber:
            break
        r = y - a @ beta
        s = 1.4826 * float(np.median(np.abs(r)))
        if s <= 0:
            break
        c = HUBER_C * s
        w = base * np.minimum(1.0, c / np.maximum(np.abs(r), 1e-300))
    return beta
