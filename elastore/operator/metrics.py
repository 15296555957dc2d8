"""What the control loop observes, from Prometheus (prometheus-api-client).

A missing, empty, NaN or stale series is a :class:`MetricsError` with a reason the status
shows (``PrometheusUnreachable``, ``MetricsMissing``, ``MetricsStale``,
``PrometheusError``): never a zero. The loop then decides nothing, so no scale-in happens
on missing data and every scale-out rests on evidence.

Every query asks about the operator's "now", and Prometheus answers in its own clock (its
samples carry its scrape times). The two clocks are compared on every answer (its HTTP
``Date`` header, :func:`clock_reading`): beyond a tolerance (:func:`clock_tolerance_s`) the
period is ``ClockSkew``, the skew in seconds said, and nothing is read as a measurement.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError, MetricsError
from elastore.operator.spec import PolicySpec, Prometheus

FloatArray = npt.NDArray[np.float64]
__all__ = ["ClockReading", "MetricsError", "MetricsSource", "NodeReading",
           "PrometheusSource", "Snapshot", "clock_reading", "clock_skew", "clock_tolerance_s",
           "history_end", "mask_warmup"]


@dataclass(frozen=True)
class Snapshot:
    """The cluster as Prometheus saw it at ``at_s`` (epoch seconds)."""

    at_s: float
    load_rps: float  # client requests/s, the whole cluster
    read_ratio: float
    data_bytes: float  # all data stored, replicas included
    migration_mibps: float | None  # streaming now (status only; None when not exported)
    history_rps: FloatArray  # the load per step, oldest first; NaN where Prometheus has none
    step_s: float
    #: how many nodes the metrics come from (None: the source cannot tell, as the
    #: simulator's trace); fewer than the ready pods is a partial scrape
    nodes: int | None = None
    #: when the history's last step ends (None: at ``at_s``). The operator's sources end it
    #: on the step grid (:func:`history_end`), so the next period's history is this one
    #: moved on by whole steps and a kept fit can go on from it
    history_end_s: float | None = None


def history_end(at_s: float, step_s: float) -> float:
    """The end of the last whole step of ``step_s`` at ``at_s`` (epoch seconds on the step
    grid: hours end on the hour), at most one step before ``at_s``."""
    return math.floor(at_s / step_s + 1e-9) * step_s


@dataclass(frozen=True)
class ClockReading:
    """Prometheus's clock against the operator's, from one HTTP answer: ``offset_s`` is
    Prometheus's time minus the operator's (positive: the operator's clock is behind), known
    to within ``error_s`` (the ``Date`` header's whole second, and the time the answer
    took); ``at_s``: the operator's clock when the answer came."""

    offset_s: float
    error_s: float
    at_s: float


def clock_reading(date: str | None, sent_s: float, received_s: float) -> ClockReading | None:
    """The clocks compared from an HTTP ``Date`` header (RFC 9110's IMF-fixdate, whole
    seconds, the server's clock when it answered; Prometheus's Go server sets it on every
    answer) and the operator's clock when the request left (``sent_s``) and the answer came
    (``received_s``). None: no header, or one that is not a date in GMT."""
    if not date:
        return None
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None or when.utcoffset() is None:
        return None
    sent_s, received_s = min(sent_s, received_s), max(sent_s, received_s)
    # the header's second is truncated: Prometheus answered within [when, when + 1), and
    # the operator's clock read between sent and received meanwhile
    theirs = when.timestamp() + 0.5
    ours = (sent_s + received_s) / 2
    return ClockReading(offset_s=theirs - ours, error_s=0.5 + (received_s - sent_s) / 2,
                        at_s=received_s)


#: the smallest clock difference ever said (the ``Date`` header's resolution is 1 s)
MIN_CLOCK_TOLERANCE_S = 2.0


def clock_tolerance_s(prom: Prometheus) -> float:
    """The clock difference tolerated between the operator and Prometheus: half the
    shorter of the rate window and ``staleAfter`` (at least
    :data:`MIN_CLOCK_TOLERANCE_S`). Within it, a rate still reads mostly the window it
    means and the freshness check is off by less than half its bound."""
    return max(MIN_CLOCK_TOLERANCE_S, min(prom.rate_window_s, prom.stale_after_s) / 2)


def clock_skew(reading: ClockReading | None, tolerance_s: float) -> MetricsError | None:
    """``ClockSkew`` when the operator's clock is surely (beyond the reading's error) more
    than ``tolerance_s`` off Prometheus's, with the skew in seconds and what it would
    misread; None when the clocks agree or could not be compared."""
    if reading is None or abs(reading.offset_s) - reading.error_s <= tolerance_s:
        return None
    skew = abs(reading.offset_s)
    if reading.offset_s < 0:
        how = (f"the operator's clock is {skew:.0f} s ahead of Prometheus's: a query for "
               f"its now asks about a moment {skew:.0f} s in Prometheus's future, where the "
               f"newest samples look {skew:.0f} s old and the rates' windows are empty")
    else:
        how = (f"the operator's clock is {skew:.0f} s behind Prometheus's: a query for its "
               f"now reads Prometheus's data of {skew:.0f} s ago as the present, so a change "
               f"of load or a scrape that stopped is seen {skew:.0f} s late")
    return MetricsError("ClockSkew", f"{how} (Prometheus's HTTP Date header, to within "
                                     f"{reading.error_s:.1f} s; tolerated: "
                                     f"{tolerance_s:.0f} s). Nothing is read as a "
                                     "measurement until the clocks agree: check NTP on the "
                                     "operator's node and Prometheus's")


@dataclass(frozen=True)
class NodeReading:
    """One node's own measurements (the learned SLO border is per node). ``None``: that
    quantity has no series for this node (never read as 0)."""

    read_rps: float | None
    write_rps: float | None
    latency_ms: float | None  # at the SLO's percentile
    migration_mibps: float | None  # streaming out

    @property
    def load_rps(self) -> float | None:
        if self.read_rps is None or self.write_rps is None:
            return None
        return self.read_rps + self.write_rps


@dataclass(frozen=True)
class DiskReading:
    """Each node's bytes on its volume, and their total over the last steps: from the
    kubelet's volume stats (``source="kubelet"``, with each volume's capacity) or from the
    store's own figure (``"store"``: the volumes' sizes come from the PVCs)."""

    source: str
    used_bytes: dict[str, float]  # by pod
    capacity_bytes: dict[str, float]  # by pod (kubelet only)
    history_bytes: FloatArray  # the total used per step, oldest first; NaN where none


#: the per-node queries, one series per node (by ``podLabel``)
NODE_QUERIES = ("nodeReadRps", "nodeWriteRps", "nodeLatencyMs", "nodeMigrationMiBps")


class MetricsSource(Protocol):
    """What the control loop observes. Anything missing is a :class:`MetricsError`, never
    a zero. :class:`PrometheusSource` reads Prometheus; the simulator answers from its
    trace (:class:`elastore.sim.kube.TraceMetrics`)."""

    def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
        """The cluster at ``at_s`` and its load over the last ``steps`` steps."""

    def scalar(self, name: str, at_s: float) -> float:
        """One named query's value at ``at_s`` (e.g. ``interference``)."""

    def per_node(self, at_s: float) -> dict[str, NodeReading]:
        """Each node's own load, latency and streaming at ``at_s``, by node (pod). A
        :class:`MetricsError` when the source has none at all."""

    def disk(self, at_s: float, steps: int, step_s: float,
             pvc_template: str | None = None) -> DiskReading:
        """Each node's bytes on its data volume (the PVCs ``<pvc_template>-<pod>``) and
        their total's history: the kubelet's volume stats where they are scraped, else the
        store's own figure. A :class:`MetricsError` when neither has a series."""


def _sample(series: Any, name: str) -> float:
    try:
        return float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise MetricsError("PrometheusError", f"{name}: unreadable sample {series!r}") from exc


def _value(result: Any, name: str, query: str) -> float:
    if not isinstance(result, list) or not result:
        raise MetricsError("MetricsMissing", f"{name}: Prometheus returned no series for "
                                             f"{query!r} (a missing metric is never read as 0)")
    if len(result) > 1:
        raise MetricsError("MetricsMissing", f"{name}: {query!r} returned {len(result)} series; "
                                             "it must aggregate to one (use sum())")
    v = _sample(result[0], name)
    if not math.isfinite(v) or v < 0:
        raise MetricsError("MetricsMissing", f"{name}: {query!r} is {v} (no valid data)")
    return v


@dataclass(frozen=True)
class Credentials:
    """What ``spec.metrics.prometheus``'s ``bearerTokenSecret``, ``basicAuth`` and
    ``tlsConfig`` resolve to (:func:`resolve_credentials`)."""

    bearer_token: str | None = None
    basic: tuple[str, str] | None = None
    ca_pem: str | None = None
    insecure_skip_verify: bool = False

    def __repr__(self) -> str:  # never a secret in a log line or a traceback
        return (f"Credentials(bearer_token={'***' if self.bearer_token else None}, "
                f"basic={'***' if self.basic else None}, ca_pem={bool(self.ca_pem)}, "
                f"insecure_skip_verify={self.insecure_skip_verify})")


#: reads one key of a Secret or ConfigMap in a namespace, to be sent to a URL: (kind,
#: namespace, name, key, url); a Secret must be marked for it and bound to that URL
#: (:func:`elastore.operator.policyapi.kube_reader`)
Reader = Callable[[str, str, str, str, str], str]


def resolve_credentials(prom: Prometheus, namespace: str, read: Reader) -> Credentials:
    """The credentials the policy names, read from its own namespace for ``prom.url``. A
    Secret missing, unmarked or not bound to the URL, or a missing key, is an
    :class:`ElastoreError` naming it."""
    a = prom.auth
    url = prom.url
    token = None if a.bearer_token is None else \
        read("Secret", namespace, a.bearer_token.name, a.bearer_token.key, url).strip()
    basic = None
    if a.username is not None and a.password is not None:
        basic = (read("Secret", namespace, a.username.name, a.username.key, url).strip(),
                 read("Secret", namespace, a.password.name, a.password.key, url).strip())
    ca = None
    if a.ca_secret is not None:
        ca = read("Secret", namespace, a.ca_secret.name, a.ca_secret.key, url)
    elif a.ca_configmap is not None:
        ca = read("ConfigMap", namespace, a.ca_configmap.name, a.ca_configmap.key, url)
    if ca is not None and "-----BEGIN CERTIFICATE-----" not in ca:
        raise ElastoreError("spec.metrics.prometheus.tlsConfig.ca is not a PEM certificate "
                            "bundle")
    return Credentials(token, basic, ca, a.insecure_skip_verify)


def _ca_file(pem: str) -> str:
    """A file holding ``pem`` (requests verifies against a path), one per bundle."""
    import hashlib
    import os
    import tempfile

    d = os.path.join(tempfile.gettempdir(), f"elastore-ca-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, hashlib.sha256(pem.encode()).hexdigest()[:16] + ".pem")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=d)
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        os.replace(tmp, path)
    return path


class PrometheusSource:
    """The metrics of one ElasticPolicy's target (StatefulSet ``target`` in ``namespace``:
    the default queries see only its pods). ``timeout_s`` bounds every request;
    ``credentials``: a bearer token or basic auth, a CA bundle, or no verification."""

    def __init__(self, prom: Prometheus, namespace: str, target: str,
                 timeout_s: float = 5.0, credentials: Credentials | None = None) -> None:
        import requests
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        self.prom = prom
        self.namespace, self.target = namespace, target
        self.timeout_s = timeout_s
        cred = credentials or Credentials()
        session = requests.Session()
        # a redirect would take the request (and its credentials' host check) elsewhere
        session.max_redirects = 0
        session.verify = False if cred.insecure_skip_verify else (
            _ca_file(cred.ca_pem) if cred.ca_pem else True)
        headers = {"Authorization": f"Bearer {cred.bearer_token}"} if cred.bearer_token \
            else None
        #: the clocks as the last answer compared them (None: no answer with a Date yet)
        self.clock: ClockReading | None = None
        session.hooks["response"].append(self._dated)
        self.client = PrometheusConnect(url=prom.url, headers=headers, auth=cred.basic,
                                        retry=Retry(total=1, backoff_factor=0.2),
                                        session=session, timeout=int(max(1, timeout_s)))

    def _dated(self, response: Any, *args: Any, **kwargs: Any) -> None:
        """Every answer's ``Date`` against the operator's clock (a requests hook)."""
        received = time.time()
        try:
            took = max(0.0, float(response.elapsed.total_seconds()))
        except (AttributeError, TypeError, ValueError):
            took = 0.0
        got = clock_reading(response.headers.get("Date"), received - took, received)
        if got is not None:
            self.clock = got

    def check_clock(self, at_s: float) -> None:
        """A :class:`MetricsError` ``ClockSkew`` when the last answer says the operator's
        clock is off Prometheus's beyond :func:`clock_tolerance_s`. Only a reading of the
        present is judged: a backtest's past periods ask about fixed instants."""
        if at_s < time.time() - self.prom.stale_after_s:
            return
        exc = clock_skew(self.clock, clock_tolerance_s(self.prom))
        if exc is not None:
            raise exc

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import requests
        from prometheus_api_client.exceptions import PrometheusApiClientException

        try:
            return fn(*args, **kwargs)
        except requests.exceptions.SSLError as exc:
            raise MetricsError("PrometheusUnreachable", f"Prometheus at {self.prom.url}: TLS "
                                                        "verification failed (spec.metrics."
                                                        "prometheus.tlsConfig.ca?)") from exc
        except requests.exceptions.RequestException as exc:
            raise MetricsError("PrometheusUnreachable", f"Prometheus at {self.prom.url} is "
                                                        f"unreachable: {type(exc).__name__}") \
                from exc
        except PrometheusApiClientException as exc:
            # only the status code: the response's body is whatever the URL answered, and
            # echoing it into the status and Events would make the operator a fetcher of
            # any URL for whoever may write a policy (issue 35)
            m = re.search(r"Status Code (\d{3})", str(exc))
            code = m.group(1) if m else "?"
            if code in ("401", "403"):
                raise MetricsError("PrometheusUnauthorized", f"Prometheus at {self.prom.url} "
                                   f"refused the credentials (HTTP {code}): check spec."
                                   "metrics.prometheus.bearerTokenSecret / basicAuth") from exc
            raise MetricsError("PrometheusError", f"Prometheus at {self.prom.url} refused a "
                                                  f"query (HTTP {code}; the operator's log "
                                                  "has the query)") from exc

    def query(self, name: str) -> str:
        return self.prom.query(name, self.namespace, self.target)

    def scalar(self, name: str, at_s: float) -> float:
        q = self.query(name)
        return _value(self._call(self.client.custom_query, q, params={"time": at_s}), name, q)

    def vector(self, name: str, at_s: float) -> dict[str, float]:
        """A query that gives one series per node: its finite, non-negative values by node
        (``podLabel``); a series whose value is NaN or negative is left out (missing, never
        0). An empty answer is an empty dict."""
        q = self.query(name)
        result = self._call(self.client.custom_query, q, params={"time": at_s})
        out: dict[str, float] = {}
        for series in result if isinstance(result, list) else []:
            labels = series.get("metric") or {} if isinstance(series, dict) else {}
            node = str(labels.get(self.prom.pod_label, "")) if self.prom.pod_label else "all"
            if node in out:
                raise MetricsError("MetricsMissing", f"{name}: {q!r} returned several series "
                                                     f"for node {node}; it must give one per "
                                                     "node")
            v = _sample(series, name)
            if math.isfinite(v) and v >= 0:
                out[node] = v
        return out

    def per_node(self, at_s: float) -> dict[str, NodeReading]:
        """The per-node queries (:data:`NODE_QUERIES`) joined by node. Read and write rates
        are required (a :class:`MetricsError` when neither query has a series); a node's
        missing latency or streaming is None."""
        got: dict[str, dict[str, float]] = {}
        for name in NODE_QUERIES:
            try:
                got[name] = self.vector(name, at_s)
            except MetricsError as exc:  # an exporter without it (streaming): None per node
                if exc.reason != "MetricsMissing" or name in ("nodeReadRps", "nodeWriteRps"):
                    raise
                got[name] = {}
        nodes = set(got["nodeReadRps"]) | set(got["nodeWriteRps"])
        if not nodes:
            raise MetricsError("MetricsMissing", "per-node load: Prometheus returned no series "
                                                 f"for {self.query('nodeReadRps')!r}")
        return {n: NodeReading(got["nodeReadRps"].get(n), got["nodeWriteRps"].get(n),
                               got["nodeLatencyMs"].get(n), got["nodeMigrationMiBps"].get(n))
                for n in sorted(nodes)}

    def freshness(self, at_s: float) -> dict[str, float]:
        """Each node's newest sample time (epoch seconds), by node; one series per node."""
        q = self.query("freshness")
        result = self._call(self.client.custom_query, q, params={"time": at_s})
        if not isinstance(result, list) or not result:
            raise MetricsError("MetricsMissing", f"freshness: Prometheus returned no series "
                                                 f"for {q!r} (no node reports)")
        out: dict[str, float] = {}
        jobs: dict[str, list[str]] = {}
        for series in result:
            labels = series.get("metric") or {} if isinstance(series, dict) else {}
            node = str(labels.get(self.prom.pod_label) if self.prom.pod_label else labels)
            jobs.setdefault(node, []).append(str(labels.get("job", "")))
            if node in out:
                if len(set(jobs[node])) > 1:
                    raise MetricsError("MetricsDuplicated", f"node {node} is scraped by "
                                       f"several jobs ({', '.join(sorted(set(jobs[node])))}): "
                                       "its load would be counted once for each; keep one "
                                       "scrape of it (a PodMonitor and a ServiceMonitor both?)")
                raise MetricsError("MetricsMissing", f"freshness: {q!r} returned several "
                                                     f"series for node {node}; it must give "
                                                     "one per node")
            if self.prom.pod_label and not self.prom.own_pod(self.target, node):
                raise MetricsError("MetricsForeignPods", f"freshness: {q!r} returned pod "
                                   f"{node}, not one of {self.target}'s: the load would count "
                                   "another workload's (an unscoped custom query?)")
            v = _sample(series, "freshness")
            if not math.isfinite(v):
                raise MetricsError("MetricsMissing", f"freshness: node {node} has no valid "
                                                     "sample time")
            out[node] = v
        return out

    def snapshot(self, at_s: float, steps: int, step_s: float) -> Snapshot:
        """Instant values at ``at_s`` and the load over the last ``steps`` steps. The
        clocks are compared first (:meth:`check_clock`): a skew explains an empty or stale
        answer better than the answer does."""
        self.clock = None
        try:
            nodes = self.freshness(at_s)
        except MetricsError as exc:
            if exc.reason == "PrometheusUnreachable":
                raise
            self.check_clock(at_s)
            raise
        self.check_clock(at_s)
        oldest = min(nodes, key=lambda n: nodes[n])
        if at_s - nodes[oldest] > self.prom.stale_after_s:
            raise MetricsError("MetricsStale", f"node {oldest}'s newest sample is "
                                               f"{at_s - nodes[oldest]:.0f} s old (staleAfter "
                                               f"{self.prom.stale_after_s:.0f} s): the sum "
                                               "would mix old and new load")
        try:
            self.freshness(at_s - self.prom.warmup_s)
        except MetricsError as exc:
            if exc.reason != "MetricsMissing":
                raise
            raise MetricsError("MetricsWarmingUp", f"the load series is younger than the warmup "
                                                   f"({self.prom.warmup_s:.0f} s): a rate "
                                                   "over a window reaching back before the "
                                                   "series began is underestimated, so it is "
                                                   "not yet a measurement") from exc
        read = self.scalar("readRps", at_s)
        write = self.scalar("writeRps", at_s)
        # Swift's exporters have none: the operator reads the pods (NaN until then)
        data = self.scalar("dataBytes", at_s) if self.prom.defines("dataBytes") else math.nan
        try:
            migration: float | None = self.scalar("migrationMiBps", at_s)
        except MetricsError as exc:
            if exc.reason == "PrometheusUnreachable":
                raise
            migration = None  # only shown in the status
        load = read + write
        self._own_load(at_s, load)
        end = history_end(at_s, step_s)
        return Snapshot(at_s=at_s, load_rps=load, read_ratio=read / load if load > 0 else 1.0,
                        data_bytes=data, migration_mibps=migration,
                        history_rps=self.history(end, steps, step_s), step_s=step_s,
                        nodes=len(nodes), history_end_s=end)

    def _own_load(self, at_s: float, load: float) -> None:
        """A custom ``readRps``/``writeRps`` is checked against the preset's per-pod
        queries, scoped to the target: a total above what the target's own pods serve (10 %
        and 1 request/s of slack for the rates' different instants) counts other pods
        (an unscoped query, shared by two policies, counts each one's pods in the other's)
        or counts a pod twice. Without a pod label, or with custom per-pod queries, there
        is nothing to check against."""
        custom = [n for n in ("readRps", "writeRps") if n in self.prom.queries]
        if not custom or not self.prom.pod_label or \
                any(n in self.prom.queries for n in ("nodeReadRps", "nodeWriteRps")):
            return
        own = sum(v for name in ("nodeReadRps", "nodeWriteRps")
                  for pod, v in self.vector(name, at_s).items()
                  if self.prom.own_pod(self.target, pod))
        if load > own * 1.1 + 1.0:
            raise MetricsError("MetricsForeignLoad", f"{' and '.join(custom)} give "
                               f"{load:,.1f} requests/s, the target's own pods "
                               f"{own:,.1f}: the custom query counts other pods, or a pod "
                               "twice; scope it to the target's pods")

    def _by(self, name: str, at_s: float, label: str, pvc_template: str) -> dict[str, float]:
        """A per-PVC query's finite, non-negative values by ``label`` (missing: left out)."""
        q = self.prom.query(name, self.namespace, self.target, pvc_template)
        result = self._call(self.client.custom_query, q, params={"time": at_s})
        out: dict[str, float] = {}
        for series in result if isinstance(result, list) else []:
            labels = series.get("metric") or {} if isinstance(series, dict) else {}
            key = str(labels.get(label, ""))
            v = _sample(series, name)
            if key and math.isfinite(v) and v >= 0:
                out[key] = v
        return out

    def disk(self, at_s: float, steps: int, step_s: float,
             pvc_template: str | None = None) -> DiskReading:
        """The kubelet's volume stats by pod where Prometheus has them for the target's data
        PVCs (``<pvc_template>-<pod>``: another StatefulSet's, or the pod's other volumes,
        never count), else the store's own per-node bytes (``nodeDataBytes``)."""
        used: dict[str, float] = {}
        if pvc_template:
            try:
                used = self._by("nodeVolumeUsedBytes", at_s, "persistentvolumeclaim",
                                pvc_template)
            except MetricsError as exc:
                if exc.reason != "MetricsMissing":
                    raise
        if used and pvc_template:
            cap = self._by("nodeVolumeCapacityBytes", at_s, "persistentvolumeclaim",
                           pvc_template)
            by_pod, caps = {}, {}
            for pvc, v in used.items():
                pod = self.prom.pvc_pod(self.target, pvc_template, pvc)
                if pod is not None:
                    by_pod[pod] = v
                    if pvc in cap:
                        caps[pod] = cap[pvc]
            if by_pod:
                q = self.prom.query("nodeVolumeUsedBytes", self.namespace, self.target,
                                    pvc_template)
                hist = self._range(f"sum({q})", at_s, steps, step_s, "volume bytes")
                return DiskReading("kubelet", by_pod, caps, hist)
        nodes = self.vector("nodeDataBytes", at_s)
        if not nodes:
            raise MetricsError("MetricsMissing", "bytes per node: neither the kubelet's volume "
                                                 "stats nor the store's own figure "
                                                 f"({self.query('nodeDataBytes')!r}) has a "
                                                 "series for the target")
        hist = self._range(f"sum({self.query('nodeDataBytes')})", at_s, steps, step_s,
                           "data bytes")
        return DiskReading("store", nodes, {}, hist)

    def _range(self, inner: str, at_s: float, steps: int, step_s: float, what: str
               ) -> FloatArray:
        """``inner`` averaged over each of the last ``steps`` steps; NaN where none."""
        res = max(1, int(step_s // 10))
        q = f"avg_over_time(({inner})[{int(step_s)}s:{res}s])"
        start = at_s - (steps - 1) * step_s
        out = np.full(steps, np.nan)
        result = self._call(self.client.custom_query_range, q,
                            start_time=datetime.fromtimestamp(start, UTC),
                            end_time=datetime.fromtimestamp(at_s, UTC), step=f"{int(step_s)}s")
        if not result:
            return out
        if len(result) > 1:
            raise MetricsError("MetricsMissing", f"{what}: {q!r} returned {len(result)} series")
        for t, v in result[0].get("values", []):
            k = round((float(t) - start) / step_s)
            if 0 <= k < steps:
                x = float(v)
                out[k] = x if math.isfinite(x) and x >= 0 else np.nan
        return out

    def history(self, at_s: float, steps: int, step_s: float) -> FloatArray:
        """The client load averaged over each of the last ``steps`` steps (the last ends at
        ``at_s``); NaN where Prometheus has no data."""
        inner = f"({self.query('readRps')}) + ({self.query('writeRps')})"
        res = max(1, int(step_s // 10))
        q = f"avg_over_time(({inner})[{int(step_s)}s:{res}s])"
        start = at_s - (steps - 1) * step_s
        out = np.full(steps, np.nan)
        result = self._call(self.client.custom_query_range, q,
                            start_time=datetime.fromtimestamp(start, UTC),
                            end_time=datetime.fromtimestamp(at_s, UTC), step=f"{int(step_s)}s")
        if not result:
            return out
        if len(result) > 1:
            raise MetricsError("MetricsMissing", f"history: {q!r} returned {len(result)} "
                                                 "series; readRps and writeRps must each "
                                                 "aggregate to one (use sum())")
        for t, v in result[0].get("values", []):
            k = round((float(t) - start) / step_s)
            if 0 <= k < steps:
                x = float(v)
                out[k] = x if math.isfinite(x) and x >= 0 else np.nan
        return mask_warmup(out, step_s, self.prom.warmup_s)


def mask_warmup(history: FloatArray, step_s: float, warmup_s: float) -> FloatArray:
    """When the series begins inside the history (a leading run of NaN), its first
    ``warmup_s`` of rates are underestimates (the rate window reaches back before the first
    sample): they become NaN too. The same on both edges of a gap inside the history at
    least ``warmup_s`` long (Prometheus down, the scrape failing): the last rates before it
    reach forward past the last sample, the first after it back into the gap, and both
    read as a ramp to a fraction of the load (issue 39: after a 10-min outage those ramps
    made the forecast's upper scenario 4 times the load, and the plan scaled out). A
    shorter hole is not a new beginning; a history full from its first step is kept."""
    out = np.array(history, dtype=float)
    n = math.ceil(warmup_s / step_s)
    finite = np.isfinite(out)
    size = len(out)
    i = 0
    while i < size:
        if finite[i]:
            i += 1
            continue
        j = i
        while j < size and not finite[j]:
            j += 1
        # a run of NaN over [i, j): the series begins at j, or stops at i and comes back
        if i == 0 or (j - i) * step_s >= warmup_s:
            if i > 0:
                out[max(0, i - n):i] = np.nan
            out[j:j + n] = np.nan
        i = j
    return out


def prometheus_source(spec: PolicySpec, namespace: str, read: Reader | None = None,
                      allowed_urls: tuple[str, ...] | None = None) -> MetricsSource:
    """The policy's Prometheus; ``read`` resolves the Secrets and ConfigMaps its
    credentials name (without it a policy that names any is an error); ``allowed_urls``:
    the installer's endpoint patterns (:mod:`elastore.operator.endpoints`; None: any)."""
    from elastore.operator import endpoints

    if spec.prometheus is None:
        raise MetricsError("NoMetrics", "spec.metrics.prometheus is not set: there is "
                                        "nothing to forecast from")
    if allowed_urls is not None and not endpoints.allowed(spec.prometheus.url, allowed_urls):
        raise MetricsError("PrometheusNotAllowed", f"spec.metrics.prometheus.url "
                                                   f"{spec.prometheus.url} is not an endpoint "
                                                   "this operator may query (its installer's "
                                                   "--prometheus-url, the chart's prometheus."
                                                   "allowedUrls): nothing is fetched")
    cred = None
    if spec.prometheus.auth.any:
        if read is None:
            raise ElastoreError("spec.metrics.prometheus names credentials, and this "
                                "operator has no Kubernetes client to read them with")
        cred = resolve_credentials(spec.prometheus, namespace, read)
    return PrometheusSource(spec.prometheus, namespace, spec.target.name, credentials=cred)
