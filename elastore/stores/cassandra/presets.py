"""The Cassandra exporters people run, as presets (:class:`~elastore.stores.exporter.Exporter`;
its module says what a template may use). Pure."""

from __future__ import annotations

from elastore.stores.exporter import Exporter


def _jmx_lab() -> Exporter:
    """``jmx-exporter``: Prometheus's JMX exporter (javaagent) with the lab's configuration
    (elastore/lab/cassandra/nodes.py EXPORTER_CONFIG: type=ClientRequest, Storage, Streaming with
    rule ".*" and lowercaseOutputName), which is the exporter's default naming: MBean
    org.apache.cassandra.metrics:type=ClientRequest,scope=Read|Write,name=Latency gives
    ``org_apache_cassandra_metrics_clientrequest_count{name="Latency",scope="Read"}`` (its
    Count attribute) and ``..._95thpercentile`` / ``..._99thpercentile`` (seen on the lab's
    Cassandra 5.0.4 with the JMX exporter 1.0.1, beside per-consistency-level scopes
    Read-ALL, Read-ANY, ... that the anchored regex leaves out). Cassandra 5's timers
    report microseconds (CassandraMetricsRegistry.DEFAULT_TIMER_UNIT, read with javap from
    cassandra-all-5.0.4.jar), hence / 1000."""
    req = "org_apache_cassandra_metrics_clientrequest"

    def rate(scope: str) -> str:
        return f'rate({req}_count{{{{name="Latency",scope={scope}{{selector}}}}}}[{{window}}])'

    both = rate('~"Read|Write"')
    return Exporter(
        read=rate('"Read"'), write=rate('"Write"'),
        node_latency=(f'sum by ({{pod}}) ({req}_{{pct}}thpercentile{{{{name="Latency",'
                      f'scope=~"Read|Write"{{selector}}}}}} * {both}) / '
                      f"sum by ({{pod}}) ({both}) / 1000"),
        data='org_apache_cassandra_metrics_storage_count{{name="Load"{selector}}}',
        fresh=f'{req}_count{{{{name="Latency",scope="Read"{{selector}}}}}}',
        streaming=('rate(org_apache_cassandra_metrics_streaming_count'
                   '{{name="TotalOutgoingBytes"{selector}}}[{window}])'),
        source="the JMX exporter's default naming of Cassandra's MBeans (the lab's config)")


def _weighted(pairs: list[tuple[str, str]], factor: str) -> str:
    """Per node: the latency gauges ``q`` weighted by their series' request rates ``c``
    (``(q, c)`` pairs; a summary's quantile series match its count ignoring ``quantile``),
    times ``factor`` (to ms)."""
    num = " + ".join(f"sum by ({{pod}}) ({q} * ignoring(quantile) {c})" for q, c in pairs)
    den = " + ".join(f"sum by ({{pod}}) ({c})" for _, c in pairs)
    return f"({num}) / ({den}){factor}"


def _jmx_example() -> Exporter:
    """``jmx-exporter-example``: Prometheus's JMX exporter with its own example
    configuration (prometheus/jmx_exporter@4b843c693 examples/cassandra.yml). Its whitelist
    has no ``type=ClientRequest`` and no ``type=Streaming`` (lines 12-40): the request rates
    and latencies are the *replica-local* keyspace metrics (``type=Keyspace,
    name=ReadLatency|WriteLatency``), which its rules name
    ``cassandra_keyspace_readlatency_seconds_count{keyspace}`` (line 64, a counter) and
    ``cassandra_keyspace_readlatency_seconds{keyspace,quantile="0.95"}`` (line 78, seconds:
    valueFactor 1e-6 of Cassandra's microseconds); the empty ``$4`` label is dropped
    (JmxCollector.java:1012). A client write is written on every replica, so writes are
    divided by the replication factor; a client read at consistency ONE is one replica
    read (QUORUM reads count about twice). System keyspaces are left out. Storage Load is
    ``cassandra_storage_load_count`` (line 71). No streaming metric."""
    def rate(op: str) -> str:
        return (f'rate(cassandra_keyspace_{op}latency_seconds_count{{{{keyspace!~"system.*"'
                f'{{selector}}}}}}[{{window}}])')

    def gauge(op: str) -> str:
        return (f'cassandra_keyspace_{op}latency_seconds{{{{keyspace!~"system.*",'
                f'quantile="{{q}}"{{selector}}}}}}')

    return Exporter(
        read=rate("read"), write=f"{rate('write')} / {{rf}}",
        node_latency=_weighted([(gauge("read"), rate("read")),
                                (gauge("write"), rate("write"))], " * 1000"),
        data="cassandra_storage_load_count{{{selector_}}}",
        fresh='cassandra_keyspace_readlatency_seconds_count{{keyspace!~"system.*"{selector}}}',
        streaming=None,
        source="prometheus/jmx_exporter@4b843c693 examples/cassandra.yml")


def _instaclustr() -> Exporter:
    """``instaclustr``: Instaclustr's cassandra-exporter agent (instaclustr/cassandra-exporter
    @aa129bf). Families are prefixed ``cassandra_`` (Harvester.java:40). Client requests:
    the summary ``cassandra_client_request_latency_seconds{operation,consistency}``
    (FactoriesSupplier.java:182-210, 593): ``operation`` is the lowercased scope, and the
    read/write totals without a consistency level are excluded, so the per-consistency
    series are summed; quantiles 0.5 .. 0.999 labelled ``quantile="0.95"`` (Interval.java),
    in seconds (LatencyMetricGroupSummaryCollector.java: nanoseconds to seconds), with
    ``_count``. Storage Load is ``cassandra_storage_load_bytes`` (FactoriesSupplier.java:677).
    No streaming metric."""
    name = "cassandra_client_request_latency_seconds"

    def rate(op: str) -> str:
        return f'rate({name}_count{{{{operation=~"{op}"{{selector}}}}}}[{{window}}])'

    gauge = f'{name}{{{{operation=~"read|write",quantile="{{q}}"{{selector}}}}}}'
    return Exporter(
        read=rate("read"), write=rate("write"),
        node_latency=_weighted([(gauge, rate("read|write"))], " * 1000"),
        data="cassandra_storage_load_bytes{{{selector_}}}",
        fresh=f'{name}_count{{{{operation="read"{{selector}}}}}}',
        streaming=None,
        source="instaclustr/cassandra-exporter@aa129bf")


def _histogram(bucket: str, read: str, write: str, data: str, fresh: str,
               streaming: str, source: str) -> Exporter:
    """An exporter whose client-request latency is a histogram in microseconds: the
    quantile per node is ``histogram_quantile`` over the node's buckets of reads and
    writes together."""
    return Exporter(
        read=read, write=write,
        node_latency=(f"histogram_quantile({{q}}, sum by ({{podle}}) (rate({bucket}[{{window}}]))) "
                      "/ 1000"),
        data=data, fresh=fresh, streaming=streaming, source=source)


def _mcac() -> Exporter:
    """``mcac``: DataStax's Metric Collector for Apache Cassandra
    (datastax/metric-collector-for-apache-cassandra@7b7bbf2). Its relabelling
    (dashboards/prometheus/prometheus.yaml:99-119) names ClientRequest metrics
    ``mcac_client_request_<name>{request_type}``; the vendor's dashboards read the request
    rate as ``rate(mcac_client_request_latency_total{request_type="read"})``
    (dashboards/grafana/generated-dashboards/overview.json:103, 324), the latency as
    ``histogram_quantile(q, ... mcac_client_request_latency_bucket ... by (le, ...))``
    (overview.json:396) in microseconds (the panels' unit µs, cassandra-condensed.json), the
    data size as ``mcac_table_live_disk_space_used_total`` (overview.json:1027) and
    streaming as ``mcac_streaming_total_outgoing_bytes_total``
    (cassandra-condensed.json:1390)."""
    lat = "mcac_client_request_latency"
    return _histogram(
        f'{lat}_bucket{{{{request_type=~"read|write"{{selector}}}}}}',
        f'rate({lat}_total{{{{request_type="read"{{selector}}}}}}[{{window}}])',
        f'rate({lat}_total{{{{request_type="write"{{selector}}}}}}[{{window}}])',
        "mcac_table_live_disk_space_used_total{{{selector_}}}",
        f'{lat}_total{{{{request_type="read"{{selector}}}}}}',
        "rate(mcac_streaming_total_outgoing_bytes_total{{{selector_}}}[{window}])",
        "datastax/metric-collector-for-apache-cassandra@7b7bbf2")


def _management_api() -> Exporter:
    """``management-api``: K8ssandra's Management API metrics endpoint
    (k8ssandra/management-api-for-apache-cassandra@dbc7629, management-api-agent-common).
    Its default relabelling (resources/default-metric-settings.yaml:48-72) names
    ``org.apache.cassandra.metrics.ClientRequest.Latency.Read``
    ``org_apache_cassandra_metrics_client_request_latency{request_type}`` (per consistency
    level: ``..._latency_cl{request_type,cl}``); a timer gets ``_bucket{le}`` (microsecond
    offsets, CassandraMetricsTools.LATENCY_OFFSETS), ``_count`` and ``_sum``
    (CassandraMetricRegistryListener.onTimerAdded). The label value keeps Cassandra's case
    in the code (CassandraMetricsTest: ``RequestType``) while K8ssandra's docs show
    ``request_type="read"``: the queries match either (``(?i)``). A Cassandra Counter is
    exported under its cleaned name with no suffix (onCounterAdded): Storage Load is
    ``org_apache_cassandra_metrics_storage_load``, streaming
    ``org_apache_cassandra_metrics_streaming_total_outgoing_bytes``."""
    lat = "org_apache_cassandra_metrics_client_request_latency"
    return _histogram(
        f'{lat}_bucket{{{{request_type=~"(?i)read|write"{{selector}}}}}}',
        f'rate({lat}_count{{{{request_type=~"(?i)read"{{selector}}}}}}[{{window}}])',
        f'rate({lat}_count{{{{request_type=~"(?i)write"{{selector}}}}}}[{{window}}])',
        "org_apache_cassandra_metrics_storage_load{{{selector_}}}",
        f'{lat}_count{{{{request_type=~"(?i)read"{{selector}}}}}}',
        "rate(org_apache_cassandra_metrics_streaming_total_outgoing_bytes{{{selector_}}}[{window}])",
        "k8ssandra/management-api-for-apache-cassandra@dbc7629")


PRESETS: dict[str, Exporter] = {
    "jmx-exporter": _jmx_lab(),
    "jmx-exporter-example": _jmx_example(),
    "instaclustr": _instaclustr(),
    "mcac": _mcac(),
    "management-api": _management_api(),
}
