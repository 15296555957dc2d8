"""Per-key prediction, vectorised over all keys at once (the paper predicts per key and sums).

``PerKeyProRenaTa`` keeps one ring buffer of log1p values with a column per key and one
*pooled* filter shared by every key: the same daily/weekly-lag structure as ``prorenata``,
fitted by least squares on a sample of (key, hour) rows drawn in proportion to each key's
volume, so the fit serves the *sum* (what capacity planning needs), not the thousands of
near-empty pages. A ratio calibration of the summed forecast against the summed actuals
of the last day turns the log-space (median) forecasts into an unbiased sum.

One step (update + forecast) is O(keys x lags): ~10 ms for 100,000 keys; see
``benchmarks/perkey_step.py``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from elastore.errors import ElastoreError
from elastore.predictor.evaluate import Scores, score
from elastore.predictor.linear import fit_filter
from elastore.traces.readers import read_page_table
from elastore.traces.series import HourlySeries

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

RECENT = 6
SEASONAL = (24, 48, 168, 336, 25, 169)
MAX_LAG = 337
REFIT_EVERY = 24
TRAIN_ORIGINS = 7 * 24
MAX_TRAIN_ROWS = 60_000
CALIBRATION_ORIGINS = 24


class PerKeyProRenaTa:
    """Pooled log-space filter over K keys. ``update`` takes one hour for every key."""

    name = "prorenata-per-key"

    def __init__(self, horizon: int, seed: int = 0) -> None:
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        self.horizon = horizon
        self.capacity = MAX_LAG + horizon + TRAIN_ORIGINS + 8
        self.rng = np.random.default_rng(seed)
        self.beta: F64 | None = None
        self.smear = 1.0
        self.since_fit = 0

    @property
    def min_history(self) -> int:
        return MAX_LAG + self.horizon + 48

    def fit(self, history: F64) -> PerKeyProRenaTa:
        """``history`` is (hours, keys); NaN is a missing hour for that key."""
        hours, self.n_keys = history.shape
        if hours < self.min_history:
            raise ElastoreError(
                f"per-key prediction needs {self.min_history} h of history, got {hours} h"
            )
        self.buf = np.zeros((self.capacity, self.n_keys), dtype=np.float32)
        self.n = 0
        for row in history[-self.capacity :]:
            self._push(row)
        self._refit()
        return self

    def _push(self, row: F64) -> None:
        lv = np.log1p(np.maximum(row, 0.0)).astype(np.float32)
        bad = np.isnan(lv)
        if bad.any():  # a missing hour repeats the key's value a day before (not zero)
            lv[bad] = self._ago(23)[bad] if self.n >= 24 else self._ago(0)[bad]
        self.buf[self.n % self.capacity] = lv
        self.n += 1

    def _ago(self, k: int) -> F32:
        row: F32 = self.buf[(self.n - 1 - k) % self.capacity]
        return row

    def _offsets(self) -> list[int]:
        """Lags (steps before the origin) of the filter inputs."""
        return [*range(RECENT), *(k - self.horizon for k in SEASONAL)]

    def _rows(self, origin_ago: int, keys: npt.NDArray[np.int64] | slice) -> F64:
        cols = [self._ago(origin_ago + off)[keys] for off in self._offsets()]
        return np.column_stack([*cols, np.ones(len(cols[0]))]).astype(np.float64)

    def _refit(self) -> None:
        # origins whose target (H later) is already observed, the latest TRAIN_ORIGINS of them
        avail = min(self.n, self.capacity) - MAX_LAG - self.horizon
        n_orig = max(1, min(TRAIN_ORIGINS, avail))
        level = np.expm1(self._ago(0).astype(np.float64))
        volume = np.maximum(level, 0) + 1.0
        per = max(1, MAX_TRAIN_ROWS // n_orig)
        p = volume / volume.sum()
        design, target, weight = [], [], []
        for j in range(n_orig):
            origin_ago = self.horizon + j  # the target of this origin is j steps ago
            keys = self.rng.choice(self.n_keys, size=min(per, self.n_keys), replace=True, p=p)
            rows = self._rows(origin_ago, keys)
            centre = rows[:, :-1].mean(axis=1, keepdims=True)
            rows[:, :-1] -= centre
            design.append(rows)
            target.append(self._ago(j)[keys].astype(np.float64) - centre[:, 0])
            weight.append(volume[keys])
        a = np.vstack(design)
        y = np.concatenate(target)
        # sampled in proportion to volume *and* weighted by it: noisy near-empty keys would
        # otherwise dilute the shared coefficients towards their mean
        self.beta = fit_filter(a, y, weights=np.concatenate(weight), huber=False)
        # Calibrate the *sum*: a log-space fit forecasts medians, and the sum of many noisy
        # keys' medians is biased low. Ratio of summed actuals to summed forecasts over the
        # last day of origins, all keys (a ratio estimator, robust to sparse keys).
        num = den = 0.0
        for j in range(min(CALIBRATION_ORIGINS, n_orig)):
            mu = self._mu(self.horizon + j)
            den += float(np.expm1(mu).clip(min=0).sum())
            num += float(np.expm1(self._ago(j).astype(np.float64)).sum())
        self.smear = num / den if den > 0 else 1.0
        self.since_fit = 0

    def _mu(self, origin_ago: int) -> F64:
        """Log-space forecast for every key from the origin ``origin_ago`` steps back."""
        assert self.beta is not None
        rows = self._rows(origin_ago, slice(None))
        centre = rows[:, :-1].mean(axis=1, keepdims=True)
        rows[:, :-1] -= centre
        return np.asarray(rows @ self.beta + centre[:, 0], dtype=np.float64)

    def update(self, row: F64) -> None:
        self._push(np.asarray(row, dtype=np.float64))
        self.since_fit += 1
        if self.since_fit >= REFIT_EVERY:
            self._refit()

    def forecast(self) -> F64:
        """Forecast for every key, ``horizon`` hours after the last update (>= 0)."""
        mu = self._mu(0)
        return np.maximum(np.expm1(mu) * self.smear, 0.0)


def page_matrix(source: Path, start: pd.Timestamp | None, end: pd.Timestamp | None,
                series: HourlySeries) -> F64:
    """(hours, pages) of a per-page trace aligned with ``series``; an unlisted page is 0.

    In the per-page files a page is listed only in hours where it had requests, so an
    absent (hour, page) is zero requests, not a missing measurement. A missing *hour* (no
    page at all) stays NaN.
    """
    table = read_page_table(source)
    if start is not None or end is not None:
        table = table.window(start, end)
    h0 = int(series.start.value // 3_600_000_000_000)
    n = len(series)
    m = np.zeros((n, len(table.pages)), dtype=np.float64)
    rows = table.hour - h0
    ok = (rows >= 0) & (rows < n)
    np.add.at(m, (rows[ok], table.page[ok]), table.requests[ok])
    m[np.isnan(series.values)] = np.nan
    return m


def evaluate_per_key(source: Path, series: HourlySeries, horizon: int, warmup: int,
                     start: pd.Timestamp | None, end: pd.Timestamp | None
                     ) -> tuple[Scores, F64]:
    """Rolling-origin forecast of every page, summed, scored against the aggregate."""
    from elastore.traces.readers import detect_format

    if detect_format(source) == "hourly":
        raise ElastoreError("--per-key needs a per-page trace (hour_utc,page,requests or "
                            "pagecounts), not an aggregate", str(source))
    t0 = time.perf_counter()
    mat = page_matrix(source, start, end, series)
    model = PerKeyProRenaTa(horizon)
    first_origin = warmup - horizon
    model.fit(mat[: first_origin + 1])
    n = len(series)
    out = np.full(n, np.nan)
    for origin in range(first_origin, n - horizon):
        out[origin + horizon] = float(model.forecast().sum())
        model.update(mat[origin + 1])
    seconds = time.perf_counter() - t0
    actual = series.values
    scored = out.copy()
    scored[:warmup] = np.nan
    s, mape, rmse, mase, pts = score(actual, scored, train=actual[:warmup])
    if math.isnan(s):
        raise ElastoreError("per-key evaluation scored no hours")
    return Scores(s, mape, rmse, mase, seconds, pts), out
