"""BwMan on the lab's real Cassandra: monitor, decide, actuate, every period.

* **Monitor:** per node, the client request rate and read ratio (Cassandra's coordinator
  counters) and the outgoing streaming rate, from the lab's Prometheus. A node without a
  series is an error for that period, never a zero: nothing is actuated on missing data.
* **Decide:** :func:`elastore.planner.bwman.decide`, per node.
* **Actuate:** the lab's tc (:mod:`elastore.actuators.tc`) guarantees the client class (port
  9042) and the storage class (port 7000) their shares; ``setstreamthroughput`` sets the
  migration rate.

The Cassandra lab's loop is :func:`elastore.lab.cassandra.lab.bwman_loop`. The same loop
runs on the Swift lab (:func:`elastore.lab.swift.lab.bwman_loop`): it reads the object
servers' rates (:data:`SWIFT_QUERIES`) and splits each node's link between its object
servers (port 6200) and its replication (rsync, port 873); no store throttle is set.
"""

from __future__ import annotations

import logging
import math
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from elastore.errors import ElastoreError, MetricsError
from elastore.models.bundle import ModelSet
from elastore.planner.bwman import BwManConfig, BwManDecision, NodeObservation, decide
from elastore.units import bytes_to_mib

log = logging.getLogger("elastore.bwman")

CLIENT_RPS = ('sum by (instance) (rate(org_apache_cassandra_metrics_clientrequest_count'
              '{{name="Latency",scope="{scope}"}}[{window}]))')
STREAM_BPS = ('sum by (instance) (rate(org_apache_cassandra_metrics_streaming_count'
              '{{name="TotalOutgoingBytes"}}[{window}]))')


@dataclass(frozen=True)
class StoreQueries:
    """The PromQL a BwMan loop observes a store with, each ``{window}``-templated and
    summed ``by (instance)`` (the node's scrape target). ``stream``: the node's outgoing
    migration bytes/s, or "" when no exporter has them."""

    reads: str
    writes: str
    stream: str = ""


CASSANDRA_QUERIES = StoreQueries(CLIENT_RPS.replace("{scope}", "Read"),
                                 CLIENT_RPS.replace("{scope}", "Write"), STREAM_BPS)
#: Swift: the object servers' own StatsD timers (statsd_exporter, instance = the node's
#: exporter); the replicators' bytes are in no exporter (tc counts them)
SWIFT_QUERIES = StoreQueries(
    'sum by (instance) (rate(swift_server_request_seconds_count{{server="object",'
    'verb="GET"}}[{window}]))',
    'sum by (instance) (rate(swift_server_request_seconds_count{{server="object",'
    'verb="PUT"}}[{window}]))')


class ActuationError(ElastoreError):
    """Applying a decision failed on some node that is still a member; the decisions of
    the other nodes were applied (``decisions``)."""

    def __init__(self, message: str, decisions: list[BwManDecision]) -> None:
        super().__init__(message)
        self.decisions = decisions


Query = Callable[[str], list[dict[str, Any]]]


class BwManLoop:
    """One control loop over the lab's nodes."""

    def __init__(self, nodes: Sequence[tuple[int, str, str]], models: ModelSet,
                 cfg: BwManConfig, query: Query, set_tc: Callable[[str, float, float], None],
                 set_stream: Callable[[int, float], float | None],
                 members: Callable[[], Sequence[tuple[int, str, str]]] | None = None,
                 window: str = "20s", stream_resolution_mibps: float = 0.12,
                 queries: StoreQueries | None = None) -> None:
        self.nodes = list(nodes)  # (node number, ip, metrics instance "ip:port")
        # Current membership, asked before every step: a node that has left (decommissioned)
        # is no longer scraped, and waiting for its metrics would stop the loop for the
        # nodes that remain.
        self.members = members
        self.models = models
        self.cfg = cfg
        self.query = query
        self.queries = queries or CASSANDRA_QUERIES
        self.set_tc = set_tc
        self.set_stream = set_stream
        self.window = window  # the rate window of the PromQL
        # the stream throttle is re-set only when the decision moves further than this from
        # what is applied: nodetool takes whole Mbit/s (0.119 MiB/s), and every call starts
        # a JVM
        self.stream_resolution_mibps = stream_resolution_mibps
        self.last_stream: dict[str, float] = {}
        self.applied: dict[str, float] = {}  # stream throttle as the store applied it
        self.decisions: list[BwManDecision] = []

    def observe(self) -> list[NodeObservation]:
        w = self.window
        q = self.queries
        reads = self._by_instance(q.reads.format(window=w))
        writes = self._by_instance(q.writes.format(window=w))
        stream = self._by_instance(q.stream.format(window=w)) if q.stream else None
        out = []
        for _, ip, inst in self.nodes:
            have = [("client reads", reads), ("client writes", writes)]
            if stream is not None:
                have.append(("streaming", stream))
            missing = [name for name, d in have if inst not in d]
            if missing:
                raise MetricsError("MetricsMissing",
                                   f"no {', '.join(missing)} series for {inst} in Prometheus "
                                   "(a missing metric is never read as 0): nothing actuated")
            total = reads[inst] + writes[inst]
            # without a streaming query (Swift: its replication bytes are tc's to count, no
            # exporter has them) the outgoing rate is unknown: NaN, never 0
            out.append(NodeObservation(ip, total, reads[inst] / total if total > 0 else 1.0,
                                       bytes_to_mib(stream[inst]) if stream is not None
                                       else math.nan))
        return out

    def _by_instance(self, promql: str) -> dict[str, float]:
        out = {}
        for r in self.query(promql):
            v = float(r["value"][1])
            if math.isfinite(v):
                out[r["metric"].get("instance", "")] = v
        return out

    def step(self) -> list[BwManDecision]:
        """Observe, decide and actuate once; returns the decisions (logged with reasons)."""
        if self.members is not None:
            now = list(self.members())
            gone = {ip for _, ip, _ in self.nodes} - {ip for _, ip, _ in now}
            for ip in gone:
                log.info("bwman: %s has left the cluster; no longer managed", ip)
                self.last_stream.pop(ip, None)
                self.applied.pop(ip, None)
            self.nodes = now
        decisions = [decide(o, self.models, self.cfg) for o in self.observe()]
        applied, failed = [], []
        for (n, ip, _), d in zip(self.nodes, decisions, strict=True):
            try:
                self.set_tc(ip, d.client_mbit, d.storage_mbit)
                prev = self.applied.get(ip)
                if prev is None or abs(prev - d.stream_mibps) > max(
                        self.stream_resolution_mibps, 0.05 * prev):
                    got = self.set_stream(n, d.stream_mibps)
                    self.applied[ip] = float(got) if got is not None else d.stream_mibps
                    self.last_stream[ip] = d.stream_mibps
            except ElastoreError as exc:
                # a node that finished leaving between the membership check and now is
                # not a failure: it is simply no longer managed
                if self.members is not None and ip not in {m[1] for m in self.members()}:
                    log.info("bwman: %s left the cluster during this step", ip)
                    continue
                log.warning("bwman: applying the decision on %s failed: %s", ip, exc)
                failed.append(f"{ip}: {exc.message}")
                continue
            log.info("bwman: %s", d.reason)
            applied.append(d)
        self.decisions += applied
        if failed:
            raise ActuationError("applying BwMan's decision failed on "
                                 + "; ".join(failed), applied)
        return applied


def prometheus_query(get: Callable[[str], str | None]) -> Query:
    """A PromQL instant-query function over a ``GET path -> body`` callable."""
    import json

    def q(promql: str) -> list[dict[str, Any]]:
        body = get("/api/v1/query?query=" + urllib.parse.quote(promql))
        if body is None:
            raise MetricsError("PrometheusUnreachable", "Prometheus is unreachable: nothing "
                                                        "actuated")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise MetricsError("PrometheusError",
                               f"Prometheus query failed: {doc.get('error', doc)}")
        return list(doc["data"]["result"])

    return q
