"""A policy's node steps: continue the one in progress, or admit and begin the next. The
runner (:mod:`elastore.operator.runner`) calls these once a tick; what a step does to the
store is its driver's (:mod:`elastore.stores`), whether one may start is the pure gates'
(:mod:`elastore.planner.admission`) and then the driver's checks in the store.

Status is a record, not the truth: an operation read back from the status is first checked
to be one this policy could have begun on this target (its pod, PVC, size and floor), and
the driver's machine sees every irreversible effect's precondition in the store itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from elastore.errors import ElastoreError
from elastore.operator import calibration, controls, policyloop, rebalancing
from elastore.operator.conditions import iso
from elastore.operator.tick import Tick
from elastore.planner import admission, behavior
from elastore.stores import operation, steps
from elastore.stores.steps import scaling as _scaling

if TYPE_CHECKING:
    from elastore.operator.runner import Runner


def continue_operation(r: Runner, t: Tick) -> bool:
    """Advance the operation in the status, if any; True while it still runs."""
    op = operation.OperationState.from_status(t.status.get("operation"))
    if op is None:
        return False
    assert t.spec is not None and t.sts is not None
    t.operation = op
    why = r.aborting(t)
    if why is not None:
        abort(r, t, op, why)
        return False
    assert t.driver is not None
    if t.blocked is None:
        floor = max(t.spec.min_replicas, t.spec.target.replication_factor)
        try:
            t.driver.check_identity(op, r.store_call(t), floor)
        except ElastoreError as exc:
            t.blocked = ("StatusRejected", f"the operation in the status is not this "
                                           f"policy's own: {exc}; touching nothing")
            r.conflict(t)
    if t.blocked is not None:
        t.cond(_scaling(op.kind), True, "Blocked",
               f"{op.kind} {op.from_replicas} -> {op.to_replicas} held: {t.blocked[1]}")
        return True
    if op.id is None:  # begun by an operator that gave none: one now, kept in the status
        op = replace(op, id=operation.new_id())
    got = steps.advance(t.driver, r.store_call(t), op)
    if got.blocked is not None:
        t.blocked = got.blocked
        r.conflict(t)
    t.operation = None if got.done else got.operation
    if not got.done:
        return True
    again = t.driver.read(r.kube, r.namespace, t.spec)  # the size it left
    if again is not None:
        t.target = again
        t.out.update(again.status)
    r.current(t, t.target.sizes if t.target is not None else t.sts)
    return False


def abort(r: Runner, t: Tick, op: operation.OperationState, why: str) -> None:
    """Stop following an operation, safely: nothing more is issued. A node that is
    joining finishes by itself; a decommission is never re-issued (a node already
    LEAVING finishes leaving in Cassandra, and its pod stays)."""
    assert t.driver is not None
    left = t.driver.abort_left(r.store_call(t), op)
    msg = f"{op.kind} {op.from_replicas} -> {op.to_replicas} ({op.phase}) stopped: {why}; " \
          f"{left}"
    r.policies.event(t.body, "OperationAborted", msg, warning=True)
    t.cond(_scaling(op.kind), False, "Aborted", msg)
    t.out["operation"] = None
    t.status = {**t.status, "operation": None}
    r.write_status(t, {"operation": None})


def scale_out_due(r: Runner, t: Tick) -> bool:
    assert t.sts is not None
    return policyloop.target_at(t.memory.actions, max(t.now, r.clock()),
                             t.sts.spec_replicas) > t.sts.spec_replicas

def start_step(r: Runner, t: Tick) -> bool:
    """Start the node step the plan wants now, if it may; True if one started."""
    spec, sts = t.spec, t.sts
    assert spec is not None and sts is not None
    # the clock now, not at the tick's start: an action that fell due while this tick
    # waited on the cluster (a throttle call, a slow API server) starts in this tick,
    # not one control period late
    now = max(t.now, r.clock())
    named = t.pause.replicas  # paused-replicas: the user's size, not the plan's
    fallback = controls.fallback_scale_out(t.evidence, spec.fallback_behavior,
                                           spec.fallback_threshold, t.fallback)
    got_target = controls.wanted(named, t.evidence, fallback, t.memory.actions,
                                 saved_plan(t), now, sts.spec_replicas)
    if got_target is None and not t.pause.on:
        for ctype in ("ScalingUp", "ScalingDown"):
            t.cond(ctype, False, "NoEvidence", "the last observation failed: no action")
        return False
    target = sts.spec_replicas if got_target is None else got_target
    assert t.driver is not None
    step_to: int | None = None
    if target != sts.spec_replicas:
        # where the step goes: one node, or the store's own step (cass-operator's
        # rack-balanced sizes), or not yet
        got = t.driver.step_to(r.store_call(t), target, named is not None,
                               t.memory.recent_desired)
        if isinstance(got, tuple):
            t.cond("ScalingUp", False, "Idle", "no change under way")
            t.cond("ScalingDown", False, *got)
            t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode "
                                           f"{spec.mode}")
            return False
        step_to = got
    if target == sts.spec_replicas:
        for ctype in ("ScalingUp", "ScalingDown"):
            t.cond(ctype, False, "Idle", "no change under way")
        t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode {spec.mode}")
        return False
    kind: Literal["ScaleOut", "ScaleIn"] = "ScaleOut" if target > sts.spec_replicas \
        else "ScaleIn"
    ctype = _scaling(kind)
    user = named is not None
    intent = admission.Intent(kind, target, sts.spec_replicas, user, step_to)
    held = admission.admit(intent, admission.Facts(
        enforce=spec.enforce, paused=t.pause.on, pause_message=t.pause.message,
        evidence=t.evidence, fallback_scale_out=fallback,
        behavior_limit=None if user else behavior.held(
            spec.behavior, sts.spec_replicas, target, scale_events(t), now, iso),
        conflict=t.blocked, aborting=r.aborting(t),
        partial_metrics=r.partial(t) if kind == "ScaleIn" and not user else None,
        learning=calibration.learning_hold(t.calibration, t.out.get("model") or t.status.get(
            "model")) if kind == "ScaleIn" and not user else None,
        decision_age_s=decision_age(t, now), stale_after_s=spec.stale_after_s))
    if held is not None:
        t.cond(ctype, False, held.reason, held.message)
    elif rebalancing.under_way(t):
        t.cond(ctype, False, "SkewStepUnderWay", "a rebalancing step (spec.skew Auto) is under "
                                                 "way: the node step waits for it")
    elif (store_held := t.driver.holds(r.store_call(t), kind, step_to)) is not None:
        t.cond(ctype, False, *store_held)
    elif (refused := t.driver.refusal(r.store_call(t), kind, step_to)) is not None:
        t.cond(ctype, False, "Refused", refused)
        r.policies.event(t.body, f"{kind}Refused", refused, warning=True)
    else:
        t.ring_checked = kind == "ScaleIn"
        begin(r, t, kind, step_to)
        return True
    t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode {spec.mode}")
    return False

def decision_age(t: Tick, now: float) -> float | None:
    """Seconds since the decision whose plan this tick carries out (this tick's, else the
    status's); None when no successful one is on record."""
    last = t.out.get("lastDecision") or t.status.get("lastDecision") or {}
    if not last.get("ok") or last.get("epoch") is None:
        return None
    try:
        return max(0.0, now - float(last["epoch"]))
    except (TypeError, ValueError):
        return None


def begin(r: Runner, t: Tick, kind: Literal["ScaleOut", "ScaleIn"], step_to: int | None
           ) -> None:
    """A step begins: its intent in the status first, then its first effect."""
    spec, sts, driver = t.spec, t.sts, t.driver
    assert spec is not None and sts is not None and driver is not None
    begun = driver.begin(r.store_call(t), kind, step_to)
    new = begun.operation
    said = begun.said(controls.why_now(t.pause.replicas, t.evidence, t.memory.actions,
                                            saved_plan(t), iso))
    t.cond(_scaling(kind), True, f"{kind}Started",
           begun.condition if begun.condition is not None else said)
    t.out["operation"] = new.to_status()
    t.out["scaleEvents"] = [list(e) for e in behavior.record(
        scale_events(t), new.started_s, new.to_replicas - sts.spec_replicas)]
    t.out["conditions"] = t.conds
    r.write_status(t, t.out)  # intent first, if no one else wrote since this tick read
    r.policies.event(t.body, f"{kind}Started", said)
    if r.telemetry is not None:
        r.telemetry.actions.labels(r.namespace, r.name, kind).inc()
    got = steps.advance(driver, r.store_call(t), new)
    if got.blocked is not None:
        t.blocked = got.blocked
        r.conflict(t)

def scale_events(t: Tick) -> behavior.ScaleEvents:
    return behavior.events_from_status(t.out.get("scaleEvents", t.status.get("scaleEvents")))

def saved_plan(t: Tick) -> tuple[policyloop.PlannedAction, ...]:
    """The last plan made on evidence, as the fallback keeps it in the status."""
    return tuple(policyloop.action_from_status(a) for a in t.fallback.actions)
