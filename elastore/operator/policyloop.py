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
from elastore.models.storage import StorageView, growth_forecast
from elastore.operator.conditions import iso
from elastore.operator.metrics import DiskReading, Snapshot
from elastore.operator.skew import SkewView, load_skew
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

__all__ = ["HISTORY_STEPS", "Decision", "Memory", "PlannedAction", "WarmForecast", "decide",
           "forecast",
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
        total_bandwidth_mbit=spec.node_mbit, cleanup=spec.cleanup)


def policy_loop(spec: PolicySpec, models: ModelSet) -> PolicyLoop:
    return PolicyLoop(planner_config(spec), models, spec.control_period_s)


class WarmForecast:
    """One policy's fitted predictor and intervals, kept between its periods so that a
    period feeds them only the steps completed since the last one (the simulator's
    controllers fit once and update the same way). Without it every period fits from
    scratch and replays ``calibrationSteps`` of history, which at a 30-s step and a 24-h
    lookahead is 336 x 168 forecasts: most of a period's CPU (docs/reliability.md).

    Reused only while the new history is the old one moved on by whole steps, every value
    of the overlap unchanged (a revised sample, a different method, step, path or window:
    a fit from scratch). Holds state; the forecast stays a function of its inputs plus
    this record of the history already fed."""

    __slots__ = ("end_s", "hist", "iv", "key", "pred", "refits", "reused", "updates")

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.end_s = math.nan
        self.hist: np.ndarray[Any, np.dtype[np.float64]] = np.zeros(0)
        self.iv: Intervals | None = None
        self.pred: Any = None
        self.refits = 0  # fits from scratch
        self.reused = 0  # periods that fed the kept fit (0 or more new steps)
        self.updates = 0  # steps fed to the kept fit

    def _moved_on(self, key: tuple[Any, ...], hist: np.ndarray[Any, np.dtype[np.float64]],
                  end_s: float, step_s: float) -> int | None:
        """How many whole steps ``hist`` (ending at ``end_s``) is ahead of the kept
        history, if the kept fit may go on from it; None: fit from scratch."""
        if self.iv is None or key != self.key:
            return None
        shift = (end_s - self.end_s) / step_s
        k = round(shift)
        if abs(shift - k) > 1e-6 or k < 0:
            return None
        # the kept history's step j is the new one's step j + d; d > 0: the new history
        # reaches further back than the fit has seen
        d = len(hist) - k - len(self.hist)
        overlap = len(self.hist) + d
        if d > 0 or overlap < max(1, len(hist) // 2):
            return None
        old, new = self.hist[-d:] if d else self.hist, hist[:overlap]
        same = (np.isnan(old) & np.isnan(new)) | np.isclose(old, new, rtol=1e-9, atol=1e-9)
        return k if bool(same.all()) else None


def forecast(spec: PolicySpec, snap: Snapshot, warm: WarmForecast | None = None) -> Forecast:
    """The load forecast for ``spec.prediction_horizon_s`` after the snapshot.

    The predictor sees the load per ``spec.prediction_step_s`` (gaps as NaN), whose last
    step ends at ``snap.history_end_s`` (at most a step before the snapshot). The forecast
    at the horizon is interpolated between the load now and the path's steps; past the
    path, it is the predictor's own forecast of the step it falls in. ``warm``: this
    policy's :class:`WarmForecast` (fed and updated in place), or None to fit from
    scratch."""
    hist = np.asarray(snap.history_rps, dtype=float)
    end_s = snap.at_s if snap.history_end_s is None else float(snap.history_end_s)
    step_s = spec.prediction_step_s
    finite = np.flatnonzero(np.isfinite(hist))
    if finite.size == 0:
        raise MetricsError("MetricsMissing", "Prometheus has no load history for this "
                                             "cluster: nothing to forecast from")
    steps = path_steps(spec)
    key = (spec.prediction_method, steps, spec.calibration_steps, step_s)
    moved = warm._moved_on(key, hist, end_s, step_s) if warm is not None else None
    if warm is not None and moved is not None and warm.iv is not None:
        iv: Intervals | None = warm.iv
        pred = warm.pred
        for v in hist[len(hist) - moved:]:
            warm.iv.update(float(v))
        warm.reused += 1
        warm.updates += moved
    else:
        # the steps before the series began are not gaps: a predictor that counted them
        # as history would pick a seasonal fallback on a few real values
        trimmed = hist[int(finite[0]):]
        pred = make(spec.prediction_method)
        iv = None
        if steps:
            # the errors of the last calibrationSteps origins, and no older ones
            iv = Intervals(pred, horizons=steps, window=spec.calibration_steps)
            replay = max(0, min(spec.calibration_steps,
                                len(trimmed) - max(pred.min_history, 1)))
            iv.fit(trimmed, replay=replay)
        else:
            pred.fit(trimmed)
        if warm is not None:
            warm.refits += 1
            # only the horizon planner's path is kept (the window planner's fit is cheap)
            warm.iv, warm.pred, warm.key = (iv, pred, key) if iv is not None else \
                (None, None, None)
    if warm is not None:
        warm.hist, warm.end_s = hist.copy(), end_s
    used = describe(pred, iv)
    point = iv.path() if iv is not None else None
    target_s = snap.at_s + spec.prediction_horizon_s
    k = max(1, math.ceil((target_s - end_s) / step_s - 1e-9))  # the step it falls in
    if point is not None and k <= len(point):
        times = np.concatenate([[snap.at_s], end_s + step_s * np.arange(1, k + 1)])
        values = np.concatenate([[snap.load_rps], point[:k]])
        value = float(np.interp(target_s, times, values))
    elif point is None and target_s < end_s + step_s:  # inside the first step
        first = pred.forecast(1)
        frac = (target_s - snap.at_s) / max(end_s + step_s - snap.at_s, 1e-9)
        value = snap.load_rps + (first - snap.load_rps) * frac
    else:
        value = pred.forecast(k)
    if not math.isfinite(value) or value < 0:
        raise ElastoreError(f"the {spec.prediction_method} forecast is {value!r}")
    path = None
    if iv is not None and point is not None:
        if not np.all(np.isfinite(point)):
            raise ElastoreError(f"the {spec.prediction_method} forecast path is not finite")
        levels, weights = scenario_levels()
        times = end_s + step_s * np.arange(1, steps + 1, dtype=float)
        path = LoadPath(times, point, iv.quantile_paths(levels), weights)
    return Forecast(float(value), target_s, used, path)


#: how far back the bytes' history reaches (two weeks: two weekly seasons), at most
#: Prometheus's 11,000 points of a range query
BYTES_HISTORY_S = 14 * 86400.0
MAX_RANGE_POINTS = 11000


def bytes_history_steps(spec: PolicySpec) -> int:
    return int(min(MAX_RANGE_POINTS, max(3, BYTES_HISTORY_S // spec.prediction_step_s)))


def storage_view(spec: PolicySpec, disk: DiskReading, volume_bytes: float, replicas: int,
                 now_s: float) -> tuple[StorageView, str]:
    """The bytes as the planner sees them: each node's use (a node without a figure counts
    at the mean of the others: a partial scrape never shrinks the data), the smallest
    volume, and the data's growth forecast over the lookahead. Returns the view and a note
    on what was filled in."""
    used = list(disk.used_bytes.values())
    note = ""
    if len(used) < replicas:
        mean = sum(used) / len(used)
        note = (f"{replicas - len(used)} of {replicas} node(s) without a figure, counted at "
                f"the others' mean ({mean / 2**30:,.1f} GiB)")
        used += [mean] * (replicas - len(used))
    step = spec.prediction_step_s
    hist = np.asarray(disk.history_bytes, dtype=float)
    if len(used) > len(disk.used_bytes) and np.isfinite(hist).any():
        hist = hist * (len(used) / len(disk.used_bytes))
    hist = np.concatenate([hist, [float(sum(used))]])
    # a trend from a day of history at least (a shorter one with a level shift, a pod
    # that joined or a scrape that half-failed, reads as steep growth); before that the
    # bytes as they are
    day = max(1, round(86400 / step))
    path = growth_forecast(hist, step, now_s, max(1, math.ceil(spec.lookahead_s / step)),
                           season_steps=day, window_steps=bytes_history_steps(spec),
                           min_trend_steps=min(day, bytes_history_steps(spec)))
    return StorageView(spec.storage, volume_bytes, tuple(used), disk.source, path), note


def decide(spec: PolicySpec, snap: Snapshot, replicas: int, models: ModelSet,
           memory: Memory, operation: Operation | None = None,
           interference: float = 0.0, storage: StorageView | None = None,
           skew: SkewView | None = None, warm: WarmForecast | None = None,
           cleanup_left: float = 0.0) -> Decision:
    """One step of the policy loop for the period that starts at the snapshot's time
    (``storage``: the bytes too). ``skew``: this period's skew view
    (:class:`elastore.operator.skew.SkewView`: per-pod loads and shares, the ring and the
    hot keys when sampled; None with ``spec.skew.mode: Off``): the planner sizes for the
    busiest node when the imbalance passes ``spec.skew.imbalanceThreshold``
    (:func:`elastore.operator.skew.load_skew`). ``warm``: the policy's kept forecast
    (:class:`WarmForecast`). ``cleanup_left``: a scale-out's cleanup under way (its node
    serving, no ``operation``): the share of the data its old nodes still have to
    rewrite."""
    sized, _ = load_skew(skew, spec.skew, spec.max_replicas)
    data = snap.data_bytes if math.isfinite(snap.data_bytes) or storage is None \
        else storage.total_bytes
    observed = Observed(now_s=snap.at_s, replicas=replicas, load_rps=snap.load_rps,
                        read_ratio=snap.read_ratio, data_bytes=data,
                        interference=interference, operation=operation, storage=storage,
                        load_skew=sized,
                        cleanup_left_bytes=max(0.0, cleanup_left) * data
                        if math.isfinite(data) else 0.0)
    return policy_loop(spec, models).step(memory, observed, forecast(spec, snap, warm))


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
