"""The days on which a global website's load leaves its weekly cycle: Christmas Eve to
Boxing Day, New Year's Eve and Day, and Easter from Good Friday to Easter Monday. Western
holidays, as the shared Wikipedia traces (all projects, dominated by the English one) show
them; the dates are computed, not read from a trace. Pure."""

from __future__ import annotations

import datetime as dt

import numpy as np
import numpy.typing as npt
import pandas as pd

#: (month, day) of the fixed holidays
FIXED = ((12, 24), (12, 25), (12, 26), (12, 31), (1, 1))
#: days from Easter Sunday: Good Friday .. Easter Monday
EASTER_DAYS = (-2, -1, 0, 1)


def easter(year: int) -> dt.date:
    """Easter Sunday of the Gregorian calendar (the anonymous algorithm of 1876, as
    Meeus gives it)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = b // 4, b % 4
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = c // 4, c % 4
    lo = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * lo) // 451
    month = (h + lo - 7 * m + 114) // 31
    day = (h + lo - 7 * m + 114) % 31 + 1
    return dt.date(year, month, day)


def holidays(year: int) -> set[dt.date]:
    out = {dt.date(year, m, d) for m, d in FIXED}
    sunday = easter(year)
    out |= {sunday + dt.timedelta(days=k) for k in EASTER_DAYS}
    return out


def holiday_hours(hours: pd.DatetimeIndex) -> npt.NDArray[np.bool_]:
    """For each hour (UTC), whether its day is one of :func:`holidays`."""
    days = hours.date
    known: set[dt.date] = set()
    for y in {d.year for d in days}:
        known |= holidays(y)
    return np.fromiter((d in known for d in days), dtype=bool, count=len(days))
