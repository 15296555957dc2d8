"""The operator's own Prometheus metrics, served on ``/metrics``."""

from __future__ import annotations

import contextlib
from typing import Any


class OperatorMetrics:
    """Per policy (labels ``namespace``, ``policy``): the forecast, its error, the replicas
    wanted and serving, how long a decision takes, and the actions taken."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["namespace", "policy"]
        self.forecast = Gauge("elastore_forecast_requests_per_second",
                              "Client load forecast for the end of the prediction horizon",
                              labels, registry=self.registry)
        self.forecast_error = Gauge("elastore_forecast_error_ratio",
                                    "Observed load / the load forecast for now - 1", labels,
                                    registry=self.registry)
        self.desired = Gauge("elastore_desired_replicas", "Replicas the plan wants at the "
                             "end of the window", labels, registry=self.registry)
        self.current = Gauge("elastore_current_replicas", "Replicas of the target StatefulSet",
                             labels, registry=self.registry)
        self.migration = Gauge("elastore_migration_mebibytes_per_second",
                               "Stream throttle decided per node, MiB/s", labels,
                               registry=self.registry)
        self.degraded = Gauge("elastore_degraded", "1 while the policy is Degraded", labels,
                              registry=self.registry)
        self.decision_seconds = Histogram("elastore_decision_seconds",
                                          "Time to observe, forecast and plan one period",
                                          labels, registry=self.registry,
                                          buckets=(.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.would_scale = Gauge(
            "elastore_would_scale", "What Enforce would change now, in replicas (+1 a node "
            "out, -1 a node in, 0 nothing): the plan's target in force against the size "
            "there is; in Recommend mode, the backtest of Enforce", labels,
            registry=self.registry)
        self.slo_at_risk = Gauge(
            "elastore_slo_at_risk", "1 when the current size would miss the SLO at the "
            "forecast load (the capacity model wants more servers), else 0", labels,
            registry=self.registry)
        self.actions = Counter("elastore_actions", "Topology actions started", [*labels, "kind"],
                               registry=self.registry)
        # the operator as a whole (no policy label: it is read at hundreds of policies)
        self.tick_seconds = Histogram("elastore_tick_seconds", "Time one policy's tick "
                                      "takes (read, steps, period when due, status write)",
                                      registry=self.registry,
                                      buckets=(.05, .1, .25, .5, 1, 2, 5, 10, 30))
        self.period_lateness = Histogram(
            "elastore_period_lateness_seconds", "How long after it fell due a control period "
            "started (its spec.controlPeriod after the last decision)",
            registry=self.registry, buckets=(.5, 1, 2, 3, 5, 10, 30, 60, 300))
        self.forecast_fits = Counter(
            "elastore_forecast_fits", "Periods' forecasts by how the predictor got there: "
            "kept (fed only the steps since the last period) or scratch (fitted and "
            "calibrated on the whole history: the first period, a restart, or a history "
            "that changed under the kept fit)", ["fit"], registry=self.registry)
        # Hubbub-scale (the node agent's own series is elastore_interference_index)
        self.interference_index = Gauge(
            "elastore_interference_planned_index", "The interference index the last plan "
            "used, 0..1 (absent while the policy plans interference-blind)", labels,
            registry=self.registry)
        self.interference_blind = Gauge(
            "elastore_interference_blind", "1 while the policy plans without an interference "
            "index (Auto without the node agent's series, or disabled)", labels,
            registry=self.registry)
        self.interference_factor = Gauge(
            "elastore_interference_factor", "g(index) the last plan used: the load an "
            "interference-free server would carry per request/s (1 while blind)", labels,
            registry=self.registry)
        self.interference_observations = Gauge(
            "elastore_interference_observations", "Observations the learned interference "
            "effect rests on", labels, registry=self.registry)
        # the skew view (issue 38, spec.skew): absent, never 0, where nothing was read
        self.skew_imbalance = Gauge(
            "elastore_skew_imbalance", "The busiest pod's client requests/s over the mean "
            "of the target's pods (1 = balanced); absent while a pod has no reading or "
            "there is no load", labels, registry=self.registry)
        self.node_load = Gauge(
            "elastore_node_load_requests_per_second", "Each pod's client requests/s (what "
            "it coordinates) as the skew view read it; absent for a pod without a reading",
            [*labels, "pod"], registry=self.registry)
        #: the pods each policy's node_load has series for (to remove what is not read)
        self._load_pods: dict[tuple[str, str], set[str]] = {}

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        from prometheus_client import start_http_server

        start_http_server(port, addr=addr, registry=self.registry)

    def forget(self, namespace: str, policy: str) -> None:
        for g in (self.forecast, self.forecast_error, self.desired, self.current,
                  self.migration, self.degraded, self.would_scale, self.slo_at_risk,
                  self.interference_index, self.interference_blind, self.interference_factor,
                  self.interference_observations, self.skew_imbalance):
            with contextlib.suppress(KeyError):
                g.remove(namespace, policy)
        self.set_node_loads(namespace, policy, {})

    def set_node_loads(self, namespace: str, policy: str, loads: dict[str, float]) -> None:
        """``elastore_node_load_requests_per_second`` for the pods read now; the series of
        a pod not read now is removed (unread is absent, never 0)."""
        for gone in self._load_pods.get((namespace, policy), set()) - set(loads):
            with contextlib.suppress(KeyError):
                self.node_load.remove(namespace, policy, gone)
        for pod, rps in loads.items():
            self.node_load.labels(namespace, policy, pod).set(rps)
        self._load_pods[(namespace, policy)] = set(loads)

    def set_skew_imbalance(self, namespace: str, policy: str, value: float | None) -> None:
        if value is None:
            with contextlib.suppress(KeyError):
                self.skew_imbalance.remove(namespace, policy)
            return
        self.skew_imbalance.labels(namespace, policy).set(value)

    def forget_skew(self, namespace: str, policy: str) -> None:
        self.set_node_loads(namespace, policy, {})
        self.set_skew_imbalance(namespace, policy, None)

    def forget_interference_index(self, namespace: str, policy: str) -> None:
        with contextlib.suppress(KeyError):
            self.interference_index.remove(namespace, policy)
