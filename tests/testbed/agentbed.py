"""The node agent's test bed: ``elastore agent run`` as a process against a real API server,
shaping a :class:`~testbed.podnet.PodNet` (kwok's pods wired as veths with their IPs). Used
by tests/test_agent_k8s.py and benchmarks/agent_targets.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from elastore.actuators.tc import AGENT_CLIENT, AGENT_STORAGE, Inventory, PodShaper
from testbed.k8s import FAKE_NODE, ControlPlane, free_port, wait_for
from testbed.podnet import PodNet


def get(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return dict(json.loads(cp.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout))


class AgentProcess:
    def __init__(self, kc: Path, host_ns: str, log: Path, period_s: float,
                 args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "elastore", "agent", "run", "--node", FAKE_NODE,
             "--kubeconfig", str(kc), "--netns", host_ns, "--period", str(period_s),
             "--metrics-port", str(self.port), "--metrics-addr", "127.0.0.1", *args],
            env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log.open("ab"),
            stderr=subprocess.STDOUT, start_new_session=True)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


class Bed:
    def __init__(self, cp: ControlPlane, net: PodNet, kc: Path, root: Path, ns: str,
                 period_s: float = 1.0) -> None:
        self.cp, self.net, self.kc, self.root = cp, net, kc, root
        self.ns, self.period_s = ns, period_s
        self.agent: AgentProcess | None = None

    def start_agent(self) -> AgentProcess:
        # a short interference window: the probe tests' phases are seconds long
        self.agent = AgentProcess(self.kc, self.net.host, self.root / "agent.log",
                                  self.period_s, ("--interference-window", "3s"))
        return self.agent

    def inventory(self) -> Inventory:
        from pyroute2 import NetNS

        ipr = NetNS(self.net.host)
        try:
            return PodShaper(ipr).inventory()
        finally:
            ipr.close()

    def veth_index(self, pod: str) -> int:
        inv = self.inventory()
        veth = self.net.pods[pod][2]
        return next(i for i, n in inv.names.items() if n == veth)

    def shaped(self) -> dict[str, tuple[float, float]]:
        """Pod -> (client, storage) Mbit/s of its HTB on the host veth, when its ifb and
        redirect are also there with the same rates."""
        inv = self.inventory()
        out = {}
        for pod, (_, _, veth) in self.net.pods.items():
            idx = next((i for i, n in inv.names.items() if n == veth), None)
            if idx is None or idx not in inv.htb or not inv.redirects.get(idx):
                continue
            ifb = inv.redirects[idx][0]
            a, b = inv.htb[idx].rates_mbit, inv.htb.get(ifb)
            if b is None or b.rates_mbit != a:
                continue
            out[pod] = (round(a[AGENT_CLIENT][0], 2), round(a[AGENT_STORAGE][0], 2))
        return out

    def set_split(self, pods: list[str], client: float, storage: float,
                  total: float = 100.0) -> None:
        """Publish a split in the policy's status as the operator would, its spec's link
        total set to ``total`` first (the agent shapes no split whose total is not the
        spec's)."""
        self.cp.kubectl("patch", "elasticpolicy", "orders", "-n", self.ns, "--type=merge",
                        "-p", json.dumps({"spec": {"bandwidth": {"nodeMbit": total}}}))
        bw = {"nodeMbit": total, "source": "spec.bandwidth.nodeMbit",
              "policy": "PreferClients", "clientPorts": [9042], "storagePorts": [7000, 7001],
              "forecastRpsPerNode": 100.0, "clientMbit": client, "storageMbit": storage,
              "streamMiBps": 4.0, "at": "2026-11-23T00:00:00Z", "reason": "test",
              "pods": [{"name": p, "clientMbit": client, "storageMbit": storage}
                       for p in pods]}
        self.cp.kubectl("patch", "elasticpolicy", "orders", "-n", self.ns, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {"bandwidth": bw}}))
        got = get(self.cp, "elasticpolicy", "orders", self.ns).get("status", {}).get("bandwidth")
        assert got == bw, "the CRD's status schema dropped part of status.bandwidth"

    def pod_ips(self, sts: str) -> dict[str, str]:
        res = self.cp.kubectl("get", "pods", "-n", self.ns, "-o", "json")
        return {p["metadata"]["name"]: p["status"]["podIP"]
                for p in json.loads(res.stdout)["items"]
                if p["metadata"]["name"].startswith(f"{sts}-")
                and p.get("status", {}).get("podIP")
                and not p["metadata"].get("deletionTimestamp")}

    def wire_pods(self, sts: str, n: int) -> None:
        """Wait for ``n`` pods of ``sts`` with IPs; give each a pod namespace with its IP."""
        wait_for(f"{n} pods of {sts} with IPs", lambda: len(self.pod_ips(sts)) == n, 60, 0.5)
        for pod, ip in self.pod_ips(sts).items():
            if pod in self.net.pods and self.net.pods[pod][1] != ip:
                self.net.remove_pod(pod)
            if pod not in self.net.pods:
                self.net.add_pod(pod, ip)
