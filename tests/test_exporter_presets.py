"""Every exporter preset's queries (spec.metrics.prometheus.preset) against a real Prometheus
(Debian's) scraping series in that exporter's format: three nodes, one scrape target each
(as every exporter runs in its node), each with its own request rates, latency at p95, data
and streaming, plus series a query must leave out (system keyspaces, other operations,
per-consistency duplicates). The operator's metrics source must read each node's numbers
and the cluster's totals back.

The series are written to each exporter's documented output, not recorded from a running
exporter (Instaclustr's agent, MCAC and the Management API agent are not on Maven Central;
each writer cites the source it follows, as elastore/stores/cassandra/presets.py does). The lab
preset and the JMX exporter's example configuration also run against real Cassandra
(tests/test_cassandra_lab.py)."""

from __future__ import annotations

import http.server
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from k8s_support import Prometheus, wait_until
from testbed.k8s import free_port

from elastore.errors import MetricsError
from elastore.operator.metrics import PrometheusSource
from elastore.operator.presets import PRESETS
from elastore.operator.spec import parse
from elastore.units import MIB

# real Prometheus, synthetic exporters: nothing here is timed (make test's parallel phase)
pytestmark = [pytest.mark.lab, pytest.mark.concurrent]

NS, STS, RF = "shop", "db", 3
#: microsecond bucket bounds, log-linear as Cassandra's (the Management API's
#: LATENCY_OFFSETS begin 35, 60, 103, 179, 310, 535, 924, 1597, 2759, 4768, 8239, 14237)
BOUNDS_US = (35, 60, 103, 179, 310, 535, 924, 1597, 2759, 4768, 8239, 14237, 24601, 42510)


@dataclass(frozen=True)
class Node:
    read_rps: float
    write_rps: float
    p95_ms: float  # a bucket bound, so that histogram_quantile gives it exactly
    data_bytes: float
    stream_bps: float  # bytes/s streamed out


NODES = (Node(300.0, 30.0, 1.597, 4e9, 2 * MIB), Node(200.0, 60.0, 4.768, 5e9, 0.0),
         Node(100.0, 10.0, 8.239, 6e9, 0.5 * MIB))


def buckets(count: float, p95_ms: float) -> list[tuple[str, float]]:
    """Cumulative buckets of ``count`` requests: 95 % at ``p95_ms`` (a bound), 5 % in the
    bucket above, so the 0.95 quantile is that bound."""
    k = BOUNDS_US.index(round(p95_ms * 1000))
    out = [(str(b), 0.0 if i < k else (0.95 * count if i == k else count))
           for i, b in enumerate(BOUNDS_US)]
    return [*out, ("+Inf", count)]


def lines(metric: str, value: float, **labels: str) -> str:
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{lab}}} {value!r}\n" if lab else f"{metric} {value!r}\n"


# -- one writer per exporter: (node, seconds since start) -> exposition text ------------------
def instaclustr(n: Node, t: float) -> str:
    """instaclustr/cassandra-exporter: summary cassandra_client_request_latency_seconds
    {operation, consistency} (no read/write total without a consistency), quantiles in
    seconds; cassandra_storage_load_bytes."""
    name = "cassandra_client_request_latency_seconds"
    out = f"# TYPE {name} summary\n"
    for op, rps in (("read", n.read_rps), ("write", n.write_rps), ("rangeslice", 5000.0)):
        for cl, share in (("ONE", 0.75), ("QUORUM", 0.25)):
            out += lines(f"{name}_count", rps * share * t, operation=op, consistency=cl)
            out += lines(f"{name}_sum", rps * share * t * n.p95_ms / 2000, operation=op,
                         consistency=cl)
            for q, f in (("0.5", 0.5), ("0.95", 1.0), ("0.99", 1.5)):
                lat = n.p95_ms * f / 1000 if op != "rangeslice" else 9.0
                out += lines(name, lat, operation=op, consistency=cl, quantile=q)
    out += "# TYPE cassandra_storage_load_bytes gauge\n"
    return out + lines("cassandra_storage_load_bytes", n.data_bytes)


def jmx_example(n: Node, t: float) -> str:
    """The JMX exporter with examples/cassandra.yml: replica-local keyspace latencies
    (counts, and quantile gauges in seconds), writes counted on every replica, system
    keyspaces alongside; cassandra_storage_load_count."""
    out = ""
    for ks, share in (("orders", 0.6), ("users", 0.4)):
        for op, rps in (("read", n.read_rps), ("write", n.write_rps * RF)):
            out += lines(f"cassandra_keyspace_{op}latency_seconds_count", rps * share * t,
                         keyspace=ks)
            for q, f in (("0.95", 1.0), ("0.99", 1.5)):
                out += lines(f"cassandra_keyspace_{op}latency_seconds", n.p95_ms * f / 1000,
                             keyspace=ks, quantile=q)
    out += lines("cassandra_keyspace_readlatency_seconds_count", 9000.0 * t, keyspace="system")
    out += lines("cassandra_keyspace_readlatency_seconds", 1.0, keyspace="system",
                 quantile="0.95")
    return out + lines("cassandra_storage_load_count", n.data_bytes)


def jmx_lab(n: Node, t: float) -> str:
    """The JMX exporter's default naming (the lab's config): ClientRequest counts and
    percentile gauges in microseconds, per-consistency scopes alongside."""
    req = "org_apache_cassandra_metrics_clientrequest"
    out = ""
    for scope, rps in (("Read", n.read_rps), ("Write", n.write_rps), ("Read-ONE", 7000.0)):
        out += lines(f"{req}_count", rps * t, name="Latency", scope=scope)
        out += lines(f"{req}_95thpercentile", n.p95_ms * 1000, name="Latency", scope=scope)
        out += lines(f"{req}_99thpercentile", n.p95_ms * 1500, name="Latency", scope=scope)
    out += lines("org_apache_cassandra_metrics_storage_count", n.data_bytes, name="Load")
    return out + lines("org_apache_cassandra_metrics_streaming_count", n.stream_bps * t,
                       name="TotalOutgoingBytes")


def mcac(n: Node, t: float) -> str:
    """MCAC: mcac_client_request_latency_total / _bucket{request_type} (µs),
    mcac_table_live_disk_space_used_total, mcac_streaming_total_outgoing_bytes_total."""
    lat = "mcac_client_request_latency"
    out = ""
    for rt, rps in (("read", n.read_rps), ("write", n.write_rps), ("range_slice", 4000.0)):
        count = rps * t
        out += lines(f"{lat}_total", count, request_type=rt)
        p95 = n.p95_ms if rt != "range_slice" else 24.601
        for le, c in buckets(count, p95):
            out += lines(f"{lat}_bucket", c, request_type=rt, le=le)
    for table, share in (("a", 0.5), ("b", 0.5)):
        out += lines("mcac_table_live_disk_space_used_total", n.data_bytes * share,
                     keyspace="orders", table=table)
    return out + lines("mcac_streaming_total_outgoing_bytes_total", n.stream_bps * t)


def management_api(n: Node, t: float) -> str:
    """K8ssandra's Management API: org_apache_cassandra_metrics_client_request_latency
    _count / _bucket / quantiles {request_type} (the value in Cassandra's case), the
    per-consistency family ..._latency_cl alongside; storage load and streaming as
    Counters without a suffix."""
    lat = "org_apache_cassandra_metrics_client_request_latency"
    out = ""
    for rt, rps in (("Read", n.read_rps), ("Write", n.write_rps), ("RangeSlice", 3000.0)):
        count = rps * t
        out += lines(f"{lat}_count", count, request_type=rt)
        out += lines(f"{lat}_cl_count", count, request_type=rt, cl="one")
        out += lines(lat, 1.0, request_type=rt, quantile="0.95")
        p95 = n.p95_ms if rt != "RangeSlice" else 24.601
        for le, c in buckets(count, p95):
            out += lines(f"{lat}_bucket", c, request_type=rt, le=le)
    out += lines("org_apache_cassandra_metrics_storage_load", n.data_bytes)
    return out + lines("org_apache_cassandra_metrics_streaming_total_outgoing_bytes",
                       n.stream_bps * t)


def swift_statsd(n: Node, t: float) -> str:
    """Swift's StatsD timers through statsd_exporter with elastore's mapping
    (elastore/stores/swift/statsd-mapping.yml): histogram swift_server_request_seconds
    {server, verb} in seconds, one series per request; a client PUT is an object PUT on
    every replica; the container and account servers' and other verbs' series alongside.
    No bytes stored (Swift exports none)."""
    name = "swift_server_request_seconds"
    out = f"# TYPE {name} histogram\n"
    for server, verb, rps in (("object", "GET", n.read_rps), ("object", "PUT", n.write_rps * RF),
                              ("object", "HEAD", 500.0), ("container", "GET", 800.0),
                              ("account", "HEAD", 300.0)):
        count = rps * t
        p95 = n.p95_ms if server == "object" and verb in ("GET", "PUT") else 24.601
        out += lines(f"{name}_count", count, server=server, verb=verb)
        out += lines(f"{name}_sum", count * p95 / 2000, server=server, verb=verb)
        for le, c in buckets(count, p95):
            le_s = le if le == "+Inf" else repr(float(le) / 1e6)
            out += lines(f"{name}_bucket", c, server=server, verb=verb, le=le_s)
    return out


WRITERS: dict[str, tuple[Callable[[Node, float], str], bool]] = {
    "swift-statsd": (swift_statsd, False),
    # preset -> (writer, whether the exporter has a streaming metric)
    "jmx-exporter": (jmx_lab, True),
    "jmx-exporter-example": (jmx_example, False),
    "instaclustr": (instaclustr, False),
    "mcac": (mcac, True),
    "management-api": (management_api, True),
}


def test_every_preset_has_a_writer() -> None:
    assert set(WRITERS) == set(PRESETS)


class Exporter:
    """One node's exporter: the text its writer gives for the seconds since start."""

    def __init__(self, node: Node, write: Callable[[Node, float], str]) -> None:
        t0 = time.monotonic()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = write(node, time.monotonic() - t0).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """All presets' exporters in one Prometheus, each preset's nodes a namespace of their
    own (the queries' scope keeps them apart)."""
    exporters = []
    configs = ""
    t0 = time.monotonic()
    for preset, (write, _) in WRITERS.items():
        for k, node in enumerate(NODES):
            e = Exporter(node, write)
            exporters.append(e)
            configs += (f"      - targets: ['127.0.0.1:{e.port}']\n"
                        f"        labels: {{namespace: {preset}, pod: {STS}-{k}}}\n")
    prom = Prometheus(tmp_path_factory.mktemp("presets"), [], configs)
    # the rate window (1 min) full: every query reads a steady rate
    src = source(prom.url, "jmx-exporter")

    def full() -> bool:
        try:
            return abs(src.snapshot(time.time(), 2, 10.0).load_rps / 700.0 - 1) < 0.1
        except MetricsError:
            return False

    wait_until("the load in Prometheus", full, 120)
    # a rate window that reaches back before a series began underestimates it: wait until
    # the window (1 min) lies wholly inside the series
    time.sleep(max(0.0, 65.0 - (time.monotonic() - t0)))
    yield prom
    prom.close()
    for e in exporters:
        e.close()


def source(url: str, preset: str) -> PrometheusSource:
    spec = parse({"target": {"name": STS, "replicationFactor": RF},
                  "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
                  "metrics": {"prometheus": {"url": url, "warmup": "5s", "preset": preset}}})
    assert spec.prometheus is not None
    return PrometheusSource(spec.prometheus, preset, STS)  # namespace = the preset


@pytest.mark.parametrize("preset", list(WRITERS))
def test_preset_reads_each_node_and_the_cluster(bed: Prometheus, preset: str) -> None:
    src = source(bed.url, preset)
    streams = WRITERS[preset][1]
    now = time.time()
    snap = src.snapshot(now, 2, 10.0)
    reads = sum(n.read_rps for n in NODES)
    writes = sum(n.write_rps for n in NODES)
    assert snap.nodes == 3
    assert snap.load_rps == pytest.approx(reads + writes, rel=0.03)
    assert snap.read_ratio == pytest.approx(reads / (reads + writes), abs=0.01)
    if PRESETS[preset].data is None:  # Swift: not exported, NaN (the operator reads pods)
        assert math.isnan(snap.data_bytes)
        with pytest.raises(MetricsError, match="has no"):
            src.scalar("dataBytes", now)
    else:
        assert snap.data_bytes == pytest.approx(sum(n.data_bytes for n in NODES), rel=1e-6)
    if streams:
        assert snap.migration_mibps == pytest.approx(
            sum(n.stream_bps for n in NODES) / MIB, rel=0.03)
    else:  # absent, never 0
        assert snap.migration_mibps is None
    per = src.per_node(now)
    assert sorted(per) == [f"{STS}-{k}" for k in range(3)]
    for k, node in enumerate(NODES):
        got = per[f"{STS}-{k}"]
        assert got.read_rps == pytest.approx(node.read_rps, rel=0.03), (preset, k)
        assert got.write_rps == pytest.approx(node.write_rps, rel=0.03), (preset, k)
        assert got.latency_ms == pytest.approx(node.p95_ms, rel=0.02), (preset, k)
        if streams:
            assert got.migration_mibps == pytest.approx(node.stream_bps / MIB, rel=0.03,
                                                        abs=1e-6)
        else:
            assert got.migration_mibps is None
    # the cluster's latency: each node's weighted by its request rate
    rates = [n.read_rps + n.write_rps for n in NODES]
    want = sum(r * n.p95_ms for r, n in zip(rates, NODES, strict=True)) / sum(rates)
    assert src.scalar("latencyMs", now) == pytest.approx(want, rel=0.03)


def test_a_preset_against_another_exporters_series_finds_nothing(bed: Prometheus) -> None:
    """mcac's queries on the Instaclustr exporter's series: missing, never 0."""
    spec = parse({"target": {"name": STS, "replicationFactor": RF},
                  "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
                  "metrics": {"prometheus": {"url": bed.url, "warmup": "5s",
                                             "preset": "mcac"}}})
    assert spec.prometheus is not None
    src = PrometheusSource(spec.prometheus, "instaclustr", STS)
    with pytest.raises(MetricsError) as err:
        src.snapshot(time.time(), 2, 10.0)
    assert err.value.reason == "MetricsMissing"

