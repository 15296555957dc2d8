"""BwMan's tc actuator: an HTB on an interface inside a lab namespace, via pyroute2.

Layout (handles in hex)::

    1:      htb root qdisc, default 1:ffff (unclassified traffic gets its own class, so it
            never bypasses shaping)
    1:1     the interface's total rate
    1:ffff  unclassified (messaging, the load generator's requests, JMX, scrapes ...)
    1:N00   node N's NIC (only with ``nic_mbit``): rate = ceil = the node's bandwidth
    1:N0    client class of node N (port 9042), N = 1, 2, ... in the order given
    1:N1    storage class of node N (port 7000: streaming, but also gossip and messaging)

``match`` says which packets a node's classes take:

* ``"both"``: packets *to* the node's port and packets *from* it (requests and responses).
  Used to meter what crosses a port, e.g. the bytes a decommission streams to receivers.
* ``"egress"``: only packets the node *sends* (source address the node's) on that port,
  on either side of the connection: what leaves its NIC. Client responses from port 9042;
  streaming, messaging and gossip to or from port 7000. This is the per-server bandwidth
  BwMan splits (reference text, 5.2). It needs the node's outgoing sockets to carry its
  address: Cassandra does not bind them, and the lab's ``bindsrc`` shim does
  (``elastore/lab/native/bindsrc.c``).

With ``nic_mbit`` every node has a NIC class of that rate. ``split=True`` (BwMan) gives the
NIC two leaves whose rates are *guarantees* and whose ceiling is the NIC; ``split=False``
(an unmanaged server) sends both ports through one FIFO at the NIC's rate. ``queue_bytes``
puts a byte-limited FIFO (bfifo) under every leaf, so a bulk flow cannot queue more than a
real NIC would; without it the kernel's default pfifo holds up to ``txqueuelen`` packets,
which on ``lo`` (64 KiB segments) is tens of MiB.

Rates change live (``change-class``), and :meth:`remove` deletes exactly the root qdisc this
shaper installed, after checking it is still ours.

Port 7000 carries Cassandra's gossip and messaging as well as streaming, so the *migration
rate* is enforced with ``nodetool setstreamthroughput``; tc guarantees the client class its
bandwidth (reference text, 5.2.2).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from elastore.errors import ElastoreError

ROOT = 0x10000
TOTAL = 0x10001
UNCLASSIFIED = 0x1FFFF
CLIENT_PORT = 9042
STORAGE_PORT = 7000
BURST = 64 * 1024  # lo has a 64 KiB MTU: smaller bursts make request/response crawl
ETH_P_IP = 0x0800
MAX_NODES = 15  # handles 1:N0 / 1:N1 / 1:N00 stay distinct up to here

Match = Literal["both", "egress"]


def _rate(mbit: float) -> str:
    if not mbit > 0:
        raise ElastoreError(f"a tc rate must be > 0 Mbit/s, got {mbit}")
    return f"{round(mbit * 1000)}kbit"


def _register_bfifo() -> None:
    """pyroute2 knows pfifo but not bfifo; both carry the same ``tc_fifo_qopt {limit}``
    (packets for pfifo, bytes for bfifo), so bfifo can use pfifo's codec."""
    from pyroute2.netlink.rtnl import tcmsg

    if "bfifo" not in tcmsg.plugins:
        tcmsg.plugins["bfifo"] = tcmsg.plugins["pfifo"]


@dataclass
class NodeClasses:
    ip: str
    client: int
    storage: int
    nic: int | None = None  # the NIC class (split=False: also the leaf of both ports)


@dataclass
class HtbShaper:
    netns: str
    ifname: str = "lo"
    total_mbit: float = 1000.0
    # None: every class is capped at its rate. A number: classes are *guaranteed* their rate
    # and may borrow idle bandwidth up to this ceiling. With ``nic_mbit`` the ceiling is the
    # NIC unless this is lower.
    ceil_mbit: float | None = None
    nic_mbit: float | None = None
    split: bool = True
    match: Match = "both"
    queue_bytes: int | None = None
    nodes: dict[str, NodeClasses] = field(default_factory=dict)
    installed: bool = False

    def __post_init__(self) -> None:
        if self.match not in ("both", "egress"):
            raise ElastoreError(f"match must be 'both' or 'egress', got {self.match!r}")
        if self.nic_mbit is not None and not self.nic_mbit > 0:
            raise ElastoreError(f"a NIC rate must be > 0 Mbit/s, got {self.nic_mbit}")
        if not self.split and self.nic_mbit is None:
            raise ElastoreError("split=False (one FIFO per node) needs nic_mbit")
        if self.queue_bytes is not None and self.queue_bytes < 2 * BURST:
            raise ElastoreError(f"queue_bytes must hold at least two 64 KiB segments, got "
                                f"{self.queue_bytes}")

    def _ns(self) -> Any:
        try:
            from pyroute2 import NetNS
        except ImportError as exc:  # pragma: no cover - the lab extra installs it
            raise ElastoreError("pyroute2 is not installed (pip install 'elastore[lab]')") \
                from exc
        if not self.netns.startswith("elastore-"):
            raise ElastoreError(f"refusing to shape outside an elastore namespace: "
                                f"{self.netns!r}")
        return NetNS(self.netns)

    def _index(self, ns: Any) -> int:
        found = ns.link_lookup(ifname=self.ifname)
        if not found:
            raise ElastoreError(f"no interface {self.ifname!r} in namespace {self.netns}")
        return int(found[0])

    def _ceil(self, mbit: float) -> str:
        if self.nic_mbit is not None:
            ceil = self.nic_mbit if self.ceil_mbit is None else min(self.ceil_mbit,
                                                                     self.nic_mbit)
            return _rate(max(mbit, ceil))
        return _rate(mbit if self.ceil_mbit is None else max(mbit, self.ceil_mbit))

    def _check_guarantees(self, client_mbit: float, storage_mbit: float) -> None:
        if self.nic_mbit is not None and self.split and \
                client_mbit + storage_mbit > self.nic_mbit * 1.001:
            raise ElastoreError(f"guarantees of {client_mbit:.2f} + {storage_mbit:.2f} Mbit/s "
                                f"exceed the node's NIC of {self.nic_mbit:.2f} Mbit/s")

    def install(self, node_ips: Sequence[str], client_mbit: float, storage_mbit: float) -> None:
        """Install the HTB with a client and a storage class per node (with ``split=False``
        the rates are unused: both ports share the NIC's FIFO)."""
        if self.installed:
            raise ElastoreError("this shaper is already installed; remove() it first")
        if len(node_ips) > MAX_NODES:
            raise ElastoreError(f"at most {MAX_NODES} nodes per shaper")
        self._check_guarantees(client_mbit, storage_mbit)
        if self.queue_bytes is not None:
            _register_bfifo()
        ns = self._ns()
        try:
            idx = self._index(ns)
            if any(q.get_attr("TCA_KIND") == "htb" for q in ns.get_qdiscs(index=idx)):
                raise ElastoreError(f"{self.ifname} in {self.netns} already has an HTB: "
                                    "run remove on the shaper that installed it")
            ns.tc("add", "htb", idx, ROOT, default=UNCLASSIFIED & 0xFFFF)
            self.installed = True
            total = _rate(self.total_mbit)
            ns.tc("add-class", "htb", idx, TOTAL, parent=ROOT, rate=total, ceil=total,
                  burst=BURST, cburst=BURST)
            ns.tc("add-class", "htb", idx, UNCLASSIFIED, parent=TOTAL, rate=total, ceil=total,
                  burst=BURST, cburst=BURST)
            prio = 1
            for n, ip in enumerate(node_ips, start=1):
                cls = self._add_node_classes(ns, idx, n, ip, client_mbit, storage_mbit)
                addr = int(ipaddress.IPv4Address(ip))
                src, dst = f"0x{addr:08x}/0xffffffff+12", f"0x{addr:08x}/0xffffffff+16"
                for handle, port in ((cls.client, CLIENT_PORT), (cls.storage, STORAGE_PORT)):
                    sport = f"0x{port << 16:08x}/0xffff0000+20"
                    dport = f"0x{port:04x}/0x0000ffff+20"
                    # both: from the node's port, and to it; egress: sent by the node, from
                    # its port or to a peer's (its own outgoing connections)
                    keys = [(src, sport), (dst, dport) if self.match == "both" else (src, dport)]
                    for key in keys:
                        ns.tc("add-filter", "u32", idx, parent=ROOT, prio=prio,
                              protocol=ETH_P_IP, target=handle, keys=list(key))
                        prio += 1
                self.nodes[ip] = cls
        except Exception:
            self._remove(ns)
            raise
        finally:
            ns.close()

    def _add_node_classes(self, ns: Any, idx: int, n: int, ip: str, client_mbit: float,
                          storage_mbit: float) -> NodeClasses:
        client, storage = ROOT | (n << 4), ROOT | (n << 4) | 1
        parent, nic = TOTAL, None
        if self.nic_mbit is not None:
            nic = ROOT | (n << 8)
            r = _rate(self.nic_mbit)
            ns.tc("add-class", "htb", idx, nic, parent=TOTAL, rate=r, ceil=r, burst=BURST,
                  cburst=BURST)
            parent = nic
            if not self.split:
                self._leaf_queue(ns, idx, nic)
                return NodeClasses(ip, nic, nic, nic)
        for handle, mbit in ((client, client_mbit), (storage, storage_mbit)):
            ns.tc("add-class", "htb", idx, handle, parent=parent, rate=_rate(mbit),
                  ceil=self._ceil(mbit), burst=BURST, cburst=BURST)
            self._leaf_queue(ns, idx, handle)
        return NodeClasses(ip, client, storage, nic)

    def _leaf_queue(self, ns: Any, idx: int, leaf: int) -> None:
        if self.queue_bytes is None:
            return
        # the leaf's qdisc: handle (leaf minor + 0x100):0, unique per leaf
        qhandle = ((leaf & 0xFFFF) + 0x100) << 16
        ns.tc("add", "bfifo", idx, qhandle, parent=leaf, limit=self.queue_bytes)

    def set_rates(self, ip: str, client_mbit: float | None = None,
                  storage_mbit: float | None = None) -> None:
        """Change a node's class rates live."""
        if ip not in self.nodes:
            raise ElastoreError(f"no classes for node {ip} (known: {', '.join(self.nodes)})")
        if not self.split:
            raise ElastoreError("this shaper has one FIFO per node (split=False): nothing to "
                                "set")
        cls = self.nodes[ip]
        if client_mbit is not None and storage_mbit is not None:
            self._check_guarantees(client_mbit, storage_mbit)
        parent = cls.nic if cls.nic is not None else TOTAL
        ns = self._ns()
        try:
            idx = self._index(ns)
            for handle, mbit in ((cls.client, client_mbit), (cls.storage, storage_mbit)):
                if mbit is None:
                    continue
                r, c = _rate(mbit), self._ceil(mbit)
                ns.tc("change-class", "htb", idx, handle, parent=parent, rate=r, ceil=c,
                      burst=BURST, cburst=BURST)
        finally:
            ns.close()

    def remove(self) -> None:
        """Remove exactly what :meth:`install` added (the root HTB and everything under it)."""
        ns = self._ns()
        try:
            self._remove(ns)
        finally:
            ns.close()

    def _remove(self, ns: Any) -> None:
        if not self.installed:
            return
        idx = self._index(ns)
        ours = [q for q in ns.get_qdiscs(index=idx)
                if q.get_attr("TCA_KIND") == "htb" and q["handle"] == ROOT]
        if ours:
            ns.tc("del", index=idx, handle=ROOT, root=True)
        self.installed = False
        self.nodes.clear()

    def class_bytes(self) -> dict[int, int]:
        """Bytes sent through each class so far (the kernel's counters), by handle."""
        return {h: s["bytes"] for h, s in self.class_stats().items()}

    def class_stats(self) -> dict[int, dict[str, int]]:
        """Per class (by handle): bytes and packets sent, packets dropped, and the bytes
        queued right now (the kernel's counters)."""
        ns = self._ns()
        try:
            idx = self._index(ns)
            out = {}
            for c in ns.get_classes(index=idx):
                stats = c.get_attr("TCA_STATS2")
                basic = stats.get_attr("TCA_STATS_BASIC") if stats is not None else None
                queue = stats.get_attr("TCA_STATS_QUEUE") if stats is not None else None
                legacy = c.get_attr("TCA_STATS")
                out[int(c["handle"])] = {
                    "bytes": int(basic["bytes"]) if basic is not None else
                    int(legacy["bytes"]) if legacy else 0,
                    "packets": int(basic["packets"]) if basic is not None else 0,
                    "drops": int(queue["drops"]) if queue is not None else 0,
                    "backlog": int(queue["backlog"]) if queue is not None else 0,
                }
            return out
        finally:
            ns.close()

    def storage_bytes_to(self, ips: list[str]) -> int:
        """Bytes through the storage classes of ``ips``: with ``match="both"``, what went to
        (and came from) their port 7000, e.g. what a decommission streamed to them."""
        counts = self.class_bytes()
        return sum(counts.get(self.nodes[ip].storage, 0) for ip in ips)

    def describe(self) -> list[dict[str, Any]]:
        """The installed classes as (handle, rate and ceiling in Mbit/s) for status output."""
        ns = self._ns()
        try:
            idx = self._index(ns)
            out = []
            for c in ns.get_classes(index=idx):
                opts = c.get_attr("TCA_OPTIONS")
                params = opts.get_attr("TCA_HTB_PARMS") if opts is not None else None
                rate_bps = params["rate"] if params else None
                ceil_bps = params["ceil"] if params else None
                out.append({"handle": f"{c['handle'] >> 16:x}:{c['handle'] & 0xFFFF:x}",
                            "rate_mbit": rate_bps * 8 / 1e6 if rate_bps else None,
                            "ceil_mbit": ceil_bps * 8 / 1e6 if ceil_bps else None})
            return out
        finally:
            ns.close()
