"""The online predictor interface shared by every forecasting method.

Modelled on scikit-learn's estimators, but online: ``fit`` on an initial segment, then one
``update`` per new observation, and ``forecast(h)`` for the value ``h`` steps after the last
observation. Forecasts are request rates: never NaN, never negative.

Two robustness mechanisms live here so that every method gets them:

* **Gaps.** A NaN observation is passed to the method as NaN; each method carries on across
  it (typically by using its own estimate in place of the missing value).
* **Outlier screening.** Before an observation reaches the method it is compared with the
  method's own one-step forecast. If it is more than ``SCREEN_SIGMAS`` robust standard
  deviations (an exponentially weighted mean absolute log error, times 1.25) *and* more
  than a factor ``SCREEN_MIN_FACTOR`` away, it is handed on as a gap. After
  ``SCREEN_MAX_RUN`` consecutive screened observations the next one is accepted whatever it
  is (a level shift, or a method that has lost track), so a regime change costs at most
  that many steps and screening can never lock a method out of its data.
* **Short histories.** A method that needs ``min_history`` hours (two seasons, its longest
  lag) but gets fewer falls back, with a warning, to seasonal-naive-24 (or persistence
  with under a day), and switches to itself once enough hours have been seen.
"""

from __future__ import annotations

import abc
import logging
import math
from typing import Self

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
log = logging.getLogger("elastore.predictor")

SCREEN_SIGMAS = 6.0
SCREEN_MIN_FACTOR = 1.5
SCREEN_MAX_RUN = 2
SCREEN_ALPHA = 0.02


class Predictor(abc.ABC):
    """Base class. Subclasses implement ``_fit``, ``_update`` and ``_forecast``."""

    #: The method name used on the CLI and in reports.
    name: str = "predictor"
    #: Hours of history the method needs before it can run as itself.
    min_history: int = 1
    #: Screen outliers against the method's own one-step forecast.
    screen: bool = True

    def __init__(self) -> None:
        self.n_seen_ = 0
        self.last_good_: float = 0.0
        self.screened_ = 0  # observations screened so far (for reports/tests)
        self._sigma = 0.05
        self._run = 0
        self._fallback: Predictor | None = None
        self._pending: list[float] = []

    # -- public API ----------------------------------------------------------------------
    def fit(self, history: FloatArray) -> Self:
        """Initialise from an initial segment (may contain NaN gaps)."""
        history = np.asarray(history, dtype=np.float64)
        self.n_seen_ = len(history)
        good = history[~np.isnan(history)]
        self.last_good_ = float(good[-1]) if good.size else 0.0
        if len(history) < self.min_history:
            fb: Predictor = SeasonalNaiveFallback() if len(history) >= 24 else PersistenceFallback()
            log.warning(
                "%s needs %d h of history, got %d h: using %s until it has enough",
                self.name, self.min_history, len(history), fb.name,
            )
            self._fallback = fb.fit(history)
            self._pending = list(history)
            return self
        self._fallback = None
        self._fit(history)
        return self

    @property
    def fallback_name(self) -> str | None:
        """The simpler method forecasting in this one's place while its history is too
        short, or None when it runs as itself."""
        return None if self._fallback is None else self._fallback.name

    def update(self, value: float) -> None:
        """Feed the next observation (NaN for a missing hour)."""
        value = float(value)
        self.n_seen_ += 1
        if self._fallback is not None:
            self._fallback.update(value)
            self._pending.append(value)
            if not math.isnan(value):
                self.last_good_ = value
            if len(self._pending) >= self.min_history:
                log.info("%s: %d h seen, switching from fallback", self.name, len(self._pending))
                self._fallback = None
                self._fit(np.asarray(self._pending, dtype=np.float64))
                self._pending = []
            return
        if self.screen and not math.isnan(value):
            value = self._screened(value)
        if not math.isnan(value):
            self.last_good_ = value
        self._update(value)

    def forecast(self, horizon: int) -> float:
        """Forecast ``horizon`` steps after the last observation; finite and >= 0."""
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if self._fallback is not None:
            return self._fallback.forecast(horizon)
        value = self._forecast(horizon)
        if not math.isfinite(value):
            value = self.last_good_
        return max(0.0, float(value))

    # -- screening -----------------------------------------------------------------------
    def _screened(self, value: float) -> float:
        expected = self._forecast(1)
        if not (math.isfinite(expected) and expected > 0):
            return value
        dev = math.log(max(value, 1e-9) / expected)
        far = abs(dev) > max(SCREEN_SIGMAS * self._sigma, math.log(SCREEN_MIN_FACTOR))
        if far and self._run < SCREEN_MAX_RUN:
            self._run += 1
            self.screened_ += 1
            return float("nan")
        self._run = 0
        self._sigma += SCREEN_ALPHA * (min(abs(dev), 5 * self._sigma) * 1.25 - self._sigma)
        return value

    # -- to implement ----------------------------------------------------------------------
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
        tail = values[-self.capacity :]
        self.n += len(values) - len(tail)
        for v in tail:
            self.append(float(v))

    def append(self, value: float) -> None:
        self.buf[self.n % self.capacity] = value
        self.n += 1

    def ago(self, k: int) -> float:
        """The value observed ``k`` steps before the latest (``ago(0)`` is the latest)."""
        if k >= min(self.n, self.capacity) or k < 0:
            return float("nan")
        return float(self.buf[(self.n - 1 - k) % self.capacity])

    def array(self) -> FloatArray:
        """All retained values, oldest first."""
        m = min(self.n, self.capacity)
        if m < self.capacity:
            return self.buf[:m].copy()
        i = self.n % self.capacity
        return np.concatenate([self.buf[i:], self.buf[:i]])


class PersistenceFallback(Predictor):
    name = "persistence"
    screen = False
    min_history = 0  # a fallback never falls back (itself): no history forecasts 0 req/s

    def _fit(self, history: FloatArray) -> None:
        pass

    def _update(self, value: float) -> None:
        pass

    def _forecast(self, horizon: int) -> float:
        return self.last_good_


class SeasonalNaiveFallback(Predictor):
    """Same hour one season (24 h) earlier; further back across gaps."""

    screen = False
    min_history = 0

    def __init__(self, season: int = 24) -> None:
        super().__init__()
        self.season = season
        self.name = f"seasonal-naive-{season}"
        self.hist = History(4 * season)

    def _fit(self, history: FloatArray) -> None:
        self.hist = History(4 * self.season)
        self.hist.extend(history)

    def _update(self, value: float) -> None:
        self.hist.append(value)

    def _forecast(self, horizon: int) -> float:
        back = (-horizon) % self.season  # the same phase, most recent first
        while back < min(self.hist.n, self.hist.capacity):
            v = self.hist.ago(back)
            if not math.isnan(v):
                return v
            back += self.season
        return self.last_good_
