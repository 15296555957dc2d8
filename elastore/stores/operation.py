"""A node step in progress, as the CR status records it, and the rules every store's step
machine shares. Pure.

The operation lives in the CR status (:class:`OperationState`, written with
:meth:`~OperationState.to_status` and read back with :meth:`~OperationState.from_status`).
Each store's machine (:mod:`elastore.stores.cassandra.machine`,
:mod:`elastore.stores.swift.machine`, :mod:`elastore.stores.cass_operator.machine`) takes it
one tick further: the next state and at most one effect, recorded before the effect is
carried out (:mod:`elastore.stores.steps`), so an operator killed at any point resumes from
the status. A node step begins with :func:`start` (a datacenter's resize with its own
machine's), under a fresh :func:`new_id`; its deadline is ``DEADLINE_FACTOR`` times what
the migration-time model expects (:func:`expected_seconds`) plus ``DEADLINE_MARGIN_S``, and
past it every machine makes the operation Stuck.

**Drift.** Every phase of a StatefulSet's step (Cassandra's, Swift's) knows which
``spec.replicas`` it may find (:func:`allowed_replicas`: the operation's own from/to).
Anyone else's change to the StatefulSet's size while an operation runs (a human, another
controller) is drift: the machine then returns the ``conflict`` effect, which touches
nothing, and waits for the size to come back. A scale-in that took its ``to_replicas`` at
face value would, after someone scaled 4 -> 6, remove two pods that never left the ring.

**Derived, not trusted.** The pod and the PVC an operation acts on follow from the target
and the operation's ``fromReplicas`` (:func:`expected_pod`); the status is writable by
anyone who may patch it, so :func:`check_identity` refuses an operation whose pod or PVC
does not match, or a scale-in below ``max(replicas.min, replicationFactor)``
(:func:`below_floor`). A PVC is deleted only if it carries *this* operation's mark
(:func:`pvc_mark`: the operation's ``id`` and the PVC's UID, :func:`mark_honoured`).

**Earlier releases' records.** An operation written by an earlier release is read as it
is, with what that release did not write filled in: no ``id`` (before 2026-11-27: the
runner gives it one before its next effect, so its PVC mark names it) and no deadline (the
first release, 2026-11-23: :meth:`OperationState.from_status` derives it from the
operation's own start and expected end by the rule :func:`start` applies, so an
upgrade never leaves a step without one).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, replace
from typing import Any, Literal

from elastore.errors import ElastoreError
from elastore.operator.conditions import iso

#: an operation's deadline: this many times what the migration-time model expects, plus
#: DEADLINE_MARGIN_S (pods scheduling, JVMs starting, a slow first stream)
DEADLINE_FACTOR = 2.0
DEADLINE_MARGIN_S = 900.0
#: no step is given longer than this (30 days): a migration-time model fed an absurd size or
#: rate would otherwise set a deadline decades away (or past the calendar's end), and the
#: step would never be called Stuck
MAX_DEADLINE_S = 30 * 86400.0


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
        """The operation in the status; None if there is none. An earlier release's record
        (no ``id``, no deadline) is read with what it lacks filled in (the module's
        docstring); one that cannot be read raises :class:`ElastoreError`."""
        if not isinstance(d, dict) or not d.get("kind"):
            return None
        try:
            started = float(d["startedEpoch"])
            expected_end = float(d.get("expectedEndEpoch") or started)
            # the first release (2026-11-23) wrote no deadline: the one start() would have
            # set, from the operation's own start and expected end (never none: a step
            # without one would never be called Stuck)
            until = (deadline(started, max(0.0, expected_end - started))
                     if d.get("deadlineEpoch") is None else float(d["deadlineEpoch"]))
            return cls(kind=d["kind"], from_replicas=int(d["fromReplicas"]),
                       to_replicas=int(d["toReplicas"]), pod=str(d["pod"]),
                       phase=str(d["phase"]), started_s=started,
                       updated_s=float(d.get("updatedEpoch") or started),
                       expected_end_s=expected_end,
                       message=str(d.get("message", "")),
                       decommission_issued_s=(None if d.get("decommissionIssuedEpoch") is None
                                              else float(d["decommissionIssuedEpoch"])),
                       pvc=d.get("pvc"),
                       deadline_s=until,
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
    return OperationState(kind, current, to, pod, phase, now_s, now_s,
                          now_s + capped(expected_s), message="started",
                          pvc=f"{pvc_template}-{pod}" if pvc_template else None,
                          deadline_s=deadline(now_s, expected_s), id=new_id())


def capped(expected_s: float) -> float:
    """An expected duration, at most :data:`MAX_DEADLINE_S` (an infinite one too)."""
    return min(expected_s, MAX_DEADLINE_S) if math.isfinite(expected_s) else MAX_DEADLINE_S


def deadline(now_s: float, expected_s: float) -> float:
    """When a step expected to take ``expected_s`` from ``now_s`` is Stuck: ``DEADLINE_FACTOR``
    times that plus ``DEADLINE_MARGIN_S``, never more than :data:`MAX_DEADLINE_S` away."""
    return now_s + min(DEADLINE_FACTOR * capped(expected_s) + DEADLINE_MARGIN_S,
                       MAX_DEADLINE_S)


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


def left_ring(value: str | None, uid: str | None) -> bool:
    """Whether a PVC's mark says that an operation saw its node leave the ring, on this
    very PVC (its UID), whichever operation that was: a PVC created again under the name,
    or a mark that names no operation, is not."""
    if not value or not uid:
        return False
    said = dict(w.split("=", 1) for w in value.split() if "=" in w)
    return bool(said.get("op")) and said.get("uid") == uid


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


#: a step held before its machine looks at anything else: Stuck waits for a human
#: (``none``), drift touches nothing (``conflict``), a deadline passed ends it (``stuck``)
Held = tuple[OperationState, Literal["none", "conflict", "stuck"], bool]


def held(op: OperationState, size: int, now_s: float, what: str,
         allowed: tuple[int, ...] | None = None) -> Held | None:
    """What every store's machine checks first. ``size``: the target's size as the store
    shows it (``what`` names it, e.g. "the StatefulSet has 5 replicas"); ``allowed``: the
    sizes this phase may find (default :func:`allowed_replicas`). None: go on."""
    if op.phase == "Stuck":  # a human decides (elastore.io/abort, or the status)
        return op, "none", False
    allowed = allowed_replicas(op) if allowed is None else allowed
    if size not in allowed:
        want = " or ".join(map(str, allowed))
        return replace(op, updated_s=now_s, message=(
            f"drift: {what}, this {op.kind} {op.from_replicas} -> {op.to_replicas} in phase "
            f"{op.phase} expects {want}; touching nothing until it is back or the operation "
            "is aborted")), "conflict", False
    return None


def overdue(op: OperationState, now_s: float, why_late: str = "no further step"
            ) -> Held | None:
    """Past its deadline: Stuck (``stuck``), saying the phase it was in and ``why_late``."""
    if op.deadline_s is None or now_s <= op.deadline_s:
        return None
    return replace(op, phase="Stuck", updated_s=now_s, message=(
        f"{op.kind} {op.from_replicas} -> {op.to_replicas} is past its deadline "
        f"{iso(op.deadline_s)} in phase {op.phase} ({op.message}); {why_late}")), \
        "stuck", False


def scale_in_tail(op: OperationState, now_s: float, pod_exists: bool, pvc_policy: str,
                  pvc_exists: bool | None, pvc_marked: bool, mark: str
                  ) -> tuple[OperationState, Literal["none", "delete-pvc"], bool]:
    """A scale-in once its replicas are lowered (phase ``Scaling``) or its pod has gone
    (``Cleanup``), whatever the store: wait for the pod to go, then its PVC per
    ``pvc_policy`` (``pvc_exists`` None: not known, so not deleted); deleted only if it
    carries this operation's mark, which says ``mark`` (what a PVC without one is retained
    for not showing)."""
    def at(phase: str, message: str) -> OperationState:
        return replace(op, phase=phase, message=message, updated_s=now_s)

    if op.phase == "Scaling":
        if pod_exists:
            return at("Scaling", f"waiting for {op.pod} to go"), "none", False
        return at("Cleanup", f"{op.pod} is gone"), "none", False
    if pvc_policy == "Delete" and op.pvc and pvc_exists:
        if pvc_marked:
            return at("Cleanup", f"deleting PVC {op.pvc}"), "delete-pvc", False
        return at("Done", f"{op.pod} removed; PVC {op.pvc} retained: it carries no mark "
                          f"{mark}"), "none", True
    kept = f"; PVC {op.pvc} retained" if op.pvc and pvc_policy != "Delete" else ""
    return at("Done", f"{op.pod} removed{kept}"), "none", True
