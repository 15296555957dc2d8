"""``spec.skew`` on the real API server (issue 38, "see the skew"): the operator process, a
real Prometheus scraping one exporter per pod, the API server's validation of the field,
and ``status.skew``, its Event and the gauges.

Two targets of three kwok pods each (StatefulSet ``cass``, RF 2):

* ``skew``: the pods serve 300, 100 and 100 requests/s (cass-0 also slower): the status
  shows each pod's load and the imbalance 1.8, the hot ranges and the advice; the gauges
  carry the same;
* ``unread``: cass-2 has no exporter: it is listed as unread (no load, never 0), the
  imbalance is marked partial, nothing is advised and no gauge is published for it.

A third target, ``auto`` (loads 330, 100, 100; ``skew.mode: Auto`` in Enforce), has a
single-token ring in the nodetool stand-in (testbed.nodetool_standin: its tokens, its
``move``, a profile of hot keys in cass-0's range): the operator moves a token, the record
goes to ``status.skew.rebalance`` through the API server's schema, and when the load falls
the move is undone.

No Cassandra runs here: ``nodetool`` in the pods (kwok's exec) replays what Cassandra 5.0.4
printed on the lab for ``info -T``, ``ring`` and ``profileload``
(``tests/data/skew-5.0.4/``, pod cass-k as lab node k+1), and logs every call, so the test
also sees the sample taken once in its interval, not once a period.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from figures import FigureBook
from k8s_support import (
    NODETOOL_STANDIN,
    CassandraMetrics,
    OperatorProcess,
    Prometheus,
    events,
    get,
    standin_exec_config,
    start_control_plane,
    statefulset,
    wait_until,
)
from testbed.k8s import ControlPlane

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "skew-5.0.4"
SKEW, UNREAD = "skew", "unread"
#: requests/s per pod (cass-0, cass-1, cass-2); None: no exporter for that pod
LOADS: dict[str, tuple[float | None, ...]] = {SKEW: (300.0, 100.0, 100.0),
                                              UNREAD: (200.0, 100.0, None)}
#: Auto's target: cass-0 at 330 requests/s is 85 % of what a node serves within the 30 ms
#: SLO on the placeholder model (~390 requests/s at 95 % reads): above the 75 % trigger,
#: 1.9 x the mean. replicas.min = max = 3: the plan's uncertain forecast (a wide prior at
#: first) wanted a fourth node, and a node step rightly holds the undo (it waits for it)
AUTO = "auto"
AUTO_LOADS = (330.0, 100.0, 100.0)
#: the stand-in's single-token ring: three even tokens (cass-k is node k)
AUTO_TOKENS = {0: -6148914691236517206, 1: 0, 2: 6148914691236517205}

#: what kwok runs for ``nodetool`` in a pod: the lab's recorded output for its node
REPLAY = '''import os, sys, time
from pathlib import Path
data, node = Path(os.environ["SKEW_DATA"]), int(os.environ["SKEW_NODE"])
argv = sys.argv[1:]
with open(os.environ["SKEW_LOG"], "a") as f:
    f.write(f"{node} {' '.join(argv)}\\n")
if argv[:2] == ["info", "-T"]:
    out = data / f"node{node}-info-T.txt"
elif argv[:1] == ["ring"]:
    out = data / "node1-ring.txt"
elif argv[:1] == ["profileload"]:
    time.sleep(int(argv[-1]) / 1000)
    out = data / f"node{node}-profileload.txt"
else:
    print(f"replay: unsupported {' '.join(argv)}", file=sys.stderr)
    sys.exit(1)
sys.stdout.write(out.read_text())
'''


@dataclass
class Bed:
    cp: ControlPlane
    op: OperatorProcess
    replay: Path
    logs: dict[str, Path]
    standin: Path  # the auto target's stand-in directory
    auto: list[CassandraMetrics]  # its pods' exporters


def _auto_profile() -> dict[str, Any]:
    """Hot bigint keys whose first replica is cass-0 (reads there; writes on both
    replicas): the keys 0..4000 hashed on the stand-in's ring, the first ten of cass-0's."""
    from elastore.stores.cassandra.partitioner import murmur3_token

    lo, hi = AUTO_TOKENS[2], AUTO_TOKENS[0]  # cass-0's range wraps: (t2, t0]
    mine = [k for k in range(4000)
            if (t := murmur3_token(k.to_bytes(8, "big", signed=True))) > lo or t <= hi]
    keys = {str(k): [120 - 10 * i, 6] for i, k in enumerate(mine[:10])}
    return {"rf": 2, "keys": keys}


def _exec_config(replay_logs: dict[str, Path]) -> str:
    docs = [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
             "metadata": {"name": f"cass-{k}", "namespace": ns},
             "spec": {"execs": [{"containers": ["cassandra"], "local": {
                 "workDir": str(REPO),
                 "envs": [{"name": "SKEW_NODE", "value": str(k + 1)},
                          {"name": "SKEW_DATA", "value": str(DATA)},
                          {"name": "SKEW_LOG", "value": str(log)}]}}]}}
            for ns, log in replay_logs.items() for k in range(3)]
    return "\n---\n".join(json.dumps(d) for d in docs)


def _auto_policy(url: str) -> str:
    return json.dumps({
        "apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
        "metadata": {"name": "orders", "namespace": AUTO},
        "spec": {"target": {"name": "cass", "replicationFactor": 2,
                            "nodetool": [sys.executable, str(NODETOOL_STANDIN)]},
                 "mode": "Enforce",
                 "replicas": {"min": 3, "max": 3}, "slo": {"latencyMs": 30},
                 "controlPeriod": "10s", "prediction": {"horizon": "10s", "step": "2s"},
                 "capacityModel": {"learn": False},
                 "metrics": {"prometheus": {"url": url, "rateWindow": "10s"}},
                 "skew": {"mode": "Auto", "readSpread": "primary", "sampleDuration": "1s",
                          "sampleInterval": "1h"}}})


def _policy(ns: str, url: str, replay: Path, **skew: Any) -> str:
    return json.dumps({
        "apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
        "metadata": {"name": "orders", "namespace": ns},
        "spec": {"target": {"name": "cass", "replicationFactor": 2,
                            "nodetool": [sys.executable, str(replay)]},
                 "replicas": {"min": 2, "max": 6}, "slo": {"latencyMs": 100},
                 "controlPeriod": "10s", "prediction": {"horizon": "10s", "step": "2s"},
                 "capacityModel": {"learn": False},
                 "metrics": {"prometheus": {"url": url, "rateWindow": "10s"}},
                 "skew": {"sampleDuration": "1s", "sampleInterval": "1h", **skew}}})


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("skew")
    replay = root / "replay.py"
    replay.write_text(REPLAY)
    logs = {ns: root / f"calls-{ns}.log" for ns in LOADS}
    standin = root / "standin"
    (standin / AUTO).mkdir(parents=True)
    (standin / AUTO / "tokens.json").write_text(json.dumps(AUTO_TOKENS))
    (standin / AUTO / "profile.json").write_text(json.dumps(_auto_profile()))
    cp = start_control_plane(root / "k8s", exec_config=_exec_config(logs) + "\n---\n" +
                             standin_exec_config([AUTO], "cass", 3, standin))
    exporters: list[CassandraMetrics] = []
    auto: list[CassandraMetrics] = []
    prom: Prometheus | None = None
    op: OperatorProcess | None = None
    try:
        static = ""
        for ns, loads in LOADS.items():
            cp.kubectl("create", "namespace", ns)
            cp.kubectl("apply", "-f", "-", stdin=statefulset("cass", ns, 3))
            for k, rps in enumerate(loads):
                if rps is None:
                    continue
                # each exporter is one pod's (its own series name it cass-0: the target's
                # labels say which pod it is, as Kubernetes discovery's would); its p95 grows
                # with its load
                m = CassandraMetrics(rps, clusters={(ns, "cass"): (1, 1)},
                                     latency_ms=lambda r: 2.0 + r / 25.0)
                m.SPARE = 0
                exporters.append(m)
                static += (f"      - targets: ['{m.target}']\n"
                           f"        labels: {{namespace: {ns}, pod: cass-{k}}}\n")
        cp.kubectl("create", "namespace", AUTO)
        cp.kubectl("apply", "-f", "-", stdin=statefulset("cass", AUTO, 3))
        for k, rps in enumerate(AUTO_LOADS):
            m = CassandraMetrics(rps, clusters={(AUTO, "cass"): (1, 1)},
                                 latency_ms=lambda r: 2.0 + r / 50.0)
            m.SPARE = 0
            exporters.append(m)
            auto.append(m)
            static += (f"      - targets: ['{m.target}']\n"
                       f"        labels: {{namespace: {AUTO}, pod: cass-{k}}}\n")
        prom = Prometheus(root / "prom", [], static_configs=static)
        for ns in (*LOADS, AUTO):
            wait_until(f"3 pods in {ns}", lambda ns=ns: get(cp, "statefulset", "cass", ns)
                       .get("status", {}).get("readyReplicas") == 3, 60)
        op = OperatorProcess(cp.kubeconfig, root / "op.log",
                             args=("--nodetool", f"{sys.executable} {replay}",
                                   "--nodetool", f"{sys.executable} {NODETOOL_STANDIN}"))
        for ns in LOADS:
            cp.kubectl("apply", "-f", "-", stdin=_policy(ns, prom.url, replay))
        cp.kubectl("apply", "-f", "-", stdin=_auto_policy(prom.url))
        yield Bed(cp, op, replay, logs, standin / AUTO, auto)
    finally:
        if op is not None:
            op.stop()
        if prom is not None:
            prom.close()
        for m in exporters:
            m.close()
        cp.stop()


def _skew(bed: Bed, ns: str, sampled: bool = False) -> dict[str, Any]:
    """``status.skew`` once a decision published it with every pod that has an exporter
    read (their series appear within a scrape or two) and, with ``sampled``, the sample
    (taken in the background from the first period, used from a later one)."""
    want = [f"cass-{k}" for k, v in enumerate(LOADS[ns]) if v is not None]

    def ready() -> dict[str, Any] | None:
        sk = (get(bed.cp, "elasticpolicy", "orders", ns).get("status") or {}).get("skew") or {}
        read = [p["name"] for p in sk.get("pods") or [] if p["read"]]
        return sk if read == want and (sk.get("sampledEpoch") or not sampled) else None

    return dict(wait_until(f"status.skew in {ns}", ready, 120, every_s=1.0))


def _gauge(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _gauges_match_status(bed: Bed, ns: str) -> tuple[dict[str, Any], str]:
    """A status.skew and the operator's metrics that carry the same per-pod loads: the
    gauges are set in the period that writes the status (a moment before its patch), so a
    pair read across a period's edge may differ; they agree for the rest of the period."""
    def same() -> tuple[dict[str, Any], str] | None:
        sk = (get(bed.cp, "elasticpolicy", "orders", ns).get("status") or {}).get("skew") or {}
        text = bed.op.metrics()
        for p in sk.get("pods") or []:
            got = _gauge(text, "elastore_node_load_requests_per_second", namespace=ns,
                         policy="orders", pod=p["name"])
            if p["read"] != (got is not None) or (
                    got is not None and abs(got - p["loadRps"]) > 1e-3):
                return None
        return (sk, text) if sk.get("pods") else None

    pair: tuple[dict[str, Any], str] = wait_until(
        f"the gauges of {ns} carrying its status.skew", same, 60)
    return pair


def _loads_figures(figure: FigureBook, ns: str, sk: dict[str, Any]) -> None:
    """Each pod's read load against the exporter's set rate (a 10-s rate of a counter the
    exporter advances when it answers, stamped when Prometheus asked: 10-20 % on a busy
    machine), as figures."""
    loads = {p["name"]: p for p in sk["pods"]}
    for k, want in enumerate(LOADS[ns]):
        if want is None:
            continue
        got = loads[f"cass-{k}"]["loadRps"]
        figure(f"cass{k}_load_low", got, ">=", want * 0.85, f"cass-{k}'s loadRps in "
               f"status.skew, requests/s (set {want:g})", source="was approx(want, rel=0.15)")
        figure(f"cass{k}_load_high", got, "<=", want * 1.15, f"cass-{k}'s loadRps in "
               f"status.skew, requests/s (set {want:g})", source="was approx(want, rel=0.15)")


def test_skew_status_shows_each_pods_load_the_imbalance_hot_ranges_and_advice(
        bed: Bed, figure: FigureBook) -> None:
    sk = _skew(bed, SKEW, sampled=True)
    loads = {p["name"]: p for p in sk["pods"]}
    assert set(loads) == {"cass-0", "cass-1", "cass-2"} and sk["unread"] == []
    for k, want in enumerate(LOADS[SKEW]):
        p = loads[f"cass-{k}"]
        assert p["read"] is True and p["loadRps"] > 0, sk
        assert p["latencyMs"] == pytest.approx(2.0 + (want or 0) / 25.0, rel=0.15), sk
    _loads_figures(figure, SKEW, sk)
    # the imbalance is the busiest over the mean of the loads the status itself shows
    got = [loads[f"cass-{k}"]["loadRps"] for k in range(3)]
    assert sk["imbalance"] == pytest.approx(max(got) / (sum(got) / 3), rel=1e-3, abs=1e-3), sk
    assert sk["partial"] is False
    figure("imbalance_low", sk["imbalance"], ">=", 1.8 * 0.9, "status.skew.imbalance, busiest "
           "over mean (set 300/100/100: 1.8)", source="was approx(1.8, rel=0.1)")
    figure("imbalance_high", sk["imbalance"], "<=", 1.8 * 1.1, "status.skew.imbalance, busiest "
           "over mean (set 300/100/100: 1.8)", source="was approx(1.8, rel=0.1)")
    assert max(got) == got[0], sk  # cass-0, at three times the others' load, the busiest
    assert sk["busiestPod"] == "cass-0" and sk["mode"] == "Advise" and sk["acting"] is False
    # the replayed sample: the ring of the three pods, key 0's range cass-0's, its reads
    # served by the primaries (the recorded client does not shuffle)
    assert sk["hotRanges"] and sk["hotRanges"][0]["owner"] == "cass-0", sk["hotRanges"]
    assert "ks.kv:0" in sk["hotRanges"][0]["topKeys"]
    assert {(t["table"], t["keyType"]) for t in sk["tables"]} == {("ks.kv", "bigint"),
                                                                 ("ks.pages", "text")}
    assert sk["primaryReadShare"] > 0.95 and sk["sampledEpoch"] is not None
    # the advice: shuffling (measured) and speculative retry (cass-0 is slower), the gaps
    assert any("shuffle_replicas=True" in a for a in sk["advice"]), sk["advice"]
    assert any("speculative_retry" in a and "ks.kv" in a for a in sk["advice"]), sk["advice"]
    assert any("not readable through nodetool" in c for c in sk["cannotCheck"])
    said = [e for e in events(bed.cp, SKEW, "orders") if e["reason"] == "SkewAdvice"]
    # (an Event each time the advice changed: a period before the sample came back may
    # have advised speculative retry alone)
    assert any("shuffle_replicas=True" in e["message"] for e in said), said
    # periods go on, one sample: each pod's profileload ran once in the hour's interval
    decided = get(bed.cp, "elasticpolicy", "orders", SKEW)["status"]["lastDecision"]["epoch"]
    wait_until("another period", lambda: get(bed.cp, "elasticpolicy", "orders", SKEW)[
        "status"]["lastDecision"]["epoch"] > decided, 30)
    # the planner sized for the busiest pod (1.8 x the mean: above the 1.25 threshold).
    # Whether that bought more nodes than the mean alone would (binding "skew") rests on a
    # forecast of a rate busy cores jitter (a CPU-hog run read "load"): a figure
    st = get(bed.cp, "elasticpolicy", "orders", SKEW)["status"]
    assert st["binding"] in ("load", "skew"), st.get("lastDecision")
    figure("skew_binds", 1.0 if st["binding"] == "skew" else 0.0, ">=", 1.0,
           "1 if the plan sized for the busiest pod wanted more nodes than the mean alone "
           "(status.binding skew)", source="was assert st['binding'] == 'skew'")
    assert st["skew"]["planning"].startswith("sized for the busiest node"), st["skew"]
    calls = bed.logs[SKEW].read_text().splitlines()
    assert sorted(c.split()[0] for c in calls if " profileload " in f" {c} ") == \
        ["1", "2", "3"], calls
    # the gauges carry the status's own figures: each pod's load, and the imbalance
    sk, metrics = _gauges_match_status(bed, SKEW)
    assert _gauge(metrics, "elastore_skew_imbalance", namespace=SKEW, policy="orders") == \
        pytest.approx(sk["imbalance"], rel=1e-3, abs=1e-3), sk


def test_skew_a_pod_without_readings_is_unread_not_zero(bed: Bed, figure: FigureBook
                                                       ) -> None:
    sk = _skew(bed, UNREAD)
    loads = {p["name"]: p for p in sk["pods"]}
    # no load, latency or share at all (the operator writes null; the API server's merge
    # patch keeps no null): unknown, never 0
    assert loads["cass-2"] == {"name": "cass-2", "read": False}, loads
    assert loads["cass-0"]["loadRps"] > 0 and loads["cass-1"]["loadRps"] > 0, loads
    _loads_figures(figure, UNREAD, sk)
    assert "share" not in loads["cass-0"]  # no shares of a partial view
    assert sk["unread"] == ["cass-2"] and sk["partial"] is True
    # over the pods read: the busiest of the two over their mean
    got = [loads["cass-0"]["loadRps"], loads["cass-1"]["loadRps"]]
    assert sk["imbalance"] == pytest.approx(max(got) / (sum(got) / 2), rel=1e-3, abs=1e-3), sk
    figure("imbalance_low", sk["imbalance"], ">=", 200 / 150 * 0.9, "status.skew.imbalance "
           "over the two pods read (set 200/100: 1.33)", source="was approx(200/150, rel=0.1)")
    figure("imbalance_high", sk["imbalance"], "<=", 200 / 150 * 1.1, "status.skew.imbalance "
           "over the two pods read (set 200/100: 1.33)", source="was approx(200/150, rel=0.1)")
    assert sk["advice"] == [] and "1 of 3 pod(s) unread (cass-2)" in sk["message"]
    # the gauges: the status's loads of the pods read (cass-0's included), none for cass-2
    sk, metrics = _gauges_match_status(bed, UNREAD)
    assert _gauge(metrics, "elastore_node_load_requests_per_second", namespace=UNREAD,
                  pod="cass-0") is not None
    assert _gauge(metrics, "elastore_node_load_requests_per_second", namespace=UNREAD,
                  pod="cass-2") is None
    assert _gauge(metrics, "elastore_skew_imbalance", namespace=UNREAD) is None


INVALID = [
    ({"mode": "On"}, "spec.skew.mode: Unsupported value"),
    ({"maxMovePercent": 60}, "spec.skew.maxMovePercent"),
    ({"readSpread": "nearest"}, "spec.skew.readSpread: Unsupported value"),
    ({"stopPercent": 80}, "skew: revertPercent <= stopPercent <= triggerPercent must hold"),
    ({"triggerPercent": 50, "revertPercent": 30}, "revertPercent <= stopPercent <= "
                                                  "triggerPercent"),
    ({"imbalanceThreshold": 1}, "spec.skew.imbalanceThreshold"),
    ({"sampleDuration": "5m"}, "skew.sampleDuration must be between 1s and 1m"),
    ({"sampleEvery": "1h"}, 'unknown field "spec.skew.sampleEvery"'),
]


def test_skew_the_api_server_refuses_an_invalid_spec_skew(bed: Bed) -> None:
    ns = "skew-invalid"
    bed.cp.kubectl("create", "namespace", ns)
    for k, (bad, message) in enumerate(INVALID):
        doc = json.loads(_policy(ns, "http://127.0.0.1:9", bed.replay))
        doc["metadata"]["name"] = f"bad-{k}"
        doc["spec"]["skew"] = bad
        res = bed.cp.kubectl("apply", "-f", "-", stdin=json.dumps(doc), check=False)
        assert res.returncode != 0, f"{bad}: accepted"
        assert message in res.stderr, f"{bad}: {res.stderr}"
    listed = json.loads(bed.cp.kubectl("get", "elasticpolicies", "-n", ns, "-o", "json").stdout)
    assert listed["items"] == []
    # a valid one: accepted as written (absent fields stay absent: the defaults are the
    # parser's, not written into the object)
    doc = json.loads(_policy(ns, "http://127.0.0.1:9", bed.replay, mode="Auto",
                             stopPercent=50))
    bed.cp.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    stored = get(bed.cp, "elasticpolicy", "orders", ns)["spec"]["skew"]
    assert stored == {"mode": "Auto", "stopPercent": 50, "sampleDuration": "1s",
                      "sampleInterval": "1h"}


def _moves(bed: Bed) -> list[str]:
    return [line.split(" ", 2)[2] for line in (bed.standin / "calls.log").read_text()
            .splitlines() if line.split(" ", 2)[2].startswith("move")]


def test_skew_auto_moves_the_hot_pods_token_and_undoes_it_when_the_load_falls(
        bed: Bed) -> None:
    def rebalance() -> dict[str, Any]:
        sk = (get(bed.cp, "elasticpolicy", "orders", AUTO).get("status") or {}).get("skew")
        return dict(sk or {})

    def moved() -> dict[str, Any] | None:
        sk = rebalance()
        rec = sk.get("rebalance") or {}
        return sk if rec.get("moves") and not rec.get("underWay") else None

    def tokens() -> dict[int, int]:
        return {int(k): v for k, v in json.loads((bed.standin / "tokens.json").read_text())
                .items()}

    def settled() -> tuple[dict[str, Any], dict[int, int]] | None:
        """A record and the stand-in's tokens read between two equal reads of the record:
        while the pod stays hot the rule may move again (a CI run's status read showed
        cass-2's move while the tokens, read a moment later, held cass-0's too)."""
        sk = moved()
        now = tokens() if sk else None
        return (sk, now) if sk and now is not None and rebalance() == sk else None

    sk, now = wait_until("a move in place (status.skew.rebalance)", settled, 150,
                         every_s=1.0)
    assert sk["acting"] is True and sk["mode"] == "Auto", sk.get("message")
    moves = sk["rebalance"]["moves"]
    m = moves[0]
    # the record is the store's moves, in order: tokens as strings (beyond a double), each
    # from where the pod stood, the last one where the stand-in's pod stands now
    at = {j: str(t) for j, t in AUTO_TOKENS.items()}
    for mv in moves:
        j = int(mv["pod"].rsplit("-", 1)[1])
        assert mv["fromToken"] == at[j], (mv, moves)
        at[j] = mv["toToken"]
        assert 0 < mv["streamedPercent"] <= 5, mv
    assert {j: str(t) for j, t in now.items()} == at, (now, moves)
    assert sk["hysteresis"]["active"] is True and sk["hysteresis"]["smoothed"] >= 0.75
    # each move issued once, in the record's order
    assert _moves(bed) == [f"move -- {mv['toToken']}" for mv in moves]
    reasons = [e["reason"] for e in events(bed.cp, AUTO, "orders")]
    assert "SkewMoveStarted" in reasons and "SkewMoveDone" in reasons, reasons
    assert get(bed.cp, "statefulset", "cass", AUTO)["spec"]["replicas"] == 3
    # the burst passes: every pod at 20 requests/s, the busiest at 5 % of its capacity
    for exp in bed.auto:
        exp.rps = 20.0

    def undone() -> dict[str, Any] | None:
        sk = rebalance()
        rec = sk.get("rebalance") or {}
        return sk if rec.get("moves") == [] and not rec.get("underWay") else None

    sk = wait_until("every move undone", undone, 180, every_s=1.0)
    back = {int(k): v for k, v in json.loads((bed.standin / "tokens.json").read_text())
            .items()}
    assert back == AUTO_TOKENS
    # while the pod stayed hot (the load falls over a period or two) the rule may have
    # moved again, each move on a fresh sample; each is undone once, the last first
    issued = _moves(bed)
    made = len(issued) // 2
    assert len(issued) == 2 * made >= 2 and issued[0] == f"move -- {m['toToken']}", issued
    reasons = [e["reason"] for e in events(bed.cp, AUTO, "orders")]
    assert reasons.count("SkewMoveDone") == reasons.count("SkewRevertDone") == made, reasons
    assert sk["hysteresis"]["active"] is False


def test_skew_a_new_pods_token_goes_to_its_configmap_and_no_one_elses(bed: Bed) -> None:
    """The ConfigMap Auto writes a new pod's token to before a scale-out
    (``<sts>-elastore-tokens``, key the pod's name), on the real API server: created
    labelled, one key patched at a time, and a ConfigMap of that name without the label
    (someone else's) is not written."""
    from kubernetes import config as kconfig

    from elastore.actuators.k8s import KubeActuator
    from elastore.actuators.ports import TOKENS_LABEL, tokens_configmap
    from elastore.errors import ElastoreError

    port = KubeActuator(kconfig.new_client_from_config(config_file=str(bed.cp.kubeconfig)))
    ns, name = AUTO, tokens_configmap("cass")
    assert name == "cass-elastore-tokens" and port.pod_tokens_config(ns, name) is None
    port.set_pod_token(ns, name, "cass-3", str(-(2**63)))
    port.set_pod_token(ns, name, "cass-4", "77")
    port.set_pod_token(ns, name, "cass-3", "")  # emptied: that pod takes a token of its own
    assert port.pod_tokens_config(ns, name) == ({"cass-3": "", "cass-4": "77"}, True)
    assert get(bed.cp, "configmap", name, ns)["metadata"]["labels"][TOKENS_LABEL] == "true"
    bed.cp.kubectl("create", "configmap", "db-elastore-tokens", "-n", ns,
                   "--from-literal=db-0=5")
    with pytest.raises(ElastoreError, match="without the label"):
        port.set_pod_token(ns, "db-elastore-tokens", "db-1", "6")
    assert get(bed.cp, "configmap", "db-elastore-tokens", ns)["data"] == {"db-0": "5"}
