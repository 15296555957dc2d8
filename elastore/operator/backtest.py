"""``elastore operator backtest``: replay a Prometheus range through the policy loop and say
what Enforce would have done, period by period (issue 22).

At each control period from ``--from`` to ``--to`` the loop observes what Prometheus held at
that moment (the same queries, evaluated at that time), forecasts and plans with the memory
of the periods before (the forecast it made for now, the stabilization window, the plan's
actions), exactly as the operator does, through the operator's own code: the snapshot's
plausibility bounds (:mod:`elastore.operator.plausible`) and, when the policy learns its
capacity model (``spec.capacityModel.learn``, the default without a ``configMapRef``), the
same prior (the model x ``priorScale``: 0.5 for the built-in lab profile,
:func:`elastore.operator.calibration.prior`) and the same online learning from each
period's per-node readings (:func:`~elastore.operator.calibration.observations`,
:func:`elastore.models.estimate.calibrated`). Each row says the load and the size there
were, the forecast, where the plan was heading, what Enforce would have changed then
(``wouldScale``: +1 a node out, -1 a node in, 0 nothing; with ``held`` when Enforce would
hold that scale-in while the learned model is not confident) and whether the size there
was would have missed the SLO at the forecast load (``sloAtRisk``). A period whose metrics
were missing, or on which the model fits no load under the SLO (``DecisionFailed``), is a
row with the reason and no decision (``wouldScale`` null, never a 0), as in the operator.

What it does not replay: the size the cluster would have had if Enforce had acted (the
rows use the size Prometheus saw: the nodes serving requests, or ``--replicas``), a learned
model the policy kept in its ConfigMap (the learning starts from the prior at ``--from``,
as a new policy's does), whether a node step was under way (every period's per-node
readings are learned from; the operator skips those of a period with a step running), a
hot-partition sample (the load skew is replayed from each pod's load: the observed imbalance,
not a single-token ring's model) and the interference index (blind). The header says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from elastore.errors import ElastoreError, MetricsError
from elastore.models import estimate
from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.models.online import CapacityLearner
from elastore.operator import calibration, plausible, policyloop, skew
from elastore.operator.conditions import iso
from elastore.operator.metrics import MetricsSource, NodeReading
from elastore.operator.spec import GROUP, KIND, VERSION, PolicySpec, SpecError

#: at most this many periods in one backtest (a week of 1-minute periods)
MAX_PERIODS = 7 * 24 * 60
#: the top-level fields of an ElasticPolicy object
OBJECT_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")


@dataclass(frozen=True)
class Row:
    at_s: float
    ok: bool
    replicas: int | None  # the size there was (nodes reporting, or --replicas)
    load_rps: float | None
    forecast_rps: float | None
    desired_replicas: int | None
    #: replicas Enforce would have changed then: + out, - in, 0 none; None: no decision
    would_scale: int | None
    slo_at_risk: bool | None
    reason: str
    #: why Enforce would hold this row's scale-in (the learned model not yet confident)
    held: str | None = None
    #: learning: the capacity per node the plan used (requests/s, at the learner's
    #: reference read ratio: ``status.model.planningCapacityRps``)
    capacity_rps: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["at"] = iso(self.at_s)
        return d


def policy_spec(doc: Any, where: str) -> tuple[dict[str, Any], str | None]:
    """The spec of a policy file (an ElasticPolicy object as for ``kubectl apply``, or its
    spec alone) and the object's namespace. An object's fields are checked as the API server
    does (an unknown top-level field, another kind or API version is an error; the spec's
    own fields: :func:`elastore.operator.spec.parse` with ``strict``)."""
    if not isinstance(doc, dict):
        raise ElastoreError("not an ElasticPolicy or a spec", where)
    if "kind" not in doc and "spec" not in doc:
        return doc, None  # a spec alone
    if doc.get("kind", KIND) != KIND:
        raise ElastoreError(f"a {doc.get('kind')}, not an {KIND}", where)
    api = f"{GROUP}/{VERSION}"
    if doc.get("apiVersion", api) != api:
        raise ElastoreError(f"apiVersion {doc.get('apiVersion')!r}: this elastore serves "
                            f"{api}", where)
    unknown = [k for k in doc if k not in OBJECT_FIELDS]
    if unknown:
        raise SpecError(", ".join(f'unknown field "{k}"' for k in unknown) + " (an "
                        f"{KIND} has {', '.join(OBJECT_FIELDS)})", where)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise ElastoreError("the object has no spec", where)
    meta = doc.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return spec, ns if isinstance(ns, str) and ns else None


def periods(spec: PolicySpec, start_s: float, end_s: float) -> list[float]:
    if not end_s > start_s:
        raise ValueError(f"--to ({iso(end_s)}) must be after --from ({iso(start_s)})")
    n = int((end_s - start_s) // spec.control_period_s) + 1
    if n > MAX_PERIODS:
        raise ValueError(f"{n} control periods of {spec.control_period_s:g} s from "
                         f"{iso(start_s)} to {iso(end_s)}: at most {MAX_PERIODS}; shorten the "
                         "range")
    return [start_s + k * spec.control_period_s for k in range(n)]


def skew_view(spec: PolicySpec, per_node: dict[str, NodeReading] | None, replicas: int,
              read_ratio: float, load_rps: float) -> skew.SkewView | None:
    """The per-pod view the operator hands its planner (``spec.skew``; None with mode Off),
    from this period's per-node readings: the serving pods (a request rate above 0), and as
    many unread ones as the size has more (a partial view: sized for the mean node, as the
    operator sizes a period whose pod went unread). No hot-partition sample is replayed (the
    backtest reads no ring), so a single-token ring's skew model is not: the observed
    imbalance is, at every size, as the operator plans a ring it has not sampled."""
    if spec.skew.mode == "Off":
        return None
    busy = sorted(p for p, r in (per_node or {}).items() if (r.load_rps or 0.0) > 0)
    pods = busy + [f"(unread {k})" for k in range(len(busy), replicas)]
    return skew.build(spec.skew, skew.pod_loads(pods, per_node or {}),
                      spec.target.replication_factor, read_ratio, load_rps, None)


def serving(per_node: dict[str, NodeReading] | None, reporting: int) -> int:
    """The size there was, as Prometheus can tell: the nodes serving clients (a per-node
    request rate above 0; an exporter may keep flat series for pods that serve nothing, or
    for a pod gone within the staleness window), else the nodes reporting (``per_node``
    None: the per-node queries had nothing)."""
    busy = sum(1 for r in (per_node or {}).values() if (r.load_rps or 0.0) > 0)
    return busy or reporting


@dataclass
class Learning:
    """``spec.capacityModel.learn`` through the functions the operator's control period
    calls (``ControlPeriod._calibrated`` in :mod:`elastore.operator.period`): the policy's
    prior, a new learner with the policy's settings, each period's per-node observations
    into it, and the plan made with its calibration. tests/test_backtest.py holds the two
    to the same plans, period by period."""

    spec: PolicySpec
    models: ModelSet
    prior: CapacityModel
    learner: CapacityLearner

    @classmethod
    def start(cls, spec: PolicySpec, models: ModelSet) -> Learning:
        return cls(spec, models, calibration.prior(spec, models),
                   calibration.learner(spec, None))

    def period(self, per_node: dict[str, NodeReading] | None) -> estimate.Calibrated:
        x, y, _ = calibration.observations(per_node or {}, None, False)
        return estimate.calibrated(self.models, self.learner, self.prior, x, y,
                                   self.spec.headroom)


def replay(spec: PolicySpec, source: MetricsSource, models: ModelSet, start_s: float,
           end_s: float, replicas: int | None = None,
           progress: Callable[[int, int, Row], None] | None = None) -> list[Row]:
    """One row per control period of ``[start_s, end_s]``."""
    times = periods(spec, start_s, end_s)
    steps = policyloop.history_steps(spec.prediction_method, policyloop.path_steps(spec),
                                     spec.calibration_steps)
    memory = policyloop.Memory()
    warm = policyloop.WarmForecast()  # the forecast kept between periods, as the operator's
    learning = Learning.start(spec, models) if spec.learn else None
    rows: list[Row] = []
    for k, t in enumerate(times):
        try:
            snap = source.snapshot(t, steps, spec.prediction_step_s)
            try:  # once a period, as the operator's (the size and the learning share it)
                per_node: dict[str, NodeReading] | None = source.per_node(t)
            except MetricsError as exc:
                if learning is not None and exc.reason == "PrometheusUnreachable":
                    raise  # the operator's learning makes this period no decision too
                per_node = None
            n = replicas if replicas is not None else serving(per_node, snap.nodes or 0)
            if not n:
                raise MetricsError("MetricsMissing", "no node reported at this time (give "
                                                     "--replicas to replay a known size)")
            snap, _ = plausible.bounded(snap, n, None)
            planned, cal = models, None
            if learning is not None:
                est = learning.period(per_node)
                planned, cal = est.models, est.calibration
            seen = skew_view(spec, per_node, n, snap.read_ratio, snap.load_rps)
            d = policyloop.decide(spec, snap, n, planned, memory, warm=warm, skew=seen)
            memory = d.memory
            risk = policyloop.slo_at_risk(planned, d.forecast_rps, snap.read_ratio, n)
            would = policyloop.would_scale(d.actions, t, n)
            held = calibration.gate(cal) if would < 0 and cal is not None else None
            capacity = None if cal is None else round(cal.planning_capacity_rps, 3)
            row = Row(t, True, n, round(snap.load_rps, 3), round(d.forecast_rps, 3),
                      d.desired_replicas, would, risk,
                      d.reason.splitlines()[0][:300] if d.reason else "", held, capacity)
        except ElastoreError as exc:  # as the operator: this period has no decision
            # (metrics missing, or a model that fits no load under the SLO at this
            # period's mix, as a write-only burst does); the replay goes on
            memory = memory.forgetting_the_forecast()
            reason = exc.reason if isinstance(exc, MetricsError) else "DecisionFailed"
            row = Row(t, False, replicas, None, None, None, None, None,
                      f"{reason}: {exc}"[:300])
        rows.append(row)
        if progress is not None:
            progress(k + 1, len(times), row)
    return rows


def summary(rows: list[Row]) -> dict[str, Any]:
    good = [r for r in rows if r.ok]
    return {"periods": len(rows), "decided": len(good), "failed": len(rows) - len(good),
            "scaleOuts": sum(1 for r in good if (r.would_scale or 0) > 0),
            "scaleIns": sum(1 for r in good if (r.would_scale or 0) < 0),
            "scaleInsHeld": sum(1 for r in good if (r.would_scale or 0) < 0 and r.held),
            "sloAtRisk": sum(1 for r in good if r.slo_at_risk),
            "meanLoadRps": (round(math.fsum(r.load_rps or 0.0 for r in good) / len(good), 3)
                            if good else None)}


def nothing_decided(rows: list[Row]) -> str | None:
    """Why the backtest says nothing (None: some period was decided): no period had a
    decision, and the reasons the first and the last gave."""
    if any(r.ok for r in rows):
        return None
    if not rows:
        return "no control period in the range"
    first, last = rows[0].reason, rows[-1].reason
    said = f"the first: {first}" if first == last else f"the first: {first}; the last: {last}"
    return (f"no period could be decided: all {len(rows)} without a decision ({said}); "
            "check the range, --prometheus and the policy's queries")


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width table (what the command prints)."""
    out = [f"{'at':20s} {'ok':>3s} {'replicas':>8s} {'load req/s':>11s} {'forecast':>10s} "
           f"{'desired':>7s} {'would':>6s} {'risk':>5s}  reason"]
    for r in rows:
        def num(v: float | None, w: int) -> str:
            return f"{v:>{w},.1f}" if v is not None else f"{'-':>{w}s}"
        would = f"{r.would_scale:>+6d}" if r.would_scale is not None else f"{'-':>6s}"
        reason = r.reason if r.ok else f"no decision: {r.reason}"
        if r.held:
            reason = f"Enforce would hold this scale-in: {r.held}"
        out.append(f"{iso(r.at_s):20s} {'yes' if r.ok else 'no':>3s} "
                   f"{r.replicas if r.replicas is not None else '-':>8} "
                   f"{num(r.load_rps, 11)} {num(r.forecast_rps, 10)} "
                   f"{r.desired_replicas if r.desired_replicas is not None else '-':>7} "
                   f"{would} "
                   f"{'-' if r.slo_at_risk is None else 'yes' if r.slo_at_risk else 'no':>5s}"
                   f"  {reason[:100]}")
    return "\n".join(out)
