"""One ElasticPolicy's loop, one tick at a time: read, decide, admit, apply, record. The
runner only orchestrates; each part lives in its own room:

* the target is read, and every step carried out, by the policy's **store driver**
  (:mod:`elastore.stores`: Cassandra, cass-operator, Swift), which sees every irreversible
  effect's precondition in the store itself;
* a **control period** (:mod:`elastore.operator.period`) observes the metrics, estimates
  the models and decides the plan (pure: :mod:`elastore.operator.policyloop`), and publishes
  it;
* the **steps** (:mod:`elastore.operator.stepping`): the one in progress is advanced, or the
  next is admitted (the pure gates of :mod:`elastore.planner.admission`, then the driver's
  checks) and begun.

A tick, in order:

1. :meth:`Runner._read` the policy and its target (a bad spec, a target no driver serves or
   the operator may not work, or a missing target is ``Degraded``), and whether Enforce may
   touch it at all (``Conflict``);
2. the operation in progress is advanced first; its new state is written to the status
   *before* its effect is carried out, so a restart finds it;
3. a control period when one is due (missing metrics: ``Degraded``, no plan, no action);
4. the store's migration throttle kept on its pods, and the next step if the plan (or
   ``paused-replicas``) wants one now; a scale-out that is due starts before the throttle
   calls, so its pod boots while they run.

``tick`` returns the seconds until it next needs to run: the next planned action, the next
period, or a short poll while an operation runs.

**The API server not answering** (connection refused or reset, a timeout: it restarts, or
the network to it fails) is not a bug and not a failed tick for kopf to back off from: the
tick is retried after ``POLL_S`` (after ``UNANSWERED_FAST`` such ticks in a row, every
``UNANSWERED_SLOW_S``), with a warning. Whatever the tick had done is re-derived from the
status and the store by the next one (a step's state is written before its effect). Before
issue 39 it escaped as an arbitrary exception: kopf restarted the daemon only after its
30-s backoff (the operator's first successful tick came 18 s after a restarted API server
was ready), and a blip in the middle of a tick was said as an ``InternalError``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elastore.actuators.ports import MANAGED_LABEL, ClusterPort, StatefulSetFacts
from elastore.errors import ElastoreError, StatusConflict
from elastore.models.bundle import ModelSet
from elastore.operator import bandwidth, controls, policyloop, rebalancing, stepping, volumes
from elastore.operator.conditions import condition
from elastore.operator.metrics import MetricsSource, prometheus_source
from elastore.operator.period import RETRY_S, ControlPeriod
from elastore.operator.policyapi import PolicyStore
from elastore.operator.runtime import DEFAULT_NODETOOLS
from elastore.operator.spec import PolicySpec, SpecError, parse
from elastore.operator.telemetry import OperatorMetrics
from elastore.operator.tick import Tick
from elastore.stores import entry, operation
from elastore.stores.base import Allowed, StoreCall, StoreDriver
from elastore.stores.registry import driver_class, served

log = logging.getLogger("elastore.operator")

POLL_S = 5.0  # while an operation runs
#: ticks in a row the API server may not answer before the retries slow down (a minute)
UNANSWERED_FAST = 12
UNANSWERED_SLOW_S = 30.0


def api_unanswered(exc: BaseException) -> bool:
    """The Kubernetes client got no answer from the API server (urllib3's transport errors:
    refused, reset, timed out), as opposed to an answer it did not like (``ApiException``,
    which the ports turn into :class:`ElastoreError`)."""
    from urllib3.exceptions import HTTPError

    return isinstance(exc, HTTPError)

Conditions = list[dict[str, Any]]


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
    #: the directories a policy's paths in pods may lie under (Swift's ringDir, devicesDir)
    pod_paths: tuple[str, ...] = Allowed.pod_paths
    #: the policy's store driver, by driver name (one per policy: what it remembers, the
    #: pods it throttled, is this policy's)
    _drivers: dict[str, StoreDriver] = field(default_factory=dict, init=False, repr=False)
    #: ticks in a row the API server did not answer
    _unanswered: int = field(default=0, init=False, repr=False)
    period: ControlPeriod = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.period = ControlPeriod(self)

    # ------------------------------------------------------------------------------------------
    def write_status(self, t: Tick, patch: dict[str, Any]) -> None:
        """A status write of this tick, made only if the policy is still as the tick read
        it (or as its own writes left it): a second replica that believes it leads (kopf's
        peering has no fencing), or a person, cannot have its record overwritten by this
        tick's stale view, nor this tick act on a state it could not record."""
        t.version = self.policies.patch_status(self.namespace, self.name, patch,
                                               expect_version=t.version)

    def tick(self) -> float:
        try:
            wait = self._tick()
        except StatusConflict as exc:
            # another writer since this tick read the policy: its view is stale, and what
            # it would have recorded was not acted on. Read again soon.
            log.warning("%s/%s: %s; this tick's result is dropped and the tick runs again "
                        "in %.0f s", self.namespace, self.name, exc, POLL_S)
            return POLL_S
        except Exception as exc:
            if not api_unanswered(exc):
                raise
            self._unanswered += 1
            wait = POLL_S if self._unanswered <= UNANSWERED_FAST else UNANSWERED_SLOW_S
            log.warning("%s/%s: the Kubernetes API server did not answer (%s: %s); the tick "
                        "is retried in %.0f s", self.namespace, self.name,
                        type(exc).__name__, str(exc)[:300], wait)
            return wait
        self._unanswered = 0
        return wait

    def _tick(self) -> float:
        t0 = time.monotonic()
        body = self.policies.get(self.namespace, self.name)
        if body is None:
            return math.inf  # deleted: the daemon stops
        status: dict[str, Any] = dict(body.get("status") or {})
        version = body["metadata"].get("resourceVersion")
        t = Tick(body=body, now=self.clock(), status=status,
                  conds=list(status.get("conditions") or []),
                  gen=int(body["metadata"].get("generation", 0)),
                  version=None if version is None else str(version))
        t.out["observedGeneration"] = t.gen
        try:
            wait, degraded = self._steps(t)
        except ElastoreError:
            raise
        except Exception as exc:  # a bug: said in the status, then kopf's backoff
            if api_unanswered(exc):
                raise  # not a bug: tick() retries
            self._internal_error(t, exc)
            raise
        if degraded is not None:
            t.cond("Degraded", True, *degraded)
            t.cond("Ready", False, *degraded)
        t.out["conditions"] = t.conds
        self.write_status(t, t.out)
        took = time.monotonic() - t0
        if self.telemetry is not None:
            self.telemetry.degraded.labels(self.namespace, self.name).set(
                1 if degraded is not None else 0)
            self.telemetry.tick_seconds.observe(took)
        log.debug("%s/%s tick in %.2f s", self.namespace, self.name, took)
        return max(1.0, wait)

    def _internal_error(self, t: Tick, exc: Exception) -> None:
        log.exception("%s/%s: internal error", self.namespace, self.name)
        msg = f"{type(exc).__name__}: {exc}"[:500]
        t.cond("Degraded", True, "InternalError", msg)
        t.cond("Ready", False, "InternalError", msg)
        t.out["conditions"] = t.conds
        try:
            self.write_status(t, t.out)
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
        running = stepping.continue_operation(self, t)
        # the forecast and the status keep updating while an operation runs: the plan
        # starts from the operation's outcome and waits for it
        degraded = self.period.run(t)
        if degraded is not None:
            # without evidence only a size the user named (paused-replicas) or the
            # fallback's scale-out may start: _start_step says which, and why not
            started = not running and stepping.start_step(self, t)
            self._throttle(t)  # the throttle in force, also when this period had no evidence
            self._bandwidth_pods(t)
            return (POLL_S, degraded[1]) if running or started else degraded
        partial = self.partial(t)
        if partial is None:
            t.cond("Degraded", False, "Healthy", "metrics and target found")
        # spec.storage.expandVolumes: the plan grows the volumes instead of adding nodes
        volumes.grow(self, t)
        # a scale-out that is due starts before the throttle calls (an exec each: 15-20 s
        # together on a busy node, and CI's e2e scale-out started that late): its pod boots
        # before it streams, and gets the throttle then. Any other step comes after them: a
        # scale-in's decommission streams at once, at the throttle in force.
        started = running
        assert t.driver is not None
        if running and t.operation is not None and t.driver.supersedable(t.operation) and \
                stepping.scale_out_due(self, t):
            # cleanup takes hours on large nodes and must not hold a resize (cass-operator
            # #496): a further scale-out supersedes it, and its own cleanup covers every old
            # node again (a cleanup already running finishes in Cassandra)
            old = t.operation
            stepping.start_step(self, t)
            now_op = t.out.get("operation") or {}
            if now_op.get("pod") != old.pod:
                t.driver.stopped(self.store_call(t), old)
                self.policies.event(t.body, "CleanupSuperseded",
                                    f"the cleanup after {old.pod} joined ({old.message}) gives "
                                    f"way to the next scale-out, whose cleanup covers every "
                                    "old node")
            self._throttle(t)
        elif not started and stepping.scale_out_due(self, t):
            started = stepping.start_step(self, t)
            self._throttle(t)
        else:
            self._throttle(t)
            started = started or stepping.start_step(self, t)
        self._bandwidth_pods(t)
        moving = rebalancing.step(self, t, started)
        if started or moving:
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
        refused = driver.refused(spec, self.kube, Allowed(self.nodetools, self.exec_prefixes,
                                                             self.pod_paths))
        if refused is not None:
            return 60.0, refused
        t.target = driver.read(self.kube, self.namespace, spec)
        if t.target is None:
            return min(spec.control_period_s, RETRY_S), (
                "TargetNotFound", driver.missing(self.namespace, spec))
        t.out.update(t.target.status)
        self.current(t, t.target.sizes)
        if spec.enforce:
            self._guard(t)
        return None

    def store_call(self, t: Tick) -> StoreCall:
        """What the driver gets this tick: plain data and four narrow seams."""
        assert t.spec is not None and t.target is not None

        def save(op: operation.OperationState | None) -> None:
            try:
                self.write_status(t, {"operation": None if op is None else op.to_status()})
            except StatusConflict:
                raise
            except ElastoreError as exc:
                # the log says which state was not recorded: its effect was not applied
                what = "the operation's end" if op is None else \
                    f"{op.kind} {op.from_replicas} -> {op.to_replicas} phase {op.phase}"
                raise ElastoreError(f"{what} not recorded, so not acted on: {exc}") from exc

        return StoreCall(
            self.namespace, self.name, t.spec, self.kube, t.target, t.status, t.now,
            self.clock, lambda reason, msg, warning: self.policies.event(
                t.body, reason, msg, warning=warning),
            t.cond, save, t.out, decided_mibps=t.stream_mibps, slo_at_risk=self.period.slo_risk,
            ring_checked=t.ring_checked, skew_view=self.period.last_view)

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
        self.conflict(t)

    def conflict(self, t: Tick) -> None:
        if t.blocked is None:
            t.cond("Conflict", False, "NoConflict", "nothing else changes the target")
            return
        reason, message = t.blocked
        was = condition(t.status.get("conditions") or [], "Conflict") or {}
        if was.get("reason") != reason or was.get("status") != "True":
            self.policies.event(t.body, reason, message, warning=True)
        t.cond("Conflict", True, reason, message)

    def current(self, t: Tick, sts: StatefulSetFacts) -> None:
        t.sts = sts
        t.out["currentReplicas"] = sts.spec_replicas
        if self.telemetry is not None:
            self.telemetry.current.labels(self.namespace, self.name).set(sts.spec_replicas)

    def _paused(self, t: Tick) -> None:
        """``elastore.io/paused`` and ``paused-replicas`` (:mod:`elastore.operator.controls`):
        ``status.paused``, the ``Paused`` condition, an Event when it starts or ends."""
        spec = t.spec
        assert spec is not None
        ann = (t.body.get("metadata") or {}).get("annotations") or {}
        t.pause = controls.read_pause(
            ann, max(spec.min_replicas, spec.target.replication_factor), spec.max_replicas)
        was = t.status.get("paused")
        t.out["paused"] = controls.pause_status(t.pause, was, t.now)
        said, news = controls.pause_said(t.pause, was)
        t.cond("Paused", t.pause.on, *said)
        if news is not None:
            self.policies.event(t.body, news[0], news[1], warning=news[2])

    @staticmethod
    def aborting(t: Tick) -> str | None:
        assert t.spec is not None
        return controls.aborting((t.body.get("metadata") or {}).get("annotations"),
                                 t.spec.enforce, t.spec.mode)

    def partial(self, t: Tick) -> tuple[str, str] | None:
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
        if t.blocked is not None:  # the guard refused the target: no split is published
            if t.status.get("bandwidth") is not None:
                t.out["bandwidth"] = None
            return
        new = bandwidth.with_pods(t.out.get("bandwidth", t.status.get("bandwidth")), t.pods())
        if new is not None:
            t.out["bandwidth"] = new

    def _throttle(self, t: Tick) -> None:
        """The store's migration throttle in force on its pods (Enforce mode, not while
        another party's change blocks the policy): :meth:`StoreDriver.keep_throttles`."""
        if t.spec is None or t.driver is None or t.target is None or t.blocked is not None:
            return
        t.driver.keep_throttles(self.store_call(t), t.period)

    def _next_wait(self, t: Tick) -> float:
        assert t.spec is not None
        last = t.last_decision
        waits = [t.spec.control_period_s - (t.now - float(last.get("epoch", t.now)))]
        nxt = policyloop.next_action(t.memory.actions, t.now)
        if nxt is not None:
            waits.append(nxt.at_s - t.now)
        return min(waits)
