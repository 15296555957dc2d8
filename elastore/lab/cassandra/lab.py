"""``elastore lab``: a real local Cassandra cluster in a network namespace of its own.

State (the namespace, every node's PID, directory and ports) is written to
``$ELASTORE_LAB_DIR/lab.json`` (default ``~/.local/state/elastore/lab``) after every step,
so a crashed ``up`` leaves enough behind for ``down`` to clean up. ``down`` stops exactly the
processes ``up`` started, by PID, after checking each PID still runs *our* node (its
command line names the node's directory), then removes the namespace.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elastore.actuators.nodetool import (
    StreamProgress,
    failure_summary,
    move_args,
    move_refusal,
    single_tokens,
    stream_progress,
    stream_setting,
)
from elastore.errors import ElastoreError
from elastore.lab import cgroups, netns
from elastore.lab.cassandra.nodes import (
    CASSANDRA_VERSION,
    NodeSpec,
    ensure_jars,
    even_tokens,
    nodetool,
    nodetool_command,
    start_example_exporter,
    start_node,
    token_config,
    write_config,
)
from elastore.lab.host import lab_dir, wait_for

log = logging.getLogger("elastore.lab")
NAMESPACE = "elastore-lab"
MAX_NODES = 4


@dataclass
class NodeState:
    n: int
    pid: int
    root: str
    #: with ``--veth``: the node's own namespace and address (its pod IP), behind a veth
    #: from the lab's namespace, which then plays the Kubernetes node ("host")
    ip: str = ""
    netns: str = ""
    #: the node's cgroup below the v2 root (``elastore-lab/n<n>``; "" without cgroup v2)
    cgroup: str = ""
    #: the standalone example-naming exporter's PID (``example_exporter``; 0: none)
    exporter_pid: int = 0
    #: a single-token lab's node: its one token (its ``initial_token``, then wherever
    #: :func:`move` put it); None with vnodes
    token: int | None = None

    @property
    def spec(self) -> NodeSpec:
        return NodeSpec(self.n, Path(self.root), self.ip or None)


PROMETHEUS_ADDR = "127.0.0.1:9090"
EXAMPLE_PROGRAM = "jmx_prometheus_httpserver"  # in the example exporter's command line
LOADGEN_METRICS = "127.0.0.1:9600"  # where `elastore load run` exports its metrics


@dataclass
class LabState:
    netns: str
    heap: str
    version: str = CASSANDRA_VERSION
    nodes: list[NodeState] = field(default_factory=list)
    prometheus_pid: int = 0
    prometheus_dir: str = ""
    #: "namespace/statefulset" when the lab stands in for a StatefulSet's pods: node n is
    #: pod <statefulset>-(n-1), and its series carry the namespace and pod labels that
    #: Prometheus's Kubernetes discovery gives (the operator's default queries need them)
    pods: str = ""
    #: each node in a namespace of its own behind a veth (a pod on a routed CNI), so
    #: per-pod tc (the node agent) sees its traffic; the lab's namespace is the host
    veth: bool = False
    #: each node's CPU limit in cores (0: none); with a limit, capacity grows with the
    #: nodes on this 2-core machine, as it does with servers of their own
    cpu_per_node: float = 0.0
    #: the CPUs the nodes run on (empty: all); the rest of the machine is the clients'
    #: (``elastore load run`` keeps off these), as if the store had servers of its own
    store_cpus: list[int] = field(default_factory=list)
    #: the CFS period of the CPU limit, µs (cgroups.CFS_PERIOD_US: the kernel's default)
    cfs_period_us: int = cgroups.CFS_PERIOD_US
    #: a second JMX exporter per node with the JMX exporter's example naming (job
    #: cassandra-example), for the ``jmx-exporter-example`` preset
    example_exporter: bool = False
    #: how often each node gossips its Load, ms (0: Cassandra's 60 s). ``nodetool status``
    #: shows the other nodes' Load as of their last broadcast: a test that reads every
    #: node's bytes from one node's status within seconds shortens it
    load_broadcast_ms: int = 0
    #: one token per node (``num_tokens: 1``, each node's ``initial_token``) instead of
    #: Cassandra's vnodes: what ``nodetool move`` needs (:func:`move`)
    single_token: bool = False

    def node_ns(self, node: NodeState) -> str:
        """Where the node's JVM runs (and its JMX answers on 127.0.0.1)."""
        return node.netns or self.netns

    def save(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / "lab.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(d / "lab.json")

    @classmethod
    def load(cls, d: Path) -> LabState | None:
        p = d / "lab.json"
        if not p.exists():
            return None
        try:
            doc = json.loads(p.read_text())
            return cls(doc["netns"], doc["heap"], doc.get("version", CASSANDRA_VERSION),
                       [NodeState(**n) for n in doc["nodes"]],
                       int(doc.get("prometheus_pid", 0)), str(doc.get("prometheus_dir", "")),
                       str(doc.get("pods", "")), bool(doc.get("veth", False)),
                       float(doc.get("cpu_per_node", 0.0)),
                       [int(c) for c in doc.get("store_cpus", [])],
                       int(doc.get("cfs_period_us", cgroups.CFS_PERIOD_US)),
                       bool(doc.get("example_exporter", False)),
                       int(doc.get("load_broadcast_ms", 0)),
                       bool(doc.get("single_token", False)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ElastoreError(f"unreadable lab state: {exc}", str(p)) from exc


def keep_off_store_cpus(state: LabState, pid: int = 0) -> None:
    """Run ``pid`` (0: this process) on the CPUs the nodes do not use, when the lab pins
    them (:attr:`LabState.store_cpus`): clients are not on the store's servers."""
    if not state.store_cpus:
        return
    rest = os.sched_getaffinity(0) - set(state.store_cpus)
    if rest:
        os.sched_setaffinity(pid, rest)


def _reweigh(state: LabState) -> None:
    """The lab's CPU group weighs as many servers as it has nodes: its nodes share one
    parent group, which would otherwise get one entity's CPU share against a co-runner's
    threads however many nodes it holds (adding a node would add no CPU under contention,
    unlike adding a server)."""
    if any(n.cgroup for n in state.nodes):
        cgroups.Group(cgroups.lab_root(state.netns)).set_weight(len(state.nodes))


def _ours(pid: int, root: str, program: str = "CassandraDaemon") -> bool:
    """Whether ``pid`` still runs the process we started for ``root``."""
    if pid <= 0 or not root:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return root in cmdline and program in cmdline


def _stop(pid: int, root: str, timeout: float = 30, program: str = "CassandraDaemon") -> bool:
    if not _ours(pid, root, program):
        return False
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _ours(pid, root, program):
            return True
        time.sleep(0.3)
    if _ours(pid, root, program):
        os.kill(pid, signal.SIGKILL)
    return True


def pod_labels(state: LabState, address: str) -> dict[str, str]:
    """``namespace`` and ``pod`` of the node at ``address`` when the lab stands in for a
    StatefulSet's pods (node n is pod <statefulset>-(n-1)); empty otherwise."""
    if not state.pods:
        return {}
    ns, sts = state.pods.split("/", 1)
    for n in state.nodes:
        if n.spec.ip == address:
            return {"namespace": ns, "pod": f"{sts}-{n.n - 1}"}
    return {}


def _prometheus_config(state: LabState) -> Path:
    d = Path(state.prometheus_dir)
    d.mkdir(parents=True, exist_ok=True)
    if state.pods:
        ns, sts = state.pods.split("/", 1)
        targets = "".join(f"      - targets: ['{n.spec.metrics}']\n"
                          f"        labels: {{namespace: '{ns}', pod: '{sts}-{n.n - 1}'}}\n"
                          for n in state.nodes)
    else:
        targets = "      - targets: [{}]\n".format(
            ", ".join(f"'{n.spec.metrics}'" for n in state.nodes))
    example = ""
    if state.example_exporter:
        labels = [f"        labels: {{namespace: '{state.pods.split('/', 1)[0]}', "
                  f"pod: '{state.pods.split('/', 1)[1]}-{n.n - 1}'}}\n" if state.pods
                  else "" for n in state.nodes]
        example = ("  - job_name: cassandra-example\n    scrape_interval: 5s\n"
                   "    static_configs:\n" + "".join(
                       f"      - targets: ['{n.spec.example_metrics}']\n{lab}"
                       for n, lab in zip(state.nodes, labels, strict=True)))
    cfg = d / "prometheus.yml"
    tmp = d / "prometheus.yml.tmp"
    tmp.write_text(f"""global:
  scrape_interval: 2s
  evaluation_interval: 2s
scrape_configs:
  - job_name: cassandra
    static_configs:
{targets}  - job_name: loadgen
    static_configs:
      - targets: ['{LOADGEN_METRICS}']
{example}""")
    tmp.replace(cfg)
    return cfg


def _start_prometheus(state: LabState, d: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        raise ElastoreError("Prometheus is not installed (Debian: apt-get install prometheus; "
                            "'make test' installs it)")
    state.prometheus_dir = str(d / "prometheus")
    cfg = _prometheus_config(state)
    logf = (Path(state.prometheus_dir) / "prometheus.log").open("ab")
    proc = subprocess.Popen(netns.command(state.netns, [
        binary, f"--config.file={cfg}", f"--web.listen-address={PROMETHEUS_ADDR}",
        f"--storage.tsdb.path={Path(state.prometheus_dir) / 'tsdb'}", "--log.level=warn"]),
        stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    keep_off_store_cpus(state, proc.pid)
    state.prometheus_pid = proc.pid
    state.save(d)
    wait_for("Prometheus to be ready", lambda: prometheus_get(state, "/-/ready") is not None,
             timeout_s=60, every_s=0.5)


def prometheus_get(state: LabState, path: str) -> str | None:
    """GET a Prometheus path from inside the namespace; None if it does not answer."""
    res = subprocess.run(netns.command(state.netns, [
        "curl", "-sf", "--max-time", "3", f"http://{PROMETHEUS_ADDR}{path}"]),
        capture_output=True, text=True, check=False)
    return res.stdout if res.returncode == 0 else None


def _reload_prometheus(state: LabState) -> None:
    if _ours(state.prometheus_pid, state.prometheus_dir, "prometheus"):
        _prometheus_config(state)
        os.kill(state.prometheus_pid, signal.SIGHUP)


def _ring(state: LabState, via: NodeState, lib: Path) -> dict[str, str]:
    """ip -> status code (UN, UJ, UL, DN ...) from nodetool status."""
    res = nodetool(state.node_ns(via), lib, via.spec.jmx_port, "status")
    if res.returncode != 0:
        return {}
    out = {}
    for line in res.stdout.splitlines():
        m = re.match(r"^([UD][NLJM])\s+(\d+\.\d+\.\d+\.\d+)\s", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def cql(state: LabState, *args: str, timeout: float = 300) -> dict[str, Any]:
    """Run the CQL helper inside the namespace against the live nodes."""
    hosts = ",".join(n.spec.ip for n in state.nodes)
    cmd = netns.command(state.netns, [sys.executable, "-m", "elastore.lab.cassandra.cql", hosts,
                                      *args])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"cql {' '.join(args)} failed: {res.stderr.strip()[-600:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def down(d: Path | None = None) -> list[str]:
    """Stop what ``up`` started and remove the namespace. Safe to repeat."""
    d = d or lab_dir()
    done = []
    state = LabState.load(d)
    if state is not None:
        for node in state.nodes:
            if _stop(node.pid, node.root):
                done.append(f"stopped node {node.n} (pid {node.pid})")
            if _stop(node.exporter_pid, node.root, program=EXAMPLE_PROGRAM):
                done.append(f"stopped node {node.n}'s example exporter "
                            f"(pid {node.exporter_pid})")
            if node.netns and netns.exists(node.netns):
                netns.delete(node.netns)
                done.append(f"removed namespace {node.netns}")
            if node.cgroup and cgroups.Group(node.cgroup).remove():
                done.append(f"removed cgroup {node.cgroup}")
        if _stop(state.prometheus_pid, state.prometheus_dir, program="prometheus"):
            done.append(f"stopped Prometheus (pid {state.prometheus_pid})")
        ns = state.netns
    else:
        ns = NAMESPACE
    if netns.exists(ns):
        netns.delete(ns)
        done.append(f"removed namespace {ns}")
    cgroups.remove_tree(cgroups.lab_root(ns))  # whatever empty groups of ours are left
    shutil.rmtree(d / "nodes", ignore_errors=True)
    shutil.rmtree(d / "prometheus", ignore_errors=True)
    (d / "lab.json").unlink(missing_ok=True)
    return done


def up(nodes: int = 3, heap: str = "256M", d: Path | None = None,
       namespace: str = NAMESPACE, pods: str = "", veth: bool = False,
       ips: list[str] | None = None, cpu_per_node: float = 0.0,
       store_cpus: list[int] | None = None,
       cfs_period_us: int = cgroups.CFS_PERIOD_US, example_exporter: bool = False,
       load_broadcast_ms: int = 0, single_token: bool = False,
       tokens: list[int] | None = None) -> LabState:
    """``pods``: "namespace/statefulset" the nodes stand in for (:attr:`LabState.pods`).
    ``veth``: each node in a namespace of its own behind a veth (:attr:`LabState.veth`),
    at ``ips`` (default 10.88.0.n). ``cpu_per_node``: each node's CPU limit in cores
    (0: none), enforced per CFS period of ``cfs_period_us``. ``store_cpus``: the CPUs the
    nodes run on (:attr:`LabState.store_cpus`). ``load_broadcast_ms``: how often each node
    gossips its Load (:attr:`LabState.load_broadcast_ms`; 0: Cassandra's default).
    ``single_token``: one token per node (:attr:`LabState.single_token`), node k+1 at
    ``tokens[k]`` (default: spaced evenly, :func:`even_tokens`); ``tokens`` implies it."""
    if ips is not None:
        veth = True
        if len(ips) != nodes:
            raise ElastoreError(f"{nodes} nodes need {nodes} addresses, got {len(ips)}")
    if not 1 <= nodes <= MAX_NODES:
        raise ElastoreError(f"--nodes must be 1..{MAX_NODES} on this machine (2 cores)")
    if tokens is not None:
        single_token = True
        if len(tokens) != nodes or len(set(tokens)) != nodes:
            raise ElastoreError(f"{nodes} single-token nodes need {nodes} distinct tokens, "
                                f"got {tokens}")
    elif single_token:
        tokens = even_tokens(nodes)
    for t in tokens or []:
        token_config(t)  # refuses a token outside Murmur3's range before anything starts
    d = d or lab_dir()
    old = LabState.load(d)
    if old is not None and any(_ours(n.pid, n.root) for n in old.nodes):
        raise ElastoreError("a lab is already up: run 'elastore lab down' first")
    down(d)  # whatever a crashed up left behind
    log.info("fetching Cassandra %s jars (cached) ...", CASSANDRA_VERSION)
    lib = ensure_jars()
    netns.create(namespace)
    if pods and not re.match(r"^[a-z0-9][a-z0-9-]*/[a-z0-9][a-z0-9.-]*$", pods):
        raise ElastoreError(f"pods must be namespace/statefulset, got {pods!r}")
    if cpu_per_node < 0 or cpu_per_node > (os.cpu_count() or 1):
        raise ElastoreError(f"--cpu-per-node must be 0 (no limit) .. {os.cpu_count()} cores")
    if cpu_per_node and cgroups.v2_root() is None:
        raise ElastoreError("--cpu-per-node needs cgroups (no cgroup v2 hierarchy found)")
    if not cgroups.MIN_CFS_PERIOD_US <= cfs_period_us <= cgroups.MAX_CFS_PERIOD_US:
        raise ElastoreError(f"--cfs-period-ms must be 1..1000 ms, got {cfs_period_us / 1000:g}")
    cpus = sorted(set(store_cpus or []))
    avail = os.sched_getaffinity(0)
    if cpus and (not set(cpus) <= avail or set(cpus) == avail):
        raise ElastoreError(f"--store-cpus {cpus}: want some, not all, of the CPUs "
                            f"{sorted(avail)} (the rest run the clients)")
    state = LabState(namespace, heap, pods=pods, veth=veth, cpu_per_node=cpu_per_node,
                     store_cpus=cpus, cfs_period_us=cfs_period_us,
                     example_exporter=example_exporter,
                     load_broadcast_ms=max(0, int(load_broadcast_ms)),
                     single_token=single_token)
    if veth:
        netns.prepare_host(namespace)
    state.save(d)
    if single_token and tokens is not None and nodes > 1:
        # an empty cluster: with one token each, nodes 2..n join at once, without a
        # bootstrap (there is nothing to stream yet), where vnodes join one by one
        _add(state, lib, d, ip=ips[0] if ips else None, token=tokens[0])
        started = [_start(state, lib, d, ip=ips[k] if ips else None, token=tokens[k],
                          bootstrap=False) for k in range(1, nodes)]
        for node, proc, t0 in started:
            _await_join(state, lib, node, proc, t0)
    else:
        for k in range(nodes):
            _add(state, lib, d, ip=ips[k] if ips else None,
                 token=tokens[k] if tokens is not None else None)
    log.info("starting Prometheus on %s ...", PROMETHEUS_ADDR)
    _start_prometheus(state, d)
    return state


def _add(state: LabState, lib: Path, d: Path, n: int | None = None, ip: str | None = None,
         token: int | None = None) -> NodeState:
    node, proc, t0 = _start(state, lib, d, n, ip, token)
    _await_join(state, lib, node, proc, t0)
    return node


def _start(state: LabState, lib: Path, d: Path, n: int | None = None, ip: str | None = None,
           token: int | None = None, bootstrap: bool = True
           ) -> tuple[NodeState, subprocess.Popen[bytes], float]:
    """Start a node's JVM (and its example exporter); :func:`_await_join` waits for it."""
    if state.single_token and token is None:
        raise ElastoreError("a single-token lab's new node needs its token (initial_token)")
    if not state.single_token and token is not None:
        raise ElastoreError("a token is for a single-token lab (lab up --single-token); "
                            "this lab's nodes have vnodes")
    taken = {x.token for x in state.nodes}
    if token is not None and token in taken:
        raise ElastoreError(f"token {token} is already a node's")
    used = {x.n for x in state.nodes}
    if n is None:
        n = min(k for k in range(1, MAX_NODES + 2) if k not in used)
    elif n in used:
        raise ElastoreError(f"node {n} is already in the lab")
    if len(state.nodes) >= MAX_NODES or not 1 <= n <= MAX_NODES:
        raise ElastoreError(f"at most {MAX_NODES} nodes (1..{MAX_NODES}) on this machine")
    root = d / "nodes" / f"n{n}"
    shutil.rmtree(root, ignore_errors=True)  # a re-added IP must start from empty data
    node_ns = ""
    if state.veth:
        ip = ip or f"10.88.0.{n}"
        node_ns = f"{state.netns}-n{n}"
        if netns.exists(node_ns):
            netns.delete(node_ns)  # a stale one, from a node that was stopped
        netns.create(node_ns)
        netns.wire_pod(state.netns, node_ns, ip, f"lvn{n}")
    elif ip is not None:
        raise ElastoreError("a node address needs the veth topology (lab up --veth)")
    spec = NodeSpec(n, root, ip)
    seed = state.nodes[0].spec.ip if state.nodes else spec.ip
    write_config(spec, f"{seed}:7000", token, bootstrap)
    t0 = time.monotonic()
    group = None
    if cgroups.v2_root() is not None:
        group = cgroups.node_group(state.netns, n)
        group.remove(wait_s=0)  # a stale one of a node that was stopped
        group.create(state.cpu_per_node or None, period_us=state.cfs_period_us)
    log.info("starting node %d on %s ...", n, spec.ip)
    proc = start_node(node_ns or state.netns, spec, lib, state.heap, group,
                      state.store_cpus or None, state.load_broadcast_ms)
    node = NodeState(n, proc.pid, str(root), ip or "", node_ns, group.rel if group else "",
                     token=token)
    if state.example_exporter:
        node.exporter_pid = start_example_exporter(node_ns or state.netns, spec).pid
    state.nodes.append(node)
    state.save(d)
    _reweigh(state)
    return node, proc, t0


def _await_join(state: LabState, lib: Path, node: NodeState, proc: subprocess.Popen[bytes],
                t0: float) -> None:
    """Wait until a started node is Up and Normal in its own ``nodetool status``."""
    root, spec = Path(node.root), node.spec

    def joined() -> bool:
        if proc.poll() is not None:
            tail = (root / "logs" / "system.log").read_text()[-1500:] if (
                root / "logs" / "system.log").exists() else ""
            raise ElastoreError(f"node {node.n} exited with {proc.returncode}: {tail}")
        return _ring(state, node, lib).get(spec.ip) == "UN"

    wait_for(f"node {node.n} ({spec.ip}) to join the ring", joined, timeout_s=240)
    log.info("node %d up in %.0f s", node.n, time.monotonic() - t0)
    _reload_prometheus(state)


def add_node(d: Path | None = None, n: int | None = None, ip: str | None = None,
             token: int | None = None) -> NodeState:
    """Start a node (the lowest free number, or ``n``; at ``ip`` with the veth topology)
    and wait until it has joined. A single-token lab's node needs its ``token`` (it
    bootstraps the range that ends there)."""
    d = d or lab_dir()
    state = _require(d)
    return _add(state, ensure_jars(), d, n, ip, token)


def remove_node(which: str | int, d: Path | None = None) -> bool:
    """Stop a node's JVM (by PID) and forget it, *without* decommissioning it: for a node
    that has already left the ring (decommissioned through nodetool by someone else) or that
    must simply stop. Returns whether a process was stopped."""
    d = d or lab_dir()
    state = _require(d)
    node = _node(state, which)
    stopped = _stop(node.pid, node.root)
    _stop(node.exporter_pid, node.root, program=EXAMPLE_PROGRAM)
    if node.netns and netns.exists(node.netns):
        netns.delete(node.netns)  # and its veth with it
    if node.cgroup:
        cgroups.Group(node.cgroup).remove()
    state.nodes.remove(node)
    _reweigh(state)
    state.save(d)
    _reload_prometheus(state)
    shutil.rmtree(node.root, ignore_errors=True)
    return stopped


def node_running(which: str | int, d: Path | None = None) -> bool:
    """Whether the node's JVM (the PID the lab state has for it) still runs our node."""
    state = _require(d or lab_dir())
    node = _node(state, which)
    return _ours(node.pid, node.root)


def kill_node(which: str | int, d: Path | None = None, sig: int = signal.SIGKILL) -> int:
    """Kill the node's JVM by its PID with ``sig`` (SIGKILL: a crash, no shutdown hook, no
    drain) and wait until it has exited. Unlike :func:`remove_node` the node stays in the
    lab's state with its data, config, namespace and cgroup, as a crashed container keeps
    its pod and volume: :func:`restart_node` starts it again on them. Returns the PID
    killed; refuses a PID that does not run our node."""
    d = d or lab_dir()
    state = _require(d)
    node = _node(state, which)
    if not _ours(node.pid, node.root):
        raise ElastoreError(f"node {node.n} (pid {node.pid}) is not running")
    os.kill(node.pid, sig)
    wait_for(f"node {node.n} (pid {node.pid}) to exit",
             lambda: not _ours(node.pid, node.root), timeout_s=30, every_s=0.1)
    log.info("node %d (pid %d) killed with signal %d", node.n, node.pid, sig)
    return node.pid


def restart_node(which: str | int, d: Path | None = None) -> NodeState:
    """Start a node whose JVM is not running (:func:`kill_node`) again on its own data
    directory and config, as a kubelet restarts a crashed container on its volume, and wait
    until it is Up and Normal in its own ``nodetool status``. A node killed while it
    bootstrapped bootstraps again (Cassandra 5.0.4: "Detected previous bootstrap failure;
    retrying"; the lab's nodes reset its streamed progress). Raises if the JVM exits first,
    with its log's tail."""
    d = d or lab_dir()
    state = _require(d)
    node = _node(state, which)
    if _ours(node.pid, node.root):
        raise ElastoreError(f"node {node.n} is running (pid {node.pid})")
    lib = ensure_jars()
    group = cgroups.Group(node.cgroup) if node.cgroup else None
    t0 = time.monotonic()
    log.info("restarting node %d on %s on its own data ...", node.n, node.spec.ip)
    proc = start_node(state.node_ns(node), node.spec, lib, state.heap, group,
                      state.store_cpus or None, state.load_broadcast_ms)
    node.pid = proc.pid
    state.save(d)
    _await_join(state, lib, node, proc, t0)
    return node


def _require(d: Path) -> LabState:
    state = LabState.load(d)
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    return state


def _node(state: LabState, which: str | int) -> NodeState:
    key = str(which)
    for n in state.nodes:
        if key in (str(n.n), n.spec.ip):
            return n
    raise ElastoreError(f"no node {which!r} (nodes: "
                        f"{', '.join(f'{n.n}={n.spec.ip}' for n in state.nodes)})")


def set_stream_throughput(which: str | int, mibps: float, d: Path | None = None) -> float:
    """Throttle a node's outgoing streaming; returns the MiB/s actually set (see
    :func:`stream_setting` for the rounding)."""
    state = _require(d or lab_dir())
    node = _node(state, which)
    args, applied = stream_setting(mibps)
    res = nodetool(state.node_ns(node), ensure_jars(), node.spec.jmx_port, "setstreamthroughput",
                   *args)
    if res.returncode != 0:
        raise ElastoreError(f"setstreamthroughput on node {node.n}: "
                            f"{(res.stdout + res.stderr).strip()[-300:]}")
    log.debug("node %d: stream throttle %.3f MiB/s set as %s (%.3f MiB/s)", node.n, mibps,
              " ".join(args), applied)
    return applied


def run_nodetool(which: str | int, *args: str, d: Path | None = None,
                 timeout: float = 600) -> str:
    """nodetool ``args`` on a node; its output, or an error naming what nodetool said."""
    state = _require(d or lab_dir())
    node = _node(state, which)
    res = nodetool(state.node_ns(node), ensure_jars(), node.spec.jmx_port, *args,
                   timeout=timeout)
    if res.returncode != 0:
        raise ElastoreError(f"nodetool {' '.join(args)} on node {node.n}: "
                            f"{failure_summary(res.stdout, res.stderr)}")
    return res.stdout


def ring_tokens(d: Path | None = None, via: str | int | None = None) -> dict[str, int]:
    """Each node's one token (address -> token) as the ring says (``nodetool ring`` on
    ``via``, default the first node): a single-token lab's tokens, read back."""
    state = _require(d or lab_dir())
    return single_tokens(run_nodetool(via if via is not None else state.nodes[0].n, "ring",
                                      d=d))


class MoveRefused(ElastoreError):
    """``nodetool move`` refused or failed; ``kind`` names a known refusal
    (:data:`elastore.actuators.nodetool.MOVE_REFUSALS`) or is None."""

    def __init__(self, message: str, kind: str | None) -> None:
        super().__init__(message)
        self.kind = kind


def move(which: str | int, token: int, d: Path | None = None,
         on_progress: Callable[[float, StreamProgress], None] | None = None,
         poll_s: float = 2.0, timeout_s: float = 3600.0) -> float:
    """``nodetool move`` a single-token node to ``token``; returns the seconds it took.

    nodetool returns when the move is done: the node has fetched its new range's replicas,
    streamed the ranges it gave up, and taken the new token. Meanwhile, with
    ``on_progress``, the node's streams are read every ``poll_s`` from ``netstats`` and
    passed on with the seconds elapsed. The data the node no longer replicates stays on
    its disk until ``nodetool cleanup`` (as after a bootstrap). Raises :class:`MoveRefused`
    with what Cassandra said (docs/lab.md lists what 5.0.4 refuses). Stopping the wait
    (timeout) does not stop the move inside Cassandra."""
    d = d or lab_dir()
    state = _require(d)
    node = _node(state, which)
    lib = ensure_jars()
    args = move_args(int(token))
    t0 = time.monotonic()
    log.info("moving node %d (%s) from token %s to %d ...", node.n, node.spec.ip, node.token,
             token)
    proc = subprocess.Popen(nodetool_command(state.node_ns(node), lib, node.spec.jmx_port,
                                             *args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - t0 > timeout_s:
                    raise ElastoreError(f"the move of node {node.n} did not end within "
                                        f"{timeout_s:.0f} s (it may still run in Cassandra)"
                                        ) from None
                if on_progress is not None:
                    res = nodetool(state.node_ns(node), lib, node.spec.jmx_port, "netstats")
                    if res.returncode == 0 and proc.poll() is None:
                        on_progress(time.monotonic() - t0, stream_progress(res.stdout))
    finally:
        if proc.poll() is None:  # our client only: the move inside Cassandra goes on
            proc.kill()
            proc.wait()
    secs = time.monotonic() - t0
    if proc.returncode != 0:
        raise MoveRefused(f"nodetool move {token} on node {node.n}: "
                          f"{failure_summary(out, err)}", move_refusal(out, err))
    node.token = int(token)
    state.save(d)
    log.info("node %d moved to %d in %.1f s", node.n, token, secs)
    return secs


def get_stream_throughput(which: str | int, d: Path | None = None) -> float:
    """The node's current outgoing stream throttle, MiB/s (nodetool getstreamthroughput)."""
    state = _require(d or lab_dir())
    node = _node(state, which)
    res = nodetool(state.node_ns(node), ensure_jars(), node.spec.jmx_port, "getstreamthroughput",
                   "-m")
    m = re.search(r"([0-9]+(?:\.[0-9]+)?)\s*MiB/s", res.stdout)
    if res.returncode != 0 or m is None:
        raise ElastoreError(f"getstreamthroughput on node {node.n}: "
                            f"{(res.stdout + res.stderr).strip()[-300:]}")
    return float(m.group(1))


def bwman_loop(models: Any, cfg: Any, d: Path | None = None,
               queue_bytes: int = 1_500_000) -> tuple[Any, Any]:
    """A BwMan loop over the lab's nodes and the HTB it actuates (install()ed; remove() it
    when done).

    Every node gets a NIC of ``cfg.total_mbit`` (what it *sends*, tc's ``egress`` match)
    split into a guaranteed client class (port 9042) and a guaranteed storage class (port
    7000), each allowed to borrow up to the NIC when the other is idle; the loop moves the
    split. Without BwMan the same NIC is one FIFO (``HtbShaper(split=False)``).
    ``queue_bytes`` bounds every class's queue (the default: a 1000-frame NIC queue)."""
    from elastore.actuators.tc import HtbShaper
    from elastore.lab.bwman import BwManLoop, prometheus_query

    d = d or lab_dir()
    state = _require(d)
    nic = float(cfg.total_mbit)
    shaper = HtbShaper(state.netns, total_mbit=nic * MAX_NODES + 1000, nic_mbit=nic,
                       match="egress", queue_bytes=queue_bytes)
    shaper.install([n.spec.ip for n in state.nodes], client_mbit=nic / 2,
                   storage_mbit=nic / 2)
    loop = BwManLoop([(n.n, n.spec.ip, n.spec.metrics) for n in state.nodes], models, cfg,
                     prometheus_query(lambda path: prometheus_get(state, path)),
                     lambda ip, c, st: shaper.set_rates(ip, client_mbit=c, storage_mbit=st),
                     lambda n, mibps: set_stream_throughput(n, mibps, d=d),
                     members=lambda: [(n.n, n.spec.ip, n.spec.metrics)
                                      for n in _require(d).nodes])
    return loop, shaper


def decommission(which: str | int, d: Path | None = None) -> float:
    """Decommission a node safely; returns the seconds the decommission took.

    Refuses if fewer nodes than a keyspace's replication factor would remain; first lowers
    the system keyspaces' RF to what remains; waits until the node has LEFT; stops its JVM
    (which stays up after DECOMMISSIONED) by PID.
    """
    d = d or lab_dir()
    state = _require(d)
    node = _node(state, which)
    remaining = len(state.nodes) - 1
    ks = cql(state, "keyspaces")
    too_big = sorted((name, int(repl.get("replication_factor", 0) or 0))
                     for name, repl in ks.items() if not name.startswith("system"))
    too_big = [(name, rf) for name, rf in too_big if rf > remaining]
    if too_big:
        which = ", ".join(f"keyspace {name} has RF {rf}" for name, rf in too_big)
        raise ElastoreError(f"refusing: {which} and only {remaining} node(s) would remain")
    cql(state, "alter-system-rf", str(max(1, min(3, remaining))))
    lib = ensure_jars()
    t0 = time.monotonic()
    log.info("decommissioning node %d (%s) ...", node.n, node.spec.ip)
    res = nodetool(state.node_ns(node), lib, node.spec.jmx_port, "decommission", timeout=3600)
    if res.returncode != 0:
        raise ElastoreError(f"decommission of node {node.n} failed: "
                            f"{(res.stdout + res.stderr).strip()[-600:]}")
    secs = time.monotonic() - t0
    other = next(n for n in state.nodes if n is not node)
    wait_for(f"node {node.n} to leave the ring",
             lambda: node.spec.ip not in _ring(state, other, lib), timeout_s=120)
    _stop(node.pid, node.root)
    _stop(node.exporter_pid, node.root, program=EXAMPLE_PROGRAM)  # else it outlives the lab
    if node.netns and netns.exists(node.netns):
        netns.delete(node.netns)
    if node.cgroup:
        cgroups.Group(node.cgroup).remove()
    state.nodes.remove(node)
    _reweigh(state)
    state.save(d)
    _reload_prometheus(state)
    shutil.rmtree(node.root, ignore_errors=True)
    return secs


def status(d: Path | None = None) -> dict[str, Any]:
    state = _require(d or lab_dir())
    lib = ensure_jars()
    live = [n for n in state.nodes if _ours(n.pid, n.root)]
    res = nodetool(state.node_ns(live[0]), lib, live[0].spec.jmx_port, "status") if live \
        else None
    targets: list[dict[str, str]] = []
    raw = prometheus_get(state, "/api/v1/targets")
    if raw:
        for t in json.loads(raw)["data"]["activeTargets"]:
            targets.append({"job": t["labels"]["job"], "instance": t["labels"]["instance"],
                            "health": t["health"]})
    return {
        "namespace": state.netns,
        "prometheus": f"http://{PROMETHEUS_ADDR}" if raw else "(not answering)",
        "targets": targets,
        "nodes": [{"n": n.n, "ip": n.spec.ip, "pid": n.pid, "alive": _ours(n.pid, n.root),
                   "jmx_port": n.spec.jmx_port, "metrics": f"http://{n.spec.metrics}/metrics"}
                  for n in state.nodes],
        "ring": res.stdout if res is not None and res.returncode == 0 else "(unreachable)",
    }
