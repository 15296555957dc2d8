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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from elastore.actuators import swiftring
from elastore.actuators.ports import (
    MANAGED_LABEL,
    SWIFT_RINGS_LABEL,
    ClusterPort,
    DatacenterFacts,
    DatacenterPort,
    DriftError,
    StatefulSetFacts,
    SwiftPort,
)
from elastore.actuators.swiftring import Misplaced
from elastore.errors import ElastoreError, MetricsError
from elastore.models.bundle import ModelSet
from elastore.operator import (
    bandwidth,
    calibration,
    control,
    controls,
    dcoperation,
    operation,
    swiftoperation,
    swiftpods,
)
from elastore.operator import interference as hubbub
from elastore.operator.metrics import (
    MetricsSource,
    PrometheusSource,
    Reader,
    Snapshot,
    resolve_credentials,
)
from elastore.operator.ringcheck import decommission_refusal
from elastore.operator.runtime import DEFAULT_NODETOOLS
from elastore.operator.spec import DATACENTER, PolicySpec, SpecError, parse
from elastore.operator.status import PolicyStore, condition, iso, set_condition
from elastore.operator.telemetry import OperatorMetrics
from elastore.planner import behavior
from elastore.planner.types import Operation

log = logging.getLogger("elastore.operator")

POLL_S = 5.0  # while an operation runs
#: an annotation on a policy: stop the operation in progress safely and start no other
ABORT_ANNOTATION = "elastore.io/abort"
RETRY_S = 30.0  # after a failed observation, at most this long until the next try
MAX_PARALLEL_EXECS = 8  # nodetool calls in flight at once (one per pod): throttles, repair reads

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
    #: a CassandraDatacenter target as read (``sts`` is then its sizes, for the shared parts)
    dc: DatacenterFacts | None = None
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

    def pods(self) -> list[str]:
        """The target's pods now: ordinals up to the larger of its replicas and the
        operation's ``toReplicas`` (the operation as this tick leaves it)."""
        assert self.spec is not None and self.sts is not None
        if self.dc is not None:  # cass-operator's pods, as its StatefulSets have them
            return list(self.dc.pods)
        op = self.out["operation"] if "operation" in self.out else \
            self.status.get("operation")
        to = op.get("toReplicas") if isinstance(op, dict) else None
        return bandwidth.pod_names(self.spec.target.name, self.sts.spec_replicas,
                                   to if isinstance(to, int) else None)

    @property
    def last_decision(self) -> dict[str, Any]:
        return dict(self.out.get("lastDecision") or self.status.get("lastDecision") or {})

    def cond(self, ctype: str, status: bool, reason: str, message: str) -> None:
        self.conds = set_condition(self.conds, ctype, status, reason, message, self.now)


def _scaling(kind: str) -> str:
    return "ScalingUp" if kind == "ScaleOut" else "ScalingDown"


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
    #: pod -> (its identity, the stream throttle it got, MiB/s as applied): this process's
    #: own record, never the status, so a restarted operator sets every pod again
    _throttled: dict[str, tuple[str, float]] = field(default_factory=dict, init=False,
                                                     repr=False)
    #: pod -> (its identity, the throttle that failed on it): retried the next period
    _throttle_failed: dict[str, tuple[str, float]] = field(default_factory=dict, init=False,
                                                           repr=False)
    #: the stream throttle this process decided last (MiB/s, as asked)
    _stream_mibps: float | None = field(default=None, init=False, repr=False)
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
    #: a Swift target's object partitions -> bytes of a replica, from the last look at its
    #: pods (what a ring change moves is estimated from it)
    _swift_sizes: dict[int, int] = field(default_factory=dict, init=False, repr=False)

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
        if running and t.operation is not None and t.operation.phase == "CleaningUp" and \
                self._scale_out_due(t):
            # cleanup takes hours on large nodes and must not hold a resize (cass-operator
            # #496): a further scale-out supersedes it, and its own cleanup covers every old
            # node again (a cleanup already running finishes in Cassandra)
            old = t.operation
            self._start_step(t)
            now_op = t.out.get("operation") or {}
            if now_op.get("pod") != old.pod:
                self._cleanup_restore(t, old)
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
        if t.spec.target.store == "swift":
            refused = self._swift_port_refusal(t.spec)
            if refused is not None:
                return 60.0, refused
        elif t.spec.enforce and tuple(t.spec.target.nodetool) not in self.nodetools:
            allowed = "; ".join(" ".join(c) for c in self.nodetools)
            return 60.0, ("NodetoolNotAllowed", f"spec.target.nodetool "
                          f"{list(t.spec.target.nodetool)} is not one of the commands this "
                          f"operator runs ({allowed}; `elastore operator run --nodetool`, "
                          "the chart's nodetool.allowed): nothing is done")
        if t.spec.target.kind == DATACENTER:
            if not isinstance(self.kube, DatacenterPort):
                return 60.0, ("TargetNotSupported", "this operator's cluster port cannot read "
                                                    "CassandraDatacenters")
            t.dc = self.kube.datacenter(self.namespace, t.spec.target.name)
            if t.dc is None:
                msg = (f"CassandraDatacenter {self.namespace}/{t.spec.target.name} not found "
                       "(is cass-operator's CRD installed?)")
                return min(t.spec.control_period_s, RETRY_S), ("TargetNotFound", msg)
            d = t.dc
            t.sts = StatefulSetFacts(d.name, d.size, d.ready_pods, len(d.pods), None,
                                     d.volume_bytes, d.managed, d.owner)
            up, down = dcoperation.step_sizes(d.size, len(d.racks))
            t.out["datacenter"] = {"racks": list(d.racks), "size": d.size,
                                   "readyPods": d.ready_pods, "stepUp": up, "stepDown": down,
                                   "cassOperator": dcoperation.busy(d) or "Ready"}
        else:
            t.sts = self.kube.statefulset(self.namespace, t.spec.target.name)
        if t.sts is None:
            msg = f"StatefulSet {self.namespace}/{t.spec.target.name} not found"
            return min(t.spec.control_period_s, RETRY_S), ("TargetNotFound", msg)
        self._current(t, t.sts)
        if t.spec.enforce:
            self._guard(t)
        return None

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
            others = self.kube.datacenter_contenders(self.namespace, sts.name, self.name) \
                if isinstance(self.kube, DatacenterPort) and t.dc is not None else \
                self.kube.contenders(self.namespace, sts.name, self.name)
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

    def _reject(self, t: _Tick, op: operation.OperationState, why: str
                ) -> tuple[operation.OperationState, bool]:
        """The operation in the status claims what the store does not bear out: the
        ``Conflict`` condition (``StatusRejected``, an Event when new), no effect; the
        status keeps the operation as it was (a human aborts it, or the store catches up)."""
        t.blocked = ("StatusRejected", f"the operation in the status is not borne out by the "
                                       f"cluster: {why}; touching nothing")
        self._conflict(t)
        t.cond(_scaling(op.kind), True, "Blocked",
               f"{op.kind} {op.from_replicas} -> {op.to_replicas} held: {t.blocked[1]}")
        t.out["operation"] = op.to_status()
        return op, False

    def _mark_pvc(self, t: _Tick, op: operation.OperationState) -> None:
        """The evidence a later PVC deletion trusts: this operation saw the PVC's node (or
        its data) leave; the mark names the operation and the PVC's UID."""
        if not op.pvc or op.id is None:
            return
        got = self.kube.pvc_mark(self.namespace, op.pvc)
        if got is not None:
            self.kube.mark_pvc(self.namespace, op.pvc,
                               operation.pvc_mark(self.name, iso(t.now), op.id, got[0]))

    def _pvc_facts(self, op: operation.OperationState) -> tuple[bool | None, bool]:
        """In a scale-in's Cleanup: whether its PVC exists, and whether it carries this
        operation's own mark on this very PVC."""
        if not op.pvc or op.phase != "Cleanup":
            return None, False
        got = self.kube.pvc_mark(self.namespace, op.pvc)
        if got is None:
            return False, False
        uid, value = got
        return True, operation.mark_honoured(value, op.id, uid)

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
        if t.blocked is None:
            floor = max(t.spec.min_replicas, t.spec.target.replication_factor)
            try:
                if t.dc is not None:
                    dcoperation.check_identity(op, t.spec.target.name, len(t.dc.racks), floor)
                else:
                    operation.check_identity(op, t.spec.target.name, t.sts.pvc_template, floor)
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
        new, done = self._advance_dc(t, op) if t.dc is not None else self._advance(t, op)
        t.operation = None if done else new
        if not done:
            return True
        if t.dc is None:
            sts = self.kube.statefulset(self.namespace, t.spec.target.name)
            self._current(t, sts or t.sts)
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
        if t.dc is not None:
            left = (f"spec.size stays {t.dc.size}: cass-operator carries on with it; set it "
                    "back by hand if that is not wanted")
        elif op.kind == "ScaleOut" and t.spec is not None and t.spec.target.store == "swift":
            left = (f"the StatefulSet stays at {t.sts.spec_replicas if t.sts else '?'}; "
                    f"{op.pod}'s device stays in the rings if it was added (the replicators "
                    "finish moving its share)")
        elif op.kind == "ScaleOut" and op.cleanup_ordinal is not None:
            left = (f"{op.pod} had joined; the old nodes from {op.cleanup_pod()} on may keep "
                    "data they no longer own (a cleanup already running there finishes): run "
                    "nodetool cleanup on them before any scale-in")
            self._cleanup_restore(t, op)
        elif op.kind == "ScaleOut":
            left = (f"the StatefulSet stays at {t.sts.spec_replicas if t.sts else '?'}; "
                    f"{op.pod} finishes joining by itself")
        elif op.phase in ("Draining", "Removing"):
            left = (f"{op.pod}'s device keeps the weight it has in the rings (0 once drained: "
                    "swift-ring-builder set_weight restores it) and its pod stays")
        elif op.phase in ("Decommissioning", "Stuck") and op.decommission_issued_s is None:
            left = f"{op.pod} was never decommissioned"
        elif op.phase in ("Decommissioning", "Stuck"):
            left = (f"the decommission of {op.pod} is not re-issued; if its node is LEAVING "
                    "Cassandra finishes it, and its pod stays until you lower the replicas")
        else:
            left = f"{op.pod} had left the ring; lower the replicas to {op.to_replicas} by hand"
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
        scale-in starts until every node reports."""
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
        if spec.target.store == "swift" and not math.isfinite(snap.data_bytes):
            snap = replace(snap, data_bytes=self._swift_disk_bytes(spec, replicas))
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
        """The stream throttle in force, on every ready pod of the target that has not got
        it from this process (Enforce mode, Cassandra): after a change of rate, on a new or
        restarted pod, and on every pod after the operator restarted. One call per pod: a
        pod whose call fails is retried the next period; the others keep theirs. Every
        pod's identity is read once a period (a restart is seen then); between periods
        (every few seconds while an operation runs) only the pods without the rate."""
        from elastore.actuators.nodetool import stream_setting

        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        if not spec.enforce or spec.target.store != "cassandra" or t.blocked is not None:
            return
        rate = t.stream_mibps if t.stream_mibps is not None else self._stream_mibps
        if rate is None:  # a restarted operator: the rate its predecessor set, within bounds
            prev = t.status.get("migrationMiBps")
            if not isinstance(prev, int | float) or isinstance(prev, bool):
                return
            rate = float(prev)
        rate = min(max(rate, spec.min_migration_mibps), spec.max_migration_mibps)
        self._stream_mibps = rate
        _, applied = stream_setting(rate)
        t.out["migrationMiBps"] = applied
        pods = t.pods()
        for gone in set(self._throttled) - set(pods):
            del self._throttled[gone]
        for gone in set(self._throttle_failed) - set(pods):
            del self._throttle_failed[gone]
        done: list[str] = []
        failed: list[str] = []
        waiting: list[str] = []
        todo: list[tuple[str, str]] = []  # (pod, its identity)
        for pod in pods:
            if not t.period:  # between periods only the pods without this rate are read
                if self._throttled.get(pod, ("", -1.0))[1] == applied:
                    continue
                if self._throttle_failed.get(pod, ("", -1.0))[1] == applied:
                    failed.append(pod)  # retried the next period
                    continue
            try:
                ident = self.kube.pod_identity(self.namespace, pod, spec.target.container)
            except ElastoreError as exc:
                log.warning("%s/%s: %s", self.namespace, self.name, exc)
                ident = None
            if ident is None:  # absent, not running or not ready: set once it is
                waiting.append(pod)
                continue
            if self._throttled.get(pod) != (ident, applied):
                todo.append((pod, ident))
        for (pod, ident), err in zip(todo, self._set_throttles(spec, [p for p, _ in todo], rate),
                                     strict=True):
            if err is not None:
                self._throttle_failed[pod] = (ident, applied)
                failed.append(pod)
                self.policies.event(t.body, "ThrottleFailed", err, warning=True)
                continue
            self._throttle_failed.pop(pod, None)
            self._throttled[pod] = (ident, applied)
            done.append(pod)
        if done:
            self.policies.event(t.body, "Throttle", f"stream throughput {applied:.3f} MiB/s on "
                                                    f"{', '.join(done)}")
        if failed:
            t.cond("Throttling", False, "ThrottleFailed",
                   f"setstreamthroughput {applied:.3f} MiB/s failed on {', '.join(failed)} "
                   "(retried the next period); the Event ThrottleFailed says why")
            return
        ready = len(pods) - len(waiting)
        msg = f"migration at {applied:.3f} MiB/s per node on {ready} of {len(pods)} pod(s)"
        if waiting:
            msg += f"; {', '.join(waiting)} not ready: set once ready"
        t.cond("Throttling", applied < spec.max_migration_mibps, "Throttle", msg)

    def _set_throttles(self, spec: PolicySpec, pods: list[str], rate: float
                       ) -> list[str | None]:
        """One ``setstreamthroughput`` per pod, all at once: each is an exec that starts a
        JVM (seconds each on a busy node), and one after another they held a tick for 20 s
        and a planned scale-out waited behind them. Per pod: None, or why it failed."""
        def one(pod: str) -> str | None:
            try:
                self.kube.set_stream_throughput(self.namespace, [pod], spec.target.container,
                                                spec.target.nodetool, rate)
            except ElastoreError as exc:
                return str(exc)
            return None

        if len(pods) <= 1:
            return [one(p) for p in pods]
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_EXECS, len(pods)),
                                thread_name_prefix="throttle") as pool:
            return list(pool.map(one, pods))

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
        step_to: int | None = None
        if t.dc is not None and target != sts.spec_replicas:
            # rack-balanced steps: up to the next multiple of the racks as soon as the plan
            # wants more; down only once the plan wants the next multiple below (or less)
            up, down = dcoperation.step_sizes(sts.spec_replicas, len(t.dc.racks))
            held = None if named is not None else dcoperation.step_down_held(
                target, sts.spec_replicas, down, t.memory.recent_desired, t.now,
                spec.stabilization_s)
            if target > sts.spec_replicas:
                step_to = up
            elif held is None:
                step_to = down
            else:
                t.cond("ScalingUp", False, "Idle", "no change under way")
                t.cond("ScalingDown", False, "RackStep", f"{held} ({len(t.dc.racks)} "
                                                          "rack(s))")
                t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode "
                                               f"{spec.mode}")
                return False
        if target == sts.spec_replicas:
            for ctype in ("ScalingUp", "ScalingDown"):
                t.cond(ctype, False, "Idle", "no change under way")
            t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode {spec.mode}")
            return False
        kind: Literal["ScaleOut", "ScaleIn"] = "ScaleOut" if target > sts.spec_replicas \
            else "ScaleIn"
        ctype = _scaling(kind)
        wants = "paused-replicas asks for" if named is not None else "the plan wants"
        limited = None if named is not None else self._behavior_limit(t, target, now)
        if not spec.enforce:
            step = "" if step_to is None else \
                f"; the rack-balanced step is {sts.spec_replicas} -> {step_to}"
            t.cond(ctype, False, "Recommend", f"{wants} {target} replicas now{step} "
                                              "(mode Recommend: nothing is changed)")
        elif t.pause.on and named is None:
            t.cond(ctype, False, "Paused", f"the plan wants {target} replicas now; "
                                           f"{t.pause.message}")
        elif not t.evidence and named is None and not (fallback and kind == "ScaleOut"):
            t.cond(ctype, False, "NoEvidence", "the last observation failed: no action")
        elif limited is not None:
            t.cond(ctype, False, "BehaviorLimit", limited)
        elif t.blocked is not None:
            t.cond(ctype, False, t.blocked[0], t.blocked[1])
        elif (why := self._aborting(t)) is not None:
            t.cond(ctype, False, "Aborted", f"no step starts: {why}")
        elif kind == "ScaleIn" and named is None and (partial := self._partial(t)) is not None:
            t.cond(ctype, False, *partial)
        elif kind == "ScaleIn" and named is None and \
                (learning := self._learning_gate(t)) is not None:
            t.cond(ctype, False, "ModelLearning", learning)
        elif t.dc is not None and (busy := dcoperation.busy(t.dc)) is not None:
            t.cond(ctype, False, "DatacenterBusy", f"the plan wants {step_to} replicas; no "
                                                   f"step while {busy}")
        elif (repair := self._repair_hold(t, kind)) is not None:
            t.cond(ctype, False, "RepairRunning", repair)
        elif (refused := self._refuse(spec, sts, kind, step_to,
                                      t.dc.pods[0] if t.dc and t.dc.pods else "")) is not None:
            t.cond(ctype, False, "Refused", refused)
            self.policies.event(t.body, f"{kind}Refused", refused, warning=True)
        else:
            t.ring_checked = kind == "ScaleIn"
            if t.dc is not None and step_to is not None:
                self._begin_dc(t, kind, step_to)
            else:
                self._begin(t, kind)
            return True
        t.cond("Ready", True, "Ready", f"{sts.spec_replicas} replicas; mode {spec.mode}")
        return False

    def _repair_hold(self, t: _Tick, kind: str) -> str | None:
        """Why no topology change starts now: a repair running on a node (it stalls or fails
        with one: cassandra-reaper #1367, #1220), unless the forecast puts the SLO at risk
        at the size there is (then it starts, said in a RepairOverridden Event). A node whose
        repairs cannot be read holds it too: unknown is not "none"."""
        spec = t.spec
        assert spec is not None
        if not spec.hold_for_repairs or spec.target.store != "cassandra":
            return None
        pods = [pod for pod in (list(t.dc.pods) if t.dc is not None else t.pods())
                # not running: nothing to ask (a decommission checks the ring)
                if t.dc is not None or self.kube.pod(self.namespace, pod)[1]]

        def ask(pod: str) -> str | None:
            try:
                return self.kube.repair_running(self.namespace, pod, spec.target.container,
                                                spec.target.nodetool)
            except ElastoreError as exc:
                return f"its repairs could not be read ({str(exc)[:200]})"

        # every node at once: each read is a nodetool run (a JVM start, seconds on a busy
        # node), and one after another they delayed a step past its planned time (20 s
        # for 3 nodes in the lab)
        with ThreadPoolExecutor(max_workers=max(1, min(len(pods), MAX_PARALLEL_EXECS))) as pool:
            answers = list(pool.map(ask, pods))
        seen = [f"{pod}: {said}" for pod, said in zip(pods, answers, strict=True)
                if said is not None]
        if not seen:
            return None
        what = "; ".join(seen)
        if kind == "ScaleOut" and self._slo_risk:
            self.policies.event(t.body, "RepairOverridden",
                                f"a scale-out starts during a repair ({what}): the forecast "
                                f"puts the SLO at risk at {t.sts.spec_replicas if t.sts else '?'}"
                                " replicas", warning=True)
            return None
        return f"a repair is running ({what}); no topology change starts until it ends" + \
            ("" if kind == "ScaleIn" else " or the forecast puts the SLO at risk")

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

    def _begin(self, t: _Tick, kind: Literal["ScaleOut", "ScaleIn"]) -> None:
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        data = (t.status.get("observed") or {}).get("dataBytes")
        rate = t.out.get("migrationMiBps", t.status.get("migrationMiBps"))
        expected = operation.expected_seconds(
            kind, sts.spec_replicas, None if data is None else float(data),
            float(rate) if rate is not None else spec.min_migration_mibps,
            spec.node_overhead_s, cleanup=spec.cleanup)
        # started when it starts: the tick may have waited on the cluster since t.now
        new = operation.start(kind, spec.target.name, sts.spec_replicas,
                              max(t.now, self.clock()), expected, sts.pvc_template,
                              spec.target.store)
        t.cond(_scaling(kind), True, f"{kind}Started",
               f"{sts.spec_replicas} -> {new.to_replicas}: {new.pod}")
        t.out["operation"] = new.to_status()
        t.out["scaleEvents"] = [list(e) for e in behavior.record(
            self._scale_events(t), new.started_s, new.to_replicas - sts.spec_replicas)]
        t.out["conditions"] = t.conds
        self.policies.patch_status(self.namespace, self.name, t.out)  # intent first
        self.policies.event(t.body, f"{kind}Started",
                            f"{sts.spec_replicas} -> {new.to_replicas} replicas ({new.pod}), "
                            f"{self._why_now(t)}")
        if self.telemetry is not None:
            self.telemetry.actions.labels(self.namespace, self.name, kind).inc()
        self._advance(t, new)

    @staticmethod
    def _why_now(t: _Tick) -> str:
        """What asked for the step: paused-replicas, the fallback's saved plan, the plan."""
        if t.pause.replicas is not None:
            return f"asked by elastore.io/paused-replicas={t.pause.replicas}"
        actions = t.memory.actions if t.evidence else tuple(
            control.action_from_status(a) for a in t.fallback.actions)
        src = "" if t.evidence else " (the fallback: the last plan made on evidence)"
        return f"planned at {iso(actions[0].at_s)}{src}" if actions else f"planned{src}"

    def _begin_dc(self, t: _Tick, kind: Literal["ScaleOut", "ScaleIn"], to: int) -> None:
        """A datacenter's step: the intent in the status, then ``spec.size``."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        data = (t.status.get("observed") or {}).get("dataBytes")
        rate = t.out.get("migrationMiBps", t.status.get("migrationMiBps"))
        expected = dcoperation.expected_step_seconds(
            kind, sts.spec_replicas, to, None if data is None else float(data),
            float(rate) if rate is not None else spec.min_migration_mibps,
            spec.node_overhead_s)
        new = dcoperation.start(kind, spec.target.name, sts.spec_replicas, to,
                                max(t.now, self.clock()), expected)
        msg = (f"{sts.spec_replicas} -> {to} replicas (CassandraDatacenter "
               f"{spec.target.name}, {len(t.dc.racks) if t.dc else 1} rack(s)), "
               f"{self._why_now(t)}; expected to take {expected:.0f} s")
        t.cond(_scaling(kind), True, f"{kind}Started", msg)
        t.out["operation"] = new.to_status()
        t.out["scaleEvents"] = [list(e) for e in behavior.record(
            self._scale_events(t), new.started_s, to - sts.spec_replicas)]
        t.out["conditions"] = t.conds
        self.policies.patch_status(self.namespace, self.name, t.out)  # intent first
        self.policies.event(t.body, f"{kind}Started", msg)
        if self.telemetry is not None:
            self.telemetry.actions.labels(self.namespace, self.name, kind).inc()
        self._advance_dc(t, new)

    def _advance_dc(self, t: _Tick, op: operation.OperationState
                    ) -> tuple[operation.OperationState, bool]:
        """One step of a datacenter's resize (:mod:`elastore.operator.dcoperation`): the
        state is written before its effect, as for a node step."""
        spec, dc, sts = t.spec, t.dc, t.sts
        assert spec is not None and dc is not None and sts is not None and \
            isinstance(self.kube, DatacenterPort)
        unfit = None
        if op.kind == "ScaleIn" and op.phase == "Resizing" and dc.size == op.from_replicas \
                and not t.ring_checked:
            # read from the status: the size is lowered only on the checks a new step has
            # (cass-operator's own conditions, the floor, the ring and the space)
            unfit = dcoperation.busy(dc) or self._refuse_dc(
                spec, sts, op.kind, op.to_replicas, dc.pods[0] if dc.pods else "")
        new, effect, done = dcoperation.advance(op, dc, t.now, unfit)
        ctype = _scaling(op.kind)
        if effect == "reject":
            return self._reject(t, op, new.message)
        if effect == "stuck" or new.phase == "Stuck":
            if effect == "stuck":
                self.policies.event(t.body, "OperationStuck", new.message, warning=True)
                self.policies.patch_status(self.namespace, self.name,
                                           {"operation": new.to_status()})
            t.cond(ctype, True, "Stuck", new.message)
            t.out["operation"] = new.to_status()
            return new, False
        if effect == "conflict":
            t.blocked = ("Drift", new.message)
            self._conflict(t)
            t.cond(ctype, True, "Blocked", new.message)
            t.out["operation"] = new.to_status()
            return new, False
        t.cond("Conflict", False, "NoConflict", "nothing else changes the target")
        if new.phase != op.phase:
            self.policies.event(t.body, f"{op.kind}{new.phase}", new.message)
        self.policies.patch_status(self.namespace, self.name,
                                   {"operation": None if done else new.to_status()})
        if effect == "resize":
            try:
                self.kube.resize_datacenter(self.namespace, spec.target.name, new.to_replicas,
                                            expect=op.from_replicas)
            except DriftError as exc:
                t.blocked = ("Drift", str(exc))
                self._conflict(t)
                t.out["operation"] = new.to_status()
                return new, False
        t.cond(ctype, not done, f"{op.kind}{new.phase}", new.message)
        t.out["operation"] = None if done else new.to_status()
        if done:
            t.out["currentReplicas"] = dc.size
        return new, done

    def _decommission_refused(self, t: _Tick, op: operation.OperationState, refused: str
                              ) -> tuple[operation.OperationState, bool]:
        """The ring is not fit for the decommission the operation is about to issue. Never
        issued yet: the step is given up (nothing was done). A re-issue: Stuck."""
        kind = _scaling(op.kind)
        if op.decommission_issued_s is None:
            msg = f"{op.kind} {op.from_replicas} -> {op.to_replicas} given up before its " \
                  f"decommission: {refused}"
            self.policies.event(t.body, "ScaleInRefused", msg, warning=True)
            self.policies.patch_status(self.namespace, self.name, {"operation": None})
            t.cond(kind, False, "Refused", msg)
            t.out["operation"] = None
            return op, True
        stuck = replace(op, phase="Stuck", updated_s=t.now,
                        message=f"the decommission of {op.pod} is not re-issued: {refused}")
        self.policies.event(t.body, "OperationStuck", stuck.message, warning=True)
        self.policies.patch_status(self.namespace, self.name,
                                   {"operation": stuck.to_status()})
        t.cond(kind, True, "Stuck", stuck.message)
        t.out["operation"] = stuck.to_status()
        return stuck, False

    def _next_wait(self, t: _Tick) -> float:
        assert t.spec is not None
        last = t.last_decision
        waits = [t.spec.control_period_s - (t.now - float(last.get("epoch", t.now)))]
        nxt = control.next_action(t.memory.actions, t.now)
        if nxt is not None:
            waits.append(nxt.at_s - t.now)
        return min(waits)

    # -- checks and node steps -----------------------------------------------------------------
    def _refuse(self, spec: PolicySpec, sts: StatefulSetFacts, kind: str,
                step_to: int | None = None, reader: str = "") -> str | None:
        """Why a node step (or a datacenter's step to ``step_to``) may not start (None: it
        may). A scale-in reads the ring."""
        if spec.target.store == "swift":
            return self._swift_refusal(spec, sts, kind)
        if step_to is not None:
            return self._refuse_dc(spec, sts, kind, step_to, reader)
        if kind == "ScaleOut":
            if sts.spec_replicas + 1 > spec.max_replicas:
                return f"replicas.max is {spec.max_replicas}"
            return None
        floor = max(spec.min_replicas, spec.target.replication_factor)
        if sts.spec_replicas - 1 < floor:
            return (f"never below max(replicas.min, replicationFactor) = {floor} "
                    f"(now {sts.spec_replicas})")
        if sts.ready_replicas < sts.spec_replicas:
            return f"only {sts.ready_replicas} of {sts.spec_replicas} pods are ready"
        return self._ring_refusal(spec, sts, f"{spec.target.name}-{sts.spec_replicas - 1}")

    def _refuse_dc(self, spec: PolicySpec, sts: StatefulSetFacts, kind: str, to: int,
                   reader: str) -> str | None:
        """A datacenter's step; a scale-in's ring is read through ``reader`` (its first
        pod), for every node the step removes."""
        racks = f"{sts.spec_replicas} -> {to} (a rack-balanced step)"
        if kind == "ScaleOut":
            if to > spec.max_replicas:
                return f"{racks} is above replicas.max {spec.max_replicas}"
            return None
        floor = max(spec.min_replicas, spec.target.replication_factor)
        if to < floor:
            return f"{racks}: never below max(replicas.min, replicationFactor) = {floor}"
        return self._ring_refusal(spec, sts, reader, sts.spec_replicas - to)

    def _ring_refusal(self, spec: PolicySpec, sts: StatefulSetFacts, pod: str,
                      leaving: int = 1) -> str | None:
        """The checks before every decommission, on the cluster as nodetool shows it in the
        leaving pod (:mod:`elastore.operator.ringcheck`); unreadable is a refusal. For a
        datacenter, read through one of its pods, for ``leaving`` nodes."""
        if not pod:
            return "no pod to read the ring through"
        try:
            ring = self.kube.ring(self.namespace, pod, spec.target.container,
                                  spec.target.nodetool)
        except ElastoreError as exc:
            return f"the ring could not be read through {pod}: {exc}"
        refused = decommission_refusal(ring, sts.volume_bytes, spec.min_free_fraction,
                                       spec.compaction_margin, leaving)
        return None if refused is None else f"{pod}: {refused}"

    def _ring_gone(self, spec: PolicySpec, pod: str) -> bool | None:
        """Whether another node's ring no longer lists the node of ``pod`` (its host ID as
        its own ``nodetool info`` gives it); None if either could not be read."""
        other = f"{spec.target.name}-0"
        if pod == other:
            return None
        try:
            me = self.kube.host_id(self.namespace, pod, spec.target.container,
                                   spec.target.nodetool)
            view = self.kube.ring(self.namespace, other, spec.target.container,
                                  spec.target.nodetool)
        except ElastoreError as exc:
            log.warning("%s/%s: the ring could not be read to see %s gone: %s",
                        self.namespace, self.name, pod, exc)
            return None
        return all(n.host_id != me for n in view.nodes)

    def _advance(self, t: _Tick, op: operation.OperationState
                 ) -> tuple[operation.OperationState, bool]:
        """One step of the operation: observe, decide the next state (pure), write it, then
        carry out its effect. Updates ``t.out["operation"]``."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        if spec.target.store == "swift":
            return self._advance_swift(t, op)
        exists, ready = self.kube.pod(self.namespace, op.pod)
        mode = self.kube.node_mode(self.namespace, op.pod, spec.target.container,
                                   spec.target.nodetool) if exists else None
        pvc, marked = self._pvc_facts(op)
        gone = self._ring_gone(spec, op.pod) if op.kind == "ScaleIn" and \
            op.phase in ("Decommissioning", "Scaling") and \
            sts.spec_replicas > op.to_replicas and mode == "DECOMMISSIONED" else None
        failed = self.kube.decommission_failure(self.namespace, op.pod) if \
            op.kind == "ScaleIn" and op.phase == "Decommissioning" and \
            op.decommission_issued_s is not None else None
        said, seen = self._cleanup_facts(t, op)
        facts = operation.Facts(sts.spec_replicas, sts.ready_replicas, exists, ready, mode, pvc,
                                marked, failed, said, seen, gone)
        try:
            new, effect, done = operation.advance(op, facts, t.now, spec.pvc_policy,
                                                  cleanup=spec.cleanup)
        except ElastoreError as exc:
            t.cond(_scaling(op.kind), True, "Stuck", str(exc))
            self.policies.event(t.body, "OperationStuck", str(exc), warning=True)
            t.out["operation"] = op.to_status()
            return op, False
        if effect == "stuck" or new.phase == "Stuck":
            if effect == "stuck":
                self.policies.event(t.body, "OperationStuck", new.message, warning=True)
                if op.phase == "CleaningUp":
                    self._cleanup_restore(t, op)
                self.policies.patch_status(self.namespace, self.name,
                                           {"operation": new.to_status()})
            t.cond(_scaling(op.kind), True, "Stuck", new.message)
            t.out["operation"] = new.to_status()
            return new, False
        if effect == "conflict":
            t.blocked = ("Drift", new.message)
            self._conflict(t)
            t.cond(_scaling(op.kind), True, "Blocked", new.message)
            t.out["operation"] = new.to_status()
            return new, False
        if effect == "reject":
            return self._reject(t, op, new.message)
        t.cond("Conflict", False, "NoConflict", "nothing else changes the target")
        if effect == "decommission" and not t.ring_checked:
            refused = self._ring_refusal(spec, sts, new.pod)
            if refused is not None:
                return self._decommission_refused(t, op, refused)
        if new.phase != op.phase:
            self.policies.event(t.body, f"{op.kind}{new.phase}", new.message)
        # the state first, then the effect: a restart in between repeats nothing harmful
        self.policies.patch_status(self.namespace, self.name,
                                   {"operation": None if done else new.to_status()})
        if op.phase == "Decommissioning" and new.phase == "Scaling":
            self._mark_pvc(t, new)  # seen leaving the ring, by this operation
        if effect == "scale" and op.kind == "ScaleOut" and new.pvc:
            # the ordinal comes back: a mark an earlier scale-in left on its PVC is void
            self.kube.unmark_pvc(self.namespace, new.pvc)
        if effect == "scale":
            try:
                self.kube.scale(self.namespace, spec.target.name, new.to_replicas,
                                expect=op.from_replicas)
            except DriftError as exc:
                t.blocked = ("Drift", str(exc))
                self._conflict(t)
                t.out["operation"] = new.to_status()
                return new, False
        elif effect == "decommission":
            self.kube.start_decommission(self.namespace, new.pod, spec.target.container,
                                         spec.target.nodetool)
        elif effect == "delete-pvc" and new.pvc:
            self.kube.delete_pvc(self.namespace, new.pvc)
        if op.phase == "CleaningUp" and (done or new.cleanup_ordinal != op.cleanup_ordinal):
            self._cleanup_restore(t, op)
        if effect == "cleanup":
            new = self._cleanup_effect(t, new)
        t.cond(_scaling(op.kind), not done, f"{op.kind}{new.phase}", new.message)
        t.out["operation"] = None if done else new.to_status()
        return new, done

    def _cleanup_facts(self, t: _Tick, op: operation.OperationState
                       ) -> tuple[str | None, bool | None]:
        """The cleanup on the node being cleaned: what this process knows of the one it
        issued, and whether the node's compactions show one (read only when this process
        knows nothing: after a restart)."""
        pod = op.cleanup_pod() if op.phase == "CleaningUp" else None
        if pod is None:
            return None, None
        assert t.spec is not None
        said = self.kube.cleanup_state(self.namespace, pod)
        if said is not None:
            return said, None
        return None, self.kube.cleanup_running(self.namespace, pod, t.spec.target.container,
                                               t.spec.target.nodetool)

    def _cleanup_effect(self, t: _Tick, op: operation.OperationState
                        ) -> operation.OperationState:
        """Throttle the node's compactions to the migration rate (its own throttle kept in
        the status first, to put back), then issue its cleanup."""
        from dataclasses import replace

        spec = t.spec
        pod = op.cleanup_pod()
        assert spec is not None and pod is not None
        c, nt = spec.target.container, spec.target.nodetool
        if op.cleanup_restore_mibps is None:
            try:
                before = self.kube.compaction_throughput(self.namespace, pod, c, nt)
            except ElastoreError as exc:
                before = None
                self.policies.event(t.body, "ThrottleFailed", f"the compaction throttle of "
                                    f"{pod} could not be read ({exc}); the cleanup runs at "
                                    "the node's own", warning=True)
            if before is not None:
                op = replace(op, cleanup_restore_mibps=before)
                self.policies.patch_status(self.namespace, self.name,
                                           {"operation": op.to_status()})
        prev = t.status.get("migrationMiBps")
        rate = self._stream_mibps if self._stream_mibps is not None else (
            float(prev) if isinstance(prev, int | float) and not isinstance(prev, bool)
            else spec.max_migration_mibps)
        rate = min(max(rate, spec.min_migration_mibps), spec.max_migration_mibps)
        if op.cleanup_restore_mibps is not None:
            try:
                got = self.kube.set_compaction_throughput(self.namespace, pod, c, nt, rate)
                op = replace(op, message=op.message + f" at {got:g} MiB/s")
            except ElastoreError as exc:
                self.policies.event(t.body, "ThrottleFailed", f"setcompactionthroughput on "
                                    f"{pod}: {exc}", warning=True)
        self.kube.start_cleanup(self.namespace, pod, c, nt)
        self.policies.event(t.body, "CleanupStarted", op.message)
        return op

    def _cleanup_restore(self, t: _Tick, op: operation.OperationState) -> None:
        """Put back the compaction throttle the cleaned node had before its cleanup."""
        pod = op.cleanup_pod()
        assert t.spec is not None
        if pod is None or op.cleanup_restore_mibps is None:
            return
        try:
            self.kube.set_compaction_throughput(self.namespace, pod, t.spec.target.container,
                                                t.spec.target.nodetool,
                                                op.cleanup_restore_mibps)
        except ElastoreError as exc:
            self.policies.event(t.body, "ThrottleFailed", f"{pod}'s compaction throttle "
                                f"could not be put back to {op.cleanup_restore_mibps:g} "
                                f"MiB/s: {exc}", warning=True)

    # -- Swift ---------------------------------------------------------------------------------
    def _swift_port_refusal(self, spec: PolicySpec) -> tuple[str, str] | None:
        """Why this operator cannot work a Swift target at all (None: it can)."""
        if not isinstance(self.kube, SwiftPort):
            return ("TargetNotSupported", "this operator's cluster port cannot read Swift "
                                          "pods and rings")
        prefix = tuple(spec.target.swift.exec_prefix)
        if prefix not in self.exec_prefixes:
            allowed = "; ".join(" ".join(c) or "(none)" for c in self.exec_prefixes)
            return ("ExecPrefixNotAllowed", f"spec.target.swift.execPrefix {list(prefix)} is "
                    f"not one this operator allows ({allowed}; `elastore operator run "
                    "--exec-prefix`): nothing is done")
        return None

    def _swift_pods(self, spec: PolicySpec, replicas: int) -> list[str]:
        return [f"{spec.target.name}-{k}" for k in range(replicas)]

    def _swift_disk_bytes(self, spec: PolicySpec, replicas: int) -> float:
        """The bytes on the target's devices, read in its pods (Swift's exporters have no
        such metric): a pod that cannot be read is ``MetricsMissing``, never 0."""
        assert isinstance(self.kube, SwiftPort)
        try:
            return swiftpods.disk_bytes(self.kube, spec, self.namespace,
                                        self._swift_pods(spec, replicas))
        except ElastoreError as exc:
            raise MetricsError("MetricsMissing", f"dataBytes: the Swift pods' devices could "
                                                 f"not be read: {exc}") from exc

    def _swift_rings(self, spec: PolicySpec) -> tuple[str, swiftring.RingFiles]:
        assert isinstance(self.kube, SwiftPort) and spec.target.swift.ring_configmap
        name = spec.target.swift.ring_configmap
        rv, files, labels = self.kube.read_files(self.namespace, name)
        if labels.get(SWIFT_RINGS_LABEL) != "true":
            raise ElastoreError(f"ConfigMap {self.namespace}/{name} is not labelled "
                                f"{SWIFT_RINGS_LABEL}=true: the operator changes rings only "
                                "where their owner said it may")
        return rv, swiftring.RingFiles(files)

    def _swift_refusal(self, spec: PolicySpec, sts: StatefulSetFacts, kind: str
                       ) -> str | None:
        """Why a Swift node step may not start: the bounds, the rings readable, and for a
        scale-in enough pods left for the rings' replicas and no earlier change still
        moving data (a second change then could move a partition's last good copy)."""
        if kind == "ScaleOut" and sts.spec_replicas + 1 > spec.max_replicas:
            return f"replicas.max is {spec.max_replicas}"
        floor = max(spec.min_replicas, spec.target.replication_factor)
        if kind == "ScaleIn" and sts.spec_replicas - 1 < floor:
            return (f"never below max(replicas.min, replicationFactor) = {floor} "
                    f"(now {sts.spec_replicas})")
        if sts.ready_replicas < sts.spec_replicas:
            return f"only {sts.ready_replicas} of {sts.spec_replicas} pods are ready"
        assert isinstance(self.kube, SwiftPort)
        try:
            _, rings = self._swift_rings(spec)
            replicas = rings.replicas()
            if kind == "ScaleOut":
                return None
            if sts.spec_replicas - 1 < replicas:
                return (f"the rings keep {replicas:g} replicas: {sts.spec_replicas - 1} "
                        "pods cannot hold them apart")
            view = swiftpods.observe(self.kube, spec, self.namespace,
                                     self._swift_pods(spec, sts.spec_replicas), rings)
        except ElastoreError as exc:
            return f"the rings or the pods could not be read: {exc}"
        if view.lagging:
            return f"{', '.join(view.lagging)} do not have the current rings yet"
        if view.progress is None:
            return view.why
        busy = [k for k, m in view.progress.items() if not m.done]
        if busy:
            return f"an earlier ring change is still moving data ({', '.join(busy)})"
        return None

    def _swift_facts(self, t: _Tick, op: operation.OperationState) -> swiftoperation.SwiftFacts:
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None and isinstance(self.kube, SwiftPort)
        exists, ready = self.kube.pod(self.namespace, op.pod)
        ip = self.kube.pod_ip(self.namespace, op.pod) if exists else None
        pvc, marked = self._pvc_facts(op)
        weight = parts = None
        lagging: tuple[str, ...] | None = None
        progress: dict[str, Misplaced] | None = None
        why = ""
        lowering = op.kind == "ScaleIn" and op.phase == "Scaling" and \
            sts.spec_replicas > op.to_replicas  # the rings must show the device gone
        if op.phase in ("Joining", "Draining", "Removing") or lowering:
            try:
                _, rings = self._swift_rings(spec)
                dev = None if ip is None else \
                    rings.table("object").get(f"{ip}/{spec.target.swift.device}")
                if dev is not None:
                    weight, parts = dev
                n = op.to_replicas if op.kind == "ScaleOut" else op.from_replicas
                view = swiftpods.observe(self.kube, spec, self.namespace,
                                         self._swift_pods(spec, n), rings)
                lagging, progress, why = view.lagging, view.progress, view.why
                self._swift_sizes = view.sizes
                t.out["swift"] = {"diskBytes": view.disk_bytes, "laggingPods": list(lagging),
                                  "outOfPlace": None if progress is None else {
                                      k: {"handoffs": m.handoffs, "missing": m.missing,
                                          "handoffBytes": m.handoff_bytes}
                                      for k, m in progress.items()}}
            except ElastoreError as exc:
                why = str(exc)
        return swiftoperation.SwiftFacts(sts.spec_replicas, exists, ready, ip, weight, parts,
                                         lagging, progress, why, pvc, marked)

    def _ring_change(self, t: _Tick, op: operation.OperationState, effect: str
                     ) -> operation.OperationState:
        """Carry out a ring effect on the ConfigMap (read, change a copy, rebalance, write
        it back only if nobody wrote it meanwhile), and re-estimate the operation's end by
        the migration-time model from what the change moves."""
        spec = t.spec
        assert spec is not None and isinstance(self.kube, SwiftPort)
        sw = spec.target.swift
        assert sw.ring_configmap
        ip = self.kube.pod_ip(self.namespace, op.pod)
        if ip is None:
            raise ElastoreError(f"{op.pod} has no IP: its device cannot be found in the rings")
        zone = int(op.pod.rsplit("-", 1)[1]) + 1
        rv, rings = self._swift_rings(spec)
        if not self._swift_sizes:  # what the partitions weigh: a look before the change
            with contextlib.suppress(ElastoreError):
                self._swift_sizes = swiftpods.observe(
                    self.kube, spec, self.namespace,
                    self._swift_pods(spec, max(op.from_replicas, op.to_replicas)), rings).sizes

        op_name = {"ring-add": "add", "ring-drain": "weight", "ring-remove": "remove"}[effect]
        new, rebalanced = rings.change([{"op": op_name, "ip": ip, "device": sw.device,
                                         "zone": zone,
                                         "weight": sw.weight if effect == "ring-add" else 0}])
        self.kube.write_files(self.namespace, sw.ring_configmap, rv, dict(new.files))
        moved = swiftring.moves(rings.assignment("object"), new.assignment("object"),
                                self._swift_sizes)
        rate = t.out.get("migrationMiBps", t.status.get("migrationMiBps"))
        mibps = float(rate) if rate is not None else spec.min_migration_mibps
        secs = moved.seconds(mibps, spec.node_overhead_s)
        what = ", ".join(f"{r.kind} {r.reassigned}" for r in rebalanced)
        msg = (f"{op.message}; rings changed (partition replicas reassigned: {what}); "
               f"{moved.total_bytes / 2**20:.1f} MiB to move, the busiest node "
               f"{max(moved.max_send_bytes, moved.max_receive_bytes) / 2**20:.1f} MiB at "
               f"{mibps:g} MiB/s: expected {secs:.0f} s")
        self.policies.event(t.body, "RingChanged", msg[:1000])
        now = max(t.now, self.clock())
        deadline = now + operation.DEADLINE_FACTOR * secs + operation.DEADLINE_MARGIN_S
        return replace(op, message=msg, expected_end_s=now + secs,
                       deadline_s=max(op.deadline_s or 0.0, deadline))

    def _advance_swift(self, t: _Tick, op: operation.OperationState
                       ) -> tuple[operation.OperationState, bool]:
        """One step of a Swift node step (:mod:`elastore.operator.swiftoperation`): observe,
        decide (pure), write the state, then carry out its effect."""
        spec, sts = t.spec, t.sts
        assert spec is not None and sts is not None
        ctype = _scaling(op.kind)
        try:
            facts = self._swift_facts(t, op)
            new, effect, done = swiftoperation.advance(op, facts, t.now, spec.pvc_policy)
        except ElastoreError as exc:
            t.cond(ctype, True, "Stuck", str(exc))
            self.policies.event(t.body, "OperationStuck", str(exc), warning=True)
            t.out["operation"] = op.to_status()
            return op, False
        if effect == "stuck" or new.phase == "Stuck":
            if effect == "stuck":
                self.policies.event(t.body, "OperationStuck", new.message, warning=True)
                self.policies.patch_status(self.namespace, self.name,
                                           {"operation": new.to_status()})
            t.cond(ctype, True, "Stuck", new.message)
            t.out["operation"] = new.to_status()
            return new, False
        if effect == "conflict":
            t.blocked = ("Drift", new.message)
            self._conflict(t)
            t.cond(ctype, True, "Blocked", new.message)
            t.out["operation"] = new.to_status()
            return new, False
        if effect == "reject":
            return self._reject(t, op, new.message)
        t.cond("Conflict", False, "NoConflict", "nothing else changes the target")
        if new.phase != op.phase:
            self.policies.event(t.body, f"{op.kind}{new.phase}", new.message)
        # the state first, then the effect: every effect is idempotent given the facts (a
        # device already in the rings is not added again; a weight already 0 stays 0)
        self.policies.patch_status(self.namespace, self.name,
                                   {"operation": None if done else new.to_status()})
        if op.phase in swiftoperation.BEFORE_SCALING and new.phase == "Scaling":
            self._mark_pvc(t, new)  # its data seen gone, by this operation
        if effect == "scale" and op.kind == "ScaleOut" and new.pvc:
            self.kube.unmark_pvc(self.namespace, new.pvc)  # the ordinal comes back
        try:
            if effect == "scale":
                self.kube.scale(self.namespace, spec.target.name, new.to_replicas,
                                expect=op.from_replicas)
            elif effect in ("ring-add", "ring-drain", "ring-remove"):
                new = self._ring_change(t, new, effect)
                self.policies.patch_status(self.namespace, self.name,
                                           {"operation": new.to_status()})
            elif effect == "delete-pvc" and new.pvc:
                self.kube.delete_pvc(self.namespace, new.pvc)
        except DriftError as exc:
            t.blocked = ("Drift", str(exc))
            self._conflict(t)
            t.out["operation"] = new.to_status()
            return new, False
        except ElastoreError as exc:  # a ring change that failed: said, retried next tick
            msg = f"{effect} failed (retried): {exc}"
            t.cond(ctype, True, f"{op.kind}{new.phase}", msg[:1000])
            self.policies.event(t.body, "RingChangeFailed", msg[:1000], warning=True)
            t.out["operation"] = new.to_status()
            return new, False
        t.cond(ctype, not done, f"{op.kind}{new.phase}", new.message[:1000])
        t.out["operation"] = None if done else new.to_status()
        return new, done
