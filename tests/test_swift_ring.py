"""The Swift ring actuator: its pure parts (reading swift-ring-builder's rebalance summary,
telling which partitions are out of place) and, on Debian's real Swift (``lab``), the
rings as a ConfigMap's files changed in one process (tests/test_swift_lab.py and
tests/test_swift_operator_k8s.py run the rest)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from elastore.actuators.swiftring import misplaced, parse_rebalance
from elastore.errors import ElastoreError

# swift-ring-builder 2.30.1's own words (Debian's swift, run in the lab)
REBALANCED = ("Reassigned 128 (25.00%) partitions. Balance is now 0.39.  Dispersion is now "
              "0.00\n")
NOTHING = ("No partitions could be reassigned.\nThere is no need to do so at this time\n")


def test_rebalance_summary_is_read() -> None:
    r = parse_rebalance("object", REBALANCED)
    assert (r.kind, r.reassigned, r.balance) == ("object", 128, 0.39)


COWARDLY = "Cowardly refusing to save rebalance as it did not change at least 1%.\n"


@pytest.mark.parametrize("text", [NOTHING, COWARDLY])
def test_a_rebalance_that_moved_nothing_says_so(text: str) -> None:
    r = parse_rebalance("account", text)
    assert r.reassigned == 0 and math.isnan(r.balance)


def test_unexpected_rebalance_output_is_an_error() -> None:
    with pytest.raises(ElastoreError, match="unexpected"):
        parse_rebalance("object", "Traceback (most recent call last): ...")


A, B, C, D = "127.0.1.1/d1", "127.0.1.2/d2", "127.0.1.3/d3", "127.0.1.4/d4"


def test_everything_in_place_is_done() -> None:
    ring = {0: [A, B], 1: [B, C], 2: [C, A]}
    disk = {A: {0: 10, 2: 5}, B: {0: 10, 1: 7}, C: {1: 7, 2: 5}}
    m = misplaced(ring, disk)
    assert m.done and (m.handoffs, m.missing, m.handoff_bytes) == (0, 0, 0)


def test_a_new_device_starts_missing_what_it_now_owns() -> None:
    # partition 1's second replica moved from C to the new D: C holds a handoff, D lacks it
    ring = {0: [A, B], 1: [B, D], 2: [C, A]}
    disk = {A: {0: 10, 2: 5}, B: {0: 10, 1: 7}, C: {1: 7, 2: 5}, D: {}}
    m = misplaced(ring, disk)
    assert not m.done
    assert (m.handoffs, m.missing, m.handoff_bytes) == (1, 1, 7)


def test_a_drained_device_holds_only_handoffs() -> None:
    ring = {0: [A, B], 1: [B, A]}
    disk = {A: {0: 3, 1: 4}, B: {0: 3, 1: 4}, C: {0: 3, 1: 4}}
    m = misplaced(ring, disk)
    assert (m.handoffs, m.missing, m.handoff_bytes) == (2, 0, 7)


def test_a_partition_nobody_has_is_not_missing() -> None:
    # empty partitions have no directory anywhere: nothing to move
    ring = {0: [A, B], 1: [B, C]}
    assert misplaced(ring, {A: {0: 1}, B: {0: 1}, C: {}}).done


def test_the_shaper_takes_swifts_ports_and_refuses_ports_it_cannot_tell_apart() -> None:
    from elastore.actuators.tc import HtbShaper

    s = HtbShaper("elastore-x", match="egress", client_port=6200, storage_port=873)
    assert (s.client_port, s.storage_port) == (6200, 873)
    with pytest.raises(ElastoreError, match="must differ"):
        HtbShaper("elastore-x", client_port=873, storage_port=873)
    with pytest.raises(ElastoreError, match="TCP port"):
        HtbShaper("elastore-x", client_port=0)


@pytest.mark.lab
@pytest.mark.concurrent  # Debian's ring builder on files: nothing timed
def test_ring_files_change_in_one_process_and_keep_their_form(tmp_path: Path) -> None:
    """The operator's ring change on real builders (Debian's Swift): a ConfigMap's files
    (builders gzipped) in, new files out; add, drain (weight 0: no partition left), remove;
    the builders stay gzipped; a change that would not fit a ConfigMap is refused."""
    import gzip

    from elastore.actuators.swiftring import KINDS, RingFiles, RingMaster

    master = RingMaster(tmp_path / "m")
    master.create(6, 2)
    master.add_all([(n, f"10.0.0.{n}", "d1", 100.0) for n in (1, 2, 3)])
    master.rebalance()
    files = {f"{k}.builder.gz": gzip.compress((master.path / f"{k}.builder").read_bytes())
             for k in KINDS}
    files.update({f"{k}.ring.gz": (master.path / f"{k}.ring.gz").read_bytes() for k in KINDS})
    rings = RingFiles(files)
    assert rings.replicas() == 2.0
    assert sorted(rings.table()) == ["10.0.0.1/d1", "10.0.0.2/d1", "10.0.0.3/d1"]
    new, done = rings.change([{"op": "add", "ip": "10.0.0.4", "device": "d1", "zone": 4,
                               "weight": 100}])
    assert sorted(new.files) == sorted(files)  # the same keys: builders still .gz
    assert new.table()["10.0.0.4/d1"] == (100.0, 32)  # 64 partitions x 2 replicas / 4
    assert {r.kind for r in done} == set(KINDS) and all(r.reassigned == 32 for r in done)
    assert new.ring_md5s() != rings.ring_md5s()
    assert {d for ds in new.assignment("object").values() for d in ds} >= {"10.0.0.4/d1"}
    # adding it again changes nothing; draining leaves it no partition
    again, _ = new.change([{"op": "add", "ip": "10.0.0.4", "device": "d1", "zone": 4,
                            "weight": 100}])
    assert again.table() == new.table()
    drained, _ = new.change([{"op": "weight", "ip": "10.0.0.4", "device": "d1", "zone": 4,
                              "weight": 0}])
    assert drained.table()["10.0.0.4/d1"] == (0.0, 0)
    removed, _ = drained.change([{"op": "remove", "ip": "10.0.0.4", "device": "d1",
                                  "zone": 4, "weight": 0}])
    assert "10.0.0.4/d1" not in removed.table()
    with pytest.raises(ElastoreError, match="over the 1000 a ConfigMap holds"):
        rings.change([], limit_bytes=1000)
    with pytest.raises(ElastoreError, match="for object; found"):
        RingFiles({k: v for k, v in files.items() if k != "object.ring.gz"})


@pytest.mark.lab
@pytest.mark.concurrent  # ring files only: nothing is timed
def test_hazard_a_pod_back_at_a_new_ip_keeps_its_one_device(tmp_path: Path) -> None:
    """Issue 35, finding 5, on Debian's real Swift: a pod restarted during its scale-out
    came back at a new IP, and the next 'add' gave it a second device while the first kept
    its weight and partitions. The device is now found by the pod's name (its ``meta``) and
    moved to the new address with its partitions; every op finds it so."""
    from elastore.actuators.swiftring import KINDS, RingFiles, RingMaster

    master = RingMaster(tmp_path / "m")
    master.create(6, 2)
    master.add_all([(n, f"10.0.0.{n}", "d1", 100.0) for n in (1, 2, 3)])
    master.rebalance()
    files = {f"{k}.builder": (master.path / f"{k}.builder").read_bytes() for k in KINDS}
    files.update({f"{k}.ring.gz": (master.path / f"{k}.ring.gz").read_bytes() for k in KINDS})
    rings = RingFiles(files)
    assert rings.pod_devices() == {}  # devices the operator did not add name no pod

    def op(kind: str, ip: str, weight: float = 100) -> dict[str, object]:
        return {"op": kind, "ip": ip, "device": "d1", "zone": 4, "weight": weight,
                "pod": "store-3"}

    added, _ = rings.change([op("add", "10.0.0.4")])
    assert added.pod_devices() == {"store-3": ("10.0.0.4/d1", 100.0, 32)}
    back, done = added.change([op("add", "10.0.0.9")])  # the pod's new address
    table = back.table()
    assert "10.0.0.4/d1" not in table and table["10.0.0.9/d1"] == (100.0, 32), table
    assert len(table) == 4 and back.pod_devices()["store-3"][0] == "10.0.0.9/d1"
    assert all(r.reassigned == 0 for r in done)  # its partitions stayed with it
    assert {d for ds in back.assignment("object").values() for d in ds} == {
        "10.0.0.1/d1", "10.0.0.2/d1", "10.0.0.3/d1", "10.0.0.9/d1"}
    # readdress alone, and a drain from the newer address, find it by its pod
    moved, _ = added.change([op("readdress", "10.0.0.7")])
    assert moved.pod_devices()["store-3"] == ("10.0.0.7/d1", 100.0, 32)
    drained, _ = back.change([op("weight", "10.0.0.11", weight=0)])
    assert drained.pod_devices()["store-3"] == ("10.0.0.11/d1", 0.0, 0)
    # a device of someone else already at the new address: refused, nothing changed
    with pytest.raises(ElastoreError, match=r"another device is at 10\.0\.0\.2"):
        added.change([op("add", "10.0.0.2")])
