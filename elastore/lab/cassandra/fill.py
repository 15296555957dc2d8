"""Filling the lab's disks with real CQL writes: a bulk load, or a steady writer.

Runs *inside* the lab namespace (the nodes' addresses are only reachable there):

    python -m elastore.lab.cassandra.fill HOSTS KEYSPACE RF VALUE_BYTES SEED FIRST_KEY \\
        bulk ROWS              # ROWS rows as fast as the store takes them, CL ALL, then exit
    python -m elastore.lab.cassandra.fill HOSTS KEYSPACE RF VALUE_BYTES SEED FIRST_KEY \\
        steady BYTES_PER_S     # new rows at that rate (Poisson-free, evenly), CL ONE,
                               # until SIGTERM

Values are incompressible (seeded random bytes, :func:`elastore.lab.cassandra.cql.value_for`)
and every row is a new key, so the data grows by what is written, times the RF. The table
(``KEYSPACE.kv``) is created with Unified compaction (Cassandra 5.0's) and
``memtable_flush_period_in_ms``: its memtables are flushed every ``FLUSH_PERIOD_MS`` by the
store itself, so the node's Load (live SSTables only: a memtable is not in it) follows the
writes within that period, without a ``nodetool flush`` (a JVM start, 1.5-2 s of CPU) per
node every few seconds.

Each mode prints one JSON line when connected (``{"ready": true}``) and one when done:
rows and bytes written, errors, seconds. :class:`Filler` runs the steady writer from the
host and stops it by its PID.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

#: the table's memtables are flushed this often by Cassandra itself
FLUSH_PERIOD_MS = 2000
#: the steady writer's writes in flight at most (a slow store is not buried in requests)
MAX_IN_FLIGHT = 32


def schema(keyspace: str, rf: int) -> list[str]:
    return [f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}",
            f"CREATE TABLE IF NOT EXISTS {keyspace}.kv (k bigint PRIMARY KEY, v blob) WITH "
            "compaction = {'class': 'UnifiedCompactionStrategy'} AND "
            f"memtable_flush_period_in_ms = {FLUSH_PERIOD_MS}"]


def _say(doc: dict[str, Any]) -> None:
    print(json.dumps(doc), flush=True)


def main() -> None:
    from cassandra import ConsistencyLevel
    from cassandra.concurrent import execute_concurrent_with_args

    from elastore.lab.cassandra.cql import schema_change, session, value_for

    hosts, ks = sys.argv[1].split(","), sys.argv[2]
    rf, size, seed, first = (int(x) for x in sys.argv[3:7])
    mode, amount = sys.argv[7], float(sys.argv[8])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster, s = session(hosts)
    try:
        for stmt in schema(ks, rf):
            schema_change(s, stmt)
        ins = s.prepare(f"INSERT INTO {ks}.kv (k, v) VALUES (?, ?)")
        _say({"ready": True})
        t0 = time.monotonic()
        if mode == "bulk":
            ins.consistency_level = ConsistencyLevel.ALL
            rows = int(amount)
            for i in range(first, first + rows, 200):
                batch = [(k, value_for(seed, k, size)) for k in range(i, min(i + 200,
                                                                             first + rows))]
                res = execute_concurrent_with_args(s, ins, batch, concurrency=32,
                                                   raise_on_first_error=True)
                assert all(ok for ok, _ in res)
            _say({"rows": rows, "bytes": rows * size, "errors": 0,
                  "seconds": round(time.monotonic() - t0, 2)})
            return
        if mode != "steady" or not amount > 0:
            raise SystemExit(f"unknown mode {mode!r} or a rate that is not > 0")
        ins.consistency_level = ConsistencyLevel.ONE
        per_s = amount / size  # rows a second
        lock = threading.Lock()
        counts = {"issued": 0, "done": 0, "errors": 0, "in_flight": 0}

        def finished(_: Any = None, failed: bool = False) -> None:
            with lock:
                counts["in_flight"] -= 1
                counts["errors" if failed else "done"] += 1

        while not stop.is_set():
            due = int(per_s * (time.monotonic() - t0)) - counts["issued"]
            for _ in range(max(0, due)):
                with lock:
                    if counts["in_flight"] >= MAX_IN_FLIGHT:
                        break  # the store is behind: the rest waits for the next tick
                    counts["in_flight"] += 1
                    k = first + counts["issued"]
                    counts["issued"] += 1
                fut = s.execute_async(ins, (k, value_for(seed, k, size)))
                fut.add_callbacks(finished, lambda _e: finished(failed=True))
            stop.wait(0.05)
        end = time.monotonic() + 10
        while counts["in_flight"] > 0 and time.monotonic() < end:
            time.sleep(0.05)
        _say({"rows": counts["done"], "bytes": counts["done"] * size,
              "errors": counts["errors"], "seconds": round(time.monotonic() - t0, 2),
              "last_key": first + counts["issued"] - 1})
    finally:
        cluster.shutdown()


def bulk(netns_name: str, hosts: list[str], keyspace: str, rf: int, value_bytes: int,
         seed: int, rows: int, first_key: int = 0, timeout_s: float = 300) -> dict[str, Any]:
    """Write ``rows`` rows at CL ALL from inside the namespace; the writer's summary."""
    from elastore.errors import ElastoreError
    from elastore.lab import netns

    argv = [sys.executable, "-m", "elastore.lab.cassandra.fill", ",".join(hosts), keyspace,
            str(rf), str(value_bytes), str(seed), str(first_key), "bulk", str(rows)]
    res = subprocess.run(netns.command(netns_name, argv), capture_output=True, text=True,
                         timeout=timeout_s, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"the bulk writer exited {res.returncode}: "
                            f"{(res.stdout + res.stderr).strip()[-800:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


class Filler:
    """The steady writer, started inside the lab's namespace from the host; stopped by its
    PID (``ip netns exec`` execs Python, so the PID is the writer's own)."""

    def __init__(self, netns_name: str, hosts: list[str], keyspace: str, rf: int,
                 value_bytes: int, seed: int, first_key: int, bytes_per_s: float,
                 log: Path) -> None:
        from elastore.lab import netns

        self.log = log
        self._out: IO[str] = log.open("w")
        argv = [sys.executable, "-m", "elastore.lab.cassandra.fill", ",".join(hosts),
                keyspace, str(rf), str(value_bytes), str(seed), str(first_key), "steady",
                f"{bytes_per_s:.3f}"]
        self.proc = subprocess.Popen(netns.command(netns_name, argv), stdout=self._out,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.summary: dict[str, Any] | None = None

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def wait_ready(self, timeout_s: float = 60) -> None:
        from elastore.errors import ElastoreError

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if any(x.get("ready") for x in self.lines()):
                return
            if self.proc.poll() is not None:
                raise ElastoreError(f"the writer exited {self.proc.returncode}: "
                                    f"{self.log.read_text()[-800:]}")
            time.sleep(0.2)
        raise ElastoreError(f"the writer was not connected after {timeout_s:.0f} s: "
                            f"{self.log.read_text()[-800:]}")

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 30) -> dict[str, Any]:
        """SIGTERM to the writer's PID; its summary (rows, bytes, errors, seconds)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()
        done = [x for x in self.lines() if "rows" in x]
        self.summary = done[-1] if done else {}
        return self.summary


if __name__ == "__main__":
    main()
