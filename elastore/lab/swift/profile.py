"""``elastore lab profile-bandwidth`` on the Swift lab: BwMan's two regressions for Swift,
measured as for Cassandra (reference text 5.2.1) and reduced by the same code
(:func:`elastore.lab.bwprofile.reduce_bandwidth`), so ``elastore models fit --bandwidth``
reads them unchanged.

* **Client model**: every storage node's object-server class (port 6200, what it *sends*:
  GET responses) capped at ``B`` Mbit/s; GETs and PUTs of 10 KiB objects through the proxy at
  fractions of ``B``'s nominal rate. Per server: the cluster's achieved rate over the nodes
  (the proxy spreads GETs over each object's replicas at random: ``sorting_method =
  shuffle``), against the client's p95 (every request passes the proxy, so one latency).
* **Migration model**: every node's replication class (rsync, port 873) capped at ``M``;
  a real ring change moves the bulk data: a node is added to the rings (the others push it
  its share) and then drained (it pushes everything back). Per sender, the bytes its class
  sent over the seconds it was busy (tc counters every 0.5 s; busy: above half of ``M``).
  Swift's own rsync_bwlimit is off, so tc binds.

Also ``elastore lab profile`` on the Swift lab (:func:`run_swift_profile`): the SLO
border's samples over load and read ratio.
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
    BusySampler,
    BwPoint,
    _read_raw,
    points_path,
    reduce_bandwidth,
)
from elastore.lab.host import lab_dir
from elastore.units import bytes_to_mib

UNSHAPED_MBIT = 5000.0


def run_swift_bandwidth_profile(points: list[BwPoint], out: Path, *, point_s: float = 20.0,
                                window_s: float = 5.0, slo_ms: float = 100.0,
                                percentile: int = 95, read_ratio: float = 0.95,
                                bulk_objects: int = 200, bulk_kib: int = 1024,
                                resume: bool = False,
                                echo: Callable[[str], None] = print) -> Path:
    """Run the sweep on the Swift lab that is up (inside its namespace); append raw rows,
    then write the reduced curves to ``out``."""
    from elastore.actuators.tc import HtbShaper
    from elastore.lab.sweep import Appender
    from elastore.lab.swift import lab as swift

    state = swift.SwiftLabState.load(lab_dir())
    if state is None or len(state.nodes) < max(2, state.replicas if state else 2):
        raise ElastoreError("no Swift lab of at least 2 nodes is up: run 'elastore lab up "
                            "--store swift' first")
    if any(p.kind == "migration" for p in points) and len(state.nodes) >= swift.MAX_NODES:
        raise ElastoreError(f"the migration points add a node: the lab has "
                            f"{len(state.nodes)} of at most {swift.MAX_NODES}")
    if point_s < 2 * window_s:
        raise ElastoreError("a point must last at least two windows (one is warm-up)")
    raw_path = points_path(out)
    if (out.exists() or raw_path.exists()) and not resume:
        raise ElastoreError(f"{out} or {raw_path} exists: pass --resume to continue, or "
                            "choose another --out (nothing is overwritten)")
    done = {int(r["point"]) for r in _read_raw(raw_path)} if resume else set()
    todo = [p for p in points if p.index not in done]
    n_client = sum(p.kind == "client" for p in todo)
    echo(f"Swift bandwidth profile: {len(points)} points ({len(done)} already in "
         f"{raw_path}); {n_client} client points of {point_s:g} s, "
         f"{len(todo) - n_client} ring changes; {len(state.nodes)} nodes")
    extra = max(nd.n for nd in state.nodes) + 1
    ips = [nd.ip for nd in state.nodes] + [swift.node_ip(extra)]
    shaper = HtbShaper(state.netns, total_mbit=20000.0, match="egress", installed=True,
                       client_port=swift.OBJECT_PORT, storage_port=swift.RSYNC_PORT)
    shaper.remove()  # a stale HTB of an interrupted sweep of ours
    shaper.install(ips, client_mbit=UNSHAPED_MBIT, storage_mbit=UNSHAPED_MBIT)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="elastore-swiftbw-") as tmp, \
                Appender(raw_path, RAW_COLUMNS) as wr:
            t = Path(tmp)
            client = [p for p in todo if p.kind == "client"]
            if client:
                _client_points(len(state.nodes), ips, shaper, client, wr, t, point_s,
                               window_s, read_ratio, len(points), echo, slo_ms)
            mig = [p for p in todo if p.kind == "migration"]
            if mig:
                _migration_points(ips, shaper, mig, wr, bulk_objects, bulk_kib, len(points),
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


#: a client point whose median window p95 is this many times the SLO ends its bandwidth's
#: sweep: the proxy accepts without bound, and an overloaded point's backlog would be the
#: next point's latency
FAR_PAST = 4.0


def _settle(ips: list[str], shaper: Any, echo: Callable[[str], None],
            timeout_s: float = 120.0) -> None:
    """Unshape the links and wait until a GET through the proxy answers within 50 ms three
    times in a row: a point starts on an empty proxy, not on its predecessor's queue."""
    from elastore.lab.swift import lab as swift
    from elastore.lab.swift.load import SwiftClient

    for ip in ips:
        shaper.set_rates(ip, client_mbit=UNSHAPED_MBIT, storage_mbit=UNSHAPED_MBIT)
    client = SwiftClient(swift.PROXY_ADDR, swift.ACCOUNT, "wiki")
    t0 = time.monotonic()
    good = 0
    while good < 3:
        if time.monotonic() - t0 > timeout_s:
            raise ElastoreError(f"the Swift lab did not settle within {timeout_s:.0f} s "
                                "after a point (GETs still slower than 50 ms)")
        s = time.monotonic()
        try:
            status, _ = client.request("GET", client.obj(0))
            fast = status == 200 and time.monotonic() - s < 0.05
        except OSError:
            fast = False
        good = good + 1 if fast else 0
        time.sleep(0.5)
    if time.monotonic() - t0 > 5:
        echo(f"settled in {time.monotonic() - t0:.0f} s")


def _client_points(nodes: int, ips: list[str], shaper: Any, points: list[BwPoint], wr: Any,
                   t: Path, point_s: float, window_s: float, read_ratio: float, total: int,
                   echo: Callable[[str], None], slo_ms: float = 100.0) -> None:
    from elastore.lab.sweep import KEY_COUNT, constant_workload
    from elastore.lab.swift import lab as swift
    from elastore.lab.swift.load import run

    echo(f"preloading {KEY_COUNT} objects ...")
    run(constant_workload(1.0, 1.0, window_s, window_s), swift.PROXY_ADDR, swift.ACCOUNT,
        t / "preload.csv")
    warm = min(p.cluster_rps for p in points)
    echo(f"warming up: {point_s:g} s at {warm:g} req/s, unshaped, not recorded ...")
    run(constant_workload(warm, read_ratio, point_s, window_s), swift.PROXY_ADDR,
        swift.ACCOUNT, t / "warmup.csv", preload_keys=False)
    skip_level: float | None = None
    for p in points:
        if skip_level == p.mbit:
            echo(f"[{p.index + 1}/{total}] object class {p.mbit:g} Mbit/s/server, "
                 f"{p.cluster_rps:g} req/s: skipped (a lower load at this bandwidth was far "
                 "past the SLO)")
            continue
        _settle(ips, shaper, echo)
        for ip in ips:
            shaper.set_rates(ip, client_mbit=p.mbit, storage_mbit=UNSHAPED_MBIT)
        rows_csv = t / f"p{p.index}.csv"
        run(constant_workload(p.cluster_rps, read_ratio, point_s, window_s),
            swift.PROXY_ADDR, swift.ACCOUNT, rows_csv, preload_keys=False)
        with rows_csv.open() as fh:
            windows = [w for w in csv.DictReader(fh) if int(w["window"]) > 0]
        out = [{"kind": "client", "point": p.index, "client_mbit": p.mbit,
                "cluster_rps": p.cluster_rps, "node": "cluster", "window": w["window"],
                "node_rps": round(float(w["achieved_rps"]) / nodes, 3),
                "p95_ms": w["p95_ms"], "p99_ms": w["p99_ms"], "errors": w["errors"]}
               for w in windows]
        wr.write(out)
        worst = max((float(w["p95_ms"]) for w in windows if w["p95_ms"] != "nan"),
                    default=float("nan"))
        p95s = sorted(float(w["p95_ms"]) for w in windows if w["p95_ms"] != "nan")
        med = p95s[len(p95s) // 2] if p95s else float("inf")
        echo(f"[{p.index + 1}/{total}] object class {p.mbit:g} Mbit/s/server, "
             f"{p.cluster_rps:g} req/s ({p.cluster_rps / nodes:.0f} per server): window "
             f"p95 median {med:.0f} ms, worst {worst:.0f} ms")
        if med > FAR_PAST * slo_ms:
            skip_level = p.mbit  # its higher loads would only pile up a backlog
    _settle(ips, shaper, echo)


def _migration_points(ips: list[str], shaper: Any, points: list[BwPoint], wr: Any,
                      bulk_objects: int, bulk_kib: int, total: int,
                      echo: Callable[[str], None]) -> None:
    from elastore.lab.swift import lab as swift
    from elastore.lab.swift.load import write_bulk

    state = swift.SwiftLabState.load(lab_dir())
    assert state is not None
    for ip in ips:  # the bulk goes in unshaped, after the client points' queues drained
        shaper.set_rates(ip, client_mbit=UNSHAPED_MBIT, storage_mbit=UNSHAPED_MBIT)
    time.sleep(10)
    echo(f"writing {bulk_objects} objects of {bulk_kib} KiB for the replicators to move ...")
    write_bulk(swift.PROXY_ADDR, swift.ACCOUNT, bulk_objects, bulk_kib * 1024,
               concurrency=4)
    swift.wait_replicated(state, 600)
    for p in points:
        for ip in ips:
            shaper.set_rates(ip, client_mbit=UNSHAPED_MBIT, storage_mbit=p.mbit)
        handles = {ip: shaper.nodes[ip].storage for ip in ips}
        for step in ("add", "drain"):
            state = swift.SwiftLabState.load(lab_dir())
            assert state is not None
            sampler = BusySampler(shaper, handles, 0.5 * p.mbit)
            t0 = time.monotonic()
            with sampler:
                if step == "add":
                    nd = swift.add_node()
                else:
                    swift.drain_node(nd.n)
                state = swift.SwiftLabState.load(lab_dir())
                assert state is not None
                swift.wait_replicated(state, 3600)
            secs = time.monotonic() - t0
            rows = [{"kind": "migration", "point": p.index, "migration_mbit": p.mbit,
                     "node": ip, "busy_s": round(sampler.busy_s[ip], 2),
                     "streamed_mib": round(bytes_to_mib(sampler.wire_bytes[ip]), 4),
                     "wire_mbit": round(sampler.wire_bytes[ip] * 8 / 1e6 / sampler.busy_s[ip],
                                        3) if sampler.busy_s[ip] else 0.0,
                     "rebuild_s": round(secs, 2)}
                    for ip in ips if sampler.wire_bytes[ip] > 0]
            wr.write(rows)
            speeds = ", ".join(f"{r['node']} {r['streamed_mib']:.1f} MiB in "
                               f"{r['busy_s']:.0f} s" for r in rows if r["busy_s"])
            echo(f"[{p.index + 1}/{total}] replication class {p.mbit:g} Mbit/s/server, "
                 f"{'node ' + str(nd.n) + ' added' if step == 'add' else 'drained'}: "
                 f"{secs:.0f} s; {speeds or 'no sender busy'}")
        swift.remove_node(nd.n)


SAMPLE_COLUMNS = ["read_rps", "write_rps", "migration_mibps", "interference", "p95_ms",
                  "p99_ms", "point", "window", "nodes", "cluster_rps", "read_ratio",
                  "achieved_rps", "errors"]


def run_swift_profile(loads: list[float], read_ratios: list[float], out: Path, *,
                      point_s: float = 20.0, window_s: float = 5.0, warmup_s: float = 0.0,
                      stop_above_ms: float | None = None,
                      echo: Callable[[str], None] = print) -> Path:
    """The SLO border's samples on the Swift lab: per read ratio, loads ascending, each for
    ``point_s`` through the proxy; per window (the first of each point is warm-up), the
    load per server and the client's p95/p99, in the columns ``elastore models fit`` reads.
    No migration and no neighbour: those axes keep the prior's shape. ``stop_above_ms``
    ends a read ratio's sweep once two loads in a row had a median window p95 above it."""
    import statistics

    from elastore.lab.sweep import Appender, constant_workload
    from elastore.lab.swift import lab as swift
    from elastore.lab.swift.load import run

    state = swift.SwiftLabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no Swift lab is up: run 'elastore lab up --store swift' first")
    if point_s < 2 * window_s:
        raise ElastoreError("a point must last at least two windows (one is warm-up)")
    if out.exists():
        raise ElastoreError(f"{out} exists: choose another --out (nothing is overwritten)")
    n = len(state.nodes)
    loads = sorted(loads)
    with tempfile.TemporaryDirectory(prefix="elastore-swiftprof-") as tmp, \
            Appender(out, SAMPLE_COLUMNS) as wr:
        t = Path(tmp)
        echo("preloading the objects ...")
        run(constant_workload(1.0, 1.0, window_s, window_s), swift.PROXY_ADDR,
            swift.ACCOUNT, t / "preload.csv")
        if warmup_s > 0:
            echo(f"warming up: {warmup_s:g} s at {loads[0]:g} req/s, not recorded ...")
            run(constant_workload(loads[0], read_ratios[0], warmup_s, window_s),
                swift.PROXY_ADDR, swift.ACCOUNT, t / "warmup.csv", preload_keys=False)
        point = 0
        for rr in read_ratios:
            over = 0
            for load in loads:
                rows_csv = t / f"p{point}.csv"
                run(constant_workload(load, rr, point_s, window_s), swift.PROXY_ADDR,
                    swift.ACCOUNT, rows_csv, preload_keys=False)
                with rows_csv.open() as fh:
                    windows = [w for w in csv.DictReader(fh) if int(w["window"]) > 0
                               and w["p95_ms"] != "nan"]
                wr.write([{"read_rps": round(float(w["achieved_rps"]) * rr / n, 3),
                           "write_rps": round(float(w["achieved_rps"]) * (1 - rr) / n, 3),
                           "migration_mibps": 0.0, "interference": 0.0,
                           "p95_ms": w["p95_ms"], "p99_ms": w["p99_ms"], "point": point,
                           "window": w["window"], "nodes": n, "cluster_rps": load,
                           "read_ratio": rr, "achieved_rps": w["achieved_rps"],
                           "errors": w["errors"]} for w in windows])
                p95 = [float(w["p95_ms"]) for w in windows]
                med = statistics.median(p95) if p95 else float("nan")
                echo(f"[{point + 1}] {load:g} req/s ({load / n:.0f} per server), read ratio "
                     f"{rr:g}: p95 {min(p95, default=float('nan')):.0f}-"
                     f"{max(p95, default=float('nan')):.0f} ms (median {med:.0f})")
                point += 1
                over = over + 1 if stop_above_ms is not None and med > stop_above_ms else 0
                if over >= 2:
                    echo(f"two loads past {stop_above_ms:g} ms: the border is behind, next")
                    break
    return out
