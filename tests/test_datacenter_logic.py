"""A cass-operator datacenter's resize as elastore decides it: the rack-balanced step, the
multi-node migration-time model, the checks before a step, and the state machine that
follows cass-operator (elastore.stores.cass_operator.machine,
elastore.stores.cassandra.ring). Pure: the facts are the ones cass-operator's status and
pods carry (k8ssandra/cass-operator v1.22.4); the real CRD on a real API server is
test_datacenter_k8s.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from elastore.actuators.nodetool import Replication, Ring, RingNode
from elastore.actuators.ports import DatacenterFacts
from elastore.errors import ElastoreError
from elastore.sim.engine import Cluster
from elastore.sim.kube import SimulatedKube
from elastore.stores.cass_operator import machine as dco
from elastore.stores.cassandra.ring import decommission_refusal
from elastore.stores.operation import expected_seconds
from elastore.units import GIB

READY = DatacenterFacts(name="dc1", size=3, racks=("r1", "r2", "r3"), generation=4,
                        observed_generation=4, progress="Ready",
                        conditions={"Ready": "True", "ScalingUp": "False",
                                    "ScalingDown": "False"},
                        pods=("c-dc1-r1-sts-0", "c-dc1-r2-sts-0", "c-dc1-r3-sts-0"),
                        ready_pods=3, volume_bytes=100 * GIB, managed=True)


def test_datacenter_steps_are_multiples_of_its_racks() -> None:
    assert dco.step_sizes(3, 3) == (6, 0)
    assert dco.step_sizes(6, 3) == (9, 3)
    assert dco.step_sizes(4, 3) == (6, 3)  # off the grid (set by hand): onto it
    assert dco.step_sizes(5, 1) == (6, 4)
    assert dco.step_sizes(5, 0) == (6, 4)  # no racks listed: cass-operator's one rack


def test_a_step_of_several_nodes_takes_their_serial_migrations() -> None:
    """cass-operator moves a step's nodes one at a time: 3 -> 6 is the joins of a 4th, a
    5th and a 6th node, each receiving its share of the data at the rate in force."""
    data, rate, over = 30 * GIB, 8.0, 60.0
    got = dco.expected_step_seconds("ScaleOut", 3, 6, data, rate, over)
    want = sum(expected_seconds("ScaleOut", n, data, rate, over) for n in (3, 4, 5))
    assert got == pytest.approx(want)
    assert got > 3 * over + data / 6 / (rate * 2**20)  # more than three small shares
    down = dco.expected_step_seconds("ScaleIn", 6, 3, data, rate, over)
    assert down == pytest.approx(sum(expected_seconds("ScaleIn", n, data, rate, over)
                                     for n in (6, 5, 4)))


@pytest.mark.parametrize(("change", "says"), [
    (dict(observed_generation=3), "not yet reconciled generation 4"),
    (dict(progress="Updating"), "cassandraOperatorProgress is 'Updating'"),
    (dict(progress=""), "is 'absent'"),
    (dict(conditions={"Ready": "True", "ScalingUp": "True"}), "reports ScalingUp"),
    (dict(conditions={"Ready": "True", "RollingRestart": "True"}), "RollingRestart"),
    (dict(conditions={"Ready": "False"}), "Ready condition is not True"),
    (dict(decommissioning=("c-dc1-r3-sts-0",)), "c-dc1-r3-sts-0 being decommissioned"),
    (dict(ready_pods=2), "2 of 3 pods ready"),
])
def test_no_step_while_cass_operator_reports_work(change: dict[str, object], says: str
                                                  ) -> None:
    assert dco.busy(READY) is None
    got = dco.busy(replace(READY, **change))  # type: ignore[arg-type]
    assert got is not None and says in got


def test_a_scale_out_resizes_once_then_follows_cass_operator_to_the_end() -> None:
    op = dco.start("ScaleOut", "dc1", 3, 6, 1000.0, 600.0)
    assert (op.phase, op.pod, op.to_replicas) == ("Resizing", "CassandraDatacenter/dc1", 6)
    dco.check_identity(op, "dc1", 3)
    op, effect, done = dco.advance(op, READY, 1001.0)
    assert (op.phase, effect, done) == ("Resizing", "resize", False)
    # the patch landed: generation 5, cass-operator not there yet
    patched = replace(READY, size=6, generation=5)
    op, effect, done = dco.advance(op, patched, 1002.0)
    assert (op.phase, effect, done) == ("Following", "none", False)
    working = replace(patched, progress="Updating",
                      conditions={"Ready": "True", "ScalingUp": "True"},
                      pods=(*READY.pods, "c-dc1-r1-sts-1"), ready_pods=3)
    for facts in (patched, working, replace(working, conditions={"Ready": "True"},
                                            progress="Ready")):
        op, effect, done = dco.advance(op, facts, 1100.0)
        assert (op.phase, effect, done) == ("Following", "none", False), op.message
    six = tuple(f"c-dc1-r{r}-sts-{k}" for r in (1, 2, 3) for k in (0, 1))
    finished = replace(patched, observed_generation=5, pods=six, ready_pods=6)
    op, effect, done = dco.advance(op, finished, 1200.0)
    assert (op.phase, effect, done) == ("Done", "none", True)


def test_a_scale_in_waits_for_every_decommission_cass_operator_runs() -> None:
    six = tuple(f"c-dc1-r{r}-sts-{k}" for r in (1, 2, 3) for k in (0, 1))
    at6 = replace(READY, size=6, pods=six, ready_pods=6)
    op = dco.start("ScaleIn", "dc1", 6, 3, 0.0, 900.0)
    dco.check_identity(op, "dc1", 3)
    op, effect, _ = dco.advance(op, at6, 1.0)
    assert effect == "resize"
    leaving = replace(at6, size=3, generation=5, progress="Updating",
                      conditions={"Ready": "True", "ScalingDown": "True"},
                      decommissioning=("c-dc1-r1-sts-1",))
    op, effect, done = dco.advance(op, leaving, 2.0)
    assert (op.phase, done) == ("Following", False)
    op, effect, done = dco.advance(op, leaving, 3.0)
    assert "ScalingDown" in op.message and not done
    gone = replace(READY, generation=5, observed_generation=5)
    op, effect, done = dco.advance(op, gone, 4.0)
    assert (op.phase, done) == ("Done", True)


def test_someone_elses_size_is_drift_and_the_deadline_is_stuck() -> None:
    op = dco.start("ScaleOut", "dc1", 3, 6, 0.0, 100.0)
    new, effect, done = dco.advance(op, replace(READY, size=4), 1.0)
    assert effect == "conflict" and "drift" in new.message and not done
    following = replace(op, phase="Following")
    new, effect, _ = dco.advance(following, READY, 1.0)  # back to 3 after the resize
    assert effect == "conflict"
    late = following.deadline_s + 1  # type: ignore[operator]
    new, effect, done = dco.advance(following, replace(READY, size=6, generation=5), late)
    assert (new.phase, effect, done) == ("Stuck", "stuck", False)
    assert dco.advance(new, READY, late + 1)[1] == "none"  # a human decides


def test_an_operation_that_is_not_this_datacenters_step_is_refused() -> None:
    op = dco.start("ScaleOut", "dc1", 3, 6, 0.0, 100.0)
    with pytest.raises(ElastoreError, match="not this datacenter's step"):
        dco.check_identity(replace(op, to_replicas=9), "dc1", 3)
    with pytest.raises(ElastoreError, match="names"):
        dco.check_identity(op, "dc2", 3)
    with pytest.raises(ElastoreError, match="not this datacenter's step"):
        dco.check_identity(op, "dc1", 1)  # one rack: 3 -> 4
    with pytest.raises(ElastoreError):
        dco.start("ScaleIn", "dc1", 3, 6, 0.0, 1.0)


def _ring(loads_gib: list[float], rf: int) -> Ring:
    nodes = tuple(RingNode(state="UN", address=f"10.0.0.{k}", load_bytes=x * GIB,
                           host_id=f"h{k}", dc="dc1") for k, x in enumerate(loads_gib))
    return Ring(nodes=nodes, self_id="h0",
                keyspaces={"shop": Replication("NetworkTopologyStrategy", {"dc1": rf})})


def test_a_step_down_of_several_nodes_checks_replication_and_space_for_all_of_them() -> None:
    six = _ring([20.0] * 6, rf=3)
    assert decommission_refusal(six, 100 * GIB, 0.2, 0.1) is None
    assert decommission_refusal(six, 100 * GIB, 0.2, 0.1, leaving=3) is None
    refused = decommission_refusal(six, 100 * GIB, 0.2, 0.1, leaving=4)
    assert refused is not None and "RF 3 in dc1 and 2 node(s)" in refused
    # 3 of 6 nodes at 40 GiB leave: 120 GiB over 3 -> 40 + 40 each, +10 %: 88 > 80
    full = _ring([40.0] * 6, rf=3)
    assert decommission_refusal(full, 100 * GIB, 0.2, 0.1, leaving=1) is None
    refused = decommission_refusal(full, 100 * GIB, 0.2, 0.1, leaving=3)
    assert refused is not None and "free space" in refused and "3 leaving nodes" in refused


def test_a_datacenter_steps_down_only_when_the_forecast_fits_the_smaller_size() -> None:
    """The planner plans one node at a time: 6 -> 5 now. The step goes to 3 only when the
    forecast's need over the stabilization window (its raw recommendations) fits in 3."""
    recent = ((100.0, 5), (130.0, 3))
    assert dco.step_down_held(5, 6, 3, recent, 140.0, 60.0) is not None  # 5 seen at 100
    held = dco.step_down_held(5, 6, 3, recent, 140.0, 60.0)
    assert held is not None and "needs 5" in held and "rack-balanced size 3" in held
    assert dco.step_down_held(5, 6, 3, recent, 170.0, 60.0) is None  # 5 aged out
    assert dco.step_down_held(6, 6, 3, recent, 170.0, 60.0) is None  # nothing wanted
    assert dco.step_down_held(7, 6, 3, recent, 170.0, 60.0) == "the plan wants more"
    assert dco.step_down_held(5, 6, 3, (), 170.0, 60.0) is not None  # nothing known: hold
    # a window of 0: the newest recommendation alone
    assert dco.step_down_held(5, 6, 3, ((170.0, 3),), 170.0, 0.0) is None
    assert dco.step_down_held(5, 6, 3, ((170.0, 4),), 170.0, 0.0) is not None


def test_a_datacenter_policy_reads_the_management_api_of_its_own_pods() -> None:
    """The default preset for the kind, and the pods the queries keep to: cass-operator's
    <cluster>-<datacenter>-<rack>-sts-<n> in the policy's namespace."""
    from elastore.operator.spec import parse

    spec = parse({"target": {"kind": "CassandraDatacenter", "name": "dc1",
                             "replicationFactor": 3},
                  "replicas": {"min": 3, "max": 9}, "slo": {"latencyMs": 50},
                  "metrics": {"prometheus": {"url": "http://127.0.0.1:9090"}}})
    assert spec.prometheus is not None and spec.prometheus.preset == "management-api"
    q = spec.prometheus.query("readRps", "shop", "dc1")
    assert 'pod=~".+-dc1-.+-sts-[0-9]+"' in q and 'namespace="shop"' in q, q
    assert "org_apache_cassandra_metrics_client_request_latency" in q
    import re

    pods = re.compile(".+-dc1-.+-sts-[0-9]+")
    assert pods.fullmatch("c1-dc1-r1-sts-0") and pods.fullmatch("my-cluster-dc1-rack-a-sts-12")
    assert not pods.fullmatch("c1-dc2-r1-sts-0") and not pods.fullmatch("dc1-0")


class _DatacenterKube(SimulatedKube):
    """The simulated cluster as a cass-operator datacenter of three racks: its pods are the
    simulator's nodes, its ``spec.size`` is kept here and only recorded when changed."""

    def __init__(self, nodes: int, gib_each: float) -> None:
        super().__init__(Cluster.balanced(nodes, nodes * gib_each * GIB, boot_s=30.0), "shop",
                         "db", volume_bytes=100 * GIB)
        self.size = nodes

    def datacenter(self, ns: str, name: str) -> DatacenterFacts | None:
        pods = tuple(f"db-{k}" for k in range(self.size))
        return replace(READY, size=self.size, pods=pods, ready_pods=self.size, generation=1,
                       observed_generation=1, volume_bytes=self.volume_bytes)

    def resize_datacenter(self, ns: str, name: str, size: int, expect: int) -> None:
        self.calls.append((self.now_s, f"resize {size}"))
        self.size = size

    def datacenter_contenders(self, ns: str, name: str, policy: str) -> list[str]:
        return []


@pytest.mark.parametrize(("nodes", "gib_each", "to", "says"), [
    # 3 of 6 nodes at 45 GiB leave: 90 GiB on each left, above spec.storage's budget (80 %
    # of 100 GiB with Unified compaction)
    (6, 45.0, 3, "free space"),
    (3, 10.0, 0, "below max(replicas.min, replicationFactor) = 3"),
])
def test_forged_datacenter_resizing_lowers_no_size(nodes: int, gib_each: float, to: int,
                                                   says: str) -> None:
    """A ScaleIn written straight into the status at phase Resizing (a rack-balanced step,
    so its identity passes) used to set spec.size at once: no floor, no ring, no space
    check. Now the checks a new step has are made first: Conflict/StatusRejected, size
    unchanged."""
    from elastore.models import ModelSet
    from elastore.operator.runner import Runner
    from elastore.resources import builtin_model
    from elastore.sim.kube import MemoryPolicies, TraceMetrics

    kube = _DatacenterKube(nodes, gib_each)
    policies = MemoryPolicies.of("shop", "orders", {
        "target": {"kind": "CassandraDatacenter", "name": "dc1", "replicationFactor": 3},
        "replicas": {"min": 3, "max": 9}, "slo": {"latencyMs": 30}, "mode": "Enforce",
        "controlPeriod": "60s", "capacityModel": {"learn": False},
        "prediction": {"method": "persistence", "horizon": "60s", "step": "60s"},
        "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}}})
    policies.body["metadata"]["annotations"] = {"elastore.io/paused": "true"}
    metrics = TraceMetrics(lambda t: 1000.0, 0.95, kube.cluster.total_bytes, -3600.0, 1e9)
    ms = ModelSet.load(builtin_model("placeholder"))
    runner = Runner("shop", "orders", policies, kube, lambda _s: ms, clock=lambda: 0.0,
                    source=lambda _s, _n: metrics)
    policies.body["status"]["operation"] = {
        "kind": "ScaleIn", "fromReplicas": nodes, "toReplicas": to,
        "pod": "CassandraDatacenter/dc1", "phase": "Resizing", "startedEpoch": 0.0,
        "message": "forged", "id": "forged"}
    runner.tick()
    runner.tick()
    assert kube.size == nodes and not [c for _, c in kube.calls if c.startswith("resize")]
    conflict = next(c for c in policies.status["conditions"] if c["type"] == "Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "StatusRejected"), conflict
    assert says in conflict["message"]
    assert "StatusRejected" in [r for r, _, w in policies.events if w]
