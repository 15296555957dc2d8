"""Each node's bytes as the operator reads them from a real Prometheus (Debian's), issue 37:
``PrometheusSource.disk``.

A synthetic kubelet (``KubeletVolumes``: prometheus_client on 127.0.0.1) exports the two
volume-stats gauges a real kubelet publishes for every mounted PVC, labelled ``namespace``
and ``persistentvolumeclaim``; Cassandra's exporters (the JMX exporter's names) give the
store's own per-node bytes. Prometheus scrapes them every second; the operator's own
queries read them:

* the kubelet's stats, where they exist for the target's PVCs: read by pod, and nothing
  of another StatefulSet's PVCs or another namespace's (both far larger, so a leak shows);
* without them (never scraped, or the kubelet's scrape failing), the store's own figure,
  by pod;
* neither: ``MetricsMissing``, never 0;
* the target's own volumes only: not those of a StatefulSet whose name ends in the
  target's (``cache-db`` beside ``db``), and with two volumeClaimTemplates the per-node
  figures and the history describe the same volumes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from k8s_support import (
    CassandraMetrics,
    KubeletVolumes,
    NodeExporters,
    Prometheus,
    wait_until,
)

from elastore.errors import MetricsError
from elastore.operator.metrics import DiskReading, PrometheusSource
from elastore.operator.spec import parse
from elastore.units import GIB

# real Prometheus, synthetic exporters: nothing here is timed (make test's parallel phase)
pytestmark = [pytest.mark.lab, pytest.mark.concurrent]

NS, STS = "shop", "db"
STEPS, STEP_S = 6, 10.0
#: the target's volumes (used, capacity) by PVC <template>-<pod>: each pod its own figure
OWN = {f"data-{STS}-{k}": ((5 + k) * GIB, 10 * GIB) for k in range(3)}
#: in the same namespace, another StatefulSet's PVC; and the target's names in another
#: namespace: each far larger than the target's, so a sum that takes them in is plainly off
FOREIGN = {(NS, "data-other-0"): (50 * GIB, 100 * GIB),
           **{("elsewhere", f"data-{STS}-{k}"): (90 * GIB, 100 * GIB) for k in range(3)}}
#: namespace "mixed": the target's PVCs beside those of a StatefulSet "cache-db"
MIXED = {**{("mixed", pvc): v for pvc, v in OWN.items()},
         **{("mixed", f"data-cache-{STS}-{k}"): (40 * GIB, 100 * GIB) for k in range(3)}}
#: namespace "twovol": two volumeClaimTemplates per pod, "data" and "commitlog"
TWOVOL = {**{("twovol", pvc): v for pvc, v in OWN.items()},
          **{("twovol", f"commitlog-{STS}-{k}"): (1 * GIB, 2 * GIB) for k in range(3)}}
#: what the store says each node holds (1 GiB each in NS; 2, 3, 4 GiB in "bare")
STORE_BYTES = 3 * GIB
BARE = {k: (k + 2) * GIB for k in range(3)}


class StoreOnly(CassandraMetrics):
    """The store's series for the clusters given, and no spare pods' (whose zero bytes
    would read as nodes holding nothing)."""

    SPARE = 0


@dataclass
class Rig:
    prom: Prometheus
    kubelet: KubeletVolumes
    #: a second kubelet, for namespace "gone" only: the test that stops it
    doomed: KubeletVolumes
    #: when Prometheus had scraped every target once (its first scrapes come a few
    #: seconds after it is ready, not all at the same instant)
    began: float


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    kubelet = KubeletVolumes({**{(NS, pvc): v for pvc, v in OWN.items()}, **FOREIGN,
                              **MIXED, **TWOVOL})
    doomed = KubeletVolumes({("gone", f"data-{STS}-{k}"): (7 * GIB, 10 * GIB)
                             for k in range(3)})
    # the store's own bytes: in NS beside the kubelet's (which win), in "bare" (no volume
    # stats at all: never scraped for that namespace) each node its own figure, in "gone"
    # beside the kubelet that stops
    store = StoreOnly(rps=100.0, data_bytes=STORE_BYTES, clusters={
        (NS, STS): (3, 3), ("gone", STS): (3, 3)})
    bare = NodeExporters("bare", STS, 3, 100.0)
    for k, b in BARE.items():
        bare.nodes[k].data_bytes = b
    prom = Prometheus(tmp_path_factory.mktemp("prom"),
                      [kubelet.target, doomed.target, store.target], bare.scrape_configs())
    try:
        targets = 3 + len(bare.nodes)
        wait_until("every target scraped", lambda: _up(prom.url) == targets, 30,
                   every_s=0.25)
        yield Rig(prom, kubelet, doomed, time.time())
    finally:
        prom.close()
        for x in (kubelet, doomed, store, bare):
            x.close()


def _up(url: str) -> int:
    """How many targets Prometheus has scraped successfully."""
    from prometheus_api_client import PrometheusConnect

    got = PrometheusConnect(url).custom_query("count(up == 1)")
    return int(float(got[0]["value"][1])) if got else 0


#: the target's data volumeClaimTemplate: its PVCs are data-<pod>
TEMPLATE = "data"


def source(url: str, ns: str = NS, target: str = STS) -> PrometheusSource:
    p = parse({"target": {"name": target, "replicationFactor": 3},
               "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
               "metrics": {"prometheus": {"url": url}}}).prometheus
    assert p is not None
    return PrometheusSource(p, ns, target)


def reading(src: PrometheusSource) -> DiskReading | str:
    """The reading now, or the reason there is none."""
    try:
        return src.disk(time.time(), STEPS, STEP_S, TEMPLATE)
    except MetricsError as exc:
        return exc.reason


def settled(src: PrometheusSource, source_name: str, since: float, pods: int = 3
            ) -> DiskReading:
    """The reading once it comes from ``source_name`` for ``pods`` pods, and the last
    step's window (``STEP_S``) lies wholly after ``since``, when every target had been
    scraped (the store's nodes are targets of their own, first scraped at different
    instants: a window over their start averages a sum that lacks some)."""
    def check() -> DiskReading | None:
        if time.time() < since + STEP_S + 1:
            return None
        got = reading(src)
        if isinstance(got, DiskReading) and got.source == source_name and \
                len(got.used_bytes) == pods:
            return got
        return None

    return wait_until(f"a {source_name} reading of {pods} pods", check, 30, every_s=0.25)


def test_disk_the_kubelets_volume_stats_by_pod_and_none_of_anyone_elses(rig: Rig) -> None:
    got = settled(source(rig.prom.url), "kubelet", rig.began)
    want_used = {f"{STS}-{k}": (5 + k) * GIB for k in range(3)}
    assert got.used_bytes == pytest.approx(want_used, rel=1e-9)
    assert got.capacity_bytes == pytest.approx({p: 10 * GIB for p in want_used}, rel=1e-9)
    # not the store's 1 GiB per node, though its series exist for the same pods
    assert all(v > 2 * GIB for v in got.used_bytes.values())
    # the history is the sum of the target's volumes, step by step, oldest first: its
    # measured steps (the newest among them) all 18 GiB, not 50 or 270 GiB more
    hist = np.asarray(got.history_bytes)
    assert hist.shape == (STEPS,)
    measured = hist[np.isfinite(hist)]
    assert measured.size >= 1 and math.isfinite(hist[-1])
    assert measured == pytest.approx(np.full(measured.size, 18 * GIB), rel=1e-9)
    assert hist[-1] == pytest.approx(sum(got.used_bytes.values()), rel=1e-9)
    # the other StatefulSet's PVC is read for it, and only for it: the query is scoped
    other = settled(source(rig.prom.url, target="other"), "kubelet", rig.began, pods=1)
    assert other.used_bytes == pytest.approx({"other-0": 50 * GIB}, rel=1e-9)
    assert other.history_bytes[-1] == pytest.approx(50 * GIB, rel=1e-9)
    # without the StatefulSet's template (a cass-operator datacenter) the kubelet's figures
    # are not matched: the store's are read
    plain = source(rig.prom.url).disk(time.time(), STEPS, STEP_S, None)
    assert plain.source == "store"
    # and the same names in another namespace are that namespace's
    far = settled(source(rig.prom.url, ns="elsewhere"), "kubelet", rig.began)
    assert far.used_bytes == pytest.approx({f"{STS}-{k}": 90 * GIB for k in range(3)},
                                           rel=1e-9)


def test_disk_without_volume_stats_the_stores_own_bytes_by_pod(rig: Rig) -> None:
    """Namespace "bare": Prometheus has never scraped a kubelet series of it (the kubelet's
    series of other namespaces are there); the store's JMX exporter is."""
    src = source(rig.prom.url, ns="bare")
    got = settled(src, "store", rig.began)
    assert got.used_bytes == pytest.approx({f"{STS}-{k}": b for k, b in BARE.items()},
                                           rel=1e-9)
    assert got.capacity_bytes == {}  # the volumes' sizes come from the PVCs then
    # the history: the sum of the three nodes' figures at its last step (an earlier step
    # may average over the first scrapes, before all three were in: less, never more)
    hist = np.asarray(got.history_bytes)
    assert hist[-1] == pytest.approx(9 * GIB, rel=1e-9)
    assert np.all(hist[np.isfinite(hist)] <= 9 * GIB * (1 + 1e-9)), hist


def test_disk_a_kubelet_that_stops_answering_leaves_the_stores_figure(rig: Rig) -> None:
    """Namespace "gone": the kubelet's volume stats were scraped, then its scrape fails
    (Prometheus marks the series stale): the next reading is the store's, never the
    kubelet's last word and never 0."""
    src = source(rig.prom.url, ns="gone")
    before = settled(src, "kubelet", rig.began)
    assert before.used_bytes == pytest.approx({f"{STS}-{k}": 7 * GIB for k in range(3)},
                                              rel=1e-9)
    rig.doomed.close()
    after = settled(src, "store", rig.began)
    assert after.used_bytes == pytest.approx({f"{STS}-{k}": GIB for k in range(3)}, rel=1e-9)
    assert after.capacity_bytes == {}
    # the store's history, not a mix of the two figures
    assert after.history_bytes[-1] == pytest.approx(STORE_BYTES, rel=1e-9)


def test_disk_neither_figure_is_metrics_missing_never_zero(rig: Rig) -> None:
    settled(source(rig.prom.url), "kubelet", rig.began)  # everything scraped
    # a namespace with nothing of either; a target in NS that has neither (the kubelet's
    # series of "db" and "other" and the store's of "db" are there)
    for src, where in ((source(rig.prom.url, ns="void"), "void/db"),
                       (source(rig.prom.url, target="nosuch"), f"{NS}/nosuch")):
        with pytest.raises(MetricsError) as err:
            src.disk(time.time(), STEPS, STEP_S, TEMPLATE)
        assert err.value.reason == "MetricsMissing", (where, err.value)
        said = str(err.value)
        assert "neither the kubelet's volume stats nor the store's own figure" in said, said
        assert "org_apache_cassandra_metrics_storage_count" in said, said  # which query


def test_disk_a_statefulset_whose_name_ends_in_the_targets_is_not_read(rig: Rig) -> None:
    """Namespace "mixed": StatefulSets "db" and "cache-db", whose PVCs Kubernetes names
    ``data-db-0`` and ``data-cache-db-0``. The second is "cache-db"'s, not pod db-0's (of a
    template "data-cache" the target does not have)."""
    got = settled(source(rig.prom.url, ns="mixed"), "kubelet", rig.began)
    assert got.history_bytes[-1] == pytest.approx(18 * GIB, rel=1e-9)
    assert got.used_bytes == pytest.approx({f"{STS}-{k}": (5 + k) * GIB for k in range(3)},
                                           rel=1e-9)
    assert got.capacity_bytes == pytest.approx({f"{STS}-{k}": 10 * GIB for k in range(3)},
                                               rel=1e-9)


def test_disk_two_volumes_per_pod_the_history_and_the_nodes_describe_the_same_bytes(
        rig: Rig) -> None:
    """Namespace "twovol": each pod has two claims, ``data-db-k`` and ``commitlog-db-k``
    (two volumeClaimTemplates). Whichever the reading takes for a node, its history's last
    step must be the sum of the same volumes: the growth forecast joins the two (the
    instant total is appended to the history)."""
    got = settled(source(rig.prom.url, ns="twovol"), "kubelet", rig.began)
    assert got.history_bytes[-1] == pytest.approx(sum(got.used_bytes.values()), rel=1e-9), (
        got.used_bytes, got.history_bytes)
    # and a node's capacity is that of the volume its bytes were read on (each volume's
    # used bytes tell which it is: 1 GiB of 2 for a commitlog, 5-7 GiB of 10 for data)
    capacity_of = {float(used): float(cap) for used, cap in TWOVOL.values()}
    for pod, used in got.used_bytes.items():
        assert got.capacity_bytes[pod] == pytest.approx(capacity_of[used], rel=1e-9), (pod, got)
