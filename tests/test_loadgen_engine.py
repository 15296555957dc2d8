"""The load generator's open-loop engine (``loadgen.replay``), store-neutral: scheduling,
per-window accounting, errors and per-node rows. The store is the unit's input here (a
``submit`` that answers in a thread); the real stores are driven in the lab suites."""

from __future__ import annotations

import csv
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastore.errors import ElastoreError
from elastore.lab.loadgen import Clock, nodes_csv, replay
from elastore.lab.sweep import constant_workload


def _store(fail_every: int = 0, delay_s: float = 0.0
           ) -> Callable[[int, bool, Callable[[bool, str], None]], None]:
    count = [0]
    lock = threading.Lock()

    def submit(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
        with lock:
            count[0] += 1
            n = count[0]
        ok = not (fail_every and n % fail_every == 0)
        node = "10.0.0.1" if k % 2 else "10.0.0.2"

        def answer() -> None:
            time.sleep(delay_s)
            done(ok, node)

        threading.Thread(target=answer, daemon=True).start()

    return submit


def test_every_scheduled_request_is_accounted_in_its_window(tmp_path: Path) -> None:
    wl = constant_workload(40.0, 0.9, 3.0, 1.0)
    out = tmp_path / "load.csv"
    rows = replay(wl, out, _store(fail_every=10, delay_s=0.01), concurrency=8, seed=3)
    assert len(rows) == 3
    sched = sum(r["scheduled_rps"] for r in rows)
    got = sum(r["achieved_rps"] for r in rows)
    errors = sum(r["errors"] for r in rows)
    assert got + errors == pytest.approx(sched)  # each answered once: ok or error
    assert errors > 0 and all(r["p95_ms"] >= 10 for r in rows)  # latency includes the wait
    with out.open() as fh:
        assert len(list(csv.DictReader(fh))) == 3
    with nodes_csv(out).open() as fh:
        nodes = {r["node"] for r in csv.DictReader(fh)}
    assert nodes == {"10.0.0.1", "10.0.0.2"}


def test_concurrency_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ElastoreError, match="concurrency"):
        replay(constant_workload(1.0, 1.0, 1.0, 1.0), tmp_path / "x.csv", _store(),
               concurrency=0)


FAST_S, SLOW_S = 0.005, 0.150


class VirtualClock(Clock):
    """Time that passes only when the engine waits: every timer (the store's answers, the
    engine's window publications) fires at its exact time, in order, in the engine's own
    thread. Nothing a busy machine does moves it."""

    def __init__(self) -> None:
        self.t = 1000.0
        self._due: list[list[Any]] = []  # [when, seq, fn, args, cancelled]
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    def call_later(self, delay_s: float, fn: Callable[..., None], *args: Any
                   ) -> Callable[[], None]:
        entry = [self.t + delay_s, next(self._seq), fn, args, False]
        heapq.heappush(self._due, entry)
        return lambda: entry.__setitem__(4, True)

    def _run(self, until: float, stop: threading.Event | None = None) -> None:
        while self._due and self._due[0][0] <= until and not (stop and stop.is_set()):
            when, _, fn, args, cancelled = heapq.heappop(self._due)
            self.t = max(self.t, when)
            if not cancelled:
                fn(*args)

    def sleep(self, seconds: float) -> None:
        until = self.t + seconds
        self._run(until)
        self.t = max(self.t, until)

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        self._run(self.t + timeout_s, event)
        return event.is_set()


def test_window_gauges_pair_one_windows_p95_with_its_own_rates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``elastore_load_window_*``: each window's p95 and read/write rates, set together once
    the window is over (what answered within the grace after its end), each window once and
    in order; the endpoint serves the last one. Load steps of 60 and 200 req/s alternate
    each 2-s window; the store answers in 5 ms at the low step and 150 ms at the high one.

    In virtual time (:class:`VirtualClock`): with real timers, a fresh-clone run on a loaded
    2-core box read 26.8 ms, and one at nice 19 beside the lab 331 ms, for a low step's p95
    (timer threads late, their lateness counted in every latency), not a window mixed up."""
    import dataclasses
    import socket
    import urllib.request

    import numpy as np

    import elastore.lab.loadgen as lg

    monkeypatch.setattr(lg, "WINDOW_GRACE_S", 0.6)  # > the slow answers' 150 ms
    published: list[tuple[int, float, float, float]] = []
    window = lg._Metrics.window

    def record(self: Any, index: int, p95_ms: float, read_rps: float, write_rps: float
               ) -> None:
        published.append((index, p95_ms, read_rps, write_rps))
        window(self, index, p95_ms, read_rps, write_rps)

    monkeypatch.setattr(lg._Metrics, "window", record)
    base = constant_workload(60.0, 0.75, 8.0, 2.0)
    steps = np.array([60.0, 200.0, 60.0, 200.0])  # a load step each 2-s window
    wl = dataclasses.replace(base, read_rps=steps * 0.75, write_rps=steps * 0.25)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    clock = VirtualClock()
    t0 = [0.0]

    def submit(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
        w = int((clock.now() - t0[0]) // 2.0)
        clock.call_later(SLOW_S if steps[w] > 100 else FAST_S, done, True, "10.0.0.1")

    # concurrency far above the ~30 in flight: a full semaphore would wait on real time
    rows = replay(wl, tmp_path / "load.csv", submit, concurrency=10_000, seed=1,
                  metrics_addr=f"127.0.0.1:{port}", clock=clock,
                  on_start=lambda s: t0.__setitem__(0, s))
    assert [w for w, *_ in published] == [0, 1, 2, 3], published  # each once, in order
    for w, p95, read, write in published:
        row = rows[w]
        assert row["scheduled_rps"] == row["achieved_rps"] > 0, rows  # all within the grace
        assert read + write == pytest.approx(row["achieved_rps"], rel=1e-6), (w, rows)
        assert read / (read + write) == pytest.approx(0.75, abs=0.1)
        assert p95 == pytest.approx(row["p95_ms"], abs=1e-3), (w, rows)
        # the window's own answers only: exactly its step's latency, never the other's
        assert p95 == pytest.approx(1000 * (SLOW_S if steps[w] > 100 else FAST_S),
                                    abs=1e-6), (w, p95)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    vals = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("elastore_load_window")}
    last = published[-1]
    assert vals["elastore_load_window"] == last[0], vals
    assert vals["elastore_load_window_p95_ms"] == pytest.approx(last[1]), vals
    assert vals['elastore_load_window_rps{op="read"}'] == pytest.approx(last[2]), vals
