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


class ActuationError(ElastoreError):
    """Applying a decision failed on some node that is still a member; the decisions of
    the other nodes were applied (``decisions``)."""

    def __init__(self, message: str, decisions: list[Decision]) -> None:
        super().__init__(message)
        self.decisions = decisions


@dataclass(frozen=True)
class BwManConfig:
    total_mbit: float  # per node: the server's bandwidth (its NIC) that BwMan splits
    policy: Policy = Policy.PREFER_CLIENTS
    wanted_mibps: float | None = None  # None: f() of the client load
    min_mibps: float = 0.12  # ~1 Mbit/s: a migration is slowed, never stopped
    max_mibps: float = 24.0  # Cassandra's default stream throughput
    # port 7000 also carries gossip and messaging: the storage class keeps this much beyond
    # what the stream throttle lets streaming use
    gossip_margin_mbit: float = 0.5
    min_client_mbit: float = 1.0  # clients are never starved, whatever the policy
    # The client model gives the bandwidth at which a load sits *on* the SLO border; the
    # load observed is a mean over `window`, and the 5-s windows the SLO is judged on
    # fluctuate around it (Poisson arrivals alone: +-15 % at 2 sigma at ~35 req/s per
    # server over 5 s), so the clients are provisioned for the load plus this fraction.
    load_headroom: float = 0.2
    window: str = "20s"
    queue_bytes: int = 1_500_000  # per class: the bytes of a 1000-frame NIC queue
    # the stream throttle is re-set only when the decision moves further than this from what
    # is applied: nodetool takes whole Mbit/s (0.119 MiB/s), and every call starts a JVM
    stream_resolution_mibps: float = 0.12

    def __post_init__(self) -> None:
        if not self.total_mbit > self.gossip_margin_mbit + self.min_client_mbit:
            raise ElastoreError(f"total_mbit {self.total_mbit:g} must exceed the gossip "
                                f"margin ({self.gossip_margin_mbit:g}) plus the clients' "
                                f"floor ({self.min_client_mbit:g}) Mbit/s")
        if not 0 <= self.load_headroom <= 2:
            raise ElastoreError(f"load_headroom must be in [0, 2], got {self.load_headroom:g}")
        if not 0 < self.min_mibps <= self.max_mibps:
            raise ElastoreError(f"need 0 < min_mibps <= max_mibps, got {self.min_mibps:g}, "
                                f"{self.max_mibps:g}")


@dataclass(frozen=True)
class NodeObservation:
    ip: str
    client_rps: float
    read_ratio: float
    outgoing_mibps: float


@dataclass(frozen=True)
class Decision:
    ip: str
    client_mbit: float  # guaranteed to the client class (port 9042)
    storage_mbit: float  # guaranteed to the storage class (port 7000); sums to total_mbit
    stream_mibps: float  # decided; the store may apply it rounded (see ``applied``)
    reason: str


def decide(obs: NodeObservation, models: ModelSet, cfg: BwManConfig) -> Decision:
    """The bandwidth split and streaming throttle for one node. Pure.

    The migration rate wanted is ``cfg.wanted_mibps`` or f() of the node's client load (the
    fastest migration that keeps the SLO, from the capacity model), within the bounds. The
    BwMan models then split the node's bandwidth less the gossip margin: the client model
    gives the bandwidth the node's load (plus ``load_headroom``) needs within the SLO, the
    migration model the
    bandwidth a migration speed needs; when both do not fit, the policy decides. tc
    guarantees the two shares (they sum to the node's bandwidth); the stream throttle is
    the speed the migration's share carries.
    """
    if cfg.wanted_mibps is not None:
        wanted = min(max(cfg.wanted_mibps, cfg.min_mibps), cfg.max_mibps)
        why = f"migration wanted at {wanted:g} MiB/s (fixed)"
    else:
        f = float(models.capacity.max_migration_rate(obs.client_rps, obs.read_ratio, 0.0,
                                                     slo_fraction=0.95))
        wanted = min(max(f, cfg.min_mibps), cfg.max_mibps)
        why = (f"f({obs.client_rps:.0f} req/s, read ratio {obs.read_ratio:.2f}) = {f:.2f} "
               f"MiB/s keeps p{models.capacity.percentile} within 95 % of "
               f"{models.capacity.slo_ms:g} ms; wanted {wanted:.2f} MiB/s")
    usable = cfg.total_mbit - cfg.gossip_margin_mbit
    provisioned = obs.client_rps * (1 + cfg.load_headroom)
    alloc = models.bandwidth.split(usable, provisioned, wanted, cfg.policy)
    client = max(alloc.client_mbit, cfg.min_client_mbit)
    migration = usable - client
    stream = alloc.migration_mibps
    if migration < alloc.migration_mbit - 1e-9:  # the clients' floor took some of it
        stream = min(stream, models.bandwidth.migration(migration)
                     if models.bandwidth.migration is not None else stream)
    stream = max(stream, cfg.min_mibps)
    return Decision(
        ip=obs.ip, client_mbit=client, storage_mbit=migration + cfg.gossip_margin_mbit,
        stream_mibps=stream,
        reason=f"{obs.ip}: {why}; clients provisioned for {provisioned:.0f} req/s "
               f"(+{100 * cfg.load_headroom:.0f} %); {alloc.reason}; tc {client:.1f} Mbit/s "
               f"clients, "
               f"{migration + cfg.gossip_margin_mbit:.1f} storage; stream throttle "
               f"{stream:.2f} MiB/s",
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
        applied, failed = [], []
        for (n, ip, _), d in zip(self.nodes, decisions, strict=True):
            try:
                self.set_tc(ip, d.client_mbit, d.storage_mbit)
                prev = self.applied.get(ip)
                if prev is None or abs(prev - d.stream_mibps) > max(
                        self.cfg.stream_resolution_mibps, 0.05 * prev):
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
            raise MetricsError("Prometheus is unreachable: nothing actuated")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise MetricsError(f"Prometheus query failed: {doc.get('error', doc)}")
        return list(doc["data"]["result"])

    return q
