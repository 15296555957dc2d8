"""A skewed per-page replay on the lab's Cassandra, and what each node did of it (issue 38).

The keys are page titles: one hour of the per-page trace, noise pages removed as
``elastore trace build`` does (:func:`page_workload`), each title a *text* partition key of
``<keyspace>.pages`` with a value of its own (:data:`~elastore.lab.loadgen.VALUE_BYTES`
incompressible bytes, seeded by the key's index, so every row can be checked). Requests go
through the load generator's open-loop engine (:func:`elastore.lab.loadgen.replay`) with the
workload's popularity table, at consistency ONE, token-aware: ``spread="primary"`` sends every
request to the key's first replica (cassandra-driver 3.30's ``TokenAwarePolicy`` default,
``shuffle_replicas=False``), ``spread="replicas"`` shuffles among its replicas.

What a node did is read from the node itself: its exporter's keyspace ``ReadLatency`` and
``WriteLatency`` counts (:func:`counters`), which count the reads and writes the node
executed *as a replica* (not as a coordinator). A key's token is asked of Cassandra
(``SELECT k, token(k)``, :func:`key_tokens`), never computed here.

The driver reaches the nodes only inside the lab's namespace: the host side
(:func:`preload`, :func:`key_tokens`, :func:`replay`, :func:`verify`) runs this module there,

    python -m elastore.lab.cassandra.skewload HOSTS CMD ARGS...

which prints one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError
from elastore.lab import netns
from elastore.lab.loadgen import VALUE_BYTES
from elastore.traces.workload import BuildParams, Workload, build_workload

KEYSPACE = "skew"
TABLE = "pages"
SPREADS = ("primary", "replicas")
#: the trace hour the lab replays by default: the first of January 2016, whose hottest
#: non-noise page (List_of_stock_market_crashes_and_bear_markets) has 18 % of the requests
DEFAULT_HOUR = "2016-01-01 00:00:00"


# -- the workload -----------------------------------------------------------------------------
def page_workload(trace: Path | str, hour: str = DEFAULT_HOUR, *, peak_rps: float = 200.0,
                  seconds: float = 10.0, windows: int = 5, write_fraction: float = 0.05,
                  seed: int = 0) -> Workload:
    """One hour of a per-page trace (``hour_utc,page,requests``) as a workload: every page of
    that hour that is not noise is a key, weighted by its requests
    (:func:`elastore.traces.workload.build_workload` with ``top_fraction`` 1), the hour
    replayed in ``seconds`` over ``windows`` windows, its busiest window at ``peak_rps``."""
    import pandas as pd

    from elastore.traces import read_pages_csv

    try:
        at = pd.Timestamp(hour)
    except ValueError as exc:
        raise ElastoreError(f"hour {hour!r}: {exc}") from exc
    table = read_pages_csv(trace).window(at, at)
    return build_workload(table, BuildParams(top_fraction=1.0, write_fraction=write_fraction,
                                             windows_per_hour=windows, hour_seconds=seconds,
                                             peak_rps=peak_rps, seed=seed))


def value_of(seed: int, index: int) -> bytes:
    """Key ``index``'s value: :data:`VALUE_BYTES` incompressible bytes."""
    return np.random.default_rng([seed, index]).bytes(VALUE_BYTES)


def checksum(rows: dict[str, bytes]) -> str:
    """One SHA-256 over every (key, SHA-256 of value), keys sorted."""
    h = hashlib.sha256()
    for k in sorted(rows):
        h.update(k.encode("utf-8") + b"\0")
        h.update(hashlib.sha256(rows[k]).digest())
    return h.hexdigest()


# -- what each node did -------------------------------------------------------------------------
def scrape(ns: str, metrics_addr: str) -> str:
    """A node's exporter page (from inside the lab's namespace)."""
    res = subprocess.run(netns.command(ns, ["curl", "-sf", "--max-time", "5",
                                            f"http://{metrics_addr}/metrics"]),
                         capture_output=True, text=True, check=False)
    if res.returncode != 0 or not res.stdout:
        raise ElastoreError(f"the exporter at {metrics_addr} did not answer "
                            f"(curl exit {res.returncode})")
    return res.stdout


def _sample(text: str, family: str, labels: dict[str, str]) -> float | None:
    """The value of the series ``family{labels...}`` (label order free), or None."""
    for line in text.splitlines():
        if not line.startswith(family + "{"):
            continue
        m = re.match(r"^[^{]+\{([^}]*)\}\s+(\S+)$", line)
        if m is None:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    return None


def _must(text: str, family: str, labels: dict[str, str], where: str) -> float:
    v = _sample(text, family, labels)
    if v is None:
        raise ElastoreError(f"{where}: no series {family}{labels} (a missing metric is not 0)")
    return v


def parse_local_ops(text: str, keyspace: str, where: str = "exporter") -> tuple[float, float]:
    """(reads, writes) the node executed locally on ``keyspace``, from its exporter page."""
    fam = "org_apache_cassandra_metrics_keyspace_count"
    return (_must(text, fam, {"keyspace": keyspace, "name": "ReadLatency"}, where),
            _must(text, fam, {"keyspace": keyspace, "name": "WriteLatency"}, where))


def parse_streamed(text: str) -> tuple[float | None, float | None]:
    """(incoming, outgoing) bytes the node has streamed since it started; None where the
    counter does not exist yet. Cassandra creates these counters (``StreamingMetrics``) at
    the first stream session the node takes part in: a node that joined without a
    bootstrap and never streamed has none (measured on 5.0.4: absent on a fresh node, and
    still absent after ``nodetool netstats``). :func:`streamed_between` reads that, and
    only that, as "nothing streamed yet"."""
    fam = "org_apache_cassandra_metrics_streaming_count"
    return (_sample(text, fam, {"name": "TotalIncomingBytes"}),
            _sample(text, fam, {"name": "TotalOutgoingBytes"}))


def parse_load(text: str, where: str = "exporter") -> float:
    """The node's Load, bytes: its live SSTables on disk (what ``nodetool status`` shows)."""
    return _must(text, "org_apache_cassandra_metrics_storage_count", {"name": "Load"}, where)


@dataclass(frozen=True)
class NodeCounters:
    """One node's counters at one moment, from its exporter."""

    reads: float  # local reads of the keyspace
    writes: float  # local writes of the keyspace
    incoming_bytes: float | None  # streamed in, since the node started (None: no counter yet)
    outgoing_bytes: float | None  # streamed out
    load_bytes: float  # live SSTables
    hints: float = 0.0  # hints this node has written (for replicas that missed a write)


def counters(state: Any, keyspace: str = KEYSPACE) -> dict[str, NodeCounters]:
    """Every node's :class:`NodeCounters` (address -> counters), read in parallel."""
    out: dict[str, NodeCounters] = {}

    def one(node: Any) -> None:
        text = scrape(state.node_ns(node), node.spec.metrics)
        where = f"node {node.n} ({node.spec.metrics})"
        r, w = parse_local_ops(text, keyspace, where)
        i, o = parse_streamed(text)
        hints = _sample(text, "org_apache_cassandra_metrics_storage_count", {"name": "TotalHints"})
        out[node.spec.ip] = NodeCounters(r, w, i, o, parse_load(text, where),
                                         hints if hints is not None else 0.0)

    _each_node(state, one)
    return out


def settled_counters(state: Any, keyspace: str = KEYSPACE, *,
                     since: dict[str, NodeCounters] | None = None, d: Path | None = None,
                     quiet_s: float = 2.0,
                     timeout_s: float = 60.0, poll_s: float = 0.5
                     ) -> tuple[dict[str, NodeCounters], float]:
    """:func:`counters` once every node's local reads and writes have stopped changing for
    ``quiet_s``, and the seconds that took. A write at consistency ONE is acknowledged by its
    first replica; the others may apply it a little later (on a busy machine, seconds later,
    or as a hint), so counters read at the replay's end can miss some of its writes. If the
    nodes wrote hints since ``since``, first wait until none is pending (``d``: the lab).
    Raises :class:`ElastoreError` if they still move after ``timeout_s``."""
    import time

    from elastore.lab.cassandra import lab

    t0 = time.monotonic()
    last = counters(state, keyspace)
    if since is not None and sum(c.hints for c in last.values()) > sum(
            c.hints for c in since.values()):
        # a replica missed some writes and its coordinator keeps them as hints: they count
        # once delivered (every 10 s by default), so wait until no node holds one
        while any("does not have any pending hints" not in lab.run_nodetool(
                n.n, "listpendinghints", d=d) for n in state.nodes):
            if time.monotonic() - t0 > timeout_s:
                raise ElastoreError(f"hints were still pending {timeout_s:g} s after the "
                                    "replay ended")
            time.sleep(2.0)
        last = counters(state, keyspace)
    still = time.monotonic()
    while True:
        time.sleep(poll_s)
        now = counters(state, keyspace)
        same = all((now[ip].reads, now[ip].writes) == (last[ip].reads, last[ip].writes)
                   for ip in now) and set(now) == set(last)
        t = time.monotonic()
        if not same:
            last, still = now, t
        elif t - still >= quiet_s:
            return now, t - t0
        if t - t0 > timeout_s:
            raise ElastoreError(f"the nodes' read and write counters still changed "
                                f"{timeout_s:g} s after the replay ended")


def work_between(before: dict[str, NodeCounters], after: dict[str, NodeCounters]
                 ) -> dict[str, tuple[float, float]]:
    """Each node's local (reads, writes) between two :func:`counters` readings."""
    if set(before) != set(after):
        raise ElastoreError(f"the nodes changed between readings: {sorted(before)} vs "
                            f"{sorted(after)}")
    return {ip: (after[ip].reads - before[ip].reads, after[ip].writes - before[ip].writes)
            for ip in sorted(before)}


def _grew(before: float | None, after: float | None, what: str) -> float:
    """A streaming counter's growth; a counter created in between grew from 0 (Cassandra
    creates it at the node's first stream), one that is still absent did not grow, and one
    that vanished is an error (the exporter lost it: nothing can be said)."""
    if after is None:
        if before is not None:
            raise ElastoreError(f"{what}: the streaming counter vanished between readings")
        return 0.0
    return after - (before if before is not None else 0.0)


def streamed_between(before: dict[str, NodeCounters], after: dict[str, NodeCounters]
                     ) -> dict[str, tuple[float, float]]:
    """Each node's (incoming, outgoing) streamed bytes between two :func:`counters`."""
    if set(before) != set(after):
        raise ElastoreError(f"the nodes changed between readings: {sorted(before)} vs "
                            f"{sorted(after)}")
    return {ip: (_grew(before[ip].incoming_bytes, after[ip].incoming_bytes, ip),
                 _grew(before[ip].outgoing_bytes, after[ip].outgoing_bytes, ip))
            for ip in sorted(before)}


def shares(work: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Each node's share of all local reads and writes (a read and a write count one each,
    as :func:`elastore.models.skew.node_shares` counts them)."""
    total = sum(r + w for r, w in work.values())
    if total <= 0:
        raise ElastoreError("no node did any work on the keyspace: no share to take")
    return {ip: (r + w) / total for ip, (r, w) in work.items()}


def expected_work(replicas: npt.NDArray[np.int64], names: list[str], reads: npt.ArrayLike,
                  writes: npt.ArrayLike, spread: str = "primary"
                  ) -> dict[str, tuple[float, float]]:
    """What each node should do of a replay: ``replicas`` (keys x rf node indices into
    ``names``, the primary first: :meth:`elastore.models.skew.Ring.replicas` of the keys'
    real tokens), each key's successful ``reads`` and ``writes``. A write is done by every
    replica; a read by the primary (``spread="primary"``) or, in expectation, by each replica
    1/rf of the time."""
    if spread not in SPREADS:
        raise ElastoreError(f"spread must be one of {', '.join(SPREADS)}, got {spread!r}")
    rd = np.asarray(reads, dtype=np.float64)
    wr = np.asarray(writes, dtype=np.float64)
    rep = np.asarray(replicas, dtype=np.int64)
    if rep.ndim != 2 or rep.shape[0] != rd.size or rd.size != wr.size:
        raise ElastoreError(f"replicas {rep.shape} do not match {rd.size} keys' counts")
    n, rf = len(names), rep.shape[1]
    w = np.bincount(rep.ravel(), weights=np.repeat(wr, rf), minlength=n)
    if spread == "primary":
        r = np.bincount(rep[:, 0], weights=rd, minlength=n)
    else:
        r = np.bincount(rep.ravel(), weights=np.repeat(rd / rf, rf), minlength=n)
    return {names[i]: (float(r[i]), float(w[i])) for i in range(n)}


def share_sigma(replicas: npt.NDArray[np.int64], node: int, reads: npt.ArrayLike,
                writes: npt.ArrayLike, spread: str = "primary") -> float:
    """The standard deviation of node ``node``'s share of the work (as :func:`shares`) over
    a replay of the same number of requests drawn independently with the same key and
    read/write frequencies (``reads``, ``writes`` per key; ``replicas`` as for
    :func:`expected_work`): the key-draw noise of one replay's share, by the delta method
    for a ratio of sums, ``sd(a - s b) / (sqrt(N) mean(b))`` where a request puts ``a`` on
    the node and ``b`` on all nodes (a read 1; a write one per replica)."""
    rd = np.asarray(reads, dtype=np.float64)
    wr = np.asarray(writes, dtype=np.float64)
    rep = np.asarray(replicas, dtype=np.int64)
    n_req = float(rd.sum() + wr.sum())
    if n_req <= 0:
        raise ElastoreError("no request to take the noise of")
    rf = rep.shape[1]
    holds = (rep == node).any(axis=1).astype(np.float64)
    on_read = (rep[:, 0] == node).astype(np.float64) if spread == "primary" else holds / rf
    # (a, b, count) of each kind of request
    a = np.concatenate((on_read, holds))
    b = np.concatenate((np.ones_like(rd), np.full_like(wr, float(rf))))
    c = np.concatenate((rd, wr))
    s = float((a * c).sum() / (b * c).sum())
    dev = a - s * b
    var = float((c * dev**2).sum() / n_req)
    return float(np.sqrt(var / n_req) / ((b * c).sum() / n_req))


# -- the host side: this module run inside the namespace -----------------------------------------
def inside(state: Any, *args: str, timeout: float = 600) -> dict[str, Any]:
    """Run ``python -m elastore.lab.cassandra.skewload HOSTS args...`` in the lab's
    namespace and return the JSON line it prints."""
    hosts = ",".join(n.spec.ip for n in state.nodes)
    res = subprocess.run(netns.command(state.netns, [
        sys.executable, "-m", "elastore.lab.cassandra.skewload", hosts, *args]),
        capture_output=True, text=True, timeout=timeout, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"skewload {' '.join(args[:1])} failed: "
                            f"{res.stderr.strip()[-800:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def preload(state: Any, workload: Path, keyspace: str = KEYSPACE, rf: int = 2,
            seed: int = 0) -> dict[str, Any]:
    """Create ``<keyspace>.pages`` (SimpleStrategy, ``rf``) and write every key's value at
    consistency ALL. Returns the rows written and their checksum."""
    return inside(state, "preload", str(workload), keyspace, str(rf), str(seed))


def key_tokens(state: Any, workload: Path, keyspace: str = KEYSPACE) -> list[int]:
    """Each key's token (the workload's key order), as Cassandra computes it."""
    got = inside(state, "tokens", str(workload), keyspace)
    return [int(t) for t in got["tokens"]]


@dataclass(frozen=True)
class Replay:
    """A replay's result: per window (the engine's rows), and per key (workload order) the
    requests that succeeded; per coordinator, the requests it answered."""

    windows: list[dict[str, Any]]
    reads: list[int]
    writes: list[int]
    errors: int
    coordinators: dict[str, int]
    #: requests answered by a coordinator other than the key's first replica in the
    #: driver's token map (token-aware routing fell back to another node)
    off_first_replica: int

    @property
    def requests(self) -> int:
        """The requests that succeeded."""
        return sum(self.reads) + sum(self.writes)

    @property
    def issued(self) -> int:
        """Every request issued (succeeded or failed): the schedule's."""
        return self.requests + self.errors


def replay(state: Any, workload: Path, out_csv: Path, keyspace: str = KEYSPACE,
           seed: int = 0, spread: str = "primary", concurrency: int = 50) -> Replay:
    """Replay the workload (its schedule and key draws fixed by ``seed``: the same seed
    replays the same requests in the same order)."""
    if spread not in SPREADS:
        raise ElastoreError(f"spread must be one of {', '.join(SPREADS)}, got {spread!r}")
    got = inside(state, "replay", str(workload), keyspace, str(seed), spread, str(out_csv),
                 str(concurrency))
    return Replay(got["windows"], got["reads"], got["writes"], int(got["errors"]),
                  dict(got["coordinators"]), int(got["off_first_replica"]))


def verify(state: Any, workload: Path, keyspace: str = KEYSPACE, seed: int = 0
           ) -> dict[str, Any]:
    """Read every row back at consistency ALL and compare each value with the key's own:
    ``rows`` read, ``expected`` keys, ``missing``/``unexpected``/``mismatched`` (counts and
    the first few), both checksums."""
    return inside(state, "verify", str(workload), keyspace, str(seed))


# -- the measurement: a skewed replay, a planned move, the same replay ---------------------------
@dataclass
class MoveRun:
    """Everything :func:`measure_move` measured. Nodes are named by address; bytes are
    bytes; shares are of all local reads and writes of the keyspace (sum 1)."""

    params: dict[str, Any]
    keys: int
    key_tokens: list[int]  # each key's token (workload order), from Cassandra
    ring_before: dict[str, int]  # nodetool ring, before the move
    ring_after: dict[str, int]  # and after it
    stored_bytes: dict[str, float]  # each node's Load just before the move (flushed, compacted)
    work_before: dict[str, tuple[float, float]]  # (reads, writes) each node did, measured
    work_after: dict[str, tuple[float, float]]
    expected_before: dict[str, tuple[float, float]]  # from the real tokens and the ring
    expected_after: dict[str, tuple[float, float]]
    predicted_before: dict[str, float]  # node_shares on the popularity table
    predicted_after: dict[str, float]
    move: Any  # elastore.models.skew.Move
    move_seconds: float
    streamed_in: dict[str, float]  # bytes each node received during the move
    streamed_out: dict[str, float]  # and sent
    load_after_move: dict[str, float]
    load_after_cleanup: dict[str, float]
    key_moved_fraction: float  # (key, new replica) pairs over keys x rf: the rows' own count
    replay_before: Replay
    replay_after: Replay
    verify: dict[str, Any]
    progress: list[dict[str, float]]
    seconds: dict[str, float]

    @property
    def shares_before(self) -> dict[str, float]:
        return shares(self.work_before)

    @property
    def shares_after(self) -> dict[str, float]:
        return shares(self.work_after)

    @property
    def hot_node(self) -> str:
        """The node with the largest measured share before the move."""
        s = self.shares_before
        return max(s, key=lambda ip: s[ip])

    @property
    def streamed_bytes(self) -> float:
        return sum(self.streamed_in.values())

    @property
    def stored_total(self) -> float:
        return sum(self.stored_bytes.values())

    @property
    def moved_fraction(self) -> float:
        """Bytes streamed in by all nodes over all bytes stored (all replicas)."""
        return self.streamed_bytes / self.stored_total


def _each_node(state: Any, fn: Callable[[Any], object]) -> None:
    """``fn(node)`` for every node of the lab at once (threads); the first error raised."""
    errors: list[Exception] = []

    def one(node: Any) -> None:
        try:
            fn(node)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in state.nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def measure_move(d: Path, workload: Path, out_dir: Path, *, keyspace: str = KEYSPACE,
                 rf: int = 2, seed: int = 0, spread: str = "primary",
                 max_move_fraction: float = 0.05,
                 say: Callable[[str], None] = lambda _m: None) -> MoveRun:
    """On the single-token lab in ``d``: write every key of ``workload``, replay it and read
    each node's work from its exporter, plan one move with
    :func:`elastore.models.skew.plan_move` (the keys' real tokens, the popularity table as
    rates, at most ``max_move_fraction`` of the stored bytes), run ``nodetool move``, read
    what streamed, clean up, replay the *same* requests (same ``seed``) and read every row
    back at consistency ALL."""
    import time

    from elastore.lab.cassandra import lab
    from elastore.models.skew import Keys, Ring, node_shares, plan_move

    t_all = time.monotonic()
    secs: dict[str, float] = {}
    state = lab.LabState.load(d)
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up")
    if not state.single_token:
        raise ElastoreError("measure_move needs a single-token lab (lab up --single-token)")
    wl = Workload.load(workload)
    out_dir.mkdir(parents=True, exist_ok=True)

    t = time.monotonic()
    pre = preload(state, workload, keyspace, rf, seed)
    _each_node(state, lambda n: lab.run_nodetool(n.n, "flush", d=d))
    secs["preload_s"] = time.monotonic() - t
    say(f"preloaded {pre['rows']} keys at CL ALL and flushed in {secs['preload_s']:.1f} s")
    t = time.monotonic()
    tokens = key_tokens(state, workload, keyspace)
    ring_before = lab.ring_tokens(d)
    ips = sorted(ring_before, key=lambda ip: ring_before[ip])
    ring = Ring.single(ips, [ring_before[ip] for ip in ips])
    secs["tokens_s"] = time.monotonic() - t

    def one_replay(name: str, ring_now: Any) -> tuple[Replay, dict[str, tuple[float, float]],
                                                      dict[str, tuple[float, float]]]:
        t0 = time.monotonic()
        c0 = counters(state, keyspace)
        rep = replay(state, workload, out_dir / f"replay-{name}.csv", keyspace, seed, spread)
        c1, settle_s = settled_counters(state, keyspace, since=c0, d=d)
        secs[f"settle_{name}_s"] = settle_s
        secs[f"replay_{name}_s"] = time.monotonic() - t0
        exp = expected_work(ring_now.replicas(np.array(tokens, dtype=np.int64), rf),
                            list(ring_now.names), rep.reads, rep.writes, spread)
        return rep, work_between(c0, c1), exp

    rep_b, work_b, exp_b = one_replay("before", ring)
    say(f"replay before: {rep_b.requests} requests, {rep_b.errors} errors, counters settled in "
        f"{secs['settle_before_s']:.1f} s, "
        f"{rep_b.off_first_replica} not to the first replica; shares "
        + ", ".join(f"{ip} {v:.3f}" for ip, v in shares(work_b).items()))
    total = float(np.nansum(wl.total_rps * wl.window_seconds))
    read_ratio = float(np.nansum(wl.read_rps) / np.nansum(wl.total_rps))
    keys = Keys(np.array(tokens, dtype=np.int64),
                wl.key_weight / wl.key_weight.sum() * total / wl.duration_s, tuple(wl.keys))
    plan = plan_move(ring, keys, rf, read_ratio, spread, 0.0, max_move_fraction)
    if plan is None:
        raise ElastoreError("plan_move found no move that lowers the busiest node's share "
                            f"within {max_move_fraction:.0%} of the data")
    after_ring = ring.moved(plan.node, plan.to_token)
    pred_b = dict(zip(ring.names, node_shares(ring, keys, rf, read_ratio, spread).tolist(),
                      strict=True))
    pred_a = dict(zip(after_ring.names, node_shares(after_ring, keys, rf, read_ratio,
                                                    spread).tolist(), strict=True))
    rep_old = ring.replicas(np.array(tokens, dtype=np.int64), rf)
    rep_new = after_ring.replicas(np.array(tokens, dtype=np.int64), rf)
    gained = (rep_new[:, :, None] != rep_old[:, None, :]).all(axis=2).sum()
    key_frac = float(gained) / (len(tokens) * rep_old.shape[1])
    say(f"plan: move {plan.node} from {plan.from_token} to {plan.to_token} "
        f"({plan.moved_fraction:.2%} of the data by token span, {key_frac:.2%} by the keys; "
        f"imbalance {plan.imbalance_before:.3f} -> {plan.imbalance_after:.3f})")

    # the replay's writes (overwrites of keys, with the same values) to disk, and one
    # version of each row: a stream reads every SSTable version of its range, and a
    # receiver's compaction may drop its own older versions at once (measured: a receiver
    # of 1.40 MiB compacted 12.45 MiB to 11.69 MiB within 0.3 s, so its Load grew by 0.65
    # MiB), which would make neither the stored bytes nor the Load a measure of the data
    t = time.monotonic()
    _each_node(state, lambda n: (lab.run_nodetool(n.n, "flush", keyspace, d=d),
                                 lab.run_nodetool(n.n, "compact", keyspace, d=d)))
    secs["flush_compact_s"] = time.monotonic() - t
    c_before = counters(state, keyspace)
    progress: list[dict[str, float]] = []

    def on_progress(elapsed: float, p: Any) -> None:
        progress.append({"elapsed_s": elapsed, "received_bytes": p.received_bytes,
                         "receive_bytes": p.receive_bytes, "sent_bytes": p.sent_bytes,
                         "send_bytes": p.send_bytes})
        say(f"  {elapsed:5.1f} s {p.mode}: received {p.received_bytes}/{p.receive_bytes} "
            f"bytes, sent {p.sent_bytes}/{p.send_bytes}")

    move_s = lab.move(plan.node, plan.to_token, d=d, on_progress=on_progress)
    c_moved = counters(state, keyspace)
    ring_after = lab.ring_tokens(d)
    streamed = streamed_between(c_before, c_moved)
    streamed_in = {ip: v[0] for ip, v in streamed.items()}
    streamed_out = {ip: v[1] for ip, v in streamed.items()}
    say(f"moved in {move_s:.1f} s: {sum(streamed_in.values())} bytes streamed in "
        f"({sum(streamed_out.values())} out)")
    t = time.monotonic()
    _each_node(state, lambda n: lab.run_nodetool(n.n, "cleanup", d=d))
    c_clean = counters(state, keyspace)
    secs["cleanup_s"] = time.monotonic() - t

    rep_a, work_a, exp_a = one_replay("after", Ring.single(
        list(ring_after), [ring_after[ip] for ip in ring_after]))
    say(f"replay after: {rep_a.requests} requests, {rep_a.errors} errors, counters settled in "
        f"{secs['settle_after_s']:.1f} s, "
        f"{rep_a.off_first_replica} not to the first replica; shares "
        + ", ".join(f"{ip} {v:.3f}" for ip, v in shares(work_a).items()))
    t = time.monotonic()
    ver = verify(state, workload, keyspace, seed)
    secs["verify_s"] = time.monotonic() - t
    secs["move_s"] = move_s
    secs["total_s"] = time.monotonic() - t_all
    return MoveRun(
        params={"keyspace": keyspace, "rf": rf, "seed": seed, "spread": spread,
                "max_move_fraction": max_move_fraction, "read_ratio": read_ratio,
                "requests_scheduled_per_replay": total, "replay_seconds": wl.duration_s,
                "value_bytes": VALUE_BYTES, "nodes": len(state.nodes),
                "workload": wl.meta.get("trace_start"), "source": wl.meta.get("source")},
        keys=len(tokens), key_tokens=tokens, ring_before=ring_before, ring_after=ring_after,
        stored_bytes={ip: c_before[ip].load_bytes for ip in c_before},
        work_before=work_b, work_after=work_a, expected_before=exp_b, expected_after=exp_a,
        predicted_before=pred_b, predicted_after=pred_a, move=plan, move_seconds=move_s,
        streamed_in=streamed_in, streamed_out=streamed_out,
        load_after_move={ip: c_moved[ip].load_bytes for ip in c_moved},
        load_after_cleanup={ip: c_clean[ip].load_bytes for ip in c_clean},
        key_moved_fraction=key_frac, replay_before=rep_b, replay_after=rep_a, verify=ver,
        progress=progress, seconds=secs)


# -- inside the namespace ---------------------------------------------------------------------
def _cluster(hosts: list[str], spread: str) -> Any:
    """A driver Cluster, token-aware (shuffling replicas for ``spread="replicas"``), with
    TCP_NODELAY as every elastore client (docs/lab.md: Nagle's algorithm costs a 10 KiB
    write ~40 ms)."""
    import socket

    from cassandra.cluster import Cluster
    from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

    policy = TokenAwarePolicy(RoundRobinPolicy(), shuffle_replicas=spread == "replicas")
    return Cluster(hosts, port=9042, load_balancing_policy=policy, protocol_version=5,
                   connect_timeout=20, sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def _await_pools(cluster: Any, session: Any, hosts: list[str], timeout_s: float = 30.0
                 ) -> None:
    """Wait until the driver has an open connection to every node: token-aware routing
    skips a first replica that is not up in the driver's view and sends the request to the
    next one, which is not the routing the replay means to measure. (Once in six runs,
    before this wait, one node's 989 reads were all served by its neighbour while its
    writes were not: the likeliest cause, not proven; the replay now also counts the
    requests answered elsewhere than the first replica, ``off_first_replica``.)"""
    import time

    end = time.monotonic() + timeout_s
    while True:
        state = session.get_pool_state()
        ready = {h.address for h in cluster.metadata.all_hosts()
                 if h.is_up and state.get(h, {}).get("open_count", 0) > 0}
        if set(hosts) <= ready:
            return
        if time.monotonic() > end:
            raise ElastoreError(f"the driver has no open connection to "
                                f"{sorted(set(hosts) - ready)} after {timeout_s:.0f} s")
        time.sleep(0.2)


def _main_preload(session: Any, wl: Workload, ks: str, rf: int, seed: int) -> dict[str, Any]:
    from cassandra import ConsistencyLevel

    from elastore.lab.cassandra.cql import schema_change
    from elastore.lab.cassandra.load import _preload

    schema_change(session, f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
                  f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}")
    # no speculative retry: a read a coordinator also sends to a second replica when the
    # first is slow (the default, '99p') is counted by both, which on a busy machine put
    # 2.5 % more reads on the nodes than the replay issued (a fresh-clone run: 2,429
    # against 2,370); each read is then served where the ring routes it, once
    schema_change(session, f"CREATE TABLE IF NOT EXISTS {ks}.{TABLE} "
                  "(k text PRIMARY KEY, v blob) WITH speculative_retry = 'NONE'")
    write = session.prepare(f"INSERT INTO {ks}.{TABLE} (k, v) VALUES (?, ?)")
    write.consistency_level = ConsistencyLevel.ALL
    rows = [(k, value_of(seed, i)) for i, k in enumerate(wl.keys)]
    _preload(session, write, rows, 16)
    return {"rows": len(rows), "checksum": checksum(dict(rows))}


def _main_tokens(session: Any, wl: Workload, ks: str) -> dict[str, Any]:
    from cassandra.query import SimpleStatement

    st = SimpleStatement(f"SELECT k, token(k) AS t FROM {ks}.{TABLE}", fetch_size=1000)
    got = {str(r.k): int(r.t) for r in session.execute(st, timeout=60)}
    missing = [k for k in wl.keys if k not in got]
    if missing:
        raise ElastoreError(f"{len(missing)} keys have no row to take a token of "
                            f"(e.g. {missing[:3]})")
    return {"tokens": [got[k] for k in wl.keys]}


def _main_replay(cluster: Any, session: Any, wl: Workload, ks: str, seed: int,
                 out_csv: Path, concurrency: int) -> dict[str, Any]:
    from cassandra import ConsistencyLevel

    from elastore.lab.loadgen import replay as engine

    read = session.prepare(f"SELECT v FROM {ks}.{TABLE} WHERE k = ?")
    write = session.prepare(f"INSERT INTO {ks}.{TABLE} (k, v) VALUES (?, ?)")
    read.consistency_level = write.consistency_level = ConsistencyLevel.ONE
    n = len(wl.keys)
    values = [value_of(seed, i) for i in range(n)]  # the preload's: rows stay checkable
    # each key's first replica as the driver's token map has it: where token-aware
    # routing without shuffling must send it (a request sent elsewhere is counted)
    first = [cluster.metadata.get_replicas(ks, read.bind((k,)).routing_key)[0].address
             for k in wl.keys]
    reads, writes = [0] * n, [0] * n
    coordinators: dict[str, int] = {}
    errors, off_first = [0], [0]
    lock = threading.Lock()

    def submit(k: int, is_write: bool, done: Callable[[bool, str], None]) -> None:
        fut = (session.execute_async(write, (wl.keys[k], values[k])) if is_write
               else session.execute_async(read, (wl.keys[k],)))

        def node() -> str:
            host = getattr(fut, "coordinator_host", None) or getattr(fut, "_current_host",
                                                                       None)
            return str(getattr(host, "address", "") or "unknown")

        def ok(_r: Any) -> None:
            who = node()
            with lock:
                (writes if is_write else reads)[k] += 1
                coordinators[who] = coordinators.get(who, 0) + 1
                off_first[0] += who != first[k]
            done(True, who)

        def failed(_e: Any) -> None:
            with lock:
                errors[0] += 1
            done(False, node())

        fut.add_callbacks(ok, failed)

    rows = engine(wl, out_csv, submit, concurrency=concurrency, seed=seed)
    return {"windows": rows, "reads": reads, "writes": writes, "errors": errors[0],
            "coordinators": coordinators, "off_first_replica": off_first[0]}


def _main_verify(session: Any, wl: Workload, ks: str, seed: int) -> dict[str, Any]:
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    st = SimpleStatement(f"SELECT k, v FROM {ks}.{TABLE}", fetch_size=500,
                         consistency_level=ConsistencyLevel.ALL)
    got = {str(r.k): bytes(r.v) for r in session.execute(st, timeout=120)}
    want = {k: value_of(seed, i) for i, k in enumerate(wl.keys)}
    missing = [k for k in want if k not in got]
    unexpected = [k for k in got if k not in want]
    bad = [k for k in want if k in got and got[k] != want[k]]
    return {"rows": len(got), "expected": len(want), "missing": len(missing),
            "unexpected": len(unexpected), "mismatched": len(bad),
            "examples": (missing + unexpected + bad)[:5],
            "checksum": checksum(got), "expected_checksum": checksum(want)}


def main() -> None:
    hosts, cmd = sys.argv[1].split(","), sys.argv[2]
    args = sys.argv[3:]
    wl = Workload.load(args[0])
    spread = args[3] if cmd == "replay" else "primary"
    cluster = _cluster(hosts, spread)
    session = cluster.connect()
    try:
        if cmd == "preload":
            out = _main_preload(session, wl, args[1], int(args[2]), int(args[3]))
        elif cmd == "tokens":
            out = _main_tokens(session, wl, args[1])
        elif cmd == "replay":
            _await_pools(cluster, session, hosts)
            out = _main_replay(cluster, session, wl, args[1], int(args[2]), Path(args[4]),
                               int(args[5]))
        elif cmd == "verify":
            out = _main_verify(session, wl, args[1], int(args[2]))
        else:
            raise SystemExit(f"unknown command {cmd!r}")
        print(json.dumps(out), flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
