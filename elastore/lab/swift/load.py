"""The load generator's Swift client: object GETs and PUTs through the proxy, over HTTP
(or HTTPS and a token, for a user's own Swift).

The same open-loop engine as for Cassandra (:func:`elastore.lab.loadgen.replay`): the same
workload files, schedule, keys by popularity and 10 KiB incompressible values, latency
from the scheduled time. Key k is object ``k<k>`` in container ``wiki`` of the lab's
account. Each client thread keeps one HTTP/1.1 connection to the proxy (as
python-swiftclient does); a request that fails (a connection error, a timeout, any status
but 200 for a GET or 201 for a PUT) counts as an error, never as an answer.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError
from elastore.lab.loadgen import PRELOAD_CONCURRENCY, PRELOAD_ROUNDS, replay, value_table
from elastore.traces.workload import Workload

log = logging.getLogger("elastore.load")
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SwiftEndpoint:
    """Where a user's Swift is: its proxy (host:port), whether over TLS, and the account."""

    proxy: str
    account: str
    tls: bool = False


def parse_storage_url(url: str) -> SwiftEndpoint:
    """A Swift storage URL as ``swift stat -v`` prints it, ``http[s]://HOST[:PORT]/v1/
    ACCOUNT``, into its parts; anything else is a clear error."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    parts = [x for x in u.path.split("/") if x]
    if u.scheme not in ("http", "https") or not u.hostname or len(parts) != 2 \
            or parts[0] != "v1" or u.query or u.fragment:
        raise ElastoreError(f"--swift-url {url!r}: want a storage URL "
                            "http[s]://HOST[:PORT]/v1/ACCOUNT (as 'swift stat -v' prints it)")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise ElastoreError(f"--swift-url {url!r}: the port is not a number") from None
    return SwiftEndpoint(f"{u.hostname}:{port}", parts[1], u.scheme == "https")


class SwiftClient:
    """One keep-alive connection per thread to ``proxy`` (host:port); with ``token``, every
    request carries it as ``X-Auth-Token`` (a user's Swift; the lab's has no auth)."""

    def __init__(self, proxy: str, account: str, container: str, *, token: str | None = None,
                 tls: bool = False) -> None:
        self.host, port = proxy.rsplit(":", 1)
        self.port = int(port)
        self.base = f"/v1/{account}/{container}"
        self.local = threading.local()
        self.token, self.tls = token, tls

    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self.local, "conn", None)
        if c is None:
            cls = http.client.HTTPSConnection if self.tls else http.client.HTTPConnection
            c = self.local.conn = cls(self.host, self.port, timeout=TIMEOUT_S)
        return c

    def request(self, method: str, path: str, body: bytes | None = None
                ) -> tuple[int, bytes]:
        """(status, body); a connection that failed is dropped (the next request opens a
        new one) and the error raised."""
        c = self._conn()
        try:
            headers = {"Content-Length": str(len(body))} if body is not None else {}
            if self.token:
                headers["X-Auth-Token"] = self.token
            c.request(method, path, body=body, headers=headers)
            res = c.getresponse()
            data = res.read()
            if res.getheader("connection", "").lower() == "close":
                self.close()
            return res.status, data
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
            self.local.conn = None

    def obj(self, k: int) -> str:
        return f"{self.base}/k{k}"

    def ensure_container(self) -> None:
        status, body = self.request("PUT", self.base, b"")
        if status not in (201, 202):
            raise ElastoreError(f"creating container {self.base} on the Swift proxy "
                                f"{self.host}:{self.port}: HTTP {status} {body[:200]!r}")


def preload(client: SwiftClient, values: list[bytes], n_keys: int, concurrency: int) -> None:
    """PUT every key, retrying the failed ones; a key that still fails after
    :data:`PRELOAD_ROUNDS` rounds is an error."""
    log.info("preloading %d objects of %d bytes ...", n_keys, len(values[0]))
    todo = list(range(n_keys))
    last = ""
    for attempt in range(1, PRELOAD_ROUNDS + 1):
        def put(k: int) -> bool:
            nonlocal last
            try:
                status, _ = client.request("PUT", client.obj(k), values[k % len(values)])
            except (OSError, http.client.HTTPException) as exc:
                last = str(exc)
                return False
            if status != 201:
                last = f"HTTP {status}"
            return status == 201
        with ThreadPoolExecutor(max_workers=concurrency) as ex:
            ok = list(ex.map(put, todo))
        todo = [k for k, good in zip(todo, ok, strict=True) if not good]
        if not todo:
            return
        log.warning("preload round %d: %d objects failed (%s); retrying them", attempt,
                    len(todo), last)
        time.sleep(2.0 * attempt)
    raise ElastoreError(f"preloading: {len(todo)} of {n_keys} PUTs still failed after "
                        f"{PRELOAD_ROUNDS} rounds: {last}")


def run(wl: Workload, proxy: str, account: str, out_csv: Path, *, container: str = "wiki",
        concurrency: int = 50, rate_scale: float = 1.0, windows: slice = slice(None),
        preload_keys: bool = True, metrics_addr: str | None = None, seed: int = 0,
        on_start: Callable[[float], None] | None = None, token: str | None = None,
        tls: bool = False) -> list[dict[str, Any]]:
    """Replay ``wl`` against the Swift proxy at ``proxy`` (host:port); ``token`` and ``tls``
    for a user's own Swift."""
    if concurrency < 1:
        raise ElastoreError("concurrency must be >= 1")
    client = SwiftClient(proxy, account, container, token=token, tls=tls)
    values = value_table(len(wl.keys), seed)
    try:
        client.ensure_container()
    except (OSError, http.client.HTTPException) as exc:
        raise ElastoreError(f"the Swift proxy at {proxy} does not answer: {exc}") from exc
    if preload_keys:
        preload(client, values, len(wl.keys), min(concurrency, PRELOAD_CONCURRENCY))
    pool = ThreadPoolExecutor(max_workers=concurrency)

    def one(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
        try:
            if is_write:
                status, _ = client.request("PUT", client.obj(k), values[k % len(values)])
                ok = status == 201
            else:
                status, body = client.request("GET", client.obj(k))
                ok = status == 200 and len(body) == len(values[k % len(values)])
        except (OSError, http.client.HTTPException):
            ok = False
        done(ok, proxy)

    def submit(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
        pool.submit(one, k, is_write, done)

    try:
        return replay(wl, out_csv, submit, concurrency=concurrency, rate_scale=rate_scale,
                      windows=windows, metrics_addr=metrics_addr, seed=seed,
                      on_start=on_start)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def verify(n_keys: int, proxy: str, account: str, *, container: str = "wiki", seed: int = 0,
           concurrency: int = 16) -> dict[str, Any]:
    """GET every key's object and compare it, byte for byte, with what the load generator
    writes for that key (:func:`elastore.lab.loadgen.value_table`); count the container's
    listing. Nothing lost means ``missing``, ``corrupt`` and ``failed`` are empty and
    ``listed`` is ``n_keys``."""
    import hashlib

    client = SwiftClient(proxy, account, container)
    values = value_table(n_keys, seed)
    missing: list[int] = []
    corrupt: list[int] = []
    failed: list[str] = []
    lock = threading.Lock()

    def check(k: int) -> None:
        try:
            status, body = client.request("GET", client.obj(k))
        except (OSError, http.client.HTTPException) as exc:
            with lock:
                failed.append(f"k{k}: {exc}")
            return
        with lock:
            if status == 404:
                missing.append(k)
            elif status != 200:
                failed.append(f"k{k}: HTTP {status}")
            elif hashlib.md5(body).digest() != hashlib.md5(values[k % len(values)]).digest():
                corrupt.append(k)

    with ThreadPoolExecutor(max_workers=concurrency) as ex:
        list(ex.map(check, range(n_keys)))
    listed = 0
    marker = ""
    while True:  # the listing pages by 10000
        status, body = client.request("GET", f"{client.base}?format=json&marker={marker}")
        if status != 200:
            failed.append(f"listing: HTTP {status}")
            break
        page = json.loads(body)
        if not page:
            break
        listed += len(page)
        marker = page[-1]["name"]
    return {"keys": n_keys, "listed": listed, "ok": n_keys - len(missing) - len(corrupt)
            - len(failed), "missing": sorted(missing), "corrupt": sorted(corrupt),
            "failed": failed}


def bulk_value(i: int, size: int) -> bytes:
    """Bulk object ``b<i>``'s bytes: incompressible, deterministic (so a check can recompute
    them)."""
    import numpy as np

    return np.random.default_rng([7, i]).bytes(size)


def write_bulk(proxy: str, account: str, n: int, size: int, *, container: str = "bulk",
               concurrency: int = 8) -> float:
    """PUT ``n`` objects of ``size`` bytes (``b0`` ...) into ``container``; returns the
    seconds it took. A PUT that still fails after :data:`PRELOAD_ROUNDS` rounds is an
    error."""
    client = SwiftClient(proxy, account, container)
    client.ensure_container()
    t0 = time.monotonic()
    todo = list(range(n))
    last = ""
    for attempt in range(1, PRELOAD_ROUNDS + 1):
        def put(i: int) -> bool:
            nonlocal last
            try:
                status, _ = client.request("PUT", f"{client.base}/b{i}", bulk_value(i, size))
            except (OSError, http.client.HTTPException) as exc:
                last = str(exc)
                return False
            last = "" if status == 201 else f"HTTP {status}"
            return status == 201
        with ThreadPoolExecutor(max_workers=concurrency) as ex:
            ok = list(ex.map(put, todo))
        todo = [i for i, good in zip(todo, ok, strict=True) if not good]
        if not todo:
            return time.monotonic() - t0
        log.warning("bulk round %d: %d objects failed (%s); retrying them", attempt,
                    len(todo), last)
        time.sleep(2.0 * attempt)
    raise ElastoreError(f"bulk: {len(todo)} of {n} PUTs still failed after {PRELOAD_ROUNDS} "
                        f"rounds: {last}")


def verify_bulk(proxy: str, account: str, n: int, size: int, *, container: str = "bulk",
                concurrency: int = 8) -> dict[str, Any]:
    """Like :func:`verify`, for the objects :func:`write_bulk` wrote."""
    import hashlib

    client = SwiftClient(proxy, account, container)
    bad: list[str] = []
    lock = threading.Lock()

    def check(i: int) -> None:
        try:
            status, body = client.request("GET", f"{client.base}/b{i}")
        except (OSError, http.client.HTTPException) as exc:
            with lock:
                bad.append(f"b{i}: {exc}")
            return
        if status != 200 or hashlib.md5(body).digest() != hashlib.md5(
                bulk_value(i, size)).digest():
            with lock:
                bad.append(f"b{i}: HTTP {status}" if status != 200 else f"b{i}: corrupt")

    with ThreadPoolExecutor(max_workers=concurrency) as ex:
        list(ex.map(check, range(n)))
    status, body = client.request("GET", f"{client.base}?format=json")
    listed = len(json.loads(body)) if status == 200 else -1
    return {"objects": n, "ok": n - len(bad), "listed": listed, "bad": sorted(bad)}
