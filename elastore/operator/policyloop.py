"""The operator's adapter around the policy loop (:mod:`elastore.planner.loop`). Pure.

It turns an ElasticPolicy spec and a metrics :class:`~elastore.operator.metrics.Snapshot`
into the loop's inputs (a planner configuration, an observation, a forecast from the
policy's method), runs one :meth:`~elastore.planner.loop.PolicyLoop.step`, and reads and
writes the loop's :class:`~elastore.planner.loop.Memory` in the CR status. The decision
itself is the loop's, the same the simulator's ``prorenata`` controller makes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from elastore.errors import ElastoreError, MetricsError
from elastore.models.bandwidth import Policy
from elastore.models.bundle import ModelSet
from elastore.operator.conditions import iso
from elastore.operator.metrics import Snapshot
from elastore.operator.spec import PolicySpec
from elastore.planner import Operation, PlannerConfig
from elastore.planner.loop import (
    Decision,
    Forecast,
    Memory,
    Observed,
    PlannedAction,
    PolicyLoop,
    next_action,
    target_at,
)
from elastore.planner.types import LoadPath
from elastore.predictor.intervals import Intervals, describe, scenario_levels
from elastore.predictor.registry import make

__all__ = ["HISTORY_STEPS", "Decision", "Memory", "PlannedAction", "decide", "forecast",
           "history_steps", "memory_from_status", "memory_to_status", "next_action",
           "planner_config", "target_at"]

#: steps of load history asked of Prometheus: two weeks of steps (hours by default), or
#: what the method needs to run as itself plus a day, if that is more; fewer are fine (the
#: predictors fall back to simpler forecasts, and say so)
HISTORY_STEPS = 336


#: steps of history replayed through the predictor, so the forecast's quantiles are
#: calibrated on its own errors (two weeks of hours): ``spec.prediction.calibrationSteps``'
#: default
CALIBRATION_STEPS = 336


def history_steps(method: str, horizon_steps: int = 0,
                  calibration_steps: int = CALIBRATION_STEPS) -> int:
    """Steps of load history to ask Prometheus for. With ``horizon_steps`` (the horizon
    planner's path), enough to also replay ``calibration_steps`` of it."""
    need = int(make(method).min_history) + 24
    if horizon_steps:
        need += calibration_steps + horizon_steps
    return max(HISTORY_STEPS, need)


#: forecast steps of the horizon planner's path, at most (a week of hours); past them the
#: path holds its last value
MAX_PATH_STEPS = 168


def path_steps(spec: PolicySpec) -> int:
    """Forecast steps the horizon planner's path covers (0: the window planner)."""
    if spec.planner_mode != "Horizon":
        return 0
    return max(1, min(MAX_PATH_STEPS, math.ceil(spec.lookahead_s / spec.prediction_step_s)))


# -- the loop's memory in the CR status ---------------------------------------------------------
def action_to_status(a: PlannedAction) -> dict[str, Any]:
    # times at full precision: the status round trip must not move a committed start
    return {"atEpoch": a.at_s, "at": iso(a.at_s), "replicas": a.replicas,
            "source": a.source, "reason": a.reason, "rateMiBps": a.rate_mibps}


def action_from_status(d: Any) -> PlannedAction:
    rate = d.get("rateMiBps")
    return PlannedAction(float(d["atEpoch"]), int(d["replicas"]), str(d.get("source", "")),
                         str(d.get("reason", "")), None if rate is None else float(rate))


def memory_to_status(m: Memory) -> dict[str, Any]:
    return {"forecastRps": m.forecast_rps, "forecastForEpoch": m.forecast_for_s,
            "desired": [[t, n] for t, n in m.recent_desired],
            "windowEndEpoch": m.window_end_s,
            "actions": [action_to_status(a) for a in m.actions]}


def memory_from_status(status: Any) -> Memory:
    """The memory in ``status["memory"]``; an unreadable one is forgotten, not trusted."""
    s = status if isinstance(status, dict) else {}
    mem = s.get("memory") or {}
    try:
        return Memory(
            forecast_rps=_opt_float(mem.get("forecastRps")),
            forecast_for_s=_opt_float(mem.get("forecastForEpoch")),
            recent_desired=tuple((float(t), int(n)) for t, n in mem.get("desired", [])),
            window_end_s=_opt_float(mem.get("windowEndEpoch")),
            actions=tuple(action_from_status(a) for a in mem.get("actions", [])),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return Memory()


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


# -- spec and snapshot -> the loop's inputs ------------------------------------------------------
def planner_config(spec: PolicySpec) -> PlannerConfig:
    return PlannerConfig(
        min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
        replication_factor=spec.target.replication_factor,
        window_s=spec.prediction_horizon_s, headroom=spec.headroom,
        one_at_a_time=True, migration_mode="node-by-node",
        scale_down_stabilization_s=spec.stabilization_s,
        node_overhead_s=spec.node_overhead_s,
        policy=Policy(spec.migration_policy), min_migration_mibps=spec.min_migration_mibps,
        max_migration_mibps=spec.max_migration_mibps,
        mode="horizon" if spec.planner_mode == "Horizon" else "window",
        lookahead_s=spec.lookahead_s, penalty=spec.violation_penalty,
        # BwMan's split of each node's link, when the policy gives its total
        total_bandwidth_mbit=spec.node_mbit)


def policy_loop(spec: PolicySpec, models: ModelSet) -> PolicyLoop:
    return PolicyLoop(planner_config(spec), models, spec.control_period_s)


def forecast(spec: PolicySpec, snap: Snapshot) -> Forecast:
    """The load forecast for ``spec.prediction_horizon_s`` after the snapshot.

    The predictor sees the load per ``spec.prediction_step_s`` (gaps as NaN). A horizon of
    k whole steps is k steps ahead; a horizon shorter than a step interpolates between the
    load now and the next step's forecast."""
    hist = np.asarray(snap.history_rps, dtype=float)
    finite = np.flatnonzero(np.isfinite(hist))
    if finite.size == 0:
        raise MetricsError("MetricsMissing", "Prometheus has no load history for this "
                                             "cluster: nothing to forecast from")
    # the steps before the series began are not gaps: a predictor that counted them as
    # history would pick a seasonal fallback on a few real values
    hist = hist[int(finite[0]):]
    pred = make(spec.prediction_method)
    steps = path_steps(spec)
    iv = None
    if steps:
        # the errors of the last calibrationSteps origins, and no older ones
        iv = Intervals(pred, horizons=steps, window=spec.calibration_steps)
        replay = max(0, min(spec.calibration_steps, len(hist) - max(pred.min_history, 1)))
        iv.fit(hist, replay=replay)
    else:
        pred.fit(hist)
    used = describe(pred, iv)
    ratio = spec.prediction_horizon_s / spec.prediction_step_s
    point = iv.path() if iv is not None else None
    if ratio >= 1:
        k = max(1, round(ratio))
        value = float(point[k - 1]) if point is not None and k <= len(point) else \
            pred.forecast(k)
    else:
        first = float(point[0]) if point is not None else pred.forecast(1)
        value = snap.load_rps + (first - snap.load_rps) * ratio
    if not math.isfinite(value) or value < 0:
        raise ElastoreError(f"the {spec.prediction_method} forecast is {value!r}")
    path = None
    if iv is not None and point is not None:
        if not np.all(np.isfinite(point)):
            raise ElastoreError(f"the {spec.prediction_method} forecast path is not finite")
        levels, weights = scenario_levels()
        times = snap.at_s + spec.prediction_step_s * np.arange(1, steps + 1, dtype=float)
        path = LoadPath(times, point, iv.quantile_paths(levels), weights)
    return Forecast(float(value), snap.at_s + spec.prediction_horizon_s, used, path)


def decide(spec: PolicySpec, snap: Snapshot, replicas: int, models: ModelSet,
           memory: Memory, operation: Operation | None = None,
           interference: float = 0.0) -> Decision:
    """One step of the policy loop for the period that starts at the snapshot's time."""
    observed = Observed(now_s=snap.at_s, replicas=replicas, load_rps=snap.load_rps,
                        read_ratio=snap.read_ratio, data_bytes=snap.data_bytes,
                        interference=interference, operation=operation)
    return policy_loop(spec, models).step(memory, observed, forecast(spec, snap))


def slo_at_risk(models: ModelSet, forecast_rps: float, read_ratio: float, replicas: int,
                interference: float = 0.0) -> bool:
    """Whether ``replicas`` servers, as they are, would miss the SLO at the forecast load:
    the capacity model wants more of them (Recommend's ``elastore_slo_at_risk``, the
    backtest's column, and what lets a topology change through a running repair)."""
    return models.capacity.servers_needed(forecast_rps, read_ratio, interference) > replicas


def would_scale(actions: tuple[PlannedAction, ...], now_s: float, replicas: int) -> int:
    """What Enforce would change now, in replicas (+ out, - in, 0 nothing): the plan's
    target in force at ``now_s`` against the size there is."""
    return target_at(actions, now_s, replicas) - replicas
