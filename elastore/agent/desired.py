"""What the agent wants on its node: from ElasticPolicies (their ``status.bandwidth``) and
the pods on the node, the shaping of each pod. Pure: plain API objects in, plain data out.

A pod is shaped when an Enforce-mode policy's ``status.bandwidth.pods`` names it in the
policy's own namespace (a Recommend-mode policy publishes its split and changes nothing, tc
included), the pod runs on this node with an IP of its own (never a hostNetwork pod: its IP
is the node's) and is not being deleted. A policy being deleted, or whose bandwidth status is
unreadable, shapes nothing (and says why); a pod two policies name is left alone.

The status is a record anyone who may write it can forge (issue 35), so it is checked
against what it cannot change before a pod is shaped:

* the policy's **target** opted in as the operator's guard wants it (labelled
  ``elastore.io/managed=true``; a StatefulSet not controlled by anything else);
* the **pod is the target's**: its controller is the target StatefulSet (the same UID), or,
  where the target's store runs its pods through StatefulSets of its own (cass-operator's
  CassandraDatacenter: ``owns_pods`` in the registry), a StatefulSet the target controls;
* the **split is within the spec**: the link total is ``spec.bandwidth.nodeMbit``, the ports
  are the spec's, and each class keeps at least BwMan's own floor (clients 1 Mbit/s, storage
  the gossip margin, 0.5 Mbit/s), so a forged 0.002 Mbit/s starves nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from elastore.actuators.ports import MANAGED_LABEL
from elastore.actuators.tc import PodRates, Ports

#: a pod's controller, for every store: its owner chain leads to the target from there
#: (the target's registry line says how: :attr:`elastore.stores.registry.Store.owns_pods`)
STATEFULSET = "StatefulSet"
#: BwMan's floors (elastore.planner.bwman.BwManConfig): a split below them is not the
#: operator's
MIN_CLIENT_MBIT = 1.0
MIN_STORAGE_MBIT = 0.5


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


@dataclass(frozen=True)
class Owners:
    """What the status cannot forge, as the agent read it from the API: each Enforce
    policy's target object (``None``: not found) by ``(namespace, kind, name)``, and the
    StatefulSets of those policies' namespaces (a pod's controller is one of them)."""

    targets: dict[tuple[str, str, str], dict[str, Any] | None]
    statefulsets: dict[str, list[dict[str, Any]]]


def to_read(policies: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The targets whose objects the agent reads this reconcile: those of the Enforce
    policies that publish a split (the others shape nothing whatever their target is)."""
    keys = []
    for pol in policies:
        if (pol.get("metadata") or {}).get("deletionTimestamp") or \
                (pol.get("spec") or {}).get("mode") != "Enforce" or \
                not (pol.get("status") or {}).get("bandwidth"):
            continue
        key = target_key(pol)
        if key is not None and key not in keys:
            keys.append(key)
    return keys


def controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true`` (None: nothing controls it)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)


def target_key(policy: dict[str, Any]) -> tuple[str, str, str] | None:
    """``(namespace, kind, name)`` of the policy's target as its spec names it (None: it
    names none the agent knows)."""
    from elastore.stores.registry import by_kind

    tgt = (policy.get("spec") or {}).get("target") or {}
    kind, name = tgt.get("kind", STATEFULSET), tgt.get("name")
    if not isinstance(kind, str) or by_kind(kind) is None or not isinstance(name, str) \
            or not name:
        return None
    return str((policy.get("metadata") or {}).get("namespace", "")), str(kind), name


def _refused(key: tuple[str, str, str], obj: dict[str, Any] | None) -> Problem | None:
    """The operator's guard, on the target object: why the policy may shape nothing."""
    ns, kind, name = key
    ref = f"{kind} {ns}/{name}"
    if obj is None:
        return Problem("TargetNotFound", f"{ref} was not found: nothing of it is shaped")
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_LABEL) != "true":
        return Problem("NotOptedIn", f"{ref} is not labelled {MANAGED_LABEL}=true: the "
                                     "agent shapes only a target that opts in")
    from elastore.stores.registry import by_kind

    owner = controller(obj)
    store = by_kind(kind)
    if store is not None and store.owns_pods and owner is not None:
        return Problem("OwnedByController", f"{ref} is controlled by {owner.get('kind')} "
                                            f"{owner.get('name')}: not shaped")
    return None


def _owned(pod: dict[str, Any], key: tuple[str, str, str], target: dict[str, Any],
           statefulsets: list[dict[str, Any]]) -> bool:
    """Whether the pod's controller is the target (or, where the target's store runs its
    pods through StatefulSets of its own, a StatefulSet the target controls), by UID: a name
    in the status says nothing of whose pod it is."""
    from elastore.stores.registry import by_kind

    ref = controller(pod)
    store = by_kind(key[1])
    if ref is None or ref.get("kind") != STATEFULSET or store is None:
        return False
    uid = str((target.get("metadata") or {}).get("uid") or "")
    if not uid:
        return False
    if store.owns_pods:
        return str(ref.get("uid")) == uid
    sts = next((s for s in statefulsets
                if (s.get("metadata") or {}).get("uid") == ref.get("uid")), None)
    up = controller(sts) if sts is not None else None
    return up is not None and up.get("kind") == key[1] and str(up.get("uid")) == uid


def within_spec(policy: dict[str, Any], asked: dict[str, tuple[PodRates, Ports]]) -> None:
    """Raises ValueError unless the split is one the operator could have published for this
    spec: its link total and ports, each class at or above BwMan's floor."""
    from elastore.operator.spec import parse

    spec = parse(policy.get("spec"))
    if spec.node_mbit is None:
        raise ValueError("spec.bandwidth.nodeMbit is not set: the policy asks for no split")
    for name, (rates, ports) in asked.items():
        if abs(rates.total_mbit - spec.node_mbit) > 1e-6:
            raise ValueError(f"nodeMbit {rates.total_mbit:g} is not the spec's "
                             f"{spec.node_mbit:g} Mbit/s")
        if (ports.client, ports.storage) != (spec.client_ports, spec.storage_ports):
            raise ValueError(f"ports {list(ports.client)}/{list(ports.storage)} are not the "
                             f"spec's {list(spec.client_ports)}/{list(spec.storage_ports)}")
        if rates.client_mbit < MIN_CLIENT_MBIT or rates.storage_mbit < MIN_STORAGE_MBIT:
            raise ValueError(f"pod {name}'s split {rates.client_mbit:g}/"
                             f"{rates.storage_mbit:g} Mbit/s is below BwMan's floor "
                             f"({MIN_CLIENT_MBIT:g} client, {MIN_STORAGE_MBIT:g} storage)")


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


def desired(policies: list[dict[str, Any]], pods: list[dict[str, Any]], node: str,
            owners: Owners) -> tuple[dict[str, PodTarget], list[Problem]]:
    """The pods to shape on ``node`` (by ``namespace/name``), and what stood in the way."""
    problems: list[Problem] = []
    wanted: dict[str, tuple[str, PodRates, Ports]] = {}
    whose: dict[str, tuple[tuple[str, str, str], dict[str, Any]]] = {}
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
        if not asked:
            continue
        tkey = target_key(pol)
        if tkey is None:
            problems.append(Problem("TargetNotFound", f"policy {pname} names no target the "
                                                      "agent can check: nothing shaped"))
            continue
        target = owners.targets.get(tkey)
        refused = _refused(tkey, target)
        if refused is not None or target is None:
            if refused is not None:
                problems.append(Problem(refused.reason, f"policy {pname}: {refused.message}"))
            continue
        try:
            within_spec(pol, asked)
        except Exception as exc:
            problems.append(Problem("SplitOutOfBounds", f"policy {pname}: {exc}: nothing "
                                                        "shaped"))
            continue
        for pod_name, (rates, ports) in asked.items():
            key = f"{ns}/{pod_name}"
            claimed.setdefault(key, []).append(pname)
            wanted[key] = (pname, rates, ports)
            whose[key] = (tkey, target)
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
        tkey, target = whose[key]
        if not _owned(pod, tkey, target, owners.statefulsets.get(tkey[0], [])):
            problems.append(Problem("NotTargetPod", f"pod {key} is not controlled by "
                                                    f"{tkey[1]} {tkey[2]}: not shaped"))
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
