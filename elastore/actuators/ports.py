"""What the operator asks of a cluster, as a typed seam (:class:`ClusterPort`).

Two implementations: :class:`elastore.actuators.k8s.KubeActuator` (the Kubernetes API) and
:class:`elastore.sim.kube.SimulatedKube` (the simulator's cluster, which also serves the
operator's tests without an API server). The operator's runner sees only this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from elastore.actuators.nodetool import Ring
from elastore.errors import ElastoreError
from elastore.units import GIB

#: the label a StatefulSet carries to let an Enforce policy act on it
MANAGED_LABEL = "elastore.io/managed"
#: the annotation the operator puts on a PVC when it saw that PVC's node leave the ring:
#: the only evidence a PVC deletion trusts (the policy's status can be patched by others);
#: its value names the operation and the PVC's UID (elastore.stores.operation.pvc_mark)
LEFT_RING_ANNOTATION = "elastore.io/left-ring"


class DriftError(ElastoreError):
    """The StatefulSet's size is not what the operation expected: someone else changed it."""


@dataclass(frozen=True)
class StatefulSetFacts:
    name: str
    spec_replicas: int
    ready_replicas: int
    replicas: int  # pods that exist
    pvc_template: str | None  # the first volumeClaimTemplate's name
    volume_bytes: float | None  # its requested size
    managed: bool = False  # labelled MANAGED_LABEL=true: it opts in to Enforce
    owner: str | None = None  # "Kind/name" of its controller owner (ownerReferences)


@dataclass(frozen=True)
class VolumeFacts:
    """One PVC as read now: what is asked of its volume, what it has, and whether it may
    grow. Sizes in bytes."""

    name: str
    uid: str
    requested_bytes: float | None  # spec.resources.requests.storage
    capacity_bytes: float | None  # status.capacity.storage (None while unbound)
    phase: str  # status.phase: Pending, Bound, Lost ("" when absent)
    storage_class: str | None  # its StorageClass's name (None: it names none)
    #: the StorageClass's allowVolumeExpansion; None if the class is unnamed or unreadable
    expandable: bool | None
    #: a condition Resizing or FileSystemResizePending is True, or requested > capacity
    resizing: bool


def _size(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.4g} GiB ({n_bytes:.0f} bytes)"


def expansion_wanted(where: str, requested_bytes: float | None, to_bytes: float) -> bool:
    """Whether growing ``where`` (``PVC ns/name``) from ``requested_bytes`` to ``to_bytes``
    is a change: False when equal (nothing to do). A shrink, a size that is not a positive
    number, or a PVC without a request is an :class:`ElastoreError`: a volume is never
    shrunk. Pure; both ports ask it before any write."""
    if not to_bytes > 0 or to_bytes == float("inf"):
        raise ElastoreError(f"{where}: cannot expand to {to_bytes!r} bytes")
    if requested_bytes is None:
        raise ElastoreError(f"{where} requests no storage: nothing to expand")
    if to_bytes < requested_bytes:
        raise ElastoreError(f"{where} requests {_size(requested_bytes)}: not shrinking it to "
                            f"{_size(to_bytes)} (a volume is only ever grown)")
    return to_bytes > requested_bytes


#: the CassandraDatacenter API of cass-operator (group, version, plural)
CASSDC_API = ("cassandra.datastax.com", "v1beta1", "cassandradatacenters")
#: the pod label cass-operator puts on a node it is decommissioning, and its value
#: (k8ssandra/cass-operator apis/cassandra/v1beta1: CassNodeState; pkg/reconciliation)
NODE_STATE_LABEL = "cassandra.datastax.com/node-state"
DECOMMISSIONING = "Decommissioning"
#: the label k8ssandra-operator puts on the CassandraDatacenters of a K8ssandraCluster
#: (k8ssandra/k8ssandra-operator apis/k8ssandra/v1alpha1/constants.go)
K8SSANDRA_CLUSTER_LABEL = "k8ssandra.io/cluster-name"


@dataclass(frozen=True)
class DatacenterFacts:
    """A CassandraDatacenter and its pods as read this tick."""

    name: str
    size: int  # spec.size
    racks: tuple[str, ...]  # spec.racks' names (cass-operator's default: one, "default")
    generation: int
    observed_generation: int  # status.observedGeneration (0: never reported)
    progress: str  # status.cassandraOperatorProgress ("" when absent)
    #: condition type -> status ("True", "False", "Unknown")
    conditions: dict[str, str] = field(default_factory=dict)
    pods: tuple[str, ...] = ()  # the datacenter's pods (its racks' StatefulSets')
    ready_pods: int = 0
    decommissioning: tuple[str, ...] = ()  # pods labelled node-state=Decommissioning
    volume_bytes: float | None = None  # each node's data volume request
    managed: bool = False  # labelled elastore.io/managed=true
    owner: str | None = None  # what owns it: a controller ownerReference or K8ssandraCluster


@runtime_checkable
class DatacenterPort(Protocol):
    """The reads and the one write of a cass-operator CassandraDatacenter."""

    def datacenter(self, ns: str, name: str) -> DatacenterFacts | None:
        """The datacenter, its racks and pods, and what cass-operator reports; None if it
        does not exist (or the CRD is not installed)."""

    def resize_datacenter(self, ns: str, name: str, size: int, expect: int) -> None:
        """Set ``spec.size``, only if it is ``expect`` now (compare-and-set on the
        resourceVersion): else :class:`DriftError`."""

    def datacenter_contenders(self, ns: str, name: str, policy: str) -> list[str]:
        """ElasticPolicies in Enforce other than ``policy`` on the same datacenter."""


class ClusterPort(Protocol):
    """The reads and effects of one storage StatefulSet, its pods and their volumes, whatever
    the store. Every method names what failed with an :class:`~elastore.errors.ElastoreError`;
    none decides anything. A store's own calls are in a port of its own
    (:class:`NodetoolPort`, :class:`DatacenterPort`, :class:`SwiftPort`), which only its
    driver narrows to."""

    def statefulset(self, ns: str, name: str) -> StatefulSetFacts | None:
        """The StatefulSet's replicas and volume template; None if it does not exist."""

    def scale(self, ns: str, name: str, replicas: int, expect: int) -> None:
        """Set ``spec.replicas`` (the scale subresource), only if it is ``expect`` now
        (compare-and-set on the resourceVersion): else :class:`DriftError`."""

    def contenders(self, ns: str, name: str, policy: str) -> list[str]:
        """Whatever else scales this StatefulSet: HorizontalPodAutoscalers, KEDA
        ScaledObjects and ElasticPolicies in Enforce other than ``policy``, as "Kind/name"
        (a policy in Recommend only reads)."""

    def pod(self, ns: str, name: str) -> tuple[bool, bool]:
        """(exists, ready); a pod being deleted exists and is not ready."""

    def pod_identity(self, ns: str, name: str, container: str) -> str | None:
        """``"<uid>/<restartCount of container>"`` while the pod runs and is ready; None if
        it does not exist, is being deleted, or is not Running and ready. A new value means
        a new process in the container: whatever was set in it at run time (the stream
        throttle) is gone."""

    def pvc_exists(self, ns: str, name: str) -> bool: ...

    def mark_pvc(self, ns: str, name: str, value: str) -> None:
        """Annotate the PVC with :data:`LEFT_RING_ANNOTATION` (a PVC already gone is not an
        error)."""

    def pvc_mark(self, ns: str, name: str) -> tuple[str, str | None] | None:
        """The PVC's UID and the value of its :data:`LEFT_RING_ANNOTATION` (None: it
        carries none); None if the PVC does not exist."""

    def unmark_pvc(self, ns: str, name: str) -> None:
        """Remove :data:`LEFT_RING_ANNOTATION` from the PVC (its ordinal is coming back; a
        PVC already gone or unmarked is not an error)."""

    def delete_pvc(self, ns: str, name: str) -> None:
        """Delete a PVC (one already gone is not an error)."""

    def volume(self, ns: str, name: str) -> VolumeFacts | None:
        """The PVC's sizes, phase, StorageClass and whether that class allows expansion;
        None if the PVC does not exist."""

    def expand_volume(self, ns: str, name: str, to_bytes: float) -> None:
        """Grow the PVC's ``spec.resources.requests.storage`` to ``to_bytes`` (whole Gi when
        it divides, else bytes); the volume's own resize is then Kubernetes' (see
        :meth:`volume`'s ``resizing``). Never shrinks: less than the current request is an
        :class:`~elastore.errors.ElastoreError` before any write; equal does nothing. A PVC
        that does not exist, or whose StorageClass does not allow expansion, is an error
        naming it, as is the API server's own refusal."""


@runtime_checkable
class NodetoolPort(Protocol):
    """Cassandra's calls, ``nodetool`` in a pod (``container``, the policy's allowed
    ``nodetool`` command): a node's ring mode and view of the ring, its decommission,
    cleanup, repairs and throttles."""

    def node_mode(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]
                  ) -> str | None:
        """The pod's node's ring mode (``nodetool netstats``); None if it did not answer."""

    def start_decommission(self, ns: str, pod: str, container: str,
                           nodetool: tuple[str, ...]) -> None:
        """Issue ``nodetool decommission`` without waiting for it."""

    def decommission_failure(self, ns: str, pod: str) -> str | None:
        """Why the last decommission issued in this pod failed (its exit code and the tail
        of its output); None while it runs, once it succeeded, or if none was issued."""

    def start_cleanup(self, ns: str, pod: str, container: str,
                      nodetool: tuple[str, ...]) -> None:
        """Issue ``nodetool cleanup`` in the pod without waiting for it."""

    def cleanup_state(self, ns: str, pod: str) -> str | None:
        """The last cleanup this process issued in the pod: "running", "done" or
        "failed: <why>"; None if it issued none."""

    def cleanup_running(self, ns: str, pod: str, container: str,
                        nodetool: tuple[str, ...]) -> bool | None:
        """Whether the node's compactions include a Cleanup; None if unreadable."""

    def repair_running(self, ns: str, pod: str, container: str,
                       nodetool: tuple[str, ...]) -> str | None:
        """What shows a repair running on the node, or None; raises if unreadable."""

    def compaction_throughput(self, ns: str, pod: str, container: str,
                              nodetool: tuple[str, ...]) -> float:
        """The node's compaction throttle, MiB/s (0: unthrottled); raises if unreadable."""

    def set_compaction_throughput(self, ns: str, pod: str, container: str,
                                  nodetool: tuple[str, ...], mibps: float) -> float:
        """Set the node's compaction throttle (0: unthrottled); the MiB/s set."""

    def ring(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> Ring:
        """The cluster as the node in ``pod`` sees it (raises if nodetool fails)."""

    def host_id(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> str:
        """The host ID of the node in ``pod``, as it says itself (raises if nodetool fails)."""

    def set_stream_throughput(self, ns: str, pods: list[str], container: str,
                              nodetool: tuple[str, ...], mibps: float) -> float:
        """Every listed node's outgoing stream throttle; the MiB/s actually set. Tries every
        pod; if any failed, raises naming each one that did (the others are set): the
        operator calls it one pod at a time, to know which."""


@runtime_checkable
class TokenMovePort(Protocol):
    """A single-token Cassandra node's token and its move (issue 38's bounded
    ``nodetool move``), ``nodetool`` in a pod as :class:`NodetoolPort`'s calls."""

    def node_tokens(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]
                    ) -> tuple[int, ...]:
        """The node's own tokens, as it says itself (``nodetool info -T``); raises if
        nodetool fails."""

    def start_move(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...],
                   token: int) -> None:
        """Issue ``nodetool move -- <token>`` without waiting for it (it streams for
        seconds to hours; the loop follows it in the node's tokens and mode)."""

    def move_failure(self, ns: str, pod: str) -> str | None:
        """Why the last move issued in this pod failed (its exit code and the tail of its
        output); None while it runs, once it succeeded, or if none was issued."""


#: the label of the ConfigMap the operator writes a new pod's tokens to (issue 38's split at a
#: scale-out): it writes only into a ConfigMap of that name that carries it, or creates one
TOKENS_LABEL = "elastore.io/tokens"


def tokens_configmap(statefulset: str) -> str:
    """The ConfigMap a StatefulSet's pods read their ``initial_token`` from: one key per
    pod name (docs/operator.md says what the pod template must do with it)."""
    return f"{statefulset}-elastore-tokens"


@runtime_checkable
class TokenConfigPort(Protocol):
    """The per-pod token ConfigMap (:func:`tokens_configmap`)."""

    def pod_tokens_config(self, ns: str, name: str) -> tuple[dict[str, str], bool] | None:
        """Its data and whether it carries :data:`TOKENS_LABEL`; None if it does not exist."""

    def set_pod_token(self, ns: str, name: str, pod: str, value: str) -> None:
        """Set one pod's key, creating the ConfigMap (labelled) if absent; raises if a
        ConfigMap of that name exists without the label (someone else's: untouched)."""


#: the label a ConfigMap must carry for the operator to change the Swift rings in it: a
#: policy's author cannot point the operator at any ConfigMap of the namespace
SWIFT_RINGS_LABEL = "elastore.io/swift-rings"


@runtime_checkable
class SwiftPort(Protocol):
    """What a Swift target needs besides :class:`ClusterPort`: the pods' IPs (a device's
    address in the rings), commands in the pods (their ring files and devices), and the
    ConfigMap the pods read their rings from."""

    def pod_ip(self, ns: str, name: str) -> str | None: ...

    def exec(self, ns: str, pod: str, container: str, argv: list[str],
             timeout_s: float = 120.0) -> Any: ...

    def read_files(self, ns: str, name: str) -> tuple[str, dict[str, bytes], dict[str, str]]:
        """(resourceVersion, files, labels) of a ConfigMap."""

    def write_files(self, ns: str, name: str, resource_version: str,
                    files: dict[str, bytes]) -> str: ...
