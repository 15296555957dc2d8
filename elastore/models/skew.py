"""Skew: token ownership, hot ranges and the cheapest rebalancing (issue 38). Pure: no I/O.

The cluster is a Cassandra ring with the Murmur3Partitioner's token space
[``RING_MIN``, ``RING_MAX``]. Each node holds one token (``num_tokens: 1``) or several
(vnodes). A node's token ``t`` ends its *primary range* ``(previous token, t]`` (start
exclusive, end inclusive, wrapping past ``RING_MAX`` to ``RING_MIN``). SimpleStrategy
places a key's replicas on the range's owner and the next ``rf - 1`` *distinct* nodes
clockwise.

**The work model.** A request is a read with probability ``read_ratio``, else a write.
A write is done by every replica; a read by one replica: spread evenly over the key's
replicas (``spread="replicas"``: the driver shuffles replicas, or the dynamic snitch does)
or on the primary (``spread="primary"``: a token-aware driver without shuffling). The sampled
hot keys (:class:`Keys`) carry a share ``1 - background`` of the requests in proportion to
their rates; the long tail that sampling does not see carries ``background``, spread over
the token space uniformly (hashed keys), hence over the nodes in proportion to their replica
ownership. :func:`node_shares` gives each node's share of the cluster's work (summing to 1).

**Per-node equivalent load.** The capacity model (``elastore.models.capacity``) gives the
requests/s one node serves at the SLO when a cluster of ``n`` nodes shares a total load
evenly (``total / n`` per node). A node with share ``s`` of the work does the work of an
evenly loaded node at ``total_rps * s`` requests/s (whose mean over the nodes is
``total / n``), so its latency is the model's ``latency_ms(total_rps * s, ...)`` and the
cluster keeps the SLO while ``total_rps * max(s) <= capacity_rps``. The imbalance
``n * max(s)`` (busiest over mean) divides the cluster's usable capacity.

**Acting cheapest first.** A scale-out can choose the new node's token (:func:`split_token`,
``initial_token``) instead of Cassandra's ownership-balancing choice (:func:`balanced_token`);
without a new node, one node's token can move between its neighbours (:func:`plan_move`,
``nodetool move``, single-token rings only) within a bound on the data it streams.
:func:`servers_for_busiest` is the count that keeps the busiest node within capacity after
the cheapest of these. :class:`Hysteresis` is the trigger/stop/revert rule of
``../shared/reference/storage-qos-thesis-ch3-chunk-placement.txt`` §3.5.2 (Table 3.1).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

RING_MIN: int = -(2**63)
RING_MAX: int = 2**63 - 1
RING_SIZE: int = 2**64
SPREADS = ("replicas", "primary")
Spread = Literal["replicas", "primary"]


class SkewError(ElastoreError):
    """Bad input to the skew model (a ring, keys or parameters that cannot be used)."""


# --------------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------------
def key_token(key: str) -> int:
    """A uniform signed 64-bit token for ``key``: the first 8 bytes of its BLAKE2b digest.

    This is the simulator's stand-in for Cassandra's Murmur3 hash of the partition key
    (any good hash spreads keys uniformly over the ring, which is all the model uses); the
    lab asks Cassandra for the real token with ``SELECT token(k) FROM ...``. As Murmur3Partitioner
    does, the minimum token (reserved there) is mapped to the maximum."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    token = int.from_bytes(digest, "big", signed=True)
    return RING_MAX if token == RING_MIN else token


def key_tokens(keys: Iterable[str]) -> IntArray:
    """:func:`key_token` of every key, as an int64 array."""
    return np.fromiter((key_token(k) for k in keys), dtype=np.int64)


def _wrap(token: int) -> int:
    """A Python int brought back into [RING_MIN, RING_MAX] modulo 2**64."""
    return (token - RING_MIN) % RING_SIZE + RING_MIN


def _check_token(token: int, what: str) -> int:
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
        raise SkewError(f"{what}: a token must be an integer (got {token!r})")
    value = int(token)
    if not RING_MIN <= value <= RING_MAX:
        raise SkewError(f"{what}: token {value} is outside the Murmur3 token space "
                        f"[{RING_MIN}, {RING_MAX}]")
    return value


def _lengths(sorted_tokens: IntArray) -> FloatArray:
    """Each primary range's length as a fraction of the token space: range ``j`` is
    ``(sorted[j-1], sorted[j]]``, range 0 wrapping from the last token. Works on the last
    axis, so a batch of rings (C, T) gives (C, T)."""
    t = np.asarray(sorted_tokens, dtype=np.int64)
    if t.shape[-1] == 1:
        return np.ones(t.shape)
    prev = np.roll(t, 1, axis=-1)
    diff = t.view(np.uint64) - prev.view(np.uint64)  # wraps modulo 2**64
    out: FloatArray = diff.astype(np.float64) / float(RING_SIZE)
    return out


# --------------------------------------------------------------------------------------
# the ring
# --------------------------------------------------------------------------------------
def _replica_table(owners: IntArray, r: int) -> IntArray:
    """For each token position, the ``r`` distinct nodes clockwise from it (itself first):
    SimpleStrategy's replicas of the range ending at that token. ``owners`` is (T,) or a
    batch (C, T); the result (T, r) or (C, T, r). Vectorised: steps ahead one token at a time
    until every row has ``r`` distinct nodes."""
    own = np.asarray(owners, dtype=np.int64)
    batch = own.reshape(-1, own.shape[-1])
    c, t = batch.shape
    table = np.full((c, t, r), -1, dtype=np.int64)
    table[:, :, 0] = batch
    count = np.ones((c, t), dtype=np.int64)
    step = 1
    while r > 1 and np.any(count < r):
        if step >= t:
            raise SkewError(f"the ring has fewer than {r} distinct nodes")
        cand = np.roll(batch, -step, axis=1)
        fresh = (count < r) & ~np.any(table == cand[:, :, None], axis=2)
        ci, ti = np.nonzero(fresh)
        table[ci, ti, count[ci, ti]] = cand[ci, ti]
        count[ci, ti] += 1
        step += 1
    out: IntArray = table.reshape((*own.shape, r))
    return out


@dataclass(frozen=True)
class Ring:
    """Node names and their tokens (names order). Tokens are distinct over the ring."""

    names: tuple[str, ...]
    tokens: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.names:
            raise SkewError("a ring needs at least one node")
        if len(self.names) != len(self.tokens):
            raise SkewError(f"{len(self.names)} names but {len(self.tokens)} token lists")
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise SkewError(f"node names must be distinct (repeated: {', '.join(dup)})")
        seen: dict[int, str] = {}
        clean: list[tuple[int, ...]] = []
        for name, toks in zip(self.names, self.tokens, strict=True):
            if not isinstance(name, str) or not name:
                raise SkewError(f"a node name must be a non-empty string (got {name!r})")
            if len(toks) == 0:
                raise SkewError(f"node {name} has no token")
            row = []
            for tok in toks:
                value = _check_token(tok, f"node {name}")
                if value in seen:
                    raise SkewError(f"token {value} is held by both {seen[value]} and {name}:"
                                    " tokens must be distinct")
                seen[value] = name
                row.append(value)
            clean.append(tuple(row))
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "tokens", tuple(clean))

    # constructors ----------------------------------------------------------------------
    @classmethod
    def single(cls, names: Sequence[str], tokens: Sequence[int]) -> Ring:
        """One token per node (``num_tokens: 1``)."""
        if len(names) != len(tokens):
            raise SkewError(f"{len(names)} names but {len(tokens)} tokens")
        return cls(tuple(names), tuple((int(t),) for t in tokens))

    @classmethod
    def evenly(cls, names: Sequence[str]) -> Ring:
        """Single tokens spaced evenly: node ``i`` at ``RING_MIN + i * 2**64 / n``."""
        n = len(names)
        if n < 1:
            raise SkewError("a ring needs at least one node")
        return cls.single(names, [RING_MIN + (i * RING_SIZE) // n for i in range(n)])

    # derived arrays (cached) ----------------------------------------------------------
    @cached_property
    def _sorted(self) -> tuple[IntArray, IntArray]:
        toks = np.array([t for row in self.tokens for t in row], dtype=np.int64)
        owners = np.array([i for i, row in enumerate(self.tokens) for _ in row], dtype=np.int64)
        order = np.argsort(toks, kind="stable")
        return toks[order], owners[order]

    @property
    def sorted_tokens(self) -> IntArray:
        """Every token of the ring, ascending."""
        return self._sorted[0]

    @property
    def sorted_owners(self) -> IntArray:
        """The node index (names order) holding each of :attr:`sorted_tokens`."""
        return self._sorted[1]

    @property
    def single_token(self) -> bool:
        return all(len(row) == 1 for row in self.tokens)

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise SkewError(f"no node {name!r} in the ring") from None

    def table(self, rf: int) -> IntArray:
        """(positions, min(rf, n)): each primary range's replicas, the owner first."""
        r = _replica_count(rf, len(self))
        cache = self.__dict__.setdefault("_tables", {})
        if r not in cache:
            cache[r] = _replica_table(self.sorted_owners, r)
        out: IntArray = cache[r]
        return out

    def range_lengths(self) -> FloatArray:
        """Each primary range's share of the token space (sorted-token order)."""
        return _lengths(self.sorted_tokens)

    # the questions ---------------------------------------------------------------------
    def ownership(self, rf: int) -> FloatArray:
        """Per node (names order): the fraction of the token space it holds a replica of.
        Sums to ``min(rf, n)``."""
        table = self.table(rf)
        lengths = self.range_lengths()
        return np.bincount(table.ravel(), weights=np.repeat(lengths, table.shape[1]),
                           minlength=len(self)).astype(np.float64)

    def positions(self, key_tokens: npt.ArrayLike) -> IntArray:
        """The sorted-token position whose primary range holds each key token."""
        k = np.asarray(key_tokens, dtype=np.int64)
        pos = np.searchsorted(self.sorted_tokens, k, side="left")
        pos[pos == self.sorted_tokens.size] = 0
        return pos.astype(np.int64)

    def replicas(self, key_tokens: npt.ArrayLike, rf: int) -> IntArray:
        """(K, min(rf, n)) node indices holding each key, the primary owner first."""
        return self.table(rf)[self.positions(key_tokens)]

    # changes ------------------------------------------------------------------------------
    def with_node(self, name: str, tokens: int | Sequence[int]) -> Ring:
        """The ring with a node added (one token or a list)."""
        if name in self.names:
            raise SkewError(f"node {name!r} is already in the ring")
        row = (int(tokens),) if isinstance(tokens, (int, np.integer)) else tuple(
            int(t) for t in tokens)
        return Ring((*self.names, name), (*self.tokens, row))

    def without(self, name: str) -> Ring:
        """The ring with a node removed (decommissioned)."""
        i = self.index(name)
        if len(self) == 1:
            raise SkewError("cannot remove the last node of the ring")
        return Ring(self.names[:i] + self.names[i + 1:], self.tokens[:i] + self.tokens[i + 1:])

    def moved(self, name: str, token: int) -> Ring:
        """The ring with a single-token node's token moved (``nodetool move``)."""
        i = self.index(name)
        if len(self.tokens[i]) != 1:
            raise SkewError(f"node {name} has {len(self.tokens[i])} tokens: nodetool move "
                            "works only on nodes with one token")
        toks = list(self.tokens)
        toks[i] = (int(token),)
        return Ring(self.names, tuple(toks))


def _replica_count(rf: int, n: int) -> int:
    if isinstance(rf, bool) or not isinstance(rf, (int, np.integer)) or rf < 1:
        raise SkewError(f"the replication factor must be an integer >= 1 (got {rf!r})")
    return min(int(rf), n)


# --------------------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Keys:
    """Sampled hot keys: their tokens, their request rates (requests/s) and, optionally,
    their names (for :class:`HotRange`'s ``top_keys``)."""

    tokens: IntArray
    rates_rps: FloatArray
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        toks = np.asarray(self.tokens)
        if toks.size and not np.issubdtype(toks.dtype, np.integer):
            raise SkewError(f"key tokens must be integers (got dtype {toks.dtype})")
        toks = toks.astype(np.int64).ravel()
        rates = np.asarray(self.rates_rps, dtype=np.float64).ravel()
        if toks.size != rates.size:
            raise SkewError(f"{toks.size} key tokens but {rates.size} rates")
        if rates.size and not np.all(np.isfinite(rates)):
            raise SkewError("key rates must be finite (a NaN or inf rate: a missing sample "
                            "is not a rate)")
        if rates.size and np.any(rates < 0):
            raise SkewError(f"key rates must be >= 0 requests/s (got {rates.min()})")
        if self.names is not None and len(self.names) != toks.size:
            raise SkewError(f"{toks.size} key tokens but {len(self.names)} names")
        object.__setattr__(self, "tokens", toks)
        object.__setattr__(self, "rates_rps", rates)
        if self.names is not None:
            object.__setattr__(self, "names", tuple(self.names))

    @classmethod
    def from_names(cls, names: Sequence[str], rates_rps: npt.ArrayLike) -> Keys:
        """Keys hashed with :func:`key_token`."""
        return cls(key_tokens(names), np.asarray(rates_rps, dtype=np.float64), tuple(names))

    @classmethod
    def empty(cls) -> Keys:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0))

    def __len__(self) -> int:
        return int(self.tokens.size)

    @property
    def total_rps(self) -> float:
        return float(self.rates_rps.sum())

    @cached_property
    def _order(self) -> tuple[IntArray, IntArray, FloatArray]:
        """(order, sorted tokens, cumulative rates with a leading 0) — by token."""
        order = np.argsort(self.tokens, kind="stable").astype(np.int64)
        cum = np.concatenate(([0.0], np.cumsum(self.rates_rps[order])))
        return order, self.tokens[order], cum

    def label(self, i: int) -> str:
        return self.names[i] if self.names is not None else str(int(self.tokens[i]))


# --------------------------------------------------------------------------------------
# shares
# --------------------------------------------------------------------------------------
def _check_params(rf: int, read_ratio: float, spread: str, background: float) -> None:
    if isinstance(rf, bool) or not isinstance(rf, (int, np.integer)) or rf < 1:
        raise SkewError(f"the replication factor must be an integer >= 1 (got {rf!r})")
    if not (isinstance(read_ratio, (int, float)) and 0.0 <= float(read_ratio) <= 1.0):
        raise SkewError(f"read_ratio must be in [0, 1] (got {read_ratio!r})")
    if spread not in SPREADS:
        raise SkewError(f"spread must be one of {', '.join(SPREADS)} (got {spread!r})")
    if not (isinstance(background, (int, float)) and 0.0 <= float(background) <= 1.0):
        raise SkewError(f"background must be a share in [0, 1] (got {background!r})")


def _range_requests(sorted_tokens: IntArray, keys: Keys, background: float) -> FloatArray:
    """Each primary range's share of the requests (sums to 1 along the last axis): the
    keys' share ``1 - background`` by their rates, the background's by the range's length.
    With no key load at all, everything is background. (T,) or a batch (C, T)."""
    lengths = _lengths(sorted_tokens)
    _, ktoks, cum = keys._order
    total = float(cum[-1])
    if total <= 0.0:
        return lengths
    at = cum[np.searchsorted(ktoks, sorted_tokens, side="right")]
    per = np.empty(at.shape)
    per[..., 1:] = at[..., 1:] - at[..., :-1]
    per[..., 0] = at[..., 0] + (total - at[..., -1])
    per = np.maximum(per, 0.0) / total
    out: FloatArray = (1.0 - background) * per + background * lengths
    return out


def _node_work(q: FloatArray, table: IntArray, n: int, read_ratio: float,
               spread: str) -> FloatArray:
    """Each node's share of the work for per-range request shares ``q``: (T,) with a table
    (T, r) gives (n,); a batch (C, T) with (C, T, r) gives (C, n)."""
    r = table.shape[-1]
    qb = q.reshape(-1, q.shape[-1])
    tb = table.reshape(qb.shape[0], qb.shape[1], r)
    c = qb.shape[0]
    base = (np.arange(c, dtype=np.int64) * n)[:, None, None]
    idx = (tb + base).ravel()
    write = (1.0 - read_ratio) * qb
    if spread == "replicas":
        per_replica = write + read_ratio * qb / r
        work = np.bincount(idx, weights=np.repeat(per_replica.ravel(), r), minlength=c * n)
    else:
        work = np.bincount(idx, weights=np.repeat(write.ravel(), r), minlength=c * n)
        work += np.bincount((tb[:, :, 0] + base[:, :, 0]).ravel(),
                            weights=read_ratio * qb.ravel(), minlength=c * n)
    total = read_ratio + (1.0 - read_ratio) * r
    out: FloatArray = (work / total).reshape((*q.shape[:-1], n))
    return out


def node_shares(ring: Ring, keys: Keys, rf: int, read_ratio: float,
                spread: Spread | str = "replicas", background: float = 0.0) -> FloatArray:
    """Each node's share (names order) of the cluster's request work, summing to 1.

    A write costs one unit on every replica; a read one unit on one replica (spread over
    the replicas, or on the primary: ``spread``). ``background`` is the share of requests
    from keys not in ``keys`` (the unsampled long tail), uniform over the token space.
    A node's equivalent load is ``total_rps * share`` requests/s: the load per node at which
    an evenly loaded cluster does the same work per node (mean ``total_rps / n``); feed it
    to the capacity model's ``latency_ms``."""
    _check_params(rf, read_ratio, spread, background)
    q = _range_requests(ring.sorted_tokens, keys, float(background))
    return _node_work(q, ring.table(rf), len(ring), float(read_ratio), spread)


def imbalance(values: npt.ArrayLike) -> float:
    """The busiest over the mean (1.0 = balanced) of per-node loads or shares."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise SkewError("imbalance of no nodes: need at least one per-node value")
    if not np.all(np.isfinite(v)):
        raise SkewError("imbalance: a per-node value is NaN or infinite (missing is not zero)")
    if np.any(v < 0):
        raise SkewError(f"imbalance: per-node values must be >= 0 (got {v.min()})")
    mean = float(v.mean())
    if mean <= 0.0:
        raise SkewError("imbalance: every node's load is 0, so busiest over mean is undefined")
    return float(v.max()) / mean


# --------------------------------------------------------------------------------------
# hot ranges
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HotRange:
    """A primary range ``(start, end]`` (wrapping past RING_MAX when start >= end), its
    owner and replicas, its share of the requests (``load_share``, sampled keys plus the
    background), its share of the token space (``data_share``: of the data, keys being
    hashed) and its hottest keys."""

    start: int
    end: int
    owner: str
    replicas: tuple[str, ...]
    load_share: float
    data_share: float
    top_keys: tuple[str, ...]


def hot_ranges(ring: Ring, keys: Keys, rf: int, read_ratio: float,
               spread: Spread | str = "replicas", background: float = 0.0,
               top: int = 5) -> list[HotRange]:
    """The ``top`` primary ranges by request share, hottest first."""
    _check_params(rf, read_ratio, spread, background)
    if top < 1:
        raise SkewError(f"top must be >= 1 (got {top})")
    st = ring.sorted_tokens
    q = _range_requests(st, keys, float(background))
    lengths = ring.range_lengths()
    table = ring.table(rf)
    order = np.argsort(-q, kind="stable")[:top]
    kpos = ring.positions(keys.tokens) if len(keys) else np.zeros(0, dtype=np.int64)
    out = []
    for j in order:
        in_range = np.flatnonzero(kpos == j)
        hottest = in_range[np.argsort(-keys.rates_rps[in_range], kind="stable")][:3]
        out.append(HotRange(
            start=int(st[j - 1]) if st.size > 1 else int(st[0]),
            end=int(st[j]),
            owner=ring.names[int(table[j, 0])],
            replicas=tuple(ring.names[int(i)] for i in table[j]),
            load_share=float(q[j]),
            data_share=float(lengths[j]),
            top_keys=tuple(keys.label(int(i)) for i in hottest),
        ))
    return out


# --------------------------------------------------------------------------------------
# choosing tokens
# --------------------------------------------------------------------------------------
def _midpoint(start: int, end: int) -> int:
    """The token halfway along ``(start, end]`` going clockwise (the whole ring when
    start == end)."""
    length = (end - start) % RING_SIZE or RING_SIZE
    return _wrap(start + length // 2)


def balanced_token(ring: Ring, rf: int | None = None) -> int:
    """The token count-only scaling gets: chosen by ownership alone, blind to the load.

    Without ``rf``: the midpoint of the largest primary range, what a single-token
    bootstrap without ``initial_token`` got from Cassandra before the token allocator
    (bisecting the range of the node with the most data: with hashed keys, data follows
    ownership). With ``rf``: Cassandra 4.0+'s replication-aware allocator
    (``allocate_tokens_for_local_replication_factor``) with ``num_tokens: 1``: of the
    midpoints of every range, the one that leaves the most even replicated ownership (the
    largest node's lowest, then the least spread)."""
    st = ring.sorted_tokens
    if rf is not None:
        return split_token(ring, Keys.empty(), rf, 0.0, "replicas", 1.0)
    lengths = ring.range_lengths()
    j = int(np.argmax(lengths))
    start = int(st[j - 1]) if st.size > 1 else int(st[0])
    return _midpoint(start, int(st[j]))


def _batch_shares(sorted_tokens: IntArray, owners: IntArray, n: int, keys: Keys, rf: int,
                  read_ratio: float, spread: str, background: float,
                  chunk: int = 512) -> FloatArray:
    """Node shares (C, n) of a batch of rings given as sorted tokens and owners (C, T)."""
    r = min(rf, n)
    out = np.empty((sorted_tokens.shape[0], n))
    for lo in range(0, sorted_tokens.shape[0], chunk):
        st, ow = sorted_tokens[lo:lo + chunk], owners[lo:lo + chunk]
        q = _range_requests(st, keys, background)
        out[lo:lo + chunk] = _node_work(q, _replica_table(ow, r), n, read_ratio, spread)
    return out


def _sort_rows(tokens: IntArray, owners: IntArray) -> tuple[IntArray, IntArray]:
    order = np.argsort(tokens, axis=1, kind="stable")
    return np.take_along_axis(tokens, order, axis=1), np.take_along_axis(owners, order, axis=1)


def _candidate_tokens(ring: Ring, keys: Keys, background: float,
                      ranges: IntArray | None = None,
                      levels: int = 16) -> list[int]:
    """Split candidates inside primary ranges: for each range, its midpoint and the tokens
    at load-weighted quantiles of the keys it holds (each quantile key's token, so the key
    joins the new part, and the token before it, so it stays)."""
    st = ring.sorted_tokens
    tcount = st.size
    if ranges is None:
        ranges = np.arange(tcount)
    _, ktoks, cum = keys._order
    kcount = ktoks.size
    out: set[int] = set()
    for j in ranges.tolist():
        start = int(st[j - 1]) if tcount > 1 else int(st[0])
        end = int(st[j])
        out.add(_midpoint(start, end))
        if kcount == 0:
            continue
        lo = int(np.searchsorted(ktoks, st[j - 1], side="right")) if tcount > 1 else 0
        hi = int(np.searchsorted(ktoks, st[j], side="right"))
        if tcount > 1 and j == 0:
            idx = np.concatenate((np.arange(lo, kcount), np.arange(0, hi)))
        elif tcount == 1:
            idx = np.arange(kcount)
        else:
            idx = np.arange(lo, hi)
        if idx.size == 0:
            continue
        rates = np.diff(cum)[idx]
        c = np.cumsum(rates)
        if c[-1] <= 0:
            continue
        targets = c[-1] * np.arange(1, levels) / levels
        picks = np.unique(np.minimum(np.searchsorted(c, targets, side="left"), idx.size - 1))
        for p in picks.tolist():
            tok = int(ktoks[idx[p]])
            out.add(tok)
            out.add(_wrap(tok - 1))
        # the range's hottest key on its own: the tokens that fence it in
        hot = int(idx[int(np.argmax(rates))])
        out.add(int(ktoks[hot]))
        out.add(_wrap(int(ktoks[hot]) - 1))
    return sorted(out)


def _insert(st: IntArray, owners: IntArray, token: int, owner: int) -> tuple[IntArray, IntArray]:
    pos = int(np.searchsorted(st, token))
    return np.insert(st, pos, token), np.insert(owners, pos, owner)


def split_token(ring: Ring, keys: Keys, rf: int, read_ratio: float,
                spread: Spread | str = "replicas", background: float = 0.0) -> int:
    """The new node's token that minimises the busiest node's share once it has joined.

    Candidates: in each primary range (with more than 64, the 48 hottest and the 16
    largest), load-weighted
    quantiles of the key tokens inside it and the midpoint; each is evaluated exactly
    (the ring with the new node, every node's share). Ties go to the candidate with the
    evener shares (lowest sum of squares), then the smallest largest range, then the lowest
    token."""
    _check_params(rf, read_ratio, spread, background)
    st, owners = ring.sorted_tokens, ring.sorted_owners
    n = len(ring)
    ranges: IntArray | None = None
    levels = 16
    if st.size > 64:  # vnodes: the hottest ranges and the largest, more coarsely
        q = _range_requests(st, keys, float(background))
        ranges = np.unique(np.concatenate((np.argsort(-q)[:48],
                                           np.argsort(-ring.range_lengths())[:16])))
        levels = 8
    existing = set(st.tolist())
    weighted = keys if background < 1.0 and keys.total_rps > 0 else Keys.empty()
    cands = np.array([t for t in _candidate_tokens(ring, weighted, float(background), ranges,
                                                        levels)
                      if t not in existing], dtype=np.int64)
    if cands.size == 0:
        raise SkewError("no free token to split the ring at")
    c = cands.size
    toks = np.concatenate((np.broadcast_to(st, (c, st.size)), cands[:, None]), axis=1)
    owns = np.concatenate((np.broadcast_to(owners, (c, st.size)),
                           np.full((c, 1), n, dtype=np.int64)), axis=1)
    toks, owns = _sort_rows(toks, owns)
    shares = _batch_shares(toks, owns, n + 1, keys, int(rf), float(read_ratio), spread,
                           float(background))
    top = np.round(shares.max(axis=1), 12)
    spread_sq = np.round((shares**2).sum(axis=1), 12)
    largest = _lengths(toks).max(axis=1)
    best = np.lexsort((cands, largest, spread_sq, top))[0]
    return int(cands[best])


# --------------------------------------------------------------------------------------
# moves
# --------------------------------------------------------------------------------------
def streamed_fraction(before: Ring, after: Ring, rf: int) -> float:
    """The bytes a ring change streams over all bytes stored before (all replicas),
    assuming data spread evenly over the token space: on every segment between the two
    rings' tokens, each node that replicates it after but not before receives it."""
    names = sorted(set(before.names) | set(after.names))
    code = {name: i for i, name in enumerate(names)}
    bounds = np.unique(np.concatenate((before.sorted_tokens, after.sorted_tokens)))
    seg = _lengths(bounds)
    map_b = np.array([code[x] for x in before.names], dtype=np.int64)
    map_a = np.array([code[x] for x in after.names], dtype=np.int64)
    rep_b = map_b[before.replicas(bounds, rf)]
    rep_a = map_a[after.replicas(bounds, rf)]
    new = (rep_a[:, :, None] != rep_b[:, None, :]).all(axis=2).sum(axis=1)
    stored = float(min(rf, len(before)))
    return float((seg * new).sum() / stored)


@dataclass(frozen=True)
class Transfer:
    """What a ring change streams: ``fraction`` of the bytes stored (all replicas, data
    even over the token space), from ``senders`` (one source per segment gained: its
    primary owner before the change; a leaving node sends its own data) to ``receivers``
    (the nodes that replicate a segment after but not before)."""

    fraction: float
    senders: tuple[str, ...]
    receivers: tuple[str, ...]


def transfer(before: Ring, after: Ring, rf: int) -> Transfer:
    """:func:`streamed_fraction` with who sends and who receives."""
    names = sorted(set(before.names) | set(after.names))
    code = {name: i for i, name in enumerate(names)}
    bounds = np.unique(np.concatenate((before.sorted_tokens, after.sorted_tokens)))
    seg = _lengths(bounds)
    map_b = np.array([code[x] for x in before.names], dtype=np.int64)
    map_a = np.array([code[x] for x in after.names], dtype=np.int64)
    rep_b = map_b[before.replicas(bounds, rf)]
    rep_a = map_a[after.replicas(bounds, rf)]
    gained = (rep_a[:, :, None] != rep_b[:, None, :]).all(axis=2)
    new = gained.sum(axis=1)
    fraction = float((seg * new).sum() / float(min(rf, len(before))))
    moving = new > 0
    receivers = sorted({names[int(i)] for i in rep_a[gained]})
    left = set(before.names) - set(after.names)
    senders = {names[int(i)] for i in rep_b[moving, 0]}
    if left:  # a decommission: the leaving node streams its own replicas away
        senders = left
    return Transfer(fraction, tuple(sorted(senders)), tuple(receivers))


@dataclass(frozen=True)
class Move:
    """One ``nodetool move``: ``node``'s token from ``from_token`` to ``to_token``;
    ``moved_fraction`` is the bytes it streams over all bytes stored (all replicas, data
    spread evenly over the token space); the imbalances are before and after it."""

    node: str
    from_token: int
    to_token: int
    moved_fraction: float
    imbalance_before: float
    imbalance_after: float


def _move_candidates(start: int, end: int, keys: Keys, levels: int = 16,
                     grid: int = 32) -> list[int]:
    """Tokens strictly between ``start`` and ``end`` (clockwise): an even grid plus
    load-weighted quantiles of the keys in between (each key's token and the one before)."""
    length = (end - start) % RING_SIZE or RING_SIZE  # two nodes: all but the other's token
    out: set[int] = set()
    if length < 2:
        return []
    for i in range(1, grid):
        out.add(_wrap(start + (length * i) // grid))
    _, ktoks, cum = keys._order
    if ktoks.size:
        lo = int(np.searchsorted(ktoks, start, side="right"))
        hi = int(np.searchsorted(ktoks, end, side="left"))
        if start < end:
            idx = np.arange(lo, max(lo, hi))
        else:
            idx = np.concatenate((np.arange(lo, ktoks.size), np.arange(0, hi)))
        if idx.size:
            rates = np.diff(cum)[idx]
            c = np.cumsum(rates)
            if c[-1] > 0:
                targets = c[-1] * np.arange(1, levels) / levels
                picks = np.unique(np.minimum(np.searchsorted(c, targets), idx.size - 1))
                for p in picks.tolist():
                    tok = int(ktoks[idx[p]])
                    out.update((tok, _wrap(tok - 1)))
    inside = []
    for tok in out:
        off = (tok - start) % RING_SIZE
        if 0 < off < length:
            inside.append(tok)
    return sorted(inside)


def plan_move(ring: Ring, keys: Keys, rf: int, read_ratio: float,
              spread: Spread | str = "replicas", background: float = 0.0,
              max_move_fraction: float = 0.05) -> Move | None:
    """The move of one node's token, between its neighbours' tokens, that lowers the busiest
    node's share most while streaming at most ``max_move_fraction`` of the stored data;
    None when no move helps. Only the tokens that bound the ranges a busiest node
    replicates can change its load, so those nodes are the ones tried. When several nodes
    tie as the busiest, no one move may lower the maximum; a move that keeps it and makes
    the shares evener (a lower sum of squares) then helps too, as a step towards lowering
    it. Ties go to the evener shares, then the fewer bytes. Single-token rings only:
    ``nodetool move`` refuses nodes with vnodes."""
    _check_params(rf, read_ratio, spread, background)
    if not ring.single_token:
        raise SkewError("plan_move needs one token per node: nodetool move refuses nodes "
                        "with vnodes (num_tokens > 1)")
    if not (0.0 <= max_move_fraction <= 1.0):
        raise SkewError(f"max_move_fraction must be in [0, 1] (got {max_move_fraction})")
    n = len(ring)
    if n < 2:
        return None
    shares = node_shares(ring, keys, rf, read_ratio, spread, background)
    before = float(shares.max())
    ss_before = float((shares**2).sum())
    st, owners = ring.sorted_tokens, ring.sorted_owners
    r = min(rf, n)
    movers_set: set[int] = set()
    for busiest in np.flatnonzero(shares >= before * (1 - 1e-9)).tolist():
        pos = int(np.flatnonzero(owners == busiest)[0])
        movers_set.update((pos - k) % n for k in range(0, r + 1))
    movers = sorted(movers_set)
    rows: list[IntArray] = []
    at: list[int] = []
    for p in movers:
        start, end = int(st[(p - 1) % n]), int(st[(p + 1) % n])
        cands = np.array(_move_candidates(start, end, keys), dtype=np.int64)
        if cands.size == 0:
            continue
        batch = np.broadcast_to(st, (cands.size, n)).copy()
        batch[:, p] = cands
        rows.append(batch)
        at.extend([p] * cands.size)
    if not rows:
        return None
    toks = np.concatenate(rows)
    where = np.array(at, dtype=np.int64)
    new_tok = toks[np.arange(toks.shape[0]), where]
    node = owners[where]
    stoks, sowns = _sort_rows(toks, np.broadcast_to(owners, toks.shape).copy())
    cand_shares = _batch_shares(stoks, sowns, n, keys, int(rf), float(read_ratio), spread,
                                float(background))
    top = cand_shares.max(axis=1)
    ss = (cand_shares**2).sum(axis=1)
    better = np.flatnonzero((top < before * (1 - 1e-9))
                            | ((top <= before * (1 + 1e-12)) & (ss < ss_before * (1 - 1e-6))))
    if better.size == 0:
        return None
    moved = np.array([streamed_fraction(ring, ring.moved(ring.names[int(node[i])],
                                                         int(new_tok[i])), rf)
                      for i in better])
    ok = moved <= max_move_fraction + 1e-12
    if not np.any(ok):
        return None
    better, moved = better[ok], moved[ok]
    pick = np.lexsort((new_tok[better], node[better], moved, np.round(ss[better], 12),
                       np.round(top[better], 12)))[0]
    i = int(better[pick])
    name = ring.names[int(node[i])]
    return Move(node=name, from_token=int(ring.tokens[int(node[i])][0]),
                to_token=int(new_tok[i]), moved_fraction=float(moved[pick]),
                imbalance_before=before * n, imbalance_after=float(top[i]) * n)


# --------------------------------------------------------------------------------------
# planning for the busiest node
# --------------------------------------------------------------------------------------
def hottest_key_share(keys: Keys, rf: int, read_ratio: float,
                      spread: Spread | str = "replicas", background: float = 0.0) -> float:
    """A floor on the busiest node's share on any ring of at least ``rf`` nodes: the work
    the hottest key alone puts on one of its replicas (no token choice splits a key)."""
    _check_params(rf, read_ratio, spread, background)
    total = keys.total_rps
    if len(keys) == 0 or total <= 0:
        return 0.0
    q = (1.0 - background) * float(keys.rates_rps.max()) / total
    read = read_ratio * q / rf if spread == "replicas" else read_ratio * q
    return ((1.0 - read_ratio) * q + read) / (read_ratio + (1.0 - read_ratio) * rf)


def _new_name(ring: Ring) -> str:
    k = len(ring)
    while f"new-{k}" in ring.names:
        k += 1
    return f"new-{k}"


def best_removal(ring: Ring, keys: Keys, rf: int, read_ratio: float,
                 spread: Spread | str = "replicas", background: float = 0.0) -> str:
    """The node whose removal keeps the busiest node's share lowest (ties: the evener
    shares, lowest sum of squares, then the later node in names order, as a StatefulSet
    removes its highest ordinal)."""
    if len(ring) < 2:
        raise SkewError("cannot remove a node from a one-node ring")
    best: tuple[float, float, int] | None = None
    for i, name in enumerate(ring.names):
        shares = node_shares(ring.without(name), keys, rf, read_ratio, spread, background)
        score = (round(float(shares.max()), 12), round(float((shares**2).sum()), 12), -i)
        if best is None or score < best:
            best = score
    assert best is not None
    return ring.names[-best[2]]


def _grown(ring: Ring, keys: Keys, n: int, rf: int, read_ratio: float, spread: str,
           background: float, smart: bool) -> Ring:
    out = ring
    while len(out) < n:
        tok = (split_token(out, keys, rf, read_ratio, spread, background) if smart
               else balanced_token(out, rf))
        out = out.with_node(_new_name(out), tok)
    return out


def _with_move(ring: Ring, keys: Keys, rf: int, read_ratio: float, spread: str,
               background: float, max_move_fraction: float, max_moves: int = 1) -> Ring:
    """The ring after up to ``max_moves`` moves, each the best :func:`plan_move`."""
    if not ring.single_token or max_move_fraction <= 0:
        return ring
    for _ in range(max_moves):
        move = plan_move(ring, keys, rf, read_ratio, spread, background, max_move_fraction)
        if move is None:
            break
        ring = ring.moved(move.node, move.to_token)
    return ring


def rebalanced(ring: Ring, keys: Keys, n: int, rf: int, read_ratio: float,
               spread: Spread | str, background: float, max_move_fraction: float,
               smart: bool = True, max_moves: int = 1) -> tuple[Ring, float]:
    """The ring at ``n >= len(ring)`` nodes after the cheapest rebalancing, and its
    imbalance: added nodes take :func:`split_token` (``smart``) or :func:`balanced_token`;
    then, when ``smart``, one :func:`plan_move` if it helps."""
    _check_params(rf, read_ratio, spread, background)
    if n < len(ring):
        raise SkewError(f"rebalanced grows the ring: n={n} is below its {len(ring)} nodes")
    out = _grown(ring, keys, n, rf, read_ratio, spread, background, smart)
    if smart:
        out = _with_move(out, keys, rf, read_ratio, spread, background, max_move_fraction,
                         max_moves)
    return out, imbalance(node_shares(out, keys, rf, read_ratio, spread, background))


def shrunk(ring: Ring, keys: Keys, n: int, rf: int, read_ratio: float,
           spread: Spread | str = "replicas", background: float = 0.0) -> Ring:
    """The ring at ``1 <= n <= len(ring)`` nodes, removing one at a time the node whose
    removal keeps the busiest node lowest."""
    if n < 1:
        raise SkewError(f"a ring needs at least one node (n={n})")
    out = ring
    while len(out) > n:
        out = out.without(best_removal(out, keys, rf, read_ratio, spread, background))
    return out


def servers_for_busiest(total_rps: float, capacity_rps: float, ring: Ring, keys: Keys,
                        rf: int, read_ratio: float, spread: Spread | str, background: float,
                        max_move_fraction: float, max_nodes: int, smart: bool = True,
                        max_moves: int = 1) -> int:
    """The fewest nodes, at least ``ceil(total / capacity)``, whose busiest node's equivalent
    load (``total_rps * share``) stays within ``capacity_rps`` after the cheapest rebalancing
    (below the ring's size: the best removals, then a move when ``smart``); ``max_nodes``
    when none does. ``smart=False`` adds nodes at :func:`balanced_token` and never moves."""
    _check_params(rf, read_ratio, spread, background)
    if not (math.isfinite(total_rps) and total_rps >= 0):
        raise SkewError(f"total_rps must be finite and >= 0 (got {total_rps})")
    if not (math.isfinite(capacity_rps) and capacity_rps > 0):
        raise SkewError(f"capacity_rps must be finite and > 0 (got {capacity_rps})")
    if max_nodes < 1:
        raise SkewError(f"max_nodes must be >= 1 (got {max_nodes})")
    lo = max(1, math.ceil(total_rps / capacity_rps - 1e-9))
    if lo >= max_nodes:
        return max_nodes
    if lo >= rf and total_rps * hottest_key_share(keys, rf, read_ratio, spread,
                                                  background) > capacity_rps * (1 + 1e-9):
        return max_nodes  # one key alone overloads its replicas, whatever the ring
    grown = ring
    for n in range(lo, max_nodes + 1):
        if n < len(ring):
            cand = shrunk(ring, keys, n, rf, read_ratio, spread, background)
        else:
            grown = _grown(grown, keys, n, rf, read_ratio, spread, background, smart)
            cand = grown
        if smart:
            cand = _with_move(cand, keys, rf, read_ratio, spread, background,
                              max_move_fraction, max_moves)
        top = float(node_shares(cand, keys, rf, read_ratio, spread, background).max())
        if total_rps * top <= capacity_rps * (1 + 1e-9):
            return n
    return max_nodes


def capacity_factors(ring: Ring, keys: Keys, rf: int, read_ratio: float,
                     spread: Spread | str, background: float, max_move_fraction: float,
                     n_max: int, smart: bool = True, max_moves: int = 1) -> dict[int, float]:
    """For each n in ``len(ring)..n_max``: 1 / imbalance after the cheapest rebalancing at
    n (the planner multiplies a node's capacity by it); for n below the ring's size, the
    current ring with the node holding the least load removed, one at a time."""
    _check_params(rf, read_ratio, spread, background)
    out: dict[int, float] = {}
    grown = ring
    for n in range(len(ring), n_max + 1):
        grown = _grown(grown, keys, n, rf, read_ratio, spread, background, smart)
        cand = _with_move(grown, keys, rf, read_ratio, spread, background,
                          max_move_fraction, max_moves) if smart else grown
        out[n] = 1.0 / imbalance(node_shares(cand, keys, rf, read_ratio, spread, background))
    small = ring
    while len(small) > 1:
        shares = node_shares(small, keys, rf, read_ratio, spread, background)
        small = small.without(small.names[int(np.argmin(shares))])
        out[len(small)] = 1.0 / imbalance(node_shares(small, keys, rf, read_ratio, spread,
                                                      background))
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------------------
# hysteresis
# --------------------------------------------------------------------------------------
HysteresisAction = Literal["act", "hold", "stop", "revert"]


@dataclass(frozen=True)
class HysteresisState:
    smoothed: float | None = None  # the EWMA of the busiest node's utilization
    active: bool = False  # a rebalancing is in place (to stop or revert)


def hysteresis_step(state: HysteresisState, utilization: float, alpha: float = 0.85,
                    high: float = 0.75, stop: float = 0.55,
                    revert: float = 0.45) -> tuple[HysteresisState, HysteresisAction]:
    """One step of the trigger/stop/revert rule on the busiest node's utilization (its
    equivalent load over its capacity at the SLO): the EWMA ``s = alpha * u + (1 - alpha) *
    s_prev`` (the first sample as is); ``act`` while ``s >= high`` (rebalance, and keep
    doing so); once active, ``revert`` when ``s < revert`` (undo the moves, inactive again),
    ``stop`` when ``s < stop`` (make no further move, keep those made), else ``hold``."""
    if not math.isfinite(utilization) or utilization < 0:
        raise SkewError(f"utilization must be finite and >= 0 (got {utilization})")
    s = utilization if state.smoothed is None else (
        alpha * utilization + (1 - alpha) * state.smoothed)
    if s >= high:
        return HysteresisState(s, True), "act"
    if state.active and s < revert:
        return HysteresisState(s, False), "revert"
    if state.active and s < stop:
        return HysteresisState(s, True), "stop"
    return HysteresisState(s, state.active), "hold"


class Hysteresis:
    """The trigger/stop/revert rule of ``../shared/reference/storage-qos-thesis-ch3-chunk-
    placement.txt`` §3.5.2 with its Table 3.1 cut-offs: smoothed busiest-node utilization at
    or above 75 % acts, below 55 % stops, below 45 % reverts. The reference smooths
    exponentially with a factor 0.85 without saying which term it weighs; here ``alpha``
    (default 0.85) weighs the new sample, since a sample is one control period (minutes to
    an hour) and a heavy weight on the past would act an hour or more late. Deterministic,
    no I/O; its state (:attr:`state`) is plain data for a status to keep."""

    def __init__(self, alpha: float = 0.85, high: float = 0.75, stop: float = 0.55,
                 revert: float = 0.45, state: HysteresisState | None = None) -> None:
        if not 0.0 < alpha <= 1.0:
            raise SkewError(f"the smoothing alpha must be in (0, 1] (got {alpha})")
        if not 0.0 <= revert <= stop <= high:
            raise SkewError(f"need revert <= stop <= high (got {revert}, {stop}, {high})")
        self.alpha, self.high, self.stop, self.revert = alpha, high, stop, revert
        self.state = state or HysteresisState()

    @property
    def smoothed(self) -> float | None:
        return self.state.smoothed

    @property
    def active(self) -> bool:
        return self.state.active

    def step(self, utilization: float) -> HysteresisAction:
        self.state, action = hysteresis_step(self.state, utilization, self.alpha, self.high,
                                             self.stop, self.revert)
        return action
