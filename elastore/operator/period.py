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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from elastore.actuators.ports import MANAGED_LABEL, ClusterPort
from elastore.errors import ElastoreError, MetricsError
from elastore.hubbub import policy as hubbub
from elastore.hubbub.effect import InterferenceEffect
from elastore.models import estimate
from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.models.storage import StorageView
from elastore.operator import bandwidth, calibration, controls, plausible, policyloop, skew
from elastore.operator.conditions import condition, iso
from elastore.operator.metrics import MetricsSource, NodeReading, Snapshot
from elastore.operator.policyapi import PolicyStore
from elastore.operator.spec import PolicySpec
from elastore.operator.telemetry import OperatorMetrics
from elastore.operator.tick import Tick
from elastore.planner.types import PAYBACK, Operation
from elastore.stores import operation
from elastore.units import GIB

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
    @property
    def nodetools(self) -> tuple[tuple[str, ...], ...]: ...


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
    #: this period's per-node readings (learning and the skew view share one query)
    _nodes: tuple[tuple[int, float], dict[str, NodeReading]] | None = field(
        default=None, init=False, repr=False)
    #: the hot-partition sample kept between periods, and when one was last attempted
    _sampled: skew.SampleClock = field(default_factory=skew.SampleClock, init=False,
                                       repr=False)
    #: the sample's thread, and what it left for the next period to collect
    _sampler: threading.Thread | None = field(default=None, init=False, repr=False)
    _sample_out: skew.HotSample | None = field(default=None, init=False, repr=False)
    #: the skew view of the last period (None: mode Off, or no period yet), for Auto's
    #: rebalancing (:mod:`elastore.operator.rebalancing`)
    last_view: skew.SkewView | None = field(default=None, init=False, repr=False)
    #: the fitted forecast, fed only the steps completed since the last period
    warm: policyloop.WarmForecast = field(default_factory=policyloop.WarmForecast,
                                          init=False, repr=False)

    def resample(self) -> None:
        """The store's ranges changed (a move done): the next period samples again."""
        self._sampled.force = True

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
        if self.s.telemetry is not None and t.evidence and last.get("generation") == t.gen:
            # a period due by the clock (not a retry, not a new generation): how late
            self.s.telemetry.period_lateness.observe(
                max(0.0, t.now - float(last["epoch"]) - spec.control_period_s))
        t.period = True
        t0 = time.monotonic()
        refits = self.warm.refits
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
        self._lookahead_said(t, decision)
        self.slo_risk = self._risk(t, decision, snap)
        if self.s.telemetry is not None:
            self.s.telemetry.forecast_fits.labels(
                "scratch" if self.warm.refits > refits else "kept").inc()
            self._record(decision)
            self.s.telemetry.decision_seconds.labels(self.s.namespace, self.s.name).observe(
                time.monotonic() - t0)
            self._backtest_gauges(t, decision, snap)
        t.stream_mibps = self._bandwidth(t, decision, snap)
        return None

    def _lookahead_said(self, t: Tick, decision: policyloop.Decision) -> None:
        """The ``LookaheadShort`` condition (Horizon): True while ``spec.planner.lookahead``
        is shorter than a one-node scale-in's payback (the planner's own figure), with a
        Warning Event when it turns True: such a plan never scales in for a saving that
        comes after its lookahead (large data, slow streaming)."""
        spec = t.spec
        assert spec is not None
        payback = decision.plan.details.get("payback_s")
        if spec.planner_mode != "Horizon" or not isinstance(payback, float):
            return
        conds = t.status.get("conditions")
        prev = condition(conds if isinstance(conds, list) else [], "LookaheadShort") or {}
        if spec.lookahead_s >= payback:
            t.cond("LookaheadShort", False, "CoversPayback",
                   f"the lookahead {spec.lookahead_s:,.0f} s covers a scale-in's payback "
                   f"({payback:,.0f} s)")
            return
        msg = (f"spec.planner.lookahead is {spec.lookahead_s:,.0f} s, shorter than a one-node "
               f"scale-in's payback ({PAYBACK:g} x its migration: {payback:,.0f} s, a node's "
               f"share of the data at the fastest migration rate, boot included): the plan "
               f"never scales in for a saving past its lookahead; set it to at least "
               f"{math.ceil(payback / 3600)}h")
        t.cond("LookaheadShort", True, "ShorterThanPayback", msg)
        if prev.get("status") != "True":
            self.s.policies.event(t.body, "LookaheadShort", msg, warning=True)

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
        view, said = self._bytes(spec, source, t, replicas, now)
        # the skew as this period sees it: status.skew, the gauges, and the planner's view
        seen = self._skew(t, spec, source, snap, op is not None) if t is not None else None
        # the cleanup under way: the old nodes from the one being cleaned on, of D in all
        left = 0.0
        if op is not None and op.phase == "CleaningUp" and op.from_replicas > 0:
            left = (op.from_replicas - (op.cleanup_ordinal or 0)) / op.from_replicas
        decision = policyloop.decide(spec, snap, replicas, models, memory, running,
                                  interference=reading.index or 0.0, storage=view, skew=seen,
                                  warm=self.warm, cleanup_left=left)
        if t is not None:
            t.planned_with, t.interference_index = models, reading.index or 0.0
            t.out["storage"] = _storage_status(said, view, decision)
            t.out["binding"] = decision.plan.details.get("binding", "load")
        return decision, snap, hubbub.to_status(spec, reading, learner, effect, latency,
                                                observation, now)

    def _bytes(self, spec: PolicySpec, source: MetricsSource, t: Tick | None, replicas: int,
               now: float) -> tuple[StorageView | None, dict[str, Any]]:
        """The bytes for the planner (``spec.storage``): each node's use and volume, from the
        kubelet's volume stats, else the store's figure and the PVCs' sizes. Without them
        the plan is for the load only, and the status says why (never a guessed 0)."""
        sts = t.sts if t is not None else None
        tmpl = sts.pvc_template if sts is not None else None
        try:
            disk = source.disk(now, policyloop.bytes_history_steps(spec),
                               spec.prediction_step_s, tmpl)
        except MetricsError as exc:
            if exc.reason in ("PrometheusUnreachable", "PrometheusUnauthorized"):
                raise
            return None, {"source": "none", "message": f"sized for the load only: {exc}"}
        if sts is not None and spec.target.kind == "StatefulSet":
            # the pods that serve now: a spare's or a removed ordinal's series is not data
            own = {f"{sts.name}-{k}" for k in range(replicas)}
            disk = replace(disk, used_bytes={p: b for p, b in disk.used_bytes.items()
                                             if p in own},
                           capacity_bytes={p: b for p, b in disk.capacity_bytes.items()
                                           if p in own})
            if not disk.used_bytes:
                return None, {"source": disk.source, "message": "sized for the load only: "
                              "no bytes for the serving pods"}
        volume, how = (min(disk.capacity_bytes.values()), "the kubelet's capacity") \
            if disk.capacity_bytes else self._pvc_volume(t, list(disk.used_bytes))
        if volume is None or not volume > 0:
            return None, {"source": disk.source, "message": f"sized for the load only: {how}"}
        cannot = self._cannot_grow(spec, t, replicas) if spec.storage.expand_volumes else None
        if cannot is not None:  # plan with nodes: a volume that cannot grow holds nothing
            spec = replace(spec, storage=replace(spec.storage, expand_volumes=False))
        try:
            view, note = policyloop.storage_view(spec, disk, volume, replicas, now)
        except ElastoreError as exc:
            return None, {"source": disk.source, "message": f"sized for the load only: {exc}"}
        said = [f"volume size from {how}"] + ([note] if note else []) + (
            [f"expandVolumes: planned with nodes, {cannot}"] if cannot else [])
        return view, {"source": disk.source, "message": "; ".join(said)}

    def _per_node(self, source: MetricsSource, now: float) -> dict[str, NodeReading]:
        """The per-node readings at ``now``, queried once a period (the learner and the skew
        view both read them)."""
        key = (id(source), now)
        if self._nodes is not None and self._nodes[0] == key:
            return self._nodes[1]
        got = source.per_node(now)
        self._nodes = (key, got)
        return got

    def _skew(self, t: Tick, spec: PolicySpec, source: MetricsSource, snap: Snapshot,
              operating: bool) -> skew.SkewView | None:
        """``spec.skew`` (:mod:`elastore.operator.skew`): each serving pod's load and the
        imbalance, the hot ranges from the driver's sample when one is due, the advice;
        ``status.skew``, the gauges and an Event when the advice changes. Returns the view
        the planner is handed (None: mode Off)."""
        settings = spec.skew
        tm = self.s.telemetry
        self.last_view = None
        if settings.mode == "Off":
            if t.status.get("skew") is not None:
                t.out["skew"] = None  # removed (a merge patch would keep the old fields)
            if tm is not None:
                tm.forget_skew(self.s.namespace, self.s.name)
            return None
        assert t.driver is not None and t.target is not None
        pods = t.driver.pods(spec, t.target, None)  # the serving pods, not a step's new one
        notes: list[str] = []
        try:
            if not callable(getattr(source, "per_node", None)):  # a source of totals only
                raise MetricsError("MetricsMissing", "this metrics source has no per-pod "
                                                     "readings")
            readings = self._per_node(source, t.now)
        except MetricsError as exc:
            if exc.reason in ("PrometheusUnreachable", "PrometheusUnauthorized"):
                raise
            readings = {}
            notes.append(f"no per-pod metrics: {exc}")
        loads = skew.pod_loads(pods, readings)
        rebalance = (t.status.get("skew") or {}).get("rebalance")
        moving = isinstance(rebalance, dict) and rebalance.get("underWay") is not None
        sample = self._hot_sample(t, spec, pods, operating or moving)
        view = skew.build(settings, loads, spec.target.replication_factor, snap.read_ratio,
                          snap.load_rps, sample,
                          rebalances=settings.mode == "Auto" and spec.enforce and
                          getattr(t.driver, "SPLITS_AT_SCALE_OUT", False))
        try:
            hot = skew.ranges(view)
        except ElastoreError as exc:  # a sample the model refuses: said, never guessed
            hot = []
            notes.append(f"hot ranges not mapped: {exc}")
        facts = skew.facts(view, loads, settings, spec.slo_percentile, sample)
        advisor = t.driver if isinstance(t.driver, skew.SpreadAdvisor) else None
        advice, message = skew.judge(view, settings, facts, advisor, operating)
        if isinstance(t.driver, skew.DeviceNote):
            notes.append(t.driver.skew_note(spec))
        clock = self._sampled
        was = t.status.get("skew")
        attempted = clock.attempted_s
        if attempted is None and isinstance(was, dict) and \
                isinstance(was.get("attemptedEpoch"), int | float):
            attempted = float(was["attemptedEpoch"])  # the last process' attempt, kept
        nxt = None if attempted is None else attempted + settings.sample_interval_s
        status = skew.to_status(settings, spec.enforce, view, loads, hot, advice, message,
                                sample, clock.said, attempted, nxt, "; ".join(notes),
                                t.now, iso, spec.max_replicas,
                                acting=isinstance(t.driver, skew.SkewActor))
        before = was.get("advice") if isinstance(was, dict) else None
        if skew.advice_changed(before, status["advice"]):
            if status["advice"]:
                self.s.policies.event(t.body, "SkewAdvice", "; ".join(status["advice"])[:1000])
            elif before:
                self.s.policies.event(t.body, "SkewAdviceCleared", message[:1000])
        if isinstance(was, dict):  # Auto's record and hysteresis outlive the period's view
            for key in ("rebalance", "hysteresis", "rebalancing"):
                if was.get(key) is not None:
                    status[key] = was[key]
        t.out["skew"] = status
        self.last_view = view
        if tm is not None:
            ns, name = self.s.namespace, self.s.name
            tm.set_node_loads(ns, name, {p.name: p.load_rps for p in loads
                                         if p.load_rps is not None})
            tm.set_skew_imbalance(ns, name, None if view.partial else view.imbalance)
        return view

    def _hot_sample(self, t: Tick, spec: PolicySpec, pods: list[str], operating: bool
                    ) -> skew.HotSample | None:
        """The driver's hot-partition sample (:class:`skew.HotSampler`), taken in a thread of
        its own so that no period (and no step due in it) waits for its commands: started
        when one is due (``spec.skew.sampleInterval`` since the last attempt, this process'
        or its predecessor's; or the serving pods changed), not during a node step, and only
        where the operator may run commands in the target's pods and the policy's nodetool
        is one it runs. A period uses the last sample that finished."""
        clock, settings = self._sampled, spec.skew
        driver: object = t.driver
        if not isinstance(driver, skew.HotSampler):
            clock.said = "this store's driver has no token ring to sample"
            return None
        self._collect_sample()
        last = clock.last
        running = self._sampler
        if running is not None and running.is_alive():
            return last
        moved = last is not None and last.ring is not None and set(last.ring.names) != set(pods)
        was = t.status.get("skew")
        epoch = was.get("attemptedEpoch") if isinstance(was, dict) else None
        if not (moved or clock.due(t.now, settings.sample_interval_s, epoch)):
            if clock.attempted_s is None and isinstance(epoch, int | float):
                clock.said = (f"sampled by the operator before this one (at "
                              f"{iso(float(epoch))}): the next sample is due at "
                              f"{iso(float(epoch) + settings.sample_interval_s)}")
            return last
        if operating:
            return last  # a node step moves the ranges: sampled once it is done
        shut = exec_refused(t)
        if shut is None and tuple(spec.target.nodetool) not in self.s.nodetools:
            shut = (f"spec.target.nodetool {list(spec.target.nodetool)} is not a command "
                    "this operator runs (`elastore operator run --nodetool`)")
        if shut is not None:
            clock.said = f"not sampled: {shut}"
            return last
        clock.attempted_s, clock.force = t.now, False
        clock.said = f"sampling since {iso(t.now)} (its result is used from the next period)"
        kube, ns, now = self.s.kube, self.s.namespace, t.now

        def run() -> None:
            try:
                self._sample_out = driver.skew_sample(kube, ns, spec, pods, now)
            except Exception as exc:  # a thread's failure is said, not lost
                log.exception("%s/%s: the hot-partition sample failed", ns, self.s.name)
                self._sample_out = skew.HotSample(now, spec.skew.sample_duration_s, notes=(
                    f"the sample failed: {type(exc).__name__}: {exc}"[:300],))

        self._sampler = threading.Thread(target=run, name=f"skew-{ns}-{self.s.name}",
                                         daemon=True)
        self._sampler.start()
        return last

    def _collect_sample(self) -> None:
        """A sample its thread finished: kept, and said."""
        got, self._sample_out = self._sample_out, None
        if got is None:
            return
        clock = self._sampled
        clock.last = got
        placed = 0 if got.keys is None else len(got.keys)
        clock.said = (f"sampled at {iso(got.at_s)} for {got.duration_s:g} s: ring "
                      f"{'read' if got.ring is not None else 'not read'}, {placed} hot "
                      "key(s) placed on it"
                      + (f" ({got.keys.total_rps:,.1f} requests/s)" if got.keys is not None
                         else "")
                      + ("; " + "; ".join(got.notes) if got.notes else ""))

    def _cannot_grow(self, spec: PolicySpec, t: Tick | None, replicas: int) -> str | None:
        """Why the target's volumes cannot grow (None: every PVC exists and its
        StorageClass allows expansion), read from the PVCs and their classes."""
        sts = t.sts if t is not None else None
        if spec.target.kind != "StatefulSet" or sts is None or not sts.pvc_template:
            return (f"a {spec.target.kind} without a volumeClaimTemplate: its volumes are "
                    "not the operator's to grow")
        for k in range(replicas):
            name = f"{sts.pvc_template}-{sts.name}-{k}"
            v = self.s.kube.volume(self.s.namespace, name)
            if v is None:
                return f"PVC {name} does not exist"
            if v.expandable is not True:
                return (f"PVC {name}'s StorageClass {v.storage_class or '(none named)'} does "
                        "not allow expansion (allowVolumeExpansion)")
        return None

    def _pvc_volume(self, t: Tick | None, pods: list[str]) -> tuple[float | None, str]:
        """The smallest volume of the pods' PVCs (``<template>-<pod>``): the bound capacity,
        else the request; else the StatefulSet's volumeClaimTemplate."""
        sts = t.sts if t is not None else None
        tmpl = sts.pvc_template if sts is not None else None
        sizes: list[float] = []
        if tmpl:
            for pod in pods:
                v = self.s.kube.volume(self.s.namespace, f"{tmpl}-{pod}")
                size = None if v is None else (v.capacity_bytes or v.requested_bytes)
                if size:
                    sizes.append(size)
        if sizes:
            return min(sizes), "the PVCs"
        tv = sts.volume_bytes if sts is not None else None
        if tv:
            return float(tv), "the volumeClaimTemplate"
        return None, "no volume size (no PVC of the target's pods, no volumeClaimTemplate)"

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
            nodes = self._per_node(source, t.now)
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


def _storage_status(said: dict[str, Any], view: StorageView | None,
                    d: policyloop.Decision) -> dict[str, Any]:
    """``status.storage``: the bytes as this period read them and what the plan does."""
    out = dict(said)
    if view is None:
        return out
    det = d.plan.details
    path = view.path
    growth = None
    if path is not None and len(path.times_s):
        k = int(np.searchsorted(path.times_s, d.now_s + 86400.0))
        k = min(max(k, 0), len(path.times_s) - 1)
        span_d = (float(path.times_s[k]) - d.now_s) / 86400.0
        if span_d > 0:
            growth = (float(path.median_bytes[k]) - view.total_bytes) / GIB / span_d
    crossed = det.get("budget_crossed_s")
    out.update({
        "nodes": len(view.node_bytes), "usedBytes": max(view.node_bytes),
        "volumeBytes": view.volume_bytes, "utilization": round(view.utilization, 4),
        "budget": round(view.config.budget, 4), "skew": round(view.skew, 4),
        "growthGiBPerDay": None if growth is None else round(growth, 3),
        "crossesInSeconds": float(crossed) if isinstance(crossed, int | float) else None,
        "nodesForBytes": view.nodes_needed(view.total_bytes),
        "expandToBytes": det.get("expand_volume_bytes")})
    if det.get("volume_choice"):
        out["volumeChoice"] = str(det["volume_choice"])[:1000]
    return out
