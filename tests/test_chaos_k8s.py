"""Faults of the control plane during an operation in flight (issue 39, ``-k chaos``): the
real API server and etcd (testbed.k8s), kwok's pods, a real Prometheus, and the operator as
a process of its own.

Each test holds a node step open with the nodetool stand-in (testbed.nodetool_standin: a
``hold-<k>`` file keeps a decommission LEAVING, a ``join-hold-<k>`` file keeps a new node
JOINING), lets the fault happen in the middle of it, and then asserts:

* **no double action**: the StatefulSet's size written exactly once per step, read from the
  API server's own audit log (every write to ``statefulsets/scale`` with the size it asked
  for) and from the StatefulSet's ``metadata.generation``; exactly one ``decommission``
  per removed node in the stand-in's ``calls.log``; one ``*Started`` Event per step;
* **nothing lost**: the operation in flight is carried on to its end (the same operation,
  by its id), the policy settles with its status, the StatefulSet, the pods and the ring
  agreeing; a scale-in's pod goes only after its node left the ring; a scale-out's old nodes
  are all cleaned up after the last join;
* **the time to recover**, printed (``CHAOS ...`` lines): seconds from the fault's end (the
  API server ready again, or the leader's death) until the operator's next successful tick
  is in the status. It must come (a generous, stated deadline); how soon is a measurement:
  the leader failover's, which has a bound in the issue (<= 30 s), is the figure
  ``failover_s`` (tests/figures.py: printed in ``make test``, judged in ``make lab-check``).

Each policy's ``replicas.max`` is the size the test's path ends at (5) from its first
apply: the planner treats max as a ceiling, so the path (6 -> 5, or 3 -> 4 -> at most 5) is
set by it and not by how wide a young forecast's upper scenarios are on a busy machine (the
stand-in exporters' 10-s rates jitter 10-20 %), which once took a plan on to 6 again.

The module has its own control plane: the restarts hurt no other module.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from figures import FigureBook
from k8s_support import (
    CRDS,
    NODETOOL_STANDIN,
    CassandraMetrics,
    OperatorProcess,
    Prometheus,
    events,
    persistent_volumes,
    policy,
    standin_exec_config,
    statefulset,
    wait_until,
)
from testbed.k8s import ControlPlane
from testbed.nodetool_standin import LEAVE_S

pytestmark = pytest.mark.k8s

API_NS, ETCD_NS, LEADER_NS = "chaos-apiserver", "chaos-etcd", "chaos-leader"
STS, POLICY = "cass", "orders"
#: the issue's target for a leader failover
FAILOVER_TARGET_S = 30.0
#: what the API server writes to its audit log: every write to a StatefulSet (its size
#: included: the request's body), nothing else
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Request
  verbs: [create, update, patch]
  resources: [{group: apps, resources: [statefulsets, statefulsets/scale]}]
- level: None
"""
#: Prometheus scrapes the exporter every second: a 10-s rate window holds ten samples
PROM = {"rateWindow": "10s"}


def _established(cp: ControlPlane, crd: str) -> bool:
    try:
        doc = cp.get_json(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    except OSError:
        return False
    conds = (doc.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("standin")


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory, standin: Path) -> Iterator[ControlPlane]:
    """k8s_support.start_control_plane's, with an audit log of every StatefulSet write."""
    cp = ControlPlane(tmp_path_factory.mktemp("k8s"), audit_policy=AUDIT_POLICY,
                      exec_config=standin_exec_config([API_NS, ETCD_NS, LEADER_NS], STS, 8,
                                                      standin))
    try:
        cp.start(print)
        cp.kubectl("apply", "-f", str(CRDS))
        for crd in ("elasticpolicies.elastore.io", "clusterkopfpeerings.kopf.dev"):
            wait_until(f"CRD {crd} Established", lambda crd=crd: _established(cp, crd), 60)
        wait_until("the CRDs to serve", lambda: cp.kubectl(
            "get", "elasticpolicies", "-A", check=False).returncode == 0, 30)
        cp.kubectl("apply", "-f", "-", stdin="apiVersion: kopf.dev/v1\n"
                   "kind: ClusterKopfPeering\nmetadata: {name: elastore}\n")
    except Exception as exc:
        cp.stop()
        pytest.fail(f"the Kubernetes control plane did not come up: {exc}")
    yield cp
    cp.stop()


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, cp: ControlPlane) -> Iterator[Prometheus]:
    """800 requests/s on every StatefulSet: more than 3 nodes of the built-in lab model
    serve, fewer than 6 (it wants 5: test_operator_k8s's drift and owner tests)."""
    m = CassandraMetrics(rps=800.0)
    m.follow(cp)
    p = Prometheus(tmp_path_factory.mktemp("prom"), [m.target])
    yield p
    p.close()
    m.close()


def enforce_policy(ns: str, url: str, max_replicas: int = 8) -> str:
    """test_operator_k8s's Enforce policy: a 10-s period, persistence, no stabilization,
    3..``max_replicas`` replicas, the nodetool stand-in."""
    return policy(POLICY, ns, STS, nodetool=[sys.executable, str(NODETOOL_STANDIN)],
                  mode="Enforce", controlPeriod="10s", replicas={"min": 3, "max": max_replicas},
                  prediction={"method": "persistence", "horizon": "10s", "step": "2s"},
                  migration={"nodeOverheadSeconds": 5}, scaleDown={"stabilizationSeconds": 0},
                  metrics={"prometheus": {"url": url, **PROM}}, capacityModel={"learn": False})


def make_namespace(cp: ControlPlane, ns: str, replicas: int, **sts: Any) -> None:
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", stdin=statefulset(STS, ns, replicas, **sts))
    wait_until(f"{replicas} pods ready in {ns}", lambda: (sts_of(cp, ns) or {}).get(
        "status", {}).get("readyReplicas") == replicas, 120)


# -- reading the cluster, through a fault (None while the API server does not answer) -----
def _get(cp: ControlPlane, path: str) -> dict[str, Any] | None:
    try:
        return cp.get_json(path, timeout_s=5)
    except (OSError, ValueError):  # urllib's errors included
        return None


def status_of(cp: ControlPlane, ns: str) -> dict[str, Any] | None:
    body = _get(cp, f"/apis/elastore.io/v1alpha1/namespaces/{ns}/elasticpolicies/{POLICY}")
    return None if body is None else dict(body.get("status") or {})


def sts_of(cp: ControlPlane, ns: str) -> dict[str, Any] | None:
    return _get(cp, f"/apis/apps/v1/namespaces/{ns}/statefulsets/{STS}")


def pods_of(cp: ControlPlane, ns: str) -> list[str] | None:
    got = _get(cp, f"/api/v1/namespaces/{ns}/pods")
    if got is None:
        return None
    return sorted(p["metadata"]["name"] for p in got["items"]
                  if not p["metadata"].get("deletionTimestamp"))


def ticked_after(st: dict[str, Any] | None, t: float) -> bool:
    """The status holds the work of a tick that began after ``t`` and succeeded: the
    operation in flight advanced (``updatedEpoch``), or a successful control period."""
    if not st:
        return False
    op, dec = st.get("operation") or {}, st.get("lastDecision") or {}
    stamps = [float(op.get("updatedEpoch") or 0)]
    if dec.get("ok"):
        stamps.append(float(dec.get("epoch") or 0))
    return max(stamps) > t


def measure_recovery(cp: ControlPlane, ns: str, since: float, timeout_s: float = 240
                     ) -> float:
    """Poll the status until a tick begun after ``since`` is in it; the epoch it was seen."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ticked_after(status_of(cp, ns), since):
            return time.time()
        time.sleep(0.25)
    raise AssertionError(f"the operator did not tick successfully within {timeout_s:.0f} s "
                         f"of the fault (status: {status_of(cp, ns)})")


def scale_writes(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    """Every write to the StatefulSet's size after its creation, as the API server's audit
    log has it: the size asked for, the answer's code, when, and who."""
    out = []
    for line in cp.audit_log.read_text().splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line cut short by a SIGKILL
        ref = ev.get("objectRef") or {}
        if ev.get("stage") != "ResponseComplete" or ref.get("namespace") != ns or \
                ref.get("name") != STS or ref.get("resource") != "statefulsets" or \
                ev.get("verb") not in ("update", "patch") or \
                ref.get("subresource") not in (None, "scale"):
            continue
        body = ev.get("requestObject") or {}
        out.append({"replicas": (body.get("spec") or {}).get("replicas"),
                    "code": int((ev.get("responseStatus") or {}).get("code") or 0),
                    "at": datetime.fromisoformat(ev["requestReceivedTimestamp"]).timestamp(),
                    "agent": ev.get("userAgent", ""), "subresource": ref.get("subresource")})
    return out


def calls(standin: Path, ns: str) -> list[tuple[float, int, list[str]]]:
    """The stand-in's calls.log: (epoch, node, argv)."""
    f = standin / ns / "calls.log"
    out = []
    for line in (f.read_text().splitlines() if f.exists() else []):
        t, node, *argv = line.split()
        out.append((float(t), int(node), argv))
    return out


def netstats(standin: Path, ns: str, node: int) -> str:
    res = subprocess.run([sys.executable, str(NODETOOL_STANDIN), "netstats"],
                         env={"ELASTORE_NODE": str(node),
                              "ELASTORE_STANDIN_DIR": str(standin / ns)},
                         capture_output=True, text=True, check=False)
    return res.stdout.split("\n", 1)[0].removeprefix("Mode: ").strip()


def settle(cp: ControlPlane, ns: str, timeout_s: float = 420
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait until the policy rests: no operation, and a successful decision made after the
    last one ended wants the size the StatefulSet has and the status says. (status,
    StatefulSet)."""
    end = time.monotonic() + timeout_s
    idle_since: float | None = None
    last: Any = None
    while time.monotonic() < end:
        st, sts = status_of(cp, ns), sts_of(cp, ns)
        if st is not None and sts is not None:
            dec = st.get("lastDecision") or {}
            last = {k: st.get(k) for k in ("operation", "desiredReplicas", "currentReplicas",
                                           "lastDecision")}
            if st.get("operation"):
                idle_since = None
            else:
                idle_since = idle_since or time.time()
                if dec.get("ok") and float(dec.get("epoch") or 0) > idle_since and \
                        st.get("desiredReplicas") == st.get("currentReplicas") == \
                        sts["spec"]["replicas"]:
                    return st, sts
        time.sleep(1.0)
    raise AssertionError(f"the policy in {ns} did not settle within {timeout_s:.0f} s: {last}")


class KeptDecommissioned:
    """The stand-in dates a node's leave from its ``decommission`` call and forgets it
    ``FORGET_S`` later (a later pod of that ordinal is a new node): a decommission held open
    past that would turn NORMAL at its release, which a real node never does (it stays
    DECOMMISSIONED until its process ends). From :meth:`release` on, the leave is kept
    fresh until :meth:`close`, as the real node would be."""

    def __init__(self, d: Path, node: int) -> None:
        self.d, self.node = d, node
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.released_at: float | None = None

    def release(self) -> float:
        """The hold ends now: the node has left the ring."""
        self._write()
        self.released_at = time.time()
        (self.d / f"hold-{self.node}").unlink()
        self._thread.start()
        return self.released_at

    def _write(self) -> None:
        (self.d / f"decommissioned-{self.node}").write_text(f"{time.time() - LEAVE_S}")

    def _run(self) -> None:
        while not self._stop.wait(5.0):
            self._write()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def healthy_log(op: OperatorProcess) -> None:
    """The fault was met as a fault, not as a bug: no tick escaped as an internal error or
    as an arbitrary exception handed to kopf's backoff (an API server that did not answer
    once did: its tick was retried only 30 s later), the process alive. (An answer the API
    server refused, a 5xx, is a failed tick kopf retries: "failed temporarily".)"""
    text = op.log.read_text(errors="replace") if op.log.exists() else ""
    bad = [ln for ln in text.splitlines() if "internal error" in ln or
           "Daemon 'control_loop' failed with an exception" in ln]
    assert not bad, "\n".join(bad[:5])
    assert op.alive(), op.tail()


def remove_policy(cp: ControlPlane, ns: str) -> None:
    """The policy goes (the next test's operator must not serve it): kopf's finalizer is
    taken off by hand if no operator is left to release it."""
    cp.kubectl("delete", "elasticpolicy", POLICY, "-n", ns, "--wait=false", check=False)
    cp.kubectl("patch", "elasticpolicy", POLICY, "-n", ns, "--type=merge", "-p",
               '{"metadata":{"finalizers":null}}', check=False)


def one_write_per_step(cp: ControlPlane, ns: str, start: int, final: int, sts: dict[str, Any]
                       ) -> list[dict[str, Any]]:
    """The StatefulSet went from ``start`` to ``final`` one node at a time, each size
    written exactly once (the audit log) and nothing else written to its spec (its
    generation counts every change to it)."""
    writes = scale_writes(cp, ns)
    ok = [w for w in writes if 200 <= w["code"] < 300]
    step = 1 if final > start else -1
    want = list(range(start + step, final + step, step))
    assert [w["replicas"] for w in ok] == want, writes
    assert all(w["subresource"] == "scale" for w in ok), writes  # the operator's CAS
    assert sts["metadata"]["generation"] == 1 + len(want), (sts["metadata"], writes)
    return writes


# ------------------------------------------------------------------------------------------
def test_chaos_apiserver_restart_during_a_step(
        cp: ControlPlane, prom: Prometheus, standin: Path, tmp_path: Path) -> None:
    """A scale-in 6 -> 5 (800 requests/s need 5) is decommissioning cass-5, held LEAVING,
    when kube-apiserver is killed (SIGKILL) and started again 5 s later with the same
    arguments. The operator resumes the same operation without issuing the decommission
    again; once the node has left, the StatefulSet goes to 5, written once."""
    ns = API_NS
    cp.kubectl("apply", "-f", "-", stdin=persistent_volumes(8, "1Gi", tmp_path / "pv"))
    make_namespace(cp, ns, 6, volume="1Gi")  # sized volumes: a scale-in checks free space
    d = standin / ns
    d.mkdir(parents=True, exist_ok=True)
    (d / "hold-5").write_text("held by the test")
    leave = KeptDecommissioned(d, 5)
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log",
                         extra_env={"ELASTORE_IDENTITY": "chaos-api"})
    try:
        # at most 5 from the first apply: the ceiling, not the forecast, makes the 6 -> 5
        # (the planner removes nodes above max one after the other), and nothing follows
        # it. Under max 8 the 6 -> 5 waited for a young forecast's quantiles to narrow; and
        # its upper scenarios (the stand-in's scrape jitter on a loaded machine widens
        # them) could want 6 again the moment 5 was reached, a step that never joins here
        # (the stand-in keeps cass-5's node DECOMMISSIONED; a fresh-clone run, 2026-12-03).
        # A real cass-5 would bootstrap on a new volume (test_real_node.py's scale-out)
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, max_replicas=5))
        st = wait_until("the decommission of cass-5", lambda: (
            (s := status_of(cp, ns)) and (s.get("operation") or {}).get("phase") ==
            "Decommissioning" and any(n == 5 and a[:1] == ["decommission"]
                                      for _, n, a in calls(standin, ns)) and s), 240)
        op_id = st["operation"]["id"]
        t_kill = time.time()
        t_ready = cp.restart("kube-apiserver", down_s=5.0)
        assert op.alive(), f"the operator exited with the API server gone:\n{op.tail()}"
        t_seen = measure_recovery(cp, ns, t_kill)
        st = status_of(cp, ns)
        assert st is not None and (st.get("operation") or {}).get("id") == op_id, st
        assert st["operation"]["phase"] == "Decommissioning", st  # it still leaves
        print(f"CHAOS apiserver: down {t_ready - t_kill:.1f} s (5 s + its start), the "
              f"operator's next successful tick {t_seen - t_ready:.1f} s after it was ready")
        healthy_log(op)
        t_release = leave.release()  # the node leaves the ring only now
        st, sts = settle(cp, ns)
        final = sts["spec"]["replicas"]
        assert 3 <= final <= 5, (final, st)
        writes = one_write_per_step(cp, ns, 6, final, sts)
        # the pod went only after its node had left the ring
        first = next(w for w in writes if 200 <= w["code"] < 300)
        assert first["at"] > t_release, (first, t_release)
        gone = list(range(5, final - 1, -1))
        decommissions = [n for _, n, a in calls(standin, ns) if a[:1] == ["decommission"]]
        assert decommissions == gone, calls(standin, ns)  # each node once, none again
        assert st["currentReplicas"] == final and not st.get("operation"), st
        assert wait_until("the pods to match", lambda: pods_of(cp, ns) ==
                          sorted(f"{STS}-{k}" for k in range(final)), 60)
        assert all(netstats(standin, ns, k) == "NORMAL" for k in range(final))
        started = [e for e in events(cp, ns, POLICY) if e["reason"] == "ScaleInStarted"]
        assert len(started) == len(gone), started
        failed = [w for w in writes if not 200 <= w["code"] < 300]
        text = op.log.read_text(errors="replace")
        healthy_log(op)
        print(f"CHAOS apiserver: settled at {final} replicas; scale writes {writes}; "
              f"failed writes {len(failed)}; ticks the API server did not answer "
              f"{text.count('did not answer')}, ticks it refused "
              f"{text.count('failed temporarily')}")
    finally:
        leave.close()
        op.stop()
        remove_policy(cp, ns)


def test_chaos_etcd_restart_during_a_step(
        cp: ControlPlane, prom: Prometheus, standin: Path, tmp_path: Path) -> None:
    """A scale-out 3 -> 4 (800 requests/s want 5) has cass-3 held JOINING when etcd is
    killed (SIGKILL) and started again 5 s later on the same data directory. The operator
    resumes the same operation: no second write of the size while the node joins, and no
    next step before it has joined; then it goes on to the size the load wants, one node
    at a time, each size written once."""
    ns = ETCD_NS
    make_namespace(cp, ns, 3)
    d = standin / ns
    d.mkdir(parents=True, exist_ok=True)
    hold = d / "join-hold-3"
    hold.write_text("held by the test")
    op = OperatorProcess(cp.kubeconfig, tmp_path / "op.log",
                         extra_env={"ELASTORE_IDENTITY": "chaos-etcd"})
    try:
        # at most 5: the path 3 -> 4 -> 5 is monotone at any speed (a young forecast's
        # upper scenarios cannot take it to 6 and back, which one_write_per_step refuses)
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, max_replicas=5))
        st = wait_until("cass-3 joining", lambda: (
            (s := status_of(cp, ns)) and (s.get("operation") or {}).get("phase") ==
            "Joining" and s), 240)
        op_id = st["operation"]["id"]
        t_kill = time.time()
        t_ready = cp.restart("etcd", down_s=5.0)
        assert op.alive(), f"the operator exited with etcd gone:\n{op.tail()}"
        t_seen = measure_recovery(cp, ns, t_kill)
        st = status_of(cp, ns)
        assert st is not None and (st.get("operation") or {}).get("id") == op_id, st
        assert st["operation"]["phase"] == "Joining", st
        print(f"CHAOS etcd: API server not ready for {t_ready - t_kill:.1f} s (etcd down "
              f"5 s + its start), the operator's next successful tick "
              f"{t_seen - t_ready:.1f} s after it was ready")
        # a second tick after the fault: still one write, still joining
        measure_recovery(cp, ns, t_seen)
        assert [w["replicas"] for w in scale_writes(cp, ns) if 200 <= w["code"] < 300] \
            == [4], scale_writes(cp, ns)
        t_release = time.time()
        hold.unlink()
        st, sts = settle(cp, ns)
        final = sts["spec"]["replicas"]
        assert 4 <= final <= 5, (final, st)
        writes = one_write_per_step(cp, ns, 3, final, sts)
        ok = [w for w in writes if 200 <= w["code"] < 300]
        assert all(w["at"] > t_release for w in ok[1:]), (ok, t_release)  # no step jumped
        assert st["currentReplicas"] == final and not st.get("operation"), st
        assert wait_until("the pods to match", lambda: pods_of(cp, ns) ==
                          sorted(f"{STS}-{k}" for k in range(final)), 60)
        assert all(netstats(standin, ns, k) == "NORMAL" for k in range(final))
        log = calls(standin, ns)
        assert not [c for c in log if c[2][:1] == ["decommission"]], log
        # every old node cleaned after the last node joined (nothing owed)
        last = ok[-1]["at"]
        cleaned = {n for t, n, a in log if a[:1] == ["cleanup"] and t > last}
        assert cleaned == set(range(final - 1)), (cleaned, log)
        started = [e for e in events(cp, ns, POLICY) if e["reason"] == "ScaleOutStarted"]
        assert len(started) == final - 3, started
        text = op.log.read_text(errors="replace")
        healthy_log(op)
        print(f"CHAOS etcd: settled at {final} replicas; scale writes {writes}; ticks the "
              f"API server did not answer {text.count('did not answer')}, ticks it refused "
              f"{text.count('failed temporarily')}")
    finally:
        op.stop()
        remove_policy(cp, ns)


def test_chaos_leader_killed_during_a_scale_out(
        cp: ControlPlane, prom: Prometheus, standin: Path, tmp_path: Path,
        figure: FigureBook) -> None:
    """Two replicas (kopf peering, a 10-s lifetime). The leader is SIGKILLed as soon as a
    scale-out 3 -> 4 is in the status (cass-3 is held JOINING, so the step is still open
    whichever side of the size write the kill fell on). The other replica takes over (within
    120 s; how soon, against the issue's 30 s, is the figure ``failover_s``), carries on the
    same operation, and each step's size is written once, whichever replica wrote it."""
    ns = LEADER_NS
    make_namespace(cp, ns, 3)
    d = standin / ns
    d.mkdir(parents=True, exist_ok=True)
    hold = d / "join-hold-3"
    hold.write_text("held by the test")
    reps = {i: OperatorProcess(cp.kubeconfig, tmp_path / f"{i}.log", lifetime_s=10,
                               extra_env={"ELASTORE_IDENTITY": i})
            for i in ("replica-a", "replica-b")}
    try:
        # at most 5: the path 3 -> 4 -> 5 is monotone at any speed (see the module's doc)
        cp.kubectl("apply", "-f", "-", stdin=enforce_policy(ns, prom.url, max_replicas=5))
        st = wait_until("a scale-out in the status", lambda: (
            (s := status_of(cp, ns)) and (s.get("operation") or {}).get("kind") ==
            "ScaleOut" and s), 240, every_s=0.1)
        deciders = {e.get("reportingInstance") for e in events(cp, ns, POLICY)
                    if e["reason"] in ("Decision", "ScaleOutStarted")}
        assert len(deciders) == 1 and deciders <= set(reps), deciders  # one replica acts
        leader = next(iter(deciders))
        other = next(i for i in reps if i != leader)
        op_id, phase = st["operation"]["id"], st["operation"]["phase"]
        t_kill = time.time()
        reps[leader].stop(signal.SIGKILL)
        t_seen = measure_recovery(cp, ns, t_kill, timeout_s=120)
        failover = t_seen - t_kill
        print(f"CHAOS leader: killed {leader} in phase {phase}; {other} carried the "
              f"operation on {failover:.1f} s later")
        st = status_of(cp, ns)
        assert st is not None and (st.get("operation") or {}).get("id") == op_id, st
        # the survivor took over (the 120-s wait above); how soon is a measurement
        figure("failover_s", failover, "<=", FAILOVER_TARGET_S, "from the leader's SIGKILL "
               "to the survivor's first successful tick in the status, s",
               source="was assert failover <= FAILOVER_TARGET_S (the issue's 30 s)")
        assert reps[other].alive()
        t_release = time.time()
        hold.unlink()
        st, sts = settle(cp, ns)
        final = sts["spec"]["replicas"]
        assert 4 <= final <= 5, (final, st)
        writes = one_write_per_step(cp, ns, 3, final, sts)
        # no contention either: not even a refused write (two writers would 409 or drift)
        assert all(200 <= w["code"] < 300 for w in writes), writes
        ok = writes
        assert all(w["at"] > t_release for w in ok[1:]), (ok, t_release)  # no step jumped
        assert st["currentReplicas"] == final and not st.get("operation"), st
        evs = events(cp, ns, POLICY)
        started = [e for e in evs if e["reason"] == "ScaleOutStarted"]
        assert len(started) == final - 3, started
        after = {e.get("reportingInstance") for e in evs
                 if e["reason"] in ("Decision", "ScaleOutStarted", "ScaleOutJoining",
                                    "ScaleOutCleaningUp", "ScaleOutDone") and
                 datetime.fromisoformat(e.get("lastTimestamp") or e["eventTime"])
                 .timestamp() > t_kill + 1}
        assert after == {other}, after  # only the survivor acted after the kill
        assert wait_until("the pods to match", lambda: pods_of(cp, ns) ==
                          sorted(f"{STS}-{k}" for k in range(final)), 60)
        assert all(netstats(standin, ns, k) == "NORMAL" for k in range(final))
        last = ok[-1]["at"]
        cleaned = {n for t, n, a in calls(standin, ns) if a[:1] == ["cleanup"] and t > last}
        assert cleaned == set(range(final - 1)), cleaned
        healthy_log(reps[other])
        print(f"CHAOS leader: failover {failover:.1f} s (target <= {FAILOVER_TARGET_S:.0f}); "
              f"settled at {final} replicas; scale writes {writes}")
    finally:
        for p in reps.values():
            p.stop()
        remove_policy(cp, ns)
