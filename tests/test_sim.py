"""Simulator invariants, the JSON contract and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from elastore.cli import cli, register
from elastore.models.bundle import ModelSet
from elastore.sim.cli import PLACEHOLDER
from elastore.sim.engine import Cluster
from elastore.sim.run import KINDS, SimConfig, locate, simulate
from elastore.traces import builtin_trace_path, read_series
from elastore.units import MIB

register()
GIB = 2**30


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(PLACEHOLDER)


@pytest.fixture(scope="module")
def series():  # type: ignore[no-untyped-def]
    return read_series(builtin_trace_path()).cleaned()


@pytest.fixture(scope="module")
def week(series, ms):  # type: ignore[no-untyped-def]
    i0, h = locate(series, "2009-03-08", "2009-03-14 23:00")
    return simulate(series, i0, h, ["feedback", "prorenata", "hpa"], ms, SimConfig(), "test")


def test_data_is_conserved_during_migration(week) -> None:  # type: ignore[no-untyped-def]
    d = week.config.data_gib * GIB
    for run in week.runs.values():
        assert np.allclose(run.data_total, d, rtol=1e-9), run.name
        assert (run.kind == KINDS["bootstrap"]).any() and (run.kind == KINDS["decommission"]).any()


def test_vm_hours_accounting(week) -> None:  # type: ignore[no-untyped-def]
    dt = week.config.step_s
    for run in week.runs.values():
        m = run.metrics(dt, week.slo_ms)
        assert m["vm_hours"] == pytest.approx(run.billed.sum() * dt / 3600)
        # billed = serving, plus the joining node while one boots or bootstraps
        joining = np.isin(run.kind, [KINDS["boot"], KINDS["bootstrap"]])
        assert np.array_equal(run.billed, run.serving + joining)


def test_vm_hours_by_hand() -> None:
    c = Cluster.balanced(4, 10 * GIB, boot_s=30.0)
    c.target = 5
    billed = []
    kinds = []
    for s in range(100):
        kind, _, b = c.step(s * 10.0, 10.0, 8.0)
        kinds.append(kind)
        billed.append(b)
    # 30 s boot (3 steps), then 4 senders each move 10/4 - 10/5 GiB = 512 MiB at 8 MiB/s:
    # 64 s -> 7 steps; the 5th node is billed from the first boot step on
    assert kinds[:3] == ["boot"] * 3 and kinds[3:10] == ["bootstrap"] * 7
    assert kinds[10] == "idle"
    assert billed[0] == 5 and c.serving == 5
    assert sum(billed) * 10 / 3600 == pytest.approx(5 * 1000 / 3600)


def test_no_server_removed_before_its_data_moved() -> None:
    c = Cluster.balanced(4, 8 * GIB, boot_s=0.0)
    c.target = 3
    leaving = c.data[-1]
    t, steps = 0.0, 0
    while c.op is not None or c.serving == 4:
        c.step(t, 10.0, 2.0)
        t += 10.0
        steps += 1
        if c.op is not None:
            assert c.serving == 4 and c.op.leaving_data > 0  # still there, still serving
    # 2 GiB at 2 MiB/s is 1024 s: it was not removed a step earlier
    assert steps == int(np.ceil(leaving / (2.0 * MIB) / 10.0))
    assert c.serving == 3 and sum(c.data) == pytest.approx(8 * GIB)


def test_latency_rises_with_migration(series, ms) -> None:  # type: ignore[no-untyped-def]
    i0, h = locate(series, "2009-03-08", "2009-03-10 23:00")
    slow = simulate(series, i0, h, ["feedback"], ms, SimConfig(default_stream_mibps=4.0), "t")
    fast = simulate(series, i0, h, ["feedback"], ms, SimConfig(default_stream_mibps=24.0), "t")
    def migrating_p95(res):  # type: ignore[no-untyped-def]
        r = res.runs["feedback"]
        sel = np.isin(r.kind, [KINDS["bootstrap"], KINDS["decommission"]])
        return float(np.median(r.p95_ms[sel]))
    assert migrating_p95(fast) > migrating_p95(slow)
    r = fast.runs["feedback"]
    idle = r.p95_ms[r.kind == KINDS["idle"]]
    dec = r.p95_ms[r.kind == KINDS["decommission"]]
    assert np.median(dec) > np.median(idle)


def test_bwman_controllers_keep_the_slo_better(week) -> None:  # type: ignore[no-untyped-def]
    m = {n: r.metrics(week.config.step_s, week.slo_ms) for n, r in week.runs.items()}
    assert m["prorenata"]["slo_violation_pct"] < m["feedback"]["slo_violation_pct"]


def test_simulate_json_contract(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["simulate", "--start", "2009-03-08", "--end", "2009-03-09",
                                   "--controllers", "feedback,static-peak", "--out",
                                   str(tmp_path / "rep"), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["trace"] == {"start": "2009-03-08 00:00:00", "end": "2009-03-09 23:00:00",
                            "hours": 48}
    assert set(doc["controllers"]) == {"feedback", "static-peak"}
    for m in doc["controllers"].values():
        assert set(m) >= {"vm_hours", "slo_violation_pct", "p95_latency_ms_median",
                          "cpu_util_mean", "scale_actions", "utility"}
        assert set(m["utility"]) == {"1", "10", "100"}
    for png in ("workload", "servers", "latency_cdf", "utilization_cdf", "utility"):
        assert (tmp_path / "rep" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "rep" / "report.md").read_text()
    # the default physics are the lab profile, and the report says so
    assert "LAB PROFILE" in report and "PLACEHOLDER" not in report
    assert "| static-peak |" in report


def test_simulate_placeholder_physics_stay_selectable(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["simulate", "--start", "2009-03-08", "--end", "2009-03-09",
                                   "--controllers", "feedback", "--model", "placeholder",
                                   "--out", str(tmp_path / "rep")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "PLACEHOLDER" in (tmp_path / "rep" / "report.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--controllers", "magic"], "unknown controller(s) magic"),
        (["--start", "2001-01-01", "--end", "2001-01-05"], "is not inside the trace"),
        (["--interference", "1:2"], "want FROM_H:TO_H:INDEX"),
        (["--interference", "5:2:0.5"], "bad interference phase"),
        (["--model", "/nonexistent.json"], "no such model file"),
    ],
)
def test_simulate_bad_input(args: list[str], message: str, tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["simulate", *args, "--out", str(tmp_path / "r")])
    assert res.exit_code == 1 and message in res.output, res.output


def test_interference_phase_is_applied(series, ms) -> None:  # type: ignore[no-untyped-def]
    i0, h = locate(series, "2009-03-08", "2009-03-10 23:00")
    quiet = simulate(series, i0, h, ["prorenata"], ms, SimConfig(), "t")
    noisy = simulate(series, i0, h, ["prorenata"], ms,
                     SimConfig(interference=((24.0, 48.0, 0.5),)), "t")
    q, n = quiet.runs["prorenata"], noisy.runs["prorenata"]
    day2 = slice(int(24 * 600 / 10), int(48 * 600 / 10))
    # Hubbub-scale: the interference-aware planner provisions more servers in the phase
    assert n.serving[day2].mean() > q.serving[day2].mean()


def test_a_replay_at_the_very_start_of_a_trace_runs(series, ms) -> None:  # type: ignore[no-untyped-def]
    """No warm-up history at all and five hours of trace: it used to die with
    RecursionError in the predictors' fallback."""
    i0, h = locate(series, "2008-10-01", "2008-10-01 04:00")
    assert i0 == 0 and h == 5
    res = simulate(series, i0, h, ["prorenata", "predict", "holt-winters"], ms, SimConfig(),
                   "test")
    assert set(res.runs) == {"prorenata", "predict", "holt-winters"}


def test_an_overload_is_a_violation_and_utilisation_above_one(series, ms) -> None:  # type: ignore[no-untyped-def]
    """Five servers at most, ten times what they carry: every step violates the SLO and the
    utilisation is ~10 (it used to read 0 % with a clamped latency surface)."""
    i0, h = locate(series, "2009-03-08", "2009-03-08 23:00")
    per = float(ms.capacity.capacity(0.95, 0.0, 0.0))
    cfg = SimConfig(peak_rps=10 * 5 * per, min_replicas=3, max_replicas=5)
    res = simulate(series, i0, h, ["static-peak"], ms, cfg, "test")
    m = res.runs["static-peak"].metrics(cfg.step_s, res.slo_ms)
    run = res.runs["static-peak"]
    assert run.serving.max() == 5
    peak = np.argmax(run.util)
    assert run.util[peak] == pytest.approx(10.0, rel=0.02)
    assert m["slo_violation_pct"] > 50 and run.p95_ms[peak] > 10 * res.slo_ms


def test_real_time_replay(series, ms) -> None:  # type: ignore[no-untyped-def]
    """--hour-seconds 3600 replays a trace hour in an hour: the same decisions take six
    times the replay time, so VM-hours are six times those of the 600 s replay for a
    controller that does not depend on migration times, and the JSON says the speed."""
    i0, h = locate(series, "2009-03-09", "2009-03-09 23:00")
    fast = simulate(series, i0, h, ["feedback"], ms, SimConfig(), "test")
    slow = simulate(series, i0, h, ["feedback"], ms, SimConfig(hour_seconds=3600.0), "test")
    vf = fast.runs["feedback"].metrics(10.0, fast.slo_ms)["vm_hours"]
    vs = slow.runs["feedback"].metrics(10.0, slow.slo_ms)["vm_hours"]
    assert vs == pytest.approx(6 * vf, rel=0.02)
    assert slow.to_json()["replay"]["hour_seconds"] == 3600.0
    res = CliRunner().invoke(cli, ["simulate", "--hour-seconds", "15"])
    assert res.exit_code == 1 and "multiple of the 10 s simulation step" in res.output


@pytest.mark.parametrize("penalty", [1.0, 100.0])
def test_optimal_is_what_the_replay_measures_and_a_lower_bound(series, ms, penalty) -> None:  # type: ignore[no-untyped-def]
    """optimal's own count of its schedule's U equals what the simulator measures when it
    replays it, and no controller reaches a lower U at that penalty."""
    from elastore.sim import controllers

    made: dict[str, object] = {}
    attach = controllers.OptimalController.attach

    def keep(self, *a):  # type: ignore[no-untyped-def]
        attach(self, *a)
        made["schedule"] = self.schedule

    i0, h = locate(series, "2009-03-09", "2009-03-10 23:00")
    cfg = SimConfig(penalty=penalty, data_gib=20.0)
    names = ["optimal", "prorenata", "perfect-forecast-window", "perfect-forecast", "hpa",
             "feedback", "static-peak"]
    controllers.OptimalController.attach = keep  # type: ignore[method-assign]
    try:
        res = simulate(series, i0, h, names, ms, cfg, "test")
    finally:
        controllers.OptimalController.attach = attach  # type: ignore[method-assign]
    sched = made["schedule"]
    run = res.runs["optimal"]
    vm = run.billed.sum() * cfg.step_s / 3600
    viol_h = (run.p95_ms > res.slo_ms).sum() * cfg.step_s / 3600
    assert vm == pytest.approx(sched.vm_hours, rel=1e-9)  # type: ignore[attr-defined]
    assert viol_h == pytest.approx(sched.violation_hours, abs=1e-9)  # type: ignore[attr-defined]
    u = {n: r.metrics(cfg.step_s, res.slo_ms)["vm_hours"]
         + penalty * (r.p95_ms > res.slo_ms).sum() * cfg.step_s / 3600
         for n, r in res.runs.items()}
    assert all(u["optimal"] <= v + 1e-9 for v in u.values()), u
    if penalty == 1.0:  # a violation-hour is as cheap as a VM-hour: it gives up the SLO
        assert viol_h > 1.0
    else:
        assert viol_h < 0.05


def test_the_operator_itself_runs_in_the_simulator(series, ms) -> None:  # type: ignore[no-untyped-def]
    """The 'operator' controller runs the operator's runner on the simulated cluster: it
    follows the day up and down, one node at a time, never removing a node that still
    holds data, and lands near the simulator's prorenata (the same loop). On the reference
    text's cluster (no cleanup): with its cleanup at f() (the throttle in force, a few
    MiB/s here) a scale-in waits hours of replay for 50 GiB to be rewritten, longer than
    this day (test_sim_cleanup.py follows the operator's cleanups)."""
    from elastore.sim import controllers

    kubes = []
    attach = controllers.OperatorController.attach

    def keep(self, *a):  # type: ignore[no-untyped-def]
        attach(self, *a)
        kubes.append(self.kube)

    i0, h = locate(series, "2009-03-09", "2009-03-09 23:00")
    controllers.OperatorController.attach = keep  # type: ignore[method-assign]
    try:
        res = simulate(series, i0, h, ["operator", "prorenata"], ms, SimConfig(cleanup=False),
                       "test")
    finally:
        controllers.OperatorController.attach = attach  # type: ignore[method-assign]
    op = res.runs["operator"]
    assert kubes and kubes[0].violations == []
    assert op.serving.max() > op.serving[0] and op.serving[-1] < op.serving.max()
    assert np.all(np.abs(np.diff(op.serving)) <= 1)
    vm = {n: r.metrics(10.0, res.slo_ms)["vm_hours"] for n, r in res.runs.items()}
    assert vm["operator"] == pytest.approx(vm["prorenata"], rel=0.1), vm


@pytest.mark.slow
def test_learning_online_in_the_simulator_through_both_paths(series, ms) -> None:  # type: ignore[no-untyped-def]
    """--learn-online --prior-scale 2: prorenata (the loop with the learner) and the
    operator (its runner learning through spec.capacityModel.learn from per-node
    readings, its ConfigMap in memory) both start from twice the true capacity and end
    near it; the JSON says how far off each is."""
    from elastore.sim import controllers

    kept = []
    attach = controllers.OperatorController.attach

    def keep(self, *a):  # type: ignore[no-untyped-def]
        attach(self, *a)
        kept.append(self)

    i0, h = locate(series, "2009-03-09", "2009-03-10 23:00")
    cfg = SimConfig(learn_online=True, prior_scale=2.0)
    controllers.OperatorController.attach = keep  # type: ignore[method-assign]
    try:
        res = simulate(series, i0, h, ["operator", "prorenata"], ms, cfg, "test")
    finally:
        controllers.OperatorController.attach = attach  # type: ignore[method-assign]
    doc = res.to_json()["controllers"]
    for name in ("operator", "prorenata"):
        err = doc[name]["model_error_pct_by_day"]
        assert len(err) == 2 and doc[name]["model_error_pct"] == err[-1]
        assert err[-1] < 10, (name, err)  # from 100 % off (K = 2)
    op = kept[0]
    model = op.policies.status["model"]
    assert model["source"] == "learned" and model["samples"] > 20
    assert op.policies.configmaps  # the learned model, kept as the operator keeps it
    true_cap = float(ms.capacity.capacity(0.95, 0.0, 0.0))
    assert model["priorCapacityRps"] == pytest.approx(2 * true_cap, rel=0.03)


def test_long_migrations_neither_ratchet_nor_cost_more_than_the_peak(series) -> None:  # type: ignore[no-untyped-def]
    """1000 GiB on the lab profile: a node takes hours of migration. The window scheduler
    ratchets up (it never fits a decommission in a window); the horizon planner stays
    within what the peak needs, scales back in, and costs less than holding the peak.
    On the reference text's cluster: with the cleanup after each join (1000 GiB at the
    throttle in force, days of replay at 600 s/h) no scale-in could follow within the
    six days."""
    from elastore.sim.cli import LAB_MODEL, PEAK_SERVERS

    lab = ModelSet.load(LAB_MODEL)
    cfg = SimConfig(data_gib=1000.0, peak_rps=round(
        PEAK_SERVERS * float(lab.capacity.capacity(0.95, 0.0, 0.0)), -1), cleanup=False)
    i0, h = locate(series, "2009-03-08", "2009-03-13 23:00")
    res = simulate(series, i0, h, ["prorenata", "prorenata-window", "static-peak"], lab, cfg,
                   "test")
    m = {n: r.metrics(cfg.step_s, res.slo_ms) for n, r in res.runs.items()}
    pr, win, peak = (res.runs[n] for n in ("prorenata", "prorenata-window", "static-peak"))
    assert win.serving.max() > peak.serving.max() + 5  # the ratchet, for contrast
    assert pr.serving.max() <= peak.serving.max() + 1  # no runaway
    assert pr.serving[-1] < pr.serving.max()  # it scales back in
    assert m["prorenata"]["vm_hours"] <= m["static-peak"]["vm_hours"]
    assert m["prorenata"]["slo_violation_pct"] <= 1.0


def test_perfect_forecast_plans_on_the_true_future(ms) -> None:  # type: ignore[no-untyped-def]
    """``perfect-forecast`` (issue 40) is the horizon planner given the true load of the
    next windows as its median and its only scenario, the last window held past the end."""
    from elastore.planner import PlannerConfig
    from elastore.sim.controllers import Context, make_controller

    knots = np.array([100.0, 200.0, 300.0, 250.0, 150.0])
    ctrl = make_controller("perfect-forecast")
    assert ctrl.name == "perfect-forecast" and ctrl.mode == "horizon"  # type: ignore[attr-defined]
    ctx = Context(k=1, now_s=3600.0, window_s=3600.0, knots=knots, serving=3, target=3,
                  op=None, models=ms, cfg=PlannerConfig(3, 10), data_bytes=1e9, read_ratio=0.95,
                  interference=0.0, load_now=200.0)
    f = ctrl._true_path(ctx, 1, 7200.0)  # type: ignore[attr-defined]
    assert f.path is not None and f.rps == 300.0 and f.for_s == 7200.0
    ahead = ctrl.windows_ahead  # type: ignore[attr-defined]
    want = np.array([300.0, 250.0, 150.0] + [150.0] * (ahead - 3))
    assert np.array_equal(f.path.median_rps, want)
    assert np.array_equal(f.path.scenarios_rps, want[None, :]) and f.path.weights.sum() == 1
    assert np.array_equal(f.path.times_s, 3600.0 + 3600.0 * np.arange(1, ahead + 1))


def _attached(ms, name: str, data_gib: float, mibps: float = 24.0) -> int:  # type: ignore[no-untyped-def]
    """The lookahead (windows) ``name`` takes once attached to a 10-node replay of
    ``data_gib`` over 600-s windows."""
    from elastore.planner import PlannerConfig
    from elastore.sim.controllers import Context, Replay, make_controller

    ctrl = make_controller(name)
    ctrl.warm(np.full(24 * 21, 100.0))
    cluster = Cluster.balanced(10, data_gib * GIB, boot_s=60.0)
    ctx = Context(k=0, now_s=0.0, window_s=600.0, knots=np.ones(4), serving=10, target=10,
                  op=None, models=ms, cfg=PlannerConfig(3, 30), data_bytes=data_gib * GIB,
                  read_ratio=0.95, interference=0.0, load_now=1.0)
    replay = Replay(load_rps=np.ones(4), interference=np.zeros(4), step_s=10.0, boot_s=60.0,
                    data_bytes=data_gib * GIB, default_mibps=mibps, penalty=100.0)
    ctrl.attach(cluster, ctx, replay)
    ahead = int(ctrl.windows_ahead)  # type: ignore[attr-defined]
    iv = getattr(ctrl, "iv", None)
    if iv is not None:  # its quantiles were fitted for that path
        assert iv.horizons == ahead and len(iv.path()) == ahead
    return ahead


def test_the_lookahead_follows_a_scale_ins_payback(ms) -> None:  # type: ignore[no-untyped-def]
    """Issue 40: the horizon planner looks ahead PAYBACK (3) times a one-node scale-in's
    migration (a node's share at the store's rate, plus its boot): never less than a day
    of windows nor more than a week; ``*-day`` keeps the day, as before."""
    from elastore.planner.types import PAYBACK, scale_in_payback_s

    assert PAYBACK == 3.0
    # 400 GiB a node at 24 MiB/s: 17,067 s + 60 s boot, x3 over 600-s windows = 86
    assert scale_in_payback_s(4000 * GIB, 10, 24.0, 60.0) == pytest.approx(
        3 * (400 * GIB / (24 * 2**20) + 60.0))
    assert _attached(ms, "prorenata", 4000.0) == math.ceil(
        3.0 * (400 * GIB / (24 * 2**20) + 60.0) / 600.0) == 86
    assert _attached(ms, "perfect-forecast", 4000.0) == 86
    assert _attached(ms, "prorenata", 4000.0, mibps=48.0) == 43  # twice the rate: half
    assert _attached(ms, "prorenata", 50.0) == 24  # 5 GiB a node: minutes; a day
    assert _attached(ms, "perfect-forecast", 40_000.0) == 168  # at most a week
    assert _attached(ms, "prorenata-day", 4000.0) == 24
    assert _attached(ms, "perfect-forecast-day", 4000.0) == 24
    with pytest.raises(ValueError, match="MiB/s"):
        scale_in_payback_s(GIB, 3, 0.0)


class _Recording:
    """A predictor's interface, recording what it is told (a pure unit of logic)."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[float] = []

    def update(self, v: float) -> None:
        self.seen.append(v)

    def forecast(self, h: int) -> float:
        return 1.0


def test_a_forecaster_is_told_which_hours_the_trace_lacked(ms) -> None:  # type: ignore[no-untyped-def]
    """Issue 40: a replay fills the trace's missing hours with a straight line, which the
    cluster serves; a forecaster sees NaN there (as the operator's history has no sample),
    so it learns no season from the line. The planner's observation is the load served."""
    from elastore.planner import PlannerConfig
    from elastore.sim.controllers import Context, Predict

    knots = np.array([100.0, 150.0, 200.0, 250.0])
    gaps = np.array([False, True, True, False])
    ctrl = Predict()
    rec = _Recording()
    ctrl.p = rec  # type: ignore[assignment]
    for k in range(4):
        ctx = Context(k=k, now_s=600.0 * k, window_s=600.0, knots=knots, serving=3, target=3,
                      op=None, models=ms, cfg=PlannerConfig(3, 10), data_bytes=1e9,
                      read_ratio=0.95, interference=0.0, load_now=float(knots[k]), gaps=gaps)
        assert (math.isnan(ctx.seen_rps) if gaps[k] else ctx.seen_rps == knots[k])
        ctrl.on_window(ctx)
    assert rec.seen[0] == 100.0 and rec.seen[3] == 250.0
    assert math.isnan(rec.seen[1]) and math.isnan(rec.seen[2])


def test_a_replay_with_missing_hours_fills_them_for_the_cluster_only(series, ms) -> None:  # type: ignore[no-untyped-def]
    """The window of 2009-11-15 lacks 33 hours: the replay serves them as a straight line
    (and counts them), the forecasters see NaN there, and prorenata plans on (runs through
    the gaps without error)."""
    from elastore.sim.run import prepare_load

    i0, h = locate(series, "2009-11-20", "2009-11-27 23:00")
    cfg = SimConfig(peak_rps=7000.0)
    knots, _hist, missing = prepare_load(series, i0, h, cfg)
    assert int(missing.sum()) == 33 and np.isfinite(knots).all()
    res = simulate(series, i0, h, ["prorenata"], ms, cfg, "test")
    assert res.gaps_filled == 33
    run = res.runs["prorenata"]
    assert run.serving.min() >= 3
    # forecasts go on through the gaps (imputed), for every window after the first
    assert all(math.isfinite(v) for v in run.forecasts.values())


def test_the_holiday_calendar() -> None:
    """Easter by the Gregorian computus (dates checked against published calendars), and
    the hours of the holidays: Christmas Eve to Boxing Day, New Year's Eve and Day, Good
    Friday to Easter Monday."""
    import datetime as dt

    import pandas as pd

    from elastore.traces.calendar import easter, holiday_hours, holidays

    assert [easter(y) for y in (2008, 2009, 2016, 2024, 2025, 2026)] == [
        dt.date(2008, 3, 23), dt.date(2009, 4, 12), dt.date(2016, 3, 27),
        dt.date(2024, 3, 31), dt.date(2025, 4, 20), dt.date(2026, 4, 5)]
    h09 = holidays(2009)
    assert {dt.date(2009, 4, 10), dt.date(2009, 4, 13), dt.date(2009, 12, 24),
            dt.date(2009, 1, 1)} <= h09 and dt.date(2009, 4, 14) not in h09
    hours = pd.date_range("2008-12-23 22:00", "2009-01-02 01:00", freq="h")
    mask = holiday_hours(hours)
    on = {str(d) for d in hours[mask].normalize().unique().date}
    assert on == {"2008-12-24", "2008-12-25", "2008-12-26", "2008-12-31", "2009-01-01"}
    assert not mask[:2].any() and mask[2] and not mask[-1]  # 23 Dec, 24 Dec 00:00, 2 Jan


def test_prorenata_holidays_keeps_holiday_hours_out_of_its_seasons(ms) -> None:  # type: ignore[no-untyped-def]
    """``prorenata-holidays`` (issue 40): a holiday's load reaches its forecaster as NaN
    (imputed, no season learned from it), while its plan observes the load itself;
    ``prorenata`` is told nothing."""
    from elastore.planner import PlannerConfig
    from elastore.sim.controllers import Context, make_controller

    knots = np.full(30, 1000.0)
    holiday = np.zeros(30, dtype=bool)
    holiday[2:4] = True
    got: dict[str, list[float]] = {}
    for name in ("prorenata", "prorenata-holidays"):
        ctrl = make_controller(name)
        ctrl.warm(np.full(24 * 28, 1000.0))
        seen = got.setdefault(name, [])
        real = ctrl.iv.update  # type: ignore[attr-defined]

        def record(v: float, real=real, seen=seen) -> None:  # type: ignore[no-untyped-def]
            seen.append(v)
            real(v)

        ctrl.iv.update = record  # type: ignore[attr-defined]
        for k in range(5):
            ctx = Context(k=k, now_s=3600.0 * k, window_s=3600.0, knots=knots, serving=5,
                          target=5, op=None, models=ms,
                          cfg=PlannerConfig(3, 10, window_s=3600.0), data_bytes=1e9,
                          read_ratio=0.95, interference=0.0, load_now=1000.0,
                          holidays=holiday)
            ctrl.on_window(ctx)
            if k:  # the plan's observation is the load, holiday or not: its error is known
                err = ctrl.decisions[-1].forecast_error  # type: ignore[attr-defined]
                assert err is not None and math.isfinite(err)
    assert got["prorenata"] == [1000.0] * 5
    h = got["prorenata-holidays"]
    assert h[:2] == [1000.0, 1000.0] and h[4] == 1000.0 and all(math.isnan(v) for v in h[2:4])
