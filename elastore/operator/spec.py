"""The ``ElasticPolicy`` spec as typed, unit-explicit settings. Pure.

The API server enforces the CRD's schema, defaults and CEL rules
(``charts/elastore/crds/elasticpolicies.elastore.io.yaml``, generated from the declarations
in :mod:`elastore.operator.specfields`); :func:`parse` applies the same defaults and checks
again, read from the same declarations, so that the control loop never runs on a spec it
misreads (an object written before a CRD upgrade, or a spec handed to it by a test or the
CLI).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from elastore.errors import ElastoreError, MetricsError
from elastore.models.storage import StorageConfig
from elastore.operator.fielddecl import ABSENT, span
from elastore.operator.presets import DEFAULT_PRESET, PRESETS, QUERY_NAMES, default_preset
from elastore.operator.skew import SkewSettings
from elastore.operator.specfields import (
    BUILTIN_PERCENTILES,
    PERCENTILE_RULE,
    declared,
    default,
    unknown_fields,
)
from elastore.planner.behavior import Behavior, ScalingPolicy, ScalingRules
from elastore.predictor.registry import DEFAULT_METHOD
from elastore.stores.cassandra import spec as cassandra_spec
from elastore.stores.registry import entry, served
from elastore.stores.swift import spec as swift_spec
from elastore.stores.swift.spec import SwiftTarget

GROUP = "elastore.io"
VERSION = "v1alpha1"
PLURAL = "elasticpolicies"
KIND = "ElasticPolicy"

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_ARG = re.compile(r"^[A-Za-z0-9_./+-]{1,256}$")  # the CRD's pattern for a nodetool word
_CONTAINER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

#: PromQL for Cassandra's JMX exporter with the lab's configuration (preset
#: ``jmx-exporter``, the default); :mod:`elastore.operator.presets` has every preset.
DEFAULT_QUERIES = PRESETS[DEFAULT_PRESET].queries()

#: every query a policy may set in ``spec.metrics.prometheus.queries``
KNOWN_QUERIES = QUERY_NAMES

#: queries without a default (none since the node agent exports the interference index)
OPTIONAL_QUERIES: tuple[str, ...] = ()


#: the ports BwMan tells a store's client traffic from its storage traffic by, per store
#: (``spec.bandwidth.clientPorts`` / ``storagePorts`` when absent): Cassandra's native
#: protocol; its inter-node messaging and streaming, plain and TLS. Swift: the object,
#: container and account servers the proxy calls; the replicators' rsync (their data path).
DEFAULT_PORTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "cassandra": (cassandra_spec.CLIENT_PORTS, cassandra_spec.STORAGE_PORTS),
    "swift": (swift_spec.CLIENT_PORTS, swift_spec.STORAGE_PORTS),
}
#: ``spec.bandwidth.nodeMbit`` must exceed this: BwMan keeps a gossip margin for the storage
#: class and a floor for the clients (:class:`~elastore.planner.bwman.BwManConfig`)
MIN_NODE_MBIT = float(declared("spec.bandwidth.nodeMbit").minimum or 0)
MAX_NODE_MBIT = float(declared("spec.bandwidth.nodeMbit").maximum or 0)  # 1 Tbit/s
MAX_PORTS = int(declared("spec.bandwidth.clientPorts").max_items or 0)


class SpecError(ElastoreError):
    """An ElasticPolicy spec that cannot be acted on; ``where`` is the field path."""


def promql_duration(seconds: float) -> str:
    """Whole seconds as a PromQL range: ``60`` -> ``1m``, ``90`` -> ``90s``."""
    s = int(seconds)
    return f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def parse_duration(text: str, where: str) -> float:
    """``"10m"``, ``"1h30m"``, ``"500ms"`` -> seconds (Kubernetes/Go duration subset)."""
    if not isinstance(text, str) or not _DURATION.match(text.strip()):
        raise SpecError(f"not a duration: {text!r} (e.g. 30s, 10m, 1h30m)", where)
    return sum(float(n) * _UNIT_S[u] for n, u in _PART.findall(text.strip()))


TARGET_KINDS: tuple[str, ...] = declared("spec.target.kind").enum or ()


@dataclass(frozen=True)
class Target:
    name: str
    replication_factor: int
    kind: str = "StatefulSet"
    store: str = "cassandra"
    container: str = "cassandra"
    nodetool: tuple[str, ...] = ("nodetool",)
    swift: SwiftTarget = field(default_factory=SwiftTarget)


@dataclass(frozen=True)
class KeyRef:
    """A key of a Secret or ConfigMap in the policy's own namespace."""

    name: str
    key: str


@dataclass(frozen=True)
class PrometheusAuth:
    """How to reach a Prometheus that asks for credentials or serves its own CA (the names
    of the Prometheus Operator's endpoint settings: ``bearerTokenSecret``, ``basicAuth``,
    ``tlsConfig``). Secrets are read from the policy's namespace only, and only when they
    carry the label :data:`CREDENTIALS_LABEL` (a policy's author cannot point the operator
    at any Secret of the namespace and send it to a URL of their choosing)."""

    bearer_token: KeyRef | None = None
    username: KeyRef | None = None
    password: KeyRef | None = None
    ca_secret: KeyRef | None = None
    ca_configmap: KeyRef | None = None
    insecure_skip_verify: bool = False

    @property
    def any(self) -> bool:
        return any((self.bearer_token, self.username, self.ca_secret, self.ca_configmap,
                    self.insecure_skip_verify))


#: the label a Secret must carry for the operator to send it to a Prometheus
CREDENTIALS_LABEL = "elastore.io/prometheus-credentials"


@dataclass(frozen=True)
class Prometheus:
    url: str
    stale_after_s: float = 120.0
    #: how old the load series must be before its rate is a measurement: a rate over a
    #: window that reaches back before the series began is underestimated by Prometheus
    #: (by default the rate window)
    warmup_s: float = 60.0
    #: the range of every rate() in the preset's queries (Prometheus's advice: at least
    #: four scrape intervals)
    rate_window_s: float = 60.0
    selector: str = ""
    queries: dict[str, str] = field(default_factory=dict)
    #: the labels Prometheus's Kubernetes discovery gives every series (kube-prometheus:
    #: ``namespace``, ``pod``); "" drops that part of the scope
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    #: the SLO's percentile: which latency percentile ``latencyMs`` reads
    percentile: int = 95
    #: which exporter's metric names the default queries use
    preset: str = DEFAULT_PRESET
    #: the target's replication factor (a preset that counts replica writes divides by it)
    replication_factor: int = 3
    auth: PrometheusAuth = field(default_factory=lambda: PrometheusAuth())
    #: the target's pod names as a PromQL regex, ``{name}`` its name (its store's
    #: :attr:`~elastore.stores.registry.Store.pods`)
    pod_regex: str = "{name}-[0-9]+"

    def scope(self, namespace: str, target: str) -> str:
        """The label matchers that keep the default queries to the target's own pods."""
        parts = []
        if self.namespace_label:
            parts.append(f'{self.namespace_label}="{namespace}"')
        if self.pod_label:
            # a StatefulSet's name is a DNS subdomain: "." is its only regex character
            # (escaped once for the regex, once for PromQL's string)
            name = target.replace(".", chr(92) * 2 + ".")
            parts.append(f'{self.pod_label}=~"{self.pod_regex.format(name=name)}"')
        if self.selector:
            parts.append(self.selector)
        return ",".join(parts)

    def pvc_scope(self, namespace: str, target: str, template: str | None) -> str:
        """The matchers of the kubelet's volume stats for the target's data PVCs,
        ``<template>-<pod>`` (the kubelet labels them ``namespace`` itself); with no
        template, a matcher that matches nothing (the kubelet's figures are not used)."""
        if not template:
            return f'namespace="{namespace}",persistentvolumeclaim=""'
        name = target.replace(".", chr(92) * 2 + ".")
        tmpl = template.replace(".", chr(92) * 2 + ".")
        pods = self.pod_regex.format(name=name)
        return f'namespace="{namespace}",persistentvolumeclaim=~"{tmpl}-{pods}"'

    def pvc_pod(self, target: str, template: str, pvc: str) -> str | None:
        """The pod a data PVC of the target belongs to (``<template>-<pod>``), or None."""
        m = re.fullmatch(f"{re.escape(template)}-({self.pod_regex.format(name=re.escape(target))})",
                         pvc)
        return m.group(1) if m else None

    def own_pod(self, target: str, pod: str) -> bool:
        """Whether ``pod`` is one of the target's (its store's pod-name pattern)."""
        return re.fullmatch(self.pod_regex.format(name=re.escape(target)), pod) is not None

    def defines(self, name: str) -> bool:
        """Whether ``name`` has a query (the spec's own or the preset's)."""
        return name in self.queries or name in PRESETS[self.preset].queries()

    def query(self, name: str, namespace: str, target: str,
              pvc_template: str | None = None) -> str:
        """The PromQL for ``name``: the spec's own, else the preset's, scoped to the
        target. A quantity the preset's exporter does not have (streaming, for some) is a
        :class:`MetricsError` (``MetricsMissing``): absent, never 0."""
        if name in self.queries:
            return self.queries[name]
        if name not in QUERY_NAMES:
            raise SpecError(f"no query {name!r} in spec.metrics.prometheus.queries",
                            "spec.metrics.prometheus.queries")
        templates = PRESETS[self.preset].queries()
        if name not in templates:
            raise MetricsError("MetricsMissing", f"{name}: the {self.preset} exporter has no "
                                                 "such metric (set spec.metrics.prometheus."
                                                 f"queries.{name} if yours has)")
        sel = self.scope(namespace, target)
        # by pod and scrape job: a pod scraped twice (a PodMonitor and a ServiceMonitor)
        # shows as two series of one pod, which the freshness check refuses (its load would
        # be summed twice)
        by = f"max by ({self.pod_label}, job) " if self.pod_label else ""
        return templates[name].format(selector="," + sel if sel else "", selector_=sel,
                                      pvcscope=self.pvc_scope(namespace, target,
                                                              pvc_template),
                                      by=by, scope=sel, pod=self.pod_label,
                                      podle=f"{self.pod_label}, le" if self.pod_label else "le",
                                      pct=self.percentile, q=f"0.{self.percentile}",
                                      rf=self.replication_factor,
                                      window=promql_duration(self.rate_window_s))


@dataclass(frozen=True)
class PolicySpec:
    target: Target
    min_replicas: int
    max_replicas: int
    slo_latency_ms: float
    slo_percentile: int = 95
    control_period_s: float = 600.0
    mode: str = "Recommend"
    prediction_method: str = DEFAULT_METHOD
    prediction_horizon_s: float = 600.0
    prediction_step_s: float = 3600.0
    headroom: float = 0.1
    #: ``spec.prediction.calibrationSteps``: the origins whose forecast errors calibrate
    #: the horizon planner's quantile scenarios (how long a past surprise widens them)
    calibration_steps: int = 336
    planner_mode: str = "Horizon"
    lookahead_s: float = 86400.0
    violation_penalty: float = 100.0
    migration_policy: str = "PreferClients"
    min_migration_mibps: float = 1.0
    max_migration_mibps: float = 24.0
    node_overhead_s: float = 120.0
    model_configmap: str | None = None
    model_key: str = "model.json"
    #: ``spec.capacityModel.learn``: calibrate the capacity model online from the store's
    #: own per-node latencies (default: on when no ``configMapRef`` is given)
    learn: bool = True
    #: the prior's capacity factor when learning: the built-in profile times 0.5 by default
    #: (a conservative guess for unknown hardware), a ``configMapRef`` model times 1.0
    prior_scale: float = 0.5
    #: below this confidence in the learned border, Enforce only scales out
    confidence_threshold: float = 0.8
    #: how far past the highest load seen within the SLO the plan may go (a fraction)
    #: until the border has been observed
    exploration_step: float = 0.15
    prometheus: Prometheus | None = None
    #: ``spec.interference.enabled``: None (absent) is Auto, the index when the agent's
    #: series exist for the target's pods, blind (and said) when not; True: the index or no
    #: decision; False: blind
    interference: bool | None = None
    stabilization_s: float = 300.0
    pvc_policy: str = "Retain"
    #: ``spec.scaleUp.cleanup``: ``nodetool cleanup`` on the old nodes after each scale-out
    #: (Cassandra), one at a time, throttled to the migration rate
    cleanup: bool = True
    #: ``spec.repairs.hold``: no topology change starts while a node shows a repair,
    #: unless the forecast puts the SLO at risk
    hold_for_repairs: bool = True
    min_free_fraction: float = 0.2
    #: room kept for compaction's temporary copies, as a fraction of a node's load
    compaction_margin: float = 0.5
    #: ``spec.scaleDown.minFreeFraction`` / ``compactionMargin`` set explicitly: the
    #: free-space check keeps their rule; else it uses ``storage``'s budget
    legacy_free_space: bool = False
    #: ``spec.storage`` and ``spec.cost``'s prices: the bytes' budget and what a grown
    #: volume costs against a node
    storage: StorageConfig = field(default_factory=StorageConfig)
    #: Mbit/s, the link total per node BwMan splits between clients and storage
    #: (``spec.bandwidth.nodeMbit``, configured, not measured); None: no split
    node_mbit: float | None = None
    client_ports: tuple[int, ...] = DEFAULT_PORTS["cassandra"][0]
    storage_ports: tuple[int, ...] = DEFAULT_PORTS["cassandra"][1]
    #: ``spec.behavior``: the HPA's scaling policies (:mod:`elastore.planner.behavior`)
    behavior: Behavior = field(default_factory=Behavior)
    #: ``spec.fallback``: consecutive failed observations before the fallback is in force,
    #: and what it allows then (``freeze``: nothing; ``currentReplicasIfHigher``: the scale-
    #: outs the last trustworthy plan wants; never a scale-in)
    fallback_threshold: int = 3
    fallback_behavior: str = "freeze"
    #: ``spec.skew``: the skew view, its advice and (Auto, later) its actions
    skew: SkewSettings = field(default_factory=SkewSettings)

    @property
    def stale_after_s(self) -> float:
        """How old metrics (and so a decision made on them) may be: a scale-in starts only
        on a decision younger than this (``spec.metrics.prometheus.staleAfter``)."""
        return self.prometheus.stale_after_s if self.prometheus is not None else \
            Prometheus.stale_after_s

    @property
    def enforce(self) -> bool:
        return self.mode == "Enforce"


def _get(d: Any, key: str, default: Any, where: str) -> Any:
    if d is None:
        return default
    if not isinstance(d, dict):
        raise SpecError("must be an object", where)
    return d.get(key, default)


def _num(v: Any, where: str, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False, integer: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SpecError(f"must be a number, got {v!r}", where)
    if integer and int(v) != v:
        raise SpecError(f"must be an integer, got {v!r}", where)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise SpecError(f"must be {'>' if lo_open else '>='} {lo:g}, got {v!r}", where)
    if hi is not None and v > hi:
        raise SpecError(f"must be <= {hi:g}, got {v!r}", where)
    return float(v)


_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _label(p: dict[str, Any], key: str, default: str) -> str:
    """A Prometheus label name, or "" (that part of the default queries' scope is off)."""
    v = p.get(key, default)
    if not isinstance(v, str) or (v and not _LABEL.match(v)):
        raise SpecError(f"must be a Prometheus label name or \"\", got {v!r}",
                        f"spec.metrics.prometheus.{key}")
    return v


def _enum(v: Any, allowed: tuple[str, ...], where: str) -> str:
    if v not in allowed:
        raise SpecError(f"must be one of {', '.join(allowed)}, got {v!r}", where)
    return str(v)


def _number(v: Any, where: str, decl: str | None = None) -> float:
    """:func:`_num` with the bounds the field's declaration (``decl``, default ``where``)
    gives it: its minimum (open or closed), maximum, and whether it is an integer."""
    f = declared(decl or where)
    return _num(v, where, f.minimum, f.maximum, lo_open=f.open_min, integer=f.type == "integer")


def _choice(v: Any, where: str, decl: str | None = None) -> str:
    """:func:`_enum` with the values the field's declaration allows."""
    return _enum(v, declared(decl or where).enum or (), where)


def _seconds(obj: Any, path: str, value: Any = ABSENT) -> float:
    """The duration field ``path`` of ``obj`` (or ``value`` as that field), else its declared
    default, in seconds, within its declared bounds (:attr:`F.seconds`)."""
    f = declared(path)
    text = _get(obj, f.name, None if f.default is ABSENT else default(path), f.parent) \
        if value is ABSENT else value
    got = parse_duration(text, path)
    if f.seconds is not None and not f.seconds[0] <= got <= f.seconds[1]:
        raise SpecError(f"must be between {span(f.seconds[0])} and {span(f.seconds[1])}, "
                        f"got {text!r}", path)
    return got


def _storage(obj: Any, cost: Any) -> StorageConfig:
    """``spec.storage`` with ``spec.cost``'s prices."""
    if obj is not None and not isinstance(obj, dict):
        raise SpecError("must be an object", "spec.storage")
    expand = _read(obj, "spec.storage.expandVolumes")
    if not isinstance(expand, bool):
        raise SpecError(f"must be true or false, got {expand!r}", "spec.storage.expandVolumes")
    cap = _read(obj, "spec.storage.maxVolumeSize")
    max_bytes = None
    if cap is not None:
        from elastore.actuators.k8s import parse_quantity

        try:
            max_bytes = parse_quantity(str(cap))
        except ValueError:
            raise SpecError(f"not a quantity: {cap!r}", "spec.storage.maxVolumeSize") from None
        if not max_bytes > 0:
            raise SpecError(f"must be > 0, got {cap!r}", "spec.storage.maxVolumeSize")
    out = StorageConfig(target_utilization=_read(obj, "spec.storage.targetUtilization"),
                        compaction=_read(obj, "spec.storage.compaction"),
                        expand_volumes=expand, max_volume_bytes=max_bytes,
                        node_hour_cost=_read(cost, "spec.cost.nodeHour"),
                        gib_month_cost=_read(cost, "spec.cost.gibMonth"))
    try:
        out.validate()
    except ElastoreError as exc:
        raise SpecError(str(exc), "spec.storage") from None
    return out


def _read(obj: Any, path: str) -> Any:
    """The field ``path`` of ``obj`` (the object at ``path``'s parent; None: absent), else its
    declared default; a number checked against its declared bounds, a string against its
    declared enum, anything else as it is."""
    f = declared(path)
    v = _get(obj, f.name, None if f.default is ABSENT else default(path), f.parent)
    if f.type in ("number", "integer"):
        return _number(v, path)
    if f.enum is not None:
        return _choice(v, path)
    return v


def _ports(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not 1 <= len(v) <= MAX_PORTS:
        raise SpecError(f"must be a list of 1 to {MAX_PORTS} port numbers, got {v!r}", where)
    for p in v:
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
            raise SpecError(f"{p!r} is not a port number (an integer in 1..65535)", where)
    if len(set(v)) != len(v):
        raise SpecError(f"lists a port twice: {v}", where)
    return tuple(v)




def _bandwidth(b: Any, store: str) -> tuple[float | None, tuple[int, ...], tuple[int, ...]]:
    """``spec.bandwidth``: the link total per node (None: no split) and the ports that tell
    client from storage traffic (the store's defaults when absent)."""
    if b is None:
        b = {}
    if not isinstance(b, dict):
        raise SpecError("must be an object", "spec.bandwidth")
    node = b.get("nodeMbit")
    mbit = None if node is None else _number(node, "spec.bandwidth.nodeMbit")
    default = DEFAULT_PORTS.get(store)
    ports: list[tuple[int, ...]] = []
    for k, key in enumerate(("clientPorts", "storagePorts")):
        where = f"spec.bandwidth.{key}"
        if key in b:
            ports.append(_ports(b[key], where))
        elif default is not None:
            ports.append(default[k])
        elif mbit is not None:
            raise SpecError(f"has no default for store {store}: name the ports whose traffic "
                            "BwMan splits", where)
        else:
            ports.append(())
    both = sorted(set(ports[0]) & set(ports[1]))
    if both:
        raise SpecError(f"clientPorts and storagePorts must be disjoint: {both} in both "
                        f"(client {list(ports[0])}, storage {list(ports[1])})", "spec.bandwidth")
    return mbit, ports[0], ports[1]


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _keyref(v: Any, where: str) -> KeyRef:
    if not isinstance(v, dict):
        raise SpecError("must be an object with name and key", where)
    name, key = v.get("name"), v.get("key")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 253:
        raise SpecError(f"name must be a Kubernetes object name, got {name!r}", where)
    if not isinstance(key, str) or not _KEY.match(key) or len(key) > 253:
        raise SpecError(f"key must be a Secret/ConfigMap key, got {key!r}", where)
    return KeyRef(name, key)


def _auth(p: dict[str, Any], url: str) -> PrometheusAuth:
    """``bearerTokenSecret``, ``basicAuth`` and ``tlsConfig`` of spec.metrics.prometheus."""
    where = "spec.metrics.prometheus"
    token = p.get("bearerTokenSecret")
    basic = p.get("basicAuth")
    tls = p.get("tlsConfig")
    if token is not None and basic is not None:
        raise SpecError("bearerTokenSecret and basicAuth are exclusive: choose one", where)
    out: dict[str, Any] = {}
    if token is not None:
        out["bearer_token"] = _keyref(token, f"{where}.bearerTokenSecret")
    if basic is not None:
        if not isinstance(basic, dict):
            raise SpecError("must be an object with username and password", f"{where}.basicAuth")
        out["username"] = _keyref(basic.get("username"), f"{where}.basicAuth.username")
        out["password"] = _keyref(basic.get("password"), f"{where}.basicAuth.password")
    if tls is not None:
        if not isinstance(tls, dict):
            raise SpecError("must be an object", f"{where}.tlsConfig")
        if not url.startswith("https://"):
            raise SpecError("tlsConfig needs an https:// URL", f"{where}.tlsConfig")
        skip = _read(tls, "spec.metrics.prometheus.tlsConfig.insecureSkipVerify")
        if not isinstance(skip, bool):
            raise SpecError(f"must be true or false, got {skip!r}",
                            f"{where}.tlsConfig.insecureSkipVerify")
        ca = tls.get("ca")
        if ca is not None:
            if skip:
                raise SpecError("a CA and insecureSkipVerify together: the CA would be "
                                "ignored; choose one", f"{where}.tlsConfig")
            if not isinstance(ca, dict) or len(ca) != 1 or not (
                    "secret" in ca or "configMap" in ca):
                raise SpecError("must name exactly one of secret or configMap",
                                f"{where}.tlsConfig.ca")
            if "secret" in ca:
                out["ca_secret"] = _keyref(ca["secret"], f"{where}.tlsConfig.ca.secret")
            else:
                out["ca_configmap"] = _keyref(ca["configMap"],
                                              f"{where}.tlsConfig.ca.configMap")
        out["insecure_skip_verify"] = skip
    if (token is not None or basic is not None) and not url.startswith("https://"):
        raise SpecError("credentials are sent only over https:// (the URL is "
                        f"{url!r})", where)
    return PrometheusAuth(**out)


FALLBACK_BEHAVIORS: tuple[str, ...] = declared("spec.fallback.behavior").enum or ()
MAX_POLICIES = int(declared("spec.behavior.scaleUp.policies").max_items or 0)


def _rules(r: Any, where: str) -> tuple[ScalingRules, float | None]:
    """One direction of ``spec.behavior``, and its stabilization window (None: not set)."""
    if r is None:
        return ScalingRules(), None
    if not isinstance(r, dict):
        raise SpecError("must be an object", where)
    unknown = sorted(set(r) - {"policies", "selectPolicy", "stabilizationWindowSeconds"})
    if unknown:
        raise SpecError(f"unknown field(s) {', '.join(unknown)} (known: policies, "
                        "selectPolicy, stabilizationWindowSeconds)", where)
    select = _read(r, f"{where}.selectPolicy")
    raw = r.get("policies", [])
    if not isinstance(raw, list) or len(raw) > MAX_POLICIES:
        raise SpecError(f"must be a list of at most {MAX_POLICIES} policies", f"{where}.policies")
    policies = []
    for k, p in enumerate(raw):
        at = f"{where}.policies[{k}]"
        if not isinstance(p, dict):
            raise SpecError("must be an object with type, value and periodSeconds", at)
        kind = _choice(p.get("type"), f"{at}.type", f"{where}.policies[].type")
        value = int(_num(p.get("value"), f"{at}.value", 1, 1000 if kind == "Pods" else 10000,
                         integer=True))
        period = _number(p.get("periodSeconds"), f"{at}.periodSeconds",
                         f"{where}.policies[].periodSeconds")
        policies.append(ScalingPolicy(kind, value, period))  # type: ignore[arg-type]
    window = r.get("stabilizationWindowSeconds")
    stab = None if window is None else _num(window, f"{where}.stabilizationWindowSeconds", 0,
                                            86400, integer=True)
    return ScalingRules(tuple(policies), select), stab


def _behavior(b: Any, down: dict[str, Any]) -> tuple[Behavior, float]:
    """``spec.behavior`` and the scale-down stabilization window (``spec.behavior.scaleDown.
    stabilizationWindowSeconds``, the HPA's name, or ``spec.scaleDown.stabilizationSeconds``;
    both only if equal)."""
    if b is None:
        b = {}
    if not isinstance(b, dict):
        raise SpecError("must be an object", "spec.behavior")
    unknown = sorted(set(b) - {"scaleUp", "scaleDown"})
    if unknown:
        raise SpecError(f"unknown field(s) {', '.join(unknown)} (known: scaleUp, scaleDown)",
                        "spec.behavior")
    up, up_stab = _rules(b.get("scaleUp"), "spec.behavior.scaleUp")
    dn, dn_stab = _rules(b.get("scaleDown"), "spec.behavior.scaleDown")
    if up_stab:
        raise SpecError("must be 0: a scale-out follows the forecast's plan, which already "
                        "times it (set the headroom or the planner instead)",
                        "spec.behavior.scaleUp.stabilizationWindowSeconds")
    old = down.get("stabilizationSeconds")
    old_s = None if old is None else _number(old, "spec.scaleDown.stabilizationSeconds")
    if old_s is not None and dn_stab is not None and old_s != dn_stab:
        raise SpecError(f"spec.scaleDown.stabilizationSeconds ({old_s:g}) and spec.behavior."
                        f"scaleDown.stabilizationWindowSeconds ({dn_stab:g}) disagree: set one",
                        "spec.behavior.scaleDown.stabilizationWindowSeconds")
    stab = dn_stab if dn_stab is not None else old_s if old_s is not None else 300.0
    return Behavior(up, dn), stab


_SKEW_FIELDS = {"mode": "mode", "maxMovePercent": "max_move_percent",
                "readSpread": "read_spread", "imbalanceThreshold": "imbalance_threshold",
                "triggerPercent": "trigger_percent", "stopPercent": "stop_percent",
                "revertPercent": "revert_percent"}


def _skew(obj: Any) -> SkewSettings:
    """``spec.skew``: absent fields are :class:`SkewSettings`' defaults (the CRD declares
    none); the hysteresis' thresholds in order."""
    if obj is None:
        return SkewSettings()
    if not isinstance(obj, dict):
        raise SpecError("must be an object", "spec.skew")
    known = (*_SKEW_FIELDS, "sampleInterval", "sampleDuration")
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise SpecError(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(known)})",
                        "spec.skew")
    got: dict[str, Any] = {}
    for key, attr in _SKEW_FIELDS.items():
        if key in obj:
            path = f"spec.skew.{key}"
            got[attr] = _choice(obj[key], path) if declared(path).enum is not None else \
                _number(obj[key], path)
    for key, attr in (("sampleInterval", "sample_interval_s"),
                      ("sampleDuration", "sample_duration_s")):
        if key in obj:
            got[attr] = _seconds(obj, f"spec.skew.{key}")
    out = SkewSettings(**got)
    if not out.revert_percent <= out.stop_percent <= out.trigger_percent:
        raise SpecError(f"revertPercent ({out.revert_percent:g}) <= stopPercent "
                        f"({out.stop_percent:g}) <= triggerPercent ({out.trigger_percent:g}) "
                        "must hold", "spec.skew")
    return out


def _fallback(f: Any) -> tuple[int, str]:
    if f is None:
        return default("spec.fallback.failureThreshold"), default("spec.fallback.behavior")
    if not isinstance(f, dict):
        raise SpecError("must be an object", "spec.fallback")
    unknown = sorted(set(f) - {"failureThreshold", "behavior"})
    if unknown:
        hint = " (a store is never scaled to a fixed size on missing data)" \
            if "replicas" in unknown else ""
        raise SpecError(f"unknown field(s) {', '.join(unknown)}{hint} (known: "
                        "failureThreshold, behavior)", "spec.fallback")
    n = int(_read(f, "spec.fallback.failureThreshold"))
    return n, _read(f, "spec.fallback.behavior")


def parse(spec: Any, strict: bool = False) -> PolicySpec:
    """Defaults applied, every rule of the CRD checked again; :class:`SpecError` names the
    first field at fault. ``strict``: a field the schema does not declare is an error too,
    every such field named (:func:`~elastore.operator.specfields.unknown_fields`), as the
    API server's strict field validation refuses it; for a spec read from a file (the
    objects the operator reads went through the API server, which kept none)."""
    if not isinstance(spec, dict):
        raise SpecError("the spec must be an object", "spec")
    if strict and (unknown := unknown_fields(spec)):
        raise SpecError(", ".join(f'unknown field "{p}"' for p in unknown) + " (the "
                        "ElasticPolicy schema has no such field: misspelt? kubectl "
                        "explain elasticpolicy.spec lists them)", "spec")
    t = spec.get("target")
    if not isinstance(t, dict):
        raise SpecError("is required", "spec.target")
    name = t.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError("is required", "spec.target.name")
    rf = int(_read(t, "spec.target.replicationFactor"))
    nodetool = cassandra_spec.parse_nodetool(t)
    store = _read(t, "spec.target.store")
    container = t.get("container", store)
    if not isinstance(container, str) or not _CONTAINER.match(container):
        raise SpecError(f"not a container name: {container!r}", "spec.target.container")
    if not _NAME.match(name) or len(name) > 253:
        raise SpecError(f"not a Kubernetes object name: {name!r}", "spec.target.name")
    target = Target(
        name=name, replication_factor=rf,
        kind=_read(t, "spec.target.kind"),
        store=store, container=container, nodetool=nodetool,
        swift=swift_spec.parse(t.get("swift"), store))
    served_as = entry(target.store, target.kind)
    if served_as is None:
        raise SpecError(f"no store driver serves store {target.store!r} as {target.kind}; "
                        f"these are served: {served()}", "spec.target.store")
    r = spec.get("replicas")
    if not isinstance(r, dict):
        raise SpecError("is required", "spec.replicas")
    lo = int(_read(r, "spec.replicas.min"))
    hi = int(_read(r, "spec.replicas.max"))
    if lo > hi:
        raise SpecError(f"min ({lo}) must be <= max ({hi})", "spec.replicas")
    if lo < rf:
        raise SpecError(f"replicas.min ({lo}) must be >= target.replicationFactor ({rf})",
                        "spec.replicas.min")
    slo = spec.get("slo")
    if not isinstance(slo, dict):
        raise SpecError("is required", "spec.slo")
    latency = _read(slo, "spec.slo.latencyMs")
    pct = int(_number(slo.get("percentile", default("spec.slo.percentile")),
                      "spec.slo.percentile"))
    percentiles = declared("spec.slo.percentile").enum or ()
    if pct not in percentiles:
        raise SpecError(f"must be one of {', '.join(map(str, percentiles))}, got {pct}",
                        "spec.slo.percentile")
    period = _seconds(spec, "spec.controlPeriod")
    mode = _read(spec, "spec.mode")
    pred = spec.get("prediction") or {}
    method = _read(pred, "spec.prediction.method")
    horizon = _seconds(pred, "spec.prediction.horizon")
    step = _seconds(pred, "spec.prediction.step")
    if horizon < period:
        raise SpecError("prediction.horizon must be >= controlPeriod: each period plans at "
                        "least until the next", "spec.prediction.horizon")
    headroom = _read(pred, "spec.prediction.headroom")
    calibration = int(_read(pred, "spec.prediction.calibrationSteps"))
    plan_ = spec.get("planner") or {}
    planner_mode = _read(plan_, "spec.planner.mode")
    lookahead = _seconds(plan_, "spec.planner.lookahead")
    if lookahead < horizon:
        raise SpecError("planner.lookahead must be >= prediction.horizon",
                        "spec.planner.lookahead")
    penalty = _read(spec.get("cost"), "spec.cost.violationPenalty")
    mig = spec.get("migration") or {}
    policy = _read(mig, "spec.migration.policy")
    mn = _read(mig, "spec.migration.minMiBps")
    mx = _read(mig, "spec.migration.maxMiBps")
    if mn > mx:
        raise SpecError(f"minMiBps ({mn:g}) must be <= maxMiBps ({mx:g})", "spec.migration")
    overhead = _read(mig, "spec.migration.nodeOverheadSeconds")
    cmodel = spec.get("capacityModel") or {}
    cm = _get(cmodel, "configMapRef", None, "spec.capacityModel")
    if pct not in BUILTIN_PERCENTILES and cm is None:
        # the built-in model holds one percentile's latencies; never read as another's
        raise SpecError(PERCENTILE_RULE[1], "spec.slo.percentile")
    learn = cmodel.get("learn", cm is None)
    if not isinstance(learn, bool):
        raise SpecError(f"must be true or false, got {learn!r}", "spec.capacityModel.learn")
    # the built-in lab profile is scaled down for unknown hardware; a model of the user's
    # own (configMapRef) is taken as it is unless they say otherwise
    prior_scale = _number(cmodel.get("priorScale", 0.5 if cm is None else 1.0),
                          "spec.capacityModel.priorScale")
    confidence = _read(cmodel, "spec.capacityModel.confidenceThreshold")
    exploration = _read(cmodel, "spec.capacityModel.explorationStep")
    prom = None
    metrics = spec.get("metrics")
    p = _get(metrics, "prometheus", None, "spec.metrics")
    if p is not None:
        url = _get(p, "url", None, "spec.metrics.prometheus")
        if not isinstance(url, str) or not re.match(r"^https?://", url):
            raise SpecError(f"must be an http(s) URL, got {url!r}", "spec.metrics.prometheus.url")
        queries = p.get("queries") or {}
        known = (*KNOWN_QUERIES, *OPTIONAL_QUERIES)
        unknown = sorted(set(queries) - set(known))
        if unknown:
            raise SpecError(f"unknown quer(ies) {', '.join(unknown)} (known: "
                            f"{', '.join(known)})", "spec.metrics.prometheus.queries")
        rate_window = _read(p, "spec.metrics.prometheus.rateWindow")
        window_s = _seconds(p, "spec.metrics.prometheus.rateWindow")
        if window_s != int(window_s):
            raise SpecError(f"must be whole seconds, got {rate_window!r}",
                            "spec.metrics.prometheus.rateWindow")
        prom = Prometheus(url=url.rstrip("/"),
                          stale_after_s=_seconds(p, "spec.metrics.prometheus.staleAfter"),
                          warmup_s=_seconds(p, "spec.metrics.prometheus.warmup",
                                            p.get("warmup", rate_window)),
                          rate_window_s=window_s,
                          selector=str(p.get("selector", "")),
                          queries={str(k): str(v) for k, v in queries.items()},
                          namespace_label=_label(p, "namespaceLabel", default(
                              "spec.metrics.prometheus.namespaceLabel")),
                          pod_label=_label(p, "podLabel",
                                           default("spec.metrics.prometheus.podLabel")),
                          percentile=pct,
                          replication_factor=rf,
                          preset=_choice(p.get("preset", default_preset(target.store, target.kind)),
                                         "spec.metrics.prometheus.preset"),
                          pod_regex=served_as.pods,
                          auth=_auth(p, url))
    swift_spec.check_mode(target.swift, target.store, mode)
    if mode == "Enforce" and prom is None:
        raise SpecError("mode Enforce needs spec.metrics: elastore never acts without "
                        "evidence", "spec.metrics")
    interference = _read(spec.get("interference"), "spec.interference.enabled")
    if interference is not None and not isinstance(interference, bool):
        raise SpecError(f"must be true or false (absent: Auto), got {interference!r}",
                        "spec.interference.enabled")
    if interference and prom is None:
        raise SpecError("interference.enabled: true needs spec.metrics.prometheus (the "
                        "index is read from it)", "spec.interference")
    down = spec.get("scaleDown") or {}
    if not isinstance(down, dict):
        raise SpecError("must be an object", "spec.scaleDown")
    storage = _storage(spec.get("storage"), spec.get("cost"))
    cleanup, hold = cassandra_spec.parse_steps(spec, target.store)
    behavior, stabilization = _behavior(spec.get("behavior"), down)
    fallback_threshold, fallback_behavior = _fallback(spec.get("fallback"))
    skew = _skew(spec.get("skew"))
    node_mbit, client_ports, storage_ports = _bandwidth(spec.get("bandwidth"), target.store)
    return PolicySpec(
        target=target, min_replicas=lo, max_replicas=hi, slo_latency_ms=latency,
        slo_percentile=pct, control_period_s=period, mode=mode, prediction_method=method,
        prediction_horizon_s=horizon, prediction_step_s=step, headroom=headroom,
        calibration_steps=calibration, planner_mode=planner_mode, lookahead_s=lookahead,
        violation_penalty=penalty,
        migration_policy=policy, min_migration_mibps=mn, max_migration_mibps=mx,
        node_overhead_s=overhead,
        model_configmap=str(cm["name"]) if isinstance(cm, dict) and cm.get("name") else None,
        model_key=str(cm.get("key", default("spec.capacityModel.configMapRef.key")))
        if isinstance(cm, dict) else default("spec.capacityModel.configMapRef.key"),
        learn=learn, prior_scale=prior_scale, confidence_threshold=confidence,
        exploration_step=exploration,
        prometheus=prom,
        interference=interference,
        stabilization_s=stabilization,
        pvc_policy=_read(down, "spec.scaleDown.pvcPolicy"),
        cleanup=cleanup, hold_for_repairs=hold,
        min_free_fraction=_read(down, "spec.scaleDown.minFreeFraction"),
        compaction_margin=_read(down, "spec.scaleDown.compactionMargin"),
        legacy_free_space="minFreeFraction" in down or "compactionMargin" in down,
        storage=storage,
        node_mbit=node_mbit, client_ports=client_ports, storage_ports=storage_ports,
        behavior=behavior, fallback_threshold=fallback_threshold,
        fallback_behavior=fallback_behavior, skew=skew,
    )
