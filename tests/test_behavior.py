"""spec.behavior's scaling policies (issue 22): the HPA's rules, for a store that moves one
node at a time. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from elastore.operator.spec import SpecError, parse
from elastore.planner.behavior import (
    MAX_EVENTS,
    Behavior,
    ScalingPolicy,
    ScalingRules,
    limit,
    next_allowed_s,
    record,
)

HOUR = 3600.0


def _down(*policies: ScalingPolicy, select: str = "Max") -> Behavior:
    return Behavior(scale_down=ScalingRules(tuple(policies), select))  # type: ignore[arg-type]


def _up(*policies: ScalingPolicy, select: str = "Max") -> Behavior:
    return Behavior(scale_up=ScalingRules(tuple(policies), select))  # type: ignore[arg-type]


def test_no_policies_no_limit() -> None:
    assert limit(Behavior(), 5, 9, (), 0.0) == 9
    assert limit(Behavior(), 5, 3, ((0.0, -1),), 1.0) == 3
    assert not Behavior().limited


def test_one_node_per_hour_down() -> None:
    b = _down(ScalingPolicy("Pods", 1, HOUR))
    assert limit(b, 6, 3, (), 0.0) == 5  # one node now
    events = record((), 0.0, -1)
    assert limit(b, 5, 3, events, 1800.0) == 5  # the hour is not over: none
    assert next_allowed_s(b, 5, 3, events, 1800.0) == HOUR
    assert limit(b, 5, 3, events, HOUR) == 4  # the step aged out of the period


def test_percent_rounds_as_the_hpa_does() -> None:
    # up: ceil (1 % of 3 still allows one node); down: truncated toward the current size
    assert limit(_up(ScalingPolicy("Percent", 1, 60)), 3, 10, (), 0.0) == 4
    assert limit(_up(ScalingPolicy("Percent", 50, 60)), 3, 10, (), 0.0) == 5  # ceil(4.5)
    assert limit(_down(ScalingPolicy("Percent", 50, 60)), 9, 1, (), 0.0) == 4  # int(4.5)
    # 10 % of 6 is 0.6 nodes: int(5.4) = 5 still allows one
    assert limit(_down(ScalingPolicy("Percent", 10, 60)), 6, 1, (), 0.0) == 5


def test_the_period_starts_from_what_it_had() -> None:
    # 50 % per hour from 8: 4 may go in the hour, counted from the 8 it started with
    b = _down(ScalingPolicy("Percent", 50, HOUR))
    events = record(record((), 0.0, -1), 600.0, -1)  # 8 -> 7 -> 6
    assert limit(b, 6, 1, events, 1200.0) == 4
    events = record(record(events, 700.0, -1), 800.0, -1)  # -> 4: the hour's 50 % used
    assert limit(b, 4, 1, events, 1200.0) == 4
    assert next_allowed_s(b, 4, 1, events, 1200.0) == HOUR  # the first step ages out


def test_select_policy() -> None:
    pods = ScalingPolicy("Pods", 1, HOUR)
    pct = ScalingPolicy("Percent", 50, HOUR)
    assert limit(_down(pods, pct), 10, 1, (), 0.0) == 5  # Max: the most change
    assert limit(_down(pods, pct, select="Min"), 10, 1, (), 0.0) == 9  # Min: the least
    assert limit(_up(pods, pct), 10, 30, (), 0.0) == 15
    assert limit(_up(pods, pct, select="Min"), 10, 30, (), 0.0) == 11
    disabled = _down(select="Disabled")
    assert limit(disabled, 10, 1, (), 0.0) == 10
    assert next_allowed_s(disabled, 10, 1, (), 0.0) is None
    assert disabled.limited
    assert limit(disabled, 10, 12, (), 0.0) == 12  # only its own direction


def test_both_directions_set_the_period_start() -> None:
    # as the HPA: the period began with today's replicas minus what was added in it plus
    # what was removed; a node added a minute ago (5 -> 6) makes the hour's start 5, and
    # one pod per hour below it is 4
    b = _down(ScalingPolicy("Pods", 1, HOUR))
    assert limit(b, 6, 3, record((), 0.0, +1), 60.0) == 4


def test_events_are_bounded() -> None:
    ev: tuple[tuple[float, int], ...] = ()
    for k in range(200):
        ev = record(ev, float(k), 1)
    assert len(ev) == MAX_EVENTS and ev[-1] == (199.0, 1)
    assert record(ev, 10 * 86400.0, -1) == ((10 * 86400.0, -1),)  # older than a day: gone


# -- spec.behavior and spec.fallback as parsed ---------------------------------------------
MINIMAL: dict[str, Any] = {"target": {"name": "db", "replicationFactor": 3},
                           "replicas": {"min": 3, "max": 9}, "slo": {"latencyMs": 50}}


def test_behavior_parses_as_the_hpa_spells_it() -> None:
    p = parse({**MINIMAL, "behavior": {
        "scaleDown": {"stabilizationWindowSeconds": 900, "selectPolicy": "Min",
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": 3600},
                                   {"type": "Percent", "value": 10, "periodSeconds": 600}]},
        "scaleUp": {"selectPolicy": "Disabled"}}})
    assert p.stabilization_s == 900
    assert p.behavior.scale_down == ScalingRules(
        (ScalingPolicy("Pods", 1, 3600.0), ScalingPolicy("Percent", 10, 600.0)), "Min")
    assert p.behavior.scale_up.select == "Disabled"
    # the older field still works, and agrees or is refused
    assert parse({**MINIMAL, "scaleDown": {"stabilizationSeconds": 60}}).stabilization_s == 60
    assert parse(MINIMAL).stabilization_s == 300
    assert parse({**MINIMAL, "scaleDown": {"stabilizationSeconds": 60}, "behavior": {
        "scaleDown": {"stabilizationWindowSeconds": 60}}}).stabilization_s == 60


@pytest.mark.parametrize(("behavior", "where", "says"), [
    ({"scaleUp": {"stabilizationWindowSeconds": 60}},
     "spec.behavior.scaleUp.stabilizationWindowSeconds", "must be 0"),
    ({"scaleDown": {"policies": [{"type": "Nodes", "value": 1, "periodSeconds": 60}]}},
     "spec.behavior.scaleDown.policies[0].type", "Pods, Percent"),
    ({"scaleDown": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 60}]}},
     "spec.behavior.scaleDown.policies[0].value", ">= 1"),
    ({"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 90000}]}},
     "spec.behavior.scaleDown.policies[0].periodSeconds", "<= 86400"),
    ({"scaleDown": {"selectPolicy": "Most"}}, "spec.behavior.scaleDown.selectPolicy",
     "Max, Min, Disabled"),
    ({"scaleDown": {"tolerance": 0.1}}, "spec.behavior.scaleDown", "unknown field"),
])
def test_a_bad_behavior_names_its_field(behavior: dict[str, Any], where: str, says: str
                                        ) -> None:
    with pytest.raises(SpecError, match=says) as err:
        parse({**MINIMAL, "behavior": behavior})
    assert err.value.where == where


def test_two_stabilization_windows_must_agree() -> None:
    with pytest.raises(SpecError, match="disagree"):
        parse({**MINIMAL, "scaleDown": {"stabilizationSeconds": 60},
               "behavior": {"scaleDown": {"stabilizationWindowSeconds": 120}}})


def test_fallback() -> None:
    p = parse(MINIMAL)
    assert (p.fallback_threshold, p.fallback_behavior) == (3, "freeze")
    p = parse({**MINIMAL, "fallback": {"failureThreshold": 5,
                                       "behavior": "currentReplicasIfHigher"}})
    assert (p.fallback_threshold, p.fallback_behavior) == (5, "currentReplicasIfHigher")
    # KEDA's static replicas are refused with the reason
    with pytest.raises(SpecError, match="never scaled to a fixed size"):
        parse({**MINIMAL, "fallback": {"failureThreshold": 3, "replicas": 5}})
    with pytest.raises(SpecError, match="freeze, currentReplicasIfHigher"):
        parse({**MINIMAL, "fallback": {"behavior": "currentReplicas"}})
    with pytest.raises(SpecError, match=">= 1"):
        parse({**MINIMAL, "fallback": {"failureThreshold": 0}})
