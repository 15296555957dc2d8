"""The per-node skew simulator (issue 38): a single-token Cassandra ring whose nodes each
carry their own share of the load, replayed hour by hour from per-key popularity.

``elastore.sim.run`` models N identical nodes sharing the load evenly; here every node
has its tokens, hence its replicas, hence its share of the work (:mod:`elastore.models.skew`:
a write on every replica, a read on one, the unsampled long tail uniform over the ring).
A node's equivalent load is ``total_rps * share`` and its p95 is the capacity model's
``latency_ms`` at that load (with the stream rate as migration while it sends or receives).

**Workload** (:class:`KeyTrace`): per hour, each listed key's requests and the share
``background`` of requests from keys not listed. From the per-page Wikipedia trace
(:func:`from_page_table`: noise pages removed, key = page title, token = its hash; the
file lists only pages with about 100 requests or more in an hour, so the tail is fitted:
:func:`fit_tail`), or a Zipf popularity (:func:`zipf_trace`) where no per-key data exists.

**Replay** (:func:`run_arm`): steps of ``step_s`` (5 min) with the total and every key's
rate interpolated linearly between hour knots; one decision per hour, at its start, for
that hour. Every arm sees the same information: the hour's total (an oracle: the larger of
its two knots) and the key rates and background share of the hour before (what sampling
hot partitions gives). Actions take time and happen one at a time: a new node boots
(``boot_s``) and then streams what it gains at ``stream_mibps`` from each sender; a move
or a decommission streams its bytes the same way; the ring changes when the action ends.

**Arms** (:data:`ARMS`):

* ``count-only``: today's elastore: nodes for the mean (``ceil(forecast / (capacity x
  (1 - headroom)))``), new nodes at :func:`~elastore.models.skew.balanced_token`, no moves;
* ``count-busiest``: plans for the busiest node (``servers_for_busiest``) but can only add
  nodes at the balanced token: it buys nodes that barely help (a reference arm);
* ``skew-aware``: ``servers_for_busiest`` with split tokens for new nodes and one
  ``plan_move`` within ``max_move_fraction`` when the busiest node would still be over the
  target and the :class:`~elastore.models.skew.Hysteresis` acts; moves are reverted when it
  says revert (and the busiest node stays within the target without them).

Scale-in for every arm removes the node whose removal keeps the busiest node lowest.
Pure apart from the trace it is given: no I/O here (``experiments/skew/run.py`` reads).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError
from elastore.models.capacity import CapacityModel
from elastore.models.skew import (
    Hysteresis,
    Keys,
    Ring,
    balanced_token,
    best_removal,
    imbalance,
    key_tokens,
    node_shares,
    plan_move,
    servers_for_busiest,
    split_token,
    transfer,
)
from elastore.traces.readers import PageTable
from elastore.traces.workload import DEFAULT_NOISE_PAGES, noise_mask
from elastore.units import GIB, MIB

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

ARMS = ("count-only", "count-busiest", "skew-aware")
#: English Wikipedia's articles in January 2016: the 5,000,000th was created on 1 November
#: 2015 (The Signpost, 2015-10-28, "English Wikipedia reaches five million articles"),
#: about 5.1 million by the end of January 2016 at the growth of the time
EN_ARTICLES_2016_01 = 5_100_000


# --------------------------------------------------------------------------------------
# the workload
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyTrace:
    """Per-hour key popularity. ``hour_keys[h]`` are indices into ``names``/``tokens`` and
    ``hour_requests[h]`` their requests in hour h; ``background[h]`` is the share of hour
    h's requests from keys not listed, ``total_requests[h]`` all of hour h's requests (the
    listed keys' and the background's)."""

    names: tuple[str, ...]
    tokens: IntArray
    hours_utc: tuple[str, ...]
    hour_keys: tuple[IntArray, ...]
    hour_requests: tuple[FloatArray, ...]
    background: FloatArray
    total_requests: FloatArray
    source: str
    tail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        h = len(self.hours_utc)
        if h < 3:
            raise ElastoreError(f"{self.source}: a key trace needs at least 3 hours (got {h})")
        if not (len(self.hour_keys) == len(self.hour_requests) == h
                and self.background.shape == (h,) and self.total_requests.shape == (h,)):
            raise ElastoreError(f"{self.source}: per-hour arrays of different lengths")
        if not np.all((self.background >= 0) & (self.background <= 1)):
            raise ElastoreError(f"{self.source}: background shares must be in [0, 1]")
        if not np.all(np.isfinite(self.total_requests)) or np.any(self.total_requests <= 0):
            raise ElastoreError(f"{self.source}: every hour needs a total > 0 requests "
                                "(a missing hour is not zero)")

    @property
    def hours(self) -> int:
        return len(self.hours_utc)

    def with_background(self, share: float) -> KeyTrace:
        """The same hours with a constant background share (the listed keys keep their
        relative rates, the totals stay as they are)."""
        if not 0.0 <= share <= 1.0:
            raise ElastoreError(f"background must be a share in [0, 1] (got {share})")
        return KeyTrace(self.names, self.tokens, self.hours_utc, self.hour_keys,
                        self.hour_requests, np.full(self.hours, float(share)),
                        self.total_requests, self.source, {**self.tail, "constant": share})

    def keys(self, h: int) -> Keys:
        """Hour h's listed keys (rates in requests/s over the hour)."""
        idx = self.hour_keys[h]
        return Keys(self.tokens[idx], self.hour_requests[h] / 3600.0)

    def window(self, start: int, hours: int) -> KeyTrace:
        if start < 0 or hours < 3 or start + hours > self.hours:
            raise ElastoreError(f"window {start}+{hours} h is outside the trace's "
                                f"{self.hours} hours")
        sl = slice(start, start + hours)
        return KeyTrace(self.names, self.tokens, self.hours_utc[sl], self.hour_keys[sl],
                        self.hour_requests[sl], self.background[sl],
                        self.total_requests[sl], self.source, self.tail)


def _zipf_tail_sum(first_rank: Any, last_rank: float, exponent: float) -> Any:
    """sum_{r=first}^{last} r^-s, by the midpoint integral (exact to well under 1 % from
    rank 10 on)."""
    a = np.asarray(first_rank, dtype=float) - 0.5
    b = last_rank + 0.5
    if abs(exponent - 1.0) < 1e-9:
        return np.log(b / a)
    return (b ** (1 - exponent) - a ** (1 - exponent)) / (1 - exponent)


def fit_tail(hour_requests: Sequence[FloatArray], articles: int = EN_ARTICLES_2016_01,
             min_rank: int = 10, min_requests: float = 1000.0) -> dict[str, Any]:
    """The unlisted tail of each hour, from a Zipf fit of the listed head's rank-frequency
    curve, extrapolated to ``articles`` keys.

    The exponent s is the median over hours of the least-squares slope of ln(requests) on
    ln(rank), over ranks >= ``min_rank`` (the very top is bursty) with at least
    ``min_requests`` (10 samples of the 1:100 sampled source: below that the counts are
    sampling noise). Each hour's scale is then fitted at that s, and its tail is the Zipf
    sum from the rank after the last listed key to ``articles``. Returns the exponent, the
    hourly exponents' spread, and per hour the tail's requests and background share."""
    slopes = []
    for r in hour_requests:
        rs = np.sort(np.asarray(r, dtype=float))[::-1]
        rank = np.arange(1, rs.size + 1)
        sel = (rank >= min_rank) & (rs >= min_requests)
        if sel.sum() >= 20:
            slopes.append(-np.polyfit(np.log(rank[sel]), np.log(rs[sel]), 1)[0])
    if not slopes:
        raise ElastoreError(f"no hour has 20 keys of rank >= {min_rank} with >= "
                            f"{min_requests:g} requests: the head is too thin to fit a tail")
    s = float(np.median(slopes))
    tails = np.empty(len(hour_requests))
    for h, r in enumerate(hour_requests):
        rs = np.sort(np.asarray(r, dtype=float))[::-1]
        rank = np.arange(1, rs.size + 1)
        sel = (rank >= min_rank) & (rs >= min_requests)
        if sel.sum() < 3:
            sel = rank >= 1
        log_c = float(np.mean(np.log(rs[sel]) + s * np.log(rank[sel])))
        first = rs.size + 1
        tails[h] = math.exp(log_c) * float(_zipf_tail_sum(first, articles, s)) \
            if first <= articles else 0.0
    heads = np.array([float(np.sum(r)) for r in hour_requests])
    return {"exponent": s, "exponent_p10": float(np.percentile(slopes, 10)),
            "exponent_p90": float(np.percentile(slopes, 90)), "hours_fitted": len(slopes),
            "articles": int(articles), "min_rank": min_rank, "min_requests": min_requests,
            "tail_requests": tails, "background": tails / (tails + heads)}


def from_page_table(table: PageTable, noise_pages: tuple[str, ...] = DEFAULT_NOISE_PAGES,
                    articles: int = EN_ARTICLES_2016_01) -> KeyTrace:
    """A :class:`KeyTrace` from a per-page table: the noise pages (the ProRenaTa trace
    construction's list, ``elastore.traces.workload``) removed, each page a key hashed
    with :func:`~elastore.models.skew.key_token`, the unlisted tail fitted (:func:`fit_tail`)
    and each hour's total the listed pages' requests plus its tail."""
    hours = np.unique(table.hour)
    span = int(hours.max() - hours.min() + 1)
    if hours.size != span:
        raise ElastoreError(f"{table.source}: {span - hours.size} hours missing; the skew "
                            "replay needs every hour (a gap is not zero requests)")
    noise = noise_mask(table.pages, noise_pages)
    keep = ~noise[table.page]
    hour, page, req = table.hour[keep], table.page[keep], table.requests[keep]
    used = np.unique(page)
    remap = np.full(len(table.pages), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    names = tuple(table.pages[int(i)] for i in used)
    order = np.argsort(hour, kind="stable")
    hour, page, req = hour[order], remap[page[order]], req[order]
    bounds = np.searchsorted(hour, np.append(hours, hours[-1] + 1))
    hour_keys = []
    hour_req = []
    for h in range(hours.size):
        sl = slice(int(bounds[h]), int(bounds[h + 1]))
        if sl.start == sl.stop:
            raise ElastoreError(f"{table.source}: hour {h} has no page left after removing "
                                "the noise pages")
        hour_keys.append(page[sl].astype(np.int64))
        hour_req.append(req[sl].astype(np.float64))
    tail = fit_tail(hour_req, articles)
    heads = np.array([r.sum() for r in hour_req])
    stamps = tuple(str(np.datetime64(int(h), "h")).replace("T", " ") for h in hours)
    info = {k: v for k, v in tail.items() if k not in ("tail_requests", "background")}
    info["noise_pages_removed"] = int(noise[np.unique(table.page)].sum())
    return KeyTrace(names, key_tokens(names), stamps, tuple(hour_keys), tuple(hour_req),
                    np.asarray(tail["background"], dtype=float),
                    heads + np.asarray(tail["tail_requests"], dtype=float), table.source, info)


def zipf_trace(hourly_requests: Sequence[float], keys: int = 100_000, exponent: float = 0.8,
               background: float = 0.0, hot_churn: float = 0.0, seed: int = 0) -> KeyTrace:
    """A Zipf popularity where no per-key data exists: ``keys`` keys (``key-<i>``), key of
    rank r carrying a share proportional to r^-exponent of the listed requests, over hourly
    totals ``hourly_requests``; ``background`` of each hour unlisted. With ``hot_churn``
    > 0, each hour that share of the top 100 ranks is given to keys drawn at random (a
    moving hot set); 0 keeps the popularity fixed."""
    if keys < 1 or not exponent > 0:
        raise ElastoreError(f"zipf needs keys >= 1 and an exponent > 0 (got {keys}, "
                            f"{exponent})")
    totals = np.asarray(hourly_requests, dtype=float)
    rng = np.random.default_rng(seed)
    weights = np.arange(1, keys + 1, dtype=float) ** -exponent
    weights /= weights.sum()
    perm = np.arange(keys)
    hour_keys, hour_req = [], []
    for total in totals:
        if hot_churn > 0:
            top = min(100, keys)
            swap = rng.random(top) < hot_churn
            others = rng.integers(0, keys, swap.sum())
            perm = perm.copy()
            perm[np.flatnonzero(swap)], perm[others] = perm[others], perm[np.flatnonzero(swap)]
        hour_keys.append(perm.copy())
        hour_req.append(weights * total * (1 - background))
    names = tuple(f"key-{i}" for i in range(keys))
    stamps = tuple(f"h{i}" for i in range(totals.size))
    return KeyTrace(names, key_tokens(names), stamps, tuple(hour_keys), tuple(hour_req),
                    np.full(totals.size, float(background)), totals, "zipf",
                    {"exponent": exponent, "keys": keys, "hot_churn": hot_churn})


# --------------------------------------------------------------------------------------
# measuring the skew
# --------------------------------------------------------------------------------------
def top_share(requests: FloatArray, fraction: float, population: int | None = None,
              tail_requests: float = 0.0, exponent: float | None = None) -> float:
    """The share of an hour's requests on its top ``fraction`` of keys. Over the listed
    keys only (``population`` None), or over ``population`` keys of which the unlisted
    ones carry ``tail_requests`` along a Zipf tail of ``exponent``."""
    rs = np.sort(np.asarray(requests, dtype=float))[::-1]
    listed = float(rs.sum())
    if population is None:
        k = max(1, math.ceil(fraction * rs.size))
        return float(rs[:k].sum() / listed)
    k = max(1, math.ceil(fraction * population))
    total = listed + tail_requests
    if k <= rs.size:
        return float(rs[:k].sum() / total)
    if exponent is None or tail_requests <= 0:
        return listed / total
    first = rs.size + 1
    whole = float(_zipf_tail_sum(first, population, exponent))
    part = float(_zipf_tail_sum(first, k, exponent))
    return (listed + tail_requests * part / whole) / total


# --------------------------------------------------------------------------------------
# the replay
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SkewSimConfig:
    """The replay's parameters (units in the names)."""

    rf: int = 3
    read_ratio: float = 0.95  # elastore.sim.run's default for the Wikipedia workload
    spread: str = "replicas"
    max_move_fraction: float = 0.05  # of the data stored, per move
    max_moves: int = 1  # moves per decision (each within max_move_fraction)
    headroom: float = 0.1  # the planner's target: capacity x (1 - headroom)
    peak_nodes: int = 12  # the window's peak hour needs this many nodes at the mean
    min_nodes: int = 3
    max_nodes: int = 64
    step_s: float = 300.0
    boot_s: float = 120.0
    stream_mibps: float = 24.0  # per sender, the ceiling: Cassandra's default throughput
    min_stream_mibps: float = 1.0  # BwMan's floor, so a migration always finishes
    data_gib: float = 50.0  # all data stored, replicas included
    hysteresis_alpha: float = 0.85

    def validate(self) -> None:
        if not 3600 % self.step_s == 0 or self.step_s <= 0:
            raise ElastoreError(f"the step ({self.step_s:g} s) must divide an hour")
        if not 0 <= self.headroom < 1:
            raise ElastoreError(f"headroom must be in [0, 1) (got {self.headroom})")
        if not 1 <= self.min_nodes <= self.peak_nodes <= self.max_nodes:
            raise ElastoreError("need 1 <= min_nodes <= peak_nodes <= max_nodes")
        if not (self.stream_mibps > 0 and self.data_gib > 0 and self.boot_s >= 0):
            raise ElastoreError("stream rate and data must be > 0, boot time >= 0")


@dataclass
class _Action:
    kind: str  # add | remove | move | revert
    node: str
    after: Ring
    start_s: float = 0.0
    stream_from_s: float = 0.0
    end_s: float = 0.0
    fraction: float = 0.0
    busy: frozenset[str] = frozenset()  # serving nodes that send or receive
    rate_mibps: float = 0.0  # per sender, set when it starts


@dataclass
class ArmRun:
    """One arm over one window: per hour and per step figures, and what it did."""

    arm: str
    violated_hours: list[bool] = field(default_factory=list)
    #: hours with a step where a node not streaming was over the SLO (its load alone)
    overloaded_hours: list[bool] = field(default_factory=list)
    violated_steps_load: int = 0  # a node over the SLO by its load alone
    violated_steps_streaming: int = 0  # only nodes that were streaming were over
    nodes_hourly: list[int] = field(default_factory=list)  # the plan's count per hour
    billed_node_steps: float = 0.0
    busiest_util: list[float] = field(default_factory=list)  # per step, of capacity at SLO
    p95_busiest_ms: list[float] = field(default_factory=list)
    imbalance: list[float] = field(default_factory=list)  # per step, busiest / mean
    moves: list[dict[str, Any]] = field(default_factory=list)
    reverts: int = 0
    nodes_added: int = 0
    nodes_removed: int = 0
    streamed_fractions: list[float] = field(default_factory=list)  # every action's
    rings_at_hour: list[Ring] = field(default_factory=list)  # at each decision, before it
    rings_after_hour: list[Ring] = field(default_factory=list)  # at each hour's end

    def metrics(self, step_s: float) -> dict[str, Any]:
        imb = np.asarray(self.imbalance)
        return {
            "violated_hours": int(sum(self.violated_hours)),
            "overloaded_hours": int(sum(self.overloaded_hours)),
            "violated_steps_load": self.violated_steps_load,
            "violated_steps_streaming": self.violated_steps_streaming,
            "hours": len(self.violated_hours),
            "server_hours": self.billed_node_steps * step_s / 3600.0,
            "imbalance_mean": float(imb.mean()),
            "imbalance_p95": float(np.percentile(imb, 95)),
            "imbalance_max": float(imb.max()),
            "busiest_util_p95": float(np.percentile(self.busiest_util, 95)),
            "busiest_util_max": float(np.max(self.busiest_util)),
            "moves": len(self.moves),
            "move_fraction_max": max((m["moved_fraction"] for m in self.moves), default=0.0),
            "move_fraction_mean": float(np.mean([m["moved_fraction"] for m in self.moves]))
            if self.moves else 0.0,
            "move_imbalance_before_mean": float(np.mean(
                [m["imbalance_before"] for m in self.moves])) if self.moves else None,
            "move_imbalance_after_mean": float(np.mean(
                [m["imbalance_after"] for m in self.moves])) if self.moves else None,
            "reverts": self.reverts,
            "nodes_added": self.nodes_added,
            "nodes_removed": self.nodes_removed,
        }


def _interp_keys(trace: KeyTrace, h: int) -> tuple[IntArray, FloatArray, FloatArray]:
    """The union of hours h and h+1's keys with both hours' requests on it."""
    j = min(h + 1, trace.hours - 1)
    ka, ra = trace.hour_keys[h], trace.hour_requests[h]
    kb, rb = trace.hour_keys[j], trace.hour_requests[j]
    union = np.union1d(ka, kb)
    a = np.zeros(union.size)
    b = np.zeros(union.size)
    a[np.searchsorted(union, ka)] = ra
    b[np.searchsorted(union, kb)] = rb
    return union, a, b


def hour_scale(trace: KeyTrace, capacity_rps: float, cfg: SkewSimConfig) -> float:
    """requests/h -> requests/s with the window's peak hour needing ``peak_nodes`` nodes at
    the planner's target utilization on the mean: peak = peak_nodes x capacity x (1 -
    headroom)."""
    peak = float(np.max(trace.total_requests))
    return cfg.peak_nodes * capacity_rps * (1 - cfg.headroom) / peak


class _Arm:
    """One arm's state through a window."""

    def __init__(self, arm: str, trace: KeyTrace, cap: CapacityModel, cfg: SkewSimConfig,
                 scale: float, ring: Ring) -> None:
        self.arm, self.trace, self.cap, self.cfg, self.scale = arm, trace, cap, cfg, scale
        self.capacity_rps = float(cap.capacity(cfg.read_ratio))
        self.target_rps = self.capacity_rps * (1 - cfg.headroom)
        self.ring = ring
        self.running: _Action | None = None
        self.queue: list[_Action] = []
        self.moved_from: dict[str, int] = {}  # node -> its token before the first move
        self.hyst = Hysteresis(alpha=cfg.hysteresis_alpha)
        self.run = ArmRun(arm)
        self.serial = 0
        self.last_load: dict[str, float] = {}  # per node, requests/s, the last step's

    # planning -------------------------------------------------------------------------
    def _new_name(self, ring: Ring) -> str:
        while f"node-{self.serial}" in ring.names:
            self.serial += 1
        return f"node-{self.serial}"

    def _shares(self, ring: Ring, keys: Keys, background: float) -> FloatArray:
        c = self.cfg
        return node_shares(ring, keys, c.rf, c.read_ratio, c.spread, background)

    def plan(self, h: int) -> None:
        """The decision at hour h's start for hour h."""
        c, tr = self.cfg, self.trace
        nxt = min(h + 1, tr.hours - 1)
        forecast = max(tr.total_requests[h], tr.total_requests[nxt]) * self.scale
        keys = tr.keys(h - 1)
        bg = float(tr.background[h - 1])
        base = self.running.after if self.running else self.ring
        if self.arm == "count-only":
            n = max(1, math.ceil(forecast / self.target_rps - 1e-9))
        else:
            n = servers_for_busiest(forecast, self.target_rps, base, keys, c.rf, c.read_ratio,
                                    c.spread, bg, c.max_move_fraction, c.max_nodes,
                                    smart=self.arm == "skew-aware", max_moves=c.max_moves)
        n = min(max(n, c.min_nodes), c.max_nodes)
        self.run.nodes_hourly.append(n)
        ring = base
        actions: list[_Action] = []
        while len(ring) < n:
            if self.arm == "skew-aware":
                tok = split_token(ring, keys, c.rf, c.read_ratio, c.spread, bg)
            else:
                tok = balanced_token(ring, c.rf)
            name = self._new_name(ring)
            self.serial += 1
            ring = ring.with_node(name, tok)
            actions.append(_Action("add", name, ring))
        while len(ring) > n:
            name = best_removal(ring, keys, c.rf, c.read_ratio, c.spread, bg)
            ring = ring.without(name)
            self.moved_from.pop(name, None)
            actions.append(_Action("remove", name, ring))
        if self.arm == "skew-aware":
            busiest = forecast * float(self._shares(ring, keys, bg).max())
            action = self.hyst.step(busiest / self.capacity_rps)
            for _ in range(c.max_moves if action == "act" else 0):
                if forecast * float(self._shares(ring, keys, bg).max()) <= self.target_rps:
                    break
                move = plan_move(ring, keys, c.rf, c.read_ratio, c.spread, bg,
                                 c.max_move_fraction)
                if move is not None:
                    self.moved_from.setdefault(move.node, move.from_token)
                    ring = ring.moved(move.node, move.to_token)
                    act = _Action("move", move.node, ring)
                    actions.append(act)
                    self.run.moves.append({
                        "hour": tr.hours_utc[h], "node": move.node,
                        "moved_fraction": move.moved_fraction,
                        "imbalance_before": move.imbalance_before,
                        "imbalance_after": move.imbalance_after})
                else:
                    break
            if action == "revert" and self.moved_from:
                for node, token in sorted(self.moved_from.items()):
                    back = self._revert(ring, node, token)
                    if back is None:
                        continue
                    if forecast * float(self._shares(back, keys, bg).max()) > self.target_rps:
                        continue  # the rest cannot take the load back yet
                    ring = back
                    actions.append(_Action("revert", node, ring))
                    self.run.reverts += 1
                self.moved_from.clear()
        self.queue = actions

    @staticmethod
    def _revert(ring: Ring, node: str, token: int) -> Ring | None:
        """The ring with ``node`` back at ``token``, if that lies between its neighbours."""
        if node not in ring.names or token in set(ring.sorted_tokens.tolist()):
            return None
        if not ring.single_token or len(ring) < 2:
            return None
        st, own = ring.sorted_tokens, ring.sorted_owners
        p = int(np.flatnonzero(own == ring.index(node))[0])
        lo, hi = int(st[(p - 1) % len(st)]), int(st[(p + 1) % len(st)])
        size = 2**64
        if not 0 < (token - lo) % size < ((hi - lo) % size or size):
            return None
        return ring.moved(node, token)

    # acting -----------------------------------------------------------------------------
    def _start(self, act: _Action, t: float) -> None:
        c = self.cfg
        tr = transfer(self.ring, act.after, c.rf)
        nbytes = tr.fraction * c.data_gib * GIB
        act.busy = frozenset(set(tr.senders) | set(tr.receivers)) & frozenset(self.ring.names)
        act.rate_mibps = self._stream_rate(act.busy)
        rate = act.rate_mibps * MIB * max(1, len(tr.senders))
        act.start_s = t
        act.stream_from_s = t + (c.boot_s if act.kind == "add" else 0.0)
        act.end_s = act.stream_from_s + nbytes / rate
        act.fraction = tr.fraction
        self.run.streamed_fractions.append(tr.fraction)
        if act.kind == "add":
            self.run.nodes_added += 1
        elif act.kind == "remove":
            self.run.nodes_removed += 1
        self.running = act

    def _stream_rate(self, busy: frozenset[str]) -> float:
        """BwMan's rate, per sender: the fastest the capacity model allows at the busiest
        involved node's load (as last evaluated), within the SLO less half the headroom
        (the planner's migration margin), between ``min_stream_mibps`` and
        ``stream_mibps``."""
        c = self.cfg
        if not self.last_load or not busy:
            return c.stream_mibps
        mean = float(np.mean(list(self.last_load.values())))
        worst = max(self.last_load.get(name, mean) for name in busy)
        f = float(self.cap.max_migration_rate(worst, c.read_ratio,
                                              slo_fraction=1 - c.headroom / 2))
        return min(c.stream_mibps, max(c.min_stream_mibps, f))

    def advance(self, t: float, start_next: bool = True) -> None:
        """Complete the actions that end by ``t`` and (``start_next``) start the next."""
        while True:
            if self.running is not None:
                if self.running.end_s > t:
                    return
                self.ring = self.running.after
                done = self.running.end_s
                self.running = None
            else:
                done = t
            if not self.queue or not start_next:
                return
            self._start(self.queue.pop(0), min(done, t))

    def billed(self) -> int:
        extra = 1 if self.running is not None and self.running.kind == "add" else 0
        return len(self.ring) + extra


def run_arm(arm: str, trace: KeyTrace, cap: CapacityModel, cfg: SkewSimConfig,
            scale: float | None = None, start_ring: Ring | None = None) -> ArmRun:
    """One arm over the whole of ``trace`` (its first hour only gives the first decision
    its key rates): decisions at hours 1..H-1."""
    if arm not in ARMS:
        raise ElastoreError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    cfg.validate()
    capacity_rps = float(cap.capacity(cfg.read_ratio))
    if not capacity_rps > 0:
        raise ElastoreError(f"the capacity model serves nothing at read ratio "
                            f"{cfg.read_ratio}")
    scale = hour_scale(trace, capacity_rps, cfg) if scale is None else scale
    if start_ring is None:
        first = max(trace.total_requests[1], trace.total_requests[2]) * scale
        n0 = min(max(math.ceil(first / (capacity_rps * (1 - cfg.headroom)) - 1e-9),
                     cfg.min_nodes), cfg.max_nodes)
        start_ring = Ring.evenly([f"node-{i}" for i in range(n0)])
    state = _Arm(arm, trace, cap, cfg, scale, start_ring)
    state.serial = len(start_ring)
    steps = int(3600 / cfg.step_s)
    slo = cap.slo_ms
    for h in range(1, trace.hours - 1):
        t0 = (h - 1) * 3600.0
        state.advance(t0, start_next=False)
        state.queue = []
        state.run.rings_at_hour.append(state.ring)
        state.plan(h)
        state.advance(t0)
        union, ra, rb = _interp_keys(trace, h)
        toks = trace.tokens[union]
        violated = False
        load_hour = False
        for k in range(steps):
            t = t0 + k * cfg.step_s
            f = k / steps
            total = ((1 - f) * trace.total_requests[h] + f * trace.total_requests[h + 1]) \
                * scale
            bg = float((1 - f) * trace.background[h] + f * trace.background[h + 1])
            keys = Keys(toks, (1 - f) * ra + f * rb)
            state.advance(t)
            shares = state._shares(state.ring, keys, bg)
            load = total * shares
            state.last_load = dict(zip(state.ring.names, load.tolist(), strict=True))
            mig = np.zeros(len(state.ring))
            run = state.running
            if run is not None and t >= run.stream_from_s:
                for i, name in enumerate(state.ring.names):
                    if name in run.busy:
                        mig[i] = run.rate_mibps
            p95 = cap.latency_ms(load, cfg.read_ratio, mig)
            worst = float(np.max(p95))
            violated |= worst > slo
            over = p95 > slo
            if np.any(over & (mig == 0)):
                state.run.violated_steps_load += 1
                load_hour = True
            elif np.any(over):
                state.run.violated_steps_streaming += 1
            state.run.p95_busiest_ms.append(worst)
            state.run.busiest_util.append(float(load.max()) / capacity_rps)
            state.run.imbalance.append(imbalance(shares))
            state.run.billed_node_steps += state.billed()
        state.advance(t0 + 3600.0 - 1e-6)
        state.run.rings_after_hour.append(state.ring)
        state.run.violated_hours.append(violated)
        state.run.overloaded_hours.append(load_hour)
    return state.run


def optimal_server_hours(trace: KeyTrace, cap: CapacityModel, cfg: SkewSimConfig,
                         scale: float) -> float:
    """The count bound: each hour, the fewest nodes that carry its peak on the mean at the
    SLO (no headroom, perfectly even load), over the replayed hours."""
    capacity_rps = float(cap.capacity(cfg.read_ratio))
    total = 0.0
    for h in range(1, trace.hours - 1):
        peak = max(trace.total_requests[h], trace.total_requests[h + 1]) * scale
        total += max(cfg.min_nodes, math.ceil(peak / capacity_rps - 1e-9))
    return total


def run_window(trace: KeyTrace, cap: CapacityModel, cfg: SkewSimConfig,
               arms: Sequence[str] = ARMS,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every arm over one window (the same scale and starting ring), with the optimal
    count's server-hours."""
    capacity_rps = float(cap.capacity(cfg.read_ratio))
    scale = hour_scale(trace, capacity_rps, cfg)
    out: dict[str, Any] = {"scale": scale, "runs": {}}
    for arm in arms:
        run = run_arm(arm, trace, cap, cfg, scale)
        out["runs"][arm] = run
        if progress:
            m = run.metrics(cfg.step_s)
            progress(f"{arm}: {m['violated_hours']}/{m['hours']} violated hours, "
                     f"{m['server_hours']:.0f} server-hours, {m['moves']} moves")
    out["optimal_server_hours"] = optimal_server_hours(trace, cap, cfg, scale)
    return out
