"""Swift's exporter, as a preset (:class:`~elastore.stores.exporter.Exporter`). Pure."""

from __future__ import annotations

from importlib import resources

from elastore.stores.exporter import Exporter

#: the statsd_exporter mapping the preset's series come from, shipped with the package
STATSD_MAPPING_FILE = "statsd-mapping.yml"


def statsd_mapping() -> str:
    """The text of elastore's statsd_exporter mapping for Swift
    (``elastore/stores/swift/statsd-mapping.yml``): what users' own exporters load with
    ``--statsd.mapping-config``, and what the lab's exporters run."""
    return resources.files("elastore.stores.swift").joinpath(STATSD_MAPPING_FILE).read_text(
        encoding="utf-8")


def _swift_statsd() -> Exporter:
    """``swift-statsd``: Swift's StatsD metrics (Swift's admin guide, "Reporting Metrics to
    StatsD": ``object-server.<VERB>.timing``, ms, one per request) through Prometheus's
    ``statsd_exporter`` with elastore's mapping (``statsd-mapping.yml`` beside this module,
    docs/operator.md "Swift"): ``swift_server_request_seconds{server,verb}``, a histogram
    in seconds, one exporter per storage pod. A client GET is one object server's GET; a
    client PUT is written on every replica, so PUTs are divided by the replication factor.
    The latency per node is the object server's own (server side: below the proxy's, which
    adds the network and the slowest replica's write). Swift exports no bytes stored: the
    operator reads them from the pods (``du``, :mod:`elastore.stores.swift.pods`)."""
    name = "swift_server_request_seconds"

    def rate(verb: str) -> str:
        return (f'rate({name}_count{{{{server="object",verb="{verb}"{{selector}}}}}}'
                "[{window}])")

    return Exporter(
        read=rate("GET"), write=f"{rate('PUT')} / {{rf}}",
        node_latency=(f"histogram_quantile({{q}}, sum by ({{podle}}) (rate({name}_bucket"
                      f'{{{{server="object",verb=~"GET|PUT"{{selector}}}}}}[{{window}}]))) '
                      "* 1000"),
        data=None,
        fresh=f'{name}_count{{{{server="object",verb="GET"{{selector}}}}}}',
        streaming=None,
        source="Swift's StatsD names through statsd_exporter with elastore's mapping")


PRESETS: dict[str, Exporter] = {"swift-statsd": _swift_statsd()}
