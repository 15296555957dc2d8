"""Plain data in and out of the planner. Times are seconds on the caller's clock."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from elastore.models.bandwidth import Allocation, Policy
from elastore.models.capacity import ModelError
from elastore.models.storage import StorageView
from elastore.units import mib_to_bytes

FloatArray = npt.NDArray[np.float64]
MergeRule = Literal["elastore", "pseudocode"]
PlannerMode = Literal["window", "horizon"]
MAX_PLAN_STEPS = 720  # the horizon planner's grid over its lookahead, at most


#: how many times a one-node scale-in's own migration a horizon plan must look ahead to
#: see it pay for itself: the scale-in's migration (the node is billed until it ends), the
#: scale-out's that would undo it (the new node is billed while it streams in), and at least
#: as long again saved. Derived from that cost structure, not fitted to a trace
PAYBACK = 3.0


def scale_in_payback_s(data_bytes: float, replicas: int, mibps: float, boot_s: float = 0.0,
                       factor: float = PAYBACK) -> float:
    """The lookahead (s) in which a one-node scale-in of a cluster of ``replicas`` holding
    ``data_bytes`` (replicas included) can be seen to pay for itself: ``factor`` times its
    migration, one node's share streamed at ``mibps`` (MiB/s, the fastest the store
    allows, so this is the least it needs) after ``boot_s`` of per-step overhead.
    A shorter lookahead never plans a scale-in whose saving comes after it."""
    if replicas < 1 or not mibps > 0:
        raise ValueError(f"scale_in_payback_s: replicas {replicas}, {mibps} MiB/s")
    per_node = max(0.0, data_bytes) / replicas
    return factor * (per_node / mib_to_bytes(mibps) + max(0.0, boot_s))


@dataclass(frozen=True)
class PlannerConfig:
    min_replicas: int
    max_replicas: int
    replication_factor: int = 3
    window_s: float = 600.0  # the control period (prediction window)
    headroom: float = 0.1  # fraction of each server's capacity kept free
    one_at_a_time: bool = True  # Cassandra: bootstrap/decommission node by node
    migration_mode: Literal["node-by-node", "parallel"] = "node-by-node"
    node_overhead_s: float = 0.0  # per node step: boot, ring join, settle
    scale_down_stabilization_s: float = 300.0
    policy: Policy = Policy.PREFER_CLIENTS
    min_migration_mibps: float = 0.0
    max_migration_mibps: float = math.inf
    migration_margin: float = 0.05  # f() keeps latency within 95 % of the SLO
    total_bandwidth_mbit: float | None = None  # per server; enables the BwMan split
    merge: MergeRule = "elastore"
    reactive: bool = True
    #: "window": the paper's scheduler over one window (proactive + reactive, last-moment
    #: starts); "horizon": the cheapest schedule over ``lookahead_s`` of the forecast's
    #: scenarios (elastore.planner.horizon)
    mode: PlannerMode = "window"
    lookahead_s: float = 86400.0  # horizon mode: how far the plan looks
    plan_step_s: float = 0.0  # horizon mode: its time step (0: a fifth of the window)
    penalty: float = 100.0  # VM-hours an hour of SLO violation costs (horizon mode)
    #: a scale-out ends with ``nodetool cleanup`` on its old nodes, in turn, at the
    #: migration rate, and no scale-in starts until it has (``spec.scaleUp.cleanup``): the
    #: horizon planner's schedules obey it (a further scale-out may cut it short)
    cleanup: bool = False

    def validate(self) -> None:
        problems = []
        if self.min_replicas < 1:
            problems.append(f"min replicas {self.min_replicas} < 1")
        if self.max_replicas < self.min_replicas:
            problems.append(f"max replicas {self.max_replicas} < min {self.min_replicas}")
        if self.replication_factor < 1:
            problems.append(f"replication factor {self.replication_factor} < 1")
        if self.max_replicas < self.replication_factor:
            problems.append(f"max replicas {self.max_replicas} < replication factor "
                            f"{self.replication_factor}")
        if not self.window_s > 0:
            problems.append(f"window {self.window_s} s is not > 0")
        if not 0 <= self.headroom < 1:
            problems.append(f"headroom {self.headroom} not in [0, 1)")
        if self.min_migration_mibps < 0 or self.max_migration_mibps <= 0 or (
                self.min_migration_mibps > self.max_migration_mibps):
            problems.append("migration rate bounds must satisfy 0 <= min <= max, max > 0")
        if self.merge not in ("elastore", "pseudocode"):
            problems.append(f"unknown merge rule {self.merge!r}")
        if self.mode not in ("window", "horizon"):
            problems.append(f"unknown planner mode {self.mode!r}")
        if self.mode == "horizon" and not self.lookahead_s >= self.window_s:
            problems.append(f"lookahead {self.lookahead_s:g} s is shorter than the window "
                            f"{self.window_s:g} s")
        if self.total_bandwidth_mbit is not None and not (
                math.isfinite(self.total_bandwidth_mbit) and self.total_bandwidth_mbit > 0):
            problems.append(f"total bandwidth {self.total_bandwidth_mbit!r} Mbit/s is not a "
                            "finite number > 0")
        if not self.penalty >= 0 or self.plan_step_s < 0:
            problems.append("the penalty and the plan step must be >= 0")
        if problems:
            raise ModelError("invalid planner configuration: " + "; ".join(problems))

    @property
    def floor(self) -> int:
        """Never fewer servers than this: min replicas and the replication factor."""
        return max(self.min_replicas, self.replication_factor)

    @property
    def step_s(self) -> float:
        """The horizon planner's time step: a fifth of the window, at least 10 s, and at
        most :data:`MAX_PLAN_STEPS` over the lookahead."""
        return self.plan_step_s or max(10.0, self.window_s / 5,
                                       self.lookahead_s / MAX_PLAN_STEPS)


@dataclass(frozen=True)
class LoadPath:
    """The load forecast over the planning horizon: at ``times_s`` (absolute, increasing,
    after now), the median and ``K`` scenarios (quantile paths) with the probability each
    stands for."""

    times_s: FloatArray  # (H,)
    median_rps: FloatArray  # (H,)
    scenarios_rps: FloatArray  # (K, H)
    weights: FloatArray  # (K,), summing to 1

    def validate(self) -> None:
        h = len(self.times_s)
        if h < 1 or self.median_rps.shape != (h,) or self.scenarios_rps.ndim != 2 or \
                self.scenarios_rps.shape[1] != h or self.weights.shape != (
                    self.scenarios_rps.shape[0],):
            raise ModelError("malformed load path: times, median, scenarios and weights "
                             "must agree in length")
        for name, a in (("times", self.times_s), ("median", self.median_rps),
                        ("scenarios", self.scenarios_rps), ("weights", self.weights)):
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ModelError(f"load path {name}: every value must be finite and >= 0 "
                                 "(a missing forecast is an error, never 0)")
        if np.any(np.diff(self.times_s) <= 0):
            raise ModelError("load path times must increase")
        if abs(float(self.weights.sum()) - 1) > 1e-6:
            raise ModelError(f"load path weights sum to {float(self.weights.sum()):g}, not 1")

    @classmethod
    def flat(cls, at_s: float, forecast_rps: float) -> LoadPath:
        """One certain forecast (no scenarios): the load moves linearly from now to it and
        stays."""
        return cls(np.array([at_s]), np.array([forecast_rps]), np.array([[forecast_rps]]),
                   np.array([1.0]))


@dataclass(frozen=True)
class LoadSkew:
    """How much busier than the mean the busiest node is, at each cluster size, after the
    cheapest rebalancing the policy allows (a new node's token splitting the hot range, a
    range boundary moved): :func:`elastore.models.skew.capacity_factors`, inverted. The
    planner sizes so that the busiest node, not the mean, stays within the SLO.

    ``busiest``: (n, busiest over mean >= 1) for increasing n; a size between two known
    ones takes the lower's factor, one outside the range the nearest end's."""

    busiest: tuple[tuple[int, float], ...]
    rebalancing: str = ""  # what the factors assume, for the plan's reason

    def validate(self) -> None:
        if not self.busiest:
            raise ModelError("load skew: no cluster size given")
        ns = [n for n, _ in self.busiest]
        if any(n < 1 for n in ns) or any(b <= a for a, b in itertools.pairwise(ns)):
            raise ModelError(f"load skew: sizes must be >= 1 and increasing, got {ns}")
        for n, f in self.busiest:
            if not (isinstance(f, int | float) and math.isfinite(f) and f >= 1.0 - 1e-9):
                raise ModelError(f"load skew at {n} node(s): the busiest node over the mean "
                                 f"must be a finite number >= 1, got {f!r}")

    def factor(self, n: int) -> float:
        """The busiest node over the mean at ``n`` nodes."""
        best = self.busiest[0][1]
        for k, f in self.busiest:
            if k > n:
                break
            best = f
        return max(1.0, float(best))

    def factors(self, ns: npt.ArrayLike) -> FloatArray:
        return np.asarray([self.factor(int(n)) for n in np.ravel(ns)], dtype=np.float64)

    @classmethod
    def uniform(cls) -> LoadSkew:
        return cls(((1, 1.0),), "none")


@dataclass(frozen=True)
class Operation:
    """A topology change already under way (persisted by the operator in the CR status)."""

    from_replicas: int
    to_replicas: int
    started_s: float
    expected_end_s: float

    @property
    def direction(self) -> int:
        return (self.to_replicas > self.from_replicas) - (self.to_replicas < self.from_replicas)


@dataclass(frozen=True)
class Observation:
    """What the planner knows at the start of a window (``now_s`` = t_s)."""

    now_s: float
    replicas: int  # servers serving now
    load_rps: float  # observed client load now, W(t_s)
    forecast_rps: float  # forecast for the window end t_e = now + window
    read_ratio: float
    data_bytes: float  # D, all data stored (with replicas)
    interference: float = 0.0
    predicted_now_rps: float | None = None  # the forecast made a window ago for now
    operation: Operation | None = None
    recent_desired: tuple[tuple[float, int], ...] = ()  # (time, desired) of past plans
    path: LoadPath | None = None  # the forecast over the horizon (horizon mode)
    #: the bytes: each node's use, its volume and the data's forecast (None: the
    #: planner sizes for the load only)
    storage: StorageView | None = None
    #: the load's skew over the nodes (None: the planner sizes for the mean node)
    load_skew: LoadSkew | None = None
    #: a scale-out's cleanup under way, its node serving (no ``operation``): the bytes the
    #: old nodes still have to rewrite; with ``PlannerConfig.cleanup`` the plan starts in
    #: it (no scale-in before it ends; a scale-out may cut it short)
    cleanup_left_bytes: float = 0.0

    def validate(self) -> None:
        for name in ("load_rps", "forecast_rps", "read_ratio", "data_bytes", "interference",
                     "cleanup_left_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ModelError(f"observation {name} must be a finite number >= 0, got {v!r} "
                                 "(a missing metric is an error, never 0)")
        if self.predicted_now_rps is not None and (
                not math.isfinite(self.predicted_now_rps) or self.predicted_now_rps < 0):
            raise ModelError(f"predicted_now_rps must be finite and >= 0, got "
                             f"{self.predicted_now_rps!r}")
        if self.read_ratio > 1 or self.interference > 1:
            raise ModelError("read_ratio and interference are fractions in [0, 1]")
        if self.replicas < 1:
            raise ModelError(f"replicas must be >= 1, got {self.replicas}")
        if self.storage is not None:
            self.storage.validate()
        if self.load_skew is not None:
            self.load_skew.validate()


@dataclass(frozen=True)
class Action:
    at_s: float
    replicas: int  # the target once this action completes
    source: Literal["reactive", "proactive", "merged", "horizon"]
    reason: str
    expected_end_s: float = math.nan
    #: the migration rate the plan runs this change at, MiB/s per sender (None: BwMan's
    #: rule, f() of the load as it comes)
    rate_mibps: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Plan:
    now_s: float
    window_end_s: float
    actions: tuple[Action, ...]
    desired_replicas: int  # at the window end
    migration_mibps: float  # per server, to enforce during the actions
    bandwidth: Allocation | None
    queued: bool  # actions wait for an operation in progress
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
