"""The simulated cluster behind the operator's seams, so the operator's own runner
(:class:`elastore.operator.runner.Runner`) can run without an API server: in the pure
operator tests, and in the simulator as the ``operator`` controller.

* :class:`SimulatedKube` is a :class:`~elastore.actuators.ports.ClusterPort` over the
  simulator's :class:`~elastore.sim.engine.Cluster`: a StatefulSet whose pod ``<name>-k`` is
  node k. Scaling out adds a pod that boots (not ready, its node not answering), then
  joins (ready, JOINING, streaming its share) and serves (NORMAL). ``nodetool
  decommission`` of the highest node makes it stream its data away (LEAVING) and leave the
  ring (DECOMMISSIONED); its pod goes when the replicas are lowered. Lowering the replicas
  under a node that still holds data is recorded in :attr:`SimulatedKube.violations` (on a
  real cluster: lost replicas).
* :class:`TraceMetrics` is a :class:`~elastore.operator.metrics.MetricsSource` answering from
  the replayed load.
* :class:`MemoryPolicies` is a :class:`~elastore.operator.policyapi.PolicyStore` holding one
  ElasticPolicy in memory, with the API server's merge-patch semantics for the status.

Time is the caller's: :meth:`SimulatedKube.advance` moves the cluster ``dt`` seconds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.actuators.nodetool import Replication, Ring, RingNode, stream_setting
from elastore.actuators.ports import DriftError, StatefulSetFacts, VolumeFacts, expansion_wanted
from elastore.errors import ElastoreError, MetricsError, StatusConflict
from elastore.models.storage import DEFAULT_CLEANUP_MIBPS
from elastore.operator.metrics import DiskReading, NodeReading, Snapshot, history_end
from elastore.sim.engine import Cluster
from elastore.units import MIB

FloatArray = npt.NDArray[np.float64]


class SimulatedKube:
    """One StatefulSet ``namespace/name`` over a simulated :class:`Cluster`."""

    def __init__(self, cluster: Cluster, namespace: str, name: str, *,
                 pvc_template: str | None = "data", volume_bytes: float | None = None,
                 stream_mibps: float = 24.0) -> None:
        self.cluster = cluster
        self.namespace, self.name = namespace, name
        self.spec_replicas = cluster.serving
        self.pvc_template = pvc_template
        self.volume_bytes = volume_bytes
        self.managed = True  # the simulated target opts in to Enforce
        self.owner: str | None = None
        self.others: list[str] = []  # other scalers of it ("Kind/name"), for tests
        #: PVCs annotated as their node having left the ring: name -> the annotation's value
        self.marked: dict[str, str] = {}
        self.refuse_decommission: str | None = None  # tests: the store refuses, saying this
        self.failures: dict[str, str] = {}
        self.down: set[int] = set()  # tests: nodes nodetool status shows DN
        self.keyspaces: dict[str, int] = {"ks": 3}  # name -> replication factor
        self.stream_mibps = stream_mibps  # the stream throttle the simulated cluster runs at
        self.default_stream_mibps = stream_mibps  # a node's throttle until one is set
        self.pod_stream: dict[int, float] = {}  # each node's throttle as set (absent: default)
        self.throttle_fails: set[str] = set()  # tests: pods whose setstreamthroughput fails
        self.uids = {k: k for k in range(self.spec_replicas)}  # each pod's incarnation
        self.restarts: dict[int, int] = {}  # each pod's container restartCount
        self._next_uid = self.spec_replicas
        self.decommissioned: set[int] = set()  # nodes that left the ring; their pod remains
        self.pvcs: set[str] = set()
        self.pvc_uids: dict[str, str] = {}  # each PVC's UID (a PVC made again gets a new one)
        self._pvc_serial = 0
        for k in range(self.spec_replicas):
            self._new_pvc(k)
        self._leaving: int | None = None  # the node a decommission was issued for
        self.now_s = 0.0
        self.calls: list[tuple[float, str]] = []  # every effect asked for, in order
        self.violations: list[str] = []
        #: cleanup: seconds one node's takes (None: its bytes at the compaction throttle set
        #: on its pod, as the operator sets it, else Cassandra's default 64 MiB/s); tests:
        #: pods whose cleanup fails, repairs shown
        self.cleanup_seconds: float | None = None
        self.cleanup_took: dict[str, float] = {}  # pod -> the seconds its cleanup takes
        self.cleaning: dict[str, int] = {}  # pod -> its node, while its bytes await the end
        self.cleanup_fails: set[str] = set()
        self.cleanups: dict[str, float] = {}  # pod -> when its cleanup was issued
        self.forgotten: set[str] = set()  # tests: cleanups issued by a process now gone
        self.repairs: dict[str, str] = {}  # pod -> what shows a repair on it
        self.compaction_mibps: dict[str, float] = {}  # each pod's throttle as set
        #: the PVCs' StorageClass and whether it allows expansion (tests: False refuses)
        self.storage_class: str | None = "standard"
        self.expandable: bool | None = True
        #: each PVC's request and capacity in bytes, by its UID, once expanded (absent: the
        #: template's ``volume_bytes``; a PVC made again starts from the template); the
        #: simulated volume grows at once: a test sets a capacity behind to see a resize
        self.pvc_requests: dict[str, float] = {}
        self.pvc_capacity: dict[str, float] = {}

    def _pvc(self, k: int) -> str | None:
        return f"{self.pvc_template}-{self.name}-{k}" if self.pvc_template else None

    def _new_pvc(self, k: int) -> None:
        """The StatefulSet controller creates pod k's PVC, unless it is there (retained)."""
        pvc = self._pvc(k)
        if pvc is not None and pvc not in self.pvcs:
            self.pvcs.add(pvc)
            self._pvc_uid(pvc)

    def _pvc_uid(self, name: str) -> str:
        """The PVC's UID; one made by a test (``pvcs.add``) gets its own when first read."""
        if name not in self.pvc_uids:
            self._pvc_serial += 1
            self.pvc_uids[name] = f"pvc-uid-{self._pvc_serial}"
        return self.pvc_uids[name]

    def _ordinal(self, ns: str, pod: str) -> int | None:
        prefix = f"{self.name}-"
        if ns != self.namespace or not pod.startswith(prefix) or \
                not pod[len(prefix):].isdigit():
            return None
        k = int(pod[len(prefix):])
        return k if k < self.spec_replicas else None

    # -- time --------------------------------------------------------------------------------------
    def advance(self, now_s: float, dt: float) -> tuple[str, float, int]:
        """Move the cluster from ``now_s`` by ``dt`` s at the throttle in force; returns
        what :meth:`Cluster.step` does. (The simulator's replay steps the cluster itself and
        sets :attr:`now_s`.)"""
        self.now_s = now_s
        out = self.cluster.step(now_s, dt, self.stream_mibps)
        self.now_s = now_s + dt
        return out

    def _sync(self) -> None:
        """A decommissioned node has left the ring once the cluster no longer counts it."""
        c = self.cluster
        k = self._leaving
        if k is not None and c.serving <= k and (c.op is None or c.op.kind != "remove"):
            self.decommissioned.add(k)
            self._leaving = None

    # -- ClusterPort -------------------------------------------------------------------------------
    def statefulset(self, ns: str, name: str) -> StatefulSetFacts | None:
        self._sync()
        if (ns, name) != (self.namespace, self.name):
            return None
        return StatefulSetFacts(name, self.spec_replicas, self.ready_replicas, self.spec_replicas,
                                self.pvc_template, self.volume_bytes, self.managed, self.owner)

    @property
    def ready_replicas(self) -> int:
        return sum(self._ready(k) for k in range(self.spec_replicas))

    def contenders(self, ns: str, name: str, policy: str) -> list[str]:
        return sorted(self.others)

    def _booting(self, k: int) -> bool:
        """Pod k exists but its node is not up yet (only the next node boots at a time)."""
        c = self.cluster
        if k < c.serving or k in self.decommissioned:
            return False
        op = c.op
        return not (k == c.serving and op is not None and op.kind == "add"
                    and op.boot_left_s <= 0)

    def _ready(self, k: int) -> bool:
        return k not in self.decommissioned and not self._booting(k)

    def scale(self, ns: str, name: str, replicas: int, expect: int) -> None:
        self._sync()
        if (ns, name) != (self.namespace, self.name):
            raise ElastoreError(f"no StatefulSet {ns}/{name}")
        if self.spec_replicas != expect:
            raise DriftError(f"StatefulSet {ns}/{name} has {self.spec_replicas} replicas, not "
                             f"the {expect} this step expected")
        self.calls.append((self.now_s, f"scale {replicas}"))
        if replicas > self.spec_replicas:
            for k in range(self.spec_replicas, replicas):
                self._new_pvc(k)
                self._new_pod(k)
            self.cluster.target = max(self.cluster.target, replicas)
        for k in range(replicas, self.spec_replicas):  # pods removed
            self.pod_stream.pop(k, None)
            if k in self.decommissioned:
                self.decommissioned.discard(k)
            elif k < self.cluster.serving:
                self.violations.append(f"{self.now_s:.0f} s: pod {self.name}-{k} removed while "
                                       "its node still held data")
                self.cluster.target = min(self.cluster.target, k)
        self.spec_replicas = replicas

    def _new_pod(self, k: int) -> None:
        self.uids[k] = self._next_uid
        self._next_uid += 1
        self.restarts.pop(k, None)
        self.pod_stream.pop(k, None)

    def restart(self, pod: str, recreate: bool = False) -> None:
        """Tests: the pod's store container restarts (its restartCount grows), or the pod is
        deleted and created again (a new uid); either way its node forgets the throttle set
        at run time and streams at the default."""
        k = self._ordinal(self.namespace, pod)
        if k is None:
            raise ElastoreError(f"pod {self.namespace}/{pod} does not exist")
        if recreate:
            self._new_pod(k)
        else:
            self.restarts[k] = self.restarts.get(k, 0) + 1
            self.pod_stream.pop(k, None)

    def pod_identity(self, ns: str, name: str, container: str) -> str | None:
        self._sync()
        k = self._ordinal(ns, name)
        if k is None or not self._ready(k):
            return None
        return f"sim-{self.uids.get(k, k)}/{self.restarts.get(k, 0)}"

    def node_stream(self, pod: str) -> float:
        """Tests: the stream throttle pod's node runs at now."""
        k = self._ordinal(self.namespace, pod)
        if k is None:
            raise ElastoreError(f"pod {self.namespace}/{pod} does not exist")
        return self.pod_stream.get(k, self.default_stream_mibps)

    def pod(self, ns: str, name: str) -> tuple[bool, bool]:
        self._sync()
        k = self._ordinal(ns, name)
        return (False, False) if k is None else (True, self._ready(k))

    def node_mode(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]
                  ) -> str | None:
        self._sync()
        k = self._ordinal(ns, pod)
        c = self.cluster
        if k is None:
            return None
        if k in self.decommissioned:
            return "DECOMMISSIONED"
        if c.op is not None and c.op.kind == "remove" and k == c.serving - 1:
            return "LEAVING"
        if k < c.serving:
            return "NORMAL"
        return None if self._booting(k) else "JOINING"

    def start_decommission(self, ns: str, pod: str, container: str,
                           nodetool: tuple[str, ...]) -> None:
        self._sync()
        k = self._ordinal(ns, pod)
        self.calls.append((self.now_s, f"decommission {pod}"))
        self.failures.pop(pod, None)
        if self.refuse_decommission is not None:
            self.failures[pod] = f"nodetool decommission exited 1: {self.refuse_decommission}"
            return
        c = self.cluster
        if k is None or k != c.serving - 1 or (c.op is not None and c.op.kind == "add"):
            self.violations.append(f"{self.now_s:.0f} s: decommission of {pod} refused "
                                   "(not the last serving node, or a node is joining)")
            return
        c.target = min(c.target, k)
        self._leaving = k

    def set_stream_throughput(self, ns: str, pods: list[str], container: str,
                              nodetool: tuple[str, ...], mibps: float) -> float:
        _, applied = stream_setting(mibps)
        failed = []
        for pod in pods:
            k = self._ordinal(ns, pod)
            if k is None or pod in self.throttle_fails:
                failed.append(f"{pod}: nodetool setstreamthroughput exited 1" if k is not None
                              else f"{pod}: no such pod")
                continue
            self.calls.append((self.now_s, f"setstreamthroughput {applied:.3f} {pod}"))
            self.pod_stream[k] = applied
            self.stream_mibps = applied
        if failed:
            raise ElastoreError("setstreamthroughput failed on " + "; ".join(failed))
        return applied

    def pvc_exists(self, ns: str, name: str) -> bool:
        return ns == self.namespace and name in self.pvcs

    def start_cleanup(self, ns: str, pod: str, container: str,
                      nodetool: tuple[str, ...]) -> None:
        self._sync()
        self.calls.append((self.now_s, f"cleanup {pod}"))
        if self._ordinal(ns, pod) is None:
            self.violations.append(f"{self.now_s:.0f} s: cleanup of {pod}: no such pod")
            return
        if self.cluster.op is not None and self.cluster.op.kind == "remove":
            self.violations.append(f"{self.now_s:.0f} s: cleanup of {pod} during a "
                                   "decommission")
        self.cleanups[pod] = self.now_s
        self.forgotten.discard(pod)
        k = self._ordinal(ns, pod)
        c = self.cluster
        if k is not None and k < c.serving:
            self.cleanup_took[pod] = c.cleanup_bytes_of(k) / (self.cleanup_mibps(pod) * MIB)
            self.cleaning[pod] = k

    def cleanup_mibps(self, pod: str) -> float:
        """The rate a cleanup on ``pod`` rewrites at: the compaction throttle set on it
        (the operator sets the migration rate); unthrottled (0) or never set, Cassandra's
        default compaction throughput."""
        rate = self.compaction_mibps.get(pod, DEFAULT_CLEANUP_MIBPS)
        return rate if rate > 0 else DEFAULT_CLEANUP_MIBPS

    def _cleanup_end(self, pod: str) -> float:
        took = self.cleanup_seconds if self.cleanup_seconds is not None else \
            self.cleanup_took.get(pod, 0.0)
        return self.cleanups[pod] + took

    def _cleanup_done(self, pod: str) -> bool:
        done = self.now_s >= self._cleanup_end(pod)
        k = self.cleaning.get(pod)
        if done and k is not None:  # the node holds only its data now
            self.cluster.cleaned(k)
            del self.cleaning[pod]
        return done

    def cleanup_running_now(self) -> str | None:
        """The pod whose cleanup runs now, if any (the runner cleans one at a time)."""
        for pod in list(self.cleaning):
            if pod not in self.cleanup_fails and not self._cleanup_done(pod):
                return pod
        return None

    def cleanup_state(self, ns: str, pod: str) -> str | None:
        if pod not in self.cleanups or pod in self.forgotten:
            return None
        if pod in self.cleanup_fails:
            return "failed: nodetool cleanup exited 2: not enough space"
        return "done" if self._cleanup_done(pod) else "running"

    def cleanup_running(self, ns: str, pod: str, container: str,
                        nodetool: tuple[str, ...]) -> bool | None:
        return pod in self.cleanups and pod not in self.cleanup_fails and \
            not self._cleanup_done(pod)

    def repair_running(self, ns: str, pod: str, container: str,
                       nodetool: tuple[str, ...]) -> str | None:
        return self.repairs.get(pod)

    def compaction_throughput(self, ns: str, pod: str, container: str,
                              nodetool: tuple[str, ...]) -> float:
        return self.compaction_mibps.get(pod, 64.0)

    def set_compaction_throughput(self, ns: str, pod: str, container: str,
                                  nodetool: tuple[str, ...], mibps: float) -> float:
        applied = 0.0 if mibps == 0 else float(max(1, round(mibps)))
        self.calls.append((self.now_s, f"setcompactionthroughput {applied:g} {pod}"))
        self.compaction_mibps[pod] = applied
        return applied

    def decommission_failure(self, ns: str, pod: str) -> str | None:
        return self.failures.get(pod) if ns == self.namespace else None

    def ring(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> Ring:
        """``nodetool status``/``describecluster``/``info`` as the simulated ring would print
        them: every serving node UN (``down`` ones DN), a joining one UJ, a leaving one
        UL; ``keyspaces`` at their replication factors."""
        self._sync()
        k = self._ordinal(ns, pod)
        if k is None:
            raise ElastoreError(f"pod {ns}/{pod} does not exist")
        self.calls.append((self.now_s, f"ring {pod}"))
        nodes = []
        for j in range(self.spec_replicas):
            mode = self.node_mode(ns, f"{self.name}-{j}", container, nodetool)
            if mode is None or mode == "DECOMMISSIONED":
                continue
            state = {"NORMAL": "UN", "LEAVING": "UL", "JOINING": "UJ"}[mode]
            if j in self.down:
                state = "D" + state[1]
            load = self.cluster.data[j] if j < self.cluster.serving else 0.0
            nodes.append(RingNode(state, f"10.0.0.{j + 1}", load, _host_id(j), "dc1"))
        return Ring(tuple(nodes), {name: Replication("SimpleStrategy", {"": rf})
                                   for name, rf in self.keyspaces.items()}, _host_id(k))

    def host_id(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> str:
        """``nodetool info``'s ID (a decommissioned node keeps answering it)."""
        k = self._ordinal(ns, pod)
        if k is None:
            raise ElastoreError(f"pod {ns}/{pod} does not exist")
        self.calls.append((self.now_s, f"info {pod}"))
        return _host_id(k)

    def mark_pvc(self, ns: str, name: str, value: str) -> None:
        self.calls.append((self.now_s, f"mark pvc {name}"))
        if ns == self.namespace and name in self.pvcs:
            self.marked[name] = value

    def pvc_mark(self, ns: str, name: str) -> tuple[str, str | None] | None:
        if ns != self.namespace or name not in self.pvcs:
            return None
        return self._pvc_uid(name), self.marked.get(name)

    def unmark_pvc(self, ns: str, name: str) -> None:
        if ns == self.namespace and self.marked.pop(name, None) is not None:
            self.calls.append((self.now_s, f"unmark pvc {name}"))

    def delete_pvc(self, ns: str, name: str) -> None:
        self.calls.append((self.now_s, f"delete pvc {name}"))
        self.pvcs.discard(name)
        self.pvc_uids.pop(name, None)
        self.marked.pop(name, None)  # its annotations go with it

    def volume(self, ns: str, name: str) -> VolumeFacts | None:
        if ns != self.namespace or name not in self.pvcs:
            return None
        uid = self._pvc_uid(name)
        req = self.pvc_requests.get(uid, self.volume_bytes)
        cap = self.pvc_capacity.get(uid, req)
        return VolumeFacts(name, uid, req, cap, "Bound", self.storage_class,
                           self.expandable if self.storage_class else None,
                           req is not None and cap is not None and req > cap)

    def expand_volume(self, ns: str, name: str, to_bytes: float) -> None:
        where = f"PVC {ns}/{name}"
        facts = self.volume(ns, name)
        if facts is None:
            raise ElastoreError(f"{where} does not exist: cannot expand it")
        if not expansion_wanted(where, facts.requested_bytes, to_bytes):
            return
        if facts.storage_class is None:
            raise ElastoreError(f"{where} names no StorageClass: not expanding it")
        if facts.expandable is not True:  # simulated: no API server to decide an unknown
            raise ElastoreError(f"{where}: its StorageClass {facts.storage_class} does not "
                                "allow volume expansion")
        self.calls.append((self.now_s, f"expand pvc {name} {to_bytes:.0f}"))
        self.pvc_requests[facts.uid] = to_bytes
        self.pvc_capacity[facts.uid] = to_bytes


@dataclass
class TraceMetrics:
    """The load of a replay, as Prometheus would give it: ``load_rps(t)`` now, and its
    history sampled at the end of every step (NaN outside ``[start_s, end_s]``)."""

    load_rps: Callable[[float], float]
    read_ratio: float
    data_bytes: Callable[[], float]
    start_s: float
    end_s: float
    interference: Callable[[float], float] | None = None
    queries: int = 0
    #: how many nodes report (a partial scrape); None: the source cannot tell
    nodes: Callable[[], int | None] = lambda: None
    #: each node's own readings at a time (the replay's measured latencies, for a policy
    #: that learns its capacity model); None: the replay has none
    node_readings: Callable[[float], dict[str, NodeReading]] | None = None
    #: the bytes per node at a time, with their history (a test's disk); None: none
    disk_reading: Callable[[float, int, float], DiskReading] | None = None

    @classmethod
    def piecewise_linear(cls, times_s: FloatArray, values_rps: FloatArray,
                         read_ratio: float, data_bytes: Callable[[], float],
                         interference: Callable[[float], float] | None = None
                         ) -> TraceMetrics:
        t = np.asarray(times_s, dtype=float)
        v = np.asarray(values_rps, dtype=float)
        return cls(lambda x: float(np.interp(x, t, v)), read_ratio, data_bytes,
                   float(t[0]), float(t[-1]), interference)

    def _at(self, t: float) -> float:
        return self.load_rps(t) if self.start_s - 1e-9 <= t <= self.end_s + 1e-9 else np.nan

    def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
        self.queries += 1
        load = self._at(at_s)
        if not np.isfinite(load):
            raise MetricsError("MetricsMissing", f"no load at {at_s:.0f} s in the replay")
        end = history_end(at_s, step_s)  # on the step grid, as Prometheus's source
        hist = np.array([self._at(end - (steps - 1 - j) * step_s) for j in range(steps)])
        return Snapshot(at_s=at_s, load_rps=load, read_ratio=self.read_ratio,
                        data_bytes=self.data_bytes(), migration_mibps=None,
                        history_rps=hist, step_s=step_s, nodes=self.nodes(),
                        history_end_s=end)

    def scalar(self, name: str, at_s: float) -> float:
        if name == "interference" and self.interference is not None:
            return float(self.interference(at_s))
        raise MetricsError("MetricsMissing", f"the replay has no {name!r} series")

    def per_node(self, at_s: float) -> dict[str, NodeReading]:
        if self.node_readings is None:
            raise MetricsError("MetricsMissing", "the replay has no per-node series")
        return self.node_readings(at_s)

    def disk(self, at_s: float, steps: int, step_s: float,
             pvc_template: str | None = None) -> DiskReading:
        if self.disk_reading is None:
            raise MetricsError("MetricsMissing", "the replay has no per-node bytes (the "
                               "operator controller of the simulator plans for the load only)")
        return self.disk_reading(at_s, steps, step_s)


def _host_id(k: int) -> str:
    return f"00000000-0000-4000-8000-{k:012d}"


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place (what the API server applies to a status)."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            merge_patch(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


@dataclass
class MemoryPolicies:
    """One ElasticPolicy held in memory; its Events are kept in :attr:`events`."""

    body: dict[str, Any]
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    deleted: bool = False
    #: ConfigMaps the policy wrote (its learned model): (namespace, name) -> (data, owners)
    configmaps: dict[tuple[str, str], tuple[dict[str, str], list[str]]] = field(
        default_factory=dict)

    @classmethod
    def of(cls, namespace: str, name: str, spec: dict[str, Any]) -> MemoryPolicies:
        return cls({"apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
                    "metadata": {"namespace": namespace, "name": name, "generation": 1,
                                 "resourceVersion": "1", "uid": f"sim-{namespace}-{name}"},
                    "spec": copy.deepcopy(spec), "status": {}})

    def _is(self, ns: str, name: str) -> bool:
        meta = self.body["metadata"]
        return not self.deleted and (meta["namespace"], meta["name"]) == (ns, name)

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.body) if self._is(ns, name) else None

    def patch_status(self, ns: str, name: str, status: dict[str, Any],
                     expect_version: str | None = None) -> str | None:
        if not self._is(ns, name):
            raise ElastoreError(f"no ElasticPolicy {ns}/{name}")
        meta = self.body["metadata"]
        if expect_version is not None and expect_version != meta.get("resourceVersion"):
            raise StatusConflict(f"writing the status of ElasticPolicy {ns}/{name}: it "
                                 f"changed since resourceVersion {expect_version}")
        merge_patch(self.body.setdefault("status", {}), status)
        return self.bump()

    def bump(self) -> str:
        """A new resourceVersion, as any write of the object gives it."""
        meta = self.body["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        return str(meta["resourceVersion"])

    def event(self, body: dict[str, Any], reason: str, message: str,
              warning: bool = False) -> None:
        self.events.append((reason, message, warning))

    def read_model(self, ns: str, name: str, key: str) -> tuple[str | None, list[str]]:
        cm = self.configmaps.get((ns, name))
        if cm is None:
            return None, []
        return cm[0].get(key), list(cm[1])

    def write_model(self, body: dict[str, Any], name: str, key: str, text: str) -> None:
        ns = body["metadata"]["namespace"]
        data, owners = self.configmaps.get((ns, name), ({}, [body["metadata"]["uid"]]))
        self.configmaps[(ns, name)] = ({**data, key: text}, owners)

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})
