"""Chaos on the lab's real Cassandra (issue 39): the joining node is killed while it
bootstraps, during a scale-out the operator drives.

Two old nodes hold a known data set (RF 2). The operator's own runner scales the "StatefulSet"
2 -> 3 through the lab (the path of ``test_cassandra_lab.py``'s scale-out: a real node
started, the operator following its join, then ``nodetool cleanup`` on the old nodes). Node 3
is SIGKILLed (by PID) while it bootstraps: the survivors' ring lists its tokens Joining and
node 1's ``netstats`` shows part of its stream to it sent (a bootstrapping 5.0.4 answers no
nodetool itself: "Server is not initialized yet"). Its pod stays (a crashed container keeps
its pod and volume), and the kubelet starts it again after its 10-s back-off, before the
survivors have dropped the dead endpoint (Cassandra's default gives them 5 min). That retried
bootstrap is killed too; this time the pod stays down (its Kubernetes node lost) until the
survivors have dropped the dead joining endpoint, then comes back on its volume. Asserted,
from the store itself:

* while node 3 is dead the operation is never Done, nothing is done twice (one scale, no
  cleanup, no decommission), and the status says what it waits for;
* the survivors drop the dead joining endpoint by themselves (no UJ/DJ left), and the ring's
  ownership is then exactly what it was before the scale-out;
* each restart bootstraps again (the node's log says so) at the *same* tokens it first
  joined with; the last completes its join, and the operation then finishes (cleanup on both old
  nodes) with every node UN, one token set per node, gossip all NORMAL;
* every row written before, and every write acknowledged at QUORUM during the chaos, is
  read back at CL ALL.

The times to recover (the dead endpoint dropped, the retried join complete, the operation
Done) are printed. Runs in a network namespace and a state directory of this run's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from elastore.actuators.nodetool import (
    Ring,
    StreamProgress,
    compaction_tasks,
    parse_compaction_throughput,
    parse_host_id,
    parse_mode,
    parse_ring,
    parse_status,
    read_ring,
    repair_activity,
    stream_progress,
)
from elastore.actuators.ports import StatefulSetFacts
from elastore.errors import ElastoreError
from elastore.lab import cgroups, netns
from elastore.lab.cassandra import lab
from elastore.models import ModelSet
from elastore.operator.controls import PAUSED_REPLICAS_ANNOTATION
from elastore.operator.runner import Runner
from elastore.resources import builtin_model
from elastore.sim.engine import Cluster
from elastore.sim.kube import MemoryPolicies, SimulatedKube, TraceMetrics
from elastore.units import GIB, MIB

NS = f"elastore-test-chaos-{os.getpid()}"
#: ~30 MiB of incompressible values at RF 2: node 3 receives about 2/3 of it
ROWS, VALUE_BYTES = 3000, 10 * 1024
#: each old node's outgoing stream throttle while node 3's bootstraps are to be killed
#: (2 Mbit/s, 0.24 MiB/s: node 1's ~10 MiB take some 40 s, long enough to be caught by
#: nodetool polls that take 5-10 s each on a busy machine), then Cassandra's default
SLOW_MIBPS, FAST_MIBPS = 0.25, 24.0
#: a crashed container's restart: the kubelet's back-off step, and the attempts made
BACKOFF_S, RESTARTS = 10.0, 4
#: node 3 is killed only while node 1 has sent it less than this share of its stream
KILL_BEFORE = 0.7
PROBE_KEYS = 100  # QUORUM writes while node 3 is dead, and again once it is dropped
#: a survivor drops a dead joining endpoint ("FatClient ... has been silent for 30000ms")
FAT_CLIENT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("chaos-lab")
    try:
        lab.up(2, "256M", d=d, namespace=NS)
    except Exception as exc:  # a required component that cannot start is a failure
        lab.down(d)
        pytest.fail(f"the Cassandra lab did not come up: {exc}")
    yield d
    logs = d.parent / "chaos-logs"  # kept by pytest's tmp dirs, for a failure's diagnosis
    for node in Path(d, "nodes").glob("n*"):
        with contextlib.suppress(OSError):
            (logs / node.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(node / "logs" / "system.log", logs / node.name / "system.log")
    lab.down(d)
    assert not netns.exists(NS)
    # a JVM this process started and the lab stopped can still be a zombie when down()
    # removes its cgroup (EBUSY, seen once in 4 runs): once it is reaped, again
    group = cgroups.lab_root(NS)
    roots = [r for r in (cgroups.v2_root(), cgroups.v1_cpu_root()) if r is not None]
    end = time.monotonic() + 30
    while any((r / group).exists() for r in roots) and time.monotonic() < end:
        subprocess.run(["true"], check=False)  # lets subprocess reap the stopped children
        cgroups.remove_tree(group)
        time.sleep(0.5)
    assert not any((r / group).exists() for r in roots), f"cgroup {group} is left"


def _state(d: Path) -> lab.LabState:
    st = lab.LabState.load(d)
    assert st is not None
    return st


def _nodetool(d: Path, n: int) -> Callable[[str], str]:
    """nodetool on lab node ``n``, as the operator runs it in that node's pod."""
    return lambda cmd: lab.run_nodetool(n, *cmd.split(), d=d, timeout=120)


# -- the pod of the joining node, as a kubelet runs it ---------------------------------------
@dataclass
class JoiningPod:
    """Pod ``db-2``: its container is node 3's JVM, started on a new volume (``lab
    add-node``), ready once the node is Up and Normal (the usual readiness probe: ``nodetool
    status`` shows it UN). When the container dies the kubelet starts it again on the same
    volume after its back-off (10 s, doubled after each failure), unless ``hold`` is set
    (the pod's node is lost): then once ``restart`` is set."""

    d: Path
    hold: threading.Event = field(default_factory=threading.Event)
    restart: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)  # the test is over
    ready: threading.Event = field(default_factory=threading.Event)
    exits: list[str] = field(default_factory=list)  # why each run of the container ended
    restarted_at: list[float] = field(default_factory=list)  # monotonic, each restart
    first_start: float | None = None  # monotonic: the container's first start
    ready_at: float | None = None  # monotonic: the node UN in its own status

    @property
    def started_at(self) -> float:
        """When its container last started (monotonic)."""
        return self.restarted_at[-1] if self.restarted_at else self.first_start or 0.0

    def run(self) -> None:
        self.first_start = time.monotonic()
        try:
            lab.add_node(self.d)
            self.ready_at = time.monotonic()
            self.ready.set()
            return
        except ElastoreError as exc:
            self.exits.append(str(exc)[:300])
        node = max(x.n for x in _state(self.d).nodes)
        for attempt in range(RESTARTS):
            # a lost node's pod comes back as a new pod (no crash back-off): after the
            # survivors' quarantine of a dropped endpoint (2 x ring_delay, 6 s here)
            delay = BACKOFF_S if self.hold.is_set() else BACKOFF_S * 2**attempt
            while self.hold.is_set() and not self.restart.wait(timeout=1.0):
                if self.cancel.is_set():
                    return
            if self.cancel.wait(delay):
                return
            self.restarted_at.append(time.monotonic())
            try:
                lab.restart_node(node, d=self.d)
                self.ready_at = time.monotonic()
                self.ready.set()
                return
            except ElastoreError as exc:
                self.exits.append(str(exc)[:300])


class ChaosPort(SimulatedKube):
    """The operator's ClusterPort over the lab: a StatefulSet ``db`` whose pod ``db-k`` is
    node k+1; its scale-out starts :class:`JoiningPod`. Ring reads, node modes, cleanups,
    compactions and repairs are real nodetool calls; the stream throttle is the test's (set
    on the nodes directly). Test-only."""

    def __init__(self, d: Path) -> None:
        st = _state(d)
        super().__init__(Cluster.balanced(len(st.nodes), GIB, boot_s=30.0), "shop", "db",
                         volume_bytes=GIB)
        self.d = d
        self.spec_replicas = len(st.nodes)
        self.joining: JoiningPod | None = None
        self.cleanups_state: dict[str, str] = {}

    def _n(self, pod: str) -> int:
        return int(pod.rsplit("-", 1)[1]) + 1

    def _up(self, k: int) -> bool:
        if k >= self.spec_replicas or not any(x.n == k + 1 for x in _state(self.d).nodes):
            return False
        if self.joining is not None and k + 1 == self.spec_replicas and \
                not self.joining.ready.is_set():
            return False
        return lab.node_running(k + 1, d=self.d)

    def _ordinal(self, ns: str, pod: str) -> int | None:
        tail = pod.rsplit("-", 1)[-1]
        k = int(tail) if tail.isdigit() else None
        return k if k is not None and k < self.spec_replicas else None

    def statefulset(self, ns: str, name: str) -> StatefulSetFacts | None:
        ready = sum(self._up(k) for k in range(self.spec_replicas))
        return StatefulSetFacts("db", self.spec_replicas, ready, self.spec_replicas, None, GIB,
                                True)

    def scale(self, ns: str, name: str, replicas: int, expect: int) -> None:
        assert self.spec_replicas == expect
        self.calls.append((self.now_s, f"scale {replicas}"))
        assert replicas == self.spec_replicas + 1, "this test scales out only"
        self.joining = JoiningPod(self.d)
        threading.Thread(target=self.joining.run, daemon=True).start()
        self.spec_replicas = replicas

    def pod(self, ns: str, name: str) -> tuple[bool, bool]:
        k = self._ordinal(ns, name)
        return (False, False) if k is None else (True, self._up(k))

    def pod_identity(self, ns: str, name: str, container: str) -> str | None:
        k = self._ordinal(ns, name)
        return f"lab-{k}" if k is not None and self._up(k) else None

    def node_mode(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]
                  ) -> str | None:
        k = self._ordinal(ns, pod)
        if k is None or not any(x.n == k + 1 for x in _state(self.d).nodes):
            return None
        try:
            return parse_mode(_nodetool(self.d, k + 1)("netstats"))
        except ElastoreError:
            return None  # starting, or dead: not answering

    def ring(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> Ring:
        return read_ring(_nodetool(self.d, self._n(pod)))

    def host_id(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...]) -> str:
        return parse_host_id(_nodetool(self.d, self._n(pod))("info"))

    def start_decommission(self, ns: str, pod: str, container: str,
                           nodetool: tuple[str, ...]) -> None:
        self.calls.append((self.now_s, f"decommission {pod}"))  # asserted absent

    def set_stream_throughput(self, ns: str, pods: list[str], container: str,
                              nodetool: tuple[str, ...], mibps: float) -> float:
        return mibps

    def start_cleanup(self, ns: str, pod: str, container: str,
                      nodetool: tuple[str, ...]) -> None:
        self.calls.append((self.now_s, f"cleanup {pod}"))
        run = _nodetool(self.d, self._n(pod))

        def go() -> None:
            try:
                run("cleanup")
                self.cleanups_state[pod] = "done"
            except ElastoreError as exc:
                self.cleanups_state[pod] = f"failed: {exc}"

        self.cleanups_state[pod] = "running"
        threading.Thread(target=go, daemon=True).start()

    def cleanup_state(self, ns: str, pod: str) -> str | None:
        return self.cleanups_state.get(pod)

    def cleanup_running(self, ns: str, pod: str, container: str,
                        nodetool: tuple[str, ...]) -> bool | None:
        return "Cleanup" in compaction_tasks(_nodetool(self.d, self._n(pod))("compactionstats"))

    def repair_running(self, ns: str, pod: str, container: str,
                       nodetool: tuple[str, ...]) -> str | None:
        run = _nodetool(self.d, self._n(pod))
        return repair_activity(run("compactionstats"), run("netstats"))

    def compaction_throughput(self, ns: str, pod: str, container: str,
                              nodetool: tuple[str, ...]) -> float:
        return parse_compaction_throughput(_nodetool(self.d, self._n(pod))(
            "getcompactionthroughput"))

    def set_compaction_throughput(self, ns: str, pod: str, container: str,
                                  nodetool: tuple[str, ...], mibps: float) -> float:
        whole = 0 if mibps == 0 else max(1, round(mibps))
        _nodetool(self.d, self._n(pod))(f"setcompactionthroughput {whole}")
        self.calls.append((self.now_s, f"setcompactionthroughput {whole} {pod}"))
        return float(whole)


# -- CQL at QUORUM, inside the namespace -------------------------------------------------------
PROBE = r"""
import json, sys
from cassandra import ConsistencyLevel
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import SimpleStatement
from elastore.lab.cassandra.cql import cluster_for, value_for

hosts, cmd, first, count = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cluster = cluster_for(hosts)
s = cluster.connect()
try:
    if cmd == "create":
        s.execute("CREATE KEYSPACE IF NOT EXISTS probe WITH replication = "
                  "{'class': 'SimpleStrategy', 'replication_factor': 2}")
        s.execute("CREATE TABLE IF NOT EXISTS probe.kv (k bigint PRIMARY KEY, v blob)")
        out = {}
    elif cmd == "write":
        ins = s.prepare("INSERT INTO probe.kv (k, v) VALUES (?, ?)")
        ins.consistency_level = ConsistencyLevel.QUORUM
        keys = list(range(first, first + count))
        res = execute_concurrent_with_args(s, ins, [(k, value_for(11, k, 1024)) for k in keys],
                                           concurrency=16, raise_on_first_error=False)
        acked, errors = [], {}
        for k, (ok, got) in zip(keys, res):
            if ok:
                acked.append(k)
            else:
                errors[type(got).__name__] = errors.get(type(got).__name__, 0) + 1
        out = {"acked": acked, "errors": errors}
    else:  # read: every row at CL ALL, and whether its value is the one written
        st = SimpleStatement("SELECT k, v FROM probe.kv", fetch_size=500,
                             consistency_level=ConsistencyLevel.ALL)
        rows = {int(r.k): bytes(r.v) == value_for(11, int(r.k), 1024)
                for r in s.execute(st, timeout=120)}
        out = {"intact": sorted(k for k, good in rows.items() if good),
               "corrupt": sorted(k for k, good in rows.items() if not good)}
    print(json.dumps(out), flush=True)
finally:
    cluster.shutdown()
"""


def _probe(d: Path, hosts: list[str], cmd: str, first: int = 0, count: int = 0
           ) -> dict[str, Any]:
    res = subprocess.run(netns.command(_state(d).netns, [
        sys.executable, "-c", PROBE, ",".join(hosts), cmd, str(first), str(count)]),
        capture_output=True, text=True, timeout=300, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"probe {cmd} failed: {res.stderr.strip()[-800:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


# -- what the store shows ----------------------------------------------------------------------
def _tokens(d: Path, via: int) -> dict[str, dict[str, Any]]:
    """address -> its tokens and the states its rows show in ``nodetool ring`` on ``via``
    (a joining node's bootstrap tokens are listed, state Joining)."""
    out: dict[str, dict[str, Any]] = {}
    for row in parse_ring(_nodetool(d, via)("ring")):
        e = out.setdefault(row.address, {"tokens": set(), "states": set()})
        e["tokens"].add(row.token)
        e["states"].add(f"{row.status}/{row.state}")
    return out


def _status_of(d: Path, via: int, ip: str) -> str:
    """``ip``'s state (UN, UJ, DJ, ...) in ``nodetool status`` on ``via``; "absent"."""
    for n in parse_status(_nodetool(d, via)("status")):
        if n.address == ip:
            return n.state
    return "absent"


def _survivors(d: Path, ip: str) -> tuple[str, str]:
    """``ip``'s state as node 1 and node 2 show it ("unreadable" when one does not
    answer: a busy machine)."""
    def one(n: int) -> str:
        try:
            return _status_of(d, n, ip)
        except ElastoreError:
            return "unreadable"

    return one(1), one(2)


_GOSSIP_EP = re.compile(r"^\S*/(\d+\.\d+\.\d+\.\d+)(?::\d+)?\s*$")
_GOSSIP_STATUS = re.compile(r"^\s+STATUS(_WITH_PORT)?:\d+:([A-Za-z_]+)")


def _gossip(text: str) -> dict[str, str]:
    """address -> its gossip STATUS (STATUS_WITH_PORT when both), from ``gossipinfo``."""
    out: dict[str, str] = {}
    ep, with_port = None, False
    for line in text.splitlines():
        m = _GOSSIP_EP.match(line)
        if m:
            ep, with_port = m.group(1), False
            out[ep] = "?"
            continue
        s = _GOSSIP_STATUS.match(line)
        if s and ep is not None and (s.group(1) or not with_port):
            out[ep], with_port = s.group(2), with_port or bool(s.group(1))
    return out


@dataclass
class Kill:
    """One kill of node 3 while it bootstrapped (monotonic time)."""

    at: float
    pid: int
    sent_mib: float  # what node 1 had streamed to node 3 by then
    to_send_mib: float  # of this
    tokens: set[int]  # node 3's, Joining in node 1's ring right after
    plan: str  # the bootstrap stream's plan id in node 1's netstats
    stale_polls: int  # netstats polls before it that listed only an earlier, killed session
    netstats: str  # node 1's, that showed it


@dataclass
class Chaos:
    """What the chaos thread did and saw (monotonic times)."""

    kills: list[Kill] = field(default_factory=list)
    probe_dead: dict[str, Any] = field(default_factory=dict)
    dropped_at: float | None = None
    ring_dropped: dict[str, set[int]] = field(default_factory=dict)
    probe_dropped: dict[str, Any] = field(default_factory=dict)
    rejoined_at: float | None = None
    seen: list[tuple[float, str, str]] = field(default_factory=list)  # (t, node 1's, node 2's)
    error: str | None = None

    @property
    def killed_at(self) -> float | None:
        return self.kills[0].at if self.kills else None


_PLAN = re.compile(r"^(\S[^\n]*?) ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                   r"[0-9a-f]{12})[ \t]*$", re.M)


def _bootstrap_sessions(netstats: str) -> dict[str, StreamProgress]:
    """plan id -> its progress, for each Bootstrap session ``netstats`` lists (NetStats
    prints "<description> <planId>" above each session's peers)."""
    heads = list(_PLAN.finditer(netstats))
    out: dict[str, StreamProgress] = {}
    for i, m in enumerate(heads):
        if m.group(1).strip() == "Bootstrap":
            body = netstats[m.end():heads[i + 1].start() if i + 1 < len(heads) else None]
            out[m.group(2)] = stream_progress(body)
    return out


BOOTSTRAP_BEGUN = "JOINING: Starting to bootstrap"


def _bootstraps_begun(d: Path) -> int:
    """How many times node 3 has begun a bootstrap, by its own log (one file across its
    restarts): a file read, where a ``netstats`` poll costs a JVM."""
    node = next((x for x in _state(d).nodes if x.n == 3), None)
    try:
        text = (Path(node.root) / "logs" / "system.log").read_text() if node else ""
    except OSError:
        return 0
    return text.count(BOOTSTRAP_BEGUN)


def _kill_while_streaming(d: Path, pod: JoiningPod, ip: str, stop: threading.Event,
                          killed: set[str]) -> Kill | None:
    """SIGKILL node 3 once node 1's ``netstats`` shows part of its bootstrap stream sent (a
    bootstrapping Cassandra 5.0.4 answers no nodetool itself: "Server is not initialized
    yet"); its tokens are then read Joining in node 1's ring. None if the test stopped.

    Node 1's ``netstats`` is polled only once node 3's log says this bootstrap (the
    ``len(killed) + 1``-th) has begun: before it there is no stream to see, and a boot
    takes 10-15 s of polls, each a nodetool JVM (~0.65 core-s). If the log never says so
    within 60 s of the container's start, the polls begin anyway.

    Only a session whose plan is not in ``killed`` counts: node 1 may still list the stream
    of a bootstrap killed before, with its bytes sent so far (a CI run killed the restarted
    node on such a listing before it had announced its new bootstrap: by then the survivors
    had dropped the first, and node 1's ring had no row for node 3)."""
    end = time.monotonic() + 300
    stale = 0
    while True:
        assert time.monotonic() < end, f"node 3's bootstrap was never seen streaming (its " \
                                       f"pod: {pod.exits}; polls that listed only a killed " \
                                       f"bootstrap's session: {stale})"
        assert not pod.ready.is_set(), "node 3 joined before it was seen streaming"
        if _bootstraps_begun(d) <= len(killed) and \
                time.monotonic() - pod.started_at < 60:
            if stop.wait(0.5):
                return None
            continue
        try:
            text = _nodetool(d, 1)("netstats")
        except ElastoreError:
            text = ""  # a busy node: again
        sessions = _bootstrap_sessions(text)
        stale += bool(sessions) and set(sessions) <= killed
        # well inside the stream: a kill seconds before its end can land after the node has
        # finished its bootstrap (seen once: it then restarts straight into NORMAL)
        live = [(plan, got) for plan, got in sessions.items() if plan not in killed
                and 0 < got.sent_bytes < KILL_BEFORE * got.send_bytes]
        if live:
            plan, got = live[0]
            pid = lab.kill_node(3, d=d)
            at = time.monotonic()
            # its bootstrap tokens stay in the survivors' ring until they drop it (30 s here).
            # Their liveness column may read Up, Down or "?" (in neither of the failure
            # detector's lists yet: CI saw "?/Joining" right after a kill); the state is what
            # this test is about, and it must be Joining on every row
            ring = _tokens(d, 1).get(ip, {})
            states = ring.get("states") or set()
            assert states and {s.split("/")[-1] for s in states} == {"Joining"}, \
                (ring, f"killed {at - pod.started_at:.1f} s after its container started, on "
                       f"plan {plan}", text)
            assert {s.split("/")[0] for s in states} <= {"Up", "Down", "?"}, ring
            return Kill(at, pid, got.sent_bytes / MIB, got.send_bytes / MIB,
                        set(ring["tokens"]), plan, stale, text)
        if stop.wait(0.5):
            return None


def _chaos(d: Path, port: ChaosPort, ch: Chaos, stop: threading.Event) -> None:
    """Kill node 3 while it streams; its pod restarts it (the kubelet), and the retried
    bootstrap is killed too; this time the pod stays down until the survivors have dropped
    the dead joining endpoint; then it comes back; watch until the survivors see it UN."""
    try:
        while port.joining is None or not any(x.n == 3 for x in _state(d).nodes):
            if stop.wait(0.5):
                return
        pod = port.joining
        st = _state(d)
        ip = next(x.spec.ip for x in st.nodes if x.n == 3)
        first = _kill_while_streaming(d, pod, ip, stop, set())
        if first is None:
            return
        ch.kills.append(first)
        while not pod.restarted_at:  # the kubelet's restart, before the survivors drop it
            if stop.wait(0.5):
                return
        pod.hold.set()  # from now on the pod stays down until it is let go
        again = _kill_while_streaming(d, pod, ip, stop, {first.plan})
        if again is None:
            return
        ch.kills.append(again)
        for n in (1, 2):  # the last bootstrap streams at Cassandra's default
            lab.set_stream_throughput(n, FAST_MIBPS, d=d)
        old = [x.spec.ip for x in st.nodes if x.n in (1, 2)]

        def probe_dead() -> None:  # beside the watch: a write may wait out its timeout
            try:
                ch.probe_dead = _probe(d, old, "write", 0, PROBE_KEYS)
            except ElastoreError as exc:
                ch.error = f"the probe while node 3 was dead: {exc}"

        probing = threading.Thread(target=probe_dead, daemon=True)
        probing.start()
        end = time.monotonic() + 180
        # a survivor drops a silent joining endpoint after FAT_CLIENT_S of silence, which
        # began at the kill at the latest: reading their rings before then (two nodetool
        # JVMs a look) cannot see it dropped
        if stop.wait(max(0.0, again.at + FAT_CLIENT_S - 5.0 - time.monotonic())):
            return
        while True:
            seen = _survivors(d, ip)
            ch.seen.append((time.monotonic() - first.at, *seen))
            if seen == ("absent", "absent"):
                ch.dropped_at = time.monotonic()
                break
            assert time.monotonic() < end, f"the survivors still list node 3: {ch.seen}"
            if stop.wait(2.0):
                return
        ch.ring_dropped = {a: e["tokens"] for a, e in _tokens(d, 1).items()}
        probing.join(timeout=300)
        ch.probe_dropped = _probe(d, old, "write", PROBE_KEYS, PROBE_KEYS)
        pod.restart.set()
        end = time.monotonic() + 420
        # the survivors can see node 3 UN only once it is UN in its own status, which is
        # when its pod turns ready (restart_node waits for that): their rings are read from
        # then on, not while it boots and bootstraps
        while not pod.ready.is_set() and time.monotonic() < end and not stop.wait(1.0):
            pass
        while True:
            last = stop.is_set()  # the test is over: one more look (it may have been Done)
            seen = _survivors(d, ip)
            ch.seen.append((time.monotonic() - first.at, *seen))
            if seen == ("UN", "UN"):
                ch.rejoined_at = time.monotonic()
                break
            if last:
                break
            assert time.monotonic() < end, f"node 3 never rejoined: {ch.seen[-5:]}, " \
                                           f"its pod: {pod.exits}"
            stop.wait(2.0)
    except BaseException as exc:  # said in the test's own thread
        ch.error = f"{type(exc).__name__}: {exc}"


@pytest.mark.lab
@pytest.mark.slow
def test_chaos_a_joining_node_killed_during_bootstrap(cluster: Path) -> None:
    t_start = time.monotonic()
    d = cluster
    st = _state(d)
    assert [x.n for x in st.nodes] == [1, 2]
    old_ips = [x.spec.ip for x in st.nodes]
    lab.cql(st, "alter-system-rf", "2")
    written = lab.cql(st, "write", "ks", str(ROWS), str(VALUE_BYTES), "7", "2")
    _probe(d, old_ips, "create")
    before = {a: e["tokens"] for a, e in _tokens(d, 1).items()}
    assert set(before) == set(old_ips) and all(len(t) == 16 for t in before.values()), before
    for n in (1, 2):  # node 3's first bootstrap streams slowly enough to be caught
        lab.set_stream_throughput(n, SLOW_MIBPS, d=d)

    port = ChaosPort(d)
    spec = {"target": {"name": "db", "replicationFactor": 2}, "replicas": {"min": 2, "max": 3},
            "slo": {"latencyMs": 30}, "mode": "Enforce", "controlPeriod": "60s",
            "prediction": {"method": "persistence", "horizon": "60s", "step": "60s"},
            "planner": {"mode": "Window"}, "scaleDown": {"stabilizationSeconds": 0},
            "migration": {"nodeOverheadSeconds": 0, "maxMiBps": 4},
            "capacityModel": {"learn": False},
            "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}}}
    policies = MemoryPolicies.of("shop", "orders", spec)
    policies.body["metadata"]["annotations"] = {PAUSED_REPLICAS_ANNOTATION: "3"}
    metrics = TraceMetrics(lambda t: 10.0, 0.95, lambda: GIB, -7200.0, 1e9)
    ms = ModelSet.load(builtin_model("placeholder"))
    t0 = time.monotonic()
    port.now_s = 0.0
    runner = Runner("shop", "orders", policies, port, lambda _spec: ms,
                    clock=lambda: port.now_s, source=lambda _spec, _ns: metrics)
    ch, stop = Chaos(), threading.Event()
    chaos = threading.Thread(target=_chaos, args=(d, port, ch, stop), daemon=True)
    chaos.start()
    phases: list[tuple[float, str]] = []
    said_while_dead: set[str] = set()
    tick_errors: list[str] = []
    scaled_at: float | None = None
    done_at: float | None = None
    try:
        end = time.monotonic() + 900
        while time.monotonic() < end and ch.error is None:
            port.now_s = time.monotonic() - t0  # the operator's clock: real seconds
            try:
                runner.tick()
            except ElastoreError as exc:  # the store did not answer: kopf retries the tick
                tick_errors.append(f"{port.now_s:.0f} s: {str(exc)[:200]}")
            if scaled_at is None and port.calls:
                scaled_at = time.monotonic()
            op = policies.status.get("operation") or {}
            if op.get("phase") and (not phases or phases[-1][1] != op["phase"]):
                phases.append((round(port.now_s, 1), op["phase"]))
            # node 3 killed, and its pod not ready again (its node not UN in its own status)
            dead = ch.killed_at is not None and port.joining is not None and \
                not port.joining.ready.is_set()
            if dead:
                said_while_dead.add(f"{op.get('phase')}: {op.get('message')}")
            said = [c for _, c in port.calls]
            # never twice, never a decommission, no cleanup before node 3 is back
            assert said.count("scale 3") <= 1 and not any(
                c.startswith("decommission") for c in said), said
            if scaled_at is not None and not op:
                done_at = time.monotonic()
                ip3 = next(x.spec.ip for x in _state(d).nodes if x.n == 3)
                now = _survivors(d, ip3)
                assert ch.killed_at is not None and now == ("UN", "UN"), \
                    f"the scale-out was reported done while node 3 is {now} on the " \
                    f"survivors: {phases}, {policies.events[-5:]}, before: {ch.seen[-5:]}"
                break
            if dead:
                assert not any(c.startswith("cleanup") for c in said), (said, ch.seen)
            time.sleep(2.0)
    finally:
        stop.set()
        if port.joining is not None:
            port.joining.cancel.set()  # no restart once the test is over
        chaos.join(timeout=60)
    assert ch.error is None, ch.error
    calls = [(round(t, 1), c) for t, c in port.calls]
    print("phases:", phases, "\ncalls:", calls, "\nthe survivors' view of node 3 "
          "(s after the first kill, node 1, node 2):",
          [(round(t, 1), a, b) for t, a, b in ch.seen],
          "\nthe status while node 3 was down:", sorted(said_while_dead),
          "\nnode 3's pod:", port.joining.exits if port.joining else None,
          "\nticks that failed:", tick_errors)
    assert done_at is not None, (phases, policies.status)
    assert len(ch.kills) == 2 and ch.dropped_at is not None and \
        ch.rejoined_at is not None and port.joining is not None
    first, again = ch.kills
    pod = port.joining
    assert all(0 < k.sent_mib < k.to_send_mib for k in ch.kills)
    # the kubelet's restart came before the survivors dropped the endpoint (as it does with
    # Cassandra's 5-min default: their logs say they dropped it once, after the second
    # kill), and that bootstrap ran, at the same tokens
    assert len(pod.restarted_at) == 2, (pod.restarted_at, pod.exits)
    assert len(first.tokens) == 16 and again.tokens == first.tokens, (first, again)
    # the operator: one scale, no decommission, each old node cleaned once, Done, never Stuck
    assert [c for _, c in calls if c.startswith(("scale", "decommission", "cleanup"))] == \
        ["scale 3", "cleanup db-0", "cleanup db-1"], calls
    reasons = [r for r, _, _ in policies.events]
    assert "ScaleOutDone" in reasons and "OperationStuck" not in reasons, reasons
    assert said_while_dead and all(s.startswith("Scaling: waiting for db-2 to be ready")
                                   for s in said_while_dead), said_while_dead
    # while node 3 was dead: acknowledged QUORUM writes only (counted, read back below); once
    # the survivors dropped it, no pending replica is left: every write is acknowledged
    dead_acked, dropped_acked = ch.probe_dead["acked"], ch.probe_dropped["acked"]
    assert len(dropped_acked) == PROBE_KEYS, ch.probe_dropped
    # the survivors dropped the dead joining endpoint: the ring is the one before the step
    assert ch.ring_dropped == before, (ch.ring_dropped, before)
    # Cassandra retried the bootstrap on each restart, and said why the survivors dropped it
    new = next(x for x in _state(d).nodes if x.n == 3)
    log3 = (Path(new.root) / "logs" / "system.log").read_text()
    assert log3.count("Detected previous bootstrap failure; retrying") == 2
    for x in _state(d).nodes:
        if x.n in (1, 2):  # each survivor dropped it, saying why: once per death at most
            # (a survivor drops it after 30 s of silence; on a loaded machine the kubelet's
            # restart after the first kill came later than that on one survivor, which then
            # dropped it twice: a fresh-clone run)
            text = (Path(x.root) / "logs" / "system.log").read_text()
            drops = re.findall(rf"FatClient /{re.escape(new.spec.ip)}(?::7000)? has been "
                               r"silent for \d+ms", text)
            assert 1 <= len(drops) <= len(ch.kills), (x.n, drops)
    # the ring now: three nodes, one token set each, the old nodes' unchanged, all Up/Normal
    after = _tokens(d, 1)
    assert set(after) == {*old_ips, new.spec.ip}, after
    assert all(e["states"] == {"Up/Normal"} for e in after.values()), after
    for ip in old_ips:
        assert after[ip]["tokens"] == before[ip]
    assert after[new.spec.ip]["tokens"] == first.tokens, \
        "a retried bootstrap took a second token set: the first attempt's streamed data " \
        "stays on node 3, which no cleanup covers"
    for n in (1, 2, 3):  # every node's own view: three nodes, all UN
        seen = {x.address: x.state for x in parse_status(_nodetool(d, n)("status"))}
        assert seen == dict.fromkeys([*old_ips, new.spec.ip], "UN"), (n, seen)
    gossip = _gossip(_nodetool(d, 1)("gossipinfo"))
    assert gossip == dict.fromkeys([*old_ips, new.spec.ip], "NORMAL"), gossip
    # nothing lost: every row written before, and every acknowledged QUORUM write, at CL ALL
    assert lab.cql(_state(d), "verify", "ks") == written
    read = _probe(d, [*old_ips, new.spec.ip], "read")
    assert not read["corrupt"], read["corrupt"]
    missing = sorted(set(dead_acked + dropped_acked) - set(read["intact"]))
    assert not missing, missing
    print("node 1's netstats at the first kill:\n" + first.netstats)
    k1, k2, back = first.at, again.at, pod.restarted_at[-1]
    print(f"node 3 killed (pid {first.pid}) {k1 - (scaled_at or k1):.1f} s after the scale, "
          f"node 1 having sent it {first.sent_mib:.1f} of {first.to_send_mib:.1f} MiB; "
          f"restarted by its pod {pod.restarted_at[0] - k1:.1f} s later and killed again "
          f"(pid {again.pid}) {k2 - k1:.1f} s after the first kill, {again.sent_mib:.1f} of "
          f"{again.to_send_mib:.1f} MiB sent on a new plan ({again.stale_polls} netstats "
          f"poll(s) before it listed only the killed bootstrap's session); QUORUM writes "
          f"while it was down: "
          f"{len(dead_acked)} of {PROBE_KEYS} acknowledged ({ch.probe_dead['errors']}); the "
          f"survivors dropped its joining endpoint {ch.dropped_at - k2:.1f} s after the second "
          f"kill; restarted {back - k2:.1f} s after it; joined (UN on both survivors) "
          f"{ch.rejoined_at - back:.1f} s after that restart; recovery from the first kill: "
          f"joined {ch.rejoined_at - k1:.1f} s, operation Done {done_at - k1:.1f} s; the test "
          f"{time.monotonic() - t_start:.0f} s")


def test_chaos_a_scale_out_whose_node_never_joins_ends_stuck_saying_what_to_do() -> None:
    """The other way the lab test's operation can end: node 3 never comes back (its pod
    crash-loops, or is gone). Past the deadline the step is Stuck, and says that the node
    owns no data, how Cassandra drops it (measured above) and how to give up; nothing more
    is done, even if the node joins after all."""
    from dataclasses import replace

    from elastore.stores import operation
    from elastore.stores.cassandra import machine

    op = operation.start("ScaleOut", "db", 2, 0.0, 60.0, "data")
    gone = machine.Facts(spec_replicas=3, ready_replicas=2, pod_exists=True, pod_ready=False,
                         node_mode=None)
    op, effect, done = machine.advance(op, gone, 10.0)
    assert (op.phase, effect, done) == ("Scaling", "none", False), op
    assert op.deadline_s is not None
    stuck, effect, done = machine.advance(op, gone, op.deadline_s + 1)
    assert (stuck.phase, effect, done) == ("Stuck", "stuck", False)
    assert "past its deadline" in stuck.message and "in phase Scaling" in stuck.message
    assert "db-2 has not joined the ring, so it owns no data" in stuck.message
    assert "silent 10 x ring_delay" in stuck.message
    assert "lower the replicas to 2 and delete PVC data-db-2" in stuck.message
    assert stuck.message.endswith("then abort this operation")
    joined = replace(gone, ready_replicas=3, pod_ready=True, node_mode="NORMAL")
    assert machine.advance(stuck, joined, op.deadline_s + 60) == (stuck, "none", False)
    # in Joining (a pod ready while its node joins) the same; before the replicas went up
    # (nothing started) no more than the deadline
    joining = replace(op, phase="Joining")
    late, _, _ = machine.advance(joining, replace(gone, pod_ready=True, node_mode="JOINING"),
                                 op.deadline_s + 1)
    assert late.phase == "Stuck" and "has not joined the ring" in late.message
    early = machine.advance(op, replace(gone, spec_replicas=2), op.deadline_s + 1)[0]
    assert early.phase == "Stuck" and "has not joined" not in early.message
    assert early.message.endswith("no further step")
