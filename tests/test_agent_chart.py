"""The Helm chart's BwMan node agent (agent.*): a DaemonSet in the node's network namespace
with NET_ADMIN only (PERFMON too when agent.interference.perfmon asks for hardware
counters), the host's cgroup tree read-only for the interference probe, read-only RBAC
(cluster-wide, or Roles in watchNamespaces only), a metrics Service and an optional
PodMonitor; off by default.

The rendering tests need only helm, but helm comes from ``testbed.k8s.ensure_helm`` (built
from the Go module proxy the first time), so they are ``k8s`` like the rest of the chart's
tests; the last two install the chart on a real API server and ask its authorizer what the
agent's ServiceAccount may do.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_support import get, start_control_plane, wait_until
from testbed.k8s import FAKE_NODE, ControlPlane

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "elastore"
RELEASE = "bw"  # full name bw-elastore; the agent's objects bw-elastore-agent
AGENT = "bw-elastore-agent"
PODMONITOR_API = "monitoring.coreos.com/v1/PodMonitor"

Doc = dict[str, Any]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    from testbed.k8s import ensure_helm

    res = subprocess.run([str(ensure_helm(print)), *args], capture_output=True, text=True,
                         check=False)
    if check:
        assert res.returncode == 0, f"helm {' '.join(args)}: {res.stderr}"
    return res


def sets(values: dict[str, str]) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


def render(values: dict[str, str] | None = None, *extra: str) -> list[Doc]:
    """``helm template`` of the chart as release ``bw`` in namespace ``elastore-system``."""
    out = helm("template", RELEASE, str(CHART), "--namespace", "elastore-system",
               *sets(values or {}), *extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in of_kind(docs, kind)])
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def agent_subject(subjects: list[dict[str, str]]) -> bool:
    return any(s["kind"] == "ServiceAccount" and s["name"] == AGENT for s in subjects)


ON = {"agent.enabled": "true"}
#: the whole cluster: asked for (the default is the release's own namespace, issue 35)
ALL = {"watchAllNamespaces": "true"}
READS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
         {"apiGroups": ["elastore.io"], "resources": ["elasticpolicies"],
          "verbs": ["get", "list", "watch"]},
         {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list"]},
         {"apiGroups": ["cassandra.datastax.com"], "resources": ["cassandradatacenters"],
          "verbs": ["get"]}]


# ------------------------------------------------------------------------------------------
def test_agent_values_are_off_by_default_and_small() -> None:
    """The documented defaults (no helm needed): nothing runs on nodes unless asked."""
    agent = yaml.safe_load((CHART / "values.yaml").read_text())["agent"]
    assert agent["enabled"] is False
    assert agent["period"] == 5 and agent["metrics"]["port"] == 9103
    assert agent["podMonitor"]["enabled"] is False and agent["service"] is True
    assert agent["serviceAccount"] == {"create": True, "name": ""}
    assert agent["resources"] == {"requests": {"cpu": "20m", "memory": "160Mi"},
                                  "limits": {"memory": "256Mi"}}
    assert agent["tolerations"] == [] and agent["priorityClassName"] == ""
    assert agent["logLevel"] == "info"
    assert agent["interference"] == {"enabled": True, "window": "15s", "perfmon": False}


@pytest.mark.k8s
def test_agent_chart_lints() -> None:
    for extra in ([], ["--set", "watchNamespaces={a,b}"],
                  ["--set", "agent.podMonitor.enabled=true", "--set", "agent.service=false"]):
        res = helm("lint", str(CHART), *sets(ON), *extra, "--strict", check=False)
        assert res.returncode == 0, (extra, res.stdout, res.stderr)


@pytest.mark.k8s
def test_agent_chart_renders_a_daemonset_with_net_admin_only() -> None:
    docs = render(ON)
    ds = one(docs, "DaemonSet", AGENT)
    assert ds["metadata"]["namespace"] == "elastore-system"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["serviceAccountName"] == AGENT
    assert pod["terminationGracePeriodSeconds"] == 30
    assert "priorityClassName" not in pod and "tolerations" not in pod
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert sc.get("privileged") is not True and pod["securityContext"].get("privileged") in (
        None, False)
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    # the operator's image
    dep = one(docs, "Deployment")
    assert c["image"] == dep["spec"]["template"]["spec"]["containers"][0]["image"]
    # it reads the release's own namespace by default (the operator's, issue 35)
    assert c["args"] == ["agent", "run", "--node", "$(NODE_NAME)", "--period", "5",
                         "--metrics-port", "9103", "--watch-namespace", "elastore-system",
                         "--log-level", "info", "--cgroup-root", "/host/sys/fs/cgroup",
                         "--interference-window", "15s"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}
            } in c["env"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9103, "hostPort": 9103,
                           "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    assert c["resources"] == {"requests": {"cpu": "20m", "memory": "160Mi"},
                              "limits": {"memory": "256Mi"}}
    # a read-only root: the only writable path is an emptyDir; the host's cgroup tree is
    # read-only too (the interference probe)
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"},
                                 {"name": "host-cgroup", "mountPath": "/host/sys/fs/cgroup",
                                  "readOnly": True}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {}},
                              {"name": "host-cgroup",
                               "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}}]


@pytest.mark.k8s
def test_agent_chart_interference_values() -> None:
    """The probe's window reaches the agent; PERFMON only on request; off: no host mount."""
    def container(values: dict[str, str]) -> Doc:
        pod = one(render({**ON, **values}), "DaemonSet", AGENT)["spec"]["template"]["spec"]
        c: Doc = pod["containers"][0]
        c["_volumes"] = pod["volumes"]
        return c

    c = container({"agent.interference.window": "30s", "agent.interference.perfmon": "true"})
    k = c["args"].index("--interference-window")
    assert c["args"][k + 1] == "30s"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"],
                                                    "add": ["NET_ADMIN", "PERFMON"]}
    assert c["securityContext"].get("privileged") is False
    c = container({"agent.interference.enabled": "false", "agent.interference.perfmon": "true"})
    assert c["args"][-1] == "--no-interference" and "--cgroup-root" not in c["args"]
    assert c["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert c["_volumes"] == [{"name": "tmp", "emptyDir": {}}]


@pytest.mark.k8s
def test_agent_chart_values_reach_the_daemonset() -> None:
    docs = render({**ON, **ALL, "agent.period": "7", "agent.metrics.port": "9200",
                   "agent.logLevel": "debug", "agent.priorityClassName": "system-node-critical",
                   "agent.nodeSelector.elastore\\.io/store": "cassandra",
                   "agent.tolerations[0].operator": "Exists",
                   "agent.serviceAccount.name": "shaper", "image.tag": "9.9.9"})
    ds = one(docs, "DaemonSet", AGENT)
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][:10] == ["agent", "run", "--node", "$(NODE_NAME)", "--period", "7",
                              "--metrics-port", "9200", "--log-level", "debug"]
    assert c["ports"][0]["containerPort"] == c["ports"][0]["hostPort"] == 9200
    assert c["image"].endswith(":9.9.9")
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeSelector"] == {"elastore.io/store": "cassandra"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["serviceAccountName"] == "shaper"
    assert one(docs, "ServiceAccount", "shaper")
    crb = one(docs, "ClusterRoleBinding", AGENT)
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "shaper",
                                "namespace": "elastore-system"}]
    svc = one(docs, "Service", f"{AGENT}-metrics")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9200, "targetPort": "metrics"}]


@pytest.mark.k8s
def test_agent_chart_renders_nothing_of_the_agent_by_default() -> None:
    docs = render()
    assert not of_kind(docs, "DaemonSet") and not of_kind(docs, "PodMonitor")
    assert not [d for d in docs if "agent" in d["metadata"]["name"]
                or d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
                == "agent"]
    for b in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding"):
        assert not agent_subject(b["subjects"]), b
    # the operator's own objects are unchanged by the agent's values
    assert render() == render({"agent.service": "true", "agent.podMonitor.enabled": "true"},
                              "--api-versions", PODMONITOR_API)


@pytest.mark.k8s
def test_agent_chart_selectors_never_cross_the_operators() -> None:
    """The operator's Deployment selector is immutable (name + instance): the agent's pods
    must lack one of its labels, and the agent's selector must not match operator pods."""
    docs = render(ON)
    dep, ds = one(docs, "Deployment"), one(docs, "DaemonSet", AGENT)
    op_sel, ag_sel = (d["spec"]["selector"]["matchLabels"] for d in (dep, ds))
    op_pod, ag_pod = (d["spec"]["template"]["metadata"]["labels"] for d in (dep, ds))
    assert matches(op_sel, op_pod) and matches(ag_sel, ag_pod)
    assert not matches(op_sel, ag_pod) and not matches(ag_sel, op_pod)
    assert ag_pod["app.kubernetes.io/component"] == "agent"
    assert ag_pod["app.kubernetes.io/instance"] == RELEASE
    op_svc, ag_svc = one(docs, "Service", "bw-elastore-metrics"), one(
        docs, "Service", f"{AGENT}-metrics")
    assert matches(op_svc["spec"]["selector"], op_pod)
    assert not matches(op_svc["spec"]["selector"], ag_pod)
    assert matches(ag_svc["spec"]["selector"], ag_pod)
    assert not matches(ag_svc["spec"]["selector"], op_pod)
    # the operator's selector is what earlier releases installed (an upgrade keeps it)
    assert op_sel == {"app.kubernetes.io/name": "elastore",
                      "app.kubernetes.io/instance": RELEASE}


@pytest.mark.k8s
def test_agent_chart_rbac_reads_only() -> None:
    docs = render({**ON, **ALL})
    cr = one(docs, "ClusterRole", AGENT)
    assert cr["rules"] == READS
    crb = one(docs, "ClusterRoleBinding", AGENT)
    assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": AGENT}
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": AGENT,
                                "namespace": "elastore-system"}]
    assert one(docs, "ServiceAccount", AGENT)["metadata"]["namespace"] == "elastore-system"
    # the agent's SA is bound to nothing else (the operator's roles are its own)
    bound = [b["metadata"]["name"] for b in of_kind(docs, "ClusterRoleBinding")
             + of_kind(docs, "RoleBinding") if agent_subject(b["subjects"])]
    assert bound == [AGENT]
    assert not of_kind(render({**ON, **ALL}), "Role")
    assert "ServiceAccount" not in {
        d["kind"] for d in render({**ON, "agent.serviceAccount.create": "false"})
        if d["metadata"]["name"] == AGENT}


@pytest.mark.k8s
def test_agent_chart_namespaced_rbac_and_watch_flags() -> None:
    docs = render({**ON, "watchNamespaces": "{a,b}"})
    roles = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == AGENT]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    assert all(r["rules"] == READS for r in roles)
    bindings = [b for b in of_kind(docs, "RoleBinding") if b["metadata"]["name"] == AGENT]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["a", "b"]
    for b in bindings:
        assert b["roleRef"]["kind"] == "Role" and b["roleRef"]["name"] == AGENT
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": AGENT,
                                  "namespace": "elastore-system"}]
    # no cluster-wide grant to the agent at all
    assert not [d for d in of_kind(docs, "ClusterRole") if d["metadata"]["name"] == AGENT]
    for b in of_kind(docs, "ClusterRoleBinding"):
        assert not agent_subject(b["subjects"]), b
    args = one(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]["containers"][0]["args"]
    k = args.index("--watch-namespace")
    assert args[k:k + 4] == ["--watch-namespace", "a", "--watch-namespace", "b"]
    assert args.count("--watch-namespace") == 2


@pytest.mark.k8s
def test_agent_chart_metrics_service_is_headless_and_annotated() -> None:
    svc = one(render(ON), "Service", f"{AGENT}-metrics")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9103, "targetPort": "metrics"}]
    assert svc["metadata"]["annotations"] == {"prometheus.io/scrape": "true",
                                              "prometheus.io/port": "9103",
                                              "prometheus.io/path": "/metrics"}
    assert not [s for s in of_kind(render({**ON, "agent.service": "false"}), "Service")
                if s["metadata"]["name"].startswith(AGENT)]


@pytest.mark.k8s
def test_agent_chart_podmonitor_only_where_the_api_is_served() -> None:
    with_api = ["--api-versions", PODMONITOR_API]
    asked = {**ON, "agent.podMonitor.enabled": "true"}
    assert not of_kind(render(asked), "PodMonitor")  # no such API: nothing to fail on
    assert not of_kind(render(ON, *with_api), "PodMonitor")  # not asked for
    assert not of_kind(render({"agent.podMonitor.enabled": "true"}, *with_api), "PodMonitor")
    docs = render({**asked, "agent.podMonitor.labels.release": "kps",
                   "agent.podMonitor.interval": "15s"}, *with_api)
    pm = one(docs, "PodMonitor", AGENT)
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"]["labels"]["release"] == "kps"
    ds = one(docs, "DaemonSet", AGENT)
    assert pm["spec"]["selector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"]
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["elastore-system"]}
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics",
                                                  "honorLabels": True, "interval": "15s"}]


# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("k8s"))
    yield cp
    cp.stop()


def install(cp: ControlPlane, release: str, *values: str) -> None:
    helm("install", release, str(CHART), "--namespace", release, "--create-namespace",
         "--kubeconfig", str(cp.kubeconfig), "--set", "agent.enabled=true",
         "--set", f"peering.name={release}", *values)


def uninstall_leaves_nothing(cp: ControlPlane, release: str, namespaces: list[str]) -> None:
    helm("uninstall", release, "--namespace", release, "--kubeconfig", str(cp.kubeconfig),
         "--wait", "--timeout", "120s")
    agent = f"{release}-elastore-agent"
    sel = f"app.kubernetes.io/instance={release}"
    for kinds, where in [("clusterroles,clusterrolebindings", []),
                         ("daemonsets,serviceaccounts,services,deployments", ["-n", release]),
                         *[("roles,rolebindings", ["-n", ns]) for ns in namespaces]]:
        left = cp.kubectl("get", kinds, *where, "-l", sel, "-o", "name").stdout.split()
        assert left == [], (release, left)
    assert cp.kubectl("get", "clusterrole", agent, check=False).returncode != 0
    wait_until(f"the agent pods of {release} to go", lambda: not cp.kubectl(
        "get", "pods", "-n", release, "-l", "app.kubernetes.io/component=agent", "-o",
        "name").stdout.strip(), 60)


def can_i(cp: ControlPlane, sa: str, verb: str, res: str, where: list[str]) -> str:
    kind, _, sub = res.partition("/")
    return str(cp.kubectl("auth", "can-i", verb, kind,
                          *([f"--subresource={sub}"] if sub else []), *where, "--as", sa,
                          check=False).stdout.strip())


AGENT_READS = [*((v, r) for r in ("pods", "elasticpolicies.elastore.io")
                 for v in ("get", "list", "watch")),
               # a policy's target and its pods' owners (a status can be forged)
               # (cassandradatacenters: only in the rendered rules, READS; no CRD of
               # cass-operator is installed here for `auth can-i` to resolve)
               ("get", "statefulsets.apps"), ("list", "statefulsets.apps")]
NEVER = [("create", "pods"), ("delete", "pods"), ("create", "pods/exec"),
         ("get", "pods/exec"), ("patch", "elasticpolicies.elastore.io"),
         ("patch", "elasticpolicies.elastore.io/status"), ("get", "secrets"),
         ("patch", "statefulsets.apps/scale"), ("update", "nodes"),
         ("patch", "statefulsets.apps"),
         ("create", "events"), ("list", "configmaps")]


@pytest.mark.k8s
def test_agent_chart_installs_with_a_pod_per_node_and_only_reads(cp: ControlPlane) -> None:
    """On the real API server: the DaemonSet is accepted and its controller puts a pod on
    kwok's node; the operator's and the agent's selectors each find their own pods only;
    the agent's ServiceAccount may read pods and policies everywhere and do nothing else;
    helm uninstall leaves nothing of it."""
    release = "bw"
    install(cp, release, "--set", "watchAllNamespaces=true")
    ds = get(cp, "daemonset", AGENT, release)
    assert ds["spec"]["template"]["spec"]["hostNetwork"] is True
    pods = wait_until("the DaemonSet's pod on kwok's node", lambda: json.loads(cp.kubectl(
        "get", "pods", "-n", release, "-l", "app.kubernetes.io/component=agent", "-o", "json"
    ).stdout)["items"], 60)
    assert [p["spec"]["nodeName"] for p in pods] == [FAKE_NODE]
    assert pods[0]["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    wait_until("the DaemonSet to count its pod ready", lambda: get(
        cp, "daemonset", AGENT, release).get("status", {}).get("numberReady") == 1, 60)
    # the selectors, on the server: 2 operator pods and 1 agent pod, never each other's
    wait_until("the operator's 2 pods", lambda: len(cp.kubectl(
        "get", "pods", "-n", release, "-o", "name", "-l",
        f"app.kubernetes.io/name=elastore,app.kubernetes.io/instance={release}"
    ).stdout.split()) == 2, 60)
    sel = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
    agent_pods = cp.kubectl("get", "pods", "-n", release, "-o", "name", "-l", sel).stdout
    assert len(agent_pods.split()) == 1
    sa = f"system:serviceaccount:{release}:{AGENT}"
    for verb, res in AGENT_READS:
        assert can_i(cp, sa, verb, res, ["-A"]) == "yes", (verb, res)
    for verb, res in NEVER:
        assert can_i(cp, sa, verb, res, ["-A"]) == "no", (verb, res)
        assert can_i(cp, sa, verb, res, ["-n", release]) == "no", (verb, res)
    uninstall_leaves_nothing(cp, release, [])


@pytest.mark.k8s
def test_agent_chart_namespaced_install_reads_only_its_namespaces(cp: ControlPlane) -> None:
    release, watched = "bwns", ["agent-w1", "agent-w2"]
    for ns in [*watched, "agent-other"]:
        cp.kubectl("create", "namespace", ns)
    install(cp, release, "--set", "replicas=0", "--set",
            "watchNamespaces={" + ",".join(watched) + "}")
    agent = f"{release}-elastore-agent"
    args = get(cp, "daemonset", agent, release)["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert [a for k, a in enumerate(args) if k and args[k - 1] == "--watch-namespace"
            ] == watched
    sa = f"system:serviceaccount:{release}:{agent}"
    for verb, res in AGENT_READS:
        for ns in watched:
            assert can_i(cp, sa, verb, res, ["-n", ns]) == "yes", (verb, res, ns)
        for where in (["-n", "agent-other"], ["-n", "default"], ["-A"]):
            assert can_i(cp, sa, verb, res, where) == "no", (verb, res, where)
    for verb, res in NEVER:
        assert can_i(cp, sa, verb, res, ["-n", watched[0]]) == "no", (verb, res)
    assert cp.kubectl("get", "clusterrole", agent, check=False).returncode != 0
    uninstall_leaves_nothing(cp, release, watched)



def test_tenant_the_chart_lets_policies_query_only_the_clusters_services() -> None:
    """Issue 35, finding 6: by default the operator may query Services inside the cluster
    only (a policy naming any other URL is PrometheusNotAllowed); an installer can list
    others, or allow any with []."""
    def urls(*extra: str) -> list[str]:
        args = one(render(None, *extra), "Deployment")["spec"]["template"]["spec"][
            "containers"][0]["args"]
        return [a.split("=", 1)[1] for a in args if a.startswith("--prometheus-url=")]

    assert urls() == ["http://*.svc:*", "https://*.svc:*", "http://*.svc.cluster.local:*",
                      "https://*.svc.cluster.local:*"]
    assert urls("--set", "prometheus.allowedUrls={https://thanos.example.com/prom}") == [
        "https://thanos.example.com/prom"]
    assert urls("--set", "prometheus.allowedUrls=null") == []
    args = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    # finding 7: the directories a Swift policy's paths in the pods may lie under
    assert [a for a in args if a.startswith("--pod-path=")] == [
        "--pod-path=/etc/swift", "--pod-path=/srv/node"]


# -- a production install's defaults (issue 35) ------------------------------------------------
def _rules_of(doc: Doc) -> set[tuple[str, str]]:
    return {(g, r) for rule in doc.get("rules") or [] for g in rule["apiGroups"]
            for r in rule["resources"]}


@pytest.mark.k8s
def test_tenant_the_default_install_grants_exec_and_secrets_in_its_own_namespace_only(
        ) -> None:
    """No ClusterRole of the default install has pods/exec or secrets: those are a Role in
    the release's namespace (or in watchNamespaces); the whole cluster only when asked."""
    docs = render({**ON})
    for cr in of_kind(docs, "ClusterRole"):
        assert not {("", "pods/exec"), ("", "secrets")} & _rules_of(cr), cr["metadata"]
    roles = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == "bw-elastore"]
    assert [r["metadata"]["namespace"] for r in roles] == ["elastore-system"]
    assert {("", "pods/exec"), ("", "secrets")} <= _rules_of(roles[0])
    dep = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=elastore-system" in dep
    agent = one(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]["containers"][0]
    assert agent["args"][agent["args"].index("--watch-namespace") + 1] == "elastore-system"
    asked = render({**ON, **ALL})
    cluster = one(asked, "ClusterRole", "bw-elastore")
    assert {("", "pods/exec"), ("", "secrets")} <= _rules_of(cluster)
    assert not [a for a in one(asked, "Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"] if a.startswith("--namespace")]


@pytest.mark.k8s
def test_tenant_two_replicas_are_spread_and_kept_and_releases_do_not_share_a_peering(
        ) -> None:
    docs = render()
    dep = one(docs, "Deployment")
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1,
                           "selector": {"matchLabels": dep["spec"]["selector"]["matchLabels"]}}
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert not of_kind(render({"replicas": "1"}), "PodDisruptionBudget")
    # kopf's peering is cluster-wide: named after the release, two never collide
    names = []
    for release in ("one", "two"):
        out = helm("template", release, str(CHART), "--namespace", "x").stdout
        docs = [d for d in yaml.safe_load_all(out) if d]
        names.append(one(docs, "ClusterKopfPeering")["metadata"]["name"])
        args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--peering={names[-1]}" in args
    assert names == ["one-elastore", "two-elastore"]


@pytest.mark.k8s
def test_tenant_the_operators_pod_passes_restricted_and_the_agents_needs_privileged(
        cp: ControlPlane) -> None:
    """Pod Security admission on the real API server (a namespace enforcing 'restricted'):
    the operator's pod, as the chart renders it, is admitted; the agent's (host network,
    NET_ADMIN) is refused there, as docs/agent.md says: its namespace must be privileged."""
    ns = "pss-restricted"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    docs = render(ON)

    def pod_of(doc: Doc) -> str:
        spec = dict(doc["spec"]["template"]["spec"])
        spec.pop("serviceAccountName", None)  # the SA is not in this namespace
        return json.dumps({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": doc["metadata"]["name"], "namespace": ns},
                           "spec": spec})

    ok = cp.kubectl("create", "--dry-run=server", "-f", "-",
                    stdin=pod_of(one(docs, "Deployment")), check=False)
    assert ok.returncode == 0, ok.stderr
    refused = cp.kubectl("create", "--dry-run=server", "-f", "-",
                         stdin=pod_of(one(docs, "DaemonSet", AGENT)), check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, \
        refused.stderr
