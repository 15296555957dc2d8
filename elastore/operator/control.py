"""One control period of an ElasticPolicy: forecast, plan, schedule. Pure.

Plain data in (the spec, a metrics :class:`~elastore.operator.metrics.Snapshot`, the
replicas serving, the clock, the models, and what the loop remembers in the CR status), a
:class:`Decision` out. The plan's actions carry absolute times: between two control periods
the loop executes them as planned instead of re-planning, so the last-moment start the
planner chose is not pushed back every time the loop wakes up (a receding horizon would
postpone a scale-out for ever), and a restarted operator finds them in the status.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from elastore.errors import ElastoreError
from elastore.models.bandwidth import Policy
from elastore.models.bundle import ModelSet
from elastore.operator.metrics import MetricsError, Snapshot
from elastore.operator.spec import PolicySpec
from elastore.planner import Observation, Operation, PlannerConfig, plan
from elastore.predictor.registry import make

#: steps of load history asked of Prometheus: two weeks of steps (hours by default), or
#: what the method needs to run as itself plus a day, if that is more; fewer are fine (the
#: predictors fall back to simpler forecasts, and say so)
HISTORY_STEPS = 336


def history_steps(method: str) -> int:
    return max(HISTORY_STEPS, int(make(method).min_history) + 24)
MEMORY_DESIRED = 64  # past recommendations kept for scale-down stabilization (at most)


@dataclass(frozen=True)
class PlannedAction:
    at_s: float  # epoch seconds
    replicas: int
    source: str
    reason: str

    def to_status(self) -> dict[str, Any]:
        return {"atEpoch": round(self.at_s, 3), "at": iso(self.at_s),
                "replicas": self.replicas, "source": self.source, "reason": self.reason}

    @classmethod
    def from_status(cls, d: Any) -> PlannedAction:
        return cls(float(d["atEpoch"]), int(d["replicas"]), str(d.get("source", "")),
                   str(d.get("reason", "")))


@dataclass(frozen=True)
class Memory:
    """What the loop keeps between periods (in the CR status)."""

    forecast_rps: float | None = None
    forecast_for_s: float | None = None  # the time that forecast was for
    recent_desired: tuple[tuple[float, int], ...] = ()
    window_end_s: float | None = None
    actions: tuple[PlannedAction, ...] = ()

    @classmethod
    def from_status(cls, status: Any) -> Memory:
        s = status if isinstance(status, dict) else {}
        mem = s.get("memory") or {}
        try:
            return cls(
                forecast_rps=_opt_float(mem.get("forecastRps")),
                forecast_for_s=_opt_float(mem.get("forecastForEpoch")),
                recent_desired=tuple((float(t), int(n)) for t, n in mem.get("desired", [])),
                window_end_s=_opt_float(mem.get("windowEndEpoch")),
                actions=tuple(PlannedAction.from_status(a) for a in mem.get("actions", [])),
            )
        except (KeyError, TypeError, ValueError):
            return cls()  # an unreadable memory is forgotten, not trusted

    def to_status(self) -> dict[str, Any]:
        return {"forecastRps": self.forecast_rps, "forecastForEpoch": self.forecast_for_s,
                "desired": [[round(t, 3), n] for t, n in self.recent_desired],
                "windowEndEpoch": self.window_end_s,
                "actions": [a.to_status() for a in self.actions]}


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def iso(epoch_s: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Decision:
    now_s: float
    forecast_rps: float
    forecast_for_s: float
    method: str
    predicted_now_rps: float | None  # what the last period forecast for now
    forecast_error: float | None  # observed / predicted - 1
    desired_replicas: int
    migration_mibps: float
    actions: tuple[PlannedAction, ...]
    window_end_s: float
    reason: str
    memory: Memory

    def target_at(self, t_s: float, current: int) -> int:
        return target_at(self.actions, t_s, current)


def target_at(actions: tuple[PlannedAction, ...], t_s: float, current: int) -> int:
    """The replicas the plan wants in force at ``t_s``: the last action started by then."""
    target = current
    for a in actions:
        if a.at_s <= t_s:
            target = a.replicas
    return target


def next_action(actions: tuple[PlannedAction, ...], t_s: float) -> PlannedAction | None:
    return next((a for a in actions if a.at_s > t_s), None)


def commit(previous: tuple[PlannedAction, ...], new: tuple[PlannedAction, ...]
           ) -> tuple[PlannedAction, ...]:
    """A planned start is a commitment: re-planning may bring an action earlier, never later.

    The planner starts each action at the last moment before the end of *its* window. With
    a control period shorter than the horizon, the next period's window ends later, so a
    fresh plan would put the same action later again, and a scale-out would be pushed back
    period after period while the load it was planned for arrives. So an action the new plan
    still wants (same replicas) keeps the earlier of its two start times; one it no longer
    wants is dropped (the forecast changed)."""
    before = {a.replicas: a for a in previous}
    out = []
    for a in new:
        old = before.get(a.replicas)
        if old is not None and old.at_s < a.at_s:
            a = PlannedAction(old.at_s, a.replicas, a.source,
                              f"{a.reason} (kept at its first planned start)")
        out.append(a)
    return tuple(out)


def planner_config(spec: PolicySpec) -> PlannerConfig:
    return PlannerConfig(
        min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
        replication_factor=spec.target.replication_factor,
        window_s=spec.prediction_horizon_s, headroom=spec.headroom,
        one_at_a_time=True, migration_mode="node-by-node",
        scale_down_stabilization_s=spec.stabilization_s,
        node_overhead_s=spec.node_overhead_s,
        policy=Policy(spec.migration_policy), min_migration_mibps=spec.min_migration_mibps,
        max_migration_mibps=spec.max_migration_mibps)


def forecast(spec: PolicySpec, snap: Snapshot) -> tuple[float, str]:
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
    pred.fit(hist)
    used = pred.name if pred._fallback is None else f"{pred._fallback.name} (fallback: " \
        f"{np.isfinite(hist).sum()} of {pred.min_history} steps of history)"
    ratio = spec.prediction_horizon_s / spec.prediction_step_s
    if ratio >= 1:
        value = pred.forecast(max(1, round(ratio)))
    else:
        value = snap.load_rps + (pred.forecast(1) - snap.load_rps) * ratio
    if not math.isfinite(value) or value < 0:
        raise ElastoreError(f"the {spec.prediction_method} forecast is {value!r}")
    return float(value), used


def decide(spec: PolicySpec, snap: Snapshot, replicas: int, models: ModelSet,
           memory: Memory, operation: Operation | None = None,
           interference: float = 0.0) -> Decision:
    """Plan the window that starts at the snapshot's time."""
    now = snap.at_s
    f, method = forecast(spec, snap)
    predicted_now = None
    if memory.forecast_rps is not None and memory.forecast_for_s is not None and \
            abs(memory.forecast_for_s - now) <= 0.5 * spec.control_period_s + 1e-6:
        predicted_now = memory.forecast_rps
    obs = Observation(now_s=now, replicas=replicas, load_rps=snap.load_rps, forecast_rps=f,
                      read_ratio=snap.read_ratio, data_bytes=snap.data_bytes,
                      interference=interference, predicted_now_rps=predicted_now,
                      operation=operation, recent_desired=memory.recent_desired)
    p = plan(obs, planner_config(spec), models)
    actions = commit(memory.actions,
                     tuple(PlannedAction(a.at_s, a.replicas, a.source, a.reason)
                           for a in p.actions))
    err = None
    if predicted_now is not None and predicted_now > 0:
        err = snap.load_rps / predicted_now - 1
    # what the forecast asked for, before stabilization (as the HPA keeps its raw
    # recommendations): remembering the stabilized value would hold a scale-down off for ever
    raw = int(p.details.get("proactive_unbounded", p.desired_replicas))
    floor = max(spec.min_replicas, spec.target.replication_factor)
    raw = min(max(raw, floor), spec.max_replicas)
    desired = [(t, n) for t, n in memory.recent_desired if now - t <= spec.stabilization_s]
    # only what can still be the window's maximum: an older recommendation no higher than a
    # newer one never will be (a sliding-window maximum, so the status stays small however
    # long the window and short the period)
    while desired and desired[-1][1] <= raw:
        desired.pop()
    desired = [*desired, (now, raw)][-MEMORY_DESIRED:]
    mem = Memory(forecast_rps=f, forecast_for_s=now + spec.prediction_horizon_s,
                 recent_desired=tuple(desired), window_end_s=p.window_end_s, actions=actions)
    return Decision(now_s=now, forecast_rps=f, forecast_for_s=now + spec.prediction_horizon_s,
                    method=method, predicted_now_rps=predicted_now, forecast_error=err,
                    desired_replicas=p.desired_replicas, migration_mibps=p.migration_mibps,
                    actions=actions, window_end_s=p.window_end_s,
                    reason=f"{method}: {p.reason}", memory=mem)
