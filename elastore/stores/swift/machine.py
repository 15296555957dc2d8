"""A Swift node step as a state machine. Pure: :func:`advance` reads :class:`SwiftFacts` and
returns the next state and at most one effect, like :mod:`elastore.stores.cassandra.machine`
for Cassandra; the two share :mod:`elastore.stores.operation` (the
:class:`~elastore.stores.operation.OperationState`, the identity checks, the drift rule and
the deadline).

Swift has no join or decommission of its own: a node's share is its device's weight in the
rings, and the replicators move data after every ring change. The rings live in a
ConfigMap that every Swift pod mounts (``spec.target.swift.ringConfigMap``: the pods read
their rings from it, the operator writes it); a change reaches a pod when the kubelet
refreshes the volume, and the operator checks each pod's ring files (md5) before it counts
on the change.

Scale-out: ``Scaling`` (replicas + 1, until the pod is ready with an IP) -> ``Joining``
(its device added to every ring and a rebalance: effect ``ring-add``; then until every pod
has the new rings and nothing is out of place on any device).

Scale-in: ``Draining`` (its device's weight 0 and a rebalance: ``ring-drain``; until every
pod has the rings, nothing is out of place and the ring assigns it no partition) ->
``Removing`` (its device out of the rings: ``ring-remove``; until every pod has them) ->
``Scaling`` (replicas - 1, until the pod is gone) -> ``Cleanup`` (the PVC per policy).

The status is a record, not the truth: a device is removed from the rings only while the
rings give it weight 0 and no partition, and the replicas are lowered only when the rings
every pod has mounted no longer hold it; a phase the rings contradict is the ``reject``
effect (the runner: ``Conflict``/``StatusRejected``, nothing touched).

Every ring change moves at most one replica of a partition (the rings' ``min_part_hours``
is declared passed once per change, and a change is made only when the previous one has
finished moving): the other replicas keep serving it while it moves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from elastore.actuators.swiftring import Misplaced
from elastore.errors import ElastoreError
from elastore.stores.operation import OperationState, held, overdue, scale_in_tail

Effect = Literal["none", "scale", "ring-add", "ring-drain", "ring-remove", "ring-readdress",
                 "delete-pvc", "conflict", "stuck", "reject"]
#: the phases in which the operation's pod has a device in the rings
IN_RINGS = ("Joining", "Draining", "Removing")
#: the phases in which a scale-in has not lowered the replicas yet
BEFORE_SCALING = ("Draining", "Removing")


@dataclass(frozen=True)
class SwiftFacts:
    """What the loop observed this tick for a Swift node step."""

    spec_replicas: int
    pod_exists: bool  # the operation's pod
    pod_ready: bool
    pod_ip: str | None
    #: the pod's device in the rings (the ConfigMap's object builder): weight and
    #: partitions; None when it is not in them
    weight: float | None
    partitions: int | None
    #: pods whose ring files are not yet the ConfigMap's; None: not known (said in ``why``)
    lagging: tuple[str, ...] | None
    #: what is out of place on the pods' devices against the ConfigMap's rings; None: not
    #: known (``why``)
    progress: dict[str, Misplaced] | None
    why: str = ""
    pvc_exists: bool | None = None
    pvc_marked: bool = False
    #: the address the pod's device has in the rings when it is not the pod's (the pod came
    #: back with a new IP; the device is found by the pod's name in its ``meta``)
    device_ip: str | None = None
    #: addresses of devices in the rings that no pod of the target has and no pod's name
    #: marks: a device the operator cannot tell is not this pod's
    unknown_ips: tuple[str, ...] = ()


def _progress_text(progress: dict[str, Misplaced]) -> str:
    parts = []
    for kind, m in progress.items():
        if not m.done:
            parts.append(f"{kind}: {m.handoffs} partition(s) on handoffs "
                         f"({m.handoff_bytes / 2**20:.1f} MiB), {m.missing} missing on "
                         "their primaries")
    return "; ".join(parts)


def _settled(facts: SwiftFacts) -> str | None:
    """Why the last ring change is not finished (None: every pod has it and nothing is out
    of place)."""
    if facts.lagging is None:
        return f"the pods' rings are not known: {facts.why}"
    if facts.lagging:
        return (f"waiting for the new rings to reach {', '.join(facts.lagging)} (the kubelet "
                "refreshes a ConfigMap volume within about a minute)")
    if facts.progress is None:
        return f"what is out of place is not known: {facts.why}"
    if not all(m.done for m in facts.progress.values()):
        return f"replicating: {_progress_text(facts.progress)}"
    return None


def advance(op: OperationState, facts: SwiftFacts, now_s: float, pvc_policy: str = "Retain"
            ) -> tuple[OperationState, Effect, bool]:
    """The next state, the effect to carry out now, and whether the operation is done."""
    def at(phase: str, message: str, **kw: Any) -> OperationState:
        return replace(op, phase=phase, message=message, updated_s=now_s, **kw)

    first = held(op, facts.spec_replicas, now_s,
                 f"the StatefulSet has {facts.spec_replicas} replicas") or overdue(op, now_s)
    if first is not None:
        return first
    if op.phase in IN_RINGS and facts.device_ip is not None and facts.pod_ip:
        # one device per pod: it moves with the pod, with its weight and partitions
        return at(op.phase, f"{op.pod} came back at {facts.pod_ip}; its device (at "
                            f"{facts.device_ip}) is readdressed, not added again"), \
            "ring-readdress", False
    if op.kind == "ScaleOut":
        if op.phase == "Scaling":
            if facts.spec_replicas < op.to_replicas:
                return at("Scaling", f"setting replicas to {op.to_replicas}"), "scale", False
            if facts.pod_exists and facts.pod_ready and facts.pod_ip:
                return at("Joining", f"{op.pod} is ready at {facts.pod_ip}; adding its "
                                     "device to the rings"), "ring-add", False
            return at("Scaling", f"waiting for {op.pod} to be ready"), "none", False
        if op.phase == "Joining":
            if facts.weight is None:
                if not (facts.pod_exists and facts.pod_ip):
                    return at("Joining", f"waiting for {op.pod} (not running) to add its "
                                         "device"), "none", False
                return at("Joining", f"adding {op.pod}'s device to the rings"), "ring-add", \
                    False
            wait = _settled(facts)
            if wait is not None:
                return at("Joining", wait), "none", False
            return at("Done", f"{op.pod} holds its {facts.partitions} partition(s): "
                              "replication finished"), "none", True
    else:
        if op.phase == "Draining":
            if not facts.pod_exists:
                raise ElastoreError(f"{op.pod} disappeared while it was being drained "
                                    "(before its data left it): not lowering replicas blind")
            if facts.weight is not None and facts.weight > 0:
                return at("Draining", f"draining {op.pod}: its device's weight to 0 and a "
                                      "rebalance"), "ring-drain", False
            wait = _settled(facts)
            if wait is not None:
                return at("Draining", wait), "none", False
            if facts.weight is not None and (facts.partitions or 0) > 0:
                # one rebalance moves one replica of a partition: the rest go in another
                return at("Draining", f"{op.pod} still has {facts.partitions} partition(s) "
                                      "assigned; rebalancing again"), "ring-drain", False
            if facts.weight is None and not facts.pod_ip:
                return at("Draining", f"waiting: {op.pod} has no IP (its device cannot be "
                                      "looked up in the rings)"), "none", False
            if facts.weight is None and facts.unknown_ips:
                # its device may be one of these, at an address the pod had before
                return at("Draining", f"{op.pod} at {facts.pod_ip} has no device in the "
                                      "rings, which hold devices at addresses no pod of the "
                                      f"target has ({', '.join(facts.unknown_ips)}): not "
                                      "lowering replicas on a guess"), "none", False
            if facts.weight is None:
                return at("Scaling", f"{op.pod} is out of the rings and nothing is out of "
                                     f"place; lowering replicas to {op.to_replicas}"), \
                    "scale", False
            return at("Removing", f"{op.pod} is drained; removing its device from the "
                                  "rings"), "ring-remove", False
        if op.phase == "Removing":
            if facts.weight is not None and (facts.weight > 0 or (facts.partitions or 0) > 0):
                return at("Removing", f"the status says {op.pod} is drained; its device has "
                                      f"weight {facts.weight:g} and {facts.partitions or 0} "
                                      "partition(s) in the rings"), "reject", False
            if facts.weight is not None:
                return at("Removing", f"removing {op.pod}'s device from the rings"), \
                    "ring-remove", False
            if not facts.pod_ip:
                return at("Removing", f"waiting: {op.pod} has no IP (its device cannot be "
                                      "looked up in the rings)"), "none", False
            if facts.lagging is None:
                return at("Removing", f"the pods' rings are not known: {facts.why}"), \
                    "none", False
            if facts.lagging:
                return at("Removing", "waiting for the new rings to reach "
                                      f"{', '.join(facts.lagging)}"), "none", False
            return at("Scaling", f"{op.pod} is out of the rings; lowering replicas to "
                                 f"{op.to_replicas}"), "scale", False
        if op.phase == "Scaling" and facts.spec_replicas > op.to_replicas:
            # the status says the device is out of the rings; the rings must say so too
            if facts.weight is not None:
                return at("Scaling", f"the status says {op.pod} is out of the rings; its "
                                     f"device is in them (weight {facts.weight:g}, "
                                     f"{facts.partitions or 0} partition(s))"), \
                        "reject", False
            if not facts.pod_ip or facts.lagging is None or facts.lagging:
                why = f"{op.pod} has no IP" if not facts.pod_ip else \
                        f"the pods' rings are not known: {facts.why}" if facts.lagging is None \
                        else f"{', '.join(facts.lagging)} do not have the current rings yet"
                return at("Scaling", f"waiting before lowering replicas: {why}"), \
                        "none", False
            return at("Scaling", f"lowering replicas to {op.to_replicas}"), "scale", False
        if op.phase in ("Scaling", "Cleanup"):
            return scale_in_tail(op, now_s, facts.pod_exists, pvc_policy, facts.pvc_exists,
                                 facts.pvc_marked, "that its data left it")
    raise ElastoreError(f"Swift operation {op.kind} in unknown phase {op.phase!r}")


def start_phase(kind: str) -> str:
    """The first phase of a Swift node step."""
    return "Scaling" if kind == "ScaleOut" else "Draining"
