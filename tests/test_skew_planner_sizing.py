"""Issue 38, the planner's side: sized for the busiest node, not the mean. With a
``LoadSkew`` (the busiest node's load over the mean at each size, after the rebalancing
the policy allows) both planners buy what keeps the busiest node within the SLO; with a
uniform one they plan exactly as without it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from elastore.models import ModelError, ModelSet, fit_capacity
from elastore.models.bandwidth import fit_bandwidth
from elastore.models.synthetic import LatencyLaw, bandwidth_profile, sample_profile
from elastore.planner import LoadSkew, Observation, PlannerConfig, plan

DAY = 86400.0


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    cap = fit_capacity(sample_profile(LatencyLaw(), seed=3), 30.0)
    return ModelSet(cap, fit_bandwidth(bandwidth_profile(seed=3)))


def cfg(mode: str, **kw: Any) -> PlannerConfig:
    base: dict[str, Any] = dict(min_replicas=3, max_replicas=30, window_s=600.0, mode=mode,
                                lookahead_s=DAY, node_overhead_s=120.0,
                                min_migration_mibps=1.0, max_migration_mibps=24.0,
                                scale_down_stabilization_s=0.0, reactive=False)
    base.update(kw)
    return PlannerConfig(**base)


def observe(ms: ModelSet, servers: float, replicas: int, skew: LoadSkew | None
            ) -> Observation:
    """A steady load worth ``servers`` mean nodes at full capacity."""
    load = servers * float(ms.capacity.capacity(0.95, 0.0, 0.0))
    return Observation(now_s=0.0, replicas=replicas, load_rps=load, forecast_rps=load,
                       read_ratio=0.95, data_bytes=50 * 2**30, load_skew=skew)


@pytest.mark.parametrize("mode", ["window", "horizon"])
def test_skew_a_uniform_load_plans_as_the_mean(ms: ModelSet, mode: str) -> None:
    o = observe(ms, 5.3, 6, None)
    mean = plan(o, cfg(mode), ms)
    same = plan(observe(ms, 5.3, 6, LoadSkew.uniform()), cfg(mode), ms)
    assert same.desired_replicas == mean.desired_replicas
    assert [a.replicas for a in same.actions] == [a.replicas for a in mean.actions]
    assert "sized for the busiest node: 1.00 x the mean" in same.reason


@pytest.mark.parametrize("mode", ["window", "horizon"])
def test_skew_the_busiest_node_buys_the_servers_it_needs(ms: ModelSet, mode: str) -> None:
    """The mean fits 6 nodes; with the busiest node 1.5 x the mean at every size, 6 nodes
    leave it over capacity: the plan wants at least ceil(5.3 x 1.5) = 8 (the planners keep
    a margin, so maybe more), and says the skew binds."""
    mean = plan(observe(ms, 5.3, 6, None), cfg(mode), ms)
    skew = LoadSkew(((3, 1.5),), "split + move")
    hot = plan(observe(ms, 5.3, 6, skew), cfg(mode), ms)
    assert hot.desired_replicas >= max(8, mean.desired_replicas + 1), hot.reason
    assert "sized for the busiest node: 1.50 x the mean" in hot.reason
    assert "(split + move)" in hot.reason
    assert hot.details["binding"] == "skew"
    assert mean.details["binding"] == "load"
    if mode == "horizon":
        assert hot.details["busiest_over_mean"][8] == 1.5


@pytest.mark.parametrize("mode", ["window", "horizon"])
def test_skew_a_skew_that_rebalancing_removes_at_a_larger_size_stops_there(
        ms: ModelSet, mode: str) -> None:
    """The busiest node is 2 x the mean up to 7 nodes and balanced from 8 on (a split of
    the hot range by the eighth node): 8 nodes do; the planner need not buy 11 for 2 x."""
    skew = LoadSkew(((3, 2.0), (8, 1.0)))
    hot = plan(observe(ms, 5.3, 6, skew), cfg(mode), ms)
    assert 8 <= hot.desired_replicas < math.ceil(5.3 * 2.0), hot.reason


def test_skew_factor_lookup_takes_the_lower_known_size() -> None:
    s = LoadSkew(((4, 1.8), (6, 1.3), (9, 1.1)))
    assert [s.factor(n) for n in (1, 4, 5, 6, 8, 9, 40)] == [1.8, 1.8, 1.8, 1.3, 1.3, 1.1, 1.1]


@pytest.mark.parametrize("busiest, message", [
    ((), "no cluster size"),
    (((3, 0.9),), "finite number >= 1"),
    (((3, float("nan")),), "finite number >= 1"),
    (((4, 1.2), (4, 1.1)), "increasing"),
    (((0, 1.2),), "increasing"),
])
def test_skew_a_malformed_load_skew_is_refused(ms: ModelSet, busiest: Any, message: str
                                               ) -> None:
    o = observe(ms, 5.3, 6, LoadSkew(busiest))
    with pytest.raises(ModelError, match=message):
        plan(o, cfg("window"), ms)
