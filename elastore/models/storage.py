"""Scaling for the bytes: each node's disk budget, the servers the data needs, the data's
growth forecast, and a volume's growth priced against a node's. Pure.

A node's **budget** is the fraction of its volume its live data may fill:

    budget = min(targetUtilization, 1 - compaction headroom)

The headroom is the part of the disk compaction needs free for its temporary copies, by
strategy (:data:`COMPACTION_HEADROOM`). DataStax's planning guide puts the usable share of
a disk at 50 % to 80 % depending on the strategy: size-tiered compaction can rewrite its
largest tier in one go and needs up to half the disk, leveled and unified compaction much
less. ``nodetool cleanup`` after a scale-out is such a compaction. So the budget already
holds its rewrite, and the old nodes keep their pre-scale-out bytes until it has run
(:meth:`StorageConfig.cleanup_s`): a scale-out for bytes must end its streaming **and** its
cleanup before the data crosses the budget.

The data per node is the cluster's total over its nodes, times the **skew** measured now
(the fullest node over the mean): a ring is never perfectly balanced, and the fullest
node fills first.

The growth forecast (:func:`growth_forecast`) is a trend plus the seasonal shape of the
net bytes written per step (writes add bytes, TTL and compaction take some back), with
quantile scenarios, all from robust statistics (medians): a bootstrap's streamed copy, a
compaction's or a repair's transient is a jump up and down, not growth. The scenarios'
spread is the residual's, as a random walk, plus the trend's own uncertainty: the same
scenario levels and weights as the load forecast's
(:func:`elastore.predictor.intervals.scenario_levels`), not yet calibrated on its own
rolling errors as the load's are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from elastore.models.capacity import ModelError
from elastore.units import GIB, MIB, bytes_to_gib

FloatArray = npt.NDArray[np.float64]

#: the share of a volume compaction needs free, by strategy (the CRD's enum is written
#: from this: ``spec.storage.compaction``)
COMPACTION_HEADROOM: dict[str, float] = {
    "SizeTiered": 0.5,  # a major or large-tier compaction rewrites up to half the disk
    "Unified": 0.2,  # Cassandra 5.0's recommended strategy; shards bound each compaction
    "Leveled": 0.1,  # fixed-size SSTables, one level at a time
    "TimeWindow": 0.1,  # one closed window at a time
    "None": 0.0,  # a store without compaction (Swift)
}
DEFAULT_COMPACTION = "Unified"
DEFAULT_TARGET_UTILIZATION = 0.8
DEFAULT_CLEANUP_MIBPS = 64.0  # Cassandra's compaction_throughput default, which cleanup obeys
HOURS_PER_MONTH = 730.0
#: an hour with a node's data over its budget costs this many times an hour of SLO
#: violation: a full disk rejects writes, the worst violation
DISK_PENALTY_FACTOR = 10.0
VOLUME_STEP_BYTES = GIB  # a grown volume is a whole number of GiB


@dataclass(frozen=True)
class StorageConfig:
    """What a policy asks of the bytes (``spec.storage``, ``spec.cost``)."""

    target_utilization: float = DEFAULT_TARGET_UTILIZATION
    compaction: str = DEFAULT_COMPACTION
    cleanup_mibps: float = DEFAULT_CLEANUP_MIBPS  # per node
    expand_volumes: bool = False
    max_volume_bytes: float | None = None  # a grown volume never exceeds this
    node_hour_cost: float = 1.0  # what a node costs an hour, its volume aside
    gib_month_cost: float = 0.0  # what a GiB of volume costs a month

    def validate(self) -> None:
        problems = []
        if not 0 < self.target_utilization <= 0.95:
            problems.append(f"target utilization {self.target_utilization:g} is not in "
                            "(0, 0.95]")
        if self.compaction not in COMPACTION_HEADROOM:
            problems.append(f"unknown compaction strategy {self.compaction!r} (choose from "
                            f"{', '.join(COMPACTION_HEADROOM)})")
        if not (math.isfinite(self.cleanup_mibps) and self.cleanup_mibps > 0):
            problems.append(f"cleanup rate {self.cleanup_mibps!r} MiB/s is not > 0")
        if self.max_volume_bytes is not None and not self.max_volume_bytes > 0:
            problems.append(f"max volume size {self.max_volume_bytes!r} bytes is not > 0")
        if not (self.node_hour_cost >= 0 and self.gib_month_cost >= 0):
            problems.append("costs must be >= 0")
        if problems:
            raise ModelError("invalid storage configuration: " + "; ".join(problems))

    @property
    def headroom(self) -> float:
        return COMPACTION_HEADROOM[self.compaction]

    @property
    def budget(self) -> float:
        """The fraction of a volume live data may fill."""
        return min(self.target_utilization, 1.0 - self.headroom)

    def binding_rule(self) -> str:
        if self.budget < self.target_utilization:
            return (f"{self.budget:.0%} of each volume ({self.compaction} compaction keeps "
                    f"{self.headroom:.0%} free; below the {self.target_utilization:.0%} target)")
        return f"{self.budget:.0%} of each volume (the target utilization)"

    def cleanup_s(self, node_bytes: float) -> float:
        """How long ``nodetool cleanup`` takes on a node holding ``node_bytes``: it reads
        and rewrites every SSTable at the compaction throughput."""
        return max(0.0, node_bytes) / (self.cleanup_mibps * MIB)


@dataclass(frozen=True)
class DataPath:
    """The forecast of all data stored (replicas included) at ``times_s`` (absolute,
    increasing, after now): the median and ``K`` quantile scenarios with their weights."""

    times_s: FloatArray  # (H,)
    median_bytes: FloatArray  # (H,)
    scenarios_bytes: FloatArray  # (K, H)
    weights: FloatArray  # (K,)
    method: str = "trend+season"

    def validate(self) -> None:
        h = len(self.times_s)
        if h < 1 or self.median_bytes.shape != (h,) or self.scenarios_bytes.ndim != 2 or \
                self.scenarios_bytes.shape[1] != h or \
                self.weights.shape != (self.scenarios_bytes.shape[0],):
            raise ModelError("malformed data path: times, median, scenarios and weights "
                             "must agree in length")
        for name, a in (("times", self.times_s), ("median", self.median_bytes),
                        ("scenarios", self.scenarios_bytes), ("weights", self.weights)):
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ModelError(f"data path {name}: every value must be finite and >= 0 "
                                 "(a missing figure is an error, never 0)")
        if np.any(np.diff(self.times_s) <= 0):
            raise ModelError("data path times must increase")
        if abs(float(self.weights.sum()) - 1) > 1e-6:
            raise ModelError(f"data path weights sum to {float(self.weights.sum()):g}, not 1")

    @classmethod
    def flat(cls, at_s: float, total_bytes: float) -> DataPath:
        """No growth known: the data stays as it is."""
        return cls(np.array([at_s]), np.array([total_bytes]), np.array([[total_bytes]]),
                   np.array([1.0]), "flat (no growth history)")

    def at(self, times_s: FloatArray, now_s: float, now_bytes: float
           ) -> tuple[FloatArray, FloatArray]:
        """(median (T,), scenarios (K, T)) at ``times_s``, anchored at ``now_bytes`` now;
        beyond the path's end each holds its last value."""
        t = np.concatenate([[now_s], self.times_s])
        med = np.interp(times_s, t, np.concatenate([[now_bytes], self.median_bytes]))
        scen = np.stack([np.interp(times_s, t, np.concatenate([[now_bytes], row]))
                         for row in self.scenarios_bytes])
        return np.asarray(med), np.asarray(scen)


@dataclass(frozen=True)
class StorageView:
    """The bytes as measured now, for the planner: each node's used bytes, its volume's
    size, where the figures come from, and the data's forecast."""

    config: StorageConfig
    volume_bytes: float  # each node's volume now
    node_bytes: tuple[float, ...]  # used bytes per node now
    source: str  # "kubelet" (volume stats) or "store" (the store's own figure)
    path: DataPath | None = None

    def validate(self) -> None:
        self.config.validate()
        if not (math.isfinite(self.volume_bytes) and self.volume_bytes > 0):
            raise ModelError(f"volume size {self.volume_bytes!r} bytes is not > 0")
        if not self.node_bytes or any(not (math.isfinite(b) and b >= 0)
                                      for b in self.node_bytes):
            raise ModelError("every node's used bytes must be a finite number >= 0 (a "
                             "missing figure is an error, never 0)")
        if self.path is not None:
            self.path.validate()

    @property
    def total_bytes(self) -> float:
        return float(sum(self.node_bytes))

    @property
    def skew(self) -> float:
        """The fullest node over the mean (1: balanced)."""
        mean = self.total_bytes / len(self.node_bytes)
        return max(self.node_bytes) / mean if mean > 0 else 1.0

    @property
    def utilization(self) -> float:
        """The fullest node's share of its volume."""
        return max(self.node_bytes) / self.volume_bytes

    def budget_bytes(self, volume_bytes: float | None = None) -> float:
        return self.config.budget * (self.volume_bytes if volume_bytes is None else
                                     volume_bytes)

    def nodes_needed(self, total_bytes: float, volume_bytes: float | None = None) -> int:
        """Fewest nodes whose fullest stays within its budget holding ``total_bytes``."""
        return max(1, math.ceil(total_bytes * self.skew / self.budget_bytes(volume_bytes)
                                - 1e-9))


def over_budget(ns: FloatArray, totals: FloatArray, weights: FloatArray, skew: float,
                budget_bytes: float) -> FloatArray:
    """(N, T): the probability that the fullest of ``ns[i]`` nodes is over its budget at
    each step, over the weighted scenarios ``totals`` (K, T)."""
    per = totals[:, None, :] * skew / np.asarray(ns, dtype=float)[None, :, None]  # (K, N, T)
    return np.asarray((weights[:, None, None] * (per > budget_bytes)).sum(axis=0))


def volume_for(view: StorageView, totals: FloatArray, servers: FloatArray) -> float:
    """The volume each node needs so that ``servers[t]`` nodes hold ``totals[t]`` (the
    upper scenario) within their budget at every step: a whole number of GiB."""
    need = float(np.max(totals * view.skew / np.maximum(servers, 1))) / view.config.budget
    return math.ceil(need / VOLUME_STEP_BYTES - 1e-9) * VOLUME_STEP_BYTES


@dataclass(frozen=True)
class VolumeChoice:
    """Grow every volume to ``volume_bytes`` instead of adding ``nodes`` nodes."""

    grow: bool
    volume_bytes: float
    nodes: float  # the nodes the bytes alone would add (a mean over the lookahead)
    volumes: int  # the volumes that grow
    node_month: float  # what the nodes cost a month
    volume_month: float  # what the growth costs a month
    reason: str


def price(view: StorageView, extra_nodes: float, volumes: int, new_volume_bytes: float
          ) -> VolumeChoice:
    """Adding ``extra_nodes`` nodes (each with its volume; a mean over the lookahead, so
    it may be a fraction) against growing ``volumes`` volumes to ``new_volume_bytes``, a
    month of each, at ``spec.cost``'s prices. Growing is refused beyond
    ``max_volume_bytes`` and when it would not grow."""
    c = view.config
    gib = bytes_to_gib
    node_month = extra_nodes * (c.node_hour_cost * HOURS_PER_MONTH
                                + gib(view.volume_bytes) * c.gib_month_cost)
    grow_by = new_volume_bytes - view.volume_bytes
    volume_month = volumes * gib(max(0.0, grow_by)) * c.gib_month_cost
    if c.max_volume_bytes is not None and new_volume_bytes > c.max_volume_bytes:
        return VolumeChoice(False, new_volume_bytes, extra_nodes, volumes, node_month,
                            volume_month,
                            f"a volume of {gib(new_volume_bytes):,.0f} GiB is above "
                            f"storage.maxVolumeSize ({gib(c.max_volume_bytes):,.0f} GiB)")
    if not grow_by > 0:
        return VolumeChoice(False, new_volume_bytes, extra_nodes, volumes, node_month,
                            volume_month, "the volumes need not grow")
    grow = volume_month < node_month
    verdict = "cheaper" if grow else "dearer"
    return VolumeChoice(grow, new_volume_bytes, extra_nodes, volumes, node_month,
                        volume_month,
                        f"growing {volumes} volume(s) {gib(view.volume_bytes):,.0f} -> "
                        f"{gib(new_volume_bytes):,.0f} GiB costs {volume_month:,.2f}/month, "
                        f"{verdict} than {extra_nodes:.2f} node(s) at {node_month:,.2f}/month")


def growth_forecast(history_bytes: FloatArray, step_s: float, now_s: float,
                    horizon_steps: int, season_steps: int = 24, window_steps: int = 336,
                    levels: FloatArray | None = None, weights: FloatArray | None = None,
                    min_trend_steps: int = 3) -> DataPath:
    """The data's forecast over ``horizon_steps`` of ``step_s`` after ``now_s``, from the
    total bytes stored at each past step (the last one is now; NaN where unmeasured).

    Robust, because a storage cluster's total jumps: a bootstrap's streamed copy sits on
    the old nodes until their cleanup, a compaction or a repair leaves a transient, and
    each of those is one step up and one down, not growth.

    * Trend: the median of the slopes over a lag of one season (or a third of the history
      when shorter), each a whole season's mean growth; a jump spoils only the pairs that
      span it. With fewer than ``min_trend_steps`` measured steps, no trend: the data as it
      is (a short history with one level shift reads as a steep trend).
    * Season (once the window holds two whole seasons): the median net bytes written at
      each phase of ``season_steps``, less their mean.
    * Scenarios: the median plus the normal quantile at each level times
      sqrt(j sigma^2 + (j se)^2): sigma the residuals' spread (their median absolute
      deviation, x 1.4826) over one step, se the trend's (the slopes' own spread over
      sqrt of their number)."""
    if levels is None or weights is None:
        from elastore.predictor.intervals import scenario_levels

        levels, weights = scenario_levels()
    x = np.asarray(history_bytes, dtype=float)[-window_steps:]
    if not (step_s > 0 and horizon_steps >= 1):
        raise ModelError("growth forecast: the step must be > 0 and the horizon >= 1 step")
    ok = np.isfinite(x)
    if not ok.any():
        raise ModelError("growth forecast: no measured data size in the history (a "
                         "missing figure is an error, never 0)")
    last = float(x[np.flatnonzero(ok)[-1]])
    times = now_s + step_s * np.arange(1, horizon_steps + 1, dtype=float)
    w = np.asarray(weights, dtype=float)
    if ok.sum() < max(3, min_trend_steps):
        flat = np.full(horizon_steps, last)
        return DataPath(times, flat, np.tile(flat, (len(levels), 1)), w,
                        f"flat (fewer than {max(3, min_trend_steps)} measured steps)")
    lag = max(1, min(season_steps, len(x) // 3))
    pairs = (x[lag:] - x[:-lag]) / lag
    pairs = pairs[np.isfinite(pairs)]
    if pairs.size == 0:
        flat = np.full(horizon_steps, last)
        return DataPath(times, flat, np.tile(flat, (len(levels), 1)), w,
                        "flat (no two measured steps a lag apart)")
    slope = float(np.median(pairs))
    inc = np.diff(x)
    good = np.isfinite(inc)
    phase = np.arange(1, len(x)) % season_steps
    season = np.zeros(season_steps)
    seasonal = good.sum() >= 2 * season_steps
    if seasonal:
        for p in range(season_steps):
            sel = good & (phase == p)
            if sel.any():
                season[p] = float(np.median(inc[sel]))
        season -= season.mean()
    resid = inc[good] - (slope + season[phase[good]])
    sigma = 1.4826 * float(np.median(np.abs(resid - np.median(resid)))) if resid.size > 1 \
        else 0.0
    se = 1.4826 * float(np.median(np.abs(pairs - slope))) / math.sqrt(pairs.size)
    j = np.arange(1, horizon_steps + 1, dtype=float)
    fut_phase = (len(x) - 1 + j).astype(int) % season_steps
    median = np.maximum(0.0, last + np.cumsum(slope + season[fut_phase]))
    sd = np.sqrt(j * sigma ** 2 + (j * se) ** 2)
    z = np.array([NormalDist().inv_cdf(float(q)) for q in levels])
    scen = np.maximum(0.0, median[None, :] + z[:, None] * sd[None, :])
    how = "trend+season" if seasonal else "trend (under two seasons)"
    return DataPath(times, median, scen, w,
                    f"{how}: {slope * 86400 / step_s / GIB:+,.1f} GiB/day")


def disk_tables(ns: FloatArray, totals: FloatArray, weights: FloatArray, skew: float,
                budget_bytes: float, cleanup_steps: npt.NDArray[np.int64]
                ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The horizon's three disk tables (:class:`elastore.planner.schedule.Horizon`), each
    (N, T), for ``ns`` server counts and the weighted scenarios ``totals`` (K, T):

    * idle at n: the fullest of n nodes over its budget;
    * adding from n: the old nodes keep their D/n until their cleanup has run, so each
      step of the change counts the idle table ``cleanup_steps[i]`` steps later;
    * removing from n: the survivors hold D/(n - 1)."""
    ns = np.asarray(ns, dtype=float)
    idle = over_budget(ns, totals, weights, skew, budget_bytes)
    t = idle.shape[1]
    cols = np.minimum(np.arange(t)[None, :] + np.asarray(cleanup_steps)[:, None], t - 1)
    add = np.take_along_axis(idle, cols, axis=1)
    remove = over_budget(np.maximum(ns - 1, 1), totals, weights, skew, budget_bytes)
    return idle, add, remove
