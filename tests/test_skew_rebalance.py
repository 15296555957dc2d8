"""Issue 38's Auto rebalancing, the pure parts: when the hysteresis acts, reverts or holds
(:mod:`elastore.planner.rebalance`), and Cassandra's move step (:mod:`elastore.stores.
cassandra.move`, the driver's ``skew_act``) against an in-memory port that records what it
is asked: the store is read before every effect, a record is never taken for the store,
and one move at a time. The move on real Cassandra is tests/test_skew_move_lab.py's."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from elastore.actuators import nodetool as nt
from elastore.actuators.ports import StatefulSetFacts
from elastore.errors import ElastoreError
from elastore.models.skew import HysteresisState, Keys, Ring
from elastore.operator import skew
from elastore.operator.spec import parse
from elastore.planner.rebalance import RebalanceFacts, decide
from elastore.stores.base import StoreCall, Target
from elastore.stores.cassandra import move
from elastore.stores.cassandra.driver import CassandraDriver

CUT = (0.75, 0.55, 0.45)


def facts(u: float | None, imbalance: float | None = 1.6, node_step: bool = False,
          in_place: int = 0, under_way: bool = False) -> RebalanceFacts:
    return RebalanceFacts(u, imbalance, 1.25, CUT, node_step, in_place, under_way)


def test_skew_rebalance_acts_at_the_trigger_and_only_on_an_imbalance() -> None:
    d = decide(HysteresisState(), facts(0.8))
    assert d.action == "act" and d.state.active and d.state.smoothed == pytest.approx(0.8)
    # hot but even: nodes, not moves
    d = decide(HysteresisState(), facts(0.9, imbalance=1.1))
    assert d.action == "hold" and "nodes, not moves" in d.why
    # a node step goes first (the plan wants another size, or one runs)
    d = decide(HysteresisState(), facts(0.9, node_step=True))
    assert d.action == "hold" and "node step" in d.why
    # below the trigger, nothing in place: nothing to do
    d = decide(HysteresisState(), facts(0.6))
    assert d.action == "none" and not d.state.active


def test_skew_rebalance_smooths_stops_and_reverts_one_step_per_period() -> None:
    s = HysteresisState(0.9, True)
    d = decide(s, facts(0.5, in_place=2))  # 0.85*0.5 + 0.15*0.9 = 0.56: hold, kept
    assert d.action == "hold" and d.state.smoothed == pytest.approx(0.56)
    d = decide(d.state, facts(0.3, in_place=2))  # 0.339: below stop and revert
    assert d.action == "revert" and d.state.active  # one more to undo after this one
    d = decide(d.state, facts(0.3, in_place=1))
    assert d.action == "revert" and not d.state.active
    d = decide(d.state, facts(0.3, in_place=0))
    assert d.action == "none"
    # a record of moves in place with no hysteresis state (a status rewritten): still undone
    d = decide(HysteresisState(), facts(0.2, in_place=1))
    assert d.action == "revert"
    # the undo waits for a node step
    d = decide(HysteresisState(0.3, True), facts(0.3, in_place=1, node_step=True))
    assert d.action == "hold" and d.state.active


def test_skew_rebalance_holds_on_an_unread_pod_and_while_a_step_runs() -> None:
    s = HysteresisState(0.8, True)
    for u in (None, float("nan"), -1.0):
        d = decide(s, facts(u))
        assert d.action == "hold" and d.state == s  # never read as 0
    d = decide(s, facts(0.95, under_way=True))
    assert d.action == "hold" and "under way" in d.why


# -- the record ----------------------------------------------------------------------------------
def test_skew_move_record_round_trips_and_refuses_what_it_does_not_write() -> None:
    rec = move.Record((move.MoveEntry("db-1", -(2**63), 2**62, 10.0, 3.2),),
                      move.UnderWay("db-2", 5, 7, "Revert", 20.0, 1.0), "x", 20.0)
    doc = rec.to_status()
    assert doc["moves"][0]["fromToken"] == str(-(2**63))  # a string: beyond a double
    assert move.read_record(doc) == rec
    assert move.in_place(doc) == (1, True)
    for bad in ({"moves": "db-1"}, {"moves": [{"pod": "db-1", "fromToken": "x"}]},
                {"underWay": {"pod": "db-1", "purpose": "Drop", "fromToken": "1",
                              "toToken": "2", "startedEpoch": 1}},
                {"store": "swift"}, {"moves": [{"pod": "db-1", "fromToken": True,
                                                "toToken": "2"}]}):
        with pytest.raises(ElastoreError):
            move.read_record(bad)
        assert move.in_place(bad) == (0, False)  # an unreadable record claims nothing


def test_skew_move_follow_reads_the_store_not_the_record() -> None:
    uw = move.UnderWay("db-1", 100, 200, "Move", 1000.0, 2.0)
    assert move.follow(uw, (200,), "NORMAL", None, 1010.0)[0] == "done"
    assert move.follow(uw, (100,), "MOVING", None, 1010.0)[0] == "running"
    assert move.follow(uw, None, None, None, 1010.0)[0] == "running"  # unread: wait
    assert move.follow(uw, (100,), "NORMAL", "nodetool move exited 1: error: taken",
                       1010.0)[0] == "failed"
    # recorded, never issued (a restart in between): back at the old token, NORMAL
    assert move.follow(uw, (100,), "NORMAL", None, 1010.0)[0] == "running"
    state, said = move.follow(uw, (100,), "NORMAL", None, 1000.0 + move.LOST_AFTER_S)
    assert state == "lost" and "not carried out" in said


# -- the driver's step against a recording port ---------------------------------------------------
class Port:
    """An in-memory store for the move step: each pod's tokens and the nodes' states, and
    what the step asked for. Moves take effect only when the test says so."""

    def __init__(self, tokens: dict[str, int]) -> None:
        self.tokens = {p: (t,) for p, t in tokens.items()}
        self.states = ["UN"] * len(tokens)
        self.modes = {p: "NORMAL" for p in tokens}
        self.started: list[tuple[str, int]] = []
        self.failure: dict[str, str] = {}

    def node_tokens(self, ns: str, pod: str, container: str, nodetool: Any
                    ) -> tuple[int, ...]:
        return self.tokens[pod]

    def ring(self, ns: str, pod: str, container: str, nodetool: Any) -> nt.Ring:
        nodes = tuple(nt.RingNode(s, f"10.0.0.{i}", 1.0, f"id{i}", "dc1")
                      for i, s in enumerate(self.states))
        return nt.Ring(nodes, {}, "id0")

    def node_mode(self, ns: str, pod: str, container: str, nodetool: Any) -> str | None:
        return self.modes[pod]

    def start_move(self, ns: str, pod: str, container: str, nodetool: Any,
                   token: int) -> None:
        self.started.append((pod, token))
        self.modes[pod] = "MOVING"

    def move_failure(self, ns: str, pod: str) -> str | None:
        return self.failure.get(pod)

    def land(self, pod: str, token: int) -> None:
        self.tokens[pod], self.modes[pod] = (token,), "NORMAL"

    def __getattr__(self, name: str) -> Any:  # the rest of NodetoolPort: never called
        if name not in ("start_decommission", "decommission_failure", "start_cleanup",
                        "cleanup_state", "cleanup_running", "repair_running",
                        "compaction_throughput", "set_compaction_throughput", "host_id",
                        "set_stream_throughput"):
            raise AttributeError(name)

        def not_called(*_a: Any, **_k: Any) -> None:
            raise AssertionError(f"the move step called {name}")
        return not_called


RF = 2
TOKENS = {"db-0": -6 * 10**18, "db-1": 0, "db-2": 6 * 10**18}


def spec(max_move: float = 5.0) -> Any:
    return parse({"target": {"name": "db", "replicationFactor": RF},
                  "replicas": {"min": 2, "max": 6}, "slo": {"latencyMs": 30},
                  "mode": "Enforce", "skew": {"mode": "Auto", "maxMovePercent": max_move},
                  "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}}})


def call(port: Port, record: Any, now: float, max_move: float = 5.0) -> StoreCall:
    sizes = StatefulSetFacts("db", 3, 3, 3, None, None, True)
    return StoreCall("shop", "orders", spec(max_move), port, Target(sizes),  # type: ignore[arg-type]
                     {"skew": {"rebalance": record}}, now, time.time,
                     lambda *_a: None, lambda *_a: None, lambda _op: None, {})


def view(tokens: dict[str, int], at_s: float, max_move: float = 5.0) -> skew.SkewView:
    """Hot keys in db-1's primary range (-6e18, 0]: reads on the primary make it hot."""
    rng = np.random.default_rng(3)
    toks = rng.integers(-6 * 10**18, 0, 40)
    keys = Keys(toks.astype(np.int64), rng.uniform(5, 10, 40),
                tuple(f"ks.t:k{i}" for i in range(40)))
    names = list(tokens)
    ring = Ring.single(names, [tokens[p] for p in names])
    settings = skew.SkewSettings(mode="Auto", read_spread="primary",
                                 max_move_percent=max_move)
    loads = [skew.PodLoad(p, 10.0, 1.0, 5.0) for p in names]
    return skew.build(settings, loads, RF, 0.95, keys.total_rps * 1.05,
                      skew.HotSample(at_s, 3.0, ring=ring, keys=keys))


def test_skew_auto_move_reads_the_store_then_moves_once_and_follows_it() -> None:
    port, driver = Port(TOKENS), CassandraDriver()
    v = view(TOKENS, 100.0)
    act = driver.skew_act(call(port, None, 200.0), v, "act", None)
    assert act.effect is not None, act.said
    uw = act.record["underWay"]
    assert uw["purpose"] == "Move" and 0 < uw["streamedPercent"] <= 5
    assert not port.started  # the record first: the runner runs the effect after it
    act.effect()
    assert port.started == [(uw["pod"], int(uw["toToken"]))]
    # recorded as under way: followed, and no second move whatever the action
    again = driver.skew_act(call(port, act.record, 210.0), v, "act", act.record)
    assert again.effect is None and again.record["underWay"] == uw
    port.land(uw["pod"], int(uw["toToken"]))
    done = driver.skew_act(call(port, again.record, 220.0), v, "none", again.record)
    assert done.record["underWay"] is None and done.resample
    assert [m["pod"] for m in done.record["moves"]] == [uw["pod"]]
    assert [e[0] for e in done.events] == ["SkewMoveDone"]
    # the same (now stale) sample plans nothing more: a fresh one is awaited
    later = driver.skew_act(call(port, done.record, 230.0), v, "act", done.record)
    assert later.effect is None and "sample taken after the last move" in later.said


def test_skew_auto_move_touches_nothing_the_store_does_not_bear_out() -> None:
    driver = CassandraDriver()
    v = view(TOKENS, 100.0)
    # a node not Up/Normal (another node moving, joining or down)
    port = Port(TOKENS)
    port.states[2] = "UM"
    act = driver.skew_act(call(port, None, 200.0), v, "act", None)
    assert act.effect is None and "not all Up and Normal" in act.said
    # the ring changed since the sample: sampled again, nothing moved
    port = Port({**TOKENS, "db-2": 5 * 10**18})
    act = driver.skew_act(call(port, None, 200.0), v, "act", None)
    assert act.effect is None and act.resample and "changed since the sample" in act.said
    # vnodes
    port = Port(TOKENS)
    port.tokens["db-0"] = (1, 2)
    act = driver.skew_act(call(port, None, 200.0), v, "act", None)
    assert act.effect is None and "vnodes" in act.said
    # a bound of 0.1 % of the data: no move fits
    port = Port(TOKENS)
    act = driver.skew_act(call(port, None, 200.0, 0.1), view(TOKENS, 100.0, 0.1), "act",
                          None)
    assert act.effect is None and "within maxMovePercent" in act.said
    assert not port.started


def test_skew_auto_revert_only_what_the_store_shows_and_within_the_bound() -> None:
    driver = CassandraDriver()
    moved_to = -3 * 10**18
    port = Port({**TOKENS, "db-1": moved_to})
    v = view(port_tokens := {p: t[0] for p, t in port.tokens.items()}, 100.0)
    assert port_tokens["db-1"] == moved_to
    entry = {"pod": "db-1", "fromToken": "0", "toToken": str(moved_to), "atEpoch": 50.0,
             "streamedPercent": 4.0}
    rec = {"store": "cassandra", "moves": [entry]}
    # undoing a move of 3e18 of 2^64 at RF 2 streams ~16 % of the data: over a 5 % bound
    act = driver.skew_act(call(port, rec, 200.0), v, "revert", rec)
    assert act.effect is None and [e[0] for e in act.events] == ["SkewRevertSkipped"]
    assert "more than maxMovePercent" in act.events[0][1] and act.record["moves"] == []
    # within a 20 % bound it is undone
    act = driver.skew_act(call(port, rec, 200.0, 20.0), view(port_tokens, 100.0, 20.0),
                          "revert", rec)
    assert act.effect is not None and act.record["underWay"]["toToken"] == "0"
    act.effect()
    assert port.started == [("db-1", 0)]
    # a forged record: the pod is not at the token it claims; nothing moves
    forged = {"store": "cassandra", "moves": [{**entry, "toToken": "42"}]}
    port2 = Port({**TOKENS, "db-1": moved_to})
    act = driver.skew_act(call(port2, forged, 200.0, 20.0), view(port_tokens, 100.0, 20.0),
                          "revert", forged)
    assert act.effect is None and "not the token" in act.events[0][1]
    assert not port2.started
    # an unreadable record: nothing in it is acted on, and it is said
    act = driver.skew_act(call(port2, {"moves": "all"}, 200.0), v, "revert", {"moves": "all"})
    assert act.effect is None and act.events[0][0] == "SkewRecordRejected"
    assert act.record["moves"] == []


def test_skew_auto_a_failed_move_is_said_and_not_retried_blindly() -> None:
    port, driver = Port(TOKENS), CassandraDriver()
    v = view(TOKENS, 100.0)
    act = driver.skew_act(call(port, None, 200.0), v, "act", None)
    assert act.effect is not None
    act.effect()
    pod = act.record["underWay"]["pod"]
    port.modes[pod] = "NORMAL"
    port.failure[pod] = "nodetool move exited 2: error: data is currently moving to this node"
    got = driver.skew_act(call(port, act.record, 210.0), v, "none", act.record)
    assert got.record["underWay"] is None and got.record["moves"] == []
    assert got.events[0][0] == "SkewMoveFailed" and got.events[0][2]
    assert len(port.started) == 1


# -- the split at a scale-out ---------------------------------------------------------------------
class SplitPort(Port):
    """:class:`Port` with the per-pod token ConfigMap."""

    def __init__(self, tokens: dict[str, int], cm: dict[str, str] | None = None,
                 labelled: bool = True) -> None:
        super().__init__(tokens)
        self.cm, self.labelled = cm, labelled
        self.writes: list[tuple[str, str]] = []

    def pod_tokens_config(self, ns: str, name: str) -> tuple[dict[str, str], bool] | None:
        assert name == "db-elastore-tokens"
        return None if self.cm is None else (dict(self.cm), self.labelled)

    def set_pod_token(self, ns: str, name: str, pod: str, value: str) -> None:
        if self.cm is not None and not self.labelled:
            raise ElastoreError("exists without the label")
        self.writes.append((pod, value))
        self.cm = {**(self.cm or {}), pod: value}


def _op(pod: str = "db-3") -> Any:
    from elastore.stores.operation import OperationState

    op = OperationState.from_status({"kind": "ScaleOut", "phase": "Scaling",
                                     "fromReplicas": 3, "toReplicas": 4, "pod": pod,
                                     "startedEpoch": 1.0, "expectedEndEpoch": 2.0})
    assert op is not None
    return op


def test_skew_split_token_lands_in_the_hot_range_and_lowers_the_busiest() -> None:
    v = view(TOKENS, 100.0)
    tok, why = move.split_for(v, "db-3")
    assert tok is not None and -6 * 10**18 < tok < 0, why  # inside db-1's hot range
    before, after = (float(x) for x in
                     __import__("re").findall(r"x([0-9.]+)", why)[:2])
    assert after < before
    assert move.split_for(None, "db-3")[0] is None
    assert move.split_for(v, "db-1") == (None, "db-1 is in the sampled ring already")
    vn = skew.build(skew.SkewSettings(mode="Auto"), [skew.PodLoad(p, 10.0, 1.0, 5.0)
                                                     for p in ("a", "b")], RF, 0.9, 100.0,
                    skew.HotSample(1.0, 3.0, ring=Ring(("a", "b"), ((1, 5), (3, 7))),
                                   keys=v.keys))
    assert "vnodes" in move.split_for(vn, "c")[1]


def test_skew_split_writes_the_new_pods_token_after_seeing_the_ring() -> None:
    driver = CassandraDriver()
    events: list[tuple[str, str, bool]] = []
    port = SplitPort(TOKENS)

    def call_with(p: Port, v: Any) -> StoreCall:
        c = call(p, None, 200.0)
        c.event = lambda r, m, w: events.append((r, m, w))
        c.skew_view = v
        return c

    driver._split_token(call_with(port, view(TOKENS, 100.0)), _op())
    assert port.writes and port.writes[0][0] == "db-3"
    tok = int(port.writes[0][1])
    assert -6 * 10**18 < tok < 0 and events[-1][0] == "SkewSplitToken"
    # the ring moved since the sample: the pod's key is emptied, not left with a stale token
    moved = SplitPort({**TOKENS, "db-2": 5 * 10**18}, cm={"db-3": "12345"})
    driver._split_token(call_with(moved, view(TOKENS, 100.0)), _op())
    assert moved.writes == [("db-3", "")] and events[-1][0] == "SkewSplitSkipped"
    assert "changed since the sample" in events[-1][1]
    # someone else's ConfigMap of that name: untouched, said
    theirs = SplitPort(TOKENS, cm={"other": "x"}, labelled=False)
    driver._split_token(call_with(theirs, view(TOKENS, 100.0)), _op())
    assert theirs.writes == [] and events[-1][0] == "SkewSplitNotWritten"
    # whether the pod took it, once it serves: said once
    grown = {**TOKENS, "db-3": tok}
    port4 = SplitPort(grown, cm={"db-3": str(tok)})
    v4 = view(grown, 300.0)
    first = driver._split_check(call_with(port4, v4), v4)
    assert [e[0] for e in first] == ["SkewSplitTaken"]
    assert driver._split_check(call_with(port4, v4), v4) == ()
    wrong = SplitPort({**TOKENS, "db-3": 777}, cm={"db-3": str(tok)})
    v5 = view({**TOKENS, "db-3": 777}, 300.0)
    said = CassandraDriver()._split_check(call_with(wrong, v5), v5)
    assert [e[0] for e in said] == ["SkewSplitIgnored"] and said[0][2]
    # Advise (or Recommend): nothing is written
    quiet = SplitPort(TOKENS)
    c = call_with(quiet, view(TOKENS, 100.0))
    c.spec = parse({"target": {"name": "db", "replicationFactor": RF},
                    "replicas": {"min": 2, "max": 6}, "slo": {"latencyMs": 30},
                    "mode": "Enforce", "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}}})
    driver._split_token(c, _op())
    assert quiet.writes == []


def test_skew_a_done_move_moves_its_pods_key_in_the_token_configmap() -> None:
    driver = CassandraDriver()
    port = SplitPort(TOKENS, cm={p: str(t) for p, t in TOKENS.items()})
    v = view(TOKENS, 100.0)
    act = driver.skew_act(call(port, None, 200.0), v, "act", None)
    assert act.effect is not None
    act.effect()
    uw = act.record["underWay"]
    assert port.writes == []  # nothing before the store shows the move done
    port.land(uw["pod"], int(uw["toToken"]))
    driver.skew_act(call(port, act.record, 210.0), v, "none", act.record)
    assert port.writes == [(uw["pod"], uw["toToken"])]
    assert port.cm is not None and port.cm[uw["pod"]] == uw["toToken"]
    # a pod without a key (the installer gave none) gets none
    bare = SplitPort(TOKENS, cm={})
    act = driver.skew_act(call(bare, None, 200.0), v, "act", None)
    assert act.effect is not None
    act.effect()
    bare.land(act.record["underWay"]["pod"], int(act.record["underWay"]["toToken"]))
    driver.skew_act(call(bare, act.record, 210.0), v, "none", act.record)
    assert bare.writes == []


def test_skew_no_move_beyond_the_moves_the_record_keeps() -> None:
    """The record never drops a move it would have to undo: at MAX_MOVES in place no
    further move is planned, and a record listing more is refused whole."""
    entries = [move.MoveEntry(f"db-{i % 3}", i, i + 1, 10.0 + i, 1.0)
               for i in range(move.MAX_MOVES)]
    full = move.Record(tuple(entries))
    got, why = move.plan(view(TOKENS, 500.0), full)
    assert got is None and "no further move" in why
    too_many = {"moves": [e.to_status() for e in entries] * 2}
    with pytest.raises(ElastoreError, match="more than"):
        move.read_record(too_many)
    assert move.in_place(too_many) == (0, False)
