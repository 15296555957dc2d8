"""A Kubernetes node's pod network, emulated with network namespaces (no container runtime).

``elastore-nh-<tag>`` is the node's ("host") namespace, with a node address on its
loopback and IP forwarding on. Each pod gets a namespace ``elastore-np-<tag>-<k>`` joined to
the host by a veth pair, wired as a routed CNI (Calico's way) does: the pod has its IP/32 on
``eth0`` and a default route via a link-local gateway on the host end; the
host routes the pod IP/32 to the veth's host end. Traffic between pods, or between the node
and a pod, crosses the host ends, where the agent shapes it.

Everything lives in namespaces this module creates, and only those are deleted.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

from elastore.errors import ElastoreError
from elastore.lab import netns

NODE_IP = "10.250.0.1"
GATEWAY = "169.254.1.1"


def _sh(ns: str | None, *argv: str) -> None:
    cmd = list(argv) if ns is None else netns.command(ns, list(argv))
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"{' '.join(cmd)}: {res.stderr.strip()}")


@dataclass
class PodNet:
    tag: str
    pods: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # name -> ns, ip, veth

    @property
    def host(self) -> str:
        return f"elastore-nh-{self.tag}"

    def up(self) -> PodNet:
        netns.create(self.host)
        # the node's address on lo (this kernel has no dummy devices): local all the same
        _sh(self.host, "ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo")
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0"):
            _sh(self.host, "sysctl", "-qw", key)
        return self

    def add_pod(self, name: str, ip: str) -> str:
        """A pod namespace with ``ip``; returns the host end's name."""
        k = len(self.pods)
        ns, veth = f"elastore-np-{self.tag}-{k}", f"vpod{k}"
        netns.create(ns)
        _sh(self.host, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
            "netns", ns)
        # the pod's gateway is the host end's (every host end has the same link-local
        # address, as Calico's answer by proxy ARP)
        _sh(self.host, "ip", "addr", "add", f"{GATEWAY}/32", "dev", veth)
        _sh(self.host, "sysctl", "-qw", f"net.ipv4.conf.{veth}.rp_filter=0")
        _sh(self.host, "ip", "link", "set", veth, "up")
        _sh(self.host, "ip", "route", "add", f"{ip}/32", "dev", veth, "scope", "link")
        _sh(ns, "ip", "addr", "add", f"{ip}/32", "dev", "eth0")
        _sh(ns, "ip", "link", "set", "eth0", "up")
        _sh(ns, "ip", "route", "add", GATEWAY, "dev", "eth0", "scope", "link")
        _sh(ns, "ip", "route", "add", "default", "via", GATEWAY, "dev", "eth0")
        self.pods[name] = (ns, ip, veth)
        return veth

    def remove_pod(self, name: str) -> None:
        """The pod's namespace goes, and its veth with it (as when a runtime deletes it)."""
        ns, _, _ = self.pods.pop(name)
        netns.delete(ns)

    def down(self) -> None:
        for ns, _, _ in self.pods.values():
            netns.delete(ns)
        self.pods.clear()
        netns.delete(self.host)
