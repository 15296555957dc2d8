"""When to rebalance a hot node without buying one (issue 38, "act, cheapest first"). Pure,
and the only copy: the operator's period asks it each control period; what the store then
does (Cassandra: a bounded ``nodetool move``; Swift: a device's weight) is its driver's.

The rule is the trigger/stop/revert hysteresis of
``../shared/reference/storage-qos-thesis-ch3-chunk-placement.txt`` §3.5.2
(:func:`elastore.models.skew.hysteresis_step`: act at a smoothed busiest-node utilization of
75 %, stop below 55 %, revert below 45 %), on the *busiest* node's utilization (its load
over what one node serves within the SLO), gated so that it never competes with a step of
the node count:

* a rebalancing acts only when the busiest node is at least ``imbalanceThreshold`` times the
  mean: a hot cluster that is evenly loaded needs nodes, not moves;
* it acts only when the plan wants no other size now and no node step runs (a step moves
  ranges itself; Cassandra refuses a move during a join or a leave, and a join during a
  move);
* a pod's load unread holds everything (never a 0): the state is kept as it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from elastore.models.skew import HysteresisState, hysteresis_step

Action = Literal["act", "revert", "hold", "none"]


@dataclass(frozen=True)
class RebalanceFacts:
    """What one period knows, as plain data."""

    #: the busiest pod's load over one node's capacity at the SLO (None: a pod unread, or
    #: no capacity to judge by)
    busiest_utilization: float | None
    #: the busiest pod's load over the mean (None: not known)
    imbalance: float | None
    imbalance_threshold: float
    #: (trigger, stop, revert) as fractions
    cutoffs: tuple[float, float, float]
    #: the plan wants another size now (a node step's turn), or one runs
    node_step: bool
    #: rebalancing steps in place that a revert would undo
    in_place: int
    #: a rebalancing step is under way (followed, not decided on)
    under_way: bool


@dataclass(frozen=True)
class RebalanceDecision:
    state: HysteresisState
    action: Action
    why: str


def decide(state: HysteresisState, f: RebalanceFacts) -> RebalanceDecision:
    """This period's action and the hysteresis' next state."""
    u = f.busiest_utilization
    if u is None or not math.isfinite(u) or u < 0:
        return RebalanceDecision(state, "hold", "the busiest pod's utilization is unknown "
                                                "(a pod's load unread): nothing changes")
    high, stop, revert = f.cutoffs
    if f.in_place > 0 and not state.active:  # steps in place are to be undone in time
        state = HysteresisState(state.smoothed, True)
    nxt, said = hysteresis_step(state, u, high=high, stop=stop, revert=revert)
    s = nxt.smoothed if nxt.smoothed is not None else u
    at = f"busiest pod at {u:.0%} of its capacity (smoothed {s:.0%})"
    if f.under_way:
        return RebalanceDecision(nxt, "hold", f"{at}; a rebalancing step is under way")
    if said == "act":
        if f.imbalance is None or f.imbalance < f.imbalance_threshold:
            imb = "unknown" if f.imbalance is None else f"{f.imbalance:.2f}"
            return RebalanceDecision(nxt, "hold", (
                f"{at}, at or above the trigger {high:.0%}, but the imbalance ({imb}) is "
                f"below the threshold {f.imbalance_threshold:g}: nodes, not moves, help"))
        if f.node_step:
            return RebalanceDecision(nxt, "hold", f"{at}, at or above the trigger "
                                                  f"{high:.0%}: a node step goes first")
        return RebalanceDecision(nxt, "act", f"{at}, at or above the trigger {high:.0%}")
    if said == "revert":
        if f.in_place <= 0:
            return RebalanceDecision(nxt, "none", f"{at}, below the revert line {revert:.0%}; "
                                                  "nothing in place to undo")
        if f.node_step:
            # still reverting: the state stays active until the undo can run
            return RebalanceDecision(HysteresisState(nxt.smoothed, True), "hold",
                                     f"{at}, below the revert line {revert:.0%}: the undo "
                                     "waits for the node step")
        return RebalanceDecision(HysteresisState(nxt.smoothed, f.in_place > 1), "revert",
                                 f"{at}, below the revert line {revert:.0%}")
    if said == "stop":
        return RebalanceDecision(nxt, "hold", f"{at}, below the stop line {stop:.0%}: no "
                                              "further step, those in place kept")
    if nxt.active or f.in_place > 0:
        return RebalanceDecision(HysteresisState(nxt.smoothed, True), "hold",
                                 f"{at}: steps in place kept")
    return RebalanceDecision(nxt, "none", f"{at}, below the trigger {high:.0%}")
