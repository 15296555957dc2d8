"""BwMan's decision (pure) on the shipped placeholder models."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastore.errors import ElastoreError, MetricsError
from elastore.lab.bwman import BwManLoop
from elastore.models.bandwidth import Policy
from elastore.models.bundle import ModelSet
from elastore.planner.bwman import BwManConfig, NodeObservation, decide
from elastore.sim.cli import PLACEHOLDER


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(PLACEHOLDER)


def test_enough_bandwidth_both_served(ms: ModelSet) -> None:
    # f() allows ~23 MiB/s (~207 Mbit/s with overhead) at this load: 400 Mbit/s fits both
    d = decide(NodeObservation("127.0.0.1", 100.0, 0.95, 0.0), ms, BwManConfig(total_mbit=400))
    # the guarantees are the node's bandwidth, no more: tc can honour both
    assert d.client_mbit + d.storage_mbit == pytest.approx(400)
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


@settings(max_examples=300, deadline=None)
@given(total=st.floats(3, 2000), load=st.floats(0, 2000), ratio=st.floats(0, 1),
       wanted=st.one_of(st.none(), st.floats(0.01, 100)),
       policy=st.sampled_from(list(Policy)))
def test_guarantees_always_fit_the_nic(ms: ModelSet, total: float, load: float, ratio: float,
                                       wanted: float | None, policy: Policy) -> None:
    """Whatever the load, wanted rate and policy: the two guarantees sum to the node's
    bandwidth, clients keep their floor, and the stream throttle stays within its bounds."""
    cfg = BwManConfig(total_mbit=total, wanted_mibps=wanted, policy=policy)
    d = decide(NodeObservation("n", load, ratio, 0.0), ms, cfg)
    assert d.client_mbit + d.storage_mbit == pytest.approx(total)
    assert d.client_mbit >= cfg.min_client_mbit - 1e-9
    assert d.storage_mbit >= cfg.gossip_margin_mbit - 1e-9
    assert cfg.min_mibps - 1e-9 <= d.stream_mibps <= cfg.max_mibps + 1e-9


def test_a_load_beyond_the_client_model_is_said_not_guessed(ms: ModelSet) -> None:
    client = ms.bandwidth.client
    assert client is not None
    load = 10 * float(client.y[-1])
    d = decide(NodeObservation("n", load, 0.95, 0.0), ms, BwManConfig(total_mbit=100))
    assert "beyond the client model" in d.reason and "inf" not in d.reason
    # PreferClients gives the clients everything but the floor of the migration
    assert d.client_mbit == pytest.approx(100 - BwManConfig(total_mbit=100).gossip_margin_mbit)


def test_config_is_validated() -> None:
    with pytest.raises(ElastoreError, match="must exceed"):
        BwManConfig(total_mbit=1.0)
    with pytest.raises(ElastoreError, match="min_mibps"):
        BwManConfig(total_mbit=100, min_mibps=5, max_mibps=2)


def test_headroom_provisions_clients_above_the_observed_load(ms: ModelSet) -> None:
    """With too little bandwidth for both, PreferClients gives the clients what the load
    plus the headroom needs, and the migration exactly the rest."""
    need = ms.bandwidth.client_mbit_for
    total = need(150) + 10 + BwManConfig(total_mbit=100).gossip_margin_mbit
    obs = NodeObservation("n", 100.0, 0.95, 0.0)
    bare = decide(obs, ms, BwManConfig(total_mbit=total, wanted_mibps=24, load_headroom=0))
    more = decide(obs, ms, BwManConfig(total_mbit=total, wanted_mibps=24, load_headroom=0.5))
    assert "provisioned for 150 req/s" in more.reason
    assert bare.client_mbit == pytest.approx(need(100))
    assert more.client_mbit == pytest.approx(need(150))
    assert more.storage_mbit < bare.storage_mbit
    assert more.stream_mibps < bare.stream_mibps
    with pytest.raises(ElastoreError, match="load_headroom"):
        BwManConfig(total_mbit=100, load_headroom=-0.1)


def _two_nodes_query(members: list[tuple[int, str, str]]
                     ) -> Callable[[str], list[dict[str, object]]]:
    def query(promql: str) -> list[dict[str, object]]:
        return [{"metric": {"instance": inst}, "value": [0, "10"]} for _, _, inst in members]
    return query


def test_a_failed_actuation_is_reported_and_the_other_nodes_are_still_served(
        ms: ModelSet) -> None:
    from elastore.lab.bwman import ActuationError

    a, b = (1, "127.0.0.1", "127.0.0.1:9500"), (2, "127.0.0.2", "127.0.0.2:9500")
    members = [a, b]
    tc: list[str] = []

    def set_stream(n: int, mibps: float) -> float:
        if n == 2:
            raise ElastoreError("nodetool: connection refused")
        return mibps

    loop = BwManLoop([a, b], ms, BwManConfig(total_mbit=100), _two_nodes_query(members),
                     lambda ip, c, s: tc.append(ip), set_stream, members=lambda: members)
    with pytest.raises(ActuationError, match=r"127\.0\.0\.2: nodetool: connection refused") as err:
        loop.step()
    assert [d.ip for d in err.value.decisions] == ["127.0.0.1"]
    assert "127.0.0.1" in loop.applied and "127.0.0.2" not in loop.applied


def test_a_node_leaving_during_the_step_is_not_a_failure(ms: ModelSet) -> None:
    """The race seen in the lab: node 2 was a member when the step began and had left
    (JVM stopped) when its stream throttle was set."""
    a, b = (1, "127.0.0.1", "127.0.0.1:9500"), (2, "127.0.0.2", "127.0.0.2:9500")
    members = [a, b]

    def set_stream(n: int, mibps: float) -> float:
        if n == 2:
            members.remove(b)  # it finished leaving just now
            raise ElastoreError("nodetool: connection refused")
        return mibps

    loop = BwManLoop([a, b], ms, BwManConfig(total_mbit=100), _two_nodes_query(list(members)),
                     lambda ip, c, s: None, set_stream, members=lambda: list(members))
    assert [d.ip for d in loop.step()] == ["127.0.0.1"]


def test_the_stream_throttle_is_reset_only_beyond_the_actuators_resolution(
        ms: ModelSet) -> None:
    """Every setstreamthroughput starts a JVM: a decision that moves less than nodetool's
    resolution (1 Mbit/s) from the rate applied leaves it alone."""
    node = (1, "127.0.0.1", "127.0.0.1:9500")
    load = ["40"]
    calls: list[float] = []

    def query(promql: str) -> list[dict[str, object]]:
        v = "0" if "streaming" in promql else load[0]
        return [{"metric": {"instance": "127.0.0.1:9500"}, "value": [0, v]}]

    def set_stream(n: int, mibps: float) -> float:
        calls.append(mibps)
        return round(mibps * 8.388608) / 8.388608  # whole Mbit/s, as nodetool

    # 50 Mbit/s per node, migration wanted at 20 MiB/s: the split is short, and the
    # migration gets what the clients leave (placeholder models)
    cfg = BwManConfig(total_mbit=50, wanted_mibps=20)
    loop = BwManLoop([node], ms, cfg, query, lambda *a: None, set_stream)
    first = loop.step()[0].stream_mibps
    load[0] = "41"  # a little more load: a slightly different decision
    second = loop.step()[0].stream_mibps
    assert second != first and abs(second - loop.applied["127.0.0.1"]) <= 0.12
    assert len(calls) == 1
    load[0] = "200"  # much more load: far less room for the migration
    third = loop.step()[0].stream_mibps
    assert len(calls) == 2 and third < first - 1
    assert loop.applied["127.0.0.1"] == pytest.approx(third, abs=0.06)


def test_swift_is_observed_by_its_object_servers_without_a_stream_series(ms: ModelSet
                                                                          ) -> None:
    """Swift's loop reads each node's GET and PUT rates (its object server's StatsD
    timers); no exporter has the replicators' bytes, so the outgoing rate is unknown (NaN),
    never 0, and the decision does not need it."""
    import math

    from elastore.lab.bwman import SWIFT_QUERIES

    node = (1, "127.0.1.1", "127.0.1.1:9102")
    asked: list[str] = []

    def query(promql: str) -> list[dict[str, object]]:
        asked.append(promql)
        rate = "19" if 'verb="GET"' in promql else "1"
        return [{"metric": {"instance": node[2]}, "value": [0, rate]}]

    loop = BwManLoop([node], ms, BwManConfig(total_mbit=100, wanted_mibps=5), query,
                     lambda *a: None, lambda n, r: r, queries=SWIFT_QUERIES)
    (obs,) = loop.observe()
    assert obs.client_rps == 20 and obs.read_ratio == pytest.approx(0.95)
    assert math.isnan(obs.outgoing_mibps)
    assert len(asked) == 2 and all("swift_server_request_seconds_count" in q for q in asked)
    assert [d.ip for d in loop.step()] == ["127.0.1.1"]

    def no_gets(promql: str) -> list[dict[str, object]]:
        return [] if 'verb="GET"' in promql else query(promql)

    loop = BwManLoop([node], ms, BwManConfig(total_mbit=100, wanted_mibps=5), no_gets,
                     lambda *a: None, lambda n, r: r, queries=SWIFT_QUERIES)
    with pytest.raises(MetricsError, match="no client reads series"):
        loop.step()
