"""The Cassandra (StatefulSet) driver; the package's docstring says what a step does."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from elastore.actuators.ports import (
    ClusterPort,
    TokenConfigPort,
    TokenMovePort,
    tokens_configmap,
)
from elastore.errors import ElastoreError
from elastore.operator import bandwidth
from elastore.operator.conditions import iso
from elastore.operator.skew import SkewAct, SkewView
from elastore.operator.spec import PolicySpec
from elastore.planner.stabilization import Recommendations
from elastore.stores import operation
from elastore.stores.base import (
    Advanced,
    Begun,
    FactsUnreadable,
    Kind,
    StoreCall,
    Target,
    Why,
    floor,
)
from elastore.stores.cassandra import machine, move
from elastore.stores.cassandra.nodes import CassandraNodes, nodetool
from elastore.stores.operation import OperationState

log = logging.getLogger("elastore.operator")


def mark_pvc(call: StoreCall, op: OperationState) -> None:
    """The evidence a later PVC deletion trusts: this operation saw the PVC's node (or its
    data) leave; the mark names the operation and the PVC's UID."""
    if not op.pvc or op.id is None:
        return
    got = call.port.pvc_mark(call.namespace, op.pvc)
    if got is not None and not operation.mark_honoured(got[1], op.id, got[0]):
        call.port.mark_pvc(call.namespace, op.pvc,
                           operation.pvc_mark(call.policy, iso(call.now), op.id, got[0]))


def pvc_facts(call: StoreCall, op: OperationState) -> tuple[bool | None, bool]:
    """In a scale-in's Cleanup: whether its PVC exists, and whether it carries this
    operation's own mark on this very PVC."""
    if not op.pvc or op.phase != "Cleanup":
        return None, False
    got = call.port.pvc_mark(call.namespace, op.pvc)
    if got is None:
        return False, False
    uid, value = got
    return True, operation.mark_honoured(value, op.id, uid)


class StatefulSetPods:
    """A StatefulSet's pods and one-node steps, as Cassandra and Swift targets share them."""

    def read(self, port: ClusterPort, namespace: str, spec: PolicySpec) -> Target | None:
        sts = port.statefulset(namespace, spec.target.name)
        return None if sts is None else Target(sts)

    def missing(self, namespace: str, spec: PolicySpec) -> str:
        return f"StatefulSet {namespace}/{spec.target.name} not found"

    def contenders(self, port: ClusterPort, namespace: str, target: Target,
                   policy: str) -> list[str]:
        return port.contenders(namespace, target.sizes.name, policy)

    def pods(self, spec: PolicySpec, target: Target, to_replicas: int | None) -> list[str]:
        return bandwidth.pod_names(spec.target.name, target.sizes.spec_replicas, to_replicas)

    def step_to(self, call: StoreCall, wanted: int, user_named: bool,
                recent_desired: Recommendations) -> int | Why | None:
        return None  # one node at a time

    def check_identity(self, op: OperationState, call: StoreCall, floor: int) -> None:
        operation.check_identity(op, call.spec.target.name, call.sts.pvc_template, floor)

    def begin(self, call: StoreCall, kind: Kind, step_to: int | None) -> Begun:
        spec, sts = call.spec, call.sts
        expected = operation.expected_seconds(
            kind, sts.spec_replicas, call.data_bytes(),
            call.migration_mibps(), spec.node_overhead_s, cleanup=spec.cleanup)
        # started when it starts: the tick may have waited on the cluster since call.now
        new = operation.start(kind, spec.target.name, sts.spec_replicas,
                              max(call.now, call.clock()), expected, sts.pvc_template,
                              spec.target.store)
        return Begun(new, f"{sts.spec_replicas} -> {new.to_replicas} replicas ({new.pod})",
                     condition=f"{sts.spec_replicas} -> {new.to_replicas}: {new.pod}")

    def bounds(self, call: StoreCall, kind: Kind) -> str | None:
        """The step's bounds: replicas.max; the floor and every pod ready for a scale-in."""
        spec, sts = call.spec, call.sts
        if kind == "ScaleOut":
            if sts.spec_replicas + 1 > spec.max_replicas:
                return f"replicas.max is {spec.max_replicas}"
            return None
        low = floor(spec)
        if sts.spec_replicas - 1 < low:
            return (f"never below max(replicas.min, replicationFactor) = {low} "
                    f"(now {sts.spec_replicas})")
        if sts.ready_replicas < sts.spec_replicas:
            return f"only {sts.ready_replicas} of {sts.spec_replicas} pods are ready"
        return None


class CassandraDriver(StatefulSetPods, CassandraNodes):

    #: Auto chooses a new pod's token at a scale-out (the pod reads it from its ConfigMap)
    SPLITS_AT_SCALE_OUT = True

    def __init__(self) -> None:
        CassandraNodes.__init__(self)
        #: pod -> the token the ConfigMap gave it, once seen taken or not (said once)
        self._split_seen: dict[str, str] = {}

    def pods_now(self, call: StoreCall) -> list[str]:
        op = call.out["operation"] if "operation" in call.out else call.status.get("operation")
        to = op.get("toReplicas") if isinstance(op, dict) else None
        return self.pods(call.spec, call.target, to if isinstance(to, int) else None)

    def holds(self, call: StoreCall, kind: Kind, step_to: int | None) -> Why | None:
        # not running: nothing to ask (a decommission checks the ring)
        pods = [p for p in self.pods_now(call) if call.port.pod(call.namespace, p)[1]]
        held = self.repair_hold(call, kind, pods)
        return None if held is None else ("RepairRunning", held)

    def refusal(self, call: StoreCall, kind: Kind, step_to: int | None) -> str | None:
        out = self.bounds(call, kind)
        if out is not None or kind == "ScaleOut":
            return out
        return self.ring_refusal(call, f"{call.spec.target.name}-{call.sts.spec_replicas - 1}")

    # -- Auto: the new pod's token (issue 38's split at a scale-out) ------------------------
    def _split_token(self, call: StoreCall, op: OperationState) -> None:
        """Before the StatefulSet grows: the new pod's token in its ConfigMap
        (:func:`~elastore.actuators.ports.tokens_configmap`, key the pod's name), chosen to
        split the hot range, once the store bore the sample's ring out; else the pod's key
        is emptied (an earlier pod of that ordinal must not hand it an old token). What
        the pod template must do with it is in docs/operator.md."""
        spec, port, ns = call.spec, call.port, call.namespace
        if spec.skew.mode != "Auto" or not spec.enforce or not op.pod:
            return
        if not isinstance(port, TokenConfigPort) or not isinstance(port, TokenMovePort):
            return
        name = tokens_configmap(spec.target.name)
        token, why = move.split_for(call.skew_view, op.pod)
        if token is not None:
            ring = call.skew_view.ring
            try:
                held = {p: port.node_tokens(ns, p, spec.target.container,
                                            spec.target.nodetool) for p in ring.names}
            except ElastoreError as exc:
                token, why = None, f"the serving pods' tokens could not be read: {exc}"
            else:
                if any(held[p] != tuple(ring.tokens[ring.index(p)]) for p in ring.names):
                    token, why = None, "the ring changed since the sample"
                elif any(token in t for t in held.values()):
                    token, why = None, f"token {token} is held by a node"
        try:
            got = port.pod_tokens_config(ns, name)
            if token is None:
                if got is not None and got[1] and got[0].get(op.pod):
                    port.set_pod_token(ns, name, op.pod, "")
                call.event("SkewSplitSkipped", f"{op.pod} joins at a token of its own: "
                                               f"{why}", False)
                return
            port.set_pod_token(ns, name, op.pod, str(token))
            back = port.pod_tokens_config(ns, name)
        except ElastoreError as exc:
            call.event("SkewSplitNotWritten", f"{op.pod}'s token was not written ({exc}): "
                                              "it joins at a token of its own", True)
            return
        if back is None or back[0].get(op.pod) != str(token):
            call.event("SkewSplitNotWritten", f"ConfigMap {ns}/{name} does not read back "
                                              f"{op.pod}'s token {token}", True)
            return
        self._split_seen.pop(op.pod, None)
        call.event("SkewSplitToken", f"{why} (ConfigMap {name}, key {op.pod})", False)

    def _moved(self, call: StoreCall, pod: str, token: int) -> None:
        """The pod's key in its token ConfigMap follows a move (when the ConfigMap is the
        operator's and names the pod): a pod replaced on an empty volume starts at the token
        the ring has for it, not at one it has left."""
        port, spec, ns = call.port, call.spec, call.namespace
        if not isinstance(port, TokenConfigPort):
            return
        name = tokens_configmap(spec.target.name)
        try:
            got = port.pod_tokens_config(ns, name)
            if got is not None and got[1] and got[0].get(pod):
                port.set_pod_token(ns, name, pod, str(token))
                self._split_seen[pod] = str(token)
        except ElastoreError as exc:
            call.event("SkewSplitNotWritten", f"{pod}'s key in ConfigMap {name} was not "
                                              f"moved to {token}: {exc}", True)

    def skew_act(self, call: StoreCall, view: SkewView, action: str,
                 record: Mapping[str, Any] | None) -> SkewAct:
        """The move step (:class:`CassandraNodes`), and once a split pod serves, whether it
        took the token its ConfigMap gave it (said once per pod and token)."""
        act = super().skew_act(call, view, action, record)
        said = self._split_check(call, view)
        return act if not said else replace(act, events=(*act.events, *said))

    def _split_check(self, call: StoreCall, view: SkewView) -> tuple[tuple[str, str, bool], ...]:
        port, spec, ns = call.port, call.spec, call.namespace
        if not isinstance(port, TokenConfigPort) or not isinstance(port, TokenMovePort):
            return ()
        try:
            got = port.pod_tokens_config(ns, tokens_configmap(spec.target.name))
        except ElastoreError:
            return ()
        if got is None or not got[1]:
            return ()
        out = []
        for pod in view.names:
            want = got[0].get(pod)
            if not want or self._split_seen.get(pod) == want:
                continue
            try:
                held = port.node_tokens(ns, pod, spec.target.container, spec.target.nodetool)
            except ElastoreError:
                continue
            self._split_seen[pod] = want
            if held == (int(want),):
                out.append(("SkewSplitTaken", f"{pod} joined at token {want}, as its "
                                              "ConfigMap said", False))
            else:
                out.append(("SkewSplitIgnored", (
                    f"{pod} holds {list(held)[:4]}, not the token {want} its ConfigMap "
                    f"({tokens_configmap(spec.target.name)}) gave it: the pod template "
                    "does not read it (docs/operator.md: the ConfigMap volume and "
                    "-Dcassandra.initial_token), or the node had joined before"), True))
        return tuple(out)

    def supersedable(self, op: OperationState) -> bool:
        # cleanup takes hours on large nodes and must not hold a resize (cass-operator #496)
        return op.phase == "CleaningUp"

    # -- a step ----------------------------------------------------------------------------
    def ring_gone(self, call: StoreCall, pod: str) -> bool | None:
        """Whether another node's ring no longer lists the node of ``pod`` (its host ID as
        its own ``nodetool info`` gives it); None if either could not be read."""
        spec = call.spec
        other = f"{spec.target.name}-0"
        if pod == other:
            return None
        try:
            me = nodetool(call.port).host_id(call.namespace, pod, spec.target.container,
                                   spec.target.nodetool)
            view = nodetool(call.port).ring(call.namespace, other, spec.target.container,
                                  spec.target.nodetool)
        except ElastoreError as exc:
            log.warning("%s/%s: the ring could not be read to see %s gone: %s",
                        call.namespace, call.policy, pod, exc)
            return None
        return all(n.host_id != me for n in view.nodes)

    def advance(self, call: StoreCall, op: OperationState) -> Advanced:
        try:
            facts = self._facts(call, op)
        except ElastoreError as exc:
            raise FactsUnreadable(str(exc)) from exc
        new, effect, done = machine.advance(op, facts, call.now, call.spec.pvc_policy,
                                            cleanup=call.spec.cleanup)
        return Advanced(new, effect, done)

    def _facts(self, call: StoreCall, op: OperationState) -> machine.Facts:
        sts, port, ns, spec = call.sts, call.port, call.namespace, call.spec
        exists, ready = port.pod(ns, op.pod)
        mode = nodetool(port).node_mode(ns, op.pod, spec.target.container, spec.target.nodetool) \
            if exists else None
        pvc, marked = pvc_facts(call, op)
        gone = self.ring_gone(call, op.pod) if op.kind == "ScaleIn" and \
            op.phase in ("Decommissioning", "Scaling") and \
            sts.spec_replicas > op.to_replicas and mode == "DECOMMISSIONED" else None
        failed = nodetool(port).decommission_failure(ns, op.pod) if \
            op.kind == "ScaleIn" and op.phase == "Decommissioning" and \
            op.decommission_issued_s is not None else None
        said, seen = self._cleanup_facts(call, op)
        new_pvc, members = self._new_pvc_facts(call, op)
        return machine.Facts(sts.spec_replicas, sts.ready_replicas, exists, ready, mode, pvc,
                             marked, failed, said, seen, gone, new_pvc, members)

    def _new_pvc_facts(self, call: StoreCall, op: OperationState
                       ) -> tuple[str | None, int | None]:
        """Before a scale-out's replicas go up: whether its new pod's PVC is there already
        (retained by an earlier scale-in) and, if it carries that scale-in's mark, how many
        members the ring lists (read on ordinal 0)."""
        if op.kind != "ScaleOut" or op.phase != "Scaling" or not op.pvc or \
                call.sts.spec_replicas >= op.to_replicas:
            return None, None
        got = call.port.pvc_mark(call.namespace, op.pvc)
        if got is None:
            return "absent", None
        if not operation.left_ring(got[1], got[0]):
            return "unmarked", None
        spec = call.spec
        try:
            view = nodetool(call.port).ring(call.namespace, f"{spec.target.name}-0",
                                            spec.target.container, spec.target.nodetool)
        except ElastoreError as exc:
            log.warning("%s/%s: the ring could not be read to release PVC %s: %s",
                        call.namespace, call.policy, op.pvc, exc)
            return "left-ring", None
        return "left-ring", len(view.nodes)

    def before_effect(self, call: StoreCall, op: OperationState, new: Advanced) -> str | None:
        if new.effect == "decommission" and not call.ring_checked:
            return self.ring_refusal(call, new.operation.pod)
        return None

    def apply(self, call: StoreCall, op: OperationState, new: Advanced) -> OperationState:
        spec, port, ns = call.spec, call.port, call.namespace
        nxt, effect = new.operation, new.effect
        if effect == "scale" and op.kind == "ScaleIn":
            # seen leaving the ring, by this operation: the machine lowers a scale-in's
            # replicas only on this tick's facts (DECOMMISSIONED, dropped from the ring).
            # Marked at every such effect, not only on the Decommissioning -> Scaling
            # transition: a process that recorded Scaling and died (or whose status write
            # landed but did not answer) lowers the replicas in a later tick
            mark_pvc(call, nxt)
        if effect == "scale" and op.kind == "ScaleOut" and nxt.pvc:
            # the ordinal comes back: a mark an earlier scale-in left on its PVC is void
            port.unmark_pvc(ns, nxt.pvc)
        if effect == "scale" and op.kind == "ScaleOut":
            self._split_token(call, nxt)
        if effect == "scale":
            port.scale(ns, spec.target.name, nxt.to_replicas, expect=op.from_replicas)
        elif effect == "decommission":
            nodetool(port).start_decommission(ns, nxt.pod, spec.target.container,
                                              spec.target.nodetool)
        elif effect == "delete-pvc" and nxt.pvc:
            port.delete_pvc(ns, nxt.pvc)
            if op.kind == "ScaleOut":
                call.event("RetainedVolumeDeleted", nxt.message, False)
        if op.phase == "CleaningUp" and (new.done or nxt.cleanup_ordinal != op.cleanup_ordinal):
            self.stopped(call, op)
        if effect == "cleanup":
            nxt = self._cleanup_effect(call, nxt)
        return nxt

    def stopped(self, call: StoreCall, op: OperationState) -> None:
        """Put back the compaction throttle the cleaned node had before its cleanup."""
        pod = op.cleanup_pod()
        if pod is None or op.cleanup_restore_mibps is None:
            return
        try:
            nodetool(call.port).set_compaction_throughput(
                call.namespace, pod, call.spec.target.container, call.spec.target.nodetool,
                op.cleanup_restore_mibps)
        except ElastoreError as exc:
            call.event("ThrottleFailed", f"{pod}'s compaction throttle could not be put back "
                                         f"to {op.cleanup_restore_mibps:g} MiB/s: {exc}", True)

    def abort_left(self, call: StoreCall, op: OperationState) -> str:
        if op.kind == "ScaleOut" and op.cleanup_ordinal is not None:
            self.stopped(call, op)
            return (f"{op.pod} had joined; the old nodes from {op.cleanup_pod()} on may keep "
                    "data they no longer own (a cleanup already running there finishes): run "
                    "nodetool cleanup on them before any scale-in")
        if op.kind == "ScaleOut" and call.sts.spec_replicas >= op.to_replicas:
            return (f"the StatefulSet stays at {call.sts.spec_replicas}; {op.pod} finishes "
                    f"joining by itself if its node runs. {machine.never_joined(op)}")
        if op.kind == "ScaleOut":
            return (f"the StatefulSet stays at {call.sts.spec_replicas}; {op.pod} finishes "
                    "joining by itself")
        if op.phase in ("Decommissioning", "Stuck") and op.decommission_issued_s is None:
            return f"{op.pod} was never decommissioned"
        if op.phase in ("Decommissioning", "Stuck"):
            return (f"the decommission of {op.pod} is not re-issued; if its node is LEAVING "
                    "Cassandra finishes it, and its pod stays until you lower the replicas")
        return f"{op.pod} had left the ring; lower the replicas to {op.to_replicas} by hand"

    # -- the cleanup after a scale-out ------------------------------------------------------
    def _cleanup_facts(self, call: StoreCall, op: OperationState
                       ) -> tuple[str | None, bool | None]:
        """The cleanup on the node being cleaned: what this process knows of the one it
        issued, and whether the node's compactions show one (read only when this process
        knows nothing: after a restart)."""
        pod = op.cleanup_pod() if op.phase == "CleaningUp" else None
        if pod is None:
            return None, None
        said = nodetool(call.port).cleanup_state(call.namespace, pod)
        if said is not None:
            return said, None
        return None, nodetool(call.port).cleanup_running(
            call.namespace, pod, call.spec.target.container, call.spec.target.nodetool)

    def _cleanup_effect(self, call: StoreCall, op: OperationState) -> OperationState:
        """Throttle the node's compactions to the migration rate (its own throttle kept in
        the status first, to put back), then issue its cleanup."""
        spec, port, ns = call.spec, call.port, call.namespace
        pod = op.cleanup_pod()
        assert pod is not None
        c, nt = spec.target.container, spec.target.nodetool
        if op.cleanup_restore_mibps is None:
            try:
                before = nodetool(port).compaction_throughput(ns, pod, c, nt)
            except ElastoreError as exc:
                before = None
                call.event("ThrottleFailed", f"the compaction throttle of {pod} could not be "
                                             f"read ({exc}); the cleanup runs at the node's "
                                             "own", True)
            if before is not None:
                op = replace(op, cleanup_restore_mibps=before)
                call.save(op)
        prev = call.status.get("migrationMiBps")
        rate = self.stream_mibps if self.stream_mibps is not None else (
            float(prev) if isinstance(prev, int | float) and not isinstance(prev, bool)
            else spec.max_migration_mibps)
        rate = min(max(rate, spec.min_migration_mibps), spec.max_migration_mibps)
        if op.cleanup_restore_mibps is not None:
            try:
                got = nodetool(port).set_compaction_throughput(ns, pod, c, nt, rate)
                op = replace(op, message=op.message + f" at {got:g} MiB/s")
            except ElastoreError as exc:
                call.event("ThrottleFailed", f"setcompactionthroughput on {pod}: {exc}", True)
        nodetool(port).start_cleanup(ns, pod, c, nt)
        call.event("CleanupStarted", op.message, False)
        return op
