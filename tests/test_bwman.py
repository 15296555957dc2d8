"""BwMan's decision (pure) on the shipped placeholder models."""

from __future__ import annotations

import pytest

from elastore.actuators.bwman import BwManConfig, BwManLoop, MetricsError, NodeObservation, decide
from elastore.models.bandwidth import Policy
from elastore.models.bundle import ModelSet
from elastore.sim.cli import PLACEHOLDER


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(PLACEHOLDER)


def test_enough_bandwidth_both_served(ms: ModelSet) -> None:
    # f() allows ~23 MiB/s (~207 Mbit/s with overhead) at this load: 400 Mbit/s fits both
    d = decide(NodeObservation("127.0.0.1", 100.0, 0.95, 0.0), ms, BwManConfig(total_mbit=400))
    assert d.client_mbit + d.storage_mbit == pytest.approx(402)  # + the gossip margin
    assert d.stream_mibps > 1.0 and "both fit" in d.reason


def test_short_bandwidth_follows_the_policy(ms: ModelSet) -> None:
    obs = NodeObservation("127.0.0.1", 300.0, 0.95, 0.0)
    cfg = BwManConfig(total_mbit=30, wanted_mibps=3.0)
    clients = decide(obs, ms, cfg)
    migration = decide(obs, ms, BwManConfig(total_mbit=30, wanted_mibps=3.0,
                                            policy=Policy.PREFER_MIGRATION))
    assert clients.client_mbit > migration.client_mbit
    assert migration.stream_mibps > clients.stream_mibps
    assert "PreferClients" in clients.reason and "PreferMigration" in migration.reason


def test_busier_node_gets_less_migration(ms: ModelSet) -> None:
    cfg = BwManConfig(total_mbit=1000)
    quiet = decide(NodeObservation("a", 50.0, 0.95, 0.0), ms, cfg)
    busy = decide(NodeObservation("a", 330.0, 0.95, 0.0), ms, cfg)
    assert busy.stream_mibps < quiet.stream_mibps
    assert busy.stream_mibps >= cfg.min_mibps  # the floor keeps a migration moving


def test_clients_are_never_starved(ms: ModelSet) -> None:
    idle = NodeObservation("127.0.0.1", 0.0, 1.0, 0.0)
    d = decide(idle, ms, BwManConfig(total_mbit=50, policy=Policy.PREFER_MIGRATION))
    assert d.client_mbit >= 1.0


def test_missing_series_is_an_error_and_nothing_is_actuated(ms: ModelSet) -> None:
    acted: list[object] = []

    def query(promql: str) -> list[dict[str, object]]:
        if "streaming" in promql:
            return []  # Prometheus has no streaming series for the node
        return [{"metric": {"instance": "127.0.0.1:9500"}, "value": [0, "10"]}]

    loop = BwManLoop([(1, "127.0.0.1", "127.0.0.1:9500")], ms, BwManConfig(total_mbit=100),
                     query, lambda *a: acted.append(a), lambda *a: acted.append(a))
    with pytest.raises(MetricsError, match="never read as 0"):
        loop.step()
    assert acted == []


def test_a_node_that_left_is_dropped_not_waited_for(ms: ModelSet) -> None:
    """After a decommission Prometheus no longer scrapes the node; the loop must keep
    managing the nodes that remain instead of failing every step on the missing series."""
    a = (1, "127.0.0.1", "127.0.0.1:9500")
    b = (2, "127.0.0.2", "127.0.0.2:9500")
    members = [a, b]
    tc: list[str] = []

    def query(promql: str) -> list[dict[str, object]]:
        return [{"metric": {"instance": inst}, "value": [0, "10"]} for _, _, inst in members]

    loop = BwManLoop([a, b], ms, BwManConfig(total_mbit=100), query,
                     lambda ip, c, s: tc.append(ip), lambda n, r: r,
                     members=lambda: list(members))
    assert [d.ip for d in loop.step()] == ["127.0.0.1", "127.0.0.2"]
    members.remove(b)
    tc.clear()
    assert [d.ip for d in loop.step()] == ["127.0.0.1"]
    assert tc == ["127.0.0.1"] and "127.0.0.2" not in loop.last_stream
