"""The operator's BwMan: each node's link split between client and storage traffic, the
stream throttle that split carries, and the ``status.bandwidth`` the node agent reads. Pure.

The link total is ``spec.bandwidth.nodeMbit``: configured, never measured (a pod's veth or a
virtual NIC reports no speed, and a cloud instance's ceiling is not its NIC's nominal
speed). Every node gets the same split, decided once a control period by
:func:`elastore.planner.bwman.decide`:

* the client share is what the client model needs for the *forecast* load per node (the
  forecast over the current replicas, plus BwMan's load headroom);
* the rest goes to storage (streaming, gossip, replica messages); when the clients and the
  plan's migration rate do not both fit, ``spec.migration.policy`` decides which one is
  short;
* the stream throttle is the migration speed the storage share carries, within
  ``spec.migration.minMiBps`` .. ``maxMiBps`` and never above the plan's rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from elastore.models.bandwidth import Policy
from elastore.models.bundle import ModelSet
from elastore.operator.conditions import iso
from elastore.operator.spec import PolicySpec
from elastore.planner.bwman import BwManConfig, NodeObservation, decide, missing_regressions
from elastore.planner.loop import Decision

#: what ``status.bandwidth.source`` says: the link total is configured, not measured
SOURCE = "spec.bandwidth.nodeMbit"
MAX_REASON = 1000


@dataclass(frozen=True)
class NodeSplit:
    """One period's split of every node's link (Mbit/s) and the stream throttle (MiB/s)."""

    node_mbit: float
    policy: str
    client_ports: tuple[int, ...]
    storage_ports: tuple[int, ...]
    forecast_rps_per_node: float
    client_mbit: float
    storage_mbit: float
    stream_mibps: float
    at_s: float
    reason: str


def unavailable(spec: PolicySpec, models: ModelSet) -> str | None:
    """Why no split is made for this policy although it may want one (None: it can be)."""
    if spec.node_mbit is None:
        return None
    missing = missing_regressions(models)
    if missing is None:
        return None
    return (f"spec.bandwidth.nodeMbit is {spec.node_mbit:g} Mbit/s but {missing}: no split "
            "is published and the stream throttle is the plan's migration rate")


def node_split(spec: PolicySpec, decision: Decision, replicas: int, read_ratio: float,
               models: ModelSet) -> NodeSplit:
    """The split of ``spec.node_mbit`` for the period ``decision`` plans (the policy must
    have a link total and the models their BwMan regressions: see :func:`unavailable`)."""
    if spec.node_mbit is None:
        raise ValueError("the policy has no spec.bandwidth.nodeMbit")
    per_node = decision.forecast_rps / max(1, replicas)
    cfg = BwManConfig(total_mbit=spec.node_mbit, policy=Policy(spec.migration_policy),
                      wanted_mibps=decision.migration_mibps,
                      min_mibps=spec.min_migration_mibps, max_mibps=spec.max_migration_mibps)
    d = decide(NodeObservation("each node", per_node, read_ratio, 0.0), models, cfg)
    reason = (f"forecast {decision.forecast_rps:,.0f} req/s over {max(1, replicas)} node(s), "
              f"{per_node:,.1f} per node; plan's migration rate "
              f"{decision.migration_mibps:.2f} MiB/s; {spec.migration_policy} on "
              f"{spec.node_mbit:g} Mbit/s ({SOURCE}): {d.reason}")
    return NodeSplit(node_mbit=spec.node_mbit, policy=spec.migration_policy,
                     client_ports=spec.client_ports, storage_ports=spec.storage_ports,
                     forecast_rps_per_node=per_node, client_mbit=d.client_mbit,
                     storage_mbit=d.storage_mbit, stream_mibps=d.stream_mibps,
                     at_s=decision.now_s, reason=reason)


def pod_names(target: str, spec_replicas: int, to_replicas: int | None = None) -> list[str]:
    """Every pod of the target StatefulSet: ordinals 0 .. max(spec.replicas, the operation's
    ``to_replicas``) - 1 (a scale-out's new pod is listed from the moment it is asked for)."""
    n = max(spec_replicas, to_replicas or 0)
    return [f"{target}-{k}" for k in range(n)]


def _down(x: float) -> float:
    """Rounded down to 1/1000: the shares published never sum past the link total."""
    return math.floor(x * 1000) / 1000


def to_status(split: NodeSplit, pods: list[str]) -> dict[str, Any]:
    """``status.bandwidth`` (the node agent reads it: keep the keys)."""
    client, storage = _down(split.client_mbit), _down(split.storage_mbit)
    return {
        "nodeMbit": split.node_mbit,
        "source": SOURCE,
        "policy": split.policy,
        "clientPorts": list(split.client_ports),
        "storagePorts": list(split.storage_ports),
        "forecastRpsPerNode": round(split.forecast_rps_per_node, 3),
        "clientMbit": client,
        "storageMbit": storage,
        "streamMiBps": round(split.stream_mibps, 3),
        "pods": pod_rows(pods, client, storage),
        "at": iso(split.at_s),
        "reason": split.reason[:MAX_REASON],
    }


def pod_rows(pods: list[str], client_mbit: float, storage_mbit: float
             ) -> list[dict[str, Any]]:
    return [{"name": p, "clientMbit": client_mbit, "storageMbit": storage_mbit} for p in pods]


def with_pods(published: Any, pods: list[str]) -> dict[str, Any] | None:
    """A published ``status.bandwidth`` with ``pods`` listed instead (the same split): the
    pods of the target change between periods (a scale-out's new pod). None if it is not
    one this module wrote, or already lists exactly these pods."""
    if not isinstance(published, dict):
        return None
    c, s, rows = published.get("clientMbit"), published.get("storageMbit"), \
        published.get("pods")
    if not isinstance(c, int | float) or not isinstance(s, int | float) or \
            isinstance(c, bool) or isinstance(s, bool) or not isinstance(rows, list):
        return None
    if [r.get("name") for r in rows if isinstance(r, dict)] == pods and len(rows) == len(pods):
        return None
    return {**published, "pods": pod_rows(pods, float(c), float(s))}
