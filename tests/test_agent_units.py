"""The node agent's pure part (which pods it shapes, from policies and pods) and its tc
shaper on a real kernel in namespaces this test run creates (no API server here: the
agent against a real one is test_agent_k8s.py)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from figures import FigureBook

from elastore.actuators.tc import (
    AGENT_CLIENT,
    AGENT_OTHER,
    AGENT_STORAGE,
    PodRates,
    PodShaper,
    Ports,
    ifb_name,
)
from elastore.agent.desired import Owners, desired, policy_pods
from elastore.errors import ElastoreError

NODE = "node-a"


def bw_status(pods: list[str], client: float = 30.0, storage: float = 69.0,
              total: float = 100.0) -> dict[str, Any]:
    return {"nodeMbit": total, "source": "spec.bandwidth.nodeMbit", "policy": "PreferClients",
            "clientPorts": [9042], "storagePorts": [7000, 7001],
            "clientMbit": client, "storageMbit": storage, "streamMiBps": 4.0,
            "pods": [{"name": p, "clientMbit": client, "storageMbit": storage} for p in pods]}


def pol(name: str, ns: str, bandwidth: Any, mode: str = "Enforce", target: str = "cass",
        kind: str = "StatefulSet", node_mbit: float | None = 100.0, **meta: Any
        ) -> dict[str, Any]:
    spec = {"mode": mode, "target": {"name": target, "kind": kind, "replicationFactor": 3},
            "replicas": {"min": 3, "max": 6}, "slo": {"latencyMs": 10},
            "metrics": {"prometheus": {"url": "http://prometheus:9090"}}}
    if node_mbit is not None:
        spec["bandwidth"] = {"nodeMbit": node_mbit}
    return {"metadata": {"name": name, "namespace": ns, **meta}, "spec": spec,
            "status": {"bandwidth": bandwidth}}


def ref(kind: str, name: str) -> list[dict[str, Any]]:
    """A controller ownerReference to ``kind``/``name`` (UIDs here are ``uid-<name>``)."""
    return [{"kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}]


def pod(name: str, ns: str, ip: str | None = "10.0.0.5", node: str = NODE,
        phase: str = "Running", host_network: bool = False, owner: str | None = None,
        **meta: Any) -> dict[str, Any]:
    """A pod, by default controlled by the StatefulSet its name says (``cass-0``: cass)."""
    sts = owner if owner is not None else name.rsplit("-", 1)[0]
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "ownerReferences": ref("StatefulSet", sts), **meta},
            "spec": {"nodeName": node, "hostNetwork": host_network},
            "status": {"phase": phase, "podIP": ip}}


def obj(name: str, managed: bool = True, owner: tuple[str, str] | None = None
        ) -> dict[str, Any]:
    """A target object (a StatefulSet or a CassandraDatacenter)."""
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}",
                            "labels": {"elastore.io/managed": "true"} if managed else {}}
    if owner is not None:
        meta["ownerReferences"] = ref(*owner)
    return {"metadata": meta}


def owners(*names: str, ns: str = "shop", **objs: dict[str, Any]) -> Owners:
    """Every named StatefulSet target in ``ns`` opted in (``objs``: others, by name)."""
    targets: dict[tuple[str, str, str], dict[str, Any] | None] = {
        (ns, "StatefulSet", n): obj(n) for n in names or ("cass", "web", "db")}
    for n, o in objs.items():
        targets[(ns, "StatefulSet", n)] = o
    return Owners(targets, {})


def shaped(pols: list[dict[str, Any]], pods: list[dict[str, Any]],
           own: Owners | None = None) -> tuple[list[str], list[str]]:
    want, problems = desired(pols, pods, NODE, own if own is not None else owners())
    return list(want), [p.reason for p in problems]


# -- which pods ------------------------------------------------------------------------------
def test_agent_desired_shapes_named_running_pods_on_its_node_only() -> None:
    pods = [pod("cass-0", "shop", "10.0.0.5"), pod("cass-1", "shop", "10.0.0.6", node="b"),
            pod("cass-2", "shop", "10.0.0.7", phase="Pending"), pod("web-0", "shop", "10.0.0.8"),
            pod("cass-0", "other", "10.0.0.9"),
            pod("cass-3", "shop", "10.0.0.10", deletionTimestamp="2026-01-01T00:00:00Z")]
    want, problems = desired([pol("orders", "shop", bw_status(["cass-0", "cass-1", "cass-2",
                                                               "cass-3"]))], pods, NODE,
                             owners())
    assert list(want) == ["shop/cass-0"]  # not another node's, pending, unnamed, other ns,
    assert problems == []                 # or terminating
    t = want["shop/cass-0"]
    assert (t.ip, t.policy, t.rates) == ("10.0.0.5", "shop/orders", PodRates(100, 30, 69))
    assert t.ports == Ports((9042,), (7000, 7001))


def test_agent_desired_never_shapes_a_host_network_pod() -> None:
    want, problems = desired([pol("orders", "shop", bw_status(["cass-0"]))],
                             [pod("cass-0", "shop", host_network=True)], NODE, owners())
    assert want == {}
    assert [p.reason for p in problems] == ["HostNetworkPod"]


def test_agent_desired_a_bad_status_shapes_nothing_of_that_policy_and_says_why() -> None:
    bad = bw_status(["cass-0"], client=80, storage=69)  # guarantees exceed the total
    nan = bw_status(["web-0"])
    nan["nodeMbit"] = "lots"
    want, problems = desired([pol("a", "shop", bad), pol("b", "shop", nan, target="web"),
                              pol("c", "shop", bw_status(["db-0"]), target="db")],
                             [pod("cass-0", "shop"), pod("web-0", "shop", "10.0.0.6"),
                              pod("db-0", "shop", "10.0.0.7")], NODE, owners())
    assert list(want) == ["shop/db-0"]
    msgs = [p.message for p in problems]
    assert [p.reason for p in problems] == ["BadBandwidthStatus"] * 2
    assert "exceed the link total" in msgs[0] and "nodeMbit is 'lots'" in msgs[1]


def test_agent_desired_a_pod_named_by_two_policies_is_left_alone() -> None:
    want, problems = desired([pol("a", "shop", bw_status(["cass-0"])),
                              pol("b", "shop", bw_status(["cass-0"], client=10, storage=89))],
                             [pod("cass-0", "shop")], NODE, owners())
    assert want == {}
    assert problems[0].reason == "PodContended" and "shop/a, shop/b" in problems[0].message


def test_agent_desired_a_policy_being_deleted_or_without_bandwidth_shapes_nothing() -> None:
    gone = pol("a", "shop", bw_status(["cass-0"]), deletionTimestamp="2026-01-01T00:00:00Z")
    assert shaped([gone, pol("b", "shop", None)], [pod("cass-0", "shop")]) == ([], [])
    # Recommend mode publishes the split and touches nothing, tc included
    recommend = pol("c", "shop", bw_status(["cass-0"]), mode="Recommend")
    assert shaped([recommend], [pod("cass-0", "shop")]) == ([], [])
    assert shaped([pol("c", "shop", bw_status(["cass-0"]))],
                  [pod("cass-0", "shop")]) == (["shop/cass-0"], [])
    with pytest.raises(ValueError, match="clientPorts"):
        policy_pods(pol("c", "shop", {**bw_status(["x"]), "clientPorts": []}))


# -- what a forged status cannot do (issue 35, finding 1) -------------------------------------
def test_tenant_a_forged_status_naming_another_workloads_pod_shapes_nothing_of_it() -> None:
    """The review's attack: the policy's status names web-0 (another StatefulSet's pod in the
    same namespace): the name is in the status, but web-0's controller is not the target."""
    pods = [pod("cass-0", "shop"), pod("web-0", "shop", "10.0.0.6")]
    got, why = shaped([pol("orders", "shop", bw_status(["cass-0", "web-0"]))], pods)
    assert got == ["shop/cass-0"] and why == ["NotTargetPod"], (got, why)
    # a pod named like the target's but controlled by another StatefulSet (or by nothing)
    fake = [pod("cass-1", "shop", owner="web"), {**pod("cass-2", "shop"), "metadata": {
        "name": "cass-2", "namespace": "shop", "uid": "uid-cass-2"}}]
    got, why = shaped([pol("orders", "shop", bw_status(["cass-1", "cass-2"]))], fake)
    assert got == [] and why == ["NotTargetPod", "NotTargetPod"], (got, why)
    # the same UID is what counts: a StatefulSet deleted and made again under the same name
    again = owners(cass={**obj("cass"), "metadata": {**obj("cass")["metadata"],
                                                      "uid": "uid-new"}})
    assert shaped([pol("orders", "shop", bw_status(["cass-0"]))], pods[:1], again) == (
        [], ["NotTargetPod"])


def test_tenant_a_refused_target_is_never_shaped() -> None:
    """The operator's guard, seen by the agent on the target object: not opted in, owned by
    a controller, or not there; a target kind it cannot check."""
    p = [pol("orders", "shop", bw_status(["cass-0"]))]
    cass0 = [pod("cass-0", "shop")]
    assert shaped(p, cass0, owners(cass=obj("cass", managed=False))) == ([], ["NotOptedIn"])
    assert shaped(p, cass0, owners(cass=obj("cass", owner=("Deployment", "x")))) == (
        [], ["OwnedByController"])
    assert shaped(p, cass0, Owners({}, {})) == ([], ["TargetNotFound"])
    assert shaped([pol("orders", "shop", bw_status(["cass-0"]), kind="Deployment")],
                  cass0) == ([], ["TargetNotFound"])


def test_tenant_a_split_outside_the_spec_shapes_nothing() -> None:
    """A forged 0.002 Mbit/s (2 kbit/s) starves the store's own pods no more than the
    operator could: each class keeps BwMan's floor; the link total and the ports are the
    spec's."""
    cass0 = [pod("cass-0", "shop")]
    for bw, spec_mbit in ((bw_status(["cass-0"], client=0.002, storage=99), 100.0),
                          (bw_status(["cass-0"], client=99, storage=0.002), 100.0),
                          (bw_status(["cass-0"], total=1000.0), 100.0),
                          ({**bw_status(["cass-0"]), "clientPorts": [22]}, 100.0),
                          (bw_status(["cass-0"]), None)):
        got, why = shaped([pol("orders", "shop", bw, node_mbit=spec_mbit)], cass0)
        assert (got, why) == ([], ["SplitOutOfBounds"]), (bw, spec_mbit, got, why)
    assert shaped([pol("orders", "shop", bw_status(["cass-0"], client=1.0, storage=0.5))],
                  cass0) == (["shop/cass-0"], [])


def test_tenant_a_datacenters_pods_are_those_of_the_statefulsets_it_controls() -> None:
    """cass-operator's pods: controlled by <cluster>-<dc>-<rack>-sts, which the
    CassandraDatacenter controls."""
    ns = "shop"
    dc = obj("dc1")
    sts = [{"metadata": {"name": "c-dc1-r1-sts", "uid": "uid-c-dc1-r1-sts",
                         "ownerReferences": ref("CassandraDatacenter", "dc1")}},
           {"metadata": {"name": "web", "uid": "uid-web"}}]
    own = Owners({(ns, "CassandraDatacenter", "dc1"): dc}, {ns: sts})
    pods = [pod("c-dc1-r1-sts-0", ns), pod("web-0", ns, "10.0.0.6")]
    got, why = shaped([pol("dc", ns, bw_status(["c-dc1-r1-sts-0", "web-0"]), target="dc1",
                           kind="CassandraDatacenter")], pods, own)
    assert got == ["shop/c-dc1-r1-sts-0"] and why == ["NotTargetPod"], (got, why)


# -- the shaper on a real kernel ---------------------------------------------------------------
@pytest.fixture(scope="module")
def podnet() -> Iterator[Any]:
    from testbed.podnet import PodNet

    net = PodNet(f"u{os.getpid() % 100000}")
    try:
        net.up()
        net.add_pod("p0", "10.77.0.5")
        net.add_pod("p1", "10.77.0.6")
    except Exception as exc:
        net.down()
        pytest.fail(f"cannot build the pod network namespaces: {exc}")
    yield net
    net.down()


def _ns(net: Any) -> Any:
    from pyroute2 import NetNS

    return NetNS(net.host)


def wire_rates(net: Any, idx: int, flows: list[dict[str, Any]], seconds: float = 7.0
               ) -> tuple[dict[int, float], dict[int, float]]:
    """Mbit/s per agent class on interface ``idx`` (the kernel's byte counters, from 1.5 s in
    to 1 s before the end) while the flows run, twice: over the middle of a clock reading
    before and after each counter read (the figures: a process descheduled between the read
    and its timestamp would otherwise shorten or stretch the interval; one run read 31.5
    Mbit/s through a 30 Mbit/s class), and over the longest interval that can lie between
    the two reads (the least rate the counters allow: a descheduled test only lowers it, so
    a cap checked against it holds at any speed)."""
    from elastore.lab.flow import measure

    threads = [threading.Thread(target=measure, kwargs={**f, "seconds": seconds})
               for f in flows]
    for t in threads:
        t.start()
    time.sleep(1.5)
    ipr = _ns(net)
    try:
        shaper = PodShaper(ipr)

        def read() -> tuple[dict[int, dict[str, int]], float, float]:
            before = time.monotonic()
            stats = shaper.class_stats(idx)
            return stats, before, time.monotonic()

        b0, s0, e0 = read()
        time.sleep(seconds - 2.5)
        b1, s1, e1 = read()
    finally:
        ipr.close()
    for t in threads:
        t.join()
    sent = {h: (b1[h]["bytes"] - b0[h]["bytes"]) * 8 / 1e6 for h in b1}
    mid = (s1 + e1) / 2 - (s0 + e0) / 2
    return ({h: v / mid for h, v in sent.items()}, {h: v / (e1 - s0) for h, v in sent.items()})


#: a measured rate never exceeds this times its cap
CAP_SLACK = 1.10


@pytest.mark.lab
@pytest.mark.concurrent  # the classes read back, and one-sided caps: nothing is timed
def test_agent_shaper_guarantees_both_classes_in_both_directions(
        podnet: Any, figure: FigureBook) -> None:
    """Both directions of a pod (its veth, and the ifb its ingress is redirected to) get a
    client and a storage class of the split (30 and 69 Mbit/s guaranteed, the link's 100 the
    ceiling of each), read back from the kernel; both saturating flows of a direction go
    through their own class, and the two never take more than the link. How close each
    comes to its guarantee is a figure."""
    from testbed.podnet import NODE_IP

    p0_ns, p0_ip, _ = podnet.pods["p0"]
    ipr = _ns(podnet)
    try:
        shaper = PodShaper(ipr)
        idx = shaper.route_interface(p0_ip)
        assert idx is not None and shaper.route_interface("192.0.2.1") is None
        done = shaper.shape(idx, PodRates(100, 30, 69), Ports())
        assert "esifb" in done[0] and len(done) == 4
        assert shaper.shape(idx, PodRates(100, 30, 69), Ports()) == []  # idempotent
        ifb = ipr.link_lookup(ifname=ifb_name(idx))[0]
        inv = shaper.inventory()
        for i in (idx, ifb):
            rates = inv.htb[i].rates_mbit
            assert rates[AGENT_CLIENT] == pytest.approx((30, 100), rel=0.002), rates
            assert rates[AGENT_STORAGE] == pytest.approx((69, 100), rel=0.002), rates
    finally:
        ipr.close()
    # to the pod: a client and an internode flow from the node at once
    to_pod, to_pod_least = wire_rates(podnet, idx, [
        {"ns": p0_ns, "host": p0_ip, "port": 9042, "send_ns": podnet.host},
        {"ns": p0_ns, "host": p0_ip, "port": 7000, "send_ns": podnet.host}])
    # from the pod: its client port answering, and its own internode connection out
    from_pod, from_pod_least = wire_rates(podnet, ifb, [
        {"ns": podnet.host, "host": NODE_IP, "port": 5001, "send_ns": p0_ns,
         "source": f"{p0_ip}:9042"},
        {"ns": podnet.host, "host": NODE_IP, "port": 7001, "send_ns": p0_ns}])
    print(f"to the pod: {to_pod[AGENT_CLIENT]:.2f} / {to_pod[AGENT_STORAGE]:.2f}; from it: "
          f"{from_pod[AGENT_CLIENT]:.2f} / {from_pod[AGENT_STORAGE]:.2f} Mbit/s (30 / 69)")
    ipr = _ns(podnet)
    try:
        assert len(PodShaper(ipr).unshape(idx)) == 4
    finally:
        ipr.close()
    for way, least in (("to the pod", to_pod_least), ("from the pod", from_pod_least)):
        # each flow through its own class, and not the unclassified one
        other = least.get(AGENT_OTHER, 0.0)
        assert least[AGENT_CLIENT] > other and least[AGENT_STORAGE] > other, (way, least)
        assert least[AGENT_CLIENT] + least[AGENT_STORAGE] <= 100 * CAP_SLACK, (way, least)
    for way, mbit in (("to_pod", to_pod), ("from_pod", from_pod)):
        for cls, want in (("client", 30), ("storage", 69)):
            got = mbit[AGENT_CLIENT if cls == "client" else AGENT_STORAGE]
            meaning = (f"the {cls} class {way.replace('_', ' ')}, both classes saturating "
                       f"({want} Mbit/s guaranteed), Mbit/s")
            figure.within(f"{way}_{cls}_mbit", got, want, 0.05, meaning,
                          source=f"was assert rates[{cls}] == approx({want}, rel=0.05)")


@pytest.mark.lab
@pytest.mark.concurrent  # the tc tree's shape, read back: no rate is measured
def test_agent_shaper_rates_change_live_and_a_wrong_tree_is_rebuilt(podnet: Any) -> None:
    _, p1_ip, veth = podnet.pods["p1"]
    ipr = _ns(podnet)
    try:
        shaper = PodShaper(ipr)
        idx = shaper.route_interface(p1_ip)
        assert idx is not None
        shaper.shape(idx, PodRates(100, 30, 69), Ports())
        done = shaper.shape(idx, PodRates(100, 60, 39), Ports())
        assert len(done) == 4 and all("-> " in d for d in done)  # change-class, no rebuild
        state = shaper.inventory().htb[idx]
        assert state.rates_mbit[AGENT_CLIENT] == pytest.approx((60, 100), rel=0.002)
        # someone deletes one of our classes' filters: the tree is rebuilt, not patched
        subprocess.run(["ip", "netns", "exec", podnet.host, "tc", "filter", "del", "dev", veth,
                        "parent", "e5a:", "prio", "1"], check=True)
        assert any("rebuilt" in d for d in shaper.shape(idx, PodRates(100, 60, 39), Ports()))
        state = shaper.inventory().htb[idx]
        assert len(state.filters) == 6 and len(set(state.filters)) == 6
        # other ports: the layout changes, so it is rebuilt
        assert any("rebuilt" in d for d in shaper.shape(idx, PodRates(100, 60, 39),
                                                          Ports((9042,), (7000,))))
        assert len(shaper.inventory().htb[idx].filters) == 4
    finally:
        PodShaper(ipr).unshape(idx)
        ipr.close()


@pytest.mark.lab
@pytest.mark.concurrent  # whose qdiscs stay: no rate is measured
def test_agent_shaper_leaves_what_is_not_its_own(podnet: Any) -> None:
    _, p1_ip, veth = podnet.pods["p1"]
    sh = ["ip", "netns", "exec", podnet.host, "tc"]
    subprocess.run([*sh, "qdisc", "add", "dev", veth, "root", "handle", "1:", "htb"],
                   check=True)
    subprocess.run([*sh, "qdisc", "add", "dev", veth, "ingress"], check=True)
    subprocess.run([*sh, "filter", "add", "dev", veth, "parent", "ffff:", "prio", "7", "u32",
                    "match", "u32", "0", "0", "flowid", "1:1"], check=True)
    ipr = _ns(podnet)
    try:
        shaper = PodShaper(ipr)
        idx = shaper.route_interface(p1_ip)
        assert idx is not None
        with pytest.raises(ElastoreError, match="another root qdisc"):
            shaper.shape(idx, PodRates(100, 30, 69), Ports())
        subprocess.run([*sh, "qdisc", "del", "dev", veth, "root"], check=True)
        shaper.shape(idx, PodRates(100, 30, 69), Ports())
        shaper.unshape(idx)
        # their ingress qdisc and filter stay; ours are gone
        assert shaper.inventory().counts() == {"qdiscs": 0, "classes": 0, "filters": 0,
                                               "ifbs": 0}
        out = subprocess.run([*sh, "filter", "show", "dev", veth, "ingress"],
                             capture_output=True, text=True, check=True).stdout
        assert "pref 7 " in out and "pref 3674" not in out
    finally:
        subprocess.run([*sh, "qdisc", "del", "dev", veth, "ingress"], check=False)
        ipr.close()


# -- which devices (issue 35, finding 2) --------------------------------------------------------
class Reader:
    """The API as the agent reads it, from plain objects (the devices are real)."""

    def __init__(self, policies: list[dict[str, Any]], pods: list[dict[str, Any]],
                 own: Owners) -> None:
        self.pol, self.pod, self.own = policies, pods, own

    def pods(self, node: str) -> list[dict[str, Any]]:
        return self.pod

    def policies(self) -> list[dict[str, Any]]:
        return self.pol

    def target(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.own.targets.get((namespace, kind, name))

    def statefulsets(self, namespace: str) -> list[dict[str, Any]]:
        return self.own.statefulsets.get(namespace, [])


@pytest.mark.lab
@pytest.mark.concurrent  # devices and tc trees read back: nothing is timed
def test_hazard_the_agent_shapes_only_a_veth_that_carries_just_its_pod() -> None:
    """One targeted pod per device, the norm with one Cassandra pod per node, on a real
    kernel: a pod behind its own veth is shaped; one whose IP routes to a bridge (bridge
    CNIs' cni0), to a veth that carries a whole subnet, or out by the node's default route
    (ipvlan/macvlan's eth0) is not: shaping those would cap every pod there, or the node."""
    from testbed.podnet import PodNet

    from elastore.agent.agent import Agent, netlink_factory

    net = PodNet(f"s{os.getpid() % 100000}")
    try:
        net.up()
        net.add_pod("cass-0", "10.78.0.5")
        for cmd in (["ip", "link", "add", "brt0", "type", "bridge"],
                    ["ip", "link", "set", "brt0", "up"],
                    ["ip", "route", "add", "10.78.1.0/24", "dev", "brt0"],
                    ["ip", "link", "add", "vsub0", "type", "veth", "peer", "name", "vsub1"],
                    ["ip", "link", "set", "vsub0", "up"], ["ip", "link", "set", "vsub1", "up"],
                    ["ip", "route", "add", "10.78.2.0/24", "dev", "vsub0"],
                    # the node's uplink as macvlan/ipvlan CNIs leave it (on a veth parent:
                    # no physical device is touched)
                    ["ip", "link", "add", "upl0", "link", "vsub1", "type", "macvlan", "mode",
                     "bridge"],
                    ["ip", "link", "set", "upl0", "up"],
                    ["ip", "route", "add", "default", "dev", "upl0"]):
            subprocess.run(["ip", "netns", "exec", net.host, *cmd], check=True)
    except Exception as exc:
        net.down()
        pytest.fail(f"cannot build the node's devices in a namespace of this run: {exc}")
    try:
        ips = {"cass-0": "10.78.0.5", "cass-1": "10.78.1.5", "cass-2": "10.78.2.5",
               "cass-3": "10.78.3.5"}
        reader = Reader([pol("orders", "shop", bw_status(list(ips)))],
                        [pod(n, "shop", ip) for n, ip in ips.items()], owners())
        agent = Agent(reader, netlink_factory(net.host), NODE)
        rep = agent.reconcile()
        assert list(rep.shaped) == ["shop/cass-0"], (rep.shaped, rep.problems)
        why = {p.message.split(":")[0]: p.message for p in rep.problems
               if p.reason == "InterfaceShared"}
        assert set(why) == {"pod shop/cass-1", "pod shop/cass-2", "pod shop/cass-3"}, \
            rep.problems
        assert "brt0 is a bridge device" in why["pod shop/cass-1"]
        assert "vsub0 carries 10.78.2.0/24" in why["pod shop/cass-2"]
        assert "upl0 is a macvlan device" in why["pod shop/cass-3"]
        ipr = _ns(net)
        try:
            inv = PodShaper(ipr).inventory()
        finally:
            ipr.close()
        shaped_names = {inv.names[i] for i in inv.interfaces()}
        assert shaped_names == {net.pods["cass-0"][2]}, shaped_names
        # the default route on a veth is refused too, as is a veth with a second pod's route
        for cmd in (["ip", "route", "replace", "default", "dev", "vsub0"],
                    ["ip", "route", "add", "10.78.0.6/32", "dev", net.pods["cass-0"][2]]):
            subprocess.run(["ip", "netns", "exec", net.host, *cmd], check=True)
        ipr = _ns(net)
        try:
            sh = PodShaper(ipr)
            veth0 = sh.route_interface("10.78.0.5")
            assert veth0 is not None
            assert "carries 10.78.0.6/32" in str(sh.not_dedicated(veth0, "10.78.0.5"))
            vsub = sh.route_interface("10.78.3.5")
            assert vsub is not None
            assert "default route" in str(sh.not_dedicated(vsub, "10.78.3.5"))
        finally:
            ipr.close()
        rep = agent.reconcile()  # cass-0's veth now carries another address: unshaped
        assert rep.shaped == {} and agent.last is not None
        ipr = _ns(net)
        try:
            assert PodShaper(ipr).inventory().counts()["qdiscs"] == 0
        finally:
            ipr.close()
    finally:
        net.down()


class _StuckReader(Reader):
    """The API readable once, then unreachable: every later read hangs (as a reconcile on
    a dead API server does, 10 s x 3 retries) until released."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls = 0
        self.release = threading.Event()

    def policies(self) -> list[dict[str, Any]]:
        self.calls += 1
        if self.calls > 1:
            self.release.wait(60)
        return self.pol


@pytest.mark.lab
@pytest.mark.concurrent  # tc state read back; the one time bound has 10x margin
def test_hazard_sigterm_cleans_up_at_once_while_a_reconcile_hangs_on_the_api() -> None:
    """Issue 35, finding 9: SIGTERM only set a flag, so the cleanup waited for a reconcile
    stuck on an unreachable API, past a pod's 30-s grace period. The cleanup now starts at
    once (it needs no API call), and the hung reconcile changes nothing after it."""
    from testbed.podnet import PodNet

    from elastore.agent.agent import Agent, netlink_factory

    net = PodNet(f"t{os.getpid() % 100000}")
    try:
        net.up()
        net.add_pod("cass-0", "10.79.0.5")
        net.add_pod("cass-1", "10.79.0.6")
    except Exception as exc:
        net.down()
        pytest.fail(f"cannot build the pod network namespaces: {exc}")
    try:
        ips = {"cass-0": "10.79.0.5", "cass-1": "10.79.0.6"}
        reader = _StuckReader([pol("orders", "shop", bw_status(list(ips)))],
                              [pod(n, "shop", ip) for n, ip in ips.items()], owners())
        agent = Agent(reader, netlink_factory(net.host), NODE)
        stop = threading.Event()
        ran = threading.Thread(target=agent.run, args=(0.2, stop), daemon=True)
        ran.start()

        def counts() -> dict[str, int]:
            ipr = _ns(net)
            try:
                return PodShaper(ipr).inventory().counts()
            finally:
                ipr.close()

        deadline = time.monotonic() + 20
        while counts()["ifbs"] != 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert counts()["ifbs"] == 2, counts()
        while reader.calls < 2 and time.monotonic() < deadline:  # now hanging on the API
            time.sleep(0.05)
        assert reader.calls >= 2
        t0 = time.monotonic()
        stop.set()  # what the SIGTERM handler does
        none = {"qdiscs": 0, "classes": 0, "filters": 0, "ifbs": 0}
        while counts() != none and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        took = time.monotonic() - t0
        assert counts() == none and took < 3.0, took  # the hang lasts 60 s
        ran.join(10)  # run() gives the stuck loop its grace (5 s), then returns
        assert not ran.is_alive()
        reader.release.set()  # the hung reconcile returns: it must not shape again
        time.sleep(1.0)
        assert counts()["qdiscs"] == 0 and agent.closed
    finally:
        net.down()


@pytest.mark.lab
@pytest.mark.concurrent  # tc state read back: nothing timed
def test_hazard_a_failed_removal_does_not_stop_the_cleanup(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One ifb whose removal fails (here: the first of two left by pods that went, their
    veths with them) is said, and every other piece of the agent's state is removed all the
    same (before: the exception ended the cleanup there)."""
    from testbed.podnet import PodNet

    from elastore.agent.agent import Agent, netlink_factory

    net = PodNet(f"w{os.getpid() % 100000}")
    try:
        net.up()
        for k in range(3):
            net.add_pod(f"cass-{k}", f"10.80.0.{5 + k}")
    except Exception as exc:
        net.down()
        pytest.fail(f"cannot build the pod network namespaces: {exc}")
    try:
        ips = {f"cass-{k}": f"10.80.0.{5 + k}" for k in range(3)}
        reader = Reader([pol("orders", "shop", bw_status(list(ips)))],
                        [pod(n, "shop", ip) for n, ip in ips.items()], owners())
        agent = Agent(reader, netlink_factory(net.host), NODE)
        assert len(agent.reconcile().shaped) == 3
        net.remove_pod("cass-1")  # their veths go; their ifbs stay, orphaned
        net.remove_pod("cass-2")
        real = PodShaper.unshape
        failed: list[str] = []

        def flaky(self: PodShaper, idx: int | None, ifb: str | None = None) -> list[str]:
            if idx is None and not failed:  # the first orphan ifb's removal fails
                failed.append(str(ifb))
                raise OSError("netlink: device or resource busy")
            return real(self, idx, ifb=ifb)

        monkeypatch.setattr(PodShaper, "unshape", flaky)
        done = agent.cleanup()
        monkeypatch.setattr(PodShaper, "unshape", real)
        assert sum("failed" in a for a in done) == 1 and failed, done
        ipr = _ns(net)
        try:
            left = PodShaper(ipr).inventory()
        finally:
            ipr.close()
        # cass-0's tree and the other orphan ifb are gone: only the failed ifb is left
        assert list(left.ifbs) == failed and not left.interfaces(), (left.ifbs, failed)
    finally:
        net.down()
