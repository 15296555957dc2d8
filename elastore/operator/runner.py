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
from elastore.operator.metrics import (
    MetricsSource,
    PrometheusSource,
    Reader,
    resolve_credentials,
)
from elastore.operator.period import RETRY_S, ControlPeriod
from elastore.operator.runtime import DEFAULT_NODETOOLS
from elastore.operator.spec import PolicySpec, SpecError, parse
from elastore.operator.status import PolicyStore, condition, iso
from elastore.operator.telemetry import OperatorMetrics
from elastore.operator.tick import Tick
from elastore.planner import admission, behavior
from elastore.stores import entry, steps
from elastore.stores.base import Allowed, StoreCall, StoreDriver
from elastore.stores.registry import driver_class, served
from elastore.stores.steps import scaling as _scaling

log = logging.getLogger("elastore.operator")

POLL_S = 5.0  # while an operation runs
#: an annotation on a policy: stop the operation in progress safely and start no other
ABORT_ANNOTATION = "elastore.io/abort"

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
    #: the policy's store driver, by driver name (one per policy: what it remembers, the
    #: pods it throttled, is this policy's)
    _drivers: dict[str, StoreDriver] = field(default_factory=dict, init=False, repr=False)
    period: ControlPeriod = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.period = ControlPeriod(self)

    # ------------------------------------------------------------------------------------------
    def tick(self) -> float:
        t0 = time.monotonic()
        body = self.policies.get(self.namespace, self.name)
        if body is None:
            return math.inf  # deleted: the daemon stops
        status: dict[str, Any] = dict(body.get("status") or {})
        t = Tick(body=body, now=self.clock(), status=status,
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

    def _internal_error(self, t: Tick, exc: Exception) -> None:
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

    def _steps(self, t: Tick) -> tuple[float, tuple[str, str] | None]:
        """The tick's steps; the wait until the next, and why the policy is degraded."""
        degraded = self._read(t)
        if degraded is not None:
            return degraded
        self._paused(t)
        t.fallback = controls.Fallback.from_status(t.status.get("fallback"))
        running = self._continue_operation(t)
        # the forecast and the status keep updating while an operation runs: the plan
        # starts from the operation's outcome and waits for it
        degraded = self.period.run(t)
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
    def _read(self, t: Tick) -> tuple[float, tuple[str, str]] | None:
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

    def _call(self, t: Tick) -> StoreCall:
        """What the driver gets this tick: plain data and four narrow seams."""
        assert t.spec is not None and t.target is not None

        def save(op: operation.OperationState | None) -> None:
            self.policies.patch_status(self.namespace, self.name,
                                       {"operation": None if op is None else op.to_status()})

        return StoreCall(
            self.namespace, self.name, t.spec, self.kube, t.target, t.status, t.now,
            self.clock, lambda reason, msg, warning: self.policies.event(
                t.body, reason, msg, warning=warning),
            t.cond, save, t.out, decided_mibps=t.stream_mibps, slo_at_risk=self.period.slo_risk,
            ring_checked=t.ring_checked)

    def _guard(self, t: Tick) -> None:
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

    def _conflict(self, t: Tick) -> None:
        if t.blocked is None:
            t.cond("Conflict", False, "NoConflict", "nothing else changes the target")
            return
        reason, message = t.blocked
        was = condition(t.status.get("conditions") or [], "Conflict") or {}
        if was.get("reason") != reason or was.get("status") != "True":
            self.policies.event(t.body, reason, message, warning=True)
        t.cond("Conflict", True, reason, message)

    def _current(self, t: Tick, sts: StatefulSetFacts) -> None:
        t.sts = sts
        t.out["currentReplicas"] = sts.spec_replicas
        if self.telemetry is not None:
            self.telemetry.current.labels(self.namespace, self.name).set(sts.spec_replicas)

    def _paused(self, t: Tick) -> None:
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
    def _continue_operation(self, t: Tick) -> bool:
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

    def _aborting(self, t: Tick) -> str | None:
        """Why no operation may go on: mode Recommend, or the abort annotation."""
        assert t.spec is not None
        if ABORT_ANNOTATION in ((t.body.get("metadata") or {}).get("annotations") or {}):
            return f"the policy carries the {ABORT_ANNOTATION} annotation"
        if not t.spec.enforce:
            return f"the policy is in mode {t.spec.mode}"
        return None

    def _abort(self, t: Tick, op: operation.OperationState, why: str) -> None:
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

    def _partial(self, t: Tick) -> tuple[str, str] | None:
        """``MetricsPartial`` when the last observation came from fewer nodes than were
        ready: the missing nodes' load is absent from the sum, which reads as low load. The
        policy keeps forecasting (an underestimate never wrongly adds a node) but no
        scale-in starts until every node reports. Judged once a tick (its Event once)."""
        if t.partial is not False:
            return t.partial
        t.partial = self._partial_now(t)
        return t.partial

    def _partial_now(self, t: Tick) -> tuple[str, str] | None:
        msg = controls.partial_metrics(t.out.get("observed") or t.status.get("observed") or {})
        if msg is None:
            return None
        was = condition(t.status.get("conditions") or [], "Degraded") or {}
        if was.get("reason") != "MetricsPartial":  # an Event when it begins
            self.policies.event(t.body, "MetricsPartial", msg, warning=True)
        return "MetricsPartial", msg

    def _bandwidth_pods(self, t: Tick) -> None:
        """The published split lists the target's pods as they are at the tick's end (a
        scale-out's new pod is shaped from the moment it is asked for, not a period later)."""
        if t.spec is None or t.sts is None or t.spec.node_mbit is None:
            return
        new = bandwidth.with_pods(t.out.get("bandwidth", t.status.get("bandwidth")), t.pods())
        if new is not None:
            t.out["bandwidth"] = new

    def _throttle(self, t: Tick) -> None:
        """The store's migration throttle in force on its pods (Enforce mode, not while
        another party's change blocks the policy): :meth:`StoreDriver.keep_throttles`."""
        if t.spec is None or t.driver is None or t.target is None or t.blocked is not None:
            return
        t.driver.keep_throttles(self._call(t), t.period)

    # -- 4. the next node step -----------------------------------------------------------------
    def _scale_out_due(self, t: Tick) -> bool:
        assert t.sts is not None
        return control.target_at(t.memory.actions, max(t.now, self.clock()),
                                 t.sts.spec_replicas) > t.sts.spec_replicas

    def _start_step(self, t: Tick) -> bool:
        """Start the node step the plan wants now, if it may; True if one started."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        # the clock now, not at the tick's start: an action that fell due while this tick
        # waited on the cluster (a throttle call, a slow API server) starts in this tick,
        # not one control period late
        now = max(t.now, self.clock())
        named = t.pause.replicas  # paused-replicas: the user's size, not the plan's
        fallback = controls.fallback_scale_out(t.evidence, spec.fallback_behavior,
                                               spec.fallback_threshold, t.fallback)
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
            behavior_limit=None if user else behavior.held(
                spec.behavior, sts.spec_replicas, target, self._scale_events(t), now, iso),
            conflict=t.blocked, aborting=self._aborting(t),
            partial_metrics=self._partial(t) if kind == "ScaleIn" and not user else None,
            learning=calibration.learning_hold(t.calibration, t.out.get("model") or t.status.get(
                "model")) if kind == "ScaleIn" and not user else None))
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

    def _begin(self, t: Tick, kind: Literal["ScaleOut", "ScaleIn"], step_to: int | None
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
    def _scale_events(t: Tick) -> behavior.ScaleEvents:
        return behavior.events_from_status(t.out.get("scaleEvents", t.status.get("scaleEvents")))

    @staticmethod
    def _why_now(t: Tick) -> str:
        """What asked for the step: paused-replicas, the fallback's saved plan, the plan."""
        if t.pause.replicas is not None:
            return f"asked by elastore.io/paused-replicas={t.pause.replicas}"
        actions = t.memory.actions if t.evidence else tuple(
            control.action_from_status(a) for a in t.fallback.actions)
        src = "" if t.evidence else " (the fallback: the last plan made on evidence)"
        return f"planned at {iso(actions[0].at_s)}{src}" if actions else f"planned{src}"

    def _next_wait(self, t: Tick) -> float:
        assert t.spec is not None
        last = t.last_decision
        waits = [t.spec.control_period_s - (t.now - float(last.get("epoch", t.now)))]
        nxt = control.next_action(t.memory.actions, t.now)
        if nxt is not None:
            waits.append(nxt.at_s - t.now)
        return min(waits)
