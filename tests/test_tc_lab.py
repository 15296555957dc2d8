"""The tc actuator on a real HTB, in a network namespace this test run creates.

Traffic is a bounded TCP flow between processes inside that namespace on its own
127.0.0.x addresses; the machine's own interfaces are never shaped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from elastore.actuators.tc import HtbShaper
from elastore.errors import ElastoreError
from elastore.lab import netns
from elastore.lab.flow import concurrent_rates, mean_rate, measure

pytestmark = pytest.mark.lab
NS = f"elastore-test-tc-{os.getpid()}"
NODE, OTHER = "127.0.0.2", "127.0.0.3"


@pytest.fixture(scope="module")
def ns() -> Iterator[str]:
    try:
        netns.create(NS)
    except Exception as exc:  # a required component that cannot start is a failure
        pytest.fail(f"cannot create the lab network namespace: {exc}")
    yield NS
    netns.delete(NS)


def test_unshaped_loopback_is_fast(ns: str) -> None:
    rate = mean_rate(measure(ns, NODE, 9042, 2.0), 0.5, 2.0)
    assert rate > 400  # far above every rate shaped below


def test_client_and_storage_classes_and_a_live_change(ns: str) -> None:
    shaper = HtbShaper(ns, total_mbit=500)
    shaper.install([NODE, OTHER], client_mbit=20, storage_mbit=10)
    try:
        client = mean_rate(measure(ns, NODE, 9042, 3.0), 1.0, 3.0)
        assert client == pytest.approx(20, rel=0.10)
        storage = mean_rate(measure(ns, OTHER, 7000, 3.0), 1.0, 3.0)
        assert storage == pytest.approx(10, rel=0.10)
        # live change in the middle of one flow: 20 -> 60 Mbit/s at t = 3 s
        samples = measure(ns, NODE, 9042, 6.0,
                       during=[(3.0, lambda: shaper.set_rates(NODE, client_mbit=60))])
        assert mean_rate(samples, 1.0, 2.8) == pytest.approx(20, rel=0.10)
        assert mean_rate(samples, 4.0, 6.0) == pytest.approx(60, rel=0.10)
        handles = {c["handle"] for c in shaper.describe()}
        assert {"1:10", "1:11", "1:20", "1:21", "1:1", "1:ffff"} <= handles
    finally:
        shaper.remove()
    # exactly what was installed is gone: no HTB left, traffic unshaped again
    assert not shaper.installed
    assert mean_rate(measure(ns, NODE, 9042, 2.0), 0.5, 2.0) > 400


def test_guaranteed_classes_borrow_up_to_the_ceiling(ns: str) -> None:
    """BwMan's mode: a class is guaranteed its rate and, when the link is idle, may borrow
    up to the node's ceiling (port 7000 also carries replica traffic of client requests)."""
    shaper = HtbShaper(ns, total_mbit=500, ceil_mbit=40)
    shaper.install([NODE], client_mbit=30, storage_mbit=5)
    try:
        storage = mean_rate(measure(ns, NODE, 7000, 3.0), 1.0, 3.0)
        assert storage == pytest.approx(40, rel=0.10)  # alone: borrows to the ceiling
    finally:
        shaper.remove()


# node 2 answering a client from its port 9042, and node 2's outgoing internode stream
CLIENT_FLOW = (OTHER, 5001, f"{NODE}:9042")
STORAGE_FLOW = (OTHER, 7000, NODE)


def test_nic_guarantees_each_class_its_share_and_changes_live(ns: str) -> None:
    """BwMan's layout: node 2's NIC (40 Mbit/s) split into guaranteed client and storage
    classes by what node 2 *sends*. Two saturating flows get their guarantees, and a live
    change swaps them."""
    shaper = HtbShaper(ns, total_mbit=500, nic_mbit=40, match="egress", queue_bytes=256_000)
    shaper.install([NODE, OTHER], client_mbit=30, storage_mbit=10)
    try:
        client, storage = concurrent_rates(ns, [CLIENT_FLOW, STORAGE_FLOW], 4.0)
        assert client == pytest.approx(30, rel=0.10)
        assert storage == pytest.approx(10, rel=0.10)
        shaper.set_rates(NODE, client_mbit=10, storage_mbit=30)
        client, storage = concurrent_rates(ns, [CLIENT_FLOW, STORAGE_FLOW], 4.0)
        assert client == pytest.approx(10, rel=0.10)
        assert storage == pytest.approx(30, rel=0.10)
        # alone, a class borrows the whole NIC, and no more
        (alone,) = concurrent_rates(ns, [STORAGE_FLOW], 3.0)
        assert alone == pytest.approx(40, rel=0.10)
        # traffic *to* node 2's port 9042 is what its clients send, not node 2's egress
        to_node = mean_rate(measure(ns, NODE, 9042, 2.0), 0.5, 2.0)
        assert to_node > 400
        with pytest.raises(ElastoreError, match="exceed the node's NIC"):
            shaper.set_rates(NODE, client_mbit=30, storage_mbit=20)
    finally:
        shaper.remove()


def test_unmanaged_nic_is_one_fifo(ns: str) -> None:
    """Without BwMan (split=False) both ports of a node share one FIFO at the NIC's rate."""
    shaper = HtbShaper(ns, total_mbit=500, nic_mbit=40, split=False, match="egress",
                       queue_bytes=256_000)
    shaper.install([NODE], client_mbit=1, storage_mbit=1)
    try:
        client, storage = concurrent_rates(ns, [CLIENT_FLOW, STORAGE_FLOW], 4.0)
        assert client + storage == pytest.approx(40, rel=0.10)
        assert shaper.nodes[NODE].client == shaper.nodes[NODE].storage  # one leaf
        with pytest.raises(ElastoreError, match="one FIFO per node"):
            shaper.set_rates(NODE, client_mbit=10)
    finally:
        shaper.remove()


def test_refuses_the_hosts_own_namespace() -> None:
    with pytest.raises(ElastoreError, match="outside an elastore namespace"):
        HtbShaper("default").install([NODE], 10, 10)
    with pytest.raises(ElastoreError, match="not an elastore namespace"):
        netns.delete("default")
