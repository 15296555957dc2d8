"""ElasticPolicies on a cass-operator CassandraDatacenter, on a real API server (issue 19).

What is real: the kube-apiserver (with its controller-manager and kwok, which run the
racks' StatefulSets' pods), cass-operator's own CassandraDatacenter CRD (v1.22.4, from the
Go module proxy: its schema validates every object and patch here), the operator process
with exactly the chart's namespaced RBAC, Prometheus, and the policies.

What is not: cass-operator itself. It needs each pod's Management API (HTTP on the pod's
IP) to start, decommission and watch its nodes, and this machine has no container runtime
and no Management API agent on Maven Central; its pod IPs are kwok's, which the tests must
never connect to. So this is the *contract* test the issue allows: a stand-in
(:class:`CassOperator`) plays cass-operator's documented behaviour on the real CRD, as its
source does it (k8ssandra/cass-operator v1.22.4):

* the racks' StatefulSets ``<cluster>-<dc>-<rack>-sts``, controlled by the datacenter
  (pkg/reconciliation/construct_statefulset.go), sized by ``SplitRacks`` (apis/.../
  cassandradatacenter_types.go);
* a larger ``spec.size``: ``ScalingUp`` True and progress ``Updating``, every rack scaled
  up at once (``CheckRackScale``), pods started (kwok makes them ready);
* a smaller one: ``ScalingDown`` True, one node at a time from the rack with the most
  nodes, its last pod labelled ``cassandra.datastax.com/node-state: Decommissioning``, then
  removed from its StatefulSet (``DecommissionNodes``, ``CheckDecommissioningNodes``);
* at the end of a reconcile: the conditions False, progress ``Ready``,
  ``status.observedGeneration`` = generation (``setDatacenterStatus``).

Metrics: the Management API's series (``org_apache_cassandra_metrics_client_request_
latency_count{request_type}``, buckets, ``..._storage_load``, ``..._streaming_total_
outgoing_bytes``: the ``management-api`` preset a datacenter policy defaults to), one set per
pod, following the pods. nodetool (the stream throttle) runs in each pod through kwok's
exec: testbed.nodetool_standin.
"""

from __future__ import annotations

import http.server
import json
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
    NODETOOL_STANDIN,
    OperatorProcess,
    Prometheus,
    events,
    get,
    install_namespaced,
    named_standin_exec_config,
    namespaced_args,
    policy,
    start_control_plane,
    wait_until,
)
from test_exporter_presets import buckets, lines
from testbed.k8s import ControlPlane, cass_operator_crd, free_port

pytestmark = [pytest.mark.k8s]

REC, ENF = "dc-recommend", "dc-enforce"
CLUSTER, DC = "c1", "dc1"
RACKS = ("r1", "r2", "r3")
RELEASE = "elastore-dc"
BASE, PEAK = 300.0, 700.0  # requests/s: 3 servers of the lab model carry the first only
#: the datacenter's data (replicas included): a node's share moves in seconds at 16 MiB/s,
#: so the window planner (30 s) plans a scale-in at all
DATA_BYTES = 300 * 2**20
GROUP, VERSION, PLURAL = "cassandra.datastax.com", "v1beta1", "cassandradatacenters"


def pod_names(per_rack: int) -> list[str]:
    return [f"{CLUSTER}-{DC}-{r}-sts-{k}" for r in RACKS for k in range(per_rack)]


def split_racks(size: int, racks: int) -> list[int]:
    """cass-operator's SplitRacks."""
    per, extra = divmod(size, racks)
    return [per + (1 if i < extra else 0) for i in range(racks)]


def datacenter(ns: str, size: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CassandraDatacenter",
            "metadata": {"name": DC, "namespace": ns,
                         "labels": {"elastore.io/managed": "true"}},
            "spec": {"clusterName": CLUSTER, "serverType": "cassandra",
                     "serverVersion": "4.1.5", "size": size,
                     "racks": [{"name": r} for r in RACKS],
                     "storageConfig": {"cassandraDataVolumeClaimSpec": {
                         "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}}}


@dataclass
class CassOperator:
    """cass-operator's documented behaviour for one datacenter (see the module's
    docstring), on the real CRD. ``hold``: report a rolling restart (progress Updating,
    ``RollingRestart`` True) and change nothing while set."""

    api: Any
    ns: str
    standin_dir: Path
    hold: threading.Event = field(default_factory=threading.Event)
    #: (epoch, what) of every transition it made
    log: list[tuple[float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self._thread = threading.Thread(target=self._run, daemon=True)

    # -- the CRD's objects ----------------------------------------------------------------
    def dc(self) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL,
                                                              DC))

    def status(self, progress: str, **conds: bool) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        dc = self.dc()
        have = {c["type"]: c for c in (dc.get("status") or {}).get("conditions") or []}
        for ctype, on in conds.items():
            have[ctype] = {"type": ctype, "status": "True" if on else "False",
                           "reason": "", "message": "", "lastTransitionTime": now}
        body: dict[str, Any] = {"status": {"cassandraOperatorProgress": progress,
                                           "conditions": list(have.values())}}
        if progress == "Ready" and not any(on for c, on in conds.items() if c != "Ready"):
            # the end of a whole reconcile (setDatacenterStatus)
            body["status"]["observedGeneration"] = dc["metadata"]["generation"]
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.ns, PLURAL,
                                                          DC, body)
        self.log.append((time.time(), f"{progress} {conds}"))

    def sts_name(self, rack: str) -> str:
        return f"{CLUSTER}-{DC}-{rack}-sts"

    def rack_sizes(self) -> list[int]:
        return [int(self.apps.read_namespaced_stateful_set(self.sts_name(r), self.ns)
                    .spec.replicas) for r in RACKS]

    def scale_rack(self, rack: str, n: int) -> None:
        self.apps.patch_namespaced_stateful_set(self.sts_name(rack), self.ns,
                                                {"spec": {"replicas": n}})

    def ready_pods(self) -> int:
        pods = self.core.list_namespaced_pod(self.ns).items
        return sum(1 for p in pods if p.metadata.deletion_timestamp is None and any(
            c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])))

    def create(self, size: int) -> None:
        """The datacenter, its racks' StatefulSets (owned by it) and a Ready status."""
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL,
                                                    datacenter(self.ns, size))
        uid = self.dc()["metadata"]["uid"]
        for rack, n in zip(RACKS, split_racks(size, len(RACKS)), strict=True):
            labels = {"cassandra.datastax.com/cluster": CLUSTER,
                      "cassandra.datastax.com/datacenter": DC,
                      "cassandra.datastax.com/rack": rack}
            self.apps.create_namespaced_stateful_set(self.ns, {
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": self.sts_name(rack), "labels": labels,
                             "ownerReferences": [{
                                 "apiVersion": f"{GROUP}/{VERSION}",
                                 "kind": "CassandraDatacenter", "name": DC, "uid": uid,
                                 "controller": True, "blockOwnerDeletion": True}]},
                "spec": {"replicas": n, "serviceName": f"{CLUSTER}-{DC}-all-pods-service",
                         "podManagementPolicy": "Parallel",
                         "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels}, "spec": {
                             "containers": [{"name": "cassandra",
                                             "image": "cr.k8ssandra.io/k8ssandra/"
                                                      "cass-management-api:4.1.5"}]}}}})
        wait_until("the datacenter's pods", lambda: self.ready_pods() == size, 60)
        self._nodes(size)
        self.status("Ready", Ready=True, ScalingUp=False, ScalingDown=False)
        self._thread.start()

    def _nodes(self, n: int) -> None:
        """The ring's size, as the stand-in nodetool prints it."""
        self.standin_dir.mkdir(parents=True, exist_ok=True)
        (self.standin_dir / "nodes").write_text(str(n))

    # -- reconcile ------------------------------------------------------------------------
    def _run(self) -> None:
        held = False
        while not self._stop.wait(0.5):
            try:
                if self.hold.is_set() != held:
                    held = self.hold.is_set()
                    self.status("Updating" if held else "Ready", RollingRestart=held)
                if not held:
                    self._reconcile()
            except Exception as exc:  # kept for the test to assert on
                self.errors.append(repr(exc))

    def _reconcile(self) -> None:
        size = int(self.dc()["spec"]["size"])
        have = self.rack_sizes()
        if sum(have) < size:
            self.status("Updating", ScalingUp=True)
            for rack, n in zip(RACKS, split_racks(size, len(RACKS)), strict=True):
                self.scale_rack(rack, n)
            wait_until("the new pods", lambda: self.ready_pods() == size, 60)
            self._nodes(size)
            self.status("Ready", ScalingUp=False)
        elif sum(have) > size:
            self.status("Updating", ScalingDown=True)
            while sum(have := self.rack_sizes()) > size:
                # the rack with the most nodes gives up its last pod, one node at a time
                i = max(range(len(RACKS)), key=lambda j: (have[j], -j))
                pod = f"{self.sts_name(RACKS[i])}-{have[i] - 1}"
                self.core.patch_namespaced_pod(pod, self.ns, {"metadata": {"labels": {
                    "cassandra.datastax.com/node-state": "Decommissioning"}}})
                self.log.append((time.time(), f"decommissioning {pod}"))
                time.sleep(2.0)  # the node streams its data away
                self.scale_rack(RACKS[i], have[i] - 1)
                wait_until(f"{pod} to go", lambda pod=pod: not any(
                    p.metadata.name == pod for p in self.core.list_namespaced_pod(self.ns)
                    .items), 60)
                self._nodes(sum(have) - 1)
            self.status("Ready", ScalingDown=False)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


class MgmtApiMetrics:
    """The Management API's /metrics for every pod of the datacenters in ``namespaces``:
    the cluster's load split over the ready pods, p95 from histogram buckets."""

    def __init__(self, api: Any, namespaces: tuple[str, ...]) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.namespaces = namespaces
        self.rps = {ns: BASE for ns in namespaces}
        self.counts: dict[tuple[str, str], float] = {}
        self.pods: dict[str, list[str]] = {ns: [] for ns in namespaces}
        self.lock = threading.Lock()
        self._last = time.monotonic()
        self._stop = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = outer.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._run, daemon=True).start()

    def _advance(self) -> None:
        """The counters up to now at the load and pods in force since the last update
        (the caller holds the lock). Called at each scrape, as the Management API reads its
        counters then, and before the pods change: a loop of its own, stalled on a busy
        machine and then catching up, put a jump inside a 10-s rate window (a fresh-clone
        run read 449 req/s for 300)."""
        now = time.monotonic()
        for ns, pods in self.pods.items():
            for pod in pods:
                key = (ns, pod)
                self.counts[key] = self.counts.get(key, 0.0) + \
                    self.rps[ns] * (now - self._last) / max(1, len(pods))
        self._last = now

    def set_rps(self, ns: str, rps: float) -> None:
        """The load of ``ns`` from now on (the time before counts at the old one)."""
        with self.lock:
            self._advance()
            self.rps[ns] = rps

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            found = {}
            for ns in self.namespaces:
                try:
                    items = self.core.list_namespaced_pod(ns).items
                except Exception:  # the API server busy: next round
                    continue
                found[ns] = sorted(p.metadata.name for p in items if
                                   p.metadata.deletion_timestamp is None and any(
                                       c.type == "Ready" and c.status == "True"
                                       for c in (p.status.conditions or [])))
            with self.lock:
                self._advance()
                self.pods.update(found)

    def text(self) -> str:
        lat = "org_apache_cassandra_metrics_client_request_latency"
        out = ""
        with self.lock:
            self._advance()
            pods = {ns: list(p) for ns, p in self.pods.items()}
            counts = dict(self.counts)
        for ns, names in pods.items():
            for pod in names:
                total = counts.get((ns, pod), 0.0)
                for rt, share in (("Read", 0.95), ("Write", 0.05)):
                    out += lines(f"{lat}_count", total * share, request_type=rt,
                                 namespace=ns, pod=pod)
                    for le, c in buckets(total * share, 8.239):
                        out += lines(f"{lat}_bucket", c, request_type=rt, le=le,
                                     namespace=ns, pod=pod)
                out += lines("org_apache_cassandra_metrics_storage_load",
                             DATA_BYTES / len(names), namespace=ns, pod=pod)
                out += lines("org_apache_cassandra_metrics_streaming_total_outgoing_bytes",
                             0.0, namespace=ns, pod=pod)
        return out

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Bed:
    cp: ControlPlane
    root: Path
    ops: dict[str, CassOperator]
    metrics: MgmtApiMetrics
    operator: OperatorProcess
    sa: str  # the chart's ServiceAccount

    def status(self, ns: str) -> dict[str, Any]:
        return dict(get(self.cp, "elasticpolicy", "orders", ns).get("status") or {})

    def size(self, ns: str) -> int:
        return int(get(self.cp, "cassandradatacenter", DC, ns)["spec"]["size"])

    def calls(self, ns: str) -> list[str]:
        f = self.root / "standin" / ns / "calls.log"
        return f.read_text().splitlines() if f.exists() else []

    def cond(self, ns: str, ctype: str) -> dict[str, Any]:
        return next((c for c in self.status(ns).get("conditions") or []
                     if c["type"] == ctype), {})


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    from kubernetes import config as kconfig

    root = tmp_path_factory.mktemp("datacenter")
    try:
        crd = cass_operator_crd()
    except Exception as exc:
        pytest.fail(f"cass-operator's CRD could not be fetched from the module proxy: {exc}")
    names = pod_names(2)
    cp = start_control_plane(root / "k8s", exec_config=named_standin_exec_config(
        {REC: names, ENF: names}, root / "standin"))
    ops: dict[str, CassOperator] = {}
    metrics: MgmtApiMetrics | None = None
    prom: Prometheus | None = None
    operator: OperatorProcess | None = None
    try:
        # 780 kB of schema: too large for kubectl apply's last-applied annotation
        cp.kubectl("create", "-f", str(crd))
        wait_until("cass-operator's CRD to be established", lambda: any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (get(cp, "crd", f"{PLURAL}.{GROUP}", "default").get("status") or {})
            .get("conditions") or []), 60)
        api = kconfig.new_client_from_config(config_file=str(cp.kubeconfig))
        for ns in (REC, ENF):
            cp.kubectl("create", "namespace", ns)
            ops[ns] = CassOperator(api, ns, root / "standin" / ns)
            ops[ns].create(3)
        metrics = MgmtApiMetrics(api, (REC, ENF))
        prom = Prometheus(root / "prom", [f"127.0.0.1:{metrics.port}"])
        sa = install_namespaced(cp, RELEASE, (REC, ENF), root / "sa.kubeconfig")
        operator = OperatorProcess(sa, root / "op.log", args=namespaced_args(RELEASE,
                                                                             (REC, ENF)))
        for ns, mode in ((REC, "Recommend"), (ENF, "Enforce")):
            doc = json.loads(policy(
                "orders", ns, DC, mode=mode, nodetool=[sys.executable, str(NODETOOL_STANDIN)],
                controlPeriod="10s", replicas={"min": 3, "max": 9},
                prediction={"method": "persistence", "horizon": "30s", "step": "2s"},
                planner={"mode": "Window"}, migration={"nodeOverheadSeconds": 5,
                                                       "maxMiBps": 16},
                scaleDown={"stabilizationSeconds": 20}, capacityModel={"learn": False},
                # preset: management-api; 1-s scrapes: a 10-s rate window suffices
                metrics={"prometheus": {"url": prom.url, "rateWindow": "10s"}}))
            doc["spec"]["target"]["kind"] = "CassandraDatacenter"
            cp.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
        for ns in (REC, ENF):
            wait_until(f"a first decision in {ns}", lambda ns=ns: (
                get(cp, "elasticpolicy", "orders", ns).get("status") or {}).get(
                    "lastDecision", {}).get("ok"), 150)
        yield Bed(cp, root, ops, metrics, operator,
                  f"system:serviceaccount:{RELEASE}:{RELEASE}")
    except Exception:
        if operator is not None:
            print(operator.tail(6000))
        raise
    finally:
        if operator is not None:
            operator.stop()
        for op in ops.values():
            op.stop()
        if prom is not None:
            prom.close()
        if metrics is not None:
            metrics.close()
        cp.stop()


def test_datacenter_policy_reads_cass_operators_datacenter_with_the_management_api_preset(
        bed: Bed, figure: FigureBook) -> None:
    for ns in (REC, ENF):
        st = bed.status(ns)
        assert st["currentReplicas"] == 3
        assert st["observed"]["nodes"] == 3, st["observed"]
        # the preset's series are read: a load, its size a figure (a 10-s rate of a counter
        # advanced when the stand-in answers, stamped when Prometheus asked)
        rps = st["observed"]["requestsPerSecond"]
        assert rps > 0, st["observed"]
        tag = ns.replace("-", "_")
        figure(f"{tag}_observed_rps_low", rps, ">=", BASE * 0.85, f"{ns}'s observed "
               f"requests/s (set {BASE:g})", source="was approx(BASE, rel=0.15)")
        figure(f"{tag}_observed_rps_high", rps, "<=", BASE * 1.15, f"{ns}'s observed "
               f"requests/s (set {BASE:g})", source="was approx(BASE, rel=0.15)")
        dc = st["datacenter"]
        assert dc["racks"] == list(RACKS) and dc["stepUp"] == 6 and dc["cassOperator"] == \
            "Ready", dc
    assert bed.cond(ENF, "Conflict")["status"] == "False"


def test_datacenter_rbac_is_get_list_watch_patch_and_nothing_more(bed: Bed) -> None:
    def allowed(verb: str, sub: str = "") -> bool:
        attrs = {"verb": verb, "group": GROUP, "resource": PLURAL, "namespace": ENF}
        if sub:
            attrs["subresource"] = sub
        sar = json.loads(bed.cp.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": bed.sa, "groups": ["system:serviceaccounts"],
                     "resourceAttributes": attrs}})).stdout)
        return bool(sar["status"]["allowed"])

    got = {v: allowed(v) for v in ("get", "list", "watch", "patch", "update", "create",
                                   "delete", "deletecollection")}
    assert got == {"get": True, "list": True, "watch": True, "patch": True, "update": False,
                   "create": False, "delete": False, "deletecollection": False}, got
    assert not allowed("patch", "status")  # cass-operator's status is its own


def test_datacenter_recommend_shows_the_rack_step_and_changes_nothing(bed: Bed) -> None:
    generation = bed.ops[REC].dc()["metadata"]["generation"]
    bed.metrics.set_rps(REC, PEAK)
    st = wait_until("the recommend policy to want more", lambda: (
        s if (s := bed.status(REC)).get("desiredReplicas", 0) > 3 else None), 120)
    up = wait_until("the rack step in the condition", lambda: (
        c if "3 -> 6" in (c := bed.cond(REC, "ScalingUp")).get("message", "") else None), 30)
    assert up["reason"] == "Recommend" and up["status"] == "False", up
    time.sleep(15)
    assert bed.size(REC) == 3
    assert bed.ops[REC].dc()["metadata"]["generation"] == generation  # no patch at all
    assert not [t for t, what in bed.ops[REC].log if "'ScalingUp': True" in what]
    assert st["desiredReplicas"] <= 6
    bed.metrics.set_rps(REC, BASE)


def test_datacenter_enforce_scales_out_in_a_rack_step_and_waits_while_cass_operator_works(
        bed: Bed) -> None:
    op = bed.ops[ENF]
    op.hold.set()  # a rolling restart in progress
    wait_until("cass-operator to report it", lambda: op.dc().get("status", {}).get(
        "cassandraOperatorProgress") == "Updating", 60)
    bed.metrics.set_rps(ENF, PEAK)
    busy = wait_until("the policy to hold for cass-operator", lambda: (
        c if (c := bed.cond(ENF, "ScalingUp")).get("reason") == "DatacenterBusy" else None),
        120)
    assert "RollingRestart" in busy["message"], busy
    time.sleep(25)  # two more control periods: still nothing
    assert bed.size(ENF) == 3
    held_until = time.time()
    op.hold.clear()
    at_six(bed)
    ups = [t for t, what in op.log if "ScalingUp': True" in what]
    assert ups and min(ups) > held_until, (ups, held_until)
    assert split_racks(6, 3) == op.rack_sizes()
    reasons = [e["reason"] for e in events(bed.cp, ENF, "orders")]
    assert "ScaleOutStarted" in reasons and "ScaleOutDone" in reasons, reasons
    # the throttle reached every pod, the three new ones too
    throttled = {ln.split()[1] for ln in bed.calls(ENF) if "setstreamthroughput" in ln}
    assert throttled == {str(k) for k in range(6)}, bed.calls(ENF)[-20:]
    assert not op.errors, op.errors


def at_six(bed: Bed) -> None:
    """The enforce datacenter at 6 (one rack step up), cass-operator done, the operation
    over: the scale-out test ends here, and the scale-in test starts here (selected alone,
    it brings the datacenter there first, at the peak load)."""
    if bed.size(ENF) != 6:
        bed.ops[ENF].hold.clear()
        bed.metrics.set_rps(ENF, PEAK)
    wait_until("the datacenter at 6, cass-operator done, the operation over", lambda: (
        bed.size(ENF) == 6 and not bed.status(ENF).get("operation") and
        bed.status(ENF).get("currentReplicas") == 6), 180)


def test_datacenter_enforce_scales_in_a_rack_step_through_cass_operators_decommissions(
        bed: Bed) -> None:
    op = bed.ops[ENF]
    at_six(bed)
    decommissioned = len([what for _, what in op.log if what.startswith("decommissioning")])
    bed.metrics.set_rps(ENF, BASE)
    wait_until("the datacenter back at 3 and the operation over", lambda: (
        bed.size(ENF) == 3 and not bed.status(ENF).get("operation") and
        bed.status(ENF).get("currentReplicas") == 3), 240)
    leaving = [what for _, what in op.log if what.startswith("decommissioning")]
    assert len(leaving) - decommissioned == 3, op.log  # one node at a time, by cass-operator
    assert op.rack_sizes() == [1, 1, 1]
    reasons = [e["reason"] for e in events(bed.cp, ENF, "orders")]
    assert "ScaleInStarted" in reasons and "ScaleInDone" in reasons, reasons
    # elastore decommissioned nothing itself: cass-operator did
    assert not [ln for ln in bed.calls(ENF) if " decommission" in ln]
    # the ring was checked for three nodes leaving, through the datacenter's first pod
    assert [ln for ln in bed.calls(ENF) if ln.split()[1:3] == ["0", "describecluster"]]
    assert not op.errors, op.errors
