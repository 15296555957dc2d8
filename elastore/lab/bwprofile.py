"""``elastore lab profile-bandwidth``: BwMan's two regressions, measured on the real lab.

The reference text (5.2.1) trains both offline by *shaping* bandwidth and measuring:

* **Client model**: for each client bandwidth ``B`` per server (the node's port-9042 class
  capped at ``B`` Mbit/s, tc ``egress`` match), load points at fractions of ``B``'s nominal
  rate (``B`` / one 10 KiB response with 7 % framing); the load generator records each
  coordinator node's windows. The throughput a server serves within the SLO at ``B`` is the
  highest per-node load whose median p95 (or p99) is within the SLO, below the lowest load
  that breaks it. If no load broke it, the sweep did not reach the border and the value is
  a lower bound (said so).
* **Migration model**: for each storage bandwidth ``M`` per server (port-7000 class capped
  at ``M``), a real ``nodetool rebuild`` of a migration keyspace on one node, which streams
  from the other replicas through their capped classes. Per sender, the MiB streamed
  (the node's exporter, exact once the rebuild has finished) over the seconds its class was
  busy (tc byte counters sampled every 0.5 s; busy: above half of ``M``). Cassandra's own
  stream throttle is left at its default (24 MiB/s, far above ``M``), so tc binds.

Rows are appended to the raw file (``*-points.csv``) as points finish, so an interrupted
sweep keeps them and ``resume`` skips them; the reduced curves are written to ``out`` in the
``client_mbit,served_rps`` / ``migration_mbit,migration_mibps`` form `elastore models fit
--bandwidth` reads (each row fills one pair and leaves the other empty).
"""

from __future__ import annotations

import csv
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError
from elastore.units import bytes_to_mib

VALUE_BYTES = 10 * 1024
FRAMING = 1.07  # CQL + TCP/IP framing of a 10 KiB read response, as a factor (measured ~5-9 %)
MIN_BUSY_S = 5.0  # a sender streaming for less than this says little about its speed
SAMPLE_S = 0.5
RAW_COLUMNS = ["kind", "point", "client_mbit", "cluster_rps", "node", "window", "node_rps",
               "p95_ms", "p99_ms", "errors", "migration_mbit", "busy_s", "streamed_mib",
               "wire_mbit", "rebuild_s"]
OUT_COLUMNS = ["client_mbit", "served_rps", "migration_mbit", "migration_mibps"]


def nominal_rps(mbit: float) -> float:
    """Read responses per second that ``mbit`` Mbit/s carries at 100 % use."""
    return mbit * 1e6 / 8 / (VALUE_BYTES * FRAMING)


@dataclass(frozen=True)
class BwPoint:
    index: int
    kind: str  # "client" or "migration"
    mbit: float  # the class's cap, per server
    cluster_rps: float  # client points: the load; migration points: 0


def plan_bandwidth(client_mbits: Sequence[float], fractions: Sequence[float],
                   migration_mbits: Sequence[float], nodes: int) -> list[BwPoint]:
    """Client points (bandwidth ascending, load ascending within), then migration points
    (fastest first, so the slow levels come last)."""
    for name, vals in (("client bandwidths", client_mbits),
                       ("migration bandwidths", migration_mbits)):
        if any(not v > 0 for v in vals):
            raise ElastoreError(f"{name} must be > 0 Mbit/s: {list(vals)}")
    if client_mbits and (not fractions or any(not 0 < f <= 2 for f in fractions)):
        raise ElastoreError(f"load fractions must be in (0, 2]: {list(fractions)}")
    if not client_mbits and not migration_mbits:
        raise ElastoreError("nothing to profile: give client and/or migration bandwidths")
    if nodes < 2:
        raise ElastoreError("the bandwidth profile needs at least 2 nodes (migration streams "
                            "between them)")
    out: list[BwPoint] = []
    for b in sorted(client_mbits):
        for f in sorted(fractions):
            out.append(BwPoint(len(out), "client", float(b),
                               round(f * nodes * nominal_rps(b), 1)))
    for m in sorted(migration_mbits, reverse=True):
        out.append(BwPoint(len(out), "migration", float(m), 0.0))
    return out


def _f(row: dict[str, Any], key: str) -> float:
    return float(row[key])


def reduce_bandwidth(raw: list[dict[str, Any]], slo_ms: float, percentile: int = 95
                     ) -> tuple[list[dict[str, Any]], list[str]]:
    """The two curves from the raw rows, and notes on what they cannot say. Pure."""
    lat = f"p{percentile}_ms"
    notes: list[str] = []
    per_node: dict[tuple[float, int, str], list[tuple[float, float]]] = defaultdict(list)
    for r in raw:
        if r["kind"] == "client" and r[lat] not in ("", "nan") and _f(r, "node_rps") > 0:
            per_node[(_f(r, "client_mbit"), int(r["point"]), r["node"])].append(
                (_f(r, "node_rps"), _f(r, lat)))
    by_bw: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for (b, _, _), samples in per_node.items():
        by_bw[b].append((statistics.fmean(s[0] for s in samples),
                         statistics.median(s[1] for s in samples)))
    rows: list[dict[str, Any]] = []
    for b in sorted(by_bw):
        pts = by_bw[b]
        broke = [rps for rps, p in pts if p > slo_ms]
        border = min(broke, default=float("inf"))
        ok = [rps for rps, p in pts if p <= slo_ms and rps < border]
        served = max(ok, default=0.0)
        if not broke:
            notes.append(f"{b:g} Mbit/s: no load broke the SLO (up to {served:.0f} req/s "
                         "per server): the served rate is a lower bound")
        rows.append({"client_mbit": b, "served_rps": round(served, 3), "migration_mbit": "",
                     "migration_mibps": ""})
    speed: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for r in raw:
        if r["kind"] == "migration" and _f(r, "busy_s") >= MIN_BUSY_S:
            speed[_f(r, "migration_mbit")].append((_f(r, "streamed_mib"), _f(r, "busy_s")))
    for m in sorted(speed):
        mib = sum(s[0] for s in speed[m])
        secs = sum(s[1] for s in speed[m])
        rows.append({"client_mbit": "", "served_rps": "", "migration_mbit": m,
                     "migration_mibps": round(mib / secs, 4)})
    missing = sorted({_f(r, "migration_mbit") for r in raw if r["kind"] == "migration"}
                     - set(speed))
    if missing:
        notes.append(f"no sender streamed for {MIN_BUSY_S:g} s at "
                     f"{', '.join(f'{m:g}' for m in missing)} Mbit/s: those levels are left "
                     "out (more --migration-rows?)")
    return rows, notes


class BusySampler:
    """Samples tc classes' byte counters every :data:`SAMPLE_S` in a thread; per class,
    the seconds it ran above ``threshold_mbit`` and the bytes it sent meanwhile."""

    def __init__(self, shaper: Any, handles: dict[str, int], threshold_mbit: float) -> None:
        self.shaper = shaper
        self.handles = handles
        self.threshold_mbit = threshold_mbit
        self.busy_s: dict[str, float] = dict.fromkeys(handles, 0.0)
        self.wire_bytes: dict[str, float] = dict.fromkeys(handles, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        prev, tp = self.shaper.class_bytes(), time.monotonic()
        while not self._stop.wait(SAMPLE_S):
            cur, tn = self.shaper.class_bytes(), time.monotonic()
            for key, h in self.handles.items():
                sent = cur.get(h, 0) - prev.get(h, 0)
                if sent * 8 / 1e6 / (tn - tp) > self.threshold_mbit:
                    self.busy_s[key] += tn - tp
                    self.wire_bytes[key] += sent
            prev, tp = cur, tn

    def __enter__(self) -> BusySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def points_path(out: Path) -> Path:
    """Where the raw rows go, next to ``out``."""
    return out.with_name(out.stem + "-points.csv")


def _read_raw(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with path.open() as fh:
        return list(csv.DictReader(fh))


def run_bandwidth_profile(points: list[BwPoint], out: Path, *, point_s: float = 20.0,
                          window_s: float = 5.0, slo_ms: float = 100.0, percentile: int = 95,
                          read_ratio: float = 0.95, migration_rows: int = 9000,
                          resume: bool = False, echo: Callable[[str], None] = print) -> Path:
    """Run the sweep on the lab that is up (inside its namespace); append raw rows, then
    write the reduced curves to ``out``."""
    from elastore.actuators.tc import HtbShaper
    from elastore.lab import lab
    from elastore.lab.profile import _Appender

    state = lab.LabState.load(lab.lab_dir())
    if state is None or len(state.nodes) < 2:
        raise ElastoreError("no lab of at least 2 nodes is up: run 'elastore lab up' first")
    if point_s < 2 * window_s:
        raise ElastoreError("a point must last at least two windows (one is warm-up)")
    raw_path = points_path(out)
    if (out.exists() or raw_path.exists()) and not resume:
        raise ElastoreError(f"{out} or {raw_path} exists: pass --resume to continue, or "
                            "choose another --out (nothing is overwritten)")
    done = {int(r["point"]) for r in _read_raw(raw_path)} if resume else set()
    todo = [p for p in points if p.index not in done]
    n_client = sum(p.kind == "client" for p in todo)
    echo(f"bandwidth profile: {len(points)} points ({len(done)} already in {raw_path}); "
         f"{n_client} client points of {point_s:g} s, {len(todo) - n_client} rebuilds; "
         f"{len(state.nodes)} nodes")
    ips = [n.spec.ip for n in state.nodes]
    # classes capped at their own rate (no NIC parent): one class is shaped at a time
    shaper = HtbShaper(state.netns, total_mbit=20000.0, match="egress", installed=True)
    shaper.remove()  # a stale HTB of an interrupted sweep of ours
    shaper.install(ips, client_mbit=5000.0, storage_mbit=5000.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="elastore-bwprofile-") as tmp, \
                _Appender(raw_path, RAW_COLUMNS) as wr:
            t = Path(tmp)
            if any(p.kind == "client" for p in todo):
                _client_points(state, ips, shaper, [p for p in todo if p.kind == "client"],
                               wr, t, point_s, window_s, read_ratio, len(points), echo)
            mig = [p for p in todo if p.kind == "migration"]
            if mig:
                _migration_points(state, ips, shaper, mig, wr, migration_rows, len(points),
                                  echo)
    finally:
        shaper.remove()
    rows, notes = reduce_bandwidth(_read_raw(raw_path), slo_ms, percentile)
    for n in notes:
        echo(f"note: {n}")
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=OUT_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return out


def _client_points(state: Any, ips: list[str], shaper: Any, points: list[BwPoint], wr: Any,
                   t: Path, point_s: float, window_s: float, read_ratio: float, total: int,
                   echo: Callable[[str], None]) -> None:
    from elastore.lab.loadgen import nodes_csv, run
    from elastore.lab.profile import KEY_COUNT, constant_workload

    echo(f"preloading {KEY_COUNT} keys ...")
    run(constant_workload(1.0, 1.0, window_s, window_s), ips, t / "preload.csv",
        keyspace="wiki", preload=True)
    # JIT, caches and the driver's connections warm up before anything is recorded (the
    # first point of a cold cluster otherwise breaks the SLO at any load)
    warm = min(p.cluster_rps for p in points)
    echo(f"warming up: {point_s:g} s at {warm:g} req/s, unshaped, not recorded ...")
    run(constant_workload(warm, read_ratio, point_s, window_s), ips, t / "warmup.csv",
        keyspace="wiki", preload=False)
    for p in points:
        for ip in ips:
            shaper.set_rates(ip, client_mbit=p.mbit, storage_mbit=5000.0)
        rows_csv = t / f"p{p.index}.csv"
        run(constant_workload(p.cluster_rps, read_ratio, point_s, window_s), ips, rows_csv,
            keyspace="wiki", preload=False)
        with nodes_csv(rows_csv).open() as fh:
            windows = [w for w in csv.DictReader(fh) if w["window"] not in ("", "0")
                       and int(w["window"]) > 0]
        out = [{"kind": "client", "point": p.index, "client_mbit": p.mbit,
                "cluster_rps": p.cluster_rps, "node": w["node"], "window": w["window"],
                "node_rps": w["achieved_rps"], "p95_ms": w["p95_ms"], "p99_ms": w["p99_ms"],
                "errors": w["errors"]} for w in windows]
        wr.write(out)
        worst = max((float(w["p95_ms"]) for w in windows if w["p95_ms"] != "nan"),
                    default=float("nan"))
        rps = [float(w["achieved_rps"]) for w in windows]
        echo(f"[{p.index + 1}/{total}] client class {p.mbit:g} Mbit/s/server, "
             f"{p.cluster_rps:g} req/s: per-node load {min(rps, default=0):.0f}-"
             f"{max(rps, default=0):.0f} req/s, worst p95 {worst:.0f} ms")


def _migration_points(state: Any, ips: list[str], shaper: Any, points: list[BwPoint],
                      wr: Any, migration_rows: int, total: int,
                      echo: Callable[[str], None]) -> None:
    from elastore.lab import lab
    from elastore.lab.cassandra import ensure_jars, nodetool, streaming_outgoing_bytes
    from elastore.lab.profile import DEFAULT_STREAM_MIBPS, settle

    lib = ensure_jars()
    if "mig" not in lab.cql(state, "keyspaces"):
        echo(f"writing {migration_rows} rows of 10 KiB (RF 2) for the rebuilds to stream ...")
        lab.cql(state, "write", "mig", str(migration_rows), str(VALUE_BYTES), "13", "2",
                timeout=1800)
    settle(state, lib, nodetool, echo)
    for n in state.nodes:  # Cassandra's default: far above every capped class
        lab.set_stream_throughput(n.n, DEFAULT_STREAM_MIBPS)
    for k, p in enumerate(points):
        for ip in ips:
            shaper.set_rates(ip, client_mbit=5000.0, storage_mbit=p.mbit)
        target = state.nodes[k % len(state.nodes)]
        handles = {n.spec.ip: shaper.nodes[n.spec.ip].storage for n in state.nodes}
        before = {n.spec.ip: streaming_outgoing_bytes(state.netns, n.spec) for n in state.nodes}
        sampler = BusySampler(shaper, handles, 0.5 * p.mbit)
        t0 = time.monotonic()
        with sampler:
            res = nodetool(state.node_ns(target), lib, target.spec.jmx_port, "rebuild",
                           "-ks", "mig", timeout=3600)
        busy, wire = sampler.busy_s, sampler.wire_bytes
        secs = time.monotonic() - t0
        if res.returncode != 0:
            raise ElastoreError(f"nodetool rebuild on node {target.n}: "
                                f"{(res.stdout + res.stderr).strip()[-300:]}")
        after = {n.spec.ip: streaming_outgoing_bytes(state.netns, n.spec) for n in state.nodes}
        if any(v is None for v in [*before.values(), *after.values()]):
            raise ElastoreError("a node's exporter did not answer: the streamed bytes of this "
                                "rebuild are unknown (never read as 0)")
        rows = []
        for ip in handles:
            if ip == target.spec.ip:
                continue
            mib = bytes_to_mib(float(after[ip] or 0) - float(before[ip] or 0))
            rows.append({"kind": "migration", "point": p.index, "migration_mbit": p.mbit,
                         "node": ip, "busy_s": round(busy[ip], 2),
                         "streamed_mib": round(mib, 4),
                         "wire_mbit": round(wire[ip] * 8 / 1e6 / busy[ip], 3) if busy[ip]
                         else 0.0, "rebuild_s": round(secs, 2)})
        wr.write(rows)
        speeds = ", ".join(f"{r['node']} {r['streamed_mib']:.1f} MiB in {r['busy_s']:.0f} s"
                           for r in rows)
        echo(f"[{p.index + 1}/{total}] storage class {p.mbit:g} Mbit/s/server: rebuild of "
             f"node {target.n} took {secs:.0f} s; {speeds}")

