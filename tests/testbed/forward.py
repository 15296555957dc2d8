"""A TCP forwarder from this namespace's loopback into a lab namespace's loopback.

The lab's Prometheus listens on 127.0.0.1:9090 *inside* its namespace; a process outside
(the operator under test) cannot reach it. :class:`Forwarder` listens on 127.0.0.1 here and,
for every connection, starts ``ip netns exec NS python forward.py connect
HOST:PORT``, which connects inside the namespace and relays stdin/stdout; two threads pump
the bytes. Only loopback addresses, on both sides.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

from elastore.errors import ElastoreError
from elastore.lab import netns


def _check_loopback(host: str) -> None:
    if not host.startswith("127."):
        raise ElastoreError(f"the forwarder only connects to loopback addresses, not {host}")


class Forwarder:
    def __init__(self, namespace: str, target: str, listen_port: int = 0) -> None:
        host, _, port = target.rpartition(":")
        _check_loopback(host)
        self.namespace, self.target = namespace, f"{host}:{int(port)}"
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", listen_port))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        proc = subprocess.Popen(netns.command(self.namespace, [
            sys.executable, os.path.abspath(__file__), "connect", self.target]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        with self._lock:
            self._procs.append(proc)
        assert proc.stdin is not None and proc.stdout is not None

        def up() -> None:
            _pump_from_socket(conn, proc.stdin)

        t = threading.Thread(target=up, daemon=True)
        t.start()
        _pump_to_socket(proc.stdout, conn)
        t.join(timeout=5)
        conn.close()
        proc.wait(timeout=5)
        with self._lock:
            self._procs.remove(proc)

    def close(self) -> None:
        """Stop listening and end every relay this forwarder started (by PID)."""
        self._stop.set()
        self.sock.close()
        with self._lock:
            for p in self._procs:
                if p.poll() is None:
                    p.kill()


def _pump_from_socket(conn: socket.socket, out: IO[bytes] | None) -> None:
    assert out is not None
    try:
        while data := conn.recv(65536):
            out.write(data)
            out.flush()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            out.close()


def _pump_to_socket(src: IO[bytes] | None, conn: socket.socket) -> None:
    assert src is not None
    try:
        while data := src.read1(65536):  # type: ignore[attr-defined]
            conn.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)


def connect(target: str) -> None:
    """Inside the namespace: relay stdin to ``target`` and ``target`` to stdout."""
    host, _, port = target.rpartition(":")
    _check_loopback(host)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.settimeout(None)

    def up() -> None:
        try:
            while data := os.read(0, 65536):
                s.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=up, daemon=True)
    t.start()
    try:
        while data := s.recv(65536):
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
    except OSError:
        pass
    t.join(timeout=5)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "connect":
        raise SystemExit("usage: python forward.py connect HOST:PORT")
    connect(sys.argv[2])


def _listen_in(namespace: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on ``host``:``port`` *inside* ``namespace`` (an address of that
    namespace, which the run created): this thread enters
    the namespace (``setns`` acts on the calling thread only), creates the socket (a socket
    keeps the namespace it was made in) and returns to its own."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    clone_newnet = 0x40000000
    own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(target, clone_newnet) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen(16)
        finally:
            if libc.setns(own, clone_newnet) != 0:  # never leave this thread elsewhere
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)
    return s


class ReverseForwarder:
    """The other way: listens on 127.0.0.1:``listen_port`` inside ``namespace`` and relays
    every connection to ``target`` (a loopback address of *this* namespace), e.g. so the
    lab's Prometheus can scrape the node agent under test. It connects to loopback only; it
    listens on the namespace's loopback, or on ``listen_host``, another address of that
    namespace (the real node's API address: testbed.node)."""

    def __init__(self, namespace: str, listen_port: int, target: str,
                 listen_host: str = "127.0.0.1") -> None:
        host, _, port = target.rpartition(":")
        _check_loopback(host)
        self.target = (host, int(port))
        result: list[socket.socket | BaseException] = []

        def make() -> None:  # in a thread of its own: setns must not touch the caller's
            try:
                result.append(_listen_in(namespace, listen_port, listen_host))
            except BaseException as exc:
                result.append(exc)

        t = threading.Thread(target=make)
        t.start()
        t.join()
        if isinstance(result[0], BaseException):
            raise result[0]
        self.sock = result[0]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            out = socket.create_connection(self.target, timeout=10)
        except OSError:
            conn.close()
            return
        out.settimeout(None)

        def pump(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(conn, out), daemon=True)
        t.start()
        pump(out, conn)
        t.join(timeout=5)
        conn.close()
        out.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def _socket_in(namespace: str) -> socket.socket:
    """An unconnected TCP socket made *inside* ``namespace`` (it keeps that namespace:
    connecting it reaches that namespace's addresses). Made in a thread of its own, as
    ``setns`` acts on the calling thread."""
    import ctypes

    result: list[socket.socket | BaseException] = []

    def make() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        clone_newnet = 0x40000000
        own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(target, clone_newnet) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {namespace}")
            try:
                result.append(socket.socket())
            finally:
                if libc.setns(own, clone_newnet) != 0:
                    raise OSError(ctypes.get_errno(), "setns back")
        except BaseException as exc:
            result.append(exc)
        finally:
            os.close(own)
            os.close(target)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


class ConnectProxy:
    """An HTTP CONNECT proxy on a unix socket (``path``) whose connections are made
    *inside* ``namespace``: the API server's egress to a real node (testbed.node), as
    konnectivity is in a real cluster. The API server dials the kubelet (exec, logs) and
    pods at addresses that exist only in the node's namespace; routed from here they would
    take the machine's default route off the machine. ``allowed(host)`` says which
    addresses may be asked for; any other is refused (403) and never dialled."""

    def __init__(self, namespace: str, allowed: Callable[[str], bool], path: str) -> None:
        self.namespace, self.allowed, self.path = namespace, allowed, path
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)  # the API server's egress takes TLS over TCP, a unix socket bare
        os.chmod(path, 0o600)
        self.sock.listen(32)
        self.refused: list[str] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 16384:
                chunk = conn.recv(4096)
                if not chunk:
                    conn.close()
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            host, _, port = (line[1] if len(line) >= 2 else "").rpartition(":")
            if len(line) < 2 or line[0] != "CONNECT" or not port.isdigit() \
                    or not self.allowed(host):
                self.refused.append(" ".join(line[:2]))
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                conn.close()
                return
            out = _socket_in(self.namespace)
            out.settimeout(10)
            try:
                out.connect((host, int(port)))
            except OSError:
                out.close()
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                conn.close()
                return
            out.settimeout(None)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                out.sendall(rest)
        except OSError:
            conn.close()
            return

        def pump(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(conn, out), daemon=True)
        t.start()
        pump(out, conn)
        t.join(timeout=5)
        conn.close()
        out.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
