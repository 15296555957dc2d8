"""``elastore lab profile-bandwidth`` on the Cassandra lab: BwMan's two regressions, by the
plan and reduction of :mod:`elastore.lab.bwprofile`.

* **Client model**: the node's port-9042 class capped at ``B`` Mbit/s (tc ``egress``
  match); the load generator records each coordinator node's windows.
* **Migration model**: the port-7000 class capped at ``M``; a real ``nodetool rebuild`` of
  a migration keyspace on one node, which streams from the other replicas through their
  capped classes. Per sender, the MiB streamed (the node's exporter, exact once the rebuild
  has finished) over the seconds its class was busy. Cassandra's own stream throttle is
  left at its default (24 MiB/s, far above ``M``), so tc binds.
"""

from __future__ import annotations

import csv
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError
from elastore.lab.bwprofile import (
    OUT_COLUMNS,
    RAW_COLUMNS,
    VALUE_BYTES,
    BusySampler,
    BwPoint,
    _read_raw,
    points_path,
    reduce_bandwidth,
)
from elastore.lab.sweep import Appender
from elastore.units import bytes_to_mib


def run_bandwidth_profile(points: list[BwPoint], out: Path, *, point_s: float = 20.0,
                          window_s: float = 5.0, slo_ms: float = 100.0, percentile: int = 95,
                          read_ratio: float = 0.95, migration_rows: int = 9000,
                          resume: bool = False, echo: Callable[[str], None] = print) -> Path:
    """Run the sweep on the lab that is up (inside its namespace); append raw rows, then
    write the reduced curves to ``out``."""
    from elastore.actuators.tc import HtbShaper
    from elastore.lab.cassandra import lab
    from elastore.lab.host import lab_dir

    state = lab.LabState.load(lab_dir())
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
                Appender(raw_path, RAW_COLUMNS) as wr:
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
    from elastore.lab.cassandra.load import run
    from elastore.lab.loadgen import nodes_csv
    from elastore.lab.sweep import KEY_COUNT, constant_workload

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
    from elastore.lab.cassandra import lab
    from elastore.lab.cassandra.nodes import ensure_jars, nodetool, streaming_outgoing_bytes
    from elastore.lab.cassandra.profile import DEFAULT_STREAM_MIBPS, settle

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
