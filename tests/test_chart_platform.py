"""The chart's values for platform teams: a ServiceMonitor of the operator's own /metrics (off
by default, rendered only where the Prometheus Operator's API is served), podAnnotations and
extraEnv of the operator's Deployment and of the agent's DaemonSet; none of them changes
what the defaults render. A bad value fails the install with one line.

Rendering needs helm (``testbed.k8s.ensure_helm``), so those tests are ``k8s``, as in
tests/test_agent_chart.py, whose helpers they use.
"""

from __future__ import annotations

import pytest
import yaml
from test_agent_chart import (
    AGENT,
    CHART,
    ON,
    PODMONITOR_API,
    Doc,
    helm,
    matches,
    of_kind,
    one,
    render,
    sets,
)

SERVICEMONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
APIS = ["--api-versions", SERVICEMONITOR_API, "--api-versions", PODMONITOR_API]
OPERATOR = "bw-elastore"


def pod_of(doc: Doc) -> Doc:
    return doc["spec"]["template"]


def env_of(doc: Doc) -> list[Doc]:
    (c,) = pod_of(doc)["spec"]["containers"]
    return c["env"]


def test_the_new_values_are_off_by_default() -> None:
    """The documented defaults (no helm needed)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["metrics"]["serviceMonitor"] == {"enabled": False, "interval": "",
                                                   "labels": {}}
    assert values["podAnnotations"] == {} and values["extraEnv"] == []
    assert values["agent"]["podAnnotations"] == {} and values["agent"]["extraEnv"] == []


# ------------------------------------------------------------------------------------------
@pytest.mark.k8s
def test_defaults_render_none_of_them() -> None:
    docs = render(ON, *APIS)
    assert not of_kind(docs, "ServiceMonitor")
    dep, ds = one(docs, "Deployment", OPERATOR), one(docs, "DaemonSet", AGENT)
    assert pod_of(dep)["metadata"]["annotations"] == {"prometheus.io/scrape": "true",
                                                      "prometheus.io/port": "9808"}
    assert "annotations" not in pod_of(ds)["metadata"]
    assert [e["name"] for e in env_of(dep)] == ["POD_ID"]
    assert [e["name"] for e in env_of(ds)] == ["NODE_NAME"]
    # empty values are the defaults
    assert docs == render(ON, *APIS, "--set-json", "podAnnotations={}", "--set-json",
                          "extraEnv=[]", "--set-json", "agent.podAnnotations={}",
                          "--set-json", "agent.extraEnv=[]")


@pytest.mark.k8s
def test_service_monitor_only_where_asked_and_served() -> None:
    asked = {"metrics.serviceMonitor.enabled": "true"}
    assert not of_kind(render(asked), "ServiceMonitor")  # no such API: nothing to fail on
    assert not of_kind(render({}, *APIS), "ServiceMonitor")  # not asked for
    docs = render({**asked, **ON, "metrics.serviceMonitor.labels.release": "kps",
                   "metrics.serviceMonitor.interval": "30s", "metrics.port": "9900"}, *APIS)
    sm = one(docs, "ServiceMonitor", OPERATOR)
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == "elastore-system"
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["elastore-system"]}
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics",
                                        "honorLabels": True, "interval": "30s"}]
    # it selects the operator's metrics Service, whose port "metrics" is the pods' 9900,
    # and not the agent's
    sel = sm["spec"]["selector"]["matchLabels"]
    svc = one(docs, "Service", f"{OPERATOR}-metrics")
    assert matches(sel, svc["metadata"]["labels"])
    assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]
    (c,) = pod_of(one(docs, "Deployment", OPERATOR))["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 9900} in c["ports"]
    assert not matches(sel, one(docs, "Service", f"{AGENT}-metrics")["metadata"]["labels"])
    assert "interval" not in one(render(asked, *APIS), "ServiceMonitor")["spec"]["endpoints"][0]
    res = helm("template", "bw", str(CHART), *sets({**asked, "metrics.service": "false"}),
               *APIS, check=False)
    assert res.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.service: true" in res.stderr


@pytest.mark.k8s
def test_pod_annotations_and_extra_env_reach_the_pods() -> None:
    docs = render({**ON, "podAnnotations.sidecar\\.istio\\.io/inject": "false",
                   "podAnnotations.replicas": "2", "agent.podAnnotations.team": "storage",
                   "extraEnv[0].name": "HTTPS_PROXY", "extraEnv[0].value": "http://p:3128",
                   "agent.extraEnv[0].name": "HOST_IP",
                   "agent.extraEnv[0].valueFrom.fieldRef.fieldPath": "status.hostIP"},
                  "--set-string", "podAnnotations.prometheus\\.io/scrape=false")
    dep, ds = one(docs, "Deployment", OPERATOR), one(docs, "DaemonSet", AGENT)
    # added to the chart's own, a key of the chart's overridden; every value a string
    assert pod_of(dep)["metadata"]["annotations"] == {
        "prometheus.io/scrape": "false", "prometheus.io/port": "9808",
        "sidecar.istio.io/inject": "false", "replicas": "2"}
    assert pod_of(ds)["metadata"]["annotations"] == {"team": "storage"}
    assert env_of(dep) == [{"name": "POD_ID", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.name"}}}, {"name": "HTTPS_PROXY", "value": "http://p:3128"}]
    assert env_of(ds) == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {
        "fieldPath": "spec.nodeName"}}}, {"name": "HOST_IP", "valueFrom": {"fieldRef": {
            "fieldPath": "status.hostIP"}}}]
    # the selectors (immutable) are not the pods' annotations' business
    assert dep["spec"]["selector"] == one(render(ON), "Deployment")["spec"]["selector"]
    res = helm("lint", str(CHART), "--strict", *sets({
        **ON, "podAnnotations.a": "b", "extraEnv[0].name": "A", "extraEnv[0].value": "b",
        "agent.podAnnotations.c": "d", "agent.extraEnv[0].name": "C",
        "agent.extraEnv[0].value": "d", "metrics.serviceMonitor.enabled": "true"}),
        check=False)
    assert res.returncode == 0, (res.stdout, res.stderr)


@pytest.mark.k8s
@pytest.mark.parametrize(("values", "said"), [
    ({"extraEnv[0].name": "POD_ID", "extraEnv[0].value": "x"},
     "extraEnv: POD_ID is set by the chart, not here"),
    ({**ON, "agent.extraEnv[0].name": "NODE_NAME", "agent.extraEnv[0].value": "x"},
     "agent.extraEnv: NODE_NAME is set by the chart, not here"),
    ({"extraEnv[0].value": "x"}, "extraEnv: every entry needs a name"),
    ({**ON, "agent.extraEnv[0]": "FOO"}, "agent.extraEnv: every entry needs a name"),
], ids=["operator-POD_ID", "agent-NODE_NAME", "nameless", "not-an-EnvVar"])
def test_extra_env_refuses_what_would_break_the_pods(values: dict[str, str], said: str) -> None:
    res = helm("template", "bw", str(CHART), *sets(values), check=False)
    assert res.returncode != 0 and said in res.stderr, res.stderr
    assert len([ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]) == 1


@pytest.mark.k8s
def test_the_agents_log_level_is_one_the_cli_takes() -> None:
    """Each level the values document reaches the DaemonSet's args (tests/test_cli_extras.py:
    the CLI takes each); any other fails the install instead of crash-looping the pods."""
    from elastore.agent.cli import LOG_LEVELS

    for level in LOG_LEVELS:
        (c,) = pod_of(one(render({**ON, "agent.logLevel": level}), "DaemonSet", AGENT))[
            "spec"]["containers"]
        k = c["args"].index("--log-level")
        assert c["args"][k + 1] == level
    res = helm("template", "bw", str(CHART), *sets({**ON, "agent.logLevel": "verbose"}),
               check=False)
    assert res.returncode != 0
    assert "agent.logLevel must be debug, info, warning or error, got verbose" in res.stderr


@pytest.mark.k8s
def test_the_operators_log_level_is_info_or_debug() -> None:
    """values.yaml's logLevel: debug adds --verbose, info nothing; any other value fails
    the install, where it used to run at info without a word."""
    def args(level: str) -> list[str]:
        d = one(render({**ON, "logLevel": level}), "Deployment", OPERATOR)
        (c,) = pod_of(d)["spec"]["containers"]
        return list(c["args"])

    assert "--verbose" in args("debug") and "--verbose" not in args("info")
    res = helm("template", "bw", str(CHART), *sets({**ON, "logLevel": "warning"}),
               check=False)
    assert res.returncode != 0
    assert "logLevel must be info or debug, got warning" in res.stderr
