"""Faults of the metrics path during an operation in flight (issue 39, ``-k chaos``): the real
API server and etcd (testbed.k8s), kwok's pods, Debian's Prometheus, and the operator as a
process of its own.

* Prometheus killed (SIGKILL) and restarted on the same port and data directory while a
  scale-out is joining;
* Prometheus down past its lookback while a decommission is leaving (``slow``): this
  test's Prometheus looks back 1 minute (``--query.lookback-delta``; Prometheus's default
  is 5), so the outage lasts at least 90 s, and as long as the step due in it needs (about
  2.3 min measured); the issue's figure was 10 minutes against the default lookback, see
  :func:`test_chaos_prometheus_outage_past_the_lookback` for why this length covers it;
* the operator's clock 2 minutes ahead of Prometheus's, and 2 minutes behind (Debian's
  libfaketime under the operator process only), while a scale-out is joining.

Each test holds a node step open with the nodetool stand-in (testbed.nodetool_standin:
``join-hold-<k>`` keeps a new node JOINING, ``hold-<k>`` keeps a decommission LEAVING),
lets the fault begin in the middle of it, lets the step end while the fault lasts, and then
asserts, from a poll of the API server every second (:class:`Recorder`):

* **no double action**: the StatefulSet's sizes go one node at a time, each written once
  (its ``metadata.generation`` moves once per step), one ``*Started`` Event and one
  ``elastore_actions_total`` per step, one ``decommission`` per removed node in the
  stand-in's ``calls.log``;
* **no new step on missing data**: while the fault lasts, after the step in flight ended,
  nothing starts although the plan wants the next node (its action fell due meanwhile): the
  StatefulSet's generation is the same at both ends, no ``*Started`` Event and no
  ``elastore_actions_total`` is added, and every sample polled meanwhile has no operation,
  the same size, and the policy ``Degraded`` with the fault's reason;
* **nothing lost**: the step in flight is the same operation (kind, sizes, pod, start)
  from the fault's start to its end, and it ends (followed in the store, not in metrics); a
  scale-in's pod goes only after its node left the ring, and its PVC is retained;
* **recovery**: after the fault's end (Prometheus ready again, the clock put right) a
  successful decision comes, and the next step, within generous deadlines; how soon is a
  measurement, the figure ``recovered_s`` against RECOVERY_BOUND_S (tests/figures.py:
  printed in ``make test``, judged in ``make lab-check``), and in the ``CHAOS ...`` lines.

Each policy's ``replicas.min`` and ``.max`` are the size the test's path ends at (5) from
its first apply: the planner treats max as a ceiling (it removes the nodes above it one
after the other) and min as a floor (it adds them one after the other), so the path
(3 -> 4 -> 5, 7 -> 6 -> 5) is set by them at any machine speed, never by the load. The
stand-in exporters' 10-s rates jitter 10-20 % on a busy machine (800 requests/s is near
the 5th server's threshold, 760), which on a young history widens the forecast's
scenarios: under 3..8 a plan could want a sixth node, or a fourth only, or a scale-in wait
for its quantiles to narrow. Without evidence nothing is wanted, floor or not
(controls.wanted), so every "no step on missing data" still tests the operator.

The module has its own control plane: the faults hurt no other module.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from figures import FigureBook
from k8s_support import (
    NODETOOL_STANDIN,
    CassandraMetrics,
    OperatorProcess,
    Prometheus,
    events,
    persistent_volumes,
    policy,
    set_clock,
    standin_exec_config,
    start_control_plane,
    statefulset,
    wait_until,
)
from testbed.k8s import ControlPlane

pytestmark = pytest.mark.k8s

RESTART_NS, OUTAGE_NS = "chaos-prom-restart", "chaos-prom-outage"
CLOCK_NS = {120: "chaos-clock-ahead", -120: "chaos-clock-behind"}
STS, POLICY = "cass", "orders"
#: the outage test's Prometheus's lookback (``--query.lookback-delta``; Prometheus's default
#: is 5 min): how far before the instant asked about an instant query (the operator's
#: freshness and warmup checks) still finds a series' last sample. A short one gives the
#: same recovery (no sample of before the outage is found: MetricsMissing, then
#: MetricsWarmingUp) after a shorter outage. The operator assumes no lookback of its own
#: (its history's gaps are masked by ``mask_warmup``, whatever their length)
LOOKBACK_S = 60.0
#: the shortest outage: past that lookback (the gap the recovery must bridge, see
#: RECOVERY_BOUND_S) by half a minute. It lasts longer when the step due in it, or the
#: end of the step in flight, needs (test_chaos_prometheus_outage_past_the_lookback)
OUTAGE_MIN_S = LOOKBACK_S + 30.0
#: how soon the plan on record must want the 6 -> 5 for the outage test to begin it (the
#: outage then lasts until two periods after it is due): 116-117 s after the kill measured, the
#: decommission in flight's expected end (the migration model's)
DUE_WITHIN_S = 270.0
#: the policy's control period, and the operator's retry after a failed one (period.RETRY_S,
#: capped by the period)
PERIOD_S = 10.0
#: Prometheus scrapes every second: a 10-s rate window holds ten samples, and a series is a
#: measurement 10 s after it (re)starts (warmup: the rate window)
RATE_WINDOW_S = 10.0
#: how long the operator should take to decide again once the fault is over: a retry (one
#: period), the warmup after a gap longer than Prometheus's lookback, and a period's
#: own work, with a minute of slack for a shared 2-core machine (a figure's target: how
#: soon is a measurement)
RECOVERY_BOUND_S = PERIOD_S + RATE_WINDOW_S + PERIOD_S + 60.0
#: the deadline of the waits for that decision and for the next step: generous
RECOVERY_WAIT_S = 300.0
#: the size every test's path ends at: replicas.min and .max from the first apply
CAP = 5


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("standin")


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory, standin: Path) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("k8s"), exec_config=standin_exec_config(
        [RESTART_NS, OUTAGE_NS, *CLOCK_NS.values()], STS, 8, standin))
    yield cp
    cp.stop()


@pytest.fixture(scope="module")
def metrics(cp: ControlPlane) -> Iterator[CassandraMetrics]:
    """800 requests/s on every StatefulSet: the built-in lab model wants 5 nodes for it (more
    than 3 or 4 serve, fewer than 6 or 7)."""
    m = CassandraMetrics(rps=800.0)
    m.follow(cp)
    yield m
    m.close()


def enforce_policy(ns: str, url: str, min_replicas: int = 3, max_replicas: int = 8) -> str:
    """test_operator_k8s's Enforce policy: a 10-s period, persistence, no stabilization,
    ``min_replicas``..``max_replicas`` (3..8) replicas, the nodetool stand-in; spec.fallback
    as defaulted (freeze after 3 failed observations)."""
    return policy(POLICY, ns, STS, nodetool=[sys.executable, str(NODETOOL_STANDIN)],
                  mode="Enforce", controlPeriod=f"{PERIOD_S:.0f}s",
                  replicas={"min": min_replicas, "max": max_replicas},
                  prediction={"method": "persistence", "horizon": "10s", "step": "2s"},
                  migration={"nodeOverheadSeconds": 5}, scaleDown={"stabilizationSeconds": 0},
                  metrics={"prometheus": {"url": url, "rateWindow": f"{RATE_WINDOW_S:.0f}s"}},
                  capacityModel={"learn": False})


def make_namespace(cp: ControlPlane, ns: str, replicas: int, **sts: Any) -> None:
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", stdin=statefulset(STS, ns, replicas, **sts))
    wait_until(f"{replicas} pods ready in {ns}", lambda: (_get(cp, _sts_path(ns)) or {}).get(
        "status", {}).get("readyReplicas") == replicas, 120)


def remove_policy(cp: ControlPlane, ns: str) -> None:
    """The policy goes, so that the next test's operator does not serve it (kopf's finalizer
    taken off by hand if the operator did not release it)."""
    cp.kubectl("delete", "elasticpolicy", POLICY, "-n", ns, "--wait=false", check=False)
    cp.kubectl("patch", "elasticpolicy", POLICY, "-n", ns, "--type=merge", "-p",
               '{"metadata": {"finalizers": null}}', check=False)


# -- reading the cluster ------------------------------------------------------------------
def _get(cp: ControlPlane, path: str) -> dict[str, Any] | None:
    try:
        return cp.get_json(path, timeout_s=5)
    except (OSError, ValueError):
        return None


def _sts_path(ns: str) -> str:
    return f"/apis/apps/v1/namespaces/{ns}/statefulsets/{STS}"


def _policy_path(ns: str) -> str:
    return f"/apis/elastore.io/v1alpha1/namespaces/{ns}/elasticpolicies/{POLICY}"


def cond(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("type") == ctype), {})


@dataclass(frozen=True)
class Sample:
    """The policy and its StatefulSet at ``t`` (this process's clock)."""

    t: float
    replicas: int
    generation: int
    #: the operation in flight: (kind, from, to, pod, startedEpoch), None: none
    op: tuple[str, int, int, str, float] | None
    phase: str | None
    decided_ok: bool | None  # status.lastDecision.ok
    desired: int | None
    degraded: tuple[str, str, str]  # (status, reason, message)


class Recorder:
    """The policy and its StatefulSet, polled every ``every_s`` seconds from the API server
    (in process: no kubectl), with this process's clock (the operator's may be skewed)."""

    def __init__(self, cp: ControlPlane, ns: str, every_s: float = 1.0) -> None:
        self.cp, self.ns, self.every_s = cp, ns, every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"recorder-{ns}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            sts, pol = _get(self.cp, _sts_path(self.ns)), _get(self.cp, _policy_path(self.ns))
            if sts is None or pol is None:
                continue
            st = pol.get("status") or {}
            o = st.get("operation") or None
            op = None if not o else (str(o.get("kind")), int(o.get("fromReplicas", 0)),
                                     int(o.get("toReplicas", 0)), str(o.get("pod", "")),
                                     float(o.get("startedEpoch") or 0.0))
            dec = st.get("lastDecision") or {}
            d = cond(st, "Degraded")
            self.samples.append(Sample(
                time.time(), int(sts["spec"]["replicas"]), int(sts["metadata"]["generation"]),
                op, None if not o else str(o.get("phase")),
                None if "ok" not in dec else bool(dec["ok"]), st.get("desiredReplicas"),
                (str(d.get("status", "")), str(d.get("reason", "")), str(d.get("message", "")))))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def last(self) -> Sample:
        wait_until("a sample of the policy", lambda: self.samples, 30)
        return self.samples[-1]

    def between(self, t0: float, t1: float = float("inf")) -> list[Sample]:
        return [s for s in self.samples if t0 <= s.t <= t1]

    def first(self, what: str, pred: Callable[[Sample], bool], after: float,
              timeout_s: float) -> Sample:
        """The first sample after ``after`` for which ``pred`` holds, waiting for it."""
        def found() -> Sample | None:
            return next((s for s in self.between(after) if pred(s)), None)
        try:
            got: Sample = wait_until(what, found, timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; sizes seen {self.sizes()}, the last sample "
                                 f"{self.samples[-1] if self.samples else None}") from exc
        return got

    def sizes(self) -> list[int]:
        """The StatefulSet's sizes in the order they were seen, each once in a row."""
        out: list[int] = []
        for s in self.samples:
            if not out or out[-1] != s.replicas:
                out.append(s.replicas)
        return out


def started_events(cp: ControlPlane, ns: str, kind: str) -> list[str]:
    """The ``<kind>Started`` Events' messages, each as often as it was emitted."""
    return [e.get("message", "") for e in events(cp, ns, POLICY)
            if e.get("reason") == f"{kind}Started" for _ in range(int(e.get("count") or 1))]


def actions_total(op: OperatorProcess, ns: str, kind: str) -> float:
    """The operator's own count of the steps it began (``elastore_actions_total``)."""
    for line in op.metrics().splitlines():
        name, _, rest = line.partition("{")
        if name == "elastore_actions_total" and f'kind="{kind}"' in rest and \
                f'namespace="{ns}"' in rest:
            return float(rest.rsplit(" ", 1)[1])
    return 0.0


def marks(cp: ControlPlane, op: OperatorProcess, ns: str) -> tuple[int, int, float]:
    """What every step's start moves: the StatefulSet's ``metadata.generation`` (its size
    written), the ``*Started`` Events and the operator's ``elastore_actions_total``, both
    kinds."""
    sts = wait_until("the StatefulSet", lambda: _get(cp, _sts_path(ns)), 30)
    kinds = ("ScaleOut", "ScaleIn")
    return (int(sts["metadata"]["generation"]),
            sum(len(started_events(cp, ns, k)) for k in kinds),
            sum(actions_total(op, ns, k) for k in kinds))


def calls(standin: Path, ns: str, verb: str, before: float = float("inf")) -> list[int]:
    """The nodes the stand-in ran ``verb`` on before ``before`` (its own clock: kwok's, not
    the operator's), in order (calls.log)."""
    f = standin / ns / "calls.log"
    out = []
    for line in f.read_text().splitlines() if f.exists() else []:
        t, node, *argv = line.split()
        if argv[:1] == [verb] and float(t) < before:
            out.append(int(node))
    return out


def report(name: str, **figures: float | str) -> None:
    """One ``CHAOS`` line for the test's output (``pytest -s``) and the report."""
    print(f"CHAOS {name}: " + ", ".join(
        f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()),
        flush=True)


def settled_up(s: Sample) -> bool:
    """At rest after a scale-out: no step, a successful decision, and the size it wants."""
    return s.op is None and bool(s.decided_ok) and s.replicas == s.desired and \
        s.replicas >= CAP


def assert_one_step_at_a_time(rec: Recorder, sizes: list[int], gen0: int) -> None:
    """No double action: the sizes seen are ``sizes`` (one node a step, never back), and the
    StatefulSet's spec changed once per step (its generation)."""
    assert rec.sizes() == sizes, rec.sizes()
    gens = sorted({s.generation for s in rec.samples})
    assert gens[-1] - gen0 == len(sizes) - 1, (gen0, gens)


def assert_nothing_starts(rec: Recorder, t0: float, t1: float, size: int, reasons: set[str],
                          at: tuple[tuple[int, int, float], tuple[int, int, float]]
                          ) -> list[Sample]:
    """Between ``t0`` and ``t1`` (the fault, after the step in flight ended): no step began
    and nothing was written to the StatefulSet (``at``: :func:`marks` read once the step
    had ended and again at the fault's end, the same; the first agrees with the step's end
    as polled), and every sample polled meanwhile (however few a busy machine gave) has the
    size, no operation, and the policy Degraded for one of ``reasons`` (never a decision on
    missing data). Returns those samples."""
    assert at[0] == at[1], f"a step began: (generation, Started Events, actions_total) {at}"
    before = [s for s in rec.samples if s.t < t0]
    assert before and before[-1].generation == at[0][0], (before[-1:], at)
    window = rec.between(t0, t1)
    for s in window:
        assert s.replicas == size and s.op is None, s
        assert s.decided_ok is False and s.degraded[0] == "True", s
        assert s.degraded[1] in reasons, s
    return window


# ------------------------------------------------------------------------------------------
def test_chaos_prometheus_restart_during_a_step(
        cp: ControlPlane, metrics: CassandraMetrics, standin: Path, tmp_path: Path,
        figure: FigureBook) -> None:
    """A scale-out 3 -> 4 (the plan wants 5) is joining when Prometheus is SIGKILLed. It
    stays down until the operator has said so (Degraded, PrometheusUnreachable) and the
    join it holds has finished: the step ends (followed in the store), and no next step
    starts on missing data for two more periods. Then Prometheus starts again on the same
    port and data directory (its WAL replayed): decisions resume, and 4 -> 5 follows (the
    last: replicas 5..5)."""
    ns = RESTART_NS
    make_namespace(cp, ns, 3)
    (standin / ns).mkdir(parents=True, exist_ok=True)
    hold = standin / ns / "join-hold-3"
    hold.write_text("held by the test")
    prom = Prometheus(tmp_path / "prom", [metrics.target])
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log")
    rec = Recorder(cp, ns)
    try:
        gen0 = int((_get(cp, _sts_path(ns)) or {})["metadata"]["generation"])
        # 5, no more, no fewer (the module's doc): a young history's upper scenarios took a
        # fresh-clone run's plan on to 8 and then wanted 7, a scale-in this namespace
        # refuses (its volumes have no size: no free-space check), so it never settled
        # (2026-12-03); max applied after the next step began let a quick 5 -> 6 start; a
        # rate jittered below 760 req/s wants 4. The resumed steps are this test's subject
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, CAP, CAP))
        joining = rec.first("cass-3 joining", lambda s: s.phase == "Joining", 0, 180)
        # the plan wants more than the step in flight gives: 5, its floor and ceiling
        assert joining.desired == CAP, joining
        assert joining.op is not None, joining
        in_flight = joining.op
        time.sleep(3)  # a tick or two into the join

        t_kill = time.time()
        prom.kill()
        said = rec.first("Degraded: PrometheusUnreachable", lambda s: s.degraded[:2] == (
            "True", "PrometheusUnreachable"), t_kill, 60)
        assert "unreachable" in said.degraded[2], said
        assert said.op == in_flight and said.replicas == 4, said  # still the same step
        hold.unlink()  # the node joins: the step goes on without Prometheus
        done = rec.first("the scale-out to end", lambda s: s.op is None and s.replicas == 4,
                         time.time(), 120)
        assert all(s.op in (in_flight, None) for s in rec.between(t_kill)), \
            {s.op for s in rec.between(t_kill)}
        marks0 = marks(cp, op, ns)
        time.sleep(2 * PERIOD_S + 5)  # two periods with nothing to read
        marks1 = marks(cp, op, ns)
        t_restart = time.time()
        ready_s = prom.restart()
        t_up = time.time()
        assert_nothing_starts(rec, done.t + 1, t_restart, 4, {"PrometheusUnreachable"},
                              (marks0, marks1))

        decided = rec.first("a decision once Prometheus is back", lambda s: bool(
            s.decided_ok), t_up, RECOVERY_WAIT_S)
        nxt = rec.first("the next step", lambda s: s.op is not None, t_up, RECOVERY_WAIT_S)
        assert nxt.op is not None and nxt.op[:3] == ("ScaleOut", 4, 5), nxt
        settled = rec.first("the size the plan wants, no step", settled_up, nxt.t, 300)
        assert settled.degraded[0] == "False" and settled.replicas == CAP, settled
        steps = settled.replicas - 3
        assert_one_step_at_a_time(rec, list(range(3, settled.replicas + 1)), gen0)
        assert len(started_events(cp, ns, "ScaleOut")) == steps, \
            started_events(cp, ns, "ScaleOut")
        assert actions_total(op, ns, "ScaleOut") == steps
        # the step in flight was carried out once: its cleanup on each old node, once
        assert sorted(calls(standin, ns, "cleanup", t_up)) == [0, 1, 2], \
            calls(standin, ns, "cleanup")
        figure("recovered_s", decided.t - t_up, "<=", RECOVERY_BOUND_S,
               "from Prometheus ready again to the first successful decision, s",
               source="was assert decided.t - t_up <= RECOVERY_BOUND_S")
        report("prometheus-restart", down_s=t_restart - t_kill,
               said_unreachable_after_s=said.t - t_kill, step_ended_after_kill_s=done.t - t_kill,
               restart_ready_s=ready_s, recovered_s=decided.t - t_up,
               next_step_after_s=nxt.t - t_up, sizes=str(rec.sizes()))
    finally:
        rec.close()
        op.stop()
        prom.close()
        remove_policy(cp, ns)


@pytest.mark.slow
def test_chaos_prometheus_outage_past_the_lookback(
        cp: ControlPlane, metrics: CassandraMetrics, standin: Path, tmp_path: Path,
        figure: FigureBook) -> None:
    """7 nodes under replicas 5..5: the ceiling plans 7 -> 6 -> 5, one node after the other,
    at any machine speed (not the forecast's quantiles: a load that wants 5 would need them
    to narrow first), and the floor keeps it at 5. The scale-in 7 -> 6 is decommissioning
    cass-6 (held LEAVING by the stand-in) when Prometheus goes down; the plan on record has
    6 -> 5 falling due within the outage. The policy goes Degraded (PrometheusUnreachable),
    the fallback (freeze) comes into force; the decommission finishes when its node leaves
    the ring (the replicas lowered only then); nothing else starts for the rest of the
    outage: no scale-in on missing data. Prometheus back (same port and data): decisions
    resume and 6 -> 5 follows.

    The outage lasts until the latest of: Prometheus's lookback plus half a minute
    (OUTAGE_MIN_S: the gap the recovery must bridge is longer than the lookback, so no
    sample of before the outage is a measurement any more, as after the issue's 10 minutes;
    this Prometheus looks back 1 minute, LOOKBACK_S, not the default 5, for a shorter
    outage with the same recovery); the 6 -> 5's due time plus two periods (the step due
    in the outage is refused in it); the step in flight's end plus two periods (nothing
    starts after it). The issue's 600 s added only more of the same polls to an outage
    that already holds all three."""
    ns = OUTAGE_NS
    cp.kubectl("apply", "-f", "-", stdin=persistent_volumes(7, "1Gi", tmp_path / "pv"))
    make_namespace(cp, ns, 7, volume="1Gi")
    (standin / ns).mkdir(parents=True, exist_ok=True)
    hold = standin / ns / "hold-6"
    hold.write_text("held by the test")
    prom = Prometheus(tmp_path / "prom", [metrics.target], lookback_s=LOOKBACK_S)
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log")
    rec = Recorder(cp, ns)
    try:
        gen0 = int((_get(cp, _sts_path(ns)) or {})["metadata"]["generation"])
        # the premise: this Prometheus looks back LOOKBACK_S (1 min), not its default 5
        with urllib.request.urlopen(f"{prom.url}/api/v1/status/flags", timeout=10) as r:
            flags = json.load(r)["data"]
        assert flags["query.lookback-delta"] == "1m", flags.get("query.lookback-delta")
        # 5..5: the ceiling, not the forecast, makes both steps (a young history's upper
        # scenarios, 1.8 x the load, took a fresh-clone run's first plan under max 8 to
        # 7 -> 8 instead of down, 2026-12-03; under max 7 the 6 -> 5 waited for its
        # quantiles to narrow), and the floor, not a jittered rate, ends them at 5. The
        # scale-in under the outage is this test's subject
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, CAP, CAP))
        leaving = rec.first("cass-6 decommissioning", lambda s: s.phase == "Decommissioning"
                            and 6 in calls(standin, ns, "decommission"), 0, 240)
        assert leaving.op is not None and leaving.op[3] == "cass-6", leaving
        in_flight = leaving.op
        seen: list[Any] = []

        def due_to5() -> float | None:
            # the plan on record, while cass-6 is held leaving: the ceiling's 6 -> 5 after it
            plan = ((_get(cp, _policy_path(ns)) or {}).get("status") or {}).get(
                "memory", {}).get("actions") or []
            seen[:] = [plan]
            to5 = min((float(a["atEpoch"]) for a in plan if int(a["replicas"]) <= CAP),
                      default=math.inf)
            return to5 if to5 < time.time() + DUE_WITHIN_S else None

        # the hazard is real: the plan on record scales in again within the outage
        try:
            to5 = float(wait_until("a plan with 6 -> 5 due within the outage", due_to5, 120))
        except AssertionError as exc:
            raise AssertionError(f"{exc}: no 6 -> 5 due in the outage: {seen} (desired "
                                 f"{leaving.desired} when cass-6 began leaving)") from exc

        t_kill = time.time()
        prom.kill()
        said = rec.first("Degraded: PrometheusUnreachable", lambda s: s.degraded[:2] == (
            "True", "PrometheusUnreachable"), t_kill, 60)
        assert f"Prometheus at {prom.url} is unreachable" in said.degraded[2], said
        st = wait_until("the fallback in force", lambda: (s := (_get(
            cp, _policy_path(ns)) or {}).get("status") or {}) and cond(
            s, "Fallback").get("status") == "True" and s, 120)
        assert cond(st, "Fallback")["reason"] == "FallbackFreeze", cond(st, "Fallback")
        # the node still leaving: the replicas never went down while it was in the ring
        assert all(s.replicas == 7 for s in rec.samples), rec.sizes()
        t_release = time.time()
        hold.unlink()  # it leaves the ring: the step goes on without Prometheus
        done = rec.first("the scale-in to end", lambda s: s.op is None and s.replicas == 6,
                         t_release, 180)
        assert all(s.op in (in_flight, None) for s in rec.between(t_kill)), \
            {s.op for s in rec.between(t_kill)}
        marks0 = marks(cp, op, ns)
        # the outage's end (the docstring): past the lookback, the due step, the step's end
        t_end = max(t_kill + OUTAGE_MIN_S, to5 + 2 * PERIOD_S, done.t + 2 * PERIOD_S + 5)
        # the rest of the outage: checked as it goes, so a failure says when
        while time.time() < t_end:
            time.sleep(min(30.0, max(0.0, t_end - time.time())))
            s = rec.last()
            assert s.replicas == 6 and s.op is None and s.degraded[0] == "True", s
        marks1 = marks(cp, op, ns)
        t_restart = time.time()
        # the outage held what it is for (by construction of t_end; said if not)
        assert t_restart - t_kill > LOOKBACK_S and to5 < t_restart, (t_kill, to5, t_restart)
        ready_s = prom.restart()
        t_up = time.time()
        window = assert_nothing_starts(rec, done.t + 1, t_restart, 6, {"PrometheusUnreachable"},
                                       (marks0, marks1))

        decided = rec.first("a decision once Prometheus is back", lambda s: bool(
            s.decided_ok), t_up, RECOVERY_WAIT_S)
        nxt = rec.first("the next step", lambda s: s.op is not None, t_up, RECOVERY_WAIT_S)
        assert nxt.op is not None and nxt.op[:3] == ("ScaleIn", 6, 5), (
            f"the first step after the outage is {nxt.op}; before it, on the same load, the "
            f"plan wanted {leaving.desired} replicas")
        settled = rec.first("the size the plan wants, no step", lambda s: s.op is None and
                            bool(s.decided_ok) and s.replicas == s.desired, nxt.t, 300)
        assert settled.degraded[0] == "False" and settled.replicas == CAP, settled
        gone = [6, 5]  # the ordinals removed
        assert_one_step_at_a_time(rec, [7, *gone], gen0)
        assert calls(standin, ns, "decommission") == gone  # each node once, in order
        assert len(started_events(cp, ns, "ScaleIn")) == len(gone), \
            started_events(cp, ns, "ScaleIn")
        assert actions_total(op, ns, "ScaleIn") == len(gone)
        for pvc in (f"data-cass-{k}" for k in gone):  # retained: nothing deleted
            got = _get(cp, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{pvc}")
            assert got is not None and not got["metadata"].get("deletionTimestamp"), pvc
        figure("recovered_s", decided.t - t_up, "<=", RECOVERY_BOUND_S,
               "from Prometheus ready again (after a gap past its lookback) to the first "
               "successful decision, s",
               source="was assert decided.t - t_up <= RECOVERY_BOUND_S")
        report("prometheus-outage", down_s=t_restart - t_kill,
               said_unreachable_after_s=said.t - t_kill,
               step_ended_after_release_s=done.t - t_release,
               idle_in_outage_s=t_restart - done.t, samples_in_outage=str(len(window)),
               scale_in_due_in_outage_at_s=to5 - t_kill, restart_ready_s=ready_s,
               recovered_s=decided.t - t_up, next_step_after_s=nxt.t - t_up,
               sizes=str(rec.sizes()))
    finally:
        rec.close()
        op.stop()
        prom.close()
        remove_policy(cp, ns)


#: the band the skew said must fall in: the operator reads Prometheus's clock from its
#: answer's Date header, so a slow answer moves the seconds said (ahead: more, behind: less)
#: by as long as it took; within this band it still names the 2-min step, not a stale
#: sample or a network delay. How close it came is a figure (SKEW_SAID_WITHIN_S)
SKEW_BAND_S = (100, 140)
SKEW_SAID_WITHIN_S = 3.0


def _skew_said(msg: str, offset_s: int) -> int | None:
    """The seconds the message names, if it names the skew and its way; else None."""
    way = "ahead of" if offset_s > 0 else "behind"
    m = re.search(r"the operator's clock is (\d+) s (ahead of|behind) Prometheus's", msg)
    return int(m.group(1)) if m is not None and m.group(2) == way else None


@pytest.mark.parametrize("offset_s", [120, -120], ids=["ahead", "behind"])
def test_chaos_clock_off_prometheus(cp: ControlPlane, metrics: CassandraMetrics, standin: Path,
                                    tmp_path: Path, offset_s: int, figure: FigureBook) -> None:
    """The operator's clock 2 minutes ahead of Prometheus's, then 2 minutes behind
    (libfaketime in the operator process only; set while a scale-out 3 -> 4 is joining, as an
    NTP step would). Before issue 39, ahead read as MetricsStale ("newest sample is 121 s
    old"), behind as a healthy snapshot of the data of 2 minutes ago. Now: Degraded,
    ClockSkew, the seconds said, a Warning Event; the join finishes (followed in the store);
    no next step while the clocks disagree; put right, the operator decides again and
    4 -> 5 follows (the last: replicas 5..5)."""
    ns = CLOCK_NS[offset_s]
    make_namespace(cp, ns, 3)
    (standin / ns).mkdir(parents=True, exist_ok=True)
    hold = standin / ns / "join-hold-3"
    hold.write_text("held by the test")
    clock = tmp_path / "clock"
    set_clock(clock, 0)
    prom = Prometheus(tmp_path / "prom", [metrics.target])
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log", clock=clock)
    rec = Recorder(cp, ns)
    try:
        gen0 = int((_get(cp, _sts_path(ns)) or {})["metadata"]["generation"])
        # 5 from the first apply: the path 3 -> 4 -> 5 at any speed (the module's doc;
        # test_chaos_prometheus_restart_during_a_step)
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, CAP, CAP))
        joining = rec.first("cass-3 joining", lambda s: s.phase == "Joining", 0, 180)
        # the plan wants more than the step in flight gives: 5, its floor and ceiling
        assert joining.desired == CAP, joining
        assert joining.op is not None, joining
        in_flight = joining.op
        if offset_s < 0:
            # the control plane's certificates must be valid on the operator's clock too
            # (notBefore is their creation): an operator 2 min behind a fresh control plane
            # refuses its TLS, which is not what this test is about
            newest = max(p.stat().st_mtime for p in (cp.root / "pki").glob("*.crt"))
            time.sleep(max(0.0, newest + abs(offset_s) + 30 - time.time()))

        t_skew = time.time()
        set_clock(clock, offset_s)
        # behind, the last decision looks 2 min in the future: the next period falls due
        # when the operator's clock reaches it again (126-130 s measured); the deadline is
        # generous, how soon a figure
        said = rec.first("Degraded: ClockSkew", lambda s: s.degraded[:2] == (
            "True", "ClockSkew"), t_skew, 300)
        said_s = _skew_said(said.degraded[2], offset_s)
        assert said_s is not None and SKEW_BAND_S[0] <= said_s <= SKEW_BAND_S[1], \
            said.degraded
        assert said.op == in_flight, said  # the same step, still in flight
        warned = [e for e in events(cp, ns, POLICY) if e.get("reason") == "ClockSkew"]
        assert warned and warned[0]["type"] == "Warning", warned
        warned_s = _skew_said(warned[0]["message"], offset_s)
        assert warned_s is not None and SKEW_BAND_S[0] <= warned_s <= SKEW_BAND_S[1], \
            warned[0]["message"]
        figure("said_after_s", said.t - t_skew, "<=", 60 + max(0, -offset_s) + PERIOD_S,
               "from the clock set off to Degraded ClockSkew in the status, s",
               source="was the deadline of this wait: 60 s + the skew behind + a period")
        figure("skew_said_error_s", abs(said_s - abs(offset_s)), "<=", SKEW_SAID_WITHIN_S,
               "the skew the status says minus the one set, s (the Date header's second and "
               "the answer's delay)", source="was _skew_said: within 3 s")
        figure("skew_warned_error_s", abs(warned_s - abs(offset_s)), "<=", SKEW_SAID_WITHIN_S,
               "the skew the Warning Event says minus the one set, s",
               source="was _skew_said: within 3 s")
        hold.unlink()
        done = rec.first("the scale-out to end", lambda s: s.op is None and s.replicas == 4,
                         time.time(), 120)
        marks0 = marks(cp, op, ns)
        time.sleep(2 * PERIOD_S + 5)
        marks1 = marks(cp, op, ns)
        t_fix = time.time()
        set_clock(clock, 0)
        window = assert_nothing_starts(rec, done.t + 1, t_fix, 4, {"ClockSkew"},
                                       (marks0, marks1))
        seen = {s.degraded[1] for s in rec.between(t_skew, t_fix) if s.degraded[0] == "True"}
        assert seen == {"ClockSkew"}, seen  # never MetricsStale, never a decision

        decided = rec.first("a decision with the clocks agreeing", lambda s: bool(
            s.decided_ok), t_fix, RECOVERY_WAIT_S)
        nxt = rec.first("the next step", lambda s: s.op is not None, t_fix, RECOVERY_WAIT_S)
        assert nxt.op is not None and nxt.op[:3] == ("ScaleOut", 4, 5), nxt
        settled = rec.first("the size the plan wants, no step", settled_up, nxt.t, 300)
        assert settled.degraded[0] == "False" and settled.replicas == CAP, settled
        steps = settled.replicas - 3
        assert_one_step_at_a_time(rec, list(range(3, settled.replicas + 1)), gen0)
        assert len(started_events(cp, ns, "ScaleOut")) == steps, \
            started_events(cp, ns, "ScaleOut")
        assert actions_total(op, ns, "ScaleOut") == steps
        assert sorted(calls(standin, ns, "cleanup", t_fix)) == [0, 1, 2], \
            calls(standin, ns, "cleanup")
        figure("recovered_s", decided.t - t_fix, "<=", RECOVERY_BOUND_S,
               "from the clock put right to the first successful decision, s",
               source="was assert decided.t - t_fix <= RECOVERY_BOUND_S")
        report(f"clock-{'ahead' if offset_s > 0 else 'behind'}", offset_s=float(offset_s),
               said_after_s=said.t - t_skew, step_ended_after_skew_s=done.t - t_skew,
               idle_while_skewed_s=t_fix - done.t, samples_idle=str(len(window)),
               recovered_s=decided.t - t_fix, next_step_after_s=nxt.t - t_fix,
               message=json.dumps(said.degraded[2][:160]))
    finally:
        rec.close()
        op.stop()
        prom.close()
        remove_policy(cp, ns)
