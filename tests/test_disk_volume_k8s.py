"""A PVC grown in place (issue 37, item 3), on the real API server: the cluster port's
``volume`` and ``expand_volume`` (``KubeActuator``), run with exactly the Helm chart's
permissions (its ServiceAccount, installed for one watched namespace).

No provisioner and no kubelet run here: each PVC is bound by kube-controller-manager's
PersistentVolume controller to a static hostPath PV made for it (nothing is mounted). So
nothing resizes a volume either: what is checked is what the API server accepts, refuses
and reports, which is what the port relies on:

* a class with ``allowVolumeExpansion: true``: the request grows, the status keeps the
  bound PV's capacity (no resizer), and ``resizing`` says whether the request is beyond it;
* a shrink, refused by the port before any write;
* a class without it: refused by the port, and by the API server's own
  PersistentVolumeClaimResize admission when the port's check is bypassed;
* a claim not yet bound: refused by the API server's validation, said by the port;
* a PVC that does not exist.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from k8s_support import get, install_namespaced, start_control_plane, wait_until
from testbed.k8s import ControlPlane

from elastore.actuators.k8s import KubeActuator, storage_quantity
from elastore.errors import ElastoreError
from elastore.units import GIB

pytestmark = [pytest.mark.k8s]

NS = "disk"
RELEASE = "elastore-disk"
GROW = "elastore-disk-grow"  # allowVolumeExpansion: true
FIXED = "elastore-disk-fixed"  # allowVolumeExpansion absent (false)
#: the PersistentVolumeClaimResize admission's refusal (plugin/pkg/admission/storage/
#: persistentvolume/resize)
ADMISSION_REFUSAL = ("only dynamically provisioned pvc can be resized and the storageclass "
                     "that provisions the pvc must support resize")


@dataclass
class Bed:
    cp: ControlPlane
    root: Path
    admin: Any  # the admin's ApiClient
    port: KubeActuator  # the chart's ServiceAccount's

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.admin)


def _storage_class(name: str, expandable: bool) -> str:
    doc: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                           "metadata": {"name": name},
                           "provisioner": "kubernetes.io/no-provisioner",
                           "volumeBindingMode": "Immediate", "reclaimPolicy": "Retain"}
    if expandable:
        doc["allowVolumeExpansion"] = True
    return json.dumps(doc)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    from kubernetes import config as kconfig

    root = tmp_path_factory.mktemp("disk")
    cp = start_control_plane(root / "k8s")
    try:
        cp.kubectl("create", "namespace", NS)
        for name, grows in ((GROW, True), (FIXED, False)):
            cp.kubectl("apply", "-f", "-", stdin=_storage_class(name, grows))
        sa = install_namespaced(cp, RELEASE, (NS,), root / "sa.kubeconfig")
        admin = kconfig.new_client_from_config(config_file=str(cp.kubeconfig))
        port = KubeActuator(kconfig.new_client_from_config(config_file=str(sa)))
        yield Bed(cp, root, admin, port)
        cp.kubectl("delete", "namespace", NS, "--wait=false")
        cp.kubectl("delete", "pv", "-l", "elastore-test=disk", "--wait=false")
        cp.kubectl("delete", "storageclass", GROW, FIXED, "--wait=false")
    finally:
        cp.stop()


def _pvc(bed: Bed, name: str, cls: str, size: str = "5Gi", pv: str | None = "10Gi"
         ) -> dict[str, Any]:
    """PVC ``name`` in class ``cls``; with ``pv``, a hostPath PV of that size made for it
    (claimRef), and the claim waited for until Bound. Returns the claim as read."""
    if pv is not None:
        cp_doc = {"apiVersion": "v1", "kind": "PersistentVolume",
                  "metadata": {"name": f"{NS}-{name}", "labels": {"elastore-test": "disk"}},
                  "spec": {"capacity": {"storage": pv}, "accessModes": ["ReadWriteOnce"],
                           "storageClassName": cls,
                           "persistentVolumeReclaimPolicy": "Retain",
                           "claimRef": {"namespace": NS, "name": name},
                           "hostPath": {"path": str(bed.root / "pv" / name)}}}
        bed.cp.kubectl("apply", "-f", "-", stdin=json.dumps(cp_doc))
    bed.cp.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                 "resources": {"requests": {"storage": size}}}}))
    if pv is None:
        return get(bed.cp, "pvc", name, NS)
    return dict(wait_until(f"PVC {name} to be Bound", lambda: (
        (lambda d: d if (d.get("status") or {}).get("phase") == "Bound" else None)(
            get(bed.cp, "pvc", name, NS))), 30, every_s=0.2))


def _request(bed: Bed, name: str) -> tuple[str, str]:
    """The claim's storage request as the API server stores it, and its resourceVersion."""
    doc = get(bed.cp, "pvc", name, NS)
    return doc["spec"]["resources"]["requests"]["storage"], doc["metadata"]["resourceVersion"]


def _no_patch(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record (and refuse) any PVC patch the port would send."""
    sent: list[Any] = []

    def spy(*args: Any, **kw: Any) -> None:
        sent.append(args)
        raise AssertionError(f"the port patched a PVC: {args}")

    monkeypatch.setattr(bed.port.core, "patch_namespaced_persistent_volume_claim", spy)
    return sent


def test_disk_a_bound_pvc_grows_and_its_status_keeps_the_volumes_capacity(bed: Bed) -> None:
    pvc = _pvc(bed, "grow", GROW)
    assert pvc["status"]["capacity"]["storage"] == "10Gi"  # the PV's, not the request
    v = bed.port.volume(NS, "grow")
    assert v is not None
    assert (v.name, v.uid, v.phase, v.storage_class, v.expandable) == (
        "grow", pvc["metadata"]["uid"], "Bound", GROW, True)
    assert (v.requested_bytes, v.capacity_bytes, v.resizing) == (5 * GIB, 10 * GIB, False)

    # within the bound volume: accepted, and nothing to resize (the PV has 10Gi already)
    bed.port.expand_volume(NS, "grow", 8 * GIB)
    assert _request(bed, "grow")[0] == "8Gi"
    v = bed.port.volume(NS, "grow")
    assert v is not None
    assert (v.requested_bytes, v.capacity_bytes, v.resizing) == (8 * GIB, 10 * GIB, False)

    # beyond it: accepted too; no resizer runs here, so the capacity stays the PV's and the
    # claim is resizing (requested > capacity) for as long as nothing grows the volume
    bed.port.expand_volume(NS, "grow", 12 * GIB)
    v = bed.port.volume(NS, "grow")
    assert v is not None
    assert (v.requested_bytes, v.capacity_bytes, v.resizing) == (12 * GIB, 10 * GIB, True)
    doc = get(bed.cp, "pvc", "grow", NS)
    assert doc["status"]["capacity"]["storage"] == "10Gi"
    pv = bed.cp.get_json(f"/api/v1/persistentvolumes/{NS}-grow")
    assert pv["spec"]["capacity"]["storage"] == "10Gi" and pv["status"]["phase"] == "Bound"

    # the same size again: no write at all
    rv = _request(bed, "grow")[1]
    bed.port.expand_volume(NS, "grow", 12 * GIB)
    assert _request(bed, "grow") == ("12Gi", rv)

    # a size that is not whole Gi is written in bytes, and read back exactly
    odd = 12 * GIB + 4096
    assert storage_quantity(odd) == str(odd)
    bed.port.expand_volume(NS, "grow", odd)
    assert _request(bed, "grow")[0] == str(odd)
    v = bed.port.volume(NS, "grow")
    assert v is not None and v.requested_bytes == odd


def test_disk_a_shrink_is_refused_before_any_write(bed: Bed,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The port never lowers a request. The API server would: it refuses a request below
    ``status.capacity`` only (it lets a failed expansion be taken back), so between the
    capacity and the request the port's check is the only guard."""
    _pvc(bed, "keep", GROW, size="6Gi")
    bed.port.expand_volume(NS, "keep", 14 * GIB)  # beyond the bound PV's 10Gi
    before = _request(bed, "keep")
    assert before[0] == "14Gi"
    with monkeypatch.context() as m:
        sent = _no_patch(bed, m)
        for to in (12 * GIB, 4 * GIB):
            with pytest.raises(ElastoreError) as err:
                bed.port.expand_volume(NS, "keep", to)
            said = str(err.value)
            assert f"PVC {NS}/keep" in said and "shrink" in said, said
            assert f"({14 * GIB} bytes)" in said and f"({to} bytes)" in said, said
        assert sent == []
    assert _request(bed, "keep") == before  # neither the request nor its version moved

    # what the port guards against: the same 12Gi sent directly (as the admin) is accepted,
    # a request under the capacity is not
    from kubernetes.client.exceptions import ApiException

    bed.core.patch_namespaced_persistent_volume_claim(
        "keep", NS, {"spec": {"resources": {"requests": {"storage": "12Gi"}}}})
    assert _request(bed, "keep")[0] == "12Gi"
    with pytest.raises(ApiException) as api:
        bed.core.patch_namespaced_persistent_volume_claim(
            "keep", NS, {"spec": {"resources": {"requests": {"storage": "4Gi"}}}})
    assert api.value.status == 422, api.value
    assert "can not be less than status.capacity" in json.loads(api.value.body)["message"]


def test_disk_a_class_without_expansion_is_refused_by_the_port_and_by_the_api_server(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client.exceptions import ApiException

    _pvc(bed, "fixed", FIXED)
    v = bed.port.volume(NS, "fixed")
    assert v is not None and (v.storage_class, v.expandable, v.phase) == (FIXED, False, "Bound")
    before = _request(bed, "fixed")

    # the port: refused on the class, before any write
    with monkeypatch.context() as m:
        sent = _no_patch(bed, m)
        with pytest.raises(ElastoreError) as err:
            bed.port.expand_volume(NS, "fixed", 8 * GIB)
        assert sent == []
    said = str(err.value)
    assert FIXED in said and f"PVC {NS}/fixed" in said and "does not allow" in said, said
    assert _request(bed, "fixed") == before

    # the API server's own rule the port relies on: the same patch sent directly (as the
    # admin) is refused by the PersistentVolumeClaimResize admission
    with pytest.raises(ApiException) as api:
        bed.core.patch_namespaced_persistent_volume_claim(
            "fixed", NS, {"spec": {"resources": {"requests": {"storage": "8Gi"}}}})
    assert api.value.status == 403, api.value
    assert ADMISSION_REFUSAL in json.loads(api.value.body)["message"], api.value.body
    assert _request(bed, "fixed") == before

    # and when the port cannot read the class (None: it lets the API server decide), that
    # refusal comes back as an error naming the PVC and its class, in the server's words
    monkeypatch.setattr(bed.port, "_expandable", lambda cls: None)
    v = bed.port.volume(NS, "fixed")
    assert v is not None and v.expandable is None
    with pytest.raises(ElastoreError) as err:
        bed.port.expand_volume(NS, "fixed", 8 * GIB)
    said = str(err.value)
    assert f"PVC {NS}/fixed" in said and FIXED in said and ADMISSION_REFUSAL in said, said
    assert _request(bed, "fixed") == before


def test_disk_an_unbound_claim_is_refused_by_the_api_servers_validation(bed: Bed) -> None:
    """No PV for it: Pending. The API server lets only a bound claim's request change."""
    _pvc(bed, "pending", GROW, pv=None)
    v = bed.port.volume(NS, "pending")
    assert v is not None
    assert (v.phase, v.capacity_bytes, v.requested_bytes, v.expandable, v.resizing) == (
        "Pending", None, 5 * GIB, True, False)
    before = _request(bed, "pending")
    with pytest.raises(ElastoreError) as err:
        bed.port.expand_volume(NS, "pending", 8 * GIB)
    said = str(err.value)
    assert f"PVC {NS}/pending" in said and GROW in said and "Pending" in said, said
    assert "for bound claims" in said, said  # the API server's validation, quoted
    assert _request(bed, "pending") == before
    bed.cp.kubectl("delete", "pvc", "pending", "-n", NS)


def test_disk_a_pvc_that_does_not_exist(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    assert bed.port.volume(NS, "nosuch") is None
    sent = _no_patch(bed, monkeypatch)
    with pytest.raises(ElastoreError) as err:
        bed.port.expand_volume(NS, "nosuch", 8 * GIB)
    assert f"PVC {NS}/nosuch does not exist" in str(err.value), err.value
    assert sent == []
    assert bed.cp.kubectl("get", "pvc", "nosuch", "-n", NS, check=False).returncode != 0
