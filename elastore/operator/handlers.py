"""The kopf wiring of the ElasticPolicy operator. Thin: the loop is
:class:`elastore.operator.runner.Runner`.

* **One daemon per policy** runs its loop: it sleeps until the next planned action or
  control period (a short poll while an operation runs) and is woken early when the target
  StatefulSet changes (an index maps StatefulSets to the policies that target them).
* **Leader election** is kopf peering: every replica takes a random priority, the highest
  acts and the others pause (their daemons are stopped) until its keep-alives stop.
* **Metrics** (``/metrics``) and **Events** (one per decision and action): see
  :mod:`elastore.operator.telemetry` and :mod:`elastore.operator.status`.

Run with ``elastore operator run`` or ``kopf run -m elastore.operator.handlers``.
Environment: ``ELASTORE_METRICS_PORT`` (9808; 0 disables), ``ELASTORE_PEERING`` (peering
object, ``elastore``), ``ELASTORE_PEERING_PRIORITY`` (default random),
``ELASTORE_PEERING_LIFETIME`` (s, 60), ``ELASTORE_STANDALONE=1`` (no peering).
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import kopf

from elastore.errors import ElastoreError
from elastore.models.bundle import ModelSet
from elastore.operator.spec import GROUP, PLURAL, VERSION, PolicySpec
from elastore.operator.telemetry import OperatorMetrics

log = logging.getLogger("elastore.operator")
BUILTIN_MODEL = Path(__file__).resolve().parent.parent / "models" / "data" / "lab-profile.json"
MAX_SLEEP_S = 300.0

TELEMETRY = OperatorMetrics()
_wake: dict[tuple[str, str], threading.Event] = {}
_api: dict[str, Any] = {}
_models: dict[tuple[str, str, str, str], ModelSet] = {}
_slo_models: dict[tuple[str, str, str, str], ModelSet] = {}


def api_client() -> Any:
    """One kubernetes ApiClient for the process: in-cluster, else the kubeconfig."""
    if "client" not in _api:
        from kubernetes import client, config

        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            # explicit: the library reads $KUBECONFIG once, when it is first imported
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.environ.get("KUBECONFIG") or None)
        _api["client"] = client.ApiClient()
    return _api["client"]


def load_models(namespace: str) -> Any:
    """``spec.capacityModel.configMapRef`` (the JSON of ``elastore models fit``), else the
    built-in lab profile. Cached per ConfigMap version."""
    def load(spec: PolicySpec) -> ModelSet:
        if spec.model_configmap is None:
            key = ("builtin", "", "", "")
            if key not in _models:
                _models[key] = ModelSet.load(BUILTIN_MODEL)
            return _for_slo(key, spec)
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            cm: Any = client.CoreV1Api(api_client()).read_namespaced_config_map(
                spec.model_configmap, namespace)
        except ApiException as exc:
            raise ElastoreError(f"capacity model ConfigMap {namespace}/{spec.model_configmap}"
                                f": {exc.reason}") from exc
        ck = (namespace, spec.model_configmap, spec.model_key, cm.metadata.resource_version)
        if ck not in _models:
            text = (cm.data or {}).get(spec.model_key)
            if text is None:
                raise ElastoreError(f"ConfigMap {namespace}/{spec.model_configmap} has no key "
                                    f"{spec.model_key!r}")
            _models[ck] = ModelSet.loads(text.encode(),
                                         f"configmap {namespace}/{spec.model_configmap}")
        return _for_slo(ck, spec)

    return load


def _for_slo(key: tuple[str, str, str, str], spec: PolicySpec) -> ModelSet:
    """The model read against the policy's own SLO (``spec.slo``), cached."""
    slo_key = (*key[:3], f"{key[3]}@p{spec.slo_percentile}<={spec.slo_latency_ms:g}")
    if slo_key not in _slo_models:
        _slo_models[slo_key] = _models[key].for_slo(spec.slo_latency_ms, spec.slo_percentile)
    return _slo_models[slo_key]


@kopf.on.login()
def login(**kw: Any) -> Any:
    """In a pod: its ServiceAccount; elsewhere: the kubeconfig ($KUBECONFIG)."""
    return kopf.login_with_service_account(**kw) or kopf.login_with_kubeconfig(**kw)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.peering.name = os.environ.get("ELASTORE_PEERING", "elastore")
    settings.peering.clusterwide = True
    settings.peering.mandatory = os.environ.get("ELASTORE_STANDALONE") != "1"
    settings.peering.standalone = os.environ.get("ELASTORE_STANDALONE") == "1"
    prio = os.environ.get("ELASTORE_PEERING_PRIORITY")
    settings.peering.priority = int(prio) if prio else random.randint(1, 2**31 - 1)
    settings.peering.lifetime = int(os.environ.get("ELASTORE_PEERING_LIFETIME", "60"))
    settings.posting.level = logging.WARNING  # kopf's own events: problems only
    settings.persistence.finalizer = "elastore.io/daemon"
    port = int(os.environ.get("ELASTORE_METRICS_PORT", "9808"))
    if port > 0:
        TELEMETRY.serve(port, os.environ.get("ELASTORE_METRICS_ADDR", "0.0.0.0"))
    log.info("elastore operator: peering %s (priority %d, lifetime %d s), metrics on %s",
             "off" if settings.peering.standalone else settings.peering.name,
             settings.peering.priority, settings.peering.lifetime,
             f":{port}" if port > 0 else "(off)")


@kopf.index(GROUP, VERSION, PLURAL)
def by_target(**kw: Any) -> dict[tuple[str, str], str]:
    target = (kw.get("spec") or {}).get("target") or {}
    return {(kw["namespace"], str(target.get("name", ""))): kw["name"]}


@kopf.on.event("apps", "v1", "statefulsets")
def statefulset_changed(**kw: Any) -> None:
    namespace, name = kw["namespace"], kw["name"]
    for policy in kw["by_target"].get((namespace, name), []):
        ev = _wake.get((namespace, policy))
        if ev is not None:
            ev.set()


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=30.0)
def control_loop(**kw: Any) -> None:
    """The policy's loop, until the policy is deleted or the operator stops or pauses."""
    namespace: str = kw["namespace"]
    name: str = kw["name"]
    stopped: kopf.DaemonStopped = kw["stopped"]
    logger: Any = kw["logger"]
    from elastore.actuators.k8s import KubeActuator
    from elastore.operator.runner import Runner
    from elastore.operator.status import PolicyApi

    client = api_client()
    runner = Runner(namespace, name, PolicyApi(client), KubeActuator(client),
                    load_models(namespace), TELEMETRY)
    wake = _wake.setdefault((namespace, name), threading.Event())
    logger.info("control loop started for %s/%s", namespace, name)
    try:
        while not stopped:
            wake.clear()
            try:
                wait = runner.tick()
            except ElastoreError as exc:
                logger.error("tick failed: %s", exc)
                wait = 30.0
            except Exception:  # a bug must not kill the loop silently
                logger.exception("tick failed")
                wait = 30.0
            if math.isinf(wait):
                logger.info("%s/%s is gone", namespace, name)
                return
            deadline = time.monotonic() + min(wait, MAX_SLEEP_S)
            while not stopped and not wake.is_set() and time.monotonic() < deadline:
                wake.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    finally:
        _wake.pop((namespace, name), None)
        logger.info("control loop stopped for %s/%s (%s)", namespace, name,
                    stopped.reason if stopped else "returned")


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(**kw: Any) -> None:
    TELEMETRY.forget(kw["namespace"], kw["name"])
