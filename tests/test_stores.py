"""The store seam (issue 34): the registry, the pure admission gates, and the step executor
every store shares. The drivers themselves are exercised through the runner's suites
(test_operator_runner, test_datacenter_logic, test_swift_operation, test_cleanup) and, on
real stores, the e2e suites; here a tiny driver written for the test (a pure unit) pins the
executor's order: the state is recorded before its effect, and a forged or drifted target
gets no effect at all."""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastore.actuators.ports import DriftError, StatefulSetFacts
from elastore.errors import ElastoreError
from elastore.operator.spec import SpecError, parse
from elastore.planner import admission
from elastore.planner.admission import Facts, Intent
from elastore.stores import operation, registry, steps
from elastore.stores.base import (
    Advanced,
    EffectFailed,
    StoreCall,
    StoreDriver,
    Target,
)
from elastore.stores.operation import OperationState

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "charts" / "elastore" / "crds" / "elasticpolicies.elastore.io.yaml"


# -- the registry ------------------------------------------------------------------------------
def _protocol_methods() -> set[str]:
    return {n for n, v in vars(StoreDriver).items() if callable(v) and not n.startswith("_")}


def test_every_registered_driver_implements_the_whole_seam() -> None:
    wanted = _protocol_methods()
    assert {"read", "advance", "apply", "refusal", "holds", "begin"} <= wanted
    for s in registry.STORES:
        cls = registry.driver_class(s)
        missing = {m for m in wanted if not callable(getattr(cls, m, None))}
        assert not missing, (s.name, missing)
        for m in wanted:  # the same parameters as the Protocol says
            want = list(inspect.signature(getattr(StoreDriver, m)).parameters)
            got = list(inspect.signature(getattr(cls, m)).parameters)
            assert got == want, (s.name, m, got, want)


def test_each_store_brings_its_presets_and_its_default_is_one_of_them() -> None:
    from elastore.operator.presets import PRESETS

    seen: set[str] = set()
    for s in registry.STORES:
        mine = registry.presets_of(s)
        assert s.default_preset in mine, s
        assert all(PRESETS[n] is e for n, e in mine.items())  # gathered, not copied
        seen |= set(mine)
    assert seen == set(PRESETS)
    swift = registry.entry("swift", "StatefulSet")
    assert swift is not None and registry.presets_of(swift)["swift-statsd"].data is None


def test_the_crds_store_and_kind_enums_are_the_registrys() -> None:
    doc = yaml.safe_load(CRD.read_text())
    target = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["target"]["properties"]
    assert tuple(target["store"]["enum"]) == registry.store_names() == ("cassandra", "swift")
    assert tuple(target["kind"]["enum"]) == registry.target_kinds()
    assert set(registry.target_kinds()) == {"StatefulSet", "CassandraDatacenter"}


def _spec(**target: Any) -> dict[str, Any]:
    return {"target": {"name": "db", "replicationFactor": 3, **target},
            "replicas": {"min": 3, "max": 6}, "slo": {"latencyMs": 50},
            "metrics": {"prometheus": {"url": "http://p:9090"}}}


def test_a_pair_no_driver_serves_is_refused_by_the_parse_with_the_ones_that_are() -> None:
    with pytest.raises(SpecError, match="no store driver serves store 'swift' as "
                                        "CassandraDatacenter; these are served: cassandra as "
                                        "StatefulSet"):
        parse(_spec(store="swift", kind="CassandraDatacenter"))
    for s in registry.STORES:
        extra = {"swift": {"ringConfigMap": "rings"}} if s.store == "swift" else {}
        spec = parse(_spec(store=s.store, kind=s.kind, **extra))
        name, driver = registry.driver_for(spec)
        assert name == s.name and type(driver) is registry.driver_class(s)
        assert registry.driver_for(spec)[1] is not driver  # one per policy


class _Fourth:
    """A store added by one registry line (what the docs show): nothing else changes."""


def test_a_fourth_store_is_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "STORES", (*registry.STORES, registry.Store(
        "scylla", "scylla", "StatefulSet", f"{__name__}:_Fourth",
        "elastore.stores.cassandra.presets:PRESETS", "jmx-exporter", "a test's store")))
    assert registry.store_names() == ("cassandra", "swift", "scylla")
    s = registry.entry("scylla", "StatefulSet")
    assert s is not None and registry.driver_class(s) is _Fourth
    assert registry.entry("scylla", "CassandraDatacenter") is None


# -- admission: pure gates, in order ----------------------------------------------------------
OUT, IN = Intent("ScaleOut", 5, 4), Intent("ScaleIn", 3, 4)


def _held(intent: Intent, **facts: Any) -> str | None:
    """The gate that holds ``intent``; the facts not given are those of a step every gate
    lets through (a decision of a minute ago, staleAfter 2 minutes)."""
    got = admission.admit(intent, Facts(**{"enforce": True, "decision_age_s": 60.0,
                                           "stale_after_s": 120.0, **facts}))
    return None if got is None else got.reason


@pytest.mark.parametrize(("intent", "facts", "reason"), [
    (OUT, {}, None),
    (OUT, {"enforce": False}, "Recommend"),
    (OUT, {"paused": True, "pause_message": "paused by x"}, "Paused"),
    (OUT, {"evidence": False}, "NoEvidence"),
    (OUT, {"evidence": False, "fallback_scale_out": True}, None),  # the fallback's scale-out
    (IN, {"evidence": False, "fallback_scale_out": True}, "NoEvidence"),  # never a scale-in
    (OUT, {"behavior_limit": "1 pod per hour"}, "BehaviorLimit"),
    (OUT, {"conflict": ("TargetContended", "an HPA")}, "TargetContended"),
    (OUT, {"aborting": "the abort annotation"}, "Aborted"),
    (IN, {"partial_metrics": ("MetricsPartial", "2 of 3")}, "MetricsPartial"),
    (OUT, {"partial_metrics": ("MetricsPartial", "2 of 3")}, None),  # adds never hurt
    (IN, {"learning": "confidence 0.2"}, "ModelLearning"),
    (OUT, {"learning": "confidence 0.2"}, None),
    (IN, {"decision_age_s": 700.0}, "StaleDecision"),
    (IN, {"decision_age_s": None}, "StaleDecision"),
    (OUT, {"decision_age_s": 700.0}, None),  # an old plan's scale-out only adds capacity
])
def test_each_gate_holds_what_it_says(intent: Intent, facts: dict[str, Any],
                                      reason: str | None) -> None:
    assert _held(intent, **facts) == reason


def test_the_first_gate_in_order_is_the_one_reported() -> None:
    everything = {"enforce": False, "paused": True, "evidence": False,
                  "behavior_limit": "x", "conflict": ("Drift", "y"), "aborting": "z",
                  "decision_age_s": 700.0,
                  "partial_metrics": ("MetricsPartial", "p"), "learning": "l"}
    order = []
    facts = dict(everything)
    for name, _ in admission.GATES:
        got = _held(IN, **facts)
        assert got is not None
        order.append(got)
        # clear this gate's fact: the next gate is reported
        facts = {**facts, **{"recommend": {"enforce": True}, "pause": {"paused": False},
                             "evidence": {"evidence": True},
                             "behavior": {"behavior_limit": None},
                             "conflict": {"conflict": None}, "abort": {"aborting": None},
                             "fresh decision": {"decision_age_s": 60.0},
                             "partial metrics": {"partial_metrics": None},
                             "learning": {"learning": None}}[name]}
    assert order == ["Recommend", "Paused", "NoEvidence", "BehaviorLimit", "Drift", "Aborted",
                     "StaleDecision", "MetricsPartial", "ModelLearning"]
    assert _held(IN, **facts) is None


def test_a_size_the_user_named_passes_the_plans_gates_but_not_safety() -> None:
    user = replace(IN, user_named=True)
    for facts in ({"paused": True}, {"evidence": False}, {"behavior_limit": "x"},
                  {"partial_metrics": ("MetricsPartial", "p")}, {"learning": "l"},
                  {"decision_age_s": 700.0}):
        assert _held(user, **facts) is None, facts
    assert _held(user, conflict=("StatusRejected", "forged")) == "StatusRejected"
    assert _held(user, aborting="abort") == "Aborted"
    assert "paused-replicas asks for 3" in admission.admit(
        user, Facts(enforce=False)).message  # type: ignore[union-attr]


# -- the step executor ---------------------------------------------------------------------
class _Driver:
    """Scripted answers; every call recorded in order."""

    def __init__(self, effect: str, *, fail: Exception | None = None,
                 refuse: str | None = None, phase: str = "Scaling") -> None:
        self.effect, self.fail, self.refuse, self.phase = effect, fail, refuse, phase
        self.log: list[str] = []

    def advance(self, call: StoreCall, op: OperationState) -> Advanced:
        self.log.append("advance")
        return Advanced(replace(op, phase=self.phase, message=f"to {self.phase}"),
                        self.effect, False)

    def before_effect(self, call: StoreCall, op: OperationState, new: Advanced) -> str | None:
        self.log.append("before_effect")
        return self.refuse

    def apply(self, call: StoreCall, op: OperationState, new: Advanced) -> OperationState:
        self.log.append(f"apply {new.effect}")
        if self.fail is not None:
            raise self.fail
        return new.operation

    def stopped(self, call: StoreCall, op: OperationState) -> None:
        self.log.append("stopped")


def _call(log: list[str]) -> tuple[StoreCall, dict[str, Any], list[tuple[str, bool, str]]]:
    conds: dict[str, Any] = {}
    events: list[tuple[str, bool, str]] = []
    sts = StatefulSetFacts("db", 4, 4, 4, "data", None, managed=True)
    spec = parse(_spec())

    def save(op: OperationState | None) -> None:
        log.append(f"save {None if op is None else op.phase}")

    call = StoreCall("ns", "p", spec, object(), Target(sts), {}, 100.0,  # type: ignore[arg-type]
                     lambda: 100.0, lambda r, m, w: events.append((r, w, m)),
                     lambda c, st, r, m: conds.__setitem__(c, (st, r, m)), save, {})
    return call, conds, events


def _op() -> OperationState:
    return operation.start("ScaleIn", "db", 4, 50.0, 60.0, "data")


def test_the_state_is_recorded_before_its_effect() -> None:
    d = _Driver("scale")
    call, conds, events = _call(d.log)
    got = steps.advance(d, call, _op())  # type: ignore[arg-type]
    assert d.log == ["advance", "before_effect", "save Scaling", "apply scale"]
    assert got.blocked is None and got.operation.phase == "Scaling"
    assert conds["ScalingDown"][1] == "ScaleInScaling"
    assert [e[0] for e in events] == ["ScaleInScaling"]  # a new phase is an Event
    assert call.out["operation"]["phase"] == "Scaling"


def test_a_forged_operation_gets_no_effect_and_no_write() -> None:
    d = _Driver("reject")
    call, conds, _ = _call(d.log)
    op = _op()
    got = steps.advance(d, call, op)  # type: ignore[arg-type]
    assert d.log == ["advance"]  # neither saved nor applied
    assert got.operation == op and got.blocked is not None and \
        got.blocked[0] == "StatusRejected"
    assert conds["ScalingDown"][1] == "Blocked"


def test_drift_during_the_effect_blocks_and_a_failed_effect_is_retried() -> None:
    d = _Driver("scale", fail=DriftError("replicas are 7, not 4"))
    call, _, _ = _call(d.log)
    got = steps.advance(d, call, _op())  # type: ignore[arg-type]
    assert got.blocked == ("Drift", "replicas are 7, not 4") and not got.done
    d = _Driver("ring-add", fail=EffectFailed("RingChangeFailed", "conflict on write"))
    call, conds, events = _call(d.log)
    got = steps.advance(d, call, _op())  # type: ignore[arg-type]
    assert got.blocked is None and not got.done
    assert ("RingChangeFailed", True) in [(r, w) for r, w, _ in events]
    assert "failed (retried)" in conds["ScalingDown"][2]
    d = _Driver("scale", fail=RuntimeError("a bug"))  # anything else goes up to kopf
    call, _, _ = _call(d.log)
    with pytest.raises(RuntimeError):
        steps.advance(d, call, _op())  # type: ignore[arg-type]


def test_a_stuck_step_undoes_what_must_not_outlive_it() -> None:
    d = _Driver("stuck", phase="Stuck")
    call, conds, events = _call(d.log)
    steps.advance(d, call, _op())  # type: ignore[arg-type]
    assert d.log == ["advance", "stopped", "save Stuck"]
    assert conds["ScalingDown"][1] == "Stuck" and events[0][:2] == ("OperationStuck", True)


def test_a_refusal_just_before_the_effect_gives_up_a_step_never_carried_out() -> None:
    d = _Driver("decommission", refuse="the ring has a DN node", phase="Decommissioning")
    call, conds, events = _call(d.log)
    got = steps.advance(d, call, _op())  # type: ignore[arg-type]
    assert got.done and d.log == ["advance", "before_effect", "save None"]
    assert conds["ScalingDown"][1] == "Refused" and events[0][0] == "ScaleInRefused"
    issued = replace(_op(), decommission_issued_s=60.0)  # a re-issue: Stuck instead
    d = _Driver("decommission", refuse="the ring has a DN node", phase="Decommissioning")
    call, conds, _ = _call(d.log)
    got = steps.advance(d, call, issued)  # type: ignore[arg-type]
    assert not got.done and got.operation.phase == "Stuck" and d.log[-1] == "save Stuck"


def test_a_store_that_does_not_answer_fails_the_tick_instead_of_calling_the_step_stuck() -> None:
    from elastore.stores.base import FactsUnreadable

    class Silent(_Driver):
        def advance(self, call: StoreCall, op: OperationState) -> Advanced:
            raise FactsUnreadable("pods/exec: the API server timed out")

    d = Silent("scale")
    call, conds, events = _call(d.log)
    with pytest.raises(FactsUnreadable):
        steps.advance(d, call, _op())  # type: ignore[arg-type]
    assert conds == {} and events == [] and "operation" not in call.out

    class Refusing(_Driver):  # the machine's own refusal: Stuck, said, the state kept
        def advance(self, call: StoreCall, op: OperationState) -> Advanced:
            raise ElastoreError("a pod vanished mid-decommission")

    d = Refusing("scale")
    call, conds, events = _call(d.log)
    op = _op()
    got = steps.advance(d, call, op)  # type: ignore[arg-type]
    assert conds["ScalingDown"][1] == "Stuck" and events[0][:2] == ("OperationStuck", True)
    assert got.operation is op and not got.done and call.out["operation"] == op.to_status()


def test_a_driver_refuses_a_port_without_its_stores_calls() -> None:
    """Only a driver narrows the cluster port to its store's own calls, and only after its
    ``refused`` found them: a port with no nodetool (or no Swift, no datacenter) is
    ``TargetNotSupported``, said, before any call."""
    from elastore.stores.base import Allowed

    class GenericOnly:  # a ClusterPort and nothing more
        def statefulset(self, ns: str, name: str) -> None:
            return None

    allowed = Allowed(nodetools=(("nodetool",),))
    for s in registry.STORES:
        extra = {"swift": {"ringConfigMap": "rings"}} if s.store == "swift" else {}
        spec = parse({**_spec(store=s.store, kind=s.kind, **extra), "mode": "Enforce"})
        got = registry.driver_class(s)().refused(spec, GenericOnly(),  # type: ignore[arg-type]
                                                 allowed)
        assert got is not None and got[0] == "TargetNotSupported", (s.name, got)


def test_the_shipped_statsd_mapping_makes_the_series_the_swift_preset_reads() -> None:
    """The mapping users load into their own statsd_exporter is the file the package ships
    (and the lab runs); it turns Swift's object-server timers into the histogram the
    ``swift-statsd`` preset queries, in seconds."""
    import re

    import yaml

    from elastore.stores.swift.presets import PRESETS, statsd_mapping

    doc = yaml.safe_load(statsd_mapping())
    assert doc["defaults"]["observer_type"] == "histogram"
    by_name = {m["name"]: m for m in doc["mappings"]}
    server = by_name["swift_server_request_seconds"]
    assert server["match_type"] == "regex" and server["labels"] == {"server": "$1",
                                                                     "verb": "$2"}
    pat = re.compile(server["match"])
    got = pat.match("object-server.GET.timing")
    assert got is not None and got.groups() == ("object", "GET")
    assert pat.match("object-server.GET.errors.timing") is None  # errors: their own series
    # the preset's queries name exactly this series
    assert all("swift_server_request_seconds" in q for q in
               (PRESETS["swift-statsd"].read, PRESETS["swift-statsd"].node_latency))
