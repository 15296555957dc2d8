"""The cass-operator (CassandraDatacenter) driver; the package's docstring says what a step does."""

from __future__ import annotations

from elastore.actuators.ports import (
    ClusterPort,
    DatacenterFacts,
    DatacenterPort,
    StatefulSetFacts,
)
from elastore.operator.spec import PolicySpec
from elastore.planner.stabilization import Recommendations
from elastore.stores.base import Advanced, Allowed, Begun, Kind, StoreCall, Target, Why, floor
from elastore.stores.cass_operator import machine
from elastore.stores.cassandra.nodes import CassandraNodes
from elastore.stores.operation import OperationState


def _port(port: ClusterPort) -> DatacenterPort:
    assert isinstance(port, DatacenterPort)  # refused() said so before any call
    return port


class DatacenterDriver(CassandraNodes):

    def refused(self, spec: PolicySpec, port: ClusterPort, allowed: Allowed) -> Why | None:
        nodetool = super().refused(spec, port, allowed)
        if nodetool is not None:
            return nodetool
        if not isinstance(port, DatacenterPort):
            return ("TargetNotSupported", "this operator's cluster port cannot read "
                                          "CassandraDatacenters")
        return None

    def read(self, port: ClusterPort, namespace: str, spec: PolicySpec) -> Target | None:
        d = _port(port).datacenter(namespace, spec.target.name)
        if d is None:
            return None
        sizes = StatefulSetFacts(d.name, d.size, d.ready_pods, len(d.pods), None,
                                 d.volume_bytes, d.managed, d.owner)
        up, down = machine.step_sizes(d.size, len(d.racks))
        return Target(sizes, d, {"datacenter": {
            "racks": list(d.racks), "size": d.size, "readyPods": d.ready_pods, "stepUp": up,
            "stepDown": down, "cassOperator": machine.busy(d) or "Ready"}})

    def missing(self, namespace: str, spec: PolicySpec) -> str:
        return (f"CassandraDatacenter {namespace}/{spec.target.name} not found (is "
                "cass-operator's CRD installed?)")

    def contenders(self, port: ClusterPort, namespace: str, target: Target,
                   policy: str) -> list[str]:
        return _port(port).datacenter_contenders(namespace, target.sizes.name, policy)

    def pods(self, spec: PolicySpec, target: Target, to_replicas: int | None) -> list[str]:
        assert target.datacenter is not None
        return list(target.datacenter.pods)  # cass-operator's, as its StatefulSets have them

    def pods_now(self, call: StoreCall) -> list[str]:
        return self.pods(call.spec, call.target, None)

    def _dc(self, call: StoreCall) -> DatacenterFacts:
        dc = call.target.datacenter
        assert dc is not None
        return dc

    def step_to(self, call: StoreCall, wanted: int, user_named: bool,
                recent_desired: Recommendations) -> int | Why | None:
        """Rack-balanced steps: up to the next multiple of the racks as soon as the plan
        wants more; down only once the plan wants the next multiple below (or less)."""
        dc, size = self._dc(call), call.sts.spec_replicas
        up, down = machine.step_sizes(size, len(dc.racks))
        if wanted > size:
            return up
        held = None if user_named else machine.step_down_held(
            wanted, size, down, recent_desired, call.now, call.spec.stabilization_s)
        if held is None:
            return down
        return "RackStep", f"{held} ({len(dc.racks)} rack(s))"

    def holds(self, call: StoreCall, kind: Kind, step_to: int | None) -> Why | None:
        dc = self._dc(call)
        busy = machine.busy(dc)
        if busy is not None:
            return "DatacenterBusy", f"the plan wants {step_to} replicas; no step while {busy}"
        held = self.repair_hold(call, kind, list(dc.pods))
        return None if held is None else ("RepairRunning", held)

    def refusal(self, call: StoreCall, kind: Kind, step_to: int | None) -> str | None:
        """A datacenter's step; a scale-in's ring is read through its first pod, for every
        node the step removes."""
        spec, sts, dc = call.spec, call.sts, self._dc(call)
        assert step_to is not None
        racks = f"{sts.spec_replicas} -> {step_to} (a rack-balanced step)"
        if kind == "ScaleOut":
            if step_to > spec.max_replicas:
                return f"{racks} is above replicas.max {spec.max_replicas}"
            return None
        low = floor(spec)
        if step_to < low:
            return f"{racks}: never below max(replicas.min, replicationFactor) = {low}"
        return self.ring_refusal(call, dc.pods[0] if dc.pods else "",
                                 sts.spec_replicas - step_to)

    def begin(self, call: StoreCall, kind: Kind, step_to: int | None) -> Begun:
        spec, sts, dc = call.spec, call.sts, self._dc(call)
        assert step_to is not None
        expected = machine.expected_step_seconds(
            kind, sts.spec_replicas, step_to, call.data_bytes(),
            call.migration_mibps(), spec.node_overhead_s)
        new = machine.start(kind, spec.target.name, sts.spec_replicas, step_to,
                                max(call.now, call.clock()), expected)
        what = (f"{sts.spec_replicas} -> {step_to} replicas (CassandraDatacenter "
                f"{spec.target.name}, {len(dc.racks)} rack(s))")
        return Begun(new, what, after=f"expected to take {expected:.0f} s")

    def check_identity(self, op: OperationState, call: StoreCall, floor: int) -> None:
        machine.check_identity(op, call.spec.target.name, len(self._dc(call).racks), floor)

    def advance(self, call: StoreCall, op: OperationState) -> Advanced:
        dc = self._dc(call)
        unfit = None
        if op.kind == "ScaleIn" and op.phase == "Resizing" and dc.size == op.from_replicas \
                and not call.ring_checked:
            # read from the status: the size is lowered only on the checks a new step has
            # (cass-operator's own conditions, the floor, the ring and the space)
            unfit = machine.busy(dc) or self.refusal(call, op.kind, op.to_replicas)
        new, effect, done = machine.advance(op, dc, call.now, unfit)
        return Advanced(new, effect, done)

    def before_effect(self, call: StoreCall, op: OperationState, new: Advanced) -> str | None:
        return None  # the checks are in advance(): cass-operator decommissions, not elastore

    def apply(self, call: StoreCall, op: OperationState, new: Advanced) -> OperationState:
        if new.effect == "resize":
            _port(call.port).resize_datacenter(call.namespace, call.spec.target.name,
                                               new.operation.to_replicas,
                                               expect=op.from_replicas)
        return new.operation

    def stopped(self, call: StoreCall, op: OperationState) -> None:
        return None

    def supersedable(self, op: OperationState) -> bool:
        return False

    def abort_left(self, call: StoreCall, op: OperationState) -> str:
        return (f"spec.size stays {self._dc(call).size}: cass-operator carries on with it; "
                "set it back by hand if that is not wanted")
