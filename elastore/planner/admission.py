"""Whether a step the plan (or the user) wants may start now: an ordered list of small pure
gates. Pure: plain data in, :data:`GO` or :class:`Held` out.

``admit(intent, facts)`` runs :data:`GATES` in order and returns the first hold. The order is
what the status reports: a policy in Recommend says "Recommend" even when it is also paused.
The operator's runner gathers the facts (:mod:`elastore.operator.runner`), and the
simulator's operator runs the very same runner, so both judge with this one list.

What a gate cannot judge without reading the store (a repair running on a node, cass-operator
busy, the ring and the space a scale-in leaves) is the store driver's, after these
(:meth:`elastore.stores.base.StoreDriver.holds` and ``refusal``): it reads the store only for
a step that every gate here let through.

==================  ================================================================
gate                holds a step when
==================  ================================================================
recommend           the policy is in mode Recommend (the plan is published only)
pause               ``elastore.io/paused`` (``paused-replicas`` is the user's own size)
evidence            the last observation failed, unless the fallback lets the last
                    plan's scale-out through
behavior            ``spec.behavior``'s policies allow no more change now
conflict            something else owns or scales the target, or the status is forged
abort               ``elastore.io/abort`` is on the policy
fresh decision      a scale-in on a plan older than ``staleAfter`` (made on metrics that
                    old: between control periods the plan is carried out unobserved)
partial metrics     a scale-in while fewer nodes report than are ready
learning            a scale-in while the learned capacity model is not yet confident
==================  ================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["ScaleOut", "ScaleIn"]


@dataclass(frozen=True)
class Intent:
    """The step asked for: ``kind`` toward ``wanted`` replicas from ``current`` (``step_to``:
    the store's own step size, when it has one)."""

    kind: Kind
    wanted: int
    current: int
    #: paused-replicas asked for it (the user's size): the plan's own gates do not apply
    user_named: bool = False
    step_to: int | None = None


@dataclass(frozen=True)
class Facts:
    """What the gates read, gathered by the caller (each one plain data)."""

    enforce: bool
    paused: bool = False
    pause_message: str = ""
    #: the last observation succeeded
    evidence: bool = True
    #: the fallback is in force and lets the last plan's scale-outs start
    fallback_scale_out: bool = False
    #: why ``spec.behavior`` holds a step toward ``wanted`` now (None: it allows one)
    behavior_limit: str | None = None
    #: (reason, message) of the ``Conflict`` condition, if any
    conflict: tuple[str, str] | None = None
    #: why no operation may go on (the abort annotation)
    aborting: str | None = None
    #: (reason, message) when fewer nodes report than are ready
    partial_metrics: tuple[str, str] | None = None
    #: why the learned capacity model holds a scale-in
    learning: str | None = None
    #: seconds since the decision whose plan is being carried out (None: unknown), and how
    #: old it may be for a scale-in (``spec.metrics.prometheus.staleAfter``)
    decision_age_s: float | None = None
    stale_after_s: float = float("inf")


@dataclass(frozen=True)
class Held:
    reason: str
    message: str


#: the step may start (as far as the policy's own gates go)
GO: Held | None = None

Gate = Callable[[Intent, Facts], Held | None]


def _recommend(i: Intent, f: Facts) -> Held | None:
    if f.enforce:
        return None
    wants = "paused-replicas asks for" if i.user_named else "the plan wants"
    step = "" if i.step_to is None else \
        f"; the rack-balanced step is {i.current} -> {i.step_to}"
    return Held("Recommend", f"{wants} {i.wanted} replicas now{step} (mode Recommend: "
                             "nothing is changed)")


def _pause(i: Intent, f: Facts) -> Held | None:
    if f.paused and not i.user_named:
        return Held("Paused", f"the plan wants {i.wanted} replicas now; {f.pause_message}")
    return None


def _evidence(i: Intent, f: Facts) -> Held | None:
    if f.evidence or i.user_named or (f.fallback_scale_out and i.kind == "ScaleOut"):
        return None
    return Held("NoEvidence", "the last observation failed: no action")


def _behavior(i: Intent, f: Facts) -> Held | None:
    if i.user_named or f.behavior_limit is None:
        return None
    return Held("BehaviorLimit", f.behavior_limit)


def _conflict(i: Intent, f: Facts) -> Held | None:
    return None if f.conflict is None else Held(*f.conflict)


def _abort(i: Intent, f: Facts) -> Held | None:
    return None if f.aborting is None else Held("Aborted", f"no step starts: {f.aborting}")


def _fresh(i: Intent, f: Facts) -> Held | None:
    """A node is removed only on what the metrics said lately: with a long control period
    and Prometheus gone, the plan in the status would otherwise decommission a node on
    metrics of half an hour ago (issue 35)."""
    if i.kind != "ScaleIn" or i.user_named:
        return None
    if f.decision_age_s is None:
        return Held("StaleDecision", "no decision of known age backs the scale-in")
    if f.decision_age_s > f.stale_after_s:
        return Held("StaleDecision", f"the plan wants {i.wanted} replicas but was made "
                                     f"{f.decision_age_s:.0f} s ago, on metrics older than "
                                     f"staleAfter ({f.stale_after_s:.0f} s): a scale-in "
                                     "starts only on a fresh decision")
    return None


def _partial(i: Intent, f: Facts) -> Held | None:
    if i.kind == "ScaleIn" and not i.user_named and f.partial_metrics is not None:
        return Held(*f.partial_metrics)
    return None


def _learning(i: Intent, f: Facts) -> Held | None:
    if i.kind == "ScaleIn" and not i.user_named and f.learning is not None:
        return Held("ModelLearning", f.learning)
    return None


#: the gates, in the order they are judged (and reported)
GATES: tuple[tuple[str, Gate], ...] = (
    ("recommend", _recommend),
    ("pause", _pause),
    ("evidence", _evidence),
    ("behavior", _behavior),
    ("conflict", _conflict),
    ("abort", _abort),
    ("fresh decision", _fresh),
    ("partial metrics", _partial),
    ("learning", _learning),
)


def admit(intent: Intent, facts: Facts,
          gates: tuple[tuple[str, Gate], ...] = GATES) -> Held | None:
    """The first gate that holds the step, or :data:`GO`."""
    for _, gate in gates:
        held = gate(intent, facts)
        if held is not None:
            return held
    return GO
