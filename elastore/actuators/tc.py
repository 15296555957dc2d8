"""BwMan's tc actuator: an HTB on an interface inside a lab namespace, via pyroute2.

Layout (handles in hex)::

    1:    htb root qdisc, default 1:ffff (unclassified traffic gets its own class, so it
          never bypasses shaping)
    1:1   the interface's total rate
    1:ffff  unclassified (gossip to other ports, anything else): the total as ceiling
    1:N0  client class of node N (port 9042), N = 1, 2, ... in the order given
    1:N1  storage class of node N (port 7000: streaming, but also gossip and messaging)

Each node class has u32 filters on its IP and port in both directions (requests to the
node, responses from it). Rates change live (``change-class``), and :meth:`remove` deletes
exactly the root qdisc this shaper installed, after checking it is still ours.

Port 7000 carries Cassandra's gossip and messaging as well as streaming, so the *migration
rate* is enforced with ``nodetool setstreamthroughput``; tc guarantees the client class its
bandwidth (reference text, 5.2.2).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from elastore.errors import ElastoreError

ROOT = 0x10000
TOTAL = 0x10001
UNCLASSIFIED = 0x1FFFF
CLIENT_PORT = 9042
STORAGE_PORT = 7000
BURST = 64 * 1024  # lo has a 64 KiB MTU: smaller bursts make request/response crawl
ETH_P_IP = 0x0800


def _rate(mbit: float) -> str:
    if not mbit > 0:
        raise ElastoreError(f"a tc rate must be > 0 Mbit/s, got {mbit}")
    return f"{round(mbit * 1000)}kbit"


@dataclass
class NodeClasses:
    ip: str
    client: int
    storage: int


@dataclass
class HtbShaper:
    netns: str
    ifname: str = "lo"
    total_mbit: float = 1000.0
    # None: every class is capped at its rate. A number: classes are *guaranteed* their rate
    # and may borrow idle bandwidth up to this ceiling (BwMan's mode: port 7000 carries the
    # replicas' share of client requests too, so a hard cap at the migration's share would
    # throttle clients through the back door).
    ceil_mbit: float | None = None
    nodes: dict[str, NodeClasses] = field(default_factory=dict)
    installed: bool = False

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
        return _rate(mbit if self.ceil_mbit is None else max(mbit, self.ceil_mbit))

    def install(self, node_ips: Sequence[str], client_mbit: float, storage_mbit: float) -> None:
        """Install the HTB with a client and a storage class per node."""
        if self.installed:
            raise ElastoreError("this shaper is already installed; remove() it first")
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
                addr = int(ipaddress.IPv4Address(ip))
                cls = NodeClasses(ip, ROOT | (n << 4), ROOT | (n << 4) | 1)
                for handle, mbit, port in ((cls.client, client_mbit, CLIENT_PORT),
                                           (cls.storage, storage_mbit, STORAGE_PORT)):
                    r, c = _rate(mbit), self._ceil(mbit)
                    ns.tc("add-class", "htb", idx, handle, parent=TOTAL, rate=r, ceil=c,
                          burst=BURST, cburst=BURST)
                    for key in (f"0x{addr:08x}/0xffffffff+16", f"0x{port:04x}/0x0000ffff+20"), \
                               (f"0x{addr:08x}/0xffffffff+12", f"0x{port << 16:08x}/0xffff0000+20"):
                        ns.tc("add-filter", "u32", idx, parent=ROOT, prio=prio,
                              protocol=ETH_P_IP, target=handle, keys=list(key))
                        prio += 1
                self.nodes[ip] = cls
        except Exception:
            self._remove(ns)
            raise
        finally:
            ns.close()

    def set_rates(self, ip: str, client_mbit: float | None = None,
                  storage_mbit: float | None = None) -> None:
        """Change a node's class rates live."""
        if ip not in self.nodes:
            raise ElastoreError(f"no classes for node {ip} (known: {', '.join(self.nodes)})")
        cls = self.nodes[ip]
        ns = self._ns()
        try:
            idx = self._index(ns)
            for handle, mbit in ((cls.client, client_mbit), (cls.storage, storage_mbit)):
                if mbit is None:
                    continue
                r, c = _rate(mbit), self._ceil(mbit)
                ns.tc("change-class", "htb", idx, handle, parent=TOTAL, rate=r, ceil=c,
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
        ns = self._ns()
        try:
            idx = self._index(ns)
            out = {}
            for c in ns.get_classes(index=idx):
                stats = c.get_attr("TCA_STATS2")
                basic = stats.get_attr("TCA_STATS_BASIC") if stats is not None else None
                if basic is None:
                    legacy = c.get_attr("TCA_STATS")
                    out[int(c["handle"])] = int(legacy["bytes"]) if legacy else 0
                else:
                    out[int(c["handle"])] = int(basic["bytes"])
            return out
        finally:
            ns.close()

    def storage_bytes_to(self, ips: list[str]) -> int:
        """Bytes that went to the storage port (7000) of ``ips``: what they received."""
        counts = self.class_bytes()
        return sum(counts.get(self.nodes[ip].storage, 0) for ip in ips)

    def describe(self) -> list[dict[str, Any]]:
        """The installed classes as (handle, rate in Mbit/s) for status output."""
        ns = self._ns()
        try:
            idx = self._index(ns)
            out = []
            for c in ns.get_classes(index=idx):
                opts = c.get_attr("TCA_OPTIONS")
                params = opts.get_attr("TCA_HTB_PARMS") if opts is not None else None
                rate_bps = params["rate"] if params else None
                out.append({"handle": f"{c['handle'] >> 16:x}:{c['handle'] & 0xFFFF:x}",
                            "rate_mbit": rate_bps * 8 / 1e6 if rate_bps else None})
            return out
        finally:
            ns.close()
