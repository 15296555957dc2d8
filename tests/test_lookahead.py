"""Issue 40: a horizon plan must look far enough ahead for a scale-in to pay for itself
(its migration, the scale-out that would undo it, as long again saved). The planner says
when its lookahead is shorter; the operator raises ``LookaheadShort`` and warns once."""

from __future__ import annotations

from typing import Any

import pytest
from test_operator_runner import Rig, per_server

from elastore.models import ModelSet
from elastore.planner import Observation, PlannerConfig, plan
from elastore.planner.types import PAYBACK, scale_in_payback_s
from elastore.resources import builtin_model
from elastore.units import GIB

DAY = 86400.0


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(builtin_model("placeholder"))


def horizon(lookahead_s: float, **kw: Any) -> PlannerConfig:
    base: dict[str, Any] = dict(min_replicas=3, max_replicas=20, window_s=600.0,
                                mode="horizon", lookahead_s=lookahead_s,
                                node_overhead_s=120.0, min_migration_mibps=1.0,
                                max_migration_mibps=24.0)
    base.update(kw)
    return PlannerConfig(**base)


def observe(data_gib: float, replicas: int = 4, load: float = 500.0) -> Observation:
    return Observation(now_s=0.0, replicas=replicas, load_rps=load, forecast_rps=load,
                       read_ratio=0.95, data_bytes=data_gib * GIB)


def test_the_plan_says_when_its_lookahead_is_shorter_than_a_scale_ins_payback(
        ms: ModelSet) -> None:
    # 4000 GiB on 4 nodes: 1000 GiB a node at 24 MiB/s is 42,667 s, + 120 s boot, x 3
    want = PAYBACK * (1000 * GIB / (24 * 2**20) + 120.0)
    short = plan(observe(4000.0), horizon(DAY), ms)
    assert short.details["payback_s"] == pytest.approx(want)
    assert "shorter than a scale-in's payback" in short.reason
    assert "lengthen spec.planner.lookahead" in short.reason
    long = plan(observe(4000.0), horizon(2 * want), ms)
    assert long.details["payback_s"] == pytest.approx(want)
    assert "payback" not in long.reason
    # 100 GiB: minutes of migration, a day covers it
    small = plan(observe(100.0), horizon(DAY), ms)
    assert small.details["payback_s"] == pytest.approx(
        scale_in_payback_s(100 * GIB, 4, 24.0, 120.0)) and "payback" not in small.reason
    # at the floor no scale-in can happen: nothing to say
    floor = plan(observe(4000.0, replicas=3), horizon(DAY), ms)
    assert floor.details["payback_s"] is None and "payback" not in floor.reason


def test_the_operator_raises_lookahead_short_and_warns_once(ms: ModelSet) -> None:
    """The runner's rig (3 nodes, 1 GiB each, lookahead 2 h, RF 2): a migration ceiling of
    0.05 MiB/s makes a scale-in's payback 3 x 20,480 s; the condition is True, with one
    Warning over many periods; a ceiling of 100 MiB/s clears it."""
    rig = Rig(ms, lambda t: 0.5 * per_server(ms), mode="Recommend", planner="Horizon",
              spec_patch={"replicas": {"min": 2, "max": 8},
                          "target": {"name": "db", "replicationFactor": 2},
                          "migration": {"nodeOverheadSeconds": 0, "maxMiBps": 0.05,
                                        "minMiBps": 0.01}})
    rig.run(600)
    cond = rig.cond("LookaheadShort")
    assert (cond["status"], cond["reason"]) == ("True", "ShorterThanPayback"), cond
    assert "set it to at least 18h" in cond["message"], cond["message"]  # 61,440 s
    warned = [m for r, m, w in rig.policies.events if r == "LookaheadShort"]
    assert len(warned) == 1 and all(w for r, _, w in rig.policies.events
                                    if r == "LookaheadShort"), rig.policies.events[-3:]
    rig.policies.body["spec"]["migration"]["maxMiBps"] = 100.0
    rig.policies.body["metadata"]["generation"] = 2
    rig.run(rig.t + 600)
    cond = rig.cond("LookaheadShort")
    assert (cond["status"], cond["reason"]) == ("False", "CoversPayback"), cond
    assert len([r for r, _, _ in rig.policies.events if r == "LookaheadShort"]) == 1
