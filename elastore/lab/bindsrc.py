"""The ``bindsrc`` LD_PRELOAD shim (``native/bindsrc.c``): every lab node's outgoing
connections leave from the node's own address, as from a host of its own, so tc can tell
the nodes apart (the Cassandra lab's JVMs and the Swift lab's servers and rsync daemons)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from elastore.errors import ElastoreError
from elastore.lab.host import cache_dir

BINDSRC_SOURCE = Path(__file__).resolve().parent / "native" / "bindsrc.c"


def ensure_bindsrc() -> Path:
    """The ``bindsrc`` LD_PRELOAD shim (``native/bindsrc.c``), compiled once into the cache,
    keyed by the source's hash.

    Cassandra binds its listening sockets to the node's address but not its outgoing ones,
    so in the lab every internode connection would leave from 127.0.0.1 and no packet would
    say which node sent it (measured: a bootstrap's 15.6 MiB of streaming all came from
    127.0.0.1). On separate hosts the source is the sender's own address; the shim makes
    each node's outgoing sockets bind to its address first, so tc can give every node its
    own NIC (BwMan splits a *server's* bandwidth).
    """
    import hashlib

    src = BINDSRC_SOURCE.read_bytes()
    out = cache_dir() / f"bindsrc-{hashlib.sha256(src).hexdigest()[:12]}.so"
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ElastoreError("a C compiler (cc/gcc) is needed to build the lab's bindsrc shim")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(BINDSRC_SOURCE),
                          "-ldl"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"building the bindsrc shim failed: {res.stderr.strip()[-600:]}")
    tmp.replace(out)
    return out
