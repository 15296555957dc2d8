"""A bounded TCP throughput probe for measuring shaped rates inside a lab namespace.

    python -m elastore.lab.flow recv HOST PORT SECONDS   # prints one JSON line per interval
    python -m elastore.lab.flow send HOST PORT SECONDS [SOURCE_IP[:PORT]]

Both ends stop by themselves after SECONDS. Only ever run inside a namespace the lab or
the test run created, against its own 127.0.0.x addresses.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable

INTERVAL_S = 0.25
CHUNK = 64 * 1024


def recv(host: str, port: int, seconds: float) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(1)
    srv.settimeout(seconds + 5)
    print(json.dumps({"listening": True}), flush=True)
    conn, _ = srv.accept()
    conn.settimeout(1.0)
    end = time.monotonic() + seconds
    t0 = time.monotonic()
    got = 0
    while time.monotonic() < end:
        try:
            data = conn.recv(CHUNK)
        except TimeoutError:
            data = b"."
        if not data:
            break
        got += len(data)
        now = time.monotonic()
        if now - t0 >= INTERVAL_S:
            # "at": CLOCK_MONOTONIC, one clock for every process on the machine, so that
            # flows run at once are compared over the same interval
            print(json.dumps({"t": round(now - end + seconds, 3), "at": now,
                              "mbit": got * 8 / (now - t0) / 1e6}), flush=True)
            t0, got = now, 0
    conn.close()
    srv.close()


def send(host: str, port: int, seconds: float, source: str = "") -> None:
    """Send to ``host:port`` for ``seconds``; ``source`` ``IP[:PORT]`` binds the sending end
    first, e.g. ``127.0.0.2:9042`` to look like node 2 answering a client, or ``127.0.0.2``
    to look like node 2's outgoing internode connection."""
    src = None
    if source:
        ip, _, sport = source.partition(":")
        src = (ip, int(sport or 0))
    for _ in range(50):
        try:
            s = socket.create_connection((host, port), timeout=2, source_address=src)
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit(f"cannot connect to {host}:{port}")
    payload = b"\0" * CHUNK
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            s.sendall(payload)
    except OSError:
        pass
    s.close()


def measure(ns: str, host: str, port: int, seconds: float,
            during: list[tuple[float, Callable[[], object]]] | None = None,
            source: str = "", send_ns: str | None = None, absolute: bool = False
            ) -> list[tuple[float, float]]:
    """Run a receiver on ``host:port`` and a sender inside namespace ``ns`` (the sender in
    ``send_ns`` instead, if given: across a veth); return (t, Mbit/s) per 0.25 s interval,
    t in seconds since the flow began (``absolute``: the machine's monotonic clock).
    ``during``: (seconds after the start, action) to run while the flow goes on, e.g. a live
    rate change. ``source``: see :func:`send`."""
    from elastore.errors import ElastoreError
    from elastore.lab import netns

    py = [sys.executable, "-m", "elastore.lab.flow"]
    recv_p = subprocess.Popen(netns.command(ns, [*py, "recv", host, str(port), str(seconds)]),
                              stdout=subprocess.PIPE, text=True)
    send_p: subprocess.Popen[bytes] | None = None
    try:
        assert recv_p.stdout is not None
        first = recv_p.stdout.readline()
        if "listening" not in first:
            raise ElastoreError(f"throughput probe did not start in {ns}: {first!r}")
        send_p = subprocess.Popen(netns.command(send_ns or ns, [*py, "send", host, str(port),
                                                     str(seconds + 1), source]))
        t0 = time.monotonic()
        for at, action in sorted(during or [], key=lambda p: p[0]):
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            action()
        out, _ = recv_p.communicate(timeout=seconds + 20)
        send_p.wait(timeout=20)
    finally:
        for p in (recv_p, send_p):
            if p is not None and p.poll() is None:
                p.kill()
    key = "at" if absolute else "t"
    return [(d[key], d["mbit"]) for d in map(json.loads, out.splitlines()) if "mbit" in d]


def mean_rate(samples: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Mean Mbit/s over the intervals between ``lo`` and ``hi`` seconds."""
    sel = [m for t, m in samples if lo <= t <= hi]
    if len(sel) < 3:
        from elastore.errors import ElastoreError

        raise ElastoreError(f"too few throughput samples between {lo} and {hi} s: {samples}")
    return sum(sel) / len(sel)


#: the shortest interval over which flows run at once are compared, seconds
MIN_OVERLAP_S = 1.5


def concurrent_rates(ns: str, flows: list[tuple[str, int, str]], seconds: float
                     ) -> list[float]:
    """Mean Mbit/s of several flows run at once, each (receiver host, port, source),
    measured over the interval where all of them run: from 1 s after the last one began
    (past the TCP ramp-up) to the first one's end. Each flow is its own process, so on a
    loaded machine they start up to a second or more apart; a flow's own window would then
    include time it ran alone, at the whole link's rate."""
    import threading

    got: list[list[tuple[float, float]]] = [[] for _ in flows]

    def one(k: int, host: str, port: int, source: str) -> None:
        got[k] = measure(ns, host, port, seconds, source=source, absolute=True)

    threads = [threading.Thread(target=one, args=(k, *f)) for k, f in enumerate(flows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lo, hi = common_window(got)
    return [mean_rate(g, lo, hi) for g in got]


def common_window(flows: list[list[tuple[float, float]]], ramp_s: float = 1.0
                  ) -> tuple[float, float]:
    """The interval (monotonic seconds) where every flow ran, past ``ramp_s`` of TCP
    ramp-up after the last one began; each flow is its (at, Mbit/s) samples, a sample
    covering the :data:`INTERVAL_S` before its ``at``. Pure."""
    from elastore.errors import ElastoreError

    if not flows or any(not g for g in flows):
        raise ElastoreError(f"a flow returned no throughput samples: {flows}")
    lo = max(g[0][0] - INTERVAL_S for g in flows) + ramp_s
    hi = min(g[-1][0] for g in flows)
    if hi - lo < MIN_OVERLAP_S:
        raise ElastoreError(f"the {len(flows)} flows ran together for {max(0.0, hi - lo):.2f} "
                            f"s past their ramp-up, less than {MIN_OVERLAP_S} s: the machine "
                            "is too loaded to start them together")
    return lo, hi


def main() -> None:
    mode, host, port, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    if mode == "send":
        send(host, port, seconds, sys.argv[5] if len(sys.argv) > 5 else "")
    else:
        recv(host, port, seconds)


if __name__ == "__main__":
    main()
