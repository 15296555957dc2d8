"""``elastore lab profile`` on the Cassandra lab: measure the SLO border on the real lab
cluster (the Swift lab's sweep is :mod:`elastore.lab.swift.profile`).

The sweep is load x read/write mix x migration rate x interference. Every *point* holds one
setting for ``point_s`` seconds while the open-loop load generator (``elastore load run``,
a subprocess inside the lab namespace) replays a constant workload; its per-window p95/p99
become the samples. The first window of a point is a warm-up and is dropped.

* **Migration** is real streaming: a background driver runs ``nodetool rebuild`` on the
  nodes in turn (each rebuild streams the node's ranges from the other replicas of a bulk
  keyspace), with ``setstreamthroughput`` set to the level on every node. The rate recorded
  is *measured*, not the setting: streamed bytes from every node's exporter over the point,
  divided by the nodes and the seconds (MiB/s per server).
* **Interference** is a noisy neighbour: ``round(index x cores)`` busy-loop processes
  started for the block and stopped by PID. The index is the fraction of the machine's
  cores the neighbour keeps busy (the machine-level view of Hubbub-scale's index).
* **Loads** are cluster requests/s; the samples are per server (divided by the nodes), as
  ``elastore models fit`` expects.
* **Keys**: 4000, their popularity Zipf-like with the traces' slope; or a workload's own
  key table (``keys``, from ``--keys-from``; both :mod:`elastore.lab.sweep`): the border
  is the border of a request mix, and a store serves a few hot keys from its caches far
  faster than many lukewarm ones (on the lab, a day of the trace's 631 pages stayed within
  60 ms at 37 req/s per server where the default keys crossed it at 34; docs/lab.md).

Rows are appended and flushed as each point ends, so an interrupted sweep keeps every
finished point; ``resume`` skips the points already in the file.
"""

from __future__ import annotations

import csv
import itertools
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elastore.errors import ElastoreError
from elastore.lab.sweep import Appender, KeyTable, constant_workload, zipf_keys
from elastore.traces.workload import Workload
from elastore.units import bytes_to_mib, mibps_to_mbit

log = logging.getLogger("elastore.lab.cassandra.profile")

DEFAULT_STREAM_MIBPS = 24  # Cassandra 5.0's stream_throughput_outbound default
COLUMNS = ["read_rps", "write_rps", "migration_mibps", "interference", "p95_ms", "p99_ms",
           "point", "window", "nodes", "cluster_rps", "read_ratio", "achieved_rps",
           "errors", "stream_throttle_mibps"]


@dataclass(frozen=True)
class Point:
    index: int
    cluster_rps: float
    read_ratio: float
    stream_mibps: float  # 0: no migration
    interference: float


def plan(loads: Sequence[float], read_ratios: Sequence[float], migrations: Sequence[float],
         interferences: Sequence[float]) -> list[Point]:
    """The sweep, migration outermost (so a level's streaming runs through its points),
    then interference, read ratio, and load innermost."""
    for name, vals, lo in (("load", loads, 0.0), ("migration", migrations, 0.0)):
        if not vals or any(v < lo for v in vals):
            raise ElastoreError(f"{name} levels must be non-empty and >= {lo:g}: {vals}")
    if not loads or any(v <= 0 for v in loads):
        raise ElastoreError(f"loads must be > 0 requests/s: {loads}")
    if not read_ratios or any(not 0 <= r <= 1 for r in read_ratios):
        raise ElastoreError(f"read ratios must be in [0, 1]: {read_ratios}")
    if not interferences or any(not 0 <= i <= 1 for i in interferences):
        raise ElastoreError(f"interference indices must be in [0, 1]: {interferences}")
    combos = itertools.product(sorted(migrations), sorted(interferences), sorted(read_ratios),
                               sorted(loads))
    return [Point(k, float(load), float(r), float(m), float(i))
            for k, (m, i, r, load) in enumerate(combos)]


class Hogs:
    """A noisy neighbour: busy-loop processes, stopped by PID."""

    def __init__(self, index: float, cores: int | None = None) -> None:
        self.count = round(index * (cores or os.cpu_count() or 1))
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hogs:
        for _ in range(self.count):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs.clear()


class MigrationDriver:
    """Keeps data streaming: ``nodetool rebuild`` on each node in turn until stopped."""

    def __init__(self, rebuild: Callable[[int], None], nodes: Sequence[int]) -> None:
        self.rebuild = rebuild
        self.nodes = list(nodes)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.rebuilds = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        try:
            for n in itertools.cycle(self.nodes):
                if self.stop_event.is_set():
                    return
                self.rebuild(n)
                self.rebuilds += 1
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> MigrationDriver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=900)  # lets the rebuild in flight finish


def point_rows(point: Point, windows: list[dict[str, Any]], nodes: int, migration_mibps: float,
               window_s: float) -> list[dict[str, Any]]:
    """Sample rows (per server) from a point's per-window load CSV, warm-up dropped."""
    out = []
    for w in windows[1:]:
        achieved = float(w["achieved_rps"])
        if achieved <= 0 or w["p95_ms"] in ("", "nan"):
            continue
        out.append({
            "read_rps": round(achieved * point.read_ratio / nodes, 3),
            "write_rps": round(achieved * (1 - point.read_ratio) / nodes, 3),
            "migration_mibps": round(migration_mibps, 3),
            "interference": point.interference,
            "p95_ms": float(w["p95_ms"]), "p99_ms": float(w["p99_ms"]),
            "point": point.index, "window": int(w["window"]), "nodes": nodes,
            "cluster_rps": point.cluster_rps, "read_ratio": point.read_ratio,
            "achieved_rps": achieved, "errors": int(w["errors"]),
            "stream_throttle_mibps": point.stream_mibps,
        })
    return out


def done_points(out: Path) -> set[int]:
    if not out.is_file():
        return set()
    with out.open() as fh:
        return {int(r["point"]) for r in csv.DictReader(fh)}


def bandwidth_path(out: Path) -> Path:
    """Where the bandwidth samples go, next to the latency samples."""
    return out.with_name(out.stem + "-bandwidth.csv")


def run_profile(points: list[Point], out: Path, *, point_s: float = 20.0,
                window_s: float = 5.0, bulk_rows: int = 20000, resume: bool = False,
                echo: Callable[[str], None] = print, routing: str = "token-aware",
                warmup_s: float = 0.0, stop_above_ms: float | None = None,
                keys: KeyTable | None = None) -> Path:
    """Run the sweep on the lab that is up (call it inside the lab namespace); append sample
    rows to ``out`` and bandwidth rows to :func:`bandwidth_path` of it. ``warmup_s``: the
    first point's load served that long first, unrecorded. ``stop_above_ms``: once two
    loads in a row of one (read ratio, migration, interference) setting have a median
    window p95 above it, that setting's higher loads are skipped (the border is behind;
    deeper overload only queues). ``keys``: the request mix's key table (default
    :func:`zipf_keys`)."""
    from elastore.actuators.tc import HtbShaper
    from elastore.lab.cassandra import lab
    from elastore.lab.cassandra.nodes import ensure_jars, nodetool
    from elastore.lab.host import lab_dir

    d = lab_dir()
    state = lab.LabState.load(d)
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    if point_s < 2 * window_s:
        raise ElastoreError("a point must last at least two windows (one is warm-up)")
    bw_out = bandwidth_path(out)
    if (out.exists() or bw_out.exists()) and not resume:
        raise ElastoreError(f"{out} or {bw_out} exists: pass --resume to continue, or choose "
                            "another --out (nothing is overwritten)")
    skip = done_points(out) if resume else set()
    todo = [p for p in points if p.index not in skip]
    echo(f"profile: {len(points)} points ({len(skip)} already in {out}), {point_s:g} s each, "
         f"{len(state.nodes)} nodes; about {len(todo) * (point_s + 4) / 60:.0f} min")
    lib = ensure_jars()
    ips = [n.spec.ip for n in state.nodes]
    if any(p.stream_mibps > 0 for p in todo) and "bulk" not in lab.cql(state, "keyspaces"):
        echo(f"writing {bulk_rows} bulk rows of 10 KiB (RF 2) for migrations to move ...")
        _inside(state, [sys.executable, "-m", "elastore.lab.cassandra.cql", ",".join(ips),
                        "write", "bulk", str(bulk_rows), "10240", "11", "2"])
    # An HTB far above what the lab sends: it never binds, its byte counters measure the
    # bandwidth each class used (BwMan's regression data). A stale one from an interrupted
    # sweep of ours (same root handle) is removed first.
    shaper = HtbShaper(state.netns, total_mbit=20000.0, installed=True)
    shaper.remove()
    shaper.install(ips, client_mbit=5000.0, storage_mbit=5000.0)
    try:
        with tempfile.TemporaryDirectory(prefix="elastore-profile-") as tmp:
            t = Path(tmp)
            pre = t / "preload.json"
            keys = keys if keys is not None else zipf_keys()
            constant_workload(1.0, 1.0, window_s, window_s, keys).save(pre)
            echo(f"preloading {len(keys[0])} keys ...")
            _load(pre, t / "preload.csv", preload=True, hosts=ips, routing=routing)
            if todo and warmup_s > 0:
                echo(f"warming up: {todo[0].cluster_rps:g} req/s for {warmup_s:g} s, "
                     "unrecorded ...")
                warm = t / "warmup.json"
                constant_workload(todo[0].cluster_rps, todo[0].read_ratio, warmup_s,
                                  window_s, keys).save(warm)
                _load(warm, t / "warmup.csv", preload=False, hosts=ips, routing=routing)
            out.parent.mkdir(parents=True, exist_ok=True)
            with Appender(out, COLUMNS) as wr, Appender(bw_out, BW_COLUMNS) as bw:
                for level, group in itertools.groupby(todo, key=lambda p: p.stream_mibps):
                    _profile_level(state, lib, nodetool, level, list(group), wr, bw, t,
                                   point_s, window_s, len(points), echo, ips, shaper, routing,
                                   stop_above_ms, keys)
    finally:
        shaper.remove()
    return out


BW_COLUMNS = ["client_mbit", "served_rps", "migration_mbit", "migration_mibps", "point"]


def _profile_level(state: Any, lib: Path, nodetool: Any, level: float, group: list[Point],
                   wr: Appender, bw: Appender, t: Path, point_s: float, window_s: float,
                   total: int, echo: Callable[[str], None], ips: list[str],
                   shaper: Any, routing: str, stop_above_ms: float | None = None,
                   keys: KeyTable | None = None) -> None:
    from elastore.lab.cassandra import lab
    from elastore.lab.cassandra.nodes import streaming_outgoing_bytes

    nodes = len(ips)
    settle(state, lib, nodetool, echo)  # the data load or the last level's rebuilds
    throttle = level if level > 0 else DEFAULT_STREAM_MIBPS
    for n in state.nodes:
        lab.set_stream_throughput(n.n, throttle)

    def rebuild(n: int) -> None:
        node = next(x for x in state.nodes if x.n == n)
        res = nodetool(state.node_ns(node), lib, node.spec.jmx_port, "rebuild", "-ks", "bulk",
                       timeout=900)
        if res.returncode != 0:
            raise ElastoreError(f"nodetool rebuild on node {n}: "
                                f"{(res.stdout + res.stderr).strip()[-300:]}")

    def measure() -> tuple[list[float | None], dict[int, int]]:
        return [streaming_outgoing_bytes(state.netns, n.spec) for n in state.nodes], \
            shaper.class_bytes()

    driver = MigrationDriver(rebuild, [n.n for n in state.nodes]) if level > 0 else None
    try:
        if driver is not None:
            driver.__enter__()
            echo(f"migration level {level:g} MiB/s per sender: rebuilds streaming ...")
            time.sleep(5)  # let streaming start before the first point
        over: dict[float, int] = {}  # consecutive loads past stop_above_ms, by read ratio
        for inter, block in itertools.groupby(group, key=lambda p: p.interference):
            over.clear()
            with Hogs(inter):
                for p in block:
                    if over.get(p.read_ratio, 0) >= 2:
                        echo(f"[{p.index + 1}/{total}] {p.cluster_rps:g} req/s skipped: two "
                             f"lower loads were past {stop_above_ms:g} ms (median p95)")
                        continue
                    if driver is not None and driver.error is not None:
                        raise ElastoreError(f"the migration driver failed: {driver.error}")
                    wl = t / f"p{p.index}.json"
                    constant_workload(p.cluster_rps, p.read_ratio, point_s, window_s,
                                      keys).save(wl)
                    rows_csv = t / f"p{p.index}.csv"
                    before, tc0 = measure()
                    t0 = time.monotonic()
                    _load(wl, rows_csv, preload=False, hosts=ips, routing=routing)
                    secs = time.monotonic() - t0
                    after, tc1 = measure()
                    if any(v is None for v in before + after):
                        raise ElastoreError("a node's exporter did not answer: the migration "
                                            "rate of this point is unknown (never read as 0)")
                    moved = sum(float(a or 0) - float(b or 0) for a, b in zip(after, before,
                                                                               strict=True))
                    mig = bytes_to_mib(moved) / nodes / secs
                    with rows_csv.open() as f:
                        windows = list(csv.DictReader(f))
                    rows = point_rows(p, windows, nodes, mig, window_s)
                    wr.write(rows)
                    bw.write([bandwidth_row(p, windows, shaper, tc0, tc1, secs, nodes, mig)])
                    p95 = [r["p95_ms"] for r in rows]
                    if stop_above_ms is not None and p95:
                        past = float(np.median(p95)) > stop_above_ms
                        over[p.read_ratio] = over.get(p.read_ratio, 0) + 1 if past else 0
                    echo(f"[{p.index + 1}/{total}] {p.cluster_rps:g} req/s, read ratio "
                         f"{p.read_ratio:g}, migration {mig:.2f} MiB/s/server (throttle "
                         f"{p.stream_mibps:g}), interference {p.interference:g}: p95 "
                         f"{min(p95, default=float('nan')):.0f}-"
                         f"{max(p95, default=float('nan')):.0f} ms")
    finally:
        if driver is not None:
            echo("waiting for the rebuild in flight to finish ...")
            driver.__exit__()
        for n in state.nodes:
            lab.set_stream_throughput(n.n, DEFAULT_STREAM_MIBPS)


def bandwidth_row(p: Point, windows: list[dict[str, Any]], shaper: Any, tc0: dict[int, int],
                  tc1: dict[int, int], secs: float, nodes: int, mig_mibps: float
                  ) -> dict[str, Any]:
    """Per-server bandwidth each class used over a point (Mbit/s, from the HTB's byte
    counters), with the throughput it carried."""
    def mbit(kind: str) -> float:
        handles = [getattr(c, kind) for c in shaper.nodes.values()]
        sent = sum(tc1.get(h, 0) - tc0.get(h, 0) for h in handles)
        return mibps_to_mbit(bytes_to_mib(sent) / secs / nodes)

    served = sum(float(w["achieved_rps"]) for w in windows) / max(len(windows), 1) / nodes
    return {"client_mbit": round(mbit("client"), 4), "served_rps": round(served, 3),
            "migration_mbit": round(mbit("storage"), 4), "migration_mibps": round(mig_mibps, 4),
            "point": p.index}


def pending_compactions(text: str) -> int | None:
    """``pending tasks  N`` from ``nodetool compactionstats`` output (None: not found)."""
    for line in text.splitlines():
        parts = line.split()
        if line.strip().startswith("pending tasks") and len(parts) >= 3 and parts[2].isdigit():
            return int(parts[2])
    return None


def settle(state: Any, lib: Path, nodetool: Any, echo: Callable[[str], None],
            timeout_s: float = 900.0) -> None:
    """Wait until no node has compactions pending, so a point does not measure the
    aftermath of the data load."""
    end = time.monotonic() + timeout_s
    while True:
        pending = {}
        for n in state.nodes:
            res = nodetool(state.node_ns(n), lib, n.spec.jmx_port, "compactionstats")
            pending[n.n] = pending_compactions(res.stdout)
        if all(v == 0 for v in pending.values()):
            return
        if time.monotonic() > end:
            raise ElastoreError(f"compactions still pending after {timeout_s:.0f} s: {pending}")
        echo(f"waiting for compactions to settle: pending {pending} ...")
        time.sleep(10)


def _inside(state: Any, argv: list[str]) -> None:
    from elastore.lab import netns

    res = subprocess.run(netns.command(state.netns, argv), capture_output=True, text=True,
                         check=False)
    if res.returncode != 0:
        raise ElastoreError(f"{' '.join(argv[2:5])} failed: {res.stderr.strip()[-400:]}")


def _load(wl: Path, out: Path, preload: bool, hosts: list[str], routing: str) -> None:
    """One point of load, in this process (which runs inside the lab namespace)."""
    from elastore.lab.cassandra.load import run

    run(Workload.load(wl), hosts, out, keyspace="wiki", preload=preload, routing=routing)
