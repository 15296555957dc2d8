"""statsmodels baselines, run online.

Both are *fitted* with statsmodels on the trailing four weeks and refitted once a week
(what a PHPA-style predictive autoscaler does); between refits the fitted model's own
recursions are run one observation at a time, so the models are never refitted from
scratch at every step.

* ``holt-winters``: ExponentialSmoothing with an additive trend and an additive daily
  (24 h) season: the configuration PHPA-style predictive autoscalers run.
* ``holt-winters-damped-mul``: a stronger variant we tuned (damped trend, multiplicative
  season), reported so that our margin is also measured against the best Holt-Winters we
  could configure, not only against the common one.
* ``sarima``: SARIMA(1,0,1)(0,1,1)_24 on log requests (a small order: one AR and one MA
  term and a seasonal MA after a daily difference).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from elastore.predictor.base import FloatArray, History, Predictor

SEASON = 24
FIT_WINDOW = 4 * 168
REFIT_EVERY = 168


def _interp(x: FloatArray) -> FloatArray:
    """statsmodels cannot fit across NaN: interpolate gaps in the *fitting* window only."""
    x = x.copy()
    bad = np.isnan(x)
    if bad.all():
        return np.zeros_like(x)
    if bad.any():
        idx = np.arange(len(x))
        x[bad] = np.interp(idx[bad], idx[~bad], x[~bad])
    return x


class HoltWinters(Predictor):
    """Holt-Winters with a daily season: additive (default) or damped multiplicative."""

    min_history = 2 * SEASON + 2

    def __init__(self, seasonal: str = "add") -> None:
        super().__init__()
        if seasonal not in ("add", "mul"):
            raise ValueError(f"seasonal must be 'add' or 'mul', got {seasonal!r}")
        self.seasonal = seasonal
        self.damped = seasonal == "mul"
        self.name = "holt-winters" if seasonal == "add" else "holt-winters-damped-mul"

    def _fit(self, history: FloatArray) -> None:
        self.hist = History(FIT_WINDOW)
        self.hist.extend(history)
        self._refit()

    def _refit(self) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        y = np.maximum(_interp(self.hist.array()), 1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ExponentialSmoothing(
                y, trend="add", damped_trend=self.damped, seasonal=self.seasonal,
                seasonal_periods=SEASON, initialization_method="estimated",
            ).fit()
        self.set_state(res)

    def set_state(self, res: object) -> None:
        """Take parameters and final states from a fitted statsmodels result."""
        p = res.params  # type: ignore[attr-defined]
        self.alpha = float(p["smoothing_level"])
        self.beta = float(p["smoothing_trend"])
        self.gamma = float(p["smoothing_seasonal"])
        self.phi = float(p["damping_trend"]) if self.damped else 1.0
        self.level = float(res.level[-1])  # type: ignore[attr-defined]
        self.trend = float(res.trend[-1])  # type: ignore[attr-defined]
        season = np.asarray(res.season)[-SEASON:]  # type: ignore[attr-defined]
        self.season = [float(v) for v in season]  # oldest first
        self.since_fit = 0

    def _update(self, value: float) -> None:
        self.hist.append(value)
        self.step(value)
        self.since_fit += 1
        if self.since_fit >= REFIT_EVERY:
            self._refit()

    def step(self, value: float) -> None:
        """One Holt-Winters recursion with the current parameters (NaN: carry across)."""
        s_old = self.season[0]
        prev = self.level + self.phi * self.trend
        mul = self.seasonal == "mul"
        if math.isnan(value):
            value = prev * s_old if mul else prev + s_old
        if mul:
            level = self.alpha * value / s_old + (1 - self.alpha) * prev
            s_new = self.gamma * value / prev + (1 - self.gamma) * s_old
        else:
            level = self.alpha * (value - s_old) + (1 - self.alpha) * prev
            s_new = self.gamma * (value - prev) + (1 - self.gamma) * s_old
        self.trend = self.beta * (level - self.level) + (1 - self.beta) * self.phi * self.trend
        self.level = level
        self.season = [*self.season[1:], s_new]

    def _forecast(self, horizon: int) -> float:
        damp = sum(self.phi**k for k in range(1, horizon + 1))
        s = self.season[(horizon - 1) % SEASON]
        base = self.level + damp * self.trend
        return base * s if self.seasonal == "mul" else base + s


class Sarima(Predictor):
    """SARIMA(1,0,1)(0,1,1)_24 in log space, by its innovations recursion."""

    name = "sarima"
    min_history = 3 * SEASON + 2

    def _fit(self, history: FloatArray) -> None:
        self.logs = History(FIT_WINDOW)
        self.resid = History(SEASON + 2)
        for v in history:
            self.logs.append(math.log1p(v) if not math.isnan(v) else float("nan"))
        self._refit()

    def _refit(self) -> None:
        from statsmodels.tsa.statespace.sarimax import SARIMAX

        y = _interp(self.logs.array())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = SARIMAX(
                y, order=(1, 0, 1), seasonal_order=(0, 1, 1, SEASON), simple_differencing=True,
                concentrate_scale=True,
            ).fit(disp=False)
        params = dict(zip(res.model.param_names, np.asarray(res.params), strict=True))
        self.phi = float(params.get("ar.L1", 0.0))
        self.theta = float(params.get("ma.L1", 0.0))
        self.Theta = float(params.get("ma.S.L24", 0.0))
        # rebuild residuals over the window with the new parameters
        self.resid = History(SEASON + 2)
        self.filled = History(FIT_WINDOW)
        for v in y:
            self._step(float(v), filling=True)
        self.since_fit = 0

    def _ydiff(self, k: int) -> float:
        """Seasonally differenced log value k steps ago."""
        return self.filled.ago(k) - self.filled.ago(k + SEASON)

    def _one_step(self) -> float:
        """Forecast of the next seasonally differenced value."""
        y1 = self._ydiff(0)
        e1, e24, e25 = self.resid.ago(0), self.resid.ago(SEASON - 1), self.resid.ago(SEASON)
        terms = [self.phi * y1, self.theta * e1, self.Theta * e24, self.theta * self.Theta * e25]
        return sum(t for t in terms if not math.isnan(t))

    def _step(self, lv: float, filling: bool = False) -> None:
        if self.filled.n > SEASON:
            pred = self._one_step() + self.filled.ago(SEASON - 1)
            if math.isnan(lv):
                lv = pred
                self.resid.append(0.0)
            else:
                self.resid.append(lv - pred)
        else:
            self.resid.append(0.0)
            if math.isnan(lv):
                lv = self.filled.ago(0)
        self.filled.append(lv)

    def _update(self, value: float) -> None:
        lv = math.log1p(value) if not math.isnan(value) else float("nan")
        self.logs.append(lv)
        self._step(lv)
        self.since_fit += 1
        if self.since_fit >= REFIT_EVERY:
            self._refit()

    def _forecast(self, horizon: int) -> float:
        # iterate the recursion on a copy of the state, future shocks zero
        filled = list(self.filled.array()[-(SEASON + 2) :])
        resid = list(self.resid.array()[-(SEASON + 1) :])
        for _ in range(horizon):
            y1 = filled[-1] - filled[-1 - SEASON]
            e1, e24, e25 = resid[-1], resid[-SEASON], resid[-SEASON - 1]
            dy = self.phi * y1 + self.theta * e1 + self.Theta * e24 + self.theta * self.Theta * e25
            filled.append(dy + filled[-SEASON])
            resid.append(0.0)
        return math.expm1(filled[-1])
