"""The operator on a real control plane (kube-apiserver, etcd, controller-manager,
scheduler, kwok) with a real Prometheus: the API server's validation of ElasticPolicy,
Recommend mode, Degraded on missing metrics, leader election between two replicas,
graceful shutdown, and the Helm chart with its RBAC.

The pods are kwok's (no containers run), so nothing here needs a Cassandra node: the
scenarios that exec nodetool into real nodes are in test_operator_e2e.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_support import (
    CassandraMetrics,
    OperatorProcess,
    Prometheus,
    events,
    get,
    policy,
    start_control_plane,
    statefulset,
    wait_until,
)
from testbed.k8s import ControlPlane, free_port

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("k8s"))
    yield cp
    cp.stop()


@pytest.fixture(scope="module")
def metrics() -> Iterator[CassandraMetrics]:
    m = CassandraMetrics(rps=800.0)
    yield m
    m.close()


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, metrics: CassandraMetrics
         ) -> Iterator[Prometheus]:
    p = Prometheus(tmp_path_factory.mktemp("prom"), [metrics.target])
    yield p
    p.close()


def fast_policy(ns: str, url: str, **spec: Any) -> str:
    """Policy "orders" on StatefulSet "cass": a 10 s period and horizon, 2 s steps."""
    return policy("orders", ns, "cass", controlPeriod="10s",
                  prediction={"horizon": "10s", "step": "2s"},
                  metrics={"prometheus": {"url": url}}, **spec)


def namespace(cp: ControlPlane, name: str, replicas: int = 3) -> str:
    cp.kubectl("create", "namespace", name)
    cp.kubectl("apply", "-f", "-", stdin=statefulset("cass", name, replicas))
    wait_until(f"{replicas} pods in {name}", lambda: get(cp, "statefulset", "cass", name)
               .get("status", {}).get("readyReplicas") == replicas, 60)
    return name


def status(cp: ControlPlane, name: str, ns: str) -> dict[str, Any]:
    return dict(get(cp, "elasticpolicy", name, ns).get("status") or {})


def status_when(cp: ControlPlane, name: str, ns: str,
                pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    st = status(cp, name, ns)
    return st if pred(st) else None


def cond(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == ctype), {})


# ------------------------------------------------------------------------------------------
INVALID = [
    ("min > max", {"replicas": {"min": 5, "max": 4}},
     "replicas.min must be <= replicas.max"),
    ("min below RF", {"replicas": {"min": 2, "max": 6}},
     "replicas.min must be >= target.replicationFactor"),
    ("zero latency", {"slo": {"latencyMs": 0}}, "spec.slo.latencyMs"),
    ("p90", {"slo": {"latencyMs": 50, "percentile": 90}},
     'spec.slo.percentile: Unsupported value: 90'),
    ("mode", {"mode": "Auto"}, "spec.mode: Unsupported value"),
    ("period too short", {"controlPeriod": "5s"}, "controlPeriod must be between 10s and 24h"),
    ("period not a duration", {"controlPeriod": "ten minutes"},
     "spec.controlPeriod in body should match"),
    ("min > max migration", {"migration": {"minMiBps": 5, "maxMiBps": 2}},
     "migration.minMiBps must be <= migration.maxMiBps"),
    ("policy", {"migration": {"policy": "Fastest"}}, "spec.migration.policy: Unsupported"),
    ("enforce without metrics", {"mode": "Enforce"},
     "mode Enforce needs spec.metrics: elastore never acts without evidence"),
    ("store", {"target": {"name": "cass", "replicationFactor": 3, "store": "mongo"}},
     "spec.target.store: Unsupported value"),
    ("url", {"metrics": {"prometheus": {"url": "ftp://prometheus:9090"}}},
     "spec.metrics.prometheus.url in body should match"),
    ("RF 0", {"target": {"name": "cass", "replicationFactor": 0}},
     "spec.target.replicationFactor"),
    ("no target name", {"target": {"replicationFactor": 3}}, "spec.target.name: Required"),
    ("horizon < period", {"controlPeriod": "10m", "prediction": {"horizon": "5m"}},
     "prediction.horizon must be >= controlPeriod"),
    ("pvc policy", {"scaleDown": {"pvcPolicy": "Shred"}}, "spec.scaleDown.pvcPolicy"),
    ("interference without its query", {"interference": {"enabled": True}},
     "interference.enabled needs spec.metrics.prometheus.queries.interference"),
    ("negative stabilization", {"scaleDown": {"stabilizationSeconds": -1}},
     "spec.scaleDown.stabilizationSeconds"),
    ("unknown field", {"replica": 4}, 'unknown field "spec.replica"'),
]


def test_the_api_server_rejects_invalid_policies_with_a_clear_message(
        cp: ControlPlane) -> None:
    ns = "invalid"
    cp.kubectl("create", "namespace", ns)
    for k, (what, patch, message) in enumerate(INVALID):
        doc = json.loads(policy(f"bad-{k}", ns, "cass"))
        doc["spec"].update(patch)
        res = cp.kubectl("apply", "-f", "-", stdin=json.dumps(doc), check=False)
        assert res.returncode != 0, f"{what}: accepted"
        assert message in res.stderr, f"{what}: {res.stderr}"
    assert len(INVALID) >= 10
    listed = json.loads(cp.kubectl("get", "elasticpolicies", "-n", ns, "-o", "json").stdout)
    assert listed["items"] == []  # nothing was stored
    # and a valid one is accepted, with the defaults filled in by the API server
    cp.kubectl("apply", "-f", "-", stdin=policy("good", ns, "cass"))
    spec = get(cp, "elasticpolicy", "good", ns)["spec"]
    assert spec["mode"] == "Recommend" and spec["controlPeriod"] == "10m"
    assert spec["migration"]["policy"] == "PreferClients"
    assert spec["target"]["nodetool"] == ["nodetool"]


def test_recommend_mode_publishes_its_plan_and_changes_nothing_else(
        cp: ControlPlane, prom: Prometheus, tmp_path: Path) -> None:
    """800 requests/s need more than the 3 servers of the built-in lab model: the status
    says so, with the forecast and the next action, and the StatefulSet is untouched."""
    ns = namespace(cp, "recommend")
    sts_before = get(cp, "statefulset", "cass", ns)
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log")
    try:
        cp.kubectl("apply", "-f", "-", stdin=fast_policy(ns, prom.url))
        st = wait_until("a decision", lambda: status_when(
            cp, "orders", ns, lambda s: bool(s.get("forecast"))), 150)
        assert st["forecast"]["requestsPerSecond"] == pytest.approx(800, rel=0.1)
        assert st["currentReplicas"] == 3 and st["desiredReplicas"] >= 5
        assert st["nextAction"]["replicas"] >= 4 and st["nextAction"]["reason"]
        assert cond(st, "Ready")["status"] == "True"
        assert cond(st, "Forecasting")["status"] == "True"
        assert cond(st, "Degraded")["status"] == "False"
        st = wait_until("the recommendation", lambda: status_when(
            cp, "orders", ns, lambda s: cond(s, "ScalingUp").get("reason") == "Recommend"), 60)
        assert "nothing is changed" in cond(st, "ScalingUp")["message"]
        # a second period happens, and still nothing but the status changed
        first = st["lastDecision"]["epoch"]
        wait_until("a second decision", lambda: status(cp, "orders", ns)["lastDecision"][
            "epoch"] > first, 60)
        sts = get(cp, "statefulset", "cass", ns)
        assert sts["spec"]["replicas"] == 3
        assert sts["metadata"]["generation"] == sts_before["metadata"]["generation"]
        assert "operation" not in status(cp, "orders", ns) or \
            status(cp, "orders", ns)["operation"] is None
        reasons = [e["reason"] for e in events(cp, ns, "orders")]
        assert reasons.count("Decision") >= 2
        assert not any(r.startswith("Scale") for r in reasons)
        # kubectl get shows the printer columns
        table = cp.kubectl("get", "elasticpolicies", "-n", ns).stdout
        head, row = table.splitlines()[:2]
        assert head.split() == ["NAME", "TARGET", "MODE", "REPLICAS", "DESIRED", "FORECAST",
                                "AGE"]
        assert "Recommend" in row and "req/s" in row
        # the operator's own metrics
        text = op.metrics()
        assert f'elastore_forecast_requests_per_second{{namespace="{ns}",policy="orders"}}' \
            in text
        assert 'elastore_desired_replicas{namespace="recommend",policy="orders"}' in text
        assert "elastore_decision_seconds_count" in text
    finally:
        assert op.stop() == 0, op.tail()  # graceful: SIGTERM ends it cleanly


@pytest.mark.parametrize("case", ["unreachable", "empty"])
def test_missing_metrics_give_degraded_and_no_action(cp: ControlPlane, case: str,
                                                     tmp_path: Path) -> None:
    ns = namespace(cp, f"degraded-{case}")
    empty = None
    if case == "unreachable":
        url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        reason = "PrometheusUnreachable"
    else:
        empty = Prometheus(tmp_path / "prom", [])  # a real Prometheus with no series
        url, reason = empty.url, "MetricsMissing"
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log")
    try:
        cp.kubectl("apply", "-f", "-", stdin=fast_policy(ns, url, mode="Enforce"))
        st = wait_until("Degraded", lambda: status_when(
            cp, "orders", ns, lambda s: cond(s, "Degraded").get("status") == "True"), 90)
        assert cond(st, "Degraded")["reason"] == reason, st
        assert cond(st, "Ready")["status"] == "False"
        assert cond(st, "Forecasting")["status"] == "False"
        assert st["lastDecision"]["ok"] is False and st.get("nextAction") is None
        ev = [e for e in events(cp, ns, "orders") if e["reason"] == reason]
        assert ev and ev[0]["type"] == "Warning"
        # it keeps trying, and still does nothing
        first = st["lastDecision"]["epoch"]
        wait_until("a retry", lambda: status(cp, "orders", ns)["lastDecision"]["epoch"] >
                   first, 60)
        assert get(cp, "statefulset", "cass", ns)["spec"]["replicas"] == 3
        assert not any(e["reason"].startswith("Scale") for e in events(cp, ns, "orders"))
    finally:
        op.stop()
        if empty is not None:
            empty.close()


def test_two_replicas_exactly_one_acts_and_the_other_takes_over(
        cp: ControlPlane, prom: Prometheus, tmp_path: Path) -> None:
    """kopf peering with random priorities: every decision comes from one replica; when
    it dies (SIGKILL: no goodbye), the other resumes within the peering lifetime."""
    ns = namespace(cp, "ha")
    a = OperatorProcess(cp.kubeconfig, tmp_path / "a.log",
                        extra_env={"ELASTORE_IDENTITY": "replica-a"}, lifetime_s=10)
    b = OperatorProcess(cp.kubeconfig, tmp_path / "b.log",
                        extra_env={"ELASTORE_IDENTITY": "replica-b"}, lifetime_s=10)
    try:
        cp.kubectl("apply", "-f", "-", stdin=fast_policy(ns, prom.url))

        def deciders() -> list[str]:
            return [e.get("reportingInstance", "") for e in events(cp, ns, "orders")
                    if e["reason"] == "Decision"]

        wait_until("three decisions", lambda: len(deciders()) >= 3, 120)
        who = set(deciders())
        assert len(who) == 1, who  # exactly one replica acts
        leader, other = (a, b) if who == {"replica-a"} else (b, a)
        assert who <= {"replica-a", "replica-b"}
        n_before = len(deciders())
        leader.stop(signal.SIGKILL)
        took_over = wait_until(
            "the other replica to take over",
            lambda: [d for d in deciders()[n_before:] if d != next(iter(who))], 120)
        assert other.alive() and took_over
    finally:
        for p in (a, b):
            p.stop()


def test_the_chart_installs_and_its_rbac_is_enough(cp: ControlPlane, prom: Prometheus,
                                                   tmp_path: Path) -> None:
    """helm installs the chart on the real API server; an operator running with exactly
    the chart's ServiceAccount does its work (reads, status, events); the role does not
    allow what the operator never needs."""
    from testbed.k8s import ensure_helm, kubeconfig

    helm = ensure_helm(print)
    res = subprocess.run([str(helm), "install", "elastore",
                          str(Path(__file__).resolve().parent.parent / "charts" / "elastore"),
                          "--namespace", "elastore-system", "--create-namespace",
                          "--kubeconfig", str(cp.kubeconfig), "--set",
                          "peering.name=elastore-chart", "--wait", "--timeout", "120s"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    dep = get(cp, "deployment", "elastore", "elastore-system")
    assert dep["spec"]["replicas"] == 2
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["operator", "run"] and "--peering=elastore-chart" in args
    sa = "system:serviceaccount:elastore-system:elastore"

    def can_i(v: str) -> str:
        verb, res = v.split()
        kind, _, sub = res.partition("/")
        args = [verb, kind, *([f"--subresource={sub}"] if sub else [])]
        return str(cp.kubectl("auth", "can-i", *args, "-A", "--as", sa,
                              check=False).stdout.strip())

    can = {v: can_i(v)
           for v in ("patch statefulsets/scale", "create pods/exec",
                     "patch elasticpolicies/status", "delete statefulsets", "create pods",
                     "delete persistentvolumeclaims", "patch clusterkopfpeerings")}
    assert can == {"patch statefulsets/scale": "yes", "create pods/exec": "yes",
                   "patch elasticpolicies/status": "yes", "delete statefulsets": "no",
                   "create pods": "no", "delete persistentvolumeclaims": "yes",
                   "patch clusterkopfpeerings": "yes"}, can
    token = cp.kubectl("create", "token", "elastore", "-n", "elastore-system").stdout.strip()
    kc = kubeconfig(cp.server, cp.root / "pki", tmp_path / "sa.kubeconfig", token=token,
                    user="elastore")
    ns = namespace(cp, "chart")
    op = OperatorProcess(kc, tmp_path / "op.log", args=("--peering", "elastore-chart"))
    try:
        cp.kubectl("apply", "-f", "-", stdin=fast_policy(ns, prom.url))
        st = wait_until("a decision by the chart's ServiceAccount", lambda: status_when(
            cp, "orders", ns, lambda s: bool(s.get("forecast"))), 120)
        assert cond(st, "Ready")["status"] == "True", op.tail()
        assert any(e["reason"] == "Decision" for e in events(cp, ns, "orders"))
        assert "Forbidden" not in op.tail(20000), op.tail()
    finally:
        op.stop()
