"""The ProRenaTa planner: Fig. 5.15's two cases, the merge rule, and the guards."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastore.models import ModelError, ModelSet, fit_capacity
from elastore.models.bandwidth import fit_bandwidth
from elastore.models.synthetic import LatencyLaw, bandwidth_profile, sample_profile
from elastore.planner import Observation, Operation, PlannerConfig, plan
from elastore.planner.types import LoadPath
from elastore.resources import builtin_model

GIB = 2**30


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    cap = fit_capacity(sample_profile(LatencyLaw(), seed=3), 30.0)
    return ModelSet(cap, fit_bandwidth(bandwidth_profile(seed=3)))


def cfg(**kw: object) -> PlannerConfig:
    base: dict[str, object] = dict(min_replicas=3, max_replicas=50, replication_factor=3,
                                   window_s=600.0, headroom=0.1)
    base.update(kw)
    return PlannerConfig(**base)  # type: ignore[arg-type]


def obs(**kw: object) -> Observation:
    base: dict[str, object] = dict(now_s=0.0, replicas=10, load_rps=3000.0,
                                   forecast_rps=3000.0, read_ratio=0.95, data_bytes=10 * GIB)
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def per_server(ms: ModelSet) -> float:
    return float(ms.capacity.capacity(0.95, 0, 0)) * 0.9


def test_fig_5_15_a_both_plans_fit_in_the_window(ms: ModelSet) -> None:
    c = per_server(ms)
    # predicted 8 servers' worth for now, observed 9's; 11 servers' worth at the window end
    o = obs(replicas=8, load_rps=8.5 * c, predicted_now_rps=7.5 * c, forecast_rps=10.5 * c,
            data_bytes=2 * GIB)
    p = plan(o, cfg(), ms)
    assert not p.details["merged"]
    reactive = [a for a in p.actions if a.source == "reactive"]
    proactive = [a for a in p.actions if a.source == "proactive"]
    assert [a.replicas for a in reactive] == [9] and reactive[0].at_s == 0.0
    assert [a.replicas for a in proactive] == [10, 11]
    # the proactive plan waits, then each node is ready by its own deadline: when the load
    # ramp would exceed what the servers before it carry, at the latest the window end
    assert proactive[0].at_s > reactive[0].expected_end_s
    assert proactive[-1].expected_end_s <= 600.0 + 1e-6
    assert all("(late)" not in a.reason for a in proactive)
    slope = (o.forecast_rps - o.load_rps) / 600
    usable = float(ms.capacity.capacity(0.95, 0.0, 0)) * 0.9
    for a in proactive:
        deadline = min(600.0, (( a.replicas - 1) * usable - o.load_rps) / slope)
        assert a.expected_end_s <= deadline + 1e-6
    assert p.desired_replicas == 11 and p.migration_mibps > 0


def test_fig_5_15_b_plans_do_not_fit_and_merge(ms: ModelSet) -> None:
    c = per_server(ms)
    o = obs(replicas=8, load_rps=9.5 * c, predicted_now_rps=7.5 * c, forecast_rps=12.5 * c,
            data_bytes=400 * GIB)
    ours = plan(o, cfg(), ms)
    assert ours.details["merged"]
    assert ours.details["t_reactive_s"] + ours.details["t_proactive_s"] > 600
    # short now (reactive +2): one change straight to the larger target, starting now
    assert all(a.source == "merged" for a in ours.actions)
    assert ours.actions[0].at_s == 0.0 and ours.desired_replicas == 13
    paper = plan(o, cfg(merge="pseudocode"), ms)
    # Fig. 5.16: dVMs(next) + dVMs(now) = (13 - 8) + (10 - 8) -> 15, at t_e - t
    assert paper.desired_replicas == 15
    assert paper.actions[0].at_s >= 0.0


def test_merge_drops_a_reactive_scale_in(ms: ModelSet) -> None:
    c = per_server(ms)
    o = obs(replicas=10, load_rps=7.5 * c, predicted_now_rps=9.5 * c, forecast_rps=12.5 * c,
            data_bytes=400 * GIB)
    p = plan(o, cfg(), ms)
    assert p.details["reactive"] < 10  # it wanted fewer now
    assert all(a.replicas > 10 for a in p.actions)  # but nothing is removed to be re-added
    assert p.desired_replicas == 13


def test_one_node_at_a_time_actions_are_sequential(ms: ModelSet) -> None:
    c = per_server(ms)
    p = plan(obs(replicas=5, load_rps=5 * c, forecast_rps=9.5 * c, data_bytes=5 * GIB),
             cfg(), ms)
    reps = [a.replicas for a in p.actions]
    assert reps == [6, 7, 8, 9, 10]
    for a, b in zip(p.actions, p.actions[1:], strict=False):
        assert b.at_s == pytest.approx(a.expected_end_s)
    single = plan(obs(replicas=5, load_rps=5 * c, forecast_rps=9.5 * c, data_bytes=5 * GIB),
                  cfg(one_at_a_time=False, migration_mode="parallel"), ms)
    assert [a.replicas for a in single.actions] == [10]


def test_scale_down_stabilization(ms: ModelSet) -> None:
    c = per_server(ms)
    o = obs(replicas=10, load_rps=4 * c, forecast_rps=4 * c, recent_desired=((-100.0, 9),))
    p = plan(o, cfg(), ms)
    assert p.desired_replicas == 9  # not 4: a recommendation of 9 was made 100 s ago
    o2 = obs(replicas=10, load_rps=4 * c, forecast_rps=4 * c, recent_desired=((-1000.0, 9),))
    assert plan(o2, cfg(), ms).desired_replicas == 4  # that recommendation has expired


def test_interference_needs_more_servers(ms: ModelSet) -> None:
    quiet = plan(obs(forecast_rps=5000), cfg(), ms)
    noisy = plan(obs(forecast_rps=5000, interference=0.5), cfg(), ms)
    assert noisy.desired_replicas > quiet.desired_replicas
    assert noisy.details["capacity_rps"] < quiet.details["capacity_rps"]


def test_bandwidth_split_in_the_plan(ms: ModelSet) -> None:
    p = plan(obs(forecast_rps=3500), cfg(total_bandwidth_mbit=40.0), ms)
    assert p.bandwidth is not None and p.bandwidth.clients_satisfied
    assert p.migration_mibps <= p.bandwidth.migration_mibps + 1e-9


def test_missing_metric_is_an_error(ms: ModelSet) -> None:
    with pytest.raises(ModelError, match="missing metric is an error"):
        plan(obs(load_rps=math.nan), cfg(), ms)
    with pytest.raises(ModelError, match="max replicas 2 < min 3"):
        plan(obs(), cfg(max_replicas=2), ms)


@settings(max_examples=150, deadline=None)
@given(replicas=st.integers(1, 60), load=st.floats(0, 40_000), forecast=st.floats(0, 40_000),
       predicted=st.none() | st.floats(0, 40_000), lo=st.integers(1, 10), span=st.integers(0, 40),
       rf=st.integers(1, 5), gib=st.floats(0.1, 500), inter=st.floats(0, 0.7),
       merge=st.sampled_from(["elastore", "pseudocode"]))
def test_plans_never_break_min_max_or_rf(
    ms: ModelSet, replicas: int, load: float, forecast: float, predicted: float | None, lo: int,
    span: int, rf: int, gib: float, inter: float, merge: str
) -> None:
    c = cfg(min_replicas=lo, max_replicas=max(lo, rf) + span, replication_factor=rf,
            merge=merge)
    p = plan(obs(replicas=replicas, load_rps=load, forecast_rps=forecast,
                 predicted_now_rps=predicted, data_bytes=gib * GIB, interference=inter), c, ms)
    floor = max(lo, rf)
    prev = replicas
    for a in p.actions:
        # inside the bounds, or (from a cluster already outside them, node by node)
        # moving towards them: never away
        assert floor <= a.replicas <= c.max_replicas or (
            a.replicas < floor and a.replicas > prev) or (
            a.replicas > c.max_replicas and a.replicas < prev)
        prev = a.replicas
    if p.actions:  # within the bounds, or on its way there from outside them
        d = p.desired_replicas
        assert floor <= d <= c.max_replicas or (d > c.max_replicas and d < replicas) or (
            d < floor and d > replicas)


@settings(max_examples=150, deadline=None)
@given(start=st.integers(3, 30), direction=st.sampled_from([-1, 1]), load=st.floats(0, 20_000),
       forecast=st.floats(0, 20_000), end=st.floats(1, 5000))
def test_an_operation_in_progress_is_never_contradicted(
    ms: ModelSet, start: int, direction: int, load: float, forecast: float, end: float
) -> None:
    op = Operation(start, max(3, start + direction), started_s=-10.0, expected_end_s=end)
    p = plan(obs(replicas=start, load_rps=load, forecast_rps=forecast, operation=op),
             cfg(), ms)
    for a in p.actions:
        assert a.at_s >= end  # nothing starts while the operation runs
    # the plan starts from where the operation will leave the cluster
    assert p.details["base"] == op.to_replicas
    if p.actions:
        assert p.queued
        assert abs(p.actions[0].replicas - op.to_replicas) == 1  # one node at a time from there


@pytest.mark.parametrize("forecast_servers, desired", [(9.5, 10), (8.5, 9)])
def test_no_thrash_a_reactive_scale_in_is_never_undone_in_its_window(
        ms: ModelSet, forecast_servers: float, desired: int) -> None:
    """Observed below the prediction (reactive -2) while the window's end needs 10 (or 9):
    without stabilization the plan went 10 -> 9 -> 8 now and 8 -> 9 -> 10 later. A
    scale-in now goes no lower than the window's end needs, so the sizes never turn."""
    c = per_server(ms)
    o = obs(replicas=10, load_rps=7.5 * c, predicted_now_rps=9.5 * c,
            forecast_rps=forecast_servers * c, data_bytes=2 * GIB)
    p = plan(o, cfg(scale_down_stabilization_s=0), ms)
    assert p.details["reactive_delta"] == -2
    sizes = [10] + [a.replicas for a in p.actions]
    steps = [b - a for a, b in itertools.pairwise(sizes)]
    assert all(d < 0 for d in steps) or all(d > 0 for d in steps), sizes
    assert p.desired_replicas == desired


@pytest.mark.parametrize("mode", ["window", "horizon"])
def test_above_replicas_max_the_plan_goes_back_to_it_whatever_the_load(mode: str) -> None:
    """A StatefulSet above ``replicas.max`` (someone else scaled it, or the max was lowered)
    is brought back to the max now, one node after the other, as HPA brings it, even where
    the load wants more, and in Window mode even where a decommission takes longer than the
    window (the merge rule drops a load's scale-in then, not a bound's). Both planners used
    to hold 6 of max 5 at 2,000 req/s ("no change: 6")."""
    pm = ModelSet.load(builtin_model("placeholder"))
    c = cfg(min_replicas=3, max_replicas=5, mode=mode, lookahead_s=7200.0,
            node_overhead_s=120.0, min_migration_mibps=1.0, max_migration_mibps=24.0)
    assert pm.capacity.servers_needed(2000.0, 0.95, 0.0) == 6  # the load wants 6
    for n, want in ((6, [5]), (8, [7, 6, 5])):
        p = plan(obs(replicas=n, load_rps=2000.0, forecast_rps=2000.0, data_bytes=100 * GIB),
                 c, pm)
        steps = [a.replicas for a in p.actions]
        assert steps[:len(want)] == want, (mode, n, p.reason)
        assert p.actions[0].at_s == 0.0 and p.desired_replicas == 5, p.reason
        assert all(b.at_s >= a.at_s for a, b in itertools.pairwise(p.actions))
        assert "above replicas.max 5: removed one after the other" in p.reason
    # within the bounds nothing of this is said, and the max is never passed
    p = plan(obs(replicas=4, load_rps=2000.0, forecast_rps=2000.0, data_bytes=100 * GIB),
             c, pm)
    assert "above replicas.max" not in p.reason and p.desired_replicas == 5
    assert all(a.replicas <= 5 for a in p.actions)


def test_a_load_past_what_max_carries_holds_the_max_not_fewer() -> None:
    """5,000 req/s on the placeholder model wants 13 servers; the most allowed are 5. Every
    size then violates, and a violation counted once whatever the size made 3 the cheapest
    overload: the horizon plan removed a node of 4 as the load passed the max. Each server
    short of the max now counts as its share of a violation: the plan reaches the max (as
    the Window plan does) and holds it while the overload lasts."""
    pm = ModelSet.load(builtin_model("placeholder"))
    assert pm.capacity.servers_needed(5000.0, 0.95, 0.0) == 13
    for mode in ("horizon", "window"):
        c = cfg(min_replicas=3, max_replicas=5, mode=mode, lookahead_s=7200.0,
                node_overhead_s=120.0, min_migration_mibps=1.0, max_migration_mibps=24.0)
        for n in (3, 4, 5):
            p = plan(obs(replicas=n, load_rps=5000.0, forecast_rps=5000.0,
                         data_bytes=100 * GIB), c, pm)
            assert p.desired_replicas == 5, (mode, n, p.reason)
            assert all(a.replicas >= n for a in p.actions), (mode, n, p.reason)
    # the overload passes: the horizon plan holds the max through it, then scales in
    c = cfg(min_replicas=3, max_replicas=5, mode="horizon", lookahead_s=4 * 3600.0,
            node_overhead_s=120.0, min_migration_mibps=1.0, max_migration_mibps=24.0)
    times = np.arange(600.0, 4 * 3600.0 + 1, 600.0)
    load = np.where(times <= 3600.0, 5000.0, 300.0)
    p = plan(obs(replicas=5, load_rps=5000.0, forecast_rps=5000.0, data_bytes=10 * GIB,
                 path=LoadPath(times, load, load[None, :], np.array([1.0]))), c, pm)
    assert p.actions and p.actions[0].at_s >= 3600.0, p.reason
    assert min(a.replicas for a in p.actions) < 5, p.reason  # (back out for the repeat)
