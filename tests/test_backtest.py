"""``elastore operator backtest`` (issue 41, item 5): it replays what the live operator would
have done, with the live operator's own code. The same prior (the built-in lab profile x
``priorScale``, 0.5) and the same online learning as the runner, period by period; a failed
period is no decision (never a 0); a range in which nothing could be decided is a non-zero
exit; a misspelt field of the policy file is refused, as the API server's strict field
validation refuses it. The live side is the real :class:`~elastore.operator.runner.Runner`
on the simulated cluster (tests/test_operator_learning.py's rig)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from elastore.errors import ElastoreError, MetricsError
from elastore.models.bundle import ModelSet
from elastore.operator import backtest
from elastore.operator.cli import operator_group
from elastore.operator.metrics import DiskReading, NodeReading, Snapshot
from elastore.operator.runner import Runner
from elastore.operator.spec import SpecError, parse
from elastore.resources import builtin_model
from elastore.sim.engine import Cluster
from elastore.sim.kube import MemoryPolicies, SimulatedKube, TraceMetrics
from elastore.units import GIB

NS, POLICY, STS = "shop", "orders", "db"
SPEC: dict[str, Any] = {
    "target": {"name": STS, "replicationFactor": 3},
    "replicas": {"min": 3, "max": 20},
    "slo": {"latencyMs": 100},
    "mode": "Recommend",
    "controlPeriod": "60s",
    "prediction": {"method": "persistence", "horizon": "60s", "step": "60s"},
    "planner": {"mode": "Window", "lookahead": "2h"},
    "migration": {"nodeOverheadSeconds": 0},
    "scaleDown": {"stabilizationSeconds": 60},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
}


@pytest.fixture(scope="module")
def lab() -> ModelSet:
    return ModelSet.load(builtin_model("lab")).for_slo(100, 95)


def lab_capacity(ms: ModelSet) -> float:
    return float(ms.capacity.capacity(0.95, 0.0, 0.0))


class Store:
    """The metrics of three nodes that behave as the lab profile says: the load split
    evenly (or by ``shares``), each node's latency the profile's at its share (``latency``:
    False, no node exports one, so the learner has no evidence and the plan rests on the
    prior)."""

    def __init__(self, load: Callable[[float], float], cluster: Cluster, truth: ModelSet,
                 latency: bool = True, shares: tuple[float, ...] = (1 / 3,) * 3) -> None:
        self.inner = TraceMetrics(load, 0.95, cluster.total_bytes, -3600.0, 1e9)
        self.truth, self.latency, self.shares = truth, latency, shares

    def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
        return self.inner.snapshot(at_s, steps, step_s)

    def scalar(self, name: str, at_s: float) -> float:
        raise MetricsError("MetricsMissing", f"{name}: Prometheus returned no series")

    def disk(self, at_s: float, steps: int, step_s: float,
             pvc_template: str | None = None) -> DiskReading:
        return self.inner.disk(at_s, steps, step_s, pvc_template)

    def per_node(self, at_s: float) -> dict[str, NodeReading]:
        out = {}
        for k, share in enumerate(self.shares):
            per = self.inner.load_rps(at_s) * share
            lat = float(self.truth.capacity.latency_ms(per, 0.95, 0.0, 0.0))
            out[f"{STS}-{k}"] = NodeReading(0.95 * per, 0.05 * per,
                                            lat if self.latency else None, 0.0)
        return out


def live(spec: dict[str, Any], store_of: Callable[[Cluster], Store], models: ModelSet,
         until_s: float) -> tuple[Store, dict[float, dict[str, Any]]]:
    """The operator's runner (Recommend: the size stays 3) over ``until_s``: each
    decided period's status by its epoch."""
    cluster = Cluster.balanced(3, 3 * GIB, boot_s=30.0)
    kube = SimulatedKube(cluster, NS, STS, volume_bytes=100 * GIB)
    policies = MemoryPolicies.of(NS, POLICY, spec)
    store = store_of(cluster)
    runner = Runner(NS, POLICY, policies, kube, lambda _spec: models,
                    clock=lambda: kube.now_s, source=lambda _spec, _ns: store)
    seen: dict[float, dict[str, Any]] = {}
    t = due = 0.0
    while t < until_s:
        kube.now_s = t
        if t >= due:
            due = t + runner.tick()
            st = json.loads(json.dumps(policies.status))
            last = st.get("lastDecision") or {}
            if last.get("ok"):
                seen[float(last["epoch"])] = st
        kube.advance(t, 5.0)
        t += 5.0
    return store, seen


def test_the_backtest_plans_and_learns_as_the_live_operator_does(lab: ModelSet) -> None:
    """A learning policy (the default without a model of its own), a load moving from well
    within three nodes to twice past them: at every period the backtest's plan is the
    runner's (the same desired size, the same capacity per node planned with), from the same
    prior (the lab profile x0.5, where the backtest used to start from the profile as it
    is) through the same learning."""
    cap = lab_capacity(lab)
    levels = (0.5, 0.9, 1.3, 2.0, 1.6, 1.0, 0.6, 0.5)
    load = lambda t: 3 * cap * levels[int(t // 60) % len(levels)]  # noqa: E731
    store, seen = live(SPEC, lambda c: Store(load, c, lab), lab, 8 * 60)
    assert sorted(seen) == [60.0 * k for k in range(8)], sorted(seen)
    rows = backtest.replay(parse(SPEC), store, lab, 0.0, 7 * 60.0)
    assert [r.at_s for r in rows] == sorted(seen) and all(r.ok for r in rows), rows
    got = [(r.desired_replicas, r.capacity_rps) for r in rows]
    want = [(seen[r.at_s]["desiredReplicas"], seen[r.at_s]["model"]["planningCapacityRps"])
            for r in rows]
    assert got == want
    # the comparison is not of constants: the plan moved, and learned past its prior
    assert len({d for d, _ in got}) >= 3, got
    prior = seen[0.0]["model"]["priorCapacityRps"]
    assert prior == pytest.approx(0.5 * cap, rel=1e-3)
    assert max(c for _, c in got if c is not None) > 1.5 * prior, got


def test_a_skewed_load_is_planned_for_its_busiest_pod_as_the_operator_plans_it(
        lab: ModelSet) -> None:
    """One pod carrying half the load (imbalance 1.5, above the 1.25 at which the operator
    sizes for the busiest pod: ``spec.skew``'s default Advise): the backtest hands the
    planner the same per-pod view as the runner, so their plans agree period by period,
    and above the mean node's. The backtest used to plan every period for the mean node."""
    cap = lab_capacity(lab)
    levels = (0.5, 0.8, 1.1, 1.4, 1.0, 0.6)
    load = lambda t: 3 * cap * levels[int(t // 60) % len(levels)]  # noqa: E731
    spec = {**SPEC, "capacityModel": {"learn": False}}
    hot = (0.5, 0.25, 0.25)
    store, seen = live(spec, lambda c: Store(load, c, lab, shares=hot), lab, 6 * 60)
    rows = backtest.replay(parse(spec), store, lab, 0.0, 5 * 60.0)
    assert [r.at_s for r in rows] == sorted(seen) and all(r.ok for r in rows), rows
    got = [r.desired_replicas for r in rows]
    assert got == [seen[r.at_s]["desiredReplicas"] for r in rows]
    assert all(seen[r.at_s]["skew"]["imbalance"] == pytest.approx(1.5) for r in rows)
    mean = backtest.replay(parse({**spec, "skew": {"mode": "Off"}}), store, lab, 0.0,
                           5 * 60.0)
    flat = [r.desired_replicas for r in mean]
    assert all(g >= f for g, f in zip(got, flat, strict=True)) and got != flat, (got, flat)
    # a pod unread at a fixed size: a partial view, planned for the mean node as live
    part = backtest.replay(parse(spec), store, lab, 0.0, 5 * 60.0, replicas=4)
    alone = backtest.replay(parse({**spec, "skew": {"mode": "Off"}}), store, lab, 0.0,
                            5 * 60.0, replicas=4)
    assert [r.desired_replicas for r in part] == [r.desired_replicas for r in alone]


def test_day_one_plans_with_the_prior_not_the_lab_profile_as_it_is(lab: ModelSet) -> None:
    """No latency series yet (nothing to learn from): the plan rests on the prior, half the
    lab profile, so 2.4 nodes' worth of the profile's load wants twice the nodes it would
    want read as it is (spec.capacityModel.learn: false, which the backtest used to
    do for every policy). The runner says the same."""
    cap = lab_capacity(lab)
    load = lambda t: 2.4 * cap  # noqa: E731
    store, seen = live(SPEC, lambda c: Store(load, c, lab, latency=False), lab, 60)
    rows = backtest.replay(parse(SPEC), store, lab, 0.0, 0.0 + 1e-3)
    as_is = backtest.replay(parse({**SPEC, "capacityModel": {"learn": False}}), store, lab,
                            0.0, 0.0 + 1e-3)
    first = rows[0]
    assert first.ok and first.desired_replicas == seen[0.0]["desiredReplicas"]
    assert first.capacity_rps == seen[0.0]["model"]["planningCapacityRps"]
    # the cautious border of a learner with no evidence: the prior's, within 1 %
    assert first.capacity_rps == pytest.approx(0.5 * cap, rel=0.01)
    assert as_is[0].capacity_rps is None  # not learning: the model as it is
    assert as_is[0].desired_replicas is not None and first.desired_replicas is not None
    # 457 req/s: 3 nodes of the profile (190 req/s each, 10 % headroom), 6 of the prior;
    # read as it is, the backtest said "no change, no risk" where the operator scales out
    assert (first.desired_replicas, as_is[0].desired_replicas) == (6, 3)
    assert (first.would_scale, first.slo_at_risk) == (1, True)
    assert (as_is[0].would_scale, as_is[0].slo_at_risk) == (0, False)
    assert seen[0.0]["model"]["samples"] == 0  # no evidence: the prior alone


def test_a_scale_in_enforce_would_hold_while_learning_is_said(lab: ModelSet) -> None:
    """Eight nodes replayed at a load three serve, with no latency series: the plan wants
    fewer, and Enforce would hold that scale-in (the learned model is not confident: the
    operator's gate, :func:`elastore.operator.calibration.gate`); the row and the summary
    say so. Not learning, the same scale-in is not held."""
    cap = lab_capacity(lab)
    store = Store(lambda t: 0.5 * cap, Cluster.balanced(3, 3 * GIB, boot_s=30.0), lab,
                  latency=False)
    rows = backtest.replay(parse(SPEC), store, lab, 0.0, 240.0, replicas=8)
    ins = [r for r in rows if r.ok and r.would_scale is not None and r.would_scale < 0]
    assert len(ins) >= 3, rows  # after the stabilization window
    assert all(r.held and "below the threshold: only scale-out" in r.held for r in ins)
    assert all(r.held is None for r in rows if r not in ins)
    assert backtest.summary(rows)["scaleInsHeld"] == len(ins)
    shown = backtest.table(rows).splitlines()[1:]
    assert [("Enforce would hold this scale-in" in line) for line in shown] == \
        [r in ins for r in rows]
    fixed = backtest.replay(parse({**SPEC, "capacityModel": {"learn": False}}), store, lab,
                            0.0, 240.0, replicas=8)
    assert any(r.would_scale is not None and r.would_scale < 0 for r in fixed)
    assert all(r.held is None for r in fixed)
    assert backtest.summary(fixed)["scaleInsHeld"] == 0


def failing(lab: ModelSet, missing: set[float]) -> Any:
    class Source:
        def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
            if at_s in missing:
                raise MetricsError("MetricsMissing", "load: Prometheus returned no series")
            return TraceMetrics(lambda t: 300.0, 0.95, lambda: 3 * GIB, -3600.0, 1e9
                                ).snapshot(at_s, steps, step_s)

        def scalar(self, name: str, at_s: float) -> float:
            raise MetricsError("MetricsMissing", f"{name}: no series")

        def per_node(self, at_s: float) -> dict[str, NodeReading]:
            return {f"{STS}-{k}": NodeReading(95.0, 5.0, None, 0.0) for k in range(3)}

        def disk(self, at_s: float, steps: int, step_s: float,
                 pvc_template: str | None = None) -> DiskReading:
            raise MetricsError("MetricsMissing", "no bytes per node")

    return Source()


def test_a_failed_period_is_no_decision_never_a_zero(lab: ModelSet) -> None:
    """The period without metrics: no change (null, not 0), no load, no risk; the table says
    "no decision" and never +0 for it; the summary counts it as undecided."""
    spec = parse({**SPEC, "capacityModel": {"learn": False}})
    rows = backtest.replay(spec, failing(lab, {60.0}), lab, 0.0, 120.0)
    assert [r.ok for r in rows] == [True, False, True]
    bad = rows[1]
    assert bad.would_scale is None and bad.load_rps is None and bad.slo_at_risk is None
    assert bad.as_dict()["would_scale"] is None
    assert bad.reason.startswith("MetricsMissing: ")
    assert all(r.would_scale == 0 for r in (rows[0], rows[2]))  # decided: nothing to do
    lines = backtest.table(rows).splitlines()
    assert "+0" not in lines[2] and "no decision: MetricsMissing" in lines[2], lines[2]
    assert lines[2].split()[6] == "-"  # the would column
    assert "+0" in lines[1] and "+0" in lines[3]  # a decided period's "nothing"
    s = backtest.summary(rows)
    assert (s["decided"], s["failed"], s["scaleOuts"], s["scaleIns"]) == (2, 1, 0, 0)
    assert backtest.nothing_decided(rows) is None


def test_nothing_decided_is_said_with_its_reasons(lab: ModelSet) -> None:
    spec = parse({**SPEC, "capacityModel": {"learn": False}})
    rows = backtest.replay(spec, failing(lab, {0.0, 60.0, 120.0}), lab, 0.0, 120.0)
    why = backtest.nothing_decided(rows)
    assert why is not None and "no period could be decided: all 3 without a decision" in why
    assert "MetricsMissing: load: Prometheus returned no series" in why


def test_the_policy_file_is_read_as_the_api_server_reads_it() -> None:
    """An object: its spec and namespace; another kind, another API version or an unknown
    top-level field is refused; a spec alone is a spec."""
    obj = {"apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
           "metadata": {"name": "x", "namespace": "shop"}, "spec": SPEC}
    assert backtest.policy_spec(obj, "p.yaml") == (SPEC, "shop")
    assert backtest.policy_spec(SPEC, "p.yaml") == (SPEC, None)
    with pytest.raises(SpecError, match='unknown field "spce"'):
        backtest.policy_spec({**obj, "spce": {}}, "p.yaml")
    with pytest.raises(ElastoreError, match="a ConfigMap, not an ElasticPolicy"):
        backtest.policy_spec({**obj, "kind": "ConfigMap"}, "p.yaml")
    with pytest.raises(ElastoreError, match=re.escape("apiVersion 'elastore.io/v2'")):
        backtest.policy_spec({**obj, "apiVersion": "elastore.io/v2"}, "p.yaml")
    with pytest.raises(ElastoreError, match="not an ElasticPolicy or a spec"):
        backtest.policy_spec([SPEC], "p.yaml")


# -- the command ---------------------------------------------------------------------------
def command(tmp_path: Path, spec: dict[str, Any], *args: str) -> Any:
    pol = tmp_path / "policy.json"
    pol.write_text(json.dumps({"apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
                               "metadata": {"name": "orders"}, "spec": spec}))
    return CliRunner().invoke(operator_group, ["backtest", "-f", str(pol), "--from",
                                               "2026-11-20 10:00", "--to", "2026-11-20 10:02",
                                               *args])


def test_the_command_refuses_every_misspelt_field_before_it_queries(tmp_path: Path) -> None:
    spec = json.loads(json.dumps(SPEC))
    spec["prediction"]["horizn"] = "20m"
    spec["behavior"] = {"scaleUp": {"policies": [{"type": "Pods", "value": 1,
                                                  "periodSeconds": 60, "valeu": 2}]}}
    res = command(tmp_path, spec)
    assert res.exit_code == 1, res.output
    assert 'unknown field "spec.prediction.horizn"' in res.output
    assert 'unknown field "spec.behavior.scaleUp.policies[0].valeu"' in res.output
    assert "periods" not in res.output  # nothing replayed


def test_the_command_fails_when_nothing_could_be_decided(tmp_path: Path) -> None:
    """Prometheus unreachable all along: the rows say "no decision" (never +0), and the
    exit is not 0, with the reason."""
    res = command(tmp_path, SPEC, "--prometheus", "http://127.0.0.1:1")
    assert res.exit_code == 1, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("2026-11-20T")]
    assert len(rows) == 3 and all("no decision: PrometheusUnreachable" in r for r in rows)
    assert not any("+0" in r for r in rows)
    assert "0 decided, 3 without a decision" in res.output
    assert "error: no period could be decided: all 3 without a decision" in res.output
    # a learning policy says which prior it replays
    assert "the built-in lab profile x0.5 as the prior" in res.output
