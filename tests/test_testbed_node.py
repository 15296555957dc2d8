"""The real node's pure parts (testbed.node): which addresses the API server's egress proxy
may dial, and the configurations it writes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from testbed.node import (
    API_VIP,
    NODE_ADDR,
    cni_config,
    containerd_config,
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


def test_prometheus_discovers_annotated_pods_through_the_api_servers_address() -> None:
    doc = yaml.safe_load(prometheus_config(Path("/pki"), {"loadgen": "10.245.0.1:9600"}))
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    pods = jobs["kubernetes-pods"]
    assert pods["kubernetes_sd_configs"][0]["api_server"] == f"https://{API_VIP}:443"
    assert {"namespace", "pod"} <= {r.get("target_label") for r in pods["relabel_configs"]}
    assert jobs["loadgen"]["static_configs"][0]["targets"] == ["10.245.0.1:9600"]
