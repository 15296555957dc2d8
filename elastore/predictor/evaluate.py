"""Rolling-origin evaluation: each method sees data up to t, then forecasts t+H."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from elastore.predictor.base import FloatArray, Predictor


@dataclass
class Scores:
    smape: float
    mape: float
    rmse: float
    mase: float
    seconds: float
    points: int
    #: central interval coverage -> the share of actuals inside it (``--quantiles``)
    coverage: dict[str, float] | None = None
    #: ... and the interval's mean width relative to the point forecast
    width: dict[str, float] | None = None

    def as_dict(self) -> dict[str, float | dict[str, float]]:
        out: dict[str, float | dict[str, float]] = {
            "smape": self.smape, "mape": self.mape, "rmse": self.rmse, "mase": self.mase,
            "seconds": self.seconds}
        if self.coverage is not None:
            out["coverage"] = self.coverage
        if self.width is not None:
            out["relative_width"] = self.width
        return out


def rolling_forecasts(
    predictor: Predictor, series: FloatArray, horizon: int, warmup: int
) -> FloatArray:
    """``out[t]`` is the forecast of ``series[t]`` made after seeing ``series[: t - H + 1]``.

    The predictor is fitted on ``series[: warmup - H + 1]`` so that the first forecast is
    for hour ``warmup``; entries before ``warmup`` are NaN.
    """
    n = len(series)
    out = np.full(n, np.nan)
    if warmup >= n:
        return out
    first_origin = warmup - horizon  # last index seen when forecasting series[warmup]
    if first_origin < 0:
        raise ValueError(f"warm-up ({warmup} h) must be at least the horizon ({horizon} h)")
    predictor.fit(series[: first_origin + 1])
    for origin in range(first_origin, n - horizon):
        out[origin + horizon] = predictor.forecast(horizon)
        predictor.update(float(series[origin + 1]))
    return out


def rolling_intervals(predictor: Predictor, series: FloatArray, horizon: int, warmup: int,
                      coverages: Sequence[float], window: int = 672
                      ) -> tuple[FloatArray, dict[float, tuple[FloatArray, FloatArray]]]:
    """As :func:`rolling_forecasts`, and the central ``coverages`` intervals of every
    forecast, calibrated on the errors of forecasts made before it (part of the warm-up is
    replayed so the first scored forecast already has errors to calibrate on)."""
    from elastore.predictor.intervals import Intervals

    n = len(series)
    out = np.full(n, np.nan)
    bands = {c: (np.full(n, np.nan), np.full(n, np.nan)) for c in coverages}
    first_origin = warmup - horizon
    if warmup >= n:
        return out, bands
    if first_origin < 0:
        raise ValueError(f"warm-up ({warmup} h) must be at least the horizon ({horizon} h)")
    replay = max(0, min(window, first_origin + 1 - max(predictor.min_history, 1)))
    iv = Intervals(predictor, horizons=horizon, window=window)
    iv.fit(series[: first_origin + 1], replay=replay)
    for origin in range(first_origin, n - horizon):
        t = origin + horizon
        out[t] = iv.path()[horizon - 1]
        for c in coverages:
            lo, hi = iv.interval(horizon, c)
            bands[c][0][t], bands[c][1][t] = lo, hi
        iv.update(float(series[origin + 1]))
    return out, bands


def score(actual: FloatArray, forecast: FloatArray, season: int = 24,
          train: FloatArray | None = None) -> tuple[float, float, float, float, int]:
    """sMAPE %, MAPE %, RMSE, MASE over the points that have both an actual and a forecast.

    MASE scales by the in-sample mean absolute error of the seasonal-naive (``season``)
    forecast on ``train`` (the warm-up data), as Hyndman & Koehler define it.
    """
    ok = ~np.isnan(actual) & ~np.isnan(forecast)
    a, f = actual[ok], forecast[ok]
    if a.size == 0:
        nan = float("nan")
        return nan, nan, nan, nan, 0
    denom = np.abs(a) + np.abs(f)
    smape = float(np.mean(np.where(denom > 0, 2 * np.abs(f - a) / np.where(denom > 0, denom, 1),
                                   0.0)) * 100)
    nz = a != 0
    mape = float(np.mean(np.abs(f[nz] - a[nz]) / np.abs(a[nz])) * 100) if nz.any() else float(
        "nan")
    rmse = float(np.sqrt(np.mean((f - a) ** 2)))
    mase = float("nan")
    if train is not None and len(train) > season:
        diffs = np.abs(train[season:] - train[:-season])
        scale = float(np.nanmean(diffs)) if np.isfinite(diffs).any() else float("nan")
        if scale and np.isfinite(scale):
            mase = float(np.mean(np.abs(f - a)) / scale)
    return smape, mape, rmse, mase, int(a.size)


def evaluate(
    factories: Sequence[tuple[str, Callable[[], Predictor]]], series: FloatArray, horizon: int,
    warmup: int, progress: Callable[[str], None] | None = None,
    coverages: Sequence[float] = (),
) -> tuple[dict[str, Scores], dict[str, FloatArray]]:
    """Score each method by rolling origin; returns scores and the forecast arrays. With
    ``coverages``, also the measured coverage of its calibrated central intervals."""
    scores: dict[str, Scores] = {}
    forecasts: dict[str, FloatArray] = {}
    for name, make in factories:
        t0 = time.perf_counter()
        cover: dict[str, float] | None = None
        width: dict[str, float] | None = None
        if coverages:
            fc, bands = rolling_intervals(make(), series, horizon, warmup, coverages)
            ok = np.isfinite(series) & np.isfinite(fc)
            ok[:warmup] = False
            cover = {f"{c:g}": float(np.mean((bands[c][0][ok] <= series[ok])
                                              & (series[ok] <= bands[c][1][ok])))
                     for c in coverages}
            width = {f"{c:g}": float(np.mean((bands[c][1][ok] - bands[c][0][ok])
                                              / np.maximum(fc[ok], 1e-9)))
                     for c in coverages}
        else:
            fc = rolling_forecasts(make(), series, horizon, warmup)
        seconds = time.perf_counter() - t0
        scored = fc.copy()
        scored[:warmup] = np.nan
        s, m, r, ms, pts = score(series, scored, train=series[:warmup])
        scores[name] = Scores(s, m, r, ms, seconds, pts, cover, width)
        forecasts[name] = fc
        if progress is not None:
            progress(name)
    return scores, forecasts
