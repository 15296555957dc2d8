"""A real Kubernetes node for the test bed: a kubelet, containerd with runc, and the CNI's
``ptp`` + ``host-local`` plugins, all inside a network namespace of the run's own.

Everything the node runs lives in ``elastore-node-<pid>`` (the node's namespace):

* **containerd** (Debian's 1.6, runc) with its own root, state and socket under the run's
  directory; the CRI sandbox image is built here (no registry is reachable). ``ptp`` gives
  every pod its own veth pair, the host side in the node's namespace, and a /32 route to
  it: that veth is what the BwMan agent shapes. ``host-local`` hands out 10.244.0.0/24.
* **the kubelet** (v1.36.3, built with the control plane's binaries: testbed.k8s), with
  ``failCgroupV1: false`` (these machines mount cgroup v1; since 1.35 the kubelet refuses
  it unless told) and its pods' cgroups under a root of this node's own
  (``/elastore-node-<pid>/kubepods/...``), so two nodes never share one.
* **the API server's address for pods**: pods read ``KUBERNETES_SERVICE_HOST`` (10.0.0.1,
  the ``kubernetes`` Service) as in any cluster. There is no kube-proxy: 10.0.0.1 is an
  address of the node's namespace, where a relay (testbed.forward.ReverseForwarder)
  passes each connection to the API server on this machine's loopback. The kubelet and the
  node's Prometheus reach the API server the same way.
* **the API server's way to the kubelet** (exec, logs): the node's InternalIP, 10.245.0.1,
  is an address of the node's namespace (the kubelet refuses a loopback node IP). The API
  server dials it through its egress selector: an HTTP CONNECT proxy on this machine's
  unix socket (testbed.forward.ConnectProxy) that makes the connection inside the node's
  namespace and refuses any address that is not the node's or a pod's. So the API server
  never routes to 10.245.0.1 itself (that would take the machine's default route).

Network safety: the node's namespace has no default route and no link to the machine's
own namespace except the two relays on loopback; nothing is masqueraded or forwarded off the
machine. Pod-to-pod traffic is routed inside the node's namespace.

Clean-up (:meth:`RealNode.stop`): every pod is deleted through the API server and the
kubelet tears it down; then the kubelet and containerd are stopped by PID, any container
shim of this containerd (found by its ``-address`` argument) is killed, the mounts under
the node's directory are unmounted, the pod namespaces that containerd made are removed,
the node's cgroups are removed, and the node's namespace is deleted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError
from elastore.lab import netns

from .forward import ConnectProxy, ReverseForwarder
from .k8s import ControlPlane, bin_dir, free_port, kubeconfig, wait_for

log = logging.getLogger("elastore.node")

NODE_NAME = "real-node-0"
POD_CIDR = "10.244.0.0/24"
#: the ``kubernetes`` Service's ClusterIP (the control plane's service range is 10.0.0.0/24)
API_VIP = "10.0.0.1"
#: an address of the node's namespace for what runs beside the kubelet (the node's
#: Prometheus): pods reach it through their default route, like a node's own address
NODE_ADDR = "10.245.0.1"
CNI_BIN = Path("/usr/lib/cni")
CGROUP_BASE = Path("/sys/fs/cgroup")


def _sh(argv: list[str], what: str, check: bool = True, timeout: float = 120
        ) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise ElastoreError(f"{what}: {' '.join(argv[:4])} ... exited {res.returncode}: "
                            f"{(res.stderr or res.stdout).strip()[-800:]}")
    return res


def require_node_tools() -> None:
    """The node's parts are Debian's packages: containerd (with ``ctr``), runc and the CNI
    plugins. Missing ones are a clear error (``make test-setup`` installs them)."""
    missing = [p for p in ("/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc",
                           str(CNI_BIN / "ptp"), str(CNI_BIN / "host-local"))
               if not Path(p).exists()]
    if missing:
        raise ElastoreError(
            "the real node needs Debian's containerd, runc and containernetworking-plugins; "
            f"missing: {', '.join(missing)} (make test-setup installs them)")


def cgroup_controllers() -> list[Path]:
    """The cgroup hierarchies mounted here: one per v1 controller mount, and the v2
    (unified) one that systemd hybrid mode mounts beside them."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] in ("cgroup", "cgroup2") \
                and parts[1].startswith(str(CGROUP_BASE)):
            out.append(Path(parts[1]))
    return out


def containerd_config(r: Path, sandbox_image: str) -> str:
    return f"""version = 2
root = "{r}/containerd/root"
state = "{r}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{r}/containerd/containerd.sock"
[ttrpc]
  address = "{r}/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{r}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # the sandbox refuses a negative oom_score_adj: without this runc fails with
  # "can't get final child's PID from pipe: EOF" (LAB-NOTES, Containers)
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{r}/cni/net.d"
    max_conf_num = 1
"""


def cni_config(r: Path) -> str:
    return json.dumps({
        "cniVersion": "0.4.0", "name": "elastore-pods",
        "plugins": [{"type": "ptp", "ipMasq": False, "mtu": 1500,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                              "routes": [{"dst": "0.0.0.0/0"}],
                              "dataDir": f"{r}/cni/ipam"}}]}, indent=1)


def node_address(host: str) -> bool:
    """What the API server may dial through the node's egress proxy: the node's address
    and the pods' (addresses of the node's namespace only). Pure."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip == ipaddress.ip_address(NODE_ADDR) or ip in ipaddress.ip_network(POD_CIDR)


def kubelet_config(r: Path, pki: Path, port: int, sock: Path, cgroup_root: str) -> str:
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_ADDR}
port: {port}
readOnlyPort: 0
healthzPort: 0
tlsCertFile: {pki / 'kwok.crt'}
tlsPrivateKeyFile: {pki / 'kwok.key'}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {pki / 'ca.crt'}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
# these machines mount cgroup v1; kubelet 1.35+ refuses it unless told (a deprecation
# warning remains)
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
localStorageCapacityIsolation: false
evictionHard: {{}}
# the machine's disk is shared with everything else: never garbage-collect the images
# loaded here (there is no registry to pull them back from)
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: {r}/pod-logs
resolvConf: {r}/resolv.conf
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
fileCheckFrequency: 20s
maxPods: 30
registerNode: true
"""


def start_cluster(root: Path, sandbox_image: str,
                  progress: Callable[[str], None] | None = None) -> tuple[ControlPlane, RealNode]:
    """A control plane (no kwok) and one real node joined to it; on failure, whatever was
    started is stopped and the error raised."""
    ns = f"{netns.PREFIX}node-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    proxy = ConnectProxy(ns, node_address, str(root / "egress.sock"))
    cp = ControlPlane(root / "k8s", fake_node=False, egress_proxy=proxy.path, audit_exec=True)
    node = RealNode(cp, root / "node", sandbox_image, ns=ns)
    node.relays.append(proxy)
    try:
        cp.start(progress)
        node.start(progress)
    except BaseException:
        node.stop()
        cp.stop()
        raise
    return cp, node


@dataclass
class RealNode:
    """One real node (kubelet + containerd) joined to ``cp``, in a namespace of its own."""

    cp: ControlPlane
    root: Path
    sandbox_image: str
    name: str = NODE_NAME
    ns: str = field(default_factory=lambda: f"{netns.PREFIX}node-{os.getpid()}")
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    relays: list[Any] = field(default_factory=list)
    kubelet_port: int = 0
    cgroup_root: str = ""
    _netns_before: set[str] = field(default_factory=set)

    @property
    def sock(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    def spawn(self, name: str, argv: list[str]) -> None:
        """``argv`` started in the node's namespace, logging to ``<name>.log``; stopped by
        PID with the node."""
        logf = (self.root / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(self.command(argv), stdout=logf,
                                            stderr=subprocess.STDOUT, cwd=self.root,
                                            start_new_session=True)

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-2000:]
                raise ElastoreError(f"{name} of the real node exited with {p.returncode}: "
                                    f"{tail}")

    def ctr(self, *args: str, check: bool = True, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
        return _sh(["ctr", "--address", str(self.sock), "-n", "k8s.io", *args],
                   f"ctr {' '.join(args[:2])}", check=check, timeout=timeout)

    def start(self, progress: Callable[[str], None] | None = None) -> RealNode:
        say = progress or (lambda m: log.info("%s", m))
        require_node_tools()
        t0 = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self._netns_before = set(os.listdir("/run/netns")) if Path("/run/netns").is_dir() \
            else set()
        # the node's namespace: its loopback also holds the API server's ClusterIP and the
        # node's address (this kernel has no dummy devices; a local address answers on any
        # device); routing between pods on, no default route
        netns.create(self.ns)
        for argv in (["addr", "add", f"{API_VIP}/32", "dev", "lo"],
                     ["addr", "add", f"{NODE_ADDR}/32", "dev", "lo"]):
            _sh(["ip", "-n", self.ns, *argv], "setting up the node's namespace")
        _sh(netns.command(self.ns, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]),
            "routing between pods in the node's namespace")
        # the relays: pods, the kubelet and Prometheus -> API server; API server -> kubelet
        api_port = int(self.cp.apiserver_port)
        self.relays.append(ReverseForwarder(self.ns, 443, f"127.0.0.1:{api_port}",
                                            listen_host=API_VIP))
        self.kubelet_port = free_port()
        # containerd
        for d in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volumes"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "containerd.toml").write_text(containerd_config(self.root,
                                                                     self.sandbox_image))
        (self.root / "cni/net.d/10-elastore.conflist").write_text(cni_config(self.root))
        (self.root / "resolv.conf").write_text("")
        self.spawn("containerd", ["containerd", "--config",
                                   str(self.root / "containerd.toml")])
        def answers() -> bool:
            self.check_alive()
            return self.ctr("version", check=False, timeout=10).returncode == 0

        wait_for("containerd to answer", answers, 60, every_s=0.3)
        say(f"real node: containerd up ({time.monotonic() - t0:.1f} s)")
        from .images import load_into_containerd

        # the sandbox image first: the CRI pulls a missing one from its registry
        load_into_containerd(self.sandbox_image, str(self.sock), progress=say)
        # the kubelet: its pods' cgroups under a root of its own in every hierarchy
        self.cgroup_root = f"/{self.ns}"
        for c in cgroup_controllers():
            (c / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
        pki = self.cp.root / "pki"
        kc = self.root / "kubelet.kubeconfig"
        # the kubelet reaches the API server at the ClusterIP, through the relay; it
        # authenticates as the admin (this API server authorizes with RBAC only, no Node
        # authorizer, and binds nothing to system:nodes)
        kubeconfig(f"https://{API_VIP}:443", pki, kc)
        (self.root / "kubelet.yaml").write_text(kubelet_config(
            self.root, pki, self.kubelet_port, self.sock, self.cgroup_root))
        self.spawn("kubelet", [
            str(bin_dir() / "kubelet"), f"--config={self.root / 'kubelet.yaml'}",
            f"--kubeconfig={kc}", f"--root-dir={self.root / 'kubelet'}",
            f"--cert-dir={self.root / 'kubelet-pki'}", f"--hostname-override={self.name}",
            f"--node-ip={NODE_ADDR}", "--v=1"])
        wait_for(f"node {self.name} to be Ready", self._ready, 120, every_s=0.5)
        say(f"real node {self.name} Ready ({time.monotonic() - t0:.1f} s after start)")
        return self

    def _ready(self) -> bool:
        self.check_alive()
        with contextlib.suppress(Exception):
            node = self.cp.get_json(f"/api/v1/nodes/{self.name}")
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in node.get("status", {}).get("conditions", []))
        return False

    def pod_veths(self) -> dict[str, str]:
        """Each pod IP of this node -> the node-side veth its /32 route goes through."""
        res = _sh(["ip", "-n", self.ns, "-j", "route", "show"], "reading the node's routes")
        out = {}
        for r in json.loads(res.stdout or "[]"):
            dst, dev = r.get("dst", ""), r.get("dev", "")
            if dev.startswith("veth") and "/" not in dst:
                out[dst] = dev
        return out

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run in the node's network namespace (where the pod IPs answer).
        ``nsenter --net``, not ``ip netns exec``: the latter also unshares the mount
        namespace and mounts a fresh /sys, which hides the cgroup hierarchies from the
        kubelet ("failed to find cgroup mounts") and from runc."""
        return ["nsenter", f"--net=/run/netns/{self.ns}", "--", *argv]

    # -- clean-up -------------------------------------------------------------------------
    def _delete_pods(self, timeout_s: float = 90) -> None:
        """Every pod bound to this node deleted (gracefully, then forced), so the kubelet
        tears each sandbox down through CNI: veth, route, address and namespace."""
        def pods() -> list[dict[str, Any]]:
            doc = self.cp.get_json(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")
            return list(doc.get("items", []))

        with contextlib.suppress(Exception):  # first what would make the pods again
            self.cp.kubectl("delete", "deployments,statefulsets,daemonsets,replicasets,jobs",
                            "--all", "-A", "--wait=false", check=False)
        with contextlib.suppress(Exception):
            for p in pods():
                m = p["metadata"]
                self.cp.kubectl("delete", "pod", "-n", m["namespace"], m["name"],
                                "--wait=false", "--grace-period=5", check=False)
            end = time.monotonic() + timeout_s
            while time.monotonic() < end and pods():
                time.sleep(1)
        # what the kubelet did not get to: containerd's own view
        with contextlib.suppress(Exception):
            for sb in self.ctr("containers", "list", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", sb, check=False, timeout=20)

    def _kill_shims(self) -> None:
        """Container shims of *this* containerd (``-address <our socket>``), by PID."""
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmd = (pid_dir / "cmdline").read_bytes().split(b"\0")
                if b"containerd-shim" in cmd[0] and str(self.sock).encode() in cmd:
                    os.kill(int(pid_dir.name), signal.SIGKILL)

    def _unmount_all(self) -> None:
        root = str(self.root.resolve())
        mounts = [ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m == root or m.startswith(root + "/")),
                        key=len, reverse=True):
            _sh(["umount", "-l", m], f"unmounting {m}", check=False)

    def _remove_cgroups(self) -> None:
        for c in cgroup_controllers():
            top = c / self.cgroup_root.lstrip("/")
            if not self.cgroup_root or not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()),
                            key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    def stop(self) -> None:
        """Everything this node started or made, gone (see the module's docstring)."""
        if "kubelet" in self.procs and self.procs["kubelet"].poll() is None:
            self._delete_pods()
        order = [n for n in reversed(list(self.procs)) if n != "containerd"] + ["containerd"]
        for name in order:
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                if name == "containerd":
                    self._stop_sandboxes()
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
        self._kill_shims()
        for r in self.relays:
            with contextlib.suppress(Exception):
                r.close()
        self.relays.clear()
        self._unmount_all()
        if Path("/run/netns").is_dir():  # pod namespaces containerd left behind
            for n in set(os.listdir("/run/netns")) - self._netns_before:
                if n.startswith("cni-"):
                    _sh(["ip", "netns", "del", n], "removing a pod namespace", check=False)
        self._remove_cgroups()
        with contextlib.suppress(ElastoreError):
            netns.delete(self.ns)

    def _stop_sandboxes(self) -> None:
        with contextlib.suppress(Exception):
            for c in self.ctr("containers", "list", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", c, check=False, timeout=20)


def discovered_targets(pods: list[dict[str, Any]], services: list[dict[str, Any]],
                       endpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prometheus's file_sd targets for what Kubernetes discovery would find by the usual
    annotations (``prometheus.io/scrape``, ``port``, ``path``): pods annotated so, and the
    pods behind the endpoints of Services annotated so; each with ``namespace`` and
    ``pod`` labels. Pure."""
    out: dict[str, dict[str, Any]] = {}

    def add(ip: str, ann: dict[str, str], ns: str, pod: str) -> None:
        port = ann.get("prometheus.io/port", "")
        if ann.get("prometheus.io/scrape") != "true" or not port.isdigit() or not ip:
            return
        labels = {"namespace": ns, "pod": pod}
        if ann.get("prometheus.io/path"):
            labels["__metrics_path__"] = ann["prometheus.io/path"]
        out[f"{ip}:{port}"] = {"targets": [f"{ip}:{port}"], "labels": labels}

    for p in pods:
        st, m = p.get("status") or {}, p["metadata"]
        if st.get("phase") == "Running":
            add(st.get("podIP", ""), m.get("annotations") or {}, m["namespace"], m["name"])
    ann_of = {(s["metadata"]["namespace"], s["metadata"]["name"]):
              s["metadata"].get("annotations") or {} for s in services}
    for e in endpoints:
        ann = ann_of.get((e["metadata"]["namespace"], e["metadata"]["name"]), {})
        for sub in e.get("subsets") or []:
            for a in sub.get("addresses") or []:
                ref = a.get("targetRef") or {}
                add(a.get("ip", ""), ann, e["metadata"]["namespace"], ref.get("name", ""))
    return [out[k] for k in sorted(out)]


class PodDiscovery:
    """What Prometheus's Kubernetes discovery does, for Debian's Prometheus (built without
    it: "field kubernetes_sd_configs not found"): every ``every_s`` it lists the pods,
    Services and Endpoints through the API server and rewrites a file_sd file, which
    Prometheus watches. Scraping stays Prometheus's own."""

    def __init__(self, cp: ControlPlane, path: Path, every_s: float = 1.0) -> None:
        import threading

        self.cp, self.path, self.every_s = cp, path, every_s
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.write()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def write(self) -> None:
        items = [self.cp.get_json(f"/api/v1/{k}")["items"]
                 for k in ("pods", "services", "endpoints")]
        body = json.dumps(discovered_targets(*items), indent=1)
        if not self.path.exists() or self.path.read_text() != body:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(body)
            tmp.replace(self.path)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.write()
            except Exception as exc:  # the API server busy for a moment: the next pass
                self.errors.append(str(exc))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def prometheus_config(sd_file: Path, static: dict[str, str]) -> str:
    """Scrape every 5 s, with a 5-s timeout, what :class:`PodDiscovery` finds
    (``honor_labels``: the node agent's series name the store pod they are about, as the
    chart's Service says), and ``static``: job -> address of other targets in the node's
    namespace (the load generator).

    Not 2 s: a scrape of a Cassandra pod's JMX exporter (2,335 series) took 0.45 s at the
    median and 1.5 s at the 90th percentile on this 2-core machine with 4 JVMs, and 4-7 %
    of scrapes missed a 2-s timeout (measured 2026-12-03, quiet machine). Each failed
    scrape leaves the pod's series stale at that instant, so a period that reads it is
    undecided (MetricsMissing); on CI's slower cores that was most periods. At 2 s the
    exporters also took a large share of the cores they were measured on."""
    jobs = "".join(f"""  - job_name: {job}
    static_configs: [{{targets: ['{addr}']}}]
""" for job, addr in static.items())
    return f"""global: {{scrape_interval: 5s, scrape_timeout: 5s, evaluation_interval: 5s}}
scrape_configs:
  - job_name: kubernetes-pods
    honor_labels: true
    file_sd_configs: [{{files: ['{sd_file}'], refresh_interval: 5s}}]
{jobs}"""


PROMETHEUS_PORT = 9090


def start_prometheus(node: RealNode, static: dict[str, str] | None = None) -> None:
    """Debian's Prometheus in the node's namespace, on port 9090 of its addresses (pods
    reach it at ``http://10.245.0.1:9090``; this machine's loopback does not: use
    testbed.forward.Forwarder to 127.0.0.1:9090 there). Stopped with the node."""
    import shutil

    binary = shutil.which("prometheus")
    if binary is None:
        raise ElastoreError("Prometheus is not installed (Debian: apt-get install prometheus; "
                            "'make test' installs it)")
    d = node.root / "prometheus"
    d.mkdir(parents=True, exist_ok=True)
    cfg = d / "prometheus.yml"
    node.relays.append(PodDiscovery(node.cp, d / "targets.json"))
    cfg.write_text(prometheus_config(d / "targets.json", static or {}))
    node.spawn("prometheus", [binary, f"--config.file={cfg}",
                              f"--web.listen-address=0.0.0.0:{PROMETHEUS_PORT}",
                              f"--storage.tsdb.path={d / 'tsdb'}", "--log.level=warn"])

    def ready() -> bool:
        node.check_alive()
        return subprocess.run(node.command(
            ["curl", "-sf", "--max-time", "2", f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready"]),
            capture_output=True, check=False).returncode == 0

    wait_for("the node's Prometheus to be ready", ready, 60, every_s=0.5)
