"""The online predictor interface shared by every forecasting method.

Modelled on scikit-learn's estimators, but online: ``fit`` on an initial segment, then one
``update`` per new observation, and ``forecast(h)`` for the value ``h`` steps after the last
observation. A NaN observation is a gap: predictors must carry on across it. Forecasts are
never NaN and never negative (they are request rates).
"""

from __future__ import annotations

import abc
from typing import Self

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Predictor(abc.ABC):
    """Base class. Subclasses implement ``_fit``, ``_update`` and ``_forecast``."""

    #: The method name used on the CLI and in reports.
    name: str = "predictor"

    def __init__(self) -> None:
        self.n_seen_ = 0
        self.last_good_: float = 0.0

    def fit(self, history: FloatArray) -> Self:
        """Initialise from an initial segment (may contain NaN gaps)."""
        history = np.asarray(history, dtype=np.float64)
        self.n_seen_ = len(history)
        good = history[~np.isnan(history)]
        self.last_good_ = float(good[-1]) if good.size else 0.0
        self._fit(history)
        return self

    def update(self, value: float) -> None:
        """Feed the next observation (NaN for a missing hour)."""
        self.n_seen_ += 1
        if not np.isnan(value):
            self.last_good_ = float(value)
        self._update(float(value))

    def forecast(self, horizon: int) -> float:
        """Forecast ``horizon`` steps after the last observation; finite and >= 0."""
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        value = self._forecast(horizon)
        if not np.isfinite(value):
            value = self.last_good_
        return max(0.0, float(value))

    @abc.abstractmethod
    def _fit(self, history: FloatArray) -> None: ...

    @abc.abstractmethod
    def _update(self, value: float) -> None: ...

    @abc.abstractmethod
    def _forecast(self, horizon: int) -> float: ...


class History:
    """A bounded ring of recent observations, NaN for gaps."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buf = np.full(capacity, np.nan)
        self.n = 0

    def extend(self, values: FloatArray) -> None:
        for v in values[-self.capacity :]:
            self.append(float(v))
        self.n += max(0, len(values) - self.capacity)

    def append(self, value: float) -> None:
        self.buf[self.n % self.capacity] = value
        self.n += 1

    def ago(self, k: int) -> float:
        """The value observed ``k`` steps before the latest (``ago(0)`` is the latest)."""
        if k >= min(self.n, self.capacity) or k < 0:
            return float("nan")
        return float(self.buf[(self.n - 1 - k) % self.capacity])

    def last(self, m: int) -> FloatArray:
        """The latest ``m`` values, oldest first (NaN-padded at the front if fewer)."""
        out = np.full(m, np.nan)
        have = min(m, self.n, self.capacity)
        for i in range(have):
            out[m - 1 - i] = self.ago(i)
        return out
