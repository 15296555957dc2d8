"""What nodetool takes and prints. Pure.

* the stream throttle, as ``setstreamthroughput`` takes it (:func:`stream_setting`);
* a node's ring mode, from ``netstats`` (:func:`parse_mode`);
* the ring a decommission must judge (:class:`Ring`): every node's state and load from
  ``status``, every keyspace's replication from ``describecluster``, the node's own host ID
  from ``info``.

nodetool takes whole numbers: with ``-m`` whole MiB/s, without it whole Mbit/s (10^6 bit/s;
measured on Cassandra 5.0.4: 16 reads back as 1.9073 MiB/s), 8.4x finer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from elastore.errors import ElastoreError
from elastore.units import mbit_to_mibps, mibps_to_mbit


def stream_setting(mibps: float) -> tuple[list[str], float]:
    """The ``setstreamthroughput`` arguments closest to ``mibps`` and the MiB/s they set.

    Whichever of whole MiB/s and whole Mbit/s is closer wins, so 24 MiB/s (Cassandra's
    default) is set exactly and 0.6 MiB/s becomes 5 Mbit/s (0.596 MiB/s). At least 1 Mbit/s:
    0 would disable the throttle."""
    if not mibps > 0:
        raise ElastoreError(f"stream throughput must be > 0 MiB/s, got {mibps}")
    whole_mbit = max(1, round(mibps_to_mbit(mibps)))
    by_mbit = mbit_to_mibps(whole_mbit)
    whole_mib = round(mibps)
    if whole_mib >= 1 and abs(whole_mib - mibps) <= abs(by_mbit - mibps):
        return ["-m", str(whole_mib)], float(whole_mib)
    return [str(whole_mbit)], by_mbit


def failure_summary(stdout: str, stderr: str, limit: int = 500) -> str:
    """What a failed nodetool call says, in a line: its ``error:`` line (nodetool prints the
    Java stack trace after it, so the output's tail is frames, not the reason), else the
    last lines that are not its own DEBUG logging."""
    lines = [x.rstrip() for x in (stdout + "\n" + stderr).splitlines() if x.strip()]
    for line in lines:
        if line.startswith("error:"):
            return line[len("error:"):].strip()[:limit]
    useful = [x for x in lines if " DEBUG " not in x and not x.startswith("\tat ") and
              not x.startswith("See 'nodetool help")]
    return " | ".join(useful)[-limit:] or "(no output)"


_MODE = re.compile(r"^\s*Mode:\s*([A-Z_]+)", re.MULTILINE)


def parse_mode(netstats: str) -> str | None:
    """The ``Mode:`` line of ``nodetool netstats`` (NORMAL, JOINING, LEAVING,
    DECOMMISSIONED, ...), or None."""
    m = _MODE.search(netstats or "")
    return m.group(1) if m else None


# -- the ring, before a decommission --------------------------------------------------------------
@dataclass(frozen=True)
class RingNode:
    """One line of ``nodetool status``."""

    state: str  # status and state: UN, DN, UJ, UL, UM, ...
    address: str
    load_bytes: float | None  # None: "?" (nodetool does not know)
    host_id: str
    dc: str


@dataclass(frozen=True)
class Replication:
    """A keyspace's replication, from ``nodetool describecluster``. ``factors`` is
    ``{"": rf}`` for SimpleStrategy and per data centre for NetworkTopologyStrategy; empty
    for the node-local strategies (nothing to keep on other nodes)."""

    strategy: str
    factors: dict[str, int]


@dataclass(frozen=True)
class Ring:
    """What a decommission must know about the cluster, read on the leaving node."""

    nodes: tuple[RingNode, ...]
    keyspaces: dict[str, Replication]
    self_id: str  # the leaving node's host ID (``nodetool info``)


#: nodetool's sizes (FileUtils.stringifyFileSize): binary multiples, "KiB" since 4.1 and
#: "KB" before
_SIZE_UNITS = {"bytes": 1, "B": 1, "KiB": 1024, "KB": 1024, "MiB": 1024**2, "MB": 1024**2,
               "GiB": 1024**3, "GB": 1024**3, "TiB": 1024**4, "TB": 1024**4}
_STATUS_LINE = re.compile(r"^([UD][NLJM])\s+(\S+)\s+(\?|[0-9.]+\s+\S+)\s+.*?"
                          r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def parse_size(text: str) -> float:
    """``"104.78 KiB"`` -> bytes."""
    value, _, unit = text.strip().partition(" ")
    if unit.strip() not in _SIZE_UNITS:
        raise ElastoreError(f"nodetool size {text!r}: unknown unit")
    return float(value) * _SIZE_UNITS[unit.strip()]


def parse_status(text: str) -> list[RingNode]:
    """Every node of ``nodetool status``, with its data centre."""
    nodes, dc = [], ""
    for line in (text or "").splitlines():
        if line.startswith("Datacenter:"):
            dc = line.split(":", 1)[1].strip()
            continue
        m = _STATUS_LINE.match(line.strip())
        if m:
            load = None if m.group(3) == "?" else parse_size(m.group(3))
            nodes.append(RingNode(m.group(1), m.group(2), load, m.group(4), dc))
    if not nodes:
        raise ElastoreError(f"nodetool status lists no node: {text[:300]!r}")
    return nodes


_KEYSPACE = re.compile(r"^\s*(\S+)\s*->\s*Replication class:\s*(\S+)\s*\{([^}]*)\}")


def parse_keyspaces(describecluster: str) -> dict[str, Replication]:
    """The ``Keyspaces:`` section of ``nodetool describecluster`` (Cassandra 4.0+)."""
    text = describecluster or ""
    if "Keyspaces:" not in text:
        raise ElastoreError("nodetool describecluster has no Keyspaces section (Cassandra "
                            "before 4.0?): the replication factors cannot be checked")
    out: dict[str, Replication] = {}
    for line in text.split("Keyspaces:", 1)[1].splitlines():
        m = _KEYSPACE.match(line)
        if not m:
            continue
        strategy = m.group(2).rsplit(".", 1)[-1]
        opts = dict(kv.split("=", 1) for kv in m.group(3).replace(" ", "").split(",")
                    if "=" in kv)
        if strategy == "SimpleStrategy":
            factors = {"": _rf(opts.get("replication_factor"), m.group(1))}
        elif strategy == "NetworkTopologyStrategy":
            factors = {dc: _rf(v, m.group(1)) for dc, v in opts.items() if dc != "class"}
        elif strategy in ("LocalStrategy", "EverywhereStrategy", "MetaStrategy"):
            factors = {}
        else:
            raise ElastoreError(f"keyspace {m.group(1)}: replication strategy {strategy} is "
                                "not understood, so a decommission cannot be judged safe")
        out[m.group(1)] = Replication(strategy, factors)
    if not out:
        raise ElastoreError("nodetool describecluster lists no keyspace")
    return out


def _rf(v: str | None, keyspace: str) -> int:
    """A replication factor; "3/1" (3 replicas, 1 transient) counts 3."""
    try:
        return int(str(v).split("/", 1)[0])
    except ValueError as exc:
        raise ElastoreError(f"keyspace {keyspace}: unreadable replication factor {v!r}") \
            from exc


_HOST_ID = re.compile(r"^\s*ID\s*:\s*([0-9a-f-]{36})\s*$", re.MULTILINE)


def parse_host_id(info: str) -> str:
    """The ``ID`` line of ``nodetool info``: the node's host ID."""
    m = _HOST_ID.search(info or "")
    if not m:
        raise ElastoreError(f"nodetool info has no ID line: {info[:300]!r}")
    return m.group(1)


def read_ring(run: Callable[[str], str]) -> Ring:
    """The :class:`Ring` from a node's ``status``, ``describecluster`` and ``info``;
    ``run(cmd)`` returns nodetool's output or raises."""
    return Ring(tuple(parse_status(run("status"))), parse_keyspaces(run("describecluster")),
                parse_host_id(run("info")))


# -- compactions: cleanup and repair ---------------------------------------------------------------
#: compactionstats' task types that mean a repair is running on the node (a validation
#: compaction builds a repair's Merkle trees; anticompaction splits repaired from unrepaired
#: data after an incremental repair): OperationType in Cassandra's source
REPAIR_TASKS = ("Validation", "Anticompaction", "Anti-compaction")
_COMPACTION_ROW = re.compile(r"^\s*([0-9a-f]{8}-[0-9a-f-]{27})\s+(\S+(?:\s\S+)?)\s+(\S+)\s+")


def compaction_tasks(compactionstats: str) -> list[str]:
    """The type of every task ``nodetool compactionstats`` lists (``Compaction``,
    ``Cleanup``, ``Validation``, ...): its table's rows begin with the task's id (a UUID),
    then the type. Raises on output that is not compactionstats'."""
    text = compactionstats or ""
    if "pending tasks" not in text:
        raise ElastoreError(f"not nodetool compactionstats output: {text[:200]!r}")
    out = []
    for line in text.splitlines():
        m = _COMPACTION_ROW.match(line)
        if m:
            kind = m.group(2)
            # "Cleanup ks tbl": the type is one word unless it is one of the two-word ones
            out.append(kind if kind in ("Index build", "View build", "Tombstone Compaction")
                       else kind.split()[0])
    return out


_REPAIR_SESSION = re.compile(r"^\s*Repair\s+[0-9a-f]{8}-", re.MULTILINE)


def repair_activity(compactionstats: str, netstats: str) -> str | None:
    """What shows a repair running on this node, or None: a validation or anticompaction in
    ``compactionstats``, or a ``Repair <id>`` streaming session in ``netstats``."""
    tasks = [x for x in compaction_tasks(compactionstats) if x in REPAIR_TASKS]
    said = []
    if tasks:
        said.append(f"{len(tasks)} {'/'.join(sorted(set(tasks)))} task(s) in compactionstats")
    sessions = len(_REPAIR_SESSION.findall(netstats or ""))
    if sessions:
        said.append(f"{sessions} repair streaming session(s) in netstats")
    return "; ".join(said) or None


_COMPACTION_THROUGHPUT = re.compile(r"Current compaction throughput[^:]*:\s*([0-9.]+)\s*"
                                    r"(MiB/s|MB/s|KiB/s)?", re.IGNORECASE)


def parse_compaction_throughput(text: str) -> float:
    """``nodetool getcompactionthroughput`` in MiB/s (0: unthrottled)."""
    m = _COMPACTION_THROUGHPUT.search(text or "")
    if not m:
        raise ElastoreError(f"unreadable getcompactionthroughput output: {text[:200]!r}")
    value = float(m.group(1))
    return value / 1024 if (m.group(2) or "").lower() == "kib/s" else value


def compaction_setting(mibps: float) -> tuple[list[str], float]:
    """``setcompactionthroughput``'s argument (whole MiB/s, at least 1: 0 unthrottles) and
    the MiB/s it sets."""
    if not mibps > 0:
        raise ElastoreError(f"compaction throughput must be > 0 MiB/s, got {mibps}")
    whole = max(1, round(mibps))
    return [str(whole)], float(whole)
