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
