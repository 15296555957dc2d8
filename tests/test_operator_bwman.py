"""The operator runs BwMan (issue 16, item 2): ``spec.bandwidth.nodeMbit`` gives the planner
its link total, so ``spec.migration.policy`` changes decisions; each period's split of every
node's link is published in ``status.bandwidth`` for the node agent; and the stream throttle
reaches every pod that has not got it (new, restarted, all after an operator restart), one
call per pod. No cluster: the simulated StatefulSet behind the runner's ClusterPort."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml

from elastore.actuators.k8s import ExecResult, KubeActuator
from elastore.actuators.nodetool import stream_setting
from elastore.errors import ElastoreError
from elastore.models import ModelSet
from elastore.models.bandwidth import BandwidthModels
from elastore.operator import bandwidth, policyloop
from elastore.operator.metrics import Snapshot
from elastore.operator.runner import Runner
from elastore.operator.spec import MIN_NODE_MBIT, PolicySpec, SpecError, parse
from elastore.resources import builtin_model, crd_path
from elastore.sim.engine import Cluster
from elastore.sim.kube import MemoryPolicies, SimulatedKube, TraceMetrics
from elastore.units import GIB

NS, POLICY, STS = "shop", "orders", "db"
BASE: dict[str, Any] = {
    "target": {"name": STS, "replicationFactor": 3},
    "replicas": {"min": 3, "max": 8},
    "slo": {"latencyMs": 30},
    "mode": "Enforce",
    "controlPeriod": "60s",
    "prediction": {"method": "persistence", "horizon": "60s", "step": "60s"},
    "planner": {"mode": "Window", "lookahead": "2h"},
    "migration": {"nodeOverheadSeconds": 0},
    "scaleDown": {"stabilizationSeconds": 120},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
    "capacityModel": {"learn": False},  # the given model's split (learning has its own tests)
}
#: the keys of status.bandwidth (the node agent reads them)
BANDWIDTH_KEYS = {"nodeMbit", "source", "policy", "clientPorts", "storagePorts",
                  "forecastRpsPerNode", "clientMbit", "storageMbit", "streamMiBps", "pods",
                  "at", "reason"}


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(builtin_model("placeholder"))


def per_server(ms: ModelSet) -> float:
    return float(ms.capacity.capacity(0.95, 0, 0)) * 0.9


def spec_of(**kw: Any) -> dict[str, Any]:
    s = copy.deepcopy(BASE)
    for path, value in kw.items():
        node = s
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return s


# -- the planner: the policy decides when clients and migration do not both fit -------------
def snapshot(load_rps: float) -> Snapshot:
    return Snapshot(at_s=10_000.0, load_rps=load_rps, read_ratio=0.95,
                    data_bytes=30 * GIB, migration_mibps=0.0,
                    history_rps=np.full(200, load_rps), step_s=60.0)


def decide(ms: ModelSet, planner: str, policy: str, node_mbit: float | None,
           load_rps: float) -> tuple[PolicySpec, policyloop.Decision]:
    s = spec_of(planner__mode=planner, migration__policy=policy, mode="Recommend")
    if node_mbit is not None:
        s["bandwidth"] = {"nodeMbit": node_mbit}
    spec = parse(s)
    return spec, policyloop.decide(spec, snapshot(load_rps), 3, ms, policyloop.Memory())


@pytest.mark.parametrize("planner", ["Window", "Horizon"])
def test_bwman_policy_changes_the_decision_when_the_link_is_short(ms: ModelSet,
                                                                   planner: str) -> None:
    """Half a server's capacity per node: the clients need ~16 Mbit/s and f()'s migration
    rate ~140; a 40 Mbit/s link holds both only if one gives way. PreferClients slows the
    migration to what the clients leave; PreferMigration gives it the whole link."""
    load = 3 * 0.5 * float(ms.capacity.capacity(0.95, 0, 0))
    spec_c, clients = decide(ms, planner, "PreferClients", 40.0, load)
    spec_m, migration = decide(ms, planner, "PreferMigration", 40.0, load)
    assert policyloop.planner_config(spec_c).total_bandwidth_mbit == 40.0
    # the plan's migration rate: the split of the link, by the policy
    assert clients.migration_mibps < migration.migration_mibps < 24.0
    assert clients.plan.bandwidth is not None and migration.plan.bandwidth is not None
    assert clients.plan.bandwidth.clients_satisfied
    assert not clients.plan.bandwidth.migration_satisfied
    assert migration.plan.bandwidth.client_mbit < clients.plan.bandwidth.client_mbit
    assert "PreferClients gives clients" in clients.reason
    assert "PreferMigration gives migration" in migration.reason
    # and each node's split and stream throttle (the forecast per node, BwMan's headroom)
    sc = bandwidth.node_split(spec_c, clients, 3, 0.95, ms)
    sm = bandwidth.node_split(spec_m, migration, 3, 0.95, ms)
    assert sc.client_mbit > sm.client_mbit and sc.storage_mbit < sm.storage_mbit
    assert sc.stream_mibps < sm.stream_mibps
    for s in (sc, sm):
        assert s.client_mbit + s.storage_mbit == pytest.approx(40.0)
        assert s.forecast_rps_per_node == pytest.approx(load / 3)
    # the plain rate (no link total) is faster than either: nodeMbit is what slows it
    _, plain = decide(ms, planner, "PreferClients", None, load)
    assert plain.migration_mibps > migration.migration_mibps


@pytest.mark.parametrize("planner", ["Window", "Horizon"])
def test_bwman_without_node_mbit_both_policies_decide_the_same(ms: ModelSet,
                                                                planner: str) -> None:
    """The old behaviour, kept as the fallback: no link total, no split; the policy has
    nothing to decide."""
    for frac in (0.5, 1.0):
        load = 3 * frac * float(ms.capacity.capacity(0.95, 0, 0))
        _, a = decide(ms, planner, "PreferClients", None, load)
        _, b = decide(ms, planner, "PreferMigration", None, load)
        assert a.plan.bandwidth is None and b.plan.bandwidth is None
        assert a.migration_mibps == b.migration_mibps
        assert a.actions == b.actions and a.desired_replicas == b.desired_replicas
        assert "BwMan" not in a.reason


def test_bwman_the_policy_moves_the_rate_a_scale_out_runs_at(ms: ModelSet) -> None:
    """At full load the Horizon plan adds a node now, at the policy's ceiling: on a short
    link PreferClients runs that migration slower than PreferMigration."""
    load = 3 * float(ms.capacity.capacity(0.95, 0, 0))
    _, c = decide(ms, "Horizon", "PreferClients", 40.0, load)
    _, m = decide(ms, "Horizon", "PreferMigration", 40.0, load)
    assert c.actions and c.actions[0].at_s == 10_000.0 and c.actions[0].replicas == 4
    assert c.migration_mibps < m.migration_mibps
    # never below the policy's floor: a migration is slowed, never stopped
    assert c.migration_mibps >= 1.0


def test_bwman_models_without_regressions_say_so(ms: ModelSet) -> None:
    bare = ModelSet(ms.capacity, BandwidthModels(None, None))
    spec, d = decide(bare, "Window", "PreferClients", 40.0,
                     1.5 * float(ms.capacity.capacity(0.95, 0, 0)))
    assert d.plan.bandwidth is None
    assert "no BwMan split of the 40 Mbit/s link" in d.reason
    assert "bandwidth.client and no bandwidth.migration" in d.reason
    why = bandwidth.unavailable(spec, bare)
    assert why is not None and "nodeMbit is 40 Mbit/s" in why
    assert bandwidth.unavailable(spec, ms) is None


# -- the runner: status.bandwidth and the per-pod throttle -----------------------------------
class Rig:
    """A policy, its simulated StatefulSet and a load, driven in 5 s steps."""

    def __init__(self, ms: ModelSet, load: Callable[[float], float], spec: dict[str, Any],
                 nodes: int = 3, data_gib: float = 3.0) -> None:
        self.cluster = Cluster.balanced(nodes, data_gib * GIB, boot_s=30.0)
        self.kube = SimulatedKube(self.cluster, NS, STS, volume_bytes=100 * GIB)
        self.policies = MemoryPolicies.of(NS, POLICY, spec)
        self.metrics = TraceMetrics(load, 0.95, self.cluster.total_bytes, -3600.0, 1e9)
        self.ms = ms
        self.runner = self.new_runner()
        self.next_s = 0.0
        self.t = 0.0

    def new_runner(self) -> Runner:
        return Runner(NS, POLICY, self.policies, self.kube, lambda _spec: self.ms,
                      clock=lambda: self.kube.now_s, source=lambda _spec, _ns: self.metrics)

    def run(self, until_s: float, dt: float = 5.0,
            each: Callable[[], None] | None = None) -> None:
        while self.t < until_s:
            self.kube.now_s = self.t
            if self.t >= self.next_s:
                self.next_s = self.t + self.runner.tick()
            self.kube.advance(self.t, dt)
            self.t += dt
            if each is not None:
                each()

    def tick_now(self) -> None:
        """A tick between periods (a wake-up), at the current time."""
        self.kube.now_s = self.t
        self.runner.tick()

    def throttled(self, pod: str | None = None) -> list[str]:
        """The pods a setstreamthroughput reached, in order, one entry per call."""
        got = [c.split()[-1] for _, c in self.kube.calls if c.startswith("setstreamthroughput")]
        return [p for p in got if pod is None or p == pod]

    def events(self, reason: str) -> list[str]:
        return [m for r, m, _ in self.policies.events if r == reason]

    def cond(self, ctype: str) -> dict[str, Any]:
        return next(c for c in self.policies.status["conditions"] if c["type"] == ctype)

    def change_spec(self, **kw: Any) -> None:
        body = self.policies.body
        body["spec"] = spec_of(**kw)
        body["metadata"]["generation"] += 1


def fixed_rate(**kw: Any) -> dict[str, Any]:
    """A policy whose stream throttle is always 8 MiB/s, whatever the load."""
    return spec_of(migration={"nodeOverheadSeconds": 0, "minMiBps": 8, "maxMiBps": 8}, **kw)


def test_throttle_reaches_the_pods_a_scale_out_adds(ms: ModelSet) -> None:
    """4.5 servers' worth of load: the operator grows the StatefulSet 3 -> 5. The rate never
    changes, yet db-3 and db-4 get it as soon as they are ready (the bug: only a change of
    rate was applied, so the new nodes kept Cassandra's 24 MiB/s); never before."""
    c = per_server(ms)
    rig = Rig(ms, lambda t: 4.5 * c, fixed_rate(), data_gib=1.0)
    ready_at: dict[str, float] = {}

    def watch() -> None:
        for pod in ("db-3", "db-4"):
            if rig.kube.pod_identity(NS, pod, "cassandra") is None:
                assert pod not in rig.throttled(), f"{pod} throttled before it was ready"
            else:
                ready_at.setdefault(pod, rig.t)

    rig.run(1800, each=watch)
    assert rig.kube.spec_replicas == 5 and rig.policies.status.get("operation") is None
    rig.run(rig.t + 60)  # one more period
    pods = [f"db-{k}" for k in range(5)]
    assert {p: rig.kube.node_stream(p) for p in pods} == dict.fromkeys(pods, 8.0)
    # once each: a pod already throttled at the same rate is not called again
    assert sorted(rig.throttled()) == pods, rig.throttled()
    times = {c.split()[-1]: t for t, c in rig.kube.calls if c.startswith("setstream")}
    for pod in ("db-3", "db-4"):  # the next tick after it became ready, within a period
        assert 0 <= times[pod] - ready_at[pod] <= 60, (pod, times[pod], ready_at[pod])
    assert rig.cond("Throttling")["reason"] == "Throttle"
    assert "5 of 5 pod(s)" in rig.cond("Throttling")["message"]


def test_throttle_is_set_once_per_pod_and_rate(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, fixed_rate())
    rig.run(600)  # ten periods
    assert rig.throttled() == ["db-0", "db-1", "db-2"]
    assert len(rig.events("Throttle")) == 1
    assert rig.policies.status["migrationMiBps"] == 8.0


def test_throttle_follows_the_rate_on_every_pod(ms: ModelSet) -> None:
    """A new rate is set on each pod once; the same rate is never set twice."""
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c if t < 300 else 2.9 * c, spec_of())
    rig.run(900)
    rates = [float(cc.split()[1]) for _, cc in rig.kube.calls
             if cc.startswith("setstreamthroughput")]
    for pod in ("db-0", "db-1", "db-2"):
        mine = [float(cc.split()[1]) for _, cc in rig.kube.calls
                if cc.startswith("setstreamthroughput") and cc.endswith(pod)]
        assert mine and all(a != b for a, b in itertools.pairwise(mine)), mine
    assert len(set(rates)) >= 2
    assert rig.kube.node_stream("db-0") == rig.policies.status["migrationMiBps"]


def test_throttle_is_set_again_on_a_restarted_pod(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, fixed_rate())
    rig.run(120)
    assert rig.throttled() == ["db-0", "db-1", "db-2"]
    rig.kube.restart("db-1")  # the container restarts: Cassandra is back at its default
    assert rig.kube.node_stream("db-1") == 24.0
    rig.run(rig.t + 60)
    assert rig.throttled() == ["db-0", "db-1", "db-2", "db-1"]
    assert rig.kube.node_stream("db-1") == 8.0
    rig.kube.restart("db-2", recreate=True)  # the pod is deleted and made again: a new uid
    rig.run(rig.t + 60)
    assert rig.throttled() == ["db-0", "db-1", "db-2", "db-1", "db-2"]
    assert rig.kube.node_stream("db-2") == 8.0
    rig.run(rig.t + 300)
    assert len(rig.throttled()) == 5  # and nothing more


def test_throttle_between_periods_reads_only_the_pods_without_it(ms: ModelSet) -> None:
    """Ticks come every 5 s while an operation runs: a pod already set is not read again
    until the next period (a restart is seen then), so the API server is not polled for
    every pod every few seconds."""
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, fixed_rate())
    rig.run(5)
    read: list[str] = []
    real = rig.kube.pod_identity

    def counted(ns: str, name: str, container: str) -> str | None:
        read.append(name)
        return real(ns, name, container)

    rig.kube.pod_identity = counted  # type: ignore[method-assign]
    for _ in range(5):
        rig.t += 5
        rig.tick_now()
    assert read == []
    rig.kube.restart("db-0")
    rig.run(rig.t + 60)  # the next period reads every pod, and sets db-0 again
    assert sorted(read) == ["db-0", "db-1", "db-2"]
    assert rig.throttled() == ["db-0", "db-1", "db-2", "db-0"]


def test_throttle_a_restarted_operator_sets_every_pod_at_once(ms: ModelSet) -> None:
    """The record of which pod got which rate is the process's own: a new operator sets
    every pod again at its first tick, mid-period, at the rate its predecessor set."""
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, fixed_rate())
    rig.run(130)
    assert len(rig.throttled()) == 3
    last = rig.policies.status["lastDecision"]["epoch"]
    rig.runner = rig.new_runner()
    rig.tick_now()
    assert rig.policies.status["lastDecision"]["epoch"] == last  # no period was due
    assert rig.throttled() == ["db-0", "db-1", "db-2"] * 2
    rig.run(rig.t + 300)
    assert len(rig.throttled()) == 6


def test_throttle_a_failed_pod_is_retried_the_next_period(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, fixed_rate())
    rig.kube.throttle_fails.add("db-1")
    rig.run(5)
    assert rig.throttled() == ["db-0", "db-2"]  # the others are set
    assert len(rig.events("ThrottleFailed")) == 1 and "db-1" in rig.events("ThrottleFailed")[0]
    cond = rig.cond("Throttling")
    assert (cond["status"], cond["reason"]) == ("False", "ThrottleFailed")
    assert "db-1" in cond["message"]
    rig.t += 20
    rig.tick_now()  # a wake-up between periods: no retry yet
    assert len(rig.events("ThrottleFailed")) == 1
    rig.run(rig.t + 60)  # the next period retries it, and it fails again
    assert len(rig.events("ThrottleFailed")) == 2
    rig.kube.throttle_fails.clear()
    rig.run(rig.t + 60)
    assert rig.throttled() == ["db-0", "db-2", "db-1"]
    assert rig.kube.node_stream("db-1") == 8.0
    assert rig.cond("Throttling")["reason"] == "Throttle"
    rig.run(rig.t + 300)
    assert len(rig.throttled()) == 3 and len(rig.events("ThrottleFailed")) == 2


def test_throttle_recommend_mode_sets_nothing(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, fixed_rate(mode="Recommend", bandwidth={"nodeMbit": 40}))
    rig.run(300)
    assert rig.throttled() == [] and "migrationMiBps" not in rig.policies.status
    assert rig.policies.status["bandwidth"]["nodeMbit"] == 40.0  # published: it is advice


def crd_status_schema() -> dict[str, Any]:
    doc = yaml.safe_load(crd_path().read_text())
    root = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(root["properties"]["status"])


def pruned(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """What of ``value`` the API server would prune or refuse under ``schema``: undeclared
    fields, wrong types, missing required ones."""
    kinds = {"object": dict, "array": list, "string": str, "number": (int, float),
             "integer": int, "boolean": bool}
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null"]
    want = schema.get("type")
    if want is not None and (not isinstance(value, kinds[want]) or (
            want in ("number", "integer") and isinstance(value, bool))):
        return [f"{path}: {type(value).__name__}, not {want}"]
    out = []
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out += [f"{path}.{k}: required" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k not in props:
                out.append(f"{path}.{k}: not in the schema (pruned)")
            else:
                out += pruned(v, props[k], f"{path}.{k}")
    if isinstance(value, list):
        for k, v in enumerate(value):
            out += pruned(v, schema.get("items") or {}, f"{path}[{k}]")
    if isinstance(value, str) and len(value) > schema.get("maxLength", 10**9):
        out.append(f"{path}: longer than {schema['maxLength']}")
    return out


@pytest.mark.parametrize("policy", ["PreferClients", "PreferMigration"])
def test_bwman_status_bandwidth_shape_and_values(ms: ModelSet, policy: str) -> None:
    c = per_server(ms)
    spec = spec_of(bandwidth={"nodeMbit": 40}, migration={"policy": policy})
    rig = Rig(ms, lambda t: 1.5 * c, spec)
    rig.run(5)
    st = rig.policies.status
    bw = st["bandwidth"]
    assert set(bw) == BANDWIDTH_KEYS
    assert bw["nodeMbit"] == 40.0 and bw["source"] == "spec.bandwidth.nodeMbit"
    assert bw["policy"] == policy
    assert bw["clientPorts"] == [9042] and bw["storagePorts"] == [7000, 7001]
    assert bw["forecastRpsPerNode"] == pytest.approx(st["forecast"]["requestsPerSecond"] / 3,
                                                     abs=1e-3)
    assert bw["clientMbit"] > 0 and bw["storageMbit"] > 0
    assert 39.99 <= bw["clientMbit"] + bw["storageMbit"] <= 40.0  # never past the link
    assert bw["pods"] == [{"name": f"db-{k}", "clientMbit": bw["clientMbit"],
                           "storageMbit": bw["storageMbit"]} for k in range(3)]
    assert bw["at"] == st["lastDecision"]["at"] and 0 < len(bw["reason"]) <= 1000
    assert f"{policy} on 40 Mbit/s" in bw["reason"]
    # the split is the pure function's, and the throttle set is its stream rate
    applied = stream_setting(bw["streamMiBps"])[1]
    assert st["migrationMiBps"] == applied
    assert [rig.kube.node_stream(f"db-{k}") for k in range(3)] == [applied] * 3
    assert bw["streamMiBps"] <= st["recommendedMiBps"] + 1e-3 or \
        bw["streamMiBps"] == pytest.approx(1.0)
    # the typed status keeps every field of it (nothing pruned by the API server)
    assert pruned(bw, crd_status_schema()["properties"]["bandwidth"], "bandwidth") == []
    assert pruned(st, crd_status_schema(), "status") == []


def test_bwman_status_bandwidth_differs_by_policy(ms: ModelSet) -> None:
    c = per_server(ms)
    got = {}
    for policy in ("PreferClients", "PreferMigration"):
        rig = Rig(ms, lambda t: 1.5 * c,
                  spec_of(bandwidth={"nodeMbit": 40}, migration={"policy": policy}))
        rig.run(5)
        got[policy] = rig.policies.status["bandwidth"]
    pc, pm = got["PreferClients"], got["PreferMigration"]
    assert pc["clientMbit"] > pm["clientMbit"] and pc["streamMiBps"] < pm["streamMiBps"]


def test_bwman_status_bandwidth_lists_the_pods_a_scale_out_asks_for(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 4.5 * c, spec_of(bandwidth={"nodeMbit": 40}), data_gib=1.0)
    seen: list[tuple[str, int]] = []

    def watch() -> None:
        st = rig.policies.status
        op = st.get("operation")
        n = max(rig.kube.spec_replicas, op["toReplicas"] if op else 0)
        assert [p["name"] for p in st["bandwidth"]["pods"]] == [f"db-{k}" for k in range(n)]
        seen.append((st["bandwidth"]["at"], n))

    rig.run(1800, each=watch)
    assert rig.kube.spec_replicas == 5
    # the first tick decided (3 pods) and started 3 -> 4: db-3 is listed from that tick on
    assert seen[0] == ("1970-01-01T00:00:00Z", 4)
    assert {n for _, n in seen} == {4, 5}


def test_bwman_status_bandwidth_follows_the_pods_between_periods(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 2.5 * c, spec_of(bandwidth={"nodeMbit": 40}))
    rig.run(5)
    before = rig.policies.status["bandwidth"]
    assert len(before["pods"]) == 3
    rig.kube.scale(NS, STS, 4, expect=3)  # by hand: no operation of the policy's
    rig.t += 20
    rig.tick_now()  # mid-period: no decision, the same split, one more pod
    after = rig.policies.status["bandwidth"]
    assert after["at"] == before["at"] and after["clientMbit"] == before["clientMbit"]
    assert [p["name"] for p in after["pods"]] == ["db-0", "db-1", "db-2", "db-3"]


def test_bwman_status_bandwidth_goes_with_node_mbit(ms: ModelSet) -> None:
    c = per_server(ms)
    rig = Rig(ms, lambda t: 1.5 * c, spec_of(bandwidth={"nodeMbit": 40}))
    rig.run(5)
    assert "bandwidth" in rig.policies.status
    rig.change_spec()  # nodeMbit removed: the tick it wakes decides again, without a split
    rig.tick_now()
    assert "bandwidth" not in rig.policies.status
    assert rig.policies.status["lastDecision"]["generation"] == 2


def test_tenant_a_refused_target_gets_no_split_published(ms: ModelSet) -> None:
    """Issue 35, finding 1: an Enforce policy whose guard refuses its target publishes no
    status.bandwidth (the agent would shape pods the operator may not touch), and takes
    back one it published; opted in again, the split comes back."""
    c = per_server(ms)
    rig = Rig(ms, lambda t: 1.5 * c, spec_of(mode="Enforce", bandwidth={"nodeMbit": 40}))
    rig.kube.managed = False
    rig.run(5)
    assert "bandwidth" not in rig.policies.status
    assert rig.cond("Conflict")["reason"] == "NotOptedIn"
    rig.kube.managed = True
    rig.run(700)
    assert len(rig.policies.status["bandwidth"]["pods"]) == 3
    rig.kube.owner = "Deployment/other"
    rig.tick_now()  # between periods too: the guard runs on every tick
    assert "bandwidth" not in rig.policies.status, rig.policies.status.get("bandwidth")
    assert rig.cond("Conflict")["reason"] == "OwnedByController"


def test_bwman_models_without_regressions_publish_no_split(ms: ModelSet) -> None:
    c = per_server(ms)
    bare = ModelSet(ms.capacity, BandwidthModels(None, None))
    rig = Rig(bare, lambda t: 1.5 * c, fixed_rate(bandwidth={"nodeMbit": 40}))
    rig.run(300)
    st = rig.policies.status
    assert "bandwidth" not in st
    assert "no BwMan split" in st["lastDecision"]["reason"]
    warned = rig.events("NoBandwidthModel")
    assert len(warned) == 1 and "bandwidth.client" in warned[0]
    assert rig.throttled() == ["db-0", "db-1", "db-2"]  # the plan's rate, as before


# -- the spec ---------------------------------------------------------------------------------
def test_bwman_spec_defaults() -> None:
    p = parse(spec_of())
    assert p.node_mbit is None
    assert p.client_ports == (9042,) and p.storage_ports == (7000, 7001)
    p = parse(spec_of(bandwidth={"nodeMbit": 1000, "clientPorts": [9042, 9142],
                                 "storagePorts": [7000]}))
    assert p.node_mbit == 1000.0 and p.client_ports == (9042, 9142)
    assert p.storage_ports == (7000,)
    swift = parse(spec_of(target={"name": "s", "replicationFactor": 3, "store": "swift",
                                  "swift": {"ringConfigMap": "rings"}},
                          bandwidth={"nodeMbit": 100, "clientPorts": [8080],
                                     "storagePorts": [6200, 6201, 6202]}))
    assert swift.client_ports == (8080,)


@pytest.mark.parametrize("bw, where, words", [
    ({"nodeMbit": 0}, "spec.bandwidth.nodeMbit", "must be > 1.5"),
    ({"nodeMbit": -10}, "spec.bandwidth.nodeMbit", "must be > 1.5"),
    ({"nodeMbit": 1.5}, "spec.bandwidth.nodeMbit", "must be > 1.5"),
    ({"nodeMbit": "1Gbit"}, "spec.bandwidth.nodeMbit", "must be a number"),
    ({"nodeMbit": True}, "spec.bandwidth.nodeMbit", "must be a number"),
    ({"nodeMbit": 2e6}, "spec.bandwidth.nodeMbit", "must be <= 1e+06"),
    ({"clientPorts": []}, "spec.bandwidth.clientPorts", "list of 1 to 16"),
    ({"clientPorts": 9042}, "spec.bandwidth.clientPorts", "list of 1 to 16"),
    ({"clientPorts": [0]}, "spec.bandwidth.clientPorts", "not a port number"),
    ({"storagePorts": [70000]}, "spec.bandwidth.storagePorts", "not a port number"),
    ({"storagePorts": ["7000"]}, "spec.bandwidth.storagePorts", "not a port number"),
    ({"clientPorts": [9042, 9042]}, "spec.bandwidth.clientPorts", "twice"),
    ({"clientPorts": [9042, 7000]}, "spec.bandwidth", "must be disjoint: [7000]"),
    ({"storagePorts": [9042]}, "spec.bandwidth", "must be disjoint: [9042]"),
    ("fast", "spec.bandwidth", "must be an object"),
])
def test_bwman_spec_errors_name_the_field(bw: Any, where: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(spec_of(bandwidth=bw))
    assert err.value.where == where and words in str(err.value), err.value


def test_bwman_spec_swift_defaults_are_its_servers_and_the_replicators_rsync() -> None:
    """Swift's client class is what the proxy calls (object, container, account servers);
    its migration class the replicators' rsync (measured on the lab: issue 20's
    experiments/swift-bwman)."""
    swift = {"name": "s", "replicationFactor": 3, "store": "swift",
             "swift": {"ringConfigMap": "rings"}}
    p = parse(spec_of(target=swift, bandwidth={"nodeMbit": 100}))
    assert p.client_ports == (6200, 6201, 6202) and p.storage_ports == (873,)


def test_bwman_the_crd_says_what_the_parser_says() -> None:
    doc = yaml.safe_load(crd_path().read_text())
    root = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    bw = root["spec"]["properties"]["bandwidth"]
    node = bw["properties"]["nodeMbit"]
    assert node["minimum"] == MIN_NODE_MBIT and node["exclusiveMinimum"] is True
    assert node["maximum"] == 1e6 and "Mbit/s" in node["description"]
    assert "not measured" in node["description"]
    for key in ("clientPorts", "storagePorts"):
        ports = bw["properties"][key]
        assert ports["items"] == {"type": "integer", "minimum": 1, "maximum": 65535}
        assert ports["minItems"] == 1 and ports["maxItems"] == 16
        assert "default" not in ports  # the store's: the parser applies it
    assert any("disjoint" in r["message"] for r in bw["x-kubernetes-validations"])
    status = root["status"]["properties"]["bandwidth"]
    assert set(status["properties"]) == BANDWIDTH_KEYS
    for key in ("nodeMbit", "clientMbit", "storageMbit"):
        assert "Mbit/s" in status["properties"][key]["description"]
    assert "MiB/s" in status["properties"]["streamMiBps"]["description"]


# -- the real cluster's port: a pod's identity, and a failed exec does not stop the others ---
def pod(uid: str = "u1", phase: str = "Running", ready: bool = True, restarts: int = 0,
        deleting: bool = False, container: str = "cassandra") -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(uid=uid, deletion_timestamp="now" if deleting else None),
        status=SimpleNamespace(
            phase=phase,
            conditions=[SimpleNamespace(type="Ready", status="True" if ready else "False")],
            container_statuses=[SimpleNamespace(name="sidecar", restart_count=9),
                                SimpleNamespace(name=container, restart_count=restarts)]))


def actuator(pods: dict[str, Any]) -> KubeActuator:
    from kubernetes.client.exceptions import ApiException

    def read(name: str, ns: str) -> Any:
        if name not in pods:
            raise ApiException(status=404, reason="Not Found")
        return pods[name]

    k = KubeActuator.__new__(KubeActuator)
    k.core = SimpleNamespace(read_namespaced_pod=read)
    return k


def test_throttle_pod_identity_of_the_kube_actuator() -> None:
    k = actuator({"a": pod(restarts=2), "b": pod(ready=False), "c": pod(phase="Pending"),
                  "d": pod(deleting=True), "e": pod(uid="u9", container="other")})
    assert k.pod_identity(NS, "a", "cassandra") == "u1/2"
    assert k.pod_identity(NS, "b", "cassandra") is None
    assert k.pod_identity(NS, "c", "cassandra") is None
    assert k.pod_identity(NS, "d", "cassandra") is None
    assert k.pod_identity(NS, "e", "cassandra") == "u9/-"  # no status for it: its uid
    assert k.pod_identity(NS, "gone", "cassandra") is None


def test_throttle_kube_actuator_tries_every_pod_and_names_the_failed() -> None:
    k = actuator({})
    tried: list[str] = []

    def nodetool(ns: str, p: str, container: str, nt: tuple[str, ...], *args: str,
                 timeout_s: float = 0) -> ExecResult:
        tried.append(p)
        if p == "db-0":
            raise ElastoreError("exec setstreamthroughput in shop/db-0: Handshake failed")
        if p == "db-1":
            return ExecResult(1, "", "error: Connection refused")
        return ExecResult(0, "", "")

    k.nodetool = nodetool  # type: ignore[method-assign]
    with pytest.raises(ElastoreError) as err:
        k.set_stream_throughput(NS, ["db-0", "db-1", "db-2"], "cassandra", ("nodetool",), 8)
    assert tried == ["db-0", "db-1", "db-2"]
    assert "db-0: exec" in str(err.value) and "db-1: " in str(err.value)
    assert "db-2" not in str(err.value)
    assert k.set_stream_throughput(NS, ["db-2"], "cassandra", ("nodetool",), 8) == 8.0
