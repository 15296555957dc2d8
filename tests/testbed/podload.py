"""The lab's load generator against a real node's Cassandra pods: run *inside* the node's
network namespace (testbed.node.RealNode.command), where the pod IPs answer.

    python tests/testbed/podload.py WORKLOAD OUT_CSV HOSTS METRICS_ADDR

HOSTS: the contact points (the pods' IPs, comma-separated); the driver finds the nodes
that join later by itself. METRICS_ADDR: host:port of the generator's own /metrics (an
address of the node's namespace, which the node's Prometheus scrapes). The replay is the
lab's (elastore.lab.cassandra.load.run): scheduled rates, keys by popularity, 10 KiB values.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    from elastore.lab.cassandra.load import run
    from elastore.traces.workload import Workload

    wl, out, hosts, metrics = Path(argv[0]), Path(argv[1]), argv[2].split(","), argv[3]
    run(Workload.load(wl), hosts, out, metrics_addr=metrics,
        on_start=lambda mono: print(
            f"replay starts at epoch {time.time() + mono - time.monotonic():.3f}",
            file=sys.stderr, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
