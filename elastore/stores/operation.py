"""A topology change in progress, one node at a time, as a state machine. Pure.

The operation lives in the CR status. Every tick the loop observes :class:`Facts` (the
StatefulSet's replicas, the pod concerned, its node's ring mode from ``nodetool netstats``)
and :func:`advance` returns the next state and at most one :data:`Effect` to carry out.
Effects are idempotent given the facts (setting replicas to a number, deleting a PVC that
may be gone) or guarded (a decommission is issued only while the node is NORMAL and not
issued within the last ``REISSUE_AFTER_S``), so an operator killed at any point resumes
from the status: it never repeats a step the cluster has taken, and never abandons one.

Scale-out: ``Scaling`` (replicas + 1) -> ``Joining`` (until the new node is NORMAL) ->
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

**Drift.** Every phase knows which ``spec.replicas`` it may find (:func:`allowed_replicas`:
the operation's own from/to). Anyone else's change to the StatefulSet's size while an
operation runs (a human, another controller) is drift: :func:`advance` then returns the
``conflict`` effect, which touches nothing, and waits for the size to come back. A
scale-in that took its ``to_replicas`` at face value would, after someone scaled 4 -> 6,
remove two pods that never left the ring.

**Derived, not trusted.** The pod and the PVC an operation acts on follow from the target
and the operation's ``fromReplicas`` (:func:`expected_pod`); the status is writable by
anyone who may patch it, so :func:`check_identity` refuses an operation whose pod or PVC
does not match, or a scale-in below ``max(replicas.min, replicationFactor)``.

**Status is a record, not the truth.** Before every irreversible effect :func:`advance`
wants the fact in the store itself, not the phase the status claims: the replicas of a
scale-in are lowered only while the leaving node reports ``DECOMMISSIONED`` itself and
another node's ring no longer lists it (``Facts.ring_gone``); a claim the store contradicts
is the ``reject`` effect (the runner: ``Conflict``/``StatusRejected``, nothing touched). A
PVC is deleted only if it carries *this* operation's mark (:func:`pvc_mark`: the
operation's ``id`` and the PVC's UID, :func:`mark_honoured`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any, Literal

from elastore.errors import ElastoreError
from elastore.operator.conditions import iso

Effect = Literal["none", "scale", "decommission", "delete-pvc", "conflict", "stuck",
                 "cleanup", "reject"]
#: the ring mode of a node whose decommission failed (Cassandra 5.0+; netstats' ``Mode:``)
DECOMMISSION_FAILED = "DECOMMISSION_FAILED"
REISSUE_AFTER_S = 120.0  # a decommission that has not turned the node LEAVING by then is re-issued
#: an operation's deadline: this many times what the migration-time model expects, plus
#: DEADLINE_MARGIN_S (pods scheduling, JVMs starting, a slow first stream)
DEADLINE_FACTOR = 2.0
DEADLINE_MARGIN_S = 900.0


def expected_seconds(kind: str, replicas: int, data_bytes: float | None, mibps: float,
                     overhead_s: float, cleanup: bool = False) -> float:
    """What the migration-time model expects one node step to take: the node's overhead
    (boot and join, or the decommission's own) plus its data at the migration rate in force
    (a joining node receives D/(n+1); a leaving one sends its D/n, one sender). With
    ``cleanup`` a scale-out's old nodes then rewrite their data one at a time, throttled to
    the same rate: n nodes x D/n = D more."""
    from elastore.units import MIB

    if data_bytes is None or not data_bytes > 0 or not mibps > 0:
        return overhead_s
    share = data_bytes / (replicas + 1) if kind == "ScaleOut" else data_bytes / replicas
    if cleanup and kind == "ScaleOut":
        share += data_bytes
    return overhead_s + share / (mibps * MIB)

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


@dataclass(frozen=True)
class OperationState:
    kind: Literal["ScaleOut", "ScaleIn"]
    from_replicas: int
    to_replicas: int
    pod: str
    phase: str
    started_s: float
    updated_s: float
    expected_end_s: float
    message: str = ""
    decommission_issued_s: float | None = None
    pvc: str | None = None
    deadline_s: float | None = None  # past it, the operation is Stuck
    cleanup_ordinal: int | None = None  # CleaningUp: the old node being cleaned
    cleanup_issued_s: float | None = None
    #: the cleaning node's compaction throttle before the cleanup set it (MiB/s; 0:
    #: unthrottled), put back when its cleanup ends
    cleanup_restore_mibps: float | None = None
    #: the operation's own identity, generated when it begins (:func:`start`): a PVC mark
    #: names it, so a mark left by another operation is never taken for this one's
    id: str | None = None

    def cleanup_pod(self) -> str | None:
        """The pod of the node being cleaned up (the operation's pod is the new one)."""
        if self.cleanup_ordinal is None:
            return None
        return f"{self.pod.rsplit('-', 1)[0]}-{self.cleanup_ordinal}"

    def to_status(self) -> dict[str, Any]:
        return {"kind": self.kind, "fromReplicas": self.from_replicas,
                "toReplicas": self.to_replicas, "pod": self.pod, "phase": self.phase,
                "startedAt": iso(self.started_s), "startedEpoch": round(self.started_s, 3),
                "updatedEpoch": round(self.updated_s, 3),
                "expectedEndEpoch": round(self.expected_end_s, 3), "message": self.message,
                "decommissionIssuedEpoch": self.decommission_issued_s, "pvc": self.pvc,
                "deadlineEpoch": None if self.deadline_s is None else round(self.deadline_s, 3),
                "deadline": None if self.deadline_s is None else iso(self.deadline_s),
                "cleanupOrdinal": self.cleanup_ordinal,
                "cleanupIssuedEpoch": None if self.cleanup_issued_s is None
                else round(self.cleanup_issued_s, 3),
                "cleanupRestoreMiBps": self.cleanup_restore_mibps, "id": self.id}

    @classmethod
    def from_status(cls, d: Any) -> OperationState | None:
        if not isinstance(d, dict) or not d.get("kind"):
            return None
        try:
            return cls(kind=d["kind"], from_replicas=int(d["fromReplicas"]),
                       to_replicas=int(d["toReplicas"]), pod=str(d["pod"]),
                       phase=str(d["phase"]), started_s=float(d["startedEpoch"]),
                       updated_s=float(d.get("updatedEpoch") or d["startedEpoch"]),
                       expected_end_s=float(d.get("expectedEndEpoch") or d["startedEpoch"]),
                       message=str(d.get("message", "")),
                       decommission_issued_s=(None if d.get("decommissionIssuedEpoch") is None
                                              else float(d["decommissionIssuedEpoch"])),
                       pvc=d.get("pvc"),
                       deadline_s=(None if d.get("deadlineEpoch") is None
                                   else float(d["deadlineEpoch"])),
                       cleanup_ordinal=(None if d.get("cleanupOrdinal") is None
                                        else int(d["cleanupOrdinal"])),
                       cleanup_issued_s=(None if d.get("cleanupIssuedEpoch") is None
                                         else float(d["cleanupIssuedEpoch"])),
                       cleanup_restore_mibps=(None if d.get("cleanupRestoreMiBps") is None
                                              else float(d["cleanupRestoreMiBps"])),
                       id=None if d.get("id") is None else str(d["id"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ElastoreError(f"unreadable operation in the status: {exc!r}: {d!r}") from exc


def start(kind: Literal["ScaleOut", "ScaleIn"], sts: str, current: int, now_s: float,
          expected_s: float, pvc_template: str | None = None, store: str = "cassandra"
          ) -> OperationState:
    """One node step: scale-out adds ordinal ``current``, scale-in removes ``current - 1``
    (a Swift scale-in starts by draining: :mod:`elastore.stores.swift.machine`)."""
    if kind == "ScaleOut":
        ordinal, to, phase = current, current + 1, "Scaling"
    else:
        ordinal, to = current - 1, current - 1
        phase = "Draining" if store == "swift" else "Decommissioning"
    pod = f"{sts}-{ordinal}"
    return OperationState(kind, current, to, pod, phase, now_s, now_s, now_s + expected_s,
                          message="started",
                          pvc=f"{pvc_template}-{pod}" if pvc_template else None,
                          deadline_s=now_s + DEADLINE_FACTOR * expected_s + DEADLINE_MARGIN_S,
                          id=new_id())


def new_id() -> str:
    """A fresh operation id."""
    return uuid.uuid4().hex[:16]


def pvc_mark(policy: str, at: str, op_id: str, uid: str) -> str:
    """The value of the mark a PVC gets when its node is seen leaving: who, when, which
    operation, and which PVC (its UID: a PVC created again under the name is another)."""
    return f"{policy}@{at} op={op_id} uid={uid}"


def mark_honoured(value: str | None, op_id: str | None, uid: str | None) -> bool:
    """Whether a PVC's mark is this operation's on this very PVC: a mark left by an earlier
    operation, on a PVC since created again, or by an operator that wrote no ids, is not."""
    if not value or not op_id or not uid:
        return False
    said = dict(w.split("=", 1) for w in value.split() if "=" in w)
    return said.get("op") == op_id and said.get("uid") == uid


def expected_pod(kind: str, sts: str, from_replicas: int) -> str:
    """The pod a node step concerns: the new ordinal, or the highest one."""
    return f"{sts}-{from_replicas if kind == 'ScaleOut' else from_replicas - 1}"


def check_identity(op: OperationState, sts: str, pvc_template: str | None, floor: int = 1
                   ) -> None:
    """Refuse an operation (read back from the status) whose pod or PVC is not the one its
    own kind and size imply on this target, or a scale-in below ``floor``
    (max(replicas.min, replicationFactor)): a status patched by someone else."""
    if op.kind not in ("ScaleOut", "ScaleIn"):
        raise ElastoreError(f"operation of unknown kind {op.kind!r}")
    below_floor(op, floor)
    if op.to_replicas != op.from_replicas + (1 if op.kind == "ScaleOut" else -1) or \
            op.from_replicas < 1:
        raise ElastoreError(f"operation {op.kind} {op.from_replicas} -> {op.to_replicas} is "
                            "not a one-node step")
    pod = expected_pod(op.kind, sts, op.from_replicas)
    if op.pod != pod:
        raise ElastoreError(f"the operation names pod {op.pod!r}; a {op.kind} from "
                            f"{op.from_replicas} replicas of {sts} concerns {pod!r}")
    pvc = f"{pvc_template}-{pod}" if pvc_template else None
    if op.pvc != pvc:
        raise ElastoreError(f"the operation names PVC {op.pvc!r}; {pod}'s is {pvc!r}")
    if op.cleanup_ordinal is not None and not (
            op.kind == "ScaleOut" and 0 <= op.cleanup_ordinal < op.from_replicas):
        raise ElastoreError(f"the operation cleans up ordinal {op.cleanup_ordinal}; a "
                            f"{op.kind} from {op.from_replicas} replicas has old nodes "
                            f"0..{op.from_replicas - 1}")


def below_floor(op: OperationState, floor: int) -> None:
    """Refuse a scale-in to fewer than ``floor`` replicas, whatever its phase."""
    if op.kind == "ScaleIn" and op.to_replicas < floor:
        raise ElastoreError(f"{op.kind} {op.from_replicas} -> {op.to_replicas} goes below "
                            f"max(replicas.min, replicationFactor) = {floor}")


def allowed_replicas(op: OperationState) -> tuple[int, ...]:
    """The StatefulSet sizes this phase may find; any other is drift."""
    if op.kind == "ScaleOut":
        return (op.from_replicas, op.to_replicas) if op.phase == "Scaling" else \
            (op.to_replicas,)
    if op.phase in ("Decommissioning", "Draining", "Removing"):  # Swift's: Draining, Removing
        return (op.from_replicas,)
    if op.phase == "Scaling":
        return (op.from_replicas, op.to_replicas)
    return (op.to_replicas,)


def advance(op: OperationState, facts: Facts, now_s: float, pvc_policy: str = "Retain",
            cleanup: bool = True) -> tuple[OperationState, Effect, bool]:
    """The next state, the effect to carry out now, and whether the operation is done.
    ``cleanup``: run ``nodetool cleanup`` on the old nodes after a scale-out."""
    def at(phase: str, message: str, **kw: Any) -> OperationState:
        return replace(op, phase=phase, message=message, updated_s=now_s, **kw)

    if op.phase == "Stuck":  # a human decides (elastore.io/abort, or the status)
        return op, "none", False
    allowed = allowed_replicas(op)
    if facts.spec_replicas not in allowed:
        want = " or ".join(map(str, allowed))
        return at(op.phase, f"drift: the StatefulSet has {facts.spec_replicas} replicas, this "
                            f"{op.kind} {op.from_replicas} -> {op.to_replicas} in phase "
                            f"{op.phase} expects {want}; touching nothing until it is back "
                            "or the operation is aborted"), "conflict", False

    if op.kind == "ScaleIn" and op.phase == "Decommissioning" and (
            facts.node_mode == DECOMMISSION_FAILED or
            (facts.decommission_failed and facts.node_mode == "NORMAL")):
        # Cassandra 5.0 puts a node whose decommission it refused in DECOMMISSION_FAILED
        # (measured on the lab's 5.0.4, refused for RF); before 5.0 it stays NORMAL
        why = facts.decommission_failed or f"its node reports {DECOMMISSION_FAILED}"
        return at("Stuck", f"the decommission of {op.pod} failed: {why}; not re-issued"), \
            "stuck", False
    if op.deadline_s is not None and now_s > op.deadline_s:
        return at("Stuck", f"{op.kind} {op.from_replicas} -> {op.to_replicas} is past its "
                           f"deadline {iso(op.deadline_s)} in phase {op.phase} "
                           f"({op.message}); no further step"), "stuck", False
    if op.kind == "ScaleOut":
        if op.phase == "Scaling":
            if facts.spec_replicas < op.to_replicas:
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
        if op.phase == "Scaling":
            if facts.spec_replicas > op.to_replicas:
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
            if facts.pod_exists:
                return at("Scaling", f"waiting for {op.pod} to go"), "none", False
            return at("Cleanup", f"{op.pod} is gone"), "none", False
        if op.phase == "Cleanup":
            if pvc_policy == "Delete" and op.pvc and facts.pvc_exists:
                if facts.pvc_marked:
                    return at("Cleanup", f"deleting PVC {op.pvc}"), "delete-pvc", False
                return at("Done", f"{op.pod} removed; PVC {op.pvc} retained: it carries no "
                                  "mark of this operation that its node left the ring"), \
                    "none", True
            kept = f"; PVC {op.pvc} retained" if op.pvc and pvc_policy != "Delete" else ""
            return at("Done", f"{op.pod} removed{kept}"), "none", True
    raise ElastoreError(f"operation {op.kind} in unknown phase {op.phase!r}")


def _clean(at: Any, op: OperationState, ordinal: int, now_s: float, said: str
           ) -> tuple[OperationState, Effect, bool]:
    """CleaningUp on old node ``ordinal``: the state (written first), then the effect."""
    node = f"{op.pod.rsplit('-', 1)[0]}-{ordinal}"
    restore = op.cleanup_restore_mibps if ordinal == op.cleanup_ordinal else None
    return at("CleaningUp", f"{said}nodetool cleanup on {node} ({ordinal + 1} of "
                            f"{op.from_replicas})", cleanup_ordinal=ordinal,
              cleanup_issued_s=now_s, cleanup_restore_mibps=restore), "cleanup", False
