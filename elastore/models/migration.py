"""The data-migration-time model (reference text, 5.3.1, "The Analytical Model").

Going from N to N + n servers moves |D/N - D/(N+n)| x N bytes in all; every server moves
its |D/N - D/(N+n)| share in parallel, at the fastest rate f() that keeps the SLO under the
effective load L_eff = (L + L_pred) / 2 (the mean of a linear ramp), or under a given load
path. That is ``mode="parallel"``, the paper's model.

Cassandra changes topology one node at a time, and the two directions differ:
* a bootstrap (scale-out by one, N -> N+1) streams D/(N+1) to the new node from all N
  existing nodes in parallel, each sending D/(N(N+1)) at its own rate f();
* a decommission (N -> N-1) streams the leaving node's D/N from that one node.
``mode="node-by-node"`` chains these steps, each at the load of its own moment, plus a
fixed per-node overhead (boot, joining the ring, settling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.models.capacity import CapacityModel, ModelError
from elastore.units import MIB

DECOMMISSION_CANDIDATES = 49  # rates tried between 0 and the ceiling


def mixture_p95(p_a: Any, share_a: Any, p_b: Any) -> Any:
    """p95 of a request mix: a share ``share_a`` sees a server whose p95 is ``p_a``, the
    rest see ``p_b``; each server's latency tail is taken as exponential (M/M/1-like), so
    the mix's tail is ``s exp(-a x / p_a) + (1 - s) exp(-a x / p_b)`` with a = ln 20, and
    its p95 is where that falls to 0.05. The tail is decreasing and convex and is >= 0.05
    at the smaller p95, so Newton's method from there climbs to the root without
    overshooting; vectorised, to 1e-12 relative."""
    a = math.log(20.0)
    p_a, share_a, p_b = np.broadcast_arrays(np.asarray(p_a, dtype=float),
                                            np.asarray(share_a, dtype=float),
                                            np.asarray(p_b, dtype=float))
    x = np.minimum(p_a, p_b)
    hi = np.maximum(p_a, p_b)
    ka, kb = a / p_a, a / p_b
    for _ in range(60):
        ea, eb = share_a * np.exp(-ka * x), (1 - share_a) * np.exp(-kb * x)
        f = ea + eb - 0.05
        slope = -(ka * ea + kb * eb)
        with np.errstate(divide="ignore", invalid="ignore"):
            dx = np.where(slope < 0, -f / slope, 0.0)
        dx = np.where(np.isfinite(dx), np.maximum(dx, 0.0), 0.0)
        x = np.minimum(x + dx, hi)
        if not np.any(dx > 1e-12 * np.maximum(x, 1e-300)):
            break
    return x


def mixture_exceeds(p_a: Any, share_a: Any, p_b: Any, limit: Any) -> npt.NDArray[np.bool_]:
    """Whether :func:`mixture_p95` of the same mix is above ``limit``, without solving for
    it: the mix's tail is decreasing, so its p95 is above ``limit`` exactly where the tail
    at ``limit`` is still above 0.05. One evaluation where Newton's method takes up to 60
    (the planner's tables only compare the p95 with the SLO)."""
    a = math.log(20.0)
    p_a, share_a, p_b, lim = np.broadcast_arrays(
        np.asarray(p_a, dtype=float), np.asarray(share_a, dtype=float),
        np.asarray(p_b, dtype=float), np.asarray(limit, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tail = share_a * np.exp(-a * lim / p_a) + (1 - share_a) * np.exp(-a * lim / p_b)
    return np.asarray(tail > 0.05)


def data_to_move_bytes(data_bytes: float, n_from: int, n_to: int) -> float:
    """Total bytes moved going from ``n_from`` to ``n_to`` servers: |D/N - D/(N+n)| N."""
    if n_from < 1 or n_to < 1:
        raise ModelError(f"server counts must be >= 1 (got {n_from} -> {n_to})")
    return abs(data_bytes / n_from - data_bytes / n_to) * n_from


@dataclass(frozen=True)
class MigrationEstimate:
    seconds: float
    bytes_moved: float
    rate_mibps: float  # per sending server, the slowest step's
    steps: tuple[float, ...]  # seconds of each node step (node-by-node), or one entry
    feasible: bool  # False when the SLO leaves no migration rate at some step
    reason: str


@dataclass(frozen=True)
class MigrationModel:
    capacity: CapacityModel
    mode: str = "node-by-node"  # or "parallel" (the paper)
    node_overhead_s: float = 0.0
    min_mibps: float = 0.0  # floor a policy guarantees migration (may break the SLO)
    max_mibps: float = math.inf  # ceiling (policy, or the BwMan split)
    slo_margin: float = 0.0  # f() keeps latency within (1 - margin) x SLO: off the border

    def rate(self, load_per_server_rps: Any, read_ratio: float, interference: Any) -> Any:
        """f() with the margin, within the policy's floor and ceiling, MiB/s per sending
        server; vectorised over the load."""
        f = np.asarray(self.capacity.max_migration_rate(
            np.asarray(load_per_server_rps, dtype=float), read_ratio, interference,
            slo_fraction=1 - self.slo_margin))
        out = np.clip(f, self.min_mibps, self.max_mibps)
        return float(out) if out.ndim == 0 else out

    def decommission_rate(self, load_per_server_rps: Any, n: Any, read_ratio: float,
                          interference: Any) -> Any:
        """The fastest rate at which one of ``n`` servers can hand its data over while the
        *cluster* p95 stays within the margin: only 1/n of the requests meet the leaving
        server, the rest meet servers receiving rate/(n-1) each. Much faster than f() for a
        single server when n is large; vectorised over load and n."""
        load, nn, inter = np.broadcast_arrays(np.asarray(load_per_server_rps, dtype=float),
                                              np.asarray(n, dtype=float),
                                              np.asarray(interference, dtype=float))
        top = self.max_mibps if math.isfinite(self.max_mibps) else float(
            self.capacity.migration_axis[-1])
        cand = np.linspace(0.0, top, DECOMMISSION_CANDIDATES)
        cap = self.capacity
        lps, nr, ir = load.ravel(), nn.ravel(), inter.ravel()
        limit = cap.slo_ms * (1 - self.slo_margin)

        def fine(at: npt.NDArray[np.bool_], k: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            rate, x, m, i = cand[k], lps[at], nr[at], ir[at]
            p_leave = cap.latency_ms(x, read_ratio, rate, i)
            p_rest = cap.latency_ms(x, read_ratio, rate / np.maximum(m - 1, 1), i)
            return ~mixture_exceeds(p_leave, 1.0 / m, p_rest, limit)

        # the largest candidate rate that is still fine: latency rises with the rate (the
        # model is monotone in migration), so a bisection over the candidates finds it
        lo = np.full(lps.shape, -1, dtype=np.int64)  # fine up to here (-1: none)
        hi = np.full(lps.shape, len(cand), dtype=np.int64)  # not fine from here
        while np.any(hi - lo > 1):
            mid = (lo + hi) // 2
            live = hi - lo > 1
            ok = np.zeros(lps.shape, dtype=bool)
            ok[live] = fine(live, mid[live])
            lo = np.where(live & ok, mid, lo)
            hi = np.where(live & ~ok, mid, hi)
        best = np.where(lo >= 0, cand[np.maximum(lo, 0)], 0.0)
        out = np.clip(best, self.min_mibps, self.max_mibps).reshape(load.shape)
        return float(out) if out.ndim == 0 else out

    def estimate(self, data_bytes: float, n_from: int, n_to: int, load_rps: float,
                 load_pred_rps: float | None = None, read_ratio: float = 1.0,
                 interference: float = 0.0,
                 load_path: Callable[[float], float] | None = None) -> MigrationEstimate:
        """Seconds to go from ``n_from`` to ``n_to`` servers.

        The load during the change is ``load_path(fraction_done)`` when given, else the
        linear ramp from ``load_rps`` to ``load_pred_rps`` (parallel mode uses its mean).
        """
        if n_from == n_to:
            return MigrationEstimate(0.0, 0.0, 0.0, (), True, "no change")
        if data_bytes < 0 or not math.isfinite(data_bytes):
            raise ModelError(f"data size must be a finite number >= 0 bytes, got {data_bytes}")
        pred = load_rps if load_pred_rps is None else load_pred_rps

        def load_at(frac: float) -> float:
            if load_path is not None:
                return float(load_path(frac))
            return load_rps + (pred - load_rps) * frac

        total = data_to_move_bytes(data_bytes, n_from, n_to)
        if self.mode == "parallel":
            eff = (load_rps + pred) / 2 if load_path is None else float(
                np.mean([load_at(f) for f in np.linspace(0, 1, 11)]))
            serving = min(n_from, n_to)
            f = self.rate(eff / serving, read_ratio, interference)
            per_server = abs(data_bytes / n_from - data_bytes / n_to)
            if f <= 0:
                return MigrationEstimate(math.inf, total, 0.0, (math.inf,), False,
                                         f"no migration rate keeps the SLO at "
                                         f"{eff / serving:.0f} req/s per server")
            secs = per_server / (f * MIB) + self.node_overhead_s
            return MigrationEstimate(secs, total, f, (secs,), True,
                                     f"{per_server / MIB:.0f} MiB per server at {f:.1f} MiB/s")
        if self.mode != "node-by-node":
            raise ModelError(f"unknown migration mode {self.mode!r}")
        step = 1 if n_to > n_from else -1
        n = np.arange(n_from, n_to, step, dtype=np.float64)  # servers before each step
        frac = (np.arange(len(n)) + 0.5) / len(n)  # each step at the load of its midpoint
        if load_path is not None:
            loads = np.array([float(load_path(f)) for f in frac])
        else:
            loads = load_rps + (pred - load_rps) * frac
        if step > 0:
            rates = np.asarray(self.rate(loads / n, read_ratio, interference), dtype=float)
        else:
            rates = np.asarray(self.decommission_rate(loads / n, n, read_ratio, interference),
                               dtype=float)
        # bootstrap: n senders, each D/n - D/(n+1); decommission: one sender, its D/n
        per_sender = data_bytes / n - data_bytes / (n + 1) if step > 0 else data_bytes / n
        with np.errstate(divide="ignore"):
            steps = np.where(rates > 0, per_sender / (np.maximum(rates, 1e-12) * MIB)
                             + self.node_overhead_s, math.inf)
        feasible = bool(np.all(rates > 0))
        secs = float(steps.sum())
        kind = "bootstraps" if step > 0 else "decommissions"
        slowest = float(rates.min())
        return MigrationEstimate(
            secs, total, slowest, tuple(float(v) for v in steps), feasible,
            f"{len(n)} {kind}, {total / MIB:.0f} MiB moved, slowest rate {slowest:.1f} MiB/s"
            if feasible else
            f"{len(n)} {kind}: the SLO leaves no migration rate at some step",
        )
