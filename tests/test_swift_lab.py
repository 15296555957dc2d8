"""The Swift lab on Debian's real Swift (issue 20): a proxy and storage nodes in a network
namespace of the test's own, the load generator through the proxy, the StatsD metrics in
Prometheus, and the ring actuator (add a node, drain one, remove it) with nothing lost:
every object's bytes are checked (MD5) and the container's listing counted after each
change.

The tests are the stages of one run, in order, on the module's one lab: ``load`` replays the
workload (its objects are the data every later check reads back); ``add-node`` writes the
bulk objects and adds node 4 (needs ``load``); an undrained node is refused (stands alone:
node 2 is there from the start); ``drain`` drains node 1 and removes it, leaving nodes 2-4
(needs ``load`` and ``add-node``); ``load run --swift-url`` on a container of its own
(stands alone; last, so that its objects count in no one else's replicas). Selected alone,
a stage that needs another fails at once and names it (tests/stages.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from k8s_support import trace_workload
from stages import Stages

from elastore.lab import netns
from elastore.lab.swift import lab as swift

pytestmark = [pytest.mark.lab]
NS = f"elastore-test-swift-{os.getpid()}"
STAGES = Stages()


@dataclass
class Lab:
    d: Path
    root: Path
    wl: Path

    def cli(self, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "elastore", *args],
                              env=dict(os.environ, ELASTORE_LAB_DIR=str(self.d)),
                              capture_output=True, text=True, timeout=timeout_s, check=False)

    @property
    def state(self) -> swift.SwiftLabState:
        st = swift.SwiftLabState.load(self.d)
        assert st is not None
        return st

    def prom(self, query: str) -> list[dict[str, object]]:
        body = swift.prometheus_get(self.state, "/api/v1/query?query="
                                    + urllib.parse.quote(query))
        assert body is not None, "the lab's Prometheus does not answer"
        return list(json.loads(body)["data"]["result"])

    def verify(self, bulk: int = 0) -> dict[str, object]:
        res = self.cli("load", "verify", str(self.wl), "--bulk", str(bulk))
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
        return dict(json.loads(res.stdout.strip().splitlines()[-1]))

    def object_bytes(self) -> dict[int, int]:
        from elastore.actuators.swiftring import scan_device

        return {nd.n: sum(scan_device(nd.devices / nd.device, "object").values())
                for nd in self.state.nodes}

    def object_replicas(self) -> dict[int, int]:
        """Object replicas (``.data`` files) on each node's device."""
        return {nd.n: sum(1 for _ in (nd.devices / nd.device / "objects").rglob("*.data"))
                for nd in self.state.nodes}


@pytest.fixture(scope="module")
def lab_(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("swift")
    d = root / "lab"
    # a day and a bit of the trace at 2 s per hour (~1 min), peak 60 req/s; its 631 pages
    # are the objects (10 KiB each)
    wl, _ = trace_workload(shared_dir, root / "wl.json", peak=60, hour_s=2)
    try:
        try:
            swift.up(3, 2, d=d, namespace=NS)
        except Exception as exc:
            pytest.fail(f"the Swift lab did not come up: {exc}")
        yield Lab(d, root, wl)
    finally:
        st = swift.SwiftLabState.load(d)
        swift.down(d)
        assert not netns.exists(NS)
        if st is not None:  # every process it started is gone
            left = subprocess.run(["pgrep", "-f", st.root], capture_output=True, text=True,
                                  check=False).stdout.split()
            assert not left, f"processes of the lab still running: {left}"


def test_the_load_replays_through_the_proxy_with_metrics_per_node(lab_: Lab) -> None:
    out = lab_.root / "load.csv"
    res = lab_.cli("load", "run", str(lab_.wl), "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    print(res.stdout.strip()[-300:])
    import csv

    rows = list(csv.DictReader(out.open()))
    assert rows and all(int(r["errors"]) == 0 for r in rows), rows[:5]
    sched = sum(float(r["scheduled_rps"]) for r in rows)
    got = sum(float(r["achieved_rps"]) for r in rows)
    assert got == pytest.approx(sched, rel=0.02), (got, sched)
    # the servers' own StatsD timers reached Prometheus, per storage node
    per_node = lab_.prom('sum by (node) (swift_server_request_seconds_count'
                         '{server="object", verb="GET"})')
    assert sorted(str(x["metric"]["node"]) for x in per_node) == ["1", "2", "3"], per_node
    proxy = lab_.prom('sum(swift_proxy_server_request_seconds_count'
                      '{type="object", verb="GET", status="200"})')
    assert proxy and float(proxy[0]["value"][1]) > 0, proxy  # type: ignore[index]
    # and the client's latency (the load generator's, as for Cassandra)
    # (the generator has exited: its series are stale now, but were scraped meanwhile)
    assert lab_.prom("max_over_time(elastore_load_latency_seconds_count[5m])"), \
        "no load generator series"
    v = lab_.verify()
    assert v["ok"] == v["keys"] == v["listed"], v
    STAGES.done("load")


BULK, BULK_KIB = 40, 1024  # 40 MiB, twice stored: data for the replicators to move
STORAGE_MBIT = 8.0  # each node's replication class, capped


def test_a_node_added_to_the_rings_receives_its_share_and_nothing_is_lost(lab_: Lab) -> None:
    STAGES.needs("load")  # the workload's objects, read back at the end
    res = lab_.cli("load", "bulk", "--objects", str(BULK), "--kib", str(BULK_KIB))
    assert res.returncode == 0, res.stderr[-1500:]
    print(res.stdout.strip())
    # tc on what each node sends: object traffic (port 6200) and replication (rsync, port
    # 873) in classes of their own, replication capped (the lab's bindsrc shim gives each
    # node's connections its own source address)
    from elastore.actuators.tc import HtbShaper

    shaper = HtbShaper(lab_.state.netns, total_mbit=10_000, match="egress",
                       client_port=swift.OBJECT_PORT, storage_port=swift.RSYNC_PORT)
    ips = [swift.node_ip(n) for n in range(1, 5)]
    shaper.install(ips, client_mbit=1000, storage_mbit=STORAGE_MBIT)
    storage = {ip: shaper.nodes[ip].storage for ip in ips}
    try:
        before = shaper.class_bytes()
        res = lab_.cli("lab", "add-node", "--timeout", "600")
        after = shaper.class_bytes()
    finally:
        shaper.remove()
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-2000:]
    assert "replication finished" in res.stdout, res.stdout
    print(res.stdout.strip(), res.stderr.strip()[-600:])
    secs = float(res.stdout.split("replication finished in ", 1)[1].split()[0])
    sent = {ip: after.get(storage[ip], 0) - before.get(storage[ip], 0) for ip in ips[:3]}
    st = lab_.state
    assert [nd.n for nd in st.nodes] == [1, 2, 3, 4]
    assert all(m.done for m in swift.progress(st).values())
    share = lab_.object_bytes()
    replicas = lab_.object_replicas()
    print(f"object bytes per node after adding node 4: {share}; replicas: {replicas}")
    # 4 equal weights: a quarter of the partitions each, so about a quarter of the ~1340
    # object replicas (binomial: +-1.2 % at one sigma; bytes vary far more, 40 of the
    # objects being 1 MiB)
    total = sum(replicas.values())
    assert 0.18 * total <= replicas[4] <= 0.32 * total, replicas
    # what node 4 received left nodes 1-3 through their replication classes, and the cap
    # bounded how fast: the busiest sender needed at least its bytes over the cap
    mib = {ip: round(b / 2**20, 2) for ip, b in sent.items()}
    floor_s = max(sent.values()) * 8 / (STORAGE_MBIT * 1e6)
    print(f"replication: {share[4] / 2**20:.1f} MiB landed on node 4 in {secs:.0f} s; "
          f"rsync class bytes sent per node (MiB): {mib}; the busiest sender needed >= "
          f"{floor_s:.1f} s at {STORAGE_MBIT:g} Mbit/s")
    assert sum(sent.values()) >= 0.9 * share[4], (sent, share)
    assert secs >= 0.8 * floor_s, (secs, floor_s)
    v = lab_.verify(bulk=BULK)
    assert v["ok"] == v["keys"] == v["listed"], v
    assert v["bulk"] == {"objects": BULK, "ok": BULK, "listed": BULK, "bad": []}, v
    STAGES.done("add-node")


def test_an_undrained_node_is_not_removed(lab_: Lab) -> None:
    res = lab_.cli("lab", "remove-node", "2")
    assert res.returncode != 0
    assert "not drained" in res.stderr, res.stderr[-800:]
    assert 2 in [nd.n for nd in lab_.state.nodes]


def test_a_drained_node_hands_everything_over_then_leaves(lab_: Lab) -> None:
    STAGES.needs("load", "add-node")  # their objects and node 4
    res = lab_.cli("lab", "drain", "1", "--timeout", "600")
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-2000:]
    assert lab_.object_bytes()[1] == 0, lab_.object_bytes()
    pids = dict(lab_.state.node(1).pids)
    res = lab_.cli("lab", "remove-node", "1")
    assert res.returncode == 0, res.stderr[-1500:]
    assert [nd.n for nd in lab_.state.nodes] == [2, 3, 4]
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", name
    v = lab_.verify(bulk=BULK)
    assert v["ok"] == v["keys"] == v["listed"], v
    assert v["bulk"] == {"objects": BULK, "ok": BULK, "listed": BULK, "bad": []}, v


def test_load_run_drives_a_swift_named_by_its_storage_url(lab_: Lab) -> None:
    """`load run --swift-url` (a user's own Swift: no lab state), from inside the lab's
    namespace as a client host: the replay goes into the container it is told, with the
    token sent; a proxy that does not answer is one clear line. Last in the module: its
    objects would count in the others' replicas."""
    out = lab_.root / "yours.csv"
    env = {k: v for k, v in os.environ.items() if k != "ELASTORE_LAB_DIR"}
    env.update(ELASTORE_LAB_DIR=str(lab_.root / "no-lab-here"), ELASTORE_SWIFT_TOKEN="t0k")

    def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(netns.command(NS, [sys.executable, "-m", "elastore", "load",
                                                 "run", str(lab_.wl), "--swift-url", url,
                                                 "--keyspace", "yours", *args]),
                              env=env, capture_output=True, text=True, timeout=600,
                              check=False)

    url = f"http://{swift.PROXY_ADDR}/v1/{swift.ACCOUNT}"
    res = run(url, "--windows", "0:20", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"driving Swift at {url} (container yours, with a token)" in res.stderr
    import csv

    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 20 and all(int(r["errors"]) == 0 for r in rows), rows[:5]
    assert sum(float(r["achieved_rps"]) for r in rows) > 0
    # the objects are in the container it was told, through the real proxy
    get = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
    listing = subprocess.run(netns.command(NS, [sys.executable, "-c", get,
                                                f"{url}/yours?limit=3"]),
                             capture_output=True, text=True, timeout=60, check=False)
    assert listing.returncode == 0 and listing.stdout.split()[:1] == ["k0"], listing
    res = run("http://127.0.0.1:9/v1/AUTH_x", "--out", str(lab_.root / "none.csv"))
    assert res.returncode != 0 and "the Swift proxy at 127.0.0.1:9 does not answer" in \
        res.stderr and "Traceback" not in res.stderr, res.stderr[-1000:]
