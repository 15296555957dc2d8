"""Network namespaces the lab (or a test run) creates for itself.

Everything elastore shapes or starts lives in a namespace of its own: the machine's own
interfaces are never touched. Names are prefixed ``elastore-`` and removal only ever
deletes a namespace whose name has that prefix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from elastore.errors import ElastoreError

PREFIX = "elastore-"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("ip") is None:
        raise ElastoreError("the 'ip' command (iproute2) is not installed")
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def exists(name: str) -> bool:
    out = _ip("netns", "list").stdout
    return any(line.split()[0] == name for line in out.splitlines() if line.strip())


def create(name: str) -> None:
    """Create the namespace with its loopback up (127.0.0.0/8 answers on it)."""
    if not name.startswith(PREFIX):
        raise ElastoreError(f"namespace names must start with {PREFIX!r}: {name!r}")
    if os.geteuid() != 0:
        raise ElastoreError("creating a network namespace needs root (CAP_SYS_ADMIN)")
    if not exists(name):
        res = _ip("netns", "add", name)
        if res.returncode != 0:
            raise ElastoreError(f"ip netns add {name}: {res.stderr.strip()}")
    res = _ip("-n", name, "link", "set", "lo", "up")
    if res.returncode != 0:
        raise ElastoreError(f"bringing lo up in {name}: {res.stderr.strip()}")


def delete(name: str) -> None:
    """Delete one of our namespaces (never anything else)."""
    if not name.startswith(PREFIX):
        raise ElastoreError(f"refusing to delete {name!r}: not an elastore namespace")
    if exists(name):
        res = _ip("netns", "del", name)
        if res.returncode != 0:
            raise ElastoreError(f"ip netns del {name}: {res.stderr.strip()}")


def command(name: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the namespace."""
    return ["ip", "netns", "exec", name, *argv]


#: set in the environment of a command re-run inside a lab namespace (its name)
INSIDE = "ELASTORE_IN_NETNS"


def run_inside(ns: str) -> None:
    """Re-run this command line inside ``ns`` and exit with its status; return at once if
    this process already runs there (the re-run sets :data:`INSIDE`)."""
    import os
    import subprocess
    import sys

    if os.environ.get(INSIDE) == ns:
        return
    env = dict(os.environ, **{INSIDE: ns})
    argv = [sys.executable, "-m", "elastore", *sys.argv[1:]]
    raise SystemExit(subprocess.run(command(ns, argv), env=env, check=False).returncode)


#: a "host" namespace's own address (on its loopback), the source of what it sends to pods
HOST_IP = "10.250.0.1"
#: every pod's gateway: the address of each host end (Calico answers it by proxy ARP)
GATEWAY = "169.254.1.1"


def _must(ns: str, *argv: str) -> None:
    res = subprocess.run(command(ns, list(argv)), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"{' '.join(argv)} in {ns}: {res.stderr.strip()}")


def prepare_host(host: str) -> None:
    """Make ``host`` (one of ours, created) route for pods: its address on lo, forwarding
    on, no reverse-path filter (replies come back through the pods' veths)."""
    if not host.startswith(PREFIX):
        raise ElastoreError(f"refusing to configure {host!r}: not an elastore namespace")
    out = subprocess.run(command(host, ["ip", "-4", "addr", "show", "dev", "lo"]),
                         capture_output=True, text=True, check=False).stdout
    if f"{HOST_IP}/32" not in out:
        _must(host, "ip", "addr", "add", f"{HOST_IP}/32", "dev", "lo")
    for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0"):
        _must(host, "sysctl", "-qw", key)


def wire_pod(host: str, pod: str, ip: str, host_if: str) -> None:
    """Join namespace ``pod`` to ``host`` as a routed CNI does: a veth whose pod end is
    ``eth0`` with ``ip``/32 and a default route via :data:`GATEWAY`, and whose host end
    ``host_if`` the host routes ``ip``/32 to. Both namespaces must be ours."""
    for ns in (host, pod):
        if not ns.startswith(PREFIX):
            raise ElastoreError(f"refusing to wire {ns!r}: not an elastore namespace")
    _must(host, "ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0",
          "netns", pod)
    _must(host, "ip", "addr", "add", f"{GATEWAY}/32", "dev", host_if)
    _must(host, "sysctl", "-qw", f"net.ipv4.conf.{host_if}.rp_filter=0")
    _must(host, "ip", "link", "set", host_if, "up")
    _must(host, "ip", "route", "add", f"{ip}/32", "dev", host_if, "scope", "link")
    _must(pod, "ip", "addr", "add", f"{ip}/32", "dev", "eth0")
    _must(pod, "ip", "link", "set", "eth0", "up")
    _must(pod, "ip", "route", "add", GATEWAY, "dev", "eth0", "scope", "link")
    _must(pod, "ip", "route", "add", "default", "via", GATEWAY, "dev", "eth0")
