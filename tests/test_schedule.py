"""The cheapest schedule (elastore.planner.schedule) against brute-force enumeration of
every schedule on small horizons, simulated step by step as the simulator's engine does."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastore.errors import ElastoreError
from elastore.planner.schedule import Horizon, RateRule, cheapest
from elastore.units import MIB


def random_horizon(rng: np.random.Generator, n_counts: int, steps: int, rules: int,
                   boot: int) -> Horizon:
    def tbl() -> np.ndarray:
        return rng.uniform(0.5, 3.0, (n_counts, steps))

    def viol(p: float) -> np.ndarray:
        return rng.random((n_counts, steps)) < p

    return Horizon(
        step_s=1.0, n_lo=2,
        idle_violates=viol(0.3),
        rules=tuple(RateRule(f"r{k}", tbl(), viol(0.4), tbl(), viol(0.4))
                    for k in range(rules)),
        boot_steps=boot,
        add_bytes=rng.uniform(0.5, 4.0, n_counts) * MIB,
        remove_bytes=rng.uniform(0.5, 4.0, n_counts) * MIB,
    )


def enumerate_all(h: Horizon, n0: int, penalty: float) -> float:
    """Every schedule, each simulated step by step (bytes left, billed, violated): the
    least U."""
    T, dt_h = h.steps, h.step_s / 3600

    def run(s: int, n: int) -> float:  # the least cost from (s, n) idle, by enumeration
        if s >= T:
            return 0.0
        k = n - h.n_lo
        best = dt_h * (n + penalty * h.idle_violates[k, s]) + run(s + 1, n)
        for rule in h.rules:
            for d in (1, -1):
                if not h.n_lo <= n + d <= h.n_hi:
                    continue
                cost, t = 0.0, s
                if d > 0:
                    left = h.add_bytes[k]
                    for _ in range(h.boot_steps):  # booting: n serve, n + 1 billed
                        if t >= T:
                            break
                        cost += dt_h * (n + 1 + penalty * h.idle_violates[k, t])
                        t += 1
                    while t < T and left > 1e-6:
                        cost += dt_h * (n + 1 + penalty * rule.add_violates[k, t])
                        left -= min(left, rule.add_mibps[k, t] * h.step_s * MIB)
                        t += 1
                    done = left <= 1e-6
                else:
                    left = h.remove_bytes[k]
                    while t < T and left > 1e-6:
                        cost += dt_h * (n + penalty * rule.remove_violates[k, t])
                        left -= min(left, rule.remove_mibps[k, t] * h.step_s * MIB)
                        t += 1
                    done = left <= 1e-6
                best = min(best, cost + (run(t, n + d) if done else 0.0))
        return best

    return run(0, n0)


@pytest.mark.parametrize("seed", range(12))
def test_the_dynamic_programme_finds_the_cheapest_of_every_schedule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    h = random_horizon(rng, n_counts=3, steps=int(rng.integers(5, 9)),
                       rules=int(rng.integers(1, 3)), boot=int(rng.integers(0, 2)))
    n0 = int(rng.integers(2, 5))
    penalty = float(rng.choice([0.5, 3.0, 40.0]))
    sched = cheapest(h, n0, penalty)
    want = enumerate_all(h, n0, penalty)
    assert sched.cost == pytest.approx(want, rel=1e-9, abs=1e-12)
    # the schedule it returns costs what it says
    assert sched.vm_hours + penalty * sched.violation_hours == pytest.approx(sched.cost)
    # one change at a time, each from where the last left the cluster
    n = n0
    last = 0
    for m in sched.moves:
        assert m.start >= last and m.n_from == n and abs(m.n_to - m.n_from) == 1
        n, last = m.n_to, m.end


def test_a_high_penalty_pays_for_capacity_and_a_low_one_does_not() -> None:
    """Violating idle at 2 servers, fine at 3; adding a node takes 2 steps. At a penalty
    of 100 the node is added at once; at 0.1 a violation-hour is cheaper than a node."""
    steps = 12
    short = np.array([[True] * steps, [False] * steps])  # 2 servers violate, idle or not
    h = Horizon(step_s=60.0, n_lo=2, idle_violates=short,
                rules=(RateRule("r", np.full((2, steps), 1.0), short,
                                np.full((2, steps), 1.0), short),),
                boot_steps=0, add_bytes=np.array([100 * MIB, 100 * MIB]),
                remove_bytes=np.array([100 * MIB, 100 * MIB]))
    high = cheapest(h, 2, penalty=100.0)
    assert [(m.start, m.n_to) for m in high.moves] == [(0, 3)] and high.moves[0].end == 2
    assert high.violation_hours == pytest.approx(2 * 60 / 3600)
    low = cheapest(h, 2, penalty=0.1)
    assert low.moves == [] and low.violation_hours == pytest.approx(steps * 60 / 3600)


def test_the_floor_forbids_an_early_removal_and_the_terminal_value_counts() -> None:
    steps = 10
    quiet = np.zeros((3, steps), bool)
    h = Horizon(step_s=60.0, n_lo=2, idle_violates=quiet,
                rules=(RateRule("r", np.full((3, steps), 10.0), quiet, np.full((3, steps), 10.0),
                                quiet),),
                boot_steps=0, add_bytes=np.full(3, 10 * MIB), remove_bytes=np.full(3, 10 * MIB))
    free = cheapest(h, 4, penalty=10.0)
    assert [m.n_to for m in free.moves] == [3, 2] and free.moves[0].start == 0
    held = cheapest(h, 4, penalty=10.0, floor=np.array([4] * 5 + [2] * 5))
    assert held.moves[0].start == 5
    # ending below 4 servers costs infinitely much: whatever it does in between, it ends
    # at 4, finished
    stay = cheapest(h, 4, penalty=10.0, terminal=np.array([math.inf, math.inf, 0.0]))
    assert math.isfinite(stay.cost) and stay.servers_at(steps) == 4
    assert all(m.end <= steps for m in stay.moves)


def test_bad_horizons_are_refused() -> None:
    rng = np.random.default_rng(0)
    h = random_horizon(rng, 3, 5, 1, 0)
    with pytest.raises(ElastoreError, match="outside"):
        cheapest(h, 9, 1.0)
    with pytest.raises(ElastoreError, match="penalty"):
        cheapest(h, 2, -1.0)
    r = h.rules[0]
    bad = RateRule("x", r.add_mibps[:, :2], r.add_violates, r.remove_mibps, r.remove_violates)
    with pytest.raises(ElastoreError, match="shape"):
        cheapest(Horizon(1.0, 2, h.idle_violates, (bad,), 0, h.add_bytes, h.remove_bytes),
                 2, 1.0)
