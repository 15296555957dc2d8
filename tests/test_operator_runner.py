"""The operator's runner, unchanged, without an API server: the simulator's cluster behind
its ClusterPort (elastore.sim.kube.SimulatedKube), the replayed load behind its
MetricsSource, the policy in memory. The real-API-server versions of these scenarios are in
test_operator_k8s.py and test_real_node.py; these run in a second."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from elastore.errors import ElastoreError, MetricsError
from elastore.models import ModelSet
from elastore.operator.metrics import DiskReading, Snapshot
from elastore.operator.runner import Runner
from elastore.operator.telemetry import OperatorMetrics
from elastore.resources import builtin_model
from elastore.sim.engine import Cluster
from elastore.sim.kube import MemoryPolicies, SimulatedKube, TraceMetrics, merge_patch
from elastore.units import GIB

NS, POLICY, STS = "shop", "orders", "db"
SPEC: dict[str, Any] = {
    "target": {"name": STS, "replicationFactor": 3},
    "replicas": {"min": 3, "max": 8},
    "slo": {"latencyMs": 30},
    "mode": "Enforce",
    "controlPeriod": "60s",
    "prediction": {"method": "persistence", "horizon": "60s", "step": "60s"},
    "migration": {"nodeOverheadSeconds": 0},
    "scaleDown": {"stabilizationSeconds": 120},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
    # these tests follow the node steps a given model decides (learning online has its own)
    "capacityModel": {"learn": False},
}


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(builtin_model("placeholder"))


class Rig:
    """A policy, its simulated StatefulSet and the load, driven in 5 s steps. The window
    planner by default: its decisions are the simplest to follow step by step."""

    def __init__(self, ms: ModelSet, load: Callable[[float], float], mode: str = "Enforce",
                 start_s: float = -3600.0, planner: str = "Window",
                 spec_patch: dict[str, Any] | None = None) -> None:
        spec = copy.deepcopy(SPEC)
        spec.update(spec_patch or {})
        spec["mode"] = mode
        spec["planner"] = {"mode": planner, "lookahead": "2h"}
        self.cluster = Cluster.balanced(3, 3 * GIB, boot_s=30.0)
        self.kube = SimulatedKube(self.cluster, NS, STS, volume_bytes=100 * GIB)
        self.policies = MemoryPolicies.of(NS, POLICY, spec)
        self.metrics = TraceMetrics(load, 0.95, self.cluster.total_bytes, start_s, 1e9)
        self.ms = ms
        self.runner = self.new_runner()
        self.next_s = 0.0
        self.t = 0.0

    def new_runner(self) -> Runner:
        return Runner(NS, POLICY, self.policies, self.kube, lambda _spec: self.ms,
                      clock=lambda: self.kube.now_s, source=lambda _spec, _ns: self.metrics)

    def run(self, until_s: float, dt: float = 5.0, stop: Callable[[], bool] | None = None
            ) -> None:
        while self.t < until_s:
            self.kube.now_s = self.t
            if self.t >= self.next_s:
                self.next_s = self.t + self.runner.tick()
            self.kube.advance(self.t, dt)
            self.t += dt
            if stop is not None and stop():
                return

    def calls(self, what: str) -> list[str]:
        return [c for _, c in self.kube.calls if c.startswith(what)]

    def cond(self, ctype: str) -> dict[str, Any]:
        return next(c for c in self.policies.status["conditions"] if c["type"] == ctype)


def per_server(ms: ModelSet) -> float:
    return float(ms.capacity.capacity(0.95, 0, 0)) * 0.9


def day(ms: ModelSet) -> Callable[[float], float]:
    """2.5 servers' worth, up to 4.6 from 5 to 15 min, back to 2.5 from 30 min."""
    c = per_server(ms)

    def load(t: float) -> float:
        if t < 300:
            return 2.5 * c
        if t < 900:
            return c * (2.5 + 2.1 * (t - 300) / 600)
        if t < 1800:
            return 4.6 * c
        return c * max(2.5, 4.6 - 2.1 * (t - 1800) / 300)

    return load


@pytest.mark.parametrize("planner", ["Horizon", "Window"])
def test_enforce_scales_out_then_in_node_by_node_and_loses_nothing(ms: ModelSet,
                                                                   planner: str) -> None:
    # without the cleanup after each scale-out (test_cleanup.py follows it): with it, the
    # horizon planner prices each cleanup (one node of these three to six rewriting at f()
    # beside the load) and keeps a node more on this small ring
    rig = Rig(ms, day(ms), planner=planner, spec_patch={"scaleUp": {"cleanup": False}})
    peak = 3
    # the horizon planner keeps a spare node until its quantiles are calibrated on its own
    # errors (the day's 84 % rise in ten minutes is in the spread it knows until then)
    while rig.t < (3600 if planner == "Window" else 3 * 3600):
        rig.run(rig.t + 60)
        peak = max(peak, rig.kube.spec_replicas)
    assert 5 <= peak <= 6 and rig.kube.spec_replicas == 3, rig.kube.calls
    assert rig.kube.violations == []
    # up one node at a time, then down one node at a time
    sizes = [int(c.split()[1]) for c in rig.calls("scale")]
    assert sizes == [*range(4, peak + 1), *range(peak - 1, 2, -1)], sizes
    # every scale-in decommissioned its node exactly once, before its pod went
    assert rig.calls("decommission") == [f"decommission db-{k}"
                                         for k in range(peak - 1, 2, -1)]
    assert rig.calls("setstreamthroughput")  # BwMan's rate, set in Enforce mode
    st = rig.policies.status
    assert st.get("operation") is None and rig.cond("Ready")["status"] == "True"
    reasons = [r for r, _, _ in rig.policies.events]
    assert reasons.count("ScaleOutStarted") == reasons.count("ScaleInStarted") == peak - 3
    assert rig.cluster.total_bytes() == pytest.approx(3 * GIB)


def test_recommend_changes_nothing_and_says_what_it_would_do(ms: ModelSet) -> None:
    rig = Rig(ms, day(ms), mode="Recommend")
    rig.run(1200)
    assert rig.kube.calls == [] and rig.kube.spec_replicas == 3
    st = rig.policies.status
    assert st["desiredReplicas"] == 5 and st["nextAction"]["replicas"] >= 4
    up = rig.cond("ScalingUp")
    assert (up["status"], up["reason"]) == ("False", "Recommend")


def test_missing_metrics_degrade_the_policy_and_nothing_is_done(ms: ModelSet) -> None:
    """No load series until 10 min: Degraded (MetricsMissing), no plan, no action; then the
    data arrives and the policy recovers."""
    c = per_server(ms)
    rig = Rig(ms, lambda t: 4.6 * c, start_s=600.0)
    rig.run(300)
    deg = rig.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "MetricsMissing")
    assert rig.kube.calls == [] and rig.policies.status["memory"].get("forecastRps") is None
    # once each: the reason, and after spec.fallback.failureThreshold (3) failed
    # observations the fallback in force (freeze: nothing starts, as before)
    assert [r for r, _, w in rig.policies.events if w] == ["MetricsMissing", "FallbackActive"]
    assert rig.cond("Fallback")["reason"] == "FallbackFreeze"
    rig.run(1200)
    assert rig.cond("Degraded")["status"] == "False" and rig.kube.spec_replicas > 3
    assert rig.cond("Fallback")["reason"] == "Healthy"
    assert "FallbackEnded" in [r for r, _, _ in rig.policies.events]


def test_a_restarted_operator_resumes_a_decommission_without_repeating_it(
        ms: ModelSet) -> None:
    rig = Rig(ms, day(ms))
    rig.run(3600, stop=lambda: bool(rig.calls("decommission")))
    assert rig.calls("decommission") == ["decommission db-4"]
    rig.runner = rig.new_runner()  # a new replica: nothing but the status carries over
    rig.run(3600)
    assert rig.calls("decommission") == ["decommission db-4", "decommission db-3"]
    assert rig.kube.violations == [] and rig.kube.spec_replicas == 3


def test_the_simulated_cluster_records_what_a_real_one_would_lose(ms: ModelSet) -> None:
    """Lowering the replicas under a node that still holds data, or decommissioning a node
    that is not the last, is recorded as a violation (the runner never does either)."""
    kube = SimulatedKube(Cluster.balanced(4, GIB, boot_s=0.0), NS, STS)
    assert kube.node_mode(NS, "db-3", "c", ("nodetool",)) == "NORMAL"
    kube.start_decommission(NS, "db-1", "c", ("nodetool",))
    kube.scale(NS, STS, 3, expect=4)
    assert len(kube.violations) == 2
    assert kube.pod(NS, "db-3") == (False, False)


def test_trace_metrics_never_read_a_missing_value_as_zero() -> None:
    m = TraceMetrics(lambda t: 100.0, 0.9, lambda: 1.0, start_s=0.0, end_s=600.0)
    snap: Snapshot = m.snapshot(600.0, 3, 300.0)
    assert list(snap.history_rps) == [100.0, 100.0, 100.0]
    assert snap.history_rps[0] == 100.0
    early = m.snapshot(300.0, 3, 300.0).history_rps
    assert early[0] != early[0] and list(early[1:]) == [100.0, 100.0]  # NaN, not 0
    with pytest.raises(MetricsError, match="no load"):
        m.snapshot(700.0, 3, 300.0)
    with pytest.raises(MetricsError, match="interference"):
        m.scalar("interference", 0.0)


def test_merge_patch_is_the_api_servers() -> None:
    doc: dict[str, Any] = {"a": {"b": 1, "c": 2}, "d": [1, 2], "e": 5}
    merge_patch(doc, {"a": {"b": None, "x": 3}, "d": [3], "e": None})
    assert doc == {"a": {"c": 2, "x": 3}, "d": [3]}


def test_drift_during_a_scale_in_stops_the_operator_until_it_is_undone(ms: ModelSet) -> None:
    """A ScaleIn 5 -> 4 is decommissioning db-4 when someone scales the StatefulSet to 6.
    The operator used to scale to 4 when the node left, deleting db-5 and db-4's successor
    without a decommission. Now: a Conflict (Drift) with an Event, no effect at all while
    the drift lasts; when the size is back, the step finishes as planned."""
    rig = Rig(ms, day(ms))
    rig.run(3 * 3600, stop=lambda: bool(rig.calls("decommission")))
    op = rig.policies.status["operation"]
    assert op["kind"] == "ScaleIn" and op["phase"] == "Decommissioning", op
    frm = op["fromReplicas"]
    rig.kube.scale(NS, STS, frm + 2, expect=frm)  # someone else
    n_calls = len(rig.kube.calls)
    rig.run(rig.t + 300)  # 60 polls (within the operation's deadline)
    made = rig.kube.calls[n_calls:]
    assert not [c for _, c in made if c.startswith("scale")], made  # touched nothing
    assert rig.kube.spec_replicas == frm + 2
    conflict = rig.cond("Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "Drift"), conflict
    assert "expects" in conflict["message"]
    assert [r for r, _, w in rig.policies.events if w].count("Drift") == 1  # once
    assert rig.policies.status["operation"]["toReplicas"] == frm - 1
    # the drift goes away: the step goes on (its node has left the ring meanwhile)
    rig.kube.scale(NS, STS, frm, expect=frm + 2)
    rig.run(rig.t + 600, stop=lambda: rig.policies.status.get("operation") is None)
    assert rig.kube.spec_replicas == frm - 1
    assert rig.cond("Conflict")["status"] == "False"


def test_partial_metrics_forbid_scale_in_but_not_forecasting(ms: ModelSet) -> None:
    """The load falls after the peak, but one of the nodes stops reporting: the summed load
    reads lower than it is. The policy goes Degraded (MetricsPartial, one Event), keeps
    forecasting, and decommissions nothing until every node reports again."""
    rig = Rig(ms, day(ms))
    rig.run(3 * 3600, stop=lambda: rig.kube.spec_replicas >= 5)
    rig.run(rig.t + 1800, stop=lambda: rig.policies.status.get("operation") is None and
            rig.kube.ready_replicas == rig.kube.spec_replicas)
    peak = rig.kube.spec_replicas
    assert not rig.calls("decommission")
    rig.metrics.nodes = lambda: rig.kube.ready_replicas - 1  # one scrape fails
    forecasts = []
    while rig.t < 3 * 3600:
        rig.run(rig.t + 600)
        forecasts.append(rig.policies.status["lastDecision"]["epoch"])
    assert not rig.calls("decommission") and rig.kube.spec_replicas == peak
    deg = rig.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "MetricsPartial"), deg
    assert f"from {peak - 1} of {peak} ready nodes" in deg["message"]
    down = rig.cond("ScalingDown")
    assert (down["status"], down["reason"]) == ("False", "MetricsPartial"), down
    assert len(set(forecasts)) == len(forecasts)  # a new decision every 10 min
    assert rig.policies.status["desiredReplicas"] < peak  # it knows what it would do
    assert [r for r, _, w in rig.policies.events if w].count("MetricsPartial") == 1
    rig.metrics.nodes = lambda: rig.kube.ready_replicas  # back
    rig.run(rig.t + 1800, stop=lambda: bool(rig.calls("decommission")))
    assert rig.calls("decommission") == [f"decommission db-{peak - 1}"]
    assert rig.cond("Degraded")["status"] == "False"


@pytest.mark.parametrize("setup,reason", [
    (lambda k: setattr(k, "managed", False), "NotOptedIn"),
    (lambda k: setattr(k, "owner", "CassandraDatacenter/dc1"), "OwnedByController"),
    (lambda k: k.others.append("HorizontalPodAutoscaler/db"), "TargetContended"),
    (lambda k: k.others.append("ScaledObject/db"), "TargetContended"),
    (lambda k: k.others.append("ElasticPolicy/other"), "TargetContended"),
])
def test_owner_and_contention_refusals_leave_the_target_alone(
        ms: ModelSet, setup: Callable[[SimulatedKube], None], reason: str) -> None:
    """Enforce refuses a target that did not opt in, that a controller owns (as
    cass-operator's), or that something else also scales: a Conflict condition with the
    reason, one Event, no effect; forecasting and recommending go on."""
    rig = Rig(ms, day(ms))
    setup(rig.kube)
    rig.run(1800)
    assert rig.kube.calls == [] and rig.kube.spec_replicas == 3
    conflict = rig.cond("Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", reason)
    assert [r for r, _, w in rig.policies.events if w] == [reason]
    st = rig.policies.status
    assert st["desiredReplicas"] >= 4 and st["forecast"]["requestsPerSecond"] > 0
    assert rig.cond("ScalingUp")["reason"] == reason


@pytest.mark.parametrize("field,value", [("pod", "db-0"), ("pvc", "data-db-0"),
                                         ("toReplicas", 1), ("kind", "Delete")])
def test_tamper_an_operation_patched_into_the_status_is_refused(ms: ModelSet, field: str,
                                                                value: Any) -> None:
    """Whoever may patch the status must not choose the pod to exec into or the PVC to
    delete: an operation whose pod, PVC or size is not what its kind implies is held, with
    a Conflict (StatusRejected), and nothing is done."""
    rig = Rig(ms, day(ms))
    rig.kube.pvc_template = "data"
    rig.run(3 * 3600, stop=lambda: bool(rig.calls("decommission")))
    op = dict(rig.policies.status["operation"])
    op[field] = value
    rig.policies.body["status"]["operation"] = op
    n_calls = len(rig.kube.calls)
    rig.run(rig.t + 1200)
    assert rig.kube.calls[n_calls:] == []
    conflict = rig.cond("Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "StatusRejected"), conflict


def test_an_unexpected_exception_is_degraded_internal_error_not_only_a_log(
        ms: ModelSet) -> None:
    """A bug in a tick (here: the metrics source divides by zero) sets Degraded
    (InternalError) with the exception and posts an Event, then propagates to kopf's
    backoff."""
    rig = Rig(ms, day(ms))

    class Broken:
        def snapshot(self, *_: Any) -> Snapshot:
            raise ZeroDivisionError("division by zero")

    rig.runner.source = lambda _spec, _ns: Broken()  # type: ignore[assignment,return-value]
    with pytest.raises(ZeroDivisionError):
        rig.runner.tick()
    deg = rig.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "InternalError")
    assert "ZeroDivisionError" in deg["message"]
    assert ("InternalError", "ZeroDivisionError: division by zero", True) in \
        rig.policies.events


def test_tamper_a_nodetool_the_operator_does_not_allow_is_refused(ms: ModelSet) -> None:
    """A policy may only pick one of the nodetool commands the operator's installer allows
    (``--nodetool``; default nodetool and /opt/cassandra/bin/nodetool): ``sh -c reboot``
    passes the CRD's word pattern but is refused (Degraded: NodetoolNotAllowed), and
    nothing runs in any pod."""
    rig = Rig(ms, day(ms))
    rig.policies.body["spec"]["target"]["nodetool"] = ["sh", "-c", "reboot"]
    rig.run(1800)
    assert rig.kube.calls == []
    deg = rig.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "NodetoolNotAllowed")
    assert "sh', '-c', 'reboot" in deg["message"] and "nodetool" in deg["message"]
    # the installer allows it: then it runs (the operator's choice, not the policy's)
    rig.runner = rig.new_runner()
    rig.runner.nodetools = (("sh", "-c", "reboot"),)
    rig.run(3600)
    assert rig.calls("scale") and rig.cond("Degraded")["status"] == "False"


def test_tamper_pvc_deletion_trusts_only_the_operators_mark_on_the_pvc(ms: ModelSet) -> None:
    """pvcPolicy Delete: the PVC of a node the loop saw leave the ring is annotated, then
    deleted. A forged operation that names the right pod and PVC (of a pod beyond the
    current size, say a manual scale-down left it behind) finds no mark: retained."""
    rig = Rig(ms, day(ms))
    rig.kube.pvc_template = "data"
    rig.policies.body["spec"]["scaleDown"]["pvcPolicy"] = "Delete"
    rig.run(3 * 3600)
    assert rig.kube.spec_replicas == 3 and rig.kube.violations == []
    assert rig.kube.pvcs == {f"data-db-{k}" for k in range(3)}  # the removed ones deleted
    removed = [c.split()[-1] for c in rig.calls("delete pvc")]
    assert sorted(removed) == [f"data-db-{k}" for k in range(3, 3 + len(removed))]
    assert len(removed) >= 2
    for pvc in removed:  # marked when its node left the ring, before its deletion
        order = [c for _, c in rig.kube.calls if c.endswith(f"pvc {pvc}")]
        assert order == [f"mark pvc {pvc}", f"delete pvc {pvc}"], order
    rig.kube.pvcs.add("data-db-3")  # left behind by someone else's scale-down
    rig.policies.body["status"]["operation"] = {
        "kind": "ScaleIn", "fromReplicas": 4, "toReplicas": 3, "pod": "db-3",
        "phase": "Cleanup", "startedEpoch": rig.t, "pvc": "data-db-3", "message": "forged"}
    rig.run(rig.t + 60)
    assert "data-db-3" in rig.kube.pvcs
    assert rig.policies.status.get("operation") is None
    assert any("carries no mark" in m for _, m, _ in rig.policies.events)


def surge(ms: ModelSet) -> Callable[[float], float]:
    """2.5 servers' worth, then (from 40 min) 6.5."""
    c = per_server(ms)
    return lambda t: 2.5 * c if t < 2400 else 6.5 * c


def test_stuck_a_refused_decommission_is_issued_once_and_the_loop_keeps_forecasting(
        ms: ModelSet) -> None:
    """Cassandra refuses the decommission (the issue's reproduction: re-issued every 120 s
    for 6 h, 180 times, no scale-out, no forecast). Now: issued once, the operation is
    Stuck with the store's own message (condition and Event), the forecast and desired
    replicas keep updating under a surge; the abort annotation stops it and holds new steps
    while it stays; without it, the loop scales out."""
    rig = Rig(ms, surge(ms), start_s=-3600.0)
    # five servers for a load three carry: the plan scales in, and the store refuses
    rig.cluster = Cluster.balanced(5, 3 * GIB, boot_s=30.0)
    rig.kube = SimulatedKube(rig.cluster, NS, STS, volume_bytes=100 * GIB)
    rig.metrics = TraceMetrics(surge(ms), 0.95, rig.cluster.total_bytes, -3600.0, 1e9)
    rig.runner = rig.new_runner()
    rig.kube.refuse_decommission = "Not enough live nodes to maintain replication factor"
    rig.run(1800, stop=lambda: bool(rig.calls("decommission")))
    assert rig.calls("decommission"), rig.policies.status
    rig.run(rig.t + 6 * 3600)
    assert len(rig.calls("decommission")) == 1
    st = rig.policies.status
    assert st["operation"]["phase"] == "Stuck"
    down = rig.cond("ScalingDown")
    assert down["reason"] == "Stuck" and "Not enough live nodes" in down["message"]
    assert [r for r, _, w in rig.policies.events if w].count("OperationStuck") == 1
    assert st["lastDecision"]["epoch"] >= rig.t - 120  # still deciding, every period
    assert st["desiredReplicas"] >= 7  # the surge is seen
    # a human: the abort annotation; the operation goes, nothing is re-issued or scaled
    rig.policies.body["metadata"]["annotations"] = {"elastore.io/abort": "sre"}
    n = len(rig.kube.calls)
    rig.run(rig.t + 600)
    assert rig.policies.status.get("operation") is None
    assert [r for r, _, _ in rig.policies.events].count("OperationAborted") == 1
    assert not [c for _, c in rig.kube.calls[n:] if not c.startswith("setstream")]
    assert rig.cond("ScalingUp")["reason"] == "Aborted"
    del rig.policies.body["metadata"]["annotations"]
    rig.kube.refuse_decommission = None
    rig.run(rig.t + 3600)
    assert rig.kube.spec_replicas >= 7 and rig.calls("scale")


def test_stuck_switching_to_recommend_stops_an_operation_safely(ms: ModelSet) -> None:
    rig = Rig(ms, day(ms))
    rig.run(3600, stop=lambda: bool(rig.policies.status.get("operation")))
    op = rig.policies.status["operation"]
    assert op["kind"] == "ScaleOut"
    rig.policies.body["spec"]["mode"] = "Recommend"
    rig.policies.body["metadata"]["generation"] = 2
    n = len(rig.kube.calls)
    rig.run(rig.t + 1800)
    assert rig.policies.status.get("operation") is None
    assert not [c for _, c in rig.kube.calls[n:] if c.startswith(("scale", "decommission"))]
    msg = next(m for r, m, _ in rig.policies.events if r == "OperationAborted")
    assert "mode Recommend" in msg and "finishes joining by itself" in msg


@pytest.mark.parametrize("setup, says", [
    (lambda k: k.down.add(1), "every node must be UN (up, normal): 10.0.0.2 is DN"),
    (lambda k: k.keyspaces.update(events=5), "keyspace events has RF 5 and 4 node(s) would "
                                             "remain"),
    (lambda k: setattr(k, "volume_bytes", None), "requests no storage size"),
    # 3 GiB over 5 nodes: a survivor would hold 0.6 + 0.15 GiB, above spec.storage's budget
    # (80 % with Unified compaction) of 0.9 GiB
    (lambda k: setattr(k, "volume_bytes", 0.9 * GIB), "free space: 10.0.0.1 would hold"),
])
def test_ring_refusals_decommission_nothing(ms: ModelSet, setup: Callable[[SimulatedKube],
                                                                         None],
                                            says: str) -> None:
    """Every scale-in reads the ring through nodetool first (the simulated ring here; the
    lab's real Cassandra in test_cassandra_lab.py): a refusal is a ScaleInRefused Event and
    the ScalingDown condition, and no decommission."""
    rig = Rig(ms, day(ms))
    rig.run(3 * 3600, stop=lambda: rig.kube.spec_replicas >= 5 and
            rig.policies.status.get("operation") is None)
    setup(rig.kube)
    rig.run(3 * 3600)
    assert not rig.calls("decommission") and rig.kube.spec_replicas >= 5
    assert rig.calls("ring")  # it looked
    down = rig.cond("ScalingDown")
    assert down["reason"] == "Refused" and says in down["message"], down
    refusals = [m for r, m, w in rig.policies.events if r == "ScaleInRefused" and w]
    assert refusals and says in refusals[0]


def test_stuck_a_decommission_is_not_reissued_on_a_ring_that_cannot_take_it(
        ms: ModelSet) -> None:
    """An operator restarted after it issued a decommission that failed (the failure was
    in the old process's memory): the node is NORMAL, so the step would re-issue it after
    120 s. A node went down meanwhile: the ring check refuses, and the operation is Stuck,
    not re-issued."""
    rig = Rig(ms, day(ms))
    rig.run(3 * 3600, stop=lambda: rig.kube.spec_replicas >= 5 and
            rig.policies.status.get("operation") is None)
    frm = rig.kube.spec_replicas
    rig.policies.body["status"]["operation"] = {
        "kind": "ScaleIn", "fromReplicas": frm, "toReplicas": frm - 1, "pod": f"db-{frm - 1}",
        "phase": "Decommissioning", "startedEpoch": rig.t - 300, "pvc": f"data-db-{frm - 1}",
        "decommissionIssuedEpoch": rig.t - 300, "deadlineEpoch": rig.t + 3600,
        "message": "decommission issued"}
    rig.kube.down.add(0)
    rig.run(rig.t + 600)
    assert not rig.calls("decommission") and rig.kube.spec_replicas == frm
    op = rig.policies.status["operation"]
    assert op["phase"] == "Stuck" and "not re-issued" in op["message"]
    assert "10.0.0.1 is DN" in rig.cond("ScalingDown")["message"]
    assert [r for r, _, w in rig.policies.events if w].count("OperationStuck") == 1


# -- Hubbub-scale: the interference index and the learned effect --------------------------------
class Probe:
    """The replay's metrics plus what the node agent and the store's exporter would add: the
    interference index (``index``; None: the agent's series do not exist) and the p95
    latency (``latency_ms``; None: not exported). The store behaves as an interference-free
    server at ``load * g(index)`` (``g``), per the capacity model."""

    def __init__(self, inner: TraceMetrics, ms: ModelSet, index: float | None,
                 g: Callable[[float], float] = lambda i: 1.5 if i > 0 else 1.0,
                 latency: bool = True) -> None:
        self.inner, self.ms, self.index, self.g, self.latency = inner, ms, index, g, latency
        self.asked: list[str] = []

    def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
        # the streaming counters are exported (and flat: no node step runs)
        return replace(self.inner.snapshot(at_s, steps, step_s), migration_mibps=0.0)

    def disk(self, at_s: float, steps: int, step_s: float,
             pvc_template: str | None = None) -> DiskReading:
        return self.inner.disk(at_s, steps, step_s, pvc_template)

    def scalar(self, name: str, at_s: float) -> float:
        self.asked.append(name)
        if name == "interference" and self.index is not None:
            return self.index
        if name == "latencyMs" and self.latency and self.index is not None:
            per = self.inner.load_rps(at_s) / 3
            return float(self.ms.capacity.latency_ms(per * self.g(self.index), 0.95, 0.0, 0.0))
        raise MetricsError("MetricsMissing", f"{name}: Prometheus returned no series")


def hubbub_rig(ms: ModelSet, index: float | None, load_rps: float = 800.0,
               interference: dict[str, Any] | None = None, latency: bool = True,
               telemetry: OperatorMetrics | None = None) -> tuple[Rig, Probe]:
    rig = Rig(ms, lambda t: load_rps, mode="Recommend")
    if interference is not None:
        rig.policies.body["spec"]["interference"] = interference
    probe = Probe(rig.metrics, ms, index, latency=latency)
    rig.metrics = probe  # type: ignore[assignment]
    rig.runner = rig.new_runner()
    rig.runner.telemetry = telemetry
    return rig, probe


def sample(tm: OperatorMetrics, name: str) -> float | None:
    return tm.registry.get_sample_value(name, {"namespace": NS, "policy": POLICY})


def test_hubbub_with_the_agents_index_the_plan_wants_more_and_learns(ms: ModelSet) -> None:
    """Auto, the agent's series present: status.interference says agent and the index, the
    plan wants more servers than a blind twin at the same load, and every period's
    (load, latency) teaches the learner: the store's real g(0.5) = 1.5 pulls the factor
    down from the definition's 2, and the plan with it."""
    tm = OperatorMetrics()
    aware, probe = hubbub_rig(ms, 0.5, telemetry=tm)
    blind, _ = hubbub_rig(ms, None)
    aware.run(120)
    blind.run(120)
    st, bst = aware.policies.status, blind.policies.status
    inter = st["interference"]
    assert (inter["mode"], inter["source"], inter["index"]) == ("Auto", "agent", 0.5)
    assert inter["observation"] == "used" and inter["latencyMs"] > 0
    assert inter["prior"] == "definition" and 1.5 < inter["factor"] <= 2.0
    # (a merge patch drops a null: "index" is absent while blind)
    assert bst["interference"]["source"] == "none" and bst["interference"].get("index") is None
    assert st["desiredReplicas"] > bst["desiredReplicas"] == 3
    first = inter["factor"]
    aware.run(60 * 40)
    inter = aware.policies.status["interference"]
    assert inter["learned"]["observations"] >= 40
    assert inter["factor"] < first and inter["factor"] == pytest.approx(1.5, rel=0.05)
    assert probe.asked.count("latencyMs") == probe.asked.count("interference") >= 40
    assert sample(tm, "elastore_interference_blind") == 0
    assert sample(tm, "elastore_interference_planned_index") == 0.5
    assert sample(tm, "elastore_interference_factor") == pytest.approx(inter["factor"])
    assert [r for r, _, _ in aware.policies.events].count("InterferenceAware") == 1


def test_hubbub_auto_without_the_agent_runs_blind_and_says_so(ms: ModelSet) -> None:
    tm = OperatorMetrics()
    rig, probe = hubbub_rig(ms, None, telemetry=tm)
    rig.run(180)
    st = rig.policies.status
    assert rig.cond("Degraded")["status"] == "False"  # a decision, interference-blind
    inter = st["interference"]
    assert (inter["mode"], inter["source"], inter.get("index"), inter["factor"]) == (
        "Auto", "none", None, 1.0)
    assert "blind" in inter["reason"] and "no series" in inter["reason"]
    assert "latencyMs" not in probe.asked  # nothing to learn without the index
    assert sample(tm, "elastore_interference_blind") == 1
    assert sample(tm, "elastore_interference_planned_index") is None  # absent, not 0
    blind = [(m, w) for r, m, w in rig.policies.events if r == "InterferenceBlind"]
    assert len(blind) == 1 and not blind[0][1]  # said once; the agent is optional
    # the agent's series appear, then vanish again: that loss is a Warning
    probe.index = 0.3
    rig.run(rig.t + 120)
    assert rig.policies.status["interference"]["source"] == "agent"
    probe.index = None
    rig.run(rig.t + 120)
    blind = [(m, w) for r, m, w in rig.policies.events if r == "InterferenceBlind"]
    assert len(blind) == 2 and blind[1][1]


def test_hubbub_enabled_true_without_the_index_decides_nothing(ms: ModelSet) -> None:
    rig, _ = hubbub_rig(ms, None, interference={"enabled": True})
    rig.run(180)
    deg = rig.cond("Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "MetricsMissing")
    assert "enabled is true" in deg["message"]
    assert rig.policies.status["memory"].get("forecastRps") is None
    assert "interference" not in rig.policies.status


def test_hubbub_disabled_never_asks_and_a_missing_latency_is_skipped(ms: ModelSet) -> None:
    off, probe = hubbub_rig(ms, 0.6, interference={"enabled": False})
    off.run(120)
    inter = off.policies.status["interference"]
    assert (inter["mode"], inter["source"], inter.get("index")) == ("Disabled", "none", None)
    assert probe.asked == []
    quiet, probe = hubbub_rig(ms, 0.6, latency=False)
    quiet.run(300)
    inter = quiet.policies.status["interference"]
    assert inter["source"] == "agent" and inter.get("latencyMs") is None
    assert inter["observation"].startswith("skipped (missing)")
    assert inter["learned"]["observations"] == 0 and inter["learned"]["skipped"]["missing"] >= 4
    assert inter["factor"] == pytest.approx(1 / 0.4, rel=1e-3)  # the prior alone


def test_hubbub_the_learned_effect_survives_an_operator_restart(ms: ModelSet) -> None:
    rig, _ = hubbub_rig(ms, 0.5)
    rig.run(60 * 10)
    before = copy.deepcopy(rig.policies.status["interference"]["learned"])
    rig.runner = rig.new_runner()  # a new replica: only the status carries over
    rig.run(rig.t + 60)
    after = rig.policies.status["interference"]["learned"]
    assert after["observations"] == before["observations"] + 1
    assert after["bins"][5][0] > before["bins"][5][0]  # the same bin, continued


@pytest.mark.parametrize("due_in_s", [10.0, -1.0])
def test_a_scale_out_that_falls_due_during_a_slow_tick_starts_in_that_tick(
        ms: ModelSet, due_in_s: float) -> None:
    """The stream-throttle calls (an exec each, seconds on a busy node) held ticks for 20 s
    in CI and a planned scale-out started a period late. A step falling due during the
    calls starts in that tick (it reads the clock when it runs, not when the tick began);
    a scale-out already due when the tick begins starts before them (its new pod boots
    before it streams)."""
    rig = Rig(ms, lambda _t: 2.0 * per_server(ms))
    rig.run(600)
    st = rig.policies.status
    assert rig.kube.spec_replicas == 3 and not st["memory"]["actions"]
    now = float(st["lastDecision"]["epoch"]) + 5  # no control period due in this tick
    rig.kube.now_s = now
    st["memory"]["actions"] = [{"atEpoch": now + due_in_s, "at": iso_of(now + due_in_s),
                                "replicas": 4, "source": "window", "reason": "3 -> 4: planned",
                                "rateMiBps": None}]
    slow = rig.kube.set_stream_throughput

    def slow_set(*args: Any, **kwargs: Any) -> float:
        rig.kube.now_s += 8.0  # each call takes 8 s
        return slow(*args, **kwargs)

    rig.kube.set_stream_throughput = slow_set  # type: ignore[method-assign]
    rig.new_runner().tick()  # a restarted operator: the throttle goes to all three pods
    calls = [(t, c) for t, c in rig.kube.calls if t >= now]
    throttled = [f"setstreamthroughput {st['migrationMiBps']:.3f} db-{k}" for k in range(3)]
    assert [c for _, c in calls if c.startswith("setstreamthroughput")] == throttled
    if due_in_s > 0:
        assert calls[-1] == (now + 24.0, "scale 4"), calls
    else:
        assert calls[0] == (now, "scale 4"), calls
    # the operation records when it started, not when the tick began
    started = float(rig.policies.status["operation"]["startedEpoch"])
    assert started == (now + 24.0 if due_in_s > 0 else now)


def iso_of(epoch: float) -> str:
    from elastore.operator.conditions import iso

    return iso(epoch)


def test_the_stream_throttle_goes_to_every_pod_at_once(ms: ModelSet) -> None:
    """One exec per pod, in flight together (a tick is as long as the slowest, not the sum);
    a pod whose call fails is said and retried, the others keep theirs."""
    import threading
    import time

    rig = Rig(ms, lambda _t: 2.0 * per_server(ms))
    rig.run(300)
    lock, flight, peak = threading.Lock(), [0], [0]
    real = rig.kube.set_stream_throughput

    def counted(*args: Any, **kwargs: Any) -> float:
        with lock:
            flight[0] += 1
            peak[0] = max(peak[0], flight[0])
        time.sleep(0.3)
        with lock:
            flight[0] -= 1
        return real(*args, **kwargs)

    rig.kube.set_stream_throughput = counted  # type: ignore[method-assign]
    rig.kube.throttle_fails = {"db-1"}
    runner = rig.new_runner()
    runner.tick()
    assert peak[0] == 3
    # the calls run in threads of their own: they end in any order
    done = sorted(c.split()[-1] for _, c in rig.kube.calls[-2:])
    assert done == ["db-0", "db-2"], rig.kube.calls[-3:]
    failed = [m for r, m, _ in rig.policies.events if r == "ThrottleFailed"]
    assert len(failed) == 1 and "db-1" in failed[0], rig.policies.events
    assert rig.cond("Throttling")["reason"] == "ThrottleFailed"


# --- issue 34: a status writer cannot empty a cluster (status is a record, not the truth) ---
PAUSED = {"elastore.io/paused": "true"}


def forge(rig: Rig, frm: int, phase: str, op_id: str = "forged", **extra: Any) -> None:
    """Patch the status as someone else could: a ScaleIn frm -> frm - 1, its pod and PVC
    right for the target, at ``phase``."""
    k = frm - 1
    rig.policies.body["status"]["operation"] = {
        "kind": "ScaleIn", "fromReplicas": frm, "toReplicas": k, "pod": f"{STS}-{k}",
        "pvc": f"data-{STS}-{k}", "phase": phase, "startedEpoch": rig.t,
        "message": "forged", "id": op_id, **extra}


def paused_rig(ms: ModelSet, floor: int, delete: bool = False) -> Rig:
    down: dict[str, Any] = {"stabilizationSeconds": 120}
    if delete:
        down["pvcPolicy"] = "Delete"
    rig = Rig(ms, day(ms), spec_patch={
        "replicas": {"min": floor, "max": 8}, "scaleDown": down,
        "target": {"name": STS, "replicationFactor": floor}})
    rig.policies.body["metadata"]["annotations"] = dict(PAUSED)
    return rig


def rejected(rig: Rig) -> str:
    conflict = rig.cond("Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "StatusRejected"), conflict
    assert "StatusRejected" in [r for r, _, w in rig.policies.events if w]
    return str(conflict["message"])


def test_forged_phase_a_scale_in_whose_node_never_left_lowers_nothing(ms: ModelSet) -> None:
    """A ScaleIn 3 -> 2 (floor 2) written straight into phase Scaling: db-2 was never
    decommissioned and is NORMAL. It used to lower the replicas under it (a violation);
    now: Conflict/StatusRejected with an Event, and no effect."""
    rig = paused_rig(ms, floor=2)
    rig.run(60)
    forge(rig, 3, "Scaling")
    n = len(rig.kube.calls)
    rig.run(rig.t + 120)
    assert rig.kube.spec_replicas == 3 and rig.kube.violations == [], rig.kube.violations
    made = [c for _, c in rig.kube.calls[n:]]
    assert not [c for c in made if c.startswith(("scale", "decommission", "delete"))], made
    assert "NORMAL, not DECOMMISSIONED" in rejected(rig)


def test_forged_chain_to_zero_never_goes_below_the_floor(ms: ModelSet) -> None:
    """The issue's reproduction: min 3, RF 3, pvcPolicy Delete, paused, and a left-ring
    mark on data-db-2 from an earlier scale-in. The status is patched three times with a
    ScaleIn n -> n-1 at phase Scaling: it went 3 -> 2 -> 1 -> 0 with no decommission and
    data-db-2 deleted. Now the size never goes below max(min, RF) and no PVC goes."""
    rig = paused_rig(ms, floor=3, delete=True)
    rig.kube.mark_pvc(NS, "data-db-2", f"{POLICY}@1970-01-01T00:00:00Z")  # an earlier op's
    rig.run(60)
    sizes: list[int] = []

    def size() -> bool:
        sizes.append(rig.kube.spec_replicas)
        return False

    for frm in (3, 2, 1):
        forge(rig, frm, "Scaling")
        rig.run(rig.t + 60, stop=size)
    assert min(sizes) >= 3 and rig.kube.spec_replicas == 3, sizes
    assert rig.calls("delete pvc") == [] and "data-db-2" in rig.kube.pvcs
    assert rig.calls("decommission") == [] and rig.kube.violations == []
    assert "below max(replicas.min, replicationFactor) = 3" in rejected(rig)


@pytest.mark.parametrize("stale", ["earlier-operation", "other-uid", "unnamed"])
def test_forged_stale_pvc_mark_is_not_honoured(ms: ModelSet, stale: str) -> None:
    """A retained data-db-3 carries a left-ring mark, and the status is patched to the
    Cleanup of a ScaleIn 4 -> 3 (pvcPolicy Delete). The mark is from an earlier operation,
    or names this operation on another PVC's UID, or names none (an older operator's):
    none is this operation's own sight of the node leaving, so the PVC stays."""
    from elastore.stores.operation import pvc_mark

    rig = paused_rig(ms, floor=3, delete=True)
    rig.kube.pvcs.add("data-db-3")
    got = rig.kube.pvc_mark(NS, "data-db-3")
    assert got is not None
    uid = got[0]
    value = {"earlier-operation": pvc_mark(POLICY, "t", "earlier", uid),
             "other-uid": pvc_mark(POLICY, "t", "forged", "another-pvcs-uid"),
             "unnamed": f"{POLICY}@1970-01-01T00:00:00Z"}[stale]
    rig.kube.mark_pvc(NS, "data-db-3", value)
    rig.run(60)
    forge(rig, 4, "Cleanup")
    rig.run(rig.t + 60)
    assert "data-db-3" in rig.kube.pvcs and rig.calls("delete pvc") == []
    assert rig.policies.status.get("operation") is None
    assert any("carries no mark of this operation" in m for _, m, _ in rig.policies.events)


def test_a_scale_out_replaces_the_volume_its_ordinals_decommissioned_node_left(
        ms: ModelSet) -> None:
    """pvcPolicy Retain: a scale-in leaves its PVC with this operation's mark. Cassandra
    refuses to start on a decommissioned node's data, so when a scale-out brings that
    ordinal back it deletes the PVC first (the mark, and a ring with no member beyond the
    pods), says so in an Event, and the pod gets a new volume (another UID, no mark: a
    later status naming that scale-in cannot delete a serving node's volume)."""
    rig = Rig(ms, day(ms))
    rig.run(3600)
    assert rig.kube.spec_replicas == 3 and "data-db-3" in rig.kube.marked
    old = rig.kube.pvc_mark(NS, "data-db-3")
    assert old is not None
    rig.policies.body["metadata"]["annotations"] = {"elastore.io/paused-replicas": "4"}
    rig.run(rig.t + 600, stop=lambda: rig.kube.spec_replicas == 4)
    assert rig.kube.spec_replicas == 4
    seq = [c for _, c in rig.kube.calls if c.startswith(("delete pvc", "scale"))]
    assert seq[-2:] == ["delete pvc data-db-3", "scale 4"], seq[-6:]
    new = rig.kube.pvc_mark(NS, "data-db-3")
    assert new is not None and new[0] != old[0] and new[1] is None, (old, new)
    said = [m for r, m, _ in rig.policies.events if r == "RetainedVolumeDeleted"]
    assert len(said) == 1 and "data-db-3" in said[0], rig.policies.events[-5:]


def test_forged_step_further_along_waits_for_the_store(ms: ModelSet) -> None:
    """db-2's decommission was issued and it is LEAVING (streaming its data away) when the
    status is patched ahead to Scaling. Lowering the replicas now removes a node that still
    holds data; the step is held (StatusRejected) until the node itself reports
    DECOMMISSIONED and another node's ring no longer lists it, then it goes on."""
    rig = paused_rig(ms, floor=2)
    rig.run(60)
    rig.kube.start_decommission(NS, "db-2", "cassandra", ("nodetool",))
    forge(rig, 3, "Scaling", decommissionIssuedEpoch=rig.t)
    leaving: list[str | None] = []

    def look() -> bool:
        mode = rig.kube.node_mode(NS, "db-2", "c", ("nodetool",))
        if mode == "LEAVING":
            leaving.append(mode)
            assert rig.kube.spec_replicas == 3, "lowered under a LEAVING node"
        return mode != "LEAVING"

    rig.run(rig.t + 600, stop=look)
    assert leaving and rig.kube.violations == [], rig.kube.violations
    assert [r for r, _, w in rig.policies.events if w].count("StatusRejected") == 1
    # the store now bears it out: the step goes on, and nothing was lost
    rig.run(rig.t + 120, stop=lambda: rig.policies.status.get("operation") is None)
    assert rig.kube.spec_replicas == 2 and rig.kube.violations == []
    assert rig.cond("Conflict")["status"] == "False"


def _long_period_rig(ms: ModelSet, outage_from_s: float | None) -> Rig:
    """30-minute control periods; the load falls at 20 min, so the decision at 60 min plans
    the scale-ins for later in its period; Prometheus answers nothing from ``outage_from_s``
    on (a load of NaN: the source raises MetricsError)."""
    import math

    c = per_server(ms)

    def load(t: float) -> float:
        if outage_from_s is not None and t >= outage_from_s:
            return math.nan
        return 4.6 * c if t < 1200 else 2.5 * c

    return Rig(ms, load, start_s=-7200, spec_patch={
        "controlPeriod": "30m",
        "prediction": {"method": "persistence", "horizon": "30m", "step": "60s"}})


def test_hazard_a_stale_plan_never_scales_in_during_an_outage(ms: ModelSet) -> None:
    """Issue 35, finding 3: between control periods the plan in the status was carried out
    without a look at the metrics; with 30-minute periods and Prometheus down from 100 s
    after a decision, a decommission went out 29 minutes into the outage. A scale-in now
    starts only on a decision younger than staleAfter (120 s): when one falls due on an
    older plan the operator decides again, and with Prometheus down it holds."""
    rig = _long_period_rig(ms, outage_from_s=3700.0)
    rig.run(4 * 3600)
    assert rig.calls("decommission") == [], rig.calls("decommission")
    assert rig.kube.spec_replicas == 5
    down = rig.cond("ScalingDown")
    assert down["reason"] == "NoEvidence", down
    # the same run without the outage: the scale-ins happen, each on a fresh decision
    rig = _long_period_rig(ms, outage_from_s=None)
    ages: list[float] = []
    seen = 0
    while rig.t < 4 * 3600:
        rig.run(rig.t + 5)
        if len(rig.calls("decommission")) > seen:
            seen = len(rig.calls("decommission"))
            ages.append(rig.kube.now_s - float(rig.policies.status["lastDecision"]["epoch"]))
    assert rig.kube.spec_replicas == 3 and len(ages) == 2, (rig.kube.spec_replicas, ages)
    assert all(a <= 120 for a in ages), ages


def test_hazard_the_fresh_decision_gate() -> None:
    from elastore.planner.admission import Facts, Intent, admit

    scale_in, scale_out = Intent("ScaleIn", 3, 4), Intent("ScaleOut", 5, 4)
    old = Facts(enforce=True, decision_age_s=700.0, stale_after_s=120.0)
    held = admit(scale_in, old)
    assert held is not None and held.reason == "StaleDecision" and "700 s ago" in held.message
    assert admit(scale_out, old) is None  # a scale-out on an old plan adds capacity only
    assert admit(Intent("ScaleIn", 3, 4, user_named=True), old) is None  # paused-replicas
    assert admit(scale_in, Facts(enforce=True, decision_age_s=60.0, stale_after_s=120.0)) \
        is None
    unknown = admit(scale_in, Facts(enforce=True, decision_age_s=None, stale_after_s=120.0))
    assert unknown is not None and unknown.reason == "StaleDecision"


def test_hazard_huge_data_is_a_clear_condition_not_a_crash_every_tick(ms: ModelSet) -> None:
    """Issue 35, finding 4: dataBytes of 1e18 made every tick an InternalError ('year 13706
    is out of range'); 3 volumes of 100 GiB cannot hold it: MetricsImplausible, no decision,
    no step, and the loop goes on."""
    rig = Rig(ms, day(ms))
    rig.metrics.data_bytes = lambda: 1e18
    rig.run(600)
    deg = rig.cond("Degraded")
    assert deg["reason"] == "MetricsImplausible" and "3 volumes of 100 GiB" in deg["message"]
    assert not [r for r, _, _ in rig.policies.events if r == "InternalError"]
    assert rig.calls("decommission") == [] and rig.kube.spec_replicas == 3
    rig.metrics.data_bytes = lambda: 9 * GIB  # the exporter mended: decisions again
    rig.run(1200)
    assert rig.cond("Degraded")["reason"] == "Healthy"


def test_hazard_a_huge_load_sample_is_a_gap_not_a_reason_for_max(ms: ModelSet) -> None:
    """One 1e300 sample in the load's history set desired to replicas.max; it is now a gap,
    said in an Event, and the forecast follows the rest (as it does without the sample)."""
    base = day(ms)

    def spiked(t: float) -> float:  # five steps of samples, a day-season (24 steps) back
        return 1e300 if -1500 <= t < -1200 else base(t)

    # seasonal-naive-24 forecasts from the sample 24 steps back: the one that is 1e300
    rigs = {name: Rig(ms, load, start_s=-7200, spec_patch={
        "prediction": {"method": "seasonal-naive-24", "horizon": "60s", "step": "60s"}})
        for name, load in (("clean", base), ("spiked", spiked))}
    for rig in rigs.values():
        rig.run(240)
    clean, spiked_ = (rigs[n].policies.status for n in ("clean", "spiked"))
    assert spiked_["desiredReplicas"] == clean["desiredReplicas"] < 8, (
        spiked_["desiredReplicas"], clean["desiredReplicas"])
    said = [m for r, m, _ in rigs["spiked"].policies.events if r == "MetricsImplausible"]
    assert said and "read as gaps" in said[0], said
    # the load now above the ceiling: no decision at all
    rig = Rig(ms, lambda t: 1e12)
    rig.run(60)
    assert rig.cond("Degraded")["reason"] == "MetricsImplausible"
    assert rig.kube.spec_replicas == 3


def test_hazard_deadlines_are_capped_and_any_time_shows() -> None:
    """At 1 MiB/s, 2e15 bytes gave a deadline 30 years away; a forged status's time could
    not be shown at all. A step's deadline is at most 30 days away, and a time outside the
    calendar shows clamped."""
    from elastore.operator.conditions import iso
    from elastore.stores import operation

    op = operation.start("ScaleIn", "db", 4, 1000.0, 2e15 / 2**20)
    assert op.deadline_s is not None and op.deadline_s - 1000.0 == operation.MAX_DEADLINE_S
    assert op.expected_end_s - 1000.0 <= operation.MAX_DEADLINE_S
    assert operation.deadline(0.0, float("inf")) == operation.MAX_DEADLINE_S
    assert operation.deadline(0.0, 60.0) == 2 * 60 + operation.DEADLINE_MARGIN_S
    assert iso(1e18) == "9999-12-31T23:59:59Z" and iso(-1e18) == "0001-01-01T00:00:00Z"
    assert iso(float("nan")) == "9999-12-31T23:59:59Z"
    forged = operation.OperationState.from_status({**op.to_status(), "deadlineEpoch": 1e18})
    assert forged.to_status()["deadline"] == "9999-12-31T23:59:59Z"


def test_an_api_server_that_does_not_answer_is_retried_not_a_bug(ms: ModelSet) -> None:
    """urllib3's transport errors (the API server restarting: refused, reset, timed out)
    make the tick come back in POLL_S, then UNANSWERED_SLOW_S after a minute of them, with
    no InternalError said; an answer it did not like, or a bug, still propagates."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    from elastore.operator.runner import POLL_S, UNANSWERED_FAST, UNANSWERED_SLOW_S

    rig = Rig(ms, lambda _t: 100.0)
    rig.run(60.0)  # a first decision
    real_get = rig.policies.get

    def refused(*_a: Any, **_k: Any) -> Any:
        raise MaxRetryError(None, "/apis/elastore.io",  # type: ignore[arg-type]
                            NewConnectionError(None, "Connection refused"))

    rig.policies.get = refused  # type: ignore[method-assign]
    waits = [rig.runner.tick() for _ in range(UNANSWERED_FAST + 1)]
    assert waits == [POLL_S] * UNANSWERED_FAST + [UNANSWERED_SLOW_S]
    assert not any(c.get("reason") == "InternalError"
                   for c in rig.policies.status.get("conditions", []))
    rig.policies.get = real_get  # type: ignore[method-assign]
    assert rig.runner.tick() > 0 and rig.runner._unanswered == 0  # answered: back to normal

    def bug(*_a: Any, **_k: Any) -> Any:
        raise ZeroDivisionError("a bug")

    rig.policies.get = bug  # type: ignore[method-assign]
    with pytest.raises(ZeroDivisionError):
        rig.runner.tick()


class RefusingPolicies(MemoryPolicies):
    """The policy API, with the writes of the operation refused while ``refuse`` is set
    (an RBAC change or an admission webhook would refuse them so)."""

    refuse: bool = False

    def patch_status(self, ns: str, name: str, status: dict[str, Any],
                     expect_version: str | None = None) -> str | None:
        if self.refuse and "operation" in status:
            raise ElastoreError(f"writing the status of ElasticPolicy {ns}/{name}: Forbidden")
        return super().patch_status(ns, name, status, expect_version)


def test_a_refused_save_names_the_state_and_nothing_is_acted_on(ms: ModelSet) -> None:
    """A step's next state that the API server refuses: the tick fails with an error that
    names the state, the store is not touched, and the transition's Event is not said (it
    follows the save). Allowed again, the step goes on from where the store is."""
    rig = Rig(ms, day(ms))
    refusing = RefusingPolicies(rig.policies.body)
    rig.policies = refusing
    rig.runner = rig.new_runner()
    rig.run(1800, stop=lambda: bool(refusing.status.get("operation")))
    op = refusing.status["operation"]
    assert op["kind"] == "ScaleOut", op
    refusing.refuse = True
    calls, said = list(rig.kube.calls), list(refusing.events)
    saved = dict(op)
    with pytest.raises(ElastoreError, match=r"ScaleOut \d+ -> \d+ phase \w+ not recorded, "
                                            r"so not acted on: writing the status .*Forbidden"):
        for _ in range(200):  # until the step's state changes
            rig.kube.now_s = rig.t
            rig.runner.tick()
            rig.kube.advance(rig.t, 5.0)
            rig.t += 5.0
    assert refusing.status["operation"] == saved  # the record is as it was
    # nothing done to the store since the refusal but reads, nothing said of the transition
    assert [c for _, c in rig.kube.calls[len(calls):] if not c.startswith(
        ("status", "netstats", "get"))] == [], rig.kube.calls[len(calls):]
    new = [r for r, _, _ in refusing.events[len(said):]]
    assert not any(r.startswith("ScaleOut") for r in new), new
    refusing.refuse = False
    rig.next_s = rig.t
    rig.run(rig.t + 1800, stop=lambda: not refusing.status.get("operation"))
    assert not refusing.status.get("operation") and rig.kube.spec_replicas == op["toReplicas"]


class LostAnswers(MemoryPolicies):
    """The policy API, whose answer to the write of a ScaleIn's phase Scaling is lost once:
    the write lands, the client sees an error (a reset connection, a timeout on a loaded
    API server), as it would if the process died between the write and its effect."""

    lose: bool = True

    def patch_status(self, ns: str, name: str, status: dict[str, Any],
                     expect_version: str | None = None) -> str | None:
        got = super().patch_status(ns, name, status, expect_version)
        op = status.get("operation") or {}
        if self.lose and (op.get("kind"), op.get("phase")) == ("ScaleIn", "Scaling"):
            self.lose = False
            raise ElastoreError(f"writing the status of ElasticPolicy {ns}/{name}: "
                                "connection reset by peer")
        return got


def test_a_scale_in_recorded_at_scaling_but_not_acted_on_still_marks_its_volume(
        ms: ModelSet) -> None:
    """The state Scaling is in the status but the tick that wrote it did not act (its
    answer was lost; a killed process is the same). The next tick lowers the replicas on
    the store's own facts, and the PVC left behind carries this operation's left-ring
    mark, as it does when one tick does both: a later scale-out of that ordinal deletes
    the volume instead of stopping at an unmarked one (CI run of stop 43: no mark)."""
    from elastore.stores.operation import mark_honoured

    rig = Rig(ms, day(ms))
    lossy = LostAnswers(rig.policies.body)
    rig.policies = lossy
    rig.runner = rig.new_runner()
    failed: list[str] = []
    first: dict[str, Any] = {}  # the first scale-in, as its status said it
    while rig.t < 3600:
        rig.kube.now_s = rig.t
        if rig.t >= rig.next_s:
            try:
                rig.next_s = rig.t + rig.runner.tick()
            except ElastoreError as exc:
                failed.append(str(exc))
                rig.next_s = rig.t + 5.0
        op = lossy.status.get("operation") or {}
        if not first and op.get("kind") == "ScaleIn" and op.get("id"):
            first = dict(op)
        if first and op.get("id") != first["id"]:
            break
        rig.kube.advance(rig.t, 5.0)
        rig.t += 5.0
    assert first, "no scale-in in an hour"
    frm, to = first["fromReplicas"], first["toReplicas"]
    assert not lossy.lose and failed == [
        f"ScaleIn {frm} -> {to} phase Scaling not recorded, so not acted on: writing the "
        "status of ElasticPolicy shop/orders: connection reset by peer"], failed
    assert rig.kube.spec_replicas == to
    got = rig.kube.pvc_mark(NS, first["pvc"])
    assert got is not None and mark_honoured(got[1], first["id"], got[0]), (got, first)


class StaleReads:
    """The policy API as a second replica sees it while another one ticks: its read is the
    one it made before the other replica's tick (``snapshot``); its writes go to the one
    policy, which checks their precondition."""

    def __init__(self, real: MemoryPolicies) -> None:
        self.real = real
        self.snapshot: dict[str, Any] | None = None

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        if self.snapshot is not None:
            return copy.deepcopy(self.snapshot)
        return self.real.get(ns, name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_two_replicas_that_both_lead_record_and_act_each_step_once(
        ms: ModelSet, caplog: pytest.LogCaptureFixture) -> None:
    """Two runners on one policy, both leading (kopf's peering has no fencing: after an
    API outage a standby can lead while the old leader still ticks), each tick of one made
    on the state read before the other's tick. Every status write is made only if the
    policy is still as the tick read it: the later tick's write is refused
    (StatusConflict), it acts on nothing and reads again. Through a scale-out and back,
    one decommission per node and one size write per step."""
    rig = Rig(ms, day(ms))
    views = (StaleReads(rig.policies), StaleReads(rig.policies))
    runners = [Runner(NS, POLICY, v, rig.kube, lambda _spec: rig.ms,  # type: ignore[arg-type]
                      clock=lambda: rig.kube.now_s, source=lambda _spec, _ns: rig.metrics)
               for v in views]
    k = 0
    while rig.t < 3 * 3600:
        rig.kube.now_s = rig.t
        first, second = (0, 1) if k % 2 == 0 else (1, 0)
        views[second].snapshot = rig.policies.get(NS, POLICY)  # read before the other's
        views[first].snapshot = None
        runners[first].tick()
        runners[second].tick()
        views[second].snapshot = None
        rig.kube.advance(rig.t, 5.0)
        rig.t += 5.0
        k += 1
    dropped = [r for r in caplog.records if "this tick's result is dropped" in r.message]
    assert len(dropped) >= k // 2, len(dropped)  # every tick on a stale read
    sizes = [int(c.split()[1]) for c in rig.calls("scale")]
    peak = max(sizes)
    assert peak >= 5 and rig.kube.spec_replicas == 3, rig.kube.calls
    assert sizes == [*range(4, peak + 1), *range(peak - 1, 2, -1)], sizes
    assert rig.calls("decommission") == [f"decommission db-{n}" for n in range(peak - 1, 2, -1)]
    assert rig.kube.violations == []


def test_a_scale_in_on_the_first_period_is_timed_for_the_data_it_moves(ms: ModelSet) -> None:
    """A fresh policy whose first period already scales in: its deadline must count the
    node's data, which this tick observed (the status holds no observation yet). Timed from
    the node overhead alone (0 s here), the decommission of 40 GiB was past its 900 s
    deadline long before it ended, and the operation sat Stuck waiting for a human while the
    node had in fact left (the simulator's operator stayed at one size for two weeks)."""
    rig = Rig(ms, lambda _t: 1.5 * per_server(ms), planner="Horizon",
              spec_patch={"scaleDown": {"stabilizationSeconds": 0},
                          "scaleUp": {"cleanup": False}})
    rig.cluster = Cluster.balanced(5, 200 * GIB, boot_s=30.0)
    rig.kube = SimulatedKube(rig.cluster, NS, STS, volume_bytes=400 * GIB)
    rig.metrics = TraceMetrics(lambda _t: 1.5 * per_server(ms), 0.95, rig.cluster.total_bytes,
                               -3600.0, 1e9)
    rig.runner = rig.new_runner()
    rig.run(5.0)
    op = rig.policies.status["operation"]
    assert op["kind"] == "ScaleIn" and op["startedEpoch"] == 0.0, op
    rate_bps = float(rig.policies.status["migrationMiBps"]) * 2**20
    assert op["deadlineEpoch"] - op["startedEpoch"] >= 2 * (200 * GIB / 5) / rate_bps, op
    # and it ends, never Stuck: the node leaves, its pod goes
    phases: set[str] = set()

    def watch() -> bool:
        now = rig.policies.status.get("operation") or {}
        if now.get("id") == op["id"]:
            phases.add(now["phase"])
        return rig.kube.spec_replicas < 5

    rig.run(op["deadlineEpoch"] + 600.0, stop=watch)
    assert rig.kube.spec_replicas == 4 and "Stuck" not in phases, (
        phases, rig.policies.status.get("operation"))
    assert rig.calls("decommission") == ["decommission db-4"]
    assert rig.kube.violations == []


@pytest.mark.parametrize("planner", ["Window", "Horizon"])
def test_a_lowered_max_brings_the_statefulset_back_to_it_under_load(
        ms: ModelSet, planner: str) -> None:
    """The load holds 5 servers busy; the user lowers replicas.max to 4: the operator
    decommissions the fifth node (one, verified as every scale-in) although the load still
    wants it, as HPA brings a target back to its max, and the status says why."""
    rig = Rig(ms, lambda t: 4.5 * per_server(ms), planner=planner)
    rig.run(1800)
    assert rig.kube.spec_replicas == 5, rig.policies.status.get("lastDecision")
    assert not rig.calls("decommission")
    rig.policies.body["spec"]["replicas"]["max"] = 4
    rig.policies.body["metadata"]["generation"] = 2
    rig.run(rig.t + 60)
    said = rig.policies.status["lastDecision"]["reason"]
    assert "5 server(s) are above replicas.max 4: removed" in said, said
    rig.run(rig.t + 1800)
    assert rig.kube.spec_replicas == 4, rig.policies.status.get("lastDecision")
    assert len(rig.calls("decommission")) == 1, rig.kube.calls
    assert rig.policies.status["desiredReplicas"] == 4
