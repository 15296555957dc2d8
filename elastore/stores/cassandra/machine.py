"""A Cassandra node step in a StatefulSet, as a state machine. Pure.

The operation (:class:`~elastore.stores.operation.OperationState`) lives in the CR status.
Every tick the loop observes :class:`Facts` (the StatefulSet's replicas, the pod concerned,
its node's ring mode from ``nodetool netstats``) and :func:`advance` returns the next state
and at most one :data:`Effect` to carry out. Effects are idempotent given the facts (setting
replicas to a number, deleting a PVC that may be gone) or guarded (a decommission is issued
only while the node is NORMAL and not issued within the last ``REISSUE_AFTER_S``), so an
operator killed at any point resumes from the status: it never repeats a step the cluster
has taken, and never abandons one.

Scale-out: ``Scaling`` (replicas + 1; first, a PVC an earlier scale-in retained for that
ordinal is deleted, since Cassandra will not restart a decommissioned node on its data) ->
``Joining`` (until the new node is NORMAL) ->
``CleaningUp``: ``nodetool cleanup`` on each old node, one at a time (ordinal 0 first), so
that they drop the ranges they no longer own. Until it has run everywhere the operation is
not done, so no scale-in starts: a node removed before cleanup hands its stale copies back
to the ring, and deleted data can come back (cass-operator #722); a scale-in during cleanup
broke the cleanup there (#902). A further *scale-out* may supersede it (the runner: cleanup
takes hours on large nodes and must not hold a resize, #496): the new step's cleanup covers
every old node again. A cleanup re-run on a node already clean rewrites nothing (Cassandra
skips SSTables that hold only owned ranges), so re-issuing after a restart is safe.
Scale-in: ``Decommissioning`` (decommission the highest ordinal, until DECOMMISSIONED, i.e.
LEFT the ring) -> ``Scaling`` (replicas - 1, until the pod is gone) -> ``Cleanup`` (the PVC
per policy; retained by default).

**Drift**, **identity** and the **deadline** are the rules every store's machine shares
(:mod:`elastore.stores.operation`): a StatefulSet size other than the ones the phase may
find (:func:`~elastore.stores.operation.allowed_replicas`) is the ``conflict`` effect,
nothing touched; an operation past its deadline is ``Stuck``.

**Status is a record, not the truth.** Before every irreversible effect :func:`advance`
wants the fact in the store itself, not the phase the status claims: the replicas of a
scale-in are lowered only while the leaving node reports ``DECOMMISSIONED`` itself and
another node's ring no longer lists it (``Facts.ring_gone``); a claim the store contradicts
is the ``reject`` effect (the runner: ``Conflict``/``StatusRejected``, nothing touched). A
PVC is deleted only if it carries *this* operation's mark
(:func:`~elastore.stores.operation.pvc_mark`: the operation's ``id`` and the PVC's UID,
:func:`~elastore.stores.operation.mark_honoured`); a scale-out deletes the new ordinal's
retained PVC only if it carries the mark of the scale-in that saw its node leave (on that
very PVC, :func:`~elastore.stores.operation.left_ring`) and the ring lists no more members
than there are pods (``Facts.ring_members``), else it is ``Stuck``, nothing touched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from elastore.errors import ElastoreError
from elastore.stores.operation import OperationState, held, overdue, scale_in_tail

Effect = Literal["none", "scale", "decommission", "delete-pvc", "conflict", "stuck",
                 "cleanup", "reject"]
#: the ring mode of a node whose decommission failed (Cassandra 5.0+; netstats' ``Mode:``)
DECOMMISSION_FAILED = "DECOMMISSION_FAILED"
REISSUE_AFTER_S = 120.0  # a decommission that has not turned the node LEAVING by then is re-issued


@dataclass(frozen=True)
class Facts:
    """What the loop observed this tick."""

    spec_replicas: int
    ready_replicas: int
    pod_exists: bool  # the operation's pod
    pod_ready: bool
    node_mode: str | None  # its node's ring mode; None if it could not be read
    pvc_exists: bool | None = None  # None: not looked at / no volume template
    #: it carries this operation's mark that its node left the ring (:func:`mark_honoured`)
    pvc_marked: bool = False
    decommission_failed: str | None = None  # the issued decommission exited non-zero: why
    #: the cleanup on the node at ``cleanup_ordinal`` as this process issued it: "running",
    #: "done", "failed: <why>"; None when this process issued none there (it restarted)
    cleanup: str | None = None
    #: that node's compactionstats shows a Cleanup task (None: it could not be read)
    cleanup_seen: bool | None = None
    #: a scale-in's leaving node, as another node's ring shows it: True once that ring no
    #: longer lists it, False while it does, None when not read (or unreadable)
    ring_gone: bool | None = None
    #: a scale-out's new ordinal's PVC before the replicas go up: "absent", "left-ring" (it
    #: carries an earlier scale-in's mark that its node left the ring, on this very PVC) or
    #: "unmarked" (it exists, without one); None when not looked at
    new_pvc: str | None = None
    #: how many members ``nodetool status`` lists (any state), read when ``new_pvc`` is
    #: "left-ring"; None when not read (or unreadable)
    ring_members: int | None = None


def advance(op: OperationState, facts: Facts, now_s: float, pvc_policy: str = "Retain",
            cleanup: bool = True) -> tuple[OperationState, Effect, bool]:
    """The next state, the effect to carry out now, and whether the operation is done.
    ``cleanup``: run ``nodetool cleanup`` on the old nodes after a scale-out."""
    def at(phase: str, message: str, **kw: Any) -> OperationState:
        return replace(op, phase=phase, message=message, updated_s=now_s, **kw)

    first = held(op, facts.spec_replicas, now_s,
                 f"the StatefulSet has {facts.spec_replicas} replicas")
    if first is not None:
        return first

    if op.kind == "ScaleIn" and op.phase == "Decommissioning" and (
            facts.node_mode == DECOMMISSION_FAILED or
            (facts.decommission_failed and facts.node_mode == "NORMAL")):
        # Cassandra 5.0 puts a node whose decommission it refused in DECOMMISSION_FAILED
        # (measured on the lab's 5.0.4, refused for RF); before 5.0 it stays NORMAL
        why = facts.decommission_failed or f"its node reports {DECOMMISSION_FAILED}"
        return at("Stuck", f"the decommission of {op.pod} failed: {why}; not re-issued"), \
            "stuck", False
    late = overdue(op, now_s, _why_late(op, facts))
    if late is not None:
        return late
    if op.kind == "ScaleOut":
        if op.phase == "Scaling":
            if facts.spec_replicas < op.to_replicas:
                if facts.new_pvc in ("left-ring", "unmarked"):
                    return _retained_volume(at, op, facts)
                return at("Scaling", f"setting replicas to {op.to_replicas}"), "scale", False
            if facts.pod_exists and facts.pod_ready:
                return at("Joining", f"{op.pod} is ready; waiting for its node to join"), \
                    "none", False
            return at("Scaling", f"waiting for {op.pod} to be ready"), "none", False
        if op.phase == "Joining":
            if facts.node_mode == "NORMAL":
                if not cleanup:
                    return at("Done", f"{op.pod} joined the ring"), "none", True
                return _clean(at, op, 0, now_s, f"{op.pod} joined the ring; ")
            return at("Joining", f"{op.pod}'s node is {facts.node_mode or 'not answering'}"), \
                "none", False
        if op.phase == "CleaningUp" and op.cleanup_ordinal is not None:
            k, node = op.cleanup_ordinal, op.cleanup_pod()
            said = facts.cleanup
            if said == "done":
                if k + 1 < op.from_replicas:
                    return _clean(at, op, k + 1, now_s, f"{node} cleaned up; ")
                return at("Done", f"{op.pod} joined the ring; the {op.from_replicas} old "
                                  "node(s) cleaned up"), "none", True
            if said is not None and said.startswith("failed"):
                return at("Stuck", f"nodetool cleanup on {node} {said}; not re-issued (no "
                                   "scale-in starts before the old nodes are clean: abort "
                                   "the operation once it has been run by hand)"), \
                    "stuck", False
            if said == "running" or facts.cleanup_seen:
                return at("CleaningUp", f"cleanup running on {node} ({k + 1} of "
                                        f"{op.from_replicas})"), "none", False
            if facts.cleanup_seen is None:
                return at("CleaningUp", f"waiting: {node}'s compactions could not be read"), \
                    "none", False
            # not issued by this process (it restarted) and not running there: again (a
            # node already clean rewrites nothing)
            return _clean(at, op, k, now_s, f"cleanup on {node} not seen running: ")
    else:
        if op.phase == "Decommissioning":
            mode = facts.node_mode
            if mode == "DECOMMISSIONED":
                if facts.ring_gone is not True:
                    return at("Decommissioning", f"{op.pod} reports DECOMMISSIONED; waiting "
                                                 "for another node's ring to drop it"), \
                        "none", False
                return at("Scaling", f"{op.pod} has left the ring; lowering replicas to "
                                     f"{op.to_replicas}"), "scale", False
            if mode == "NORMAL":
                recent = op.decommission_issued_s is not None and \
                    now_s - op.decommission_issued_s < REISSUE_AFTER_S
                if recent:
                    return at("Decommissioning", "decommission issued; waiting for the node "
                                                 "to start leaving"), "none", False
                return at("Decommissioning", f"decommissioning {op.pod}",
                          decommission_issued_s=now_s), "decommission", False
            if not facts.pod_exists:
                raise ElastoreError(f"{op.pod} disappeared while it was being decommissioned "
                                    "(before it left the ring): not lowering replicas blind")
            return at("Decommissioning", f"{op.pod}'s node is "
                                         f"{mode or 'not answering'}; waiting"), "none", False
        if op.phase == "Scaling" and facts.spec_replicas > op.to_replicas:
            # the status says the node left; the store must say so too (issue 34)
            mode = facts.node_mode
            if mode not in ("DECOMMISSIONED", None):
                return at("Scaling", f"the status says {op.pod} has left the ring; its "
                                     f"node reports {mode}, not DECOMMISSIONED"), \
                        "reject", False
            if mode is None:
                return at("Scaling", f"waiting: {op.pod}'s node does not answer (it "
                                     "must report DECOMMISSIONED before its pod goes)"), \
                        "none", False
            if facts.ring_gone is not True:
                return at("Scaling", f"{op.pod} reports DECOMMISSIONED; waiting for "
                                     "another node's ring to drop it"), "none", False
            return at("Scaling", f"lowering replicas to {op.to_replicas}"), "scale", False
        if op.phase in ("Scaling", "Cleanup"):
            return scale_in_tail(op, now_s, facts.pod_exists, pvc_policy, facts.pvc_exists,
                                 facts.pvc_marked, "of this operation that its node left the "
                                 "ring")
    raise ElastoreError(f"operation {op.kind} in unknown phase {op.phase!r}")


def never_joined(op: OperationState) -> str:
    """What to do with a scale-out's node that has not joined (it died while joining, or
    never gets there), measured on the lab's Cassandra 5.0.4
    (``tests/test_chaos_join_lab.py``): it owns no data, since a write acknowledged at a
    consistency level reached that many of its owners besides it; a restart of its pod on
    its volume bootstraps again, at the same tokens; one that stays dead leaves the ring
    by itself once it has been silent 10 x ring_delay (Cassandra's failed-bootstrap timeout,
    5 min by default), while ``nodetool removenode`` refuses it (not a ring member).
    Until then writes at QUORUM and RF 2 to its ranges can fail (its pending replica counts
    towards them)."""
    pvc = f" and delete PVC {op.pvc} (a later scale-out does not start a pod on a volume " \
          "without a left-ring mark)" if op.pvc else ""
    return (f"{op.pod} has not joined the ring, so it owns no data. Cassandra drops a joining "
            "node that died from the ring once it has been silent 10 x ring_delay (5 min by "
            "default; nodetool removenode refuses a node that never joined); until then "
            "writes at QUORUM and RF 2 to its ranges can fail. A restart of its pod bootstraps "
            f"again; to give up, lower the replicas to {op.from_replicas}{pvc}")


def _why_late(op: OperationState, facts: Facts) -> str:
    """What a step past its deadline says besides its phase."""
    if op.kind == "ScaleOut" and (op.phase == "Joining" or (
            op.phase == "Scaling" and facts.spec_replicas >= op.to_replicas)):
        return f"no further step. {never_joined(op)}, then abort this operation"
    return "no further step"


def _retained_volume(at: Any, op: OperationState, facts: Facts
                     ) -> tuple[OperationState, Effect, bool]:
    """A scale-out whose new pod would mount a PVC retained from an earlier scale-in
    (``pvcPolicy: Retain``). Cassandra refuses to start on a decommissioned node's data
    ("This node was decommissioned and will not rejoin the ring", measured on 5.0.4: the
    pod crash-loops), so the volume goes before the replicas go up, and the pod bootstraps
    on a new one: only when the PVC carries the mark of a scale-in that saw its node leave
    the ring, and the ring now lists no member besides the pods' nodes (a member that is
    down, or left by hand, may hold data only that volume has)."""
    if facts.new_pvc != "left-ring":
        return at("Stuck", f"PVC {op.pvc} exists and carries no mark that its node left the "
                           f"ring: {op.pod} would start on it, so it is neither used nor "
                           "deleted. Delete it once its node is known to be out of the ring "
                           "(nodetool removenode if the ring still lists it), then abort "
                           "this operation"), "stuck", False
    if facts.ring_members is None:
        return at("Scaling", f"waiting: the ring could not be read to release PVC "
                             f"{op.pvc}"), "none", False
    if facts.ring_members > op.from_replicas:
        return at("Stuck", f"PVC {op.pvc} was left by a decommissioned node, but the ring "
                           f"lists {facts.ring_members} members for {op.from_replicas} "
                           "pods: a member with no pod may have data only that volume "
                           "holds; neither used nor deleted. Remove that member (nodetool "
                           "removenode), delete the PVC, then abort this operation"), \
            "stuck", False
    return at("Scaling", f"deleting PVC {op.pvc}, retained from an earlier scale-in (its "
                         f"node left the ring; the ring lists only the {op.from_replicas} "
                         f"pods' nodes): Cassandra refuses a decommissioned node's data, so "
                         f"{op.pod} bootstraps on a new volume"), "delete-pvc", False


def _clean(at: Any, op: OperationState, ordinal: int, now_s: float, said: str
           ) -> tuple[OperationState, Effect, bool]:
    """CleaningUp on old node ``ordinal``: the state (written first), then the effect."""
    node = f"{op.pod.rsplit('-', 1)[0]}-{ordinal}"
    restore = op.cleanup_restore_mibps if ordinal == op.cleanup_ordinal else None
    return at("CleaningUp", f"{said}nodetool cleanup on {node} ({ordinal + 1} of "
                            f"{op.from_replicas})", cleanup_ordinal=ordinal,
              cleanup_issued_s=now_s, cleanup_restore_mibps=restore), "cleanup", False
