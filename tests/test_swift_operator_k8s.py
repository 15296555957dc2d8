"""End to end on Swift (issue 20): the operator in Enforce scales a StatefulSet whose pods
are real Swift storage nodes, 3 -> 4 -> 3, on Swift's own metrics and capacity model, by
changing the rings in the ConfigMap the pods read them from; no object is lost.

* The control plane is the real one (testbed.k8s); its pods are kwok's. The Swift lab
  (Debian's Swift) runs in a network namespace of the test's own; node n listens at the IP
  kwok gave pod ``swift-(n-1)`` (an address of that namespace only: nothing here connects
  to it from outside). testbed.swiftbed's agent plays the kubelet: it starts a node when
  kwok runs its pod, stops it when the pod is gone, and refreshes every node's (and the
  proxy's) ring files from the ConfigMap seconds after it changes, node by node.
* The operator reads the lab's Prometheus (statsd_exporter per node, preset
  ``swift-statsd``) through a loopback forwarder, and the pods' ring files and devices
  through ``pods/exec`` (kwok maps it to testbed.swiftexec on the node's files): it never
  connects to a pod IP. It runs with the chart's namespaced RBAC.
* The capacity model is the Swift profile measured on this machine
  (experiments/profiles/swift-model.json: 31 req/s per server at p95 <= 100 ms) at half its
  capacity (a conservative model of the user's), so that 3 servers carry 42 req/s: the
  steady 60 req/s of the first phase needs a fourth, the 12 req/s of the second does not.
* The data: the workload's 300 objects and 40 bulk objects of 256 KiB, 2 replicas.
  Afterwards every one is read back and its MD5 checked, the container listed, and the
  devices hold exactly the rings' placement (nothing out of place, 2 replicas of each).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from figures import FigureBook
from k8s_support import (
    CRDS,
    SWIFT_EXEC,
    OperatorProcess,
    events,
    get,
    install_namespaced,
    namespaced_args,
    policy,
    start_control_plane,
    swift_exec_config,
    wait_until,
)
from testbed.forward import Forwarder
from testbed.k8s import ControlPlane
from testbed.swiftbed import SwiftPodAgent

from elastore.actuators.swiftring import KINDS, RingFiles, misplaced, scan_device
from elastore.lab import netns
from elastore.lab.sweep import constant_workload
from elastore.lab.swift import lab as swift
from elastore.models.bundle import ModelSet
from elastore.models.online import scaled

pytestmark = [pytest.mark.lab, pytest.mark.k8s, pytest.mark.slow]
LAB_NS = f"elastore-test-swiftop-{os.getpid()}"
NS, STS, POLICY, RINGS = "store", "swift", "swift-scaler", "swift-rings"
RELEASE = "elastore-swift"
DEVICE = "d1"
REPLICAS = 2
HIGH_RPS, LOW_RPS = 60.0, 12.0
MODEL_SCALE = 0.5
N_KEYS, BULK, BULK_KIB = 300, 40, 256
REPO = Path(__file__).resolve().parents[1]

assert CRDS.is_dir()


def _statefulset() -> str:
    """Swift's storage pods: container ``swift``, the rings from the ConfigMap at
    /etc/swift (what the operator's md5sum reads), the devices on the PVC at /srv/node."""
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": STS, "namespace": NS, "labels": {"elastore.io/managed": "true"}},
        "spec": {"replicas": 3, "serviceName": STS, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": STS}},
                 "template": {"metadata": {"labels": {"app": STS}}, "spec": {
                     "containers": [{"name": "swift", "image": "swift:2.30",
                                     "volumeMounts": [
                                         {"name": "rings", "mountPath": "/etc/swift"},
                                         {"name": "data", "mountPath": "/srv/node"}]}],
                     "volumes": [{"name": "rings", "configMap": {"name": RINGS}}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "storageClassName": "elastore-test",
                     "resources": {"requests": {"storage": "1Gi"}}}}]}})


def _rings_configmap(state: swift.SwiftLabState) -> str:
    """The rings as their owner hands them over: the builders (gzipped) and ring files of
    the lab's ring master, labelled for the operator."""
    data = {}
    for kind in KINDS:
        data[f"{kind}.builder.gz"] = gzip.compress(
            (state.rings / f"{kind}.builder").read_bytes(), mtime=0)
        data[f"{kind}.ring.gz"] = (state.rings / f"{kind}.ring.gz").read_bytes()
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": RINGS, "namespace": NS,
                                    "labels": {"elastore.io/swift-rings": "true"}},
                       "binaryData": {k: base64.b64encode(v).decode()
                                      for k, v in data.items()}})


@dataclass
class Run:
    cp: ControlPlane
    root: Path
    lab_dir: Path
    agent: SwiftPodAgent
    operators: list[OperatorProcess]
    wl_high: Path
    wl_low: Path
    load: subprocess.Popen[bytes] | None = None
    timeline: list[str] = field(default_factory=list)

    def cli(self, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "elastore", *args],
                              env=dict(os.environ, ELASTORE_LAB_DIR=str(self.lab_dir)),
                              capture_output=True, text=True, timeout=timeout_s, check=False)

    def status(self) -> dict[str, Any]:
        return dict(get(self.cp, "elasticpolicy", POLICY, NS).get("status") or {})

    def replicas(self) -> int:
        return int(get(self.cp, "statefulset", STS, NS)["spec"]["replicas"])

    def start_load(self, wl: Path, name: str, preload: bool) -> None:
        self.stop_load()
        args = [sys.executable, "-m", "elastore", "load", "run", str(wl), "--store", "swift",
                "--out", str(self.root / f"{name}.csv")]
        if not preload:
            args.append("--no-preload")
        self.load = subprocess.Popen(args, env=dict(os.environ,
                                                    ELASTORE_LAB_DIR=str(self.lab_dir)),
                                     stdout=(self.root / f"{name}.log").open("ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def stop_load(self) -> None:
        if self.load is not None and self.load.poll() is None:
            os.killpg(self.load.pid, signal.SIGTERM)
            self.load.wait(timeout=60)
        self.load = None

    def diagnostics(self) -> str:
        st = self.status()
        keep = {k: st.get(k) for k in ("conditions", "operation", "observed", "forecast",
                                       "desiredReplicas", "lastDecision", "swift")}
        return (f"status: {json.dumps(keep, indent=1)[:5000]}\nagent: {self.agent.errors} "
                f"{self.agent.log[-15:]}\noperator log: "
                f"{self.operators[-1].tail(3000) if self.operators else ''}")


def _workload(path: Path, rate: float, seconds: float) -> Path:
    keys = ([f"obj{i}" for i in range(N_KEYS)], np.ones(N_KEYS) / N_KEYS)
    constant_workload(rate, 0.95, seconds, 5.0, keys).save(path)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("swiftop")
    lab_dir = root / "lab"
    cp = start_control_plane(root / "k8s", exec_config=swift_exec_config(NS, STS, 5, lab_dir))
    fwd: Forwarder | None = None
    agent: SwiftPodAgent | None = None
    r: Run | None = None
    operators: list[OperatorProcess] = []
    try:
        cp.kubectl("create", "namespace", NS)
        from k8s_support import persistent_volumes

        cp.kubectl("apply", "-f", "-", stdin=persistent_volumes(5, "1Gi", root / "pv"))
        cp.kubectl("apply", "-f", "-", stdin=_statefulset())
        wait_until("3 pods with IPs", lambda: all(
            (get(cp, "pod", f"{STS}-{k}", NS).get("status") or {}).get("podIP")
            for k in range(3)), 90)
        ips = [get(cp, "pod", f"{STS}-{k}", NS)["status"]["podIP"] for k in range(3)]
        try:
            state = swift.up(3, REPLICAS, d=lab_dir, namespace=LAB_NS, pods=f"{NS}/{STS}",
                             ips=ips, device=DEVICE)
        except Exception as exc:
            pytest.fail(f"the Swift lab did not come up: {exc}")
        cp.kubectl("apply", "-f", "-", stdin=_rings_configmap(state))
        agent = SwiftPodAgent(cp, NS, STS, RINGS, lab_dir, DEVICE)
        # the data: the workload's objects (preloaded by the first load run) and bulk ones
        res = subprocess.run([sys.executable, "-m", "elastore", "load", "bulk", "--objects",
                              str(BULK), "--kib", str(BULK_KIB)],
                             env=dict(os.environ, ELASTORE_LAB_DIR=str(lab_dir)),
                             capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stderr[-2000:]
        model = ModelSet.load(REPO / "experiments" / "profiles" / "swift-model.json")
        mpath = root / "model.json"
        mpath.write_text(ModelSet(capacity=scaled(model.capacity, MODEL_SCALE,
                                                  note="the Swift profile at half capacity"),
                                  bandwidth=model.bandwidth, source=model.source).dumps())
        cp.kubectl("create", "configmap", "swift-model", "-n", NS,
                   f"--from-file=model.json={mpath}")
        fwd = Forwarder(state.netns, swift.PROMETHEUS_ADDR)
        sa = install_namespaced(cp, RELEASE, (NS,), root / "sa.kubeconfig")
        operators.append(OperatorProcess(sa, root / "op.log", lifetime_s=10,
                                         args=namespaced_args(RELEASE, (NS,))))
        wl_high = _workload(root / "high.json", HIGH_RPS, 900)
        wl_low = _workload(root / "low.json", LOW_RPS, 900)
        r = Run(cp, root, lab_dir, agent, operators, wl_high, wl_low)
        r.start_load(wl_high, "high", preload=True)
        doc = json.loads(policy(
            POLICY, NS, STS, mode="Enforce", controlPeriod="10s",
            replicas={"min": 3, "max": 4}, slo={"latencyMs": 100},
            # the paper's window planner plans a scale-in only if the step finishes within
            # the window: a node's 60 s (the ring change's replicator passes) plus its data
            prediction={"method": "persistence", "horizon": "100s", "step": "10s",
                        "headroom": 0.1},
            planner={"mode": "Window"},
            migration={"minMiBps": 1, "maxMiBps": 8, "nodeOverheadSeconds": 60},
            scaleDown={"stabilizationSeconds": 30},
            capacityModel={"configMapRef": {"name": "swift-model"}, "learn": False},
            metrics={"prometheus": {"url": fwd.url, "rateWindow": "20s"}}))
        doc["spec"]["target"].update({
            "store": "swift", "replicationFactor": REPLICAS, "swift": {
                "ringConfigMap": RINGS, "device": DEVICE,
                "execPrefix": [sys.executable, str(SWIFT_EXEC)]}})
        cp.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
        yield r
    finally:
        if r is not None:
            r.stop_load()
        for op in operators:
            op.stop()
        if agent is not None:
            agent.close()
        if fwd is not None:
            fwd.close()
        cp.stop()
        st = swift.SwiftLabState.load(lab_dir)
        swift.down(lab_dir)
        assert not netns.exists(LAB_NS)
        if st is not None:  # every process the lab started is gone
            left = subprocess.run(["pgrep", "-f", st.root], capture_output=True, text=True,
                                  check=False).stdout.split()
            assert not left, f"processes of the lab still running: {left}"


def _operation_done(run: Run, kind: str, to: int) -> bool:
    st = run.status()
    op = st.get("operation")
    if op:
        line = f"{op.get('kind')} {op.get('phase')}: {str(op.get('message'))[:160]}"
        if not run.timeline or run.timeline[-1].split(" ", 1)[1] != line:
            run.timeline.append(f"{time.time():.0f} {line}")
    assert not run.agent.errors, run.diagnostics()
    stuck = [c for c in st.get("conditions") or [] if c.get("reason") == "Stuck"]
    assert not stuck, run.diagnostics()
    return not op and int(st.get("currentReplicas") or 0) == to and run.replicas() == to


def _on_disk(run: Run) -> dict[str, Any]:
    """The devices against the ConfigMap's rings: what is out of place, and the object
    replicas (.data files) on each node."""
    body = run.cp.get_json(f"/api/v1/namespaces/{NS}/configmaps/{RINGS}")
    rings = RingFiles({k: base64.b64decode(v) for k, v in body["binaryData"].items()})
    state = swift.SwiftLabState.load(run.lab_dir)
    assert state is not None
    out: dict[str, Any] = {}
    for kind in KINDS:
        on_disk = {f"{nd.ip}/{nd.device}": scan_device(nd.devices / nd.device, kind)
                   for nd in state.nodes}
        out[kind] = misplaced(rings.assignment(kind), on_disk)
    out["data_files"] = {nd.n: sum(1 for _ in (nd.devices / nd.device / "objects")
                                   .rglob("*.data")) for nd in state.nodes}
    out["devices"] = sorted(rings.table("object"))
    return out


def _scaled_out(run: Run) -> None:
    """The fixture's steady HIGH_RPS makes the operator scale 3 -> 4: wait for it (at once
    when it is done already)."""
    t0 = time.time()
    wait_until("the scale-out 3 -> 4 to finish", lambda: _operation_done(run, "ScaleOut", 4),
               900, every_s=5)
    print(f"scale-out done in {time.time() - t0:.0f} s after the policy (or the last test):"
          "\n  " + "\n  ".join(run.timeline))


def test_scale_out_adds_the_new_pods_device_and_replicates_to_it(run: Run, figure: FigureBook
                                                                 ) -> None:
    _scaled_out(run)
    st = run.status()
    reasons = [e.get("reason") for e in events(run.cp, NS, POLICY)]
    assert "RingChanged" in reasons and "ScaleOutStarted" in reasons, reasons
    # the decision came from Swift's own metrics: the object servers' GETs and PUTs (how
    # much of the offered rate the store's series show is a measurement: a busy machine's
    # load generator and StatsD fall behind)
    observed = float((st.get("observed") or {}).get("requestsPerSecond") or 0)
    assert observed > 0, run.diagnostics()
    figure("observed_rps_at_scale_out", observed, ">=", 0.6 * HIGH_RPS,
           f"the request rate the operator read from Swift's StatsD series while the load "
           f"offered {HIGH_RPS:g} req/s, req/s",
           source="was assert observed.requestsPerSecond > 0.6 * HIGH_RPS")
    disk = _on_disk(run)
    print(f"on disk: {disk}")
    ip3 = get(run.cp, "pod", f"{STS}-3", NS)["status"]["podIP"]
    assert f"{ip3}/{DEVICE}" in disk["devices"], disk
    assert all(disk[k].done for k in KINDS), disk
    assert disk["data_files"].get(4, 0) > 0, disk  # the new node holds its share


def test_scale_in_drains_the_pod_before_it_goes_and_nothing_is_lost(run: Run) -> None:
    _scaled_out(run)  # selected alone: the scale-out first, as the module's first test waits
    run.timeline.clear()
    run.start_load(run.wl_low, "low", preload=False)
    t0 = time.time()
    wait_until("the scale-in 4 -> 3 to finish", lambda: _operation_done(run, "ScaleIn", 3),
               900, every_s=5)
    print(f"scale-in done in {time.time() - t0:.0f} s:\n  " + "\n  ".join(run.timeline))
    run.stop_load()
    # drained (weight 0, replicated away) and out of the rings before the pod went: the
    # phases' Events in their order (the status, sampled every 5 s, can miss a short one)
    evs = sorted(events(run.cp, NS, POLICY),
                 key=lambda e: int(e["metadata"]["resourceVersion"]))  # creation order
    reasons = [str(e.get("reason")) for e in evs]
    i_in = reasons.index("ScaleInStarted")
    steps = [r for r in reasons[i_in:] if r.startswith("ScaleIn") or r == "RingChanged"]
    print(f"scale-in events: {steps}")
    assert steps[:6] == ["ScaleInStarted", "RingChanged", "ScaleInRemoving", "RingChanged",
                         "ScaleInScaling", "ScaleInCleanup"], steps
    wait_until("node 4 to be stopped", lambda: 4 not in {
        nd.n for nd in (swift.SwiftLabState.load(run.lab_dir) or swift.SwiftLabState(
            "", "", 0)).nodes}, 60)
    disk = _on_disk(run)
    print(f"on disk: {disk}")
    assert all(disk[k].done for k in KINDS), disk
    assert len(disk["devices"]) == 3, disk
    objects = N_KEYS + BULK
    assert sum(disk["data_files"].values()) >= REPLICAS * objects, disk
    res = run.cli("load", "verify", str(run.wl_low), "--bulk", str(BULK), "--bulk-kib",
                  str(BULK_KIB))
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
    v = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"verify: {v}")
    assert v["ok"] == v["keys"] == v["listed"] == N_KEYS, v
    assert v["bulk"]["ok"] == v["bulk"]["listed"] == BULK and not v["bulk"]["bad"], v
    with contextlib.suppress(Exception):
        print(f"swiftexec calls: {len((run.lab_dir / 'swiftexec.log').read_text().splitlines())}")
