"""The self-calibrating capacity model (elastore.models.online): the prior, the bounded
exploration, learning, missing data, and the state's round trip. Pure: no cluster."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from elastore.models.bundle import ModelSet
from elastore.models.capacity import ModelError
from elastore.models.online import MAX_BINS, CapacityLearner, scaled
from elastore.resources import builtin_model

R = 0.95


@pytest.fixture(scope="module")
def truth():
    return ModelSet.load(builtin_model("lab")).capacity


def cap(model, r=R):
    return float(model.capacity(r, 0.0, 0.0))


def measure(truth, fractions, rng, noise=0.1, r=R):
    """Per-node observations at these fractions of the true capacity, with noise."""
    c = cap(truth)
    loads = np.asarray(fractions, dtype=float) * c
    lat = truth.latency_ms(loads, r, 0.0, 0.0) * np.exp(rng.normal(0, noise, len(loads)))
    x = np.column_stack([loads, np.full(len(loads), r), np.zeros(len(loads)),
                         np.zeros(len(loads))])
    return x, lat


def test_scaled_moves_capacity_and_latency(truth):
    s = scaled(truth, 0.5)
    assert cap(s) == pytest.approx(0.5 * cap(truth), rel=1e-6)
    # latency at half the load of the original is the original's at the full load
    assert float(s.latency_ms(50.0, R)) == pytest.approx(float(truth.latency_ms(100.0, R)))
    up = scaled(truth, 1.0, 2.0)
    assert float(up.latency_ms(50.0, R)) == pytest.approx(2 * float(truth.latency_ms(50.0, R)))
    with pytest.raises(ModelError):
        scaled(truth, 0.0)


def test_the_prior_alone_is_the_prior_with_low_confidence(truth):
    prior = scaled(truth, 0.5)
    c = CapacityLearner().calibrate(prior)
    assert c.samples == 0 and c.bins == 0
    # the grid's median of the prior itself (within its 3 % spacing)
    assert c.capacity_rps == pytest.approx(cap(prior), rel=0.03)
    assert c.confidence < 0.2  # a prior of sd ln 3: wide
    assert not c.scale_in_allowed
    assert c.exploration_cap_rps is None  # nothing seen: nothing to cap by
    lo, hi = c.capacity_interval_rps
    assert lo < 0.5 * cap(prior) and hi > 2 * cap(prior)


@pytest.mark.parametrize("k", [2.0, 0.5])
def test_learns_a_capacity_wrong_by_k(truth, k):
    rng = np.random.default_rng(1)
    prior = scaled(truth, k)
    learner = CapacityLearner()
    learner.fit(*measure(truth, rng.uniform(0.3, 0.95, 120), rng), prior=prior)
    c = learner.calibrate(prior)
    assert c.capacity_rps == pytest.approx(cap(truth), rel=0.05)
    assert c.load_scale == pytest.approx(1 / k, rel=0.05)
    assert c.confidence >= 0.8 and c.scale_in_allowed
    assert c.border_observed
    assert c.fit_error_pct is not None and c.fit_error_pct < 20
    # the learned model is the truth's surface, not just its capacity
    assert cap(c.learned, 0.9) == pytest.approx(cap(truth, 0.9), rel=0.08)


def test_exploration_is_bounded_until_the_border_is_seen(truth):
    """An optimistic prior (2x) and light load only: the planner may not go past the
    highest load seen within the SLO by more than the step, whatever the prior says."""
    rng = np.random.default_rng(2)
    prior = scaled(truth, 2.0)
    learner = CapacityLearner(exploration_step=0.15, confidence_threshold=0.999)
    x, y = measure(truth, rng.uniform(0.2, 0.4, 30), rng, noise=0.0)
    learner.fit(x, y, prior=prior)
    c = learner.calibrate(prior)
    assert not c.border_observed and c.confidence < 0.999
    seen = float(x[:, 0].max())
    assert learner.max_ok_load == pytest.approx(seen)
    assert c.exploration_cap_rps == pytest.approx(1.15 * seen)
    assert c.planning_capacity_rps == pytest.approx(1.15 * seen)
    assert cap(c.planning) == pytest.approx(1.15 * seen, rel=0.01)
    assert c.planning_capacity_rps < c.capacity_rps
    # the planner keeps headroom: the cap leaves the same load per node planned
    assert learner.calibrate(prior, headroom=0.1).exploration_cap_rps == pytest.approx(
        1.15 * seen / 0.9)
    # one observation near the border lifts the cap: the border has been observed
    x2, y2 = measure(truth, [0.99], rng, noise=0.0)  # 86 ms: past 0.7 x the SLO
    learner.partial_fit(x2, y2, prior=prior)
    c2 = learner.calibrate(prior)
    assert c2.border_observed and c2.exploration_cap_rps is None
    assert c2.planning_capacity_rps == c2.capacity_rps


def test_a_violation_is_evidence_and_lowers_an_optimistic_prior(truth):
    prior = scaled(truth, 2.0)
    learner = CapacityLearner()
    load = 1.3 * cap(truth)
    learner.observe([load, R, 0.0, 0.0], [float(truth.latency_ms(load, R))], prior=prior)
    c = learner.calibrate(prior)
    assert learner.border_seen and learner.max_ok_load == 0.0
    assert c.capacity_rps < 0.8 * cap(prior)


def test_missing_and_invalid_inputs_are_skipped_never_zero(truth):
    prior = scaled(truth, 1.0)
    learner = CapacityLearner()
    why = learner.observe([[100.0, R, math.nan, 0.0], [100.0, R, 0.0, 0.0],
                           [-5.0, R, 0.0, 0.0], [100.0, 1.5, 0.0, 0.0]],
                          [10.0, math.nan, 10.0, 10.0], prior=prior)
    assert why == ["missing", "missing", "invalid", "invalid"]
    assert learner.observations == 0 and learner.bins == {}
    assert learner.skipped == {"missing": 2, "invalid": 2}
    with pytest.raises(ModelError, match="rows of"):
        learner.observe([[1.0, 2.0]], [1.0], prior=prior)


def test_migration_is_learned_only_where_observed(truth):
    """Observations with migration land in their own bins: the evidence says what was
    measured at that rate, and the unobserved rates stay the prior's shape."""
    prior = scaled(truth, 1.0)
    learner = CapacityLearner()
    learner.observe([[100.0, R, 0.0, 0.0], [100.0, R, 4.0, 0.0]],
                    [float(truth.latency_ms(100.0, R)), float(truth.latency_ms(100.0, R, 4.0))],
                    prior=prior)
    assert len(learner.bins) == 2
    assert sorted(k[2] for k in learner.bins) == [0, 1 + round(math.log(16) / math.log(1.25))]


def test_state_round_trips_exactly_through_json(truth):
    rng = np.random.default_rng(3)
    prior = scaled(truth, 0.5)
    learner = CapacityLearner()
    learner.fit(*measure(truth, rng.uniform(0.2, 0.8, 50), rng), prior=prior)
    doc = json.loads(json.dumps(learner.to_dict()))
    again = CapacityLearner.from_dict(doc)
    assert again.to_dict() == learner.to_dict()
    assert again.calibrate(prior).summary() == learner.calibrate(prior).summary()
    # and continues where it stopped
    x, y = measure(truth, [0.9], rng)
    learner.observe(x, y, prior=prior)
    again.observe(x, y, prior=prior)
    assert again.to_dict() == learner.to_dict()


@pytest.mark.parametrize("doc", [None, {"version": 99}, {"version": 1, "bins": [[1, 2]]},
                                 {"version": 1, "bins": [[0, 0, 0, 0, -1, .9, 0, 0, 2, 1, 1]]},
                                 {"version": 1, "observations": -1},
                                 {"version": 1, "params": {"sigma": "x"}},
                                 {"version": 2, "params": {"localBandwidth": float("nan")}}])
def test_a_malformed_state_is_an_error(doc):
    with pytest.raises(ModelError):
        CapacityLearner.from_dict(doc)


def test_bins_are_bounded(truth):
    prior = scaled(truth, 1.0)
    learner = CapacityLearner()
    loads = 1.06 ** np.arange(MAX_BINS + 50)  # 5 % bins: one each
    x = np.column_stack([loads, np.full(len(loads), R), np.zeros(len(loads)),
                         np.zeros(len(loads))])
    learner.observe(x, np.full(len(loads), 5.0), prior=prior)
    assert len(learner.bins) == MAX_BINS
    assert learner.observations == MAX_BINS + 50


def test_bad_parameters_are_errors():
    with pytest.raises(ModelError, match="sigma"):
        CapacityLearner(sigma=0)
    with pytest.raises(ModelError, match="confidence_threshold"):
        CapacityLearner(confidence_threshold=1.5)
    with pytest.raises(ModelError, match="local_bandwidth"):
        CapacityLearner(local_bandwidth=-0.1)


def test_a_noisy_store_widens_the_posterior_to_what_its_measurements_support(truth):
    """A lab whose GC pauses scatter one period's p95 by x/÷1.8 (ln sd 0.6) at one load:
    the learner measures that scatter and counts its evidence for less. Its 10-90 %
    interval then holds the true capacity; with the model's error alone (sigma 0.15) it was
    a few percent wide and missed the truth most of the time."""
    covered, covered_without = 0, 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        prior = scaled(truth, 0.5)
        x, lat = measure(truth, rng.uniform(0.3, 0.95, 120), rng, noise=0.6)
        learner = CapacityLearner().fit(x, lat, prior=prior)
        assert learner.scatter() == pytest.approx(0.6, rel=0.15)
        lo, hi = learner.calibrate(prior).capacity_interval_rps
        covered += lo <= cap(truth) <= hi
        blind = CapacityLearner().fit(x, lat, prior=prior)
        blind.scatter = lambda: 0.0  # type: ignore[method-assign]
        lo, hi = blind.calibrate(prior).capacity_interval_rps
        covered_without += lo <= cap(truth) <= hi
    assert covered >= 5, covered
    assert covered_without <= 3, covered_without


def test_one_slow_window_at_a_load_served_well_is_not_the_border(truth):
    prior = scaled(truth, 2.0)  # optimistic: the exploration cap is what protects
    c = cap(truth)
    learner = CapacityLearner()
    learner.partial_fit([[0.5 * c, R, 0, 0]] * 3, [0.2 * prior.slo_ms] * 3, prior=prior)
    # a GC pause: one window at a lower load than already served, at 3x the SLO
    learner.partial_fit([[0.4 * c, R, 0, 0]], [3 * prior.slo_ms], prior=prior)
    assert not learner.border_seen
    # near the SLO at the highest load yet: that is the border
    learner.partial_fit([[0.6 * c, R, 0, 0]], [0.8 * prior.slo_ms], prior=prior)
    assert learner.border_seen


def test_a_version_1_state_continues(truth):
    prior = scaled(truth, 0.5)
    rng = np.random.default_rng(4)
    learner = CapacityLearner().fit(*measure(truth, rng.uniform(0.3, 0.9, 40), rng),
                                    prior=prior)
    doc = learner.to_dict()
    doc["version"] = 1
    doc["bins"] = [row[:11] for row in doc["bins"]]
    again = CapacityLearner.from_dict(json.loads(json.dumps(doc)))
    assert again.scatter() == 0.0  # version 1 kept no scatter
    assert again.calibrate(prior).capacity_rps == pytest.approx(
        learner.calibrate(prior).capacity_rps, rel=0.1)
    doc["bins"] = [row[:10] for row in doc["bins"]]
    with pytest.raises(ModelError, match="fields"):
        CapacityLearner.from_dict(doc)


def reshaped(model, power):
    """``model`` with another shape and the same border: latency ``SLO * (lat / SLO) **
    power`` (power > 1: flatter below the border, then a steeper knee; < 1: a slow rise)."""
    from dataclasses import replace

    ls = math.log(model.slo_ms)
    return replace(model, log_latency=ls + power * (model.log_latency - ls),
                   capacity_table=np.zeros(0))


@pytest.mark.parametrize("power", [0.6, 2.5])
def test_a_shape_the_prior_lacks_is_fitted_near_the_border(truth, power):
    """The store's latency curve is not the prior's: the two-number family fitted to every
    bin alike misses the border by > 10 % (the flat low loads outvote the knee); the local
    fit (bins weighted by how near the border their load is) lands within 5 % on each of
    five seeded days. A power of 0.5 is still 14-16 % off on three of five seeds
    (benchmarks/learner_shapes.py): documented, not asserted."""
    store = reshaped(truth, power)
    prior = scaled(truth, 0.5)
    for seed in range(5):
        rng = np.random.default_rng(seed)
        x, y = measure(store, rng.uniform(0.3, 1.05, 150), rng)
        glob = CapacityLearner(local_bandwidth=0.0).fit(x, y, prior=prior).calibrate(prior)
        local = CapacityLearner().fit(x, y, prior=prior).calibrate(prior)
        assert abs(glob.capacity_rps / cap(store) - 1) > 0.10, (seed, glob.capacity_rps)
        assert local.capacity_rps == pytest.approx(cap(store), rel=0.05), seed
        # the fit error is the local one: where the border is, the shape fits
        assert local.fit_error_pct is not None and glob.fit_error_pct is not None
        assert local.fit_error_pct < glob.fit_error_pct
