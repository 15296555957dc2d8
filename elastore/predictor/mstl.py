"""MSTL with an AutoETS trend (statsforecast), run online: the strongest general-purpose
statistical baseline we can run here (issue 21).

**The model.** statsforecast's ``MSTL(season_length=[24, 168], trend_forecaster=
AutoETS(model="ZZN"))``: the series is split by STL-LOESS into a daily and a weekly season,
a trend and a remainder; the seasons are carried forward as they were in their last cycle
(seasonal-naive) and the seasonally adjusted series (trend + remainder) is forecast by the
exponential-smoothing model AutoETS selects (additive or multiplicative error, no, additive
or damped trend).

**Online, as the other statsmodels baselines** (:mod:`elastore.predictor.statistical`):
fitted on the trailing four weeks and refitted once a week. Between refits nothing is
refitted: every new hour is seasonally adjusted by the seasons' last cycle, and the fitted
ETS model's own state recursion (its alpha, beta, phi) takes it. Right after a fit the
forecast is statsforecast's ``predict``; the recursion is the one statsforecast's ETS ran
over the fitting window (``tests/test_predictor_mstl.py`` checks both).

statsforecast is an optional dependency (``pip install 'elastore[forecast]'``), and it
requires pandas < 3 where the package runs on 3: it lives in a venv of its own
(``.venv-forecast``, built by ``make test``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from elastore.errors import ElastoreError
from elastore.predictor.base import FloatArray, History, Predictor
from elastore.predictor.statistical import _interp

SEASONS = (24, 168)  # hours: a day and a week
FIT_WINDOW = 4 * 168
REFIT_EVERY = 168


def _statsforecast() -> Any:
    try:
        from statsforecast import models
    except ImportError as exc:
        raise ElastoreError(
            "the mstl method needs statsforecast: pip install 'elastore[forecast]' "
            f"({exc})") from None
    return models


class EtsState:
    """The state recursion of a fitted non-seasonal ETS model (Hyndman et al.'s state-space
    form, as statsforecast's ``ets`` runs it): error ``A`` or ``M``, trend ``N`` or ``A``,
    damped or not."""

    def __init__(self, components: str, par: Any, state: Any) -> None:
        err, trend, season, damped = components[0], components[1], components[2], components[3]
        if err not in "AM" or trend not in "NA" or season != "N":
            raise ElastoreError(f"ETS model {components!r}: only error A/M, trend N/A, no "
                                "season are run online")
        self.err, self.trend = err, trend
        p = np.asarray(par, dtype=float)
        self.alpha = float(p[0])
        self.beta = float(p[1]) if trend == "A" else 0.0
        self.phi = float(p[3]) if damped == "D" else 1.0
        s = np.asarray(state, dtype=float)
        self.level = float(s[0])
        self.slope = float(s[1]) if trend == "A" else 0.0

    def one_step(self) -> float:
        return self.level + self.phi * self.slope

    def update(self, x: float) -> None:
        """One observation of the seasonally adjusted series (NaN: no error, the state
        moves on by its own forecast)."""
        yhat = self.one_step()
        if math.isnan(x):
            e = 0.0
        elif self.err == "A":
            e = x - yhat
        else:
            e = (x - yhat) / yhat if yhat != 0 else 0.0
        if self.err == "A":
            self.level = yhat + self.alpha * e
            self.slope = self.phi * self.slope + self.beta * e
        else:
            self.level = yhat * (1 + self.alpha * e)
            self.slope = self.phi * self.slope + self.beta * yhat * e

    def forecast(self, horizon: int) -> float:
        if self.phi == 1.0:
            return self.level + horizon * self.slope
        damp = sum(self.phi**k for k in range(1, horizon + 1))
        return self.level + damp * self.slope


class Mstl(Predictor):
    """MSTL (daily + weekly seasons) with an AutoETS trend, refitted weekly on four weeks."""

    name = "mstl"
    min_history = 2 * SEASONS[-1] + 2
    #: fitted on log(1 + load), forecasts taken back by exp(x) - 1 (``mstl-log``)
    log = False
    #: hours fitted on: the trailing FIT_WINDOW, or (``mstl-log``) all history so far
    window = FIT_WINDOW

    def _fit(self, history: FloatArray) -> None:
        _statsforecast()  # a clear error before anything else
        self.hist = History(self.window)
        self.hist.extend(self._in(np.asarray(history, dtype=float)))
        self._refit()

    def _in(self, x: FloatArray) -> FloatArray:
        if not self.log:
            return x
        return np.asarray(np.log1p(np.where(x >= 0, x, np.nan)), dtype=float)

    def _refit(self) -> None:
        models = _statsforecast()
        y = _interp(self.hist.array())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = models.MSTL(season_length=list(SEASONS),
                            trend_forecaster=models.AutoETS(model="ZZN")).fit(y)
        self.model_ = m
        ets = m.trend_forecaster.model_
        self.ets = EtsState(str(ets["components"]), ets["par"], np.asarray(ets["states"])[-1])
        # each season's last cycle, oldest first: the next hour's value is cycle[0]
        self.cycles = [np.asarray(m.model_[f"seasonal{p}"].to_numpy()[-p:], dtype=float)
                       for p in SEASONS]
        self.since_fit = 0

    def _update(self, value: float) -> None:
        value = float(self._in(np.array([value]))[0])
        self.hist.append(value)
        season = sum(float(c[0]) for c in self.cycles)
        self.cycles = [np.roll(c, -1) for c in self.cycles]
        self.ets.update(value - season if not math.isnan(value) else float("nan"))
        self.since_fit += 1
        if self.since_fit >= REFIT_EVERY:
            self._refit()

    def _forecast(self, horizon: int) -> float:
        season = sum(float(c[(horizon - 1) % len(c)]) for c in self.cycles)
        f = self.ets.forecast(horizon) + season
        return math.expm1(min(f, 50.0)) if self.log else f


#: an hourly history is kept whole up to this (a year and more): "all history so far"
EXPANDING = 2 * 8760


class MstlLog(Mstl):
    """The strongest MSTL we could make here (issue 40): the same model fitted on the log
    of the load (its daily swing is multiplicative, so additive seasons fit its log),
    on all the history so far (an expanding window, not the last four weeks), refitted
    weekly; as an independent statsforecast MSTL was fitted."""

    name = "mstl-log"
    log = True
    window = EXPANDING
