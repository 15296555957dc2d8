"""``elastore lab up --store swift``: a real OpenStack Swift cluster (Debian's packages) in a
network namespace of its own.

What runs, all inside the namespace (default ``elastore-swift``):

* a proxy on ``127.0.0.1:8080`` (no auth middleware: the lab's account is
  :data:`ACCOUNT`, created on first use);
* storage node n on ``127.0.1.n``: account, container and object servers (ports 6202,
  6201, 6200), their replicators and the object updater, one device ``d<n>`` (a directory,
  ``mount_check = false``), and an rsync daemon on ``127.0.1.n:873``: the replicators'
  data path, which is BwMan's migration class (its port separates it from client traffic);
* a Prometheus ``statsd_exporter`` per storage node and one for the proxy (built once from
  the Go module proxy, cached by version; Debian has no ``prometheus-statsd-exporter``
  here): each Swift process sends its StatsD metrics to its node's exporter, whose series
  Prometheus scrapes with the node's (and, with ``pods``, the pod's) labels;
* the lab's Prometheus on ``127.0.0.1:9090``.

Rings: the ring builder files live in ``<lab>/swift/rings`` (the "ring master"); every node
has its own ``swift_dir`` with ``swift.conf`` and a copy of the rings, replaced atomically
by :func:`distribute_rings` (Swift reloads a ring file when it changes). Ring changes are
``elastore.actuators.swiftring``'s.

State is in ``$ELASTORE_LAB_DIR/swift.json``, written after every step; ``down`` stops the
processes ``up`` started, by PID, after checking each still runs ours (its command line
names the lab's directory).

Debian's Swift pitfalls (``../shared/LAB-NOTES.md``): ``swift_dir`` in every conf,
``mount_check = false``, ``workers = 0``, ``user = root`` (else the replicator fails on
its lock files).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elastore.actuators.swiftring import (
    KINDS,
    Misplaced,
    RingMaster,
    misplaced,
    ring_assignment,
    scan_device,
)
from elastore.errors import ElastoreError
from elastore.lab import netns
from elastore.lab.bindsrc import ensure_bindsrc
from elastore.lab.host import cache_dir, lab_dir, wait_for
from elastore.stores.swift.presets import statsd_mapping

log = logging.getLogger("elastore.lab.swift")

NAMESPACE = "elastore-swift"
MAX_NODES = 6
PROXY_ADDR = "127.0.0.1:8080"
#: the proxy's cache of account and container info (without it every object request costs
#: a HEAD of its account and its container too: measured, the account and container
#: servers then used as much CPU as the object servers)
MEMCACHED_ADDR = "127.0.0.1:11211"
PROMETHEUS_ADDR = "127.0.0.1:9090"
LOADGEN_METRICS = "127.0.0.1:9600"
ACCOUNT = "AUTH_elastore"
OBJECT_PORT, CONTAINER_PORT, ACCOUNT_PORT = 6200, 6201, 6202
RSYNC_PORT = 873
STATSD_UDP_PORT, STATSD_HTTP_PORT = 9125, 9102
DEVICE_WEIGHT = 100.0
PART_POWER = 8  # 256 partitions: ~43 per device on 6 nodes, fine-grained enough to move
STATSD_EXPORTER_VERSION = "0.31.0"
SERVERS = ("account", "container", "object")
#: the daemons each storage node runs besides its servers
DAEMONS = ("object-replicator", "container-replicator", "account-replicator",
           "object-updater")
SWIFT_PYTHON = "/usr/bin/python3"  # Debian's Swift is a Debian Python package
#: seconds between replication passes: a lab's ring change shows in seconds, not minutes
REPLICATION_INTERVAL_S = 5


def node_ip(n: int) -> str:
    return f"127.0.1.{n}"


@dataclass
class SwiftNode:
    n: int
    root: str
    #: process name (e.g. "object-server", "rsync", "exporter") -> pid
    pids: dict[str, int] = field(default_factory=dict)
    #: its address when it stands in for a pod (the pod's IP); else 127.0.1.n
    addr: str = ""
    #: its device's name when it stands in for a pod (every pod's is the same); else d<n>
    dev: str = ""

    @property
    def ip(self) -> str:
        return self.addr or node_ip(self.n)

    @property
    def device(self) -> str:
        return self.dev or f"d{self.n}"

    @property
    def swift_dir(self) -> Path:
        return Path(self.root) / "etc"

    @property
    def devices(self) -> Path:
        return Path(self.root) / "srv"

    @property
    def metrics(self) -> str:
        return f"{self.ip}:{STATSD_HTTP_PORT}"


@dataclass
class SwiftLabState:
    netns: str
    root: str
    replicas: int
    nodes: list[SwiftNode] = field(default_factory=list)
    proxy_pids: dict[str, int] = field(default_factory=dict)
    prometheus_pid: int = 0
    #: "namespace/statefulset" when the nodes stand in for a StatefulSet's pods (node n is
    #: pod <statefulset>-(n-1)); their series then carry those labels
    pods: str = ""
    #: the replicators' rsync_bwlimit, KiB/s (0: none): Swift's own replication throttle
    rsync_bwlimit_kibps: int = 0

    @property
    def rings(self) -> Path:
        return Path(self.root) / "rings"

    @property
    def proxy_root(self) -> Path:
        return Path(self.root) / "proxy"

    @property
    def prometheus_dir(self) -> Path:
        return Path(self.root) / "prometheus"

    def node(self, which: int | str) -> SwiftNode:
        for nd in self.nodes:
            if str(which) in (str(nd.n), nd.ip):
                return nd
        raise ElastoreError(f"no Swift node {which!r} (nodes: "
                            f"{', '.join(str(x.n) for x in self.nodes)})")

    def pod_labels(self, nd: SwiftNode) -> dict[str, str]:
        if not self.pods:
            return {}
        ns, sts = self.pods.split("/", 1)
        return {"namespace": ns, "pod": f"{sts}-{nd.n - 1}"}

    def save(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / "swift.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(d / "swift.json")

    @classmethod
    def load(cls, d: Path) -> SwiftLabState | None:
        p = d / "swift.json"
        if not p.exists():
            return None
        try:
            doc = json.loads(p.read_text())
            nodes = [SwiftNode(int(x["n"]), str(x["root"]),
                               {str(k): int(v) for k, v in x.get("pids", {}).items()},
                               str(x.get("addr", "")), str(x.get("dev", "")))
                     for x in doc["nodes"]]
            return cls(str(doc["netns"]), str(doc["root"]), int(doc["replicas"]), nodes,
                       {str(k): int(v) for k, v in doc.get("proxy_pids", {}).items()},
                       int(doc.get("prometheus_pid", 0)), str(doc.get("pods", "")),
                       int(doc.get("rsync_bwlimit_kibps", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ElastoreError(f"unreadable Swift lab state: {exc}", str(p)) from exc


# --- binaries ----------------------------------------------------------------------------

def check_swift_installed() -> None:
    missing = [b for b in ("swift-proxy-server", "swift-object-server", "swift-container-server",
                           "swift-account-server", "swift-ring-builder", "rsync", "memcached")
               if shutil.which(b) is None]
    if missing:
        raise ElastoreError(
            f"Swift is not installed (missing {', '.join(missing)}): Debian: apt-get install "
            "swift swift-proxy swift-object swift-container swift-account rsync memcached "
            "('make test' installs them)")


def ensure_statsd_exporter() -> Path:
    """Prometheus's ``statsd_exporter``, built once with the machine's Go from the module
    proxy into the cache (about a minute the first time); later calls cost nothing."""
    out = cache_dir() / f"statsd_exporter-{STATSD_EXPORTER_VERSION}" / "statsd_exporter"
    if out.exists():
        return out
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists()
                                else None)
    if go is None:
        raise ElastoreError("no Go toolchain: the Swift lab's statsd_exporter is built from "
                            "the Go module proxy (github.com/prometheus/statsd_exporter)")
    tmp = out.parent / "tmp-bin"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log.info("building statsd_exporter v%s from the Go module proxy (once) ...",
             STATSD_EXPORTER_VERSION)
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOBIN=str(tmp))
    res = subprocess.run([go, "install", "-trimpath", "-ldflags", "-s -w",
                          f"github.com/prometheus/statsd_exporter@v{STATSD_EXPORTER_VERSION}"],
                         env=env, capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"building statsd_exporter failed: {res.stderr.strip()[-1500:]}")
    (tmp / "statsd_exporter").replace(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


# --- configuration -----------------------------------------------------------------------

def _swift_conf() -> str:
    return ("[swift-hash]\nswift_hash_path_suffix = elastore-lab\n"
            "swift_hash_path_prefix = elastore\n\n"
            "[storage-policy:0]\nname = wiki\ndefault = yes\n\n[swift-constraints]\n")


def _common(swift_dir: Path, statsd_ip: str) -> str:
    return (f"swift_dir = {swift_dir}\nuser = root\nworkers = 0\nmount_check = false\n"
            f"log_statsd_host = {statsd_ip}\nlog_statsd_port = {STATSD_UDP_PORT}\n"
            "log_level = INFO\n")


def _server_conf(state: SwiftLabState, nd: SwiftNode, kind: str) -> str:
    port = {"object": OBJECT_PORT, "container": CONTAINER_PORT, "account": ACCOUNT_PORT}[kind]
    bw = f"rsync_bwlimit = {state.rsync_bwlimit_kibps}\n" if state.rsync_bwlimit_kibps else ""
    conf = (f"[DEFAULT]\nbind_ip = {nd.ip}\nbind_port = {port}\ndevices = {nd.devices}\n"
            + _common(nd.swift_dir, nd.ip)
            + f"\n[pipeline:main]\npipeline = healthcheck recon {kind}-server\n\n"
            f"[app:{kind}-server]\nuse = egg:swift#{kind}\n\n"
            "[filter:healthcheck]\nuse = egg:swift#healthcheck\n\n"
            f"[filter:recon]\nuse = egg:swift#recon\nrecon_cache_path = {nd.root}/recon\n\n"
            f"[{kind}-replicator]\ninterval = {REPLICATION_INTERVAL_S}\nconcurrency = 1\n"
            f"rsync_module = {{replication_ip}}::{kind}\n"
            f"recon_cache_path = {nd.root}/recon\n")
    if kind == "object":
        conf += (f"{bw}rsync_timeout = 300\nrsync_io_timeout = 60\n"
                 "\n[object-updater]\ninterval = 60\nconcurrency = 1\n"
                 f"recon_cache_path = {nd.root}/recon\n\n[object-auditor]\n")
    elif kind == "container":
        conf += "\n[container-updater]\n\n[container-auditor]\n\n[container-sync]\n"
    else:
        conf += "\n[account-auditor]\n\n[account-reaper]\n"
    return conf


def _rsyncd_conf(nd: SwiftNode) -> str:
    mods = "".join(f"[{k}]\nmax connections = 8\npath = {nd.devices}\nread only = false\n"
                   f"lock file = {nd.root}/run/{k}.lock\n\n" for k in SERVERS)
    return (f"uid = root\ngid = root\nlog file = {nd.root}/log/rsyncd.log\n"
            f"pid file = {nd.root}/run/rsyncd.pid\naddress = {nd.ip}\nport = {RSYNC_PORT}\n"
            f"use chroot = no\n\n{mods}")


def _proxy_conf(state: SwiftLabState) -> str:
    host, port = PROXY_ADDR.split(":")
    return (f"[DEFAULT]\nbind_ip = {host}\nbind_port = {port}\n"
            + _common(state.proxy_root / "etc", host)
            + "\n[pipeline:main]\npipeline = catch_errors healthcheck proxy-logging cache "
            "proxy-logging proxy-server\n\n[app:proxy-server]\nuse = egg:swift#proxy\n"
            "account_autocreate = true\nallow_account_management = true\n"
            "node_timeout = 10\nconn_timeout = 1\nrecoverable_node_timeout = 5\n\n"
            "[filter:catch_errors]\nuse = egg:swift#catch_errors\n\n"
            "[filter:healthcheck]\nuse = egg:swift#healthcheck\n\n"
            "[filter:proxy-logging]\nuse = egg:swift#proxy_logging\n\n"
            f"[filter:cache]\nuse = egg:swift#memcache\nmemcache_servers = {MEMCACHED_ADDR}\n")


# statsd_exporter's mapping of Swift's StatsD names: a file shipped for users' own
# exporters too (:func:`elastore.stores.swift.presets.statsd_mapping`)


# --- processes ---------------------------------------------------------------------------

def _ours(pid: int, marker: str) -> bool:
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline


def _stop(pid: int, marker: str, timeout_s: float = 15) -> bool:
    if not _ours(pid, marker):
        return False
    os.kill(pid, 15)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not _ours(pid, marker):
            return True
        time.sleep(0.2)
    if _ours(pid, marker):
        os.kill(pid, 9)
    return True


def _spawn(state: SwiftLabState, argv: list[str], logf: Path, bind_ip: str = "") -> int:
    """Start ``argv`` in the lab's namespace; with ``bind_ip`` its outgoing connections
    (and its children's: the replicators' rsync) leave from that address (the ``bindsrc``
    shim, :func:`elastore.lab.bindsrc.ensure_bindsrc`), as from a host of its own: tc
    tells the nodes' traffic apart by source address."""
    logf.parent.mkdir(parents=True, exist_ok=True)
    env = None
    if bind_ip:
        env = dict(os.environ, LD_PRELOAD=str(ensure_bindsrc()), ELASTORE_BIND_IP=bind_ip)
    with logf.open("ab") as out:
        proc = subprocess.Popen(netns.command(state.netns, argv), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)
    return proc.pid


def _start_exporter(state: SwiftLabState, ip: str, root: Path) -> int:
    mapping = root / "statsd-mapping.yml"
    mapping.write_text(statsd_mapping())
    return _spawn(state, [str(ensure_statsd_exporter()),
                          f"--statsd.listen-udp={ip}:{STATSD_UDP_PORT}",
                          "--statsd.listen-tcp=", f"--web.listen-address={ip}:{STATSD_HTTP_PORT}",
                          f"--statsd.mapping-config={mapping}", "--log.level=warn"],
                  root / "log" / "statsd_exporter.log")


def _http(state: SwiftLabState, method: str, url: str, timeout_s: float = 5.0
          ) -> tuple[int, str]:
    """A request from inside the namespace (curl); (status, body), status 0 when nothing
    answered."""
    res = subprocess.run(netns.command(state.netns, [
        "curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", method, "--max-time",
        str(timeout_s), url]), capture_output=True, text=True, check=False)
    body, _, code = res.stdout.rpartition("\n")
    try:
        return int(code), body
    except ValueError:
        return 0, ""


def _healthy(state: SwiftLabState, addr: str) -> bool:
    return _http(state, "GET", f"http://{addr}/healthcheck")[0] == 200


def _write_node(state: SwiftLabState, nd: SwiftNode) -> None:
    root = Path(nd.root)
    for sub in ("etc", "log", "run", "recon", f"srv/{nd.device}"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (nd.swift_dir / "swift.conf").write_text(_swift_conf())
    for kind in SERVERS:
        (nd.swift_dir / f"{kind}-server.conf").write_text(_server_conf(state, nd, kind))
    (root / "etc" / "rsyncd.conf").write_text(_rsyncd_conf(nd))


def start_node(state: SwiftLabState, nd: SwiftNode, d: Path) -> None:
    """Start node ``nd``'s rsync daemon, exporter, servers and daemons (its rings must be
    in place) and wait until its servers answer. The state is saved after every start, so
    that ``down`` finds whatever a failed start left running."""
    root = Path(nd.root)

    def started(name: str, pid: int) -> None:
        nd.pids[name] = pid
        state.save(d)

    started("exporter", _start_exporter(state, nd.ip, root))
    started("rsync", _spawn(state, ["rsync", "--daemon", "--no-detach",
                                    f"--config={root / 'etc' / 'rsyncd.conf'}"],
                            root / "log" / "rsync.log", nd.ip))
    for kind in SERVERS:
        conf = nd.swift_dir / f"{kind}-server.conf"
        started(f"{kind}-server", _spawn(state, [SWIFT_PYTHON, f"/usr/bin/swift-{kind}-server",
                                                 str(conf), "-v"],
                                         root / "log" / f"{kind}-server.log", nd.ip))
    for daemon in DAEMONS:
        conf = nd.swift_dir / f"{daemon.split('-')[0]}-server.conf"
        started(daemon, _spawn(state, [SWIFT_PYTHON, f"/usr/bin/swift-{daemon}", str(conf),
                                       "-v"], root / "log" / f"{daemon}.log", nd.ip))
    for kind, port in (("object", OBJECT_PORT), ("container", CONTAINER_PORT),
                       ("account", ACCOUNT_PORT)):
        wait_for(f"node {nd.n}'s {kind} server on {nd.ip}:{port}",
                 lambda p=port: _alive_or_fail(state, nd) and _healthy(state, f"{nd.ip}:{p}"),
                 timeout_s=60, every_s=0.3)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (not gone, not a zombie: the lab does not reap its children
    while it waits, and an exited one has an empty command line)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _alive_or_fail(state: SwiftLabState, nd: SwiftNode) -> bool:
    for name, pid in nd.pids.items():
        if not _running(pid):
            tail = ""
            base = "statsd_exporter" if name == "exporter" else name
            logf = Path(nd.root) / "log" / f"{base}.log"
            if logf.exists():
                tail = logf.read_text(errors="replace")[-1200:]
            raise ElastoreError(f"Swift node {nd.n}'s {name} (pid {pid}) exited: {tail}")
    return True


def stop_node(nd: SwiftNode) -> list[str]:
    done = []
    for name, pid in reversed(list(nd.pids.items())):
        if _stop(pid, nd.root):
            done.append(f"stopped node {nd.n}'s {name} (pid {pid})")
    nd.pids.clear()
    return done


# --- rings -------------------------------------------------------------------------------

def distribute_rings(state: SwiftLabState, nodes: list[SwiftNode] | None = None) -> None:
    """Copy every ``<kind>.ring.gz`` from the ring master to each node's and the proxy's
    ``swift_dir``, atomically (a process that reloads mid-copy reads the old or the new
    ring, never half of one)."""
    targets = [nd.swift_dir for nd in (state.nodes if nodes is None else nodes)]
    targets.append(state.proxy_root / "etc")
    for kind in SERVERS:
        src = state.rings / f"{kind}.ring.gz"
        if not src.exists():
            raise ElastoreError(f"no {src.name} in the ring master {state.rings}")
        for d in targets:
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{kind}.ring.gz.tmp"
            shutil.copyfile(src, tmp)
            tmp.replace(d / f"{kind}.ring.gz")


# --- Prometheus --------------------------------------------------------------------------

def _prometheus_config(state: SwiftLabState) -> Path:
    d = state.prometheus_dir
    d.mkdir(parents=True, exist_ok=True)
    targets = ""
    for nd in state.nodes:
        labels = {"node": str(nd.n), **state.pod_labels(nd)}
        lab = ", ".join(f"{k}: '{v}'" for k, v in labels.items())
        targets += f"      - targets: ['{nd.metrics}']\n        labels: {{{lab}}}\n"
    proxy = f"{PROXY_ADDR.split(':')[0]}:{STATSD_HTTP_PORT}"
    cfg = d / "prometheus.yml"
    tmp = d / "prometheus.yml.tmp"
    tmp.write_text(f"""global:
  scrape_interval: 2s
  evaluation_interval: 2s
scrape_configs:
  - job_name: swift
    static_configs:
{targets}  - job_name: swift-proxy
    static_configs:
      - targets: ['{proxy}']
  - job_name: loadgen
    static_configs:
      - targets: ['{LOADGEN_METRICS}']
""")
    tmp.replace(cfg)
    return cfg


def prometheus_get(state: SwiftLabState, path: str) -> str | None:
    code, body = _http(state, "GET", f"http://{PROMETHEUS_ADDR}{path}", timeout_s=3)
    return body if code == 200 else None


def _start_prometheus(state: SwiftLabState, d: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        raise ElastoreError("Prometheus is not installed (Debian: apt-get install prometheus; "
                            "'make test' installs it)")
    cfg = _prometheus_config(state)
    state.prometheus_pid = _spawn(state, [
        binary, f"--config.file={cfg}", f"--web.listen-address={PROMETHEUS_ADDR}",
        f"--storage.tsdb.path={state.prometheus_dir / 'tsdb'}", "--log.level=warn"],
        state.prometheus_dir / "prometheus.log")
    state.save(d)
    wait_for("Prometheus to be ready", lambda: prometheus_get(state, "/-/ready") is not None,
             timeout_s=60, every_s=0.5)


def reload_prometheus(state: SwiftLabState) -> None:
    if _ours(state.prometheus_pid, str(state.prometheus_dir)):
        _prometheus_config(state)
        os.kill(state.prometheus_pid, 1)  # SIGHUP: reread the targets


# --- up / down ---------------------------------------------------------------------------

def up(nodes: int = 3, replicas: int = 2, d: Path | None = None,
       namespace: str = NAMESPACE, pods: str = "", rsync_bwlimit_kibps: int = 0,
       ips: list[str] | None = None, device: str = "") -> SwiftLabState:
    """Create the namespace, the rings (``nodes`` devices, ``replicas`` replicas), start
    every storage node, the proxy and Prometheus, and wait until the proxy serves. With
    ``ips`` (and ``pods``), node n stands in for pod ``<statefulset>-(n-1)`` at ``ips[n-1]``
    (its IP, an address of the lab's namespace only) with device ``device``."""
    if ips is not None and len(ips) != nodes:
        raise ElastoreError(f"{len(ips)} address(es) for {nodes} node(s)")
    if not 1 <= nodes <= MAX_NODES:
        raise ElastoreError(f"--nodes must be 1..{MAX_NODES} for the Swift lab")
    if not 1 <= replicas <= nodes:
        raise ElastoreError(f"--replicas must be 1..{nodes} (one per node at most)")
    if rsync_bwlimit_kibps < 0:
        raise ElastoreError("the rsync bandwidth limit must be >= 0 KiB/s (0: none)")
    check_swift_installed()
    d = d or lab_dir()
    old = SwiftLabState.load(d)
    if old is not None and any(_ours(p, old.root) for nd in old.nodes for p in nd.pids.values()):
        raise ElastoreError("a Swift lab is already up: run 'elastore lab down' first")
    down(d)  # whatever a crashed up left behind
    ensure_statsd_exporter()
    root = d / "swift"
    state = SwiftLabState(namespace, str(root), replicas, pods=pods,
                          rsync_bwlimit_kibps=rsync_bwlimit_kibps)
    state.nodes = [SwiftNode(n, str(root / f"node{n}"), addr=ips[n - 1] if ips else "",
                             dev=device) for n in range(1, nodes + 1)]
    netns.create(namespace)
    state.save(d)
    for nd in state.nodes:
        _add_address(state, nd.ip)
        _write_node(state, nd)
    master = RingMaster(state.rings)
    master.create(PART_POWER, replicas)
    master.add_all([(nd.n, nd.ip, nd.device, DEVICE_WEIGHT) for nd in state.nodes])
    master.rebalance()
    distribute_rings(state)
    for nd in state.nodes:
        log.info("starting Swift node %d on %s ...", nd.n, nd.ip)
        start_node(state, nd, d)
    _start_proxy(state, d)
    log.info("starting Prometheus on %s ...", PROMETHEUS_ADDR)
    _start_prometheus(state, d)
    return state


def _add_address(state: SwiftLabState, ip: str) -> None:
    """127.0.1.n answers on the namespace's lo (127.0.0.0/8 is all local), but an rsync
    daemon binds it explicitly, and the address must exist for tc's filters to mean it."""
    res = subprocess.run(netns.command(state.netns, ["ip", "-4", "addr", "show", "dev", "lo"]),
                         capture_output=True, text=True, check=False)
    if f"{ip}/32" not in res.stdout:
        subprocess.run(netns.command(state.netns, ["ip", "addr", "add", f"{ip}/32", "dev",
                                                   "lo"]), check=True, capture_output=True)


def _start_proxy(state: SwiftLabState, d: Path) -> None:
    root = state.proxy_root
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "swift.conf").write_text(_swift_conf())
    conf = root / "etc" / "proxy-server.conf"
    conf.write_text(_proxy_conf(state))
    state.proxy_pids["exporter"] = _start_exporter(state, PROXY_ADDR.split(":")[0], root)
    state.save(d)
    host, port = MEMCACHED_ADDR.split(":")
    state.proxy_pids["memcached"] = _spawn(
        state, ["memcached", "-l", host, "-p", port, "-U", "0", "-m", "64", "-u", "root",
                "-P", str(root / "run-memcached.pid")], root / "log" / "memcached.log")
    state.save(d)
    pid = state.proxy_pids["proxy-server"] = _spawn(
        state, [SWIFT_PYTHON, "/usr/bin/swift-proxy-server", str(conf), "-v"],
        root / "log" / "proxy-server.log")
    state.save(d)

    def ready() -> bool:
        if not _running(pid):
            tail = (root / "log" / "proxy-server.log").read_text(errors="replace")[-1200:]
            raise ElastoreError(f"the Swift proxy (pid {pid}) exited: {tail}")
        return _healthy(state, PROXY_ADDR)

    wait_for(f"the Swift proxy on {PROXY_ADDR}", ready, timeout_s=60, every_s=0.3)


def down(d: Path | None = None) -> list[str]:
    """Stop what ``up`` started (by PID, if still ours) and remove the namespace."""
    d = d or lab_dir()
    done: list[str] = []
    state = SwiftLabState.load(d)
    ns = NAMESPACE
    if state is not None:
        ns = state.netns
        if _stop(state.prometheus_pid, str(state.prometheus_dir)):
            done.append(f"stopped Prometheus (pid {state.prometheus_pid})")
        for name, pid in state.proxy_pids.items():
            if _stop(pid, str(state.proxy_root)):
                done.append(f"stopped the proxy's {name} (pid {pid})")
        for nd in state.nodes:
            done += stop_node(nd)
        shutil.rmtree(state.root, ignore_errors=True)
    if netns.exists(ns):
        netns.delete(ns)
        done.append(f"removed namespace {ns}")
    (d / "swift.json").unlink(missing_ok=True)
    return done


def status(d: Path | None = None) -> dict[str, Any]:
    state = SwiftLabState.load(d or lab_dir())
    if state is None:
        raise ElastoreError("no Swift lab is up: run 'elastore lab up --store swift' first")
    nodes = []
    for nd in state.nodes:
        alive = {name: _ours(pid, nd.root) for name, pid in nd.pids.items()}
        nodes.append({"n": nd.n, "ip": nd.ip, "device": nd.device, "alive": alive,
                      "metrics": f"http://{nd.metrics}/metrics",
                      "objects_bytes": _du(nd.devices)})
    proxy_ok = _healthy(state, PROXY_ADDR)
    return {"netns": state.netns, "replicas": state.replicas, "nodes": nodes,
            "proxy": f"http://{PROXY_ADDR}" if proxy_ok else "(not answering)",
            "prometheus": f"http://{PROMETHEUS_ADDR}",
            "ring": RingMaster(state.rings).builder("object", ok=(0, 1))}


def _du(p: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(p):
        for f in files:
            with contextlib.suppress(OSError):  # removed while we walked
                total += os.stat(os.path.join(dirpath, f)).st_size
    return total



# --- scaling: the ring actuator on the lab -------------------------------------------------

def _require(d: Path | None) -> tuple[Path, SwiftLabState]:
    d = d or lab_dir()
    state = SwiftLabState.load(d)
    if state is None:
        raise ElastoreError("no Swift lab is up: run 'elastore lab up --store swift' first")
    return d, state


def progress(state: SwiftLabState) -> dict[str, Misplaced]:
    """Per ring kind, what is out of place on the nodes' devices against the ring master's
    current rings (:func:`elastore.actuators.swiftring.misplaced`)."""
    out = {}
    for kind in KINDS:
        assignment = ring_assignment(state.rings / f"{kind}.ring.gz")
        on_disk = {f"{nd.ip}/{nd.device}": scan_device(nd.devices / nd.device, kind)
                   for nd in state.nodes}
        out[kind] = misplaced(assignment, on_disk)
    return out


def wait_replicated(state: SwiftLabState, timeout_s: float = 1800,
                    say: Any = None) -> float:
    """Wait until no partition is out of place (the replicators are done); returns the
    seconds waited. ``say`` gets a progress line every ~10 s."""
    t0 = time.monotonic()
    last = 0.0
    while True:
        prog = progress(state)
        if all(m.done for m in prog.values()):
            return time.monotonic() - t0
        now = time.monotonic()
        if now - t0 > timeout_s:
            raise ElastoreError(f"replication not finished after {timeout_s:.0f} s: " + "; ".join(
                f"{k}: {m.handoffs} handoff(s) ({m.handoff_bytes / 2**20:.1f} MiB), "
                f"{m.missing} missing" for k, m in prog.items()))
        if say is not None and now - last >= 10:
            last = now
            obj = prog["object"]
            say(f"replicating: {obj.handoffs} object partition(s) still on handoffs "
                f"({obj.handoff_bytes / 2**20:.1f} MiB), {obj.missing} missing on their "
                f"primaries ({now - t0:.0f} s)")
        time.sleep(2.0)  # a scan walks every device: not more often


def add_node(d: Path | None = None, weight: float = DEVICE_WEIGHT) -> SwiftNode:
    """Start one more storage node, add its device to every ring, rebalance and give every
    node the new rings. Returns at once: the replicators move the data
    (:func:`wait_replicated`)."""
    d, state = _require(d)
    n = max((nd.n for nd in state.nodes), default=0) + 1
    if n > MAX_NODES:
        raise ElastoreError(f"the Swift lab has at most {MAX_NODES} nodes")
    nd = SwiftNode(n, str(Path(state.root) / f"node{n}"))
    state.nodes.append(nd)
    state.save(d)
    _add_address(state, nd.ip)
    _write_node(state, nd)
    distribute_rings(state, [nd])  # the current rings first: it starts knowing the cluster
    start_node(state, nd, d)
    master = RingMaster(state.rings)
    master.add(nd.n, nd.ip, nd.device, weight)
    master.rebalance()
    distribute_rings(state)
    reload_prometheus(state)
    return nd


def start_pod_node(n: int, ip: str, rings: dict[str, bytes], d: Path | None = None,
                   device: str = "") -> SwiftNode:
    """Start node ``n`` standing in for a pod at ``ip`` with the ring files ``rings`` (what
    the pod's ring volume holds): its servers only; the rings are not changed (the
    operator adds its device). Returns at once when its servers answer."""
    d, state = _require(d)
    if any(x.n == n for x in state.nodes):
        raise ElastoreError(f"Swift node {n} is already in the lab")
    nd = SwiftNode(n, str(Path(state.root) / f"node{n}"), addr=ip, dev=device)
    state.nodes.append(nd)
    state.save(d)
    _add_address(state, nd.ip)
    _write_node(state, nd)
    write_rings(nd.swift_dir, rings)
    start_node(state, nd, d)
    reload_prometheus(state)
    return nd


def stop_pod_node(n: int, d: Path | None = None) -> list[str]:
    """Stop node ``n`` (its pod is gone) and forget it; its files are deleted."""
    d, state = _require(d)
    nd = state.node(n)
    done = stop_node(nd)
    state.nodes = [x for x in state.nodes if x.n != nd.n]
    state.save(d)
    shutil.rmtree(nd.root, ignore_errors=True)
    reload_prometheus(state)
    return done


def write_rings(swift_dir: Path, rings: dict[str, bytes]) -> None:
    """Put the ``<kind>.ring.gz`` files of ``rings`` in ``swift_dir``, each replaced
    atomically (what a kubelet's ConfigMap volume update does: a server that reloads
    meanwhile reads the old or the new ring)."""
    swift_dir.mkdir(parents=True, exist_ok=True)
    for kind in SERVERS:
        data = rings.get(f"{kind}.ring.gz")
        if data is None:
            raise ElastoreError(f"no {kind}.ring.gz among the rings to write")
        tmp = swift_dir / f".{kind}.ring.gz.tmp"
        tmp.write_bytes(data)
        tmp.replace(swift_dir / f"{kind}.ring.gz")


def ring_files(d: Path | None = None) -> dict[str, bytes]:
    """The ring master's files as a rings ConfigMap holds them (``<kind>.builder`` and
    ``<kind>.ring.gz`` of every kind): what an operator's ring change starts from."""
    _, state = _require(d)
    out: dict[str, bytes] = {}
    for kind in SERVERS:
        for name in (f"{kind}.builder", f"{kind}.ring.gz"):
            p = state.rings / name
            if not p.exists():
                raise ElastoreError(f"no {name} in the ring master {state.rings}")
            out[name] = p.read_bytes()
    return out


def install_rings(files: dict[str, bytes], d: Path | None = None) -> None:
    """Make ``files`` (a rings ConfigMap's: ``<kind>.builder`` or ``.builder.gz``, and
    ``<kind>.ring.gz``) the lab's rings: the ring master's builders and ring files replaced
    (each atomically), then every node and the proxy given the ring files
    (:func:`distribute_rings`), as the kubelets' ConfigMap volumes give them to pods. A
    ring change made elsewhere (the operator's, on the ConfigMap) reaches the lab so."""
    from elastore.actuators.swiftring import RingFiles

    _, state = _require(d)
    rings = RingFiles(files)  # every kind's builder and ring file, or an error
    state.rings.mkdir(parents=True, exist_ok=True)
    for kind in SERVERS:
        for name, data in ((f"{kind}.builder", rings.builder_bytes(kind)),
                           (f"{kind}.ring.gz", files[f"{kind}.ring.gz"])):
            tmp = state.rings / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(state.rings / name)
    distribute_rings(state)


def drain_node(which: int | str, d: Path | None = None) -> None:
    """Set the node's device weight to 0 in every ring and rebalance: its partitions get
    new primaries and its replicators push them there (:func:`wait_replicated`)."""
    d, state = _require(d)
    nd = state.node(which)
    live = [x for x in state.nodes if x.n != nd.n]
    if len(live) < state.replicas:
        raise ElastoreError(f"refusing to drain node {nd.n}: {len(live)} node(s) would be "
                            f"left for {state.replicas} replicas")
    master = RingMaster(state.rings)
    master.set_weight(nd.n, nd.ip, nd.device, 0)
    master.rebalance()
    distribute_rings(state)


def remove_node(which: int | str, d: Path | None = None) -> None:
    """Remove a drained node: refuse while its device still holds data or anything is out
    of place; then take it out of the rings, stop its processes and delete its files."""
    d, state = _require(d)
    nd = state.node(which)
    master = RingMaster(state.rings)
    weights = master.devices("object")
    if weights.get(f"{nd.ip}/{nd.device}", 0.0) > 0:
        raise ElastoreError(f"node {nd.n} is not drained (weight "
                            f"{weights[f'{nd.ip}/{nd.device}']:g}): run drain first")
    prog = progress(state)
    if not all(m.done for m in prog.values()):
        raise ElastoreError(f"node {nd.n}: replication is not finished ("
                            + "; ".join(f"{k}: {m.handoffs} handoff(s), {m.missing} missing"
                                        for k, m in prog.items()) + ")")
    master.remove(nd.n, nd.ip, nd.device)
    master.rebalance()
    state.nodes = [x for x in state.nodes if x.n != nd.n]
    distribute_rings(state)
    stop_node(nd)
    shutil.rmtree(nd.root, ignore_errors=True)
    state.save(d)
    reload_prometheus(state)


def bwman_loop(models: Any, cfg: Any, d: Path | None = None,
               queue_bytes: int = 1_500_000) -> tuple[Any, Any]:
    """A BwMan loop over the Swift lab's storage nodes and the HTB it actuates (installed;
    remove() it when done): every node's link of ``cfg.total_mbit`` (what it sends) split
    into a guaranteed object-traffic class (port 6200) and a guaranteed replication class
    (rsync, port 873), each borrowing up to the link when the other is idle. Swift's ports
    separate replication from everything else, so the guarantees alone enforce the split:
    no store throttle is set (the decided migration rate is what the replication class
    carries)."""
    from elastore.actuators.tc import HtbShaper
    from elastore.lab.bwman import SWIFT_QUERIES, BwManLoop, prometheus_query

    d, state = _require(d)
    nic = float(cfg.total_mbit)
    shaper = HtbShaper(state.netns, total_mbit=nic * (MAX_NODES + 1) + 1000, nic_mbit=nic,
                       match="egress", queue_bytes=queue_bytes, client_port=OBJECT_PORT,
                       storage_port=RSYNC_PORT)
    ips = [node_ip(n) for n in range(1, MAX_NODES + 1)]  # nodes added later are shaped too
    shaper.install(ips, client_mbit=nic / 2, storage_mbit=nic / 2)

    def members() -> list[tuple[int, str, str]]:
        st = SwiftLabState.load(d)
        return [(nd.n, nd.ip, nd.metrics) for nd in (st.nodes if st else [])]

    loop = BwManLoop(members(), models, cfg,
                     prometheus_query(lambda path: prometheus_get(state, path)),
                     lambda ip, c, s: shaper.set_rates(ip, client_mbit=c, storage_mbit=s),
                     lambda n, mibps: mibps, members=members, queries=SWIFT_QUERIES)
    return loop, shaper
