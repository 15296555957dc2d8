"""The load generator's Cassandra client (``elastore load run`` on the Cassandra lab):
cassandra-driver, prepared statements at consistency ONE, routed token-aware (or round
robin) from the client, through the store-neutral open-loop engine
(:func:`elastore.lab.loadgen.replay`). Key k is row ``k`` of ``<keyspace>.pages``; the
keys are written first (preloaded) unless told not to.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError
from elastore.lab.loadgen import (
    PRELOAD_CONCURRENCY,
    PRELOAD_ROUNDS,
    VALUE_BYTES,
    replay,
    value_table,
)
from elastore.traces.workload import Workload

log = logging.getLogger("elastore.load")


def _preload(session: Any, write: Any, rows: list[tuple[Any, bytes]], concurrency: int
             ) -> None:
    """Write every row, retrying the failed ones (a slow store times some out); a row that
    still fails after :data:`PRELOAD_ROUNDS` is an error naming how many and why."""
    from cassandra.concurrent import execute_concurrent_with_args

    log.info("preloading %d keys of %d bytes ...", len(rows), VALUE_BYTES)
    todo = rows
    for attempt in range(1, PRELOAD_ROUNDS + 1):
        results = execute_concurrent_with_args(session, write, todo, concurrency=concurrency,
                                               raise_on_first_error=False)
        failed = [(row, res) for row, (ok, res) in zip(todo, results, strict=True) if not ok]
        if not failed:
            return
        log.warning("preload round %d: %d of %d writes failed (%s); retrying them",
                    attempt, len(failed), len(todo), failed[0][1])
        todo = [row for row, _ in failed]
        time.sleep(2.0 * attempt)
    raise ElastoreError(f"preloading: {len(todo)} of {len(rows)} writes still failed after "
                        f"{PRELOAD_ROUNDS} rounds: {failed[0][1]}")


#: the only table the generator makes in its keyspace
OWN_TABLE = "pages"


def check_own_keyspace(session: Any, keyspace: str) -> None:
    """Refuse to write into a keyspace of a user's cluster that holds anything but the
    generator's own table: the replay writes (and overwrites) keys there."""
    rows = session.execute("SELECT table_name FROM system_schema.tables WHERE "
                           "keyspace_name = %s", (keyspace,))
    other = sorted(str(r.table_name) for r in rows if str(r.table_name) != OWN_TABLE)
    if other:
        raise ElastoreError(f"keyspace {keyspace!r} holds tables that are not the load "
                            f"generator's ({', '.join(other[:5])}): name a keyspace of its "
                            "own with --keyspace (it is created if missing)")


def run(wl: Workload, hosts: list[str], out_csv: Path, *, concurrency: int = 50,
        rate_scale: float = 1.0, windows: slice = slice(None), keyspace: str = "wiki",
        preload: bool = True, metrics_addr: str | None = None, seed: int = 0,
        rf: int = 2, on_start: Callable[[float], None] | None = None,
        routing: str = "token-aware",
        node_labels: Callable[[str], dict[str, str]] | None = None, port: int = 9042,
        username: str | None = None, password: str | None = None,
        own_keyspace_only: bool = False,
        echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Replay against Cassandra; ``on_start`` is called with the ``time.monotonic()`` at
    which the first window starts (experiments align other events with it). ``routing``:
    see :func:`elastore.lab.cassandra.cql.cluster_for`. ``own_keyspace_only`` (a user's
    cluster): refuse a ``keyspace`` that holds any table but the generator's own."""
    from cassandra import ConsistencyLevel

    from elastore.lab.cassandra.cql import cluster_for, schema_change

    if concurrency < 1:
        raise ElastoreError("concurrency must be >= 1")
    values = value_table(len(wl.keys), seed)
    cluster = cluster_for(hosts, routing, port=port, username=username, password=password)
    try:
        session = cluster.connect()
    except Exception as exc:  # the driver's NoHostAvailable, AuthenticationFailed, ...
        cluster.shutdown()
        raise ElastoreError(f"cannot connect to Cassandra at {', '.join(hosts)} port {port}: "
                            f"{exc}") from exc
    try:
        if own_keyspace_only:
            check_own_keyspace(session, keyspace)
        if echo is not None and preload:
            echo(f"writing {len(wl.keys):,} keys of {VALUE_BYTES / 1024:g} KiB "
                 f"({len(wl.keys) * VALUE_BYTES / 2**20:,.0f} MiB before replication) to "
                 f"{keyspace}.pages (replication factor {rf}) ...")
        schema_change(session, f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
                      f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}")
        schema_change(session, f"CREATE TABLE IF NOT EXISTS {keyspace}.pages "
                      "(k bigint PRIMARY KEY, v blob)")
        read = session.prepare(f"SELECT v FROM {keyspace}.pages WHERE k = ?")
        write = session.prepare(f"INSERT INTO {keyspace}.pages (k, v) VALUES (?, ?)")
        read.consistency_level = write.consistency_level = ConsistencyLevel.ONE
        if preload:
            _preload(session, write,
                     [(k, values[k % len(values)]) for k in range(len(wl.keys))],
                     min(concurrency, PRELOAD_CONCURRENCY))

        def submit(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
            if is_write:
                fut = session.execute_async(write, (k, values[k % len(values)]))
            else:
                fut = session.execute_async(read, (k,))

            def node() -> str:
                host = getattr(fut, "coordinator_host", None) or getattr(
                    fut, "_current_host", None)
                return str(getattr(host, "address", "") or "unknown")

            fut.add_callbacks(lambda _r: done(True, node()), lambda _e: done(False, node()))

        return replay(wl, out_csv, submit, concurrency=concurrency, rate_scale=rate_scale,
                      windows=windows, metrics_addr=metrics_addr, seed=seed,
                      on_start=on_start, node_labels=node_labels)
    finally:
        cluster.shutdown()
