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

A single-token ring (issue 38's move), when the test writes ``tokens.json`` (node -> its one
token) and ``profile.json`` (``{"rf": 2, "keys": {"<bigint key>": [reads, writes]}}``,
requests over a profile's length, for table ``ks.kv``): ``info -T`` prints the node's
token, ``ring`` every node's in 5.0.4's format, ``status`` the nodes of ``tokens.json``
(UM while one moves); ``profileload`` prints, after its duration, each key's reads on the
key's first replica and its writes on every replica (the keys' Murmur3 tokens, the ring of
``tokens.json``); ``move -- <token>`` refuses a taken token as Cassandra does and
otherwise is MOVING (netstats, status) for :data:`MOVE_S` seconds, then holds the token.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LEAVE_S = 5.0
MOVE_S = 3.0
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
    if (d / "tokens.json").exists():
        got = _single_token(d, node, argv)
        if got is not None:
            return got
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


def _tokens(d: Path) -> dict[int, int]:
    import json

    return {int(k): int(v) for k, v in json.loads((d / "tokens.json").read_text()).items()}


def _replicas(tokens: dict[int, int], key_token: int, rf: int) -> list[int]:
    ring = sorted(tokens.items(), key=lambda kv: kv[1])
    first = next((i for i, (_, t) in enumerate(ring) if t >= key_token), 0)
    return [ring[(first + j) % len(ring)][0] for j in range(min(rf, len(ring)))]


def _single_token(d: Path, node: int, argv: list[str]) -> int | None:
    """The single-token ring's commands; None: not one of them (the caller's)."""
    import json

    tokens = _tokens(d)
    moving = {k for k in tokens if (d / f"moving-{k}").exists()}
    if argv[:1] == ["info"]:
        print(f"ID                     : {host_id(node)}\nGossip active          : true")
        if "-T" in argv:
            print(f"Token                  : {tokens[node]}")
        return 0
    if argv[:1] == ["netstats"]:
        print(f"Mode: {'MOVING' if node in moving else 'NORMAL'}\nNot sending any streams.")
        return 0
    if argv[:1] == ["status"]:
        print("Datacenter: dc1\n===============\nStatus=Up/Down\n"
              "|/ State=Normal/Leaving/Joining/Moving\n"
              "--  Address    Load       Tokens  Owns (effective)  Host ID"
              "                               Rack")
        for k in sorted(tokens):
            print(f"{'UM' if k in moving else 'UN'}  10.0.0.{k + 1}  {LOAD}  1       "
                  f"{100 / len(tokens):.1f}%             {host_id(k)}  rack1")
        return 0
    if argv[:1] == ["ring"]:
        print("\nDatacenter: datacenter1\n==========\nAddress         Rack        Status "
              "State   Load            Owns                Token")
        ring = sorted(tokens.items(), key=lambda kv: kv[1])
        print(" " * 79 + str(ring[-1][1]))
        for k, t in ring:
            print(f"10.0.0.{k + 1:<9} rack1       Up     "
                  f"{'Moving' if k in moving else 'Normal':<7} {LOAD:<15} 33.33%"
                  f"              {t}")
        return 0
    if argv[:1] == ["move"]:
        token = int(argv[-1])
        if token in tokens.values():
            print(f"error: target token {token} is already owned by another node.",
                  file=sys.stderr)
            return 2
        (d / f"moving-{node}").write_text(str(token))
        time.sleep(MOVE_S)
        tokens = _tokens(d)
        tokens[node] = token
        (d / "tokens.json").write_text(json.dumps({str(k): v for k, v in tokens.items()}))
        (d / f"moving-{node}").unlink()
        return 0
    if argv[:1] == ["profileload"]:
        from elastore.stores.cassandra.partitioner import murmur3_token

        time.sleep(int(argv[-1]) / 1000)
        prof = json.loads((d / "profile.json").read_text())
        rf = int(prof["rf"])
        reads, writes = [], []
        for key, (r, w) in prof["keys"].items():
            reps = _replicas(tokens, murmur3_token(int(key).to_bytes(8, "big", signed=True)),
                             rf)
            if r and reps[0] == node:
                reads.append((key, r))
            if w and node in reps:
                writes.append((key, w))
        for what, rows in (("reads", reads), ("writes", writes)):
            print(f"Frequency of {what} by partition:\n   Table Partition Count +/-")
            for key, n in sorted(rows, key=lambda kv: -kv[1]):
                print(f"   ks.kv {key:<9} {n:<5} 0  ")
            print()
        return 0
    return None


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
