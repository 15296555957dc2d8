"""The kopf wiring of the ElasticPolicy operator. Thin: the loop is
:class:`elastore.operator.runner.Runner`; what the handlers share (options, metrics, the API
client, loaded models, wake-up events) is a :class:`~elastore.operator.runtime.Runtime` in
kopf's operator memo.

* **One daemon per policy** runs its loop: it sleeps until the next planned action or
  control period (a short poll while an operation runs) and is woken early when the target
  StatefulSet changes (an index maps StatefulSets to the policies that target them). A tick
  that fails raises ``kopf.TemporaryError``: kopf restarts the daemon after a delay, and
  the loop resumes from the policy's status. Any other exception gets kopf's backoff.
* **Leader election** is kopf peering: every replica takes a random priority, the highest
  acts and the others pause (their daemons are stopped) until its keep-alives stop.
* **Metrics** (``/metrics``) and **Events** (one per decision and action): see
  :mod:`elastore.operator.telemetry` and :mod:`elastore.operator.policyapi`.

Run with ``elastore operator run`` (its flags set the options), or
``kopf run -m elastore.operator.handlers`` (the defaults of
:class:`~elastore.operator.runtime.OperatorOptions`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

from elastore.errors import ElastoreError
from elastore.operator.runtime import Runtime
from elastore.operator.spec import GROUP, PLURAL, VERSION

MAX_SLEEP_S = 300.0
MAX_POLICIES = 512  # policies one operator serves at once (one worker thread each)
FINALIZER = "elastore.io/daemon"  # kopf's, on every served policy (it has a daemon)
RETRY_S = 30.0  # a failed tick: the daemon is restarted after this long
#: kopf's retries of a failed API request, seconds: 33 s, then every 15 s for 10 min
API_BACKOFFS_S = (1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0) + (15.0,) * 40


def runtime(memo: Any) -> Runtime:
    rt = memo.get("elastore")
    if not isinstance(rt, Runtime):
        raise kopf.PermanentError("the operator memo has no elastore runtime (startup "
                                  "handler not run)")
    return rt


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger,
              **_: Any) -> None:
    rt = memo.get("elastore")
    if not isinstance(rt, Runtime):  # `kopf run -m ...`: the defaults
        rt = memo["elastore"] = Runtime()
    opts = rt.options
    settings.peering.name = opts.peering
    settings.peering.clusterwide = True
    settings.peering.mandatory = not opts.standalone
    settings.peering.standalone = opts.standalone
    settings.peering.priority = opts.priority if opts.priority is not None else \
        random.randint(1, 2**31 - 1)
    settings.peering.lifetime = opts.peering_lifetime_s
    settings.posting.level = logging.WARNING  # kopf's own events: problems only
    settings.persistence.finalizer = FINALIZER
    # every policy's loop is a sync daemon holding one worker thread of kopf's executor for
    # its whole life; the default pool (cpus + 4) starved the 7th policy on 2 cores: its
    # loop and every sync handler waited until another loop ended
    settings.execution.max_workers = MAX_POLICIES + 16
    # kopf's own requests (peering keep-alives, watches, its patches) give up after 8
    # retries, 54 s in all, and the operator then exits: an API server down for a minute
    # stopped every replica (issue 39's chaos probes). Retried for ten minutes instead;
    # a refusal that lasts longer (RBAC removed) still ends in an exit, not a silent hang.
    # The policies' own ticks are the runner's to retry (Runner.tick).
    settings.networking.error_backoffs = API_BACKOFFS_S
    if opts.metrics_port > 0:
        rt.telemetry.serve(opts.metrics_port, opts.metrics_addr)
    logger.info("elastore operator: peering %s (priority %d, lifetime %d s), metrics on %s",
                "off" if opts.standalone else opts.peering, settings.peering.priority,
                settings.peering.lifetime,
                f":{opts.metrics_port}" if opts.metrics_port > 0 else "(off)")


def in_cluster_server(env: Mapping[str, str]) -> str | None:
    """The API server's address the kubelet gives every pod (``KUBERNETES_SERVICE_HOST``
    and ``_PORT``), as client-go's in-cluster configuration reads it; None outside a pod.
    Pure."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port.isdigit():
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


@kopf.on.login()
def login(**kw: Any) -> Any:
    """In a pod: its ServiceAccount, at the address in the pod's environment. kopf's own
    service-account login names ``https://kubernetes.default.svc``, which needs the
    cluster's DNS: a pod whose DNS is down, slow at start, or absent could not reach the
    API server although the kubelet told it the address (found on the real-node test bed,
    which has no DNS). Elsewhere: the kubeconfig ($KUBECONFIG)."""
    info = kopf.login_with_service_account(**kw)
    server = in_cluster_server(os.environ)
    if info is not None and server is not None:
        return dataclasses.replace(info, server=server)
    return info or kopf.login_with_kubeconfig(**kw)


@kopf.index(GROUP, VERSION, PLURAL)
def by_target(namespace: str | None, name: str, spec: kopf.Spec, **_: Any
              ) -> dict[tuple[str, str], str]:
    target = spec.get("target") or {}
    return {(namespace or "", str(target.get("name", ""))): name}


@kopf.on.event("apps", "v1", "statefulsets")
def statefulset_changed(namespace: str | None, name: str, memo: Any,
                        **kw: Any) -> None:
    by_target: kopf.Index[tuple[str, str], str] = kw["by_target"]
    wake = runtime(memo).wake
    for policy in by_target.get((namespace or "", name), []):
        ev = wake.get((namespace or "", policy))
        if ev is not None:
            ev.set()


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=30.0, backoff=RETRY_S)
def control_loop(namespace: str | None, name: str, stopped: kopf.DaemonStopped,
                 logger: kopf.Logger, memo: Any, **_: Any) -> None:
    """The policy's loop, until the policy is deleted or the operator stops or pauses."""
    assert namespace is not None  # ElasticPolicy is namespaced
    from elastore.actuators.k8s import KubeActuator
    from elastore.operator.metrics import prometheus_source
    from elastore.operator.policyapi import PolicyApi, kube_reader
    from elastore.operator.runner import Runner

    rt = runtime(memo)
    client = rt.api_client()
    read = kube_reader(client)
    runner = Runner(namespace, name, PolicyApi(client), KubeActuator(client),
                    rt.model_loader(namespace), rt.telemetry,
                    nodetools=rt.options.nodetools, exec_prefixes=rt.options.exec_prefixes,
                    pod_paths=rt.options.pod_paths,
                    source=lambda spec, ns: prometheus_source(
                        spec, ns, read, rt.options.prometheus_urls))
    wake = rt.wake.setdefault((namespace, name), threading.Event())
    rt.served.add((namespace, name))
    logger.info("control loop started for %s/%s", namespace, name)
    try:
        while not stopped:
            wake.clear()
            try:
                with rt.tick_slot():
                    wait = runner.tick()
            except ElastoreError as exc:
                raise kopf.TemporaryError(f"tick failed: {exc}", delay=RETRY_S) from exc
            if math.isinf(wait):
                logger.info("%s/%s is gone", namespace, name)
                return
            deadline = time.monotonic() + min(wait, MAX_SLEEP_S)
            while not stopped and not wake.is_set() and time.monotonic() < deadline:
                wake.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    finally:
        rt.wake.pop((namespace, name), None)
        logger.info("control loop stopped for %s/%s (%s)", namespace, name,
                    stopped.reason if stopped else "returned")


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    rt = runtime(memo)
    rt.telemetry.forget(namespace or "", name)
    rt.served.discard((namespace or "", name))


@kopf.on.cleanup()
def release_finalizers(memo: Any, logger: kopf.Logger, **_: Any) -> None:
    """On exit, take this operator's finalizer off the policies it served. kopf puts it on
    every object with a daemon (so the daemon stops before the object goes) and leaves it
    there when the operator stops (nolar/kopf#1074, discussion #942): a policy deleted after
    an uninstall would then hang for ever. The next operator to serve a policy puts it back.
    An operator killed without a chance to run this (SIGKILL) leaves it: see the docs'
    "Deleting and uninstalling" for the way out."""
    from elastore.operator.policyapi import release_finalizer

    rt = runtime(memo)
    for ns, name in sorted(rt.served):
        try:
            released = release_finalizer(rt.api_client(), ns, name, FINALIZER)
        except ElastoreError as exc:
            logger.warning("releasing the finalizer of %s/%s: %s", ns, name, exc)
            continue
        if released:
            logger.info("released the finalizer of %s/%s", ns, name)
