"""The ProRenaTa policy loop: one control period, from an observation and a forecast to a
decision. Pure, and the one copy: the operator (:mod:`elastore.operator.policyloop`) and the
simulator's ``prorenata`` controller and its forms (``prorenata-window``,
``perfect-forecast-window``, ...: :mod:`elastore.sim.controllers`) are thin adapters around
:meth:`PolicyLoop.step`, so the simulator measures the code the operator runs (as
cluster-autoscaler's ``simulator/`` is the code its scale-up and scale-down use).

What the loop keeps between periods is a :class:`Memory` (the operator stores it in the
CR status):

* the last forecast and the time it was for: the next period compares it with what it
  observes (the reactive correction);
* the raw recommendations of the stabilization window (:mod:`.stabilization`);
* the planned actions, with absolute times. Between two periods they are carried out as
  planned instead of re-planned, and a re-plan may bring an action earlier, never later
  (:func:`commit`): the planner starts each action at the last moment of *its* window, and
  with a control period shorter than the horizon every period's window ends later, so a
  fresh plan would push a scale-out back period after period while its load arrives.

The replicas wanted in force at any time are :func:`target_at` of the actions: the last
one started by then.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastore.models.bundle import ModelSet
from elastore.models.storage import StorageView
from elastore.planner.prorenata import plan
from elastore.planner.stabilization import Recommendations, remember
from elastore.planner.types import (
    LoadPath,
    LoadSkew,
    Observation,
    Operation,
    Plan,
    PlannerConfig,
)


@dataclass(frozen=True)
class PlannedAction:
    """A node-count change the loop has committed to, at an absolute time."""

    at_s: float
    replicas: int  # the target once it completes
    source: str  # reactive, proactive, merged, horizon
    reason: str
    rate_mibps: float | None = None  # a fixed migration rate (None: BwMan's rule)


@dataclass(frozen=True)
class Memory:
    """What the loop keeps from one period to the next."""

    forecast_rps: float | None = None
    forecast_for_s: float | None = None  # the time that forecast was for
    recent_desired: Recommendations = ()  # raw recommendations, a sliding-window maximum
    window_end_s: float | None = None
    actions: tuple[PlannedAction, ...] = ()

    def forgetting_the_forecast(self) -> Memory:
        """This memory after a period without evidence: no forecast to compare the next
        observation with, and no plan (a scale-in on missing data never happens); the
        stabilization window is kept."""
        return Memory(recent_desired=self.recent_desired)


@dataclass(frozen=True)
class Observed:
    """The cluster at the start of a period (``now_s``), as measured."""

    now_s: float
    replicas: int  # servers serving now
    load_rps: float  # client load now
    read_ratio: float
    data_bytes: float  # all data stored, replicas included
    interference: float = 0.0
    operation: Operation | None = None  # a topology change under way
    storage: StorageView | None = None  # the bytes (None: sized for the load only)
    load_skew: LoadSkew | None = None  # the busiest node (None: sized for the mean node)
    cleanup_left_bytes: float = 0.0  # a scale-out's cleanup under way: what is left of it


@dataclass(frozen=True)
class Forecast:
    """The load forecast for ``for_s`` (the end of this period's planning window), and for
    the horizon planner the whole path with its quantile scenarios."""

    rps: float
    for_s: float
    method: str  # what produced it (a fallback says so)
    path: LoadPath | None = None


@dataclass(frozen=True)
class Decision:
    now_s: float
    forecast: Forecast
    predicted_now_rps: float | None  # what the previous period forecast for now
    forecast_error: float | None  # observed / predicted - 1
    desired_replicas: int  # at the window end
    migration_mibps: float  # per server, while data moves
    actions: tuple[PlannedAction, ...]  # committed, absolute times (some may be due)
    window_end_s: float
    reason: str
    memory: Memory
    plan: Plan

    @property
    def forecast_rps(self) -> float:
        return self.forecast.rps

    @property
    def forecast_for_s(self) -> float:
        return self.forecast.for_s

    @property
    def method(self) -> str:
        return self.forecast.method


def target_at(actions: tuple[PlannedAction, ...], t_s: float, current: int) -> int:
    """The replicas the plan wants in force at ``t_s``: the last action started by then,
    else ``current``."""
    target = current
    for a in actions:
        if a.at_s <= t_s:
            target = a.replicas
    return target


def started(actions: tuple[PlannedAction, ...], t_s: float, to: int) -> PlannedAction | None:
    """The latest action to ``to`` replicas started by ``t_s`` (the change under way)."""
    hit = None
    for a in actions:
        if a.at_s <= t_s and a.replicas == to:
            hit = a
    return hit


def next_action(actions: tuple[PlannedAction, ...], t_s: float) -> PlannedAction | None:
    """The first action still to come after ``t_s``."""
    return next((a for a in actions if a.at_s > t_s), None)


def commit(previous: tuple[PlannedAction, ...], new: tuple[PlannedAction, ...]
           ) -> tuple[PlannedAction, ...]:
    """A planned start is a commitment: an action the new plan still wants (same replicas)
    keeps the earlier of its two start times; one it no longer wants is dropped (the
    forecast changed)."""
    before = {a.replicas: a for a in previous}
    out = []
    for a in new:
        old = before.get(a.replicas)
        if old is not None and old.at_s < a.at_s:
            a = PlannedAction(old.at_s, a.replicas, a.source,
                              f"{a.reason} (kept at its first planned start)", a.rate_mibps)
        out.append(a)
    return tuple(out)


@dataclass(frozen=True)
class PolicyLoop:
    """One policy's loop: the planner's configuration and models, and its control period
    (a forecast made a period ago counts as the prediction for now if it was for a time
    within half a period of now)."""

    config: PlannerConfig
    models: ModelSet
    period_s: float

    def predicted_now(self, memory: Memory, now_s: float) -> float | None:
        if memory.forecast_rps is None or memory.forecast_for_s is None:
            return None
        if abs(memory.forecast_for_s - now_s) > 0.5 * self.period_s + 1e-6:
            return None
        return memory.forecast_rps

    def step(self, memory: Memory, observed: Observed, forecast: Forecast) -> Decision:
        """Plan the period that starts at ``observed.now_s``."""
        cfg = self.config
        now = observed.now_s
        predicted_now = self.predicted_now(memory, now)
        obs = Observation(now_s=now, replicas=observed.replicas, load_rps=observed.load_rps,
                          forecast_rps=forecast.rps, read_ratio=observed.read_ratio,
                          data_bytes=observed.data_bytes, interference=observed.interference,
                          predicted_now_rps=predicted_now, operation=observed.operation,
                          recent_desired=memory.recent_desired, path=forecast.path,
                          storage=observed.storage, load_skew=observed.load_skew,
                          cleanup_left_bytes=observed.cleanup_left_bytes)
        p = plan(obs, cfg, self.models)
        actions = tuple(PlannedAction(a.at_s, a.replicas, a.source, a.reason, a.rate_mibps)
                        for a in p.actions)
        if cfg.mode == "window":
            # the window scheduler starts each action at the last moment of its window;
            # the horizon planner times it on the whole path, and its plans may pass the
            # same size twice (up, then down), which a commitment by size would scramble
            actions = commit(memory.actions, actions)
        err = None
        if predicted_now is not None and predicted_now > 0:
            err = observed.load_rps / predicted_now - 1
        # stabilization remembers what the forecast asked for (bounded), not its own output
        raw = min(max(int(p.details["proactive_unbounded"]), cfg.floor), cfg.max_replicas)
        mem = Memory(forecast_rps=forecast.rps, forecast_for_s=forecast.for_s,
                     recent_desired=remember(memory.recent_desired, now, raw,
                                             cfg.scale_down_stabilization_s),
                     window_end_s=p.window_end_s, actions=actions)
        return Decision(now_s=now, forecast=forecast, predicted_now_rps=predicted_now,
                        forecast_error=err, desired_replicas=p.desired_replicas,
                        migration_mibps=p.migration_mibps, actions=actions,
                        window_end_s=p.window_end_s, reason=f"{forecast.method}: {p.reason}",
                        memory=mem, plan=p)


def set_points(decision: Decision, current: int) -> list[tuple[float, int]]:
    """The decision as a target over time, for an executor that walks the cluster towards
    its target one node at a time: the target in force now, then each action to come.
    ``current`` is what the cluster is heading for now (an operation's outcome, else the
    replicas serving)."""
    now = decision.now_s
    out = [(now, target_at(decision.actions, now, current))]
    out += [(a.at_s, a.replicas) for a in decision.actions if a.at_s > now]
    return out
