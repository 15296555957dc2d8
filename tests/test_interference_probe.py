"""The node agent's interference probe (issue 17, Hubbub-scale).

Pure part, on files recorded from this machine's kernel (``tests/data/probe/``, see its
README): the parsers, the components between two snapshots (every expected value is
written out from the recorded numbers), the index's rule, the pod -> cgroup search, the
sliding window, the hardware-counter maths on synthetic counts, which pods are measured,
and the agent's ``/metrics``. On the real kernel: the hardware counters' degrade path (this
VM has no PMU) and their read path with a software event, and (``lab``: it creates cgroups)
a pod cgroup read as its own beside a competitor pinned to its CPU (how far its index rises
and falls back are figures, judged in ``make lab-check``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from figures import FigureBook

from elastore.agent import perf
from elastore.agent.agent import Agent, AgentMetrics
from elastore.agent.cli import _seconds, readings_json
from elastore.agent.perf import HwCounters, HwTotals
from elastore.hubbub.probe import (
    CPU_TERM,
    INDEX_TERMS,
    CgroupFinder,
    CgroupLayout,
    CpuJiffies,
    IpcReference,
    PodRef,
    Probe,
    Psi,
    combine,
    find_pod_dirs,
    hw_component,
    hw_rates,
    parse_cpu_stat,
    parse_proc_stat,
    parse_psi,
    pod_dir_uid,
    probed_pods,
    readings_between,
)

DATA = Path(__file__).resolve().parent / "data" / "probe"
POD_A = "6f1c2a4e-3b5d-4e7f-9a1b-2c3d4e5f6a7b"  # busy, a competitor on its CPU
POD_B = "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d"  # busy, limited to 0.2 core (v1 quota)
T0, T1 = 53380.776499059, 53383.778412131  # tests/data/probe/*/times.json
DT = (T1 - T0) * 1e6  # µs between the two recorded snapshots
A = PodRef("shop", "cass-0", POD_A)
B = PodRef("shop", "cass-1", POD_B)
GONE = PodRef("shop", "cass-2", "11111111-2222-4333-8444-555555555555")


def stage(case: str, snap: str, root: Path) -> None:
    """Make ``root`` the recorded tree ``case/snap`` (the probe's paths stay the same)."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(DATA / case / snap, root)


def recorded(case: str, tmp_path: Path, pods: list[PodRef], cut_stat: bool = False
             ) -> Any:
    root = tmp_path / "root"
    probe = Probe.under(root, hw=False)
    snaps = []
    for snap, t in (("t0", T0), ("t1", T1)):
        stage(case, snap, root)
        if cut_stat:
            stat = root / "proc" / "stat"
            first, *rest = stat.read_text().splitlines(keepends=True)
            stat.write_text(" ".join(first.split()[:8]) + "\n" + "".join(rest))
        snaps.append(probe.snapshot(pods, now=t))
    return readings_between(snaps[0], snaps[1], pods)


def approx(v: float) -> Any:
    return pytest.approx(v, rel=1e-12, abs=1e-15)


# -- parsing ---------------------------------------------------------------------------------
def test_parse_psi_uses_the_cumulative_totals() -> None:
    text = (DATA / "hybrid/t0/proc/pressure/io").read_text()
    assert text.startswith("some avg10=0.36 ")  # the avg fields are there, and ignored
    assert parse_psi(text) == Psi(232374693, 128622911)
    # a cpu file before Linux 5.13 has no full line: full unavailable, not 0
    assert parse_psi("some avg10=1.00 avg60=2.00 avg300=3.00 total=42\n") == Psi(42, None)
    with pytest.raises(ValueError):
        parse_psi("nothing here\n")


def test_parse_proc_stat_steal_is_field_8_and_missing_is_unavailable() -> None:
    text = (DATA / "hybrid/t0/proc/stat").read_text()
    # cpu  3297675 0 664212 6378237 20674 0 23951 15193 0 0 (guest, guest_nice not added)
    assert parse_proc_stat(text) == CpuJiffies(
        3297675 + 0 + 664212 + 6378237 + 20674 + 0 + 23951 + 15193, 15193)
    cut = (DATA / "v2-systemd/t0/proc/stat").read_text()
    assert cut.split("\n")[0] == "cpu 3297675 0 664212 6378237 20674 0 23951"
    assert parse_proc_stat(cut) == CpuJiffies(3297675 + 664212 + 6378237 + 20674 + 23951,
                                              None)
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3\n")


def test_parse_cpu_stat_v1_ns_and_v2_us() -> None:
    v1 = parse_cpu_stat((DATA / "hybrid/t1/sys/fs/cgroup/cpu/kubepods/besteffort"
                         / f"pod{POD_B}/cpu.stat").read_text())
    assert (v1.nr_periods, v1.nr_throttled, v1.usage_us) == (50, 49, None)
    assert v1.throttled_us == approx(3048373111 / 1000)  # throttled_time is in ns
    v2 = parse_cpu_stat((DATA / "v2-systemd/t1/sys/fs/cgroup/kubepods.slice/"
                         "kubepods-burstable.slice/kubepods-burstable-pod"
                         f"{POD_A.replace('-', '_')}.slice/cpu.stat").read_text())
    assert (v2.nr_periods, v2.nr_throttled, v2.throttled_us, v2.usage_us) == (
        150, 41, 700000.0, 1551916)
    # v2 without the cpu controller (this machine's unified tree): usage only
    bare = parse_cpu_stat((DATA / f"hybrid/t0/sys/fs/cgroup/unified/kubepods/besteffort/"
                           f"pod{POD_B}/cpu.stat").read_text())
    assert bare.throttled_us is None and bare.usage_us == 421417


# -- the index's rule ------------------------------------------------------------------------
def test_combine_is_one_minus_the_product_of_what_each_stall_leaves() -> None:
    c = {"cpu_some": 0.9, "cpu_full": 0.2, "memory_some": 0.5, "memory_full": 0.1,
         "io_some": 0.7, "io_full": 0.25, "steal": 0.05, "hw": 0.1, "throttled": 0.8}
    index, used = combine(c, "pod")
    assert CPU_TERM == "full" and used == ("cpu_full", "memory_full", "io_full", "steal",
                                           "hw")
    # the pod's cpu term is its pressure less its own throttling: max(0, 0.2 - 0.8) = 0
    assert index == approx(1 - 1.0 * 0.9 * 0.75 * 0.95 * 0.9)
    index, _ = combine({**c, "throttled": 0.15}, "pod")
    assert index == approx(1 - 0.95 * 0.9 * 0.75 * 0.95 * 0.9)
    index, _ = combine({k: v for k, v in c.items() if k != "throttled"}, "pod")
    assert index == approx(1 - 0.8 * 0.9 * 0.75 * 0.95 * 0.9)  # no throttling known
    index, used = combine(c, "node")
    assert used == ("cpu_some", "memory_full", "io_full", "steal", "hw")
    assert index == approx(1 - 0.1 * 0.9 * 0.75 * 0.95 * 0.9)
    # throttled (the pod's own limit) and the memory/io "some" terms are never terms
    assert not {"throttled", "memory_some", "io_some"} & set(INDEX_TERMS["pod"])
    assert not {"throttled", "memory_some", "io_some"} & set(INDEX_TERMS["node"])


def test_combine_leaves_unavailable_signals_out_and_is_unknown_without_any() -> None:
    assert combine({"cpu_full": 0.5, "io_full": float("nan")}) == (0.5, ("cpu_full",))
    assert combine({}) == (None, ())
    assert combine({"throttled": 1.0, "cpu_some": 0.4}) == (None, ())  # no pod term
    assert combine({"steal": 0.0}) == (0.0, ("steal",))  # measured 0 is 0
    assert combine({"cpu_full": 1.5, "steal": -0.1}) == (1.0, ("cpu_full", "steal"))


# -- recorded snapshots ----------------------------------------------------------------------
def test_hybrid_layout_v2_psi_and_v1_throttling(tmp_path: Path) -> None:
    r = recorded("hybrid", tmp_path, [A, B, GONE])
    assert r.window_s == approx(T1 - T0)
    # node: /proc/pressure; system-wide cpu full left out; steal 0 of 599 ticks
    assert r.node.components == {
        "cpu_some": approx((9073609534 - 9070636292) / DT),
        "memory_some": 0.0, "memory_full": 0.0,
        "io_some": approx((232378256 - 232374693) / DT), "io_full": 0.0,
        "steal": 0.0 / 599}
    assert r.node.used == ("cpu_some", "memory_full", "io_full", "steal")
    assert r.node.index == approx((9073609534 - 9070636292) / DT)  # 0.9905
    # pod A: its own cgroup, v2 has no throttling fields and v1 no directory for it
    a = r.pods["shop/cass-0"]
    cpu_a = (3451113 - 1315994) / DT  # 0.711: a competitor on its CPU
    assert (a.scope, a.reason) == ("pod", "")
    assert a.components == {"cpu_some": approx(cpu_a), "cpu_full": approx(cpu_a),
                            "memory_some": 0.0, "memory_full": 0.0, "io_some": 0.0,
                            "io_full": 0.0, "steal": 0.0}
    assert a.used == ("cpu_full", "memory_full", "io_full", "steal")
    assert a.index == approx(cpu_a)
    # pod B: throttling from the v1 cpu controller (ns), not in the index; throttled
    # tasks stay runnable, so its cgroup shows the cpu pressure of its own limit too
    b = r.pods["shop/cass-1"]
    cpu_b = (3986040 - 1580410) / DT
    thr_b = (3048373111 - 1533999255) / 1000 / DT
    assert b.components["throttled"] == approx(thr_b)
    assert b.components["cpu_full"] == approx(cpu_b)
    assert b.index == approx(max(0.0, cpu_b - min(1.0, thr_b)))  # its own limit taken out
    assert "throttled" not in b.used
    # a pod without a cgroup: the node's reading, and it says so
    g = r.pods["shop/cass-2"]
    assert (g.scope, g.reason) == ("node", "NoCgroup")
    assert g.index == r.node.index and g.components == r.node.components


def test_pure_v2_systemd_names_missing_memory_psi_and_no_steal(tmp_path: Path) -> None:
    r = recorded("v2-systemd", tmp_path, [A])
    assert r.node.used == ("cpu_some", "memory_full", "io_full")  # no steal field
    assert "steal" not in r.node.components
    a = r.pods["shop/cass-0"]
    cpu_a = (3451113 - 1315994) / DT
    assert a.scope == "pod"
    assert a.components == {"cpu_some": approx(cpu_a), "cpu_full": approx(cpu_a),
                            "io_some": 0.0, "io_full": 0.0,
                            "throttled": approx((700000 - 400000) / DT)}
    assert a.used == ("cpu_full", "io_full")  # memory.pressure absent: left out, not 0
    assert a.index == approx(cpu_a - (700000 - 400000) / DT)  # less its own throttling


def test_no_psi_leaves_steal_alone_and_nothing_at_all_is_unknown(tmp_path: Path) -> None:
    r = recorded("no-psi", tmp_path, [B, GONE])
    assert r.node.components == {"steal": 0.0}
    assert (r.node.index, r.node.used) == (0.0, ("steal",))
    b = r.pods["shop/cass-1"]  # found in v1 (cpu,cpuacct) only: throttling, no PSI
    assert (b.scope, b.reason) == ("node", "NoPodPsi")
    assert b.components == {"steal": 0.0,
                            "throttled": approx((3048373111 - 1533999255) / 1000 / DT)}
    assert (b.index, b.used) == (0.0, ("steal",))
    # and without the steal field either: no signal, the index is unknown, never 0
    r = recorded("no-psi", tmp_path, [B], cut_stat=True)
    assert (r.node.index, r.node.used, r.node.components) == (None, (), {})
    b = r.pods["shop/cass-1"]
    assert b.index is None and set(b.components) == {"throttled"}


def test_a_counter_going_backwards_is_unavailable(tmp_path: Path) -> None:
    root = tmp_path / "root"
    probe = Probe.under(root, hw=False)
    stage("hybrid", "t1", root)
    s0 = probe.snapshot([A], now=T0)
    stage("hybrid", "t0", root)  # every counter lower: a reset, not a negative stall
    s1 = probe.snapshot([A], now=T1)
    r = readings_between(s0, s1, [A])
    assert r.node.components == {"memory_some": 0.0, "memory_full": 0.0, "io_full": 0.0}
    assert "cpu_full" not in r.pods["shop/cass-0"].components


# -- pods' cgroups ---------------------------------------------------------------------------
def test_pod_dir_names_of_both_cgroup_drivers() -> None:
    u = POD_A.replace("-", "_")
    assert pod_dir_uid(f"pod{POD_A}") == POD_A  # cgroupfs
    assert pod_dir_uid(f"kubepods-besteffort-pod{u}.slice") == POD_A  # systemd
    assert pod_dir_uid(f"kubepods-pod{u}.slice") == POD_A  # guaranteed, systemd
    assert pod_dir_uid(f"kubelet-kubepods-burstable-pod{u}.slice") == POD_A  # kind
    assert pod_dir_uid(f"pod{POD_A.upper()}") == POD_A
    for other in ("kubepods.slice", "kubepods-burstable.slice", "pod-abc", "besteffort",
                  f"cri-containerd-{'a' * 64}.scope", f"pod{POD_A}x"):
        assert pod_dir_uid(other) is None, other


def test_find_pod_dirs_searches_a_few_levels_and_not_inside_pods(tmp_path: Path) -> None:
    uids = [str(uuid.UUID(int=k)) for k in range(1, 5)]
    (tmp_path / "kubepods/besteffort" / f"pod{uids[0]}" / f"pod{uids[1]}").mkdir(parents=True)
    (tmp_path / "a/b/c/d" / f"pod{uids[2]}").mkdir(parents=True)  # depth 5
    (tmp_path / "a/b/c/d/e" / f"pod{uids[3]}").mkdir(parents=True)  # depth 6
    found = find_pod_dirs(tmp_path)
    assert found == {uids[0]: tmp_path / "kubepods/besteffort" / f"pod{uids[0]}",
                     uids[2]: tmp_path / "a/b/c/d" / f"pod{uids[2]}"}


def test_finder_caches_re_resolves_and_rate_limits_its_walks(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu io memory\n")
    old = tmp_path / "kubepods" / f"pod{POD_A}"
    old.mkdir(parents=True)
    now = [0.0]
    finder = CgroupFinder(tmp_path, clock=lambda: now[0])
    assert finder.layout == CgroupLayout(tmp_path, None)
    assert finder.dirs([POD_A]) == {POD_A: (old, None)} and finder.scans == 1
    assert finder.dirs([POD_A]) == {POD_A: (old, None)} and finder.scans == 1  # cached
    new = tmp_path / "kubepods" / "burstable" / f"pod{POD_A}"
    new.parent.mkdir()
    old.rename(new)  # gone from the cached place: looked for again at once
    assert finder.dirs([POD_A]) == {POD_A: (new, None)} and finder.scans == 2
    assert finder.dirs([POD_A, POD_B]) == {POD_A: (new, None)} and finder.scans == 3
    now[0] = 10.0
    assert finder.dirs([POD_A, POD_B]) == {POD_A: (new, None)}
    assert finder.scans == 3  # B was just looked for: not every period
    now[0] = 31.0
    (tmp_path / "kubepods" / f"pod{POD_B}").mkdir()
    assert set(finder.dirs([POD_A, POD_B])) == {POD_A, POD_B} and finder.scans == 4


def test_layout_detection(tmp_path: Path) -> None:
    assert CgroupLayout.detect(tmp_path) == CgroupLayout(None, None)
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu,cpuacct/cpu.stat").write_text("nr_periods 0\n")
    assert CgroupLayout.detect(tmp_path) == CgroupLayout(None, tmp_path / "cpu,cpuacct")
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified/cgroup.controllers").write_text("\n")
    assert CgroupLayout.detect(tmp_path) == CgroupLayout(tmp_path / "unified",
                                                         tmp_path / "cpu,cpuacct")
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    assert CgroupLayout.detect(tmp_path) == CgroupLayout(tmp_path, None)


# -- the sliding window ----------------------------------------------------------------------
def test_the_window_is_the_newest_snapshot_at_least_a_window_old(tmp_path: Path) -> None:
    root = tmp_path / "root"
    stage("hybrid", "t0", root)
    probe = Probe.under(root, window_s=15.0, hw=False)
    assert [probe.observe([A], now=t) for t in (0.0, 4.0, 8.0, 12.0)] == [None] * 4
    got = []
    for t in (16.0, 20.0, 24.5, 40.0):
        r = probe.observe([A], now=t)
        assert r is not None
        got.append(r.window_s)
    assert got == [16.0, 16.0, 16.5, 15.5]  # bases 0, 4, 8, 24.5
    assert [s.t_s for s in probe.history] == [24.5, 40.0]  # older ones dropped
    r = probe.last
    assert r is not None and r.pods["shop/cass-0"].scope == "pod"


def test_a_pod_found_after_the_window_started_reads_the_node_until_it_fills(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    stage("hybrid", "t0", root)
    probe = Probe.under(root, window_s=5.0, hw=False)
    probe.observe([A], now=0.0)
    r = probe.observe([A, B], now=5.0)
    assert r is not None
    assert (r.pods["shop/cass-1"].scope, r.pods["shop/cass-1"].reason) == ("node",
                                                                           "NoHistory")
    r = probe.observe([A, B], now=10.0)
    assert r is not None and r.pods["shop/cass-1"].scope == "pod"


# -- hardware counters -----------------------------------------------------------------------
def test_hw_maths_on_synthetic_counts() -> None:
    a = HwTotals({"instructions": 1e9, "cycles": 2e9, "llc_misses": 1e6})
    b = HwTotals({"instructions": 3e9, "cycles": 4e9, "llc_misses": 3e6})
    r = hw_rates(a, b, 1.0)
    assert r is not None and r.ipc == 1.0 and r.llc_mpki == 1.0  # 2e6 misses / 2e6 kinstr
    idle = HwTotals({"instructions": 1e9 + 10, "cycles": 2e9 + 5e5, "llc_misses": 1e6})
    assert hw_rates(a, idle, 1.0) is None  # < 1e6 cycles/s: no meaningful IPC
    assert hw_rates(None, b, 1.0) is None
    assert hw_component(0.75, 1.5) == 0.5
    assert hw_component(2.0, 1.5) == 0.0  # above the reference: no loss
    assert hw_component(0.75, None) is None and hw_component(None, 1.5) is None
    assert perf.scaled(struct.pack("=QQQ", 100, 10, 5)) == 200.0  # multiplexed half
    assert perf.scaled(struct.pack("=QQQ", 100, 10, 10)) == 100.0
    assert perf.scaled(struct.pack("=QQQ", 0, 0, 0)) == 0.0


def test_ipc_reference_is_a_high_quantile_of_the_last_hour() -> None:
    ref = IpcReference(quantile=0.9, horizon_s=100.0, min_intervals=10)
    for k in range(9):
        ref.add(float(k), 1.0 + k / 10)
    assert ref.value() is None  # not enough intervals yet
    ref.add(9.0, 1.9)
    assert ref.value() == pytest.approx(1.0 + 0.9 * 0.9 + 0.0)  # 90th pct of 1.0..1.9
    for k in range(10):  # an hour (here 100 s) later the old ones are gone
        ref.add(200.0 + k, 0.5)
    assert ref.value() == pytest.approx(0.5)


def test_attr_is_the_kernels_struct() -> None:
    raw = perf.attr_bytes(perf.PERF_TYPE_HARDWARE, perf.PERF_COUNT_HW_INSTRUCTIONS)
    assert len(raw) == perf.ATTR_SIZE == 64
    assert struct.unpack_from("=IIQ", raw, 0) == (0, 64, 1)
    assert struct.unpack_from("=Q", raw, 32) == (3,)  # total time enabled | running
    assert struct.unpack_from("=Q", raw, 40) == (0,)  # enabled at open


class FakePmu:
    """perf_event_open and read for the probe's three events on 2 CPUs, with counts the
    test advances."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.closed: list[int] = []
        self.next_fd = 1000

    def syscall(self, attr: bytes, pid: int, cpu: int) -> int:
        assert pid == -1 and cpu in (0, 1)
        config = struct.unpack_from("=Q", attr, 8)[0]
        fd, self.next_fd = self.next_fd, self.next_fd + 1
        self.names[fd] = {1: "instructions", 0: "cycles", 3: "llc_misses"}[config]
        self.counts[fd] = 0
        return fd

    def advance(self, instructions: float, cycles: float, misses: float) -> None:
        per_cpu = {"instructions": instructions, "cycles": cycles, "llc_misses": misses}
        for fd, name in self.names.items():
            self.counts[fd] += int(per_cpu[name] / 2)

    def read(self, fd: int) -> bytes:
        return struct.pack("=QQQ", self.counts[fd], 1, 1)


def test_hw_signal_enters_the_index_once_the_reference_is_known(tmp_path: Path) -> None:
    pmu = FakePmu()
    hw = HwCounters(cpus=[0, 1], syscall=pmu.syscall, read=pmu.read, close=pmu.closed.append)
    assert hw.available and len(hw.fds) == 6
    root = tmp_path / "root"
    stage("hybrid", "t0", root)
    probe = Probe.under(root, window_s=5.0, hw=hw)
    probe.reference = IpcReference(min_intervals=4)
    for k in range(4):  # IPC 2.0, 5 s apart
        r = probe.observe([A], now=5.0 * k)
        pmu.advance(2e10, 1e10, 1e7)
    assert r is not None and r.ipc == 2.0 and r.llc_mpki == 0.5
    assert r.ipc_reference is None and "hw" not in r.node.components  # 3 intervals of 4
    r = probe.observe([A], now=20.0)
    assert r is not None and r.ipc == 2.0 and r.ipc_reference == 2.0
    assert r.node.components["hw"] == 0.0 and "hw" in r.pods["shop/cass-0"].used
    pmu.advance(1e10, 1e10, 4e7)  # IPC halves, misses x8 per instruction
    r = probe.observe([A], now=25.0)
    assert r is not None and r.ipc == 1.0 and r.llc_mpki == 4.0
    assert r.ipc_reference == pytest.approx(2.0)  # the 90th percentile is still 2
    assert r.node.components["hw"] == pytest.approx(0.5)
    a = r.pods["shop/cass-0"]
    assert a.components["hw"] == pytest.approx(0.5)
    assert a.index == pytest.approx(1 - 0.5)  # the files did not change: only hw stalls
    probe.close()
    assert sorted(pmu.closed) == list(range(1000, 1006)) and not hw.fds


def test_hw_open_failure_keeps_no_event_and_says_why() -> None:
    opened: list[int] = []

    def syscall(attr: bytes, pid: int, cpu: int) -> int:
        if cpu == 1 and struct.unpack_from("=Q", attr, 8)[0] == 3:
            return -95  # EOPNOTSUPP: no LLC event on this PMU
        opened.append(len(opened) + 10)
        return opened[-1]

    closed: list[int] = []
    hw = HwCounters(cpus=[0, 1], syscall=syscall, close=closed.append)
    assert not hw.available and hw.read() is None
    assert hw.error == f"perf_event_open(llc_misses, cpu 1): {perf.errno_text(95)}"
    assert hw.error.endswith("(Operation not supported)")
    assert sorted(closed) == opened  # all or none


def test_hw_counters_degrade_for_real_on_this_machine(caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    """This VM has no PMU (``perf stat -e instructions``: <not supported>): the open fails
    with an errno, nothing is kept, the probe logs it once and goes without ``hw``."""
    hw = HwCounters()
    if hw.available:  # a machine with a PMU: the counters read
        totals = hw.read()
        hw.close()
        assert totals is not None and totals.counts["cycles"] > 0
        pytest.skip("this machine has hardware counters: no degrade path to test")
    assert hw.fds == [] and hw.read() is None
    assert hw.error is not None
    assert re.fullmatch(r"perf_event_open\(instructions, cpu \d+\): E[A-Z]+ \(.+\)", hw.error)
    with caplog.at_level(logging.WARNING, logger="elastore.hubbub.probe"):
        probe = Probe(window_s=0.2)
        for _ in range(3):
            probe.observe([])
            time.sleep(0.1)
    assert probe.hw is None and probe.hw_error == hw.error
    warned = [r for r in caplog.records if "hardware counters unavailable" in r.message]
    assert len(warned) == 1 and hw.error in warned[0].message
    assert probe.last is not None and "hw" not in probe.last.node.components


def test_perf_events_open_and_read_for_real_with_a_software_event() -> None:
    """The same open/read/close path as the hardware events, on the kernel's cpu-clock
    (per CPU, every process: needs CAP_PERFMON or root, as the hardware ones do)."""
    hw = HwCounters(events=(("cpu_clock", perf.PERF_TYPE_SOFTWARE,
                             perf.PERF_COUNT_SW_CPU_CLOCK),))
    if not hw.available:
        assert hw.error is not None
        if "EACCES" in hw.error or "EPERM" in hw.error:
            pytest.skip(f"not allowed here: {hw.error}")
        pytest.fail(hw.error)
    try:
        a = hw.read()
        time.sleep(0.3)
        b = hw.read()
    finally:
        hw.close()
    assert a is not None and b is not None
    ncpu = len(perf.online_cpus())
    ns = b.counts["cpu_clock"] - a.counts["cpu_clock"]
    assert 0.5 * 0.3e9 * ncpu < ns < 2 * 0.3e9 * ncpu


# -- which pods, the agent's metrics, the CLI ------------------------------------------------
def policy(target: str, ns: str = "shop", mode: str = "Recommend", **meta: Any
           ) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{target}", "namespace": ns, **meta},
            "spec": {"mode": mode, "target": {"name": target, "replicationFactor": 3}}}


def pod(name: str, uid: str = "", ns: str = "shop", node: str = "n1", phase: str = "Running",
        owner: str | None = None, **meta: Any) -> dict[str, Any]:
    owners = [{"kind": "StatefulSet", "name": owner}] if owner else []
    return {"metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}",
                         "ownerReferences": owners, **meta},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_probed_pods_are_the_targets_running_pods_on_this_node_in_any_mode() -> None:
    pols = [policy("cass"), policy("a.b", mode="Enforce"),
            policy("gone", deletionTimestamp="2026-01-01T00:00:00Z")]
    pods = [pod("cass-0"), pod("cass-1", node="n2"), pod("cass-2", phase="Pending"),
            pod("cass-3", deletionTimestamp="2026-01-01T00:00:00Z"),
            pod("cass-0", ns="other"), pod("cassandra-0"), pod("cass-x"),
            pod("renamed", owner="cass"), pod("a.b-0"), pod("axb-0"), pod("gone-0"),
            pod("web-0", owner="web")]
    got = probed_pods(pols, pods, "n1")
    assert [p.key for p in got] == ["shop/a.b-0", "shop/cass-0", "shop/renamed"]
    assert got[1].uid == "uid-cass-0"


class FakeReader:
    def __init__(self, policies: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.pol, self.pod, self.fail = policies, pods, False

    def pods(self, node: str) -> list[dict[str, Any]]:
        if self.fail:
            raise ConnectionError("the API server is away")
        return self.pod

    def policies(self) -> list[dict[str, Any]]:
        return self.pol

    def target(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        return None  # these policies are Recommend: asked for nothing

    def statefulsets(self, namespace: str) -> list[dict[str, Any]]:
        return []


class NoLinks:
    """A netlink handle on a node with nothing to shape (no links, no qdiscs)."""

    def get_links(self) -> list[Any]:
        return []

    def get_qdiscs(self) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def metrics_text(m: AgentMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(m.registry).decode()


def series(text: str, name: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(name + "{")}


def test_agent_measures_the_targets_pods_and_exports_them(tmp_path: Path) -> None:
    root = tmp_path / "root"
    stage("hybrid", "t0", root)
    now = [T0]
    probe = Probe.under(root, window_s=3.0, hw=False, clock=lambda: now[0])
    reader = FakeReader([policy("cass")], [pod("cass-0", POD_A), pod("cass-1", POD_B),
                                           pod("cass-2", GONE.uid), pod("web-0")])
    metrics = AgentMetrics("n1")
    agent = Agent(reader, NoLinks, "n1", metrics, probe)
    metrics.agent = agent
    rep = agent.reconcile()
    assert rep.api_ok and not rep.shaped  # Recommend: nothing shaped, still measured
    assert [p.key for p in agent.probed] == ["shop/cass-0", "shop/cass-1", "shop/cass-2"]
    assert agent.measure() is None  # one snapshot: no window yet
    assert "elastore_interference_index{" not in metrics_text(metrics)
    stage("hybrid", "t1", root)
    now[0] = T1
    reader.fail = True  # the API away: measured anyway, for the pods last seen
    agent.reconcile()
    r = agent.measure()
    assert r is not None
    text = metrics_text(metrics)
    cpu_a, cpu_b = (3451113 - 1315994) / DT, (3986040 - 1580410) / DT
    idx = series(text, "elastore_interference_index")
    assert idx.keys() == {'elastore_interference_index{namespace="shop",node="n1",pod=' + p
                          + "}" for p in ('"cass-0"', '"cass-1"', '"cass-2"')}
    assert idx['elastore_interference_index{namespace="shop",node="n1",pod="cass-0"}'] \
        == pytest.approx(cpu_a)
    thr_b = (3048373111 - 1533999255) / 1000 / DT
    assert idx['elastore_interference_index{namespace="shop",node="n1",pod="cass-1"}'] \
        == pytest.approx(max(0.0, cpu_b - min(1.0, thr_b)))
    node = series(text, "elastore_interference_node_index")
    assert node == {'elastore_interference_node_index{node="n1"}':
                    pytest.approx((9073609534 - 9070636292) / DT)}
    assert idx['elastore_interference_index{namespace="shop",node="n1",pod="cass-2"}'] \
        == node['elastore_interference_node_index{node="n1"}']
    cg = series(text, "elastore_interference_pod_cgroup")
    assert cg == {
        'elastore_interference_pod_cgroup{namespace="shop",node="n1",pod="cass-0",'
        'reason=""}': 1.0,
        'elastore_interference_pod_cgroup{namespace="shop",node="n1",pod="cass-1",'
        'reason=""}': 1.0,
        'elastore_interference_pod_cgroup{namespace="shop",node="n1",pod="cass-2",'
        'reason="NoCgroup"}': 0.0}
    sig = series(text, "elastore_interference_signal")
    assert sig['elastore_interference_signal{namespace="shop",node="n1",pod="cass-1",'
               'signal="throttled"}'] == pytest.approx((3048373111 - 1533999255) / 1e3 / DT)
    assert not [k for k in sig if 'pod=""' in k]  # the node's are families of their own
    nsig = series(text, "elastore_interference_node_signal")
    assert nsig.keys() == {f'elastore_interference_node_signal{{node="n1",signal="{x}"}}'
                           for x in ("cpu_some", "memory_some", "memory_full", "io_some",
                                     "io_full", "steal")}  # no system-wide cpu_full
    used = series(text, "elastore_interference_signal_in_index")
    assert used['elastore_interference_signal_in_index{namespace="shop",node="n1",'
                'pod="cass-1",signal="throttled"}'] == 0.0
    assert used['elastore_interference_signal_in_index{namespace="shop",node="n1",'
                'pod="cass-1",signal="cpu_full"}'] == 1.0
    nused = series(text, "elastore_interference_node_signal_in_index")
    assert nused['elastore_interference_node_signal_in_index{node="n1",signal="cpu_some"}'] \
        == 1.0
    assert nused['elastore_interference_node_signal_in_index{node="n1",signal="io_some"}'] \
        == 0.0
    assert series(text, "elastore_interference_hw_available") == {
        'elastore_interference_hw_available{node="n1"}': 0.0}
    assert series(text, "elastore_interference_window_seconds") == {
        'elastore_interference_window_seconds{node="n1"}': pytest.approx(T1 - T0)}
    assert "elastore_interference_ipc{" not in text  # unavailable: no series
    out = readings_json(r, probe)
    assert out is not None and out["pods"]["shop/cass-2"]["reason"] == "NoCgroup"
    assert json.loads(json.dumps(out))["node"]["used"] == ["cpu_some", "memory_full",
                                                           "io_full", "steal"]


def test_a_failing_probe_never_stops_the_shaping(tmp_path: Path) -> None:
    class Broken(Probe):
        def observe(self, pods: Any, now: float | None = None) -> Any:
            raise OSError("the cgroup mount went away")

    reader = FakeReader([policy("cass")], [pod("cass-0", POD_A)])
    metrics = AgentMetrics("n1")
    agent = Agent(reader, NoLinks, "n1", metrics,
                  Broken.under(tmp_path, hw=False))
    metrics.agent = agent
    agent.readings = object()  # type: ignore[assignment]  # stale readings are dropped
    for _ in range(2):
        assert agent.reconcile().api_ok
        assert agent.measure() is None
    text = metrics_text(metrics)
    assert "elastore_interference_probe_errors_total 2.0" in text
    assert "elastore_interference_index{" not in text
    assert "elastore_interference_node_index{" not in text


def test_window_flag_parses_durations() -> None:
    import click

    opt = click.Option(["--interference-window"])
    assert _seconds(None, opt, "15s") == 15.0  # type: ignore[arg-type]
    assert _seconds(None, opt, "15") == 15.0  # type: ignore[arg-type]
    assert _seconds(None, opt, "500ms") == 0.5  # type: ignore[arg-type]
    assert _seconds(None, opt, "1m") == 60.0  # type: ignore[arg-type]
    for bad in ("0s", "-1s", "fifteen", "15h"):
        with pytest.raises(click.BadParameter):
            _seconds(None, opt, bad)  # type: ignore[arg-type]


# -- the real kernel: a pod cgroup under a competitor ----------------------------------------
def _busy(cpu: int) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(p.pid, {cpu})
    return p


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()


@pytest.fixture
def pod_cgroup() -> Iterator[tuple[Path, str]]:
    """A kubelet-like pod directory (``.../kubepods/besteffort/pod<uid>``) in the real
    cgroup v2 tree, under a parent of this test's own; removed after."""
    v2 = CgroupLayout.detect(Path("/sys/fs/cgroup")).v2
    if v2 is None:
        pytest.fail("no cgroup v2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified)")
    uid = str(uuid.uuid4())
    top = v2 / f"elastore-probe-test-{os.getpid()}"
    d = top / "kubepods" / "besteffort" / f"pod{uid}"
    try:
        d.mkdir(parents=True)
    except OSError as exc:
        pytest.fail(f"cannot create a cgroup under {v2}: {exc}")
    try:
        yield d, uid
    finally:
        for x in (d, d.parent, d.parent.parent, top):
            for _ in range(50):
                try:
                    x.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@pytest.mark.lab
def test_a_competitor_on_the_pods_cpu_raises_its_index_and_it_falls_back(
        pod_cgroup: tuple[Path, str], figure: FigureBook) -> None:
    """A busy process in the pod cgroup, alone, then beside a competitor pinned to its CPU
    at nice -10, then alone again. Asserted: every reading is the pod's own (scope ``pod``,
    its CPU pressure in the index), the process is in the pod's cgroup, the competitor runs
    at the priority it was given and is gone after. How far the pod's ``cpu_full`` and its
    index rise beside the competitor and fall back after are figures: the suite's other
    processes on the same CPU move them (docs/agent.md: 0.445 alone on the shared machine)."""
    d, uid = pod_cgroup
    cpu = max(os.sched_getaffinity(0))
    ref = PodRef("shop", "cass-0", uid)
    probe = Probe(window_s=0.1, hw=False)

    def measure(seconds: float = 3.0) -> tuple[float, float]:
        a = probe.snapshot([ref])
        time.sleep(seconds)
        r = readings_between(a, probe.snapshot([ref]), [ref]).pods[ref.key]
        assert r.scope == "pod" and r.index is not None, r
        assert f"cpu_{CPU_TERM}" in r.used and 0.0 <= r.index <= 1.0, r
        return r.components["cpu_full"], r.index

    store = _busy(cpu)
    competitor: subprocess.Popen[bytes] | None = None
    try:
        (d / "cgroup.procs").write_text(str(store.pid))
        assert (d / "cgroup.procs").read_text().split() == [str(store.pid)]
        alone, alone_idx = measure()
        competitor = _busy(cpu)  # outside the pod, on its CPU, favoured 10:1 by the
        os.setpriority(os.PRIO_PROCESS, competitor.pid, -10)  # scheduler
        assert os.getpriority(os.PRIO_PROCESS, competitor.pid) == -10
        assert os.sched_getaffinity(competitor.pid) == {cpu}
        shared, shared_idx = measure()
        _stop(competitor)
        assert competitor.poll() is not None
        after, after_idx = measure()
    finally:
        if competitor is not None:
            _stop(competitor)
        _stop(store)
    print(f"cpu_full alone {alone:.3f}, with a competitor {shared:.3f}, after {after:.3f};"
          f" index {alone_idx:.3f} / {shared_idx:.3f} / {after_idx:.3f}")
    figure("cpu_full_shared", shared, ">=", 0.6,
           "the pod's cpu_full beside a nice -10 competitor on its CPU",
           source="was assert shared > 0.6")
    figure("cpu_full_rise", shared - alone, ">=", 0.25,
           "the pod's cpu_full beside the competitor less alone",
           source="was assert shared > alone + 0.25")
    figure("index_rise", shared_idx - alone_idx, ">=", 0.25,
           "the pod's index beside the competitor less alone",
           source="was assert shared_idx > alone_idx + 0.25")
    figure("cpu_full_fall", shared - after, ">=", 0.25,
           "the pod's cpu_full beside the competitor less once it is gone",
           source="was assert after < shared - 0.25")
    figure("index_fall", shared_idx - after_idx, ">=", 0.25,
           "the pod's index beside the competitor less once it is gone",
           source="was assert after_idx < shared_idx - 0.25")
