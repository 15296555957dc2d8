"""Scale for the bytes, end to end on the real API server (issue 37): the operator grows
every PVC of its target instead of adding a node, where the bytes bind and a month of
bigger volumes costs less than a month of the node (``spec.storage.expandVolumes``).

The operator runs as ``elastore operator run`` (its own process) against a real control
plane; kwok runs the pods (an exec into one runs the scripted nodetool stand-in); each
pod's PVC, made by the StatefulSet controller from its volumeClaimTemplate, is bound by
the PersistentVolume controller to a static hostPath PV made for it. A real Prometheus
scrapes a synthetic kubelet (``KubeletVolumes``: per-PVC volume stats, the fullest node
above the 80 % budget, so the bytes bind at once, with no growth history) and the
Cassandra exporter (a load the three nodes carry easily). No resizer runs here: a grown
claim's request is what the API server stored; the test then plays the resizer, the
kubelet reporting the bigger volume.

Two namespaces, two StorageClasses:

* ``grow``, Enforce, a class with ``allowVolumeExpansion: true``: every PVC's request grows
  to ``status.storage.expandToBytes``, nothing else changes (replicas, template), an Event
  says so; once the volumes are that size, the bytes no longer bind and nothing grows again;
* ``fixed``, Recommend, a class without it: nothing grows, the status names the class, and,
  the bytes still binding, the plan adds a node instead.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from k8s_support import (
    NODETOOL_STANDIN,
    CassandraMetrics,
    KubeletVolumes,
    OperatorProcess,
    Prometheus,
    events,
    get,
    policy,
    standin_exec_config,
    start_control_plane,
    statefulset,
    wait_until,
)
from testbed.k8s import ControlPlane

from elastore.actuators.k8s import parse_quantity
from elastore.errors import MetricsError
from elastore.models import ModelSet
from elastore.operator.metrics import PrometheusSource
from elastore.operator.spec import parse
from elastore.resources import builtin_model
from elastore.units import GIB

pytestmark = [pytest.mark.k8s]

STS, POLICY, TEMPLATE = "cass", "orders", "data"
GROW_NS, FIXED_NS = "grow", "fixed"
#: each namespace's StorageClass and whether it allows expansion
CLASSES = {GROW_NS: ("elastore-grow", True), FIXED_NS: ("elastore-fixed", False)}
VOLUME = "2Gi"
VOLUME_BYTES = 2 * GIB
#: each node's bytes on its 2 GiB volume: the fullest at 87.5 %, above the 80 % budget
#: (Unified compaction, targetUtilization 0.8); 5 GiB in all, 4 nodes' worth
USED = (1.75 * GIB, 1.65 * GIB, 1.6 * GIB)
RPS = 30.0  # client requests/s: the three nodes (the policy's minimum) carry it easily
PROM = {"rateWindow": "10s"}


@dataclass
class Bed:
    cp: ControlPlane
    kubelet: KubeletVolumes
    op: OperatorProcess
    #: each namespace's StatefulSet, and its PVCs' resourceVersions, before the policies
    sts: dict[str, dict[str, Any]]
    claims: dict[str, dict[str, str]]


def _storage_class(name: str, expandable: bool) -> str:
    doc: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                           "metadata": {"name": name},
                           "provisioner": "kubernetes.io/no-provisioner",
                           "volumeBindingMode": "Immediate", "reclaimPolicy": "Retain"}
    if expandable:
        doc["allowVolumeExpansion"] = True
    return json.dumps(doc)


def _volumes(ns: str, cls: str, root: Path) -> str:
    """A hostPath PV for each pod's claim (``data-cass-k``), reserved for it (claimRef)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{ns}-{_pvc(k)}", "labels": {"elastore-test": "growth"}},
        "spec": {"capacity": {"storage": VOLUME}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": cls, "persistentVolumeReclaimPolicy": "Retain",
                 "claimRef": {"namespace": ns, "name": _pvc(k)},
                 "hostPath": {"path": str(root / ns / _pvc(k))}}} for k in range(3)]})


def _pvc(k: int) -> str:
    return f"{TEMPLATE}-{STS}-{k}"


def _claims(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    """The target's PVCs as the API server has them, by name."""
    res = cp.kubectl("get", "pvc", "-n", ns, "-o", "json")
    return {p["metadata"]["name"]: p for p in json.loads(res.stdout)["items"]}


def _requests(cp: ControlPlane, ns: str) -> dict[str, float]:
    """Each PVC's storage request in bytes, read from the API server."""
    return {n: parse_quantity(p["spec"]["resources"]["requests"]["storage"])
            for n, p in _claims(cp, ns).items()}


def _status(cp: ControlPlane, ns: str) -> dict[str, Any]:
    return dict(get(cp, "elasticpolicy", POLICY, ns).get("status") or {})


def _policy(ns: str, url: str, mode: str) -> str:
    return policy(POLICY, ns, STS, mode=mode, controlPeriod="10s",
                  replicas={"min": 3, "max": 6},
                  prediction={"horizon": "10s", "step": "2s"},
                  planner={"lookahead": "10m"},
                  storage={"expandVolumes": True},
                  cost={"gibMonth": 0.01, "nodeHour": 1},
                  # the built-in model as it is: learning would plan with half of it
                  capacityModel={"learn": False},
                  nodetool=[sys.executable, str(NODETOOL_STANDIN)],
                  metrics={"prometheus": {"url": url, **PROM}})


def _measured(url: str, ns: str) -> bool:
    """Whether the policy's first period will have its load (past the rate's warmup) and
    the kubelet's bytes: else it would wait 30 s to try again."""
    p = parse(json.loads(_policy(ns, url, "Recommend"))["spec"]).prometheus
    assert p is not None
    src = PrometheusSource(p, ns, STS)
    try:
        src.snapshot(time.time(), 6, 2.0)
        return src.disk(time.time(), 6, 2.0, TEMPLATE).source == "kubelet"
    except MetricsError:
        return False


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("growth")
    namespaces = list(CLASSES)
    # the exporters and Prometheus first: the rate's warmup runs while the cluster starts
    kubelet = KubeletVolumes({(ns, _pvc(k)): (USED[k], VOLUME_BYTES)
                              for ns in namespaces for k in range(3)})
    store = CassandraMetrics(rps=RPS, data_bytes=sum(USED),
                             clusters={(ns, STS): (3, 3) for ns in namespaces})
    prom = Prometheus(root / "prom", [kubelet.target, store.target])
    cp: ControlPlane | None = None
    op: OperatorProcess | None = None
    try:
        cp = start_control_plane(root / "k8s", exec_config=standin_exec_config(
            namespaces, STS, 8, root / "standin"))
        made: dict[str, dict[str, Any]] = {}
        versions: dict[str, dict[str, str]] = {}
        for ns, (cls, grows) in CLASSES.items():
            cp.kubectl("create", "namespace", ns)
            cp.kubectl("apply", "-f", "-", stdin=_storage_class(cls, grows))
            cp.kubectl("apply", "-f", "-", stdin=_volumes(ns, cls, root / "pv"))
            doc = statefulset(STS, ns, 3, volume=VOLUME)
            assert "storageClassName: elastore-test" in doc
            cp.kubectl("apply", "-f", "-", stdin=doc.replace(
                "storageClassName: elastore-test", f"storageClassName: {cls}"))
        for ns in namespaces:
            wait_until(f"3 pods in {ns}", lambda ns=ns: get(cp, "statefulset", STS, ns)
                       .get("status", {}).get("readyReplicas") == 3, 60)
            wait_until(f"the PVCs of {ns} bound", lambda ns=ns: [
                p["status"].get("phase") for p in _claims(cp, ns).values()] == ["Bound"] * 3,
                30, every_s=0.2)
            made[ns] = get(cp, "statefulset", STS, ns)
            versions[ns] = {n: p["metadata"]["resourceVersion"]
                            for n, p in _claims(cp, ns).items()}
            wait_until(f"the load and bytes of {ns} in Prometheus",
                       lambda ns=ns: _measured(prom.url, ns), 30)
        op = OperatorProcess(cp.kubeconfig, root / "op.log")
        for ns, (_, grows) in CLASSES.items():
            cp.kubectl("apply", "-f", "-",
                       stdin=_policy(ns, prom.url, "Enforce" if grows else "Recommend"))
        yield Bed(cp, kubelet, op, made, versions)
    finally:
        if op is not None:
            op.stop()
        if cp is not None:
            for ns in CLASSES:  # shown when a test fails: what the operator decided
                res = cp.kubectl("get", "elasticpolicy", POLICY, "-n", ns, "-o", "json",
                                 check=False)
                print(ns, res.stdout[-4000:] or res.stderr)
            cp.stop()
        prom.close()
        store.close()
        kubelet.close()


def test_growth_every_pvc_grows_to_the_plans_size_and_nothing_else_changes(bed: Bed
                                                                         ) -> None:
    cp, ns = bed.cp, GROW_NS
    per_server = float(ModelSet.load(builtin_model("lab")).capacity.capacity(0.95, 0, 0))
    assert per_server > RPS  # the load alone: the policy's minimum, 3 nodes
    # the period that grew them (its status is written after the PVCs' patches; the next
    # period's, 10 s later, says they already ask for the size)
    st = wait_until("a period to grow the PVCs", lambda: (
        lambda s: s if "grew" in (s.get("storage") or {}).get("message", "") else None)(
        _status(cp, ns)), 60)
    grown = _requests(cp, ns)
    storage = st["storage"]
    assert st["binding"] == "storage", storage
    assert storage["source"] == "kubelet", storage
    assert storage["utilization"] == pytest.approx(USED[0] / VOLUME_BYTES, rel=1e-6)
    assert storage["volumeBytes"] == pytest.approx(VOLUME_BYTES)
    assert storage["nodesForBytes"] == 4, storage  # what adding nodes would have taken
    want = storage["expandToBytes"]
    assert want is not None and want > VOLUME_BYTES, storage
    # every claim, read from the API server, asks for that size, and each is one of the
    # target's (no claim of another name was made or grown)
    assert grown == {_pvc(k): pytest.approx(want) for k in range(3)}
    # the fullest node holds its bytes within the budget on the grown volume
    assert USED[0] <= storage["budget"] * want
    assert "grew 3 PVC(s)" in storage["message"], storage["message"]
    # instead of a node: the StatefulSet is as it was, its template included
    sts = get(cp, "statefulset", STS, ns)
    before = bed.sts[ns]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["volumeClaimTemplates"] == before["spec"]["volumeClaimTemplates"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"][
        "storage"] == VOLUME
    assert sts["metadata"]["generation"] == before["metadata"]["generation"]
    assert not st.get("operation"), st.get("operation")
    assert st["desiredReplicas"] == 3
    evs = events(cp, ns, POLICY)
    grew = [e for e in evs if e["reason"] == "VolumesGrown"]
    assert grew and grew[0]["type"] == "Normal", [e["reason"] for e in evs]
    assert all(_pvc(k) in grew[0]["message"] for k in range(3)), grew[0]["message"]
    assert not [e for e in evs if e["reason"] in ("VolumeGrowthFailed", "ScaleOutStarted")]

    # the resizer's part (none runs here): the kubelet reports the grown volumes. The next
    # period sees them: the bytes no longer bind, and nothing grows again
    for k in range(3):
        bed.kubelet.set(ns, _pvc(k), capacity=want)
    scraped = time.time() + 2.0  # Prometheus scrapes every second
    later = wait_until("a period on the grown volumes", lambda: (
        lambda s: s if s["lastDecision"]["epoch"] > scraped else None)(_status(cp, ns)), 40)
    assert later["binding"] == "load", later.get("storage")
    assert later["desiredReplicas"] == 3  # the load alone: the policy's minimum
    assert later["storage"]["volumeBytes"] == pytest.approx(want)
    assert later["storage"].get("expandToBytes") is None, later["storage"]
    assert _requests(cp, ns) == grown
    assert get(cp, "statefulset", STS, ns)["spec"]["replicas"] == 3
    assert len([e for e in events(cp, ns, POLICY) if e["reason"] == "VolumesGrown"]) == 1


def test_growth_a_class_without_expansion_grows_nothing_and_a_node_is_planned(bed: Bed
                                                                            ) -> None:
    """Recommend (nothing is acted on, so nothing is costly here), expandVolumes asked
    for, the claims' class refusing expansion: the volumes cannot hold the bytes, so the
    plan must add a node, and the status must say why the volumes do not grow."""
    cp, ns = bed.cp, FIXED_NS
    cls = CLASSES[ns][0]
    st = wait_until("a decision with the bytes", lambda: (lambda s: s if (
        s.get("storage") or {}).get("source") == "kubelet" and (s.get("lastDecision") or {}
                                                                ).get("ok") else None)(
        _status(cp, ns)), 60)
    storage = st["storage"]
    assert st["binding"] == "storage", storage
    assert storage["nodesForBytes"] == 4, storage
    # nothing grew: every claim as it was (its request and its resourceVersion)
    assert _requests(cp, ns) == {_pvc(k): VOLUME_BYTES for k in range(3)}
    assert {n: p["metadata"]["resourceVersion"] for n, p in _claims(cp, ns).items()} == \
        bed.claims[ns]
    assert not [e for e in events(cp, ns, POLICY) if e["reason"] == "VolumesGrown"]
    assert get(cp, "statefulset", STS, ns)["spec"]["replicas"] == 3  # Recommend
    # the plan holds the bytes with a node, since the volumes cannot grow ...
    assert st["desiredReplicas"] > 3, (
        f"desiredReplicas {st['desiredReplicas']} with the bytes over budget and volumes "
        f"that cannot grow; status.storage: {storage}; lastDecision: "
        f"{st['lastDecision']['reason']}")
    # ... and the status says which class refuses
    assert cls in storage.get("message", ""), storage
