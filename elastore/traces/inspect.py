"""``elastore trace inspect``: what a trace holds, where it is broken, and its shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from elastore.traces.series import HourlySeries

STAMP = "%Y-%m-%d %H:%M:%S"
WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def summarize(series: HourlySeries) -> dict[str, Any]:
    """A JSON-ready summary. Min/median/max and the shape exclude flagged outliers."""
    clean = series.cleaned().to_pandas().dropna()
    out: dict[str, Any] = {
        "source": series.source,
        "column": series.name,
        "unit": series.unit,
        "start": series.start.strftime(STAMP),
        "end": series.end.strftime(STAMP),
        "span_hours": len(series),
        "hours": series.present_hours,
        "missing_hours": series.missing_hours,
        "gaps": [[a.strftime(STAMP), b.strftime(STAMP)] for a, b in series.gaps()],
        "outliers": [o.as_dict() for o in series.outliers],
        "duplicates_dropped": series.duplicates_dropped,
        "stats_exclude_outliers": True,
    }
    if clean.empty:
        out.update({"min": None, "median": None, "max": None, "daily": None, "weekly": None})
        return out
    out["min"] = float(clean.min())
    out["median"] = float(clean.median())
    out["max"] = float(clean.max())
    stamps = pd.DatetimeIndex(clean.index)
    vals = clean.to_numpy(dtype=float)
    daily: dict[str, Any] | None = None
    by_hour = _mean_by(stamps.hour.to_numpy(), vals, 24)
    if not np.isnan(by_hour).any():
        daily = {
            "peak_hour_utc": int(np.argmax(by_hour)),
            "trough_hour_utc": int(np.argmin(by_hour)),
            "peak_to_trough": float(by_hour.max() / by_hour.min()) if by_hour.min() > 0 else None,
            "mean_by_hour": [float(v) for v in by_hour],
        }
    out["daily"] = daily
    by_day = _mean_by(stamps.day_of_week.to_numpy(), vals, 7)
    weekly: dict[str, Any] | None = None
    if not np.isnan(by_day).any():
        weekday = float(by_day[:5].mean())
        weekend = float(by_day[5:].mean())
        weekly = {
            "weekend_ratio": weekend / weekday if weekday > 0 else None,
            "mean_by_weekday": {WEEKDAYS[d]: float(by_day[d]) for d in range(7)},
        }
    out["weekly"] = weekly
    return out


def _mean_by(groups: npt.NDArray[np.int32], values: npt.NDArray[np.float64], n: int
             ) -> npt.NDArray[np.float64]:
    sums = np.bincount(groups, weights=values, minlength=n)
    counts = np.bincount(groups, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _num(v: float | None) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    if abs(v) >= 1e6:
        return f"{v / 1e6:,.2f}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:,.1f}k"
    return f"{v:,.0f}"


def render(summary: dict[str, Any]) -> str:
    """Human-readable text of :func:`summarize`."""
    lines = [
        f"trace     {summary['source']}",
        f"column    {summary['column']} ({summary['unit']})",
        f"span      {summary['start']} .. {summary['end']}  ({summary['span_hours']:,} hours)",
        f"present   {summary['hours']:,} hours",
        f"missing   {summary['missing_hours']:,} hours in {len(summary['gaps'])} gap(s)",
    ]
    for a, b in summary["gaps"]:
        lines.append(f"            gap {a} .. {b}")
    if summary["duplicates_dropped"]:
        lines.append(f"duplicates {summary['duplicates_dropped']} identical row(s) dropped")
    lines.append(f"outliers  {len(summary['outliers'])}")
    for o in summary["outliers"]:
        lines.append(
            f"            {o['hour']}  {_num(o['value'])}  (neighbourhood median "
            f"{_num(o['neighbourhood_median'])})"
        )
    lines.append(
        f"values    min {_num(summary['min'])}  median {_num(summary['median'])}  "
        f"max {_num(summary['max'])}  (outliers excluded)"
    )
    daily = summary.get("daily")
    if daily:
        ratio = daily["peak_to_trough"]
        lines.append(
            f"daily     peak {daily['peak_hour_utc']:02d}:00 UTC, trough "
            f"{daily['trough_hour_utc']:02d}:00 UTC, peak/trough "
            + (f"{ratio:.2f}" if ratio else "n/a")
        )
    weekly = summary.get("weekly")
    if weekly:
        wr = weekly["weekend_ratio"]
        lines.append(
            "weekly    weekend/weekday " + (f"{wr:.3f}" if wr is not None else "n/a") + "  ("
            + ", ".join(f"{d} {_num(v)}" for d, v in weekly["mean_by_weekday"].items()) + ")"
        )
    return "\n".join(lines)
