"""The cleanup after a scale-out in the simulator (issue 41, item 4): the engine runs
``nodetool cleanup`` on each old node in turn at the migration rate and holds removals
until it has; a further join cuts it short; ``--no-cleanup`` is the reference text's
cluster. The exact planner (``elastore.planner.schedule.cheapest``) obeys the same rules,
so ``optimal`` stays a lower bound."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from elastore.models.bundle import ModelSet
from elastore.planner.schedule import Horizon, RateRule, cheapest
from elastore.sim.cli import PLACEHOLDER
from elastore.sim.engine import Cluster
from elastore.sim.run import KINDS, SimConfig, locate, simulate
from elastore.traces import builtin_trace_path, read_series
from elastore.units import MIB

GIB = 2**30


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(PLACEHOLDER)


@pytest.fixture(scope="module")
def series():  # type: ignore[no-untyped-def]
    return read_series(builtin_trace_path()).cleaned()


def joined(n: int, data: float, cleanup: str = "after-join", rate: float = 8.0,
           volume: float | None = None) -> tuple[Cluster, list[str], float]:
    """A balanced cluster of ``n`` that adds a node (no boot) at ``rate`` MiB/s: it, the
    kinds of the steps so far, and the time after the step the node joined in."""
    c = Cluster.balanced(n, data, boot_s=0.0, volume_bytes=volume)
    c.cleanup = cleanup  # type: ignore[assignment]
    c.target = n + 1
    kinds, t = [], 0.0
    while c.serving == n:
        kinds.append(c.step(t, 10.0, rate)[0])
        t += 10.0
    return c, kinds, t


# -- the engine --------------------------------------------------------------------------------
def test_a_removal_waits_until_every_old_node_is_cleaned_d_over_rate_later() -> None:
    c, kinds, t = joined(4, 8 * GIB)
    assert kinds[-1] == "bootstrap" and c.serving == 5
    # each old node rewrites its data and what it streamed to the new node: D in all
    assert len(c.cleaning) == 4 and sum(c.cleaning) == pytest.approx(8 * GIB)
    assert c.cleanup_left_s(8.0) == pytest.approx(8 * 1024 / 8.0)
    c.target = 4  # the plan wants the node out at once
    after = []
    while c.serving == 5 and c.op is None:
        after.append(c.step(t, 10.0, 8.0)[0])
        t += 10.0
    # 8 GiB at 8 MiB/s is 1024 s: 103 steps of cleanup (the last partly), then the removal
    assert after == ["cleanup"] * math.ceil(1024 / 10) + ["decommission"]
    assert c.held_s == pytest.approx(10.0 * math.ceil(1024 / 10))
    # the reference text's cluster: the removal starts the step after the join
    d, _, t = joined(4, 8 * GIB, cleanup="drain")
    d.target = 4
    assert d.step(t, 10.0, 8.0)[0] == "decommission" and d.cleaning == []


def test_the_cleanup_runs_at_the_rate_in_force_and_then_the_cluster_is_idle() -> None:
    c, _, t = joined(3, 3 * GIB)
    steps = []
    while c.cleaning:
        kind, used, billed = c.step(t, 10.0, 16.0)
        steps.append((kind, used, billed))
        t += 10.0
    # 3 GiB at 16 MiB/s: 192 s, 20 steps; billed as the nodes serving, no extra node
    assert steps == [("cleanup", 16.0, 4)] * 20
    assert c.step(t, 10.0, 16.0)[0] == "idle"


def test_a_further_join_cuts_the_cleanup_short_and_its_own_covers_every_old_node() -> None:
    c, _, t = joined(3, 6 * GIB)
    for _ in range(5):
        assert c.step(t, 10.0, 8.0)[0] == "cleanup"
        t += 10.0
    assert 0 < sum(c.cleaning) < 6 * GIB
    c.target = 5
    assert c.step(t, 10.0, 8.0)[0] == "bootstrap"  # no boot here: it streams at once
    assert c.cleaning == [] and c.cleanups_superseded == 1
    t += 10.0
    while c.serving == 4:
        c.step(t, 10.0, 8.0)
        t += 10.0
    # the four old nodes of the second join, D in all, again from the first
    assert len(c.cleaning) == 4 and sum(c.cleaning) == pytest.approx(6 * GIB)


def test_the_streamed_bytes_are_freed_node_by_node() -> None:
    c, _, t = joined(4, 80 * GIB, volume=100 * GIB)
    streamed = 80 * GIB / 4 - 80 * GIB / 5
    assert c.garbage[:4] == pytest.approx([streamed] * 4) and c.garbage[4] == 0
    seen = []
    while c.cleaning:
        c.step(t, 10.0, 8.0)
        t += 10.0
        freed = [g == 0 for g in c.garbage[:4]]
        seen.append(sum(freed))
        # ordinal 0 first: the nodes freed so far are a prefix
        assert freed == sorted(freed, reverse=True)
    assert seen[0] == 0 and seen[-1] == 4 and sorted(seen) == seen
    assert 1 in seen and 2 in seen and 3 in seen  # one at a time
    assert sum(c.used()) == pytest.approx(sum(c.data)) == pytest.approx(80 * GIB)
    # the reference text's cluster drains them at cleanup_mibps on every node at once
    d, _, t = joined(4, 80 * GIB, cleanup="drain", volume=100 * GIB)
    d.step(t, 10.0, 8.0)
    assert all(0 < g < streamed for g in d.garbage[:4])


# -- the planner's exact schedule with the cleanup ---------------------------------------------
def random_horizon(rng: np.random.Generator, n_counts: int, steps: int, rules: int,
                   boot: int) -> Horizon:
    def tbl() -> np.ndarray:
        return rng.uniform(0.5, 3.0, (n_counts, steps))

    def viol(p: float) -> np.ndarray:
        return rng.random((n_counts, steps)) < p

    return Horizon(step_s=1.0, n_lo=2, idle_violates=viol(0.3),
                   rules=tuple(RateRule(f"r{k}", tbl(), viol(0.4), tbl(), viol(0.4), tbl(),
                                        viol(0.4)) for k in range(rules)),
                   boot_steps=boot, add_bytes=rng.uniform(0.5, 4.0, n_counts) * MIB,
                   remove_bytes=rng.uniform(0.5, 4.0, n_counts) * MIB,
                   clean_bytes=rng.uniform(0.5, 6.0, n_counts) * MIB)


def enumerate_all(h: Horizon, n0: int, penalty: float, cleaning: float | None = None
                  ) -> float:
    """Every schedule, each simulated step by step as the engine runs it: after a join the
    cleanup (rule chosen as it starts) until its bytes are rewritten, an addition possible
    at any of its steps, no removal; the least U. ``cleaning``: start in a cleanup with this
    much left."""
    T, dt_h = h.steps, h.step_s / 3600

    def add(s: int, n: int, rule: RateRule) -> float:
        k = n - h.n_lo
        cost, t, left = 0.0, s, float(h.add_bytes[k])
        for _ in range(h.boot_steps):
            if t >= T:
                break
            cost += dt_h * (n + 1 + penalty * h.idle_violates[k, t])
            t += 1
        while t < T and left > 1e-6:
            cost += dt_h * (n + 1 + penalty * rule.add_violates[k, t])
            left -= min(left, rule.add_mibps[k, t] * h.step_s * MIB)
            t += 1
        return cost + (clean(t, n + 1) if left <= 1e-6 else 0.0)

    def adds(s: int, n: int) -> float:
        return min(add(s, n, r) for r in h.rules) if n < h.n_hi else math.inf

    def clean(s: int, n: int, nbytes: float | None = None) -> float:
        if s >= T:
            return 0.0
        k, best = n - h.n_lo, math.inf
        assert h.clean_bytes is not None
        for q in h.rules:
            assert q.clean_mibps is not None and q.clean_violates is not None
            left = float(h.clean_bytes[k]) if nbytes is None else nbytes
            cost, t = 0.0, s
            while True:
                if left <= 1e-6:
                    best = min(best, cost + idle(t, n))
                    break
                if t >= T:
                    best = min(best, cost)
                    break
                best = min(best, cost + adds(t, n))  # a further join cuts it short
                v = max(q.clean_violates[k, t], h.idle_violates[k, t])
                cost += dt_h * (n + penalty * v)
                left -= min(left, q.clean_mibps[k, t] * h.step_s * MIB)
                t += 1
        return best

    def idle(s: int, n: int) -> float:
        if s >= T:
            return 0.0
        k = n - h.n_lo
        best = min(dt_h * (n + penalty * h.idle_violates[k, s]) + idle(s + 1, n), adds(s, n))
        if n > h.n_lo:
            for rule in h.rules:
                left, cost, t = float(h.remove_bytes[k]), 0.0, s
                while t < T and left > 1e-6:
                    cost += dt_h * (n + penalty * rule.remove_violates[k, t])
                    left -= min(left, rule.remove_mibps[k, t] * h.step_s * MIB)
                    t += 1
                best = min(best, cost + (idle(t, n - 1) if left <= 1e-6 else 0.0))
        return best

    return idle(0, n0) if cleaning is None else clean(0, n0, cleaning)


@pytest.mark.parametrize("seed", range(16))
def test_the_exact_schedule_with_cleanup_is_the_cheapest_of_every_schedule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    h = random_horizon(rng, n_counts=3, steps=int(rng.integers(5, 10)),
                       rules=int(rng.integers(1, 3)), boot=int(rng.integers(0, 2)))
    n0 = int(rng.integers(2, 5))
    penalty = float(rng.choice([0.5, 3.0, 40.0]))
    for cleaning in (None, float(rng.uniform(0.5, 6.0)) * MIB):
        sched = cheapest(h, n0, penalty, cleaning_bytes=cleaning or 0.0)
        assert sched.cost == pytest.approx(enumerate_all(h, n0, penalty, cleaning),
                                           rel=1e-9, abs=1e-12)
        assert sched.vm_hours + penalty * sched.violation_hours == pytest.approx(sched.cost)
        for a, b in zip(sched.moves, sched.moves[1:], strict=False):
            if b.n_to < b.n_from and a.n_to > a.n_from:
                assert b.start >= a.clean_end  # no removal during a cleanup


def test_a_join_holds_the_planned_removal_and_a_second_join_cuts_the_cleanup() -> None:
    """Two servers violate in steps 0..7, three from step 10 on if the load rises. A join
    moves its data in 4 steps, its cleanup in 6. Without the rise the plan adds a node at
    once and removes it as soon as it may: at step 4 without a cleanup (back at 2 servers
    by step 8), at step 10 with one. With the rise a second join must end by step 10: it
    starts at 6, cutting the first join's cleanup short."""
    steps, n = 30, 3
    bump = np.zeros((n, steps), bool)
    bump[0, :8] = True
    rate = np.full((n, steps), 1.0)

    def horizon(v: np.ndarray, cleanup: bool = True) -> Horizon:
        return Horizon(step_s=1.0, n_lo=2, idle_violates=v,
                       rules=(RateRule("r", rate, v, rate, np.zeros_like(v), rate, v),),
                       boot_steps=0, add_bytes=np.full(n, 4 * MIB),
                       remove_bytes=np.full(n, 4 * MIB),
                       clean_bytes=np.full(n, 6 * MIB) if cleanup else None)

    plain = cheapest(horizon(bump, cleanup=False), 2, penalty=100.0)
    assert [(m.start, m.end, m.n_to) for m in plain.moves] == [(0, 4, 3), (4, 8, 2)]
    held = cheapest(horizon(bump), 2, penalty=100.0)
    up, down = held.moves
    assert (up.start, up.end, up.n_to, up.clean_end) == (0, 4, 3, 10)
    assert (down.start, down.n_to) == (10, 2)
    assert held.cleaning_at(4) == up and held.cleaning_at(9) == up
    assert held.cleaning_at(10) is None and held.move_at(10) == down
    rise = bump.copy()
    rise[:2, 10:] = True  # two and three servers fall short
    cut = cheapest(horizon(rise), 2, penalty=100.0)
    a, b = cut.moves[:2]
    assert (a.n_to, b.n_to) == (3, 4)
    assert (b.start, b.end) == (6, 10) and a.clean_end == 6  # 2 steps into the cleanup
    assert cut.violation_hours == pytest.approx(4 / 3600)  # only the first join's steps


# -- the replay ----------------------------------------------------------------------------------
def test_optimal_with_cleanup_is_what_the_replay_measures_and_a_lower_bound(series, ms) -> None:  # type: ignore[no-untyped-def]
    from elastore.sim import controllers

    made: dict[str, Any] = {}
    attach = controllers.OptimalController.attach

    def keep(self, *a):  # type: ignore[no-untyped-def]
        attach(self, *a)
        made["schedule"] = self.schedule

    i0, h = locate(series, "2009-03-09", "2009-03-10 23:00")
    cfg = SimConfig(data_gib=20.0)
    assert cfg.cleanup  # the default
    names = ["optimal", "prorenata", "hpa", "feedback", "static-peak"]
    controllers.OptimalController.attach = keep  # type: ignore[method-assign]
    try:
        res = simulate(series, i0, h, names, ms, cfg, "test")
    finally:
        controllers.OptimalController.attach = attach  # type: ignore[method-assign]
    sched = made["schedule"]
    run = res.runs["optimal"]
    assert any(m.cleans for m in sched.moves)
    assert (run.kind == KINDS["cleanup"]).any()
    vm = run.billed.sum() * cfg.step_s / 3600
    viol_h = (run.p95_ms > res.slo_ms).sum() * cfg.step_s / 3600
    assert vm == pytest.approx(sched.vm_hours, rel=1e-9)
    assert viol_h == pytest.approx(sched.violation_hours, abs=1e-9)
    u = {n: r.metrics(cfg.step_s, res.slo_ms, cfg.penalty)["utility"]["100"]
         for n, r in res.runs.items()}
    assert all(u["optimal"] <= v + 1e-9 for v in u.values()), u
    # every controller's removal waited for the cleanup of the join before it
    for r in res.runs.values():
        k = r.kind
        after_clean = np.flatnonzero((k[:-1] == KINDS["cleanup"]) & (k[1:] != KINDS["cleanup"]))
        assert all(k[i + 1] in (KINDS["idle"], KINDS["boot"], KINDS["decommission"])
                   for i in after_clean)


def test_no_cleanup_is_the_reference_texts_cluster(series, ms) -> None:  # type: ignore[no-untyped-def]
    """--no-cleanup: no cleanup step, no removal held, the planner and the operator's spec
    told so; the same replay with the engine's cleanup differs."""
    from elastore.sim import controllers

    specs: list[dict[str, Any]] = []
    attach = controllers.OperatorController.attach

    def keep(self, cluster, ctx, replay):  # type: ignore[no-untyped-def]
        attach(self, cluster, ctx, replay)
        specs.append(self.policy_spec(ctx))
        assert cluster.cleanup == ("external" if replay.cleanup else "drain")

    i0, h = locate(series, "2009-03-09", "2009-03-09 11:00")
    names = ["feedback", "prorenata", "optimal", "operator"]
    controllers.OperatorController.attach = keep  # type: ignore[method-assign]
    try:
        off = simulate(series, i0, h, names, ms, SimConfig(cleanup=False), "test")
        on = simulate(series, i0, h, names, ms, SimConfig(), "test")
    finally:
        controllers.OperatorController.attach = attach  # type: ignore[method-assign]
    assert specs[0]["scaleUp"] == {"cleanup": False} and specs[1]["scaleUp"] == {"cleanup": True}
    for r in off.runs.values():
        assert not (r.kind == KINDS["cleanup"]).any(), r.name
    assert off.to_json()["replay"]["cleanup"] is False
    assert on.to_json()["replay"]["cleanup"] is True
    assert (on.runs["feedback"].kind == KINDS["cleanup"]).any()
    assert on.runs["feedback"].p95_ms.sum() > off.runs["feedback"].p95_ms.sum()


def test_the_no_cleanup_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from elastore.sim.cli import simulate_cmd

    args = ["--start", "2009-03-09", "--end", "2009-03-09 05:00", "--controllers",
            "feedback", "--model", "placeholder", "--json", "--out", str(tmp_path)]
    off = CliRunner().invoke(simulate_cmd, [*args, "--no-cleanup"])
    on = CliRunner().invoke(simulate_cmd, args)
    assert off.exit_code == 0 and on.exit_code == 0, off.output + on.output
    doc_off, doc_on = (json.loads(r.output[r.output.index("{"):]) for r in (off, on))
    assert doc_off["replay"]["cleanup"] is False and doc_on["replay"]["cleanup"] is True
    assert "--no-cleanup" in CliRunner().invoke(simulate_cmd, ["--help"]).output


def test_the_operators_cleanups_take_its_nodes_bytes_at_its_throttle(series, ms) -> None:  # type: ignore[no-untyped-def]
    """The operator's runner issues each cleanup through the simulated API, which times it
    as the node's data and what it streamed to the node that joined (D over the old nodes)
    at the compaction throttle the runner set; its steps are cleanup steps, and each node's
    streamed bytes are freed when its cleanup ends."""
    from elastore.sim import controllers

    issued: list[tuple[float, float, float, int]] = []  # seconds, bytes, MiB/s, old nodes
    attach = controllers.OperatorController.attach

    def keep(self, *a):  # type: ignore[no-untyped-def]
        attach(self, *a)
        kube = self.kube
        start = kube.start_cleanup

        def start_cleanup(ns, pod, *rest):  # type: ignore[no-untyped-def]
            start(ns, pod, *rest)
            k = int(pod.rsplit("-", 1)[1])
            issued.append((kube.cleanup_took[pod], kube.cluster.cleanup_bytes_of(k),
                           kube.cleanup_mibps(pod), kube.cluster.serving - 1))

        kube.start_cleanup = start_cleanup

    i0, h = locate(series, "2009-03-09", "2009-03-09 11:00")
    controllers.OperatorController.attach = keep  # type: ignore[method-assign]
    try:
        runs = {}
        for gib in (10.0, 40.0):
            issued.clear()
            runs[gib] = (simulate(series, i0, h, ["operator"], ms, SimConfig(data_gib=gib),
                                  "test").runs["operator"], list(issued))
    finally:
        controllers.OperatorController.attach = attach  # type: ignore[method-assign]
    for gib, (run, cleanups) in runs.items():
        assert cleanups and (run.kind == KINDS["cleanup"]).any(), gib
        for took, nbytes, mibps, old in cleanups:
            assert took == pytest.approx(nbytes / (mibps * MIB), rel=1e-12)
            # a balanced ring: each old node held D / old before the join
            assert nbytes == pytest.approx(gib * GIB / old, rel=1e-6)
    # four times the data: each node's cleanup at the same size and throttle, four times as long
    small = {(old, mibps): took for took, _, mibps, old in runs[10.0][1]}
    both = [(took, small[(old, mibps)]) for took, _, mibps, old in runs[40.0][1]
            if (old, mibps) in small]
    assert both and all(b == pytest.approx(4 * a, rel=1e-9) for b, a in both)
