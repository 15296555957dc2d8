"""The Swift driver; the package's docstring says what a step does."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from elastore.actuators import swiftring
from elastore.actuators.ports import (
    SWIFT_RINGS_LABEL,
    ClusterPort,
    DriftError,
    SwiftPort,
)
from elastore.actuators.swiftring import Misplaced
from elastore.errors import ElastoreError, MetricsError
from elastore.operator.spec import PolicySpec
from elastore.stores import operation
from elastore.stores.base import (
    Advanced,
    Allowed,
    EffectFailed,
    Kind,
    StoreCall,
    Why,
    under,
)
from elastore.stores.cassandra.driver import StatefulSetPods, mark_pvc, pvc_facts
from elastore.stores.operation import OperationState
from elastore.stores.swift import machine, pods


def _port(port: ClusterPort) -> SwiftPort:
    assert isinstance(port, SwiftPort)  # refused() said so before any call
    return port


def _pods(spec: PolicySpec, replicas: int) -> list[str]:
    return [f"{spec.target.name}-{k}" for k in range(replicas)]


class SwiftDriver(StatefulSetPods):

    def __init__(self) -> None:
        #: the target's object partitions -> bytes of a replica, from the last look at its
        #: pods (what a ring change moves is estimated from it)
        self._sizes: dict[int, int] = {}

    def refused(self, spec: PolicySpec, port: ClusterPort, allowed: Allowed) -> Why | None:
        if not isinstance(port, SwiftPort):
            return ("TargetNotSupported", "this operator's cluster port cannot read Swift "
                                          "pods and rings")
        sw = spec.target.swift
        for field_name, path in (("ringDir", sw.ring_dir), ("devicesDir", sw.devices_dir)):
            if not under(path, allowed.pod_paths):
                return ("PodPathNotAllowed", f"spec.target.swift.{field_name} {path} is not "
                        f"under a directory this operator reads in pods "
                        f"({', '.join(allowed.pod_paths)}; `elastore operator run "
                        "--pod-path`): nothing is run")
        prefix = tuple(spec.target.swift.exec_prefix)
        if prefix not in allowed.exec_prefixes:
            names = "; ".join(" ".join(c) or "(none)" for c in allowed.exec_prefixes)
            return ("ExecPrefixNotAllowed", f"spec.target.swift.execPrefix {list(prefix)} is "
                    f"not one this operator allows ({names}; `elastore operator run "
                    "--exec-prefix`): nothing is done")
        return None

    def data_bytes(self, port: ClusterPort, namespace: str, spec: PolicySpec,
                   replicas: int) -> float | None:
        """The bytes on the target's devices, read in its pods (Swift's exporters have no
        such metric): a pod that cannot be read is ``MetricsMissing``, never 0."""
        try:
            return pods.disk_bytes(_port(port), spec, namespace, _pods(spec, replicas))
        except ElastoreError as exc:
            raise MetricsError("MetricsMissing", f"dataBytes: the Swift pods' devices could "
                                                 f"not be read: {exc}") from exc

    def keep_throttles(self, call: StoreCall, period: bool) -> None:
        return None  # the replicators' rate is the pods' own config (BwMan shapes the links)

    def holds(self, call: StoreCall, kind: Kind, step_to: int | None) -> Why | None:
        return None

    def supersedable(self, op: OperationState) -> bool:
        return False

    def _rings(self, call: StoreCall) -> tuple[str, swiftring.RingFiles]:
        name = call.spec.target.swift.ring_configmap
        assert name
        rv, files, labels = _port(call.port).read_files(call.namespace, name)
        if labels.get(SWIFT_RINGS_LABEL) != "true":
            raise ElastoreError(f"ConfigMap {call.namespace}/{name} is not labelled "
                                f"{SWIFT_RINGS_LABEL}=true: the operator changes rings only "
                                "where their owner said it may")
        return rv, swiftring.RingFiles(files)

    def refusal(self, call: StoreCall, kind: Kind, step_to: int | None) -> str | None:
        """Why a Swift node step may not start: the bounds, the rings readable, and for a
        scale-in enough pods left for the rings' replicas and no earlier change still
        moving data (a second change then could move a partition's last good copy)."""
        spec, sts = call.spec, call.sts
        out = self.bounds(call, kind)
        if out is not None:
            return out
        if sts.ready_replicas < sts.spec_replicas:  # a scale-out too: the rings need them all
            return f"only {sts.ready_replicas} of {sts.spec_replicas} pods are ready"
        try:
            _, rings = self._rings(call)
            replicas = rings.replicas()
            if kind == "ScaleOut":
                return None
            if sts.spec_replicas - 1 < replicas:
                return (f"the rings keep {replicas:g} replicas: {sts.spec_replicas - 1} "
                        "pods cannot hold them apart")
            view = pods.observe(_port(call.port), spec, call.namespace,
                                     _pods(spec, sts.spec_replicas), rings)
        except ElastoreError as exc:
            return f"the rings or the pods could not be read: {exc}"
        if view.lagging:
            return f"{', '.join(view.lagging)} do not have the current rings yet"
        if view.progress is None:
            return view.why
        busy = [k for k, m in view.progress.items() if not m.done]
        if busy:
            return f"an earlier ring change is still moving data ({', '.join(busy)})"
        return None

    def _facts(self, call: StoreCall, op: OperationState) -> machine.SwiftFacts:
        spec, sts = call.spec, call.sts
        port = _port(call.port)
        exists, ready = call.port.pod(call.namespace, op.pod)
        ip = port.pod_ip(call.namespace, op.pod) if exists else None
        pvc, pvc_marked = pvc_facts(call, op)
        weight = parts = None
        device_ip: str | None = None
        unknown: tuple[str, ...] = ()
        lagging: tuple[str, ...] | None = None
        progress: dict[str, Misplaced] | None = None
        why = ""
        lowering = op.kind == "ScaleIn" and op.phase == "Scaling" and \
            sts.spec_replicas > op.to_replicas  # the rings must show the device gone
        if op.phase in machine.IN_RINGS or lowering:
            try:
                _, rings = self._rings(call)
                device = spec.target.swift.device
                table = rings.table("object")
                dev = None if ip is None else table.get(f"{ip}/{device}")
                n = op.to_replicas if op.kind == "ScaleOut" else op.from_replicas
                marked = rings.pod_devices("object")
                if dev is None and op.pod in marked:  # the pod came back at a new address
                    key, w, p = marked[op.pod]
                    dev, device_ip = (w, p), key.rsplit("/", 1)[0]
                if dev is not None:
                    weight, parts = dev
                pod_ips = {a for a in (port.pod_ip(call.namespace, q)
                                       for q in _pods(spec, max(n, op.from_replicas))) if a}
                known = {k for k, _, _ in marked.values()}
                unknown = tuple(sorted({k.rsplit("/", 1)[0] for k in table
                                        if k.endswith(f"/{device}") and k not in known
                                        and k.rsplit("/", 1)[0] not in pod_ips}))
                view = pods.observe(port, spec, call.namespace, _pods(spec, n), rings)
                lagging, progress, why = view.lagging, view.progress, view.why
                self._sizes = view.sizes
                call.out["swift"] = {"diskBytes": view.disk_bytes,
                                     "laggingPods": list(lagging),
                                     "outOfPlace": None if progress is None else {
                                         k: {"handoffs": m.handoffs, "missing": m.missing,
                                             "handoffBytes": m.handoff_bytes}
                                         for k, m in progress.items()}}
            except ElastoreError as exc:
                why = str(exc)
        return machine.SwiftFacts(sts.spec_replicas, exists, ready, ip, weight, parts,
                                  lagging, progress, why, pvc, pvc_marked,
                                  device_ip=device_ip, unknown_ips=unknown)

    def advance(self, call: StoreCall, op: OperationState) -> Advanced:
        facts = self._facts(call, op)
        new, effect, done = machine.advance(op, facts, call.now, call.spec.pvc_policy)
        return Advanced(new, effect, done)

    def before_effect(self, call: StoreCall, op: OperationState, new: Advanced) -> str | None:
        return None  # the machine read the rings this tick: its facts are the check

    def apply(self, call: StoreCall, op: OperationState, new: Advanced) -> OperationState:
        """Every effect is idempotent given the facts (a device already in the rings is not
        added again; a weight already 0 stays 0). A ring change that fails is retried."""
        port, ns = call.port, call.namespace
        nxt, effect = new.operation, new.effect
        if op.phase in machine.BEFORE_SCALING and nxt.phase == "Scaling":
            mark_pvc(call, nxt)  # its data seen gone, by this operation
        if effect == "scale" and op.kind == "ScaleOut" and nxt.pvc:
            port.unmark_pvc(ns, nxt.pvc)  # the ordinal comes back
        try:
            if effect == "scale":
                port.scale(ns, call.spec.target.name, nxt.to_replicas, expect=op.from_replicas)
            elif effect in ("ring-add", "ring-drain", "ring-remove", "ring-readdress"):
                nxt = self._ring_change(call, nxt, effect)
                call.save(nxt)
            elif effect == "delete-pvc" and nxt.pvc:
                port.delete_pvc(ns, nxt.pvc)
        except DriftError:
            raise
        except ElastoreError as exc:
            raise EffectFailed("RingChangeFailed", str(exc)) from exc
        return nxt

    def _ring_change(self, call: StoreCall, op: OperationState, effect: str
                     ) -> OperationState:
        """Carry out a ring effect on the ConfigMap (read, change a copy, rebalance, write it
        back only if nobody wrote it meanwhile), and re-estimate the operation's end by the
        migration-time model from what the change moves."""
        spec, port = call.spec, _port(call.port)
        sw = spec.target.swift
        assert sw.ring_configmap
        ip = port.pod_ip(call.namespace, op.pod)
        if ip is None:
            raise ElastoreError(f"{op.pod} has no IP: its device cannot be found in the rings")
        zone = int(op.pod.rsplit("-", 1)[1]) + 1
        rv, rings = self._rings(call)
        if not self._sizes:  # what the partitions weigh: a look before the change
            with contextlib.suppress(ElastoreError):
                self._sizes = pods.observe(
                    port, spec, call.namespace,
                    _pods(spec, max(op.from_replicas, op.to_replicas)), rings).sizes
        op_name = {"ring-add": "add", "ring-drain": "weight", "ring-remove": "remove",
                   "ring-readdress": "readdress"}[effect]
        # the pod's name goes with every change: its device is found by it (and moved to
        # the pod's address) whatever address the rings have for it
        new, rebalanced = rings.change([{"op": op_name, "ip": ip, "device": sw.device,
                                         "zone": zone, "pod": op.pod,
                                         "weight": sw.weight if effect == "ring-add" else 0}])
        port.write_files(call.namespace, sw.ring_configmap, rv, dict(new.files))
        moved = swiftring.moves(rings.assignment("object"), new.assignment("object"),
                                self._sizes)
        mibps = call.migration_mibps()
        secs = moved.seconds(mibps, spec.node_overhead_s)
        what = ", ".join(f"{r.kind} {r.reassigned}" for r in rebalanced)
        msg = (f"{op.message}; rings changed (partition replicas reassigned: {what}); "
               f"{moved.total_bytes / 2**20:.1f} MiB to move, the busiest node "
               f"{max(moved.max_send_bytes, moved.max_receive_bytes) / 2**20:.1f} MiB at "
               f"{mibps:g} MiB/s: expected {secs:.0f} s")
        call.event("RingChanged", msg[:1000], False)
        now = max(call.now, call.clock())
        return replace(op, message=msg, expected_end_s=now + operation.capped(secs),
                       deadline_s=max(op.deadline_s or 0.0, operation.deadline(now, secs)))

    def stopped(self, call: StoreCall, op: OperationState) -> None:
        return None

    def abort_left(self, call: StoreCall, op: OperationState) -> str:
        if op.kind == "ScaleOut":
            return (f"the StatefulSet stays at {call.sts.spec_replicas}; {op.pod}'s device "
                    "stays in the rings if it was added (the replicators finish moving its "
                    "share)")
        if op.phase in ("Draining", "Removing"):
            return (f"{op.pod}'s device keeps the weight it has in the rings (0 once drained: "
                    "swift-ring-builder set_weight restores it) and its pod stays")
        return f"{op.pod} had left the ring; lower the replicas to {op.to_replicas} by hand"
