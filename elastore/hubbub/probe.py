"""The interference probe (Hubbub-scale): a *measured* index per node and per store pod of
how much of the store's wall time is lost to contention with its neighbours.

**What the index means.** The expected slowdown of the store at the same load: the fraction
of its wall time lost to contention, so that latency at equal load is about
``1 / (1 - index)`` times the uncontended latency. It is built from the kernel's own stall
accounting, read every agent period as cumulative counters (nothing is sampled, nothing is
averaged by the kernel for us):

- PSI (pressure stall information, Linux >= 4.20): ``/proc/pressure/{cpu,memory,io}`` for
  the node and ``{cpu,memory,io}.pressure`` in each pod's cgroup v2 directory. Only the
  cumulative ``total=`` microsecond counters are used, never the kernel's ``avg*`` fields.
  ``some``: at least one task of the group was stalled on the resource; ``full``: all its
  non-idle tasks were (it made no progress at all). System-wide ``cpu full`` is not
  defined (the kernel prints 0) and is left out.
- CPU steal from ``/proc/stat`` (a VM's vCPU waiting for the hypervisor): field 8 of the
  ``cpu`` line over the sum of fields 1-8.
- CPU throttling from the pod's ``cpu.stat`` (v2 ``throttled_usec``, v1 ``throttled_time``
  in ns): exported, **not** in the index: it is the pod's own CPU limit, not a neighbour.
  Note that a throttled pod's runnable tasks also count as CPU pressure in its cgroup, so a
  pod at its limit shows ``cpu_some``/``cpu_full`` as well: read ``throttled`` beside them.
- Hardware counters (:mod:`.perf`), node-wide, when the machine exposes a PMU: instructions
  per cycle against a slowly tracked reference (the 90th percentile of the probe's
  per-period IPC over the last hour), ``hw = max(0, 1 - ipc / reference)``; LLC misses per
  kilo-instruction are exported beside it.

Every component is a fraction of wall time in [0, 1] over the window (default 15 s: between
the newest snapshot and the newest one at least a window older). :func:`combine` is the one
place where they become the index; a signal that could not be read is *unavailable*: left
out of the index and absent from ``used`` (never read as 0), and with no signal at all the
index is unknown (None).
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from elastore.agent.perf import HwCounters, HwTotals

log = logging.getLogger("elastore.hubbub.probe")

Scope = Literal["pod", "node"]

#: every component the probe may report (a reading holds the available ones)
SIGNALS = ("cpu_some", "cpu_full", "memory_some", "memory_full", "io_some", "io_full",
           "throttled", "steal", "hw")
#: the CPU term of a pod's index: ``full`` (no thread of the pod could run while one
#: wanted to) or ``some`` (at least one waited). The lab's measurements decide; change it
#: here only.
CPU_TERM: Literal["some", "full"] = "full"
#: the node's CPU term: system-wide ``cpu full`` does not exist, so ``some``
NODE_CPU_TERM: Literal["some"] = "some"
#: the factors of the index, per scope (see :func:`combine`)
INDEX_TERMS: dict[Scope, tuple[str, ...]] = {
    "pod": (f"cpu_{CPU_TERM}", "memory_full", "io_full", "steal", "hw"),
    "node": (f"cpu_{NODE_CPU_TERM}", "memory_full", "io_full", "steal", "hw"),
}

DEFAULT_WINDOW_S = 15.0
#: the IPC reference: this quantile of the per-period IPC over the last ``REF_HORIZON_S``,
#: used once at least ``REF_MIN_INTERVALS`` periods are in it (5 minutes at 5 s)
REF_QUANTILE = 0.9
REF_HORIZON_S = 3600.0
REF_MIN_INTERVALS = 60
#: an interval with fewer cycles than this per second (an idle node) has no meaningful IPC
MIN_CYCLES_PER_S = 1e6
#: how deep below the cgroup root a pod's directory is looked for
MAX_DEPTH = 5
#: at most one walk of the cgroup trees per this many seconds for pods not found (a pod the
#: probe has not looked for yet triggers one at once)
RESCAN_S = 30.0


def combine(components: Mapping[str, float], scope: Scope = "pod"
            ) -> tuple[float | None, tuple[str, ...]]:
    """THE index: the expected slowdown of the store at the same load, i.e. the fraction of
    its wall time lost to contention (latency at equal load ~ ``1 / (1 - index)``).

    The stalls are treated as independent losses of wall time, so the time left is the
    product of what each leaves::

        pod:  index = 1 - (1 - cpu)(1 - memory_full)(1 - io_full)(1 - steal)(1 - hw),
              cpu = max(0, cpu_<CPU_TERM> - throttled)
        node: index = 1 - (1 - cpu_some)(1 - memory_full)(1 - io_full)(1 - steal)(1 - hw)

    ``throttled`` is never a term of its own (the pod's own CPU limit, not a neighbour): a
    throttled cgroup's runnable tasks count as stalled in its cpu pressure, so the pod's CPU
    term is its cpu pressure *less* the time it was throttled (measured on the lab, 3 nodes
    at 0.3 core each and 600 requests/s: cpu_full 0.36 of which 0.10 throttled, alone;
    0.72-0.76 with a co-runner on their CPU, throttled then ~0). Nor are the ``some`` terms
    of memory and io (a task waiting while others of the store progress).
    A term absent from ``components`` (unavailable) is left out, and ``used`` lists the
    terms that went in; with none the index is unknown (None), never 0."""
    left, used = 1.0, []
    for name in INDEX_TERMS[scope]:
        v = components.get(name)
        if v is None or not math.isfinite(v):
            continue
        if scope == "pod" and name.startswith("cpu_"):
            thr = components.get("throttled")
            if thr is not None and math.isfinite(thr):
                v = v - min(1.0, max(0.0, thr))
        left *= 1.0 - min(1.0, max(0.0, v))
        used.append(name)
    if not used:
        return None, ()
    return min(1.0, max(0.0, 1.0 - left)), tuple(used)


# -- parsing: pure, text in ---------------------------------------------------------------
@dataclass(frozen=True)
class Psi:
    """A PSI file's cumulative stall times, µs (None: the line is absent, e.g. ``full`` in
    a cpu file before Linux 5.13)."""

    some_us: int | None
    full_us: int | None


def parse_psi(text: str) -> Psi:
    """``some avg10=.. avg60=.. avg300=.. total=<µs>`` / ``full ...`` -> the totals."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind not in ("some", "full"):
            continue
        for item in rest.split():
            key, _, val = item.partition("=")
            if key == "total":
                totals[kind] = int(val)
    if not totals:
        raise ValueError("no 'some' or 'full' line with a total= counter")
    return Psi(totals.get("some"), totals.get("full"))


@dataclass(frozen=True)
class CpuJiffies:
    """``/proc/stat``'s first ``cpu`` line: all time (user..steal) and steal, in clock
    ticks; ``steal`` None when the line has no 8th field (a kernel before 2.6.11)."""

    total: int
    steal: int | None


def parse_proc_stat(text: str) -> CpuJiffies:
    """The aggregate ``cpu`` line: user nice system idle iowait irq softirq steal guest
    guest_nice. The total is fields 1-8 (guest time is already inside user and nice)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            vals = [int(v) for v in parts[1:9]]
            if len(vals) < 4:
                raise ValueError(f"/proc/stat's cpu line has {len(vals)} fields")
            return CpuJiffies(sum(vals), vals[7] if len(vals) >= 8 else None)
    raise ValueError("no aggregate 'cpu' line")


@dataclass(frozen=True)
class CpuStat:
    """A cgroup's ``cpu.stat``: throttling (µs, from v2's ``throttled_usec`` or v1's
    ``throttled_time`` ns) and usage; None where the file has no such key (v2 without the
    cpu controller has only the usage)."""

    nr_periods: int | None
    nr_throttled: int | None
    throttled_us: float | None
    usage_us: int | None


def parse_cpu_stat(text: str) -> CpuStat:
    kv: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            kv[parts[0]] = int(parts[1])
    if "throttled_usec" in kv:
        throttled: float | None = float(kv["throttled_usec"])
    elif "throttled_time" in kv:
        throttled = kv["throttled_time"] / 1000.0
    else:
        throttled = None
    return CpuStat(kv.get("nr_periods"), kv.get("nr_throttled"), throttled,
                   kv.get("usage_usec"))


# -- snapshots and the components between two ----------------------------------------------
@dataclass(frozen=True)
class GroupCounters:
    """One group's cumulative counters (None: unreadable)."""

    cpu: Psi | None = None
    memory: Psi | None = None
    io: Psi | None = None
    cpu_stat: CpuStat | None = None


@dataclass(frozen=True)
class Snapshot:
    """All counters at monotonic time ``t_s``: the node's PSI, ``/proc/stat``'s jiffies,
    each found pod cgroup's counters (by pod UID) and the hardware totals."""

    t_s: float
    node: GroupCounters
    jiffies: CpuJiffies | None
    pods: dict[str, GroupCounters] = field(default_factory=dict)
    hw: HwTotals | None = None


def fraction(delta: float | None, dt: float) -> float | None:
    """``delta / dt`` clamped to [0, 1]; None when unknown or a counter went backwards."""
    if delta is None or dt <= 0 or delta < 0:
        return None
    return min(1.0, delta / dt)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def group_components(a: GroupCounters, b: GroupCounters, dt_s: float, *, node: bool = False
                     ) -> dict[str, float]:
    """The stall fractions of one group between two snapshots ``dt_s`` apart: PSI
    ``{cpu,memory,io}_{some,full}`` and ``throttled``; only the available ones. On the
    node (``node``) ``cpu_full`` is left out: system-wide it is not defined."""
    dt_us = dt_s * 1e6
    out: dict[str, float] = {}
    for res in ("cpu", "memory", "io"):
        pa, pb = getattr(a, res), getattr(b, res)
        if pa is None or pb is None:
            continue
        for kind in ("some", "full"):
            if node and res == "cpu" and kind == "full":
                continue
            v = fraction(_delta(getattr(pa, f"{kind}_us"), getattr(pb, f"{kind}_us")), dt_us)
            if v is not None:
                out[f"{res}_{kind}"] = v
    if a.cpu_stat is not None and b.cpu_stat is not None:
        v = fraction(_delta(a.cpu_stat.throttled_us, b.cpu_stat.throttled_us), dt_us)
        if v is not None:
            out["throttled"] = v
    return out


def steal_fraction(a: CpuJiffies | None, b: CpuJiffies | None) -> float | None:
    """Δsteal / Δall ticks (all CPUs), or None when steal is not reported."""
    if a is None or b is None or a.steal is None or b.steal is None:
        return None
    total = b.total - a.total
    return fraction(b.steal - a.steal, total) if total > 0 else None


@dataclass(frozen=True)
class HwRates:
    ipc: float
    llc_mpki: float | None


def hw_rates(a: HwTotals | None, b: HwTotals | None, dt_s: float) -> HwRates | None:
    """Instructions per cycle and LLC misses per 1000 instructions between two reads;
    None when unavailable or the node was too idle for an IPC to mean anything."""
    if a is None or b is None or dt_s <= 0:
        return None
    d = {k: b.counts.get(k, 0.0) - a.counts.get(k, 0.0) for k in b.counts}
    cycles, instr = d.get("cycles", 0.0), d.get("instructions", 0.0)
    if cycles < MIN_CYCLES_PER_S * dt_s or instr <= 0:
        return None
    misses = d.get("llc_misses")
    return HwRates(instr / cycles, None if misses is None or misses < 0
                   else misses / (instr / 1000.0))


def hw_component(ipc: float | None, reference: float | None) -> float | None:
    """``max(0, 1 - ipc / reference)``: the share of the node's usual instruction
    throughput lost (cache and memory-bandwidth contention shows as a lower IPC)."""
    if ipc is None or reference is None or reference <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - ipc / reference))


class IpcReference:
    """The IPC a node reaches without contention, tracked slowly: the ``quantile`` of the
    per-period IPCs of the last ``horizon_s``, once ``min_intervals`` are in."""

    def __init__(self, quantile: float = REF_QUANTILE, horizon_s: float = REF_HORIZON_S,
                 min_intervals: int = REF_MIN_INTERVALS) -> None:
        self.quantile, self.horizon_s, self.min_intervals = quantile, horizon_s, min_intervals
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t_s: float, ipc: float) -> None:
        self.samples.append((t_s, ipc))
        while self.samples and self.samples[0][0] < t_s - self.horizon_s:
            self.samples.popleft()

    def value(self) -> float | None:
        if len(self.samples) < self.min_intervals:
            return None
        return float(np.quantile([v for _, v in self.samples], self.quantile))


# -- pods and their cgroups ----------------------------------------------------------------
@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


_UUID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
#: cgroupfs driver ``pod<uid>``; systemd driver ``kubepods-<qos>-pod<uid with _>.slice``
_POD_DIR = re.compile(rf"^(?:pod|.*-pod)({_UUID})(?:\.slice)?$")


def pod_dir_uid(name: str) -> str | None:
    """The pod UID a kubelet cgroup directory's name carries, normalized (lower case,
    dashes), or None."""
    m = _POD_DIR.match(name)
    return m.group(1).replace("_", "-").lower() if m else None


def find_pod_dirs(root: Path, max_depth: int = MAX_DEPTH) -> dict[str, Path]:
    """Every pod directory (:func:`pod_dir_uid`) at most ``max_depth`` levels below
    ``root``, by UID; a pod directory's own subtree (its containers) is not entered."""
    found: dict[str, Path] = {}
    level = [str(root)]
    for _ in range(max_depth):
        nxt: list[str] = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    for e in it:
                        if not e.is_dir(follow_symlinks=False):
                            continue
                        uid = pod_dir_uid(e.name)
                        if uid is not None:
                            found.setdefault(uid, Path(e.path))
                        else:
                            nxt.append(e.path)
            except OSError:
                continue
        level = nxt
    return found


@dataclass(frozen=True)
class CgroupLayout:
    """Where the v2 hierarchy is (PSI) and the v1 ``cpu`` one (throttling, when v2 has no
    cpu controller): pure v2 at the root, hybrid with v2 at ``unified/``, or v1 only."""

    v2: Path | None
    v1_cpu: Path | None

    @staticmethod
    def detect(root: Path) -> CgroupLayout:
        if (root / "cgroup.controllers").exists():
            return CgroupLayout(root, None)
        v2 = root / "unified" if (root / "unified" / "cgroup.controllers").exists() else None
        v1 = next((root / n for n in ("cpu", "cpu,cpuacct") if (root / n / "cpu.stat")
                   .exists()), None)
        return CgroupLayout(v2, v1)


class CgroupFinder:
    """Pod UID -> its cgroup directories (v2, v1 cpu), found by walking the trees and
    cached; a cached directory that disappeared is looked for again."""

    def __init__(self, cgroup_root: Path, max_depth: int = MAX_DEPTH,
                 rescan_s: float = RESCAN_S, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.root, self.max_depth, self.rescan_s, self.clock = (cgroup_root, max_depth,
                                                                rescan_s, clock)
        self.layout = CgroupLayout.detect(cgroup_root)
        self.v2: dict[str, Path] = {}
        self.v1: dict[str, Path] = {}
        self.unfound: set[str] = set()  # looked for by the last walks, not found
        self.last_scan: float | None = None
        self.scans = 0

    def scan(self) -> None:
        self.layout = CgroupLayout.detect(self.root)
        self.v2 = find_pod_dirs(self.layout.v2, self.max_depth) if self.layout.v2 else {}
        self.v1 = (find_pod_dirs(self.layout.v1_cpu, self.max_depth)
                   if self.layout.v1_cpu else {})
        self.last_scan = self.clock()
        self.scans += 1

    def dirs(self, uids: Iterable[str]) -> dict[str, tuple[Path | None, Path | None]]:
        """The (v2, v1 cpu) directories of each UID found (UIDs not found are absent)."""
        want = {u.lower() for u in uids if u}
        for cache in (self.v2, self.v1):
            for u in [u for u in want if u in cache and not cache[u].is_dir()]:
                del cache[u]
        missing = {u for u in want if u not in self.v2 and u not in self.v1}
        # a UID the last walk did not look for (new, or its directory moved) is looked for
        # at once; one it did look for and did not find, at most every rescan_s
        if missing and (missing - self.unfound or self.last_scan is None
                        or self.clock() - self.last_scan >= self.rescan_s):
            self.scan()
            self.unfound |= {u for u in missing if u not in self.v2 and u not in self.v1}
        self.unfound &= {u for u in want if u not in self.v2 and u not in self.v1}
        return {u: (self.v2.get(u), self.v1.get(u)) for u in want
                if u in self.v2 or u in self.v1}


# -- reading the files ---------------------------------------------------------------------
def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_psi(path: Path) -> Psi | None:
    text = _read(path)
    try:
        return parse_psi(text) if text is not None else None
    except ValueError:
        return None


def read_cpu_stat(path: Path) -> CpuStat | None:
    text = _read(path)
    try:
        return parse_cpu_stat(text) if text is not None else None
    except ValueError:
        return None


def read_group(v2: Path | None, v1_cpu: Path | None) -> GroupCounters:
    """A pod cgroup's counters: PSI from its v2 directory; throttling from its v2
    ``cpu.stat`` when that has it (the cpu controller on v2), else from the v1 one."""
    cpu_stat = read_cpu_stat(v2 / "cpu.stat") if v2 is not None else None
    if (cpu_stat is None or cpu_stat.throttled_us is None) and v1_cpu is not None:
        cpu_stat = read_cpu_stat(v1_cpu / "cpu.stat") or cpu_stat
    if v2 is None:
        return GroupCounters(cpu_stat=cpu_stat)
    return GroupCounters(read_psi(v2 / "cpu.pressure"), read_psi(v2 / "memory.pressure"),
                         read_psi(v2 / "io.pressure"), cpu_stat)


# -- readings ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reading:
    """One index over the window. ``scope`` ``pod``: from the pod's own cgroup (plus the
    node's steal and hw); ``node``: the node's, with ``reason`` saying why (``NoCgroup``:
    no directory for the pod's UID; ``NoHistory``: found after the window's start;
    ``NoPodPsi``: no readable pressure file in it)."""

    scope: Scope
    components: dict[str, float]
    index: float | None
    used: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True)
class Readings:
    window_s: float
    node: Reading
    pods: dict[str, Reading]  # by namespace/name
    ipc: float | None = None
    llc_mpki: float | None = None
    ipc_reference: float | None = None


def reading(components: dict[str, float], scope: Scope, reason: str = "") -> Reading:
    index, used = combine(components, scope)
    return Reading(scope, components, index, used, reason)


def readings_between(a: Snapshot, b: Snapshot, pods: Iterable[PodRef],
                     ipc_reference: float | None = None) -> Readings:
    """The node's and each pod's reading between snapshots ``a`` (older) and ``b``."""
    dt = b.t_s - a.t_s
    node = group_components(a.node, b.node, dt, node=True)
    shared: dict[str, float] = {}
    steal = steal_fraction(a.jiffies, b.jiffies)
    if steal is not None:
        shared["steal"] = steal
    rates = hw_rates(a.hw, b.hw, dt)
    hw = hw_component(rates.ipc if rates else None, ipc_reference)
    if hw is not None:
        shared["hw"] = hw
    node_reading = reading({**node, **shared}, "node")
    out: dict[str, Reading] = {}
    for p in pods:
        uid = p.uid.lower()
        if uid not in b.pods:
            out[p.key] = reading(dict(node_reading.components), "node", "NoCgroup")
        elif uid not in a.pods:
            out[p.key] = reading(dict(node_reading.components), "node", "NoHistory")
        else:
            own = group_components(a.pods[uid], b.pods[uid], dt)
            if not any(k != "throttled" for k in own):  # the pod's throttling, still shown
                out[p.key] = reading({**node_reading.components, **own}, "node", "NoPodPsi")
            else:
                out[p.key] = reading({**own, **shared}, "pod")
    return Readings(dt, node_reading, out, rates.ipc if rates else None,
                    rates.llc_mpki if rates else None, ipc_reference)


# -- the probe -----------------------------------------------------------------------------
class Probe:
    """Takes a :class:`Snapshot` per call of :meth:`observe` (the agent's period) and
    returns the readings over the sliding window: between the newest snapshot and the
    newest one at least ``window_s`` older (None until there is one)."""

    def __init__(self, proc_root: Path = Path("/proc"),
                 cgroup_root: Path = Path("/sys/fs/cgroup"),
                 window_s: float = DEFAULT_WINDOW_S, hw: HwCounters | bool | None = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.proc_root, self.cgroup_root = proc_root, cgroup_root
        self.window_s, self.clock = window_s, clock
        self.finder = CgroupFinder(cgroup_root, clock=clock)
        self.hw: HwCounters | None
        self.hw_error: str | None = None
        if hw is True:
            self.hw = HwCounters()
        elif hw is False or hw is None:
            self.hw = None
            self.hw_error = "hardware counters off"
        else:
            self.hw = hw
        if self.hw is not None and not self.hw.available:
            self.hw_error = self.hw.error
            log.warning("hardware counters unavailable, the index goes without 'hw': %s",
                        self.hw.error)
            self.hw = None
        self.reference = IpcReference()
        self.history: deque[Snapshot] = deque()
        self.last: Readings | None = None

    @classmethod
    def under(cls, root: Path, **kw: Any) -> Probe:
        """A probe of a whole tree ``root`` (``root/proc``, ``root/sys/fs/cgroup``): a
        recorded one in tests."""
        return cls(root / "proc", root / "sys" / "fs" / "cgroup", **kw)

    def snapshot(self, pods: Iterable[PodRef], now: float | None = None) -> Snapshot:
        t = self.clock() if now is None else now
        pr = self.proc_root
        node = GroupCounters(read_psi(pr / "pressure" / "cpu"),
                             read_psi(pr / "pressure" / "memory"),
                             read_psi(pr / "pressure" / "io"))
        stat = _read(pr / "stat")
        try:
            jiffies = parse_proc_stat(stat) if stat is not None else None
        except ValueError:
            jiffies = None
        dirs = self.finder.dirs(p.uid for p in pods)
        groups = {uid: read_group(v2, v1) for uid, (v2, v1) in dirs.items()}
        hw = self.hw.read() if self.hw is not None else None
        return Snapshot(t, node, jiffies, groups, hw)

    def observe(self, pods: Iterable[PodRef], now: float | None = None) -> Readings | None:
        pods = list(pods)
        snap = self.snapshot(pods, now)
        if self.history:
            prev = self.history[-1]
            rates = hw_rates(prev.hw, snap.hw, snap.t_s - prev.t_s)
            if rates is not None:
                self.reference.add(snap.t_s, rates.ipc)
        self.history.append(snap)
        base = None
        for s in self.history:
            if s.t_s <= snap.t_s - self.window_s:
                base = s
        while self.history and base is not None and self.history[0] is not base:
            self.history.popleft()
        self.last = (readings_between(base, snap, pods, self.reference.value())
                     if base is not None else None)
        return self.last

    def close(self) -> None:
        if self.hw is not None:
            self.hw.close()


# -- which pods ----------------------------------------------------------------------------
def probed_pods(policies: list[dict[str, Any]], pods: list[dict[str, Any]], node: str
                ) -> list[PodRef]:
    """Every Running pod on ``node`` of a store an ElasticPolicy targets, whatever the
    policy's mode (measuring changes nothing): in the policy's namespace, owned by the
    target StatefulSet (an ownerReference of that kind and name) or named
    ``<target>-<ordinal>``. Policies being deleted target nothing."""
    targets: dict[str, set[str]] = {}
    for pol in policies:
        meta = pol.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        t = (pol.get("spec") or {}).get("target") or {}
        name = t.get("name") if isinstance(t, dict) else None
        if isinstance(name, str) and name and t.get("kind", "StatefulSet") == "StatefulSet":
            targets.setdefault(str(meta.get("namespace", "")), set()).add(name)
    out: list[PodRef] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        st = pod.get("status") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        sts = targets.get(ns)
        if not sts or spec.get("nodeName") != node or st.get("phase") != "Running" \
                or meta.get("deletionTimestamp"):
            continue
        owned = any(isinstance(o, dict) and o.get("kind") == "StatefulSet"
                    and o.get("name") in sts for o in meta.get("ownerReferences") or [])
        named = any(re.fullmatch(rf"{re.escape(s)}-[0-9]+", name) for s in sts)
        if owned or named:
            out.append(PodRef(ns, name, str(meta.get("uid", ""))))
    return sorted(out, key=lambda p: p.key)
