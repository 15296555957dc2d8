"""The load generator's open-loop engine (``loadgen.replay``), store-neutral: scheduling,
per-window accounting, errors and per-node rows. The store is the unit's input here (a
``submit`` that answers in a thread); the real stores are driven in the lab suites."""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from elastore.errors import ElastoreError
from elastore.lab.loadgen import nodes_csv, replay
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


FAST_S, SLOW_S, JUDGE_MS = 0.005, 0.150, 60.0


def test_window_gauges_pair_one_windows_p95_with_its_own_rates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``elastore_load_window_*``: the last complete window's p95 and read/write rates, set
    together once the window is over; every value read from the endpoint during the replay
    is one window's own CSV row, never a mix of two load steps.

    The store's answer times tell the steps apart by far more than a busy machine moves
    them: 5 ms at the low step, 150 ms at the high one, judged at 60 ms. With 5 and 25 ms
    judged at 15, a fresh-clone run on a loaded 2-core box (xdist workers beside it) read
    26.8 ms for a low step: timer threads late by 20 ms, not a window mixed up."""
    import dataclasses
    import socket
    import urllib.request

    import numpy as np

    import elastore.lab.loadgen as lg

    monkeypatch.setattr(lg, "WINDOW_GRACE_S", 0.6)  # > the slow answers' 150 ms
    base = constant_workload(60.0, 0.75, 8.0, 2.0)
    steps = np.array([60.0, 200.0, 60.0, 200.0])  # a load step each 2-s window
    wl = dataclasses.replace(base, read_rps=steps * 0.75, write_rps=steps * 0.25)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    seen: dict[int, tuple[float, float, float]] = {}
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=2).read().decode()
            except OSError:
                time.sleep(0.05)
                continue
            vals = {}
            for line in text.splitlines():
                if line.startswith("elastore_load_window"):
                    name, v = line.rsplit(" ", 1)
                    vals[name] = float(v)
            if "elastore_load_window" in vals:
                seen[int(vals["elastore_load_window"])] = (
                    vals["elastore_load_window_p95_ms"],
                    vals['elastore_load_window_rps{op="read"}'],
                    vals['elastore_load_window_rps{op="write"}'])
            time.sleep(0.05)

    th = threading.Thread(target=scrape, daemon=True)
    th.start()
    # latency grows with the window's load: 5 ms at 60 req/s, 150 ms at 200 (30 in flight,
    # within the 64 allowed)
    def submit(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
        w = int((time.monotonic() - t0[0]) // 2.0)
        delay = SLOW_S if 0 <= w < 4 and steps[w] > 100 else FAST_S
        threading.Timer(delay, done, (True, "10.0.0.1")).start()

    t0 = [time.monotonic() + 0.5]
    rows = replay(wl, tmp_path / "load.csv", submit, concurrency=64, seed=1,
                  metrics_addr=f"127.0.0.1:{port}", on_start=lambda s: t0.__setitem__(0, s))
    time.sleep(0.3)
    stop.set()
    th.join(timeout=5)
    assert len(seen) >= 3, seen  # the windows were published one by one
    for w, (p95, read, write) in seen.items():
        row = rows[w]
        assert read + write == pytest.approx(row["achieved_rps"], rel=0.05), (w, seen, rows)
        assert read / (read + write) == pytest.approx(0.75, abs=0.1)
        # the window's own p95: a low step's is the low latency, never the high step's
        assert p95 == pytest.approx(row["p95_ms"], rel=0.3, abs=3), (w, seen, rows)
        if w > 0:  # (the first window's p95 holds the engine's start)
            assert (p95 > JUDGE_MS) == (steps[w] > 100), (w, p95)
    assert {1, 2, 3} <= set(seen), seen  # a low step after a high one among them
