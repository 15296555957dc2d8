"""Scale-down stabilization, as the Kubernetes HPA does it. Pure, and the only copy.

A controller remembers its *raw* recommendations (what it would do without stabilization)
for ``window_s`` seconds, and never goes below the highest of them. Remembering the
stabilized output instead would hold a scale-down off for ever: each stabilized value
would keep the next one up.

The memory is a sliding-window maximum: a recommendation no higher than a newer one can
never be the window's maximum again, so it is dropped. What is kept is short however long
the window and however short the period (it fits in a CR status).

Used by the ProRenaTa loop (:mod:`elastore.planner.loop`, the operator and the simulator),
and by the simulator's HPA and Holt-Winters baselines.
"""

from __future__ import annotations

Recommendations = tuple[tuple[float, int], ...]  # (time_s, replicas), oldest first

#: at most this many recommendations are kept (a sliding-window maximum needs far fewer)
MAX_KEPT = 64


def within(recent: Recommendations, now_s: float, window_s: float) -> Recommendations:
    """The recommendations made in the last ``window_s`` seconds."""
    return tuple((t, n) for t, n in recent if now_s - t <= window_s)


def remember(recent: Recommendations, now_s: float, raw: int, window_s: float
             ) -> Recommendations:
    """``recent`` with the raw recommendation ``raw`` made at ``now_s`` added; those older
    than the window, and those that can no longer be its maximum, are dropped."""
    kept = list(within(recent, now_s, window_s))
    while kept and kept[-1][1] <= raw:
        kept.pop()
    return (*kept, (now_s, raw))[-MAX_KEPT:]


def stabilized(target: int, current: int, now_s: float, window_s: float,
               recent: Recommendations) -> int:
    """``target``, unless it scales down: then never below the highest recommendation of
    the last ``window_s`` seconds (nor above ``current``)."""
    if target >= current or window_s <= 0:
        return target
    return min(current, max([target, *(n for _, n in within(recent, now_s, window_s))]))
