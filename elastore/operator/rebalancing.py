"""Auto's rebalancing in a tick (issue 38): the hysteresis' decision
(:func:`elastore.planner.rebalance.decide`, pure) once a control period, the store's step
(its driver's :class:`~elastore.operator.skew.SkewActor`: Cassandra's bounded move, Swift's
device weight) carried out as a node step is: the record to ``status.skew.rebalance``
first, then the effect, then the Events. A step under way is followed every tick.

It runs only with ``spec.skew.mode: Auto`` in mode Enforce, on a target that opted in
(the runner's guard), never while the target is in conflict (``Conflict`` raised), and
never beside a node step: the plan's other size and a running operation go first.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from elastore.errors import ElastoreError
from elastore.models.skew import HysteresisState
from elastore.operator import policyloop
from elastore.operator.skew import SkewActor, SkewView
from elastore.operator.tick import Tick
from elastore.planner import rebalance

if TYPE_CHECKING:
    from elastore.operator.runner import Runner

log = logging.getLogger("elastore.operator")


def acting(t: Tick) -> bool:
    """Whether this tick's policy rebalances (Auto, Enforce, a driver that can)."""
    spec = t.spec
    return spec is not None and spec.skew.mode == "Auto" and spec.enforce and \
        isinstance(t.driver, SkewActor)


def _hysteresis(skew: Any) -> HysteresisState:
    h = skew.get("hysteresis") if isinstance(skew, dict) else None
    if not isinstance(h, dict):
        return HysteresisState()
    s = h.get("smoothed")
    if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s < 0:
        return HysteresisState(None, h.get("active") is True)
    return HysteresisState(float(s), h.get("active") is True)


def utilization(t: Tick, view: SkewView) -> float | None:
    """The busiest pod's load over one node's capacity at the SLO (the period's planning
    model, at the observed read ratio, no migration, the interference in force)."""
    if view.partial or t.planned_with is None:
        return None
    loads = [v for v in view.load_rps if v is not None]
    if not loads:
        return None
    try:
        cap = float(t.planned_with.capacity.capacity(view.read_ratio, 0.0,
                                                     t.interference_index))
    except (ElastoreError, ValueError):
        return None
    if not math.isfinite(cap) or cap <= 0:
        return None
    return max(loads) / cap


def _record(t: Tick) -> Any:
    got = t.status.get("skew")
    return got.get("rebalance") if isinstance(got, dict) else None


def under_way(t: Tick) -> bool:
    """Whether the record says a rebalancing step is under way (a node step waits for it:
    Cassandra refuses a join or a leave during a move; a Swift ring change must not start
    while a weight change moves data). The record only ever holds a step back here."""
    driver: Any = t.driver
    return isinstance(driver, SkewActor) and driver.skew_in_place(_record(t))[1]


def step(r: Runner, t: Tick, started: bool) -> bool:
    """This tick's rebalancing, if the policy acts (:func:`acting`), and a step under way
    followed to its end even when it no longer does (``mode`` changed meanwhile); True
    while a step is under way (the runner polls to follow it)."""
    found: Any = t.driver
    if not isinstance(found, SkewActor) or t.spec is None or t.sts is None:
        return False
    spec = t.spec
    driver: SkewActor = found
    got_skew = t.status.get("skew")
    was: dict[str, Any] = got_skew if isinstance(got_skew, dict) else {}
    record = was.get("rebalance")
    n_in_place, under_way = driver.skew_in_place(record)
    if not acting(t) and not under_way:
        return False
    view = r.period.last_view
    if view is None or (not t.period and not under_way):
        return under_way
    action: str = "none"
    why = ""
    state = _hysteresis(was)
    if t.blocked is not None:
        why = f"the target is in conflict ({t.blocked[0]}): no rebalancing"
    elif not acting(t):
        why = "spec.skew is no longer Auto in Enforce: the step under way is followed only"
    elif t.period:
        now = max(t.now, r.clock())
        node_step = t.operation is not None or started or policyloop.target_at(
            t.memory.actions, now, t.sts.spec_replicas) != t.sts.spec_replicas
        got = rebalance.decide(state, rebalance.RebalanceFacts(
            busiest_utilization=utilization(t, view), imbalance=view.imbalance,
            imbalance_threshold=spec.skew.imbalance_threshold,
            cutoffs=spec.skew.hysteresis, node_step=node_step, in_place=n_in_place,
            under_way=under_way))
        state, action, why = got.state, got.action, got.why
    if t.blocked is not None and not under_way:
        act = None
    else:
        act = driver.skew_act(r.store_call(t), view, action if t.blocked is None else "none",
                              record)
    out: dict[str, Any] = {}
    if act is not None:
        out["rebalance"] = act.record
        if act.effect is not None:
            # the record first: a restart in between finds the step and follows it
            r.write_status(t, {"skew": {"rebalance": act.record}})
            try:
                act.effect()
            except ElastoreError as exc:  # a ring written by someone else meanwhile (Drift)
                # the record stays: the next tick reads the store and puts it right
                r.policies.event(t.body, "SkewStepFailed", f"{act.said}: {exc}"[:1000],
                                 warning=True)
        for reason, message, warning in act.events:
            r.policies.event(t.body, reason, message[:1000], warning=warning)
        if act.resample:
            r.period.resample()
    if t.period:
        out["hysteresis"] = {"smoothed": None if state.smoothed is None
                             else round(state.smoothed, 4), "active": state.active}
    said = "; ".join(x for x in (why, act.said if act is not None else "") if x)
    if said:
        out["rebalancing"] = said[:1000]
    skew = t.out.get("skew")
    if isinstance(skew, dict):
        skew.update(out)
    elif "skew" not in t.out:
        t.out["skew"] = out
    rec = out.get("rebalance", record)
    return driver.skew_in_place(rec if isinstance(rec, dict) else None)[1]
