"""The forecast kept between periods (policyloop.WarmForecast): fed only the steps completed
since the last period, refitted from scratch whenever the history is not the kept one moved
on, and the history's end on the step grid (metrics.history_end)."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from elastore.operator import policyloop
from elastore.operator.metrics import Snapshot, history_end
from elastore.operator.spec import PolicySpec, parse

STEP = 60.0
STEPS = 400  # the history Prometheus returns: a fixed number of steps
DOC: dict[str, Any] = {
    "target": {"name": "store", "replicationFactor": 3},
    "replicas": {"min": 3, "max": 30},
    "slo": {"latencyMs": 30},
    "controlPeriod": "30s",
    "prediction": {"method": "persistence", "horizon": "90s", "step": "60s",
                   "calibrationSteps": 100},
    "planner": {"mode": "Horizon", "lookahead": "1200s"},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
}


def _spec(**prediction: Any) -> PolicySpec:
    doc = copy.deepcopy(DOC)
    doc["prediction"].update(prediction)
    return parse(doc)


def load(t: np.ndarray) -> np.ndarray:
    """A load with a period of an hour and a slow rise, requests/s."""
    return 500.0 + 200.0 * np.sin(2 * math.pi * t / 3600.0) + t / 100.0


def snap(at_s: float, revise: float | None = None) -> Snapshot:
    """What a Prometheus source returns at ``at_s``: the load now, and the last STEPS whole
    steps ending on the step grid (``revise``: that step's value changed since)."""
    end = history_end(at_s, STEP)
    times = end - STEP * np.arange(STEPS - 1, -1, -1)
    hist = load(times)
    if revise is not None:
        hist[np.argmin(np.abs(times - revise))] *= 1.01
    return Snapshot(at_s=at_s, load_rps=float(load(np.array([at_s]))[0]), read_ratio=0.95,
                    data_bytes=1e9, migration_mibps=None, history_rps=hist, step_s=STEP,
                    history_end_s=end)


def test_history_end_is_on_the_step_grid_and_at_most_a_step_back() -> None:
    assert history_end(7200.0, 3600.0) == 7200.0  # on the hour: that hour is whole
    assert history_end(7199.9, 3600.0) == 3600.0
    assert history_end(1_764_400_000.0 + 45.0, 30.0) == 1_764_400_020.0
    for at in np.linspace(1e9, 1e9 + 3600, 97):
        end = history_end(float(at), 60.0)
        assert at - 60.0 < end <= at and end % 60.0 == 0


def test_a_kept_fit_takes_only_the_new_steps_and_does_not_refit() -> None:
    spec, warm = _spec(), policyloop.WarmForecast()
    t0 = 1_000_060.0  # 40 s into a step
    assert t0 - history_end(t0, STEP) == 40.0
    paths = []
    for k in range(8):  # two periods of 30 s per 60-s step
        f = policyloop.forecast(spec, snap(t0 + 30.0 * k), warm)
        assert f.path is not None
        paths.append(f.path)
    assert warm.refits == 1 and warm.reused == 7
    # one new step every other period, none in between
    assert warm.updates == round((history_end(t0 + 210.0, STEP) - history_end(t0, STEP))
                                 / STEP) == 4
    # a period inside the same step reuses the path as it was (same data, same forecast)
    same = [k for k in range(1, 8) if history_end(t0 + 30.0 * k, STEP) ==
            history_end(t0 + 30.0 * (k - 1), STEP)]
    assert same
    for k in same:
        assert np.array_equal(paths[k].median_rps, paths[k - 1].median_rps)
        assert np.array_equal(paths[k].times_s, paths[k - 1].times_s)
    # the path's steps follow the history's end, after now
    at = t0 + 30.0 * 7
    assert paths[7].times_s[0] == history_end(at, STEP) + STEP > at


@pytest.mark.parametrize("change", ["revised", "method", "calibration", "gap-of-history",
                                    "back-in-time"])
def test_anything_but_the_history_moved_on_fits_from_scratch(change: str) -> None:
    spec, warm = _spec(), policyloop.WarmForecast()
    t0 = 1_000_000.0
    policyloop.forecast(spec, snap(t0), warm)
    at, s2, revise = t0 + STEP, spec, None
    if change == "revised":  # a step the fit has already seen reads differently now
        revise = t0 - 10 * STEP
        s = snap(at, revise=revise)
    elif change == "method":
        s2, s = _spec(method="seasonal-naive-24"), snap(at)
    elif change == "calibration":
        s2, s = _spec(calibrationSteps=50), snap(at)
    elif change == "gap-of-history":  # the operator was away for most of the window
        s = snap(t0 + STEP * (STEPS - 10))
    else:  # a clock set back
        s = snap(t0 - STEP)
    policyloop.forecast(s2, s, warm)
    assert warm.refits == 2 and warm.reused == 0, change
    policyloop.forecast(s2, snap(s.at_s + STEP, revise), warm)  # and is kept again after
    assert warm.refits == 2 and warm.reused == 1


def test_the_kept_fit_forecasts_what_a_fit_from_scratch_does_for_persistence() -> None:
    """Persistence has no state beyond its last value, so a fit kept over 20 steps and one
    from scratch on the same history give the same median path; the quantiles differ only
    by which origins the errors came from, both inside the calibration window."""
    spec, warm = _spec(), policyloop.WarmForecast()
    t0 = 2_000_000.0
    for k in range(21):
        kept = policyloop.forecast(spec, snap(t0 + STEP * k), warm)
    fresh = policyloop.forecast(spec, snap(t0 + STEP * 20))
    assert warm.refits == 1 and warm.updates == 20
    assert kept.path is not None and fresh.path is not None
    assert np.array_equal(kept.path.median_rps, fresh.path.median_rps)
    assert np.array_equal(kept.path.times_s, fresh.path.times_s)
    assert kept.rps == fresh.rps
    assert np.allclose(kept.path.scenarios_rps, fresh.path.scenarios_rps, rtol=0.02)


def test_the_forecast_at_the_horizon_is_between_now_and_the_path() -> None:
    """With the history ending before now, the horizon's value lies on the line from the
    load now to the path's step after it (persistence: the last whole step's load)."""
    spec = _spec(horizon="30s")
    s = snap(1_000_040.0)  # 40 s into the step: the path's first step ends 20 s from now
    f = policyloop.forecast(spec, s)
    assert f.path is not None
    first = float(f.path.median_rps[0])
    assert f.path.times_s[0] == 1_000_080.0
    # 30 s of the 40 s from now to that step's end
    assert f.rps == pytest.approx(s.load_rps + (first - s.load_rps) * 30 / 40)
    assert f.for_s == s.at_s + 30.0
    # the window planner (no path) interpolates the same way
    w = policyloop.forecast(parse({**copy.deepcopy(DOC), "planner": {"mode": "Window"},
                                   "prediction": {**DOC["prediction"], "horizon": "30s"}}), s)
    assert w.path is None
    assert w.rps == pytest.approx(f.rps)


def test_row_quantiles_are_numpys_for_rows_of_any_count() -> None:
    from elastore.predictor.intervals import row_quantiles

    rng = np.random.default_rng(1)
    values = rng.standard_normal((50, 40))
    counts = rng.integers(1, 41, 50)
    counts[:2] = (1, 40)  # one value; a full row
    levels = np.array([0.0, 0.01, 0.1, 0.5, 0.9, 0.995, 1.0])
    got = row_quantiles(values, counts, levels)
    want = np.stack([np.quantile(values[i, :counts[i]], levels) for i in range(50)], axis=1)
    assert got.shape == (len(levels), 50)
    assert np.allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seen, kinds", [(12, {"moves", "pooled"}), (30, {"own", "pooled"}),
                                         (400, {"own"})], ids=["young", "pooled", "calibrated"])
def test_quantile_paths_batched_are_each_horizons_own(seen: int, kinds: set[str]) -> None:
    """The quantile paths, taken in one sort for the calibrated horizons and once per
    distinct set of errors for the rest, are each horizon's quantiles of its own
    ``errors(h)``, made monotone in lead time."""
    from elastore.predictor.intervals import Intervals, scenario_levels
    from elastore.predictor.registry import make

    rng = np.random.default_rng(3)
    series = 100 * np.exp(0.2 * rng.standard_normal(seen + 1))
    iv = Intervals(make("persistence"), horizons=24, window=120, min_errors=20)
    iv.fit(series[:1])
    for v in series[1:]:
        iv.update(float(v))
    levels, _ = scenario_levels()
    shifts = np.stack([np.quantile(iv.errors(h), levels) for h in range(1, 25)], axis=1)
    up, down = levels > 0.5, levels < 0.5
    shifts[up] = np.maximum.accumulate(shifts[up], axis=1)
    shifts[down] = np.minimum.accumulate(shifts[down], axis=1)
    want = np.maximum(np.expm1(np.log1p(iv.path())[None, :] + shifts), 0.0)
    assert np.allclose(iv.quantile_paths(levels), want, rtol=1e-12, atol=1e-9)
    assert {iv._basis(h)[0] for h in range(1, 25)} == kinds  # each way was exercised
