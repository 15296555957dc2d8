"""What kwok runs for ``kubectl exec`` into a test pod: the lab's real nodetool against that
pod's Cassandra node.

kwok's ``Exec`` configuration (one per pod) runs commands *locally* with the pod's
environment: ``ELASTORE_LAB_DIR`` (the lab) and ``ELASTORE_NODE`` (its node number). The
policy's ``target.nodetool`` is ``[python, tests/testbed/podexec.py]``, so an operator's
``nodetool netstats`` through pods/exec becomes ``NodeTool -p <that node's JMX port>
netstats`` inside the lab's namespace. Output and exit status pass through unchanged.
Every call is appended to ``podexec.log`` in the lab directory (time, node, arguments), so
a test can count what the operator asked of each node.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from elastore.lab.cassandra import lab
    from elastore.lab.cassandra.nodes import JMX_BASE_PORT, ensure_jars, nodetool

    try:
        node = int(os.environ["ELASTORE_NODE"])
        d = Path(os.environ["ELASTORE_LAB_DIR"])
    except (KeyError, ValueError):
        print("podexec: ELASTORE_NODE and ELASTORE_LAB_DIR must be set", file=sys.stderr)
        return 2
    state = lab.LabState.load(d)
    if state is None:
        print(f"podexec: no lab in {d}", file=sys.stderr)
        return 2
    with (d / "podexec.log").open("a") as f:
        f.write(f"{time.time():.3f} {node} {' '.join(argv)}\n")
    where = next((state.node_ns(n) for n in state.nodes if n.n == node), state.netns)
    res = nodetool(where, ensure_jars(), JMX_BASE_PORT + node, *argv, timeout=24 * 3600)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
