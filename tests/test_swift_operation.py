"""The Swift node step's state machine and the pure readers it rests on (issue 20): what
``du`` and ``swift-ring-builder`` print, what a ring change moves and how long that takes,
and the spec of a Swift target. No cluster: plain data in, plain data out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from elastore.actuators.swiftring import Misplaced, moves, parse_devices, parse_du
from elastore.errors import ElastoreError, MetricsError
from elastore.operator.spec import SpecError, parse
from elastore.stores import operation
from elastore.stores.swift.machine import SwiftFacts, advance

DONE = {"object": Misplaced(0, 0, 0), "container": Misplaced(0, 0, 0),
        "account": Misplaced(0, 0, 0)}
BUSY = {**DONE, "object": Misplaced(12, 3, 5 * 2**20)}


def facts(**kw: Any) -> SwiftFacts:
    base: dict[str, Any] = dict(spec_replicas=3, pod_exists=True, pod_ready=True,
                                pod_ip="10.0.0.9", weight=None, partitions=None, lagging=(),
                                progress=DONE)
    base.update(kw)
    return SwiftFacts(**base)


def out_op() -> operation.OperationState:
    return operation.start("ScaleOut", "swift", 3, 1000.0, 300.0, store="swift")


def in_op() -> operation.OperationState:
    return operation.start("ScaleIn", "swift", 4, 1000.0, 300.0, "data", store="swift")


def test_scale_out_adds_the_device_once_the_pod_runs_then_waits_for_replication() -> None:
    op = out_op()
    assert op.pod == "swift-3" and op.phase == "Scaling"
    op, eff, done = advance(op, facts(), 1001)
    assert eff == "scale" and not done
    op, eff, _ = advance(op, facts(spec_replicas=4, pod_ready=False), 1002)
    assert eff == "none" and op.phase == "Scaling"
    # ready but no IP yet: no device to add
    op, eff, _ = advance(op, facts(spec_replicas=4, pod_ip=None), 1003)
    assert eff == "none" and op.phase == "Scaling"
    op, eff, _ = advance(op, facts(spec_replicas=4), 1004)
    assert (op.phase, eff) == ("Joining", "ring-add")
    # a restart before the ring change was written: it is made again (idempotent)
    assert advance(op, facts(spec_replicas=4), 1005)[1] == "ring-add"
    # in the rings: the pods lag, then data moves, then done
    st = facts(spec_replicas=4, weight=100.0, partitions=128, lagging=("swift-1",))
    op2, eff, done = advance(op, st, 1006)
    assert eff == "none" and not done and "swift-1" in op2.message
    op2, eff, done = advance(op, replace(st, lagging=(), progress=BUSY), 1007)
    assert eff == "none" and not done and "12 partition(s) on handoffs" in op2.message
    op2, eff, done = advance(op, replace(st, lagging=None, why="exec failed"), 1008)
    assert eff == "none" and not done and "exec failed" in op2.message
    op2, eff, done = advance(op, replace(st, lagging=(), progress=DONE), 1009)
    assert done and op2.phase == "Done"


def test_scale_in_drains_then_removes_then_lowers_replicas() -> None:
    op = in_op()
    assert (op.pod, op.phase) == ("swift-3", "Draining")
    st = facts(spec_replicas=4, weight=100.0, partitions=96)
    op, eff, _ = advance(op, st, 1001)
    assert eff == "ring-drain" and op.phase == "Draining"
    # weight 0: nothing more until the rings reach the pods and the data has moved
    st = replace(st, weight=0.0, partitions=0, lagging=("swift-0",))
    assert advance(op, st, 1002)[1] == "none"
    assert advance(op, replace(st, lagging=(), progress=BUSY), 1003)[1] == "none"
    # a partition still assigned (one rebalance moves one replica): rebalanced again, but
    # only once the previous change has finished moving
    assert advance(op, replace(st, lagging=(), partitions=4), 1004)[1] == "ring-drain"
    op, eff, _ = advance(op, replace(st, lagging=()), 1005)
    assert (op.phase, eff) == ("Removing", "ring-remove")
    assert op.to_replicas == 3
    op2, eff, _ = advance(op, replace(st, weight=None, partitions=None, lagging=("swift-2",)),
                          1006)
    assert (op2.phase, eff) == ("Removing", "none")
    op, eff, _ = advance(op, replace(st, weight=None, partitions=None, lagging=()), 1007)
    assert (op.phase, eff) == ("Scaling", "scale")
    op, eff, _ = advance(op, facts(spec_replicas=3, pod_exists=True), 1008)
    assert (op.phase, eff) == ("Scaling", "none")
    op, eff, _ = advance(op, facts(spec_replicas=3, pod_exists=False), 1009)
    assert op.phase == "Cleanup"
    op, eff, done = advance(op, facts(spec_replicas=3, pod_exists=False, pvc_exists=True),
                            1010)
    assert done and "retained" in op.message and eff == "none"


def test_hazard_a_pod_back_at_a_new_ip_has_its_device_readdressed() -> None:
    """Issue 35, finding 5: the rings hold the pod's device at its old address (found by
    the pod's name): in every phase with a device the step readdresses it before anything
    else, and never adds a second. A scale-in whose pod has no device while the rings hold
    devices at addresses no pod has waits instead of lowering the replicas."""
    joining = replace(out_op(), phase="Joining")
    moved = facts(spec_replicas=4, weight=100.0, partitions=128, device_ip="10.0.0.4")
    op, eff, done = advance(joining, moved, 1001)
    assert (op.phase, eff, done) == ("Joining", "ring-readdress", False)
    assert "10.0.0.4" in op.message and "10.0.0.9" in op.message
    draining = in_op()
    op, eff, _ = advance(draining, replace(moved, weight=0.0, partitions=0), 1002)
    assert (op.phase, eff) == ("Draining", "ring-readdress")
    # no device for the pod, one at an address no pod has: no blind scale-down
    lost = facts(spec_replicas=4, weight=None, partitions=None, unknown_ips=("10.0.0.4",))
    op, eff, _ = advance(draining, lost, 1003)
    assert (op.phase, eff) == ("Draining", "none") and "10.0.0.4" in op.message
    assert advance(draining, replace(lost, unknown_ips=()), 1004)[1] == "scale"


def test_drift_and_a_vanished_pod_touch_nothing() -> None:
    op = in_op()
    # someone scaled the StatefulSet while it drains: touch nothing
    _, eff, done = advance(op, facts(spec_replicas=5, weight=0.0), 1001)
    assert eff == "conflict" and not done
    # the pod went before its data did: never lower the replicas blind
    with pytest.raises(ElastoreError, match="before its data left"):
        advance(op, facts(spec_replicas=4, pod_exists=False), 1002)
    # past the deadline: Stuck, and nothing more
    late = replace(op, deadline_s=1000.5)
    stuck, eff, _ = advance(late, facts(spec_replicas=4, weight=0.0), 1002)
    assert (stuck.phase, eff) == ("Stuck", "stuck")
    assert advance(stuck, facts(spec_replicas=4), 1003)[1] == "none"


def test_the_phases_allow_the_sizes_of_their_step() -> None:
    op = in_op()
    assert operation.allowed_replicas(op) == (4,)
    assert operation.allowed_replicas(replace(op, phase="Removing")) == (4,)
    assert operation.allowed_replicas(replace(op, phase="Scaling")) == (4, 3)
    # the identity rules are the Cassandra step's: the pod follows from the size
    operation.check_identity(op, "swift", "data")
    with pytest.raises(ElastoreError):
        operation.check_identity(replace(op, pod="swift-0"), "swift", "data")


DU = """4\t/srv/node/d1/objects/17/abc
812\t/srv/node/d1/objects/17
8\t/srv/node/d1/objects/203
4\t/srv/node/d1/objects
12\t/srv/node/d1/tmp/x
4\t/srv/node/d1/containers/9
16\t/srv/node/d1/accounts/44
20\t/srv/node/d1/async_pending/1
2\t/srv/node/old/objects/5
900\t/srv/node/d1
904\t/srv/node
"""


def test_du_gives_each_devices_partitions_in_bytes() -> None:
    got = parse_du(DU, "/srv/node")
    assert got == {"d1": {"object": {17: 812 * 1024, 203: 8 * 1024},
                          "container": {9: 4096}, "account": {44: 16 * 1024}},
                   "old": {"object": {5: 2048}}}
    assert parse_du(DU, "/srv/other") == {}
    with pytest.raises(ElastoreError, match="unreadable du line"):
        parse_du("x\t/srv/node/d1/objects/3\n", "/srv/node")


BUILDER = """object.builder, build version 4, id 69c0f246523540c981f67de7596a4156
256 partitions, 2.000000 replicas, 1 regions, 3 zones, 3 devices, 0.39 balance, 0.00 dispersion
Devices:   id region zone ip address:port replication ip:port  name weight partitions balance
            0      1    1   10.0.0.1:6200       10.0.0.1:6200    d1 100.00        171    0.20
            2      1    3   10.0.0.3:6200       10.0.0.3:6200    d1   0.00          0    0.00
"""


def test_the_builders_device_table() -> None:
    assert parse_devices(BUILDER) == {"10.0.0.1/d1": (100.0, 171), "10.0.0.3/d1": (0.0, 0)}


def test_a_ring_change_moves_the_partitions_a_device_gains() -> None:
    before = {0: ["a/d", "b/d"], 1: ["b/d", "c/d"], 2: ["c/d", "a/d"]}
    # d joins: it takes 1 from b and 2 from c; each partition's old holders push it
    after = {0: ["a/d", "b/d"], 1: ["d/d", "c/d"], 2: ["d/d", "a/d"]}
    m = moves(before, after, {0: 100, 1: 10 * 2**20, 2: 30 * 2**20})
    assert (m.partitions, m.total_bytes) == (2, 40 * 2**20)
    # c sends half of 1 and half of 2 (20 MiB), a half of 2, b half of 1
    assert m.max_receive_bytes == 40 * 2**20 and m.max_send_bytes == 20 * 2**20
    # the busiest node (d receives 40 MiB) at 8 MiB/s, plus the replicators' passes
    assert m.seconds(8.0, 60.0) == pytest.approx(60 + 5.0)
    # a drain: d's replicas go to others, pushed by d and the other holder alike
    drained = {0: ["a/d", "b/d"], 1: ["b/d", "c/d"], 2: ["c/d", "a/d"]}
    m = moves(after, drained, {1: 10 * 2**20, 2: 30 * 2**20})
    assert m.max_receive_bytes == 30 * 2**20 and m.max_send_bytes == 20 * 2**20
    assert moves(before, before, {0: 1}).partitions == 0
    with pytest.raises(ElastoreError):
        m.seconds(0.0, 60.0)


def spec(**target: Any) -> dict[str, Any]:
    return {"target": {"name": "swift", "replicationFactor": 2, "store": "swift", **target},
            "replicas": {"min": 3, "max": 5}, "slo": {"latencyMs": 100},
            "metrics": {"prometheus": {"url": "http://p:9090"}}}


def test_a_swift_targets_spec() -> None:
    s = parse(spec(swift={"ringConfigMap": "rings"}))
    assert s.target.container == "swift" and s.target.swift.ring_dir == "/etc/swift"
    assert s.target.swift.devices_dir == "/srv/node" and s.target.swift.device == "d1"
    assert s.prometheus is not None and s.prometheus.preset == "swift-statsd"
    assert s.client_ports == (6200, 6201, 6202) and s.storage_ports == (873,)
    # the PromQL of Swift's StatsD, PUTs counted once per client write
    assert "/ 2" in s.prometheus.query("writeRps", "store", "swift")
    assert not s.prometheus.defines("dataBytes")
    enforce = {**spec(), "mode": "Enforce"}
    with pytest.raises(SpecError, match="ringConfigMap"):
        parse(enforce)
    for bad, where in (({"ringDir": "etc/swift"}, "ringDir"),
                       ({"devicesDir": "/srv/../etc"}, "devicesDir"),
                       ({"device": "d1;rm"}, "device"),
                       ({"execPrefix": ["sh -c"]}, "execPrefix"),
                       ({"weight": 0}, "weight"),
                       ({"ringConfigMap": "Bad_Name"}, "ringConfigMap")):
        with pytest.raises(SpecError, match=where):
            parse(spec(swift={"ringConfigMap": "rings", **bad}))
    with pytest.raises(SpecError, match="store: swift"):
        parse({**spec(swift={}), "target": {"name": "c", "replicationFactor": 3,
                                            "swift": {}}})


@pytest.mark.parametrize(("phase", "weight", "parts", "would"), [
    ("Removing", 100.0, 96, "ring-remove"),  # never drained
    ("Removing", 0.0, 7, "ring-remove"),  # weight 0, still assigned partitions
    ("Scaling", 100.0, 96, "scale"),  # still in the rings: its pod would go with its data
    ("Scaling", 0.0, 3, "scale"),
])
def test_forged_swift_removal_of_a_device_that_still_holds_partitions(
        phase: str, weight: float, parts: int, would: str) -> None:
    """A Swift ScaleIn written into the status past its drain: the rings the pods have
    mounted still give the device partitions. It used to remove the device (or lower the
    replicas) at once; now the ``reject`` effect (the runner: Conflict/StatusRejected), and
    nothing is touched."""
    op = replace(in_op(), phase=phase)
    st = facts(spec_replicas=4, weight=weight, partitions=parts)
    new, eff, done = advance(op, st, 1001, pvc_policy="Delete")
    assert (eff, done) == ("reject", False), (eff, new.message, would)
    assert f"{parts} partition(s)" in new.message
    # drained and out of the mounted rings: the step goes on
    gone = facts(spec_replicas=4, weight=None, partitions=None)
    assert advance(op, gone, 1002)[1] == "scale"
    assert advance(replace(op, phase="Removing"), replace(gone, lagging=("swift-1",)),
                   1003)[1] == "none"  # a pod still has the rings with the device


class _RecordingPort:
    """A Swift target's ports that record every call and answer none (the step under test
    must need nothing from them)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            self.calls.append(name)
            raise ElastoreError(f"{name}: not expected in this test")
        return call


@pytest.mark.parametrize("phase", ["Removing", "Scaling"])
def test_forged_swift_removal_the_runner_touches_nothing(monkeypatch: pytest.MonkeyPatch,
                                                         phase: str) -> None:
    """The runner's side of the forged Swift removal: the ``reject`` effect is the
    Conflict condition (StatusRejected) with a Warning Event, and no ring change, scale,
    mark or deletion is even attempted."""
    from elastore.actuators.ports import StatefulSetFacts
    from elastore.operator import stepping
    from elastore.operator.runner import Runner
    from elastore.operator.tick import Tick as _Tick
    from elastore.sim.kube import MemoryPolicies
    from elastore.stores.base import Target
    from elastore.stores.swift.driver import SwiftDriver

    body = {**spec(swift={"ringConfigMap": "rings"}), "mode": "Enforce"}
    policies = MemoryPolicies.of("store", "objects", body)
    port = _RecordingPort()
    runner = Runner("store", "objects", policies, port, lambda _s: None)  # type: ignore[arg-type]
    op = replace(in_op(), phase=phase)
    sts = StatefulSetFacts("swift", 4, 4, 4, "data", None, managed=True)
    t = _Tick(body=policies.body, now=1001.0, status={"operation": op.to_status()}, conds=[],
              gen=1, spec=parse(body), sts=sts, target=Target(sts), driver=SwiftDriver())
    monkeypatch.setattr(t.driver, "_facts", lambda _call, _op: facts(
        spec_replicas=4, weight=100.0, partitions=96))
    assert stepping.continue_operation(runner, t) is True  # still "running": held, not dropped
    assert t.operation is not None and replace(t.operation, id=op.id) == op
    assert port.calls == []
    assert t.blocked is not None and t.blocked[0] == "StatusRejected"
    conflict = next(c for c in t.conds if c["type"] == "Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "StatusRejected")
    assert "96 partition(s)" in conflict["message"]
    assert [r for r, _, w in policies.events if w] == ["StatusRejected"]


@pytest.mark.parametrize(("managed", "owner", "says"), [
    (False, None, "not labelled elastore.io/managed=true"),
    (True, "Deployment/other", "controlled by Deployment/other"),
])
def test_tenant_no_command_runs_in_a_target_that_did_not_opt_in(
        managed: bool, owner: str | None, says: str) -> None:
    """Issue 35, finding 7: a Recommend-mode Swift policy on any StatefulSet made the
    operator run du in every pod, every period, for the bytes Swift's exporters lack. Now
    nothing runs in the pods of a target that did not opt in (the decision says so: the
    bytes are missing, never 0); once it opts in, the same call reads them."""
    from elastore.actuators.ports import StatefulSetFacts
    from elastore.models import ModelSet
    from elastore.operator.policyloop import Memory
    from elastore.operator.runner import Runner
    from elastore.operator.tick import Tick as _Tick
    from elastore.resources import builtin_model
    from elastore.sim.kube import MemoryPolicies, TraceMetrics
    from elastore.stores.base import Target
    from elastore.stores.swift.driver import SwiftDriver

    body = {**spec(swift={"ringConfigMap": "rings"}), "mode": "Recommend"}
    policies = MemoryPolicies.of("store", "objects", body)
    port = _RecordingPort()
    metrics = TraceMetrics(lambda _t: 100.0, 0.95, lambda: float("nan"), -3600.0, 1e9)
    ms = ModelSet.load(builtin_model("placeholder"))
    runner = Runner("store", "objects", policies, port, lambda _s: ms,  # type: ignore[arg-type]
                    source=lambda _s, _ns: metrics)
    sts = StatefulSetFacts("swift", 4, 4, 4, "data", None, managed=managed, owner=owner)
    t = _Tick(body=policies.body, now=1001.0, status={}, conds=[], gen=1, spec=parse(body),
              sts=sts, target=Target(sts), driver=SwiftDriver())
    with pytest.raises(MetricsError, match=says):
        runner.period._decide(parse(body), 4, Memory(), 1001.0, None, {}, t)
    assert port.calls == []  # not one call into the pods
    opted = replace(t, sts=replace(sts, managed=True, owner=None))
    with pytest.raises(MetricsError, match="devices could not be read"):
        runner.period._decide(parse(body), 4, Memory(), 1001.0, None, {}, opted)
    assert port.calls  # opted in: the pods are read


def test_tenant_a_policys_paths_in_the_pods_are_the_installers() -> None:
    """...and every path it reads there is under a directory the installer allows
    (/etc/swift, /srv/node by default; `elastore operator run --pod-path`)."""
    from elastore.actuators.ports import SwiftPort
    from elastore.stores.base import Allowed, under
    from elastore.stores.swift.driver import SwiftDriver

    assert under("/srv/node", ("/srv/node",)) and under("/srv/node/d1", ("/srv/node",))
    assert not under("/srv/nodes", ("/srv/node",)) and not under("/srv", ("/srv/node",))
    assert not under("/srv/node/../../etc", ("/srv/node",))
    assert not under("/srv//node", ("/srv/node",))

    class Port(SwiftPort):  # a Swift port that is never called
        pass

    allowed = Allowed((("nodetool",),))
    ok = parse(spec(swift={"ringConfigMap": "rings"}))
    assert SwiftDriver().refused(ok, Port(), allowed) is None
    for where, path in (("ringDir", "/etc"), ("devicesDir", "/var/lib/secret"),
                        ("devicesDir", "/srv/nodes")):
        bad = parse(spec(swift={"ringConfigMap": "rings", where: path}))
        got = SwiftDriver().refused(bad, Port(), allowed)
        assert got is not None and got[0] == "PodPathNotAllowed" and path in got[1], got
    wider = Allowed((("nodetool",),), pod_paths=("/var/lib",))
    assert SwiftDriver().refused(parse(spec(swift={"ringConfigMap": "rings", "ringDir":
                                                    "/var/lib/swift", "devicesDir":
                                                    "/var/lib/node"})),
                                 Port(), wider) is None
