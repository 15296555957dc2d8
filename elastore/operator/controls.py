"""The controls users know from KEDA: pause annotations and the fallback on metric
failure. Pure: annotations, the status and the clock in; what may start out.

**Pause** (KEDA's ``autoscaling.keda.sh/paused`` and ``paused-replicas``, on the
ElasticPolicy):

* ``elastore.io/paused: "true"``: nothing new starts; the node step in progress (if any)
  finishes, because stopping a join or a decommission halfway is what hurts a store; the
  forecast, the recommendations and the status keep updating. ``"false"`` or absent: not
  paused. Any other value is read as paused (the safe reading) and said.
* ``elastore.io/paused-replicas: "N"``: the target is moved to N, one node step at a time
  with every safety check (the ring, the disks, replicationFactor), and held there; the
  plan is not followed. It takes precedence over ``paused``. N must lie in
  [max(replicas.min, replicationFactor), replicas.max]; a value that does not is said,
  and the policy is paused where it is.

**Fallback** (KEDA's ``fallback``): after ``failureThreshold`` consecutive failed
observations the fallback is in force (status ``fallback.active``, the ``Fallback``
condition, an Event). ``freeze`` (the default, what elastore always did): nothing starts.
``currentReplicasIfHigher``: the scale-outs that the last plan made on evidence wants by
now may start; a scale-in on missing data never does. The plan is kept in the status from
the first failure, so a restarted operator has it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PAUSED_ANNOTATION = "elastore.io/paused"
#: an annotation on a policy: stop the operation in progress safely and start no other
ABORT_ANNOTATION = "elastore.io/abort"
PAUSED_REPLICAS_ANNOTATION = "elastore.io/paused-replicas"


@dataclass(frozen=True)
class Pause:
    on: bool
    #: ``paused-replicas``: the size to move to and hold (None: hold where it is)
    replicas: int | None = None
    #: an annotation that could not be used as written: what was done instead
    problem: str | None = None

    @property
    def message(self) -> str:
        if not self.on:
            return "not paused"
        what = (f"moving to and holding {self.replicas} replicas ({PAUSED_REPLICAS_ANNOTATION})"
                if self.replicas is not None else
                f"no new step starts ({PAUSED_ANNOTATION})")
        return what + (f"; {self.problem}" if self.problem else "")


def read_pause(annotations: Mapping[str, Any] | None, floor: int, ceiling: int) -> Pause:
    """The pause the policy's annotations ask for; ``floor`` and ``ceiling`` bound
    ``paused-replicas`` (max(replicas.min, replicationFactor) and replicas.max)."""
    a = annotations or {}
    raw_n = a.get(PAUSED_REPLICAS_ANNOTATION)
    if raw_n is not None:
        text = str(raw_n).strip()
        if not text.isdigit():
            return Pause(True, None, f"{PAUSED_REPLICAS_ANNOTATION} is {raw_n!r}, not a whole "
                                     "number: paused where it is")
        n = int(text)
        if not floor <= n <= ceiling:
            return Pause(True, None, f"{PAUSED_REPLICAS_ANNOTATION} {n} is outside "
                                     f"[{floor}, {ceiling}] (max(replicas.min, "
                                     "replicationFactor), replicas.max): paused where it is")
        return Pause(True, n)
    raw = a.get(PAUSED_ANNOTATION)
    if raw is None:
        return Pause(False)
    v = str(raw).strip().lower()
    if v == "true":
        return Pause(True)
    if v in ("false", ""):
        return Pause(False)
    return Pause(True, None, f"{PAUSED_ANNOTATION} is {raw!r}, neither true nor false: "
                             "read as paused")


def pause_status(p: Pause, was: Any, now_s: float) -> dict[str, Any] | None:
    """``status.paused``: since when (kept from ``was`` while the pause lasts), the size held
    and what could not be used; None when not paused."""
    if not p.on:
        return None
    old = was if isinstance(was, dict) else {}
    since = old.get("sinceEpoch")
    return {"sinceEpoch": float(since) if isinstance(since, int | float) else now_s,
            "replicas": p.replicas, "message": p.message}


# -- fallback --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fallback:
    """``status.fallback``: consecutive failed observations, since when, and the plan the
    last good one made (status form, :func:`elastore.operator.policyloop.action_to_status`)."""

    failures: int = 0
    since_s: float | None = None
    actions: tuple[dict[str, Any], ...] = ()

    def active(self, threshold: int) -> bool:
        return self.failures >= threshold

    def to_status(self, threshold: int, behavior: str) -> dict[str, Any]:
        return {"failures": self.failures, "sinceEpoch": self.since_s,
                "active": self.active(threshold), "behavior": behavior,
                "actions": list(self.actions)}

    @classmethod
    def from_status(cls, d: Any) -> Fallback:
        """An unreadable one is a fresh count (it only ever delays the fallback)."""
        if not isinstance(d, dict):
            return cls()
        try:
            since = d.get("sinceEpoch")
            return cls(int(d.get("failures", 0)), None if since is None else float(since),
                       tuple(a for a in d.get("actions") or () if isinstance(a, dict)))
        except (TypeError, ValueError):
            return cls()


def observed(state: Fallback, ok: bool, now_s: float,
             plan: tuple[dict[str, Any], ...] = ()) -> Fallback:
    """The count after an observation: reset by a good one; a failed one adds one, and the
    first failure keeps ``plan`` (the memory's actions as they stood, the last made on
    evidence)."""
    if ok:
        return Fallback()
    if state.failures == 0:
        return Fallback(1, now_s, plan)
    return Fallback(state.failures + 1, state.since_s, state.actions)


def fallback_scale_out(evidence: bool, behavior: str, threshold: int, state: Fallback) -> bool:
    """Whether the fallback lets the last plan's scale-outs start (no evidence now)."""
    return not evidence and behavior == "currentReplicasIfHigher" and state.active(threshold)


def partial_metrics(observed: Mapping[str, Any]) -> str | None:
    """Why no scale-in may start on this observation: it came from fewer nodes than were
    ready, so the missing nodes' load is absent from the sum and reads as low load (None:
    every ready node reported, or the counts are unknown)."""
    nodes, ready = observed.get("nodes"), observed.get("readyReplicas")
    if nodes is None or ready is None or int(nodes) >= int(ready):
        return None
    return (f"metrics from {nodes} of {ready} ready nodes (query freshness, by "
            "spec.metrics.prometheus.podLabel): the missing nodes' load is not in the sum; "
            "no scale-in until every node reports")


def aborting(annotations: Mapping[str, Any] | None, enforce: bool, mode: str) -> str | None:
    """Why no operation may go on: the abort annotation, or a mode other than Enforce."""
    if ABORT_ANNOTATION in (annotations or {}):
        return f"the policy carries the {ABORT_ANNOTATION} annotation"
    if not enforce:
        return f"the policy is in mode {mode}"
    return None


def pause_said(p: Pause, was: Any) -> tuple[tuple[str, str], tuple[str, str, bool] | None]:
    """The ``Paused`` condition's (reason, message), and the Event to post (reason, message,
    warning) when the pause starts, changes or ends (None: no news)."""
    if p.on:
        reason = "PausedAtReplicas" if p.replicas is not None else "Paused"
        old = was if isinstance(was, dict) else None
        news = old is None or old.get("message") != p.message
        return (reason, p.message), ((reason, p.message, p.problem is not None) if news
                                     else None)
    ended = ("Resumed", "the pause annotations are gone: scaling follows the plan again",
             False) if isinstance(was, dict) else None
    return ("NotPaused", "scaling follows the plan"), ended


def wanted(named: int | None, evidence: bool, fallback_ok: bool, plan: tuple[Any, ...],
           saved: tuple[Any, ...], now_s: float, current: int) -> int | None:
    """The replicas wanted now: ``paused-replicas``' size; else the plan's (made on this
    period's evidence); else, the fallback in force, the last plan made on evidence, never
    below ``current``; None without evidence and without the fallback (nothing is wanted)."""
    from elastore.operator.policyloop import target_at

    if named is not None:
        return named
    if evidence:
        return target_at(plan, now_s, current)
    if fallback_ok:
        return max(current, target_at(saved, now_s, current))
    return None


def why_now(named: int | None, evidence: bool, plan: tuple[Any, ...], saved: tuple[Any, ...],
            at: Any) -> str:
    """What asked for a step, for its Event: paused-replicas, the fallback's saved plan, or
    the plan (``at`` writes an epoch)."""
    if named is not None:
        return f"asked by {PAUSED_REPLICAS_ANNOTATION}={named}"
    actions = plan if evidence else saved
    src = "" if evidence else " (the fallback: the last plan made on evidence)"
    return f"planned at {at(actions[0].at_s)}{src}" if actions else f"planned{src}"

