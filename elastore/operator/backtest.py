"""``elastore operator backtest``: replay a Prometheus range through the policy loop and say
what Enforce would have done, period by period (issue 22).

At each control period from ``--from`` to ``--to`` the loop observes what Prometheus held at
that moment (the same queries, evaluated at that time), forecasts and plans with the memory
of the periods before (the forecast it made for now, the stabilization window, the plan's
actions), exactly as the operator does. Each row says the load and the size there were,
the forecast, where the plan was heading, what Enforce would have changed then
(``wouldScale``: +1 a node out, -1 a node in, 0 nothing) and whether the size there was
would have missed the SLO at the forecast load (``sloAtRisk``). A period whose metrics
were missing, or on which the model fits no load under the SLO (``DecisionFailed``), is a
row with the reason and no decision, as in the operator (never a 0).

What it does not replay: the size the cluster would have had if Enforce had acted (the
rows use the size Prometheus saw: the nodes serving requests, or ``--replicas``), the
capacity model's online learning (it plans with the model given), and the interference
index (blind). The header says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from elastore.errors import ElastoreError, MetricsError
from elastore.models.bundle import ModelSet
from elastore.operator import policyloop
from elastore.operator.conditions import iso
from elastore.operator.metrics import MetricsSource
from elastore.operator.spec import PolicySpec

#: at most this many periods in one backtest (a week of 1-minute periods)
MAX_PERIODS = 7 * 24 * 60


@dataclass(frozen=True)
class Row:
    at_s: float
    ok: bool
    replicas: int | None  # the size there was (nodes reporting, or --replicas)
    load_rps: float | None
    forecast_rps: float | None
    desired_replicas: int | None
    would_scale: int  # replicas Enforce would have changed then: + out, - in, 0 none
    slo_at_risk: bool | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["at"] = iso(self.at_s)
        return d


def periods(spec: PolicySpec, start_s: float, end_s: float) -> list[float]:
    if not end_s > start_s:
        raise ValueError(f"--to ({iso(end_s)}) must be after --from ({iso(start_s)})")
    n = int((end_s - start_s) // spec.control_period_s) + 1
    if n > MAX_PERIODS:
        raise ValueError(f"{n} control periods of {spec.control_period_s:g} s from "
                         f"{iso(start_s)} to {iso(end_s)}: at most {MAX_PERIODS}; shorten the "
                         "range")
    return [start_s + k * spec.control_period_s for k in range(n)]


def serving(source: MetricsSource, at_s: float, reporting: int) -> int:
    """The size there was at ``at_s``, as Prometheus can tell: the nodes serving clients
    (a per-node request rate above 0; an exporter may keep flat series for pods that serve
    nothing, or for a pod gone within the staleness window), else the nodes reporting."""
    try:
        per = source.per_node(at_s)
    except MetricsError:
        return reporting
    busy = sum(1 for r in per.values() if (r.load_rps or 0.0) > 0)
    return busy or reporting


def replay(spec: PolicySpec, source: MetricsSource, models: ModelSet, start_s: float,
           end_s: float, replicas: int | None = None,
           progress: Callable[[int, int, Row], None] | None = None) -> list[Row]:
    """One row per control period of ``[start_s, end_s]``."""
    times = periods(spec, start_s, end_s)
    steps = policyloop.history_steps(spec.prediction_method, policyloop.path_steps(spec),
                                  spec.calibration_steps)
    memory = policyloop.Memory()
    warm = policyloop.WarmForecast()  # the forecast kept between periods, as the operator's
    rows: list[Row] = []
    for k, t in enumerate(times):
        try:
            snap = source.snapshot(t, steps, spec.prediction_step_s)
            n = replicas if replicas is not None else serving(source, t, snap.nodes or 0)
            if not n:
                raise MetricsError("MetricsMissing", "no node reported at this time (give "
                                                     "--replicas to replay a known size)")
            d = policyloop.decide(spec, snap, n, models, memory, warm=warm)
            memory = d.memory
            risk = policyloop.slo_at_risk(models, d.forecast_rps, snap.read_ratio, n)
            row = Row(t, True, n, round(snap.load_rps, 3), round(d.forecast_rps, 3),
                      d.desired_replicas, policyloop.would_scale(d.actions, t, n), risk,
                      d.reason.splitlines()[0][:300] if d.reason else "")
        except ElastoreError as exc:  # as the operator: this period has no decision
            # (metrics missing, or a model that fits no load under the SLO at this
            # period's mix, as a write-only burst does); the replay goes on
            memory = memory.forgetting_the_forecast()
            reason = exc.reason if isinstance(exc, MetricsError) else "DecisionFailed"
            row = Row(t, False, replicas, None, None, None, 0, None,
                      f"{reason}: {exc}"[:300])
        rows.append(row)
        if progress is not None:
            progress(k + 1, len(times), row)
    return rows


def summary(rows: list[Row]) -> dict[str, Any]:
    good = [r for r in rows if r.ok]
    return {"periods": len(rows), "decided": len(good), "failed": len(rows) - len(good),
            "scaleOuts": sum(1 for r in good if r.would_scale > 0),
            "scaleIns": sum(1 for r in good if r.would_scale < 0),
            "sloAtRisk": sum(1 for r in good if r.slo_at_risk),
            "meanLoadRps": (round(math.fsum(r.load_rps or 0.0 for r in good) / len(good), 3)
                            if good else None)}


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width table (what the command prints)."""
    out = [f"{'at':20s} {'ok':>3s} {'replicas':>8s} {'load req/s':>11s} {'forecast':>10s} "
           f"{'desired':>7s} {'would':>6s} {'risk':>5s}  reason"]
    for r in rows:
        def num(v: float | None, w: int) -> str:
            return f"{v:>{w},.1f}" if v is not None else f"{'-':>{w}s}"
        out.append(f"{iso(r.at_s):20s} {'yes' if r.ok else 'no':>3s} "
                   f"{r.replicas if r.replicas is not None else '-':>8} "
                   f"{num(r.load_rps, 11)} {num(r.forecast_rps, 10)} "
                   f"{r.desired_replicas if r.desired_replicas is not None else '-':>7} "
                   f"{r.would_scale:>+6d} "
                   f"{'-' if r.slo_at_risk is None else 'yes' if r.slo_at_risk else 'no':>5s}"
                   f"  {r.reason[:100]}")
    return "\n".join(out)
