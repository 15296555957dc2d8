"""Issue 16's targets for the BwMan node agent, measured on the wire and printed.

Usage (root): .venv/bin/python benchmarks/agent_targets.py [--period 5] [--trials 8]

Starts a real control plane (tests/testbed), a node's pod network as namespaces and veths
with kwok's pod IPs (tests/testbed/podnet.py), and ``elastore agent run`` as a process, then:

1. rates: for several splits of a link, saturating client and storage flows at once, to the
   pod and from it; each class's rate from the kernel's byte counters (what went on the
   wire) and the receivers' goodput, against the setting (target: within 5 %);
2. a change of split (the policy's status patched): time until the kernel has it, in
   reconcile periods (target: within 2);
3. SIGKILL, the split changed while it is down, a restart: time until the rules match, in
   periods from the restart, and duplicate classes or filters (target: within 2, none);
4. uninstall (SIGTERM): qdiscs, classes, filters and ifb devices of ours left (target: 0);
   the same after a SIGKILL and ``elastore agent cleanup``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from testbed.agentbed import Bed  # noqa: E402
from testbed.k8s import ControlPlane, wait_for  # noqa: E402
from testbed.podnet import NODE_IP, PodNet  # noqa: E402

from elastore.actuators.tc import AGENT_CLIENT, AGENT_STORAGE, PodShaper  # noqa: E402
from elastore.lab.flow import mean_rate, measure  # noqa: E402

NS = "shop"
PODS = ["cass-0", "cass-1", "cass-2"]
POLICY = {"apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
          "metadata": {"name": "orders", "namespace": NS},
          "spec": {"mode": "Enforce", "metrics": {"prometheus": {"url": "http://127.0.0.1:9"}},
                   "target": {"name": "cass", "replicationFactor": 3},
                   "replicas": {"min": 3, "max": 6}, "slo": {"latencyMs": 100}}}


def statefulset(name: str, replicas: int) -> str:
    lab = {"app": name}
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        # opted in: the agent shapes only the pods of a target that carries the label
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"elastore.io/managed": "true"}},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": lab},
                 "podManagementPolicy": "Parallel",
                 "template": {"metadata": {"labels": lab}, "spec": {"containers": [
                     {"name": "cassandra", "image": "cassandra:5.0"}]}}}})


def wire(bed: Bed, idx: int, flows: list[dict[str, object]], seconds: float = 6.0
         ) -> tuple[dict[int, float], list[float]]:
    """Class Mbit/s from the kernel counters (1.5 s in to 1 s before the end) and each
    flow's goodput at its receiver."""
    from pyroute2 import NetNS

    good: list[float] = [0.0] * len(flows)

    def one(k: int, f: dict[str, object]) -> None:
        good[k] = mean_rate(measure(**f, seconds=seconds), 1.5, seconds - 0.5)  # type: ignore[arg-type]

    threads = [threading.Thread(target=one, args=(k, f)) for k, f in enumerate(flows)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    ipr = NetNS(bed.net.host)
    try:
        sh = PodShaper(ipr)
        b0, t0 = sh.class_stats(idx), time.monotonic()
        time.sleep(seconds - 2.5)
        b1, t1 = sh.class_stats(idx), time.monotonic()
    finally:
        ipr.close()
    for t in threads:
        t.join()
    return {h: (b1[h]["bytes"] - b0[h]["bytes"]) * 8 / (t1 - t0) / 1e6 for h in b1}, good


def rates(bed: Bed) -> list[float]:
    print("\n1. class rates with both classes saturated (setting -> wire, goodput)")
    errs: list[float] = []
    pod_ns, pod_ip, _ = bed.net.pods["cass-0"]
    for total, client, storage in ((100, 30, 69), (100, 60, 39), (100, 10, 89),
                                   (400, 120, 276), (40, 8, 31)):
        bed.set_split(PODS, client, storage, total)
        wait_for("the split", lambda c=client: bed.shaped().get("cass-0", (0, 0))[0] == c,
                 30, 0.1)
        inv = bed.inventory()
        idx = bed.veth_index("cass-0")
        ifb = inv.redirects[idx][0]
        to_pod = wire(bed, idx, [
            {"ns": pod_ns, "host": pod_ip, "port": 9042, "send_ns": bed.net.host},
            {"ns": pod_ns, "host": pod_ip, "port": 7000, "send_ns": bed.net.host}])
        from_pod = wire(bed, ifb, [
            {"ns": bed.net.host, "host": NODE_IP, "port": 5001, "send_ns": pod_ns,
             "source": f"{pod_ip}:9042"},
            {"ns": bed.net.host, "host": NODE_IP, "port": 7000, "send_ns": pod_ns}])
        for direction, (w, g) in (("to the pod  ", to_pod), ("from the pod", from_pod)):
            c, s = w[AGENT_CLIENT], w[AGENT_STORAGE]
            ec, es = 100 * (c / client - 1), 100 * (s / storage - 1)
            errs += [abs(ec), abs(es)]
            print(f"  link {total:>3} Mbit/s, {direction}: client {client:>3} -> {c:7.2f} "
                  f"({ec:+.1f} %), goodput {g[0]:7.2f}; storage {storage:>3} -> {s:7.2f} "
                  f"({es:+.1f} %), goodput {g[1]:7.2f}")
    print(f"  worst |error| on the wire: {max(errs):.1f} % (target 5 %)")
    return errs


def split_changes(bed: Bed, trials: int) -> list[float]:
    print(f"\n2. a change of split in force (period {bed.period_s:g} s)")
    took = []
    for k in range(trials):
        client = 20.0 + 5 * (k % 2) + k
        time.sleep(bed.period_s * (0.37 * k % 1))  # changes land at any phase of the loop
        t0 = time.monotonic()
        bed.set_split(PODS, client, 99 - client)
        wait_for("the new split", lambda c=client: all(
            v[0] == c for v in bed.shaped().values()) and len(bed.shaped()) == 3, 60, 0.05)
        took.append((time.monotonic() - t0) / bed.period_s)
    print(f"  {trials} changes: median {statistics.median(took):.2f}, max {max(took):.2f} "
          f"periods (target <= 2)")
    return took


def restarts(bed: Bed, trials: int) -> tuple[list[float], int]:
    print("\n3. SIGKILL, split changed while down, restart")
    took, dups = [], 0
    for k in range(trials):
        assert bed.agent is not None
        bed.agent.stop(signal.SIGKILL)
        client = 40.0 + k
        bed.set_split(PODS, client, 99 - client)
        t0 = time.monotonic()
        bed.start_agent()
        wait_for("the restarted agent", lambda c=client: all(
            v[0] == c for v in bed.shaped().values()) and len(bed.shaped()) == 3, 60, 0.05)
        took.append((time.monotonic() - t0) / bed.period_s)
        inv = bed.inventory()
        dups += sum(len(h.rates_mbit) != 4 or len(h.filters) != len(set(h.filters)) or
                    len(h.filters) != 6 for h in inv.htb.values())
        dups += inv.counts()["qdiscs"] != 9
    print(f"  {trials} restarts: matched after median {statistics.median(took):.2f}, max "
          f"{max(took):.2f} periods from the restart (process start included; target <= 2); "
          f"HTBs with duplicate or missing classes/filters: {dups}")
    return took, dups


def uninstall(bed: Bed) -> tuple[dict[str, int], dict[str, int]]:
    print("\n4. uninstall")
    assert bed.agent is not None
    rc = bed.agent.stop(signal.SIGTERM)
    after_term = bed.inventory().counts()
    print(f"  SIGTERM: exit {rc}, left of ours {after_term}")
    bed.start_agent()
    wait_for("shaped again", lambda: len(bed.shaped()) == 3, 60, 0.1)
    bed.agent.stop(signal.SIGKILL)
    res = subprocess.run([sys.executable, "-m", "elastore", "agent", "cleanup", "--netns",
                          bed.net.host], capture_output=True, text=True, check=False)
    after_clean = bed.inventory().counts()
    print(f"  SIGKILL then `elastore agent cleanup`: exit {res.returncode}, left of ours "
          f"{after_clean}")
    return after_term, after_clean


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--period", type=float, default=5.0, help="the agent's period, s "
                    "(the chart's default: 5)")
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="elastore-agent-bench-"))
    cp = ControlPlane(root / "k8s")
    net = PodNet(f"b{os.getpid() % 100000}")
    bed = None
    try:
        cp.start(print)
        cp.kubectl("apply", "-f", str(REPO / "charts" / "elastore" / "crds"))
        cp.kubectl("wait", "--for=condition=Established",
                   "crd/elasticpolicies.elastore.io", "--timeout=60s")
        cp.kubectl("create", "namespace", NS)
        cp.kubectl("apply", "-f", "-", stdin=statefulset("cass", 3))
        wait_for("the policy API", lambda: cp.kubectl("apply", "-f", "-", stdin=json.dumps(
            POLICY), check=False).returncode == 0, 60, 1)
        net.up()
        bed = Bed(cp, net, cp.kubeconfig, root, NS, args.period)
        bed.wire_pods("cass", 3)
        bed.set_split(PODS, 30, 69)
        bed.start_agent()
        wait_for("first shaping", lambda: len(bed.shaped()) == 3, 60, 0.1)
        errs = rates(bed)
        took = split_changes(bed, args.trials)
        rtook, dups = restarts(bed, args.trials)
        term, clean = uninstall(bed)
        print("\nsummary:")
        print(f"  class rate within 5 %: worst {max(errs):.1f} %"
              f" -> {'met' if max(errs) <= 5 else 'MISSED'}")
        print(f"  split change within 2 periods: max {max(took):.2f}"
              f" -> {'met' if max(took) <= 2 else 'MISSED'}")
        print(f"  restart matched within 2 periods: max {max(rtook):.2f}, duplicates {dups}"
              f" -> {'met' if max(rtook) <= 2 and dups == 0 else 'MISSED'}")
        zero = not any(term.values()) and not any(clean.values())
        print(f"  0 left after uninstall: {'met' if zero else 'MISSED'}")
    finally:
        if bed is not None and bed.agent is not None:
            bed.agent.stop(signal.SIGKILL)
        net.down()
        cp.stop()


if __name__ == "__main__":
    main()
