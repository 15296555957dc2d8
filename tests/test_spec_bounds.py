"""Every number and duration a policy author writes has an upper bound, in the CRD and in the
parser, from one declaration (issue 35, finding 8: ``prediction.step: 100000h``,
``staleAfter: 100000h`` and ``maxMiBps: 1e308`` were accepted, and ended in ValueError,
OverflowError or a staleness check switched off). The real API server applies the same
schema: tests/test_operator_k8s.py's invalid-policy test."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from elastore.operator.fielddecl import F, span
from elastore.operator.spec import SpecError, parse
from elastore.operator.specfields import FIELDS, spec_schema

BASE: dict[str, Any] = {
    "target": {"name": "db", "replicationFactor": 3},
    "replicas": {"min": 3, "max": 6},
    "slo": {"latencyMs": 100},
    "metrics": {"prometheus": {"url": "http://prometheus.example:9090"}},
}
#: what a field inside a list item needs beside it to be read at all
ITEMS: dict[str, dict[str, Any]] = {
    "spec.behavior.scaleUp.policies[]": {"type": "Pods", "value": 1, "periodSeconds": 60},
    "spec.behavior.scaleDown.policies[]": {"type": "Pods", "value": 1, "periodSeconds": 60},
}
#: what a field needs elsewhere in the spec to be read at all
CONTEXT: dict[str, dict[str, Any]] = {
    "spec.target.swift.": {"target": {"name": "db", "replicationFactor": 3, "store": "swift"}},
    "spec.bandwidth.": {"bandwidth": {"nodeMbit": 100}},
}


def numeric(f: F) -> bool:
    return f.type in ("number", "integer")


def durations() -> list[F]:
    return [f for f in FIELDS if f.type == "string" and f.pattern and "(s|m|h)" in
            f.pattern.replace("ms|", "")]


def with_value(f: F, value: Any) -> dict[str, Any]:
    """The base spec with ``f`` set to ``value`` (and whatever it needs beside it)."""
    spec = copy.deepcopy(BASE)
    for prefix, ctx in CONTEXT.items():
        if f.path.startswith(prefix):
            spec.update(copy.deepcopy(ctx))
    parts = f.path.removeprefix("spec.").split(".")
    node: Any = spec
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        key = part.removesuffix("[]")
        if part.endswith("[]"):  # a list: of the value itself, or of one item holding it
            item_path = "spec." + ".".join(parts[:k + 1])
            if last:
                node[key] = [value]
                return spec
            node[key] = [copy.deepcopy(ITEMS.get(item_path, {}))]
            node = node[key][0]
        elif last:
            node[key] = value
        else:
            node = node.setdefault(key, {})
    return spec


def test_hazard_every_number_and_duration_has_an_upper_bound() -> None:
    unbounded = [f.path for f in FIELDS if numeric(f) and f.enum is None and
                 f.maximum is None]
    assert unbounded == [], unbounded
    assert durations(), "no duration field found: the pattern changed?"
    loose = [f.path for f in durations() if f.seconds is None]
    assert loose == [], loose


def _schema_at(path: str) -> dict[str, Any]:
    node = spec_schema()
    for part in path.removeprefix("spec.").split("."):
        key = part.removesuffix("[]")
        node = node["properties"][key]
        if part.endswith("[]"):
            node = node["items"]
    return node


@pytest.mark.parametrize("f", [f for f in FIELDS if numeric(f) and f.enum is None],
                         ids=lambda f: f.path)
def test_hazard_a_number_above_its_bound_is_refused_by_the_crd_and_the_parser(f: F) -> None:
    assert f.maximum is not None
    assert _schema_at(f.path)["maximum"] == f.maximum
    over = f.maximum + 1 if f.type == "integer" else f.maximum * 10 + 1
    with pytest.raises(SpecError) as err:
        parse(with_value(f, over))
    # the field itself, an item of a list by its index, a list's item by the list
    assert str(err.value.where).replace("[0]", "[]") in (f.path, f.path.removesuffix("[]")), \
        (f.path, err.value)


@pytest.mark.parametrize("f", durations(), ids=lambda f: f.path)
def test_hazard_a_duration_above_its_bound_is_refused_by_the_crd_and_the_parser(f: F) -> None:
    assert f.seconds is not None
    lo, hi = f.seconds
    rules = [r["rule"] for r in _schema_at(f.path).get("x-kubernetes-validations", [])]
    assert f"duration(self) >= duration('{span(lo)}') && duration(self) <= " \
           f"duration('{span(hi)}')" in rules, rules
    for bad in ("100000h", *(["0s"] if lo > 0 else [])):
        with pytest.raises(SpecError, match="must be between") as err:
            parse(with_value(f, bad))
        assert err.value.where == f.path, err.value


@pytest.mark.parametrize("field,value", [
    ("prediction.step", "100000h"), ("metrics.prometheus.staleAfter", "100000h"),
    ("migration.maxMiBps", 1e308), ("migration.minMiBps", 1e308),
    ("target.swift.weight", 1e300)])
def test_hazard_the_values_the_review_found_accepted_are_refused(field: str,
                                                                 value: Any) -> None:
    """The review's own cases (finding 8), each naming its field."""
    f = next(x for x in FIELDS if x.path == f"spec.{field}")
    with pytest.raises(SpecError) as err:
        parse(with_value(f, value))
    assert err.value.where == f.path, err.value
