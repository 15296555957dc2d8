"""What the control loop observes, from Prometheus (prometheus-api-client).

A missing, empty, NaN or stale series is a :class:`MetricsError` with a reason the status
shows (``PrometheusUnreachable``, ``MetricsMissing``, ``MetricsStale``,
``PrometheusError``): never a zero. The loop then decides nothing, so no scale-in happens
on missing data and every scale-out rests on evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError, MetricsError
from elastore.operator.spec import PolicySpec, Prometheus

FloatArray = npt.NDArray[np.float64]
__all__ = ["MetricsError", "MetricsSource", "NodeReading", "PrometheusSource", "Snapshot",
           "mask_warmup"]


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
        self.client = PrometheusConnect(url=prom.url, headers=headers, auth=cred.basic,
                                        retry=Retry(total=1, backoff_factor=0.2),
                                        session=session, timeout=int(max(1, timeout_s)))

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
        """Instant values at ``at_s`` and the load over the last ``steps`` steps."""
        nodes = self.freshness(at_s)
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
        return Snapshot(at_s=at_s, load_rps=load, read_ratio=read / load if load > 0 else 1.0,
                        data_bytes=data, migration_mibps=migration,
                        history_rps=self.history(at_s, steps, step_s), step_s=step_s,
                        nodes=len(nodes))

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
    sample): they become NaN too. A history that is full from its first step is kept."""
    out = np.array(history, dtype=float)
    finite = np.flatnonzero(np.isfinite(out))
    if finite.size == 0 or finite[0] == 0:
        return out
    first = int(finite[0])
    out[first:first + math.ceil(warmup_s / step_s)] = np.nan
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
