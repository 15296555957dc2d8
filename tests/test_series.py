import numpy as np
import pandas as pd

from elastore.traces.series import HourlySeries, find_outliers, from_hour_values


def diurnal(days: int, level: float = 9e6, seed: int = 1) -> np.ndarray:
    t = np.arange(days * 24)
    rng = np.random.default_rng(seed)
    base = level * (1 + 0.4 * np.sin(2 * np.pi * t / 24) + 0.1 * np.sin(2 * np.pi * t / 168))
    return base * (1 + 0.01 * rng.standard_normal(len(t)))


def series(values: np.ndarray, start: str = "2009-01-01") -> HourlySeries:
    return from_hour_values(
        pd.date_range(start, periods=len(values), freq="h"), values, name="requests",
        unit="requests/h", source="test",
    )


def test_gaps_are_nan_runs_reported_inclusively() -> None:
    idx = pd.date_range("2009-01-01", periods=48, freq="h")
    keep = np.ones(48, dtype=bool)
    keep[[5, 6, 7, 30]] = False
    s = from_hour_values(idx[keep], np.arange(48.0)[keep] + 1, name="r", unit="u", source="t")
    assert len(s) == 48 and s.missing_hours == 4 and s.present_hours == 44
    assert s.gaps() == [
        (pd.Timestamp("2009-01-01 05:00"), pd.Timestamp("2009-01-01 07:00")),
        (pd.Timestamp("2009-01-02 06:00"), pd.Timestamp("2009-01-02 06:00")),
    ]
    # values never shift across a gap
    assert s.values[8] == 9.0 and np.isnan(s.values[30])


def test_single_low_hour_in_a_9m_series_is_an_outlier() -> None:
    v = diurnal(21)
    v[200] = 2000.0
    s = series(v)
    assert [o.hour for o in s.outliers] == [s.start + pd.Timedelta(hours=200)]
    assert s.outliers[0].neighbourhood_median > 5e6


def test_high_spike_is_an_outlier_and_diurnal_ramps_are_not() -> None:
    v = diurnal(28)
    assert find_outliers(series(v)) == []
    v[333] *= 5
    assert len(find_outliers(series(v))) == 1


def test_noisy_series_is_not_flagged_wholesale() -> None:
    rng = np.random.default_rng(3)
    v = rng.poisson(3, size=24 * 30).astype(float) * 100 + 100  # a single sparse page
    assert len(find_outliers(series(v))) <= 2


def test_window_and_cleaned() -> None:
    v = diurnal(10)
    v[100] = 1.0
    s = series(v)
    w = s.window(pd.Timestamp("2009-01-05"), pd.Timestamp("2009-01-05 23:00"))
    assert len(w) == 24 and w.start == pd.Timestamp("2009-01-05")
    assert [o.hour for o in w.outliers] == [pd.Timestamp("2009-01-05 04:00")]
    c = w.cleaned()
    assert np.isnan(c.values[4]) and c.outliers == ()
    assert not np.isnan(w.values[4])  # the original keeps its value
