"""The test bed's reverse forwarder: a listener inside a lab namespace relaying to a
loopback port of the test's own namespace (how the lab's Prometheus reaches a process
under test, e.g. the node agent's /metrics). Real namespaces, loopback only."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import threading

import pytest
from testbed.forward import ReverseForwarder

from elastore.lab import netns


@pytest.mark.lab
@pytest.mark.concurrent  # a relay's bytes, not its speed
def test_a_namespace_reaches_a_port_of_ours_through_the_reverse_forwarder() -> None:
    ns = f"elastore-rf-{os.getpid()}"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(f"seen_path {len(self.path)}\n".encode())

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    netns.create(ns)
    try:
        rf = ReverseForwarder(ns, 9700, f"127.0.0.1:{srv.server_address[1]}")
        try:
            for _ in range(3):  # one relay per connection, each its own
                res = subprocess.run(netns.command(ns, [
                    "curl", "-sf", "--max-time", "5", "http://127.0.0.1:9700/metrics"]),
                    capture_output=True, text=True, check=False)
                assert res.returncode == 0 and res.stdout == "seen_path 8\n", res.stderr
            # the calling thread never left its namespace: our own port answers here
            socket.create_connection(srv.server_address, timeout=2).close()
            with pytest.raises(OSError):  # and the listener is not in ours
                socket.create_connection(("127.0.0.1", 9700), timeout=2).close()
        finally:
            rf.close()
    finally:
        netns.delete(ns)
        srv.shutdown()
    with pytest.raises(Exception, match="loopback"):
        ReverseForwarder(ns, 9700, "10.0.0.1:80")
