"""What the operator reads from a real Prometheus (Debian's) when part of the cluster does not
report: one exporter per node, each a scrape target of its own, as Cassandra's JMX exporter
runs inside each node. A failed scrape is a real one (the exporter's port refuses), and the
series it leaves are marked stale by Prometheus itself.

Item 6 of issue 15: partial metrics are not low load."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_support import CassandraMetrics, NodeExporters, Prometheus, wait_until

from elastore.errors import MetricsError
from elastore.models import ModelSet
from elastore.operator.metrics import PrometheusSource
from elastore.operator.runner import Runner
from elastore.operator.spec import parse
from elastore.resources import builtin_model
from elastore.sim.engine import Cluster
from elastore.sim.kube import MemoryPolicies, SimulatedKube
from elastore.units import GIB

# real Prometheus, synthetic exporters: nothing here is timed (make test's parallel phase)
pytestmark = [pytest.mark.lab, pytest.mark.concurrent]

NS, STS, POLICY = "shop", "db", "orders"
RPS = 900.0


class Stale:
    """A node exporter whose samples carry a timestamp ``age_s`` in the past (a relay that
    lags behind): Prometheus takes such samples at their word, with no staleness marker."""

    def __init__(self, age_s: float) -> None:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.core import GaugeMetricFamily
        from testbed.k8s import free_port

        class Collector:
            def collect(self) -> Iterator[GaugeMetricFamily]:
                g = GaugeMetricFamily("org_apache_cassandra_metrics_clientrequest_count",
                                      "client requests", labels=["name", "scope"])
                t0 = time.time() - age_s
                g.add_metric(["Latency", "Read"], 1000.0, timestamp=t0)
                g.add_metric(["Latency", "Write"], 100.0, timestamp=t0)
                yield g

        reg = CollectorRegistry()
        reg.register(Collector())  # type: ignore[arg-type]
        self.port = free_port()
        self.server, _ = start_http_server(self.port, addr="127.0.0.1", registry=reg)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def spec(url: str, **prom: Any) -> dict[str, Any]:
    return {"target": {"name": STS, "replicationFactor": 3}, "replicas": {"min": 3, "max": 8},
            "slo": {"latencyMs": 30}, "mode": "Enforce", "controlPeriod": "60s",
            "prediction": {"method": "persistence", "horizon": "60s", "step": "10s"},
            "metrics": {"prometheus": {"url": url, "warmup": "5s", **prom}}}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[NodeExporters, Prometheus, Stale]]:
    nodes = NodeExporters(NS, STS, 3, RPS)
    # another cluster in the same Prometheus: in another namespace, and in this namespace
    # under another StatefulSet's name; the default queries must see neither
    other = CassandraMetrics(rps=50_000.0, clusters={("other", STS): (3, 3),
                                                     (NS, f"{STS}x"): (3, 3)})
    other.SPARE = 0
    stale = Stale(age_s=200.0)
    prom = Prometheus(tmp_path_factory.mktemp("prom"), [other.target], nodes.scrape_configs() +
                      f"      - targets: ['127.0.0.1:{stale.port}']\n"
                      f"        labels: {{namespace: slow, pod: {STS}-0}}\n")
    try:
        yield nodes, prom, stale
    finally:
        prom.close()
        for x in (nodes, other, stale):
            x.close()


def _query(url: str, expr: str) -> list[Any]:
    """An instant query's result, straight from Prometheus's HTTP API."""
    import json
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/query?"
                                + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        return list(json.load(r)["data"]["result"])


def source(url: str, ns: str = NS, **prom: Any) -> PrometheusSource:
    p = parse(spec(url, **prom)).prometheus
    assert p is not None
    return PrometheusSource(p, ns, STS)


def test_partial_scrape_is_counted_and_the_policy_degrades(
        rig: tuple[NodeExporters, Prometheus, Stale], tmp_path: Path) -> None:
    nodes, prom, _ = rig
    src = source(prom.url)

    def whole() -> Any:
        try:
            s = src.snapshot(time.time(), 6, 10.0)
        except MetricsError:
            return None
        return s if s.nodes == 3 and abs(s.load_rps - RPS) < 0.1 * RPS else None

    snap = wait_until("the three nodes' load (and no other cluster's)", whole, 60)
    assert snap.data_bytes == pytest.approx(3 * GIB, rel=1e-6)  # this cluster's only

    nodes.fail(1)  # db-1's exporter stops answering: its scrape fails
    # the node count drops at the first failed scrape (Prometheus marks db-1's series
    # stale); the summed rate a minute later, when db-1's samples leave the rate window:
    # then the sum alone says a third less load, a scale-in's evidence
    def lost() -> Any:  # a period that is no measurement (MetricsError) is not the answer
        try:
            s = src.snapshot(time.time(), 6, 10.0)
        except MetricsError:
            return None
        return s if s.load_rps < 0.75 * RPS else None

    partial = wait_until("the sum to lose db-1's load", lost, 120)
    assert partial.nodes == 2

    # the runner, with this real Prometheus, on a simulated 3-pod StatefulSet
    kube = SimulatedKube(Cluster.balanced(3, 3 * GIB, boot_s=30.0), NS, STS,
                         volume_bytes=100 * GIB)
    policies = MemoryPolicies.of(NS, POLICY, spec(prom.url))
    ms = ModelSet.load(builtin_model("placeholder"))
    runner = Runner(NS, POLICY, policies, kube, lambda _spec: ms)
    runner.tick()
    st = policies.status
    deg = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "MetricsPartial"), deg
    assert "from 2 of 3 ready nodes" in deg["message"]
    assert st["observed"]["nodes"] == 2 and st["lastDecision"]["ok"] is True  # forecasting
    assert [r for r, _, w in policies.events if w] == ["MetricsPartial"]
    # (a scale-out may start: the partial sum only understates the load)
    assert not [c for _, c in kube.calls if c.startswith(("scale 2", "decommission"))]


def test_partial_the_oldest_nodes_sample_decides_freshness(
        rig: tuple[NodeExporters, Prometheus, Stale]) -> None:
    """Namespace "slow" has one node whose newest sample is 200 s old. The newest sample of
    all (what max(timestamp) read) would be fresh as soon as any other node reported."""
    _, prom, _ = rig
    src = source(prom.url, ns="slow")
    wait_until("the stale node's series", lambda: _reason(src) != "MetricsMissing", 30)
    with pytest.raises(MetricsError, match=r"node db-0's newest sample is \d+ s old") as exc:
        src.snapshot(time.time(), 6, 10.0)
    assert exc.value.reason == "MetricsStale"


def _reason(src: PrometheusSource) -> str | None:
    try:
        src.snapshot(time.time(), 6, 10.0)
    except MetricsError as exc:
        return exc.reason
    return None


def test_partial_several_series_where_one_is_expected_is_an_error(
        rig: tuple[NodeExporters, Prometheus, Stale]) -> None:
    """A query written without sum() gives one series per node: never result[0]."""
    _, prom, _ = rig
    per_node = ('sum by (pod) (rate(org_apache_cassandra_metrics_clientrequest_count'
                '{name="Latency",scope="%s",namespace="shop",pod=~"db-[0-9]+"}[1m]))')
    src = source(prom.url, queries={"readRps": per_node % "Read",
                                    "writeRps": per_node % "Write"})
    # the premise (this test selected alone meets a Prometheus that just started): the
    # query has each node's rate, two samples of every series at least
    wait_until("a rate per node", lambda: len(_query(prom.url, per_node % "Read")) >= 2, 60)
    with pytest.raises(MetricsError, match=r"returned [23] series; readRps and writeRps must"):
        src.history(time.time(), 6, 10.0)
    with pytest.raises(MetricsError, match=r"returned [23] series; it must aggregate"):
        src.scalar("readRps", time.time())
    # a freshness query that does not tell the nodes apart is refused, not summed up
    own = copy.deepcopy(spec(prom.url))
    own["metrics"]["prometheus"]["queries"] = {
        "freshness": 'timestamp(org_apache_cassandra_metrics_clientrequest_count'
                     '{name="Latency",namespace="shop",pod="db-0"})'}
    p = parse(own).prometheus
    assert p is not None
    with pytest.raises(MetricsError, match="several series for node db-0"):
        PrometheusSource(p, NS, STS).snapshot(time.time(), 6, 10.0)


def test_tenant_an_unscoped_custom_load_query_is_refused(
        rig: tuple[NodeExporters, Prometheus, Stale]) -> None:
    """Issue 35, finding 10: a custom readRps/writeRps without the target's scope (shared by
    two policies, each counts the other's pods: here the other clusters' 50,000 req/s) is
    checked against the target's own pods' per-pod load, and refused."""
    _, prom, _ = rig
    q = ('sum(rate(org_apache_cassandra_metrics_clientrequest_count{name="Latency",'
         'scope="%s"}[1m]))')
    src = source(prom.url, queries={"readRps": q % "Read", "writeRps": q % "Write"})
    wait_until("the rates to cover the warmup", lambda: _reason(source(prom.url)) is None, 60)
    assert _reason(src) == "MetricsForeignLoad"
    with pytest.raises(MetricsError, match="counts other pods"):
        src.snapshot(time.time(), 6, 10.0)
    # the same queries scoped to the target pass the check
    scoped = ('sum(rate(org_apache_cassandra_metrics_clientrequest_count{name="Latency",'
              'scope="%s",namespace="shop",pod=~"db-[0-9]+"}[1m]))')
    ok = source(prom.url, queries={"readRps": scoped % "Read", "writeRps": scoped % "Write"})
    # (the module's earlier tests stopped a node: the load is what the others serve)
    assert ok.snapshot(time.time(), 6, 10.0).load_rps == pytest.approx(
        source(prom.url).snapshot(time.time(), 6, 10.0).load_rps, rel=0.1)


def test_tenant_a_pod_scraped_twice_and_foreign_pods_are_refused(
        tmp_path_factory: pytest.TempPathFactory,
        rig: tuple[NodeExporters, Prometheus, Stale]) -> None:
    """A pod scraped by two jobs (a PodMonitor and a ServiceMonitor) has its load summed
    twice: the freshness check sees two jobs for one pod and refuses (MetricsDuplicated);
    a custom freshness query that returns another workload's pods is refused too."""
    nodes = NodeExporters(NS, STS, 3, RPS)  # its own: the module's lost a node earlier
    dup = nodes.nodes[1].target
    twice = Prometheus(tmp_path_factory.mktemp("prom2"), [], nodes.scrape_configs() +
                       "  - job_name: cassandra-servicemonitor\n    static_configs:\n"
                       f"      - targets: ['{dup}']\n"
                       f"        labels: {{namespace: {NS}, pod: {STS}-1}}\n")
    try:
        src = source(twice.url)
        wait_until("both jobs to be scraped", lambda: _reason(src) not in (
            "MetricsMissing", "MetricsWarmingUp"), 60)
        with pytest.raises(MetricsError) as err:
            src.snapshot(time.time(), 6, 10.0)
        assert err.value.reason == "MetricsDuplicated", err.value
        assert f"{STS}-1" in str(err.value) and "cassandra-servicemonitor" in str(err.value)
    finally:
        twice.close()
        nodes.close()
    _, prom, _ = rig
    own = copy.deepcopy(spec(prom.url))
    own["metrics"]["prometheus"]["queries"] = {
        "freshness": 'max by (pod) (timestamp(org_apache_cassandra_metrics_clientrequest_count'
                     '{name="Latency",scope="Read",namespace="shop"}))'}  # db-* and dbx-*
    p = parse(own).prometheus
    assert p is not None
    with pytest.raises(MetricsError) as err:
        PrometheusSource(p, NS, STS).snapshot(time.time(), 6, 10.0)
    assert err.value.reason == "MetricsForeignPods" and f"{STS}x-" in str(err.value)
