"""A control period: observe the metrics, estimate the models (learned capacity, the
interference effect), decide the plan (the pure policy loop, :mod:`elastore.operator.policyloop`)
and publish what was decided (``status.forecast``, ``observed``, ``model``, ``interference``,
``bandwidth``, the gauges). It changes nothing in the cluster: starting a step is the
runner's (:mod:`elastore.operator.stepping`), carrying it out the store driver's.

A failed observation is no decision: the policy is ``Degraded`` and no plan is made, so a
scale-in never happens on missing data and every scale-out rests on evidence.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from elastore.actuators.ports import MANAGED_LABEL, ClusterPort
from elastore.errors import ElastoreError, MetricsError
from elastore.hubbub import policy as hubbub
from elastore.hubbub.effect import InterferenceEffect
from elastore.models import estimate
from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.operator import bandwidth, calibration, controls, plausible, policyloop
from elastore.operator.conditions import condition, iso
from elastore.operator.metrics import MetricsSource, Snapshot
from elastore.operator.policyapi import PolicyStore
from elastore.operator.spec import PolicySpec
from elastore.operator.telemetry import OperatorMetrics
from elastore.operator.tick import Tick
from elastore.planner.types import Operation
from elastore.stores import operation

log = logging.getLogger("elastore.operator")
RETRY_S = 30.0  # after a failed observation, at most this long until the next try


class Seams(Protocol):
    """What a period reads through: the runner's own, as it is at each period (a test or
    the simulator may swap one between ticks)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def policies(self) -> PolicyStore: ...
    @property
    def kube(self) -> ClusterPort: ...
    @property
    def models(self) -> Callable[[PolicySpec], ModelSet]: ...
    @property
    def source(self) -> Callable[[PolicySpec, str], MetricsSource]: ...
    @property
    def telemetry(self) -> OperatorMetrics | None: ...


def exec_refused(t: Tick) -> str | None:
    """Why nothing may run in the target's pods (None: it may): Enforce's guard refused the
    target, or, in any mode, it did not opt in or something else controls it."""
    if t.blocked is not None:
        return t.blocked[1]
    sts = t.sts
    if sts is None:
        return "the target was not read"
    if not sts.managed:
        return f"the target is not labelled {MANAGED_LABEL}=true"
    if sts.owner is not None:
        return f"the target is controlled by {sts.owner}"
    return None


@dataclass
class ControlPeriod:
    """One policy's control periods; remembers between them only caches (the learner's
    prior, the models the planner reads) and the last SLO-risk judgement."""

    s: Seams
    #: whether the size there is misses the SLO at the last period's forecast (None: not
    #: judged yet, or the model could not say)
    slo_risk: bool | None = None
    _warned: set[str] = field(default_factory=set, init=False, repr=False)
    #: (capacity model, index source) -> the learner's prior; (models, effect) -> the
    #: models the planner reads: rebuilt only when the model or the learned effect changed
    _priors: dict[tuple[int, str], tuple[Any, Any]] = field(default_factory=dict, init=False,
                                                           repr=False)
    _planning: tuple[Any, Any, ModelSet] | None = field(default=None, init=False, repr=False)
    _cal_prior: tuple[Any, Any, Any] | None = field(default=None, init=False, repr=False)

    def run(self, t: Tick) -> tuple[float, tuple[str, str]] | None:
        """Decide when a period is due. A failed observation degrades the policy: no plan,
        so a scale-in on missing data never happens and every scale-out rests on evidence."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        t.memory = policyloop.memory_from_status(t.status)
        last = t.status.get("lastDecision") or {}
        t.evidence = bool(last.get("ok"))
        # after a failed observation every tick retries (they come RETRY_S apart): a policy
        # is never called healthy on the strength of an observation that failed
        due = last.get("epoch") is None or not t.evidence or \
            t.now - float(last["epoch"]) >= spec.control_period_s - 0.5 or \
            last.get("generation") != t.gen or self._stale_scale_in(t, float(last["epoch"]))
        if not due:
            return None
        t.period = True
        t0 = time.monotonic()
        try:
            decision, snap, inter = self._decide(spec, sts.spec_replicas, t.memory, t.now,
                                                 t.operation, t.status, t)
        except (MetricsError, ElastoreError) as exc:
            return self._no_decision(t, exc)
        t.memory = decision.memory
        t.evidence = True
        self._fallback(t, ok=True)
        t.out.update(self._decision_status(decision, snap, t.gen))
        self._interference_said(t, inter)
        self._model_said(t)
        t.out["observed"]["readyReplicas"] = sts.ready_replicas
        t.cond("Forecasting", True, "Forecast",
               f"{decision.method}: {decision.forecast_rps:,.0f} req/s at "
               f"{iso(decision.forecast_for_s)}")
        self.s.policies.event(t.body, "Decision", decision.reason[:1000])
        self.slo_risk = self._risk(t, decision, snap)
        if self.s.telemetry is not None:
            self._record(decision)
            self.s.telemetry.decision_seconds.labels(self.s.namespace, self.s.name).observe(
                time.monotonic() - t0)
            self._backtest_gauges(t, decision, snap)
        t.stream_mibps = self._bandwidth(t, decision, snap)
        return None

    @staticmethod
    def _stale_scale_in(t: Tick, decided_s: float) -> bool:
        """A scale-in of the plan falls due on a decision older than ``staleAfter``: decide
        again now, on fresh metrics (the scale-in then rests on them, or on nothing)."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        if t.now - decided_s <= spec.stale_after_s:
            return False
        return policyloop.target_at(t.memory.actions, t.now, sts.spec_replicas) < \
            sts.spec_replicas

    def _no_decision(self, t: Tick, exc: ElastoreError) -> tuple[float, tuple[str, str]]:
        assert t.spec is not None
        reason = exc.reason if isinstance(exc, MetricsError) else "DecisionFailed"
        t.out["lastDecision"] = {"epoch": t.now, "at": iso(t.now), "ok": False,
                                 "generation": t.gen, "reason": str(exc)[:500]}
        t.out["memory"] = policyloop.memory_to_status(t.memory.forgetting_the_forecast())
        t.out["nextAction"] = None
        t.cond("Forecasting", False, reason, str(exc))
        self._fallback(t, ok=False)
        was = condition(t.status.get("conditions") or [], "Degraded") or {}
        if was.get("reason") != reason:  # an Event when the reason is new
            self.s.policies.event(t.body, reason, f"no decision: {exc}", warning=True)
        return min(t.spec.control_period_s, RETRY_S), (reason, str(exc))

    def _fallback(self, t: Tick, ok: bool) -> None:
        """Count the observation toward ``spec.fallback``; ``status.fallback``, the
        ``Fallback`` condition, Events when it comes into force and when it ends."""
        spec = t.spec
        assert spec is not None
        prev = t.fallback
        plan = tuple(policyloop.action_to_status(a) for a in t.memory.actions)
        t.fallback = controls.observed(prev, ok, t.now, plan)
        n, need, how = t.fallback.failures, spec.fallback_threshold, spec.fallback_behavior
        if ok:
            if prev.failures:
                t.out["fallback"] = None
                if prev.active(need):
                    self.s.policies.event(t.body, "FallbackEnded", "an observation succeeded "
                                                                 "after " f"{prev.failures} "
                                                                 "failed: following the "
                                                                 "plan again")
            t.cond("Fallback", False, "Healthy", "the last observation succeeded")
            return
        t.out["fallback"] = t.fallback.to_status(need, how)
        if not t.fallback.active(need):
            t.cond("Fallback", False, "Counting", f"{n} of {need} consecutive failed "
                                                  "observations (spec.fallback."
                                                  "failureThreshold)")
            return
        msg = (f"{n} consecutive failed observations (failureThreshold {need}): "
               + ("nothing starts (behavior freeze)" if how == "freeze" else
                  "only the scale-outs the last plan made on evidence wants may start "
                  "(behavior currentReplicasIfHigher); never a scale-in"))
        t.cond("Fallback", True, f"Fallback{how[0].upper()}{how[1:]}", msg)
        if not prev.active(need):
            self.s.policies.event(t.body, "FallbackActive", msg, warning=True)

    def _decide(self, spec: PolicySpec, replicas: int, memory: policyloop.Memory, now: float,
                op: operation.OperationState | None = None,
                status: dict[str, Any] | None = None, t: Tick | None = None
                ) -> tuple[policyloop.Decision, Snapshot, dict[str, Any]]:
        """Observe, learn, plan. Returns the decision, the snapshot and
        ``status.interference`` (and, with ``t``, sets ``status.model`` and the learned
        model's scale-in gate on it)."""
        source = self.s.source(spec, self.s.namespace)
        snap = source.snapshot(now, policyloop.history_steps(spec.prediction_method,
                                                          policyloop.path_steps(spec),
                                                          spec.calibration_steps),
                               spec.prediction_step_s)
        if not math.isfinite(snap.data_bytes) and t is not None and t.driver is not None:
            # a store whose exporters lack the bytes: read from the store (never 0), by a
            # command in its pods; only in a target that opted in (issue 35: a Recommend
            # policy on any StatefulSet made the operator run du in all its pods)
            shut = exec_refused(t)
            if shut is not None:
                raise MetricsError("MetricsMissing", f"dataBytes: no such metric, and {shut}: "
                                                     "the operator runs nothing in the "
                                                     "target's pods until it opts in")
            held = t.driver.data_bytes(self.s.kube, self.s.namespace, spec, replicas)
            if held is not None:
                snap = replace(snap, data_bytes=held)
        sizes = t.sts if t is not None else None
        snap, dropped = plausible.bounded(
            snap, max(replicas, sizes.replicas) if sizes is not None else replicas,
            sizes.volume_bytes if sizes is not None else None)
        if dropped and t is not None:
            self.s.policies.event(t.body, "MetricsImplausible", f"{dropped} sample(s) of the "
                                  f"load history above {plausible.MAX_RPS:.0e} requests/s "
                                  "(or below 0) read as gaps, not as load", warning=True)
        reading = hubbub.read(spec, lambda: source.scalar("interference", now))
        models = self.s.models(spec)
        learner = hubbub.learner_from_status(status)
        # a scale-out cleaning up has its node serving: the plan starts from its size now
        # (a further scale-out supersedes the cleanup; a scale-in waits for it, in the runner)
        running = None if op is None or op.phase == "CleaningUp" else Operation(
            op.from_replicas, op.to_replicas, op.started_s, max(op.expected_end_s, now))
        if t is not None:
            models = self._calibrated(t, spec, source, models, reading.index,
                                      running is not None)
        latency, observation, effect = None, "not learned: no interference index", None
        if reading.index is not None:
            start = self._prior(models, reading.source)
            try:
                latency = source.scalar("latencyMs", now)
            except MetricsError as exc:  # skipped and counted by the learner, never 0
                log.debug("%s/%s: no latency this period: %s", self.s.namespace, self.s.name, exc)
            # the load is spread over the nodes that report it (fewer than the replicas:
            # a partial scrape, whose missing load is not in the sum either)
            serving = min(snap.nodes, replicas) if snap.nodes else replicas
            observation = hubbub.learn(learner, models.capacity, snap, serving,
                                       reading.index, latency, running is not None, start)
            effect = learner.effect(start)
            models = self._planning_models(models, effect)
        decision = policyloop.decide(spec, snap, replicas, models, memory, running,
                                  interference=reading.index or 0.0)
        if t is not None:
            t.planned_with, t.interference_index = models, reading.index or 0.0
        return decision, snap, hubbub.to_status(spec, reading, learner, effect, latency,
                                                observation, now)

    def _calibrated(self, t: Tick, spec: PolicySpec, source: MetricsSource,
                    models: ModelSet, index: float | None, operating: bool) -> ModelSet:
        """The models to plan with: ``models`` as they are, or (``spec.capacityModel.learn``)
        with the capacity model calibrated online from this period's per-node
        observations. The learner's state is read from and written back to the policy's
        ConfigMap; ``status.model`` says where it stands (:meth:`_model_said`)."""
        if not spec.learn:
            t.model_status = calibration.to_status(spec, None, None, "not learning "
                                                   "(spec.capacityModel.learn is false)",
                                                   None, t.now)
            return models
        name = calibration.configmap_name(self.s.name)
        uid = str(t.body["metadata"].get("uid", ""))
        text, owners = self.s.policies.read_model(self.s.namespace, name, calibration.KEY)
        if owners and uid not in owners:
            raise ElastoreError(f"ConfigMap {self.s.namespace}/{name} exists and is not owned "
                                f"by this policy (owners {owners}): the learned model is "
                                "not written over someone else's; rename or delete it")
        try:
            state = calibration.learner_from_document(text, f"ConfigMap {name}")
            notes = []
        except ElastoreError as exc:  # unreadable: start over, and say so
            state, notes = None, [f"the stored learned model was unreadable and is "
                                  f"replaced: {exc}"]
            self.s.policies.event(t.body, "LearnedModelReset", notes[0], warning=True)
        learner_ = calibration.learner(spec, state)
        prior = self._calibration_prior(spec, models)
        try:
            nodes = source.per_node(t.now)
        except MetricsError as exc:
            if exc.reason == "PrometheusUnreachable":
                raise
            nodes, notes = {}, [*notes, f"no per-node metrics: {exc}"]
        x, y, said = calibration.observations(nodes, index, operating)
        est = estimate.calibrated(models, learner_, prior, x, y, spec.headroom)
        cal = t.calibration = est.calibration
        try:
            self.s.policies.write_model(t.body, name, calibration.KEY, calibration.document(
                cal.learned, learner_, cal, models, self.s.name, t.now))
            where: str | None = name
        except ElastoreError as exc:
            where = None
            notes.append(f"not saved: {exc}")
            self.s.policies.event(t.body, "LearnedModelNotSaved", str(exc), warning=True)
        t.model_status = calibration.to_status(spec, cal, learner_, "; ".join([said, *notes]),
                                               where, t.now)
        return est.models

    def _calibration_prior(self, spec: PolicySpec, models: ModelSet) -> CapacityModel:
        key = (id(models.capacity), spec.prior_scale)
        hit = self._cal_prior
        if hit is None or hit[0] != key or hit[1] is not models.capacity:
            hit = (key, models.capacity, calibration.prior(spec, models))
            self._cal_prior = hit
        return hit[2]

    def _model_said(self, t: Tick) -> None:
        """``status.model``; an Event when the learned model becomes confident (or stops
        being)."""
        if t.model_status is None:
            return
        t.out["model"] = t.model_status
        prev = t.status.get("model")
        was = prev.get("scaleInAllowed") if isinstance(prev, dict) else None
        now = t.model_status.get("scaleInAllowed")
        if now is not None and was is not None and now != was:
            self.s.policies.event(
                t.body, "ModelConfident" if now else "ModelLearning",
                f"learned capacity {t.model_status['capacityRps']:.1f} req/s per node, "
                f"confidence {t.model_status['confidence']:.2f}: "
                + ("scale-in allowed" if now else "only scale-out until it is confident again"),
                warning=not now)

    def _prior(self, models: ModelSet, source: str) -> InterferenceEffect:
        key = (id(models.capacity), source)
        hit = self._priors.get(key)
        if hit is None or hit[0] is not models.capacity:
            if len(self._priors) > 8:
                self._priors.clear()
            hit = (models.capacity, hubbub.prior(models.capacity, source))
            self._priors[key] = hit
        return hit[1]

    def _planning_models(self, models: ModelSet, effect: InterferenceEffect) -> ModelSet:
        hit = self._planning
        if hit is None or hit[0] is not models or hit[1] != effect:
            hit = (models, effect, hubbub.planning_models(models, effect))
            self._planning = hit
        return hit[2]

    def _interference_said(self, t: Tick, inter: dict[str, Any]) -> None:
        """``status.interference``; an Event when the index's source changes (a policy that
        goes blind says so), and the metrics."""
        t.out["interference"] = inter
        prev = t.status.get("interference")
        was: dict[str, Any] = prev if isinstance(prev, dict) else {}
        source = inter["source"]
        if was.get("source") != source or was.get("mode") != inter["mode"]:
            if source == "none":  # a Warning when an index it had is lost
                self.s.policies.event(t.body, "InterferenceBlind", inter["reason"],
                                    warning=was.get("source") in ("agent", "query")
                                    and inter["mode"] == "Auto")
            else:
                self.s.policies.event(t.body, "InterferenceAware",
                                    f"planning with the interference index: {inter['reason']}")
        tm = self.s.telemetry
        if tm is None:
            return
        ns, name = self.s.namespace, self.s.name
        tm.interference_blind.labels(ns, name).set(1 if source == "none" else 0)
        tm.interference_factor.labels(ns, name).set(inter["factor"])
        tm.interference_observations.labels(ns, name).set(inter["learned"]["observations"])
        if inter["index"] is None:
            tm.forget_interference_index(ns, name)  # absent, never 0
        else:
            tm.interference_index.labels(ns, name).set(inter["index"])

    def _decision_status(self, d: policyloop.Decision, snap: Snapshot, gen: int
                         ) -> dict[str, Any]:
        nxt = policyloop.next_action(d.actions, d.now_s)
        due = [a for a in d.actions if a.at_s <= d.now_s]
        act = nxt or (due[-1] if due else None)
        return {
            "forecast": {"requestsPerSecond": round(d.forecast_rps, 3),
                         "at": iso(d.forecast_for_s), "method": d.method,
                         "display": f"{d.forecast_rps:,.0f} req/s"},
            "observed": {"requestsPerSecond": round(snap.load_rps, 3),
                         "readRatio": round(snap.read_ratio, 4),
                         "dataBytes": snap.data_bytes,
                         "migrationMiBps": snap.migration_mibps,
                         "nodes": snap.nodes},
            "forecastError": None if d.forecast_error is None else round(d.forecast_error, 4),
            "desiredReplicas": d.desired_replicas,
            "nextAction": None if act is None else {
                "replicas": act.replicas, "at": iso(act.at_s), "reason": act.reason},
            "recommendedMiBps": round(d.migration_mibps, 3),
            "lastDecision": {"epoch": d.now_s, "at": iso(d.now_s), "ok": True,
                             "generation": gen, "reason": d.reason[:2000]},
            "memory": policyloop.memory_to_status(d.memory),
        }

    def _backtest_gauges(self, t: Tick, d: policyloop.Decision, snap: Snapshot) -> None:
        """``elastore_would_scale`` and ``elastore_slo_at_risk``: what Enforce would do now
        and whether the size there is would miss the SLO at the forecast (both modes)."""
        tm, sts, spec = self.s.telemetry, t.sts, t.spec
        assert tm is not None and sts is not None and spec is not None
        n = sts.spec_replicas
        tm.would_scale.labels(self.s.namespace, self.s.name).set(
            policyloop.would_scale(d.actions, t.now, n))
        if self.slo_risk is None:  # a model that fits no load: said, not guessed
            with contextlib.suppress(KeyError):
                tm.slo_at_risk.remove(self.s.namespace, self.s.name)
            return
        tm.slo_at_risk.labels(self.s.namespace, self.s.name).set(1 if self.slo_risk else 0)

    def _risk(self, t: Tick, d: policyloop.Decision, snap: Snapshot) -> bool | None:
        """Whether the size there is would miss the SLO at this period's forecast; None
        when the model cannot say."""
        sts, spec = t.sts, t.spec
        assert sts is not None and spec is not None
        try:
            return policyloop.slo_at_risk(t.planned_with or self.s.models(spec), d.forecast_rps,
                                       snap.read_ratio, sts.spec_replicas,
                                       t.interference_index)
        except ElastoreError as exc:
            log.warning("%s/%s: SLO risk not judged: %s", self.s.namespace, self.s.name, exc)
            return None

    def _record(self, d: policyloop.Decision) -> None:
        tm = self.s.telemetry
        assert tm is not None
        tm.forecast.labels(self.s.namespace, self.s.name).set(d.forecast_rps)
        if d.forecast_error is not None:
            tm.forecast_error.labels(self.s.namespace, self.s.name).set(d.forecast_error)
        tm.desired.labels(self.s.namespace, self.s.name).set(d.desired_replicas)
        tm.migration.labels(self.s.namespace, self.s.name).set(d.migration_mibps)

    def _bandwidth(self, t: Tick, d: policyloop.Decision, snap: Snapshot) -> float:
        """BwMan's split of each node's link for this period (``status.bandwidth``, in both
        modes: the node agent applies it), and the stream throttle to set: the split's,
        else the plan's rate within the policy's bounds."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        plain = min(max(d.migration_mibps, spec.min_migration_mibps), spec.max_migration_mibps)
        if spec.node_mbit is None or t.blocked is not None:
            # no link total, or Enforce's guard refused the target (not opted in, owned or
            # scaled by another): nothing for the agent to shape (issue 35, finding 1)
            if t.status.get("bandwidth") is not None:
                t.out["bandwidth"] = None
            return plain
        models = self.s.models(spec)
        why = bandwidth.unavailable(spec, models)
        if why is not None:
            t.out["bandwidth"] = None
            if "bandwidth" not in self._warned:  # once per process: the Decision says it too
                self._warned.add("bandwidth")
                self.s.policies.event(t.body, "NoBandwidthModel", why, warning=True)
            return plain
        self._warned.discard("bandwidth")
        try:
            split = bandwidth.node_split(spec, d, sts.spec_replicas, snap.read_ratio, models)
        except ElastoreError as exc:  # a model that cannot split: said, never a guess
            t.out["bandwidth"] = None
            self.s.policies.event(t.body, "BandwidthSplitFailed", str(exc), warning=True)
            return plain
        t.out["bandwidth"] = bandwidth.to_status(split, t.pods())
        return split.stream_mibps
