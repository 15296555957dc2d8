"""The cheapest schedule of one-node topology changes over a horizon. Pure, exact.

A storage cluster changes one node at a time and never aborts a change. Over ``T`` steps
of ``step_s`` seconds, a schedule says, at every step where the cluster is idle at ``n``
servers, whether it stays (one step), adds a node (a boot of ``boot_steps`` steps, then a
bootstrap streaming ``add_bytes[n]`` from each of the n senders at the rule's rate) or
removes one (a decommission streaming ``remove_bytes[n]`` from the leaving node). Its
cost is

    U = VM-hours + penalty x violation-hours

where a step bills every node that exists (a joining node from its first boot step, a
leaving node until it has handed everything over) and violates when the :class:`Horizon`
says the latency of that step, in that state, is over the SLO.

With a cleanup (``Horizon.clean_bytes``, the operator's ``spec.scaleUp.cleanup``), a join
is followed by ``nodetool cleanup`` on the old nodes in turn: ``clean_bytes`` rewritten at
the rule's cleanup rate, the cluster serving meanwhile (billed as it is, violating where
the horizon says a cleanup step does, never less than idle). No removal starts before it
has ended; a further addition may start at any of its steps and supersedes it (that
join's own cleanup covers every old node again).

:func:`cheapest` finds the schedule of least U by dynamic programming over (step, servers)
states, backwards in time: a state's value is the least of staying, adding and removing,
each followed by the value of the state it leads to. With K move options, N server counts
and T steps it costs O(K N T) time and memory, and it is exact for the physics the Horizon
describes: no heuristic, no solver tolerance. A cleanup adds one state per (step, servers),
"just joined": its value is the least of running the cleanup to its end (then idle) and
cleaning until some step j, then adding. The second is a minimum over j of a prefix sum
plus the add's value; over every j >= the step, not only those before the cleanup's end,
since an add at a j past the end is never cheaper than ending the cleanup, idling until j
(a cleanup step costs at least an idle one) and adding then. So it is a running minimum,
kept backwards in time, and the cost stays O(K N T).

Two users: :class:`elastore.sim.controllers.OptimalController` (the true load, the
simulator's own physics: a lower bound on U for every controller in the comparison), and
the horizon planner (:mod:`elastore.planner.horizon`: the forecast, from the state now).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError
from elastore.models.bundle import ModelSet
from elastore.models.migration import MigrationModel, mixture_exceeds
from elastore.models.storage import DISK_PENALTY_FACTOR, StorageConfig, disk_tables
from elastore.units import MIB

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
HOUR_S = 3600.0
EPS_BYTES = 1e-6  # a change is done when less than this is left to move (as the simulator)


@dataclass(frozen=True)
class RateRule:
    """One way to run migrations: per (servers n, step) the rate of a bootstrap from n
    (MiB/s per sender) and of a decommission from n (MiB/s from the leaving node), and
    whether the latency of such a step violates the SLO."""

    name: str
    add_mibps: FloatArray  # (N, T)
    add_violates: BoolArray  # (N, T)
    remove_mibps: FloatArray  # (N, T)
    remove_violates: BoolArray  # (N, T)
    #: the cleanup after a join (only with ``Horizon.clean_bytes``), by the servers serving
    #: during it (row m: m serve, m - 1 old nodes rewrite in turn): the rate the node being
    #: cleaned rewrites at (MiB/s), and whether (or how likely) such a step violates
    clean_mibps: FloatArray | None = None  # (N, T)
    clean_violates: npt.NDArray[np.generic] | None = None  # (N, T)


@dataclass(frozen=True)
class Horizon:
    """What every step costs in every state. Row ``k`` of each table is ``n_lo + k``
    servers serving; a change from ``n`` is described in row ``n``."""

    step_s: float
    n_lo: int
    idle_violates: BoolArray  # (N, T): n serving, no migration (also during a boot)
    rules: tuple[RateRule, ...]
    boot_steps: int
    #: (N,) or (N, T), by the change's first streaming step: bytes each sender streams
    #: going n -> n+1 (a growing cluster's changes move more as time goes on)
    add_bytes: FloatArray
    remove_bytes: FloatArray  # (N,) or (N, T): bytes the leaving node streams, n -> n-1
    #: the bytes: per (n, step) the probability that a node is over its disk budget, idle
    #: at n, adding a node from n (the old nodes keep their bytes until their cleanup
    #: ends) and removing one from n (the survivors receive the leaving node's bytes);
    #: each hour of it costs ``disk_penalty`` (None: the bytes do not bind)
    disk_idle: FloatArray | None = None  # (N, T)
    disk_add: FloatArray | None = None  # (N, T)
    disk_remove: FloatArray | None = None  # (N, T)
    disk_penalty: float = 0.0
    #: the cleanup after each join: per row m (m servers once the node has joined) the
    #: bytes the old nodes rewrite, (N,) or (N, T) by the cleanup's first step; None: no
    #: cleanup (a join ends when its data has arrived, the reference text's cluster)
    clean_bytes: FloatArray | None = None

    @property
    def steps(self) -> int:
        return int(self.idle_violates.shape[1])

    @property
    def n_hi(self) -> int:
        return self.n_lo + int(self.idle_violates.shape[0]) - 1

    def validate(self) -> None:
        n, t = self.idle_violates.shape
        if n < 1 or t < 1 or self.n_lo < 1 or not self.step_s > 0 or self.boot_steps < 0:
            raise ElastoreError(f"an empty or malformed horizon ({n} server counts from "
                                f"{self.n_lo}, {t} steps of {self.step_s} s)")
        if not self.rules:
            raise ElastoreError("a horizon needs at least one rate rule")
        for r in self.rules:
            for a in (r.add_mibps, r.add_violates, r.remove_mibps, r.remove_violates):
                if a.shape != (n, t):
                    raise ElastoreError(f"rule {r.name}: a table of shape {a.shape}, "
                                        f"not {(n, t)}")
            if np.any(r.add_mibps < 0) or np.any(r.remove_mibps < 0):
                raise ElastoreError(f"rule {r.name}: a negative migration rate")
        if any(a.shape not in ((n,), (n, t)) for a in (self.add_bytes, self.remove_bytes)):
            raise ElastoreError("add_bytes and remove_bytes need one value per server count "
                                "(and step)")
        if self.clean_bytes is not None:
            if self.clean_bytes.shape not in ((n,), (n, t)):
                raise ElastoreError("clean_bytes needs one value per server count (and step)")
            for r in self.rules:
                if r.clean_mibps is None or r.clean_violates is None or \
                        r.clean_mibps.shape != (n, t) or r.clean_violates.shape != (n, t):
                    raise ElastoreError(f"rule {r.name}: a cleanup needs clean_mibps and "
                                        f"clean_violates, each of shape {(n, t)}")
                if np.any(r.clean_mibps < 0):
                    raise ElastoreError(f"rule {r.name}: a negative cleanup rate")
        disk = (self.disk_idle, self.disk_add, self.disk_remove)
        if any(d is not None for d in disk):
            if any(d is None or d.shape != (n, t) for d in disk):
                raise ElastoreError(f"the disk tables need all three, each of shape {(n, t)}")
            if not self.disk_penalty >= 0:
                raise ElastoreError(f"the disk penalty must be >= 0, got {self.disk_penalty}")

    def disk(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The three disk tables (zeros when the bytes do not bind)."""
        if self.disk_idle is None or self.disk_add is None or self.disk_remove is None:
            z = np.zeros(self.idle_violates.shape)
            return z, z, z
        return self.disk_idle, self.disk_add, self.disk_remove


@dataclass(frozen=True)
class Move:
    start: int  # the step the change starts (the cluster is idle at n_from before it)
    end: int  # the first step at n_to (> steps: it does not finish within the horizon)
    n_from: int
    n_to: int
    rule: str
    boot_end: int  # the first bootstrap step (a removal: = start)
    #: an addition with a cleanup: the step its cleanup ended (or a further addition cut it
    #: short; > steps: it runs past the horizon), and the rule it ran at; else end and ""
    clean_end: int = -1
    clean_rule: str = ""

    @property
    def cleans(self) -> bool:
        return self.clean_end > self.end


@dataclass
class Schedule:
    moves: list[Move]
    vm_hours: float
    violation_hours: float
    cost: float  # vm_hours + penalty x violation_hours (+ the terminal value, if any)
    n0: int
    penalty: float
    rule_index: dict[str, int] = field(default_factory=dict)
    #: expected hours with a node over its disk budget (billed at the horizon's
    #: disk_penalty; 0 when the bytes do not bind)
    disk_hours: float = 0.0

    def servers_at(self, step: int) -> int:
        """Servers serving at ``step`` (a joining node serves from its end step)."""
        n = self.n0
        for m in self.moves:
            if m.end <= step:
                n = m.n_to
            else:
                break
        return n

    def move_at(self, step: int) -> Move | None:
        """The change under way at ``step``, if any."""
        for m in self.moves:
            if m.start <= step < m.end:
                return m
            if m.start > step:
                break
        return None

    def cleaning_at(self, step: int) -> Move | None:
        """The addition whose cleanup runs at ``step``, if any."""
        for m in self.moves:
            if m.cleans and m.end <= step < m.clean_end:
                return m
            if m.start > step:
                break
        return None


def _ends(rate: FloatArray, start: IntArray, nbytes: FloatArray, step_s: float) -> IntArray:
    """Per row n, for every first streaming step s in ``start[n]``: the first step at which
    ``nbytes[n]`` have been streamed at ``rate[n]`` (T + 1 if never within T steps)."""
    n, t = rate.shape
    cum = np.zeros((n, t + 1))
    np.cumsum(rate * (step_s * MIB), axis=1, out=cum[:, 1:])
    out = np.empty(start.shape, dtype=np.int64)
    for k in range(n):
        s = np.minimum(start[k], t)
        nb = nbytes[k] if nbytes.ndim == 1 else nbytes[k, np.minimum(s, t - 1)]
        need = cum[k, s] + nb - EPS_BYTES
        out[k] = np.searchsorted(cum[k], need, side="left")
    out[start > t] = t + 1
    return out


def _window_sum(prefix: FloatArray, a: IntArray, b: IntArray) -> FloatArray:
    """Row-wise sums over [a, b) of the series whose prefix sums (length T + 1) are given;
    both ends clipped to [0, T]."""
    t = prefix.shape[1] - 1
    rows = np.arange(prefix.shape[0])[:, None]
    return np.asarray(prefix[rows, np.clip(b, 0, t)] - prefix[rows, np.clip(a, 0, t)])


def cheapest(h: Horizon, n0: int, penalty: float, *, terminal: FloatArray | None = None,
             floor: IntArray | None = None, cleaning_bytes: float = 0.0,
             ceiling: int | None = None) -> Schedule:
    """The schedule of least U from ``n0`` servers, idle, at step 0.

    ``terminal[k]``: the value of ending the horizon at ``n_lo + k`` servers (default 0).
    ``floor[t]``: no removal may leave fewer servers than this from step t on (e.g. the
    scale-down stabilization window). ``ceiling``: no more servers than this (``replicas.max``):
    none is added to pass it, and from above it (``n0`` over it: someone else scaled the
    target up, or the policy's max was lowered) the only way is down, one removal after the
    other from step 0, whatever the load; the floor gives way to it. ``cleaning_bytes`` (a
    horizon with a cleanup): the ``n0`` servers are not idle but in a join's cleanup with
    this much left to rewrite."""
    h.validate()
    if not h.n_lo <= n0 <= h.n_hi:
        raise ElastoreError(f"{n0} servers are outside the horizon's {h.n_lo}..{h.n_hi}")
    if not penalty >= 0:
        raise ElastoreError(f"the violation penalty must be >= 0, got {penalty}")
    N, T = h.idle_violates.shape
    dt_h = h.step_s / HOUR_S
    ns = h.n_lo + np.arange(N)
    steps = np.arange(T)
    idle_v = np.zeros((N, T + 1))
    np.cumsum(h.idle_violates, axis=1, out=idle_v[:, 1:])
    d_idle, d_add, d_rem = h.disk()
    dp = h.disk_penalty
    add_d = np.zeros((N, T + 1))
    np.cumsum(d_add, axis=1, out=add_d[:, 1:])
    rem_d = np.zeros((N, T + 1))
    np.cumsum(d_rem, axis=1, out=rem_d[:, 1:])
    if ceiling is not None and floor is not None:
        floor = np.minimum(floor, ceiling)
    # options: 0 stay; then per rule an add and a removal
    K = 1 + 2 * len(h.rules)
    cost = np.full((T, K, N), np.inf)
    to_t = np.zeros((T, K, N), dtype=np.int32)
    to_n = np.zeros((K, N), dtype=np.int64)
    cost[:, 0, :] = (dt_h * (ns[:, None] + penalty * h.idle_violates + dp * d_idle)).T
    to_t[:, 0, :] = steps[:, None] + 1
    to_n[0] = np.arange(N)
    start = np.broadcast_to(steps, (N, T))
    boot_end = start + h.boot_steps
    ends: dict[tuple[int, int], IntArray] = {}
    for r, rule in enumerate(h.rules):
        add_v = np.zeros((N, T + 1))
        np.cumsum(rule.add_violates, axis=1, out=add_v[:, 1:])
        rem_v = np.zeros((N, T + 1))
        np.cumsum(rule.remove_violates, axis=1, out=rem_v[:, 1:])
        e_add = _ends(rule.add_mibps, boot_end, h.add_bytes, h.step_s)
        e_rem = _ends(rule.remove_mibps, start, h.remove_bytes, h.step_s)
        ends[(r, 1)], ends[(r, -1)] = e_add, e_rem
        span_add = np.minimum(e_add, T) - start
        viol_add = _window_sum(idle_v, start, boot_end) + _window_sum(add_v, boot_end, e_add)
        c_add = dt_h * ((ns[:, None] + 1) * span_add + penalty * viol_add
                        + dp * _window_sum(add_d, start, e_add))
        c_add[-1] = np.inf  # no node beyond n_hi
        span_rem = np.minimum(e_rem, T) - start
        c_rem = dt_h * (ns[:, None] * span_rem + penalty * _window_sum(rem_v, start, e_rem)
                        + dp * _window_sum(rem_d, start, e_rem))
        c_rem[0] = np.inf  # no removal below n_lo
        if floor is not None:
            c_rem[(ns[:, None] - 1) < np.asarray(floor)[None, :]] = np.inf
        ka, kr = 1 + 2 * r, 2 + 2 * r
        cost[:, ka, :], cost[:, kr, :] = c_add.T, c_rem.T
        to_t[:, ka, :], to_t[:, kr, :] = np.minimum(e_add, T).T, np.minimum(e_rem, T).T
        to_n[ka] = np.minimum(np.arange(N) + 1, N - 1)
        to_n[kr] = np.maximum(np.arange(N) - 1, 0)
    if ceiling is not None and ceiling < h.n_hi:
        cost[:, 0, ns > ceiling] = np.inf  # held above it: never
        for r in range(len(h.rules)):
            cost[:, 1 + 2 * r, ns >= ceiling] = np.inf  # added past it: never
    value = np.zeros((T + 1, N))
    if terminal is not None:
        if np.shape(terminal) != (N,):
            raise ElastoreError(f"terminal values: want {N}, got {np.shape(terminal)}")
        value[T] = terminal
    choice = np.zeros((T, N), dtype=np.int8)
    if h.clean_bytes is None:
        for s in range(T - 1, -1, -1):
            total = cost[s] + value[to_t[s], to_n]
            k = np.argmin(total, axis=0)
            choice[s] = k
            value[s] = total[k, np.arange(N)]
        return _walk(h, n0, penalty, choice, ends, float(value[0, n0 - h.n_lo]))
    clean = _Cleanup.solve(h, penalty, cost, to_t, to_n, value, choice)
    if cleaning_bytes > EPS_BYTES:
        first = clean.begin(h, n0 - h.n_lo, cleaning_bytes, value)
        return _walk(h, n0, penalty, choice, ends, first, clean, cleaning=True)
    return _walk(h, n0, penalty, choice, ends, float(value[0, n0 - h.n_lo]), clean)


@dataclass
class _Cleanup:
    """The cleanup's part of :func:`cheapest`: per rule q, each cleaning step's cost (its
    prefix sums ``pre[q]``, (N, T + 1)) and, for a cleanup starting at (step, row), the
    step it ends (``end[q]``); per (step, row) the best add's option (``add_option``), what
    the just-joined state does (``code``: 2 q to run rule q's cleanup to its end, 2 q + 1
    to add at ``sup_at[q]`` during it)."""

    pre: list[FloatArray]
    end: list[IntArray]
    add_option: npt.NDArray[np.int8]
    code: npt.NDArray[np.int8]
    sup_at: list[npt.NDArray[np.int32]]
    violates: list[FloatArray]  # per rule: a cleaning step's violation, never below idle
    #: a cleaning step's disk table: row m as row m - 1 idle (the last old node to be
    #: cleaned still holds what it held before the join)
    disk: FloatArray
    run_min0: list[FloatArray] = field(default_factory=list)  # the running minimum at 0

    def begin(self, h: Horizon, k: int, nbytes: float, value: FloatArray) -> float:
        """Start at step 0 in row ``k``'s cleanup with ``nbytes`` left: its value. Its
        choice, and the step its cleanup would end, overwrite step 0 of row ``k`` (the walk
        starts from them)."""
        T = h.steps
        best, code = math.inf, 0
        for q, rule in enumerate(h.rules):
            assert rule.clean_mibps is not None
            e = int(_ends(rule.clean_mibps[k:k + 1], np.zeros((1, 1), dtype=np.int64),
                          np.array([nbytes]), h.step_s)[0, 0])
            e = max(e, 0)
            self.end[q][k, 0] = e
            c = min(e, T)
            p = self.pre[q][k]
            for val, kind in ((p[c] - p[0] + value[c, k], 2 * q),
                              (self.run_min0[q][k] - p[0], 2 * q + 1)):
                if val < best:
                    best, code = float(val), kind
        self.code[0, k] = code
        return best

    @classmethod
    def solve(cls, h: Horizon, penalty: float, cost: FloatArray, to_t: npt.NDArray[np.int32],
              to_n: IntArray, value: FloatArray, choice: npt.NDArray[np.int8]) -> _Cleanup:
        """Backward induction with the just-joined state ``joined`` beside ``value`` (an
        addition leads to it); fills ``value`` and ``choice`` in place."""
        assert h.clean_bytes is not None
        N, T = h.idle_violates.shape
        dt_h = h.step_s / HOUR_S
        ns = (h.n_lo + np.arange(N))[:, None]
        d_idle = h.disk()[0]
        d_clean = np.concatenate([d_idle[:1], d_idle[:-1]])
        start = np.broadcast_to(np.arange(T), (N, T))
        rows = np.arange(N)
        pre, end, viol = [], [], []
        for rule in h.rules:
            assert rule.clean_mibps is not None and rule.clean_violates is not None
            v = np.maximum(np.asarray(rule.clean_violates, dtype=float),
                           np.asarray(h.idle_violates, dtype=float))
            p = np.zeros((N, T + 1))
            np.cumsum(dt_h * (ns + penalty * v + h.disk_penalty * d_clean), axis=1,
                      out=p[:, 1:])
            e = _ends(rule.clean_mibps, start, h.clean_bytes, h.step_s)
            pre.append(p)
            end.append(np.maximum(e, start))  # T + 1: not within the horizon
            viol.append(v)
        adds = np.asarray([1 + 2 * r for r in range(len(h.rules))])
        joined = np.zeros_like(value)
        joined[T] = value[T]
        out = cls(pre, end, np.zeros((T, N), dtype=np.int8), np.zeros((T, N), dtype=np.int8),
                  [np.zeros((T, N), dtype=np.int32) for _ in h.rules], viol, d_clean)
        run_min = [np.full(N, np.inf) for _ in h.rules]  # min over j >= s of pre[j] + add[j]
        run_at = [np.full(N, T, dtype=np.int32) for _ in h.rules]
        for s in range(T - 1, -1, -1):
            nxt = value[to_t[s], to_n]
            nxt[adds] = joined[to_t[s][adds], to_n[adds]]  # a join leads to its cleanup
            total = cost[s] + nxt
            k = np.argmin(total, axis=0)
            choice[s] = k
            value[s] = total[k, rows]
            a = np.argmin(total[adds], axis=0)
            add_now = total[adds][a, rows]
            out.add_option[s] = adds[a]
            best = np.full(N, np.inf)
            code = np.zeros(N, dtype=np.int8)
            for q in range(len(h.rules)):
                p = pre[q]
                here = p[:, s] + add_now
                better = here <= run_min[q]
                run_min[q] = np.where(better, here, run_min[q])
                run_at[q] = np.where(better, s, run_at[q]).astype(np.int32)
                out.sup_at[q][s] = run_at[q]
                c = np.minimum(end[q][:, s], T)
                with np.errstate(invalid="ignore"):
                    to_end = p[rows, c] - p[:, s] + value[c, rows]
                    cut = run_min[q] - p[:, s]
                for val, kind in ((to_end, 2 * q), (cut, 2 * q + 1)):
                    take = val < best  # ties: the cleanup runs to its end, the first rule
                    best = np.where(take, val, best)
                    code = np.where(take, kind, code).astype(np.int8)
            joined[s] = best
            out.code[s] = code
        out.run_min0 = [m.copy() for m in run_min]
        return out


def _walk(h: Horizon, n0: int, penalty: float, choice: npt.NDArray[np.int8],
          ends: dict[tuple[int, int], IntArray], value: float,
          clean: _Cleanup | None = None, cleaning: bool = False) -> Schedule:
    """Follow the choices forward from (0, n0); count what the schedule bills and
    violates. With a cleanup, an addition leads to the just-joined state, whose choice
    (``clean.code``) runs the cleanup to its end or cuts it with the next addition."""
    T = h.steps
    dt_h = h.step_s / HOUR_S
    moves: list[Move] = []
    vm = viol = disk = 0.0
    d_idle, d_add, d_rem = h.disk()
    s, k = 0, n0 - h.n_lo
    forced: int | None = None  # an addition the cleanup before it was cut for
    joined = cleaning  # starting in a cleanup
    while s < T:
        if joined:
            assert clean is not None
            joined = False
            cut, forced, v, d = _clean_walk(h, clean, moves, s, k)
            vm += dt_h * (h.n_lo + k) * (cut - s)
            viol, disk, s = viol + dt_h * v, disk + dt_h * d, cut
            continue
        c = int(choice[s, k]) if forced is None else forced
        forced = None
        n = h.n_lo + k
        if c == 0:
            vm += dt_h * n
            viol += dt_h * float(h.idle_violates[k, s])
            disk += dt_h * float(d_idle[k, s])
            s += 1
            continue
        r, direction = (c - 1) // 2, (1 if c % 2 == 1 else -1)
        rule = h.rules[r]
        e = int(ends[(r, direction)][k, s])
        stop = min(e, T)
        if direction > 0:
            b = min(s + h.boot_steps, T)
            vm += dt_h * (n + 1) * (stop - s)
            viol += dt_h * (float(h.idle_violates[k, s:b].sum())
                            + float(rule.add_violates[k, b:stop].sum()))
            disk += dt_h * float(d_add[k, s:stop].sum())
            moves.append(Move(s, e, n, n + 1, rule.name, s + h.boot_steps, e))
        else:
            vm += dt_h * n * (stop - s)
            viol += dt_h * float(rule.remove_violates[k, s:stop].sum())
            disk += dt_h * float(d_rem[k, s:stop].sum())
            moves.append(Move(s, e, n, n - 1, rule.name, s, e))
        s, k = stop, k + direction
        joined = direction > 0 and clean is not None
    return Schedule(moves, vm, viol, value, n0, penalty,
                    {r.name: i for i, r in enumerate(h.rules)}, disk)


def _clean_walk(h: Horizon, clean: _Cleanup, moves: list[Move], s: int, k: int
                ) -> tuple[int, int | None, float, float]:
    """The just-joined state at (``s``, row ``k``): the cleanup, to its end or until the
    next addition. The addition it follows (the last of ``moves``, if any) records it.
    Returns the step it stops, the addition's option that cuts it (None: it ended), and
    its violating and over-budget steps."""
    T = h.steps
    code = int(clean.code[s, k])
    q = code // 2
    ended = int(clean.end[q][k, s])
    cut = int(clean.sup_at[q][s, k]) if code % 2 else ended
    forced: int | None = None
    if cut >= min(ended, T):  # an addition at or past the end: the cleanup ended first
        cut = min(ended, T)
    else:
        forced = int(clean.add_option[cut, k])
        ended = cut
    if moves and moves[-1].end == s and moves[-1].n_to == h.n_lo + k:
        moves[-1] = replace(moves[-1], clean_end=ended, clean_rule=h.rules[q].name)
    return (cut, forced, float(clean.violates[q][k, s:cut].sum()),
            float(clean.disk[k, s:cut].sum()))


RULES = ("bwman", "store-default")


def physics_horizon(models: ModelSet, mig: MigrationModel, load_rps: FloatArray,
                    interference: FloatArray, read_ratio: float, step_s: float,
                    boot_s: float, data_bytes: float | FloatArray, n_lo: int, n_hi: int,
                    rules: tuple[str, ...] = RULES, default_mibps: float = 24.0,
                    slo_ms: float | None = None, cleanup: bool = False) -> Horizon:
    """A :class:`Horizon` from the capacity model, exactly as the simulator's engine and
    latency accounting see a cluster (``elastore.sim``): the load spread evenly over the
    serving nodes; a bootstrap from n streams D/n - D/(n+1) from each of the n senders; a
    decommission streams the leaving node's D/n (``data_bytes``: D, or D at each step of a
    growing cluster); a step violates when the p95 latency
    (the request mix's, during a decommission) is over ``slo_ms`` (default: the model's).

    Rules: ``bwman`` migrates at f() (``mig.rate``) and decommissions at the
    cluster-p95-aware rate (``mig.decommission_rate``), BwMan's rule; ``store-default``
    at ``default_mibps`` (Cassandra's 24 MiB/s).

    ``cleanup`` (the simulator's default, the operator's ``spec.scaleUp.cleanup``): after a
    join to m servers the m - 1 old nodes rewrite D in turn at the rule's rate (f() at the
    load over m, or ``default_mibps``), one node in m serving beside its rewrite (the
    request mix's p95, never below idle), no removal until it has ended."""
    cap = models.capacity
    limit = cap.slo_ms if slo_ms is None else slo_ms
    ns = np.arange(n_lo, n_hi + 1, dtype=float)[:, None]
    load = np.asarray(load_rps, dtype=float)[None, :]
    inter = np.broadcast_to(np.asarray(interference, dtype=float)[None, :],
                            (len(ns), load.shape[1]))
    lps = load / ns
    idle = np.asarray(cap.latency_ms(lps, read_ratio, 0.0, inter)) > limit
    out = []
    for name in rules:
        if name == "bwman":
            add = np.asarray(mig.rate(lps, read_ratio, inter), dtype=float)
            rem = np.asarray(mig.decommission_rate(lps, np.broadcast_to(ns, lps.shape),
                                                   read_ratio, inter), dtype=float)
        elif name == "store-default":
            add = np.full(lps.shape, default_mibps)
            rem = add
        else:
            raise ElastoreError(f"unknown rate rule {name!r}; choose from {', '.join(RULES)}")
        add_v = np.asarray(cap.latency_ms(lps, read_ratio, add, inter)) > limit
        over = mixture_exceeds(cap.latency_ms(lps, read_ratio, rem, inter), 1.0 / ns,
                               cap.latency_ms(lps, read_ratio, rem / np.maximum(ns - 1, 1),
                                              inter), limit)
        rule = RateRule(name, add, add_v, rem, over)
        if cleanup:  # m serving: one node rewrites at the rate f() allows at load / m
            clean_v = mixture_exceeds(cap.latency_ms(lps, read_ratio, add, inter), 1.0 / ns,
                                      cap.latency_ms(lps, read_ratio, 0.0, inter), limit)
            rule = replace(rule, clean_mibps=add, clean_violates=clean_v | idle)
        out.append(rule)
    d = np.asarray(data_bytes, dtype=float)
    n = ns[:, 0] if d.ndim == 0 else ns  # (N,) or (N, 1) against D's (T,)
    clean = None
    if cleanup:  # the old nodes hold D between them once the node has joined
        clean = np.asarray(np.broadcast_to(d, (len(ns),) if d.ndim == 0 else idle.shape),
                           dtype=float)
    return Horizon(step_s=step_s, n_lo=n_lo, idle_violates=idle, rules=tuple(out),
                   boot_steps=max(0, math.ceil(boot_s / step_s - 1e-9)),
                   add_bytes=np.asarray(d / n - d / (n + 1)),
                   remove_bytes=np.asarray(d / n), clean_bytes=clean)


def with_bytes(h: Horizon, total_bytes: FloatArray, budget_bytes: float,
               storage: StorageConfig, penalty: float) -> Horizon:
    """``h`` with the bytes of a known data path (``total_bytes`` per step, the optimal
    bound's perfect foresight): a balanced ring, each hour with a node over its budget
    billed at :data:`~elastore.models.storage.DISK_PENALTY_FACTOR` times ``penalty``."""
    ns = h.n_lo + np.arange(h.idle_violates.shape[0], dtype=float)
    d0 = float(total_bytes[0])  # cleanup at the start's size: optimistic, as a bound is
    cleanup = np.asarray([math.ceil(storage.cleanup_s(d0 / n) / h.step_s - 1e-9) for n in ns],
                         dtype=np.int64)
    if h.clean_bytes is not None:  # the cleanup is a state of its own, with its disk table
        cleanup[:] = 0
    idle, add, rem = disk_tables(ns, np.asarray(total_bytes, dtype=float)[None, :],
                                 np.array([1.0]), 1.0, budget_bytes, cleanup)
    return replace(h, disk_idle=idle, disk_add=add, disk_remove=rem,
                   disk_penalty=DISK_PENALTY_FACTOR * max(penalty, 1.0))
