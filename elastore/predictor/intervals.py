"""Forecast paths and calibrated quantiles for any point predictor.

:class:`Intervals` wraps a :class:`~elastore.predictor.base.Predictor` (scikit-learn's
meta-estimator style: same ``fit`` / ``update``) and, after every observation, keeps the
forecast path it made for the next ``horizons`` steps. When a value arrives it scores every
earlier path that forecast it: the error at horizon h is ``log1p(actual) -
log1p(forecast)``, kept over a sliding window of the last ``window`` origins. A quantile
of the forecast at horizon h is the forecast shifted by that quantile of the errors at h
(split-conformal, per horizon, in log space where Wikipedia's errors are about
symmetric). It assumes only that the near future errs as the recent past did; it adapts as
the errors change, and its coverage is measured, never assumed (``predict evaluate
--quantiles``).

With fewer than ``min_errors`` errors at a horizon it pools the errors of all horizons up
to it; with too few of those too (a young series), it uses how much the history itself
moved over h steps (the errors persistence would have made: a spread no worse than the
history's own), and with no history at all a log-normal prior (sigma 0.1). It says so in
:attr:`Intervals.calibrated`.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Self

import numpy as np
import numpy.typing as npt

from elastore.predictor.base import FloatArray, Predictor

PRIOR_SIGMA = 0.1  # log-space spread with no error and no history at all
MIN_MOVES = 10  # moves of the history needed to use them as a spread
#: quantile levels and weights of the load scenarios a planner weighs: the mid-points of
#: bins that are finer in the upper tail, where a shortfall violates the SLO
SCENARIO_EDGES = (0.0, 0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98, 0.995, 1.0)


def scenario_levels() -> tuple[FloatArray, FloatArray]:
    """(levels, weights): quantile levels of the scenarios and the probability each
    stands for."""
    e = np.asarray(SCENARIO_EDGES)
    return (e[:-1] + e[1:]) / 2, np.diff(e)


def describe(pred: Predictor, iv: Intervals | None = None) -> str:
    """What produced a forecast, for a decision's reason: the method, or the fallback it
    used and why, and whether its quantiles are calibrated yet."""
    used = pred.name
    if pred.fallback_name is not None:
        used = (f"{pred.fallback_name} (fallback: {pred.n_seen_} of {pred.min_history} steps "
                "of history)")
    if iv is not None and not iv.calibrated:
        used += " (quantiles not yet calibrated on its own errors: a wide prior)"
    return used


def row_quantiles(values: FloatArray, counts: npt.NDArray[np.int64],
                  levels: FloatArray) -> FloatArray:
    """(len(levels), rows): each row's quantiles of its first ``counts[r]`` values (>= 1),
    by ``np.quantile``'s default (linear) rule, for rows of different counts at once."""
    rows, width = values.shape
    filled = np.where(np.arange(width)[None, :] < counts[:, None], values, np.inf)
    ordered = np.sort(filled, axis=1)
    pos = levels[:, None] * (counts[None, :] - 1)  # (levels, rows)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, counts[None, :] - 1)
    r = np.arange(rows)[None, :]
    a, b = ordered[r, lo], ordered[r, hi]
    return np.asarray(a + (b - a) * (pos - lo))


class Intervals:
    """A point predictor with the record of its own errors per horizon."""

    def __init__(self, predictor: Predictor, horizons: int, window: int = 672,
                 min_errors: int = 48) -> None:
        if horizons < 1 or window < 1:
            raise ValueError("horizons and window must be >= 1")
        self.p = predictor
        self.horizons = horizons
        self.window = window
        self.min_errors = min_errors
        self._paths: deque[tuple[int, FloatArray]] = deque(maxlen=horizons)
        # the last ``window`` errors per horizon, each row a ring (the order is not needed:
        # only quantiles are taken): 8 bytes an error, where a deque of floats takes 32,
        # and whole rows' quantiles in one call
        self._err: FloatArray = np.zeros((horizons, window))
        self._count = np.zeros(horizons, dtype=np.int64)  # errors held per horizon
        self._next = np.zeros(horizons, dtype=np.int64)  # where the next one goes
        self._path: FloatArray = np.zeros(horizons)
        self._history_log: FloatArray = np.zeros(0)

    @property
    def name(self) -> str:
        return self.p.name

    def fit(self, history: FloatArray, replay: int = 0) -> Self:
        """Fit on ``history``; the last ``replay`` values are fed one by one instead, so
        the errors of forecasts made inside the history are known at once."""
        history = np.asarray(history, dtype=float)
        replay = max(0, min(replay, len(history) - 1))
        fitted = history[: len(history) - replay]  # the replayed values are added as seen
        good = fitted[np.isfinite(fitted) & (fitted >= 0)]
        self._history_log = np.log1p(good)[-(self.window + self.horizons):]
        self.p.fit(history[: len(history) - replay])
        self._paths.clear()
        self._count[:] = 0
        self._next[:] = 0
        self._remember()
        for v in history[len(history) - replay:]:
            self.update(float(v))
        return self

    def update(self, value: float) -> None:
        value = float(value)
        n = self.p.n_seen_ + 1  # the index of this value, counted from 1
        if math.isfinite(value) and value >= 0:
            self._history_log = np.append(self._history_log, math.log1p(value))[
                -(self.window + self.horizons):]
            for origin, path in self._paths:
                h = n - origin
                if 1 <= h <= self.horizons:
                    self._add(h - 1, math.log1p(value) - math.log1p(path[h - 1]))
        self.p.update(value)
        self._remember()

    def _add(self, i: int, error: float) -> None:
        self._err[i, self._next[i]] = error
        self._next[i] = (self._next[i] + 1) % self.window
        self._count[i] = min(self._count[i] + 1, self.window)

    def _own(self, i: int) -> FloatArray:
        """The errors held at horizon ``i + 1`` (a ring fills from its start)."""
        return self._err[i, :self._count[i]]

    def _remember(self) -> None:
        self._path = np.array([self.p.forecast(h) for h in range(1, self.horizons + 1)])
        self._paths.append((self.p.n_seen_, self._path))

    # -- forecasts ---------------------------------------------------------------------------
    def path(self) -> FloatArray:
        """The point forecasts for the next 1..horizons steps."""
        return self._path.copy()

    def _basis(self, h: int) -> tuple[str, int]:
        """Which errors the quantiles at horizon ``h`` rest on, as a key that is the same
        for horizons resting on the same errors: its own; pooled over the horizons up to h
        (the pooled sets are nested, so equal counts are equal sets); the history's moves
        over a lag."""
        if self._count[h - 1] >= self.min_errors:
            return ("own", h)
        pooled = int(self._count[:h].sum())
        if pooled >= self.min_errors:
            return ("pooled", pooled)
        lag = min(h, len(self._history_log) - MIN_MOVES)
        if lag >= 1:
            return ("moves", lag)
        return ("pooled", pooled)

    def errors(self, h: int) -> FloatArray:
        """The log errors the quantiles at horizon ``h`` rest on: its own; pooled over the
        horizons up to h when few; the history's own moves over h steps when fewer still
        (empty: none of these)."""
        kind, n = self._basis(h)
        if kind == "own":
            return self._own(h - 1).copy()
        if kind == "moves":
            hist = self._history_log
            moves = hist[n:] - hist[:-n]
            return np.concatenate([moves, -moves])  # a rise or a fall of the same size
        return np.concatenate([self._own(i) for i in range(h)])

    @property
    def calibrated(self) -> bool:
        """Whether every horizon has errors of its own to calibrate on."""
        return bool(np.all(self._count >= self.min_errors))

    def quantile_paths(self, levels: FloatArray) -> FloatArray:
        """(len(levels), horizons): the forecast path at each quantile level."""
        levels = np.asarray(levels, dtype=float)
        out = np.empty((len(levels), self.horizons))
        base = np.log1p(np.maximum(self._path, 0.0))
        own = self._count >= self.min_errors
        if own.any():  # the horizons on their own errors, all at once
            rows = np.flatnonzero(own)
            out[:, rows] = row_quantiles(self._err[rows], self._count[rows], levels)
        done: dict[tuple[str, int], FloatArray] = {}  # horizons on the same errors
        for h in (int(x) + 1 for x in np.flatnonzero(~own)):
            key = self._basis(h)
            if key not in done:
                err = self.errors(h)
                if err.size:
                    done[key] = np.quantile(err, levels)
                else:
                    from scipy.stats import norm

                    done[key] = norm.ppf(levels) * PRIOR_SIGMA
            out[:, h - 1] = done[key]
        # uncertainty never shrinks with lead time: each upper quantile's shift is the
        # largest of the horizons up to h, each lower one's the lowest. Without this, errors
        # calibrated on different origins per horizon can make a mid-horizon bump of risk
        # that a planner re-planning every period keeps seeing ahead of it, and so defers a
        # scale-in for ever (measured on the operator's horizon test).
        up, down = levels > 0.5, levels < 0.5
        out[up] = np.maximum.accumulate(out[up], axis=1)
        out[down] = np.minimum.accumulate(out[down], axis=1)
        return np.maximum(np.expm1(base[None, :] + out), 0.0)

    def interval(self, h: int, coverage: float) -> tuple[float, float]:
        """The central ``coverage`` interval of the forecast ``h`` steps ahead."""
        lo, hi = (1 - coverage) / 2, 1 - (1 - coverage) / 2
        q = self.quantile_paths(np.array([lo, hi]))[:, h - 1]
        return float(q[0]), float(q[1])
