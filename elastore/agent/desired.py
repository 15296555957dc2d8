"""What the agent wants on its node: from ElasticPolicies (their ``status.bandwidth``) and
the pods on the node, the shaping of each pod. Pure: plain API objects in, plain data out.

A pod is shaped when an Enforce-mode policy's ``status.bandwidth.pods`` names it in the
policy's own namespace (a Recommend-mode policy publishes its split and changes nothing, tc
included), the pod runs on this node with an IP of its own (never a hostNetwork pod: its IP
is the node's) and is not being deleted. A policy being deleted, or whose bandwidth status is
unreadable, shapes nothing (and says why); a pod two policies name is left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from elastore.actuators.tc import PodRates, Ports


@dataclass(frozen=True)
class PodTarget:
    namespace: str
    name: str
    uid: str
    ip: str
    policy: str  # namespace/name of the policy that asks for it
    rates: PodRates
    ports: Ports

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Problem:
    reason: str  # a short CamelCase word: the metric's label
    message: str


def _num(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{what} is {v!r}, not a number")
    return float(v)


def _ports(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not v or \
            any(isinstance(p, bool) or not isinstance(p, int) for p in v):
        raise ValueError(f"{what} is {v!r}, not a list of port numbers")
    return tuple(int(p) for p in v)


def policy_pods(policy: dict[str, Any]) -> dict[str, tuple[PodRates, Ports]]:
    """The shaping a policy's ``status.bandwidth`` asks for, by pod name (empty: none).
    Raises ValueError with a clear message when the status is unreadable."""
    bw = (policy.get("status") or {}).get("bandwidth")
    if not bw:
        return {}
    if not isinstance(bw, dict):
        raise ValueError(f"status.bandwidth is {type(bw).__name__}, not an object")
    total = _num(bw.get("nodeMbit"), "status.bandwidth.nodeMbit")
    ports = Ports(_ports(bw.get("clientPorts"), "status.bandwidth.clientPorts"),
                  _ports(bw.get("storagePorts"), "status.bandwidth.storagePorts"))
    ports.validate()
    pods = bw.get("pods")
    if not isinstance(pods, list):
        raise ValueError("status.bandwidth.pods is not a list")
    out: dict[str, tuple[PodRates, Ports]] = {}
    for k, p in enumerate(pods):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise ValueError(f"status.bandwidth.pods[{k}] has no name")
        rates = PodRates(total, _num(p.get("clientMbit"), f"pods[{k}].clientMbit"),
                         _num(p.get("storageMbit"), f"pods[{k}].storageMbit"))
        rates.validate()
        out[p["name"]] = (rates, ports)
    return out


def desired(policies: list[dict[str, Any]], pods: list[dict[str, Any]], node: str
            ) -> tuple[dict[str, PodTarget], list[Problem]]:
    """The pods to shape on ``node`` (by ``namespace/name``), and what stood in the way."""
    problems: list[Problem] = []
    wanted: dict[str, tuple[str, PodRates, Ports]] = {}
    claimed: dict[str, list[str]] = {}
    for pol in policies:
        meta = pol.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        pname = f"{ns}/{name}"
        if meta.get("deletionTimestamp"):
            continue
        if (pol.get("spec") or {}).get("mode") != "Enforce":
            continue  # Recommend (the default): the split is a recommendation only
        try:
            asked = policy_pods(pol)
        except Exception as exc:  # a bad status shapes nothing of that policy
            problems.append(Problem("BadBandwidthStatus", f"policy {pname}: {exc}"))
            continue
        for pod_name, (rates, ports) in asked.items():
            key = f"{ns}/{pod_name}"
            claimed.setdefault(key, []).append(pname)
            wanted[key] = (pname, rates, ports)
    for key, by in claimed.items():
        if len(by) > 1:
            problems.append(Problem("PodContended", f"pod {key} is named by policies "
                                                    f"{', '.join(sorted(by))}: not shaped"))
            del wanted[key]
    out: dict[str, PodTarget] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec: dict[str, Any] = pod.get("spec") or {}
        st: dict[str, Any] = pod.get("status") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if key not in wanted or spec.get("nodeName") != node:
            continue
        if meta.get("deletionTimestamp") or st.get("phase") != "Running":
            continue
        if spec.get("hostNetwork"):
            problems.append(Problem("HostNetworkPod", f"pod {key} uses the host's network: "
                                                      "its traffic is the node's, not shaped"))
            continue
        ip = st.get("podIP")
        if not ip:
            continue
        pname, rates, ports = wanted[key]
        out[key] = PodTarget(str(meta.get("namespace")), str(meta.get("name")),
                             str(meta.get("uid", "")), str(ip), pname, rates, ports)
    return out, problems
