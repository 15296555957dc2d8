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
from elastore.lab.profile import constant_workload


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
