"""What kwok runs for ``kubectl exec`` into a pod of the k8s suite, where no Cassandra runs:
a node's ring, scripted. (The suites with real Cassandra use :mod:`testbed.podexec`.)

kwok's ``Exec`` runs the operator's nodetool argv locally with the pod's environment:
``ELASTORE_NODE`` (the pod's ordinal) and ``ELASTORE_STANDIN_DIR`` (a directory of the
test's own). ``netstats`` prints ``Mode: NORMAL``, or after a ``decommission`` of that
node ``LEAVING`` for :data:`LEAVE_S` seconds and then ``DECOMMISSIONED`` (for
:data:`FORGET_S` seconds: a pod of that ordinal created later is a new node).
``setstreamthroughput`` succeeds. Every call is appended to ``calls.log``. While a file
``hold-<node>`` exists in that directory, a decommissioned node stays ``LEAVING`` (a test
holds a decommission open to act during it); while a file ``join-hold-<node>`` exists,
a node that was not decommissioned is ``JOINING`` (a scale-out held open).

Housekeeping, in Cassandra 5.0.4's formats (recorded from the lab): ``cleanup`` writes
``cleaned-<node>`` and returns (while ``cleanup-hold-<node>`` exists it waits, and
``compactionstats`` lists a Cleanup task); ``compactionstats`` lists a Validation task while
``repair-<node>`` exists (a repair); ``getcompactionthroughput`` and
``setcompactionthroughput`` read and write ``compaction-<node>`` (64 MiB/s at first).

The ring a decommission is judged on, as Cassandra 5.0's nodetool prints it: ``status``
lists nodes 0..k for a call in pod k (a scale-in always leaves from the highest ordinal;
a file ``nodes`` in the directory overrides the count),
each UN with :data:`LOAD` (DN while a file ``down-<node>`` exists); ``describecluster``
lists keyspace ``ks`` at RF 3; ``info`` gives the node's host ID.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LEAVE_S = 5.0
FORGET_S = 60.0
LOAD = "100.5 MiB"


def host_id(k: int) -> str:
    return f"5eed0000-0000-4000-8000-{k:012d}"


def _compaction(d: Path, node: int) -> float:
    f = d / f"compaction-{node}"
    return float(f.read_text()) if f.exists() else 64.0


def main(argv: list[str]) -> int:
    try:
        node = int(os.environ["ELASTORE_NODE"])
        d = Path(os.environ["ELASTORE_STANDIN_DIR"])
    except (KeyError, ValueError):
        print("nodetool stand-in: ELASTORE_NODE and ELASTORE_STANDIN_DIR must be set",
              file=sys.stderr)
        return 2
    d.mkdir(parents=True, exist_ok=True)
    now = time.time()
    with (d / "calls.log").open("a") as f:
        f.write(f"{now:.3f} {node} {' '.join(argv)}\n")
    marker = d / f"decommissioned-{node}"
    if argv[:1] == ["decommission"]:
        marker.write_text(f"{now}")
        return 0
    if argv[:1] == ["netstats"]:
        mode = "JOINING" if (d / f"join-hold-{node}").exists() else "NORMAL"
        if marker.exists():
            age = now - float(marker.read_text())
            if age < LEAVE_S or (d / f"hold-{node}").exists():
                mode = "LEAVING"
            elif age < FORGET_S:
                mode = "DECOMMISSIONED"
            else:
                marker.unlink()
        print(f"Mode: {mode}\nNot sending any streams.")
        return 0
    if argv[:1] == ["setstreamthroughput"]:
        return 0
    if argv[:1] == ["cleanup"]:
        end = time.time() + 600
        while (d / f"cleanup-hold-{node}").exists() and time.time() < end:
            time.sleep(0.2)
        (d / f"cleaned-{node}").write_text(f"{time.time()}")
        return 0
    if argv[:1] == ["compactionstats"]:
        print(f"concurrent compactors            1\npending tasks                    0\n"
              f"compaction throughput (MiB/s)    {_compaction(d, node):.1f}")
        rows = []
        if (d / f"cleanup-hold-{node}").exists():
            rows.append("e8a1ea90-e9f9-11f1-91cd-83a3fcaade78 Cleanup         ks       kv    "
                        "6760186   19582007 bytes 34.52%")
        if (d / f"repair-{node}").exists():
            rows.append("125a4e40-e9fa-11f1-91cd-83a3fcaade78 Validation      ks       kv    "
                        "1000      19582007 bytes 0.01%")
        if rows:
            print("id                                   compaction type keyspace table "
                  "completed total    unit  progress")
            print("\n".join(rows))
        return 0
    if argv[:1] == ["getcompactionthroughput"]:
        print(f"Current compaction throughput: {_compaction(d, node):g} MB/s")
        return 0
    if argv[:1] == ["setcompactionthroughput"] and len(argv) == 2:
        (d / f"compaction-{node}").write_text(argv[1])
        return 0
    if argv[:1] == ["status"]:
        print("Datacenter: dc1\n===============\nStatus=Up/Down\n"
              "|/ State=Normal/Leaving/Joining/Moving\n"
              "--  Address    Load       Tokens  Owns (effective)  Host ID"
              "                               Rack")
        # a file "nodes" holds the ring's size when the test keeps it (a datacenter's
        # step reads the ring through its first pod)
        count = int((d / "nodes").read_text()) if (d / "nodes").exists() else node + 1
        for k in range(count):
            state = "DN" if (d / f"down-{k}").exists() else "UN"
            print(f"{state}  10.0.0.{k + 1}  {LOAD}  16      {300 / count:.1f}%"
                  f"             {host_id(k)}  rack1")
        return 0
    if argv[:1] == ["describecluster"]:
        print("Cluster Information:\n\tName: standin\n\nKeyspaces:\n"
              "\tks -> Replication class: SimpleStrategy {replication_factor=3}\n"
              "\tsystem -> Replication class: LocalStrategy {}")
        return 0
    if argv[:1] == ["info"]:
        print(f"ID                     : {host_id(node)}\nGossip active          : true")
        return 0
    print(f"nodetool stand-in: unsupported {' '.join(argv)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
