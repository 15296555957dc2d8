"""The skew view (issue 38), pure: nodetool's ring and hot-partition output as Cassandra
5.0.4 printed it (``tests/data/skew-5.0.4/``, recorded on the lab), Murmur3 tokens against
Cassandra's own, the mapping of hot keys to the ring, each pod's load and the imbalance
(an unread pod is never a 0), the advice and where it is given, ``spec.skew``'s parse, and
the gauges (absent where nothing was read)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from elastore.actuators.nodetool import (
    PartitionCount,
    PartitionProfile,
    parse_info_tokens,
    parse_profileload,
    profileload_args,
    ring_tokens,
)
from elastore.errors import ElastoreError
from elastore.operator import skew
from elastore.operator.metrics import NodeReading
from elastore.operator.spec import SpecError, parse
from elastore.operator.specfields import spec_schema
from elastore.operator.telemetry import OperatorMetrics
from elastore.stores.cassandra import skew as cassandra_skew
from elastore.stores.cassandra.partitioner import key_encodings, murmur3_token
from elastore.stores.swift import skew as swift_skew

DATA = Path(__file__).resolve().parent / "data" / "skew-5.0.4"
PODS = ["cass-0", "cass-1", "cass-2"]  # lab node k+1 stands for pod cass-k
MINIMAL: dict[str, Any] = {"target": {"name": "cass", "replicationFactor": 2},
                           "replicas": {"min": 2, "max": 9}, "slo": {"latencyMs": 50}}


def text(name: str) -> str:
    return (DATA / name).read_text()


def lab_tokens() -> dict[str, tuple[int, ...]]:
    return {f"cass-{k}": parse_info_tokens(text(f"node{k + 1}-info-T.txt")) for k in range(3)}


def lab_profiles() -> dict[str, PartitionProfile]:
    return {f"cass-{k}": parse_profileload(text(f"node{k + 1}-profileload.txt"))
            for k in range(3)}


def lab_sample(rf: int = 2, **kw: Any) -> skew.HotSample:
    args: dict[str, Any] = {"tokens": lab_tokens(),
                            "every": ring_tokens(text("node1-ring.txt")),
                            "profiles": lab_profiles()}
    args.update(kw)
    return cassandra_skew.map_sample(PODS, args["tokens"], args["every"], args["profiles"],
                                     rf, 1000.0, 3.0)


# -- nodetool's output, as recorded -------------------------------------------------------
def test_skew_profileload_parses_the_frequency_tables_and_skips_the_rest() -> None:
    p = parse_profileload(text("node1-profileload.txt"))
    assert p.reads[0] == PartitionCount("ks.kv", "0", 228)
    assert p.reads[1] == PartitionCount("ks.pages", "Page_7", 8)
    assert len(p.reads) == 12 and len(p.writes) == 4
    assert p.writes[0] == PartitionCount("ks.kv", "0", 40)
    # every sampler's sections (a query's text, mutation sizes, "Nothing recorded"): only
    # the two frequency tables are read
    every = parse_profileload(text("lab2-node2-profileload-all-samplers.txt"))
    assert (len(every.reads), len(every.writes)) == (10, 10)
    assert every.reads[0] == PartitionCount("ks.pages", "Page_0", 275)
    assert all(r.table in ("ks.kv", "ks.pages") for r in every.reads + every.writes)
    # toppartitions of one table prints the same tables
    top = parse_profileload(text("node1-toppartitions-ks-kv.txt"))
    assert top.reads[0] == PartitionCount("ks.kv", "0", 118) and len(top.writes) == 4
    # a sample without load: an empty table, not an error
    empty = parse_profileload("Frequency of reads by partition:\n"
                              "   Nothing recorded during sampling period...\n\n")
    assert empty == PartitionProfile((), ())
    with pytest.raises(ElastoreError, match="not profileload output"):
        parse_profileload(text("node1-info-T.txt"))


def test_skew_profileload_arguments_are_bounded() -> None:
    assert profileload_args(3000, 20) == ["profileload", "-a", "READS,WRITES", "-k", "20",
                                          "3000"]
    for ms, top in ((0, 20), (3000, 0), (3_600_001, 20)):
        with pytest.raises(ElastoreError):
            profileload_args(ms, top)


def test_skew_the_pods_tokens_are_the_rings() -> None:
    tokens = lab_tokens()
    assert all(len(t) == 16 for t in tokens.values())
    every = ring_tokens(text("node1-ring.txt"))
    assert set(every) == {"127.0.0.1", "127.0.0.2", "127.0.0.3"}
    for k in range(3):
        assert set(every[f"127.0.0.{k + 1}"]) == set(tokens[f"cass-{k}"])
    with pytest.raises(ElastoreError, match="without -T"):
        parse_info_tokens((DATA.parent / "nodetool-5.0.4" / "info.txt").read_text())


# -- Murmur3 ----------------------------------------------------------------------------------
def test_skew_murmur3_tokens_are_cassandras() -> None:
    """Every row's ``token()`` as Cassandra 5.0.4 computed it, for a bigint and a text key."""
    want = json.loads(text("tokens.json"))
    assert len(want["ks.kv"]) == 200 and len(want["ks.pages"]) == 50
    for key, token in want["ks.kv"].items():
        assert murmur3_token(key_encodings(key)["bigint"]) == token, key
    for key, token in want["ks.pages"].items():
        assert murmur3_token(key_encodings(key)["text"]) == token, key


def test_skew_murmur3_matches_the_drivers_on_any_bytes() -> None:
    """The DataStax driver's Murmur3 (the same sign-extended tail) on lengths 0..47."""
    from cassandra.murmur3 import murmur3

    rng = random.Random(38)
    for n in range(48):
        for _ in range(20):
            data = bytes(rng.randrange(256) for _ in range(n))
            assert murmur3_token(data) == murmur3(data), data.hex()


def test_skew_a_printed_key_is_encoded_as_each_type_it_could_be() -> None:
    assert set(key_encodings("42")) == {"bigint", "int", "text"}
    assert key_encodings("42")["int"] == b"\x00\x00\x00\x2a"
    assert set(key_encodings("5000000000")) == {"bigint", "text"}  # beyond an int
    assert set(key_encodings("Page_7")) == {"text"}
    assert set(key_encodings("0d7334e9-cf14-4025-8cbc-336c73d2f8e4")) == {"uuid", "text"}
    assert key_encodings("cafe")["blob"] == b"\xca\xfe"


# -- the sample mapped to the ring ------------------------------------------------------------
def test_skew_the_recorded_sample_maps_its_hot_keys_to_the_pods_that_served_them() -> None:
    s = lab_sample()
    assert s.ring is not None and s.ring.names == tuple(PODS) and s.notes == ()
    assert {(t.table, t.key_type, t.verified) for t in s.tables} == {
        ("ks.kv", "bigint", True), ("ks.pages", "text", True)}
    assert all(t.placed == t.keys for t in s.tables)  # every hot key on its replicas
    assert s.hot_table == "ks.kv"
    keys = s.keys
    assert keys is not None and keys.names is not None
    hottest = keys.names.index("ks.kv:0")
    assert int(keys.tokens[hottest]) == json.loads(text("tokens.json"))["ks.kv"]["0"]
    # 228 reads on cass-0 and 40 + 20 writes over the 2 replicas, in 3 s
    assert keys.rates_rps[hottest] == pytest.approx((228 + 60 / 2) / 3.0)
    # the recorded client is token-aware without shuffling: its reads hit the primaries
    assert s.primary_read_share is not None and s.primary_read_share > 0.95
    assert s.primary_reads > 500
    # key 0's range is cass-0's, which served all its reads
    view = skew.build(skew.SkewSettings(), skew.pod_loads(PODS, {
        p: NodeReading(50.0, 10.0, 2.0, None) for p in PODS}), 2, 0.85, 250.0, s)
    hot = skew.ranges(view)
    assert hot[0].owner == "cass-0" and hot[0].top_keys[0] == "ks.kv:0"
    assert hot[0].load_share > 0.3 and hot[0].data_share < 0.05
    assert len(hot) == skew.TOP_RANGES


def test_skew_at_rf_equal_to_the_pods_the_key_type_cannot_be_checked() -> None:
    s = lab_sample(rf=3)
    assert s.tables and not any(t.verified for t in s.tables)


def test_skew_a_ring_that_cannot_be_mapped_is_said_not_guessed() -> None:
    tokens = lab_tokens()
    del tokens["cass-2"]
    s = lab_sample(tokens=tokens)
    assert s.ring is None and s.keys is None
    assert any("no tokens from cass-2" in n for n in s.notes), s.notes
    # another datacentre's node in the ring: the pods' ranges would be wrong
    every = ring_tokens(text("node1-ring.txt"))
    every = {**every, "10.1.0.9": [12345]}
    s = lab_sample(every=every)
    assert s.ring is None and any("another datacentre" in n for n in s.notes), s.notes
    # a key that every pod served at RF 2 of 3 has no type whose replicas hold it: it
    # stays unmapped, and the table says so
    profiles = {p: PartitionProfile((*prof.reads, PartitionCount("ks.multi", "a:1", 50)),
                                    prof.writes) for p, prof in lab_profiles().items()}
    s = cassandra_skew.map_sample(PODS, lab_tokens(), None, profiles, 2, 0.0, 3.0)
    multi = next(t for t in s.tables if t.table == "ks.multi")
    assert (multi.key_type, multi.keys, multi.placed) == (None, 1, 0)
    assert any("ks.multi" in n for n in s.notes), s.notes
    assert s.keys is not None and not any(n.startswith("ks.multi") for n in s.keys.names or ())
    assert any("nodetool ring was not read" in n for n in s.notes)


# -- each pod's load, the imbalance ---------------------------------------------------------
def readings(**by_pod: tuple[float, float, float | None]) -> dict[str, NodeReading]:
    return {p.replace("_", "-"): NodeReading(r, w, lat, None) for p, (r, w, lat) in
            by_pod.items()}


def test_skew_imbalance_is_the_busiest_over_the_mean() -> None:
    loads = skew.pod_loads(PODS, readings(cass_0=(90.0, 10.0, 9.0), cass_1=(30.0, 5.0, 2.0),
                                          cass_2=(30.0, 5.0, 2.2)))
    view = skew.build(skew.SkewSettings(), loads, 3, 0.8, 170.0, None)
    assert view.imbalance == pytest.approx(100 / (170 / 3))
    assert view.busiest == "cass-0" and not view.partial
    assert view.shares == pytest.approx((100 / 170, 35 / 170, 35 / 170))
    assert view.ring is None and view.keys is None and view.background == 1.0


def test_skew_a_pod_without_readings_is_unread_never_zero() -> None:
    nan = math.nan
    got = readings(cass_0=(90.0, 10.0, 9.0), cass_1=(nan, 5.0, 2.0))  # cass-2: no series
    loads = skew.pod_loads(PODS, got)
    assert [p.read for p in loads] == [True, False, False]
    assert [p.load_rps for p in loads] == [100.0, None, None]
    settings = skew.SkewSettings()
    view = skew.build(settings, loads, 3, 0.8, 170.0, None)
    assert view.partial and view.shares is None and view.unread == ("cass-1", "cass-2")
    assert view.imbalance == pytest.approx(1.0)  # over the one pod read, and marked partial
    f = skew.facts(view, loads, settings, 95, None)
    advice, message = skew.judge(view, settings, f, _Advisor(), False)
    assert f is None and advice == skew.Advice() and "2 of 3 pod(s) unread" in message
    st = skew.to_status(settings, False, view, loads, [], advice, message, None, "", None,
                        None, None, 0.0, str)
    assert st["partial"] is True and st["unread"] == ["cass-1", "cass-2"]
    assert [p["loadRps"] for p in st["pods"]] == [100.0, None, None]
    assert [p["share"] for p in st["pods"]] == [None, None, None]


class _Advisor:
    """Counts the calls: advice is asked of the driver only when the view warrants it."""

    def __init__(self) -> None:
        self.asked = 0

    def skew_advice(self, facts: skew.SkewFacts) -> skew.Advice:
        self.asked += 1
        return skew.Advice(("spread the reads",))


@pytest.mark.parametrize(("loads", "operating", "said"), [
    ((40.0, 36.0, 34.0), False, "within spec.skew.imbalanceThreshold 1.25"),
    ((0.9, 0.1, 0.1), False, "too little load"),
    ((90.0, 10.0, 10.0), True, "a node step is in progress"),
    ((0.0, 0.0, 0.0), False, "no load on any pod"),
])
def test_skew_no_advice_where_it_cannot_be_judged(loads: tuple[float, float, float],
                                                  operating: bool, said: str) -> None:
    ps = skew.pod_loads(PODS, {p: NodeReading(v, 0.0, 1.0, None)
                               for p, v in zip(PODS, loads, strict=True)})
    settings = skew.SkewSettings()
    view = skew.build(settings, ps, 3, 1.0, sum(loads), None)
    advisor = _Advisor()
    advice, message = skew.judge(view, settings, skew.facts(view, ps, settings, 95, None),
                                 advisor, operating)
    assert advice == skew.Advice() and advisor.asked == 0 and said in message, message
    # the same loads at a high imbalance are advised on
    hot = skew.pod_loads(PODS, {p: NodeReading(v, 0.0, 1.0, None)
                                for p, v in zip(PODS, (90.0, 10.0, 10.0), strict=True)})
    view = skew.build(settings, hot, 3, 1.0, 110.0, None)
    advice, _ = skew.judge(view, settings, skew.facts(view, hot, settings, 95, None),
                           advisor, False)
    assert advice.advice == ("spread the reads",) and advisor.asked == 1


# -- the advice, each option only where it can help --------------------------------------------
def facts(**kw: Any) -> skew.SkewFacts:
    base: dict[str, Any] = dict(imbalance=1.8, threshold=1.25, busiest="cass-0",
                                replicas_per_key=3, read_ratio=0.9, read_spread="replicas",
                                percentile=95, busiest_latency_ms=None,
                                others_latency_ms=None, primary_read_share=None,
                                primary_reads=0, hot_table="ks.kv", sampled=False)
    base.update(kw)
    return skew.SkewFacts(**base)


def test_skew_replica_shuffling_only_when_reads_concentrate_on_primaries() -> None:
    concentrated = cassandra_skew.advice(facts(primary_read_share=0.97, primary_reads=500,
                                               sampled=True))
    assert any("shuffle_replicas=True" in a and "97%" in a for a in concentrated.advice)
    # spread evenly over 3 replicas: shuffling would change nothing
    even = cassandra_skew.advice(facts(primary_read_share=0.36, primary_reads=500,
                                       sampled=True))
    assert not any("shuffl" in a for a in even.advice)
    # not measured: the user's word (readSpread) decides, and the gap is said
    said = cassandra_skew.advice(facts(read_spread="primary"))
    assert any("shuffle_replicas=True" in a for a in said.advice)
    assert any("concentrate on the primary" in c for c in said.cannot_check)
    assert not any("shuffl" in a for a in cassandra_skew.advice(facts()).advice)
    # the user says primary, the sample says spread: the spec is what is wrong
    wrong = cassandra_skew.advice(facts(read_spread="primary", primary_read_share=0.34,
                                        primary_reads=300, sampled=True))
    assert any("set readSpread: replicas" in a for a in wrong.advice)
    # writes dominate (every replica writes) or one replica: no read-spreading option
    assert cassandra_skew.advice(facts(read_ratio=0.2, primary_read_share=0.99,
                                       primary_reads=500, sampled=True)).advice == ()
    one = cassandra_skew.advice(facts(replicas_per_key=1, read_spread="primary"))
    assert one.advice == () and "RF 1" in one.cannot_check[0]


def test_skew_speculative_retry_only_when_the_busiest_pod_is_slower() -> None:
    slow = cassandra_skew.advice(facts(busiest_latency_ms=30.0, others_latency_ms=8.0))
    assert any("speculative_retry" in a and "ks.kv" in a for a in slow.advice)
    assert any("not readable through nodetool" in c for c in slow.cannot_check)
    same = cassandra_skew.advice(facts(busiest_latency_ms=8.5, others_latency_ms=8.0))
    assert not any("speculative_retry" in a for a in same.advice)
    blind = cassandra_skew.advice(facts())
    assert any("no per-pod latency" in c for c in blind.cannot_check)


def test_skew_swift_advises_the_proxys_sorting_and_says_its_rates_are_per_device() -> None:
    spec = parse({**MINIMAL, "target": {**MINIMAL["target"], "store": "swift"}})
    assert "one device" in swift_skew.note(spec) and "no hot ranges" in swift_skew.note(spec)
    assert swift_skew.advice(facts()).advice == ()
    said = swift_skew.advice(facts(read_spread="primary"))
    assert any("sorting_method = shuffle" in a for a in said.advice)
    assert any("proxy-server.conf" in c for c in said.cannot_check)


def test_skew_the_advice_from_the_recorded_sample() -> None:
    """The lab's real sample behind a skewed view: shuffling is advised on the measured
    share, and the status carries the ranges, bounded."""
    s = lab_sample()
    loads = skew.pod_loads(PODS, readings(cass_0=(150.0, 10.0, 12.0), cass_1=(40.0, 5.0, 3.0),
                                          cass_2=(45.0, 5.0, 3.5)))
    settings = skew.SkewSettings()
    view = skew.build(settings, loads, 2, 0.9, 255.0, s)
    f = skew.facts(view, loads, settings, 95, s)
    assert f is not None and f.sampled and f.primary_read_share == s.primary_read_share

    class Cassandra:
        def skew_advice(self, facts: skew.SkewFacts) -> skew.Advice:
            return cassandra_skew.advice(facts)

    advice, message = skew.judge(view, settings, f, Cassandra(), False)
    assert any("shuffle_replicas=True" in a for a in advice.advice), advice
    assert any("speculative_retry" in a for a in advice.advice), advice
    st = skew.to_status(settings, True, view, loads, skew.ranges(view), advice, message, s,
                        "sampled", 1000.0, 4600.0, None, 1001.0, str)
    assert st["imbalance"] == pytest.approx(160 / 85, abs=1e-3)
    assert st["busiestPod"] == "cass-0" and st["acting"] is False
    assert len(st["hotRanges"]) == 5 and st["hotRanges"][0]["owner"] == "cass-0"
    assert int(st["hotRanges"][0]["end"]) >= json.loads(text("tokens.json"))["ks.kv"]["0"]
    assert all(isinstance(r["start"], str) and len(r["topKeys"]) <= 3 for r in st["hotRanges"])
    assert st["primaryReadShare"] > 0.95 and st["sampledEpoch"] == 1000.0
    assert st["message"].startswith("Advise: ") and st["mode"] == "Advise"
    # Auto says what it does: rebalance within its bound where the driver can, else advise
    auto = skew.SkewSettings(mode="Auto", max_move_percent=3)
    assert "a bounded move, at most 3 % of the data" in skew.mode_said(auto, True)
    assert "no rebalancing action: advising only" in skew.mode_said(auto, True, acting=False)
    assert "only in mode Enforce" in skew.mode_said(auto, False)
    st = skew.to_status(auto, True, view, loads, [], advice, message, s, "sampled", 1000.0,
                        4600.0, None, 1001.0, str, acting=True)
    assert st["acting"] is True and st["message"].startswith("Auto: a hot pod")
    assert skew.to_status(auto, False, view, loads, [], advice, message, s, "sampled",
                          1000.0, 4600.0, None, 1001.0, str, acting=True)["acting"] is False


# -- spec.skew -----------------------------------------------------------------------------
def test_skew_spec_defaults_and_refusals() -> None:
    assert parse(MINIMAL).skew == skew.SkewSettings()
    got = parse({**MINIMAL, "skew": {"mode": "Auto", "maxMovePercent": 2.5,
                                     "readSpread": "primary", "sampleInterval": "30m",
                                     "sampleDuration": "2s", "triggerPercent": 80}}).skew
    assert (got.mode, got.max_move_fraction, got.read_spread, got.sample_interval_s,
            got.sample_duration_s) == ("Auto", 0.025, "primary", 1800.0, 2.0)
    assert got.hysteresis == (0.8, 0.55, 0.45)
    for bad, where, said in (
            ({"mode": "On"}, "spec.skew.mode", "must be one of Off, Advise, Auto"),
            ({"maxMovePercent": 60}, "spec.skew.maxMovePercent", "must be <= 50"),
            ({"readSpread": "nearest"}, "spec.skew.readSpread", "must be one of"),
            ({"imbalanceThreshold": 1}, "spec.skew.imbalanceThreshold", "must be > 1"),
            ({"stopPercent": 80}, "spec.skew", "revertPercent (45) <= stopPercent (80) <= "
                                               "triggerPercent (75) must hold"),
            ({"sampleDuration": "5m"}, "spec.skew.sampleDuration", "between 1s and 1m"),
            ({"sampleEvery": "1h"}, "spec.skew", "unknown field(s) sampleEvery")):
        with pytest.raises(SpecError) as err:
            parse({**MINIMAL, "skew": bad})
        assert err.value.where == where and said in str(err.value), (bad, err.value)


def test_skew_the_crd_orders_the_thresholds_with_their_defaults() -> None:
    node = spec_schema()["properties"]["skew"]
    rule = node["x-kubernetes-validations"][0]["rule"]
    assert "45.0" in rule and "55.0" in rule and "75.0" in rule
    assert not any("default" in v for v in node["properties"].values())  # absent: defaults
    d = skew.SkewSettings()
    assert (d.revert_percent, d.stop_percent, d.trigger_percent) == (45.0, 55.0, 75.0)


# -- the gauges --------------------------------------------------------------------------------
def test_skew_gauges_are_absent_where_nothing_was_read() -> None:
    from prometheus_client import generate_latest

    tm = OperatorMetrics()
    tm.set_node_loads("ns", "p", {"cass-0": 100.0, "cass-1": 35.0, "cass-2": 35.0})
    tm.set_skew_imbalance("ns", "p", 1.76)
    out = generate_latest(tm.registry).decode()
    assert 'elastore_node_load_requests_per_second{namespace="ns",pod="cass-1",policy="p"} ' \
           '35.0' in out
    assert 'elastore_skew_imbalance{namespace="ns",policy="p"} 1.76' in out
    tm.set_node_loads("ns", "p", {"cass-0": 100.0})  # cass-1 and cass-2 unread now
    tm.set_skew_imbalance("ns", "p", None)  # partial: withheld
    out = generate_latest(tm.registry).decode()
    assert 'pod="cass-0"' in out and 'pod="cass-1"' not in out and 'pod="cass-2"' not in out
    assert "elastore_skew_imbalance{" not in out
    tm.forget("ns", "p")
    assert 'pod="cass-0"' not in generate_latest(tm.registry).decode()


def test_skew_the_view_ignores_a_sample_of_other_pods() -> None:
    """A sample taken before a scale changed the pods: its ring is not the pods' now."""
    s = lab_sample()
    four = [*PODS, "cass-3"]
    loads = skew.pod_loads(four, {p: NodeReading(10.0, 1.0, 1.0, None) for p in four})
    view = skew.build(skew.SkewSettings(), loads, 2, 0.9, 44.0, s)
    assert view.ring is None and view.keys is None and skew.ranges(view) == []


class _Pods:
    """``nodetool`` in pod cass-k answered with lab node k+1's recorded output; every call
    kept. (A fake port for the sampler's own logic; the real exec path is the k8s suite's.)"""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    def nodetool(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...],
                 *args: str, timeout_s: float = 120.0) -> Any:
        from types import SimpleNamespace

        node = int(pod.rsplit("-", 1)[1]) + 1
        self.calls.append((pod, args[0]))
        if pod == self.fail:
            return SimpleNamespace(rc=1, stdout="", stderr="error: JMX connection refused")
        name = {"info": f"node{node}-info-T.txt", "ring": "node1-ring.txt",
                "profileload": f"node{node}-profileload.txt"}[args[0]]
        return SimpleNamespace(rc=0, stdout=text(name), stderr="")


def test_skew_the_sampler_reads_the_tokens_again_only_when_the_ring_changed() -> None:
    port = _Pods()
    first = cassandra_skew.sample(port, "ns", "cassandra", ("nodetool",), PODS, 2, 0.0, 3.0)
    assert first.ring is not None and first.keys is not None and first.notes == ()
    assert sorted(c for _, c in port.calls) == ["info"] * 3 + ["profileload"] * 3 + ["ring"]
    known = dict(zip(first.ring.names, first.ring.tokens, strict=True))
    port.calls.clear()
    again = cassandra_skew.sample(port, "ns", "cassandra", ("nodetool",), PODS, 2, 60.0, 3.0,
                                  known=known)
    assert sorted(c for _, c in port.calls) == ["profileload"] * 3 + ["ring"]
    assert again.ring == first.ring
    # a ring that moved (a token not among the known ones): each pod's tokens read again
    port.calls.clear()
    moved = {**known, "cass-2": (1, *known["cass-2"][1:])}
    cassandra_skew.sample(port, "ns", "cassandra", ("nodetool",), PODS, 2, 120.0, 3.0,
                          known=moved)
    assert sorted(c for _, c in port.calls).count("info") == 3
    # a pod that does not answer: said, and no ring without its tokens
    port = _Pods(fail="cass-1")
    s = cassandra_skew.sample(port, "ns", "cassandra", ("nodetool",), PODS, 2, 0.0, 3.0)
    assert s.ring is None and any("cass-1" in n and "JMX connection refused" in n
                                  for n in s.notes), s.notes
    # a port that cannot run nodetool at all (the simulator's)
    none = cassandra_skew.sample(object(), "ns", "cassandra", ("nodetool",), PODS, 2, 0.0, 3.0)
    assert none.ring is None and "cannot run nodetool" in none.notes[0]


def test_skew_an_event_only_when_the_advice_names_other_options() -> None:
    one = ["cass-0 is slower than the others (p95 16.0 ms, the others' median 6.0 ms): ..."]
    assert not skew.advice_changed(one, [one[0].replace("16.0", "17.2")])
    assert skew.advice_changed(one, [*one, "reads concentrate on primary replicas ..."])
    assert skew.advice_changed(one, []) and skew.advice_changed(None, one)
    assert not skew.advice_changed(None, [])
