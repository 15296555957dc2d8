"""A resize of a cass-operator ``CassandraDatacenter``, as a state machine. Pure.

cass-operator (k8ssandra/cass-operator, read at v1.22.4) owns the datacenter's StatefulSets,
one per rack, and carries out every node change itself once ``spec.size`` changes: a larger
size scales the racks' StatefulSets up and starts the new nodes; a smaller one
decommissions one node at a time, from the rack with the most nodes
(``pkg/reconciliation/decommission_node.go``: ``DecommissionNodes`` labels the pod
``cassandra.datastax.com/node-state: Decommissioning``, sets the ``ScalingDown`` condition
and ``status.cassandraOperatorProgress: Updating``; ``CheckDecommissioningNodes`` removes the
pod from its StatefulSet and deletes its PVCs once the node has left, and sets
``ScalingDown`` False when none is left). elastore keeps the timing, the stream throttle and
the guards; it never decommissions a node of a datacenter itself.

An operation: ``Resizing`` (``spec.size`` from -> to, compare-and-set) -> ``Following``
(until cass-operator has seen the new generation and reports it done: progress ``Ready``,
the scaling condition not True, and exactly ``to`` pods, all ready, none decommissioning).

Drift: any ``spec.size`` other than the operation's own (``from`` while resizing, ``to``
after) is someone else's change: the ``conflict`` effect, nothing touched. The status is
writable by others, so :func:`check_identity` refuses an operation that is not a step of
this datacenter's size, or a scale-in below max(replicas.min, replicationFactor). A
``Resizing`` scale-in lowers ``spec.size`` only when the runner has found the store fit for
it (cass-operator reports no work, the ring and the space checks pass): else it is the
``reject`` effect, nothing touched (the status is a record, not the truth).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from elastore.actuators.ports import DatacenterFacts
from elastore.errors import ElastoreError
from elastore.stores.operation import (
    OperationState,
    below_floor,
    capped,
    deadline,
    expected_seconds,
    held,
    new_id,
    overdue,
)

Effect = Literal["none", "resize", "conflict", "stuck", "reject"]

#: cass-operator's conditions that mean it is changing the datacenter
#: (apis/cassandra/v1beta1/cassandradatacenter_types.go, DatacenterConditionType)
BUSY_CONDITIONS = ("ScalingUp", "ScalingDown", "Updating", "RollingRestart",
                   "ReplacingNodes", "Decommission", "Stopped", "Resuming", "ResizingVolumes")
#: ``status.cassandraOperatorProgress`` when cass-operator has nothing left to do
PROGRESS_READY = "Ready"


def busy(facts: DatacenterFacts) -> str | None:
    """What cass-operator reports it is doing, every sign of it (None: nothing; the
    datacenter may be resized). ``status.observedGeneration`` is set only at the end of a
    whole reconcile (pkg/reconciliation/constructor.go, setDatacenterStatus), so a spec
    change is done only once it has caught up."""
    why = []
    on = [c for c in BUSY_CONDITIONS if facts.conditions.get(c) == "True"]
    if on:
        why.append(f"cass-operator reports {', '.join(on)}")
    if facts.decommissioning:
        why.append(f"{', '.join(facts.decommissioning)} being decommissioned")
    if facts.progress != PROGRESS_READY:
        why.append(f"status.cassandraOperatorProgress is {facts.progress or 'absent'!r}")
    if facts.observed_generation < facts.generation:
        why.append(f"cass-operator has not yet reconciled generation {facts.generation} "
                   f"(status.observedGeneration {facts.observed_generation})")
    if facts.conditions.get("Ready") != "True":
        why.append("its Ready condition is not True")
    if len(facts.pods) != facts.size or facts.ready_pods != facts.size:
        why.append(f"{facts.ready_pods} of {facts.size} pods ready ({len(facts.pods)} exist)")
    return "; ".join(why) if why else None


def step_sizes(current: int, racks: int) -> tuple[int, int]:
    """The next rack-balanced sizes (up, down) from ``current``: multiples of the rack count.
    cass-operator spreads ``size`` over the racks as evenly as it can (``SplitRacks``); a
    size that is not a multiple leaves some racks a node short, and with a replica per rack
    their nodes each hold more data. A size off the grid (set by hand) steps onto it."""
    r = max(1, racks)
    return (current // r + 1) * r, ((current - 1) // r) * r


def step_down_held(target: int, current: int, down: int,
                   recent: tuple[tuple[float, int], ...], now_s: float, window_s: float
                   ) -> str | None:
    """Why a datacenter does not step down to ``down`` now (None: it may). The planner
    plans one node at a time: it wants a scale-in now (``target`` < ``current``), and the
    forecast's own need, the highest raw recommendation of the stabilization window (the
    HPA's rule, :mod:`elastore.planner.stabilization`), fits in ``down``: the whole step
    is then as safe as the planner's first node."""
    from elastore.planner.stabilization import within

    if target >= current:
        return None if target == current else "the plan wants more"
    seen = [n for _, n in within(recent, now_s, max(window_s, 0.0))]
    if not seen:
        return "no recommendation of the stabilization window is known yet"
    need = max(seen)
    if need > down:
        return (f"the plan wants {target} replicas now; the forecast needs {need} over the "
                f"stabilization window, above the next rack-balanced size {down}")
    return None


def expected_step_seconds(kind: str, current: int, to: int, data_bytes: float | None,
                          mibps: float, overhead_s: float) -> float:
    """The migration-time model for a step of several nodes: cass-operator (and Cassandra's
    own rule against concurrent range movements) moves them one at a time, each node's
    share at the rate in force."""
    total = 0.0
    if kind == "ScaleOut":
        for n in range(current, to):
            total += expected_seconds("ScaleOut", n, data_bytes, mibps, overhead_s)
    else:
        for n in range(current, to, -1):
            total += expected_seconds("ScaleIn", n, data_bytes, mibps, overhead_s)
    return total


def subject(dc: str) -> str:
    """What a datacenter operation names where a node step names its pod."""
    return f"CassandraDatacenter/{dc}"


def start(kind: Literal["ScaleOut", "ScaleIn"], dc: str, current: int, to: int, now_s: float,
          expected_s: float) -> OperationState:
    if (kind == "ScaleOut") != (to > current) or to < 1:
        raise ElastoreError(f"{kind} from {current} to {to} is not one")
    return OperationState(kind, current, to, subject(dc), "Resizing", now_s, now_s,
                          now_s + capped(expected_s), message="started",
                          deadline_s=deadline(now_s, expected_s), id=new_id())


def check_identity(op: OperationState, dc: str, racks: int, floor: int = 1) -> None:
    """Refuse an operation read back from the status that is not a rack-balanced step of
    this datacenter, or that goes below ``floor`` (a status patched by someone else)."""
    if op.kind not in ("ScaleOut", "ScaleIn"):
        raise ElastoreError(f"operation of unknown kind {op.kind!r}")
    below_floor(op, floor)
    if op.pod != subject(dc):
        raise ElastoreError(f"the operation names {op.pod!r}, not {subject(dc)!r}")
    up, down = step_sizes(op.from_replicas, racks)
    want = up if op.kind == "ScaleOut" else down
    if op.to_replicas != want or op.from_replicas < 1:
        raise ElastoreError(f"operation {op.kind} {op.from_replicas} -> {op.to_replicas} is "
                            f"not this datacenter's step ({racks} rack(s): {want})")
    if op.phase not in ("Resizing", "Following", "Stuck"):
        raise ElastoreError(f"operation in unknown phase {op.phase!r}")


def advance(op: OperationState, facts: DatacenterFacts, now_s: float,
            unfit: str | None = None) -> tuple[OperationState, Effect, bool]:
    """The next state, the effect to carry out now, and whether the operation is done.
    ``unfit``: why the store is not fit for a scale-in's resize now (cass-operator busy,
    the ring or the space checks), as the runner found it; None: fit, or not looked at."""
    def at(phase: str, message: str, **kw: Any) -> OperationState:
        return replace(op, phase=phase, message=message, updated_s=now_s, **kw)

    allowed = (op.from_replicas, op.to_replicas) if op.phase == "Resizing" else \
        (op.to_replicas,)
    first = held(op, facts.size, now_s,
                 f"CassandraDatacenter {facts.name} has size {facts.size}", allowed) or \
        overdue(op, now_s, "cass-operator's status and events say why; no further step")
    if first is not None:
        return first
    if op.phase == "Resizing":
        if facts.size == op.from_replicas:
            if op.kind == "ScaleIn" and unfit is not None:
                return at("Resizing", f"spec.size is not lowered to {op.to_replicas}: "
                                      f"{unfit}"), "reject", False
            return at("Resizing", f"setting spec.size to {op.to_replicas}"), "resize", False
        return at("Following", f"spec.size is {op.to_replicas}; cass-operator is "
                               f"{'adding' if op.kind == 'ScaleOut' else 'decommissioning'} "
                               "nodes"), "none", False
    if op.phase == "Following":
        busy_ = busy(facts)
        if busy_ is None:
            return at("Done", f"cass-operator reports {op.to_replicas} nodes ready"), \
                "none", True
        return at("Following", f"waiting for cass-operator: {busy_}"), "none", False
    raise ElastoreError(f"operation {op.kind} in unknown phase {op.phase!r}")
