"""Whether the cluster can lose a node now: the checks before every decommission. Pure.

The input is what nodetool says on the leaving node (:class:`~elastore.actuators.nodetool.Ring`),
never the spec's belief about the cluster:

* **every node UN**, the leaving one and every other: a node down, joining, leaving or
  moving means replicas are already short or in flight;
* **every keyspace's replication factor** fits in what remains: SimpleStrategy needs
  ``rf <= n - 1``; NetworkTopologyStrategy needs ``rf <= n_dc - 1`` in the leaving node's
  data centre (the rule Cassandra itself applies, which also counts the system keyspaces);
* **free space on used bytes**: the leaving node's load (``nodetool status``) spreads over
  the other nodes of its data centre; each must then hold its load plus that share, plus
  ``compaction_margin`` of it for compaction's temporary copies, within
  ``1 - min_free_fraction`` of its volume. A volume of unknown size is a refusal.

A cass-operator datacenter leaves ``leaving`` nodes at a time (a rack-balanced step), and
cass-operator picks them: the replication must fit in ``n - leaving``, and the space check
takes the ``leaving`` fullest nodes' load spread over the others, onto the fullest node
(the worst case of every choice cass-operator could make).
"""

from __future__ import annotations

from elastore.actuators.nodetool import Ring
from elastore.units import bytes_to_gib


def decommission_refusal(ring: Ring, volume_bytes: float | None, min_free_fraction: float,
                         compaction_margin: float, leaving: int = 1) -> str | None:
    """Why the node ``ring.self_id`` may not be decommissioned now (None: it may); with
    ``leaving`` > 1, why ``leaving`` nodes of its data centre may not be."""
    me = next((n for n in ring.nodes if n.host_id == ring.self_id), None)
    if me is None:
        return f"the leaving node (host ID {ring.self_id}) is not in nodetool status"
    not_up = [f"{n.address} is {n.state}" for n in ring.nodes if n.state != "UN"]
    if not_up:
        return f"every node must be UN (up, normal): {', '.join(not_up)}"
    n = len(ring.nodes)
    local = [x for x in ring.nodes if x.dc == me.dc]
    k = max(1, leaving)
    if len(local) <= k:
        return f"{len(local)} node(s) in {me.dc}: {k} cannot leave"
    short = []
    for name, repl in sorted(ring.keyspaces.items()):
        for dc, rf in sorted(repl.factors.items()):
            if dc == "" and rf > n - k:
                short.append(f"keyspace {name} has RF {rf} and {n - k} node(s) would remain")
            elif dc == me.dc and rf > len(local) - k:
                short.append(f"keyspace {name} has RF {rf} in {dc} and {len(local) - k} "
                             "node(s) would remain there")
    if short:
        return "replication: " + "; ".join(short)
    if volume_bytes is None or not volume_bytes > 0:
        return ("the StatefulSet's volumeClaimTemplate requests no storage size: the free "
                "space after the decommission cannot be checked")
    unknown = [x.address for x in local if x.load_bytes is None]
    if unknown:
        return f"nodetool status gives no load for {', '.join(unknown)}"
    room = (1 - min_free_fraction) * volume_bytes
    if k == 1:
        others = [x for x in local if x.host_id != me.host_id]
        assert me.load_bytes is not None
        share = me.load_bytes / len(others)
        worst = max(others, key=lambda x: x.load_bytes or 0.0)
        what = "the leaving node"
    else:
        loads = sorted((x.load_bytes or 0.0 for x in local), reverse=True)
        share = sum(loads[:k]) / (len(local) - k)
        worst = max(local, key=lambda x: x.load_bytes or 0.0)
        what = f"the {k} leaving nodes (the fullest, at worst)"
    need = ((worst.load_bytes or 0.0) + share) * (1 + compaction_margin)
    if need > room:
        margin = f", + {compaction_margin:.0%} for compaction" if compaction_margin else ""
        return (f"free space: {worst.address} would hold {bytes_to_gib(need):.1f} GiB "
                f"({bytes_to_gib(worst.load_bytes or 0.0):.1f} GiB now + "
                f"{bytes_to_gib(share):.1f} GiB from {what}{margin}), more than "
                f"{1 - min_free_fraction:.0%} of its {bytes_to_gib(volume_bytes):.1f} GiB")
    return None
