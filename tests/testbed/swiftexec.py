"""What kwok runs for ``kubectl exec`` into a test pod of a Swift StatefulSet: the command
the operator sends (``md5sum`` of the ring files, ``du`` of the devices) against that pod's
lab Swift node (the lab's node ``ELASTORE_NODE`` in ``ELASTORE_LAB_DIR``).

kwok runs an exec *locally*; the pod's paths (``/etc/swift``, ``/srv/node``, the
policy's defaults) are mapped onto the node's own directories, and the output's paths back,
so the operator sees what it would see in a pod. The policy's
``spec.target.swift.execPrefix`` is ``[python, tests/testbed/swiftexec.py]`` (an operator
started with ``--exec-prefix`` for it). Every call is appended to ``swiftexec.log`` in the
lab directory. Only ``md5sum`` and ``du`` are run: anything else exits 126.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

RING_DIR, DEVICES_DIR = "/etc/swift", "/srv/node"


def main(argv: list[str]) -> int:
    try:
        node = int(os.environ["ELASTORE_NODE"])
        d = Path(os.environ["ELASTORE_LAB_DIR"])
    except (KeyError, ValueError):
        print("swiftexec: ELASTORE_NODE and ELASTORE_LAB_DIR must be set", file=sys.stderr)
        return 2
    try:
        doc = json.loads((d / "swift.json").read_text())
        root = next(Path(x["root"]) for x in doc["nodes"] if int(x["n"]) == node)
    except (OSError, ValueError, KeyError, StopIteration):
        print(f"swiftexec: no Swift node {node} in the lab {d}", file=sys.stderr)
        return 2
    with (d / "swiftexec.log").open("a") as f:
        f.write(f"{time.time():.3f} {node} {' '.join(argv)}\n")
    if not argv or argv[0] not in ("md5sum", "du"):
        print(f"swiftexec: not a command this stand-in runs: {argv[:1]}", file=sys.stderr)
        return 126
    mapping = ((RING_DIR, str(root / "etc")), (DEVICES_DIR, str(root / "srv")))

    def to_node(a: str) -> str:
        for pod_path, node_path in mapping:
            if a == pod_path or a.startswith(pod_path + "/"):
                return node_path + a[len(pod_path):]
        return a

    res = subprocess.run([to_node(a) for a in argv], capture_output=True, text=True,
                         check=False)
    out = res.stdout
    for pod_path, node_path in mapping:
        out = out.replace(node_path, pod_path)
    sys.stdout.write(out)
    sys.stderr.write(res.stderr)
    return res.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
