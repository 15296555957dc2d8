"""BwMan's decision (reference text, 5.2): how one server's link is split between client
traffic and data migration, and the streaming rate that split carries. Pure.

The migration rate wanted is ``cfg.wanted_mibps`` or f() of the node's client load (the
fastest migration that keeps the SLO, from the capacity model), within the bounds. The
BwMan regressions then split the node's bandwidth less a gossip margin: the client model
gives the bandwidth the node's load (plus ``load_headroom``) needs within the SLO, the
migration model the bandwidth a migration speed needs; when both do not fit, the policy
(``PreferClients`` or ``PreferMigration``) decides. tc *guarantees* the two shares (they
sum to the node's bandwidth, each may borrow the other's idle share); the stream throttle
is the speed the migration's share carries.

Port 7000 carries gossip and the replicas' share of client requests as well as streaming,
so capping it at the migration's share would throttle clients through the back door
(measured: a hard 2.7 Mbit/s cap there made the open-loop generator fall minutes behind);
the migration rate itself is enforced with the store's stream throttle. The actuation
loops live with what they drive: :mod:`elastore.lab.bwman` on the lab.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastore.errors import ElastoreError
from elastore.models.bandwidth import Allocation, Policy
from elastore.models.bundle import ModelSet


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
class BwManDecision:
    ip: str
    client_mbit: float  # guaranteed to the client class (port 9042)
    storage_mbit: float  # guaranteed to the storage class (port 7000); sums to total_mbit
    stream_mibps: float  # decided; the store may apply it rounded (see ``applied``)
    reason: str


def decide(obs: NodeObservation, models: ModelSet, cfg: BwManConfig) -> BwManDecision:
    """The bandwidth split and streaming throttle for one node (see the module)."""
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
    return BwManDecision(
        ip=obs.ip, client_mbit=client, storage_mbit=migration + cfg.gossip_margin_mbit,
        stream_mibps=stream,
        reason=f"{obs.ip}: {why}; clients provisioned for {provisioned:.0f} req/s "
               f"(+{100 * cfg.load_headroom:.0f} %); {alloc.reason}; tc {client:.1f} Mbit/s "
               f"clients, "
               f"{migration + cfg.gossip_margin_mbit:.1f} storage; stream throttle "
               f"{stream:.2f} MiB/s",
    )


def missing_regressions(models: ModelSet) -> str | None:
    """Why BwMan cannot split a link with these models (None: it can): the regressions it
    needs that they lack (``elastore models fit --bandwidth``)."""
    bw = models.bandwidth
    missing = [name for name, curve in (("bandwidth.client", bw.client),
                                        ("bandwidth.migration", bw.migration))
               if curve is None]
    if not missing:
        return None
    return (f"the models have no {' and no '.join(missing)} regression (fit them with "
            "`elastore models fit --bandwidth`)")


def split_rate(models: ModelSet, total_mbit: float | None, per_server_rps: float,
               rate_mibps: float, policy: Policy, min_mibps: float = 0.0
               ) -> tuple[float, Allocation | None, str]:
    """The planner's migration rate once BwMan splits a server's link of ``total_mbit``
    between its client load and the migration (the reference text's 5.2.2, what the
    ``policy`` decides when both do not fit), never below ``min_mibps`` (a migration is
    slowed, never stopped). Without a link total, or without the regressions, the rate is
    unchanged, and the reason says which."""
    if total_mbit is None:
        return rate_mibps, None, ""
    missing = missing_regressions(models)
    if missing is not None:
        return rate_mibps, None, (f"no BwMan split of the {total_mbit:g} Mbit/s link: "
                                  f"{missing}; migration at the planner's rate")
    alloc = models.bandwidth.split(total_mbit, per_server_rps, rate_mibps, policy)
    rate = max(alloc.migration_mibps, min_mibps) if rate_mibps > 0 else 0.0
    return rate, alloc, (f"BwMan ({Policy(policy).value}) on {total_mbit:g} Mbit/s at "
                         f"{per_server_rps:,.0f} req/s per server: {alloc.reason}")
