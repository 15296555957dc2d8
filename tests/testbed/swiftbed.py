"""Test-only: the kubelet's part for a Swift StatefulSet on kwok, with lab Swift nodes.

kwok runs no containers, so :class:`SwiftPodAgent` does for the test what a kubelet would:

* pod ``<sts>-k`` is lab Swift node ``k+1`` at the pod's IP (an address of the lab's own
  network namespace): when kwok runs the pod, the agent starts the node with the ring
  files the pod's ConfigMap volume holds at that moment; when the pod is gone, it stops
  the node's processes (by PID) and deletes its files;
* the ring ConfigMap's volume: when the ConfigMap changes, every node's ring files (and
  the proxy's, which mounts it too) are replaced, node ``n`` ``delays[n-1]`` seconds after
  the change was seen (a kubelet refreshes a ConfigMap volume within its sync period, up
  to about a minute: the operator must wait until every pod has the rings, and here it
  has to).

Errors are kept for the test to assert on.
"""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path
from typing import Any

from testbed.k8s import ControlPlane


class SwiftPodAgent:
    def __init__(self, cp: ControlPlane, namespace: str, sts: str, configmap: str,
                 lab_dir: Path, device: str, max_pods: int = 5,
                 delays: tuple[float, ...] = (2.0, 6.0, 10.0, 14.0, 18.0)) -> None:
        self.cp, self.namespace, self.sts, self.configmap = cp, namespace, sts, configmap
        self.lab_dir, self.device, self.max_pods, self.delays = lab_dir, device, max_pods, delays
        self.errors: list[str] = []
        self.log: list[str] = []
        self.rings: dict[str, bytes] = {}
        self._rv = ""
        #: where ring files go -> (when, files)
        self._pending: dict[Path, tuple[float, dict[str, bytes]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swift-pod-agent", daemon=True)
        self._thread.start()

    def _say(self, msg: str) -> None:
        self.log.append(f"{time.time():.1f} {msg}")

    def _configmap(self, state: Any) -> None:
        cm = self.cp.get_json(f"/api/v1/namespaces/{self.namespace}/configmaps/"
                              f"{self.configmap}")
        rv = str(cm["metadata"]["resourceVersion"])
        if rv == self._rv:
            return
        files = {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}
        files.update({k: str(v).encode() for k, v in (cm.get("data") or {}).items()})
        first = not self._rv
        self._rv, self.rings = rv, files
        now = time.time()
        targets = [(Path(nd.root) / "etc", self.delays[min(nd.n - 1, len(self.delays) - 1)])
                   for nd in state.nodes]
        targets.append((Path(state.proxy_root) / "etc", self.delays[0]))
        for where, delay in targets:
            self._pending[where] = (now if first else now + delay, files)
        self._say(f"ConfigMap {self.configmap} at resourceVersion {rv}")

    def _apply_due(self) -> None:
        from elastore.lab.swift import lab as swift

        now = time.time()
        for where, (due, files) in list(self._pending.items()):
            if due <= now:
                if where.is_dir():
                    swift.write_rings(where, files)
                    self._say(f"rings refreshed in {where}")
                del self._pending[where]

    def _pods(self) -> dict[str, str]:
        """Running pods that are not being deleted -> their IP ("" before kwok gives one)."""
        items = self.cp.get_json(f"/api/v1/namespaces/{self.namespace}/pods").get("items") or []
        out = {}
        for p in items:
            if p["metadata"].get("deletionTimestamp"):
                continue
            st = p.get("status") or {}
            if st.get("phase") == "Running":
                out[p["metadata"]["name"]] = str(st.get("podIP") or "")
        return out

    def _run(self) -> None:
        from elastore.lab.swift import lab as swift

        while not self._stop.wait(1.0):
            try:
                state = swift.SwiftLabState.load(self.lab_dir)
                if state is None:
                    raise RuntimeError(f"no Swift lab in {self.lab_dir}")
                self._configmap(state)
                self._apply_due()
                pods = self._pods()
                nodes = {nd.n for nd in state.nodes}
                for k in range(self.max_pods):
                    pod, n = f"{self.sts}-{k}", k + 1
                    ip = pods.get(pod)
                    if ip and n not in nodes:
                        self._say(f"{pod} runs at {ip}: starting Swift node {n}")
                        nd = swift.start_pod_node(n, ip, self.rings, self.lab_dir, self.device)
                        self._pending.pop(nd.swift_dir, None)
                        self._say(f"node {n} serves")
                    elif pod not in pods and n in nodes:
                        self._say(f"{pod} gone: stopping Swift node {n}")
                        stopped = swift.stop_pod_node(n, self.lab_dir)
                        self._say(f"node {n} stopped ({len(stopped)} processes)")
            except Exception as exc:  # kept for the test: an agent failure fails it
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(3)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
