"""The real node's pure parts (testbed.node): which addresses the API server's egress proxy
may dial, and the configurations it writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from testbed.node import (
    API_VIP,
    NODE_ADDR,
    cni_config,
    containerd_config,
    discovered_targets,
    kubelet_config,
    node_address,
    prometheus_config,
)


def test_the_egress_proxy_dials_only_the_nodes_and_the_pods_addresses() -> None:
    assert node_address(NODE_ADDR) and node_address("10.244.0.7")
    for other in ("127.0.0.1", API_VIP, "10.244.1.1", "192.0.2.1", "8.8.8.8", "example.org",
                  "", "10.245.0.2"):
        assert not node_address(other), other


def test_the_pod_network_masquerades_nothing_and_routes_by_the_node() -> None:
    doc = json.loads(cni_config(Path("/r")))
    ptp = doc["plugins"][0]
    assert [p["type"] for p in doc["plugins"]] == ["ptp"]  # no portmap, no bandwidth
    assert ptp["ipMasq"] is False and ptp["ipam"]["type"] == "host-local"
    assert ptp["ipam"]["dataDir"].startswith("/r/")  # not the machine's /var/lib/cni


def test_the_runtime_and_the_kubelet_keep_to_the_runs_directory() -> None:
    c = containerd_config(Path("/r"), "localhost/sandbox:1")
    for key in ("root", "state", "address"):
        assert f'{key} = "/r/' in c, key
    assert "restrict_oom_score_adj = true" in c and 'BinaryName = "/usr/sbin/runc"' in c
    k = yaml.safe_load(kubelet_config(Path("/r"), Path("/pki"), 1234, Path("/r/c.sock"),
                                      "/elastore-node-1"))
    assert k["failCgroupV1"] is False and k["cgroupRoot"] == "/elastore-node-1"
    assert k["address"] == NODE_ADDR and k["authorization"]["mode"] == "Webhook"
    assert k["authentication"]["anonymous"]["enabled"] is False
    assert k["imageGCHighThresholdPercent"] == 100  # no registry to pull a collected image


def test_prometheus_scrapes_what_the_discovery_file_lists() -> None:
    doc = yaml.safe_load(prometheus_config(Path("/d/targets.json"),
                                           {"loadgen": "10.245.0.1:9600"}))
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert jobs["kubernetes-pods"]["file_sd_configs"][0]["files"] == ["/d/targets.json"]
    assert jobs["kubernetes-pods"]["honor_labels"] is True
    assert jobs["loadgen"]["static_configs"][0]["targets"] == ["10.245.0.1:9600"]
    # a JMX exporter's scrape takes up to 1.5 s on a quiet 2-core machine: not a 2-s timeout
    glob = doc["global"]
    assert glob["scrape_interval"] == glob["scrape_timeout"] == "5s", glob


def _pod(name: str, ip: str, ann: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "store", "annotations": ann},
            "status": {"phase": phase, "podIP": ip}}


def test_discovery_finds_annotated_running_pods_and_annotated_services_endpoints() -> None:
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": "9500"}
    pods = [_pod("cass-0", "10.244.0.2", scrape), _pod("web-0", "10.244.0.3", {}),
            _pod("cass-1", "10.244.0.4", scrape, phase="Pending"),
            _pod("bad", "10.244.0.5", {"prometheus.io/scrape": "true"})]  # no port
    svc = [{"metadata": {"name": "agent", "namespace": "store", "annotations": {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9103",
        "prometheus.io/path": "/metrics"}}}]
    eps = [{"metadata": {"name": "agent", "namespace": "store"}, "subsets": [{"addresses": [
        {"ip": "10.245.0.1", "targetRef": {"name": "agent-x"}}]}]}]
    got = discovered_targets(pods, svc, eps)
    assert got == [
        {"targets": ["10.244.0.2:9500"], "labels": {"namespace": "store", "pod": "cass-0"}},
        {"targets": ["10.245.0.1:9103"], "labels": {
            "namespace": "store", "pod": "agent-x", "__metrics_path__": "/metrics"}}]
