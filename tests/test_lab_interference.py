"""The lab's co-runners and the interference profile's arithmetic.

Pure: the sweep plan, the rank correlation, the summary (slowdown against the baselines at
the same load). Lab (real cgroups and stress-ng): each co-runner kind runs pinned to the
CPU a store stand-in runs on, the probe reads the stand-in's own cgroup, and the co-runner
leaves no process behind; how far the index rises beside it and falls back after it is a
figure (tests/figures.py), judged in ``make lab-check``. A CPU limit holds a busy loop to no
more than its cores.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from figures import FigureBook

from elastore.errors import ElastoreError
from elastore.lab.cassandra.interference import (
    BASELINE,
    NodeProbe,
    cpu_per_request,
    plan,
    spearman,
    summarize,
)

if TYPE_CHECKING:
    from elastore.lab.corunners import CoRunner


def test_plan_brackets_every_kind_with_baselines_at_each_load() -> None:
    pts = plan([300, 600], ["cpu", "disk"], [2, 1])
    assert [p.index for p in pts] == list(range(len(pts)))
    first = [(p.kind, p.level) for p in pts if p.cluster_rps == 300]
    assert first == [(BASELINE, 0), ("cpu", 1), ("cpu", 2), (BASELINE, 0), ("disk", 1),
                     ("disk", 2), (BASELINE, 0)]
    assert len(pts) == 14
    sweep = plan([100, 200, 300], [], [])  # no kinds: a load sweep, the index measured
    assert [(p.cluster_rps, p.kind) for p in sweep] == [(100, BASELINE), (200, BASELINE),
                                                        (300, BASELINE)]


@pytest.mark.parametrize("args, msg", [
    (([0], ["cpu"], [1]), "loads"),
    (([100], ["gpu"], [1]), "unknown co-runner"),
    (([100], ["cpu"], [0]), "levels"),
    (([math.nan], ["cpu"], [1]), "loads"),
])
def test_plan_refuses_bad_input(args: tuple, msg: str) -> None:
    with pytest.raises(ElastoreError, match=msg):
        plan(*args)


def test_spearman_ranks_ties_and_refuses_too_little() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # one swap among 5: 1 - 6*2/(5*24) = 0.9
    assert spearman([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.9)
    assert math.isnan(spearman([1, 2], [1, 2]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert spearman([1, 2, math.nan, 3], [1, 2, 5, 3]) == pytest.approx(1.0)  # NaN dropped


def _row(point: int, load: float, kind: str, level: int, index: float, p95: float
         ) -> dict[str, str]:
    return {"point": str(point), "cluster_rps": str(load), "kind": kind, "level": str(level),
            "interference": str(index), "point_p95_ms": str(p95)}


def test_summary_measures_slowdown_against_the_same_loads_baselines() -> None:
    rows = [_row(0, 300, BASELINE, 0, 0.2, 10), _row(1, 300, "cpu", 1, 0.5, 20),
            _row(1, 300, "cpu", 1, 0.5, 20),  # a second window of the same point
            _row(2, 300, "cpu", 2, 0.7, 40), _row(3, 300, BASELINE, 0, 0.25, 14),
            _row(4, 600, BASELINE, 0, 0.3, 30), _row(5, 600, "cpu", 1, 0.6, 45),
            _row(6, 600, BASELINE, 0, 0.3, 30)]
    s = summarize(rows)
    assert s["baseline_p95_ms"] == {"300.0": 12.0, "600.0": 30.0}
    slow = {p["point"]: p["slowdown"] for p in s["points"]}
    assert slow[1] == pytest.approx(20 / 12) and slow[2] == pytest.approx(40 / 12)
    assert slow[5] == pytest.approx(45 / 30)
    # index order 0.5, 0.6, 0.7 against slowdown order 1.67, 1.5, 3.33: one swap in three
    assert s["index_slowdown_spearman"] == pytest.approx(0.5)
    assert s["kinds"]["cpu"]["levels"] == [1, 2, 1]
    assert math.isnan(s["index_slowdown_spearman_p50"])  # no medians recorded: unknown
    for r, p50 in zip(rows, (5, 6, 6, 9, 5, 10, 12, 10), strict=True):
        r["point_p50_ms"] = str(p50)
    s = summarize(rows)
    slow50 = {p["point"]: p["slowdown_p50"] for p in s["points"]}
    assert slow50[2] == pytest.approx(9 / 5) and slow50[5] == pytest.approx(12 / 10)
    # index 0.5, 0.6, 0.7 against 1.2, 1.2, 1.8 (a tie): 0.866
    assert s["index_slowdown_spearman_p50"] == pytest.approx(0.8660254)



def test_cpu_per_request_counts_every_window_and_never_reads_unknown_as_zero() -> None:
    # 3 windows of 5 s at 100, 200, 300 req/s: 3000 requests; 6 CPU-s over 20 s of probing
    ws = [{"achieved_rps": "100"}, {"achieved_rps": "200"}, {"achieved_rps": "300"}]
    cores, per = cpu_per_request(6.0, 20.0, ws, 5.0)
    assert cores == pytest.approx(0.3) and per == pytest.approx(2.0)
    assert all(math.isnan(v) for v in cpu_per_request(math.nan, 20.0, ws, 5.0))
    assert all(math.isnan(v) for v in cpu_per_request(6.0, 20.0, [{"achieved_rps": ""}], 5.0))
    assert math.isnan(cpu_per_request(6.0, 20.0, [{"achieved_rps": "0"}], 5.0)[1])
    snap = (0.0, [], None, 10.0)
    assert NodeProbe.cpu_seconds(snap, (1.0, [], None, 12.5)) == pytest.approx(2.5)
    assert math.isnan(NodeProbe.cpu_seconds(snap, (1.0, [], None, None)))
    assert math.isnan(NodeProbe.cpu_seconds(snap, (1.0, [], None, 9.0)))  # went backwards


def test_summary_gives_each_kinds_cpu_per_request_against_the_store_alone() -> None:
    rows = [_row(0, 300, BASELINE, 0, 0.2, 10), _row(1, 300, "stream", 1, 0.5, 20),
            _row(2, 300, "stream", 2, 0.7, 40), _row(3, 300, BASELINE, 0, 0.25, 14)]
    for r, cpu in zip(rows, ("2.0", "2.6", "3.3", "2.2"), strict=True):
        r["point_cpu_ms_per_request"] = cpu
    rows.append(_row(4, 300, "cache", 1, 0.5, 20))
    rows.append(_row(5, 300, BASELINE, 0, 0.2, 10))
    for r, cpu in zip(rows[4:], ("1.8", "1.6"), strict=True):
        r["point_cpu_ms_per_request"] = cpu
    s = summarize(rows)
    assert s["baseline_cpu_ms_per_request"] == {"300.0": 2.0}  # the median alone
    # each kind against the baselines that bracket it (the store alone drifts)
    assert s["kinds"]["stream"]["cpu_ratio"] == [pytest.approx(2.6 / 2.1, abs=1e-3),
                                                 pytest.approx(3.3 / 2.1, abs=1e-3)]
    assert s["kinds"]["cache"]["cpu_ratio"] == [pytest.approx(1.8 / 1.9, abs=1e-3)]
    # an older sweep without the column: unknown, not zero
    for r in rows:
        del r["point_cpu_ms_per_request"]
    s = summarize(rows)
    assert s["baseline_cpu_ms_per_request"] == {"300.0": None}
    assert s["kinds"]["stream"]["cpu_ratio"] == [None, None]
    assert s["kinds"]["cache"]["cpu_ratio"] == [None]


STANDIN = """
import time
end = time.monotonic() + {secs}
x = 0
while time.monotonic() < end:   # a busy server: 16 ms of work, 4 ms idle (0.8 of a CPU)
    t = time.monotonic()
    while time.monotonic() - t < 0.016:
        x += 1
    time.sleep(0.004)
"""


#: workers per kind: 2, and 4 disk writers. A disk writer interferes with this stand-in
#: (no I/O of its own) only by the CPU it takes between its fsyncs, and on this VM's disk it
#: blocks in them often: two writers raised the index 0.11-0.19 in ten runs (0.26 once),
#: four 0.26-0.31 in five, where two of any other kind raise it 0.40-0.44. A stand-in that
#: appended and fsync'd 64 KiB every 100 ms (a commit log) showed io_full 0.01-0.03 under
#: the writers: here they do not stall another group's I/O, so the I/O term cannot carry
#: the kind either.
LEVELS = {"disk": 4}
#: how far each kind lifts the index above the uncontended level, and how far it falls
#: back once the co-runner is stopped (figures: two busy cores move both)
RISE = 0.15


def _affinities(pids: list[int]) -> set[frozenset[int]]:
    """The CPU sets of those of ``pids`` still running."""
    out = set()
    for pid in pids:
        try:
            out.add(frozenset(os.sched_getaffinity(pid)))
        except OSError:  # a worker that ended between the two reads
            continue
    return out


#: how long stress-ng may take to start and pin itself on a loaded machine, seconds
PIN_S = 30.0


def pinned(runner: CoRunner, cpu: int) -> tuple[list[int], set[frozenset[int]]]:
    """The co-runner's group's processes and their CPU sets, once its stress-ng is in the
    group and every process there is pinned to ``cpu`` (or :data:`PIN_S` has passed: the
    caller's assertion then tells what was seen)."""
    end = time.monotonic() + PIN_S
    while True:
        pids = runner.group.pids()
        cpus = _affinities(pids)
        if (runner.proc is not None and runner.proc.pid in pids
                and cpus == {frozenset({cpu})}) or time.monotonic() > end:
            return pids, cpus
        time.sleep(0.1)


@pytest.mark.lab
def test_the_index_rises_under_each_co_runner_kind_and_falls_back(figure: FigureBook) -> None:
    """Each kind in turn beside the stand-in, an uncontended window between two kinds (the
    "after" of one is the "before" of the next). Asserted: the index is the stand-in's own
    cgroup's, with its CPU pressure in it, in every window; each co-runner's workers run in
    their own group, pinned to the stand-in's CPU, and none outlives its block. The rise and
    the fall of the index are figures: under contention from the suite's other processes on
    the same CPU they are what a busy CI machine moves (CI read a "before" of 0.29 where the
    other kinds read 0.07-0.20)."""
    import shutil

    from elastore.hubbub.probe import combine, group_components, read_group
    from elastore.lab import cgroups
    from elastore.lab.corunners import KINDS, CoRunner

    if shutil.which("stress-ng") is None:
        pytest.fail("stress-ng is not installed ('make lab-deps' installs it from Debian)")
    if cgroups.v2_root() is None:
        pytest.fail("no cgroup v2 hierarchy: the probe and the co-runners need it")
    cpu = max(os.sched_getaffinity(0))
    store = cgroups.Group(f"{cgroups.LAB_GROUP}-test/store-{os.getpid()}").create()
    v2 = store.v2()
    assert v2 is not None
    proc = subprocess.Popen([sys.executable, "-c", STANDIN.format(secs=300)],
                            preexec_fn=lambda: (store.add(os.getpid(), cpu=False),
                                                os.sched_setaffinity(0, {cpu})))

    def index_over(secs: float) -> float:
        assert store.pids() == [proc.pid]  # the group read is the stand-in's, and only its
        a, t0 = read_group(v2, None), time.monotonic()
        time.sleep(secs)
        b, t1 = read_group(v2, None), time.monotonic()
        i, used = combine(group_components(a, b, t1 - t0), "pod")
        assert i is not None and "cpu_full" in used
        assert 0.0 <= i <= 1.0
        return i

    seen: dict[str, tuple[float, float, float]] = {}
    ran: dict[str, tuple[list[int], set[frozenset[int]]]] = {}
    left: dict[str, tuple[list[int], bool]] = {}
    try:
        time.sleep(1)
        before = index_over(3)
        for kind in KINDS:
            with CoRunner(kind, LEVELS.get(kind, 2), [cpu]) as runner:
                ran[kind] = pinned(runner, cpu)
                time.sleep(1)
                during = index_over(4)
            gone = runner.group.v2()
            left[kind] = (runner.group.pids(), gone is not None and gone.exists())
            after = index_over(3)
            seen[kind] = (before, during, after)
            before = after
    finally:
        proc.kill()
        proc.wait()
        store.remove()
        cgroups.remove_tree(f"{cgroups.LAB_GROUP}-test")
    msg = "; ".join(f"{k}: {b:.2f} -> {d:.2f} -> {a:.2f}" for k, (b, d, a) in seen.items())
    print(f"the index before, during and after each co-runner: {msg}")
    assert list(seen) == list(KINDS)
    for kind, (pids, cpus) in ran.items():
        # stress-ng and its workers, in the co-runner's group, on the stand-in's CPU only
        assert cpus == {frozenset({cpu})}, (kind, pids, cpus)
    for kind, (pids, exists) in left.items():
        assert not pids and not exists, f"{kind}'s co-runner outlived its block: {pids}"
    for kind, (b, d, a) in seen.items():
        figure(f"{kind}_rise", d - min(b, a), ">=", RISE,
               f"the index beside {kind} over the lower uncontended window around it",
               source=f"was assert d > min(b, a) + {RISE} ({msg})")
        figure(f"{kind}_fall", d - a, ">=", RISE,
               f"the index's fall once {kind} stops",
               source=f"was assert a < d - {RISE}")


def test_the_four_phases_vary_load_and_interference_as_the_reference_text_does() -> None:
    from elastore.lab.hubbub import schedule

    steps = schedule(phase_s=240, period_s=30, low_rps=200, high_rps=600, max_level=4)
    assert len(steps) == 32 and [s.t_s for s in steps[:3]] == [0, 30, 60]
    by = {p: [s for s in steps if s.phase == p] for p in (1, 2, 3, 4)}
    p1, p2, p3, p4 = (by[p] for p in (1, 2, 3, 4))
    assert all(s.level == 0 for s in p1)  # 1: load up and down, no interference
    assert max(s.load_rps for s in p1) > 500 and min(s.load_rps for s in p1) < 300
    assert [s.load_rps for s in p1] == [s.load_rps for s in reversed(p1)]
    assert {s.load_rps for s in p2} == {400.0}  # 2: constant load, interference up and down
    assert [s.level for s in p2] == [1, 2, 3, 4, 4, 3, 2, 1]
    assert {s.level for s in p3} == {2} and len({s.load_rps for s in p3}) > 2  # 3
    assert len({s.level for s in p4}) > 2 and len({s.load_rps for s in p4}) > 2  # 4: both


def test_schedule_refuses_nonsense() -> None:
    from elastore.lab.hubbub import schedule

    with pytest.raises(ElastoreError):
        schedule(60, 120, 100, 200, 4)
    with pytest.raises(ElastoreError):
        schedule(600, 30, 300, 200, 4)
    with pytest.raises(ElastoreError):
        schedule(600, 30, 100, 200, 0)


def test_cpu_sizing_divides_the_target_by_the_slowdown_factor() -> None:
    from elastore.lab.hubbub import cpu_replicas

    # 0.6 cores of store CPU, 0.3 per node, target 0.7: 0.6 / 0.21 = 2.86 -> 3 nodes
    assert cpu_replicas(0.6, 0.3, 0.7, 1.0, 2, 6) == 3
    # the same CPU under a neighbour that slows the store 1.5x: 4.29 -> 5 nodes
    assert cpu_replicas(0.6, 0.3, 0.7, 1.5, 2, 6) == 5
    assert cpu_replicas(0.0, 0.3, 0.7, 1.0, 2, 6) == 2  # clamped to min
    assert cpu_replicas(5.0, 0.3, 0.7, 1.0, 2, 6) == 6  # and to max
    assert cpu_replicas(0.42, 0.3, 0.7, 1.0, 1, 6) == 2  # exactly 2: no float round-up
    with pytest.raises(ElastoreError):
        cpu_replicas(math.nan, 0.3, 0.7, 1.0, 2, 6)
    with pytest.raises(ElastoreError):
        cpu_replicas(0.5, 0.3, 0.7, 0.5, 2, 6)


def test_a_cpu_limit_refuses_a_period_outside_the_kernels_bounds() -> None:
    from elastore.errors import ElastoreError
    from elastore.lab import cgroups

    g = cgroups.Group(f"{cgroups.LAB_GROUP}-test/never-created")
    for bad in (999, 1_000_001):
        with pytest.raises(ElastoreError, match=r"CFS period must be 1\.\.1000 ms"):
            g.limit_cpu(0.3, bad)


@pytest.mark.lab
@pytest.mark.concurrent  # the limit read back, and a one-sided bound: nothing is timed
def test_a_cpu_limit_with_a_short_cfs_period_holds_a_busy_process_to_its_cores(
        figure: FigureBook) -> None:
    """``lab up --cfs-period-ms 10``: the limit is written with that period (v2 cpu.max or
    v1 cpu.cfs_period_us/cfs_quota_us) and a busy loop in the group gets no more than its
    0.3 core (with slack: a machine busy elsewhere only gives it less; how close it comes
    to 0.3 is a figure)."""
    from elastore.lab import cgroups

    if cgroups.v2_root() is None:
        pytest.fail("no cgroup v2 hierarchy: the lab's CPU limits need it")
    g = cgroups.Group(f"{cgroups.LAB_GROUP}-test/limit-{os.getpid()}").create(0.3,
                                                                            period_us=10_000)
    v2, v1 = g.v2(), g.v1_cpu()
    assert v2 is not None
    if (v2 / "cpu.max").exists():
        assert (v2 / "cpu.max").read_text().split() == ["3000", "10000"]
    else:
        assert v1 is not None, "no cpu controller in v2 or v1"
        assert int((v1 / "cpu.cfs_period_us").read_text()) == 10_000
        assert int((v1 / "cpu.cfs_quota_us").read_text()) == 3_000
    cpu = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=lambda: (g.add(os.getpid()),
                                                os.sched_setaffinity(0, {cpu})))
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        f = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick

    try:
        time.sleep(0.5)
        assert proc.pid in g.pids()
        # the clock read before the first CPU reading and after the second: the longest
        # interval they can span, so a descheduled test only lowers ``used``
        t0 = time.monotonic()
        a = cpu_s()
        time.sleep(3)
        b = cpu_s()
        used = (b - a) / (time.monotonic() - t0)
    finally:
        proc.kill()
        proc.wait()
        g.remove()
        cgroups.remove_tree(f"{cgroups.LAB_GROUP}-test")
    assert used <= 0.4, f"a busy loop limited to 0.3 core used {used:.2f} core"
    figure("limited_cores", used, ">=", 0.2, "CPU a busy loop limited to 0.3 core used, cores",
           source="was assert 0.2 <= used <= 0.4")
