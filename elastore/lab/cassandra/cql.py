"""CQL helpers that run *inside* the lab namespace (the nodes' 127.0.0.x addresses are
only reachable there):

    python -m elastore.lab.cassandra.cql HOSTS write KEYSPACE ROWS VALUE_BYTES SEED RF
    python -m elastore.lab.cassandra.cql HOSTS verify KEYSPACE
    python -m elastore.lab.cassandra.cql HOSTS keyspaces
    python -m elastore.lab.cassandra.cql HOSTS alter-system-rf RF

Each prints one JSON line. Values are incompressible (seeded random bytes), so streaming
really moves them.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import numpy as np


def value_for(seed: int, key: int, size: int) -> bytes:
    return np.random.default_rng([seed, key]).bytes(size)


def digest(rows: list[tuple[int, bytes]]) -> str:
    h = hashlib.sha256()
    for k, v in sorted(rows):
        h.update(k.to_bytes(8, "big"))
        h.update(hashlib.sha256(v).digest())
    return h.hexdigest()


ROUTINGS = ("token-aware", "round-robin")
#: a schema change's own timeout (the driver's default is 10 s; on a loaded machine a
#: 3-node schema agreement has taken longer, and the connection was declared defunct by
#: its heartbeat mid-statement: a CI run's load generator died on CREATE TABLE)
SCHEMA_TIMEOUT_S = 60.0
SCHEMA_ATTEMPTS = 3


def schema_change(s: Any, stmt: str, *, timeout_s: float = SCHEMA_TIMEOUT_S,
                  attempts: int = SCHEMA_ATTEMPTS) -> None:
    """Run an idempotent schema statement (``IF NOT EXISTS``, or an ``ALTER`` to a fixed
    value), retrying it on a timeout or a lost connection: such a statement may have been
    applied before its answer was lost, and running it again is harmless. The last
    failure is raised, with how many tries it was."""
    import logging
    import time

    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable

    for attempt in range(1, attempts + 1):
        try:
            result = s.execute(stmt, timeout=timeout_s)
        except (OperationTimedOut, NoHostAvailable) as exc:
            if attempt == attempts:
                from elastore.errors import ElastoreError

                raise ElastoreError(f"schema change {stmt[:60]!r}: failed {attempts} times "
                                    f"({timeout_s:.0f} s each), last: {exc}") from exc
            logging.getLogger("elastore.load").warning(
                "schema change %r: try %d of %d failed (%s); trying again",
                stmt[:60], attempt, attempts, exc)
            time.sleep(2.0 * attempt)
            continue
        _wait_for_agreement(s, result, stmt, timeout_s)
        return


def _wait_for_agreement(s: Any, result: Any, stmt: str, timeout_s: float) -> None:
    """Wait until every live node holds the schema ``stmt`` made. The driver waits 10 s
    (``max_schema_agreement_wait``) and then answers anyway: on a loaded machine a CI run's
    real-node write then prepared its INSERT on a node that had not seen CREATE TABLE
    ("table kv does not exist"). Not agreed within ``timeout_s`` more is an error."""
    future = getattr(result, "response_future", None)
    if future is None or getattr(future, "is_schema_agreed", True):
        return
    if not s.cluster.control_connection.wait_for_schema_agreement(wait_time=timeout_s):
        from elastore.errors import ElastoreError

        raise ElastoreError(f"schema change {stmt[:60]!r}: the nodes did not agree on the "
                            f"schema within {timeout_s:.0f} s after the driver's own wait")


def cluster_for(hosts: list[str], routing: str = "token-aware", *, port: int = 9042,
                username: str | None = None, password: str | None = None) -> Any:
    """A driver Cluster for the lab's nodes, with TCP_NODELAY.

    ``routing``: ``token-aware`` (the driver's production default: each request goes to a
    replica of its key, the first one while it is up: cassandra-driver 3.30 does not
    shuffle replicas by default, measured on the skew lab, docs/lab.md) or ``round-robin``
    over every node (a third
    of the reads then take an extra internode hop at RF 2 of 3 nodes, with the 10 KiB value
    crossing port 7000 twice).

    cassandra-driver 3.x leaves Nagle's algorithm on; with 10 KiB values a write then
    waits for the peer's delayed ACK, which adds ~40 ms to every write on loopback
    (measured: 8 KB inserts p50 44 ms without, 2 ms with). Production drivers set it.
    """
    import socket

    from cassandra.cluster import Cluster
    from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

    if routing not in ROUTINGS:
        from elastore.errors import ElastoreError

        raise ElastoreError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    policy = RoundRobinPolicy() if routing == "round-robin" else \
        TokenAwarePolicy(RoundRobinPolicy())
    auth = None
    if username is not None:
        from cassandra.auth import PlainTextAuthProvider

        auth = PlainTextAuthProvider(username=username, password=password or "")
    # protocol v5 is Cassandra 4.0's and later; a user's older cluster negotiates down
    return Cluster(hosts, port=port, load_balancing_policy=policy,
                   protocol_version=5, connect_timeout=20, auth_provider=auth,
                   sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def session(hosts: list[str]) -> Any:
    cluster = cluster_for(hosts)
    return cluster, cluster.connect()


def main() -> None:
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    hosts = sys.argv[1].split(",")
    cmd = sys.argv[2]
    cluster, s = session(hosts)
    try:
        if cmd == "write":
            ks, rows, size, seed, rf = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), \
                int(sys.argv[6]), int(sys.argv[7])
            schema_change(s, f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
                          f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}")
            schema_change(s, f"CREATE TABLE IF NOT EXISTS {ks}.kv (k bigint PRIMARY KEY, "
                          "v blob)")
            ins = s.prepare(f"INSERT INTO {ks}.kv (k, v) VALUES (?, ?)")
            ins.consistency_level = ConsistencyLevel.ALL
            from cassandra.concurrent import execute_concurrent_with_args

            data = [(k, value_for(seed, k, size)) for k in range(rows)]
            for i in range(0, rows, 500):
                res = execute_concurrent_with_args(s, ins, data[i : i + 500], concurrency=32,
                                                   raise_on_first_error=True)
                assert all(ok for ok, _ in res)
            out: dict[str, Any] = {"rows": rows, "checksum": digest(data)}
        elif cmd == "verify":
            ks = sys.argv[3]
            st = SimpleStatement(f"SELECT k, v FROM {ks}.kv", fetch_size=500,
                                 consistency_level=ConsistencyLevel.ALL)
            rows_read = [(int(r.k), bytes(r.v)) for r in s.execute(st, timeout=120)]
            out = {"rows": len(rows_read), "checksum": digest(rows_read)}
        elif cmd == "keyspaces":
            out = {}
            for r in s.execute("SELECT keyspace_name, replication FROM system_schema.keyspaces"):
                out[r.keyspace_name] = dict(r.replication)
        elif cmd == "alter-system-rf":
            rf = int(sys.argv[3])
            for ks in ("system_distributed", "system_traces", "system_auth"):
                schema_change(s, f"ALTER KEYSPACE {ks} WITH replication = "
                              f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}")
            out = {"system_rf": rf}
        else:
            raise SystemExit(f"unknown command {cmd!r}")
        print(json.dumps(out), flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
