"""The MSTL baseline (issue 21): its online recursion is statsforecast's own, run one hour
at a time.

* The ETS recursion, started from statsforecast's initial state and fed the seasonally
  adjusted fitting window, ends in the state statsforecast's fit ended in, for each of the
  six non-seasonal ETS models AutoETS chooses from.
* Right after a fit the forecast is ``MSTL.predict``; after 100 online hours (no refit) it
  is the fitted trend model's ``forward`` over the adjusted series plus the seasons' last
  cycles, which is how ``MSTL.predict`` carries them.
"""

from __future__ import annotations

import builtins
import math
import os
from typing import Any

import numpy as np
import pytest

try:
    from statsforecast import models
except ImportError:
    _MSG = ("statsforecast is not installed here: `make test` runs this module in "
            ".venv-forecast (elastore[forecast] needs pandas < 3, the package runs on 3)")
    if os.environ.get("CI"):
        pytest.fail(_MSG, pytrace=False)
    pytest.skip(_MSG, allow_module_level=True)

from elastore.errors import ElastoreError
from elastore.predictor.mstl import FIT_WINDOW, REFIT_EVERY, SEASONS, EtsState, Mstl
from elastore.predictor.registry import METHODS, make, parse_methods


def _series(weeks: int, seed: int = 1) -> np.ndarray:
    """Hourly load with a daily and a weekly season, a trend and noise (requests/s)."""
    t = np.arange(168 * weeks)
    rng = np.random.default_rng(seed)
    return (1000 + 200 * np.sin(2 * np.pi * t / 24) + 100 * np.sin(2 * np.pi * t / 168)
            + 0.5 * t + rng.normal(0, 20, len(t)))


@pytest.mark.parametrize(("model", "damped"), [("ANN", False), ("AAN", False), ("AAN", True),
                                               ("MNN", False), ("MAN", False),
                                               ("MAN", True)])
def test_the_ets_recursion_is_statsforecasts(model: str, damped: bool) -> None:
    y = _series(4)
    m = models.MSTL(season_length=list(SEASONS),
                    trend_forecaster=models.AutoETS(model=model, damped=damped)).fit(y)
    fit: dict[str, Any] = m.trend_forecaster.model_
    assert fit["components"] == model + ("D" if damped else "N")
    states = np.asarray(fit["states"])
    ets = EtsState(fit["components"], fit["par"], states[0])
    for x in m.model_[["trend", "remainder"]].sum(axis=1).to_numpy():
        ets.update(float(x))
    assert ets.level == pytest.approx(states[-1][0], rel=1e-9)
    if model[1] == "A":
        assert ets.slope == pytest.approx(states[-1][1], rel=1e-6, abs=1e-9)


def test_online_forecasts_are_statsforecasts_between_refits() -> None:
    y = _series(6)
    p = Mstl().fit(y[:FIT_WINDOW])
    m = p.model_
    ref = m.predict(48)["mean"]
    assert [p.forecast(h) for h in (1, 24, 48)] == pytest.approx(
        [ref[0], ref[23], ref[47]], rel=1e-12)
    k = 100
    for v in y[FIT_WINDOW:FIT_WINDOW + k]:
        p.update(float(v))
    assert p.since_fit == k and p.screened_ == 0
    n = k + 24
    season = sum(np.tile(m.model_[f"seasonal{s}"].to_numpy()[-s:], n // s + 1)[:n]
                 for s in SEASONS)
    adjusted = np.concatenate([m.model_[["trend", "remainder"]].sum(axis=1).to_numpy(),
                               y[FIT_WINDOW:FIT_WINDOW + k] - season[:k]])
    ref = m.trend_forecaster.forward(y=adjusted, h=24)["mean"] + season[k:]
    assert [p.forecast(h) for h in range(1, 25)] == pytest.approx(list(ref), rel=1e-9)
    # and it tracks the signal: within 5 % a day ahead
    assert p.forecast(24) == pytest.approx(float(y[FIT_WINDOW + k + 23]), rel=0.05)


def test_it_refits_weekly_and_carries_across_gaps() -> None:
    y = _series(7)
    p = Mstl().fit(y[:FIT_WINDOW])
    first = p.model_
    for v in y[FIT_WINDOW:FIT_WINDOW + REFIT_EVERY]:
        p.update(float(v))
    assert p.model_ is not first and p.since_fit == 0
    p.update(float("nan"))  # a missing hour: the state moves on by its own forecast
    assert math.isfinite(p.forecast(3)) and p.forecast(3) > 0
    assert p.forecast(3) == pytest.approx(float(y[FIT_WINDOW + REFIT_EVERY + 3]), rel=0.05)


def test_a_short_history_falls_back_and_the_registry_names_it() -> None:
    p = make("mstl")
    p.fit(_series(1))  # a week: two weekly seasons are needed
    assert p.fallback_name == "seasonal-naive-24"
    assert "mstl" not in METHODS  # a baseline, never a policy's method
    assert parse_methods("all,mstl") == [*METHODS, "mstl"]
    with pytest.raises(ElastoreError, match="mstl"):
        parse_methods("mstl,nope")


def test_without_statsforecast_the_error_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def no_statsforecast(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("statsforecast"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_statsforecast)
    with pytest.raises(ElastoreError, match=r"elastore\[forecast\]"):
        Mstl().fit(_series(4))


def test_mstl_log_fits_the_log_on_all_the_history_so_far() -> None:
    """``mstl-log`` (issue 40): the same model on log(1 + load), fitted on everything seen
    (not the last four weeks); right after a fit its forecast is exp(MSTL.predict) - 1 of
    that fit, and a weekly refit keeps every hour (the window only grows)."""
    from elastore.predictor.mstl import MstlLog

    y = _series(8)
    p = MstlLog().fit(y[:6 * 168])
    assert p.hist.array().size == 6 * 168 > FIT_WINDOW  # the whole history, not 4 weeks
    ref = models.MSTL(season_length=list(SEASONS),
                      trend_forecaster=models.AutoETS(model="ZZN")).fit(
        np.log1p(y[:6 * 168])).predict(24)["mean"]
    assert [p.forecast(h) for h in (1, 12, 24)] == pytest.approx(
        list(np.expm1([ref[0], ref[11], ref[23]])), rel=1e-9)
    for v in y[6 * 168:6 * 168 + REFIT_EVERY]:
        p.update(float(v))
    assert p.since_fit == 0 and p.hist.array().size == 7 * 168  # refitted on all of it
    assert p.forecast(1) == pytest.approx(y[7 * 168], rel=0.05)
    assert make("mstl-log").name == "mstl-log"
