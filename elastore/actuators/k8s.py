"""Acting on a storage StatefulSet through the Kubernetes API (kubernetes client).

* **scale** through the StatefulSet's ``scale`` subresource;
* **nodetool** through ``pods/exec`` into the store's container (the command is the
  policy's ``target.nodetool``): ``netstats`` for a node's ring mode, ``decommission``,
  ``setstreamthroughput``;
* **PVCs** of removed pods, deleted only when the policy says so; a PVC's request grown
  (never shrunk) when its StorageClass allows volume expansion;
* **CassandraDatacenters** (cass-operator): ``spec.size`` patched with a compare-and-set,
  the racks' StatefulSets (owned by the datacenter) and their pods read.

It implements :class:`elastore.actuators.ports.ClusterPort`,
:class:`~elastore.actuators.ports.NodetoolPort` and
:class:`~elastore.actuators.ports.DatacenterPort`.

Every call names what failed; nothing here decides anything.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

from elastore.actuators.nodetool import (
    Ring,
    compaction_setting,
    compaction_tasks,
    failure_summary,
    move_args,
    parse_compaction_throughput,
    parse_host_id,
    parse_info_tokens,
    parse_mode,
    read_ring,
    repair_activity,
    stream_setting,
)
from elastore.actuators.ports import (
    CASSDC_API,
    DECOMMISSIONING,
    K8SSANDRA_CLUSTER_LABEL,
    LEFT_RING_ANNOTATION,
    MANAGED_LABEL,
    NODE_STATE_LABEL,
    TOKENS_LABEL,
    DatacenterFacts,
    DriftError,
    StatefulSetFacts,
    VolumeFacts,
    expansion_wanted,
)
from elastore.errors import ElastoreError
from elastore.units import GIB, KIB, MIB, PIB, TIB

log = logging.getLogger("elastore.k8s")

#: the ElasticPolicy API (group, version), as elastore.operator.spec declares it (a test
#: checks they agree; the actuators never import the operator)
POLICY_API = ("elastore.io", "v1alpha1")

_UNITS = {"Ki": KIB, "Mi": MIB, "Gi": GIB, "Ti": TIB, "Pi": PIB,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "": 1}


def parse_quantity(q: str) -> float:
    """A Kubernetes storage quantity (``10Gi``, ``500M``, ``1e9``) in bytes."""
    s = str(q).strip()
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if suffix and s.endswith(suffix):
            return float(s[: -len(suffix)]) * _UNITS[suffix]
    return float(s)


def storage_quantity(n_bytes: float) -> str:
    """Bytes as a Kubernetes quantity: whole ``Gi`` when it divides, else bytes (rounded
    up, never below what was asked)."""
    whole = math.ceil(n_bytes)
    return f"{whole // GIB}Gi" if whole % GIB == 0 else str(whole)


#: the beta annotation that named a PVC's StorageClass before spec.storageClassName (the
#: API server still reads it first)
_BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def _api_message(exc: Any) -> str:
    """The first line of the API server's Status message in an ApiException (a
    validation's message goes on with a diff of the spec), else its reason."""
    try:
        said = str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        said = str(exc.reason)
    return said.strip().splitlines()[0] if said.strip() else str(exc.reason)


@dataclass(frozen=True)
class ExecResult:
    rc: int | None  # None: the exit status could not be read
    stdout: str
    stderr: str


class KubeActuator:
    """The :class:`~elastore.actuators.ports.ClusterPort` of a real cluster."""

    def __init__(self, api_client: Any = None) -> None:
        from kubernetes import client

        self.client = client
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        #: why a decommission issued by this process failed, per (namespace, pod)
        self._failures: dict[tuple[str, str], str] = {}
        self._move_failures: dict[tuple[str, str, str], str] = {}
        #: the cleanups this process issued: "running", "done" or "failed: <why>"
        self._cleanups: dict[tuple[str, str], str] = {}

    # -- StatefulSets -------------------------------------------------------------------------
    def statefulset(self, ns: str, name: str) -> StatefulSetFacts | None:
        from kubernetes.client.exceptions import ApiException

        try:
            sts: Any = self.apps.read_namespaced_stateful_set(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading StatefulSet {ns}/{name}: {exc.reason}") from exc
        tmpl, size = None, None
        vcts = sts.spec.volume_claim_templates or []
        if vcts:
            tmpl = vcts[0].metadata.name
            req = (vcts[0].spec.resources.requests or {}) if vcts[0].spec.resources else {}
            if "storage" in req:
                size = parse_quantity(req["storage"])
        st = sts.status
        meta = sts.metadata
        owner = next((f"{o.kind}/{o.name}" for o in (meta.owner_references or [])
                      if o.controller), None)
        managed = (meta.labels or {}).get(MANAGED_LABEL) == "true"
        return StatefulSetFacts(name, int(sts.spec.replicas or 0), int(st.ready_replicas or 0),
                                int(st.replicas or 0), tmpl, size, managed, owner)

    def scale(self, ns: str, name: str, replicas: int, expect: int) -> None:
        """Compare-and-set through the scale subresource: the patch carries the
        resourceVersion read with ``expect``, so a change made in between is a 409, never
        overwritten."""
        from kubernetes.client.exceptions import ApiException

        try:
            cur: Any = self.apps.read_namespaced_stateful_set_scale(name, ns)
        except ApiException as exc:
            raise ElastoreError(f"reading the scale of StatefulSet {ns}/{name}: "
                                f"{exc.reason}") from exc
        if int(cur.spec.replicas or 0) != expect:
            raise DriftError(f"StatefulSet {ns}/{name} has {cur.spec.replicas} replicas, not "
                             f"the {expect} this step expected: not scaling to {replicas}")
        body = {"metadata": {"resourceVersion": cur.metadata.resource_version},
                "spec": {"replicas": replicas}}
        try:
            self.apps.patch_namespaced_stateful_set_scale(name, ns, body)
        except ApiException as exc:
            if exc.status == 409:
                raise DriftError(f"StatefulSet {ns}/{name} changed while it was being scaled "
                                 f"to {replicas}: not retried blind") from exc
            raise ElastoreError(f"scaling StatefulSet {ns}/{name} to {replicas}: "
                                f"{exc.reason}") from exc
        log.info("scaled %s/%s %d -> %d replicas", ns, name, expect, replicas)

    def contenders(self, ns: str, name: str, policy: str) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        found: list[str] = []
        custom = self.client.CustomObjectsApi(self.core.api_client)
        try:
            hpas: Any = self.client.AutoscalingV2Api(self.core.api_client) \
                .list_namespaced_horizontal_pod_autoscaler(ns)
        except ApiException as exc:
            raise ElastoreError(f"listing HorizontalPodAutoscalers in {ns}: "
                                f"{exc.reason}") from exc
        for h in hpas.items:
            ref = h.spec.scale_target_ref
            if ref.kind == "StatefulSet" and ref.name == name:
                found.append(f"HorizontalPodAutoscaler/{h.metadata.name}")
        try:  # KEDA: absent from most clusters (404: no such resource), never an error
            objs: Any = custom.list_namespaced_custom_object("keda.sh", "v1alpha1", ns,
                                                             "scaledobjects")
        except ApiException as exc:
            if exc.status != 404:
                raise ElastoreError(f"listing KEDA ScaledObjects in {ns}: "
                                    f"{exc.reason}") from exc
            objs = {"items": []}
        for o in objs.get("items", []):
            ref = (o.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") == "StatefulSet" and ref.get("name") == name:
                found.append(f"ScaledObject/{o['metadata']['name']}")
        try:
            pols: Any = custom.list_namespaced_custom_object(*POLICY_API, ns, "elasticpolicies")
        except ApiException as exc:
            raise ElastoreError(f"listing ElasticPolicies in {ns}: {exc.reason}") from exc
        for o in pols.get("items", []):
            spec = o.get("spec") or {}
            # a Recommend policy (the CRD's default mode) never writes the target: a shadow
            # policy beside an Enforce one (a second opinion, the prior alone) is no contender
            if spec.get("mode", "Recommend") != "Enforce":
                continue
            tgt = spec.get("target") or {}
            if tgt.get("name") == name and tgt.get("kind", "StatefulSet") == "StatefulSet" \
                    and o["metadata"]["name"] != policy:
                found.append(f"ElasticPolicy/{o['metadata']['name']}")
        return sorted(found)

    # -- CassandraDatacenters (cass-operator) ----------------------------------------------------
    def datacenter(self, ns: str, name: str) -> DatacenterFacts | None:
        """The datacenter as cass-operator reports it, and its pods: those of the
        StatefulSets it controls (one per rack, ownerReference to its uid), by each
        StatefulSet's own selector."""
        from kubernetes.client.exceptions import ApiException

        custom = self.client.CustomObjectsApi(self.core.api_client)
        try:
            dc: Any = custom.get_namespaced_custom_object(CASSDC_API[0], CASSDC_API[1], ns,
                                                          CASSDC_API[2], name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading CassandraDatacenter {ns}/{name}: "
                                f"{exc.reason}") from exc
        meta, spec, st = dc.get("metadata") or {}, dc.get("spec") or {}, dc.get("status") or {}
        try:
            stss: Any = self.apps.list_namespaced_stateful_set(ns)
        except ApiException as exc:
            raise ElastoreError(f"listing StatefulSets in {ns}: {exc.reason}") from exc
        pods: list[str] = []
        ready = 0
        leaving: list[str] = []
        for sts in stss.items:
            if not any(o.uid == meta.get("uid") and o.controller
                       for o in (sts.metadata.owner_references or [])):
                continue
            sel = ",".join(f"{k}={v}" for k, v in
                           sorted((sts.spec.selector.match_labels or {}).items()))
            try:
                got: Any = self.core.list_namespaced_pod(ns, label_selector=sel)
            except ApiException as exc:
                raise ElastoreError(f"listing the pods of {ns}/{sts.metadata.name}: "
                                    f"{exc.reason}") from exc
            for p in got.items:
                if not p.metadata.name.startswith(f"{sts.metadata.name}-"):
                    continue
                pods.append(p.metadata.name)
                if p.metadata.deletion_timestamp is None and any(
                        c.type == "Ready" and c.status == "True"
                        for c in ((p.status.conditions if p.status else None) or [])):
                    ready += 1
                if (p.metadata.labels or {}).get(NODE_STATE_LABEL) == DECOMMISSIONING:
                    leaving.append(p.metadata.name)
        labels = meta.get("labels") or {}
        owner = next((f"{o.get('kind')}/{o.get('name')}" for o in
                      meta.get("ownerReferences") or [] if o.get("controller")), None)
        if owner is None and labels.get(K8SSANDRA_CLUSTER_LABEL):
            owner = f"K8ssandraCluster/{labels[K8SSANDRA_CLUSTER_LABEL]}"
        req = ((((spec.get("storageConfig") or {}).get("cassandraDataVolumeClaimSpec") or {})
                .get("resources") or {}).get("requests") or {}).get("storage")
        racks = tuple(str(r.get("name")) for r in spec.get("racks") or []) or ("default",)
        return DatacenterFacts(
            name=name, size=int(spec.get("size") or 0), racks=racks,
            generation=int(meta.get("generation") or 0),
            observed_generation=int(st.get("observedGeneration") or 0),
            progress=str(st.get("cassandraOperatorProgress") or ""),
            conditions={str(c.get("type")): str(c.get("status"))
                        for c in st.get("conditions") or []},
            pods=tuple(sorted(pods)), ready_pods=ready, decommissioning=tuple(sorted(leaving)),
            volume_bytes=None if req is None else parse_quantity(req),
            managed=labels.get(MANAGED_LABEL) == "true", owner=owner)

    def resize_datacenter(self, ns: str, name: str, size: int, expect: int) -> None:
        """Compare-and-set of ``spec.size`` (cass-operator's CRD has no scale subresource):
        the patch carries the resourceVersion read with ``expect``; a change in between is a
        409, never overwritten."""
        from kubernetes.client.exceptions import ApiException

        custom = self.client.CustomObjectsApi(self.core.api_client)
        where = f"CassandraDatacenter {ns}/{name}"
        try:
            dc: Any = custom.get_namespaced_custom_object(CASSDC_API[0], CASSDC_API[1], ns,
                                                          CASSDC_API[2], name)
        except ApiException as exc:
            raise ElastoreError(f"reading {where}: {exc.reason}") from exc
        now = int((dc.get("spec") or {}).get("size") or 0)
        if now != expect:
            raise DriftError(f"{where} has size {now}, not the {expect} this step expected: "
                             f"not resizing to {size}")
        body = {"metadata": {"resourceVersion": dc["metadata"]["resourceVersion"]},
                "spec": {"size": size}}
        try:
            custom.patch_namespaced_custom_object(CASSDC_API[0], CASSDC_API[1], ns,
                                                  CASSDC_API[2], name, body)
        except ApiException as exc:
            if exc.status == 409:
                raise DriftError(f"{where} changed while it was being resized to {size}: "
                                 "not retried blind") from exc
            raise ElastoreError(f"resizing {where} to {size}: {exc.reason} "
                                f"{str(exc.body)[:300]}") from exc
        log.info("resized %s %d -> %d", where, expect, size)

    def datacenter_contenders(self, ns: str, name: str, policy: str) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        custom = self.client.CustomObjectsApi(self.core.api_client)
        try:
            pols: Any = custom.list_namespaced_custom_object(*POLICY_API, ns, "elasticpolicies")
        except ApiException as exc:
            raise ElastoreError(f"listing ElasticPolicies in {ns}: {exc.reason}") from exc
        found = []
        for o in pols.get("items", []):
            spec = o.get("spec") or {}
            tgt = spec.get("target") or {}
            if spec.get("mode", "Recommend") == "Enforce" and tgt.get("name") == name and \
                    tgt.get("kind") == "CassandraDatacenter" and \
                    o["metadata"]["name"] != policy:
                found.append(f"ElasticPolicy/{o['metadata']['name']}")
        return sorted(found)

    # -- pods -----------------------------------------------------------------------------------
    def pod(self, ns: str, name: str) -> tuple[bool, bool]:
        """(exists, ready)."""
        from kubernetes.client.exceptions import ApiException

        try:
            p: Any = self.core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return False, False
            raise ElastoreError(f"reading pod {ns}/{name}: {exc.reason}") from exc
        if p.metadata.deletion_timestamp is not None:
            return True, False
        ready = any(c.type == "Ready" and c.status == "True"
                    for c in (p.status.conditions or []))
        return True, ready

    def pod_identity(self, ns: str, name: str, container: str) -> str | None:
        """``"<uid>/<restartCount>"`` of a Running, ready pod's ``container``; else None."""
        from kubernetes.client.exceptions import ApiException

        try:
            p: Any = self.core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading pod {ns}/{name}: {exc.reason}") from exc
        st = p.status
        if p.metadata.deletion_timestamp is not None or st is None or st.phase != "Running":
            return None
        if not any(c.type == "Ready" and c.status == "True" for c in (st.conditions or [])):
            return None
        restarts = next((str(c.restart_count) for c in (st.container_statuses or [])
                         if c.name == container), "-")
        return f"{p.metadata.uid}/{restarts}"

    def exec(self, ns: str, pod: str, container: str, argv: list[str],
             timeout_s: float = 120.0) -> ExecResult:
        """Run ``argv`` in the pod's container (pods/exec) and wait for it."""
        import json

        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        # stream() swaps the ApiClient's request method for a websocket call while it
        # runs: on the client every other call shares, a status patch issued meanwhile by
        # another thread goes out as a websocket handshake and fails ("Handshake status
        # 200 OK", kubernetes-client/python#928). Every exec gets a client of its own.
        own: Any = self.client.ApiClient(configuration=self.core.api_client.configuration)
        try:
            resp = stream(self.client.CoreV1Api(own).connect_get_namespaced_pod_exec, pod, ns,
                          container=container, command=argv, stderr=True, stdin=False,
                          stdout=True, tty=False, _preload_content=False)
        except ApiException as exc:
            own.close()
            raise ElastoreError(f"exec {' '.join(argv)} in {ns}/{pod}: {exc.reason} "
                                f"{str(exc.body)[:300]}") from exc
        except Exception as exc:  # websocket errors carry no common base
            own.close()
            raise ElastoreError(f"exec {' '.join(argv)} in {ns}/{pod}: {exc}") from exc
        out, err = [], []
        try:
            resp.run_forever(timeout=timeout_s)
            out.append(resp.read_stdout() if resp.peek_stdout() else "")
            err.append(resp.read_stderr() if resp.peek_stderr() else "")
            status = resp.read_channel(ERROR_CHANNEL)
        finally:
            resp.close()
            own.close()
        rc: int | None = None
        if status:
            try:
                doc = json.loads(status)
                if doc.get("status") == "Success":
                    rc = 0
                else:
                    causes = (doc.get("details") or {}).get("causes") or []
                    codes = [c.get("message") for c in causes if c.get("reason") == "ExitCode"]
                    rc = int(codes[0]) if codes else 1
            except (ValueError, TypeError):
                rc = None
        return ExecResult(rc, "".join(out), "".join(err))

    def nodetool(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...],
                 *args: str, timeout_s: float = 120.0) -> ExecResult:
        return self.exec(ns, pod, container, [*nodetool, *args], timeout_s)

    def node_mode(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]
                  ) -> str | None:
        """The node's ring mode from ``nodetool netstats`` (None: it did not answer)."""
        try:
            res = self.nodetool(ns, pod, container, nodetool, "netstats", timeout_s=60)
        except ElastoreError as exc:
            log.info("netstats in %s/%s: %s", ns, pod, exc)
            return None
        return parse_mode(res.stdout) if res.rc == 0 else None

    def start_decommission(self, ns: str, pod: str, container: str,
                           nodetool: tuple[str, ...]) -> None:
        """Issue ``nodetool decommission`` without waiting for it (it runs in the node, for
        minutes to hours; the loop follows it with ``netstats``)."""
        def run() -> None:
            try:
                res = self.nodetool(ns, pod, container, nodetool, "decommission",
                                    timeout_s=24 * 3600)
                said = failure_summary(res.stdout, res.stderr)
                log.info("decommission of %s/%s returned %s: %s", ns, pod, res.rc, said)
                if res.rc != 0:
                    self._failures[(ns, pod)] = f"nodetool decommission exited {res.rc}: " \
                                                f"{said}"
            except ElastoreError as exc:
                log.warning("decommission of %s/%s: %s", ns, pod, exc)
                self._failures[(ns, pod)] = str(exc)[:500]

        self._failures.pop((ns, pod), None)
        threading.Thread(target=run, name=f"decommission {pod}", daemon=True).start()

    def decommission_failure(self, ns: str, pod: str) -> str | None:
        return self._failures.get((ns, pod))

    # -- a single-token node's move (issue 38) -------------------------------------------------
    def node_tokens(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]
                    ) -> tuple[int, ...]:
        res = self.nodetool(ns, pod, container, nodetool, "info", "-T", timeout_s=60)
        if res.rc != 0:
            raise ElastoreError(f"nodetool info -T in {ns}/{pod} exited {res.rc}: "
                                f"{failure_summary(res.stdout, res.stderr)}")
        return parse_info_tokens(res.stdout)

    def start_move(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...],
                   token: int) -> None:
        """Issue ``nodetool move`` without waiting for it (the node streams the range it
        gains; the loop follows its tokens and mode)."""
        args = move_args(token)
        key = ("move", ns, pod)

        def run() -> None:
            try:
                res = self.nodetool(ns, pod, container, nodetool, *args,
                                    timeout_s=24 * 3600)
                said = failure_summary(res.stdout, res.stderr)
                log.info("move of %s/%s to %s returned %s: %s", ns, pod, token, res.rc, said)
                if res.rc != 0:
                    self._move_failures[key] = f"nodetool move exited {res.rc}: {said}"
            except ElastoreError as exc:
                log.warning("move of %s/%s: %s", ns, pod, exc)
                self._move_failures[key] = str(exc)[:500]

        self._move_failures.pop(key, None)
        threading.Thread(target=run, name=f"move {pod}", daemon=True).start()

    def move_failure(self, ns: str, pod: str) -> str | None:
        return self._move_failures.get(("move", ns, pod))

    # -- cleanup and repairs ------------------------------------------------------------------
    def start_cleanup(self, ns: str, pod: str, container: str,
                      nodetool: tuple[str, ...]) -> None:
        """Issue ``nodetool cleanup`` without waiting for it (hours on a large node); its
        outcome is :meth:`cleanup_state`'s."""
        key = (ns, pod)

        def run() -> None:
            try:
                res = self.nodetool(ns, pod, container, nodetool, "cleanup",
                                    timeout_s=7 * 24 * 3600)
                said = failure_summary(res.stdout, res.stderr)
                log.info("cleanup of %s/%s returned %s: %s", ns, pod, res.rc, said)
                self._cleanups[key] = "done" if res.rc == 0 else \
                    f"failed: nodetool cleanup exited {res.rc}: {said}"
            except ElastoreError as exc:
                log.warning("cleanup of %s/%s: %s", ns, pod, exc)
                self._cleanups[key] = f"failed: {str(exc)[:500]}"

        self._cleanups[key] = "running"
        threading.Thread(target=run, name=f"cleanup {pod}", daemon=True).start()

    def cleanup_state(self, ns: str, pod: str) -> str | None:
        return self._cleanups.get((ns, pod))

    def _nodetool_out(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...],
                      *args: str) -> str:
        res = self.nodetool(ns, pod, container, nodetool, *args, timeout_s=60)
        if res.rc != 0:
            raise ElastoreError(f"nodetool {' '.join(args)} in {ns}/{pod} exited {res.rc}: "
                                f"{failure_summary(res.stdout, res.stderr, 300)}")
        return res.stdout

    def cleanup_running(self, ns: str, pod: str, container: str,
                        nodetool: tuple[str, ...]) -> bool | None:
        """Whether the node's ``compactionstats`` lists a Cleanup (None: unreadable)."""
        try:
            out = self._nodetool_out(ns, pod, container, nodetool, "compactionstats")
            return "Cleanup" in compaction_tasks(out)
        except ElastoreError as exc:
            log.info("compactionstats in %s/%s: %s", ns, pod, exc)
            return None

    def repair_running(self, ns: str, pod: str, container: str,
                       nodetool: tuple[str, ...]) -> str | None:
        """What shows a repair on the node (:func:`repair_activity`), or None; raises when
        it cannot be read (unknown is not "none")."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:  # two JVM starts at once
            comp = pool.submit(self._nodetool_out, ns, pod, container, nodetool,
                               "compactionstats")
            net = pool.submit(self._nodetool_out, ns, pod, container, nodetool, "netstats")
            return repair_activity(comp.result(), net.result())

    def compaction_throughput(self, ns: str, pod: str, container: str,
                              nodetool: tuple[str, ...]) -> float:
        """The node's compaction throttle in MiB/s (0: unthrottled)."""
        return parse_compaction_throughput(
            self._nodetool_out(ns, pod, container, nodetool, "getcompactionthroughput"))

    def set_compaction_throughput(self, ns: str, pod: str, container: str,
                                  nodetool: tuple[str, ...], mibps: float) -> float:
        """Set the node's compaction throttle (0: unthrottled); the MiB/s set."""
        args, applied = (["0"], 0.0) if mibps == 0 else compaction_setting(mibps)
        self._nodetool_out(ns, pod, container, nodetool, "setcompactionthroughput", *args)
        return applied

    def ring(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> Ring:
        """The cluster as the node in ``pod`` sees it: ``nodetool status``,
        ``describecluster`` and ``info``. A failed call is an error, never a guess."""
        def run(cmd: str) -> str:
            res = self.nodetool(ns, pod, container, nodetool, cmd, timeout_s=120)
            if res.rc != 0:
                raise ElastoreError(f"nodetool {cmd} in {ns}/{pod} exited {res.rc}: "
                                    f"{failure_summary(res.stdout, res.stderr, 300)}")
            return res.stdout

        return read_ring(run)

    def host_id(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> str:
        """The host ID of the node in ``pod`` (``nodetool info``; a decommissioned node
        still answers it)."""
        res = self.nodetool(ns, pod, container, nodetool, "info", timeout_s=120)
        if res.rc != 0:
            raise ElastoreError(f"nodetool info in {ns}/{pod} exited {res.rc}: "
                                f"{failure_summary(res.stdout, res.stderr, 300)}")
        return parse_host_id(res.stdout)

    def set_stream_throughput(self, ns: str, pods: list[str], container: str,
                              nodetool: tuple[str, ...], mibps: float) -> float:
        """Every node's outgoing stream throttle; returns the MiB/s set (nodetool rounds)."""
        args, applied = stream_setting(mibps)
        failed = []
        for p in pods:
            try:
                res = self.nodetool(ns, p, container, nodetool, "setstreamthroughput", *args,
                                    timeout_s=60)
            except ElastoreError as exc:  # the exec itself: the next pod is still tried
                failed.append(f"{p}: {str(exc)[:200]}")
                continue
            if res.rc != 0:
                failed.append(f"{p}: {failure_summary(res.stdout, res.stderr, 200)}")
        if failed:
            raise ElastoreError("setstreamthroughput failed on " + "; ".join(failed))
        return applied

    # -- the pods' tokens (issue 38's split at a scale-out) ------------------------------------
    def pod_tokens_config(self, ns: str, name: str) -> tuple[dict[str, str], bool] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            cm: Any = self.core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading ConfigMap {ns}/{name}: {exc.reason}") from exc
        labels = cm.metadata.labels or {}
        return ({str(k): str(v) for k, v in (cm.data or {}).items()},
                labels.get(TOKENS_LABEL) == "true")

    def set_pod_token(self, ns: str, name: str, pod: str, value: str) -> None:
        from kubernetes.client.exceptions import ApiException

        got = self.pod_tokens_config(ns, name)
        try:
            if got is None:
                obj: Any = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": ns, "labels": {
                                TOKENS_LABEL: "true",
                                "app.kubernetes.io/managed-by": "elastore"}},
                            "data": {pod: value}}
                self.core.create_namespaced_config_map(ns, obj)
                return
            if not got[1]:
                raise ElastoreError(f"ConfigMap {ns}/{name} exists without the label "
                                    f"{TOKENS_LABEL}=true: it is not the operator's to write")
            self.core.patch_namespaced_config_map(name, ns, {"data": {pod: value}})
        except ApiException as exc:
            raise ElastoreError(f"writing ConfigMap {ns}/{name}: {exc.reason}") from exc

    # -- Swift: the pods' IPs, and the rings' ConfigMap -----------------------------------------
    def pod_ip(self, ns: str, name: str) -> str | None:
        """The pod's IP while it is not being deleted; None when it has none (or is gone)."""
        from kubernetes.client.exceptions import ApiException

        try:
            p: Any = self.core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading pod {ns}/{name}: {exc.reason}") from exc
        if p.metadata.deletion_timestamp is not None or p.status is None:
            return None
        ip = p.status.pod_ip
        return str(ip) if ip else None

    def read_files(self, ns: str, name: str) -> tuple[str, dict[str, bytes], dict[str, str]]:
        """A ConfigMap's files (``binaryData``, and ``data`` as UTF-8), its resourceVersion
        and its labels."""
        import base64

        from kubernetes.client.exceptions import ApiException

        try:
            cm: Any = self.core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                raise ElastoreError(f"ConfigMap {ns}/{name} not found") from exc
            raise ElastoreError(f"reading ConfigMap {ns}/{name}: {exc.reason}") from exc
        files = {str(k): base64.b64decode(v) for k, v in (cm.binary_data or {}).items()}
        files.update({str(k): str(v).encode() for k, v in (cm.data or {}).items()})
        labels = {str(k): str(v) for k, v in (cm.metadata.labels or {}).items()}
        return str(cm.metadata.resource_version), files, labels

    def write_files(self, ns: str, name: str, resource_version: str,
                    files: dict[str, bytes]) -> str:
        """Replace the ConfigMap's files with ``files`` (all as ``binaryData``), only if it
        is still at ``resource_version`` (anyone else's change in between is a
        :class:`DriftError`, and nothing is written). Returns the new resourceVersion."""
        import base64

        from kubernetes.client.exceptions import ApiException

        try:
            cm: Any = self.core.read_namespaced_config_map(name, ns)
            # the version read before the change, not this one: a write in between fails
            cm.metadata.resource_version = resource_version
            cm.binary_data = {k: base64.b64encode(v).decode() for k, v in files.items()}
            cm.data = None
            new: Any = self.core.replace_namespaced_config_map(name, ns, cm)
        except ApiException as exc:
            if exc.status == 409:
                raise DriftError(f"ConfigMap {ns}/{name} changed since it was read (someone "
                                 "else writes the rings): nothing written") from exc
            raise ElastoreError(f"writing ConfigMap {ns}/{name}: {exc.reason} "
                                f"{str(exc.body)[:300]}") from exc
        return str(new.metadata.resource_version)

    # -- PVCs ------------------------------------------------------------------------------------
    def pvc_exists(self, ns: str, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.read_namespaced_persistent_volume_claim(name, ns)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise ElastoreError(f"reading PVC {ns}/{name}: {exc.reason}") from exc

    def mark_pvc(self, ns: str, name: str, value: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.patch_namespaced_persistent_volume_claim(
                name, ns, {"metadata": {"annotations": {LEFT_RING_ANNOTATION: value}}})
        except ApiException as exc:
            if exc.status != 404:
                raise ElastoreError(f"annotating PVC {ns}/{name}: {exc.reason}") from exc

    def pvc_mark(self, ns: str, name: str) -> tuple[str, str | None] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            pvc: Any = self.core.read_namespaced_persistent_volume_claim(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading PVC {ns}/{name}: {exc.reason}") from exc
        value = (pvc.metadata.annotations or {}).get(LEFT_RING_ANNOTATION)
        return str(pvc.metadata.uid), None if value is None else str(value)

    def unmark_pvc(self, ns: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:  # a merge patch with null removes the annotation (absent: nothing changes)
            self.core.patch_namespaced_persistent_volume_claim(
                name, ns, {"metadata": {"annotations": {LEFT_RING_ANNOTATION: None}}})
        except ApiException as exc:
            if exc.status != 404:
                raise ElastoreError(f"unmarking PVC {ns}/{name}: {exc.reason}") from exc

    def delete_pvc(self, ns: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_persistent_volume_claim(name, ns)
        except ApiException as exc:
            if exc.status != 404:
                raise ElastoreError(f"deleting PVC {ns}/{name}: {exc.reason}") from exc

    # -- a PVC's size: read, and grown in place --------------------------------------------------
    def _read_pvc(self, ns: str, name: str) -> Any:
        """The PVC object; None if it does not exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core.read_namespaced_persistent_volume_claim(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ElastoreError(f"reading PVC {ns}/{name}: {exc.reason}") from exc

    def _expandable(self, storage_class: str | None) -> bool | None:
        """The StorageClass's ``allowVolumeExpansion`` (absent: False); None when the PVC
        names no class or the class cannot be read (gone, or not ours to read)."""
        from kubernetes.client.exceptions import ApiException

        if not storage_class:
            return None
        try:
            sc: Any = self.client.StorageV1Api(self.core.api_client).read_storage_class(
                storage_class)
        except ApiException as exc:
            log.info("reading StorageClass %s: %s", storage_class, exc.reason)
            return None
        return bool(sc.allow_volume_expansion)

    def _volume_facts(self, pvc: Any) -> VolumeFacts:
        spec, st, meta = pvc.spec, pvc.status, pvc.metadata
        req = ((spec.resources.requests if spec.resources else None) or {}).get("storage")
        cap = ((st.capacity if st else None) or {}).get("storage")
        requested = None if req is None else parse_quantity(req)
        capacity = None if cap is None else parse_quantity(cap)
        cls = (meta.annotations or {}).get(_BETA_CLASS_ANNOTATION) or spec.storage_class_name
        conds = {c.type: c.status for c in ((st.conditions if st else None) or [])}
        resizing = any(conds.get(t) == "True" for t in ("Resizing", "FileSystemResizePending")) \
            or (requested is not None and capacity is not None and requested > capacity)
        return VolumeFacts(name=str(meta.name), uid=str(meta.uid), requested_bytes=requested,
                           capacity_bytes=capacity, phase=str((st.phase if st else None) or ""),
                           storage_class=str(cls) if cls else None,
                           expandable=self._expandable(cls), resizing=resizing)

    def volume(self, ns: str, name: str) -> VolumeFacts | None:
        pvc = self._read_pvc(ns, name)
        return None if pvc is None else self._volume_facts(pvc)

    def expand_volume(self, ns: str, name: str, to_bytes: float) -> None:
        """Patch the PVC's storage request up to ``to_bytes``, with the resourceVersion read
        (a change in between is a :class:`DriftError`, never overwritten: the check against
        shrinking holds for the request the patch replaces). The API server's
        PersistentVolumeClaimResize admission refuses any class without
        ``allowVolumeExpansion: true`` (403), its validation any claim not Bound (422):
        each said as an error naming the PVC and its class."""
        from kubernetes.client.exceptions import ApiException

        where = f"PVC {ns}/{name}"
        pvc = self._read_pvc(ns, name)
        if pvc is None:
            raise ElastoreError(f"{where} does not exist: cannot expand it to "
                                f"{storage_quantity(to_bytes)}")
        facts = self._volume_facts(pvc)
        if not expansion_wanted(where, facts.requested_bytes, to_bytes):
            return
        qty = storage_quantity(to_bytes)
        if facts.storage_class is None:
            raise ElastoreError(f"{where} names no StorageClass: Kubernetes grows only a PVC "
                                f"whose class allows volume expansion; not expanding it to {qty}")
        if facts.expandable is False:
            raise ElastoreError(f"{where}: its StorageClass {facts.storage_class} does not allow "
                                f"volume expansion (allowVolumeExpansion is not true); not "
                                f"expanding it to {qty}")
        body = {"metadata": {"resourceVersion": pvc.metadata.resource_version},
                "spec": {"resources": {"requests": {"storage": qty}}}}
        try:
            self.core.patch_namespaced_persistent_volume_claim(name, ns, body)
        except ApiException as exc:
            if exc.status == 409:
                raise DriftError(f"{where} changed while it was being expanded to {qty}: not "
                                 "retried blind") from exc
            if exc.status == 404:
                raise ElastoreError(f"{where} is gone: cannot expand it to {qty}") from exc
            if exc.status in (403, 422):
                raise ElastoreError(
                    f"the API server refused to expand {where} (StorageClass "
                    f"{facts.storage_class}, phase {facts.phase or 'unknown'}) to {qty}: "
                    f"{_api_message(exc)[:400]}") from exc
            raise ElastoreError(f"expanding {where} to {qty}: {exc.reason} "
                                f"{str(exc.body)[:300]}") from exc
        log.info("expanded %s %s -> %s", where, storage_quantity(facts.requested_bytes or 0),
                 qty)
