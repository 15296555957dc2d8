"""An hourly time series with explicit gaps and flagged outliers.

Every reader in :mod:`elastore.traces.readers` returns a :class:`HourlySeries`. The series
covers every hour from ``start`` to its last hour; an hour that the source did not contain
is ``NaN`` (a gap). Gaps are reported, never filled or shifted. Outliers are *flagged*
(their values are kept) so that each consumer decides what to do with them;
:meth:`HourlySeries.cleaned` gives a copy with the outliers turned into gaps.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import pandas as pd

FloatArray = npt.NDArray[np.float64]

HOUR = pd.Timedelta(hours=1)

#: Outlier rule, see :func:`find_outliers`.
OUTLIER_NEIGHBOURHOOD_HOURS = 3
OUTLIER_MIN_FACTOR = 2.0
OUTLIER_MIN_ROBUST_Z = 10.0


@dataclass(frozen=True)
class Outlier:
    hour: pd.Timestamp
    value: float
    neighbourhood_median: float

    def as_dict(self) -> dict[str, object]:
        return {
            "hour": self.hour.strftime("%Y-%m-%d %H:%M:%S"),
            "value": self.value,
            "neighbourhood_median": self.neighbourhood_median,
        }


@dataclass(frozen=True)
class HourlySeries:
    """Hourly values from ``start`` on, one per hour, ``NaN`` for a missing hour.

    ``unit`` names what one value counts (``requests/h``, ``bytes/h``). Timestamps are the
    labels of the source; for Wikimedia dumps a label is the END of the counted hour.
    """

    start: pd.Timestamp
    values: FloatArray
    name: str = "requests"
    unit: str = "requests/h"
    source: str = ""
    duplicates_dropped: int = 0
    outliers: tuple[Outlier, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.values.ndim != 1:
            raise ValueError("an HourlySeries holds a 1-D array")
        if self.start != self.start.floor("h"):
            raise ValueError(f"start {self.start} is not on the hour")

    # -- shape -------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def index(self) -> pd.DatetimeIndex:
        return pd.date_range(self.start, periods=len(self), freq="h")

    @property
    def end(self) -> pd.Timestamp:
        """The last hour (inclusive)."""
        return self.start + (len(self) - 1) * HOUR

    @property
    def present_hours(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.values)))

    @property
    def missing_hours(self) -> int:
        return len(self) - self.present_hours

    def gaps(self) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
        """Runs of missing hours as inclusive ``(first, last)`` pairs."""
        return [
            (self.start + a * HOUR, self.start + b * HOUR) for a, b in _nan_runs(self.values)
        ]

    def to_pandas(self) -> pd.Series:
        return pd.Series(self.values, index=self.index, name=self.name)

    # -- derived copies -----------------------------------------------------------------
    def window(self, start: pd.Timestamp | None, end: pd.Timestamp | None) -> HourlySeries:
        """The hours in ``[start, end]``; a date without a time covers its whole day."""
        lo = self.start if start is None else start
        hi = self.end if end is None else end
        if lo > hi:
            raise ValueError(f"window start {lo} is after its end {hi}")
        i0 = max(0, int((lo.ceil("h") - self.start) / HOUR))
        i1 = min(len(self) - 1, int((hi.floor("h") - self.start) / HOUR))
        if i1 < i0:
            raise ValueError(
                f"window {lo}..{hi} does not overlap the trace ({self.start}..{self.end})"
            )
        outliers = tuple(o for o in self.outliers if lo <= o.hour <= hi)
        return replace(
            self, start=self.start + i0 * HOUR, values=self.values[i0 : i1 + 1].copy(),
            outliers=outliers,
        )

    def cleaned(self) -> HourlySeries:
        """A copy in which flagged outliers are gaps."""
        values = self.values.copy()
        for o in self.outliers:
            values[int((o.hour - self.start) / HOUR)] = np.nan
        return replace(self, values=values, outliers=())


def from_hour_values(
    hours: pd.DatetimeIndex | pd.Series,
    values: FloatArray,
    *,
    name: str,
    unit: str,
    source: str,
    duplicates_dropped: int = 0,
    flag_outliers: bool = True,
) -> HourlySeries:
    """Place (hour, value) pairs on a complete hourly grid; absent hours become NaN.

    ``hours`` must be unique and on the hour (the readers check both and report the line).
    """
    idx = pd.DatetimeIndex(hours)
    if len(idx) == 0:
        raise ValueError("no hours")
    start = idx.min()
    pos = ((idx - start) / HOUR).to_numpy().astype(np.int64)
    grid = np.full(int(pos.max()) + 1, np.nan)
    grid[pos] = values
    series = HourlySeries(
        start=start, values=grid, name=name, unit=unit, source=source,
        duplicates_dropped=duplicates_dropped,
    )
    if flag_outliers:
        series = replace(series, outliers=tuple(find_outliers(series)))
    return series


def find_outliers(series: HourlySeries) -> list[Outlier]:
    """Hours far outside their neighbourhood.

    The neighbourhood of hour t is the present hours in t-3..t+3 (t excluded); at least two
    are needed. An hour is an outlier when its value is more than a factor
    ``OUTLIER_MIN_FACTOR`` (2) away from the neighbourhood median *and* that log-ratio is more
    than ``OUTLIER_MIN_ROBUST_Z`` (10) robust standard deviations (1.4826 x MAD of all
    log-ratios of the series) from the typical log-ratio. The factor keeps ordinary diurnal
    ramps (adjacent hours rarely differ by more than ~15 %) from being flagged; the robust
    z-score keeps naturally noisy series (a single page) from being flagged wholesale.
    A zero next to non-zero neighbours counts as an infinite ratio.
    """
    x = series.values
    n = len(x)
    w = OUTLIER_NEIGHBOURHOOD_HOURS
    if n < 3:
        return []
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), np.where(x == 0, -np.inf, np.nan))
    padded = np.full(n + 2 * w, np.nan)
    padded[w : w + n] = logx
    shifts = [padded[w + k : w + k + n] for k in range(-w, w + 1) if k != 0]
    stack = np.vstack(shifts)
    finite = np.isfinite(stack)
    count = finite.sum(axis=0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN neighbourhoods
        med = np.nanmedian(np.where(finite, stack, np.nan), axis=0)
    ok = (count >= 2) & np.isfinite(med) & ~np.isnan(logx)
    resid = np.full(n, np.nan)
    resid[ok] = logx[ok] - med[ok]
    finite_resid = resid[np.isfinite(resid)]
    if finite_resid.size < 8:
        return []
    centre = float(np.median(finite_resid))
    sigma = 1.4826 * float(np.median(np.abs(finite_resid - centre)))
    sigma = max(sigma, 1e-9)
    with np.errstate(invalid="ignore"):
        far = np.abs(resid - centre)
        flagged = ok & (np.abs(resid) > np.log(OUTLIER_MIN_FACTOR)) & (
            far > OUTLIER_MIN_ROBUST_Z * sigma
        )
    out = []
    for i in np.flatnonzero(flagged):
        out.append(
            Outlier(
                hour=series.start + int(i) * HOUR,
                value=float(x[i]),
                neighbourhood_median=float(np.exp(med[i])),
            )
        )
    return out


def _nan_runs(values: FloatArray) -> list[tuple[int, int]]:
    """Inclusive index ranges of consecutive NaNs."""
    missing = np.isnan(values).astype(np.int8)
    if not missing.any():
        return []
    edges = np.diff(np.concatenate(([0], missing, [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
