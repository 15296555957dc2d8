"""One ElasticPolicy's control loop: observe, decide, act, write the status. Thin: every
decision is made by the pure rooms (:mod:`elastore.operator.control`,
:mod:`elastore.operator.operation`, the planner); this module gathers their inputs and
carries out their outputs.

Order of a tick:

1. read the policy and its StatefulSet (a bad spec or a missing target is ``Degraded``);
2. an operation in progress is advanced first; its new state is written to the status
   *before* its effect is carried out, so a restart finds it;
3. when a control period is due: metrics, forecast, plan (missing metrics: ``Degraded``,
   no plan, no action);
4. if the plan wants other replicas now, no operation runs and the policy is in Enforce
   mode with evidence, one node step starts (scale-in only after its checks);
5. in Enforce mode the migration rate is set on every node when it changed.

``tick`` returns the seconds until it next needs to run: the next planned action, the next
period, or a short poll while an operation runs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from elastore.errors import ElastoreError
from elastore.models.bundle import ModelSet
from elastore.operator import control, operation
from elastore.operator.metrics import MetricsError, PrometheusSource, Snapshot
from elastore.operator.spec import PolicySpec, SpecError, parse
from elastore.operator.status import PolicyApi, condition, set_condition
from elastore.operator.telemetry import OperatorMetrics

log = logging.getLogger("elastore.operator")

POLL_S = 5.0  # while an operation runs
RETRY_S = 30.0  # after a failed observation, at most this long until the next try


@dataclass
class Runner:
    namespace: str
    name: str
    policies: PolicyApi
    kube: Any  # KubeActuator
    models: Callable[[PolicySpec], ModelSet]
    telemetry: OperatorMetrics | None = None
    clock: Callable[[], float] = time.time
    source: Callable[[PolicySpec], Any] = field(
        default=lambda spec: PrometheusSource(spec.prometheus))

    # ------------------------------------------------------------------------------------------
    def tick(self) -> float:
        t0 = time.monotonic()
        body = self.policies.get(self.namespace, self.name)
        if body is None:
            return math.inf  # deleted: the daemon stops
        now = self.clock()
        status: dict[str, Any] = dict(body.get("status") or {})
        conds: list[dict[str, Any]] = list(status.get("conditions") or [])
        gen = int(body["metadata"].get("generation", 0))
        out: dict[str, Any] = {"observedGeneration": gen}

        def finish(wait: float, degraded: tuple[str, str] | None = None) -> float:
            nonlocal conds
            if degraded is not None:
                conds = set_condition(conds, "Degraded", True, degraded[0], degraded[1], now)
                conds = set_condition(conds, "Ready", False, degraded[0], degraded[1], now)
            out["conditions"] = conds
            self.policies.patch_status(self.namespace, self.name, out)
            if self.telemetry is not None:
                self.telemetry.degraded.labels(self.namespace, self.name).set(
                    1 if degraded is not None else 0)
            log.debug("%s/%s tick in %.2f s", self.namespace, self.name, time.monotonic() - t0)
            return max(1.0, wait)

        try:
            spec = parse(body.get("spec"))
        except SpecError as exc:
            return finish(60.0, ("InvalidSpec", str(exc)))
        sts = self.kube.statefulset(self.namespace, spec.target.name)
        if sts is None:
            msg = f"StatefulSet {self.namespace}/{spec.target.name} not found"
            return finish(min(spec.control_period_s, RETRY_S), ("TargetNotFound", msg))
        out["currentReplicas"] = sts.spec_replicas
        if self.telemetry is not None:
            self.telemetry.current.labels(self.namespace, self.name).set(sts.spec_replicas)

        # 2. an operation in progress
        op = operation.OperationState.from_status(status.get("operation"))
        if op is not None:
            op, conds, done = self._advance(body, spec, sts, op, conds, now)
            out["operation"] = None if done else op.to_status()
            if not done:
                return finish(POLL_S)
            sts = self.kube.statefulset(self.namespace, spec.target.name) or sts
            out["currentReplicas"] = sts.spec_replicas

        # 3. a control period
        memory = control.Memory.from_status(status)
        last = status.get("lastDecision") or {}
        due = last.get("epoch") is None or now - float(last["epoch"]) >= \
            spec.control_period_s - 0.5 or last.get("generation") != gen
        evidence = bool(last.get("ok"))
        if due:
            try:
                decision, snap = self._decide(spec, sts.spec_replicas, memory, now)
            except (MetricsError, ElastoreError) as exc:
                reason = exc.reason if isinstance(exc, MetricsError) else "DecisionFailed"
                out["lastDecision"] = {"epoch": now, "at": control.iso(now), "ok": False,
                                       "generation": gen, "reason": str(exc)[:500]}
                # no plan without evidence: a scale-in on missing data never happens
                out["memory"] = control.Memory(
                    forecast_rps=None, forecast_for_s=None,
                    recent_desired=memory.recent_desired).to_status()
                out["nextAction"] = None
                conds = set_condition(conds, "Forecasting", False, reason, str(exc), now)
                was = condition(status.get("conditions") or [], "Degraded") or {}
                if was.get("reason") != reason:  # an Event when the reason is new
                    self.policies.event(body, reason, f"no decision: {exc}", warning=True)
                return finish(min(spec.control_period_s, RETRY_S), (reason, str(exc)))
            memory = decision.memory
            evidence = True
            out.update(self._decision_status(spec, decision, snap, gen))
            conds = set_condition(conds, "Forecasting", True, "Forecast",
                                  f"{decision.method}: {decision.forecast_rps:,.0f} req/s at "
                                  f"{control.iso(decision.forecast_for_s)}", now)
            self.policies.event(body, "Decision", decision.reason[:1000])
            if self.telemetry is not None:
                self._record(decision)
                self.telemetry.decision_seconds.labels(self.namespace, self.name).observe(
                    time.monotonic() - t0)
            if spec.enforce and spec.target.store == "cassandra":
                conds = self._throttle(body, spec, sts, decision, status, out, conds, now)
        conds = set_condition(conds, "Degraded", False, "Healthy", "metrics and target found",
                              now)

        # 4. start the next node step when the plan wants it
        target = control.target_at(memory.actions, now, sts.spec_replicas)
        nxt = control.next_action(memory.actions, now)
        if target != sts.spec_replicas:
            kind: Literal["ScaleOut", "ScaleIn"] = "ScaleOut" if target > sts.spec_replicas \
                else "ScaleIn"
            ctype = "ScalingUp" if kind == "ScaleOut" else "ScalingDown"
            if not spec.enforce:
                conds = set_condition(conds, ctype, False, "Recommend",
                                      f"the plan wants {target} replicas now (mode Recommend: "
                                      "nothing is changed)", now)
            elif not evidence:
                conds = set_condition(conds, ctype, False, "NoEvidence",
                                      "the last observation failed: no action", now)
            else:
                refused = self._refuse(spec, sts, kind, status)
                if refused:
                    conds = set_condition(conds, ctype, False, "Refused", refused, now)
                    self.policies.event(body, f"{kind}Refused", refused, warning=True)
                else:
                    new = operation.start(kind, spec.target.name, sts.spec_replicas, now, 0.0,
                                          sts.pvc_template)
                    conds = set_condition(conds, ctype, True, f"{kind}Started",
                                          f"{sts.spec_replicas} -> {new.to_replicas}: "
                                          f"{new.pod}", now)
                    out["operation"] = new.to_status()
                    out["conditions"] = conds
                    self.policies.patch_status(self.namespace, self.name, out)  # intent first
                    self.policies.event(body, f"{kind}Started",
                                        f"{sts.spec_replicas} -> {new.to_replicas} replicas "
                                        f"({new.pod}), planned at "
                                        f"{control.iso(memory.actions[0].at_s)}")
                    if self.telemetry is not None:
                        self.telemetry.actions.labels(self.namespace, self.name, kind).inc()
                    new, conds, done = self._advance(body, spec, sts, new, conds, now)
                    out["operation"] = None if done else new.to_status()
                    return finish(POLL_S)
        else:
            for ctype in ("ScalingUp", "ScalingDown"):
                conds = set_condition(conds, ctype, False, "Idle", "no change under way", now)
        conds = set_condition(conds, "Ready", True, "Ready",
                              f"{sts.spec_replicas} replicas; mode {spec.mode}", now)
        waits = [spec.control_period_s - (now - float((out.get("lastDecision") or last)
                                                      .get("epoch", now)))]
        if nxt is not None:
            waits.append(nxt.at_s - now)
        return finish(min(waits))

    # ------------------------------------------------------------------------------------------
    def _decide(self, spec: PolicySpec, replicas: int, memory: control.Memory, now: float
                ) -> tuple[control.Decision, Snapshot]:
        if spec.prometheus is None:
            raise MetricsError("NoMetrics", "spec.metrics.prometheus is not set: there is "
                                            "nothing to forecast from")
        source = self.source(spec)
        snap = source.snapshot(now, control.history_steps(spec.prediction_method),
                                          spec.prediction_step_s)
        interference = 0.0
        if spec.interference:
            interference = min(1.0, source.scalar("interference", now))
        return control.decide(spec, snap, replicas, self.models(spec), memory,
                              interference=interference), snap

    def _decision_status(self, spec: PolicySpec, d: control.Decision, snap: Snapshot,
                         gen: int) -> dict[str, Any]:
        nxt = control.next_action(d.actions, d.now_s)
        due = [a for a in d.actions if a.at_s <= d.now_s]
        act = nxt or (due[-1] if due else None)
        return {
            "forecast": {"requestsPerSecond": round(d.forecast_rps, 3),
                         "at": control.iso(d.forecast_for_s), "method": d.method,
                         "display": f"{d.forecast_rps:,.0f} req/s"},
            "observed": {"requestsPerSecond": round(snap.load_rps, 3),
                         "readRatio": round(snap.read_ratio, 4),
                         "dataBytes": snap.data_bytes,
                         "migrationMiBps": snap.migration_mibps},
            "forecastError": None if d.forecast_error is None else round(d.forecast_error, 4),
            "desiredReplicas": d.desired_replicas,
            "nextAction": None if act is None else {
                "replicas": act.replicas, "at": control.iso(act.at_s), "reason": act.reason},
            "recommendedMiBps": round(d.migration_mibps, 3),
            "lastDecision": {"epoch": d.now_s, "at": control.iso(d.now_s), "ok": True,
                             "generation": gen, "reason": d.reason[:2000]},
            "memory": d.memory.to_status(),
        }

    def _record(self, d: control.Decision) -> None:
        t = self.telemetry
        assert t is not None
        t.forecast.labels(self.namespace, self.name).set(d.forecast_rps)
        if d.forecast_error is not None:
            t.forecast_error.labels(self.namespace, self.name).set(d.forecast_error)
        t.desired.labels(self.namespace, self.name).set(d.desired_replicas)
        t.migration.labels(self.namespace, self.name).set(d.migration_mibps)

    def _refuse(self, spec: PolicySpec, sts: Any, kind: str, status: dict[str, Any]
                ) -> str | None:
        """Why a node step may not start (None: it may)."""
        if spec.target.store != "cassandra":
            return (f"store {spec.target.store}: this version forecasts and recommends for it "
                    "but acts only on Cassandra (its ring actuator is not built yet)")
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
        data = ((status.get("observed") or {}).get("dataBytes"))
        if sts.volume_bytes and data is not None:
            per_node = float(data) / (sts.spec_replicas - 1)
            room = (1 - spec.min_free_fraction) * sts.volume_bytes
            if per_node > room:
                return (f"free-space check: {per_node / 2**30:.1f} GiB per node after the "
                        f"decommission would leave less than {spec.min_free_fraction:.0%} of "
                        f"{sts.volume_bytes / 2**30:.1f} GiB free")
        return None

    def _advance(self, body: dict[str, Any], spec: PolicySpec, sts: Any,
                 op: operation.OperationState, conds: list[dict[str, Any]], now: float
                 ) -> tuple[operation.OperationState, list[dict[str, Any]], bool]:
        exists, ready = self.kube.pod(self.namespace, op.pod)
        mode = self.kube.node_mode(self.namespace, op.pod, spec.target.container,
                                   spec.target.nodetool) if exists else None
        pvc = self.kube.pvc_exists(self.namespace, op.pvc) if op.pvc and op.phase == \
            "Cleanup" else None
        facts = operation.Facts(sts.spec_replicas, sts.ready_replicas, exists, ready, mode, pvc)
        try:
            new, effect, done = operation.advance(op, facts, now, spec.pvc_policy)
        except ElastoreError as exc:
            ctype = "ScalingUp" if op.kind == "ScaleOut" else "ScalingDown"
            conds = set_condition(conds, ctype, True, "Stuck", str(exc), now)
            self.policies.event(body, "OperationStuck", str(exc), warning=True)
            return op, conds, False
        if new.phase != op.phase:
            self.policies.event(body, f"{op.kind}{new.phase}", new.message)
        # the state first, then the effect: a restart in between repeats nothing harmful
        self.policies.patch_status(self.namespace, self.name,
                                   {"operation": None if done else new.to_status()})
        if effect == "scale":
            self.kube.scale(self.namespace, spec.target.name, new.to_replicas)
        elif effect == "decommission":
            self.kube.start_decommission(self.namespace, new.pod, spec.target.container,
                                         spec.target.nodetool)
        elif effect == "delete-pvc" and new.pvc:
            self.kube.delete_pvc(self.namespace, new.pvc)
        ctype = "ScalingUp" if op.kind == "ScaleOut" else "ScalingDown"
        conds = set_condition(conds, ctype, not done, f"{op.kind}{new.phase}", new.message, now)
        return new, conds, done

    def _throttle(self, body: dict[str, Any], spec: PolicySpec, sts: Any,
                  d: control.Decision, status: dict[str, Any], out: dict[str, Any],
                  conds: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """Set the decided migration rate on every node when it moved (Enforce mode)."""
        from elastore.actuators.stream import stream_setting

        want = min(max(d.migration_mibps, spec.min_migration_mibps), spec.max_migration_mibps)
        _, applied = stream_setting(want)
        prev = status.get("migrationMiBps")
        if prev is not None and abs(float(prev) - applied) < 1e-6:
            return conds
        pods = [f"{spec.target.name}-{k}" for k in range(sts.spec_replicas)]
        try:
            got = self.kube.set_stream_throughput(self.namespace, pods, spec.target.container,
                                                  spec.target.nodetool, want)
        except ElastoreError as exc:
            self.policies.event(body, "ThrottleFailed", str(exc), warning=True)
            return set_condition(conds, "Throttling", False, "ThrottleFailed", str(exc), now)
        out["migrationMiBps"] = got
        self.policies.event(body, "Throttle", f"stream throughput {got:.3f} MiB/s on "
                                              f"{len(pods)} node(s)")
        return set_condition(conds, "Throttling", got < spec.max_migration_mibps, "Throttle",
                             f"migration at {got:.3f} MiB/s per node", now)
