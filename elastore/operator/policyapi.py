"""The ElasticPolicy objects' API: the policy read, its status patched, its Events and its
learned-model ConfigMap (:class:`PolicyStore`, and :class:`PolicyApi` on the Kubernetes
API). The conditions it writes are :mod:`elastore.operator.conditions`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from elastore.errors import ElastoreError, StatusConflict
from elastore.operator.spec import GROUP, KIND, PLURAL, VERSION

log = logging.getLogger("elastore.operator")

def identity() -> str:
    """This operator replica: ``$ELASTORE_IDENTITY``, else host/pid (the pod name in a
    Deployment is the host name)."""
    import os
    import socket

    return os.environ.get("ELASTORE_IDENTITY") or f"{socket.gethostname()}/{os.getpid()}"


class PolicyStore(Protocol):
    """What the control loop reads and writes of its own ElasticPolicy."""

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        """The whole object; None once it is deleted."""

    def patch_status(self, ns: str, name: str, status: dict[str, Any],
                     expect_version: str | None = None) -> str | None:
        """A JSON merge patch of the status subresource; the object's resourceVersion
        after it (None: not known). ``expect_version``: only if the object is still at that
        resourceVersion, else :class:`~elastore.errors.StatusConflict`."""

    def event(self, body: dict[str, Any], reason: str, message: str,
              warning: bool = False) -> None:
        """An Event about the policy (failures are logged, never fatal)."""

    def read_model(self, ns: str, name: str, key: str) -> tuple[str | None, list[str]]:
        """A learned model's ConfigMap: the text under ``key`` (None: no ConfigMap, or no
        such key) and the uids of its owners."""

    def write_model(self, body: dict[str, Any], name: str, key: str, text: str) -> None:
        """Create or update the ConfigMap ``name`` in the policy's namespace, owned by the
        policy (deleted with it)."""


@dataclass
class PolicyApi:
    """Reads an ElasticPolicy, patches its status subresource, posts Events about it: the
    :class:`PolicyStore` of a real cluster."""

    api_client: Any = None

    def __post_init__(self) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            body: Any = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading ElasticPolicy {ns}/{name}: {exc.reason}") from exc
        return body if isinstance(body, dict) else None

    def patch_status(self, ns: str, name: str, status: dict[str, Any],
                     expect_version: str | None = None) -> str | None:
        from kubernetes.client.exceptions import ApiException

        patch: dict[str, Any] = {"status": status}
        if expect_version is not None:
            # a precondition: the API server refuses the patch (409) unless the object is
            # still at this resourceVersion
            patch["metadata"] = {"resourceVersion": expect_version}
        try:
            got: Any = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, PLURAL, name, patch)
        except ApiException as exc:
            if exc.status == 409 and expect_version is not None:
                raise StatusConflict(
                    f"writing the status of ElasticPolicy {ns}/{name}: it changed since "
                    f"it was read at resourceVersion {expect_version} (another writer: a "
                    "second replica that believes it leads, or a person)") from exc
            raise ElastoreError(f"writing the status of ElasticPolicy {ns}/{name}: "
                                f"{exc.reason} {str(exc.body)[:300]}") from exc
        version = (got.get("metadata") or {}).get("resourceVersion") \
            if isinstance(got, dict) else None
        return str(version) if version is not None else None

    def event(self, body: dict[str, Any], reason: str, message: str,
              warning: bool = False) -> None:
        """A Kubernetes Event about the policy (failures are logged, never fatal)."""
        from datetime import UTC, datetime

        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        meta = body["metadata"]
        # the log says what the Events say: an operator's log alone tells what it did
        log.log(logging.WARNING if warning else logging.INFO, "%s/%s %s: %s",
                meta["namespace"], meta["name"], reason, message[:1000])
        now = datetime.now(UTC)
        ev = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.",
                                         namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind=KIND, name=meta["name"],
                namespace=meta["namespace"], uid=meta.get("uid")),
            reason=reason, message=message[:1000], type="Warning" if warning else "Normal",
            source=client.V1EventSource(component="elastore", host=identity()),
            first_timestamp=now, last_timestamp=now, count=1,
            reporting_component="elastore", reporting_instance=identity())
        try:
            self.core.create_namespaced_event(meta["namespace"], ev)
        except ApiException as exc:
            log.warning("posting event %s on %s/%s: %s", reason, meta["namespace"],
                        meta["name"], exc.reason)

    def read_model(self, ns: str, name: str, key: str) -> tuple[str | None, list[str]]:
        from kubernetes.client.exceptions import ApiException

        try:
            cm: Any = self.core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None, []
            raise ElastoreError(f"reading ConfigMap {ns}/{name}: {exc.reason}") from exc
        owners = [str(o.uid) for o in (cm.metadata.owner_references or [])]
        return (cm.data or {}).get(key), owners

    def write_model(self, body: dict[str, Any], name: str, key: str, text: str) -> None:
        from kubernetes.client.exceptions import ApiException

        ns = body["metadata"]["namespace"]
        obj: Any = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns,
                            "labels": {"app.kubernetes.io/managed-by": "elastore"},
                            "ownerReferences": [owner_reference(body)]},
               "data": {key: text}}
        try:
            self.core.patch_namespaced_config_map(name, ns, {"data": {key: text}})
        except ApiException as exc:
            if exc.status != 404:
                raise ElastoreError(f"writing ConfigMap {ns}/{name}: {exc.reason}") from exc
            try:
                self.core.create_namespaced_config_map(ns, obj)
            except ApiException as exc2:
                raise ElastoreError(f"creating ConfigMap {ns}/{name}: {exc2.reason}") \
                    from exc2


def kube_reader(api_client: Any) -> Callable[[str, str, str, str, str], str]:
    """Reads one key of a Secret or ConfigMap for the Prometheus credentials of a policy
    (:func:`elastore.operator.metrics.resolve_credentials`), to be sent to a URL. A policy's
    author who may not read a Secret must not have the operator send it anywhere, nor learn
    anything of it, so a Secret is used only when it carries the label
    ``elastore.io/prometheus-credentials: "true"`` and is bound to the URL by its annotation
    ``elastore.io/prometheus-urls`` (:mod:`elastore.operator.endpoints`). The label is
    checked before anything else: a Secret that is missing, unreadable or unlabelled gives
    the same words, and its keys are named only once it is marked for this use."""
    import base64

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from elastore.operator import endpoints
    from elastore.operator.spec import CREDENTIALS_LABEL

    core = client.CoreV1Api(api_client)

    def read(kind: str, ns: str, name: str, key: str, url: str) -> str:
        if kind == "Secret":
            unusable = ElastoreError(
                f"Secret {ns}/{name} (spec.metrics.prometheus credentials) is not one the "
                f"operator may use: it must exist and carry the label {CREDENTIALS_LABEL}="
                "\"true\"")
            try:
                obj: Any = core.read_namespaced_secret(name, ns)
            except ApiException:
                raise unusable from None
            meta = obj.metadata
            if (meta.labels or {}).get(CREDENTIALS_LABEL) != "true":
                raise unusable
            if not endpoints.allowed(url, endpoints.bound_patterns(meta.annotations)):
                raise ElastoreError(f"Secret {ns}/{name} is not bound to {url}: its owner "
                                    f"lists the URLs it may be sent to in the annotation "
                                    f"{endpoints.BOUND_ANNOTATION}")
            data = obj.data or {}
            if key not in data:
                raise ElastoreError(f"Secret {ns}/{name} has no key {key!r}")
            return base64.b64decode(data[key]).decode()
        try:
            cm: Any = core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            raise ElastoreError(f"{kind} {ns}/{name} (spec.metrics.prometheus credentials): "
                                f"{exc.reason}") from exc
        cm_data = cm.data or {}
        if key not in cm_data:
            raise ElastoreError(f"{kind} {ns}/{name} has no key {key!r}")
        return str(cm_data[key])

    return read


def owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    """The policy as the owner of an object it made (garbage-collected with it)."""
    meta = body["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": False}


def release_finalizer(api_client: Any, ns: str, name: str, finalizer: str) -> bool:
    """Remove ``finalizer`` from the policy (compare-and-set on its resourceVersion, so a
    concurrent change is never overwritten); False if it was not there or the policy is
    gone."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.CustomObjectsApi(api_client)
    try:
        body: Any = api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        meta = body["metadata"]
        if finalizer not in (meta.get("finalizers") or []):
            return False
        keep = [f for f in meta["finalizers"] if f != finalizer]
        api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {
            "metadata": {"finalizers": keep, "resourceVersion": meta["resourceVersion"]}})
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise ElastoreError(f"ElasticPolicy {ns}/{name}: {exc.reason}") from exc
    return True
