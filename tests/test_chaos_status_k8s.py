"""Chaos on the status (issue 39): two faults of the record the operator keeps in the
ElasticPolicy status, each during a scale-in in flight, on a real control plane
(kube-apiserver, etcd, controller-manager, scheduler, kwok's pods with the nodetool
stand-in), a real Prometheus, and ``elastore operator run`` as a process of its own with
exactly the chart's namespaced ServiceAccount.

* **The status write after a decommission fails.** The chart's Role loses ``patch`` and
  ``update`` on ``elasticpolicies/status`` (RBAC, in force at once) while cass-5 is LEAVING;
  the stand-in then finishes the decommission. The next tick sees the node DECOMMISSIONED
  and gone from cass-0's ring, and the write of the step's next state is refused
  (Forbidden, the log names the state); the state goes to the status before its effect,
  so nothing is lowered, and its Event waits for the save. Once
  the Role is restored the tick after recognises the step from the store: no second
  decommission, the StatefulSet one smaller, the PVC marked by the same operation.
* **A status in an earlier release's format.** The operator is stopped mid-decommission,
  the status is rewritten as an earlier release wrote it (the formats below, from the git
  history of the CRD's status schema and of the status readers), and the current operator
  starts on it: it continues the step from the store, gives the operation what the format
  lacked (an id; the first release's missing deadline), keeps the memory, and finishes.

The stand-in forgets a decommission ``FORGET_S`` after it was *issued* (a later pod of that
ordinal is a new node); a hold longer than that would turn the node NORMAL the moment it is
released, which a real Cassandra node never does (it stays DECOMMISSIONED until its process
ends). :class:`KeptDecommissioned` keeps it DECOMMISSIONED from its release until the test
ends, as the real node would be.

Each policy has ``replicas`` 5..5 from its first apply: the planner treats max as a
ceiling (it removes the nodes above it one after the other) and min as a floor, so the
ScaleIn 6 -> 5 begins, and nothing follows it, at any machine speed. Under 3..8 the 6 -> 5
waited for a young forecast's quantiles to narrow, which the stand-in exporters' jittered
10-s rates on a busy machine delay; its upper scenarios could want 6 again once 5 was
reached, and a rate jittered below the 5th server's threshold (760 of the 800 req/s) 4.
How soon a step completes once the fault is over is a measurement: the generous deadline of
a wait, and a figure (tests/figures.py: printed in ``make test``, judged in ``make
lab-check``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
    install_namespaced,
    namespaced_args,
    persistent_volumes,
    policy,
    standin_exec_config,
    start_control_plane,
    statefulset,
    wait_until,
)
from testbed.k8s import ControlPlane
from testbed.nodetool_standin import FORGET_S, LEAVE_S

from elastore.stores import operation

pytestmark = pytest.mark.k8s

#: the chart's release (its name holds the chart's, so its Role and ServiceAccount are
#: named so too)
RELEASE = "elastore-chaos"
WRITE_NS = "chaos-write"
#: namespace -> the earlier release whose status format it gets
LEGACY = {"chaos-legacy-nov27": "2026-11-27", "chaos-legacy-nov23": "2026-11-23"}
NAMESPACES = (WRITE_NS, *LEGACY)
PROM = {"rateWindow": "10s"}  # 1-s scrapes: ten samples a window (test_operator_k8s.py)

#: the operator's retry after a failed tick (elastore.operator.handlers.RETRY_S) and its
#: poll while an operation runs (elastore.operator.runner.POLL_S), in seconds
RETRY_S, POLL_S = 30.0, 5.0
#: the step should complete within the retry, the ticks that lower the replicas, see the
#: pod go and end the step (3 polls), and as much again for a busy 2-core machine (a figure's
#: target: how soon is a measurement)
RECOVERY_BOUND_S = 2 * (RETRY_S + 3 * POLL_S)
#: the size every policy here ends at (replicas.min and .max from the first apply: the
#: ceiling, not the forecast, makes the 6 -> 5, and the floor ends it there)
CAP = {"min": 5, "max": 5}
#: a failed tick the API server's own timeout or overload explains (a busy 2-core machine:
#: a 504 "Timeout: request did not complete within requested timeout", a 429, etcd's
#: "request timed out"), as the ports word it in the ElastoreError that kopf logs as "tick
#: failed: ...". It is retried (RETRY_S) like any failed tick; anything else is a defect
TRANSIENT_API = ("Gateway Timeout", "Too Many Requests", "Timeout: request did not complete",
                 "the server was unable to return a response in the time allotted",
                 "etcdserver: request timed out")


# -- the control plane, Prometheus and the chart's account ----------------------------------
@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("standin")


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory, standin: Path) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("k8s"), exec_config=standin_exec_config(
        list(NAMESPACES), "cass", 8, standin))
    yield cp
    cp.stop()


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, cp: ControlPlane) -> Iterator[Prometheus]:
    """800 requests/s on every StatefulSet: 5 of the built-in lab model's servers."""
    metrics = CassandraMetrics(rps=800.0)
    try:
        metrics.follow(cp)
        p = Prometheus(tmp_path_factory.mktemp("prom"), [metrics.target])
        try:
            yield p
        finally:
            p.close()
    finally:
        metrics.close()


@pytest.fixture(scope="module")
def chart_account(cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart installed with watchNamespaces (a Role in each of NAMESPACES), and the
    static 1-GiB volumes the StatefulSets claim (a scale-in checks the survivors' free
    space). Returns a kubeconfig of the chart's ServiceAccount."""
    for ns in NAMESPACES:
        cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", stdin=persistent_volumes(
        6 * len(NAMESPACES) + 2, "1Gi", tmp_path_factory.mktemp("pv")))
    return install_namespaced(cp, RELEASE, NAMESPACES, tmp_path_factory.mktemp("sa") / "kc")


def operator(kc: Path, log: Path, namespaces: tuple[str, ...]) -> OperatorProcess:
    return OperatorProcess(kc, log, args=namespaced_args(RELEASE, namespaces))


def enforce_policy(ns: str, url: str, **spec: Any) -> str:
    """Policy "orders" on StatefulSet "cass" in Enforce: a 10-s period, persistence, no
    scale-down window, the built-in lab model as it is (test_operator_k8s.enforce_policy)."""
    fields: dict[str, Any] = {
        "mode": "Enforce", "controlPeriod": "10s", "replicas": {"min": 3, "max": 8},
        "prediction": {"method": "persistence", "horizon": "10s", "step": "2s"},
        "migration": {"nodeOverheadSeconds": 5}, "scaleDown": {"stabilizationSeconds": 0},
        "metrics": {"prometheus": {"url": url, **PROM}}, "capacityModel": {"learn": False}}
    return policy("orders", ns, "cass", nodetool=[sys.executable, str(NODETOOL_STANDIN)],
                  **{**fields, **spec})


def namespace(cp: ControlPlane, name: str, replicas: int) -> str:
    cp.kubectl("apply", "-f", "-", stdin=statefulset("cass", name, replicas, volume="1Gi"))
    wait_until(f"{replicas} pods in {name}", lambda: replicas_of(cp, name, ready=True) ==
               replicas, 90)
    return name


# -- reads (in process: a kubectl run per poll costs this 2-core machine a tenth of a core) --
def _get(cp: ControlPlane, path: str) -> dict[str, Any]:
    try:
        return cp.get_json(path)
    except OSError:  # a slow or refused answer: nothing known this poll
        return {}


def policy_status(cp: ControlPlane, ns: str) -> dict[str, Any]:
    body = _get(cp, f"/apis/elastore.io/v1alpha1/namespaces/{ns}/elasticpolicies/orders")
    return dict(body.get("status") or {})


def replicas_of(cp: ControlPlane, ns: str, ready: bool = False) -> int | None:
    sts = _get(cp, f"/apis/apps/v1/namespaces/{ns}/statefulsets/cass")
    if not sts:
        return None
    if ready:
        return int((sts.get("status") or {}).get("readyReplicas") or 0)
    return int(sts["spec"]["replicas"])


def pods(cp: ControlPlane, ns: str) -> set[str] | None:
    got = _get(cp, f"/api/v1/namespaces/{ns}/pods")
    if not got:
        return None
    return {p["metadata"]["name"] for p in got.get("items", [])}


def left_ring_marks(cp: ControlPlane, ns: str) -> dict[str, str | None]:
    """Each PVC of the namespace and its left-ring mark (None: none)."""
    got = cp.get_json(f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
    return {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(
        "elastore.io/left-ring") for p in got.get("items", [])}


def cond(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("type") == ctype), {})


def decommissions(calls: Path) -> list[str]:
    """The nodes the stand-in was told to decommission, in order."""
    if not calls.exists():
        return []
    return [w[1] for w in (line.split() for line in calls.read_text().splitlines())
            if w[2:3] == ["decommission"]]


def decommissioning(cp: ControlPlane, ns: str, calls: Path) -> dict[str, Any] | None:
    """The status once the step is in Decommissioning and the stand-in has the call."""
    st = policy_status(cp, ns)
    op = st.get("operation") or {}
    if op.get("phase") == "Decommissioning" and op.get("decommissionIssuedEpoch") and \
            "5" in decommissions(calls):
        return st
    return None


def status_when(cp: ControlPlane, ns: str, pred: Callable[[dict[str, Any]], Any]
                ) -> dict[str, Any] | None:
    st = policy_status(cp, ns)
    return st if st and pred(st) else None


def reasons(cp: ControlPlane, ns: str) -> list[str]:
    return [e["reason"] for e in events(cp, ns, "orders")]


class KeptDecommissioned:
    """From now until :meth:`close`, stand-in node ``node`` reports DECOMMISSIONED, as a
    real node that finished leaving does until its process ends (see the module's
    docstring): its marker is dated ``LEAVE_S`` + 1 s back, written atomically, every
    second."""

    def __init__(self, d: Path, node: int) -> None:
        self.marker, self.tmp = d / f"decommissioned-{node}", d / f".decommissioned-{node}"
        self._stop = threading.Event()
        self.refresh()  # before the hold goes: never a moment NORMAL or LEAVING again
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        self.tmp.write_text(f"{time.time() - LEAVE_S - 1.0}")
        os.replace(self.tmp, self.marker)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class ReplicasLog:
    """The StatefulSet's ``spec.replicas`` every half second: (epoch, replicas)."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.cp, self.ns = cp, ns
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            n = replicas_of(self.cp, self.ns)
            if n is not None:
                self.seen.append((time.time(), n))

    def between(self, t0: float, t1: float) -> set[int]:
        return {n for t, n in self.seen if t0 <= t <= t1}

    def steps(self) -> list[int]:
        """The sizes in the order they were seen, each once per stretch."""
        out: list[int] = []
        for _, n in self.seen:
            if not out or out[-1] != n:
                out.append(n)
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# -- the fault: the chart's Role without the status writes --------------------------------
def can_write_status(cp: ControlPlane, ns: str) -> bool:
    res = cp.kubectl("auth", "can-i", "patch", "elasticpolicies.elastore.io",
                     "--subresource=status", "-n", ns, "--as",
                     f"system:serviceaccount:{RELEASE}:{RELEASE}", check=False)
    return res.stdout.strip() == "yes"


def set_rules(cp: ControlPlane, ns: str, rules: list[dict[str, Any]]) -> None:
    cp.kubectl("patch", "role", RELEASE, "-n", ns, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/rules", "value": rules}]))


def revoke_status_writes(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    """The Role's rule on ``elasticpolicies/status`` keeps ``get`` only; returns the rules
    as they were (to restore)."""
    rules = json.loads(cp.kubectl("get", "role", RELEASE, "-n", ns, "-o", "json").stdout
                       )["rules"]
    status_rules = [r for r in rules if "elasticpolicies/status" in r.get("resources", [])]
    assert status_rules and all({"patch", "update"} <= set(r["verbs"]) for r in status_rules), \
        rules
    set_rules(cp, ns, [{**r, "verbs": ["get"]} if r in status_rules else r for r in rules])
    return list(rules)


def ticks_ended(log: Path, ns: str) -> int:
    """How many of the policy's ticks the operator's log says have ended (``-v``)."""
    return log.read_text(errors="replace").count(f"{ns}/orders tick in ") \
        if log.exists() else 0


def refused_writes(log: Path, offset: int) -> list[str]:
    """The operator's log lines from ``offset`` on that say a status write was refused."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines()
            if "writing the status of ElasticPolicy" in line and "Forbidden" in line]


def test_chaos_decommission_done_but_the_status_write_fails(
        cp: ControlPlane, prom: Prometheus, standin: Path, chart_account: Path,
        tmp_path: Path, figure: FigureBook) -> None:
    """A ScaleIn 6 -> 5 (800 requests/s need 5) decommissions cass-5, held LEAVING; the
    status writes are revoked; the stand-in finishes the decommission; the tick that sees
    it is refused the write of its next state. Nothing is lowered while the write is
    refused; once it is possible again the step completes from the store's word, with one
    decommission, one node fewer, and nothing else touched."""
    ns = namespace(cp, WRITE_NS, 6)
    d = standin / ns
    d.mkdir(parents=True, exist_ok=True)
    hold, calls = d / "hold-5", d / "calls.log"
    hold.write_text("held by the test")
    sizes = ReplicasLog(cp, ns)
    op = operator(chart_account, tmp_path / "op.log", (ns,))
    kept: KeptDecommissioned | None = None
    rules: list[dict[str, Any]] | None = None
    try:
        # 5..5: the ceiling begins the 6 -> 5 and nothing follows it (the module's doc)
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, replicas=CAP))
        st = wait_until("the decommission of cass-5", lambda: decommissioning(cp, ns, calls),
                        150)
        begun = dict(st["operation"])
        assert begun["pod"] == "cass-5" and begun.get("id"), begun
        # right after a tick has ended (the decommission's, or a later one: every write of
        # it went through), the fault and the decommission's end, before the next tick
        # (POLL_S later) sees the node: the write that fails is the step's next state
        ended = ticks_ended(op.log, ns)
        wait_until("a tick to end", lambda: ticks_ended(op.log, ns) > ended, 60, every_s=0.2)
        rules = revoke_status_writes(cp, ns)
        t_revoked = time.time()
        wait_until("the revocation in force", lambda: not can_write_status(cp, ns), 30)
        offset = op.log.stat().st_size
        kept = KeptDecommissioned(d, 5)
        hold.unlink()  # the store finishes the decommission
        t_finished = time.time()
        # the next tick: cass-5 DECOMMISSIONED and gone from cass-0's ring, the step's next
        # state (Scaling) refused by the API server, and said so in the log
        wait_until("the write of the step's next state refused", lambda: any(
            "phase Scaling not recorded" in line for line in refused_writes(op.log, offset)),
                   120, every_s=2.0)
        t_refused = time.time()
        assert replicas_of(cp, ns) == 6  # no effect without its state recorded
        # a transition is said (its Event) only once its state is saved
        said_while_refused = reasons(cp, ns).count("ScaleInScaling")
        assert said_while_refused == 0, reasons(cp, ns)
        set_rules(cp, ns, rules)
        rules = None
        wait_until("the status writes allowed again", lambda: can_write_status(cp, ns), 30)
        t_restored = time.time()
        wait_until("the StatefulSet lowered to 5", lambda: replicas_of(cp, ns) == 5,
                   RECOVERY_BOUND_S + 60)
        t_scaled = time.time()
        wait_until("the step to complete", lambda: not policy_status(cp, ns).get(
            "operation") and "cass-5" not in (pods(cp, ns) or {"cass-5"}),
                   RECOVERY_BOUND_S + 60)
        t_done = time.time()
        refused = refused_writes(op.log, offset)
        print(f"chaos status-write: decommission finished -> write refused (seen) "
              f"{t_refused - t_finished:.1f} s; {len(refused)} write(s) refused, "
              f"{said_while_refused} ScaleInScaling Event(s) said meanwhile; revoked "
              f"{t_restored - t_revoked:.1f} s; write possible again -> replicas 5 "
              f"{t_scaled - t_restored:.1f} s, -> step complete {t_done - t_restored:.1f} s")
        # one decommission, of cass-5 only
        assert decommissions(calls) == ["5"], calls.read_text()
        # nothing lowered while the state could not be written; one node fewer, once
        assert sizes.between(t_revoked, t_restored) == {6}, sizes.seen
        sizes.close()
        assert sizes.steps() == [6, 5], sizes.seen
        # the same operation finished it: cass-5's PVC carries its mark, no other PVC one
        marks = left_ring_marks(cp, ns)
        assert set(marks) == {f"data-cass-{k}" for k in range(6)}, marks  # none deleted
        assert f"op={begun['id']}" in (marks["data-cass-5"] or ""), marks
        assert all(marks[f"data-cass-{k}"] is None for k in range(5)), marks
        assert pods(cp, ns) == {f"cass-{k}" for k in range(5)}
        said = reasons(cp, ns)
        assert said.count("ScaleInStarted") == 1 and said.count("ScaleInScaling") == 1, said
        assert "InternalError" not in said and "OperationStuck" not in said, said
        st = policy_status(cp, ns)
        assert st["currentReplicas"] == 5 and cond(st, "Conflict").get("status") != "True", st
        # it completed (the waits above, 150 s each, say so if not); how soon is a figure
        figure("recovered_s", t_done - t_restored, "<=", RECOVERY_BOUND_S,
               "from the status writes allowed again to the step complete, s",
               source="was assert t_done - t_restored <= RECOVERY_BOUND_S (90 s)")
        assert op.alive(), op.tail()
    finally:
        if rules is not None:
            set_rules(cp, ns, rules)
        op.stop()
        sizes.close()
        if kept is not None:
            kept.close()


# -- the fault: a status an earlier release wrote -----------------------------------------
#: What each earlier release wrote in the status, from the git history: the keys of its
#: runner's status, of its operation record (``to_status``), of ``observed`` and of a
#: planned action in the memory. The API server stores only what the CRD declares (a typed
#: status since 4a57a5c), so a field the schema added later was never there.
FORMATS: dict[str, dict[str, frozenset[str] | None]] = {
    # the releases from beb319f to 67c586a^ (2026-11-23 to 2026-11-27): no operation id
    # (67c586a gave operations one, b37f9df put it in the schema); no status.skew,
    # .storage or .binding (f8b9875, 062560a, 2026-11-28)
    "2026-11-27": {
        "status": frozenset({
            "observedGeneration", "currentReplicas", "desiredReplicas", "forecastError",
            "recommendedMiBps", "migrationMiBps", "conditions", "forecast", "observed",
            "nextAction", "lastDecision", "memory", "operation", "paused", "fallback",
            "scaleEvents", "swift", "datacenter", "bandwidth", "interference", "model",
            "kopf"}),
        "operation": frozenset({
            "kind", "fromReplicas", "toReplicas", "pod", "phase", "startedAt",
            "startedEpoch", "updatedEpoch", "expectedEndEpoch", "message",
            "decommissionIssuedEpoch", "pvc", "deadlineEpoch", "deadline", "cleanupOrdinal",
            "cleanupIssuedEpoch", "cleanupRestoreMiBps"}),
        "observed": None,  # as now
        "action": frozenset({"atEpoch", "at", "replicas", "source", "reason", "rateMiBps"}),
    },
    # the first operator, d5f5c7e (2026-11-23): no deadline (beb319f), no id, no cleanup
    # fields (70bceaf), no pause, fallback or scale events (f00105a), no interference,
    # model or bandwidth; observed without nodes and readyReplicas; a planned action
    # without its rate
    "2026-11-23": {
        "status": frozenset({
            "observedGeneration", "currentReplicas", "desiredReplicas", "forecastError",
            "recommendedMiBps", "migrationMiBps", "conditions", "forecast", "observed",
            "nextAction", "lastDecision", "memory", "operation", "kopf"}),
        "operation": frozenset({
            "kind", "fromReplicas", "toReplicas", "pod", "phase", "startedAt",
            "startedEpoch", "updatedEpoch", "expectedEndEpoch", "message",
            "decommissionIssuedEpoch", "pvc"}),
        "observed": frozenset({"requestsPerSecond", "readRatio", "dataBytes",
                               "migrationMiBps"}),
        "action": frozenset({"atEpoch", "at", "replicas", "source", "reason"}),
    },
}
#: a raw recommendation the earlier release remembered for the scale-down window: higher
#: than the load's (5), so the window keeps it and a memory lost in the upgrade shows
REMEMBERED = 7
REMEMBERED_AGO_S = 60.0


def _only(d: dict[str, Any], keys: frozenset[str] | None) -> dict[str, Any]:
    return dict(d) if keys is None else {k: v for k, v in d.items() if k in keys}


def earlier_status(st: dict[str, Any], release: str, now_s: float) -> dict[str, Any]:
    """``st`` (the current release's status) as ``release`` wrote it, its memory holding
    a recommendation of :data:`REMEMBERED` made :data:`REMEMBERED_AGO_S` before ``now_s``
    (the scale-down window's sliding maximum: later entries only if lower)."""
    f = FORMATS[release]
    out = _only(st, f["status"])
    out["operation"] = _only(st["operation"], f["operation"])
    out["observed"] = _only(st.get("observed") or {}, f["observed"])
    mem = dict(st.get("memory") or {})
    mem["actions"] = [_only(a, f["action"]) for a in mem.get("actions") or []]
    then = now_s - REMEMBERED_AGO_S
    mem["desired"] = [[then, REMEMBERED], *[[t, n] for t, n in mem.get("desired") or []
                                            if t > then and n < REMEMBERED]]
    out["memory"] = mem
    return out


def test_chaos_earlier_formats_read_back() -> None:
    """The operation records of FORMATS read back (no control plane): what they lack is
    filled in as the current release would have written it: no id (given before the next
    effect), and for the first release a deadline by start()'s own rule."""
    op = operation.start("ScaleIn", "cass", 6, 1_000.0, 75.0, "data")
    for release, f in FORMATS.items():
        keys = f["operation"]
        assert keys is not None
        back = operation.OperationState.from_status(_only(op.to_status(), keys))
        assert back is not None and back.id is None
        assert back.deadline_s == pytest.approx(op.deadline_s, abs=0.01), release
        assert (back.kind, back.pod, back.phase, back.started_s, back.pvc) == (
            op.kind, op.pod, op.phase, op.started_s, op.pvc)
    # an operation of the first release begun long ago is past that deadline: Stuck at
    # once, as the current release's own would be, not followed forever
    old = operation.OperationState.from_status(
        _only(op.to_status(), FORMATS["2026-11-23"]["operation"]))
    assert old is not None and old.deadline_s is not None
    assert operation.overdue(old, old.deadline_s + 1) is not None


def test_chaos_a_status_in_the_previous_releases_format(
        cp: ControlPlane, prom: Prometheus, standin: Path, chart_account: Path,
        tmp_path: Path) -> None:
    """An upgrade mid-decommission, once per earlier format: the operator begins a ScaleIn
    6 -> 5 in each namespace and decommissions cass-5 (held LEAVING); it stops; the status
    is rewritten as the earlier release wrote it (and the policy's scale-down window raised
    to 600 s, so the memory's remembered recommendation stays in it); the current operator
    starts. It continues each step from the store: the same decommission (never issued
    again), an id given, the first release's deadline derived as start() sets it, the
    memory kept; then the store finishes the decommission and the step completes."""
    nss = tuple(LEGACY)
    dirs = {ns: standin / ns for ns in nss}
    for ns in nss:
        namespace(cp, ns, 6)
        dirs[ns].mkdir(parents=True, exist_ok=True)
        (dirs[ns] / "hold-5").write_text("held by the test")
    first = operator(chart_account, tmp_path / "first.log", nss)
    try:
        for ns in nss:
            # 5..5 from the first apply: the ceiling begins the 6 -> 5, and no step follows
            # it. A young history's upper scenarios could want 6 the moment 5 is
            # reached, and that step deletes the PVC whose left-ring mark is checked below
            # (RetainedVolumeDeleted; CI, and a fresh-clone run, 2026-12-03); and the
            # remembered 7 (raw, not clamped: the memory keeps it above max) must not
            # become one either
            cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, replicas=CAP))
        begun = {ns: dict(wait_until(f"the decommission of cass-5 in {ns}", lambda ns=ns:
                                     decommissioning(cp, ns, dirs[ns] / "calls.log"),
                                     300)["operation"]) for ns in nss}
    finally:
        rc = first.stop()
    assert rc == 0, first.tail()  # a graceful stop, as a rollout's
    # the upgrade: the statuses as the earlier releases left them
    t_upgrade = time.time()
    for ns, release in LEGACY.items():
        old = earlier_status(policy_status(cp, ns), release, t_upgrade)
        cp.kubectl("patch", "elasticpolicy", "orders", "-n", ns, "--subresource=status",
                   "--type=json", "-p", json.dumps(
                       [{"op": "replace", "path": "/status", "value": old}]))
        stored = policy_status(cp, ns)
        assert set(stored["operation"]) <= set(FORMATS[release]["operation"] or ()), stored
        assert "id" not in stored["operation"], stored
        cp.kubectl("patch", "elasticpolicy", "orders", "-n", ns, "--type=merge", "-p",
                   json.dumps({"spec": {"scaleDown": {"stabilizationSeconds": 600}}}))
    assert "deadlineEpoch" not in policy_status(cp, "chaos-legacy-nov23")["operation"]
    new = operator(chart_account, tmp_path / "new.log", nss)
    t_started = time.time()
    kept: list[KeptDecommissioned] = []
    try:
        for ns in nss:
            st = wait_until(f"the current operator to take up the step in {ns}",
                            lambda ns=ns: status_when(cp, ns, lambda s: (
                                s.get("operation") or {}).get("id")), 240)
            now_op, was = st["operation"], begun[ns]
            assert now_op["phase"] == "Decommissioning", now_op
            for k in ("kind", "fromReplicas", "toReplicas", "pod", "pvc", "startedEpoch",
                      "decommissionIssuedEpoch"):
                assert now_op[k] == was[k], (ns, k, now_op, was)
            assert now_op["id"] != was["id"]  # the earlier format had none: a new one
            # a deadline: the earlier one kept, or (first release) the one start() set
            assert now_op["deadlineEpoch"] == pytest.approx(was["deadlineEpoch"], abs=0.01)
            assert cond(st, "Conflict").get("status") != "True", st
        for ns in nss:
            st = wait_until(f"a decision by the current operator in {ns}", lambda ns=ns:
                            status_when(cp, ns, lambda s: (s.get("lastDecision") or {}).get(
                                "ok") and float(s["lastDecision"]["epoch"]) > t_upgrade), 240)
            desired = st["memory"]["desired"]
            assert any(n == REMEMBERED and abs(t - (t_upgrade - REMEMBERED_AGO_S)) < 0.01
                       for t, n in desired), (ns, desired)
            assert (st.get("operation") or {}).get("phase") == "Decommissioning", st
        t_taken = time.time()
        ids = {ns: policy_status(cp, ns)["operation"]["id"] for ns in nss}
        # the store finishes the decommissions
        t_released = time.time()
        for ns in nss:
            kept.append(KeptDecommissioned(dirs[ns], 5))
            (dirs[ns] / "hold-5").unlink()
        for ns in nss:
            wait_until(f"the step to complete in {ns}", lambda ns=ns: not policy_status(
                cp, ns).get("operation") and replicas_of(cp, ns) == 5 and "cass-5" not in (
                    pods(cp, ns) or {"cass-5"}), 300)
        t_done = time.time()
        print(f"chaos earlier-format status: current operator started -> both steps taken "
              f"up and decided on {t_taken - t_started:.1f} s; decommissions finished -> "
              f"both steps complete {t_done - t_released:.1f} s")
        for ns in nss:
            assert decommissions(dirs[ns] / "calls.log") == ["5"], ns
            said = reasons(cp, ns)
            assert said.count("ScaleInStarted") == 1, (ns, said)
            assert not {"InternalError", "StatusRejected", "OperationStuck"} & set(said), said
            marks = left_ring_marks(cp, ns)
            assert f"op={ids[ns]}" in (marks.get("data-cass-5") or ""), marks
            assert all(marks[f"data-cass-{k}"] is None for k in range(5)), marks
            assert replicas_of(cp, ns) == 5 and pods(cp, ns) == {f"cass-{k}" for k in range(5)}
        # no failed tick (no crash, no retry loop) but one the API server's own timeout or
        # overload explains on a busy machine: told by its message (TRANSIENT_API), which
        # the ports take from the API server's answer. (No answer at all is not a failed
        # tick: the runner retries it and logs "did not answer".)
        failed = [ln for ln in new.tail(400_000).splitlines() if "tick failed" in ln]
        transient = [ln for ln in failed if any(w in ln for w in TRANSIENT_API)]
        assert len(transient) == len(failed), "\n".join(
            ln for ln in failed if ln not in transient)[:3000]
        if transient:
            print(f"chaos earlier-format status: {len(transient)} tick(s) failed on the API "
                  f"server's timeout, retried: {transient[0][:300]}")
        assert new.alive(), new.tail()
    finally:
        new.stop()
        for k in kept:
            k.close()


def test_chaos_a_long_held_decommission_is_kept_decommissioned(tmp_path: Path) -> None:
    """:class:`KeptDecommissioned` on the stand-in itself (no control plane): a node held
    LEAVING for longer than the stand-in's FORGET_S reports DECOMMISSIONED once its hold
    goes, as a real node does (the stand-in alone would report NORMAL: it dates FORGET_S
    from the decommission's issue)."""
    import subprocess

    env = {**os.environ, "ELASTORE_NODE": "5", "ELASTORE_STANDIN_DIR": str(tmp_path)}

    def mode() -> str:
        out = subprocess.run([sys.executable, str(NODETOOL_STANDIN), "netstats"], env=env,
                             capture_output=True, text=True, check=True).stdout
        return out.split("Mode: ", 1)[1].split()[0]

    (tmp_path / "hold-5").write_text("held")
    (tmp_path / "decommissioned-5").write_text(f"{time.time() - FORGET_S - 1}")
    assert mode() == "LEAVING"
    kept = KeptDecommissioned(tmp_path, 5)
    try:
        (tmp_path / "hold-5").unlink()
        assert mode() == "DECOMMISSIONED"
        time.sleep(2.5)  # refreshed meanwhile: still within LEAVE_S..FORGET_S
        assert mode() == "DECOMMISSIONED"
    finally:
        kept.close()


def test_chaos_a_status_write_on_a_stale_read_is_refused(cp: ControlPlane) -> None:
    """The precondition every status write of a tick carries, on the real API server: a
    JSON merge patch of the status with ``metadata.resourceVersion`` is refused (409,
    StatusConflict) once anything wrote the policy after that version, and nothing of it
    is stored; on the current version it is stored and gives the next one. (Of two
    replicas that both lead, the one whose read is stale cannot record a step.)"""
    from kubernetes import config as kconfig

    from elastore.errors import StatusConflict
    from elastore.operator.policyapi import PolicyApi

    ns = "chaos-stale"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, "http://127.0.0.1:1"))
    api = PolicyApi(kconfig.new_client_from_config(config_file=str(cp.kubeconfig)))
    body = api.get(ns, "orders")
    assert body is not None
    read = str(body["metadata"]["resourceVersion"])
    # a writer in between (another replica, a person)
    mine = api.patch_status(ns, "orders", {"desiredReplicas": 4})
    assert mine is not None and mine != read
    with pytest.raises(StatusConflict, match="changed since it was read at resourceVersion"):
        api.patch_status(ns, "orders", {"desiredReplicas": 7}, expect_version=read)
    assert policy_status(cp, ns).get("desiredReplicas") == 4  # nothing of it stored
    after = api.patch_status(ns, "orders", {"desiredReplicas": 5}, expect_version=mine)
    assert after is not None and after != mine
    assert policy_status(cp, ns).get("desiredReplicas") == 5
    cp.kubectl("delete", "namespace", ns, "--wait=false")
