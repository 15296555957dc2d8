"""What the operator's handlers share at run time, carried in kopf's operator memo (never
in module globals or the environment): the options it was started with, its metrics, one
Kubernetes API client, the capacity models it has loaded, and the events that wake a
policy's loop early.

``elastore operator run`` builds the :class:`Runtime` from its flags and hands it to
``kopf.run(memo=...)``; ``kopf run -m elastore.operator.handlers`` gets the defaults.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elastore.errors import ElastoreError
from elastore.models.bundle import ModelSet
from elastore.operator.spec import PolicySpec
from elastore.operator.telemetry import OperatorMetrics
from elastore.resources import builtin_model

ModelKey = tuple[str, str, str, str]  # namespace, ConfigMap, key, resourceVersion


#: what `elastore operator run` allows without ``--nodetool``: the images' usual paths
DEFAULT_NODETOOLS: tuple[tuple[str, ...], ...] = (("nodetool",), ("/opt/cassandra/bin/nodetool",))


@dataclass(frozen=True)
class OperatorOptions:
    metrics_port: int = 9808  # 0: no /metrics
    #: the nodetool commands a policy may name (``spec.target.nodetool``), as argv: the
    #: operator's installer chooses them, a policy's author only picks one
    nodetools: tuple[tuple[str, ...], ...] = DEFAULT_NODETOOLS
    #: the prefixes a Swift policy's commands may go through (``spec.target.swift.
    #: execPrefix``); the empty one is always allowed
    exec_prefixes: tuple[tuple[str, ...], ...] = ((),)
    #: the directories a policy's paths in pods may lie under (``--pod-path``)
    pod_paths: tuple[str, ...] = ("/etc/swift", "/srv/node")
    #: the Prometheus endpoints a policy may name (:mod:`elastore.operator.endpoints`);
    #: None: any (``elastore operator run`` without ``--prometheus-url``)
    prometheus_urls: tuple[str, ...] | None = None
    metrics_addr: str = "0.0.0.0"
    peering: str = "elastore"  # the ClusterKopfPeering the replicas share
    standalone: bool = False  # no leader election (one replica only)
    priority: int | None = None  # peering priority; None: random
    peering_lifetime_s: int = 60
    #: ticks that run at once (``--concurrent-ticks``): every policy's loop holds a thread,
    #: but only this many compute or wait on Prometheus and the API server at a time. The
    #: rest wait for a slot without taking the interpreter's lock: 300 runnable threads
    #: spent the operator's one core switching between them (docs/reliability.md)
    concurrent_ticks: int = 8


@dataclass
class Runtime:
    options: OperatorOptions = field(default_factory=OperatorOptions)
    telemetry: OperatorMetrics = field(default_factory=OperatorMetrics)
    wake: dict[tuple[str, str], threading.Event] = field(default_factory=dict)
    #: every policy this process ran a loop for: their finalizers are released on exit
    served: set[tuple[str, str]] = field(default_factory=set)
    _client: Any = None
    _models: dict[ModelKey, ModelSet] = field(default_factory=dict)
    _slo_models: dict[tuple[ModelKey, str], ModelSet] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slots: threading.BoundedSemaphore | None = field(default=None, init=False)

    def tick_slot(self) -> threading.BoundedSemaphore:
        """The slots ticks run in (``options.concurrent_ticks`` of them)."""
        with self._lock:
            if self._slots is None:
                self._slots = threading.BoundedSemaphore(self.options.concurrent_ticks)
            return self._slots

    def api_client(self) -> Any:
        """One kubernetes ApiClient for the process: in-cluster, else the kubeconfig
        (``$KUBECONFIG``, which ``--kubeconfig`` sets, as kopf's own login reads it)."""
        with self._lock:
            if self._client is None:
                from kubernetes import client, config

                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                except config.ConfigException:
                    # explicit: the library reads $KUBECONFIG once, when it is first imported
                    config.load_kube_config(  # type: ignore[no-untyped-call]
                        config_file=os.environ.get("KUBECONFIG") or None)
                conf = client.Configuration.get_default_copy()
                # a connection for every tick that may run, and the watch and peering of
                # kopf's own: past the pool's size each request opened a TLS connection
                # and threw it away ("Connection pool is full", 900 times at 300 policies)
                conf.connection_pool_maxsize = max(conf.connection_pool_maxsize or 0,
                                                   self.options.concurrent_ticks + 4)
                self._client = client.ApiClient(conf)
            return self._client

    def model_loader(self, namespace: str) -> Callable[[PolicySpec], ModelSet]:
        """``spec.capacityModel.configMapRef`` (the JSON of ``elastore models fit``), else
        the built-in lab profile; read against the policy's own SLO. Cached per ConfigMap
        version."""
        def load(spec: PolicySpec) -> ModelSet:
            if spec.model_configmap is None:
                key: ModelKey = ("builtin", "", "", "")
                if key not in self._models:
                    self._models[key] = ModelSet.load(builtin_model("lab"))
                return self._for_slo(key, spec)
            return self._for_slo(self._configmap(namespace, spec), spec)

        return load

    def _configmap(self, namespace: str, spec: PolicySpec) -> ModelKey:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        assert spec.model_configmap is not None
        try:
            cm: Any = client.CoreV1Api(self.api_client()).read_namespaced_config_map(
                spec.model_configmap, namespace)
        except ApiException as exc:
            raise ElastoreError(f"capacity model ConfigMap {namespace}/{spec.model_configmap}"
                                f": {exc.reason}") from exc
        key = (namespace, spec.model_configmap, spec.model_key, cm.metadata.resource_version)
        if key not in self._models:
            text = (cm.data or {}).get(spec.model_key)
            if text is None:
                raise ElastoreError(f"ConfigMap {namespace}/{spec.model_configmap} has no key "
                                    f"{spec.model_key!r}")
            self._models[key] = ModelSet.loads(text.encode(),
                                               f"configmap {namespace}/{spec.model_configmap}")
        return key

    def _for_slo(self, key: ModelKey, spec: PolicySpec) -> ModelSet:
        slo = f"p{spec.slo_percentile}<={spec.slo_latency_ms:g}"
        if (key, slo) not in self._slo_models:
            self._slo_models[(key, slo)] = self._models[key].for_slo(spec.slo_latency_ms,
                                                                     spec.slo_percentile)
        return self._slo_models[(key, slo)]
