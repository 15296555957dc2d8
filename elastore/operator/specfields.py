"""Every field of the ``ElasticPolicy`` spec, declared once: its type, default, bounds, enum,
pattern, CEL rules and the description ``kubectl explain`` shows.

The CRD's ``openAPIV3Schema`` for ``spec`` is generated from :data:`FIELDS`
(:func:`spec_schema`; ``python -m elastore.operator.crd`` writes it, ``--check`` fails on
drift), and :func:`elastore.operator.spec.parse` reads its defaults, bounds and enums from
here. To add or change a spec field: declare it below (a store's own field beside its
driver, ``elastore.stores.<store>.spec``, spliced in here), run
``python -m elastore.operator.crd`` and read it in :mod:`elastore.operator.spec` (or the
store's ``spec.parse``).

A path names the field from ``spec`` down; ``x[]`` is the item of the array ``x``. An object
lists its fields by their paths; ``required=True`` puts a field in its parent's ``required``
(in declaration order). Anything the schema says that has no keyword here is ``extra``.
"""

from __future__ import annotations

import json
from typing import Any

from elastore.models.capacity import PERCENTILES
from elastore.models.storage import COMPACTION_HEADROOM, DEFAULT_COMPACTION
from elastore.operator.fielddecl import ABSENT, DURATION, F, span
from elastore.operator.presets import PRESETS
from elastore.operator.skew import MODES as SKEW_MODES
from elastore.operator.skew import READ_SPREADS as SKEW_SPREADS
from elastore.planner.behavior import MAX_PERIOD_S
from elastore.planner.bwman import BwManConfig
from elastore.predictor.registry import DEFAULT_METHOD, METHODS
from elastore.resources import builtin_model
from elastore.stores.cassandra import spec as cassandra_spec
from elastore.stores.registry import store_names, target_kinds
from elastore.stores.swift import spec as swift_spec


def _key_ref(path: str) -> tuple[F, ...]:
    """The ``name`` and ``key`` of a Secret or ConfigMap key the object ``path`` names."""
    return (F(f"{path}.name", "string", min_length=1, max_length=253, required=True),
            F(f"{path}.key", "string", min_length=1, max_length=253, required=True))


def _builtin_percentiles() -> tuple[int, ...]:
    """The SLO percentiles a policy without a model of its own can be planned for: the one
    whose latencies the built-in lab profile holds (read from the file itself, so that this
    can never disagree with it). A capacity table holds one percentile's latencies; the
    operator never reads one percentile's as another's."""
    doc = json.loads(builtin_model("lab").read_text())
    return (int(doc["capacity"]["slo"]["percentile"]),)


#: the SLO percentiles the built-in lab profile plans for; any other of :data:`PERCENTILES`
#: needs ``spec.capacityModel.configMapRef`` (a model fitted for it)
BUILTIN_PERCENTILES = _builtin_percentiles()


def _percentile_rule() -> tuple[str, str]:
    """The CEL rule (and its message) that refuses an SLO percentile the built-in model does
    not hold unless the policy names a model of its own; :func:`elastore.operator.spec.parse`
    raises the same message."""
    builtin = ", ".join(str(p) for p in BUILTIN_PERCENTILES)
    others = " or ".join(str(p) for p in PERCENTILES if p not in BUILTIN_PERCENTILES)
    rule = (f"!has(self.slo.percentile) || self.slo.percentile in [{builtin}] || "
            "(has(self.capacityModel) && has(self.capacityModel.configMapRef))")
    message = (f"slo.percentile {others} needs spec.capacityModel.configMapRef, a model "
               f"fitted for it (elastore models fit --percentile {others}): the built-in "
               f"capacity model (the lab profile) holds p{builtin} latencies only, so "
               f"without one the supported percentile is {builtin}")
    return rule, message


#: see :func:`_percentile_rule`
PERCENTILE_RULE = _percentile_rule()


def _policies(path: str) -> tuple[F, ...]:
    """The HPA's scaling policies of one direction of ``spec.behavior``."""
    return (F(path, "array", max_items=10),
            F(f"{path}[]", "object"),
            F(f"{path}[].type", "string", enum=("Pods", "Percent"), required=True),
            F(f"{path}[].value", "integer", minimum=1, maximum=10000, required=True),
            F(f"{path}[].periodSeconds", "integer", minimum=1, maximum=int(MAX_PERIOD_S),
              required=True))


FIELDS: tuple[F, ...] = (
    F("spec", "object",
      rules=(
          ("self.replicas.min >= self.target.replicationFactor",
           ("replicas.min must be >= target.replicationFactor: fewer nodes than replicas "
            "cannot hold the data")),
          (("!has(self.migration) || !has(self.migration.minMiBps) || "
            "!has(self.migration.maxMiBps) || self.migration.minMiBps <= "
            "self.migration.maxMiBps"),
           "migration.minMiBps must be <= migration.maxMiBps"),
          ("self.mode != 'Enforce' || has(self.metrics)",
           "mode Enforce needs spec.metrics: elastore never acts without evidence"),
          ("duration(self.prediction.horizon) >= duration(self.controlPeriod)",
           ("prediction.horizon must be >= controlPeriod: each period plans at least until "
            "the next")),
          ("duration(self.planner.lookahead) >= duration(self.prediction.horizon)",
           "planner.lookahead must be >= prediction.horizon"),
          PERCENTILE_RULE,
          (("!has(self.interference) || !has(self.interference.enabled) || "
            "!self.interference.enabled || has(self.metrics)"),
           ("interference.enabled: true needs spec.metrics.prometheus (the index is read "
            "from it)")),
      ),
      required=True),
    F("spec.target", "object", required=True),
    F("spec.target.kind", "string",
      enum=target_kinds(),
      default="StatefulSet",
      doc=("StatefulSet: a bare StatefulSet, scaled one node at a time through its scale "
           "subresource. CassandraDatacenter: a cass-operator (K8ssandra) datacenter "
           "(cassandra.datastax.com/v1beta1), resized through spec.size in rack-balanced "
           "steps; cass-operator adds and decommissions the nodes")),
    F("spec.target.name", "string", min_length=1, max_length=253, required=True),
    F("spec.target.store", "string", enum=store_names(), default="cassandra"),
    F("spec.target.replicationFactor", "integer", minimum=1, maximum=7, required=True),
    F("spec.target.container", "string",
      min_length=1,
      max_length=63,
      pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
      doc=("container the operator's commands run in (a container name; absent: the "
           "store's name, cassandra or swift): nodetool for Cassandra, md5sum and du for "
           "Swift")),
    *swift_spec.FIELDS,
    *cassandra_spec.TARGET_FIELDS,
    F("spec.replicas", "object",
      rules=(
          ("self.min <= self.max",
           "replicas.min must be <= replicas.max"),
      ),
      required=True),
    F("spec.replicas.min", "integer", minimum=1, maximum=1000, required=True),
    F("spec.replicas.max", "integer", minimum=1, maximum=1000, required=True),
    F("spec.slo", "object", required=True),
    F("spec.slo.percentile", "integer",
      enum=PERCENTILES,
      default=BUILTIN_PERCENTILES[0],
      doc=("the latency percentile the SLO bounds. Without spec.capacityModel.configMapRef "
           f"only {', '.join(map(str, BUILTIN_PERCENTILES))} (the built-in lab profile's); "
           "another needs a model fitted for it (elastore models fit --percentile)")),
    F("spec.slo.latencyMs", "number", open_min=True, minimum=0, maximum=600000, required=True),
    F("spec.controlPeriod", "string",
      default="10m",
      pattern=DURATION,
      seconds=(10, 86400)),
    F("spec.mode", "string", enum=("Recommend", "Enforce"), default="Recommend"),
    F("spec.prediction", "object", default={}),
    F("spec.prediction.method", "string",
      enum=tuple(METHODS),
      default=DEFAULT_METHOD),
    F("spec.prediction.horizon", "string",
      default="10m",
      pattern=DURATION,
      seconds=(1, 168 * 3600)),
    F("spec.prediction.step", "string",
      default="1h",
      pattern=DURATION,
      doc=("the load series the predictor sees: one value per step (its seasons are 24 and "
           "168 steps)"),
      seconds=(1, 86400)),
    F("spec.prediction.headroom", "number",
      minimum=0,
      maximum=0.9,
      default=0.1,
      doc=("Window planner: the fraction of each server's capacity kept free. The Horizon "
           "planner plans on the forecast's calibrated quantile scenarios instead")),
    F("spec.prediction.calibrationSteps", "integer",
      minimum=48,
      maximum=1008,
      default=336,
      doc=("Horizon planner: the forecast origins (steps) whose errors calibrate its "
           "quantile scenarios. A surprise widens the scenarios for this long; fewer steps "
           "forget a one-off surge sooner, more remember a rare one")),
    F("spec.planner", "object", default={}),
    F("spec.planner.mode", "string",
      enum=("Horizon", "Window"),
      default="Horizon",
      doc=("Horizon: the cheapest schedule of node changes over the lookahead for the "
           "forecast's scenarios and the violation penalty. Window: the paper's scheduler, "
           "one prediction.horizon at a time")),
    F("spec.planner.lookahead", "string",
      default="24h",
      pattern=DURATION,
      doc=("how far the Horizon planner looks: longer than the slowest change it may "
           "plan, and at least a one-node scale-in's payback (3 x its migration), else "
           "it never scales in for a later saving (the LookaheadShort condition)"),
      seconds=(1, 168 * 3600)),
    F("spec.cost", "object", default={}),
    F("spec.cost.violationPenalty", "number",
      minimum=0,
      maximum=1000000,
      default=100,
      doc=("what an hour of SLO violation costs, in server-hours: the Horizon planner "
           "minimises server-hours + violationPenalty x violation-hours")),
    F("spec.cost.nodeHour", "number",
      minimum=0,
      maximum=1000000,
      default=1.0,
      doc=("what a node costs an hour, its volume aside (any currency, the same as "
           "gibMonth): spec.storage.expandVolumes compares a month of the nodes the bytes "
           "need with a month of grown volumes")),
    F("spec.cost.gibMonth", "number",
      minimum=0,
      maximum=1000000,
      default=0.1,
      doc="what a GiB of volume costs a month (same currency as nodeHour)"),
    F("spec.storage", "object", default={},
      doc=("scale for the bytes too: the servers planned are the larger of what the load "
           "needs and what keeps every node's data within its budget, min(targetUtilization, "
           "1 - the compaction strategy's headroom) of its volume, over the lookahead's data "
           "growth forecast (Horizon planner; the Window planner keeps the budget at its "
           "window's end). The bytes are read from the kubelet's volume stats where "
           "Prometheus has them, else from the store's own figure and the PVCs' sizes")),
    F("spec.storage.targetUtilization", "number",
      open_min=True,
      minimum=0,
      maximum=0.95,
      default=0.8,
      doc=("the share of each volume a node's data may fill; a scale-in never takes the "
           "survivors above it (the free-space check)")),
    F("spec.storage.compaction", "string",
      enum=tuple(COMPACTION_HEADROOM),
      default=DEFAULT_COMPACTION,
      doc=("the tables' compaction strategy, whose temporary copies need free disk: "
           + ", ".join(f"{k} {v:.0%}" for k, v in COMPACTION_HEADROOM.items())
           + " of the volume; the budget is min(targetUtilization, 1 - that). Cassandra's "
           "default when a table names none is SizeTiered")),
    F("spec.storage.expandVolumes", "boolean",
      default=False,
      doc=("Enforce only: where the bytes, not the load, need more nodes and the PVCs' "
           "StorageClass allows expansion, grow every PVC of the target instead when a month "
           "of that costs less (spec.cost); never shrinks one. The StatefulSet's "
           "volumeClaimTemplates are not changed (Kubernetes refuses it): see docs")),
    F("spec.storage.maxVolumeSize", "string",
      pattern="^[0-9]+(\\.[0-9]+)?(Mi|Gi|Ti|M|G|T)?$",
      doc="the largest a grown volume may become (a Kubernetes quantity, e.g. 2Ti)"),
    F("spec.skew", "object",
      doc=("balance before buy (issue 38): each pod's load and the imbalance (busiest over "
           "mean), the hot token ranges (Cassandra: sampled in the pods), advice on the "
           "read-spreading options that are the user's to set, in status.skew and the "
           "metrics. Absent fields take the defaults their descriptions name"),
      rules=(
          (("(has(self.revertPercent) ? self.revertPercent : 45.0) <= "
            "(has(self.stopPercent) ? self.stopPercent : 55.0) && "
            "(has(self.stopPercent) ? self.stopPercent : 55.0) <= "
            "(has(self.triggerPercent) ? self.triggerPercent : 75.0)"),
           ("skew: revertPercent <= stopPercent <= triggerPercent must hold (absent: 45, 55, "
            "75)")),
      )),
    F("spec.skew.mode", "string",
      enum=SKEW_MODES,
      doc=("Off: nothing is read or shown. Advise (absent): the skew is shown and the "
           "read-spreading options that would help are named; nothing is changed. Auto: "
           "also act, in mode Enforce only: a hot pod is rebalanced without a node "
           "(single-token Cassandra: a bounded nodetool move; Swift: the hot device's "
           "weight), one step at a time, each seen in the store first, and undone when the "
           "burst passes (status.skew.rebalance)")),
    F("spec.skew.maxMovePercent", "number",
      minimum=0,
      maximum=50,
      doc=("Auto: the share of the stored data, percent, one move of a range boundary may "
           "stream (absent: 5)")),
    F("spec.skew.readSpread", "string",
      enum=SKEW_SPREADS,
      doc=("what the clients do with a read: replicas (absent) spread it over the key's "
           "replicas (a driver that shuffles replicas, or no token awareness); primary: "
           "send it to the key's primary replica (a token-aware driver without shuffling)")),
    F("spec.skew.imbalanceThreshold", "number",
      open_min=True,
      minimum=1,
      maximum=100,
      doc=("advise when the busiest pod carries at least this times the mean load (absent: "
           "1.25, a fifth of the cluster's capacity lost to the busiest node)")),
    F("spec.skew.triggerPercent", "number",
      minimum=0,
      maximum=100,
      doc=("Auto's hysteresis on the busiest node's smoothed utilization (its load over its "
           "capacity at the SLO), percent: act at or above this (absent: 75)")),
    F("spec.skew.stopPercent", "number",
      minimum=0,
      maximum=100,
      doc="no further move below this (absent: 55)"),
    F("spec.skew.revertPercent", "number",
      minimum=0,
      maximum=100,
      doc="undo the moves below this (absent: 45)"),
    F("spec.skew.sampleInterval", "string",
      pattern=DURATION,
      seconds=(60, 7 * 86400),
      doc=("how often the hot partitions are sampled (absent: 1h; at most once a control "
           "period): each sample runs nodetool twice in every pod and once more in one (a "
           "JVM start each)")),
    F("spec.skew.sampleDuration", "string",
      pattern=DURATION,
      seconds=(1, 60),
      doc="how long each pod's sample of its hot partitions runs (absent: 3s)"),
    F("spec.migration", "object", default={}),
    F("spec.migration.policy", "string",
      enum=("PreferClients", "PreferMigration"),
      default="PreferClients"),
    # 10,000 MiB/s is a 84 Gbit/s stream: above any node's link, below what overflows a
    # deadline or a tc rate
    F("spec.migration.minMiBps", "number", open_min=True, minimum=0, maximum=10000, default=1),
    F("spec.migration.maxMiBps", "number", open_min=True, minimum=0, maximum=10000,
      default=24),
    F("spec.migration.nodeOverheadSeconds", "integer",
      minimum=0,
      maximum=86400,
      default=120,
      doc=("time a node step takes besides streaming data (pod start, JVM boot, ring "
           "join): the planner starts scale-outs this much earlier")),
    F("spec.bandwidth", "object",
      doc=("BwMan on each node's link: the link total is split between client traffic and "
           "storage traffic (streaming, gossip, replica messages), published in "
           "status.bandwidth for the node agent; the storage share sets the stream "
           "throttle"),
      rules=(
          (("!has(self.clientPorts) || !has(self.storagePorts) || self.clientPorts.all(p, "
            "!(p in self.storagePorts))"),
           "bandwidth.clientPorts and bandwidth.storagePorts must be disjoint"),
      )),
    F("spec.bandwidth.nodeMbit", "number",
      open_min=True,
      # BwMan keeps a gossip margin for the storage class and a floor for the clients
      minimum=BwManConfig.gossip_margin_mbit + BwManConfig.min_client_mbit,
      maximum=1000000,
      doc=("Mbit/s: each node's link total that BwMan splits (configured, not measured: "
           "virtual NICs and veths report no speed, and a cloud instance's ceiling differs "
           "from its NIC's nominal speed). More than 1.5: BwMan keeps 0.5 Mbit/s for "
           "gossip and 1 for the clients. Absent: no split, the stream throttle is the "
           "planner's rate")),
    F("spec.bandwidth.clientPorts", "array",
      min_items=1,
      max_items=16,
      list_type="set",
      doc=("TCP ports of client traffic (default for store cassandra: [9042], the native "
           "protocol)")),
    F("spec.bandwidth.clientPorts[]", "integer", minimum=1, maximum=65535),
    F("spec.bandwidth.storagePorts", "array",
      min_items=1,
      max_items=16,
      list_type="set",
      doc=("TCP ports of storage traffic (default for store cassandra: [7000, 7001], "
           "inter-node messaging and streaming, plain and TLS)")),
    F("spec.bandwidth.storagePorts[]", "integer", minimum=1, maximum=65535),
    F("spec.capacityModel", "object",
      doc=("the SLO border the planner sizes by: a fitted model (configMapRef, from "
           "`elastore models fit`) and/or one calibrated online from the store's own "
           "per-node latencies (learn)")),
    F("spec.capacityModel.configMapRef", "object"),
    F("spec.capacityModel.configMapRef.name", "string", min_length=1, required=True),
    F("spec.capacityModel.configMapRef.key", "string", default="model.json"),
    F("spec.capacityModel.learn", "boolean",
      doc=("calibrate the model online (default: true without configMapRef, false with "
           "one); the learned model is kept in the ConfigMap <policy>-capacity-model, "
           "owned by the policy, and summarised in status.model")),
    F("spec.capacityModel.priorScale", "number",
      minimum=0.05,
      maximum=20,
      doc=("learning: the prior's capacity factor (default 0.5 for the built-in lab "
           "profile, 1 for a configMapRef model)")),
    F("spec.capacityModel.confidenceThreshold", "number",
      open_min=True,
      minimum=0,
      maximum=1,
      default=0.8,
      doc=("learning: below this confidence in the border (posterior mass within 10 % of "
           "its median) Enforce only scales out")),
    F("spec.capacityModel.explorationStep", "number",
      open_min=True,
      minimum=0,
      maximum=2,
      default=0.15,
      doc=("learning: until the border has been observed, the plan's capacity per node "
           "stays within (1 + this) x the highest load per node seen within the SLO")),
    F("spec.metrics", "object"),
    F("spec.metrics.prometheus", "object", required=True),
    F("spec.metrics.prometheus.url", "string", pattern="^https?://", required=True),
    F("spec.metrics.prometheus.staleAfter", "string",
      default="2m",
      pattern=DURATION,
      seconds=(1, 3600),
      doc=("how old the newest sample of a pod's load series may be before it is stale (no "
           "decision on it)")),
    F("spec.metrics.prometheus.rateWindow", "string",
      default="1m",
      pattern="^([0-9]+(s|m|h))+$",
      seconds=(2, 3600),
      doc=("the range of every rate() in the preset's queries, whole seconds from 2s to 1h "
           "(at least four scrape intervals)")),
    F("spec.metrics.prometheus.warmup", "string",
      pattern=DURATION,
      seconds=(0, 3600),
      doc=("how old the load series must be before its rate counts as a measurement "
           "(default: the rateWindow)")),
    F("spec.metrics.prometheus.selector", "string",
      doc='label matchers added to the default queries, e.g. cluster="orders"'),
    F("spec.metrics.prometheus.namespaceLabel", "string",
      default="namespace",
      pattern="^([a-zA-Z_][a-zA-Z0-9_]*)?$",
      doc=("the label holding a series' namespace; the default queries match the policy's "
           'namespace ("": no namespace scope)')),
    F("spec.metrics.prometheus.podLabel", "string",
      default="pod",
      pattern="^([a-zA-Z_][a-zA-Z0-9_]*)?$",
      doc=("the label holding a series' pod; the default queries match the target's pods, "
           '<target>-<ordinal>, and count the nodes by it ("": no pod scope, one freshness '
           "series per node)")),
    F("spec.metrics.prometheus.preset", "string",
      enum=tuple(PRESETS),
      doc=("whose metric names the default queries use (absent: management-api for a "
           "CassandraDatacenter target, swift-statsd for a Swift one, jmx-exporter "
           "otherwise): swift-statsd (Swift's StatsD through statsd_exporter with "
           "elastore's mapping), jmx-exporter (Prometheus's JMX exporter, default naming "
           "of Cassandra's MBeans), jmx-exporter-example (its "
           "example_configs/cassandra.yml), instaclustr (Instaclustr's "
           "cassandra-exporter), mcac (DataStax's Metric Collector for Apache Cassandra), "
           "management-api (K8ssandra's Management API /metrics); docs/operator.md lists "
           "each preset's metrics")),
    F("spec.metrics.prometheus.bearerTokenSecret", "object",
      doc=("a Secret in the policy's namespace, labelled "
           'elastore.io/prometheus-credentials: "true", whose key holds a bearer token '
           "(https only)")),
    *_key_ref("spec.metrics.prometheus.bearerTokenSecret"),
    F("spec.metrics.prometheus.basicAuth", "object",
      doc=('Secrets (labelled elastore.io/prometheus-credentials: "true") holding the user '
           "name and password (https only)")),
    F("spec.metrics.prometheus.basicAuth.username", "object", required=True),
    *_key_ref("spec.metrics.prometheus.basicAuth.username"),
    F("spec.metrics.prometheus.basicAuth.password", "object", required=True),
    *_key_ref("spec.metrics.prometheus.basicAuth.password"),
    F("spec.metrics.prometheus.tlsConfig", "object"),
    F("spec.metrics.prometheus.tlsConfig.ca", "object",
      doc=("a PEM CA bundle: a Secret (labelled elastore.io/prometheus-credentials: "
           '"true") or a ConfigMap key')),
    F("spec.metrics.prometheus.tlsConfig.ca.secret", "object"),
    *_key_ref("spec.metrics.prometheus.tlsConfig.ca.secret"),
    F("spec.metrics.prometheus.tlsConfig.ca.configMap", "object"),
    *_key_ref("spec.metrics.prometheus.tlsConfig.ca.configMap"),
    F("spec.metrics.prometheus.tlsConfig.insecureSkipVerify", "boolean",
      default=False,
      doc="do not verify Prometheus's certificate (never the default)"),
    F("spec.metrics.prometheus.queries", "object",
      doc="PromQL overriding the preset's queries (and elastore's node agent's index)"),
    F("spec.metrics.prometheus.queries.readRps", "string", min_length=1),
    F("spec.metrics.prometheus.queries.writeRps", "string", min_length=1),
    F("spec.metrics.prometheus.queries.migrationMiBps", "string", min_length=1),
    F("spec.metrics.prometheus.queries.dataBytes", "string", min_length=1),
    F("spec.metrics.prometheus.queries.freshness", "string",
      min_length=1,
      doc="one series per node: the time of its newest sample"),
    F("spec.metrics.prometheus.queries.interference", "string",
      min_length=1,
      doc=("one series, the interference index in [0, 1] (default: avg of the node agent's "
           "elastore_interference_index over the target's pods)")),
    F("spec.metrics.prometheus.queries.latencyMs", "string",
      min_length=1,
      doc=("one series, the store's latency at the SLO's percentile in milliseconds, for "
           "learning the interference effect (default: Cassandra's coordinator read/write "
           "percentile, weighted by request rate)")),
    F("spec.metrics.prometheus.queries.nodeReadRps", "string",
      min_length=1,
      doc="one series per node (by podLabel): client reads/s it coordinates"),
    F("spec.metrics.prometheus.queries.nodeWriteRps", "string",
      min_length=1,
      doc="one series per node: client writes/s"),
    F("spec.metrics.prometheus.queries.nodeLatencyMs", "string",
      min_length=1,
      doc=("one series per node: its latency at the SLO's percentile, ms (for learning the "
           "capacity model)")),
    F("spec.metrics.prometheus.queries.nodeMigrationMiBps", "string",
      min_length=1,
      doc="one series per node: MiB/s it streams out"),
    F("spec.metrics.prometheus.queries.nodeDataBytes", "string",
      min_length=1,
      doc=("one series per node: the bytes the store holds on it (spec.storage's figure "
           "where the kubelet's volume stats are not scraped)")),
    F("spec.metrics.prometheus.queries.nodeVolumeUsedBytes", "string",
      min_length=1,
      doc=("one series per data PVC, labelled persistentvolumeclaim: bytes used on it "
           "(default: kubelet_volume_stats_used_bytes of <template>-<pod>)")),
    F("spec.metrics.prometheus.queries.nodeVolumeCapacityBytes", "string",
      min_length=1,
      doc=("one series per data PVC, labelled persistentvolumeclaim: its volume's size "
           "(default: kubelet_volume_stats_capacity_bytes)")),
    F("spec.interference", "object",
      default={},
      doc=("Hubbub-scale: plan with the interference index (capacity / g(index), g learned "
           "online from the store's latency)")),
    F("spec.interference.enabled", "boolean",
      doc=("absent: Auto, the index when its series exist for the target's pods, else "
           "interference-blind and said so in status.interference; true: the index is "
           "required (no decision without it); false: interference-blind")),
    *cassandra_spec.STEP_FIELDS,
    F("spec.scaleDown", "object", default={}),
    F("spec.scaleDown.stabilizationSeconds", "integer",
      minimum=0,
      maximum=86400,
      doc=("how long scale-in waits for the recommendations to stay low (absent: 300, or "
           "spec.behavior.scaleDown.stabilizationWindowSeconds)")),
    F("spec.scaleDown.pvcPolicy", "string", enum=("Retain", "Delete"), default="Retain",
      doc=("the removed pod's PVC after a scale-in: Retain keeps it (Cassandra: until a "
           "scale-out brings its ordinal back, which deletes it first, since Cassandra will "
           "not restart a decommissioned node on its data), Delete deletes it once its node "
           "is seen leaving")),
    F("spec.scaleDown.minFreeFraction", "number",
      minimum=0,
      maximum=0.9,
      default=0.2,
      doc=("refuse scale-in unless the survivors keep this fraction of disk free (on the "
           "bytes they hold, nodetool status)")),
    F("spec.scaleDown.compactionMargin", "number",
      minimum=0,
      maximum=2,
      default=0.5,
      doc=("room for compaction's temporary copies, as a fraction of a node's load after "
           "the scale-in (0.5 suits size-tiered compaction's common case; leveled needs "
           "about 0.1)")),
    F("spec.behavior", "object",
      doc=("the HorizontalPodAutoscaler's scaling policies: how many nodes may be added or "
           "removed per period (no policies: no limit; elastore moves one node at a time)")),
    F("spec.behavior.scaleUp", "object"),
    F("spec.behavior.scaleUp.selectPolicy", "string",
      enum=("Max", "Min", "Disabled"),
      default="Max"),
    F("spec.behavior.scaleUp.stabilizationWindowSeconds", "integer",
      minimum=0,
      maximum=0,
      doc="must be 0: the forecast's plan times scale-outs"),
    *_policies("spec.behavior.scaleUp.policies"),
    F("spec.behavior.scaleDown", "object"),
    F("spec.behavior.scaleDown.selectPolicy", "string",
      enum=("Max", "Min", "Disabled"),
      default="Max"),
    F("spec.behavior.scaleDown.stabilizationWindowSeconds", "integer",
      minimum=0,
      maximum=86400,
      doc=("the HPA's name for spec.scaleDown.stabilizationSeconds (set one, or both "
           "equal)")),
    *_policies("spec.behavior.scaleDown.policies"),
    F("spec.fallback", "object",
      doc=("after failureThreshold consecutive failed observations: freeze (nothing "
           "starts) or currentReplicasIfHigher (the scale-outs the last trustworthy plan "
           "wants); a scale-in on missing data never happens")),
    F("spec.fallback.failureThreshold", "integer", minimum=1, maximum=1000, default=3),
    F("spec.fallback.behavior", "string",
      enum=("freeze", "currentReplicasIfHigher"),
      default="freeze"),
)

#: the declarations by path
BY_PATH: dict[str, F] = {f.path: f for f in FIELDS}


def declared(path: str) -> F:
    """The declaration of ``path`` (a ``KeyError`` names a field nobody declared)."""
    return BY_PATH[path]


def default(path: str) -> Any:
    """``path``'s declared default (a copy of a list or object, never the declaration's)."""
    v = BY_PATH[path].default
    if v is ABSENT:
        raise KeyError(f"{path} has no default")
    return list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, dict) else v


def unknown_fields(obj: Any, decl: str = "spec", shown: str | None = None) -> list[str]:
    """The path of every field of ``obj`` (the object at the declared path ``decl``, as
    written) that the schema does not declare: ``spec.prediction.horizn``, an array's item
    as ``spec.behavior.scaleUp.policies[0].typ``. What the API server's strict field
    validation refuses (``kubectl apply`` says ``unknown field "<path>"``); a value of the
    wrong type is left to the parse, which names it."""
    at = decl if shown is None else shown
    f = BY_PATH[decl]
    out: list[str] = []
    if f.extra.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in f.extra:
        return out  # a map or free-form object: any key is the schema's
    if f.type == "object" and isinstance(obj, dict):
        for k, v in obj.items():
            child = f"{decl}.{k}"
            if child in BY_PATH:
                out.extend(unknown_fields(v, child, f"{at}.{k}"))
            else:
                out.append(f"{at}.{k}")
    elif f.type == "array" and isinstance(obj, list) and decl + "[]" in BY_PATH:
        for i, v in enumerate(obj):
            out.extend(unknown_fields(v, decl + "[]", f"{at}[{i}]"))
    return out


def _schema(f: F) -> dict[str, Any]:
    out: dict[str, Any] = {"type": f.type}
    children = [c for c in FIELDS if c.parent == f.path and not c.path.endswith("[]")]
    required = [c.name for c in children if c.required]
    if required:
        out["required"] = required
    if f.enum is not None:
        out["enum"] = list(f.enum)
    if f.default is not ABSENT:
        out["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
    for key, v in (("exclusiveMinimum", f.open_min or None), ("minimum", f.minimum),
                   ("maximum", f.maximum), ("minLength", f.min_length),
                   ("maxLength", f.max_length), ("minItems", f.min_items),
                   ("maxItems", f.max_items), ("x-kubernetes-list-type", f.list_type),
                   ("pattern", f.pattern)):
        if v is not None:
            out[key] = v
    if f.path + "[]" in BY_PATH:
        out["items"] = _schema(BY_PATH[f.path + "[]"])
    if f.doc is not None:
        out["description"] = f.doc
    rules = list(f.rules)
    if f.seconds is not None:
        lo, hi = (span(x) for x in f.seconds)
        rules.append((f"duration(self) >= duration('{lo}') && duration(self) <= "
                      f"duration('{hi}')", f"{f.path.removeprefix('spec.')} must be between {lo} "
                      f"and {hi}"))
    if rules:
        out["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    out.update(f.extra)
    if children:
        out["properties"] = {c.name: _schema(c) for c in children}
    return out


def spec_schema() -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema.properties.spec``."""
    return _schema(BY_PATH["spec"])
