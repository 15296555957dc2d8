"""BwMan's tc actuators, via pyroute2: the lab's shaper of one interface carrying many nodes
(:class:`HtbShaper`) and the node agent's shaper of one pod's interfaces
(:class:`PodShaper`, below).

The lab's layout (handles in hex)::

    1:      htb root qdisc, default 1:ffff (unclassified traffic gets its own class, so it
            never bypasses shaping)
    1:1     the interface's total rate
    1:ffff  unclassified (messaging, the load generator's requests, JMX, scrapes ...)
    1:N00   node N's NIC (only with ``nic_mbit``): rate = ceil = the node's bandwidth
    1:N0    client class of node N (port 9042), N = 1, 2, ... in the order given
    1:N1    storage class of node N (port 7000: streaming, but also gossip and messaging)

(Swift: ``client_port=6200``, the object server, and ``storage_port=873``, the
replicators' rsync: there the storage class carries only the data replication moves.)

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

import contextlib
import ipaddress
import socket
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
    #: the ports that tell the classes apart: Cassandra's native protocol and internode
    #: port by default; Swift's object server (6200) and its replicators' rsync (873)
    client_port: int = CLIENT_PORT
    storage_port: int = STORAGE_PORT
    nodes: dict[str, NodeClasses] = field(default_factory=dict)
    installed: bool = False

    def __post_init__(self) -> None:
        for name, port in (("client_port", self.client_port),
                           ("storage_port", self.storage_port)):
            if not 0 < port < 65536:
                raise ElastoreError(f"{name} must be a TCP port (1..65535), got {port}")
        if self.client_port == self.storage_port:
            raise ElastoreError(f"the client and storage ports must differ "
                                f"(both {self.client_port}): tc could not tell them apart")
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
                for handle, port in ((cls.client, self.client_port),
                                     (cls.storage, self.storage_port)):
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


# -- the node agent's per-pod shaping -------------------------------------------------------------
#
# A pod's traffic crosses the host end of its veth: what the pod *receives* leaves the host
# through that interface (its egress), what the pod *sends* enters the host through it (its
# ingress, which tc cannot queue). So each shaped pod gets two HTBs of the same layout:
#
#   host veth, egress          traffic to the pod
#   ifb ``esifb<ifindex>``     traffic from the pod: the veth's ingress qdisc redirects every
#                              packet there (u32 match-all, action mirred), and the ifb's
#                              egress queues it
#
# Layout of each HTB (handles in hex; the major ``e5a`` marks the tree as the agent's)::
#
#     e5a:       htb root qdisc, default e5a:ffff
#     e5a:1      the link total: rate = ceil = the node's bandwidth
#     e5a:10     client class: the client ports (either side of the connection)
#     e5a:20     storage class: the internode ports (streaming, gossip, messaging)
#     e5a:ffff   anything else (1 % guaranteed, may borrow up to the total)
#
# Client and storage rates are *guarantees*; both may borrow idle bandwidth up to the total.
# The redirect filter has priority 0xe5a on the veth's ingress qdisc: removal deletes that
# filter, and the ingress qdisc only if no filter of anyone else's is left on it.

AGENT_MAJOR = 0xE5A
AGENT_ROOT = AGENT_MAJOR << 16
AGENT_TOTAL = AGENT_ROOT | 0x1
AGENT_CLIENT = AGENT_ROOT | 0x10
AGENT_STORAGE = AGENT_ROOT | 0x20
AGENT_OTHER = AGENT_ROOT | 0xFFFF
INGRESS = 0xFFFF0000
REDIRECT_PRIO = 0xE5A
IFB_PREFIX = "esifb"
ETH_P_ALL = 0x0003
#: the unclassified class's guarantee, as a fraction of the total
OTHER_SHARE = 0.01
#: a class whose rate differs from the wanted one by less than this fraction is left alone
#: (the kernel keeps rates in bytes/s, so kbit settings come back rounded)
RATE_TOLERANCE = 0.002


def ifb_name(host_ifindex: int) -> str:
    """The agent's ifb for the veth with this index (at most 15 characters)."""
    return f"{IFB_PREFIX}{host_ifindex}"


@dataclass(frozen=True)
class PodRates:
    """One pod's split, Mbit/s: the link total, and the client's and storage's guarantees."""

    total_mbit: float
    client_mbit: float
    storage_mbit: float

    def validate(self) -> None:
        for name, v in (("total", self.total_mbit), ("client", self.client_mbit),
                        ("storage", self.storage_mbit)):
            if not (v > 0 and v < 1e7):
                raise ElastoreError(f"the {name} rate must be in (0, 1e7) Mbit/s, got {v!r}")
        if self.client_mbit + self.storage_mbit > self.total_mbit * 1.001:
            raise ElastoreError(f"guarantees of {self.client_mbit:g} + {self.storage_mbit:g} "
                                f"Mbit/s exceed the link total of {self.total_mbit:g} Mbit/s")


@dataclass(frozen=True)
class Ports:
    client: tuple[int, ...] = (CLIENT_PORT,)
    storage: tuple[int, ...] = (STORAGE_PORT, 7001)

    def validate(self) -> None:
        every = [*self.client, *self.storage]
        if not self.client or not self.storage:
            raise ElastoreError("need at least one client port and one storage port")
        if any(not 0 < p < 65536 for p in every) or len(set(every)) != len(every):
            raise ElastoreError(f"ports must be distinct and in 1..65535: {every}")


def _u32_keys(port: int) -> list[tuple[int, int, int]]:
    """(value, mask, offset) of a TCP/UDP source and destination port match, as the kernel
    stores them (an IP header without options: the ports at 20 and 22)."""
    return [(port << 16, 0xFFFF0000, 20), (port, 0x0000FFFF, 20)]


def _filter_spec(ports: Ports) -> set[tuple[int, int, int, int]]:
    """(target class, value, mask, offset) of every filter an agent HTB has."""
    out = set()
    for cls, plist in ((AGENT_CLIENT, ports.client), (AGENT_STORAGE, ports.storage)):
        for p in plist:
            for val, mask, off in _u32_keys(p):
                # the kernel normalises a 16-bit match at 20 to one at 22 (the word it is in)
                if mask == 0x0000FFFF:
                    val, mask, off = val << 16, 0xFFFF0000, off + 2
                out.add((cls, val, mask, off))
    return out


@dataclass
class HtbState:
    """What an agent HTB on one interface looks like now (read from the kernel)."""

    rates_mbit: dict[int, tuple[float, float]]  # class handle -> (rate, ceil)
    filters: list[tuple[int, int, int, int]]  # (target, value, mask, offset), duplicates kept


@dataclass
class Inventory:
    """Every piece of the agent's tc state in a network namespace."""

    htb: dict[int, HtbState] = field(default_factory=dict)  # ifindex -> its agent HTB
    redirects: dict[int, list[int]] = field(default_factory=dict)  # ifindex -> ifb indexes
    ifbs: dict[str, int] = field(default_factory=dict)  # name -> ifindex
    names: dict[int, str] = field(default_factory=dict)  # ifindex -> name (every link)

    def interfaces(self) -> set[int]:
        """Host interfaces the agent shapes (or shaped) in any way."""
        ifb_idx = set(self.ifbs.values())
        return {i for i in (*self.htb, *self.redirects) if i not in ifb_idx}

    def counts(self) -> dict[str, int]:
        """Qdiscs, classes and filters of ours, and our ifb devices (for cleanup checks)."""
        return {"qdiscs": len(self.htb) + len(self.redirects),
                "classes": sum(len(h.rates_mbit) for h in self.htb.values()),
                "filters": sum(len(h.filters) for h in self.htb.values())
                + sum(len(r) for r in self.redirects.values()),
                "ifbs": len(self.ifbs)}


def _htb_params(c: Any) -> tuple[float, float] | None:
    opts = c.get_attr("TCA_OPTIONS")
    params = opts.get_attr("TCA_HTB_PARMS") if opts is not None else None
    if not params:
        return None
    # rates above 32 bit bytes/s come in TCA_HTB_RATE64 / CEIL64
    rate = opts.get_attr("TCA_HTB_RATE64") or params["rate"]
    ceil = opts.get_attr("TCA_HTB_CEIL64") or params["ceil"]
    return rate * 8 / 1e6, ceil * 8 / 1e6


class PodShaper:
    """The node agent's tc, on an open pyroute2 ``IPRoute``/``NetNS`` handle (the agent's own
    network namespace: the host's, with hostNetwork). Every method is idempotent; nothing
    touches a qdisc, class or filter that is not the agent's (see the layout above)."""

    def __init__(self, ipr: Any) -> None:
        self.ipr = ipr

    # -- reading ---------------------------------------------------------------------------
    def route_interface(self, ip: str) -> int | None:
        """The host interface a packet to ``ip`` leaves by, if the route is a direct one (no
        gateway): the host end of the pod's veth with a routed CNI. None: no such route."""
        try:
            routes = self.ipr.route("get", dst=ip)
        except Exception:  # pyroute2 raises NetlinkError for unreachable
            return None
        for r in routes:
            if r.get_attr("RTA_GATEWAY"):
                return None
            oif = r.get_attr("RTA_OIF")
            if oif:
                return int(oif)
        return None

    def not_dedicated(self, idx: int, ip: str) -> str | None:
        """Why interface ``idx`` is not the host end of ``ip``'s own veth (None: it is).

        Shaping a device caps everything that crosses it, so only a veth whose routes all
        lead to this one pod qualifies: the device is a veth, and every route of the main
        table through it is the pod's own host route (``<ip>/32`` or ``/128``) or IPv6's
        link-local ``fe80::/64``. A bridge (``cni0``: bridge CNIs), the node's uplink
        (``eth0`` with ipvlan or macvlan, or a default route), or a veth that carries a
        subnet is refused, whatever pods the API says are targeted (issue 35)."""
        links = self.ipr.get_links(idx)
        if not links:
            return f"interface {idx} is gone"
        link = links[0]
        name = str(link.get_attr("IFLA_IFNAME"))
        info = link.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
        if kind != "veth":
            return f"{name} is a {kind or 'physical or unknown'} device, not a pod's veth"
        pod = ipaddress.ip_address(ip)
        for family in (socket.AF_INET, socket.AF_INET6):
            for r in self.ipr.get_routes(family=family, table=254):
                if r.get_attr("RTA_OIF") != idx:
                    continue
                dst, plen = r.get_attr("RTA_DST"), int(r["dst_len"])
                if plen == 0:
                    return f"{name} carries the node's default route"
                net = ipaddress.ip_network(f"{dst}/{plen}", strict=False)
                if net.prefixlen == net.max_prefixlen and net.network_address == pod:
                    continue
                if net == ipaddress.ip_network("fe80::/64"):
                    continue
                return f"{name} carries {net}, not only the pod's {ip}"
        return None

    def inventory(self) -> Inventory:
        inv = Inventory()
        for link in self.ipr.get_links():
            idx, name = int(link["index"]), str(link.get_attr("IFLA_IFNAME"))
            inv.names[idx] = name
            if name.startswith(IFB_PREFIX):
                inv.ifbs[name] = idx
        for q in self.ipr.get_qdiscs():
            idx, kind = int(q["index"]), q.get_attr("TCA_KIND")
            if kind == "htb" and q["handle"] == AGENT_ROOT:
                inv.htb[idx] = self._read_htb(idx)
            elif kind == "ingress":
                targets = self._redirects(idx)
                if targets:
                    inv.redirects[idx] = targets
        return inv

    def _read_htb(self, idx: int) -> HtbState:
        rates = {}
        for c in self.ipr.get_classes(index=idx):
            h = int(c["handle"])
            if h >> 16 == AGENT_MAJOR:
                p = _htb_params(c)
                rates[h] = p if p is not None else (0.0, 0.0)
        filters = []
        for f in self.ipr.get_filters(index=idx, parent=AGENT_ROOT):
            opts = f.get_attr("TCA_OPTIONS")
            sel = opts.get_attr("TCA_U32_SEL") if opts is not None else None
            if sel is None:
                continue
            target = opts.get_attr("TCA_U32_CLASSID") or 0
            filters += [(int(target), val, mask, off) for val, mask, off in _u32_sel_keys(sel)]
        return HtbState(rates, filters)

    def _redirects(self, idx: int) -> list[int]:
        out = []
        for f in self.ipr.get_filters(index=idx, parent=INGRESS):
            if f["info"] >> 16 != REDIRECT_PRIO:
                continue
            opts = f.get_attr("TCA_OPTIONS")
            acts = opts.get_attr("TCA_U32_ACT") if opts is not None else None
            if acts is None:
                continue
            for _, act in acts["attrs"]:
                aopts = act.get_attr("TCA_ACT_OPTIONS") if hasattr(act, "get_attr") else None
                parms = aopts.get_attr("TCA_MIRRED_PARMS") if aopts is not None else None
                if parms is not None:
                    out.append(int(parms["ifindex"]))
        return out

    # -- writing ---------------------------------------------------------------------------
    def shape(self, host_ifindex: int, rates: PodRates, ports: Ports) -> list[str]:
        """Make the pod behind ``host_ifindex`` shaped at ``rates`` in both directions; return
        what was done (empty: it already was)."""
        rates.validate()
        ports.validate()
        done: list[str] = []
        ifb = self._ensure_ifb(host_ifindex, done)
        self._ensure_htb(host_ifindex, rates, ports, done, "to the pod")
        self._ensure_htb(ifb, rates, ports, done, "from the pod")
        self._ensure_redirect(host_ifindex, ifb, done)
        return done

    def unshape(self, host_ifindex: int | None, ifb: str | None = None) -> list[str]:
        """Remove the agent's HTB and redirect from a host interface and its ifb."""
        done: list[str] = []
        names = {int(x["index"]): x.get_attr("IFLA_IFNAME") for x in self.ipr.get_links()}
        if host_ifindex is not None and host_ifindex in names:
            if any(q.get_attr("TCA_KIND") == "htb" and q["handle"] == AGENT_ROOT
                   for q in self.ipr.get_qdiscs(index=host_ifindex)):
                self.ipr.tc("del", index=host_ifindex, handle=AGENT_ROOT, root=True)
                done.append(f"{names[host_ifindex]}: HTB removed")
            if self._redirects(host_ifindex):
                self._del_redirect(host_ifindex)
                done.append(f"{names[host_ifindex]}: redirect removed")
            ingress = [q for q in self.ipr.get_qdiscs(index=host_ifindex)
                       if q.get_attr("TCA_KIND") == "ingress"]
            if ingress and not list(self.ipr.get_filters(index=host_ifindex, parent=INGRESS)):
                self.ipr.tc("del", "ingress", host_ifindex, INGRESS)
                done.append(f"{names[host_ifindex]}: empty ingress qdisc removed")
        name = ifb if ifb is not None else (ifb_name(host_ifindex)
                                            if host_ifindex is not None else None)
        if name is not None and name.startswith(IFB_PREFIX):
            found = self.ipr.link_lookup(ifname=name)
            if found:
                self.ipr.link("del", index=found[0])
                done.append(f"{name} removed")
        return done

    def _ensure_ifb(self, host_ifindex: int, done: list[str]) -> int:
        name = ifb_name(host_ifindex)
        found = self.ipr.link_lookup(ifname=name)
        if not found:
            try:
                self.ipr.link("add", ifname=name, kind="ifb")
            except Exception as exc:
                raise ElastoreError(f"cannot create the ifb device {name} ({exc}): the node "
                                    "needs the ifb kernel module (the agent cannot load "
                                    "modules)") from exc
            found = self.ipr.link_lookup(ifname=name)
            done.append(f"{name} created")
        idx = int(found[0])
        link = self.ipr.get_links(idx)[0]
        if not link["flags"] & 1:  # IFF_UP
            self.ipr.link("set", index=idx, state="up")
        return idx

    def _ensure_htb(self, idx: int, rates: PodRates, ports: Ports, done: list[str],
                    what: str) -> None:
        want = self._wanted_classes(rates)
        has = [q for q in self.ipr.get_qdiscs(index=idx) if q["parent"] == 0xFFFFFFFF]
        ours = [q for q in has if q.get_attr("TCA_KIND") == "htb" and q["handle"] == AGENT_ROOT]
        if ours:
            state = self._read_htb(idx)
            same_layout = set(state.rates_mbit) == set(want) and \
                sorted(state.filters) == sorted(_filter_spec(ports))
            if same_layout:
                for h, (rate, ceil) in want.items():
                    r0, c0 = state.rates_mbit[h]
                    if _differs(r0, rate) or _differs(c0, ceil):
                        self._class(idx, "change-class", h, rate, ceil)
                        done.append(f"{what}: class {h >> 16:x}:{h & 0xFFFF:x} -> "
                                    f"{rate:g}/{ceil:g} Mbit/s")
                return
            self.ipr.tc("del", index=idx, handle=AGENT_ROOT, root=True)
            done.append(f"{what}: HTB not as wanted, rebuilt")
        elif any(q.get_attr("TCA_KIND") not in (None, "noqueue", "pfifo_fast", "mq",
                                                 "fq_codel", "noop") for q in has):
            kinds = ", ".join(str(q.get_attr("TCA_KIND")) for q in has)
            raise ElastoreError(f"interface {idx} has another root qdisc ({kinds}): not "
                                "ours, left alone")
        self._install(idx, want, ports)
        if not ours:
            done.append(f"{what}: HTB installed")

    @staticmethod
    def _wanted_classes(rates: PodRates) -> dict[int, tuple[float, float]]:
        t = rates.total_mbit
        return {AGENT_TOTAL: (t, t), AGENT_CLIENT: (rates.client_mbit, t),
                AGENT_STORAGE: (rates.storage_mbit, t), AGENT_OTHER: (t * OTHER_SHARE, t)}

    def _class(self, idx: int, cmd: str, handle: int, rate: float, ceil: float) -> None:
        parent = AGENT_ROOT if handle == AGENT_TOTAL else AGENT_TOTAL
        self.ipr.tc(cmd, "htb", idx, handle, parent=parent, rate=_rate(rate),
                    ceil=_rate(ceil), burst=BURST, cburst=BURST)

    def _install(self, idx: int, want: dict[int, tuple[float, float]], ports: Ports) -> None:
        try:
            self.ipr.tc("add", "htb", idx, AGENT_ROOT, default=AGENT_OTHER & 0xFFFF)
            for h in (AGENT_TOTAL, AGENT_CLIENT, AGENT_STORAGE, AGENT_OTHER):
                self._class(idx, "add-class", h, *want[h])
            prio = 1
            for cls, plist in ((AGENT_CLIENT, ports.client), (AGENT_STORAGE, ports.storage)):
                for p in plist:
                    for val, mask, off in _u32_keys(p):
                        self.ipr.tc("add-filter", "u32", idx, parent=AGENT_ROOT, prio=prio,
                                    protocol=ETH_P_IP, target=cls,
                                    keys=[f"0x{val:08x}/0x{mask:08x}+{off}"])
                        prio += 1
        except Exception:
            # half a tree is worse than none: traffic would fall in the wrong class
            with contextlib.suppress(Exception):
                self.ipr.tc("del", index=idx, handle=AGENT_ROOT, root=True)
            raise

    def _ensure_redirect(self, host_ifindex: int, ifb: int, done: list[str]) -> None:
        targets = self._redirects(host_ifindex)
        if targets == [ifb]:
            return
        if targets:  # to another (stale) ifb, or more than one: replace
            self._del_redirect(host_ifindex)
        if not any(q.get_attr("TCA_KIND") == "ingress"
                   for q in self.ipr.get_qdiscs(index=host_ifindex)):
            self.ipr.tc("add", "ingress", host_ifindex, INGRESS)
        self.ipr.tc("add-filter", "u32", host_ifindex, parent=INGRESS, prio=REDIRECT_PRIO,
                    protocol=ETH_P_ALL, target=0x10001, keys=["0x0/0x0+0"],
                    action={"kind": "mirred", "direction": "egress", "action": "redirect",
                            "ifindex": ifb})
        done.append("redirect to the ifb " + ("replaced" if targets else "installed"))

    def _del_redirect(self, idx: int) -> None:
        # exactly our priority: pyroute2's ``prio=`` is dropped without a filter kind, and a
        # delete without it would take every filter on the qdisc, other people's too
        self.ipr.tc("del-filter", index=idx, parent=INGRESS,
                    info=(REDIRECT_PRIO << 16) | socket.htons(ETH_P_ALL))

    def class_stats(self, idx: int) -> dict[int, dict[str, int]]:
        """Bytes, packets and drops per agent class on one interface (kernel counters)."""
        out = {}
        for c in self.ipr.get_classes(index=idx):
            h = int(c["handle"])
            if h >> 16 != AGENT_MAJOR:
                continue
            stats = c.get_attr("TCA_STATS2")
            basic = stats.get_attr("TCA_STATS_BASIC") if stats is not None else None
            queue = stats.get_attr("TCA_STATS_QUEUE") if stats is not None else None
            out[h] = {"bytes": int(basic["bytes"]) if basic is not None else 0,
                      "packets": int(basic["packets"]) if basic is not None else 0,
                      "drops": int(queue["drops"]) if queue is not None else 0}
        return out


def _u32_sel_keys(sel: Any) -> list[tuple[int, int, int]]:
    """(value, mask, offset) of a u32 selector's keys, read from its bytes: struct
    tc_u32_sel is a 4-byte attribute header and 16 bytes, then ``nkeys`` struct tc_u32_key
    {__be32 mask; __be32 val; int off; int offmask} (pyroute2 0.9.7 decodes the keys 4 bytes
    early, so its ``keys`` are not used)."""
    import struct

    out = []
    base = sel.offset + 4 + 16
    for k in range(int(sel["nkeys"])):
        mask, val = struct.unpack_from(">II", sel.data, base + 16 * k)
        (off,) = struct.unpack_from("=i", sel.data, base + 16 * k + 8)
        out.append((val, mask, off))
    return out


def _differs(have: float, want: float) -> bool:
    return abs(have - want) > RATE_TOLERANCE * max(want, 1e-9)

