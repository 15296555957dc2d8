"""BwMan on a real cluster (reference text, 5.2): monitor, decide with the models, actuate.

* **Monitor:** per node, the client request rate and read ratio (Cassandra's coordinator
  counters) and the outgoing streaming rate, from Prometheus. A node without a series is an
  error for that period, never a zero: nothing is actuated on missing data.
* **Decide** (:func:`decide`, pure): the migration rate wanted is f() of the node's client
  load (the fastest migration that keeps the SLO), within the policy's bounds, unless a
  fixed rate is asked for; the decision core's BwMan models split the node's bandwidth
  under ``PreferClients`` or ``PreferMigration``.
* **Actuate:** tc *guarantees* the client class (port 9042) its share and the storage
  class (port 7000) the migration's share plus a margin for gossip; both may borrow idle
  bandwidth up to the node's total (HTB ceil). Port 7000 carries gossip and the replicas'
  share of client requests as well as streaming, so capping it at the migration's share
  would throttle clients through the back door (measured: a hard 2.7 Mbit/s cap there made
  the open-loop generator fall minutes behind); the migration rate itself is enforced with
  ``setstreamthroughput``.
"""

from __future__ import annotations

import logging
import math
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from elastore.errors import ElastoreError
from elastore.models.bandwidth import Policy
from elastore.models.bundle import ModelSet

log = logging.getLogger("elastore.bwman")

CLIENT_RPS = ('sum by (instance) (rate(org_apache_cassandra_metrics_clientrequest_count'
              '{{name="Latency",scope="{scope}"}}[{window}]))')
STREAM_BPS = ('sum by (instance) (rate(org_apache_cassandra_metrics_streaming_count'
              '{{name="TotalOutgoingBytes"}}[{window}]))')


class MetricsError(ElastoreError):
    """A metric the loop needs is missing or stale."""


@dataclass(frozen=True)
class BwManConfig:
    total_mbit: float  # per node
    policy: Policy = Policy.PREFER_CLIENTS
    wanted_mibps: float | None = None  # None: f() of the client load
    min_mibps: float = 1.0
    max_mibps: float = 24.0
    gossip_margin_mbit: float = 2.0  # port 7000 also carries gossip and messaging
    min_client_mbit: float = 1.0  # clients are never starved, whatever the policy
    window: str = "20s"


@dataclass(frozen=True)
class NodeObservation:
    ip: str
    client_rps: float
    read_ratio: float
    outgoing_mibps: float


@dataclass(frozen=True)
class Decision:
    ip: str
    client_mbit: float
    storage_mbit: float
    stream_mibps: float  # decided; the store may apply it rounded (see ``applied``)
    reason: str


def decide(obs: NodeObservation, models: ModelSet, cfg: BwManConfig) -> Decision:
    """The bandwidth split and streaming throttle for one node. Pure."""
    if cfg.wanted_mibps is not None:
        wanted = cfg.wanted_mibps
        why = f"migration wanted at {wanted:g} MiB/s (fixed)"
    else:
        f = float(models.capacity.max_migration_rate(obs.client_rps, obs.read_ratio, 0.0,
                                                     slo_fraction=0.95))
        wanted = min(max(f, cfg.min_mibps), cfg.max_mibps)
        why = (f"f({obs.client_rps:.0f} req/s, read ratio {obs.read_ratio:.2f}) = {f:.2f} "
               f"MiB/s keeps p{models.capacity.percentile} within 95 % of "
               f"{models.capacity.slo_ms:g} ms; wanted {wanted:.2f} MiB/s")
    alloc = models.bandwidth.split(cfg.total_mbit, obs.client_rps, wanted, cfg.policy)
    stream = max(alloc.migration_mibps, cfg.min_mibps)
    return Decision(
        ip=obs.ip, client_mbit=max(alloc.client_mbit, cfg.min_client_mbit),
        storage_mbit=alloc.migration_mbit + cfg.gossip_margin_mbit, stream_mibps=stream,
        reason=f"{obs.ip}: {why}; {alloc.reason}; stream throttle {stream:.2f} MiB/s",
    )


Query = Callable[[str], list[dict[str, Any]]]


class BwManLoop:
    """One control loop over the lab's nodes."""

    def __init__(self, nodes: Sequence[tuple[int, str, str]], models: ModelSet,
                 cfg: BwManConfig, query: Query, set_tc: Callable[[str, float, float], None],
                 set_stream: Callable[[int, float], float | None],
                 members: Callable[[], Sequence[tuple[int, str, str]]] | None = None) -> None:
        self.nodes = list(nodes)  # (node number, ip, metrics instance "ip:port")
        # Current membership, asked before every step: a node that has left (decommissioned)
        # is no longer scraped, and waiting for its metrics would stop the loop for the
        # nodes that remain.
        self.members = members
        self.models = models
        self.cfg = cfg
        self.query = query
        self.set_tc = set_tc
        self.set_stream = set_stream
        self.last_stream: dict[str, float] = {}
        self.applied: dict[str, float] = {}  # stream throttle as the store applied it
        self.decisions: list[Decision] = []

    def observe(self) -> list[NodeObservation]:
        w = self.cfg.window
        reads = self._by_instance(CLIENT_RPS.format(scope="Read", window=w))
        writes = self._by_instance(CLIENT_RPS.format(scope="Write", window=w))
        stream = self._by_instance(STREAM_BPS.format(window=w))
        out = []
        for _, ip, inst in self.nodes:
            missing = [name for name, d in (("client reads", reads), ("client writes", writes),
                                            ("streaming", stream)) if inst not in d]
            if missing:
                raise MetricsError(f"no {', '.join(missing)} series for {inst} in Prometheus "
                                   "(a missing metric is never read as 0): nothing actuated")
            total = reads[inst] + writes[inst]
            out.append(NodeObservation(ip, total, reads[inst] / total if total > 0 else 1.0,
                                       stream[inst] / 2**20))
        return out

    def _by_instance(self, promql: str) -> dict[str, float]:
        out = {}
        for r in self.query(promql):
            v = float(r["value"][1])
            if math.isfinite(v):
                out[r["metric"].get("instance", "")] = v
        return out

    def step(self) -> list[Decision]:
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
        for (n, ip, _), d in zip(self.nodes, decisions, strict=True):
            self.set_tc(ip, d.client_mbit, d.storage_mbit)
            prev = self.last_stream.get(ip)
            if prev is None or abs(prev - d.stream_mibps) > 0.05 * max(prev, 1e-9):
                got = self.set_stream(n, d.stream_mibps)
                self.applied[ip] = float(got) if got is not None else d.stream_mibps
                self.last_stream[ip] = d.stream_mibps
            log.info("bwman: %s", d.reason)
        self.decisions += decisions
        return decisions


def prometheus_query(get: Callable[[str], str | None]) -> Query:
    """A PromQL instant-query function over a ``GET path -> body`` callable."""
    import json

    def q(promql: str) -> list[dict[str, Any]]:
        body = get("/api/v1/query?query=" + urllib.parse.quote(promql))
        if body is None:
            raise MetricsError("Prometheus is unreachable: nothing actuated")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise MetricsError(f"Prometheus query failed: {doc.get('error', doc)}")
        return list(doc["data"]["result"])

    return q
