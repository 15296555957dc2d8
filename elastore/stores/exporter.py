"""How a store's exporter is read (``spec.metrics.prometheus.preset``): the quantities the
operator reads and :class:`Exporter`, one exporter's series as PromQL templates. Pure. Each
store writes its exporters' presets beside its driver (``elastore.stores.<store>.presets``);
:mod:`elastore.operator.presets` gathers them through the registry.

Every preset maps every quantity the operator reads. Cluster totals: ``readRps``,
``writeRps`` (client requests/s, coordinator side), ``dataBytes`` (bytes stored, replicas
included), ``migrationMiBps`` (streaming out, MiB/s; absent where the exporter has no
streaming metric), ``freshness`` (one series per node: its newest sample's time),
``latencyMs`` (the latency at the SLO's percentile, ms, each node's weighted by its request
rate) and ``interference`` (elastore's node agent, the same for every preset). Per node, by
``podLabel`` (the learned SLO border is per node): ``nodeReadRps``, ``nodeWriteRps``,
``nodeLatencyMs``, ``nodeMigrationMiBps``.

Each preset is written once, as a few expressions per series (:class:`Exporter`); the
queries are built from them (:func:`build`), so the cluster total is always the sum of the
per-node values. The metric names, labels and units come from each exporter's own source
or dashboards, cited on each preset and in docs/operator.md "Exporter presets".

Templates are :meth:`str.format` strings: ``{selector}`` becomes ``,<matchers>`` (the
target's namespace and pods and ``spec.metrics.prometheus.selector``) or ``""``;
``{scope}`` the matchers alone; ``{pod}`` the pod label (``""``: no per-node split);
``{podle}`` ``<pod>, le`` or ``le`` (a histogram's per-node buckets); ``{by}``
``max by (<pod>, job) `` or ``""``; ``{pct}`` 95 or 99; ``{q}`` 0.95 or 0.99; ``{rf}`` the
target's replication factor; ``{window}`` the range of every ``rate()``
(``spec.metrics.prometheus.rateWindow``, ``1m`` by default). Literal braces are doubled.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastore.units import MIB

#: every query a preset may define, cluster totals then per node
QUERY_NAMES = ("readRps", "writeRps", "migrationMiBps", "dataBytes", "freshness",
               "interference", "latencyMs", "nodeReadRps", "nodeWriteRps", "nodeLatencyMs",
               "nodeMigrationMiBps", "nodeDataBytes", "nodeVolumeUsedBytes",
               "nodeVolumeCapacityBytes")
#: quantities an exporter may not have (their absence is said, never read as 0)
OPTIONAL = ("migrationMiBps", "nodeMigrationMiBps", "nodeDataBytes", "nodeVolumeUsedBytes",
            "nodeVolumeCapacityBytes")
#: the kubelet's volume stats of the target's PVCs (``{pvcscope}``: the namespace and
#: ``persistentvolumeclaim=~".+-<pod>"``), one series per PVC: what ``df`` says of each
#: node's volume, whatever the store (kubernetes/kubernetes pkg/kubelet/metrics/collectors
#: volume_stats.go)
VOLUME_USED = "sum by (persistentvolumeclaim) (kubelet_volume_stats_used_bytes{{{pvcscope}}})"
VOLUME_CAPACITY = ("sum by (persistentvolumeclaim) "
                   "(kubelet_volume_stats_capacity_bytes{{{pvcscope}}})")

#: Hubbub-scale's interference index in [0, 1]: elastore's node agent exports one series per
#: pod (elastore.agent, labels namespace, pod, node); the target's mean
INTERFERENCE = "avg(elastore_interference_index{{{scope}}})"


@dataclass(frozen=True)
class Exporter:
    """One exporter's series, as PromQL templates (see the module's docstring).

    ``read`` / ``write``: an instant vector of client requests/s (a ``rate()`` of its
    counters over ``{window}``), any number of series per node (they are summed).
    ``node_latency``: the latency at ``{pct}`` per node, ms, one series per node
    ``by ({pod})``. ``data``: bytes stored, per node. ``streaming``: bytes/s streamed
    out, per series (None: not exported). ``fresh``: a series per node whose sample time
    is the node's newest."""

    read: str
    write: str
    node_latency: str
    data: str | None  # None: the exporter has no bytes stored (Swift: the pods are scanned)
    fresh: str
    streaming: str | None
    source: str  # where the names come from

    def queries(self) -> dict[str, str]:
        node_rate = f"(sum by ({{pod}}) ({self.read}) + sum by ({{pod}}) ({self.write}))"
        out = {
            "readRps": f"sum({self.read})",
            "writeRps": f"sum({self.write})",
            "freshness": f"{{by}}(timestamp({self.fresh}))",
            "interference": INTERFERENCE,
            # each node's latency weighted by its request rate (one series per node on
            # both sides: they match on the pod label)
            "latencyMs": f"sum(({self.node_latency}) * {node_rate}) / sum({node_rate})",
            "nodeReadRps": f"sum by ({{pod}}) ({self.read})",
            "nodeWriteRps": f"sum by ({{pod}}) ({self.write})",
            "nodeLatencyMs": self.node_latency,
            "nodeVolumeUsedBytes": VOLUME_USED,
            "nodeVolumeCapacityBytes": VOLUME_CAPACITY,
        }
        if self.data is not None:
            out["dataBytes"] = f"sum({self.data})"
            out["nodeDataBytes"] = f"sum by ({{pod}}) ({self.data})"
        if self.streaming is not None:
            out["migrationMiBps"] = f"sum({self.streaming}) / {MIB}"
            out["nodeMigrationMiBps"] = f"sum by ({{pod}}) ({self.streaming}) / {MIB}"
        return out
