"""One ElasticPolicy's control loop: observe, decide, act, write the status. Thin: every
decision is made by the pure rooms (the policy loop through
:mod:`elastore.operator.control`, the node-step state machine
:mod:`elastore.operator.operation`); this module gathers their inputs and carries out their
outputs through three seams: the policy's own API (:class:`~.status.PolicyStore`), the
cluster (:class:`~elastore.actuators.ports.ClusterPort`) and the metrics
(:class:`~.metrics.MetricsSource`).

A tick, in order:

1. :meth:`Runner._read` the policy and its StatefulSet (a bad spec or a missing target is
   ``Degraded``);
2. :meth:`Runner._continue_operation`: an operation in progress is advanced first; its new
   state is written to the status *before* its effect is carried out, so a restart finds it;
3. :meth:`Runner._control_period` when one is due: metrics, forecast, plan (missing
   metrics: ``Degraded``, no plan, no action), and with ``spec.bandwidth.nodeMbit`` BwMan's
   split of each node's link (``status.bandwidth``, :mod:`elastore.operator.bandwidth`);
4. :meth:`Runner._throttle` (Enforce mode; after step 5 when a scale-out is due, whose new
   pod boots before it streams): the stream throttle in force reaches every
   ready pod that has not got it from this process: a new pod, a restarted one (its uid or
   its container's restartCount changed), every pod after an operator restart; a pod whose
   call failed is retried the next period;
5. :meth:`Runner._start_step`: if the plan wants other replicas now, no operation runs and
   the policy is in Enforce mode with evidence, one node step starts (scale-in only after
   its checks).

``tick`` returns the seconds until it next needs to run: the next planned action, the next
period, or a short poll while an operation runs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from elastore.actuators.ports import MANAGED_LABEL, ClusterPort, StatefulSetFacts
from elastore.errors import ElastoreError, MetricsError
from elastore.models.bundle import ModelSet
from elastore.operator import bandwidth, calibration, control, controls, operation
from elastore.operator import interference as hubbub
from elastore.operator.metrics import (
    MetricsSource,
    PrometheusSource,
    Reader,
    Snapshot,
    resolve_credentials,
)
from elastore.operator.runtime import DEFAULT_NODETOOLS
from elastore.operator.spec import PolicySpec, SpecError, parse
from elastore.operator.status import PolicyStore, condition, iso, set_condition
from elastore.operator.telemetry import OperatorMetrics
from elastore.planner import admission, behavior
from elastore.planner.types import Operation
from elastore.stores import entry, steps
from elastore.stores.base import Allowed, StoreCall, StoreDriver, Target
from elastore.stores.registry import driver_class, served
from elastore.stores.steps import scaling as _scaling

log = logging.getLogger("elastore.operator")

POLL_S = 5.0  # while an operation runs
#: an annotation on a policy: stop the operation in progress safely and start no other
ABORT_ANNOTATION = "elastore.io/abort"
RETRY_S = 30.0  # after a failed observation, at most this long until the next try

Conditions = list[dict[str, Any]]


def prometheus_source(spec: PolicySpec, namespace: str, read: Reader | None = None
                      ) -> MetricsSource:
    """The policy's Prometheus; ``read`` resolves the Secrets and ConfigMaps its
    credentials name (without it a policy that names any is an error)."""
    if spec.prometheus is None:
        raise MetricsError("NoMetrics", "spec.metrics.prometheus is not set: there is "
                                        "nothing to forecast from")
    cred = None
    if spec.prometheus.auth.any:
        if read is None:
            raise ElastoreError("spec.metrics.prometheus names credentials, and this "
                                "operator has no Kubernetes client to read them with")
        cred = resolve_credentials(spec.prometheus, namespace, read)
    return PrometheusSource(spec.prometheus, namespace, spec.target.name, credentials=cred)


@dataclass
class _Tick:
    """One tick's working state: what was read, and the status being written."""

    body: dict[str, Any]
    now: float
    status: dict[str, Any]  # as read
    conds: Conditions
    gen: int
    out: dict[str, Any] = field(default_factory=dict)  # the status patch
    spec: PolicySpec | None = None
    sts: StatefulSetFacts | None = None
    #: the target as its store's driver read it (``sts`` is its sizes)
    target: Target | None = None
    driver: StoreDriver | None = None
    memory: control.Memory = field(default_factory=control.Memory)
    evidence: bool = False  # the last observation succeeded
    blocked: tuple[str, str] | None = None  # (reason, message): Enforce may not touch it
    operation: operation.OperationState | None = None  # the one in progress, if any
    ring_checked: bool = False  # the ring was judged fit for a decommission this tick
    period: bool = False  # a control period was due this tick
    stream_mibps: float | None = None  # the stream throttle decided this tick
    model_status: dict[str, Any] | None = None  # status.model, when a period ran
    calibration: Any = None  # the learned model's calibration this period (learning)
    pause: controls.Pause = field(default_factory=lambda: controls.Pause(False))
    #: the models this period's plan used (learned and interference-adjusted), for the
    #: SLO-risk gauge
    planned_with: ModelSet | None = None
    interference_index: float = 0.0
    #: consecutive failed observations, as the status had them (updated by the period)
    fallback: controls.Fallback = field(default_factory=controls.Fallback)
    #: MetricsPartial as judged this tick (False: not judged yet)
    partial: tuple[str, str] | Literal[False] | None = False

    def pods(self) -> list[str]:
        """The target's pods now: ordinals up to the larger of its replicas and the
        operation's ``toReplicas`` (the operation as this tick leaves it)."""
        assert self.spec is not None and self.driver is not None and self.target is not None
        op = self.out["operation"] if "operation" in self.out else \
            self.status.get("operation")
        to = op.get("toReplicas") if isinstance(op, dict) else None
        return self.driver.pods(self.spec, self.target, to if isinstance(to, int) else None)

    @property
    def last_decision(self) -> dict[str, Any]:
        return dict(self.out.get("lastDecision") or self.status.get("lastDecision") or {})

    def cond(self, ctype: str, status: bool, reason: str, message: str) -> None:
        self.conds = set_condition(self.conds, ctype, status, reason, message, self.now)


@dataclass
class Runner:
    namespace: str
    name: str
    policies: PolicyStore
    kube: ClusterPort
    models: Callable[[PolicySpec], ModelSet]
    telemetry: OperatorMetrics | None = None
    clock: Callable[[], float] = time.time
    source: Callable[[PolicySpec, str], MetricsSource] = prometheus_source
    #: the nodetool commands this operator may run (``elastore operator run --nodetool``)
    nodetools: tuple[tuple[str, ...], ...] = DEFAULT_NODETOOLS
    #: the prefixes a Swift policy's commands in its pods may go through
    #: (``elastore operator run --exec-prefix``; the empty one: none)
    exec_prefixes: tuple[tuple[str, ...], ...] = ((),)
    #: whether the size there is misses the SLO at the last period's forecast (None: not
    #: judged yet, or the model could not say)
    _slo_risk: bool | None = field(default=None, init=False, repr=False)
    _warned: set[str] = field(default_factory=set, init=False, repr=False)
    #: (capacity model, index source) -> the learner's prior; (models, effect) -> the
    #: models the planner reads: rebuilt only when the model or the learned effect changed
    _priors: dict[tuple[int, str], tuple[Any, Any]] = field(default_factory=dict, init=False,
                                                           repr=False)
    _planning: tuple[Any, Any, ModelSet] | None = field(default=None, init=False, repr=False)
    _cal_prior: tuple[Any, Any, Any] | None = field(default=None, init=False, repr=False)
    #: the policy's store driver, by driver name (one per policy: what it remembers, the
    #: pods it throttled, is this policy's)
    _drivers: dict[str, StoreDriver] = field(default_factory=dict, init=False, repr=False)

    # ------------------------------------------------------------------------------------------
    def tick(self) -> float:
        t0 = time.monotonic()
        body = self.policies.get(self.namespace, self.name)
        if body is None:
            return math.inf  # deleted: the daemon stops
        status: dict[str, Any] = dict(body.get("status") or {})
        t = _Tick(body=body, now=self.clock(), status=status,
                  conds=list(status.get("conditions") or []),
                  gen=int(body["metadata"].get("generation", 0)))
        t.out["observedGeneration"] = t.gen
        try:
            wait, degraded = self._steps(t)
        except ElastoreError:
            raise
        except Exception as exc:  # a bug: said in the status, then kopf's backoff
            self._internal_error(t, exc)
            raise
        if degraded is not None:
            t.cond("Degraded", True, *degraded)
            t.cond("Ready", False, *degraded)
        t.out["conditions"] = t.conds
        self.policies.patch_status(self.namespace, self.name, t.out)
        if self.telemetry is not None:
            self.telemetry.degraded.labels(self.namespace, self.name).set(
                1 if degraded is not None else 0)
        log.debug("%s/%s tick in %.2f s", self.namespace, self.name, time.monotonic() - t0)
        return max(1.0, wait)

    def _internal_error(self, t: _Tick, exc: Exception) -> None:
        log.exception("%s/%s: internal error", self.namespace, self.name)
        msg = f"{type(exc).__name__}: {exc}"[:500]
        t.cond("Degraded", True, "InternalError", msg)
        t.cond("Ready", False, "InternalError", msg)
        t.out["conditions"] = t.conds
        try:
            self.policies.patch_status(self.namespace, self.name, t.out)
        except ElastoreError as err:
            log.warning("%s/%s: the status could not say so either: %s", self.namespace,
                        self.name, err)
        self.policies.event(t.body, "InternalError", msg, warning=True)

    def _steps(self, t: _Tick) -> tuple[float, tuple[str, str] | None]:
        """The tick's steps; the wait until the next, and why the policy is degraded."""
        degraded = self._read(t)
        if degraded is not None:
            return degraded
        self._paused(t)
        t.fallback = controls.Fallback.from_status(t.status.get("fallback"))
        running = self._continue_operation(t)
        # the forecast and the status keep updating while an operation runs: the plan
        # starts from the operation's outcome and waits for it
        degraded = self._control_period(t)
        if degraded is not None:
            # without evidence only a size the user named (paused-replicas) or the
            # fallback's scale-out may start: _start_step says which, and why not
            started = not running and self._start_step(t)
            self._throttle(t)  # the throttle in force, also when this period had no evidence
            self._bandwidth_pods(t)
            return (POLL_S, degraded[1]) if running or started else degraded
        partial = self._partial(t)
        if partial is None:
            t.cond("Degraded", False, "Healthy", "metrics and target found")
        # a scale-out that is due starts before the throttle calls (an exec each: 15-20 s
        # together on a busy node, and CI's e2e scale-out started that late): its pod boots
        # before it streams, and gets the throttle then. Any other step comes after them: a
        # scale-in's decommission streams at once, at the throttle in force.
        started = running
        assert t.driver is not None
        if running and t.operation is not None and t.driver.supersedable(t.operation) and \
                self._scale_out_due(t):
            # cleanup takes hours on large nodes and must not hold a resize (cass-operator
            # #496): a further scale-out supersedes it, and its own cleanup covers every old
            # node again (a cleanup already running finishes in Cassandra)
            old = t.operation
            self._start_step(t)
            now_op = t.out.get("operation") or {}
            if now_op.get("pod") != old.pod:
                t.driver.stopped(self._call(t), old)
                self.policies.event(t.body, "CleanupSuperseded",
                                    f"the cleanup after {old.pod} joined ({old.message}) gives "
                                    f"way to the next scale-out, whose cleanup covers every "
                                    "old node")
            self._throttle(t)
        elif not started and self._scale_out_due(t):
            started = self._start_step(t)
            self._throttle(t)
        else:
            self._throttle(t)
            started = started or self._start_step(t)
        self._bandwidth_pods(t)
        if started:
            return POLL_S, partial
        return self._next_wait(t), partial

    # -- 1. the policy and its target ----------------------------------------------------------
    def _read(self, t: _Tick) -> tuple[float, tuple[str, str]] | None:
        try:
            t.spec = parse(t.body.get("spec"))
        except SpecError as exc:
            return 60.0, ("InvalidSpec", str(exc))
        spec = t.spec
        store = entry(spec.target.store, spec.target.kind)
        if store is None:  # the parse refuses these: a second line of defence
            return 60.0, ("TargetNotSupported", f"no store driver serves store "
                          f"{spec.target.store!r} as {spec.target.kind}; these are served: "
                          f"{served()}")
        driver = self._drivers.get(store.name)
        if driver is None:
            self._drivers.clear()  # a policy whose target changed store forgets the old one
            driver = self._drivers[store.name] = driver_class(store)()
        t.driver = driver
        refused = driver.refused(spec, self.kube, Allowed(self.nodetools, self.exec_prefixes))
        if refused is not None:
            return 60.0, refused
        t.target = driver.read(self.kube, self.namespace, spec)
        if t.target is None:
            return min(spec.control_period_s, RETRY_S), (
                "TargetNotFound", driver.missing(self.namespace, spec))
        t.out.update(t.target.status)
        self._current(t, t.target.sizes)
        if spec.enforce:
            self._guard(t)
        return None

    def _call(self, t: _Tick) -> StoreCall:
        """What the driver gets this tick: plain data and four narrow seams."""
        assert t.spec is not None and t.target is not None

        def save(op: operation.OperationState | None) -> None:
            self.policies.patch_status(self.namespace, self.name,
                                       {"operation": None if op is None else op.to_status()})

        return StoreCall(
            self.namespace, self.name, t.spec, self.kube, t.target, t.status, t.now,
            self.clock, lambda reason, msg, warning: self.policies.event(
                t.body, reason, msg, warning=warning),
            t.cond, save, t.out, decided_mibps=t.stream_mibps, slo_at_risk=self._slo_risk,
            ring_checked=t.ring_checked)

    def _guard(self, t: _Tick) -> None:
        """Whether Enforce may touch the target at all: it opted in, nothing else owns or
        scales it. A refusal is the ``Conflict`` condition (and an Event when new); the
        policy keeps forecasting and recommending."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        ref = f"{spec.target.kind} {self.namespace}/{sts.name}"
        if not sts.managed:
            t.blocked = ("NotOptedIn", f"{ref} is not labelled {MANAGED_LABEL}=true: Enforce "
                                       "acts only on a target that opts in")
        elif sts.owner is not None:
            t.blocked = ("OwnedByController", f"{ref} is controlled by {sts.owner}: scaling "
                                              "it would fight its owner; scale the owner")
        else:
            assert t.driver is not None and t.target is not None
            others = t.driver.contenders(self.kube, self.namespace, t.target, self.name)
            if others:
                t.blocked = ("TargetContended", f"{ref} is also scaled by "
                                                f"{', '.join(others)}: one scaler per target")
        self._conflict(t)

    def _conflict(self, t: _Tick) -> None:
        if t.blocked is None:
            t.cond("Conflict", False, "NoConflict", "nothing else changes the target")
            return
        reason, message = t.blocked
        was = condition(t.status.get("conditions") or [], "Conflict") or {}
        if was.get("reason") != reason or was.get("status") != "True":
            self.policies.event(t.body, reason, message, warning=True)
        t.cond("Conflict", True, reason, message)

    def _current(self, t: _Tick, sts: StatefulSetFacts) -> None:
        t.sts = sts
        t.out["currentReplicas"] = sts.spec_replicas
        if self.telemetry is not None:
            self.telemetry.current.labels(self.namespace, self.name).set(sts.spec_replicas)

    def _paused(self, t: _Tick) -> None:
        """``elastore.io/paused`` and ``paused-replicas`` (:mod:`elastore.operator.controls`):
        ``status.paused``, the ``Paused`` condition, an Event when it starts or ends."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        ann = (t.body.get("metadata") or {}).get("annotations") or {}
        t.pause = controls.read_pause(
            ann, max(spec.min_replicas, spec.target.replication_factor), spec.max_replicas)
        was = t.status.get("paused")
        t.out["paused"] = controls.pause_status(t.pause, was, t.now)
        if t.pause.on:
            reason = "PausedAtReplicas" if t.pause.replicas is not None else "Paused"
            t.cond("Paused", True, reason, t.pause.message)
            old = was if isinstance(was, dict) else None
            if old is None or old.get("message") != t.pause.message:
                self.policies.event(t.body, reason, t.pause.message,
                                    warning=t.pause.problem is not None)
        else:
            t.cond("Paused", False, "NotPaused", "scaling follows the plan")
            if isinstance(was, dict):
                self.policies.event(t.body, "Resumed", "the pause annotations are gone: "
                                                       "scaling follows the plan again")

    # -- 2. an operation in progress -----------------------------------------------------------
    def _continue_operation(self, t: _Tick) -> bool:
        """Advance the operation in the status, if any; True while it still runs."""
        op = operation.OperationState.from_status(t.status.get("operation"))
        if op is None:
            return False
        assert t.spec is not None and t.sts is not None
        t.operation = op
        why = self._aborting(t)
        if why is not None:
            self._abort(t, op, why)
            return False
        assert t.driver is not None
        if t.blocked is None:
            floor = max(t.spec.min_replicas, t.spec.target.replication_factor)
            try:
                t.driver.check_identity(op, self._call(t), floor)
            except ElastoreError as exc:
                t.blocked = ("StatusRejected", f"the operation in the status is not this "
                                               f"policy's own: {exc}; touching nothing")
                self._conflict(t)
        if t.blocked is not None:
            t.cond(_scaling(op.kind), True, "Blocked",
                   f"{op.kind} {op.from_replicas} -> {op.to_replicas} held: {t.blocked[1]}")
            return True
        if op.id is None:  # begun by an operator that gave none: one now, kept in the status
            op = replace(op, id=operation.new_id())
        got = steps.advance(t.driver, self._call(t), op)
        if got.blocked is not None:
            t.blocked = got.blocked
            self._conflict(t)
        t.operation = None if got.done else got.operation
        if not got.done:
            return True
        again = t.driver.read(self.kube, self.namespace, t.spec)  # the size it left
        if again is not None:
            t.target = again
            t.out.update(again.status)
        self._current(t, t.target.sizes if t.target is not None else t.sts)
        return False

    def _aborting(self, t: _Tick) -> str | None:
        """Why no operation may go on: mode Recommend, or the abort annotation."""
        assert t.spec is not None
        if ABORT_ANNOTATION in ((t.body.get("metadata") or {}).get("annotations") or {}):
            return f"the policy carries the {ABORT_ANNOTATION} annotation"
        if not t.spec.enforce:
            return f"the policy is in mode {t.spec.mode}"
        return None

    def _abort(self, t: _Tick, op: operation.OperationState, why: str) -> None:
        """Stop following an operation, safely: nothing more is issued. A node that is
        joining finishes by itself; a decommission is never re-issued (a node already
        LEAVING finishes leaving in Cassandra, and its pod stays)."""
        assert t.driver is not None
        left = t.driver.abort_left(self._call(t), op)
        msg = f"{op.kind} {op.from_replicas} -> {op.to_replicas} ({op.phase}) stopped: {why}; " \
              f"{left}"
        self.policies.event(t.body, "OperationAborted", msg, warning=True)
        t.cond(_scaling(op.kind), False, "Aborted", msg)
        t.out["operation"] = None
        t.status = {**t.status, "operation": None}
        self.policies.patch_status(self.namespace, self.name, {"operation": None})

    def _partial(self, t: _Tick) -> tuple[str, str] | None:
        """``MetricsPartial`` when the last observation came from fewer nodes than were
        ready: the missing nodes' load is absent from the sum, which reads as low load. The
        policy keeps forecasting (an underestimate never wrongly adds a node) but no
        scale-in starts until every node reports. Judged once a tick (its Event once)."""
        if t.partial is not False:
            return t.partial
        t.partial = self._partial_now(t)
        return t.partial

    def _partial_now(self, t: _Tick) -> tuple[str, str] | None:
        seen = t.out.get("observed") or t.status.get("observed") or {}
        nodes, ready = seen.get("nodes"), seen.get("readyReplicas")
        if nodes is None or ready is None or int(nodes) >= int(ready):
            return None
        msg = (f"metrics from {nodes} of {ready} ready nodes (query freshness, by "
               "spec.metrics.prometheus.podLabel): the missing nodes' load is not in the sum; "
               "no scale-in until every node reports")
        was = condition(t.status.get("conditions") or [], "Degraded") or {}
        if was.get("reason") != "MetricsPartial":
            self.policies.event(t.body, "MetricsPartial", msg, warning=True)
        return "MetricsPartial", msg

    # -- 3. a control period -------------------------------------------------------------------
    def _control_period(self, t: _Tick) -> tuple[float, tuple[str, str]] | None:
        """Decide when a period is due. A failed observation degrades the policy: no plan,
        so a scale-in on missing data never happens and every scale-out rests on evidence."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        t.memory = control.memory_from_status(t.status)
        last = t.status.get("lastDecision") or {}
        t.evidence = bool(last.get("ok"))
        # after a failed observation every tick retries (they come RETRY_S apart): a policy
        # is never called healthy on the strength of an observation that failed
        due = last.get("epoch") is None or not t.evidence or \
            t.now - float(last["epoch"]) >= spec.control_period_s - 0.5 or \
            last.get("generation") != t.gen
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
        self.policies.event(t.body, "Decision", decision.reason[:1000])
        self._slo_risk = self._risk(t, decision, snap)
        if self.telemetry is not None:
            self._record(decision)
            self.telemetry.decision_seconds.labels(self.namespace, self.name).observe(
                time.monotonic() - t0)
            self._backtest_gauges(t, decision, snap)
        t.stream_mibps = self._bandwidth(t, decision, snap)
        return None

    def _no_decision(self, t: _Tick, exc: ElastoreError) -> tuple[float, tuple[str, str]]:
        assert t.spec is not None
        reason = exc.reason if isinstance(exc, MetricsError) else "DecisionFailed"
        t.out["lastDecision"] = {"epoch": t.now, "at": iso(t.now), "ok": False,
                                 "generation": t.gen, "reason": str(exc)[:500]}
        t.out["memory"] = control.memory_to_status(t.memory.forgetting_the_forecast())
        t.out["nextAction"] = None
        t.cond("Forecasting", False, reason, str(exc))
        self._fallback(t, ok=False)
        was = condition(t.status.get("conditions") or [], "Degraded") or {}
        if was.get("reason") != reason:  # an Event when the reason is new
            self.policies.event(t.body, reason, f"no decision: {exc}", warning=True)
        return min(t.spec.control_period_s, RETRY_S), (reason, str(exc))

    def _fallback(self, t: _Tick, ok: bool) -> None:
        """Count the observation toward ``spec.fallback``; ``status.fallback``, the
        ``Fallback`` condition, Events when it comes into force and when it ends."""
        spec = t.spec
        assert spec is not None
        prev = t.fallback
        plan = tuple(control.action_to_status(a) for a in t.memory.actions)
        t.fallback = controls.observed(prev, ok, t.now, plan)
        n, need, how = t.fallback.failures, spec.fallback_threshold, spec.fallback_behavior
        if ok:
            if prev.failures:
                t.out["fallback"] = None
                if prev.active(need):
                    self.policies.event(t.body, "FallbackEnded", "an observation succeeded "
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
            self.policies.event(t.body, "FallbackActive", msg, warning=True)

    def _decide(self, spec: PolicySpec, replicas: int, memory: control.Memory, now: float,
                op: operation.OperationState | None = None,
                status: dict[str, Any] | None = None, t: _Tick | None = None
                ) -> tuple[control.Decision, Snapshot, dict[str, Any]]:
        """Observe, learn, plan. Returns the decision, the snapshot and
        ``status.interference`` (and, with ``t``, sets ``status.model`` and the learned
        model's scale-in gate on it)."""
        source = self.source(spec, self.namespace)
        snap = source.snapshot(now, control.history_steps(spec.prediction_method,
                                                          control.path_steps(spec),
                                                          spec.calibration_steps),
                               spec.prediction_step_s)
        if not math.isfinite(snap.data_bytes) and t is not None and t.driver is not None:
            # a store whose exporters lack the bytes: read from the store (never 0)
            held = t.driver.data_bytes(self.kube, self.namespace, spec, replicas)
            if held is not None:
                snap = replace(snap, data_bytes=held)
        reading = hubbub.read(spec, lambda: source.scalar("interference", now))
        models = self.models(spec)
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
                log.debug("%s/%s: no latency this period: %s", self.namespace, self.name, exc)
            # the load is spread over the nodes that report it (fewer than the replicas:
            # a partial scrape, whose missing load is not in the sum either)
            serving = min(snap.nodes, replicas) if snap.nodes else replicas
            observation = hubbub.learn(learner, models.capacity, snap, serving,
                                       reading.index, latency, running is not None, start)
            effect = learner.effect(start)
            models = self._planning_models(models, effect)
        decision = control.decide(spec, snap, replicas, models, memory, running,
                                  interference=reading.index or 0.0)
        if t is not None:
            t.planned_with, t.interference_index = models, reading.index or 0.0
        return decision, snap, hubbub.to_status(spec, reading, learner, effect, latency,
                                                observation, now)

    def _calibrated(self, t: _Tick, spec: PolicySpec, source: MetricsSource,
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
        name = calibration.configmap_name(self.name)
        uid = str(t.body["metadata"].get("uid", ""))
        text, owners = self.policies.read_model(self.namespace, name, calibration.KEY)
        if owners and uid not in owners:
            raise ElastoreError(f"ConfigMap {self.namespace}/{name} exists and is not owned "
                                f"by this policy (owners {owners}): the learned model is "
                                "not written over someone else's; rename or delete it")
        try:
            state = calibration.learner_from_document(text, f"ConfigMap {name}")
            notes = []
        except ElastoreError as exc:  # unreadable: start over, and say so
            state, notes = None, [f"the stored learned model was unreadable and is "
                                  f"replaced: {exc}"]
            self.policies.event(t.body, "LearnedModelReset", notes[0], warning=True)
        learner_ = calibration.learner(spec, state)
        prior = self._calibration_prior(spec, models)
        try:
            nodes = source.per_node(t.now)
        except MetricsError as exc:
            if exc.reason == "PrometheusUnreachable":
                raise
            nodes, notes = {}, [*notes, f"no per-node metrics: {exc}"]
        x, y, said = calibration.observations(nodes, index, operating)
        if x:
            learner_.observe(x, y, prior=prior)
        cal = learner_.calibrate(prior, spec.headroom)
        t.calibration = cal
        try:
            self.policies.write_model(t.body, name, calibration.KEY, calibration.document(
                cal.learned, learner_, cal, models, self.name, t.now))
            where: str | None = name
        except ElastoreError as exc:
            where = None
            notes.append(f"not saved: {exc}")
            self.policies.event(t.body, "LearnedModelNotSaved", str(exc), warning=True)
        t.model_status = calibration.to_status(spec, cal, learner_, "; ".join([said, *notes]),
                                               where, t.now)
        return replace(models, capacity=cal.planning)

    def _calibration_prior(self, spec: PolicySpec, models: ModelSet) -> Any:
        key = (id(models.capacity), spec.prior_scale)
        hit = self._cal_prior
        if hit is None or hit[0] != key or hit[1] is not models.capacity:
            hit = (key, models.capacity, calibration.prior(spec, models))
            self._cal_prior = hit
        return hit[2]

    def _model_said(self, t: _Tick) -> None:
        """``status.model``; an Event when the learned model becomes confident (or stops
        being)."""
        if t.model_status is None:
            return
        t.out["model"] = t.model_status
        prev = t.status.get("model")
        was = prev.get("scaleInAllowed") if isinstance(prev, dict) else None
        now = t.model_status.get("scaleInAllowed")
        if now is not None and was is not None and now != was:
            self.policies.event(
                t.body, "ModelConfident" if now else "ModelLearning",
                f"learned capacity {t.model_status['capacityRps']:.1f} req/s per node, "
                f"confidence {t.model_status['confidence']:.2f}: "
                + ("scale-in allowed" if now else "only scale-out until it is confident again"),
                warning=not now)

    def _prior(self, models: ModelSet, source: str) -> Any:
        key = (id(models.capacity), source)
        hit = self._priors.get(key)
        if hit is None or hit[0] is not models.capacity:
            if len(self._priors) > 8:
                self._priors.clear()
            hit = (models.capacity, hubbub.prior(models.capacity, source))
            self._priors[key] = hit
        return hit[1]

    def _planning_models(self, models: ModelSet, effect: Any) -> ModelSet:
        hit = self._planning
        if hit is None or hit[0] is not models or hit[1] != effect:
            hit = (models, effect, hubbub.planning_models(models, effect))
            self._planning = hit
        return hit[2]

    def _interference_said(self, t: _Tick, inter: dict[str, Any]) -> None:
        """``status.interference``; an Event when the index's source changes (a policy that
        goes blind says so), and the metrics."""
        t.out["interference"] = inter
        prev = t.status.get("interference")
        was: dict[str, Any] = prev if isinstance(prev, dict) else {}
        source = inter["source"]
        if was.get("source") != source or was.get("mode") != inter["mode"]:
            if source == "none":  # a Warning when an index it had is lost
                self.policies.event(t.body, "InterferenceBlind", inter["reason"],
                                    warning=was.get("source") in ("agent", "query")
                                    and inter["mode"] == "Auto")
            else:
                self.policies.event(t.body, "InterferenceAware",
                                    f"planning with the interference index: {inter['reason']}")
        tm = self.telemetry
        if tm is None:
            return
        ns, name = self.namespace, self.name
        tm.interference_blind.labels(ns, name).set(1 if source == "none" else 0)
        tm.interference_factor.labels(ns, name).set(inter["factor"])
        tm.interference_observations.labels(ns, name).set(inter["learned"]["observations"])
        if inter["index"] is None:
            tm.forget_interference_index(ns, name)  # absent, never 0
        else:
            tm.interference_index.labels(ns, name).set(inter["index"])

    def _decision_status(self, d: control.Decision, snap: Snapshot, gen: int
                         ) -> dict[str, Any]:
        nxt = control.next_action(d.actions, d.now_s)
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
            "memory": control.memory_to_status(d.memory),
        }

    def _backtest_gauges(self, t: _Tick, d: control.Decision, snap: Snapshot) -> None:
        """``elastore_would_scale`` and ``elastore_slo_at_risk``: what Enforce would do now
        and whether the size there is would miss the SLO at the forecast (both modes)."""
        tm, sts, spec = self.telemetry, t.sts, t.spec
        assert tm is not None and sts is not None and spec is not None
        n = sts.spec_replicas
        tm.would_scale.labels(self.namespace, self.name).set(
            control.would_scale(d.actions, t.now, n))
        if self._slo_risk is None:  # a model that fits no load: said, not guessed
            with contextlib.suppress(KeyError):
                tm.slo_at_risk.remove(self.namespace, self.name)
            return
        tm.slo_at_risk.labels(self.namespace, self.name).set(1 if self._slo_risk else 0)

    def _risk(self, t: _Tick, d: control.Decision, snap: Snapshot) -> bool | None:
        """Whether the size there is would miss the SLO at this period's forecast; None
        when the model cannot say."""
        sts, spec = t.sts, t.spec
        assert sts is not None and spec is not None
        try:
            return control.slo_at_risk(t.planned_with or self.models(spec), d.forecast_rps,
                                       snap.read_ratio, sts.spec_replicas,
                                       t.interference_index)
        except ElastoreError as exc:
            log.warning("%s/%s: SLO risk not judged: %s", self.namespace, self.name, exc)
            return None

    def _record(self, d: control.Decision) -> None:
        tm = self.telemetry
        assert tm is not None
        tm.forecast.labels(self.namespace, self.name).set(d.forecast_rps)
        if d.forecast_error is not None:
            tm.forecast_error.labels(self.namespace, self.name).set(d.forecast_error)
        tm.desired.labels(self.namespace, self.name).set(d.desired_replicas)
        tm.migration.labels(self.namespace, self.name).set(d.migration_mibps)

    def _bandwidth(self, t: _Tick, d: control.Decision, snap: Snapshot) -> float:
        """BwMan's split of each node's link for this period (``status.bandwidth``, in both
        modes: the node agent applies it), and the stream throttle to set: the split's,
        else the plan's rate within the policy's bounds."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        plain = min(max(d.migration_mibps, spec.min_migration_mibps), spec.max_migration_mibps)
        if spec.node_mbit is None:
            if t.status.get("bandwidth") is not None:
                t.out["bandwidth"] = None
            return plain
        models = self.models(spec)
        why = bandwidth.unavailable(spec, models)
        if why is not None:
            t.out["bandwidth"] = None
            if "bandwidth" not in self._warned:  # once per process: the Decision says it too
                self._warned.add("bandwidth")
                self.policies.event(t.body, "NoBandwidthModel", why, warning=True)
            return plain
        self._warned.discard("bandwidth")
        try:
            split = bandwidth.node_split(spec, d, sts.spec_replicas, snap.read_ratio, models)
        except ElastoreError as exc:  # a model that cannot split: said, never a guess
            t.out["bandwidth"] = None
            self.policies.event(t.body, "BandwidthSplitFailed", str(exc), warning=True)
            return plain
        t.out["bandwidth"] = bandwidth.to_status(split, t.pods())
        return split.stream_mibps

    def _bandwidth_pods(self, t: _Tick) -> None:
        """The published split lists the target's pods as they are at the tick's end (a
        scale-out's new pod is shaped from the moment it is asked for, not a period later)."""
        if t.spec is None or t.sts is None or t.spec.node_mbit is None:
            return
        new = bandwidth.with_pods(t.out.get("bandwidth", t.status.get("bandwidth")), t.pods())
        if new is not None:
            t.out["bandwidth"] = new

    def _throttle(self, t: _Tick) -> None:
        """The store's migration throttle in force on its pods (Enforce mode, not while
        another party's change blocks the policy): :meth:`StoreDriver.keep_throttles`."""
        if t.spec is None or t.driver is None or t.target is None or t.blocked is not None:
            return
        t.driver.keep_throttles(self._call(t), t.period)

    # -- 4. the next node step -----------------------------------------------------------------
    def _scale_out_due(self, t: _Tick) -> bool:
        assert t.sts is not None
        return control.target_at(t.memory.actions, max(t.now, self.clock()),
                                 t.sts.spec_replicas) > t.sts.spec_replicas

    def _start_step(self, t: _Tick) -> bool:
        """Start the node step the plan wants now, if it may; True if one started."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        # the clock now, not at the tick's start: an action that fell due while this tick
        # waited on the cluster (a throttle call, a slow API server) starts in this tick,
        # not one control period late
        now = max(t.now, self.clock())
        named = t.pause.replicas  # paused-replicas: the user's size, not the plan's
        fallback = self._fallback_scale_out(t)
        if named is not None:
            target = named
        elif t.evidence:
            target = control.target_at(t.memory.actions, now, sts.spec_replicas)
        elif fallback:  # the last plan made on evidence; never below where it is
            plan = tuple(control.action_from_status(a) for a in t.fallback.actions)
            target = max(sts.spec_replicas, control.target_at(plan, now, sts.spec_replicas))
        else:
            target = sts.spec_replicas
            if not t.pause.on:
                for ctype in ("ScalingUp", "ScalingDown"):
                    t.cond(ctype, False, "NoEvidence", "the last observation failed: no "
                                                       "action")
                return False
        assert t.driver is not None
        step_to: int | None = None
        if target != sts.spec_replicas:
            # where the step goes: one node, or the store's own step (cass-operator's
            # rack-balanced sizes), or not yet
            got = t.driver.step_to(self._call(t), target, named is not None,
                                   t.memory.recent_desired)
            if isinstance(got, tuple):
                t.cond("ScalingUp", False, "Idle", "no change under way")
                t.cond("ScalingDown", False, *got)
                t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode "
                                               f"{spec.mode}")
                return False
            step_to = got
        if target == sts.spec_replicas:
            for ctype in ("ScalingUp", "ScalingDown"):
                t.cond(ctype, False, "Idle", "no change under way")
            t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode {spec.mode}")
            return False
        kind: Literal["ScaleOut", "ScaleIn"] = "ScaleOut" if target > sts.spec_replicas \
            else "ScaleIn"
        ctype = _scaling(kind)
        user = named is not None
        intent = admission.Intent(kind, target, sts.spec_replicas, user, step_to)
        held = admission.admit(intent, admission.Facts(
            enforce=spec.enforce, paused=t.pause.on, pause_message=t.pause.message,
            evidence=t.evidence, fallback_scale_out=fallback,
            behavior_limit=None if user else self._behavior_limit(t, target, now),
            conflict=t.blocked, aborting=self._aborting(t),
            partial_metrics=self._partial(t) if kind == "ScaleIn" and not user else None,
            learning=self._learning_gate(t) if kind == "ScaleIn" and not user else None))
        if held is not None:
            t.cond(ctype, False, held.reason, held.message)
        elif (store_held := t.driver.holds(self._call(t), kind, step_to)) is not None:
            t.cond(ctype, False, *store_held)
        elif (refused := t.driver.refusal(self._call(t), kind, step_to)) is not None:
            t.cond(ctype, False, "Refused", refused)
            self.policies.event(t.body, f"{kind}Refused", refused, warning=True)
        else:
            t.ring_checked = kind == "ScaleIn"
            self._begin(t, kind, step_to)
            return True
        t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode {spec.mode}")
        return False

    def _fallback_scale_out(self, t: _Tick) -> bool:
        """Whether the fallback lets the last plan's scale-outs start (no evidence now)."""
        assert t.spec is not None
        return not t.evidence and t.spec.fallback_behavior == "currentReplicasIfHigher" and \
            t.fallback.active(t.spec.fallback_threshold)

    def _behavior_limit(self, t: _Tick, target: int, now: float) -> str | None:
        """Why ``spec.behavior``'s policies hold a step toward ``target`` now (None: they
        allow one)."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        current = sts.spec_replicas
        if target == current or not spec.behavior.limited:
            return None
        events = self._scale_events(t)
        allowed = behavior.limit(spec.behavior, current, target, events, now)
        if allowed != current:
            return None
        up = target > current
        rules = spec.behavior.scale_up if up else spec.behavior.scale_down
        d = "scaleUp" if up else "scaleDown"
        if rules.select == "Disabled":
            return f"the plan wants {target} replicas; spec.behavior.{d}.selectPolicy is " \
                   "Disabled"
        when = behavior.next_allowed_s(spec.behavior, current, target, events, now)
        after = f"; the next is allowed at {iso(when)}" if when is not None else ""
        return (f"the plan wants {target} replicas; spec.behavior.{d}'s policies allow no "
                f"more {'additions' if up else 'removals'} now ({len(events)} step(s) "
                f"started recently){after}")

    @staticmethod
    def _scale_events(t: _Tick) -> behavior.ScaleEvents:
        raw = t.out.get("scaleEvents", t.status.get("scaleEvents")) or []
        try:
            return tuple((float(a), int(b)) for a, b in raw)
        except (TypeError, ValueError):  # unreadable: as if none (logged in the status)
            return ()

    def _learning_gate(self, t: _Tick) -> str | None:
        """Why the learned model holds a scale-in (this period's, else the status's)."""
        if t.calibration is not None:
            return calibration.gate(t.calibration)
        m = t.out.get("model") or t.status.get("model")
        if isinstance(m, dict) and m.get("source") == "learned" and \
                m.get("scaleInAllowed") is False:
            return (f"the learned capacity model's confidence is {m.get('confidence')}, "
                    "below the threshold: only scale-out until it is confident (status.model)")
        return None

    def _begin(self, t: _Tick, kind: Literal["ScaleOut", "ScaleIn"], step_to: int | None
               ) -> None:
        """A step begins: its intent in the status first, then its first effect."""
        spec, sts, driver = t.spec, t.sts, t.driver
        assert spec is not None and sts is not None and driver is not None
        begun = driver.begin(self._call(t), kind, step_to)
        new = begun.operation
        said = begun.said(self._why_now(t))
        t.cond(_scaling(kind), True, f"{kind}Started",
               begun.condition if begun.condition is not None else said)
        t.out["operation"] = new.to_status()
        t.out["scaleEvents"] = [list(e) for e in behavior.record(
            self._scale_events(t), new.started_s, new.to_replicas - sts.spec_replicas)]
        t.out["conditions"] = t.conds
        self.policies.patch_status(self.namespace, self.name, t.out)  # intent first
        self.policies.event(t.body, f"{kind}Started", said)
        if self.telemetry is not None:
            self.telemetry.actions.labels(self.namespace, self.name, kind).inc()
        got = steps.advance(driver, self._call(t), new)
        if got.blocked is not None:
            t.blocked = got.blocked
            self._conflict(t)

    @staticmethod
    def _why_now(t: _Tick) -> str:
        """What asked for the step: paused-replicas, the fallback's saved plan, the plan."""
        if t.pause.replicas is not None:
            return f"asked by elastore.io/paused-replicas={t.pause.replicas}"
        actions = t.memory.actions if t.evidence else tuple(
            control.action_from_status(a) for a in t.fallback.actions)
        src = "" if t.evidence else " (the fallback: the last plan made on evidence)"
        return f"planned at {iso(actions[0].at_s)}{src}" if actions else f"planned{src}"

    def _next_wait(self, t: _Tick) -> float:
        assert t.spec is not None
        last = t.last_decision
        waits = [t.spec.control_period_s - (t.now - float(last.get("epoch", t.now)))]
        nxt = control.next_action(t.memory.actions, t.now)
        if nxt is not None:
            waits.append(nxt.at_s - t.now)
        return min(waits)
