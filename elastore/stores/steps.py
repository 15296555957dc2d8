"""The part of a step every store shares: observe, decide (the driver's pure machine), write
the new state, then carry out its effect. One copy for every store; a driver supplies the
store's facts, machine and effects (:class:`~elastore.stores.base.StoreDriver`).

The order is what makes a restart safe: the state goes to the status *before* its effect, so
an operator that dies in between finds the step where it was and repeats nothing harmful
(every effect is idempotent given the facts the machine reads back from the store).
"""

from __future__ import annotations

from dataclasses import dataclass

from elastore.actuators.ports import DriftError
from elastore.errors import ElastoreError
from elastore.stores.base import EffectFailed, FactsUnreadable, StoreCall, StoreDriver, Why
from elastore.stores.operation import OperationState


def scaling(kind: str) -> str:
    """The condition a step of ``kind`` is reported under."""
    return "ScalingUp" if kind == "ScaleOut" else "ScalingDown"


@dataclass(frozen=True)
class StepResult:
    operation: OperationState  # as it now is
    done: bool
    #: the ``Conflict`` condition to raise: someone else changed the target (``Drift``), or
    #: the status claims what the store does not bear out (``StatusRejected``)
    blocked: Why | None = None


def rejected(call: StoreCall, op: OperationState, why: str) -> StepResult:
    """The operation in the status claims what the store does not bear out: no effect; the
    status keeps the operation as it was (a human aborts it, or the store catches up)."""
    blocked = ("StatusRejected", f"the operation in the status is not borne out by the "
                                 f"cluster: {why}; touching nothing")
    call.cond(scaling(op.kind), True, "Blocked",
              f"{op.kind} {op.from_replicas} -> {op.to_replicas} held: {blocked[1]}")
    call.out["operation"] = op.to_status()
    return StepResult(op, False, blocked)


def advance(driver: StoreDriver, call: StoreCall, op: OperationState) -> StepResult:
    """One step of the operation; sets ``call.out["operation"]`` and its condition."""
    ctype = scaling(op.kind)
    try:
        got = driver.advance(call, op)
    except FactsUnreadable:
        raise  # the store did not answer: the tick fails and is retried
    except ElastoreError as exc:
        call.cond(ctype, True, "Stuck", str(exc))
        call.event("OperationStuck", str(exc), True)
        call.out["operation"] = op.to_status()
        return StepResult(op, False)
    new, effect, done = got.operation, got.effect, got.done
    if effect == "reject":
        return rejected(call, op, new.message)
    if effect == "stuck" or new.phase == "Stuck":
        if effect == "stuck":
            driver.stopped(call, op)
            call.save(new)
            call.event("OperationStuck", new.message, True)
        call.cond(ctype, True, "Stuck", new.message)
        call.out["operation"] = new.to_status()
        return StepResult(new, False)
    if effect == "conflict":
        call.cond(ctype, True, "Blocked", new.message)
        call.out["operation"] = new.to_status()
        return StepResult(new, False, ("Drift", new.message))
    call.cond("Conflict", False, "NoConflict", "nothing else changes the target")
    refused = driver.before_effect(call, op, got)
    if refused is not None:
        return refused_at_effect(call, op, refused)
    # the state first, then the effect: a restart in between repeats nothing harmful; the
    # Event once the state is saved (a refused write said it twice, issue 39's chaos test)
    call.save(None if done else new)
    if new.phase != op.phase:
        call.event(f"{op.kind}{new.phase}", new.message, False)
    try:
        new = driver.apply(call, op, got)
    except DriftError as exc:
        call.out["operation"] = new.to_status()
        return StepResult(new, False, ("Drift", str(exc)))
    except EffectFailed as exc:  # said, retried next tick
        msg = f"{effect} failed (retried): {exc}"
        call.cond(ctype, True, f"{op.kind}{new.phase}", msg[:1000])
        call.event(exc.reason, msg[:1000], True)
        call.out["operation"] = new.to_status()
        return StepResult(new, False)
    call.cond(ctype, not done, f"{op.kind}{new.phase}", new.message[:1000])
    call.out["operation"] = None if done else new.to_status()
    return StepResult(new, done)


def refused_at_effect(call: StoreCall, op: OperationState, refused: str) -> StepResult:
    """The store is not fit for the effect the operation is about to carry out (a
    decommission's ring check). Never carried out yet: the step is given up (nothing was
    done). Carried out before (a re-issue): Stuck."""
    from dataclasses import replace

    ctype = scaling(op.kind)
    if op.decommission_issued_s is None:
        msg = f"{op.kind} {op.from_replicas} -> {op.to_replicas} given up before its " \
              f"decommission: {refused}"
        call.save(None)
        call.event(f"{op.kind}Refused", msg, True)
        call.cond(ctype, False, "Refused", msg)
        call.out["operation"] = None
        return StepResult(op, True)
    stuck = replace(op, phase="Stuck", updated_s=call.now,
                    message=f"the decommission of {op.pod} is not re-issued: {refused}")
    call.save(stuck)
    call.event("OperationStuck", stuck.message, True)
    call.cond(ctype, True, "Stuck", stuck.message)
    call.out["operation"] = stuck.to_status()
    return StepResult(stuck, False)
