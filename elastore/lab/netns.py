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
