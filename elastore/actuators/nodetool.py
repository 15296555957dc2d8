"""What nodetool takes and prints. Pure.

* the stream throttle, as ``setstreamthroughput`` takes it (:func:`stream_setting`);
* a node's ring mode, from ``netstats`` (:func:`parse_mode`);
* the ring a decommission must judge (:class:`Ring`): every node's state and load from
  ``status``, every keyspace's replication from ``describecluster``, the node's own host ID
  from ``info``;
* a single-token ring's tokens from ``ring`` (:func:`single_tokens`), ``move``'s arguments
  (:func:`move_args`) and refusals (:func:`move_refusal`), a stream's progress from
  ``netstats`` (:func:`stream_progress`).

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


# -- skew: the ring's tokens and the hot partitions (issue 38) ------------------------------------
_INFO_TOKEN = re.compile(r"^\s*Token\s*:\s*(-?[0-9]+)\s*$", re.MULTILINE)
_INFO_TOKEN_HINT = re.compile(r"^\s*Token\s*:\s*\(invoke with -T", re.MULTILINE)


def parse_info_tokens(info: str) -> tuple[int, ...]:
    """The node's own tokens from ``nodetool info -T`` (``Token : <n>`` lines, one per
    token; without ``-T`` nodetool prints a hint instead, which is an error here)."""
    text = info or ""
    found = tuple(int(t) for t in _INFO_TOKEN.findall(text))
    if found:
        return found
    if _INFO_TOKEN_HINT.search(text):
        raise ElastoreError("nodetool info was run without -T: it lists no tokens")
    raise ElastoreError(f"nodetool info -T lists no token: {text[:300]!r}")


@dataclass(frozen=True)
class PartitionCount:
    """One row of a ``profileload`` (or ``toppartitions``) frequency table: a partition of
    ``table`` (``keyspace.table``), its key as the table's key type prints it, and how many
    of the node's local reads or writes touched it during the sample."""

    table: str
    key: str
    count: int


@dataclass(frozen=True)
class PartitionProfile:
    """What one node's ``profileload`` sampled: the partitions read and written most."""

    reads: tuple[PartitionCount, ...]
    writes: tuple[PartitionCount, ...]


#: ``profileload``'s arguments: only the two frequency samplers, the ``top`` partitions of
#: each, over ``duration_ms``; no keyspace and table: every table of the node (4.1 and later)
def profileload_args(duration_ms: int, top: int) -> list[str]:
    if not 1 <= int(top) <= 1000:
        raise ElastoreError(f"profileload's top must be 1..1000, got {top}")
    if not 1 <= int(duration_ms) <= 3_600_000:
        raise ElastoreError(f"profileload's duration must be 1 ms..1 h, got {duration_ms} ms")
    return ["profileload", "-a", "READS,WRITES", "-k", str(int(top)), str(int(duration_ms))]


_FREQUENCY = re.compile(r"^Frequency of (reads|writes) by partition:\s*$")
_SECTION = re.compile(r"^\S.*:\s*$")
_PARTITION_ROW = re.compile(r"^\s+(\S+)\s+(.*\S)\s+([0-9]+)\s+([0-9]+)\s*$")


def parse_profileload(text: str) -> PartitionProfile:
    """The ``Frequency of reads/writes by partition`` tables of ``nodetool profileload`` or
    ``toppartitions`` (Cassandra 4.1 and later print both this way; other samplers'
    sections and nodetool's own DEBUG lines are skipped). A table that says ``Nothing
    recorded`` is empty; output with neither table is an error (not a profile)."""
    found: dict[str, list[PartitionCount]] = {}
    section: str | None = None
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        m = _FREQUENCY.match(line)
        if m:
            section = m.group(1)
            found[section] = []
            continue
        if _SECTION.match(line):  # another sampler's section, or a log line
            section = None
            continue
        if section is None or not line.strip():
            continue
        row = _PARTITION_ROW.match(line)
        if row is None or row.group(1) == "Table":
            continue
        found[section].append(PartitionCount(row.group(1), row.group(2).strip(),
                                             int(row.group(3))))
    if not found:
        raise ElastoreError("not profileload output (no 'Frequency of reads/writes by "
                            f"partition' table): {(text or '')[:300]!r}")
    return PartitionProfile(tuple(found.get("reads", ())), tuple(found.get("writes", ())))


# -- single tokens: the ring's tokens and nodetool move ------------------------------------------
#: Murmur3Partitioner's token space (signed 64-bit); ``move`` refuses anything else
#: ("Invalid token for Murmur3Partitioner. Got ... but expected a long value")
MURMUR3_MIN, MURMUR3_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class RingToken:
    """One token row of ``nodetool ring``: the node holding it and its state there."""

    address: str
    status: str  # Up, Down
    state: str  # Normal, Moving, Leaving, Joining
    load_bytes: float | None  # None: "?"
    token: int


_RING_ROW = re.compile(r"^(\S+)\s+\S+\s+(Up|Down|\?)"
                       r"\s+(Normal|Moving|Leaving|Joining|\?)\s+(\?|[0-9.]+\s+\S+)\s+\S+\s+"
                       r"(-?\d+)\s*$")


def parse_ring(text: str) -> list[RingToken]:
    """Every token row of ``nodetool ring`` (Cassandra 5.0.4: Address, Rack, Status, State,
    Load, Owns, Token; the line above the rows repeats the last token and is skipped). A
    node with vnodes has one row per token. Raises when no row is found."""
    out = []
    for line in (text or "").splitlines():
        m = _RING_ROW.match(line.strip())
        if m:
            load = None if m.group(4) == "?" else parse_size(m.group(4))
            out.append(RingToken(m.group(1), m.group(2), m.group(3), load, int(m.group(5))))
    if not out:
        raise ElastoreError(f"nodetool ring lists no token: {(text or '')[:300]!r}")
    return out


def ring_tokens(text: str) -> dict[str, list[int]]:
    """Each node's tokens (ascending) from ``nodetool ring``."""
    out: dict[str, list[int]] = {}
    for row in parse_ring(text):
        out.setdefault(row.address, []).append(row.token)
    return {a: sorted(t) for a, t in out.items()}


def single_tokens(text: str) -> dict[str, int]:
    """Each node's one token from ``nodetool ring``; raises when a node has several
    (vnodes: ``nodetool move`` refuses such nodes)."""
    out = {}
    for address, tokens in ring_tokens(text).items():
        if len(tokens) != 1:
            raise ElastoreError(f"node {address} has {len(tokens)} tokens (vnodes): not a "
                                "single-token ring")
        out[address] = tokens[0]
    return out


def move_args(token: int) -> list[str]:
    """``nodetool move``'s arguments for ``token``: ``--`` ends the options, so a negative
    token is not read as one (5.0.4 accepts a bare negative token too)."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise ElastoreError(f"a token must be an integer, got {token!r}")
    if not MURMUR3_MIN <= token <= MURMUR3_MAX:
        raise ElastoreError(f"token {token} is outside Murmur3's [{MURMUR3_MIN}, {MURMUR3_MAX}]")
    return ["move", "--", str(token)]


#: what ``nodetool move`` says when Cassandra 5.0.4 refuses (the ``error:`` line; measured
#: on the lab, docs/lab.md): the node has vnodes; the token is a node's already; data is
#: streaming *to* this node (another node's move, join or leave in progress); the token
#: is not a Murmur3 token (nodetool's own check, exit 1)
MOVE_REFUSALS = {
    "vnodes": "This node has more than one token and cannot be moved thusly.",
    "token-taken": "is already owned by another node.",
    "pending-ranges": "data is currently moving to this node; unable to leave the ring",
    "invalid-token": "Invalid token for Murmur3Partitioner.",
}


def move_refusal(stdout: str, stderr: str) -> str | None:
    """Which of :data:`MOVE_REFUSALS` a failed ``nodetool move`` met, or None."""
    text = (stdout or "") + "\n" + (stderr or "")
    for kind, said in MOVE_REFUSALS.items():
        if said in text:
            return kind
    return None


@dataclass(frozen=True)
class StreamProgress:
    """The stream sessions ``nodetool netstats`` lists on a node, summed: bytes received
    and to receive, sent and to send (what the node's sessions say, all of them)."""

    mode: str | None
    received_bytes: int
    receive_bytes: int
    sent_bytes: int
    send_bytes: int


_RECEIVING = re.compile(r"Receiving \d+ files, (\d+) bytes total\. Already received \d+ files"
                        r" \([0-9.]+%\), (\d+) bytes total")
_SENDING = re.compile(r"Sending \d+ files, (\d+) bytes total\. Already sent \d+ files"
                      r" \([0-9.]+%\), (\d+) bytes total")


def stream_progress(netstats: str) -> StreamProgress:
    """The streams of a node from ``nodetool netstats`` (a move, bootstrap or decommission
    in progress); zeros when it streams nothing."""
    text = netstats or ""
    rec = [(int(a), int(b)) for a, b in _RECEIVING.findall(text)]
    snt = [(int(a), int(b)) for a, b in _SENDING.findall(text)]
    return StreamProgress(parse_mode(text), sum(b for _, b in rec), sum(a for a, _ in rec),
                          sum(b for _, b in snt), sum(a for a, _ in snt))
