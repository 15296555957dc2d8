"""The tc actuator on a real HTB, in a network namespace this test run creates.

Traffic is a bounded TCP flow between processes inside that namespace on its own
127.0.0.x addresses; the machine's own interfaces are never shaped.

What each test asserts holds at any machine speed: the classes the kernel reads back (rate
and ceiling, exactly), which class a flow's bytes went through, and that no class ever sent
more than 1.1x its cap (the kernel's byte counters, each rate taken over the longest interval
that could lie between two reads, so a descheduled test process only lowers it). The rates
the flows reach (a guarantee met, a ceiling borrowed up to, the unshaped loopback's speed)
are figures (tests/figures.py): recorded here, judged in ``make lab-check``. Nothing is
timed, so the module runs in the parallel phase (``concurrent``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from figures import FigureBook

from elastore.actuators.tc import UNCLASSIFIED, HtbShaper
from elastore.errors import ElastoreError
from elastore.lab import netns
from elastore.lab.flow import concurrent_rates, mean_rate, measure

pytestmark = [pytest.mark.lab, pytest.mark.concurrent]
NS = f"elastore-test-tc-{os.getpid()}"
NODE, OTHER = "127.0.0.2", "127.0.0.3"
#: a class never sends more than this times its cap (HTB's burst and one 64-KiB segment
#: are ~5 % of a 20-Mbit/s class over the shortest interval read)
CAP_SLACK = 1.10
#: the shortest interval over which a class's rate is read from its counters, seconds
SPAN_S = 1.5
#: how often the counters are read while a flow runs, seconds (one read costs ~50 ms)
EVERY_S = 0.5

T = TypeVar("T")
#: one read of the kernel's per-class byte counters: (monotonic before, after, bytes)
Snap = tuple[float, float, dict[int, int]]


@pytest.fixture(scope="module")
def ns() -> Iterator[str]:
    try:
        netns.create(NS)
    except Exception as exc:  # a required component that cannot start is a failure
        pytest.fail(f"cannot create the lab network namespace: {exc}")
    yield NS
    netns.delete(NS)


def qdisc_kinds(ns: str) -> list[str]:
    """The kinds of the qdiscs on the namespace's loopback, read from the kernel."""
    from pyroute2 import NetNS

    ipr = NetNS(ns)
    try:
        idx = ipr.link_lookup(ifname="lo")[0]
        return [str(q.get_attr("TCA_KIND")) for q in ipr.get_qdiscs(index=idx)]
    finally:
        ipr.close()


def classes(shaper: HtbShaper) -> dict[str, tuple[float | None, float | None]]:
    """Handle -> (rate, ceiling) Mbit/s of every class, read back from the kernel."""
    return {c["handle"]: (c["rate_mbit"], c["ceil_mbit"]) for c in shaper.describe()}


def _snap(shaper: HtbShaper) -> Snap:
    t0 = time.monotonic()
    got = shaper.class_bytes()
    return t0, time.monotonic(), got


def polled(shaper: HtbShaper, run: Callable[[], T]) -> tuple[T, list[Snap]]:
    """``run()`` (flows) in a thread while this one reads every class's byte counter, once
    before it starts, every :data:`EVERY_S` while it runs, and once after it ends."""
    out: list[T] = []
    err: list[BaseException] = []

    def go() -> None:
        try:
            out.append(run())
        except BaseException as exc:  # re-raised below, after the last read
            err.append(exc)

    snaps = [_snap(shaper)]
    th = threading.Thread(target=go)
    th.start()
    while th.is_alive():
        th.join(EVERY_S)
        snaps.append(_snap(shaper))
    if err:
        raise err[0]
    return out[0], snaps


def peak_mbit(snaps: list[Snap], handle: int, since: float = -math.inf,
              until: float = math.inf) -> float:
    """The highest rate of class ``handle`` over any interval of at least :data:`SPAN_S`
    between two reads made within [since, until], each rate taken over the longest interval
    that could lie between its two reads: a machine that deschedules the reader only lowers
    it, so a cap checked against it holds at any speed."""
    sel = [s for s in snaps if s[0] >= since and s[1] <= until]
    best = 0.0
    for i, (a0, a1, a) in enumerate(sel):
        for b0, b1, b in sel[i + 1:]:
            if b0 - a1 >= SPAN_S:
                best = max(best, (b.get(handle, 0) - a.get(handle, 0)) * 8 / (b1 - a0) / 1e6)
    return best


def sent(snaps: list[Snap], handle: int, since: float = -math.inf) -> int:
    """Bytes class ``handle`` sent from the first read made after ``since`` to the last."""
    sel = [s for s in snaps if s[0] >= since]
    return sel[-1][2].get(handle, 0) - sel[0][2].get(handle, 0) if len(sel) > 1 else 0


def story(snaps: list[Snap], handle: int) -> list[tuple[float, int]]:
    """A class's counter at each read (seconds from the first read, bytes): what a failed
    check prints."""
    return [(round(s0 - snaps[0][0], 2), b.get(handle, 0)) for s0, _, b in snaps]


def rate_of(samples: list[tuple[float, float]], lo: float, hi: float) -> float:
    """A flow's mean Mbit/s between ``lo`` and ``hi`` s, NaN (a figure never met) when a
    loaded machine left too few samples there."""
    try:
        return mean_rate(samples, lo, hi)
    except ElastoreError:
        return math.nan


def together(ns: str, flows: list[tuple[str, int, str]], seconds: float) -> list[float]:
    """:func:`concurrent_rates`, NaN for each flow when the machine was too loaded to run
    them together long enough."""
    try:
        return concurrent_rates(ns, flows, seconds)
    except ElastoreError as exc:
        print(f"flows not compared: {exc}")
        return [math.nan] * len(flows)


def test_unshaped_loopback_is_fast(ns: str, figure: FigureBook) -> None:
    """No qdisc of ours on the namespace's loopback; its speed is a figure (far above every
    rate shaped below)."""
    assert "htb" not in qdisc_kinds(ns)
    rate = rate_of(measure(ns, NODE, 9042, 2.0), 0.5, 2.0)
    figure("unshaped_mbit", rate, ">=", 400, "a flow on the unshaped loopback, Mbit/s",
           source="was assert rate > 400")


def test_client_and_storage_classes_and_a_live_change(ns: str, figure: FigureBook) -> None:
    shaper = HtbShaper(ns, total_mbit=500)
    shaper.install([NODE, OTHER], client_mbit=20, storage_mbit=10)
    try:
        client_h, storage_h = shaper.nodes[NODE].client, shaper.nodes[OTHER].storage
        got = classes(shaper)
        assert got["1:10"] == (20.0, 20.0) and got["1:21"] == (10.0, 10.0), got
        assert {"1:10", "1:11", "1:20", "1:21", "1:1", "1:ffff"} <= set(got)
        samples, snaps = polled(shaper, lambda: measure(ns, NODE, 9042, 3.0))
        assert sent(snaps, client_h) > 0  # a flow to 127.0.0.2:9042: its client class
        assert peak_mbit(snaps, client_h) <= 20 * CAP_SLACK, story(snaps, client_h)
        figure.within("client_mbit", rate_of(samples, 1.0, 3.0), 20, 0.10,
                      "a flow through a 20-Mbit/s client class, Mbit/s")
        samples, snaps = polled(shaper, lambda: measure(ns, OTHER, 7000, 3.0))
        assert sent(snaps, storage_h) > 0
        assert peak_mbit(snaps, storage_h) <= 10 * CAP_SLACK, story(snaps, storage_h)
        figure.within("storage_mbit", rate_of(samples, 1.0, 3.0), 10, 0.10,
                      "a flow through a 10-Mbit/s storage class, Mbit/s")

        # live change in the middle of one flow: 20 -> 60 Mbit/s at t = 3 s
        change: list[float] = []
        read: list[tuple[float | None, float | None]] = []

        def to_60() -> None:
            change.append(time.monotonic())
            shaper.set_rates(NODE, client_mbit=60)
            change.append(time.monotonic())
            read.append(classes(shaper)["1:10"])

        samples, snaps = polled(shaper, lambda: measure(ns, NODE, 9042, 6.0,
                                                        during=[(3.0, to_60)]))
        assert read == [(60.0, 60.0)]  # the kernel's class changed while the flow ran
        start, end = change
        # and the flow went on through it
        assert sent(snaps, client_h, since=end) > 0, story(snaps, client_h)
        assert peak_mbit(snaps, client_h, until=start) <= 20 * CAP_SLACK, story(snaps, client_h)
        assert peak_mbit(snaps, client_h, since=end) <= 60 * CAP_SLACK, story(snaps, client_h)
        figure.within("before_change_mbit", rate_of(samples, 1.0, 2.8), 20, 0.10,
                      "the flow before its class changes from 20 to 60 Mbit/s, Mbit/s")
        figure.within("after_change_mbit", rate_of(samples, 4.0, 6.0), 60, 0.10,
                      "the same flow after the change, Mbit/s")
    finally:
        shaper.remove()
    # exactly what was installed is gone: no HTB left, traffic unshaped again
    assert not shaper.installed
    assert "htb" not in qdisc_kinds(ns)
    figure("unshaped_after_mbit", rate_of(measure(ns, NODE, 9042, 2.0), 0.5, 2.0), ">=", 400,
           "a flow once the HTB is removed, Mbit/s", source="was assert rate > 400")


def test_guaranteed_classes_borrow_up_to_the_ceiling(ns: str, figure: FigureBook) -> None:
    """BwMan's mode: a class is guaranteed its rate and, when the link is idle, may borrow
    up to the node's ceiling (port 7000 also carries replica traffic of client requests)."""
    shaper = HtbShaper(ns, total_mbit=500, ceil_mbit=40)
    shaper.install([NODE], client_mbit=30, storage_mbit=5)
    try:
        got = classes(shaper)
        assert got["1:10"] == (30.0, 40.0) and got["1:11"] == (5.0, 40.0), got
        samples, snaps = polled(shaper, lambda: measure(ns, NODE, 7000, 3.0))
        storage_h = shaper.nodes[NODE].storage
        assert sent(snaps, storage_h) > 0
        assert peak_mbit(snaps, storage_h) <= 40 * CAP_SLACK, \
            story(snaps, storage_h)  # no more than the ceiling
        figure.within("borrowed_mbit", rate_of(samples, 1.0, 3.0), 40, 0.10,
                      "a 5-Mbit/s storage class alone, borrowing up to its 40-Mbit/s "
                      "ceiling, Mbit/s")
    finally:
        shaper.remove()


# node 2 answering a client from its port 9042, and node 2's outgoing internode stream
CLIENT_FLOW = (OTHER, 5001, f"{NODE}:9042")
STORAGE_FLOW = (OTHER, 7000, NODE)


def test_nic_guarantees_each_class_its_share_and_changes_live(
        ns: str, figure: FigureBook) -> None:
    """BwMan's layout: node 2's NIC (40 Mbit/s) split into guaranteed client and storage
    classes by what node 2 *sends*. Two saturating flows get their guarantees, and a live
    change swaps them."""
    shaper = HtbShaper(ns, total_mbit=500, nic_mbit=40, match="egress", queue_bytes=256_000)
    shaper.install([NODE, OTHER], client_mbit=30, storage_mbit=10)
    try:
        cls = shaper.nodes[NODE]
        assert cls.nic is not None
        got = classes(shaper)
        assert got["1:100"] == (40.0, 40.0), got
        assert got["1:10"] == (30.0, 40.0) and got["1:11"] == (10.0, 40.0), got
        pair, snaps = polled(shaper, lambda: together(ns, [CLIENT_FLOW, STORAGE_FLOW], 4.0))
        client, storage = pair
        assert sent(snaps, cls.client) > 0 and sent(snaps, cls.storage) > 0
        assert peak_mbit(snaps, cls.nic) <= 40 * CAP_SLACK, \
            story(snaps, cls.nic)  # the NIC holds both
        figure.within("guaranteed_client_mbit", client, 30, 0.10,
                      "the client class's 30-Mbit/s guarantee, both flows saturating, Mbit/s")
        figure.within("guaranteed_storage_mbit", storage, 10, 0.10,
                      "the storage class's 10-Mbit/s guarantee, both flows saturating, Mbit/s")
        shaper.set_rates(NODE, client_mbit=10, storage_mbit=30)
        got = classes(shaper)
        assert got["1:10"] == (10.0, 40.0) and got["1:11"] == (30.0, 40.0), got
        pair, snaps = polled(shaper, lambda: together(ns, [CLIENT_FLOW, STORAGE_FLOW], 4.0))
        client, storage = pair
        assert peak_mbit(snaps, cls.nic) <= 40 * CAP_SLACK, story(snaps, cls.nic)
        figure.within("swapped_client_mbit", client, 10, 0.10,
                      "the client class after the swap (10 Mbit/s guaranteed), Mbit/s")
        figure.within("swapped_storage_mbit", storage, 30, 0.10,
                      "the storage class after the swap (30 Mbit/s guaranteed), Mbit/s")
        # alone, a class borrows the whole NIC, and no more
        one, snaps = polled(shaper, lambda: together(ns, [STORAGE_FLOW], 3.0))
        (alone,) = one
        assert sent(snaps, cls.storage) > 0
        assert peak_mbit(snaps, cls.nic) <= 40 * CAP_SLACK, story(snaps, cls.nic)
        figure.within("alone_mbit", alone, 40, 0.10,
                      "the storage class alone, borrowing the whole 40-Mbit/s NIC, Mbit/s")
        # traffic *to* node 2's port 9042 is what its clients send, not node 2's egress: it
        # goes unclassified, and only node 2's ACKs take its client class
        samples, snaps = polled(shaper, lambda: measure(ns, NODE, 9042, 2.0))
        assert sent(snaps, UNCLASSIFIED) > sent(snaps, cls.client), \
            (story(snaps, UNCLASSIFIED), story(snaps, cls.client))
        figure("to_node_mbit", rate_of(samples, 0.5, 2.0), ">=", 400,
               "a flow to node 2's port 9042 (not its egress: unshaped), Mbit/s",
               source="was assert to_node > 400")
        with pytest.raises(ElastoreError, match="exceed the node's NIC"):
            shaper.set_rates(NODE, client_mbit=30, storage_mbit=20)
        assert classes(shaper)["1:10"] == (10.0, 40.0)  # a refused change leaves the class
    finally:
        shaper.remove()


def test_unmanaged_nic_is_one_fifo(ns: str, figure: FigureBook) -> None:
    """Without BwMan (split=False) both ports of a node share one FIFO at the NIC's rate."""
    shaper = HtbShaper(ns, total_mbit=500, nic_mbit=40, split=False, match="egress",
                       queue_bytes=256_000)
    shaper.install([NODE], client_mbit=1, storage_mbit=1)
    try:
        assert shaper.nodes[NODE].client == shaper.nodes[NODE].storage  # one leaf
        leaf = shaper.nodes[NODE].client
        got = classes(shaper)
        assert got["1:100"] == (40.0, 40.0) and not {"1:10", "1:11"} & set(got), got
        pair, snaps = polled(shaper, lambda: together(ns, [CLIENT_FLOW, STORAGE_FLOW], 4.0))
        client, storage = pair
        assert sent(snaps, leaf) > 0
        assert peak_mbit(snaps, leaf) <= 40 * CAP_SLACK, \
            story(snaps, leaf)  # both flows, one 40-Mbit/s FIFO
        figure.within("fifo_sum_mbit", client + storage, 40, 0.10,
                      "both flows through the one 40-Mbit/s FIFO, Mbit/s")
        with pytest.raises(ElastoreError, match="one FIFO per node"):
            shaper.set_rates(NODE, client_mbit=10)
    finally:
        shaper.remove()


def test_refuses_the_hosts_own_namespace() -> None:
    with pytest.raises(ElastoreError, match="outside an elastore namespace"):
        HtbShaper("default").install([NODE], 10, 10)
    with pytest.raises(ElastoreError, match="not an elastore namespace"):
        netns.delete("default")
