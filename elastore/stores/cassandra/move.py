"""Auto's bounded move of a hot single-token node's token, and its revert (issue 38, "move
a range boundary without adding a node").

What :func:`elastore.planner.rebalance.decide` says (``act``, ``revert``) becomes one
``nodetool move`` at a time:

* ``act``: the move :func:`elastore.models.skew.plan_move` finds on the last sample's ring
  and hot keys (the busiest pod's share lowered most, at most ``spec.skew.maxMovePercent``
  of the stored data streamed). Only on a sample taken after the last move (its ring is
  the ring now), and only when the store bears the sample out: every serving pod's own
  tokens (``nodetool info -T``) are the sample's, every node is Up and Normal (``nodetool
  status``), and no node holds the new token;
* ``revert``: the last move in place, undone: only when the pod is still at the token the
  record says it was moved to, every node is Up and Normal, its old token is free, and
  undoing it streams no more than a move may (a record written by someone else cannot make
  the operator stream more than ``maxMovePercent``);
* a move under way is followed in the store: the pod's tokens and its mode (``nodetool
  netstats``: MOVING while it streams), and the exit of the ``nodetool move`` this process
  issued. Never a second move while one runs: Cassandra 5.0.4 does not refuse a move of
  another node while one is under way (docs/lab.md), so the operator serialises them.

A move leaves the ranges it gave away on the nodes that held them (no ``nodetool
cleanup``): a revert is expected once the burst passes, and it streams them back; the
space is at most ``maxMovePercent`` of the data per move.

``status.skew.rebalance`` (tokens as decimal strings: they exceed a double's integers)::

    {"store": "cassandra",
     "moves": [{"pod", "fromToken", "toToken", "atEpoch", "streamedPercent"}],  # in place
     "underWay": {"pod", "fromToken", "toToken", "purpose": "Move"|"Revert",
                  "startedEpoch", "streamedPercent"} | null,
     "last": "what happened last", "lastEpoch": ...}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from elastore.actuators.ports import TokenMovePort
from elastore.errors import ElastoreError
from elastore.models.skew import (
    Ring,
    SkewError,
    imbalance,
    node_shares,
    plan_move,
    split_token,
    streamed_fraction,
)
from elastore.operator.skew import SkewAct, SkewView

#: a move this process did not see start (issued by the operator before a restart) whose
#: node is back at its old token, NORMAL, this long after it was recorded: not carried out
LOST_AFTER_S = 120.0
#: moves in place at most (a revert undoes them last first): no further move until some
#: are undone, so that the record never drops one it would have to undo
MAX_MOVES = 16

Purpose = Literal["Move", "Revert"]


@dataclass(frozen=True)
class MoveEntry:
    pod: str
    from_token: int
    to_token: int
    at_s: float
    streamed_percent: float

    def to_status(self) -> dict[str, Any]:
        return {"pod": self.pod, "fromToken": str(self.from_token),
                "toToken": str(self.to_token), "atEpoch": self.at_s,
                "streamedPercent": round(self.streamed_percent, 4)}


@dataclass(frozen=True)
class UnderWay:
    pod: str
    from_token: int
    to_token: int
    purpose: Purpose
    started_s: float
    streamed_percent: float

    def to_status(self) -> dict[str, Any]:
        return {"pod": self.pod, "fromToken": str(self.from_token),
                "toToken": str(self.to_token), "purpose": self.purpose,
                "startedEpoch": self.started_s,
                "streamedPercent": round(self.streamed_percent, 4)}


@dataclass(frozen=True)
class Record:
    moves: tuple[MoveEntry, ...] = ()
    under_way: UnderWay | None = None
    last: str = ""
    last_s: float | None = None

    def to_status(self) -> dict[str, Any]:
        return {"store": "cassandra", "moves": [m.to_status() for m in self.moves],
                "underWay": None if self.under_way is None else self.under_way.to_status(),
                "last": self.last[:1000], "lastEpoch": self.last_s}


def _token(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise ElastoreError(f"{where} must be a token (a decimal string), got {v!r}")
    try:
        return int(v)
    except ValueError:
        raise ElastoreError(f"{where} must be a token (a decimal string), got {v!r}") from None


def _num(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ElastoreError(f"{where} must be a number, got {v!r}")
    return float(v)


def read_record(doc: Mapping[str, Any] | None) -> Record:
    """``status.skew.rebalance`` as plain data; raises :class:`ElastoreError` on a record
    that is not one this driver writes (the caller says so and keeps nothing of it)."""
    if doc is None:
        return Record()
    if not isinstance(doc, Mapping):
        raise ElastoreError("status.skew.rebalance is not an object")
    if doc.get("store", "cassandra") != "cassandra":
        raise ElastoreError(f"status.skew.rebalance is {doc.get('store')!r}'s, not Cassandra's")
    moves = []
    raw = doc.get("moves") or []
    if not isinstance(raw, list):
        raise ElastoreError("status.skew.rebalance.moves is not a list")
    if len(raw) > MAX_MOVES:
        raise ElastoreError(f"status.skew.rebalance.moves lists {len(raw)} moves, more than "
                            f"the {MAX_MOVES} the operator keeps")
    for i, m in enumerate(raw):
        if not isinstance(m, Mapping) or not isinstance(m.get("pod"), str):
            raise ElastoreError(f"status.skew.rebalance.moves[{i}] names no pod")
        moves.append(MoveEntry(m["pod"], _token(m.get("fromToken"), f"moves[{i}].fromToken"),
                               _token(m.get("toToken"), f"moves[{i}].toToken"),
                               _num(m.get("atEpoch", 0.0), f"moves[{i}].atEpoch"),
                               _num(m.get("streamedPercent", 0.0),
                                    f"moves[{i}].streamedPercent")))
    uw = None
    u = doc.get("underWay")
    if u is not None:
        if not isinstance(u, Mapping) or not isinstance(u.get("pod"), str) or \
                u.get("purpose") not in ("Move", "Revert"):
            raise ElastoreError("status.skew.rebalance.underWay is not a move this operator "
                                "records")
        uw = UnderWay(u["pod"], _token(u.get("fromToken"), "underWay.fromToken"),
                      _token(u.get("toToken"), "underWay.toToken"), u["purpose"],
                      _num(u.get("startedEpoch"), "underWay.startedEpoch"),
                      _num(u.get("streamedPercent", 0.0), "underWay.streamedPercent"))
    last = doc.get("last")
    last_s = doc.get("lastEpoch")
    return Record(tuple(moves), uw, last if isinstance(last, str) else "",
                  float(last_s) if isinstance(last_s, int | float) and
                  not isinstance(last_s, bool) else None)


def in_place(doc: Mapping[str, Any] | None) -> tuple[int, bool]:
    """(moves in place, one under way) as the record says; a record that cannot be read
    counts as none (what it claims is never acted on unread)."""
    try:
        r = read_record(doc)
    except ElastoreError:
        return 0, False
    return len(r.moves), r.under_way is not None


FollowState = Literal["running", "done", "failed", "lost"]


def follow(uw: UnderWay, tokens: tuple[int, ...] | None, mode: str | None,
           failure: str | None, now_s: float) -> tuple[FollowState, str]:
    """Where a move under way is, from the store's facts: the pod's own tokens (None: not
    read), its mode (netstats; None: not answering), the failure of the ``nodetool move``
    this process issued (None: none known)."""
    what = f"{uw.purpose.lower()} of {uw.pod} from token {uw.from_token} to {uw.to_token}"
    if tokens == (uw.to_token,) and mode == "NORMAL":
        return "done", f"the {what} is done: the node holds {uw.to_token} and is NORMAL"
    if mode == "MOVING":
        return "running", f"the {what} is streaming (the node is MOVING)"
    if failure is not None:
        return "failed", f"the {what} failed: {failure}"
    if tokens == (uw.from_token,) and mode == "NORMAL" and \
            now_s - uw.started_s >= LOST_AFTER_S:
        return "lost", (f"the {what} was not carried out: {now_s - uw.started_s:.0f} s after "
                        f"it was recorded the node is NORMAL at its old token (an operator "
                        "restart before the move was issued)")
    return "running", f"the {what}: waiting for the node (mode {mode or 'unknown'})"


@dataclass(frozen=True)
class StoreRing:
    """The ring as the store says it now: each serving pod's own tokens, and the nodes'
    states (``nodetool status``: UN, UM, UJ, ...)."""

    tokens: Mapping[str, tuple[int, ...]]
    states: tuple[str, ...]

    def unfit(self, pods: Sequence[str]) -> str | None:
        """Why no move may start on this ring (None: it may)."""
        if set(self.tokens) != set(pods):
            return f"the pods' tokens were read for {sorted(self.tokens)}, not {list(pods)}"
        several = [p for p, t in self.tokens.items() if len(t) != 1]
        if several:
            return (f"{', '.join(sorted(several))} hold several tokens (vnodes): nodetool "
                    "move refuses such nodes")
        bad = [s for s in self.states if s != "UN"]
        if bad or len(self.states) != len(pods):
            return (f"the ring is not all Up and Normal ({len(self.states)} node(s): "
                    f"{', '.join(self.states)}) for {len(pods)} pods")
        return None

    def ring(self, pods: Sequence[str]) -> Ring:
        return Ring.single(list(pods), [self.tokens[p][0] for p in pods])


def plan(view: SkewView, record: Record) -> tuple[Any, str]:
    """The move for ``act`` on the view's sample (None and why when none)."""
    if view.ring is None or view.keys is None or view.sampled_at_s is None:
        return None, "no sample of the ring and its hot keys yet"
    if not view.ring.single_token:
        return None, "the ring has vnodes: nodetool move refuses such nodes"
    if len(record.moves) >= MAX_MOVES:
        return None, (f"{len(record.moves)} moves are in place, the most the operator keeps: "
                      "no further move until the burst passes and they are undone")
    done = [m.at_s for m in record.moves] + ([record.last_s] if record.last_s else [])
    if done and view.sampled_at_s <= max(done):
        return None, "waiting for a sample taken after the last move"
    try:
        mv = plan_move(view.ring, view.keys, view.rf, view.read_ratio, view.read_spread,
                       view.background, view.max_move_fraction)
    except SkewError as exc:
        return None, f"the skew model refused the sample: {exc}"
    if mv is None:
        return None, (f"no move of one token within maxMovePercent "
                      f"({view.max_move_fraction:.0%} of the data) lowers the busiest pod")
    return mv, ""


def start(record: Record, uw: UnderWay, said: str, port: TokenMovePort, ns: str,
          container: str, nodetool: tuple[str, ...], event: tuple[str, str, bool]
          ) -> SkewAct:
    def effect() -> None:
        port.start_move(ns, uw.pod, container, nodetool, uw.to_token)

    new = Record(record.moves, uw, said, uw.started_s)
    return SkewAct(new.to_status(), effect, (event,), said)


def revert_target(record: Record, store: StoreRing, pods: Sequence[str], rf: int,
                  max_fraction: float) -> tuple[MoveEntry | None, str]:
    """The last move in place if the store bears it out and undoing it is within the
    bound; else None and why (the entry is then dropped from the record: the store
    disagrees with it)."""
    last = record.moves[-1]
    if last.pod not in store.tokens:
        return None, f"{last.pod} is not a serving pod any more"
    if store.tokens[last.pod] != (last.to_token,):
        return None, (f"{last.pod} holds {list(store.tokens[last.pod])}, not the token "
                      f"{last.to_token} the record says it was moved to")
    if any(last.from_token in t for t in store.tokens.values()):
        return None, f"its old token {last.from_token} is held by a node"
    now = store.ring(pods)
    frac = streamed_fraction(now, now.moved(last.pod, last.from_token), rf)
    if frac > max_fraction + 1e-9:
        return None, (f"undoing it would stream {frac:.1%} of the data, more than "
                      f"maxMovePercent ({max_fraction:.0%})")
    return last, f"{frac:.2%}"


def split_for(view: SkewView | None, pod: str) -> tuple[int | None, str]:
    """The token a new pod ``pod`` is to join at so that it takes the hottest ranges
    (:func:`elastore.models.skew.split_token` on the last sample), and what it does to
    the modelled imbalance; None and why when there is none to choose."""
    if view is None or view.ring is None or view.keys is None or len(view.keys) == 0:
        return None, "no sample of the ring and its hot keys"
    ring = view.ring
    if not ring.single_token:
        return None, "the ring has vnodes: a token list per pod is not chosen here"
    if pod in ring.names:
        return None, f"{pod} is in the sampled ring already"
    try:
        tok = split_token(ring, view.keys, view.rf, view.read_ratio, view.read_spread,
                          view.background)
        before = imbalance(node_shares(ring, view.keys, view.rf, view.read_ratio,
                                       view.read_spread, view.background))
        grown = ring.with_node(pod, tok)
        after = imbalance(node_shares(grown, view.keys, view.rf, view.read_ratio,
                                      view.read_spread, view.background))
    except SkewError as exc:
        return None, f"the skew model refused the sample: {exc}"
    return tok, (f"{pod} joins at token {tok}, splitting the hot range: the busiest pod's "
                 f"modelled load x{before:.2f} -> x{after:.2f} of the mean")
