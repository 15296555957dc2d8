"""The seam between the operator and a store: :class:`StoreDriver`, what one driver gets for a
tick (:class:`StoreCall`) and what it hands back.

A driver is to elastore what a cloud provider is to the cluster-autoscaler
(``cloudprovider.CloudProvider`` / ``NodeGroup``): the one place that knows how a store
grows, shrinks and proves a step safe. The runner (:mod:`elastore.operator.runner`) reads the
policy, admits a step and records what happened; everything it does to a store goes through
a driver, and it never asks which store it is talking to.

What a driver gets is plain data (the spec, the target as read this tick, the status as read,
the clock) and four narrow seams: the cluster port, ``event`` (an Event on the policy),
``cond`` (a condition in the status being written) and ``save`` (the operation written to the
status *now*, before the effect it announces). The status is a record, not the truth: a driver
takes an operation's phase from it, but sees every irreversible effect's precondition in the
store itself (:mod:`elastore.stores.steps` carries the shared part of a step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from elastore.actuators.ports import ClusterPort, DatacenterFacts, StatefulSetFacts
from elastore.errors import ElastoreError
from elastore.operator.spec import PolicySpec
from elastore.planner.stabilization import Recommendations
from elastore.stores.operation import OperationState

Kind = Literal["ScaleOut", "ScaleIn"]
#: (reason, message) of a refusal or a hold, as the status's conditions say it
Why = tuple[str, str]


@dataclass(frozen=True)
class Target:
    """The target as read this tick. ``sizes`` is what every store has (replicas, ready,
    volume, opt-in, owner); ``datacenter`` is cass-operator's view where the target is a
    CassandraDatacenter; ``status`` is what the driver adds to the policy's status."""

    sizes: StatefulSetFacts
    datacenter: DatacenterFacts | None = None
    status: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Allowed:
    """What this operator process lets a policy run in a pod (its command line, the chart):
    a policy's author names a command, the operator's owner decides which ones go."""

    nodetools: tuple[tuple[str, ...], ...]
    exec_prefixes: tuple[tuple[str, ...], ...] = ((),)
    #: the directories a policy's paths in the pods (Swift's ``ringDir``, ``devicesDir``)
    #: must lie under: a policy's author must not choose what the operator reads there
    pod_paths: tuple[str, ...] = ("/etc/swift", "/srv/node")


def under(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies below one (no ``..``, no ``//``)."""
    import posixpath

    if posixpath.normpath(path) != path.rstrip("/") or "//" in path:
        return False
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@dataclass
class StoreCall:
    """One tick's worth of a driver's inputs, and its ways to say and record things."""

    namespace: str
    policy: str
    spec: PolicySpec
    port: ClusterPort
    target: Target
    #: the policy's status as read (a record: never the proof of an effect's precondition)
    status: Mapping[str, Any]
    now: float
    clock: Callable[[], float]
    #: an Event on the policy: (reason, message, warning)
    event: Callable[[str, str, bool], None]
    #: a condition in the status being written: (type, status, reason, message)
    cond: Callable[[str, bool, str, str], None]
    #: write the operation (None: no operation) to the status now, before its effect
    save: Callable[[OperationState | None], None]
    #: the status patch being written this tick (a driver adds its own keys)
    out: dict[str, Any]
    #: the stream throttle decided this period (MiB/s), if any
    decided_mibps: float | None = None
    #: whether the size there is misses the SLO at the forecast (None: not judged)
    slo_at_risk: bool | None = None
    #: a scale-in's target was found fit (ring and space) by this tick's admission
    ring_checked: bool = False
    #: the last period's skew view (``elastore.operator.skew.SkewView``; None: mode Off or
    #: no period yet), for Auto's token choice at a scale-out
    skew_view: Any = None

    @property
    def sts(self) -> StatefulSetFacts:
        return self.target.sizes

    def data_bytes(self) -> float | None:
        """The store's data (bytes) as this tick observed it, else as the status last
        recorded it; None: never observed. A step's deadline is timed from it: read from the
        status alone, the first period after a start has none, and a scale-in given only
        the node overhead is past its deadline (Stuck) long before its data has moved."""
        for rec in (self.out.get("observed"), self.status.get("observed")):
            data = (rec or {}).get("dataBytes")
            if data is not None:
                return float(data)
        return None

    def migration_mibps(self) -> float:
        """The migration rate in force (MiB/s): the status's, else the policy's floor."""
        rate = self.out.get("migrationMiBps", self.status.get("migrationMiBps"))
        return float(rate) if rate is not None else self.spec.min_migration_mibps


class EffectFailed(ElastoreError):
    """An effect that failed and is retried next tick (said with ``reason``); anything else
    an effect raises goes up to kopf's backoff."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class FactsUnreadable(ElastoreError):
    """The store could not be read for an operation's facts (the API server, an exec): the
    tick fails and is retried (kopf's backoff); the operation is not called Stuck for it."""


@dataclass(frozen=True)
class Begun:
    """A step just begun: its operation, and what the Event says of it (``what``, then the
    runner's "why now", then ``after``); the condition says ``condition``, else the same."""

    operation: OperationState
    what: str
    condition: str | None = None
    after: str = ""

    def said(self, why: str) -> str:
        return f"{self.what}, {why}" + (f"; {self.after}" if self.after else "")


@dataclass(frozen=True)
class Advanced:
    """One step of an operation as a driver's pure machine decided it."""

    operation: OperationState
    effect: str  # the machine's effect: "none", "stuck", "conflict", "reject" or the store's
    done: bool


class StoreDriver(Protocol):
    """One store (and one kind of target; :mod:`elastore.stores.registry` says which). The
    runner makes one per policy, so what a driver remembers between ticks (the pods it
    throttled, what a partition weighs) is that policy's alone."""

    def refused(self, spec: PolicySpec, port: ClusterPort, allowed: Allowed) -> Why | None:
        """Why this operator cannot work the policy's target at all (a port without the
        store's calls, a command the operator does not allow); None: it can."""

    def read(self, port: ClusterPort, namespace: str, spec: PolicySpec) -> Target | None:
        """The target as it is; None if it does not exist."""

    def missing(self, namespace: str, spec: PolicySpec) -> str:
        """What the ``TargetNotFound`` condition says."""

    def contenders(self, port: ClusterPort, namespace: str, target: Target,
                   policy: str) -> list[str]:
        """Whatever else scales the target, as "Kind/name"."""

    def pods(self, spec: PolicySpec, target: Target, to_replicas: int | None) -> list[str]:
        """The target's pods now: up to the larger of its size and an operation's ``to``."""

    def step_to(self, call: StoreCall, wanted: int, user_named: bool,
                recent_desired: Recommendations) -> int | Why | None:
        """Where a step toward ``wanted`` goes: None for one node, a size (a rack-balanced
        step), or why no step is taken yet."""

    def holds(self, call: StoreCall, kind: Kind, step_to: int | None) -> Why | None:
        """A store's own reason to start no step now (a repair, the store's operator busy);
        they are judged after the policy's own gates."""

    def refusal(self, call: StoreCall, kind: Kind, step_to: int | None) -> str | None:
        """Why the step may not start, seen in the store (bounds, floor, ring, space)."""

    def begin(self, call: StoreCall, kind: Kind, step_to: int | None) -> Begun:
        """The operation of a new step, not yet carried out."""

    def check_identity(self, op: OperationState, call: StoreCall, floor: int) -> None:
        """Raise if the operation in the status is not a step this policy could have begun
        on this target (its pod, PVC, size and floor)."""

    def advance(self, call: StoreCall, op: OperationState) -> Advanced:
        """Read the store's facts for the operation and decide its next state (the pure
        machine). The machine's :class:`ElastoreError` makes the operation Stuck; a store
        that could not be read raises :class:`FactsUnreadable` (the tick is retried)."""

    def before_effect(self, call: StoreCall, op: OperationState, new: Advanced) -> str | None:
        """Why the effect may not be carried out after all, seen in the store just before
        it (a decommission's ring check); None: go."""

    def apply(self, call: StoreCall, op: OperationState, new: Advanced) -> OperationState:
        """Carry out the effect (the new state is already in the status); returns the state
        as it now is. Raises :class:`~elastore.actuators.ports.DriftError` when the target
        changed under it, :class:`EffectFailed` for a failure retried next tick."""

    def stopped(self, call: StoreCall, op: OperationState) -> None:
        """The operation stops being followed (stuck, superseded, aborted): undo what it set
        that must not outlive it (a compaction throttle)."""

    def supersedable(self, op: OperationState) -> bool:
        """Whether a scale-out that falls due may take over from this operation."""

    def abort_left(self, call: StoreCall, op: OperationState) -> str:
        """What an aborted operation leaves behind, for the user's Event."""

    def data_bytes(self, port: ClusterPort, namespace: str, spec: PolicySpec,
                   replicas: int) -> float | None:
        """The bytes the store holds, read from the store where its metrics lack them
        (None: the metrics have them). Raises ``MetricsError`` when it cannot be read."""

    def keep_throttles(self, call: StoreCall, period: bool) -> None:
        """Keep the store's migration throttle in force on its pods (once a period for every
        pod; between periods only the pods without it)."""


def floor(spec: PolicySpec) -> int:
    """No step goes below this: max(replicas.min, replicationFactor)."""
    return max(spec.min_replicas, spec.target.replication_factor)
