"""End to end on a real node, installed as a user installs it (issue 36).

* The images are built here (testbed.images: the operator's from the Dockerfile on a local
  Debian base, Cassandra's from Debian's JRE and the lab's jars) and loaded into the node's
  containerd; nothing is pulled (``imagePullPolicy: Never``).
* The node is a real kubelet with containerd, runc and the CNI's ptp + host-local, in a
  network namespace of this run (testbed.node): every pod has its own veth and /32 route.
* Cassandra is a real StatefulSet of 3 pods with real PVCs (static hostPath PVs), and the
  node's Prometheus discovers and scrapes its pods through the API server.
* ``helm install`` from charts/elastore: the operator as a Deployment of 2 replicas (in-
  cluster config, its ServiceAccount, kopf peering), the BwMan agent as a DaemonSet.
* The policy starts in Recommend (it publishes, touches nothing), then goes to Enforce: the
  trace's daily rise takes the StatefulSet 3 -> 4 and its fall 4 -> 3. The leading
  operator pod is deleted while cass-3 is leaving; the Deployment replaces it, the standby
  takes over, and the API server's audit log shows a single decommission.
* ``elastore operator backtest`` replays the run from the node's Prometheus: every period
  with clean scrapes is decided, and on the replayed rise it wants the fourth node and
  would start it. How soon after the operator's start is a figure (``figure``), judged in
  ``make lab-check``; a second policy, with no capacity model, learns from the same pods
  (Recommend) and leaves its prior (how far is a figure).
* The user raises ``replicas.min`` to 4: the scale-out deletes the PVC cass-3's
  decommission left (Cassandra will not restart a decommissioned node on its data) and
  cass-3 bootstraps on a new volume.
* ``helm uninstall`` then leaves no tc state on the node, no finalizer, no release object.
* Both policies are interference-blind (see ``_policy``).

The tests are the stages of one run and share it (module scope), in order: a module that
declares itself staged. A stage that needs an earlier one that did not pass fails at once
and names it (``Run.needs``). ``-k real_node`` selects them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from figures import FigureBook
from k8s_support import (
    CRDS,
    events,
    get,
    policy,
    trace_workload,
    wait_until,
)
from testbed.forward import Forwarder
from testbed.images import (
    cassandra_statefulset,
    ensure_cassandra_image,
    ensure_elastore_image,
    ensure_sandbox_image,
    load_into_containerd,
)
from testbed.k8s import ControlPlane, ensure_helm
from testbed.node import NODE_ADDR, PROMETHEUS_PORT, RealNode, start_cluster, start_prometheus

from elastore.lab.cassandra.nodes import node_jit_flags
from elastore.resources import builtin_model

pytestmark = [pytest.mark.lab, pytest.mark.k8s, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
NS, STS, POLICY = "store", "cass", "cass-elastic"
#: a second policy on the same StatefulSet, in Recommend, with no capacity model: it learns
#: the store's border online from the same run (issue 18's mechanism)
LEARN = "cass-learn"
RELEASE, RELEASE_NS = "elastore", "elastore-system"
FULLNAME = RELEASE  # the chart's full name of a release named like the chart
ROWS, VALUE_BYTES = 2000, 10 * 1024  # the known data set: ~20 MiB at RF 3
HOUR_S = 20.0  # replay seconds per trace hour
#: the replay's first hour: the morning's trough (58-71 req/s from 10:00 to 12:00 at a trace
#: peak of 120; the rise from 13:00). The Recommend stage and the bulk write's minute take
#: the first ~55 s of the replay, so Enforce starts about 12:45: the rise is still ahead
#: (from 08:00, as the kwok-backed e2e, the run waited 90 s more for it)
START = "2016-01-05 10:00"
STEP = "20s"  # the predictor's step: one trace hour
HEADROOM = 0.1
#: the capacity model: the lab profile measured on this machine (in a ConfigMap). The SLO is
#: derived from it and the workload (slo_for), so the daily rise needs a fourth server and
#: its fall does not, whatever the machine measured
MODEL = builtin_model("lab")
#: how far the evidence must move the learner from its prior: its load scale (the
#: border's stretch) or its latency scale, by 25 % or more (a learner that kept its prior
#: has both at 1). Which way is the store's to say: the pods here are not the lab's
#: processes, and the SLO is derived from the lab profile. How close the learner gets to a
#: store's real border is make lab-check's calibration measurement, not this test's.
MOVED = 1.25
STABILIZATION_S = 40
NODE_MBIT = 1000.0
LOADGEN_PORT = 9600
PROM_URL = f"http://{NODE_ADDR}:{PROMETHEUS_PORT}"
PODLOAD = Path(__file__).resolve().parent / "testbed" / "podload.py"


@dataclass
class Run:
    cp: ControlPlane
    node: RealNode
    root: Path
    prom: Forwarder
    helm: Path
    written: dict[str, Any]
    slo_ms: float
    times: dict[str, float]
    load: subprocess.Popen[bytes] | None = None
    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    learn_samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    policy_doc: str = ""  # the Enforce policy as applied, and when
    applied_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    leader_deleted: dict[str, Any] = field(default_factory=dict)
    retained_pvc_uid: str = ""
    #: the stages that passed ("scale-out", "scale-in"): a later stage that needs one that
    #: failed fails at once, with that reason, instead of waiting out its own timeouts
    done: set[str] = field(default_factory=set)

    def needs(self, stage: str) -> None:
        if stage not in self.done:
            pytest.fail(f"this stage needs the {stage} stage, which did not pass (see its "
                        "failure above)")

    def status(self) -> dict[str, Any]:
        return dict(get(self.cp, "elasticpolicy", POLICY, NS).get("status") or {})

    def replicas(self) -> int:
        return int(get(self.cp, "statefulset", STS, NS)["spec"]["replicas"])

    def pod_ips(self) -> dict[str, str]:
        doc = self.cp.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{STS}")
        return {p["metadata"]["name"]: p["status"]["podIP"] for p in doc["items"]
                if (p.get("status") or {}).get("podIP")}

    def cql(self, *args: str, timeout: float = 300) -> dict[str, Any]:
        hosts = ",".join(self.pod_ips().values())
        res = subprocess.run(self.node.command(
            [sys.executable, "-m", "elastore.lab.cassandra.cql", hosts, *args]),
            capture_output=True, text=True, timeout=timeout, check=False)
        assert res.returncode == 0, f"cql {args}: {res.stderr[-1500:]}"
        return dict(json.loads(res.stdout.strip().splitlines()[-1]))

    def nodetool(self, pod: str, *args: str) -> str:
        res = self.cp.kubectl("exec", "-n", NS, pod, "--", "nodetool", *args, check=False)
        assert res.returncode == 0, f"nodetool {args} in {pod}: {res.stderr[-800:]}"
        return res.stdout

    def operator_pods(self) -> list[dict[str, Any]]:
        doc = self.cp.get_json(f"/api/v1/namespaces/{RELEASE_NS}/pods?labelSelector="
                               "app.kubernetes.io%2Fname%3Delastore")
        return [p for p in doc["items"] if not p["metadata"].get("deletionTimestamp")]

    def leader(self) -> str | None:
        """The operator pod that acts: the highest priority in kopf's peering record (the
        chart sets each peer's id to its pod's name)."""
        doc = self.cp.get_json(f"/apis/kopf.dev/v1/clusterkopfpeerings/{FULLNAME}")
        import datetime as dt

        now = dt.datetime.now(dt.UTC)

        def live(v: dict[str, Any]) -> bool:
            seen = dt.datetime.fromisoformat(str(v.get("lastseen")))
            seen = seen if seen.tzinfo else seen.replace(tzinfo=dt.UTC)
            return (now - seen).total_seconds() < float(v.get("lifetime", 0))

        peers = {k: v for k, v in (doc.get("status") or {}).items()
                 if isinstance(v, dict) and live(v)}
        if not peers:
            return None
        top = max(peers, key=lambda k: int(peers[k].get("priority", 0)))
        names = [p["metadata"]["name"] for p in self.operator_pods()]
        return top if top in names else None

    def helm_cmd(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.helm), *args, "--kubeconfig", str(self.cp.kubeconfig)],
                              capture_output=True, text=True, check=False, timeout=600)

    def decommissions(self) -> list[tuple[str, str, list[str]]]:
        return [e for e in self.cp.execs() if e[0] == NS and "decommission" in e[2]]

    def diagnostics(self) -> str:
        st = self.status()
        keep = {k: st.get(k) for k in ("conditions", "operation", "nextAction", "forecast",
                                       "observed", "desiredReplicas", "lastDecision")}
        logs = ""
        for p in self.operator_pods():
            logs += self.cp.kubectl("logs", "-n", RELEASE_NS, p["metadata"]["name"],
                                    "--tail=30", check=False).stdout[-2500:]
        return f"status: {json.dumps(keep, indent=1)[:4000]}\noperator logs: {logs}"


def _load_log(run: Run, chars: int = 1500) -> str:
    with contextlib.suppress(OSError):
        return (run.root / "load.log").read_text(errors="replace")[-chars:]
    return "(no load.log)"


def _replay_started(run: Run, timeout_s: float = 300) -> None:
    """Wait for the load generator to begin its replay (it says so once its schema and
    preload are done); a generator that exited instead fails the run at once, with its
    log: a CI run's died on a timed-out CREATE TABLE, and every later stage then waited
    for a daily rise that never came."""
    assert run.load is not None

    def begun() -> bool:
        if run.load is not None and run.load.poll() is not None:
            pytest.fail(f"the load generator exited ({run.load.returncode}) before its "
                        f"replay began:\n{_load_log(run)}")
        return "replay starts at epoch" in _load_log(run, 100_000)

    try:
        wait_until("the load generator's replay to begin", begun, timeout_s, every_s=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nload.log:\n{_load_log(run)}") from None


def _story(run: Run, since_s: float) -> str:
    """What the run did since ``since_s``, for a wait that timed out: the decisions (ok or
    their reasons, counted), the desired replicas and operation phases seen, the store
    pods' failed scrapes by Prometheus's ``up``, the pods' phases and the status now."""
    from collections import Counter

    rows = [s for t, s in run.samples if t >= since_s]
    why = Counter(("ok" if (s.get("lastDecision") or {}).get("ok") else
                   str((s.get("lastDecision") or {}).get("reason", "none"))[:90])
                  for s in rows)
    desired = [s.get("desiredReplicas") for s in rows]
    changes = [d for i, d in enumerate(desired) if i == 0 or d != desired[i - 1]]
    phases = Counter(f"{(s.get('operation') or {}).get('kind')}/"
                     f"{(s.get('operation') or {}).get('phase')}" for s in rows
                     if s.get("operation"))
    observed = [round(float((s.get("observed") or {}).get("requestsPerSecond") or -1))
                for s in rows[::max(1, len(rows) // 30)]]
    out = [f"{len(rows)} status samples since then; decisions: {dict(why)}",
           f"desiredReplicas as it changed: {changes[:40]}", f"operations seen: {dict(phases)}",
           f"observed req/s, ~30 samples spread over the span (-1: none): {observed}"]
    if run.load is not None:
        out.append(f"load generator: {'running' if run.load.poll() is None else 'exited '}"
                   f"{'' if run.load.poll() is None else run.load.returncode}; its log's "
                   f"tail: {_load_log(run, 600)}")
    with contextlib.suppress(Exception):
        import urllib.parse
        import urllib.request
        span = max(60, int(time.time() - since_s))
        q = (f'count_over_time((up{{namespace="{NS}",pod=~"{STS}-[0-9]+"}} == 0)[{span}s:]) '
             f'/ count_over_time(up{{namespace="{NS}",pod=~"{STS}-[0-9]+"}}[{span}s])')
        with urllib.request.urlopen(f"{run.prom.url}/api/v1/query?"
                                    + urllib.parse.urlencode({"query": q}), timeout=10) as r:
            res = json.load(r)["data"]["result"]
        out.append("failed scrapes (share of samples) per pod: " + ", ".join(
            f"{x['metric'].get('pod')} {float(x['value'][1]):.2f}" for x in res))
    with contextlib.suppress(Exception):
        doc = run.cp.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{STS}")
        def said(p: dict[str, Any]) -> str:
            cs = p["status"].get("containerStatuses") or []
            return (f"{p['metadata']['name']} {p['status'].get('phase')} ready="
                    f"{[c.get('ready') for c in cs]} restarts="
                    f"{[c.get('restartCount') for c in cs]}")
        out.append("pods: " + "; ".join(said(p) for p in doc["items"]))
    with contextlib.suppress(Exception):
        out.append(run.diagnostics())
    return "\n".join(out)


def _waited(run: Run, what: str, check: Any, timeout_s: float, since_s: float,
            every_s: float = 2) -> Any:
    """wait_until, and on a timeout the run's story since ``since_s`` in the failure."""
    try:
        return wait_until(what, check, timeout_s, every_s=every_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_story(run, since_s)}") from None


def slo_for(peak_rps: float, servers: int = 3, share: float = 0.8) -> float:
    """The p95 (ms) at which ``servers`` servers, less the headroom, carry ``share`` of the
    peak, by the lab profile (read ratio 0.95, no migration)."""
    from elastore.models.bundle import ModelSet

    ms = ModelSet.load(MODEL)
    want = share * peak_rps / servers / (1 - HEADROOM)
    lo, hi = 1.0, 1000.0
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        cap = float(ms.for_slo(mid, 95).capacity.capacity(0.95))
        lo, hi = (mid, hi) if cap < want else (lo, mid)
    return round(hi, 2)


def _sampler(run: Run) -> None:
    k = 0
    while not run.stop.wait(1.0):
        with contextlib.suppress(Exception):
            run.samples.append((time.time(), run.status()))
        k += 1
        if k % 5 == 0:  # the learning policy, every 5 s
            with contextlib.suppress(Exception):
                doc = run.cp.get_json(
                    f"/apis/elastore.io/v1alpha1/namespaces/{NS}/elasticpolicies/{LEARN}")
                run.learn_samples.append((time.time(), dict(doc.get("status") or {})))


def _started(run: Run, kind: str) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """When the operation of ``kind`` first shows in the status, that status, and the last
    status sampled before it (the plan it followed)."""
    for (_, before), (_, st) in zip(run.samples, run.samples[1:], strict=False):
        op = st.get("operation") or {}
        if op.get("kind") == kind and (before.get("operation") or {}).get("kind") != kind:
            return float(op["startedEpoch"]), st, before
    raise AssertionError(f"no {kind} operation was sampled")


def _agent_metrics(run: Run) -> str:
    """The agent's /metrics, on the node's address (hostNetwork)."""
    res = subprocess.run(run.node.command(
        ["curl", "-sf", "--max-time", "3", f"http://{NODE_ADDR}:9103/metrics"]),
        capture_output=True, text=True, check=False)
    return res.stdout


def _ready(cp: ControlPlane, kind: str, name: str, ns: str, want: int) -> bool:
    st = get(cp, kind, name, ns).get("status") or {}
    key = "numberReady" if kind == "daemonset" else "readyReplicas"
    return int(st.get(key) or 0) >= want


def _values(root: Path, image: str) -> Path:
    repo, _, tag = image.rpartition(":")
    doc = {
        "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
        "replicas": 2,
        "peering": {"lifetimeSeconds": 20},
        "watchNamespaces": [NS],
        # the node's Prometheus: an address of the node (no DNS in this cluster)
        "prometheus": {"allowedUrls": [f"http://{NODE_ADDR}:*"]},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "agent": {"enabled": True, "period": 2, "metrics": {"port": 9103}},
    }
    f = root / "values.json"
    f.write_text(json.dumps(doc))
    return f


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("real-node")
    times: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        op_image = ensure_elastore_image(print)
        cass_image = ensure_cassandra_image(print)
        sandbox = ensure_sandbox_image(print)
    except Exception as exc:
        pytest.fail(f"the images did not build: {exc}")
    times["image build"] = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        cp, node = start_cluster(root, sandbox, print)
    except Exception as exc:
        pytest.fail(f"the real node did not come up: {exc}")
    times["node start"] = time.monotonic() - t0
    prom: Forwarder | None = None
    r: Run | None = None
    helm = ensure_helm(print)
    try:
        t0 = time.monotonic()
        load_into_containerd(cass_image, str(node.sock), progress=print)
        times["cassandra image load"] = time.monotonic() - t0
        # the operator's image (1 GB, ~26 s to import) goes in while Cassandra's pods boot
        op_loaded: list[BaseException | None] = []

        def load_operator() -> None:
            try:
                load_into_containerd(op_image, str(node.sock), progress=print)
                op_loaded.append(None)
            except BaseException as exc:  # re-raised in the fixture, below
                op_loaded.append(exc)

        op_loading = threading.Thread(target=load_operator, daemon=True)
        op_loading.start()
        start_prometheus(node, {"loadgen": f"{NODE_ADDR}:{LOADGEN_PORT}"})
        prom = Forwarder(node.ns, f"127.0.0.1:{PROMETHEUS_PORT}")
        cp.kubectl("create", "namespace", NS)
        cp.kubectl("create", "configmap", "cass-model", "-n", NS,
                   f"--from-file=model.json={MODEL}")
        # 5: the second scale-out's new volume (the first cass-3's PV stays Released)
        cp.kubectl("apply", "-f", "-", stdin=_persistent_volumes(5, root / "pv"))
        t0 = time.monotonic()
        cp.kubectl("apply", "-f", "-", stdin=cassandra_statefulset(
            STS, NS, 3, "elastore-test", "1Gi", cass_image,
            jvm_opts=" ".join(node_jit_flags())))
        wait_until("3 Cassandra pods Ready", lambda: _ready(cp, "statefulset", STS, NS, 3),
                   600, every_s=2)
        times["cassandra 3 pods Ready"] = time.monotonic() - t0
        op_loading.join(timeout=600)
        if not op_loaded or op_loaded[0] is not None:
            pytest.fail(f"the operator's image did not load into containerd: {op_loaded}")
        # to 10:00 the next day: the load still runs when the scale-in comes (Recommend first
        # and the pods' start put this run minutes behind the kwok-backed e2e's timeline)
        wl, peak = trace_workload(shared_dir, root / "wl.json", hour_s=HOUR_S, start=START,
                                  end="2016-01-06 10:00")
        slo = slo_for(peak)
        r = Run(cp, node, root, prom, helm, {}, slo, times)
        r.written = r.cql("write", "ks", str(ROWS), str(VALUE_BYTES), "11", "3")
        # helm install as the README says, with the image built here
        t0 = time.monotonic()
        res = r.helm_cmd("install", RELEASE, str(REPO / "charts" / "elastore"),
                         "--namespace", RELEASE_NS, "--create-namespace",
                         "-f", str(_values(root, op_image)))
        assert res.returncode == 0, f"helm install: {res.stderr}"
        wait_until("the operator's 2 replicas and the agent Ready", lambda: _ready(
            cp, "deployment", FULLNAME, RELEASE_NS, 2) and _ready(
            cp, "daemonset", f"{FULLNAME}-agent", RELEASE_NS, 1), 300, every_s=1)
        times["helm install to Ready"] = time.monotonic() - t0
        r.load = subprocess.Popen(
            node.command([sys.executable, str(PODLOAD), str(wl), str(root / "load.csv"),
                          ",".join(r.pod_ips().values()), f"{NODE_ADDR}:{LOADGEN_PORT}"]),
            stdout=(root / "load.log").open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        t0 = time.monotonic()
        _replay_started(r)
        times["load generator to its replay"] = time.monotonic() - t0
        threading.Thread(target=_sampler, args=(r,), daemon=True).start()
        print("times: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        yield r
    finally:
        if r is not None:
            r.stop.set()
            with contextlib.suppress(Exception):  # the run's record, for a failure's reader
                (root / "timeline.json").write_text(json.dumps(
                    {"applied_s": r.applied_s, "samples": r.samples,
                     "learn": r.learn_samples, "leader_deleted": r.leader_deleted}))
            if r.load is not None and r.load.poll() is None:
                os.killpg(r.load.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    r.load.wait(timeout=60)
        if prom is not None:
            prom.close()
        node.stop()
        cp.stop()


def _persistent_volumes(n: int, root: Path) -> str:
    """Static hostPath PVs (no provisioner here), owned by Cassandra's uid in its image."""
    docs = []
    for k in range(n):
        d = root / f"pv{k}"
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, 999, 999)
        docs.append(f"""apiVersion: v1
kind: PersistentVolume
metadata: {{name: elastore-real-pv-{k}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: elastore-test
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: {d}}}
""")
    return "---\n".join(docs)


def _policy(run: Run, mode: str, min_replicas: int = 3, max_replicas: int = 4) -> str:
    return policy(
        POLICY, NS, STS, mode=mode, controlPeriod="10s",
        replicas={"min": min_replicas, "max": max_replicas}, slo={"latencyMs": run.slo_ms},
        prediction={"horizon": "60s", "step": STEP, "headroom": HEADROOM},
        planner={"mode": "Window"},
        # a node joins or leaves in ~40 s besides streaming, as the kwok-backed e2e: with
        # the 60-s horizon a larger overhead leaves no room for a scale-in in a window (a
        # run with 60 s never scaled in: "no change"), the paper's window scheduler
        migration={"minMiBps": 1, "maxMiBps": 8, "nodeOverheadSeconds": 40},
        repairs={"hold": False},
        scaleDown={"stabilizationSeconds": STABILIZATION_S},
        bandwidth={"nodeMbit": NODE_MBIT},
        capacityModel={"configMapRef": {"name": "cass-model"}},
        # interference-blind, as the kwok-backed e2e was (its pods had no index): the index
        # the agent measures on this node (3-4 JVMs, the control plane and the operators on
        # 2 cores) swung 0.03-0.30 between periods in a run, which moved the lab profile's
        # border 15-31 req/s per server, so the night needed 4-6 servers and the scale-in
        # waited for the next morning's trough (588 s). The index itself is checked in
        # test_real_node_the_agent_shapes_every_pods_veth_the_new_one_too; Hubbub's use of
        # it in test_agent_k8s.py and test_operator_interference*.py
        interference={"enabled": False},
        metrics={"prometheus": {"url": PROM_URL}})


def test_real_node_the_operator_runs_from_its_image_in_cluster(run: Run) -> None:
    """Two operator pods from the built image on the real node, in-cluster config and the
    chart's ServiceAccount; the agent's pod on the node's network; one leader."""
    pods = run.operator_pods()
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for p in pods:
        assert p["spec"]["nodeName"] == run.node.name
        assert p["spec"]["serviceAccountName"] == FULLNAME
        c = p["spec"]["containers"][0]
        assert c["image"].startswith("localhost/elastore:") and \
            c["imagePullPolicy"] == "Never"
        st = p["status"]["containerStatuses"][0]
        assert st["ready"] and st["imageID"], st
    wait_until("one operator pod to lead", lambda: run.leader() is not None, 60)
    ips = run.pod_ips()
    veths = run.node.pod_veths()
    assert all(ip in veths for ip in ips.values()), (ips, veths)
    print(f"times: {', '.join(f'{k} {v:.1f} s' for k, v in run.times.items())}; "
          f"leader {run.leader()}; store pods' veths {veths}")


def test_real_node_network_stays_inside_the_runs_namespaces(run: Run) -> None:
    """The node's namespace has no default route and masquerades nothing; the API server's
    egress proxy refuses any address that is not the node's or a pod's, before dialling."""
    routes = subprocess.run(["ip", "-n", run.node.ns, "-j", "route", "show"],
                            capture_output=True, text=True, check=True).stdout
    assert not [r for r in json.loads(routes) if r.get("dst") == "default"], routes
    nat = subprocess.run(run.node.command(["iptables-save", "-t", "nat"]),
                         capture_output=True, text=True, check=False).stdout
    assert "MASQUERADE" not in nat, nat
    import socket

    proxy = next(r for r in run.node.relays if hasattr(r, "refused"))
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(proxy.path)
        s.sendall(b"CONNECT 192.0.2.1:80 HTTP/1.1\r\nHost: 192.0.2.1:80\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 403"), "the egress proxy let it through"
    assert "CONNECT 192.0.2.1:80" in proxy.refused


def test_real_node_recommend_publishes_and_touches_nothing(run: Run) -> None:
    run.cp.kubectl("apply", "-f", "-", stdin=_policy(run, "Recommend"))
    wait_until("a Recommend decision", lambda: (run.status().get("lastDecision") or {})
               .get("ok") is True and run.status().get("forecast"), 180, every_s=2)
    st = run.status()
    assert run.replicas() == 3 and not st.get("operation"), run.diagnostics()
    assert not run.decommissions()
    run.done.add("recommend")
    print(f"Recommend: desired {st.get('desiredReplicas')}, forecast "
          f"{(st.get('forecast') or {}).get('requestsPerSecond')} req/s, observed "
          f"{(st.get('observed') or {}).get('requestsPerSecond')} req/s")


def _read_ratio(run: Run) -> float | None:
    """The read ratio the operator's default queries give now (None: no load yet)."""
    import urllib.parse
    import urllib.request

    from elastore.operator.spec import DEFAULT_QUERIES

    got = {}
    for k in ("readRps", "writeRps"):
        expr = DEFAULT_QUERIES[k].format(selector="", window="1m")
        with urllib.request.urlopen(f"{run.prom.url}/api/v1/query?query="
                                    + urllib.parse.quote(expr), timeout=5) as r:
            res = json.loads(r.read())["data"]["result"]
        if not res:
            return None
        got[k] = float(res[0]["value"][1])
    total = got["readRps"] + got["writeRps"]
    return got["readRps"] / total if total > 0 else None


def test_real_node_enforce_scales_out_at_the_planned_time(run: Run, figure: FigureBook) -> None:
    # the load generator writes every key before its replay: inside the queries' 1-minute
    # window that reads as a write-heavy load, on which the lab model rightly scales out
    # at once. This test is about the trace's daily rise: Enforce once the burst has left
    # the window (as the kwok-backed e2e did)
    run.needs("recommend")
    seen: list[float | None] = []

    def settled() -> bool:
        with contextlib.suppress(OSError, ValueError, KeyError):
            seen.append(_read_ratio(run))
        if run.load is not None and run.load.poll() is not None:
            pytest.fail(f"the load generator exited ({run.load.returncode}):\n"
                        f"{_load_log(run)}")
        return bool(seen) and seen[-1] is not None and float(seen[-1] or 0) >= 0.93

    try:
        wait_until("the bulk write to leave the 1-minute rate window", settled, 180, every_s=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; read ratios seen: {seen[-10:]}") from exc
    run.policy_doc = _policy(run, "Enforce")
    run.applied_s = time.time()
    run.cp.kubectl("apply", "-f", "-", stdin=run.policy_doc)
    # the same store, observed by a policy that learns (the prior: the lab profile x0.5,
    # the CRD's default), from the same moment: its windows are the trace's, not the bulk
    # write's (a write-only burst in its bins drags its reference read ratio, and with it
    # the prior's border, toward 0); Recommend: it acts on nothing
    run.cp.kubectl("apply", "-f", "-", stdin=policy(
        LEARN, NS, STS, mode="Recommend", controlPeriod="10s",
        replicas={"min": 3, "max": 4}, slo={"latencyMs": run.slo_ms},
        prediction={"horizon": "60s", "step": STEP, "headroom": HEADROOM},
        planner={"mode": "Window"}, interference={"enabled": False},
        metrics={"prometheus": {"url": PROM_URL}}))
    run.done.add("learner")
    # finished: no operation, or (the tick that completes a step also decides) another kind
    _waited(run, "the scale-out to 4 replicas to finish", lambda: run.replicas() == 4 and
            (run.status().get("operation") or {}).get("kind") != "ScaleOut" and
            _ready(run.cp, "statefulset", STS, NS, 4), 900, run.applied_s)
    ring = run.nodetool(f"{STS}-0", "status")
    assert ring.count("UN  ") == 4, ring
    started, st, before = _started(run, "ScaleOut")
    # it followed the plan: the step began when the planned action for 4 replicas fell due
    # (never before it; within one wake-up after it, or after the first plan that showed
    # it, if a rising forecast moved the due time into the past)
    planned = [a for a in (st.get("memory") or {}).get("actions") or [] if a["replicas"] == 4]
    assert planned, f"no planned action for 4 replicas at the start: {st}"
    due = float(planned[0]["atEpoch"])
    first_seen = min(t for t, s in run.samples
                     if any(a.get("replicas") == 4 and abs(float(a["atEpoch"]) - due) < 1
                            for a in ((s.get("memory") or {}).get("actions") or [])))
    # never before its due time (an order); how far after it is a figure: a wake-up on
    # a busy machine comes late, and "how soon" is a measurement
    assert due - 1.0 <= started, (due, first_seen, started)
    figure("scale_out_started_after_due_s", started - max(due, first_seen), "<=", 15.0,
           "s from the planned time (or the first plan that showed it) to the step's start",
           source="was asserted <= 15 s (one wake-up)")
    # where on the rise the step began is printed, not asserted. This used to ask for the
    # rise to have begun at the start (1.1 x the trough): runs started at 1.19 and 1.31 x,
    # then fresh-clone runs at 1.04 and 1.08 x (the second on a forecast of 53 req/s with 72
    # observed: the reactive correction's step) and one at 1.53 x, each when its plan made
    # it due (checked above). On a replay of 20 s a trace hour, the 1-minute rate window
    # alone is 3 trace hours of lag, so the lead lands anywhere on the morning's rise
    obs = [float((s.get("observed") or {}).get("requestsPerSecond") or 0)
           for t, s in run.samples if t <= started and s.get("observed")]
    obs = [v for v in obs if v > 0]
    assert obs, "no observed load in the status before the step"
    fc = float((before.get("forecast") or {}).get("requestsPerSecond") or 0)
    first = next(s for t, s in run.samples if t == first_seen)
    fc_first = float((first.get("forecast") or {}).get("requestsPerSecond") or 0)
    why = str((before.get("lastDecision") or {}).get("reason") or "")
    per = re.search(r"\(([\d,.]+) req/s/server under", why)
    carry = f"{3 * float(per.group(1).replace(',', '')):.0f}" if per else "?"
    assert before["lastDecision"]["ok"] is True
    reasons = [e["reason"] for e in events(run.cp, NS, POLICY)]
    assert "ScaleOutStarted" in reasons and "Throttle" in reasons, reasons
    # the stream throttle, through pods/exec into every pod (the API server's audit log)
    throttled = {pod for ns, pod, cmd in run.cp.execs()
                 if ns == NS and "setstreamthroughput" in cmd}
    assert len(throttled) >= 3, run.cp.execs()[-10:]
    run.done.add("scale-out")
    done = next((t for t, s in run.samples if t > started and not s.get("operation")), None)
    print(f"scale-out took {done - started if done else float('nan'):.0f} s (pod, boot, join); "
          f"planned {max(0.0, due - first_seen):.0f} s ahead, started {started - due:+.1f} s "
          f"from its planned time; load then {obs[-1]:.0f} req/s (trough {min(obs):.0f}; "
          f"3 servers carry {carry} under the decision's model), forecast {fc:.0f} req/s "
          f"(when the step first showed: {fc_first:.0f}); the decision before it: "
          f"{why[:600]}")


def test_real_node_the_agent_shapes_every_pods_veth_the_new_one_too(run: Run) -> None:
    """The operator's split reached every pod's real CNI veth through status.bandwidth and
    the agent, cass-3's too, and cass-3's bootstrap stream crossed its storage class."""
    run.needs("scale-out")
    # the agent: every store pod's real veth has the split in HTB classes
    bw: dict[str, Any] = {}

    def shaped() -> bool:
        nonlocal bw
        bw = run.status().get("bandwidth") or {}
        veths = run.node.pod_veths()
        ips = run.pod_ips()
        if len(ips) != 4 or not bw:
            return False
        return all(_htb_rates(run.node, veths[ip]) for ip in ips.values() if ip in veths) \
            and all(ip in veths for ip in ips.values())

    wait_until("the agent to shape all 4 pods' veths", shaped, 60, every_s=1)
    rates = {pod: _htb_rates(run.node, run.node.pod_veths()[ip])
             for pod, ip in run.pod_ips().items()}
    client_bits = round(float(bw["clientMbit"]) * 1e6)
    for pod, r in rates.items():
        assert any(abs(v - client_bits) <= client_bits * 0.01 + 1000 for v in r.values()), \
            (pod, r, bw)
    measured = _measured_class_rates(run.node, run.pod_ips(), 10.0)
    text = _agent_metrics(run)

    def series(name: str, **labels: str) -> float | None:
        """The sample of ``name`` with exactly ``labels`` (in any order), or None."""
        import re

        for x in text.splitlines():
            m = re.match(r"([a-zA-Z_:][\w:]*)\{(.*)\} (\S+)$", x)
            if m and m.group(1) == name and dict(re.findall(
                    r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2))) == labels:
                return float(m.group(3))
        return None

    streamed = series("elastore_agent_class_bytes_total", **{
        "class": "storage", "direction": "to_pod", "namespace": NS, "pod": f"{STS}-3"})
    # cass-3 took its share of ~20 MiB at RF 3 (~1/4 of it at least) through its class
    assert streamed is not None and streamed > 3 * 2**20, (streamed, text[-1500:])
    assert "elastore_agent_pods_shaped 4.0" in text, text[-2000:]
    # Hubbub's input on a real node: an interference index in [0, 1] for every store pod
    index = {f"{STS}-{k}": series("elastore_interference_index", namespace=NS,
                                  node=run.node.name, pod=f"{STS}-{k}") for k in range(4)}
    assert all(v is not None and 0 <= v <= 1 for v in index.values()), \
        (index, [x for x in text.splitlines() if x.startswith("elastore_interference")][:20])
    print(f"split {bw['clientMbit']:.1f} / {bw['storageMbit']:.1f} Mbit/s of {NODE_MBIT:g}; "
          f"cass-3 received {streamed / 2**20:.1f} MiB through its storage class; "
          f"HTB rates (bit/s) {rates}; measured over 10 s (Mbit/s) {measured}; interference "
          f"index {index}")


def test_real_node_leader_deleted_mid_decommission_one_decommission(run: Run) -> None:
    run.needs("scale-out")
    _waited(run, "the scale-in to start decommissioning", lambda: (
        run.status().get("operation") or {}).get("phase") == "Decommissioning" and
        run.decommissions(), 600, run.applied_s, every_s=0.5)
    leader = run.leader()
    assert leader is not None, run.diagnostics()
    t0 = time.time()
    run.cp.kubectl("delete", "pod", "-n", RELEASE_NS, leader, "--wait=false")
    run.leader_deleted = {"pod": leader, "at": t0}
    # the day is over for this run: at most 3 from now. The scale-in goes on (its target is
    # in range); without this, a scale-in that ended late met the next day's rise (the
    # replay's forecast is the day before's) and a new 3 -> 4 -> 3 began in the tick that
    # completed it, before any check below could see it end: a second decommission, of the
    # next cass-3 (measured here, 2026-12-03)
    run.cp.kubectl("apply", "-f", "-", stdin=_policy(run, "Enforce", max_replicas=3))
    wait_until("another operator pod to lead", lambda: (run.leader() or leader) != leader,
               180, every_s=0.5)
    took_over = time.time() - t0
    wait_until("the Deployment to be back to 2 Ready", lambda: _ready(
        run.cp, "deployment", FULLNAME, RELEASE_NS, 2) and len(
        run.operator_pods()) == 2, 180, every_s=1)
    replaced = time.time() - t0
    _waited(run, "the resumed scale-in to finish", lambda: run.replicas() == 3 and
            not run.status().get("operation"), 900, run.applied_s)
    assert len(run.decommissions()) == 1, run.decommissions()
    after = [e for e in events(run.cp, NS, POLICY)
             if float(_event_time(e)) > t0 and e["reason"] == "ScaleInStarted"]
    assert not after, after
    run.done.add("scale-in")
    # the day is over: back to Recommend, so that nothing starts while the checks below read
    # the run (the replay ends at 10:00 the next day; with one day of history the forecast
    # is the day before's, which rises from 13:00)
    run.cp.kubectl("apply", "-f", "-", stdin=_policy(run, "Recommend"))
    print(f"leader {leader} deleted mid-decommission: a standby led {took_over:.1f} s later, "
          f"the Deployment had 2 Ready again {replaced:.1f} s later; one decommission")


def test_real_node_no_row_lost_and_the_pvc_kept(run: Run) -> None:
    run.needs("scale-in")
    ring = run.nodetool(f"{STS}-0", "status")
    assert ring.count("UN  ") == 3, ring
    assert run.cql("verify", "ks") == run.written
    pvc = get(run.cp, "pvc", f"data-{STS}-3", NS)
    assert pvc["status"]["phase"] == "Bound"  # retained by default (spec.scaleDown)
    run.retained_pvc_uid = pvc["metadata"]["uid"]
    assert run.load is not None and run.load.poll() in (None, 0), \
        (run.root / "load.log").read_text()[-2000:]


#: the warmup of the run's policies (the CRD's default): a period also reads the freshness
#: of the samples this long before it
WARMUP_S = 60.0
#: the periods with no failed scrape that a run must have, at least, to judge the backtest
MIN_CLEAN = 5


def _scrape_failed(run: Run, at_s: float) -> bool:
    """Whether the last scrape of some store pod at ``at_s`` failed (``up`` 0): the
    freshness check at that instant then finds no sample of it (Prometheus marks its
    series stale)."""
    import urllib.parse
    import urllib.request

    q = f'min(up{{namespace="{NS}",pod=~"{STS}-[0-9]+"}})'
    url = f"{run.prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": q, "time": at_s})
    with urllib.request.urlopen(url, timeout=10) as r:
        result = json.load(r)["data"]["result"]
    assert result, f"Prometheus has no 'up' of the store's pods at {at_s}: {q}"
    return float(result[0]["value"][1]) == 0


def test_real_node_the_backtest_replays_the_run_from_prometheus(
        run: Run, figure: FigureBook) -> None:
    """``elastore operator backtest`` with this run's policy over the node's Prometheus,
    from when the policy was applied to two minutes past the live scale-out's start: every
    period with clean scrapes decided on the real load, and on the replayed rise the
    backtest wants the fourth node and would start it. How soon after the live start, and
    how many periods were clean, are figures."""
    from datetime import UTC, datetime

    run.needs("scale-out")
    started, _, _ = _started(run, "ScaleOut")
    pol = run.root / "policy.json"
    pol.write_text(run.policy_doc.replace(PROM_URL, run.prom.url))
    fmt = "%Y-%m-%d %H:%M:%S"
    t0 = datetime.fromtimestamp(run.applied_s, UTC).strftime(fmt)
    t1 = datetime.fromtimestamp(started + 120, UTC).strftime(fmt)
    res = subprocess.run(
        [sys.executable, "-m", "elastore", "operator", "backtest", "-f", str(pol),
         "--from", t0, "--to", t1, "--prometheus", run.prom.url, "--model", str(MODEL),
         "--json"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    rows = out["rows"]
    decided = [r for r in rows if r["ok"]]
    shown = "\n".join(f"{r['at']} n={r['replicas']} load {r['load_rps']} forecast "
                      f"{r['forecast_rps']} desired {r['desired_replicas']} would "
                      f"{r['would_scale']} {r['reason'][:120]}" for r in rows)
    print(json.dumps(out["summary"]), shown, sep="\n")
    # a period may go undecided only where Prometheus itself recorded a failed scrape of a
    # store pod (up == 0) where the period reads freshness: at the period (a failed scrape
    # leaves no sample at the instant) or at the warmup's start before it. On CI's 2 loaded
    # cores the JMX exporter missed its scrape timeout (2 s then; 5 s since 2026-12-03) for
    # tens of seconds (CI lost 7 of 21 periods so, a fresh-clone run 13 of 23); a backtest
    # must not decide those
    gaps = {r["at_s"]: _scrape_failed(run, r["at_s"]) or
            _scrape_failed(run, r["at_s"] - WARMUP_S) for r in rows}
    clean = [r for r in rows if not gaps[r["at_s"]]]
    print(f"{len(rows) - len(clean)} of {len(rows)} periods had a failed last scrape of a "
          f"store pod at the period or {WARMUP_S:.0f} s before it")
    assert all(r["ok"] for r in clean), [r for r in clean if not r["ok"]]
    assert clean, f"no period of {len(rows)} had clean scrapes of every store pod"
    figure("backtest_clean_periods", len(clean), ">=", MIN_CLEAN,
           "backtest periods with no failed scrape of a store pod",
           source=f"was asserted >= {MIN_CLEAN}")
    assert all(r["reason"].startswith(("MetricsMissing", "MetricsWarmingUp", "MetricsStale"))
               for r in rows if not r["ok"]), [r["reason"] for r in rows if not r["ok"]]
    assert all(r["load_rps"] > 0 for r in decided)
    assert all(r["replicas"] >= 3 for r in clean)  # a failed scrape may hide a pod
    # the backtest sees the need for the fourth node, and would start it, within the range.
    # How soon after the live start is a figure, not an assertion. Both decide on the same data,
    # model and code, but not at the same instants nor with the same memory (a period the
    # backtest cannot decide forgets the forecast kept between periods; the live loop's
    # failed periods are others), and the need is a threshold crossing on a noisy rise: 3
    # servers carry about 105 req/s here while the load swings 80-118 req/s between
    # periods. Runs wanted it at +5 s (CI, stop 50) and at +57 s (run-D, a fresh clone on
    # 2026-12-04: its forecasts 91 req/s at -3 s and +7 s, then 94, then 105 at +57 s;
    # the live plan showed 4 from a forecast of 98 in a run here). Why run-D's live loop
    # saw the need 57 s sooner is not established: its status was not kept
    wants = [r["at_s"] for r in decided if r["desired_replicas"] >= 4]
    first_plan = min((t for t, s in run.samples
                      if any(a.get("replicas") == 4
                             for a in ((s.get("memory") or {}).get("actions") or []))),
                     default=None)
    lag = f"{min(wants) - started:+.0f} s" if wants else "never"
    live = next((s for t, s in run.samples if t == first_plan), {})
    print(f"the backtest wanted the fourth node at {lag} from the live start; the live plan "
          f"first showed it at "
          f"{f'{first_plan - started:+.0f} s' if first_plan is not None else 'never'}: "
          f"{str((live.get('lastDecision') or {}).get('reason') or '')[:400]}")
    assert wants, (started, shown)
    figure("backtest_wants_4_after_live_start_s", min(wants) - started, "<=", 60.0,
           "s from the live scale-out's start to the backtest's first period wanting 4",
           source="a run's threshold crossing on a noisy rise: runs measured -17..+57 s")
    outs = [r["at_s"] for r in decided if r["would_scale"] > 0]
    assert outs, (started, shown)  # and it would scale out within the range (to +120 s)


def test_real_node_a_learning_policy_leaves_its_prior_for_the_stores_latencies(
        run: Run, figure: FigureBook) -> None:
    """Issue 18's mechanism on real Cassandra pods: a policy with no capacity model learns
    from the store's windows (the per-node queries of the real pods) and keeps the model
    in its ConfigMap, moved from its prior by what it observed; scale-in is allowed only
    once it is confident. How well that model explains the observations, against the
    prior, is printed (a figure, not a target here)."""
    import math

    from elastore.models.bundle import ModelSet
    from elastore.models.capacity import CLIP_X_SLO
    from elastore.models.online import scaled

    run.needs("learner")
    doc = run.cp.get_json(f"/api/v1/namespaces/{NS}/configmaps/{LEARN}-capacity-model")
    learned = ModelSet.loads(doc["data"]["model.json"], "the learned model").capacity
    online = learned.training["online"]
    summary, bins = online["summary"], online["learner"]["bins"]
    # it learned from the store's windows; how many it got depends on clean scrapes (a
    # figure): the mechanism is that it has some and has moved from its prior
    assert int(summary["samples"]) >= 1 and bins, summary
    figure("learner_samples", int(summary["samples"]), ">=", 10, "observations learned",
           source="was asserted >= 10")
    figure("learner_bins", len(bins), ">=", 5, "bins of the learner",
           source="was asserted >= 5")
    prior = scaled(ModelSet.load(MODEL).for_slo(run.slo_ms, 95).capacity, 0.5)
    clip = math.log(CLIP_X_SLO * run.slo_ms)  # the learner's own clip

    def rms(model: Any) -> float:
        err = wsum = 0.0
        for b in bins:  # key (4), then load, read ratio, MiB/s, index, mean ln ms, weight
            load, ratio, mig, inter, ln_ms, n = (float(x) for x in b[4:10])
            pred = min(math.log(float(model.latency_ms(load, ratio, mig, inter))), clip)
            w = min(n, 4.0)
            err += w * (min(ln_ms, clip) - pred) ** 2
            wsum += w
        return math.sqrt(err / wsum)

    was, now = rms(prior), rms(learned)
    gates = [s["model"] for _, s in run.learn_samples if isinstance(s.get("model"), dict)
             and "scaleInAllowed" in s["model"]] + [summary]
    print(f"learning policy: {summary['samples']} observations in {len(bins)} bins; border "
          f"{summary['capacityRps']} req/s per server against its prior "
          f"{summary['priorCapacityRps']} (load x{summary['loadScale']}, latency "
          f"x{summary['latencyScale']}); RMS error of ln latency {was:.3f} -> {now:.3f}; "
          f"confidence {summary['confidence']}, scale-in allowed "
          f"{[g.get('scaleInAllowed') for g in gates][:3]}...{summary['scaleInAllowed']}")
    moved = max(abs(math.log(float(summary["loadScale"]))),
                abs(math.log(float(summary["latencyScale"]))))
    assert moved > 0.0, summary  # it left its prior
    figure("learner_moved_log", moved, ">=", math.log(MOVED),
           "largest |ln scale| of the learned model against its prior",
           source=f"was asserted >= ln {MOVED} (issue 18: leaves its prior)")
    if len(gates) > 1:  # it started unconfident
        assert gates[0].get("scaleInAllowed") is False, gates[0]
    for g in gates:
        if g.get("scaleInAllowed"):
            assert float(g["confidence"]) >= 0.8, g


def test_real_node_a_second_scale_out_replaces_the_retained_volume(run: Run) -> None:
    """cass-3's PVC was retained at the scale-in; Cassandra refuses to start a
    decommissioned node on its data (before elastore deleted it, the pod crash-looped:
    "This node was decommissioned and will not rejoin the ring"). A second scale-out (the
    user raises replicas.min to 4) deletes that PVC first, and cass-3 bootstraps on a new
    volume: Ready without a restart, 4 UN, every row still there."""
    run.needs("scale-in")
    assert run.retained_pvc_uid, "the retained PVC was not seen"
    t0 = time.time()
    run.cp.kubectl("apply", "-f", "-", stdin=_policy(run, "Enforce", min_replicas=4))
    wait_until("the second scale-out to finish", lambda: run.replicas() == 4 and
               _ready(run.cp, "statefulset", STS, NS, 4) and not run.status().get("operation"),
               600, every_s=2)
    took = time.time() - t0
    run.cp.kubectl("apply", "-f", "-", stdin=_policy(run, "Recommend"))
    said = [e["message"] for e in events(run.cp, NS, POLICY)
            if e["reason"] == "RetainedVolumeDeleted" and float(_event_time(e)) >= t0 - 1]
    assert len(said) == 1 and f"data-{STS}-3" in said[0], said
    pvc = get(run.cp, "pvc", f"data-{STS}-3", NS)
    assert pvc["metadata"]["uid"] != run.retained_pvc_uid and \
        pvc["status"]["phase"] == "Bound", pvc
    pod = get(run.cp, "pod", f"{STS}-3", NS)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    ring = run.nodetool(f"{STS}-0", "status")
    assert ring.count("UN  ") == 4, ring
    assert run.cql("verify", "ks") == run.written
    print(f"second scale-out on the retained volume's ordinal: {took:.0f} s; {said[0]}")


def test_real_node_helm_uninstall_leaves_nothing(run: Run) -> None:
    run.cp.kubectl("delete", "elasticpolicy", "-n", NS, POLICY, LEARN, "--timeout=60s")
    res = run.helm_cmd("uninstall", RELEASE, "--namespace", RELEASE_NS, "--wait",
                       "--timeout", "120s")
    assert res.returncode == 0, res.stderr
    wait_until("the release's pods to be gone", lambda: not run.cp.get_json(
        f"/api/v1/namespaces/{RELEASE_NS}/pods")["items"], 120, every_s=1)
    # no tc state on any store pod's veth, no ifb device of the agent
    for ip, veth in run.node.pod_veths().items():
        q = subprocess.run(["ip", "-n", run.node.ns, "-j", "qdisc", "show", "dev", veth],
                           capture_output=True, text=True, check=False).stdout
        assert not [x for x in json.loads(q or "[]") if x.get("kind") in ("htb", "ingress",
                                                                          "clsact")], (ip, q)
    links = subprocess.run(["ip", "-n", run.node.ns, "-j", "link", "show"],
                           capture_output=True, text=True, check=False).stdout
    assert not [x["ifname"] for x in json.loads(links) if x["ifname"].startswith("ifb")], links
    # no object of the release left, no finalizer left by the operator
    left = run.cp.kubectl("get", "all,serviceaccounts,roles,rolebindings,clusterroles,"
                          "clusterrolebindings,poddisruptionbudgets,kopfpeerings", "-A",
                          "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name",
                          check=False).stdout.split()
    assert not left, left
    sts = get(run.cp, "statefulset", STS, NS)
    assert not [f for f in sts["metadata"].get("finalizers") or [] if "elastore" in f], sts
    assert not run.cp.kubectl("get", "elasticpolicies", "-A", "-o", "name").stdout.strip()


def _event_time(e: dict[str, Any]) -> float:
    import datetime as dt

    stamp = e.get("eventTime") or e.get("lastTimestamp") or e.get("firstTimestamp") or ""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp \
        else 0.0


_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


def _tc_classes(node: RealNode, dev: str) -> dict[str, dict[str, int]]:
    """HTB class id -> {rate (bit/s), bytes sent} on ``dev`` in the node's namespace, from
    ``tc -s class show`` (this iproute2 prints classes as text even with ``-j``)."""
    import re

    res = subprocess.run(["tc", "-n", node.ns, "-s", "class", "show", "dev", dev],
                         capture_output=True, text=True, check=False)
    out: dict[str, dict[str, int]] = {}
    for block in re.split(r"\n(?=class )", res.stdout):
        m = re.match(r"class htb (\S+) .*?\brate (\d+(?:\.\d+)?)([KMGT]?bit)", block)
        if m is None:
            continue
        sent = re.search(r"Sent (\d+) bytes", block)
        out[m.group(1)] = {"rate": round(float(m.group(2)) * _UNITS[m.group(3).lower()]),
                           "bytes": int(sent.group(1)) if sent else 0}
    return out


def _htb_rates(node: RealNode, dev: str) -> dict[str, int]:
    """HTB class id -> rate (bit/s) on ``dev``."""
    return {h: c["rate"] for h, c in _tc_classes(node, dev).items()}


def _class_bytes(node: RealNode, dev: str) -> dict[str, int]:
    return {h: c["bytes"] for h, c in _tc_classes(node, dev).items()}


def _measured_class_rates(node: RealNode, ips: dict[str, str], window_s: float
                          ) -> dict[str, dict[str, float]]:
    """Each pod's HTB classes' measured rates (Mbit/s) over ``window_s``, from the kernel's
    byte counters on its real veth."""
    veths = node.pod_veths()
    before = {p: _class_bytes(node, veths[ip]) for p, ip in ips.items() if ip in veths}
    time.sleep(window_s)
    out = {}
    for p, ip in ips.items():
        if ip not in veths:
            continue
        now = _class_bytes(node, veths[ip])
        out[p] = {h: round((now[h] - before[p].get(h, 0)) * 8 / window_s / 1e6, 3)
                  for h in now}
    return out


assert CRDS.is_dir()
