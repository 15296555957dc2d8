"""The one policy loop (elastore.planner.loop) and the one stabilization helper, and the
proof that the operator and the simulator run the same loop: one scenario through the
operator's adapter and the simulator's controller gives the same decisions."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from elastore.models import ModelSet
from elastore.operator import policyloop
from elastore.operator.metrics import Snapshot
from elastore.operator.spec import parse
from elastore.planner import Operation
from elastore.planner.loop import (
    Memory,
    PlannedAction,
    commit,
    next_action,
    set_points,
    target_at,
)
from elastore.planner.stabilization import remember, stabilized, within
from elastore.resources import builtin_model
from elastore.sim.controllers import Context, ProRenaTaController
from elastore.units import GIB


# --- stabilization -------------------------------------------------------------------------
def test_remember_keeps_only_what_can_still_be_the_maximum() -> None:
    r = remember((), 0.0, 5, 300)
    r = remember(r, 60.0, 3, 300)  # lower: 5 may still be the maximum, both kept
    assert r == ((0.0, 5), (60.0, 3))
    r = remember(r, 120.0, 4, 300)  # 3 can never be the maximum again
    assert r == ((0.0, 5), (120.0, 4))
    r = remember(r, 400.0, 2, 300)  # 5 has left the window
    assert r == ((120.0, 4), (400.0, 2))
    assert within(r, 700.0, 300) == ((400.0, 2),)


def test_stabilized_holds_a_scale_down_for_the_window_only() -> None:
    recent = ((0.0, 6), (200.0, 4))
    assert stabilized(3, 6, 250.0, 300, recent) == 6  # 6 recommended 250 s ago
    assert stabilized(3, 6, 350.0, 300, recent) == 4  # 6 left the window, 4 did not
    assert stabilized(3, 6, 600.0, 300, recent) == 3
    assert stabilized(8, 6, 250.0, 300, recent) == 8  # a scale-up is never held
    assert stabilized(3, 6, 250.0, 0, recent) == 3  # no window, no stabilization
    assert stabilized(3, 5, 250.0, 300, recent) == 5  # never above the current size


# --- the plan as a target over time -----------------------------------------------------------
def _a(at: float, n: int) -> PlannedAction:
    return PlannedAction(at, n, "proactive", "")


def test_target_next_action_and_set_points() -> None:
    actions = (_a(100.0, 4), _a(300.0, 5))
    assert [target_at(actions, t, 3) for t in (50.0, 100.0, 299.0, 300.0)] == [3, 4, 4, 5]
    assert next_action(actions, 100.0) == actions[1] and next_action(actions, 300.0) is None


def test_commit_keeps_the_earlier_start_and_drops_what_is_no_longer_wanted() -> None:
    kept = commit((_a(100.0, 4), _a(200.0, 5)), (_a(150.0, 4), _a(120.0, 6)))
    assert [(a.at_s, a.replicas) for a in kept] == [(100.0, 4), (120.0, 6)]
    assert "kept at its first planned start" in kept[0].reason
    assert commit((_a(100.0, 4),), (_a(50.0, 4),))[0].at_s == 50.0  # earlier is fine


# --- one scenario, two adapters -------------------------------------------------------------
PERIOD = 600.0
SPEC: dict[str, Any] = {
    "target": {"name": "store", "replicationFactor": 3},
    "replicas": {"min": 3, "max": 30},
    "slo": {"latencyMs": 30},  # the placeholder model's own SLO
    "mode": "Enforce",
    "controlPeriod": "600s",
    "prediction": {"method": "persistence", "horizon": "600s", "step": "600s"},
    "migration": {"nodeOverheadSeconds": 60},
    # longer than the period: a scale-down is held by recommendations of earlier periods
    "scaleDown": {"stabilizationSeconds": 1500},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
}


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(builtin_model("placeholder"))


def scenario(ms: ModelSet) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-period load: a ramp up, a plateau, a ramp down (and a warm-up history)."""
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    knots = per * np.concatenate([np.linspace(3.0, 8.0, 7), [8.2, 7.9],
                                  np.linspace(7.5, 3.2, 8), [3.1, 3.3]])
    history = per * np.full(6, 3.0)
    return knots, history, 6 * GIB


@pytest.mark.parametrize("mode, horizon, exercised", [
    # horizon = period: the forecast made a period ago is for now (the reactive correction)
    ("Window", "600s", "reactive"),
    # two periods: every period re-plans a window that ends later, so the commitment of
    # planned starts matters
    ("Window", "1200s", "committed"),
    # the horizon planner over two periods, on the forecast path and its quantile scenarios
    ("Horizon", "600s", "horizon"),
])
@pytest.mark.parametrize("kept", [False, True], ids=["fit-each-period", "fit-kept"])
def test_the_operator_and_the_simulator_make_the_same_decisions(
        ms: ModelSet, mode: str, horizon: str, exercised: str, kept: bool) -> None:
    """``kept``: the operator keeps its fitted forecast between periods
    (:class:`policyloop.WarmForecast`, as the live operator does) and feeds it only the
    new step; without, it fits from scratch every period (a restarted operator)."""
    doc = copy.deepcopy(SPEC)
    doc["prediction"]["horizon"] = horizon
    doc["planner"] = {"mode": mode, "lookahead": "1200s"}
    spec = parse(doc)
    cfg = policyloop.planner_config(spec)
    knots, history, data = scenario(ms)
    sim = ProRenaTaController(method="persistence", mode=mode.lower())
    sim.windows_ahead = 2  # the simulator's lookahead, in periods: the spec's 1200 s
    sim.warm(history)
    op_status: dict[str, Any] = {}  # the operator's CR status, as the runner keeps it
    warm = policyloop.WarmForecast() if kept else None
    replicas = 3
    seen = {exercised: 0, "queued": 0, "in": 0, "out": 0}
    if mode == "Window":
        seen["held"] = 0
    for k in range(len(knots)):
        now = k * PERIOD
        # one period sees an operation under way (its outcome is what the plan builds on)
        op = Operation(replicas, replicas + 1, now - 100.0, now + 200.0) if k == 3 else None
        ctx = Context(k=k, now_s=now, window_s=PERIOD, knots=knots, serving=replicas,
                      target=replicas, op=op, models=ms, cfg=cfg, data_bytes=data,
                      read_ratio=0.95, interference=0.0, load_now=float(knots[k]))
        pts = sim.on_window(ctx)
        s = sim.decisions[-1]
        snap = Snapshot(at_s=now, load_rps=float(knots[k]), read_ratio=0.95, data_bytes=data,
                        migration_mibps=None,
                        history_rps=np.concatenate([history, knots[: k + 1]]), step_s=PERIOD,
                        history_end_s=now)
        o = policyloop.decide(spec, snap, replicas, ms, policyloop.memory_from_status(op_status),
                           operation=op, warm=warm)
        op_status = {"memory": policyloop.memory_to_status(o.memory)}
        if mode == "Horizon":
            assert o.forecast.path is not None and s.forecast.path is not None
            assert np.allclose(o.forecast.path.scenarios_rps, s.forecast.path.scenarios_rps)
        # the same decision, field by field
        assert o.forecast_rps == pytest.approx(s.forecast_rps) and o.method == s.method
        assert o.forecast_for_s == s.forecast_for_s == now + spec.prediction_horizon_s
        assert o.predicted_now_rps == pytest.approx(s.predicted_now_rps)
        assert o.desired_replicas == s.desired_replicas, (k, o.reason, s.reason)
        assert o.migration_mibps == pytest.approx(s.migration_mibps)
        assert o.actions == s.actions, k
        assert o.reason == s.reason
        assert o.memory == s.memory
        # the simulator's set-points are the operator's target over time
        base = op.to_replicas if op is not None else replicas
        for t, n in pts:
            assert target_at(o.actions, t, base) == n
        # what the scenario exercised
        p = s.plan
        if "held" in seen:
            seen["held"] += p.details["proactive"] > p.details["proactive_unbounded"]
        if exercised == "committed":
            seen[exercised] += any("kept at its first" in a.reason for a in s.actions)
        elif exercised == "reactive":
            seen[exercised] += p.details["reactive_delta"] != 0
        else:
            seen[exercised] += p.details.get("mode") == "horizon" and bool(p.actions)
        seen["queued"] += p.queued
        nxt = target_at(o.actions, now + PERIOD, base)
        seen["in"] += nxt < replicas
        seen["out"] += nxt > replicas
        replicas = nxt
    assert all(seen.values()), seen  # every mechanism of the loop was on the path
    if warm is not None and mode == "Horizon":  # fitted once, then one step a period
        assert (warm.refits, warm.reused, warm.updates) == (1, len(knots) - 1,
                                                            len(knots) - 1)


def test_a_memory_from_before_the_status_round_trip_is_the_same(ms: ModelSet) -> None:
    m = Memory(forecast_rps=12.5, forecast_for_s=1200.0, recent_desired=((0.0, 5),),
               window_end_s=1200.0, actions=(_a(300.0, 4),))
    assert policyloop.memory_from_status({"memory": policyloop.memory_to_status(m)}) == m
    assert set_points(policyloop.decide(parse(copy.deepcopy(SPEC)), Snapshot(
        at_s=0.0, load_rps=10.0, read_ratio=0.95, data_bytes=GIB, migration_mibps=None,
        history_rps=np.full(5, 10.0), step_s=PERIOD), 3, ms, Memory()), 3) == [(0.0, 3)]
