"""The load generator's open-loop engine, whatever the store (``elastore load run``; each
store's client is its lab's ``load`` module: :mod:`elastore.lab.cassandra.load`,
:mod:`elastore.lab.swift.load`).

Requests are *scheduled* by the workload (per window, Poisson arrivals at the window's
read and write rates) and issued by at most ``concurrency`` in-flight clients (50 by
default, as in the paper's generator). When the store cannot keep up, scheduled requests
queue; latency is measured from the scheduled time, so queueing shows in it. Keys are drawn
from the workload's popularity table; values are 10 KiB of incompressible bytes.

Exports to Prometheus (prometheus-client, on the lab's loadgen address) and writes a CSV
with one row per window: scheduled and achieved rates, errors, p50/p95/p99 latency; and
beside it (``*-nodes.csv``) the same per node that answered (Cassandra's coordinator),
i.e. per server. Must run inside the lab namespace (the CLI re-enters it).
"""

from __future__ import annotations

import contextlib
import csv
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elastore.errors import ElastoreError
from elastore.traces.workload import Workload

log = logging.getLogger("elastore.load")
VALUE_BYTES = 10 * 1024


@dataclass
class WindowStats:
    index: int
    start_s: float
    scheduled: int = 0
    completed: int = 0
    errors: int = 0
    latencies_ms: list[float] | None = None

    def row(self, window_s: float) -> dict[str, Any]:
        lat = np.array(self.latencies_ms or [np.nan])
        return {
            "window": self.index, "start_s": round(self.start_s, 3),
            "scheduled_rps": round(self.scheduled / window_s, 3),
            "achieved_rps": round(self.completed / window_s, 3), "errors": self.errors,
            "p50_ms": round(float(np.nanpercentile(lat, 50)), 3),
            "p95_ms": round(float(np.nanpercentile(lat, 95)), 3),
            "p99_ms": round(float(np.nanpercentile(lat, 99)), 3),
        }


def schedule(wl: Workload, rate_scale: float, windows: slice, seed: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times (s from the start), is-write flags and window index of every request."""
    rng = np.random.default_rng(seed)
    times, writes, win = [], [], []
    idx = np.arange(len(wl.start_s))[windows]
    t0 = wl.start_s[idx[0]] if len(idx) else 0.0
    for i in idx:
        for is_write, rate in ((False, wl.read_rps[i]), (True, wl.write_rps[i])):
            if np.isnan(rate):  # a trace gap: nothing scheduled, and said so
                continue
            n = rng.poisson(rate * rate_scale * wl.window_seconds)
            t = wl.start_s[i] - t0 + np.sort(rng.uniform(0, wl.window_seconds, n))
            times.append(t)
            writes.append(np.full(n, is_write))
            win.append(np.full(n, i))
    if not times:
        raise ElastoreError("the selected windows schedule no requests")
    t = np.concatenate(times)
    order = np.argsort(t, kind="stable")
    return t[order], np.concatenate(writes)[order], np.concatenate(win)[order]


#: in-flight writes while preloading: 10 KiB rows 50 at a time overloaded a slow lab's
#: connections (the driver's ConnectionBusy, "overloaded", once timed-out requests piled up)
PRELOAD_CONCURRENCY = 16
WINDOW_GRACE_S = 3.0  # a window's gauges are set this long after its last request is issued
PRELOAD_ROUNDS = 4  # a row whose write failed is written again, this many rounds at most


#: ``submit(key, is_write, done)`` issues one request and calls ``done(ok, node)`` when it
#: completes (from any thread); ``node`` names the server that answered ("" unknown)
Submit = Callable[[int, bool, Callable[[bool, str], None]], None]


class Clock:
    """What the engine waits on: real time (``time.monotonic``, ``time.sleep``, timer
    threads). A test passes one of its own so that a busy machine moves nothing it checks:
    a late timer thread adds its lateness to every latency measured from the schedule."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def call_later(self, delay_s: float, fn: Callable[..., None], *args: Any
                   ) -> Callable[[], None]:
        """Run ``fn(*args)`` in ``delay_s`` s; returns what cancels it."""
        t = threading.Timer(delay_s, fn, args)
        t.daemon = True
        t.start()
        return t.cancel

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        return event.wait(timeout=timeout_s)


def value_table(n_keys: int, seed: int) -> list[bytes]:
    """The values written: :data:`VALUE_BYTES` incompressible bytes each, key k gets
    ``values[k % len(values)]`` (at most 4096 distinct, deterministic per seed)."""
    return [np.random.default_rng([seed, k]).bytes(VALUE_BYTES)
            for k in range(min(n_keys, 4096))]


def replay(wl: Workload, out_csv: Path, submit: Submit, *, concurrency: int = 50,
           rate_scale: float = 1.0, windows: slice = slice(None),
           metrics_addr: str | None = None, seed: int = 0,
           on_start: Callable[[float], None] | None = None,
           node_labels: Callable[[str], dict[str, str]] | None = None,
           clock: Clock | None = None) -> list[dict[str, Any]]:
    """The open-loop engine, whatever the store: schedule the workload, issue each request
    through ``submit`` at its time with at most ``concurrency`` in flight, and account
    every answer in its window (and per answering node). ``clock``: real time unless given
    (the same clock must time ``submit``'s answers)."""
    clock = clock or Clock()
    if concurrency < 1:
        raise ElastoreError("concurrency must be >= 1")
    times, is_write, win = schedule(wl, rate_scale, windows, seed)
    n_keys = len(wl.keys)
    rng = np.random.default_rng(seed + 1)
    keys = rng.choice(n_keys, size=len(times), p=wl.key_weight / wl.key_weight.sum())
    metrics = _Metrics(metrics_addr, node_labels) if metrics_addr else None
    stats: dict[int, WindowStats] = {}
    for w in np.unique(win):
        stats[int(w)] = WindowStats(int(w), float(wl.start_s[w] - wl.start_s[win[0]]), 0, 0,
                                    0, [])
    writes: dict[int, int] = {}
    for w, wr in zip(win, is_write, strict=True):
        stats[int(w)].scheduled += 1
        writes[int(w)] = writes.get(int(w), 0) + int(wr)
    # the same per node that answered (the coordinator): per-server latency
    by_node: dict[tuple[int, str], WindowStats] = {}
    slots = threading.BoundedSemaphore(concurrency)
    lock = threading.Lock()
    done = threading.Event()
    pending = [len(times)]
    start = clock.now() + 0.5
    if on_start is not None:
        on_start(start)
    log.info("replaying %d requests over %.0f s ...", len(times), times[-1])

    def finish(w: int, sched: float, ok: bool, node: str) -> None:
        lat = (clock.now() - (start + sched)) * 1000
        with lock:
            s = stats[w]
            n = by_node.get((w, node))
            if n is None:
                n = by_node[(w, node)] = WindowStats(w, s.start_s, 0, 0, 0, [])
            for st in (s, n):
                if ok:
                    st.completed += 1
                    st.latencies_ms.append(lat)  # type: ignore[union-attr]
                else:
                    st.errors += 1
            pending[0] -= 1
            if pending[0] == 0:
                done.set()
        if metrics is not None:
            metrics.observe(ok, lat, node)
        slots.release()

    def publish(w: int) -> None:
        """Window ``w``'s p95 and achieved rates (what answered within WINDOW_GRACE_S of
        its end), as gauges: a pair from one window."""
        with lock:
            s = stats[w]
            lat = list(s.latencies_ms or [])
            n = s.completed
        if metrics is None or not lat:
            return  # nothing answered: no latency, not 0
        frac = writes.get(w, 0) / max(s.scheduled, 1)
        rps = n / wl.window_seconds
        metrics.window(w, float(np.percentile(lat, 95)), rps * (1 - frac), rps * frac)

    cancels: list[Callable[[], None]] = []
    prev_w: int | None = None
    for i in range(len(times)):
        delay = start + times[i] - clock.now()
        if delay > 0:
            clock.sleep(delay)
        slots.acquire()  # open loop: a late request waits here, its latency counts it
        w = int(win[i])
        if metrics is not None and prev_w is not None and w != prev_w:
            cancels.append(clock.call_later(WINDOW_GRACE_S, publish, prev_w))
        prev_w = w
        sched = float(times[i])
        submit(int(keys[i]), bool(is_write[i]), _bind(finish, w, sched))
    clock.wait(done, 120)
    if prev_w is not None:
        publish(prev_w)
    for cancel in cancels:
        cancel()
    rows = [stats[w].row(wl.window_seconds) for w in sorted(stats)]
    _write_csv(out_csv, rows)
    if out_csv != Path("/dev/null"):
        node_rows = [{"node": node, **by_node[(w, node)].row(wl.window_seconds)}
                     for (w, node) in sorted(by_node) if node]
        for r in node_rows:
            del r["scheduled_rps"]  # scheduling is per request, not per node
        _write_csv(nodes_csv(out_csv), node_rows or [{"node": "", "window": ""}])
    return rows


def _bind(finish: Callable[[int, float, bool, str], None], w: int, sched: float
          ) -> Callable[[bool, str], None]:
    def done(ok: bool, node: str) -> None:
        finish(w, sched, ok, node)
    return done


def nodes_csv(out_csv: Path) -> Path:
    """Where :func:`replay` writes the per-coordinator-node windows, next to ``out_csv``."""
    return out_csv.with_name(out_csv.stem + "-nodes.csv")


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)


class _WindowCollector:
    """The last complete window of the schedule, its p95 and achieved rates as one pair
    from one window: a sliding 10 s straddles two of the schedule's load steps most of
    the time, and latency is convex in load, so its p95 is the higher step's, paired with
    the mean of both. Read under the lock in one go (never a p95 of one window beside the
    rates of another); nothing before the first window (no series, never 0)."""

    def __init__(self, metrics: _Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with self.metrics.lock:
            last = self.metrics.last_window
        if last is None:
            return
        index, p95, read, write = last
        yield GaugeMetricFamily("elastore_load_window", "the last complete window's index",
                                value=index)
        yield GaugeMetricFamily("elastore_load_window_p95_ms", "p95 latency (ms) of the "
                                "requests scheduled in the last complete window", value=p95)
        fam = GaugeMetricFamily("elastore_load_window_rps", "requests/s completed of those "
                                "scheduled in the last complete window", labels=["op"])
        fam.add_metric(["read"], read)
        fam.add_metric(["write"], write)
        yield fam


class _Metrics:
    """Counters and a latency histogram, plus p95/p99 gauges over the last 10 s, and the
    p95 per coordinator node (``elastore_load_node_p95_ms``: the client's latency per
    server, what an SLO border per node is learned from). ``node_labels`` names a node's
    address (``namespace`` and ``pod`` when the lab stands in for a StatefulSet's pods)."""

    def __init__(self, addr: str,
                 node_labels: Callable[[str], dict[str, str]] | None = None) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            start_http_server,
        )

        host, port = addr.rsplit(":", 1)
        self.reg = CollectorRegistry()
        self.requests = Counter("elastore_load_requests", "Requests completed", ["result"],
                                registry=self.reg)
        self.latency = Histogram("elastore_load_latency_seconds", "Request latency from the "
                                 "scheduled time", buckets=(.002, .005, .01, .02, .03, .05, .1,
                                                            .2, .5, 1, 2, 5), registry=self.reg)
        self.p95 = Gauge("elastore_load_p95_ms", "p95 latency over the last 10 s",
                         registry=self.reg)
        self.p99 = Gauge("elastore_load_p99_ms", "p99 latency over the last 10 s",
                         registry=self.reg)
        self.node_p95 = Gauge("elastore_load_node_p95_ms", "p95 latency over the last 10 s "
                              "of the requests each node coordinated",
                              ["node", "namespace", "pod"], registry=self.reg)
        # the last complete window of the schedule: its p95 and its achieved rates, one
        # pair from one window (a sliding 10 s straddles two of the schedule's load steps
        # most of the time, and latency is convex in load: its p95 is the higher step's,
        # paired with the mean of both)
        self.last_window: tuple[int, float, float, float] | None = None
        self.reg.register(_WindowCollector(self))
        self.node_labels = node_labels
        self.recent: deque[tuple[float, float]] = deque()
        self.by_node: dict[str, deque[tuple[float, float]]] = {}
        self.lock = threading.Lock()
        start_http_server(int(port), addr=host, registry=self.reg)
        threading.Thread(target=self._refresh, daemon=True).start()

    def window(self, index: int, p95_ms: float, read_rps: float, write_rps: float) -> None:
        with self.lock:
            self.last_window = (index, p95_ms, read_rps, write_rps)

    def observe(self, ok: bool, lat_ms: float, node: str = "") -> None:
        self.requests.labels("ok" if ok else "error").inc()
        if ok:
            self.latency.observe(lat_ms / 1000)
            now = time.monotonic()
            with self.lock:
                self.recent.append((now, lat_ms))
                if node:
                    self.by_node.setdefault(node, deque()).append((now, lat_ms))

    def _refresh(self) -> None:
        labelled: dict[str, tuple[str, str, str]] = {}
        while True:
            time.sleep(1.0)
            now = time.monotonic()
            with self.lock:
                for q in (self.recent, *self.by_node.values()):
                    while q and now - q[0][0] > 10:
                        q.popleft()
                lat = [v for _, v in self.recent]
                per_node = {n: [v for _, v in q] for n, q in self.by_node.items()}
            if lat:
                self.p95.set(float(np.percentile(lat, 95)))
                self.p99.set(float(np.percentile(lat, 99)))
            for node, values in per_node.items():
                if node not in labelled or not labelled[node][2]:
                    extra = self.node_labels(node) if self.node_labels else {}
                    new = (node, extra.get("namespace", ""), extra.get("pod", ""))
                    if node in labelled and labelled[node] != new:  # its pod became known
                        with contextlib.suppress(KeyError):
                            self.node_p95.remove(*labelled[node])
                    labelled[node] = new
                if values:
                    self.node_p95.labels(*labelled[node]).set(float(np.percentile(values, 95)))
                else:  # nothing coordinated for 10 s: no latency, not 0
                    with contextlib.suppress(KeyError):
                        self.node_p95.remove(*labelled[node])
                    with self.lock:
                        if not self.by_node.get(node):
                            self.by_node.pop(node, None)
