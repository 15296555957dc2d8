"""A Kubernetes node's pod network, emulated with network namespaces (no container runtime).

``elastore-nh-<tag>`` is the node's ("host") namespace, with a node address on its loopback
and IP forwarding on. Each pod gets a namespace ``elastore-np-<tag>-<k>`` joined to the host
by a veth pair, wired as a routed CNI (Calico's way) does (:func:`elastore.lab.netns.wire_pod`):
the pod has its IP/32 on ``eth0`` and a default route via a link-local gateway on the host
end; the host routes the pod IP/32 to the veth's host end. Traffic between pods, or between
the node and a pod, crosses the host ends, where the agent shapes it.

Everything lives in namespaces this module creates, and only those are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elastore.lab import netns

NODE_IP = netns.HOST_IP


@dataclass
class PodNet:
    tag: str
    pods: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # name -> ns, ip, veth
    made: int = 0

    @property
    def host(self) -> str:
        return f"elastore-nh-{self.tag}"

    def up(self) -> PodNet:
        netns.create(self.host)
        netns.prepare_host(self.host)
        return self

    def add_pod(self, name: str, ip: str) -> str:
        """A pod namespace with ``ip``; returns the host end's name."""
        k = self.made
        self.made += 1
        ns, veth = f"elastore-np-{self.tag}-{k}", f"vpod{k}"
        netns.create(ns)
        netns.wire_pod(self.host, ns, ip, veth)
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
