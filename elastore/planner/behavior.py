"""HPA-style scaling policies (``spec.behavior``): how many nodes may be added or removed
per period. Pure.

The rules are the HorizontalPodAutoscaler's (``autoscaling/v2`` ``HPAScalingRules``; the
limits computed as in kubernetes ``pkg/controller/podautoscaler/horizontal.go``,
``calculateScaleUpLimitWithScalingRules`` and ``calculateScaleDownLimitWithBehaviors``):

* each policy allows a change of ``value`` pods, or ``value`` percent of the replicas the
  target had when its period began, within any ``periodSeconds``; the replicas at the
  period's start are today's minus what was added in it, plus what was removed;
* ``selectPolicy: Max`` (the default) takes the policy that allows the most change,
  ``Min`` the least, ``Disabled`` allows none in that direction;
* a scale-up's percent is rounded up (``ceil``, so that 1 % of 3 still allows one), a
  scale-down's is truncated toward the current size.

Where elastore differs from the HPA, because a store moves one node at a time: with no
``policies`` given there is no limit (the HPA's defaults, 100 % or 4 pods per 15 s, only
ever throttle a controller that jumps many pods at once, which elastore never does), and
the change is counted in node steps *started* (a step that takes hours still counts at
its start, as the HPA counts its scale events).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

PolicyType = Literal["Pods", "Percent"]
Select = Literal["Max", "Min", "Disabled"]
#: ``(epoch seconds, replicas change)`` of each node step started, oldest first
ScaleEvents = tuple[tuple[float, int], ...]
#: events older than this are forgotten whatever the policies (the HPA's periodSeconds
#: is at most 1800 s; ours may be a day, for stores whose steps take hours)
MAX_PERIOD_S = 86400.0
MAX_EVENTS = 64


@dataclass(frozen=True)
class ScalingPolicy:
    type: PolicyType
    value: int  # pods, or percent
    period_s: float


@dataclass(frozen=True)
class ScalingRules:
    policies: tuple[ScalingPolicy, ...] = ()
    select: Select = "Max"

    @property
    def longest_period_s(self) -> float:
        return max((p.period_s for p in self.policies), default=0.0)


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules = ScalingRules()
    scale_down: ScalingRules = ScalingRules()

    @property
    def limited(self) -> bool:
        return bool(self.scale_up.policies or self.scale_down.policies) or \
            "Disabled" in (self.scale_up.select, self.scale_down.select)


def _changed(events: ScaleEvents, now_s: float, period_s: float, sign: int) -> int:
    """Replicas added (``sign`` 1) or removed (-1) by steps started in the last period."""
    return sum(abs(d) for t, d in events if now_s - t < period_s and d * sign > 0)


def limit(behavior: Behavior, current: int, target: int, events: ScaleEvents,
          now_s: float) -> int:
    """The replicas the policies allow toward ``target`` now: ``target`` itself when no
    policy stands in the way, ``current`` when none may change."""
    if target == current:
        return target
    up = target > current
    rules = behavior.scale_up if up else behavior.scale_down
    if rules.select == "Disabled":
        return current
    if not rules.policies:
        return target
    added = {p: _changed(events, now_s, p.period_s, 1) for p in rules.policies}
    removed = {p: _changed(events, now_s, p.period_s, -1) for p in rules.policies}
    proposals = []
    for p in rules.policies:
        start = current - added[p] + removed[p]
        if up:
            proposals.append(start + p.value if p.type == "Pods" else
                             math.ceil(start * (1 + p.value / 100)))
        else:
            proposals.append(start - p.value if p.type == "Pods" else
                             int(start * (1 - p.value / 100)))
    if up:  # Max: the most change (the highest proposal)
        bound = max(proposals) if rules.select == "Max" else min(proposals)
        return max(current, min(target, bound))
    bound = min(proposals) if rules.select == "Max" else max(proposals)
    return min(current, max(target, bound))


def next_allowed_s(behavior: Behavior, current: int, target: int, events: ScaleEvents,
                   now_s: float) -> float | None:
    """When a step toward ``target`` that :func:`limit` holds now will be allowed (as the
    events age out of their periods); None: not by time alone (``Disabled``)."""
    rules = behavior.scale_up if target > current else behavior.scale_down
    if rules.select == "Disabled":
        return None
    for t in sorted({t + p.period_s for t, _ in events for p in rules.policies}):
        if t > now_s and limit(behavior, current, target, events, t) != current:
            return t
    return None


def record(events: ScaleEvents, now_s: float, change: int) -> ScaleEvents:
    """``events`` with a step of ``change`` replicas started at ``now_s``; those past
    :data:`MAX_PERIOD_S` dropped."""
    kept = tuple((t, d) for t, d in events if now_s - t < MAX_PERIOD_S)
    return (*kept, (now_s, change))[-MAX_EVENTS:]


def events_from_status(raw: object) -> ScaleEvents:
    """``status.scaleEvents`` as written by :func:`record`; unreadable is as if none (a
    status is a record a hand may have edited: it never blocks a step on its own)."""
    try:
        return tuple((float(a), int(b)) for a, b in raw or ())  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return ()


def held(behavior: Behavior, current: int, target: int, events: ScaleEvents, now_s: float,
         at: Callable[[float], str] = str) -> str | None:
    """Why the policies hold a step from ``current`` toward ``target`` now (None: they allow
    one). ``at`` writes an epoch in the message (the next time one is allowed)."""
    if target == current or not behavior.limited:
        return None
    if limit(behavior, current, target, events, now_s) != current:
        return None
    up = target > current
    rules = behavior.scale_up if up else behavior.scale_down
    d = "scaleUp" if up else "scaleDown"
    if rules.select == "Disabled":
        return f"the plan wants {target} replicas; spec.behavior.{d}.selectPolicy is Disabled"
    when = next_allowed_s(behavior, current, target, events, now_s)
    after = f"; the next is allowed at {at(when)}" if when is not None else ""
    return (f"the plan wants {target} replicas; spec.behavior.{d}'s policies allow no more "
            f"{'additions' if up else 'removals'} now ({len(events)} step(s) started "
            f"recently){after}")

