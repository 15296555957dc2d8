"""The operator's pure parts: the spec, status conditions, the operation state machine and
one control period's decision. No cluster: plain data in, plain data out."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elastore.actuators import nodetool
from elastore.errors import ElastoreError
from elastore.models import ModelSet
from elastore.operator import policyloop
from elastore.operator.conditions import set_condition
from elastore.operator.metrics import MetricsError, Snapshot
from elastore.operator.presets import PRESETS, QUERY_NAMES
from elastore.operator.spec import SpecError, parse, parse_duration
from elastore.stores import operation
from elastore.stores.cassandra import machine
from elastore.stores.cassandra.ring import decommission_refusal
from elastore.units import GIB

BASE: dict[str, Any] = {
    "target": {"name": "cassandra", "replicationFactor": 3},
    "replicas": {"min": 3, "max": 12},
    "slo": {"latencyMs": 30},
}
PROM = {"prometheus": {"url": "http://127.0.0.1:9090"}}


def spec_with(**patch: Any) -> dict[str, Any]:
    s = copy.deepcopy(BASE)
    for path, value in patch.items():
        node = s
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return s


def test_defaults_match_the_crd() -> None:
    p = parse(BASE)
    assert p.mode == "Recommend" and not p.enforce
    assert p.control_period_s == 600 and p.prediction_horizon_s == 600
    assert p.prediction_step_s == 3600 and p.prediction_method == "prorenata"
    assert p.slo_percentile == 95 and p.headroom == pytest.approx(0.1)
    assert p.target.nodetool == ("nodetool",) and p.target.container == "cassandra"
    assert p.pvc_policy == "Retain" and p.stabilization_s == 300 and p.node_overhead_s == 120
    assert (p.min_migration_mibps, p.max_migration_mibps) == (1.0, 24.0)
    assert p.prometheus is None


@pytest.mark.parametrize("patch, where", [
    ({"replicas__min": 5, "replicas__max": 4}, "spec.replicas"),
    ({"replicas__min": 2}, "spec.replicas.min"),
    ({"slo__latencyMs": 0}, "spec.slo.latencyMs"),
    ({"slo__percentile": 90}, "spec.slo.percentile"),
    ({"mode": "Auto"}, "spec.mode"),
    ({"controlPeriod": "5s"}, "spec.controlPeriod"),
    ({"controlPeriod": "ten minutes"}, "spec.controlPeriod"),
    ({"migration": {"minMiBps": 5, "maxMiBps": 2}}, "spec.migration"),
    ({"migration": {"policy": "Fastest"}}, "spec.migration.policy"),
    ({"mode": "Enforce"}, "spec.metrics"),
    ({"target__store": "mongo"}, "spec.target.store"),
    ({"metrics": {"prometheus": {"url": "ftp://x"}}}, "spec.metrics.prometheus.url"),
    ({"target__replicationFactor": 0}, "spec.target.replicationFactor"),
    ({"prediction": {"horizon": "5m"}}, "spec.prediction.horizon"),
    ({"scaleDown": {"pvcPolicy": "Shred"}}, "spec.scaleDown.pvcPolicy"),
    ({"interference": {"enabled": True}}, "spec.interference"),  # nothing to read it from
    ({"interference": {"enabled": "yes"}, "metrics": PROM}, "spec.interference.enabled"),
    ({"metrics": {"prometheus": {"url": "http://p", "queries": {"latency": "x"}}}},
     "spec.metrics.prometheus.queries"),
    ({"target__nodetool": ["sh", "-c", "rm -rf /"]}, "spec.target.nodetool"),  # tamper
    ({"target__nodetool": ["a", "b", "c", "d", "e"]}, "spec.target.nodetool"),
    ({"target__nodetool": []}, "spec.target.nodetool"),
    ({"target__container": "cassandra; sh"}, "spec.target.container"),
])
def test_invalid_specs_name_the_field(patch: dict[str, Any], where: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(spec_with(**patch))
    assert err.value.where == where, err.value


def test_missing_target_name_and_non_object_spec() -> None:
    with pytest.raises(SpecError, match="is required"):
        parse({"target": {"replicationFactor": 3}, "replicas": {"min": 3, "max": 4},
               "slo": {"latencyMs": 1}})
    with pytest.raises(SpecError, match="must be an object"):
        parse(["not", "a", "spec"])


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("1h30m", 5400), ("500ms", 0.5),
                                           ("2.5s", 2.5)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_rate_window_reaches_every_rate_of_every_preset(preset: str) -> None:
    """``rateWindow`` sets the range of every rate() (and the warmup, unless it is given):
    a 30 s scrape needs 2m; the suites' 1 s scrapes need only seconds."""
    def prom(**extra: Any) -> Any:
        p = parse(spec_with(metrics={"prometheus": {"url": "http://p/", "preset": preset,
                                                    **extra}})).prometheus
        assert p is not None
        return p

    def rates(p: Any) -> set[str]:
        out: set[str] = set()
        for name in QUERY_NAMES:
            try:
                q = p.query(name, "shop", "cass")
            except MetricsError:  # a quantity the exporter does not have
                continue
            out |= set(re.findall(r"\[([^\]]+)\]\)", q))
        return out

    assert rates(prom()) == {"1m"} and prom().warmup_s == 60
    p = prom(rateWindow="90s")
    assert rates(p) == {"90s"} and p.warmup_s == 90 and p.rate_window_s == 90
    assert rates(prom(rateWindow="2m")) == {"2m"}
    p = prom(rateWindow="10s", warmup="30s")
    assert rates(p) == {"10s"} and p.warmup_s == 30
    for bad in ("1s", "2h", "2.5s", "500ms", "soon"):
        with pytest.raises(SpecError, match="rateWindow"):
            prom(rateWindow=bad)


def test_default_queries_take_the_selector() -> None:
    p = parse(spec_with(metrics={"prometheus": {"url": "http://p/", "selector": 'dc="a"'}}))
    assert p.prometheus is not None and p.prometheus.url == "http://p"
    assert p.prometheus.query("readRps", "shop", "cass") == (
        'sum(rate(org_apache_cassandra_metrics_clientrequest_count{name="Latency",'
        'scope="Read",namespace="shop",pod=~"cass-[0-9]+",dc="a"}[1m]))')
    # the node agent's index, scoped to the target's pods alone (no other matcher)
    assert p.prometheus.query("interference", "shop", "cass") == (
        'avg(elastore_interference_index{namespace="shop",pod=~"cass-[0-9]+",dc="a"})')
    with pytest.raises(SpecError, match="no query 'latency'"):
        p.prometheus.query("latency", "shop", "cass")


def test_interference_modes_and_the_query_override() -> None:
    """Absent: Auto; true and false as given; the policy's own query replaces the agent's;
    the latency query reads the SLO's percentile (Cassandra's timers are microseconds)."""
    from elastore.hubbub import policy as hubbub

    auto = parse(spec_with(metrics=PROM))
    assert auto.interference is None and hubbub.mode(auto) == "Auto"
    assert hubbub.mode(parse(spec_with(metrics=PROM, interference={"enabled": True}))) == \
        "Enabled"
    off = parse(spec_with(interference={"enabled": False}))  # blind needs no metrics
    assert hubbub.mode(off) == "Disabled"
    own = parse(spec_with(metrics={"prometheus": {"url": "http://p", "queries": {
        "interference": "max(my_steal_index)"}}}))
    assert own.prometheus is not None and hubbub.own_query(own)
    assert own.prometheus.query("interference", "shop", "cass") == "max(my_steal_index)"
    assert not hubbub.own_query(auto)
    # p99 needs a model fitted for it (the built-in lab profile holds p95 only)
    p99 = parse(spec_with(metrics=PROM, slo={"latencyMs": 30, "percentile": 99},
                          capacityModel={"configMapRef": {"name": "model-p99"}}))
    assert p99.prometheus is not None
    q = p99.prometheus.query("latencyMs", "shop", "cass")
    # each node's p99 in ms (microseconds / 1000), weighted by its request rate
    assert "clientrequest_99thpercentile{" in q and "/ 1000" in q and "95th" not in q
    assert 'namespace="shop",pod=~"cass-[0-9]+"' in q
    assert "95thpercentile" in auto.prometheus.query("latencyMs", "shop", "cass")  # type: ignore[union-attr]


def test_reading_the_index_by_mode_never_a_missing_one_as_zero() -> None:
    from elastore.hubbub import policy as hubbub

    def missing() -> float:
        raise MetricsError("MetricsMissing", "interference: Prometheus returned no series")

    def refused() -> float:
        raise MetricsError("PrometheusError", "bad query")

    auto = parse(spec_with(metrics=PROM))
    on = parse(spec_with(metrics=PROM, interference={"enabled": True}))
    off = parse(spec_with(metrics=PROM, interference={"enabled": False}))
    r = hubbub.read(auto, lambda: 0.4)
    assert (r.index, r.source) == (0.4, "agent")
    r = hubbub.read(auto, missing)
    assert r.index is None and r.source == "none" and "blind" in r.reason
    assert "no series" in r.reason
    r = hubbub.read(auto, lambda: 1.7)  # not an index: as if missing, and said
    assert r.index is None and "outside [0, 1]" in r.reason
    with pytest.raises(MetricsError, match="bad query"):  # a broken query is not "absent"
        hubbub.read(auto, refused)
    with pytest.raises(MetricsError, match="enabled is true") as err:
        hubbub.read(on, missing)
    assert err.value.reason == "MetricsMissing"
    assert hubbub.read(on, lambda: 0.2).index == 0.2
    r = hubbub.read(off, lambda: 0.9)
    assert r.index is None and r.source == "none" and "false" in r.reason
    own = parse(spec_with(metrics={"prometheus": {"url": "http://p", "queries": {
        "interference": "x"}}}))
    assert hubbub.read(own, lambda: 0.3).source == "query"


def test_the_learned_effect_raises_the_plan_and_its_state_round_trips(ms: ModelSet) -> None:
    """One period with the index: the learner takes the observation, the planner reads the
    capacity model with the learned effect and wants more servers than blind at the same
    load; the state in the status reads back the same; a garbled one is forgotten."""
    import json

    from elastore.hubbub import policy as hubbub
    from elastore.hubbub.effect import InterferenceEffect

    spec = fast_spec()
    snap = snapshot([800.0] * 10)  # 200 requests/s per node: the steep part of its curve
    learner = hubbub.learner_from_status({})
    prior = hubbub.prior(ms.capacity, "agent")
    assert prior.source == "definition"
    # the placeholder's profiled axis is the prior only for a query of the policy's own
    assert hubbub.prior(ms.capacity, "query").source == "profiled"
    load_per_node = snap.load_rps / 4
    lat = float(ms.capacity.latency_ms(load_per_node * 1.6, 0.95, 0.0, 0.0))
    note = hubbub.learn(learner, ms.capacity, snap, 4, 0.4, lat, False, prior)
    assert note == "used" and learner.observations == 1
    assert hubbub.learn(learner, ms.capacity, snap, 4, 0.4, None, False, prior).startswith(
        "skipped (missing)")
    assert "node step" in hubbub.learn(learner, ms.capacity, snap, 4, 0.4, lat, True, prior)
    assert learner.skipped["missing"] == 1 and learner.observations == 1
    effect = learner.effect(prior)
    aware = policyloop.decide(spec, snap, 3, hubbub.planning_models(ms, effect),
                              policyloop.Memory(), interference=0.4)
    blind = policyloop.decide(spec, snap, 3, ms, policyloop.Memory())
    assert aware.desired_replicas > blind.desired_replicas == 3
    assert aware.plan.details["capacity_rps"] == pytest.approx(
        blind.plan.details["capacity_rps"] / float(effect.factor(0.4)))
    reading = hubbub.Reading(0.4, "agent", "the agent: 0.400")
    st = json.loads(json.dumps(hubbub.to_status(spec, reading, learner, effect, lat, note,
                                                10_000.0)))
    assert st["source"] == "agent" and st["index"] == 0.4 and st["mode"] == "Auto"
    assert st["factor"] == pytest.approx(float(effect.factor(0.4)), abs=1e-4)
    assert len(st["factors"]) == 9 and st["prior"] == "definition"
    assert len(json.dumps(st["learned"])) < 1000
    back = hubbub.learner_from_status({"interference": st})
    assert back.to_dict() == learner.to_dict()
    assert hubbub.learner_from_status({"interference": {"learned": {"version": 1,
                                                                    "bins": "x"}}}
                                      ).observations == 0
    blind_st = hubbub.to_status(spec, hubbub.Reading(None, "none", "Auto: none"), learner,
                                None, None, "not learned", 10_000.0)
    assert blind_st["index"] is None and blind_st["factor"] == 1.0
    assert isinstance(InterferenceEffect.definition(), InterferenceEffect)


def test_partial_default_queries_are_scoped_to_the_targets_pods() -> None:
    """Another cluster's pods in the same Prometheus never add to this target's load, and
    the freshness query gives one series per node (so a missing node can be counted)."""
    p = parse(spec_with(metrics={"prometheus": {"url": "http://p"}})).prometheus
    assert p is not None
    for name in ("readRps", "writeRps", "dataBytes", "migrationMiBps", "freshness"):
        assert 'namespace="shop",pod=~"cass\\\\.v2-[0-9]+"' in p.query(name, "shop", "cass.v2")
    assert p.query("freshness", "shop", "cass").startswith("max by (pod, job) (timestamp(")
    own = parse(spec_with(metrics={"prometheus": {
        "url": "http://p", "namespaceLabel": "kubernetes_namespace", "podLabel": ""}}))
    assert own.prometheus is not None
    q = own.prometheus.query("freshness", "shop", "cass")
    assert q.startswith("(timestamp(") and 'kubernetes_namespace="shop"}' in q
    for bad in ("pod name", "1pod", 3):
        with pytest.raises(SpecError, match="podLabel"):
            parse(spec_with(metrics={"prometheus": {"url": "http://p", "podLabel": bad}}))


def test_conditions_keep_their_transition_time_until_the_status_flips() -> None:
    c = set_condition([], "Degraded", True, "MetricsMissing", "no data", 1000.0)
    c = set_condition(c, "Ready", False, "MetricsMissing", "no data", 1000.0)
    assert [x["type"] for x in c] == ["Ready", "Degraded"]  # a stable order
    later = set_condition(c, "Degraded", True, "MetricsStale", "old data", 2000.0)
    d = next(x for x in later if x["type"] == "Degraded")
    assert d["reason"] == "MetricsStale" and d["lastTransitionTime"] == "1970-01-01T00:16:40Z"
    healed = set_condition(later, "Degraded", False, "Healthy", "ok", 3000.0)
    d = next(x for x in healed if x["type"] == "Degraded")
    assert d["status"] == "False" and d["lastTransitionTime"] == "1970-01-01T00:50:00Z"


# --- the operation state machine ----------------------------------------------------------
def facts(**kw: Any) -> machine.Facts:
    base: dict[str, Any] = dict(spec_replicas=3, ready_replicas=3, pod_exists=True,
                                pod_ready=True, node_mode="NORMAL")
    base.update(kw)
    return machine.Facts(**base)


def test_scale_out_sets_replicas_then_waits_for_the_node_to_join() -> None:
    op = operation.start("ScaleOut", "db", 3, 0.0, 60.0, "data")
    assert (op.pod, op.to_replicas, op.pvc) == ("db-3", 4, "data-db-3")
    op, eff, done = machine.advance(op, facts(pod_exists=False, pod_ready=False,
                                              node_mode=None), 1.0)
    assert (eff, done, op.phase) == ("scale", False, "Scaling")
    op, eff, done = machine.advance(op, facts(spec_replicas=4, node_mode="JOINING"), 2.0)
    assert (eff, done, op.phase) == ("none", False, "Joining")
    op, eff, done = machine.advance(op, facts(spec_replicas=4, node_mode="JOINING"), 3.0)
    assert (eff, done) == ("none", False) and "JOINING" in op.message
    joined, eff, done = machine.advance(op, facts(spec_replicas=4, node_mode="NORMAL"), 4.0,
                                        cleanup=False)
    assert (eff, done, joined.phase) == ("none", True, "Done")
    # with cleanup (the default) the old nodes are cleaned next: tests/test_cleanup.py
    op, eff, done = machine.advance(op, facts(spec_replicas=4, node_mode="NORMAL"), 4.0)
    assert (eff, done, op.phase, op.cleanup_pod()) == ("cleanup", False, "CleaningUp", "db-0")


def test_a_scale_out_deletes_the_volume_a_decommissioned_node_left_before_scaling() -> None:
    """pvcPolicy Retain kept data-db-3 after a scale-in. Cassandra refuses to start on a
    decommissioned node's data (the pod crash-loops: the real node's e2e saw it), so the
    scale-out deletes that PVC first, but only with the evidence: the mark of a scale-in
    that saw its node leave the ring on this very PVC, and a ring of no more members than
    pods. Without either it touches nothing and says what to do."""
    op = operation.start("ScaleOut", "db", 3, 0.0, 600.0, "data")
    out = dict(pod_exists=False, pod_ready=False, node_mode=None)
    gone, eff, done = machine.advance(op, facts(new_pvc="left-ring", ring_members=3, **out), 1.0)
    assert (eff, done, gone.phase) == ("delete-pvc", False, "Scaling"), gone
    assert "deleting PVC data-db-3" in gone.message
    # deleted (or still terminating: deleted again, idempotent); absent: the replicas go up
    op2, eff, _ = machine.advance(gone, facts(new_pvc="absent", **out), 2.0)
    assert (eff, op2.phase) == ("scale", "Scaling")
    # the ring could not be read: nothing yet
    wait, eff, _ = machine.advance(op, facts(new_pvc="left-ring", ring_members=None, **out), 1.0)
    assert (eff, wait.phase) == ("none", "Scaling") and "could not be read" in wait.message
    # a member with no pod (down, or scaled away by hand): its data may be on that volume
    held, eff, _ = machine.advance(op, facts(new_pvc="left-ring", ring_members=4, **out), 1.0)
    assert (eff, held.phase) == ("stuck", "Stuck") and "4 members for 3 pods" in held.message
    # no mark that its node left: neither used nor deleted
    bare, eff, _ = machine.advance(op, facts(new_pvc="unmarked", **out), 1.0)
    assert (eff, bare.phase) == ("stuck", "Stuck") and "no mark" in bare.message
    # once the replicas are up (a restart after the scale), the volume is the pod's own
    up, eff, _ = machine.advance(op, facts(spec_replicas=4, new_pvc="unmarked", **out), 3.0)
    assert (eff, up.phase) == ("none", "Scaling")


def test_a_left_ring_mark_is_one_on_this_very_pvc() -> None:
    mark = operation.pvc_mark("p", "2026-11-28T00:00:00Z", "op1", "uid-1")
    assert operation.left_ring(mark, "uid-1")
    assert not operation.left_ring(mark, "uid-2")  # a PVC created again under the name
    assert not operation.left_ring("p@2026-11-28T00:00:00Z", "uid-1")  # names no operation
    assert not operation.left_ring(None, "uid-1") and not operation.left_ring(mark, None)


def test_scale_in_decommissions_then_lowers_replicas_then_cleans_up() -> None:
    op = operation.start("ScaleIn", "db", 4, 0.0, 60.0, "data")
    assert (op.pod, op.to_replicas, op.phase) == ("db-3", 3, "Decommissioning")
    op, eff, _ = machine.advance(op, facts(spec_replicas=4), 10.0)
    assert eff == "decommission" and op.decommission_issued_s == 10.0
    # still NORMAL a moment later: the decommission is not issued twice
    op, eff, _ = machine.advance(op, facts(spec_replicas=4), 12.0)
    assert eff == "none"
    op, eff, _ = machine.advance(op, facts(spec_replicas=4, node_mode="LEAVING"), 40.0)
    assert eff == "none" and op.phase == "Decommissioning"
    # it says DECOMMISSIONED; until another node's ring drops it, nothing (issue 34)
    _, eff, _ = machine.advance(op, facts(spec_replicas=4, node_mode="DECOMMISSIONED"), 90.0)
    assert eff == "none"
    op, eff, _ = machine.advance(op, facts(spec_replicas=4, node_mode="DECOMMISSIONED",
                                           ring_gone=True), 90.0)
    assert (eff, op.phase) == ("scale", "Scaling")
    op, eff, _ = machine.advance(op, facts(spec_replicas=3, node_mode=None), 91.0)
    assert (eff, op.phase) == ("none", "Scaling")  # the pod is still terminating
    op, eff, _ = machine.advance(op, facts(spec_replicas=3, pod_exists=False,
                                           node_mode=None), 95.0)
    assert op.phase == "Cleanup"
    kept, eff, done = machine.advance(op, facts(spec_replicas=3, pod_exists=False,
                                                node_mode=None, pvc_exists=True), 96.0)
    assert (eff, done) == ("none", True) and "PVC data-db-3 retained" in kept.message
    gone, eff, done = machine.advance(op, facts(spec_replicas=3, pod_exists=False,
                                                node_mode=None, pvc_exists=True,
                                                pvc_marked=True), 96.0,
                                      pvc_policy="Delete")
    assert (eff, done) == ("delete-pvc", False)
    # without the operator's own mark on the PVC (seen leaving the ring), never deleted
    kept, eff, done = machine.advance(op, facts(spec_replicas=3, pod_exists=False,
                                                node_mode=None, pvc_exists=True), 96.0,
                                      pvc_policy="Delete")
    assert (eff, done) == ("none", True) and "carries no mark" in kept.message
    _, eff, done = machine.advance(gone, facts(spec_replicas=3, pod_exists=False,
                                               node_mode=None, pvc_exists=False), 97.0,
                                   pvc_policy="Delete")
    assert (eff, done) == ("none", True)


def test_a_restarted_operator_resumes_from_the_status_without_repeating() -> None:
    """The status round trip loses nothing, and a decommission issued just before a crash
    is not issued again; one issued long ago without effect is."""
    op = operation.start("ScaleIn", "db", 4, 0.0, 60.0)
    op, eff, _ = machine.advance(op, facts(spec_replicas=4), 10.0)
    assert eff == "decommission"
    again = operation.OperationState.from_status(op.to_status())
    assert again == op
    _, eff, _ = machine.advance(again, facts(spec_replicas=4), 30.0)
    assert eff == "none"
    _, eff, _ = machine.advance(again, facts(spec_replicas=4),
                                10.0 + machine.REISSUE_AFTER_S + 1)
    assert eff == "decommission"
    assert operation.OperationState.from_status(None) is None
    with pytest.raises(ElastoreError, match="unreadable operation"):
        operation.OperationState.from_status({"kind": "ScaleIn"})


def test_a_pod_lost_before_it_left_the_ring_stops_the_operation() -> None:
    op = operation.start("ScaleIn", "db", 4, 0.0, 60.0)
    with pytest.raises(ElastoreError, match="before it left the ring"):
        machine.advance(op, facts(spec_replicas=4, pod_exists=False, node_mode=None), 5.0)


def test_netstats_mode() -> None:
    assert nodetool.parse_mode("Mode: NORMAL\nNot sending any streams.\n") == "NORMAL"
    assert nodetool.parse_mode("noise\n  Mode: DECOMMISSIONED\n") == "DECOMMISSIONED"
    assert nodetool.parse_mode("nodetool: Failed to connect") is None


# --- one control period --------------------------------------------------------------------
@pytest.fixture(scope="module")
def ms() -> ModelSet:
    from elastore.sim.cli import PLACEHOLDER

    return ModelSet.load(PLACEHOLDER)


def snapshot(history: list[float], now: float = 10_000.0, step: float = 60.0,
             data_bytes: float = 2 * 2**30) -> Snapshot:
    return Snapshot(at_s=now, load_rps=history[-1], read_ratio=0.95, data_bytes=data_bytes,
                    migration_mibps=0.0, history_rps=np.array(history, dtype=float),
                    step_s=step)


def fast_spec(**kw: Any) -> Any:
    """A policy deciding every minute with the window planner (the paper's scheduler),
    whose loop mechanics the tests below pin down."""
    s = spec_with(controlPeriod="60s", prediction={"horizon": "60s", "step": "60s"},
                  metrics=PROM, planner={"mode": "Window"}, **kw)
    return parse(s)


def test_a_rising_load_plans_a_scale_out_at_absolute_times(ms: ModelSet) -> None:
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    hist = list(np.linspace(2.0 * per, 3.9 * per, 20))  # rising towards 4 servers' worth
    d = policyloop.decide(fast_spec(), snapshot(hist), 3, ms, policyloop.Memory())
    # 20 steps are too few for prorenata: it says so and forecasts persistence
    assert "persistence (fallback" in d.method and d.forecast_rps == pytest.approx(hist[-1])
    assert d.desired_replicas >= 4 and d.actions
    assert all(a.at_s >= 10_000.0 for a in d.actions)
    assert d.actions[-1].replicas == d.desired_replicas
    assert d.memory.forecast_for_s == pytest.approx(10_060.0)
    assert policyloop.target_at(d.actions, d.actions[0].at_s, 3) == d.actions[0].replicas
    assert policyloop.target_at(d.actions, 9_999.0, 3) == 3


def test_the_memory_gives_the_next_period_its_prediction_error(ms: ModelSet) -> None:
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    first = policyloop.decide(fast_spec(), snapshot([2 * per] * 10), 3, ms, policyloop.Memory())
    back = policyloop.memory_from_status({"memory": policyloop.memory_to_status(first.memory)})
    assert back == first.memory
    second = policyloop.decide(fast_spec(), snapshot([2 * per] * 10 + [2.2 * per],
                                                  now=10_060.0), 3, ms, back)
    assert second.predicted_now_rps == pytest.approx(first.forecast_rps)
    assert second.forecast_error == pytest.approx(2.2 * per / first.forecast_rps - 1)


def test_no_history_is_an_error_not_a_zero(ms: ModelSet) -> None:
    with pytest.raises(MetricsError, match="no load history"):
        policyloop.decide(fast_spec(), snapshot([float("nan")] * 5), 3, ms, policyloop.Memory())


def test_steps_before_the_series_began_are_not_history(ms: ModelSet) -> None:
    """A young series: 300 steps of nothing, then 20 real ones. The predictor is fitted on
    the 20 (persistence fallback), not on 320 steps of which 300 are NaN (which would pick
    the seasonal fallback and forecast from the void)."""
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    hist = [float("nan")] * 300 + list(np.linspace(per, 2 * per, 20))
    d = policyloop.decide(fast_spec(), snapshot(hist), 3, ms, policyloop.Memory())
    assert "persistence (fallback: 20 of" in d.method, d.method
    assert d.forecast_rps == pytest.approx(2 * per)


def test_the_first_rates_of_a_young_series_are_masked() -> None:
    from elastore.operator.metrics import mask_warmup

    nan = float("nan")
    young = np.array([nan, nan, 10.0, 50.0, 90.0, 100.0, 100.0])
    out = mask_warmup(young, step_s=20.0, warmup_s=60.0)
    assert np.isnan(out[:5]).all() and list(out[5:]) == [100.0, 100.0]
    full = np.array([100.0, nan, 100.0, 100.0])  # a gap inside is not a beginning
    assert np.array_equal(mask_warmup(full, 20.0, 60.0), full, equal_nan=True)
    assert np.isnan(mask_warmup(np.array([nan, nan]), 20.0, 60.0)).all()


def test_the_operator_asks_for_enough_history_for_its_method() -> None:
    from elastore.predictor.registry import make

    for method in ("prorenata", "persistence"):
        assert policyloop.history_steps(method) >= make(method).min_history
    assert policyloop.history_steps("persistence") == policyloop.HISTORY_STEPS


def test_a_garbled_memory_is_forgotten_not_trusted() -> None:
    assert policyloop.memory_from_status({"memory": {"actions": [{"replicas": "x"}]}}) == \
        policyloop.Memory()


def test_stabilization_remembers_recommendations_not_its_own_output(ms: ModelSet) -> None:
    """Load for 4 servers, then for 3: the scale-down waits for the stabilization window
    and then happens (remembering the stabilized 4 would hold it off for ever)."""
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    spec = parse(spec_with(controlPeriod="60s", prediction={"horizon": "60s", "step": "60s"},
                           planner={"mode": "Window"},
                           metrics=PROM, scaleDown={"stabilizationSeconds": 180},
                           migration={"nodeOverheadSeconds": 0}))
    mem = policyloop.Memory()
    high = [3.5 * per] * 10
    d = policyloop.decide(spec, snapshot(high, now=10_000.0), 4, ms, mem)
    assert d.desired_replicas == 4
    mem = d.memory
    seen = []
    for k in range(1, 7):  # the load falls to 2.5 servers' worth at t = 10 060
        now = 10_000.0 + 60 * k
        d = policyloop.decide(spec, snapshot(high + [2.5 * per] * k, now=now), 4, ms, mem)
        mem = d.memory
        seen.append((now - 10_000.0, d.desired_replicas))
        assert len(mem.recent_desired) <= 2  # only possible maxima are kept
    # held at 4 while the recommendation of 4 (t = 0) is within 180 s, then 3
    assert seen == [(60, 4), (120, 4), (180, 4), (240, 3), (300, 3), (360, 3)], seen


def test_a_planned_start_is_never_pushed_back_by_the_next_period(ms: ModelSet) -> None:
    """Period 60 s, horizon 180 s: each period's window ends 60 s later than the last, so
    a fresh plan for the same need starts later each time. The committed start holds, and
    falls due; a need that disappears drops its action."""
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    spec = parse(spec_with(controlPeriod="60s", prediction={"horizon": "180s", "step": "60s"},
                           planner={"mode": "Window"},
                           metrics=PROM, migration={"nodeOverheadSeconds": 0}))
    high = [3.5 * per] * 10  # persistence: 4 servers needed by every window's end
    small = 64 * 2**20  # a quick migration: the start is near the window's end

    def snap(history: list[float], now: float) -> Snapshot:
        return snapshot(history, now=now, data_bytes=small)

    first = policyloop.decide(spec, snap(high, now=10_000.0), 3, ms, policyloop.Memory())
    (a,) = [x for x in first.actions if x.replicas == 4]
    assert a.at_s > 10_060.0  # the last moment of this window, after the next period
    fresh = policyloop.decide(spec, snap(high, now=10_060.0), 3, ms, policyloop.Memory())
    assert next(x.at_s for x in fresh.actions if x.replicas == 4) > a.at_s  # would slip
    second = policyloop.decide(spec, snap(high, now=10_060.0), 3, ms, first.memory)
    kept = [x for x in second.actions if x.replicas == 4]
    assert kept and kept[0].at_s == a.at_s and "kept at its first" in kept[0].reason
    assert policyloop.target_at(second.actions, a.at_s, 3) == 4
    # the load falls back to 3 servers' worth: the pending scale-out is dropped
    low = high + [2.0 * per] * 3
    third = policyloop.decide(spec, snap(low, now=10_060.0), 3, ms, first.memory)
    assert not [x for x in third.actions if x.replicas == 4]


def test_drift_on_the_state_machine_is_a_conflict_never_a_scale() -> None:
    """The issue's reproduction: during a ScaleIn 4 -> 3, someone scales to 6; when the
    node reaches DECOMMISSIONED the machine used to scale to 3 (deleting two pods that
    never left the ring). Every phase now checks the size it expects."""
    op = operation.start("ScaleIn", "db", 4, 0.0, 60.0, "data")
    op, eff, _ = machine.advance(op, facts(spec_replicas=4), 10.0)
    assert eff == "decommission"
    for mode in ("LEAVING", "DECOMMISSIONED", "NORMAL"):
        held, eff, done = machine.advance(op, facts(spec_replicas=6, node_mode=mode), 20.0)
        assert (eff, done, held.phase) == ("conflict", False, "Decommissioning")
        assert "drift" in held.message and "expects 4" in held.message
    out = operation.start("ScaleOut", "db", 3, 0.0, 60.0)
    out, eff, _ = machine.advance(out, facts(spec_replicas=4, node_mode="JOINING"), 1.0)
    _, eff, _ = machine.advance(out, facts(spec_replicas=2, node_mode="JOINING"), 2.0)
    assert eff == "conflict"


def test_tamper_the_identity_of_an_operation_follows_from_its_target() -> None:
    op = operation.start("ScaleIn", "db", 4, 0.0, 60.0, "data")
    operation.check_identity(op, "db", "data")  # its own: accepted
    for bad in (replace(op, pod="db-0"), replace(op, pvc="data-db-0"),
                replace(op, to_replicas=1), replace(op, pvc=None)):
        with pytest.raises(ElastoreError):
            operation.check_identity(bad, "db", "data")
    with pytest.raises(ElastoreError, match="concerns 'other-3'"):
        operation.check_identity(op, "other", "data")


def test_stuck_past_its_deadline_or_refused_and_then_nothing_more() -> None:
    exp = operation.expected_seconds("ScaleIn", 4, 40 * 2**30, 10.0, 60.0)
    assert exp == pytest.approx(60 + 10 * 2**30 / (10 * 2**20))  # a node's 10 GiB at 10 MiB/s
    assert operation.expected_seconds("ScaleOut", 4, None, 10.0, 60.0) == 60.0
    op = operation.start("ScaleOut", "db", 3, 0.0, exp)
    assert op.deadline_s == pytest.approx(operation.DEADLINE_FACTOR * exp +
                                          operation.DEADLINE_MARGIN_S)
    op, _, _ = machine.advance(op, facts(spec_replicas=4, node_mode="JOINING"), 1.0)
    late = op.deadline_s + 1
    stuck, eff, done = machine.advance(op, facts(spec_replicas=4, node_mode="JOINING"), late)
    assert (eff, done, stuck.phase) == ("stuck", False, "Stuck") and "deadline" in stuck.message
    again, eff, _ = machine.advance(stuck, facts(spec_replicas=4, node_mode="NORMAL"), late)
    assert (eff, again) == ("none", stuck)  # no further effect, even if it would finish now
    assert operation.OperationState.from_status(stuck.to_status()) == stuck
    # a decommission the store refused: Stuck at once, with its output, never re-issued
    out = operation.start("ScaleIn", "db", 4, 0.0, 600.0)
    out, eff, _ = machine.advance(out, facts(spec_replicas=4), 1.0)
    assert eff == "decommission"
    why = "nodetool decommission exited 2: Not enough live nodes to maintain RF"
    s, eff, _ = machine.advance(out, facts(spec_replicas=4, decommission_failed=why),
                                1.0 + machine.REISSUE_AFTER_S + 1)
    assert (eff, s.phase) == ("stuck", "Stuck") and "Not enough live nodes" in s.message
    # Cassandra 5.0 says so itself: the node is DECOMMISSION_FAILED, not NORMAL (found on
    # the lab's 5.0.4); with or without the exec's own failure (an operator restarted)
    for failed in (why, None):
        s, eff, _ = machine.advance(out, facts(spec_replicas=4, node_mode="DECOMMISSION_FAILED",
                                               decommission_failed=failed), 5.0)
        assert (eff, s.phase) == ("stuck", "Stuck"), s
        assert (failed or "its node reports DECOMMISSION_FAILED") in s.message


# -- the ring before a decommission (issue 15, item 5) ---------------------------------------------
NODETOOL_504 = Path(__file__).parent / "data" / "nodetool-5.0.4"
IDS = [f"00000000-0000-4000-8000-{k:012d}" for k in range(8)]


def ring(states: str = "UN UN UN UN", loads_gib: tuple[float, ...] = (10, 10, 10, 10),
         dcs: str = "", keyspaces: dict[str, dict[str, int]] | None = None,
         strategy: str = "SimpleStrategy", leaving: int = -1) -> nodetool.Ring:
    st = states.split()
    dc = dcs.split() or ["dc1"] * len(st)
    nodes = tuple(nodetool.RingNode(s, f"10.0.0.{k + 1}", None if loads_gib[k] < 0 else
                                    loads_gib[k] * GIB, IDS[k], dc[k])
                  for k, s in enumerate(st))
    ks = {name: nodetool.Replication(strategy, f)
          for name, f in (keyspaces or {"ks": {"": 3}}).items()}
    return nodetool.Ring(nodes, ks, IDS[leaving % len(st)])


def test_ring_parsers_read_cassandra_504s_own_output() -> None:
    """Captured from the lab's Cassandra 5.0.4 (2 nodes), DEBUG lines of nodetool's own
    logging and all."""
    r = nodetool.read_ring(lambda cmd: (NODETOOL_504 / f"{cmd}.txt").read_text())
    assert [(n.state, n.address, n.dc) for n in r.nodes] == [
        ("UN", "127.0.0.2", "datacenter1"), ("UN", "127.0.0.1", "datacenter1")]
    assert r.nodes[0].load_bytes == pytest.approx(30.9 * 1024)
    assert r.nodes[1].load_bytes == pytest.approx(119.82 * 1024)
    assert r.self_id == r.nodes[1].host_id == "0d7334e9-cf14-4025-8cbc-336c73d2f8e4"
    assert r.keyspaces["system_distributed"] == nodetool.Replication("SimpleStrategy",
                                                                     {"": 3})
    assert r.keyspaces["system_traces"].factors == {"": 2}
    assert r.keyspaces["system"] == nodetool.Replication("LocalStrategy", {})
    # Cassandra's own rule, which counts the system keyspaces too
    assert decommission_refusal(r, 10 * GIB, 0.2, 0.5) == (
        "replication: keyspace system_distributed has RF 3 and 1 node(s) would remain; "
        "keyspace system_traces has RF 2 and 1 node(s) would remain")


def test_ring_parsers_refuse_what_they_do_not_understand() -> None:
    with pytest.raises(ElastoreError, match="lists no node"):
        nodetool.parse_status("error: JMX connection refused")
    with pytest.raises(ElastoreError, match="no Keyspaces section"):
        nodetool.parse_keyspaces("Cluster Information:\n\tName: Test Cluster\n")
    with pytest.raises(ElastoreError, match="OldNetworkTopologyStrategy is not understood"):
        nodetool.parse_keyspaces("Keyspaces:\n\tks -> Replication class: "
                                 "OldNetworkTopologyStrategy {replication_factor=3}\n")
    with pytest.raises(ElastoreError, match="unreadable replication factor"):
        nodetool.parse_keyspaces("Keyspaces:\n\tks -> Replication class: SimpleStrategy "
                                 "{replication_factor=three}\n")
    with pytest.raises(ElastoreError, match="no ID line"):
        nodetool.parse_host_id("Gossip active : true\n")
    ks = nodetool.parse_keyspaces(
        "Keyspaces:\n\tshop -> Replication class: NetworkTopologyStrategy "
        "{dc1=3, dc2=2/1}\n")
    assert ks["shop"].factors == {"dc1": 3, "dc2": 2}  # 2 replicas, 1 transient: 2
    assert nodetool.parse_size("1.5 TiB") == 1.5 * 1024**4
    assert nodetool.parse_size("12 KB") == 12 * 1024  # Cassandra before 4.1
    assert [n.load_bytes for n in nodetool.parse_status(
        "UN  10.0.0.1  ?  16  33.3%  00000000-0000-4000-8000-000000000001  r1")] == [None]


@pytest.mark.parametrize("r, volume_gib, says", [
    (ring(), 40, None),
    (ring("UN DN UN UN"), 40, "every node must be UN (up, normal): 10.0.0.2 is DN"),
    (ring("UN UN UJ UN"), 40, "10.0.0.3 is UJ"),
    (ring("UN UN UN UL"), 40, "10.0.0.4 is UL"),  # the leaving node itself
    (ring("UN UN UM UN"), 40, "10.0.0.3 is UM"),
    (ring(keyspaces={"ks": {"": 3}, "wide": {"": 4}}), 40,
     "replication: keyspace wide has RF 4 and 3 node(s) would remain"),
    # NetworkTopologyStrategy: only the leaving node's data centre counts
    (ring("UN UN UN UN UN UN", (10,) * 6, "a a a a b b", {"ks": {"a": 3, "b": 2}},
          "NetworkTopologyStrategy", leaving=3), 40, None),
    (ring("UN UN UN UN UN UN", (10,) * 6, "a a a b b b", {"ks": {"a": 3, "b": 3}},
          "NetworkTopologyStrategy", leaving=5), 40,
     "keyspace ks has RF 3 in b and 2 node(s) would remain there"),
    # free space on used bytes: 10 GiB + 10/3 GiB, + 50 % for compaction = 20 GiB
    (ring(), 25, None),
    (ring(), 24, "free space: 10.0.0.1 would hold 20.0 GiB (10.0 GiB now + 3.3 GiB from the "
                 "leaving node, + 50% for compaction), more than 80% of its 24.0 GiB"),
    (ring(loads_gib=(10, 14, 10, 10)), 25, "10.0.0.2 would hold 26.0 GiB"),  # the fullest
    (ring(), None, "requests no storage size"),
    (ring(loads_gib=(10, -1, 10, 10)), 40, "gives no load for 10.0.0.2"),
    (nodetool.Ring(ring().nodes, {}, "ffffffff-0000-4000-8000-000000000000"), 40,
     "is not in nodetool status"),
])
def test_ring_refuse_a_decommission_the_cluster_cannot_take(
        r: nodetool.Ring, volume_gib: float | None, says: str | None) -> None:
    got = decommission_refusal(r, None if volume_gib is None else volume_gib * GIB, 0.2, 0.5)
    if says is None:
        assert got is None
    else:
        assert got is not None and says in got, got


def test_stuck_a_failed_nodetool_is_summed_up_by_its_error_line() -> None:
    """nodetool prints ``error: <why>`` and then the Java stack trace: the trace's tail is
    frames, so the status and the Event carry the error line."""
    stderr = ("error: Not enough live nodes to maintain replication factor in keyspace "
              "system_distributed (RF = 3, N = 3). Perform a forceful decommission to "
              "ignore.\n-- StackTrace --\njava.lang.UnsupportedOperationException: Not "
              "enough live nodes\n" + "\tat org.apache.cassandra.service.StorageService."
              "decommission(StorageService.java:5412)\n" * 40)
    stdout = "15:12:28.424 [main] DEBUG io.netty.util.internal.logging - Using SLF4J\n"
    assert nodetool.failure_summary(stdout, stderr) == (
        "Not enough live nodes to maintain replication factor in keyspace "
        "system_distributed (RF = 3, N = 3). Perform a forceful decommission to ignore.")
    # Cassandra 5.0.4's own refusal (measured: exit 1, the node then DECOMMISSION_FAILED)
    refused = ("nodetool: Unsupported operation: Not enough live nodes to maintain "
               "replication factor in keyspace system_distributed (RF = 3, N = 3). Perform a "
               "forceful decommission to ignore.")
    assert nodetool.failure_summary(stdout, refused + "\nSee 'nodetool help' or 'nodetool "
                                    "help <command>'.\n") == refused
    assert nodetool.failure_summary("", "") == "(no output)"


def test_calibration_steps_set_how_long_a_surge_widens_the_scenarios() -> None:
    """A one-off surge 100 steps ago: with the default window (336 origins) its forecast
    errors still widen the horizon planner's upper scenarios; with 60 origins they have
    aged out, and the top scenario sits near the flat load again."""
    history = [300.0] * 400 + [750.0] * 10 + [300.0] * 100
    snap = snapshot(history, step=60.0)

    def top(**pred: Any) -> float:
        spec = parse(spec_with(controlPeriod="60s", metrics=PROM, prediction={
            "method": "persistence", "horizon": "60s", "step": "60s", **pred}))
        fc = policyloop.forecast(spec, snap)
        assert fc.path is not None
        return float(fc.path.scenarios_rps[-1][0])  # the top scenario, one step ahead

    remembered, forgotten = top(), top(calibrationSteps=60)
    assert remembered > 1.5 * 300, remembered
    assert forgotten == pytest.approx(300, rel=0.05), forgotten
    with pytest.raises(SpecError, match="calibrationSteps"):
        parse(spec_with(metrics=PROM, prediction={"calibrationSteps": 20}))


def test_in_cluster_login_uses_the_address_the_kubelet_gives_not_the_clusters_dns(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """kopf's service-account login names https://kubernetes.default.svc (cluster DNS);
    the operator's uses KUBERNETES_SERVICE_HOST/PORT, as client-go does (issue 36: the
    real node has no DNS, and the operator's pods never reached the API server)."""
    import kopf

    from elastore.operator import handlers

    assert handlers.in_cluster_server({}) is None
    assert handlers.in_cluster_server({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    assert handlers.in_cluster_server({"KUBERNETES_SERVICE_HOST": "10.0.0.1",
                                       "KUBERNETES_SERVICE_PORT": "443"}) == \
        "https://10.0.0.1:443"
    assert handlers.in_cluster_server({"KUBERNETES_SERVICE_HOST": "fd00::1",
                                       "KUBERNETES_SERVICE_PORT": "6443"}) == \
        "https://[fd00::1]:6443"
    sa = kopf.ConnectionInfo(server="https://kubernetes.default.svc", token="t",
                             ca_path=str(tmp_path / "ca.crt"))
    monkeypatch.setattr(kopf, "login_with_service_account", lambda **_: sa)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    got = handlers.login()
    assert got.server == "https://10.0.0.1:443" and got.token == "t" and \
        got.ca_path == sa.ca_path
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")  # a pod without it: kopf's own answer
    assert handlers.login() is sa


def test_the_backtest_goes_on_past_a_period_the_model_cannot_decide() -> None:
    """A write-only burst (read ratio ~0) on which the profile fits no load under a tight
    SLO: as in the operator, that period is a row without a decision ("DecisionFailed",
    the model's reason), and the periods after it are decided (the whole replay used to
    stop on the first such period)."""
    from elastore.errors import MetricsError as MetricsMissing
    from elastore.operator import backtest
    from elastore.resources import builtin_model

    spec = parse(spec_with(controlPeriod="10s", slo={"latencyMs": 7.94},
                           prediction={"horizon": "60s", "step": "20s"}, metrics=PROM,
                           planner={"mode": "Window"}))
    lab = ModelSet.load(builtin_model("lab")).for_slo(spec.slo_latency_ms, spec.slo_percentile)
    burst = {10_010.0}  # the second period: the bulk write

    class Source:
        def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
            return replace(snapshot([65.0] * 8, now=at_s, step=step_s),
                           read_ratio=0.01 if at_s in burst else 0.95, nodes=3)

        def scalar(self, name: str, at_s: float) -> float:
            raise MetricsMissing("MetricsMissing", f"{name}: no series")

        def per_node(self, at_s: float) -> dict[str, Any]:
            raise MetricsMissing("MetricsMissing", "no per-node series")

        def disk(self, at_s: float, steps: int, step_s: float,
                 pvc_template: str | None = None) -> Any:
            raise MetricsMissing("MetricsMissing", "no bytes per node")

    rows = backtest.replay(spec, Source(), lab, 10_000.0, 10_040.0)
    assert [r.ok for r in rows] == [True, False, True, True, True], rows
    bad = rows[1]
    assert bad.reason.startswith("DecisionFailed: ") and "no load fits" in bad.reason, bad
    # no decision: neither a 0 load nor a 0 change
    assert bad.load_rps is None and bad.would_scale is None
    assert all(r.load_rps == 65.0 and r.replicas == 3 for r in rows if r.ok)
    assert backtest.summary(rows)["failed"] == 1
