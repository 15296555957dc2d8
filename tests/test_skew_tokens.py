"""Token ownership and token choice (issue 38) against rings computed by hand: primary
ranges with wrap-around, SimpleStrategy's distinct-node walk (rf > n, vnodes), the balanced
token a count-only scale-out gets and the split token that takes a hot cluster of keys."""

from __future__ import annotations

import time

import numpy as np
import pytest

from elastore.errors import ElastoreError
from elastore.models.skew import (
    RING_MAX,
    RING_MIN,
    Keys,
    Ring,
    balanced_token,
    key_token,
    key_tokens,
    node_shares,
    split_token,
    streamed_fraction,
)

U = 2**59  # a 1/32 of the ring


def test_skew_key_token_is_a_stable_signed_64_bit_hash() -> None:
    assert key_token("Main_Page") == key_token("Main_Page")
    assert key_token("a") != key_token("b")
    toks = key_tokens(f"page-{i}" for i in range(20000))
    assert toks.dtype == np.int64 and toks.min() > RING_MIN and toks.max() <= RING_MAX
    # uniform over the ring: each of 8 equal arcs holds 1/8 of the keys within 5 %
    counts = np.histogram(toks.astype(float), bins=8, range=(RING_MIN, RING_MAX))[0]
    assert np.all(np.abs(counts / 2500 - 1) < 0.05)


def test_skew_ownership_even_ring_and_rf_above_n() -> None:
    ring = Ring.evenly(["a", "b", "c", "d"])
    assert ring.tokens == ((RING_MIN,), (-(2**62),), (0,), (2**62,))
    np.testing.assert_allclose(ring.ownership(1), [0.25] * 4)
    np.testing.assert_allclose(ring.ownership(3), [0.75] * 4)
    np.testing.assert_allclose(ring.ownership(5), [1.0] * 4)  # rf > n: every node, sum n
    assert ring.replicas([5], 7).shape == (1, 4)


def test_skew_ownership_and_replicas_with_wrap_around() -> None:
    # sorted: c at -2**62, a at 0, b at 2**62; c's range wraps: (2**62, RING_MAX] and
    # [RING_MIN, -2**62], half the ring
    ring = Ring.single(["a", "b", "c"], [0, 2**62, -(2**62)])
    np.testing.assert_allclose(ring.ownership(1), [0.25, 0.25, 0.5])
    np.testing.assert_allclose(ring.ownership(2), [0.75, 0.5, 0.75])
    assert ring.ownership(2).sum() == pytest.approx(2.0)
    reps = ring.replicas(np.array([RING_MAX, RING_MIN, 0, 1, -(2**62), 2**62 + 1]), 2)
    assert reps.tolist() == [[2, 0], [2, 0], [0, 1], [1, 2], [2, 0], [2, 0]]


def test_skew_ownership_with_vnodes_skips_a_node_already_chosen() -> None:
    # sorted: -2**62 (a), 0 (b), 2**61 (c), 2**62 (a); ranges 1/2, 1/4, 1/8, 1/8
    ring = Ring(("a", "b", "c"), ((-(2**62), 2**62), (0,), (2**61,)))
    np.testing.assert_allclose(ring.ownership(1), [0.625, 0.25, 0.125])
    # the range ending at a's 2**62 walks on to a's -2**62 (skipped) and then b
    np.testing.assert_allclose(ring.ownership(2), [0.75, 0.875, 0.375])
    assert ring.replicas([2**62], 2).tolist() == [[0, 1]]
    assert ring.replicas([2**62], 3).tolist() == [[0, 1, 2]]


def test_skew_ring_rejects_bad_tokens_with_clear_errors() -> None:
    with pytest.raises(ElastoreError, match="distinct"):
        Ring.single(["a", "b"], [5, 5])
    with pytest.raises(ElastoreError, match="outside"):
        Ring.single(["a"], [2**63])
    with pytest.raises(ElastoreError, match="no token"):
        Ring(("a",), ((),))
    with pytest.raises(ElastoreError, match="names must be distinct"):
        Ring.single(["a", "a"], [1, 2])
    with pytest.raises(ElastoreError, match="replication factor"):
        Ring.evenly(["a"]).ownership(0)
    with pytest.raises(ElastoreError, match="finite"):
        Keys(np.array([1]), np.array([np.nan]))
    with pytest.raises(ElastoreError, match=">= 0"):
        Keys(np.array([1]), np.array([-1.0]))


def test_skew_balanced_token_bisects_the_largest_range_across_the_wrap() -> None:
    ring = Ring.single(["a", "b", "c"], [0, 2**62, -(2**62)])
    # c's range runs from 2**62 round to -2**62: its middle is the ring's minimum token
    assert balanced_token(ring) == RING_MIN
    assert balanced_token(Ring.single(["a"], [7])) == 7 + 2**63 - 2**64  # one node: opposite


def _hot_ring() -> tuple[Ring, Keys, list[int]]:
    """Four even nodes; 10 requests/s in each of a's, b's and d's ranges and a cluster of
    four 10 requests/s keys in c's range (-2**62, 0]."""
    ring = Ring.evenly(["a", "b", "c", "d"])
    cluster = [-7 * U, -6 * U, -5 * U, -4 * U]
    toks = [2**62 + 2**60, -(2**62) - 2**60, *cluster, 2**61]
    return ring, Keys(np.array(toks), np.full(len(toks), 10.0)), cluster


def test_skew_split_token_takes_the_hot_cluster_by_hand() -> None:
    ring, keys, cluster = _hot_ring()
    # rf 2, reads only, spread over replicas: a key's 10 requests/s put 5 on each replica.
    # Before: a 10, b 10, c 5 + 20 = 25, d 20 + 5 = 25 of 70.
    before = node_shares(ring, keys, 2, 1.0, "replicas")
    np.testing.assert_allclose(before, np.array([10, 10, 25, 25]) / 70)
    # Count-only: all ranges are equal, the first (a's) is bisected: c and d keep 25.
    blind = ring.with_node("e", balanced_token(ring))
    assert node_shares(blind, keys, 2, 1.0).max() == pytest.approx(25 / 70)
    # The split: the new node N inside c's range taking x of the cluster's 40 gives
    # N 5 + x/2, c 20 (it replicates the whole cluster either way), d 5 + (40 - x)/2: the
    # busiest falls from 25 to 20 for x in {10, 20, 30}.
    tok = split_token(ring, keys, 2, 1.0, "replicas")
    assert cluster[0] <= tok < cluster[-1]
    after = node_shares(ring.with_node("e", tok), keys, 2, 1.0)
    assert after.max() == pytest.approx(20 / 70)
    assert before.max() - after.max() == pytest.approx(5 / 70)


def test_skew_split_token_with_one_replica_halves_the_cluster() -> None:
    ring, keys, cluster = _hot_ring()
    # rf 1: c serves the cluster's 40 of 70; the new node should take 20 of it.
    tok = split_token(ring, keys, 1, 0.9)
    assert cluster[1] <= tok < cluster[2]
    shares = node_shares(ring.with_node("e", tok), keys, 1, 0.9)
    np.testing.assert_allclose(np.sort(shares), np.sort(np.array([10, 10, 20, 10, 20]) / 70))


def test_skew_streamed_fraction_of_a_bootstrap_and_a_move() -> None:
    ring = Ring.evenly(["a", "b", "c", "d"])
    # rf 1: a node joining in the middle of a quarter takes an eighth of the data
    assert streamed_fraction(ring, ring.with_node("e", -(2**61)), 1) == pytest.approx(1 / 8)
    # rf 3: the newcomer becomes a replica of a's and b's ranges (1/4 each) and of its
    # own (1/8): 5/8 of one copy, of the 3 copies stored
    assert streamed_fraction(ring, ring.with_node("e", -(2**61)), 3) == pytest.approx(5 / 24)
    # rf 3: moving c's token back by 1/32 hands (-U, 0] to the node 3 positions on: 1/32
    # of one copy out of 3
    assert streamed_fraction(ring, ring.moved("c", -U), 3) == pytest.approx(1 / 96)


def test_skew_split_token_is_fast_on_ten_thousand_keys() -> None:
    rng = np.random.default_rng(3)
    keys = Keys(rng.integers(RING_MIN, RING_MAX, 10_000, dtype=np.int64),
                rng.pareto(1.2, 10_000) + 0.1)
    ring = Ring.evenly([f"n{i}" for i in range(32)])
    t0 = time.perf_counter()
    tok = split_token(ring, keys, 3, 0.9, "replicas", 0.3)
    elapsed = time.perf_counter() - t0
    grown = ring.with_node("x", tok)
    blind = ring.with_node("x", balanced_token(ring))
    assert (node_shares(grown, keys, 3, 0.9, background=0.3).max()
            <= node_shares(blind, keys, 3, 0.9, background=0.3).max())
    assert elapsed < 1.0, f"split_token took {elapsed:.2f} s"
