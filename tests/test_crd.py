"""The CRD the API server enforces and the parser the loop trusts say the same thing: every
enum value parses and nothing else does, every default is the parser's default, the method
enum is the predictor registry, the schema is generated from the declarations
(:mod:`elastore.operator.specfields`), and the chart ships the package's file."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastore.operator import crd
from elastore.operator.spec import (
    DEFAULT_QUERIES,
    OPTIONAL_QUERIES,
    PolicySpec,
    SpecError,
    parse,
    parse_duration,
)
from elastore.operator.specfields import (
    BUILTIN_PERCENTILES,
    BY_PATH,
    FIELDS,
    PERCENTILE_RULE,
    spec_schema,
    unknown_fields,
)
from elastore.predictor.registry import DEFAULT_METHOD, METHODS
from elastore.resources import crd_path

REPO = Path(__file__).resolve().parent.parent
MINIMAL: dict[str, Any] = {"target": {"name": "db", "replicationFactor": 3},
                           "replicas": {"min": 3, "max": 9}, "slo": {"latencyMs": 50},
                           "metrics": {"prometheus": {"url": "http://127.0.0.1:9090"}}}


def schema() -> dict[str, Any]:
    doc = yaml.safe_load(crd_path().read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def walk(node: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")


def with_value(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(MINIMAL)
    node = spec
    keys = path.split(".")[1:]
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return spec


#: every schema default -> how the parsed spec shows it (a new default without an entry
#: here fails the test, so none can drift unseen)
DEFAULTS: dict[str, Callable[[PolicySpec], Any]] = {
    "spec.target.kind": lambda p: p.target.kind,
    "spec.target.store": lambda p: p.target.store,
    "spec.target.swift.ringDir": lambda p: p.target.swift.ring_dir,
    "spec.target.swift.devicesDir": lambda p: p.target.swift.devices_dir,
    "spec.target.swift.device": lambda p: p.target.swift.device,
    "spec.target.swift.weight": lambda p: p.target.swift.weight,
    "spec.target.nodetool": lambda p: list(p.target.nodetool),
    "spec.slo.percentile": lambda p: p.slo_percentile,
    "spec.controlPeriod": lambda p: p.control_period_s,
    "spec.mode": lambda p: p.mode,
    "spec.prediction": lambda p: None,  # {}: the object's own defaults apply
    "spec.storage": lambda p: None,
    "spec.storage.targetUtilization": lambda p: p.storage.target_utilization,
    "spec.storage.compaction": lambda p: p.storage.compaction,
    "spec.storage.expandVolumes": lambda p: p.storage.expand_volumes,
    "spec.cost.nodeHour": lambda p: p.storage.node_hour_cost,
    "spec.cost.gibMonth": lambda p: p.storage.gib_month_cost,
    "spec.prediction.method": lambda p: p.prediction_method,
    "spec.prediction.horizon": lambda p: p.prediction_horizon_s,
    "spec.prediction.step": lambda p: p.prediction_step_s,
    "spec.prediction.headroom": lambda p: p.headroom,
    "spec.prediction.calibrationSteps": lambda p: p.calibration_steps,
    "spec.planner": lambda p: None,
    "spec.planner.mode": lambda p: p.planner_mode,
    "spec.planner.lookahead": lambda p: p.lookahead_s,
    "spec.cost": lambda p: None,
    "spec.cost.violationPenalty": lambda p: p.violation_penalty,
    "spec.migration": lambda p: None,
    "spec.migration.policy": lambda p: p.migration_policy,
    "spec.migration.minMiBps": lambda p: p.min_migration_mibps,
    "spec.migration.maxMiBps": lambda p: p.max_migration_mibps,
    "spec.migration.nodeOverheadSeconds": lambda p: p.node_overhead_s,
    "spec.capacityModel.configMapRef.key": lambda p: p.model_key,
    "spec.capacityModel.confidenceThreshold": lambda p: p.confidence_threshold,
    "spec.capacityModel.explorationStep": lambda p: p.exploration_step,
    "spec.metrics.prometheus.staleAfter": lambda p: p.prometheus and p.prometheus.stale_after_s,
    "spec.metrics.prometheus.rateWindow": lambda p: p.prometheus and p.prometheus.rate_window_s,
    "spec.metrics.prometheus.namespaceLabel":
        lambda p: p.prometheus and p.prometheus.namespace_label,
    "spec.metrics.prometheus.podLabel": lambda p: p.prometheus and p.prometheus.pod_label,
    "spec.metrics.prometheus.tlsConfig.insecureSkipVerify":
        lambda p: p.prometheus and p.prometheus.auth.insecure_skip_verify,
    "spec.interference": lambda p: None,
    "spec.scaleDown": lambda p: None,
    "spec.behavior.scaleUp.selectPolicy": lambda p: p.behavior.scale_up.select,
    "spec.behavior.scaleDown.selectPolicy": lambda p: p.behavior.scale_down.select,
    "spec.fallback.failureThreshold": lambda p: p.fallback_threshold,
    "spec.fallback.behavior": lambda p: p.fallback_behavior,
    "spec.scaleDown.pvcPolicy": lambda p: p.pvc_policy,
    "spec.scaleUp.cleanup": lambda p: p.cleanup,
    "spec.repairs.hold": lambda p: p.hold_for_repairs,
    "spec.scaleDown.minFreeFraction": lambda p: p.min_free_fraction,
    "spec.scaleDown.compactionMargin": lambda p: p.compaction_margin,
}


def test_the_method_enum_is_the_predictor_registry() -> None:
    methods = dict(walk(schema()))["spec.prediction.method"]
    assert methods["enum"] == list(METHODS)
    assert methods["default"] == DEFAULT_METHOD
    assert crd.main(["--check", "--repo", str(REPO)]) == 0


def test_every_schema_default_is_the_parsers() -> None:
    defaults = {p: n["default"] for p, n in walk(schema()) if "default" in n}
    assert set(defaults) == set(DEFAULTS), "a default without a check, or a check without one"
    for path, default in defaults.items():
        if isinstance(default, dict):
            assert default == {}, path
            continue
        spec = copy.deepcopy(MINIMAL)
        if path == "spec.capacityModel.configMapRef.key":
            spec["capacityModel"] = {"configMapRef": {"name": "models"}}
        got = DEFAULTS[path](parse(spec))
        want = parse_duration(default, path) if isinstance(default, str) and \
            path.endswith(("controlPeriod", "horizon", "step", "staleAfter", "rateWindow",
                           "lookahead")) \
            else default
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, path


def test_every_enum_value_parses_and_no_other() -> None:
    enums = {p: n["enum"] for p, n in walk(schema()) if "enum" in n}
    assert "spec.prediction.method" in enums and len(enums) >= 7
    for path, values in enums.items():
        for v in values:
            spec = with_value(path, v)
            if path == "spec.slo.percentile" and v not in BUILTIN_PERCENTILES:
                # a percentile the built-in model lacks needs a model fitted for it
                spec["capacityModel"] = {"configMapRef": {"name": "models"}}
            parse(spec)  # no SpecError
        with pytest.raises(SpecError) as err:
            parse(with_value(path, "not-a-value" if isinstance(values[0], str) else 42))
        assert err.value.where == path


def test_interference_enabled_has_no_default_absent_is_auto() -> None:
    """``spec.interference.enabled`` absent is Auto (None), not false: a schema default
    would write ``false`` into every new policy and turn Auto off for good."""
    node = dict(walk(schema()))["spec.interference.enabled"]
    assert node["type"] == "boolean" and "default" not in node
    assert parse(MINIMAL).interference is None
    assert parse(with_value("spec.interference.enabled", True)).interference is True
    assert parse(with_value("spec.interference.enabled", False)).interference is False


def test_the_queries_the_schema_allows_are_the_parsers() -> None:
    queries = dict(walk(schema()))["spec.metrics.prometheus.queries"]
    assert set(queries["properties"]) == {*DEFAULT_QUERIES, *OPTIONAL_QUERIES}


def test_the_preset_enum_is_the_presets_and_its_default_follows_the_target() -> None:
    """No schema default: the API server would write it into every policy, and the parser
    could not tell a datacenter's (management-api) from a StatefulSet's (jmx-exporter)."""
    from elastore.operator.presets import DEFAULT_PRESET, PRESETS
    from elastore.stores.registry import entry

    # the Management API's /metrics, which cass-operator's pods serve
    # (k8ssandra/management-api-for-apache-cassandra): each store's default is its registry's
    dc_store = entry("cassandra", "CassandraDatacenter")
    assert dc_store is not None
    DATACENTER_PRESET = dc_store.default_preset

    node = dict(walk(schema()))["spec.metrics.prometheus.preset"]
    assert node["enum"] == list(PRESETS) and "default" not in node
    sts = parse(MINIMAL).prometheus
    dc = parse({**MINIMAL, "target": {**MINIMAL["target"], "kind": "CassandraDatacenter"}}
               ).prometheus
    assert sts is not None and dc is not None
    sw = parse({**MINIMAL, "target": {**MINIMAL["target"], "store": "swift"}}).prometheus
    assert sw is not None
    assert (sts.preset, dc.preset, sw.preset) == (DEFAULT_PRESET, DATACENTER_PRESET,
                                                  "swift-statsd")
    assert DATACENTER_PRESET == "management-api" != DEFAULT_PRESET == "jmx-exporter"
    given = {**MINIMAL, "target": {**MINIMAL["target"], "kind": "CassandraDatacenter"},
             "metrics": {"prometheus": {**MINIMAL["metrics"]["prometheus"], "preset": "mcac"}}}
    assert parse(given).prometheus.preset == "mcac"  # type: ignore[union-attr]


def test_the_chart_ships_the_packages_crd() -> None:
    chart = crd.chart_copy(REPO)
    assert chart.read_text() == crd_path().read_text(), \
        "run: python -m elastore.operator.crd"


def test_the_spec_schema_is_generated_from_the_declarations() -> None:
    """The committed CRD says what the declarations say, and writing it changes nothing."""
    assert schema() == spec_schema()
    assert crd.render(crd_path().read_text()) == crd_path().read_text()


def test_every_declared_field_is_in_the_schema_and_no_other() -> None:
    def paths(node: dict[str, Any], path: str = "spec") -> Iterator[str]:
        yield path
        if "items" in node:
            yield from paths(node["items"], path + "[]")
        for name, child in (node.get("properties") or {}).items():
            yield from paths(child, f"{path}.{name}")

    declared = [f.path for f in FIELDS]
    assert len(declared) == len(set(declared)), "a field declared twice"
    assert set(paths(schema())) == set(declared)
    for f in FIELDS:
        if f.path != "spec":
            assert f.parent in BY_PATH, f"{f.path}: its parent is not declared"


def test_a_drifted_crd_fails_the_check(tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    good = crd_path().read_text()
    src = tmp_path / "crd.yaml"
    monkeypatch.setattr(crd, "crd_path", lambda: src)
    chart = crd.chart_copy(tmp_path)
    chart.parent.mkdir(parents=True)
    chart.write_text(good)
    # a hand edit of the generated block, and a method the registry does not have
    drift = {"min: {type: integer, minimum: 1, maximum: 1000}":
             "min: {type: integer, minimum: 1, maximum: 999}",
             f"enum: [{', '.join(METHODS)}]": "enum: [prorenata, naive]"}
    for was, now in drift.items():
        assert was in good
        src.write_text(good.replace(was, now))
        assert crd.main(["--check", "--repo", str(tmp_path)]) == 1
        assert crd.render(src.read_text()) == good
        assert crd.main(["--repo", str(tmp_path)]) == 0
        assert src.read_text() == good
        assert crd.main(["--check", "--repo", str(tmp_path)]) == 0
    chart.write_text(good.replace("maximum: 1000}", "maximum: 999}"))
    assert crd.main(["--check", "--repo", str(tmp_path)]) == 1
    with pytest.raises(Exception, match="exactly one line"):
        crd.render(good.replace(crd.MARK, ""))


# -- the SLO percentile (issue 41): refused at admission where it cannot be planned ---------
def test_the_percentiles_are_the_models_and_the_default_is_the_built_in_profiles() -> None:
    """The enum is the percentiles a model can be fitted for; the default, and the only
    percentile a policy without a model of its own gets, is the one the shipped lab
    profile's latencies are (read from the file, so the two cannot disagree)."""
    from elastore.models.bundle import ModelSet
    from elastore.models.capacity import PERCENTILES
    from elastore.resources import builtin_model

    node = dict(walk(schema()))["spec.slo.percentile"]
    assert node["enum"] == list(PERCENTILES) == [95, 99]
    lab = ModelSet.load(builtin_model("lab")).capacity.percentile
    assert BUILTIN_PERCENTILES == (lab,) == (95,) and node["default"] == lab


def test_the_crd_refuses_a_percentile_the_built_in_model_lacks_with_the_parsers_reason(
        ) -> None:
    """The CEL rule on spec (what kubectl apply prints) and the parser's error carry one
    message: which percentile is supported without a model, why, and how to get another."""
    rule, message = PERCENTILE_RULE
    rules = {r["rule"]: r["message"] for r in schema()["x-kubernetes-validations"]}
    assert rules.get(rule) == message
    assert "self.slo.percentile in [95]" in rule and "self.capacityModel.configMapRef" in rule
    assert message.startswith("slo.percentile 99 needs spec.capacityModel.configMapRef")
    assert "holds p95 latencies only" in message and "elastore models fit --percentile 99" \
        in message and "the supported percentile is 95" in message
    with pytest.raises(SpecError) as err:
        parse(with_value("spec.slo.percentile", 99))
    assert err.value.where == "spec.slo.percentile" and err.value.message == message
    learning = with_value("spec.slo.percentile", 99)
    learning["capacityModel"] = {"learn": True, "priorScale": 0.5}  # still the built-in
    with pytest.raises(SpecError, match="holds p95 latencies only"):
        parse(learning)


def test_a_p99_slo_with_a_model_of_its_own_is_admitted() -> None:
    """A configMapRef names a model fitted for p99: admitted (a model fitted for another
    percentile is the runtime's ModelError, with the fit command to run)."""
    spec = with_value("spec.slo.percentile", 99)
    spec["capacityModel"] = {"configMapRef": {"name": "model-p99"}}
    p = parse(spec)
    assert p.slo_percentile == 99 and p.model_configmap == "model-p99" and not p.learn
    assert parse(MINIMAL).slo_percentile == 95
    with pytest.raises(SpecError, match="must be one of 95, 99, got 90"):
        parse(with_value("spec.slo.percentile", 90))


# -- strict: the fields the schema does not declare ----------------------------------------
def test_strict_names_every_unknown_field_by_its_path() -> None:
    """As the API server's strict field validation: each unknown field's path, an array's
    item by its index; the default parse (objects the API server already pruned) ignores
    them."""
    spec = copy.deepcopy(MINIMAL)
    spec["prediction"] = {"horizn": "20m"}
    spec["replica"] = 4
    spec["behavior"] = {"scaleUp": {"policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 60},
        {"type": "Pods", "value": 2, "periodSeconds": 60, "perod": 1}]}}
    spec["metrics"]["prometheus"]["queries"] = {"laod": "sum(x)"}
    want = ["spec.prediction.horizn", "spec.replica",
            "spec.behavior.scaleUp.policies[1].perod",
            "spec.metrics.prometheus.queries.laod"]
    assert sorted(unknown_fields(spec)) == sorted(want)
    with pytest.raises(SpecError) as err:
        parse(spec, strict=True)
    for path in want:
        assert f'unknown field "{path}"' in err.value.message
    assert parse(MINIMAL, strict=True).slo_latency_ms == 50
    assert unknown_fields(MINIMAL) == []


def test_strict_knows_every_declared_object_and_nothing_else() -> None:
    """Below every object of the schema (array items aside) a field it declares passes and
    one it does not is named: the walk and the schema cannot disagree."""
    for path, node in walk(schema()):
        if node.get("type") != "object" or "[]" in path or path == "spec":
            continue
        spec = with_value(f"{path}.notAField", 1)
        assert unknown_fields(spec) == [f"{path}.notAField"], path
        for child in node.get("properties") or {}:
            assert unknown_fields(with_value(f"{path}.{child}", 1)) == [], f"{path}.{child}"
