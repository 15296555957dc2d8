"""prorenata's multi-horizon forecasts recover known synthetic signals a day ahead (issue 21),
and the error-weighted combination works as it says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastore.predictor.evaluate import rolling_forecasts, score
from elastore.predictor.prorenata import ProRenaTa, _profile
from elastore.predictor.registry import make


def _signal(weeks: int, noise: float, seed: int = 0) -> np.ndarray:
    """Requests/s with a daily and a weekly multiplicative season, a slow trend, and
    multiplicative noise of ``noise`` (sd)."""
    t = np.arange(168 * weeks, dtype=float)
    daily = 1 + 0.4 * np.sin(2 * np.pi * t / 24) + 0.1 * np.sin(4 * np.pi * t / 24)
    weekly = 1 - 0.15 * (((t // 24) % 7) >= 5)  # weekends lower
    trend = 1 + 0.002 * t / 24
    rng = np.random.default_rng(seed)
    return 5000 * daily * weekly * trend * np.exp(rng.normal(0, noise, len(t)))


@pytest.mark.parametrize("method", ["prorenata", "prorenata-weighted"])
@pytest.mark.parametrize("horizon", [1, 6, 24])
def test_a_known_signal_is_recovered_at_every_horizon(method: str, horizon: int) -> None:
    y = _signal(7, noise=0.01)
    warmup = 4 * 168
    fc = rolling_forecasts(make(method), y, horizon, warmup)
    fc[:warmup] = np.nan
    smape = score(y, fc)[0]
    # the noise alone costs ~0.8 % sMAPE (1 % sd, both ways): a day ahead stays near it,
    # where seasonal-naive-24 misses the weekends by 15 %
    assert smape < 2.0, smape
    naive = np.full_like(y, np.nan)
    naive[warmup:] = y[warmup - 24:-24]
    assert smape < 0.5 * score(y, naive)[0]


def test_the_profile_is_the_level_moved_weekly_season() -> None:
    # log space: a pure weekly pattern plus a level step of +0.1 over the last day
    week = np.sin(2 * np.pi * np.arange(168) / 168)
    x = np.tile(week, 3)
    x[-24:] += 0.1
    got = _profile(x, 24)
    assert got is not None
    # the target's hour of the week, raised by the last day's step
    assert got == pytest.approx(week[(len(x) - 1 + 24) % 168] + 0.1, abs=1e-9)
    assert _profile(x[:100], 1) is None  # no week of history: no profile


def test_weights_follow_recent_errors() -> None:
    y = _signal(7, noise=0.01)
    p = ProRenaTa(combine="weighted").fit(y[:5 * 168])  # the weekly filter trains on 834 h
    for v in y[5 * 168:6 * 168]:
        p.forecast(24)
        p.update(float(v))
    table = p.mse_[24]
    assert set(table) >= {"levels", "weekly", "daily", "profile"}
    assert all(n >= 24 for _, n in table.values())
    # the forecast is the inverse-MSE mix of the members' (log space)
    preds = p._members(24)
    w = {k: 1 / table[k][0] for k in preds}
    mix = sum(w[k] * v for k, v in preds.items()) / sum(w.values())
    assert p.forecast(24) == pytest.approx(math.expm1(mix), rel=1e-9)
    # a gap scores nobody: the counts stand still
    before = {k: n for k, (_, n) in p.mse_[24].items()}
    p.forecast(24)
    p.update(float("nan"))
    p.forecast(24)
    assert {k: n for k, (_, n) in p.mse_[24].items()} == before


def test_combine_must_be_known() -> None:
    with pytest.raises(ValueError, match="combine"):
        ProRenaTa(combine="median")
