"""The node agent (`elastore agent run`) against a real API server, shaping real veths.

A node's pod network is emulated with network namespaces (tests/testbed/podnet.py): kwok
runs the StatefulSet's pods on the API server, and each pod gets a namespace with the IP kwok
gave it, behind a veth whose host end the host namespace routes the pod IP to. The agent runs
as a process with the chart's ServiceAccount (exactly its RBAC), reads the policy's
``status.bandwidth`` (patched here as the operator writes it) and the pods on its node, and
shapes the host ends. Every check reads the kernel's state; the rates on the wire are in
test_agent_units.py and benchmarks/agent_targets.py.

The control plane, the pod network and the chart are the module's; every test starts from
the same state, whatever ran before it (the ``shaped`` fixture): the policy in Enforce, its
split (30/69 Mbit/s) for cass-0..2, cass at 3 replicas and opted in, and an agent running
that has shaped exactly that. So each test passes when selected alone. How soon the agent
acts and how far an index moves are figures (tests/figures.py); the deadlines of what must
happen eventually are :data:`DEADLINE_S`, and a missed one prints the agent's log.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from figures import FigureBook
from k8s_support import policy, start_control_plane, statefulset, wait_until
from testbed.agentbed import Bed
from testbed.k8s import kubeconfig
from testbed.podnet import PodNet

pytestmark = [pytest.mark.k8s, pytest.mark.lab]
REPO = Path(__file__).resolve().parent.parent
NS = "shop"
RELEASE = "bwk"
AGENT_SA = f"{RELEASE}-elastore-agent"
PERIOD_S = 1.0
#: how long an outcome that must happen (a split in force, a pod unshaped) may take, seconds:
#: the agent acts within a period or two on a quiet machine
DEADLINE_S = 60.0
#: how far a co-runner on the pod's CPU lifts its index, at least (measured 0.36-0.40
#: beside 2 stress-ng workers, 0.04 alone): a figure
RISE = 0.15
#: an Enforce policy (the agent shapes nothing for Recommend); no operator runs here, so its
#: metrics source is never read
ENFORCE = {"mode": "Enforce", "metrics": {"prometheus": {"url": "http://127.0.0.1:9"}}}
CASS = ["cass-0", "cass-1", "cass-2"]
#: every test's starting split, and the agent's tc state for it: per pod, HTBs on the veth
#: and the ifb, one redirect
BASE = {p: (30.0, 69.0) for p in CASS}
BASE_COUNTS = {"qdiscs": 9, "classes": 24, "filters": 39, "ifbs": 3}


def until(bed: Bed, what: str, check: Callable[[], Any], timeout_s: float = DEADLINE_S
          ) -> float:
    """Seconds until ``check`` holds; after ``timeout_s`` a failure that tells what the
    kernel and the agent showed."""
    t0 = time.monotonic()
    try:
        wait_until(what, check, timeout_s, every_s=0.1)
    except AssertionError as exc:
        agent = bed.agent.tail()[-2000:] if bed.agent is not None else "(no agent)"
        raise AssertionError(f"{exc}; shaped {bed.shaped()}, tc state "
                             f"{bed.inventory().counts()}; agent log: {agent}") from exc
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    from testbed.k8s import ensure_helm

    root = tmp_path_factory.mktemp("agent")
    cp = start_control_plane(root / "k8s")
    net = PodNet(f"k{os.getpid() % 100000}")
    try:
        net.up()
    except Exception as exc:
        cp.stop()
        pytest.fail(f"cannot build the pod network namespaces: {exc}")
    try:
        cp.kubectl("create", "namespace", NS)
        res = subprocess.run([str(ensure_helm(print)), "install", RELEASE,
                              str(REPO / "charts" / "elastore"), "--namespace", RELEASE,
                              "--create-namespace", "--kubeconfig", str(cp.kubeconfig),
                              "--set", "replicas=0", "--set", "agent.enabled=true",
                              # cluster-wide, asked for: a test below revokes its binding
                              "--set", "watchAllNamespaces=true",
                              "--set", f"peering.name={RELEASE}"],
                             capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"helm install: {res.stderr}"
        token = cp.kubectl("create", "token", AGENT_SA, "-n", RELEASE, "--duration=4h"
                           ).stdout.strip()
        kc = kubeconfig(cp.server, cp.root / "pki", root / "agent.kubeconfig", token=token,
                        user=AGENT_SA)
        cp.kubectl("apply", "-f", "-", stdin=statefulset("cass", NS, 3))
        cp.kubectl("apply", "-f", "-", stdin=statefulset("web", NS, 1, managed=False))
        cp.kubectl("apply", "-f", "-", stdin=policy("orders", NS, "cass", **ENFORCE))
        b = Bed(cp, net, kc, root, NS, PERIOD_S)
        b.wire_pods("cass", 3)
        b.wire_pods("web", 1)
        yield b
    finally:
        if "b" in locals() and b.agent is not None:
            b.agent.stop(signal.SIGKILL)
        # whatever a failed test left: the namespaces go, and the tc state with them
        net.down()
        cp.stop()


def _restore(bed: Bed) -> None:
    """The API side of every test's starting state, whatever a test before it left: the
    policy (re-created if gone, back in Enforce), cass opted in at 3 replicas with their
    veths, and the base split."""
    bed.cp.kubectl("apply", "-f", "-", stdin=policy("orders", NS, "cass", **ENFORCE))
    bed.cp.kubectl("label", "statefulset", "cass", "-n", NS, "elastore.io/managed=true",
                   "--overwrite")
    bed.cp.kubectl("scale", "statefulset", "cass", "-n", NS, "--replicas=3")
    bed.wire_pods("cass", 3)
    bed.set_split(CASS, client=30, storage=69)


@pytest.fixture
def shaped(bed: Bed) -> Bed:
    """The starting state, and an agent running (started if none is) that has shaped it."""
    _restore(bed)
    if bed.agent is None or bed.agent.proc.poll() is not None:
        bed.start_agent()
    until(bed, "the agent to shape the starting split (and only it)",
          lambda: bed.shaped() == BASE and bed.inventory().counts() == BASE_COUNTS)
    return bed


NOTHING = {"qdiscs": 0, "classes": 0, "filters": 0, "ifbs": 0}


@pytest.fixture
def no_agent(bed: Bed) -> Bed:
    """The starting state on the API, no agent running and no tc state of one: an agent
    that runs is stopped with SIGTERM (it removes its tc state); what a killed one left is
    adopted by a new one, stopped the same way."""
    _restore(bed)
    if bed.agent is None or bed.agent.proc.poll() is not None:
        if bed.inventory().counts() == NOTHING:
            return bed
        bed.start_agent()
        until(bed, "an agent to adopt a killed one's tc state", lambda: bed.shaped() == BASE)
    assert bed.agent is not None
    bed.agent.stop(signal.SIGTERM)
    return bed


# ------------------------------------------------------------------------------------------
def test_agent_shapes_the_policys_pods_in_both_directions_and_nothing_else(
        no_agent: Bed) -> None:
    bed = no_agent
    assert bed.inventory().counts() == NOTHING  # a node the agent has not shaped yet
    agent = bed.start_agent()
    took = until(bed, "the agent to shape cass-0..2", lambda: bed.shaped() == BASE)
    print(f"shaped 3 pods {took:.1f} s after the agent started")
    inv = bed.inventory()
    # per pod: HTBs on the veth and the ifb, one redirect; web-0 (no policy) untouched
    assert inv.counts() == BASE_COUNTS
    web = bed.veth_index("web-0")
    assert web not in inv.htb and web not in inv.redirects
    text = agent.metrics()
    assert 'elastore_agent_pods_shaped 3.0' in text
    assert ('elastore_agent_class_rate_mbit{class="client",direction="from_pod",'
            'namespace="shop",pod="cass-1"} 30.0') in text
    assert 'elastore_agent_class_bytes_total{class="storage",direction="to_pod"' in text


#: a busy store process: 16 ms of work, 4 ms idle (0.8 of a CPU), for ``secs``
STANDIN = """
import time
end = time.monotonic() + {secs}
x = 0
while time.monotonic() < end:
    t = time.monotonic()
    while time.monotonic() - t < 0.016:
        x += 1
    time.sleep(0.004)
"""


def _series(text: str, name: str, pod: str) -> list[tuple[str, float]]:
    """(labels, value) of each sample of ``name`` for ``pod`` in an exposition."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") and f'pod="{pod}"' in line:
            labels, value = line.rsplit(" ", 1)
            out.append((labels, float(value)))
    return out


def test_agent_measures_a_store_pods_interference_in_its_own_cgroup(
        shaped: Bed, figure: FigureBook) -> None:
    """Hubbub-scale's probe in the real agent, on the API server's pods: cass-1 runs in the
    kubelet's cgroupfs layout (kubepods/pod<its UID>), so its index is its own (cgroup
    PSI), alone, beside a real stress-ng co-runner on its CPU, and after it (how far the
    index rises and falls back: figures). cass-0 has no cgroup on this node: its index is
    the node's and says so (NoCgroup), never a missing value read as 0; web-0 (no policy) is
    not measured at all."""
    import shutil
    import sys

    from elastore.lab import cgroups
    from elastore.lab.corunners import CoRunner

    bed = shaped
    if shutil.which("stress-ng") is None:
        pytest.fail("stress-ng is not installed ('make lab-deps' installs it from Debian)")
    if cgroups.v2_root() is None:
        pytest.fail("no cgroup v2 hierarchy: the probe reads the pod's PSI there")
    agent = bed.agent
    assert agent is not None
    uid = bed.cp.kubectl("get", "pod", "cass-1", "-n", NS, "-o",
                         "jsonpath={.metadata.uid}").stdout.strip()
    root = cgroups.v2_root()
    ours = root is not None and not (root / "kubepods").exists()  # else a kubelet's
    group = cgroups.pod_group(uid).create()
    cpu = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", STANDIN.format(secs=120)],
                            preexec_fn=lambda: (group.add(os.getpid(), cpu=False),
                                                os.sched_setaffinity(0, {cpu})))

    seen: list[Any] = []

    def own_index() -> tuple[float] | None:
        text = agent.metrics()
        scope = _series(text, "elastore_interference_pod_cgroup", "cass-1")
        idx = _series(text, "elastore_interference_index", "cass-1")
        seen[:] = [scope, idx]
        return (idx[0][1],) if scope and scope[0][1] == 1.0 and idx else None

    def index_of(what: str) -> float:
        """cass-1's index in the current state: the median of what the agent publishes over
        one window (3 s, read every 0.5 s), from a whole window after the state began. Each
        reading must be the pod's own cgroup's."""
        time.sleep(4.0)
        vals: list[float] = []
        for _ in range(7):
            got = own_index()
            assert got is not None, (f"{what}: cass-1's index is not its own cgroup's: series "
                                     f"{seen}; agent log {agent.tail()[-1500:]}")
            vals.append(got[0])
            time.sleep(0.5)
        print(f"{what}: cass-1's indices {[round(v, 2) for v in vals]}")
        return statistics.median(vals)

    try:
        # the agent looked for cass-1's cgroup when it started and did not find it: a UID
        # not found is looked for again at most every 30 s (RESCAN_S), as a kubelet may
        # create a pod's cgroup after the API shows the pod
        t0 = time.monotonic()
        wait_until("the agent to find cass-1's new cgroup", own_index, 30 + DEADLINE_S,
                   every_s=0.5)
        print(f"cass-1's cgroup found {time.monotonic() - t0:.0f} s after it was created")
        assert group.pids() == [proc.pid]  # the stand-in is what that cgroup holds
        before = index_of("alone")
        with CoRunner("cpu", 2, [cpu]) as runner:
            assert runner.proc is not None and runner.proc.pid in runner.group.pids()
            during = index_of("beside a co-runner")
        assert not runner.group.pids()  # the co-runner is gone
        after = index_of("after")
        text = agent.metrics()
    finally:
        proc.kill()
        proc.wait()
        group.remove()
        if ours:
            cgroups.remove_tree("kubepods")
    print(f"cass-1 (own cgroup) index: {before:.2f} alone, {during:.2f} beside a co-runner, "
          f"{after:.2f} after")
    figure("index_alone", before, "<=", 0.5, "cass-1's own index, no co-runner",
           source="was index_when(alone, v < 0.5)")
    figure("index_rise", during - before, ">=", RISE,
           "cass-1's index beside 2 stress-ng cpu workers less alone",
           source=f"was assert during > before + {RISE}")
    figure("index_fall", during - after, ">=", RISE,
           "cass-1's index beside the co-runner less after it",
           source=f"was assert after < during - {RISE}")
    # cass-0 has no cgroup here: the node's index, labelled as such
    scope0 = _series(text, "elastore_interference_pod_cgroup", "cass-0")
    assert len(scope0) == 1 and scope0[0][1] == 0.0 and 'reason="NoCgroup"' in scope0[0][0], \
        scope0
    node = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines()
            if x.startswith("elastore_interference_node_index{")]
    idx0 = _series(text, "elastore_interference_index", "cass-0")
    assert node and idx0 and idx0[0][1] == node[0], (idx0, node)
    assert not _series(text, "elastore_interference_index", "web-0")
    assert not _series(text, "elastore_interference_pod_cgroup", "web-0")


def test_agent_a_change_of_split_is_in_force_within_two_periods(
        shaped: Bed, figure: FigureBook) -> None:
    bed = shaped
    bed.set_split(CASS, client=50, storage=49)
    took = until(bed, "the new split", lambda: bed.shaped() == {p: (50.0, 49.0) for p in CASS})
    figure("split_change_s", took, "<=", 2 * PERIOD_S,
           "from the status patched to the new split on every veth and ifb, s",
           source="the test's name: in force within two periods")


def test_agent_after_sigkill_a_restarted_agent_adopts_and_corrects(shaped: Bed) -> None:
    bed = shaped
    assert bed.agent is not None
    assert bed.agent.stop(signal.SIGKILL) == -signal.SIGKILL
    before = bed.inventory().counts()
    assert before == BASE_COUNTS  # a killed agent leaves its state behind
    # while it is down: the split changes, and cass-2 leaves the policy
    bed.set_split(["cass-0", "cass-1"], client=20, storage=79)
    bed.start_agent()
    want = {"cass-0": (20.0, 79.0), "cass-1": (20.0, 79.0)}
    took = until(bed, "the restarted agent to match", lambda: bed.shaped() == want
                 and bed.inventory().counts()["ifbs"] == 2)
    print(f"restarted agent matched the desired state after {took:.2f} s")
    inv = bed.inventory()
    for htb in inv.htb.values():  # no duplicate classes or filters anywhere
        assert len(htb.rates_mbit) == 4 and len(htb.filters) == len(set(htb.filters)) == 6
    assert inv.counts() == {"qdiscs": 6, "classes": 16, "filters": 26, "ifbs": 2}


def _scale_out_to_4(bed: Bed) -> None:
    bed.cp.kubectl("scale", "statefulset", "cass", "-n", NS, "--replicas=4")
    bed.wire_pods("cass", 4)
    bed.set_split([*CASS, "cass-3"], client=20, storage=79)
    until(bed, "cass-3 shaped beside cass-0..2", lambda: set(bed.shaped()) ==
          {*CASS, "cass-3"})


def test_agent_a_new_pod_of_a_scale_out_is_shaped(shaped: Bed) -> None:
    _scale_out_to_4(shaped)
    assert shaped.inventory().counts()["ifbs"] == 4


def test_agent_a_pod_gone_loses_its_shaping(shaped: Bed) -> None:
    bed = shaped
    _scale_out_to_4(bed)  # cass-3, shaped
    bed.cp.kubectl("scale", "statefulset", "cass", "-n", NS, "--replicas=3")
    # the pod object goes (the status still names it, as until the operator's next period)
    until(bed, "cass-3 unshaped", lambda: set(bed.shaped()) == set(CASS))
    assert bed.inventory().counts()["ifbs"] == 3


def test_agent_keeps_the_shaping_when_the_api_cannot_be_read(shaped: Bed) -> None:
    bed = shaped
    assert bed.agent is not None
    binding = f"{RELEASE}-elastore-agent"
    saved = bed.cp.kubectl("get", "clusterrolebinding", binding, "-o", "json").stdout
    bed.cp.kubectl("delete", "clusterrolebinding", binding)
    try:
        def denied() -> bool:
            return 'elastore_agent_reconcile_errors_total{reason="ApiUnreadable"}' in \
                bed.agent.metrics()  # type: ignore[union-attr]
        until(bed, "the agent to be refused", denied)
        before = bed.shaped()
        time.sleep(4 * PERIOD_S)
        assert bed.shaped() == before == BASE  # nothing unshaped on no data
    finally:
        doc = json.loads(saved)
        for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            doc["metadata"].pop(k, None)
        bed.cp.kubectl("apply", "-f", "-", stdin=json.dumps(doc))


def test_tenant_a_forged_split_shapes_no_other_pod_and_nothing_of_a_refused_target(
        shaped: Bed) -> None:
    """Issue 35, finding 1, on the real API server (pods owned by the controller-manager's
    StatefulSets): a status written by the policy's author names web-0 (the unmanaged web
    StatefulSet's pod), then asks for 2 kbit/s; then the target loses its opt-in label."""
    bed = shaped
    assert bed.agent is not None

    def counted(reason: str) -> bool:
        return (f'elastore_agent_reconcile_errors_total{{reason="{reason}"}}'
                in bed.agent.metrics())  # type: ignore[union-attr]

    bed.set_split([*CASS, "web-0"], client=20, storage=79)
    until(bed, "web-0 refused as not the target's", lambda: counted("NotTargetPod"))
    time.sleep(2 * PERIOD_S)
    assert set(bed.shaped()) == set(CASS), bed.shaped()
    assert bed.veth_index("web-0") not in bed.inventory().htb
    bed.set_split(CASS, client=0.002, storage=99)
    until(bed, "2 kbit/s refused: nothing of the policy shaped",
          lambda: counted("SplitOutOfBounds") and bed.shaped() == {})
    bed.set_split(CASS, client=20, storage=79)
    until(bed, "shaped again", lambda: len(bed.shaped()) == 3)
    bed.cp.kubectl("label", "statefulset", "cass", "-n", NS, "elastore.io/managed-")
    try:
        until(bed, "an opted-out target unshaped", lambda: counted("NotOptedIn") and
              bed.shaped() == {})
    finally:
        bed.cp.kubectl("label", "statefulset", "cass", "-n", NS, "elastore.io/managed=true")
    until(bed, "opted in again: shaped", lambda: len(bed.shaped()) == 3)


def test_agent_a_policy_in_recommend_mode_changes_no_tc(shaped: Bed) -> None:
    bed = shaped
    bed.cp.kubectl("patch", "elasticpolicy", "orders", "-n", NS, "--type=merge", "-p",
                   json.dumps({"spec": {"mode": "Recommend"}}))
    try:
        until(bed, "Recommend: nothing shaped",
              lambda: bed.inventory().counts()["qdiscs"] == 0)
    finally:
        bed.cp.kubectl("patch", "elasticpolicy", "orders", "-n", NS, "--type=merge", "-p",
                       json.dumps({"spec": {"mode": "Enforce"}}))
    until(bed, "Enforce again: shaped", lambda: len(bed.shaped()) == 3)


def test_agent_a_policy_gone_and_sigterm_leave_nothing_of_ours(shaped: Bed) -> None:
    bed = shaped
    assert bed.agent is not None
    bed.cp.kubectl("delete", "elasticpolicy", "orders", "-n", NS, "--wait=false")
    until(bed, "everything unshaped", lambda: bed.inventory().counts() == NOTHING)
    bed.cp.kubectl("apply", "-f", "-", stdin=policy("orders", NS, "cass", **ENFORCE))
    bed.set_split(CASS, client=30, storage=69)
    until(bed, "shaped again", lambda: len(bed.shaped()) == 3)
    assert bed.agent.stop(signal.SIGTERM) == 0, bed.agent.tail()
    assert bed.inventory().counts() == NOTHING
    assert "removing the agent's tc state" in bed.agent.tail()
