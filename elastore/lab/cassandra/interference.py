"""``elastore lab profile-interference``: how much each kind of co-runner hurts the lab's
Cassandra, and whether the *measured* interference index says so.

At each cluster load the sweep runs the store alone (a baseline point, again after every
kind) and under each co-runner kind (:mod:`elastore.lab.corunners`) at each level, pinned
to the store's CPUs. Every point holds for ``point_s`` seconds of constant open-loop load
(``elastore load run``, reads 95 %); meanwhile the node agent's probe code
(:mod:`elastore.hubbub.probe`) reads every node's cgroup (PSI, throttling) and the
machine's ``/proc/stat`` at the point's start and end, and the point's index is the mean of
the nodes' pod-scope indices over the point.

The *slowdown* of a point is its p95 (median over its windows, the first dropped as
warm-up) over the baseline p95 at the same load (the median of that load's baseline
points): the latency the same load gets with the neighbour, relative to without. The same
for the median latency (p50) is reported beside it: the index is a *mean* loss of time,
while a p95 also depends on how long each stall lasts.
``index_slowdown_spearman`` is the rank correlation of index and slowdown over the non-
baseline points (and over all points, baselines at slowdown 1).

Runs *outside* the lab's network namespace: ``ip netns exec`` mounts a sysfs of its own,
in which the cgroups are not visible; the load generator enters the namespace itself.

Rows are per 5-s window with the capacity samples' columns (per server; ``interference``
is the *measured* index), so ``elastore models fit`` reads the file as it is; plus the
point's kind, level, index terms and slowdown. Appended and flushed as each point ends;
``--resume`` skips the points already in the file.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elastore.errors import ElastoreError
from elastore.lab.corunners import KINDS, MAX_LEVEL, CoRunner

BASELINE = "none"
COLUMNS = ["read_rps", "write_rps", "migration_mibps", "interference", "p95_ms", "p99_ms",
           "point", "window", "nodes", "cluster_rps", "read_ratio", "achieved_rps", "errors",
           "kind", "level", "cpu_full", "cpu_some", "throttled", "io_full", "memory_full",
           "steal", "terms", "point_p95_ms", "p50_ms", "point_p50_ms", "point_cpu_cores",
           "point_cpu_ms_per_request"]


@dataclass(frozen=True)
class IPoint:
    index: int
    cluster_rps: float
    kind: str  # BASELINE: no co-runner
    level: int


def plan(loads: Sequence[float], kinds: Sequence[str], levels: Sequence[int]) -> list[IPoint]:
    """Per load: a baseline, then each kind's levels in rising order followed by a
    baseline (so drift shows, and each kind is judged against the store alone nearby).
    No kinds: one baseline per load (a load sweep with the index measured)."""
    if not loads or any(not (v > 0 and math.isfinite(v)) for v in loads):
        raise ElastoreError(f"loads must be > 0 requests/s: {list(loads)}")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ElastoreError(f"unknown co-runner kinds {bad}: one of {', '.join(KINDS)}")
    if kinds and (not levels or any(not 1 <= lv <= MAX_LEVEL for lv in levels)):
        raise ElastoreError(f"levels must be 1..{MAX_LEVEL} workers: {list(levels)}")
    out: list[IPoint] = []
    for load in loads:
        out.append(IPoint(len(out), float(load), BASELINE, 0))
        for kind in kinds:
            for lv in sorted(set(levels)):
                out.append(IPoint(len(out), float(load), kind, lv))
            out.append(IPoint(len(out), float(load), BASELINE, 0))
    return out


def _median(xs: Sequence[float]) -> float:
    return float(np.median(xs)) if len(xs) else math.nan


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN with < 3 pairs or a
    constant side."""
    from scipy.stats import spearmanr

    pairs = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 3:
        return math.nan
    xa, ya = zip(*pairs, strict=True)
    if len(set(xa)) < 2 or len(set(ya)) < 2:
        return math.nan
    return float(spearmanr(xa, ya).statistic)


@dataclass(frozen=True)
class PointResult:
    point: int
    cluster_rps: float
    kind: str
    level: int
    index: float
    p95_ms: float
    slowdown: float
    slowdown_p50: float = math.nan
    cpu_ms_per_request: float = math.nan  # the nodes' CPU per request served
    cpu_ratio: float = math.nan  # that over its load's median baseline


def summarize(rows: list[dict[str, str]]) -> dict[str, Any]:
    """Per point: index, p95 and slowdown; the rank correlations; per kind the index and
    slowdown by level."""
    by_point: dict[int, list[dict[str, str]]] = {}
    for r in rows:
        by_point.setdefault(int(r["point"]), []).append(r)
    pts = []
    for k, rs in sorted(by_point.items()):
        r0 = rs[0]
        p50 = r0.get("point_p50_ms") or "nan"
        cpu = r0.get("point_cpu_ms_per_request") or "nan"  # absent from older sweeps
        pts.append((k, float(r0["cluster_rps"]), r0["kind"], int(r0["level"]),
                    float(r0["interference"]) if r0["interference"] else math.nan,
                    float(r0["point_p95_ms"]), float(p50), float(cpu)))
    base: dict[float, float] = {}
    base50: dict[float, float] = {}
    base_cpu: dict[float, float] = {}
    for load in {p[1] for p in pts}:
        alone = [p for p in pts if p[1] == load and p[2] == BASELINE]
        base[load] = _median([p[5] for p in alone])
        base50[load] = _median([p[6] for p in alone])
        base_cpu[load] = _median([p[7] for p in alone if math.isfinite(p[7])])

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else math.nan

    def bracket_cpu(k: int, load: float) -> float:
        """The store alone's CPU per request around point ``k``: the mean of the baselines
        just before and just after it at its load (the plan runs one after every kind).
        The store alone drifts over a sweep (2.73 to 1.99 ms per request in the first one
        that measured it), so a kind is judged against its neighbours, not the median."""
        alone = [(p[0], p[7]) for p in pts if p[1] == load and p[2] == BASELINE
                 and math.isfinite(p[7])]
        before = [c for i, c in alone if i < k][-1:]
        after = [c for i, c in alone if i > k][:1]
        near = before + after
        return float(np.mean(near)) if near else base_cpu[load]

    res = [PointResult(k, load, kind, lv, idx, p95, ratio(p95, base[load]),
                       ratio(p50, base50[load]), cpu,
                       ratio(cpu, base_cpu[load] if kind == BASELINE
                             else bracket_cpu(k, load)))
           for k, load, kind, lv, idx, p95, p50, cpu in pts]
    loaded = [p for p in res if p.kind != BASELINE]
    kinds: dict[str, dict[str, Any]] = {}
    for p in loaded:
        d = kinds.setdefault(p.kind, {"levels": [], "index": [], "slowdown": [],
                                      "cpu_ratio": []})
        d["levels"].append(p.level)
        d["index"].append(round(p.index, 3))
        d["slowdown"].append(round(p.slowdown, 2))
        d["cpu_ratio"].append(round(p.cpu_ratio, 3) if math.isfinite(p.cpu_ratio) else None)
    return {
        "points": [p.__dict__ for p in res],
        "baseline_p95_ms": {str(k): round(v, 1) for k, v in sorted(base.items())},
        # the store's CPU per request alone (ms), per load: what the CPU-based sizing of
        # experiments/hubbub/simulate.py scales by each kind's cpu_ratio
        "baseline_cpu_ms_per_request": {str(k): round(v, 4) if math.isfinite(v) else None
                                        for k, v in sorted(base_cpu.items())},
        "baseline_index": round(_median([p.index for p in res if p.kind == BASELINE]), 3),
        "index_slowdown_spearman": spearman([p.index for p in loaded],
                                            [p.slowdown for p in loaded]),
        "index_slowdown_spearman_with_baselines": spearman([p.index for p in res],
                                                           [p.slowdown for p in res]),
        # the index is a mean slowdown (time lost): the median latency's is the direct check
        "index_slowdown_spearman_p50": spearman([p.index for p in loaded],
                                                [p.slowdown_p50 for p in loaded]),
        "kinds": kinds,
    }


class NodeProbe:
    """The agent's probe arithmetic over the lab nodes' own cgroups (the agent finds a
    pod's cgroup by its UID; the lab's are ``elastore-lab/n<n>``)."""

    def __init__(self, groups: list[str], proc_root: Path = Path("/proc")) -> None:
        from elastore.lab import cgroups

        v2, v1 = cgroups.v2_root(), cgroups.v1_cpu_root()
        if v2 is None:
            raise ElastoreError("no cgroup v2 hierarchy: the probe needs PSI")
        self.dirs = [(v2 / g, v1 / g if v1 else None) for g in groups]
        self.proc_root = proc_root

    def snapshot(self) -> tuple[float, list[Any], Any, float | None]:
        """(monotonic s, each node's counters, ``/proc/stat``, the nodes' summed CPU use in
        seconds from their v2 ``cpu.stat`` ``usage_usec``, None when unreadable)."""
        from elastore.hubbub.probe import parse_proc_stat, read_cpu_stat, read_group

        stat = (self.proc_root / "stat").read_text()
        usage = [read_cpu_stat(a / "cpu.stat") for a, _ in self.dirs]
        used = (sum(u.usage_us for u in usage if u is not None and u.usage_us is not None)
                / 1e6 if all(u is not None and u.usage_us is not None for u in usage)
                else None)
        return (time.monotonic(), [read_group(a, b) for a, b in self.dirs],
                parse_proc_stat(stat), used)

    @staticmethod
    def cpu_seconds(a: tuple[float, list[Any], Any, float | None],
                    b: tuple[float, list[Any], Any, float | None]) -> float:
        """The nodes' CPU seconds between two snapshots; NaN when either could not read
        it or the counter went backwards (never 0 for unknown)."""
        if a[3] is None or b[3] is None or b[3] < a[3]:
            return math.nan
        return b[3] - a[3]

    @staticmethod
    def between(a: tuple[float, list[Any], Any, float | None],
                b: tuple[float, list[Any], Any, float | None]
                ) -> tuple[float, dict[str, float], tuple[str, ...]]:
        """The mean pod-scope index of the nodes, their mean components, the terms."""
        from elastore.hubbub.probe import combine, group_components, steal_fraction

        dt = b[0] - a[0]
        steal = steal_fraction(a[2], b[2])
        idx: list[float] = []
        comps: list[dict[str, float]] = []
        terms: tuple[str, ...] = ()
        for ga, gb in zip(a[1], b[1], strict=True):
            c = group_components(ga, gb, dt)
            if steal is not None:
                c["steal"] = steal
            i, used = combine(c, "pod")
            if i is None:
                raise ElastoreError("a node's cgroup has no readable pressure: no index")
            idx.append(i)
            comps.append(c)
            terms = used
        keys = {k for c in comps for k in c}
        mean = {k: float(np.mean([c[k] for c in comps if k in c])) for k in keys}
        return float(np.mean(idx)), mean, terms


def cpu_per_request(cpu_s: float, dt_s: float, windows: Sequence[dict[str, str]],
                    window_s: float) -> tuple[float, float]:
    """(the nodes' mean CPU use in cores, their CPU ms per request served) over a point's
    probed interval: its CPU seconds over the requests its windows achieved (all windows,
    the warm-up one too, as the probe brackets the whole run). It includes the store's
    background work (compaction, gossip) while the generator starts, the same at every
    point. NaN when the CPU use or the requests are unknown or none were served."""
    served = 0.0
    for w in windows:
        try:
            v = float(w["achieved_rps"])
        except (KeyError, TypeError, ValueError):
            return math.nan, math.nan
        if not math.isfinite(v):
            return math.nan, math.nan
        served += v * window_s
    cores = cpu_s / dt_s if dt_s > 0 and math.isfinite(cpu_s) else math.nan
    per = 1000.0 * cpu_s / served if served > 0 and math.isfinite(cpu_s) else math.nan
    return cores, per


def done_points(out: Path) -> set[int]:
    if not out.is_file():
        return set()
    with out.open() as fh:
        return {int(r["point"]) for r in csv.DictReader(fh)}


def _load(wl: Path, out: Path, preload: bool) -> None:
    argv = [sys.executable, "-m", "elastore", "load", "run", str(wl), "--out", str(out)]
    if not preload:
        argv.append("--no-preload")
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"the load generator failed: {res.stderr.strip()[-500:]}")


def run_interference_profile(points: list[IPoint], out: Path, *, point_s: float = 30.0,
                             window_s: float = 5.0, read_ratio: float = 0.95,
                             settle_s: float = 5.0, resume: bool = False,
                             warmup_s: float = 90.0,
                             echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the sweep on the lab that is up (from *outside* its namespace); append rows to
    ``out``; write and return the summary (``out`` with ``.json``).

    Before the first point the store serves the first point's load for ``warmup_s``,
    unrecorded: a fresh JVM (JIT, caches, the preload's flushes and compactions) is slower
    and stalls more than a warm one, and without this the first baseline read as
    interference (index 0.59, p95 10.8 ms at 400 req/s right after the preload, against
    0.25 and 2.9 ms a few minutes later, on the same lab)."""
    from elastore.lab.cassandra import lab
    from elastore.lab.host import lab_dir
    from elastore.lab.sweep import Appender, constant_workload

    state = lab.LabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    if any(not n.cgroup for n in state.nodes):
        raise ElastoreError("the lab's nodes are not in cgroups of their own (a lab started "
                            "before cgroups, or no cgroup v2): 'elastore lab down' and up")
    if point_s < 2 * window_s:
        raise ElastoreError("a point must last at least two windows (one is warm-up)")
    if out.exists() and not resume:
        raise ElastoreError(f"{out} exists: pass --resume to continue, or choose another "
                            "--out (nothing is overwritten)")
    skip = done_points(out) if resume else set()
    todo = [p for p in points if p.index not in skip]
    cpus = state.store_cpus or sorted(os.sched_getaffinity(0))
    nodes = len(state.nodes)
    probe = NodeProbe([n.cgroup for n in state.nodes])
    echo(f"profile-interference: {len(points)} points ({len(skip)} done), {point_s:g} s "
         f"each, {nodes} nodes, co-runners on CPUs {cpus}; about "
         f"{(warmup_s + len(todo) * (point_s + settle_s + 8)) / 60:.0f} min")
    with tempfile.TemporaryDirectory(prefix="elastore-iprofile-") as tmp:
        t = Path(tmp)
        if todo and not skip:
            pre = t / "preload.json"
            constant_workload(1.0, 1.0, window_s, window_s).save(pre)
            echo("preloading the keys ...")
            _load(pre, t / "preload.csv", preload=True)
        if todo and warmup_s > 0:
            warm = t / "warmup.json"
            constant_workload(todo[0].cluster_rps, read_ratio, warmup_s, window_s).save(warm)
            echo(f"warming up: {todo[0].cluster_rps:g} req/s for {warmup_s:g} s, unrecorded "
                 "...")
            _load(warm, t / "warmup.csv", preload=False)
        out.parent.mkdir(parents=True, exist_ok=True)
        with Appender(out, COLUMNS) as wr:
            for k, p in enumerate(todo):
                runner = CoRunner(p.kind, p.level, cpus) if p.kind != BASELINE else None
                wl = t / f"p{p.index}.json"
                constant_workload(p.cluster_rps, read_ratio, point_s, window_s).save(wl)
                rows_csv = t / f"p{p.index}.csv"
                try:
                    if runner is not None:
                        runner.start()
                    time.sleep(settle_s)
                    a = probe.snapshot()
                    _load(wl, rows_csv, preload=False)
                    b = probe.snapshot()
                finally:
                    if runner is not None:
                        runner.stop()
                index, comps, terms = NodeProbe.between(a, b)
                with rows_csv.open() as fh:
                    every = list(csv.DictReader(fh))
                cpu_cores, cpu_ms = cpu_per_request(NodeProbe.cpu_seconds(a, b),
                                                    b[0] - a[0], every, window_s)
                windows = every[1:]  # the first: warm-up
                windows = [w for w in windows if w["p95_ms"] not in ("", "nan")
                           and float(w["achieved_rps"]) > 0]
                p95 = _median([float(w["p95_ms"]) for w in windows])
                p50 = _median([float(w["p50_ms"]) for w in windows if w.get("p50_ms")
                               not in (None, "", "nan")])
                wr.write([{
                    "read_rps": round(float(w["achieved_rps"]) * read_ratio / nodes, 3),
                    "write_rps": round(float(w["achieved_rps"]) * (1 - read_ratio) / nodes, 3),
                    "migration_mibps": 0.0, "interference": round(index, 4),
                    "p95_ms": float(w["p95_ms"]), "p99_ms": float(w["p99_ms"]),
                    "point": p.index, "window": int(w["window"]), "nodes": nodes,
                    "cluster_rps": p.cluster_rps, "read_ratio": read_ratio,
                    "achieved_rps": float(w["achieved_rps"]), "errors": int(w["errors"]),
                    "kind": p.kind, "level": p.level,
                    **{c: round(comps[c], 4) if c in comps else "" for c in
                       ("cpu_full", "cpu_some", "throttled", "io_full", "memory_full",
                        "steal")},
                    "terms": "+".join(terms), "point_p95_ms": round(p95, 2),
                    "p50_ms": w.get("p50_ms", ""), "point_p50_ms": round(p50, 2),
                    "point_cpu_cores": round(cpu_cores, 4),
                    "point_cpu_ms_per_request": round(cpu_ms, 4),
                } for w in windows])
                echo(f"[{k + 1}/{len(todo)}] {p.cluster_rps:g} req/s, {p.kind}"
                     f"{'' if p.kind == BASELINE else f' x{p.level}'}: index {index:.3f} "
                     f"(cpu_full {comps.get('cpu_full', math.nan):.3f}, throttled "
                     f"{comps.get('throttled', math.nan):.3f}), p95 {p95:.1f} ms, store "
                     f"CPU {cpu_ms:.3f} ms/request")
    with out.open() as fh:
        summary = summarize(list(csv.DictReader(fh)))
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
