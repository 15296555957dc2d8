"""The operator's online calibration of its capacity model (issue 18): on by default without
a model, per-node observations, status.model, the ConfigMap it keeps (owned, and continued
after a restart), scale-out only below the confidence threshold, and the bad cases (a
missing latency, a foreign or unreadable ConfigMap). The runner on the simulated cluster:
the learning's wiring, not its accuracy (benchmarks/online_calibration.py measures that,
tests/test_online_model.py its method)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from elastore.errors import MetricsError
from elastore.models.bundle import ModelSet
from elastore.operator import calibration
from elastore.operator.metrics import DiskReading, NodeReading, Snapshot
from elastore.operator.runner import Runner
from elastore.resources import builtin_model
from elastore.sim.engine import Cluster
from elastore.sim.kube import MemoryPolicies, SimulatedKube, TraceMetrics
from elastore.units import GIB

NS, POLICY, STS = "shop", "orders", "db"
SPEC: dict[str, Any] = {
    "target": {"name": STS, "replicationFactor": 3},
    "replicas": {"min": 3, "max": 8},
    "slo": {"latencyMs": 30},
    "mode": "Recommend",
    "controlPeriod": "60s",
    "prediction": {"method": "persistence", "horizon": "60s", "step": "60s"},
    "planner": {"mode": "Window", "lookahead": "2h"},
    "migration": {"nodeOverheadSeconds": 0},
    "scaleDown": {"stabilizationSeconds": 60},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
}
CM = calibration.configmap_name(POLICY)


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(builtin_model("placeholder"))


class Nodes:
    """The replay's metrics plus each node's own: the load split evenly over the serving
    nodes, and the latency the true model gives at it (the store *is* the model: the
    learning must find it from a prior that is not)."""

    def __init__(self, inner: TraceMetrics, kube: SimulatedKube, truth: ModelSet,
                 no_latency: set[str] | None = None) -> None:
        self.inner, self.kube, self.truth = inner, kube, truth
        self.no_latency = no_latency or set()
        self.asked = 0

    def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
        return self.inner.snapshot(at_s, steps, step_s)

    def scalar(self, name: str, at_s: float) -> float:
        raise MetricsError("MetricsMissing", f"{name}: Prometheus returned no series")

    def disk(self, at_s: float, steps: int, step_s: float,
             pvc_template: str | None = None) -> DiskReading:
        return self.inner.disk(at_s, steps, step_s, pvc_template)

    def per_node(self, at_s: float) -> dict[str, NodeReading]:
        self.asked += 1
        n = self.kube.cluster.serving
        per = self.inner.load_rps(at_s) / n
        lat = float(self.truth.capacity.latency_ms(per, 0.95, 0.0, 0.0))
        return {f"{STS}-{k}": NodeReading(0.95 * per, 0.05 * per,
                                          None if f"{STS}-{k}" in self.no_latency else lat,
                                          0.0)
                for k in range(n)}


class Rig:
    def __init__(self, ms: ModelSet, load: Callable[[float], float], replicas: int = 3,
                 spec: dict[str, Any] | None = None, no_latency: set[str] | None = None
                 ) -> None:
        self.cluster = Cluster.balanced(replicas, 3 * GIB, boot_s=30.0)
        self.kube = SimulatedKube(self.cluster, NS, STS, volume_bytes=100 * GIB)
        self.policies = MemoryPolicies.of(NS, POLICY, spec or SPEC)
        self.nodes = Nodes(TraceMetrics(load, 0.95, self.cluster.total_bytes, -3600.0, 1e9),
                           self.kube, ms, no_latency)
        self.ms = ms
        self.runner = self.new_runner()
        self.t = self.next_s = 0.0

    def new_runner(self) -> Runner:
        return Runner(NS, POLICY, self.policies, self.kube, lambda _spec: self.ms,
                      clock=lambda: self.kube.now_s, source=lambda _spec, _ns: self.nodes)

    def run(self, until_s: float, dt: float = 5.0) -> None:
        while self.t < until_s:
            self.kube.now_s = self.t
            if self.t >= self.next_s:
                self.next_s = self.t + self.runner.tick()
            self.kube.advance(self.t, dt)
            self.t += dt

    @property
    def model(self) -> dict[str, Any]:
        return dict(self.policies.status["model"])

    def cond(self, ctype: str) -> dict[str, Any]:
        return next(c for c in self.policies.status["conditions"] if c["type"] == ctype)


def cap(ms: ModelSet) -> float:
    return float(ms.capacity.capacity(0.95, 0.0, 0.0))


def busy(ms: ModelSet) -> Callable[[float], float]:
    """60 to 95 % of three nodes' capacity, a new level every period: several operating
    points near the border (one point alone cannot tell capacity from base latency)."""
    levels = (0.6, 0.75, 0.9, 0.95, 0.8, 0.7)
    return lambda t: 3 * cap(ms) * levels[int(t // 60) % len(levels)]


def test_learning_is_on_by_default_and_the_model_is_kept_in_an_owned_configmap(ms):
    rig = Rig(ms, busy(ms))
    rig.run(60 * 5)
    m = rig.model
    assert m["source"] == "learned" and m["configMap"] == CM
    assert m["prior"] == "the built-in lab profile x0.5"
    assert m["samples"] == 3 * 5 and m["skipped"] == 0
    assert m["observation"].startswith("3 of 3 node(s) observed")
    # the prior was half the truth; five periods of three nodes near the border find it
    assert m["priorCapacityRps"] == pytest.approx(0.5 * cap(ms), rel=0.03)
    assert m["capacityRps"] == pytest.approx(cap(ms), rel=0.05)
    assert m["confidence"] >= 0.8 and m["scaleInAllowed"] is True
    assert m["borderObserved"] is True and m.get("explorationCapRps") is None  # (merge: null drops)
    assert 0 < m["observedFraction"] <= 1 and m["fitErrorPct"] < 5
    data, owners = rig.policies.configmaps[(NS, CM)]
    assert owners == [rig.policies.body["metadata"]["uid"]]
    doc = ModelSet.loads(data[calibration.KEY], "cm")  # the existing versioned format
    assert float(doc.capacity.capacity(0.95, 0.0, 0.0)) == pytest.approx(m["capacityRps"],
                                                                         rel=0.02)
    state = calibration.learner_from_document(data[calibration.KEY], "cm")
    assert state is not None and state["observations"] == 15


def test_the_learning_continues_after_an_operator_restart(ms):
    rig = Rig(ms, busy(ms))
    rig.run(60 * 3)
    before = rig.model
    assert before["samples"] == 9
    rig.runner = rig.new_runner()  # a new process: nothing in memory, the ConfigMap stays
    rig.run(rig.t + 60 * 2)
    after = rig.model
    assert after["samples"] == 15  # continued, not restarted from the prior
    assert after["confidence"] >= before["confidence"] - 1e-9


def test_the_plan_uses_the_learned_border_not_the_prior(ms):
    """The prior (half the capacity) alone would want twice the nodes; the learned model
    plans what the true model plans."""
    load = busy(ms)
    learned = Rig(ms, load)
    given = Rig(ms, load, spec={**copy.deepcopy(SPEC), "capacityModel": {"learn": False}})
    learned.run(60 * 6)
    given.run(60 * 6)
    assert given.policies.status["model"]["source"] == "builtin"
    assert "samples" not in given.policies.status["model"]
    assert learned.policies.status["desiredReplicas"] == given.policies.status["desiredReplicas"]


def test_exploration_is_capped_below_the_border(ms):
    """Light load only: the border is not observed, so the plan's capacity per node stays
    within 15 % of the highest load seen, whatever the posterior's median says."""
    load = 0.9 * cap(ms)  # 30 % per node on 3 nodes
    rig = Rig(ms, lambda t: load, spec={**copy.deepcopy(SPEC),
                                       "capacityModel": {"priorScale": 3.0}})
    rig.run(60 * 4)
    m = rig.model
    assert m["borderObserved"] is False
    # the plan keeps 10 % headroom: its load per node stays within 1.15 x the load seen
    assert m["explorationCapRps"] == pytest.approx(1.15 * load / 3 / 0.9, rel=1e-3)
    assert m["planningCapacityRps"] == pytest.approx(m["explorationCapRps"], rel=1e-3)
    assert m["planningCapacityRps"] < m["capacityRps"]


def test_below_the_confidence_threshold_enforce_only_scales_out(ms):
    """Eight nodes at light load: the plan wants seven (the exploration cap allows one
    node's step, 8/7 of the load per node), but the learned model is not confident (the
    latency of a lightly loaded node says little about its border), so no scale-in starts,
    and the condition says why; the same policy with its model given scales in."""
    spec = {**copy.deepcopy(SPEC), "mode": "Enforce"}
    load = lambda t: 0.8 * cap(ms)  # noqa: E731
    rig = Rig(ms, load, replicas=8, spec=spec)
    rig.run(60 * 6)
    assert rig.model["scaleInAllowed"] is False and rig.model["confidence"] < 0.8
    assert rig.policies.status["desiredReplicas"] == 7
    assert not [c for _, c in rig.kube.calls if c.startswith("scale")]
    down = rig.cond("ScalingDown")
    assert down["reason"] == "ModelLearning" and "only scale-out" in down["message"]
    given = Rig(ms, load, replicas=8, spec={**spec, "capacityModel": {"learn": False}})
    given.run(60 * 6)
    assert [c for _, c in given.kube.calls if c.startswith("scale")]


def test_a_node_without_a_latency_series_is_skipped_not_zero(ms):
    rig = Rig(ms, lambda t: 2.4 * cap(ms), no_latency={f"{STS}-2"})
    rig.run(60 * 2)
    m = rig.model
    assert m["samples"] == 4  # two nodes a period
    assert "no latency series for db-2 (skipped, not 0)" in m["observation"]


def test_a_configmap_of_someone_else_is_never_written_over(ms):
    rig = Rig(ms, lambda t: 2.4 * cap(ms))
    rig.policies.configmaps[(NS, CM)] = ({"model.json": "theirs"}, ["another-uid"])
    rig.run(60)
    degraded = rig.cond("Degraded")
    assert degraded["status"] == "True" and "not owned by this policy" in degraded["message"]
    assert rig.policies.configmaps[(NS, CM)] == ({"model.json": "theirs"}, ["another-uid"])


def test_an_unreadable_learned_model_is_replaced_and_said(ms):
    rig = Rig(ms, lambda t: 2.4 * cap(ms))
    uid = rig.policies.body["metadata"]["uid"]
    rig.policies.configmaps[(NS, CM)] = ({"model.json": "{not json"}, [uid])
    rig.run(60)
    assert "unreadable and is replaced" in rig.model["observation"]
    assert ("LearnedModelReset" in [r for r, _, w in rig.policies.events if w])
    assert rig.model["samples"] == 3
    ModelSet.loads(rig.policies.configmaps[(NS, CM)][0]["model.json"], "cm")
