"""``elastore lab profile-bandwidth``, whatever the store: BwMan's two regressions measured
on the real lab. Each store's sweep is its lab's (:mod:`elastore.lab.cassandra.bwprofile`,
:mod:`elastore.lab.swift.profile`); what they share is here: the plan, the sampler of the
tc classes' busy time, and the reduction of the raw points to the two curves.

The reference text (5.2.1) trains both offline by *shaping* bandwidth and measuring:

* **Client model**: for each client bandwidth ``B`` per server (the class of what a node
  sends its clients capped at ``B`` Mbit/s), load points at fractions of ``B``'s nominal
  rate (``B`` / one 10 KiB response with 7 % framing). The throughput a server serves
  within the SLO at ``B`` is the highest per-node load whose median p95 (or p99) is within
  the SLO, below the lowest load that breaks it. If no load broke it, the sweep did not
  reach the border and the value is a lower bound (said so).
* **Migration model**: for each storage bandwidth ``M`` per server (the class of what a
  node sends its peers capped at ``M``), real data movement between the nodes. Per sender,
  the MiB moved over the seconds its class was busy (tc byte counters sampled every
  0.5 s; busy: above half of ``M``).

Rows are appended to the raw file (``*-points.csv``) as points finish, so an interrupted
sweep keeps them and ``resume`` skips them; the reduced curves are written to ``out`` in the
``client_mbit,served_rps`` / ``migration_mbit,migration_mibps`` form `elastore models fit
--bandwidth` reads (each row fills one pair and leaves the other empty).
"""

from __future__ import annotations

import csv
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError

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
