"""The pure skew planner (issue 38): node shares with both read spreads and the background,
imbalance, hot ranges, the move bounded by the data it streams, the servers that keep the
busiest node within capacity, the capacity factors and the trigger/stop/revert hysteresis."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastore.errors import ElastoreError
from elastore.models.skew import (
    Hysteresis,
    HysteresisState,
    Keys,
    Ring,
    capacity_factors,
    hot_ranges,
    hysteresis_step,
    imbalance,
    node_shares,
    plan_move,
    rebalanced,
    servers_for_busiest,
    shrunk,
)

U = 2**59  # 1/32 of the ring


def hot() -> tuple[Ring, Keys]:
    """Four even nodes a, b, c, d (c's range is (-2**62, 0]); 10 requests/s in each of a's,
    b's and d's ranges, four 10 requests/s keys in c's at -7U, -6U, -5U, -4U."""
    ring = Ring.evenly(["a", "b", "c", "d"])
    toks = [2**62 + 2**60, -(2**62) - 2**60, -7 * U, -6 * U, -5 * U, -4 * U, 2**61]
    names = ("ka", "kb", "c1", "c2", "c3", "c4", "kd")
    return ring, Keys(np.array(toks), np.array([10, 10, 10, 11, 12, 13, 10.0]), names)


def plain_hot() -> tuple[Ring, Keys]:
    ring, keys = hot()
    return ring, Keys(keys.tokens, np.full(7, 10.0), keys.names)


def test_skew_node_shares_reads_spread_or_on_the_primary() -> None:
    ring, keys = plain_hot()
    # reads only, rf 2: spread puts half of a range's requests on each replica
    np.testing.assert_allclose(node_shares(ring, keys, 2, 1.0, "replicas"),
                               np.array([10, 10, 25, 25]) / 70)
    # on the primary: each range's owner serves it all
    np.testing.assert_allclose(node_shares(ring, keys, 2, 1.0, "primary"),
                               np.array([10, 10, 40, 10]) / 70)
    # writes only: both replicas do every write (a: ranges a, d; c: b, c; ...)
    np.testing.assert_allclose(node_shares(ring, keys, 2, 0.0, "primary"),
                               np.array([20, 20, 50, 50]) / 140)
    # half and half, primary: reads 35 (a 5, b 5, c 20, d 5), writes 35 x 2 replicas
    mixed = node_shares(ring, keys, 2, 0.5, "primary")
    np.testing.assert_allclose(mixed, (np.array([5, 5, 20, 5]) + np.array([10, 10, 25, 25]))
                               / 105)


def test_skew_node_shares_background_follows_ownership() -> None:
    ring, keys = plain_hot()
    # half the requests from the unsampled tail, uniform: 1/4 of it per range
    shares = node_shares(ring, keys, 1, 1.0, "replicas", background=0.5)
    np.testing.assert_allclose(shares, 0.5 * np.array([10, 10, 40, 10]) / 70 + 0.5 / 4)
    uneven = Ring.single(["a", "b", "c"], [0, 2**62, -(2**62)])
    tail_only = node_shares(uneven, Keys.empty(), 2, 0.7, "replicas", background=0.3)
    np.testing.assert_allclose(tail_only, uneven.ownership(2) / 2)
    assert shares.sum() == pytest.approx(1.0)


def test_skew_node_shares_rejects_bad_parameters() -> None:
    ring, keys = plain_hot()
    with pytest.raises(ElastoreError, match="read_ratio"):
        node_shares(ring, keys, 3, 1.5)
    with pytest.raises(ElastoreError, match="spread"):
        node_shares(ring, keys, 3, 0.5, "random")
    with pytest.raises(ElastoreError, match="background"):
        node_shares(ring, keys, 3, 0.5, background=-0.1)
    with pytest.raises(ElastoreError, match="replication factor"):
        node_shares(ring, keys, 0, 0.5)


def test_skew_imbalance_busiest_over_mean_and_its_errors() -> None:
    assert imbalance([1.0, 1.0, 2.0]) == pytest.approx(1.5)
    assert imbalance([3.0, 3.0]) == 1.0
    for bad, what in (([], "no nodes"), ([1.0, math.nan], "NaN"), ([1.0, -1.0], ">= 0"),
                      ([0.0, 0.0], "undefined")):
        with pytest.raises(ElastoreError, match=what):
            imbalance(bad)


def test_skew_hot_ranges_hottest_first_with_their_keys() -> None:
    ring, keys = hot()
    ranges = hot_ranges(ring, keys, 2, 0.9, top=4)
    assert [r.owner for r in ranges] == ["c", "a", "b", "d"]  # 46, then 10, 10, 10 by token
    first = ranges[0]
    assert (first.start, first.end) == (-(2**62), 0)
    assert first.replicas == ("c", "d")
    assert first.load_share == pytest.approx(46 / 76)
    assert first.data_share == pytest.approx(0.25)
    assert first.top_keys == ("c4", "c3", "c2")
    wrap = next(r for r in ranges if r.owner == "a")
    assert (wrap.start, wrap.end) == (2**62, -(2**63))  # start > end: wraps past the max
    assert [r.load_share for r in ranges] == sorted([r.load_share for r in ranges],
                                                    reverse=True)


def test_skew_plan_move_within_the_bound_and_none_when_nothing_helps() -> None:
    ring, keys = plain_hot()
    # rf 1: c serves 40 of 70. Taking one cluster key needs b's token at -7U at least (1/32
    # of the data), two keys 2/32 = 6.25 %; giving d keys needs c back by 4/32 or more.
    move = plan_move(ring, keys, 1, 0.9, max_move_fraction=0.05)
    assert move is not None
    assert (move.node, move.from_token, move.to_token) == ("b", -(2**62), -7 * U)
    assert move.moved_fraction == pytest.approx(1 / 32)
    assert move.imbalance_before == pytest.approx(4 * 40 / 70)
    assert move.imbalance_after == pytest.approx(4 * 30 / 70)
    after = node_shares(ring.moved(move.node, move.to_token), keys, 1, 0.9)
    assert after.max() == pytest.approx(30 / 70)
    # a tighter bound: no move within 1 % takes a key, so none helps
    assert plan_move(ring, keys, 1, 0.9, max_move_fraction=0.01) is None
    # a balanced ring: nothing to gain
    assert plan_move(Ring.evenly(["a", "b", "c"]), Keys.empty(), 3, 0.9) is None
    with pytest.raises(ElastoreError, match="vnodes"):
        plan_move(Ring(("a", "b"), ((1, 5), (3,))), keys, 1, 0.9)


def test_skew_plan_move_rf3_moves_stay_within_the_bound() -> None:
    rng = np.random.default_rng(7)
    keys = Keys(rng.integers(-(2**63), 2**63 - 1, 3000, dtype=np.int64),
                rng.pareto(1.1, 3000) + 0.01)
    ring = Ring.evenly([f"n{i}" for i in range(12)])
    for bound in (0.01, 0.05):
        move = plan_move(ring, keys, 3, 0.9, "replicas", 0.4, bound)
        assert move is not None and move.moved_fraction <= bound
        assert move.imbalance_after < move.imbalance_before


def test_skew_servers_for_busiest_against_the_mean() -> None:
    ring = Ring.evenly([f"n{i}" for i in range(8)])
    # uniform: the mean-based count, where a single-token ring can be even (halving or
    # doubling it, or at most rf nodes)
    for total in (100.0, 250.0, 400.0, 800.0, 1600.0):
        assert servers_for_busiest(total, 100.0, ring, Keys.empty(), 3, 0.9, "replicas", 0.0,
                                   0.05, 64) == math.ceil(total / 100.0)
    # ... and not where it cannot: 8 -> 9 single tokens leave a node with three 1/8 ranges
    # (3/8 of 27/8 copies, imbalance 9/8 > 1.05 here), and a 5 % move cannot make it even
    assert servers_for_busiest(850.0, 100.0, ring, Keys.empty(), 3, 0.9, "replicas", 0.0,
                               0.05, 64) > 9
    ring, keys = plain_hot()
    mean_count = math.ceil(700 / 200)
    n = servers_for_busiest(700.0, 200.0, ring, keys, 1, 0.9, "replicas", 0.0, 0.05, 64)
    blind = servers_for_busiest(700.0, 200.0, ring, keys, 1, 0.9, "replicas", 0.0, 0.05, 64,
                                smart=False)
    assert mean_count < n <= blind
    grown, _ = rebalanced(ring, keys, n, 1, 0.9, "replicas", 0.0, 0.05)
    assert 700 * node_shares(grown, keys, 1, 0.9).max() <= 200 + 1e-9
    fewer, _ = rebalanced(ring, keys, n - 1, 1, 0.9, "replicas", 0.0, 0.05)
    assert 700 * node_shares(fewer, keys, 1, 0.9).max() > 200
    # one key's 10 of 70 on its single replica: 700 requests/s need 100 on it; capacity 90
    # can never hold it, whatever the count
    assert servers_for_busiest(700.0, 90.0, ring, keys, 1, 0.9, "replicas", 0.0, 0.05,
                               20) == 20


def test_skew_capacity_factors() -> None:
    ring, keys = plain_hot()
    factors = capacity_factors(ring, keys, 1, 0.9, "replicas", 0.0, 0.05, 6)
    assert sorted(factors) == [1, 2, 3, 4, 5, 6]
    assert factors[1] == 1.0
    # at 4 nodes: the move above (busiest 30 of 70): 1 / (4 x 30/70)
    assert factors[4] == pytest.approx(70 / 120)
    assert all(0 < f <= 1 for f in factors.values())
    even = capacity_factors(Ring.evenly(["a", "b", "c"]), Keys.empty(), 3, 0.9, "replicas",
                            0.0, 0.05, 5)
    assert even[3] == pytest.approx(1.0) and even[1] == 1.0
    # scale-in: removing a or d leaves c's 40 the busiest (b or c would make 50): the tie
    # goes to the later node, as a StatefulSet removes its highest ordinal
    assert shrunk(ring, keys, 3, 1, 0.9).names == ("a", "b", "c")


def test_skew_hysteresis_acts_stops_and_reverts() -> None:
    h = Hysteresis(alpha=1.0)
    seq = [0.5, 0.8, 0.7, 0.5, 0.6, 0.4, 0.5, 0.6, 0.76]
    assert [h.step(u) for u in seq] == [
        "hold", "act", "hold", "stop", "hold", "revert", "hold", "hold", "act"]
    assert h.active
    # smoothing: alpha weighs the new sample
    s, a = hysteresis_step(HysteresisState(), 0.9)
    assert (s.smoothed, a) == (0.9, "act")
    s, a = hysteresis_step(s, 0.45, alpha=0.85)
    assert s.smoothed == pytest.approx(0.85 * 0.45 + 0.15 * 0.9) and a == "stop"
    s, a = hysteresis_step(s, 0.3, alpha=0.85)
    assert s.smoothed < 0.45 and a == "revert" and not s.active
    with pytest.raises(ElastoreError, match="utilization"):
        Hysteresis().step(math.nan)
    with pytest.raises(ElastoreError, match="revert <= stop <= high"):
        Hysteresis(high=0.5, stop=0.6)
