"""Scale for the bytes (issue 37), the pure parts and the operator on the simulated cluster:
the budget, the growth forecast, the horizon planner sized for the larger of the load and
the bytes (timed so streaming and cleanup end before the budget is crossed), the volume's
growth priced against a node, the simulator's disk and the operator's status and PVCs."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from test_operator_runner import Rig, per_server

from elastore.errors import ElastoreError
from elastore.models import ModelError, ModelSet, fit_capacity
from elastore.models.bandwidth import fit_bandwidth
from elastore.models.storage import (
    DataPath,
    StorageConfig,
    StorageView,
    growth_forecast,
    over_budget,
    price,
)
from elastore.models.synthetic import LatencyLaw, bandwidth_profile, sample_profile
from elastore.operator.metrics import DiskReading
from elastore.planner import Observation, PlannerConfig, plan
from elastore.planner.schedule import Horizon, RateRule, cheapest
from elastore.resources import builtin_model
from elastore.sim.engine import Cluster

GIB = 2**30
DAY = 86400.0


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    cap = fit_capacity(sample_profile(LatencyLaw(), seed=3), 30.0)
    return ModelSet(cap, fit_bandwidth(bandwidth_profile(seed=3)))


def horizon_cfg(**kw: Any) -> PlannerConfig:
    base: dict[str, Any] = dict(min_replicas=3, max_replicas=20, window_s=600.0,
                                mode="horizon", lookahead_s=DAY, node_overhead_s=120.0,
                                min_migration_mibps=1.0, max_migration_mibps=24.0)
    base.update(kw)
    return PlannerConfig(**base)


def linear(total_gib: float, gib_per_day: float, step_s: float = 3600.0,
           steps: int = 169) -> np.ndarray:
    """A history of the total bytes growing exactly linearly (its last value is now)."""
    return (total_gib + gib_per_day * step_s / DAY * np.arange(-(steps - 1), 1)) * GIB


def view(nodes: int, node_gib: float, volume_gib: float, gib_per_day: float = 0.0,
         config: StorageConfig | None = None, hours: int = 24) -> StorageView:
    path = growth_forecast(linear(nodes * node_gib, gib_per_day), 3600.0, 0.0, hours)
    return StorageView(config or StorageConfig(), volume_gib * GIB, (node_gib * GIB,) * nodes,
                       "kubelet", path)


def obs(v: StorageView | None, replicas: int = 4, load: float = 500.0) -> Observation:
    return Observation(now_s=0.0, replicas=replicas, load_rps=load, forecast_rps=load,
                       read_ratio=0.95, data_bytes=v.total_bytes if v else 1600 * GIB,
                       storage=v)


# -- the budget and the forecast ------------------------------------------------------------
def test_disk_budget_is_the_target_or_the_compaction_headroom_whichever_is_lower() -> None:
    assert StorageConfig().budget == pytest.approx(0.8)
    assert StorageConfig(compaction="SizeTiered").budget == pytest.approx(0.5)
    assert StorageConfig(compaction="Leveled", target_utilization=0.85).budget == \
        pytest.approx(0.85)
    assert "SizeTiered compaction keeps 50% free" in \
        StorageConfig(compaction="SizeTiered").binding_rule()
    for bad in (dict(target_utilization=0.99), dict(compaction="Tiered"),
                dict(cleanup_mibps=0.0), dict(gib_month_cost=-1.0)):
        with pytest.raises(ModelError, match="invalid storage configuration"):
            StorageConfig(**bad).validate()
    # the fullest node decides, and a skewed ring needs more nodes than a balanced one
    skewed = StorageView(StorageConfig(), 100 * GIB, (80 * GIB, 40 * GIB, 40 * GIB), "store")
    assert skewed.skew == pytest.approx(1.5) and skewed.utilization == pytest.approx(0.8)
    assert skewed.nodes_needed(160 * GIB) == 3  # 160 x 1.5 / 80
    balanced = StorageView(StorageConfig(), 100 * GIB, (160 / 3 * GIB,) * 3, "store")
    assert balanced.nodes_needed(160 * GIB) == 2
    with pytest.raises(ModelError, match="never 0"):
        StorageView(StorageConfig(), 100 * GIB, (float("nan"),), "store").validate()


def test_disk_growth_forecast_finds_the_trend_and_the_daily_shape() -> None:
    hours = np.arange(-335, 1)
    # 24 GiB a day on average, all of it written in the day's 12 busy hours
    busy = ((hours % 24) >= 8) & ((hours % 24) < 20)
    inc = np.where(busy, 2.0, 0.0) * GIB
    hist = 1000 * GIB + np.cumsum(inc)
    path = growth_forecast(hist, 3600.0, 0.0, 48)
    assert path.method.startswith("trend+season: +24.0 GiB/day")
    day_gain = path.median_bytes[23] - hist[-1]
    assert day_gain == pytest.approx(24 * GIB, rel=0.02)
    # the season: the forecast climbs in the busy hours and is flat in the others
    steps = np.diff(np.concatenate([[hist[-1]], path.median_bytes]))
    future_busy = ((np.arange(1, 49) % 24) >= 8) & ((np.arange(1, 49) % 24) < 20)
    assert steps[future_busy].mean() > 10 * max(steps[~future_busy].mean(), 1.0)
    # scenarios are ordered quantiles whose spread widens with the horizon
    noisy = hist + np.random.default_rng(1).normal(0, 0.5 * GIB, hist.size)
    p2 = growth_forecast(noisy, 3600.0, 0.0, 48)
    spread = p2.scenarios_bytes[-1] - p2.scenarios_bytes[0]
    assert np.all(np.diff(p2.scenarios_bytes, axis=0) >= 0) and spread[-1] > spread[0] > 0
    p2.validate()


def test_disk_growth_forecast_gaps_short_and_missing_histories() -> None:
    hist = linear(500, 10)
    hist[100:120] = np.nan  # a scrape gap is a gap, never 0
    path = growth_forecast(hist, 3600.0, 0.0, 24)
    assert path.median_bytes[-1] - hist[-1] == pytest.approx(10 * GIB, rel=0.01)
    flat = growth_forecast(np.array([np.nan, 5.0 * GIB]), 3600.0, 0.0, 6)
    assert flat.method.startswith("flat") and np.all(flat.median_bytes == 5.0 * GIB)
    with pytest.raises(ModelError, match="never 0"):
        growth_forecast(np.full(10, np.nan), 3600.0, 0.0, 6)
    # a short history with one level shift (a pod that joined): no trend before a day
    jump = np.array([3.0] * 5 + [3.5] * 5) * GIB
    assert growth_forecast(jump, 60.0, 0.0, 6, min_trend_steps=1440).method.startswith("flat")
    # a long one: the shift is one jump, not growth
    long = np.concatenate([np.full(200, 3.0), np.full(136, 3.5)]) * GIB
    assert growth_forecast(long, 3600.0, 0.0, 24).median_bytes[-1] == pytest.approx(3.5 * GIB)


# -- the planner -----------------------------------------------------------------------------
def test_disk_quiet_load_growing_data_scales_out_in_time_at_the_last_moment(
        ms: ModelSet) -> None:
    """4 nodes at 78 % of 510 GiB, the data growing 50 GiB a day: the bytes cross the 80 %
    budget in ~15 h. The plan adds a node whose bootstrap and cleanup end before that, and
    not hours earlier than needed."""
    cfg = horizon_cfg()
    v = view(4, 400, 510, 50)
    p = plan(obs(v), cfg, ms)
    assert p.details["binding"] == "storage"
    out = [a for a in p.actions if a.replicas == 5]
    assert out, p.reason
    a = out[0]
    cross = (4 * 0.8 * 510 - 1600) / 50 * DAY  # the exact growth crosses the budget then
    cleanup = v.config.cleanup_s(400 * GIB)
    done = a.expected_end_s + cleanup
    assert done <= cross, (a, cross)
    assert cross - done < 2 * 3600, f"{(cross - done) / 3600:.1f} h early"  # the last moment
    assert "budget" in a.reason and "bytes (kubelet)" in p.reason
    # the load alone wants nothing: the same observation without the bytes holds 4
    # (or scales in)
    assert all(x.replicas <= 4 for x in plan(obs(None), cfg, ms).actions)


def test_disk_no_growth_and_room_to_spare_changes_nothing(ms: ModelSet) -> None:
    cfg = horizon_cfg()
    p_bytes = plan(obs(view(4, 100, 1000, 0)), cfg, ms)
    p_load = plan(obs(None), cfg, ms)
    assert p_bytes.details["binding"] == "load"
    assert [(a.at_s, a.replicas) for a in p_bytes.actions] == \
        [(a.at_s, a.replicas) for a in p_load.actions]


def test_disk_a_scale_in_never_takes_the_survivors_over_the_budget(ms: ModelSet) -> None:
    """Little load, 5 nodes each at 66 % of 500 GiB: the load would go down to 3, but 4
    nodes would hold 83 %: the plan keeps 5 (binding: storage)."""
    cfg = horizon_cfg()
    p = plan(obs(view(5, 330, 500, 0), replicas=5, load=200.0), cfg, ms)
    assert all(a.replicas >= 5 for a in p.actions), p.actions
    assert p.details["binding"] == "storage"
    assert any(a.replicas < 5 for a in plan(obs(None, replicas=5, load=200.0), cfg,
                                            ms).actions)


def test_disk_volume_growth_when_cheaper_and_nodes_when_not(ms: ModelSet) -> None:
    cheap = StorageConfig(expand_volumes=True, node_hour_cost=0.4, gib_month_cost=0.08)
    p = plan(obs(view(4, 400, 490, 50, cheap)), horizon_cfg(), ms)
    assert p.details["binding"] == "storage" and p.details.get("grow_volumes")
    grown = p.details["expand_volume_bytes"]
    assert grown is not None and grown % GIB == 0 and grown > 490 * GIB
    # the grown volumes hold the 98th-percentile forecast within the budget on 4 nodes
    assert grown * 0.8 * 4 >= (1600 + 50) * GIB
    assert all(a.replicas <= 4 for a in p.actions)  # no node bought
    assert "cheaper than" in p.reason
    # the load's plan would remove a node now that the bytes' plan keeps: the volumes grow
    # now, before the scale-in, to what 3 nodes hold
    p4 = plan(obs(view(4, 400, 600, 50, cheap)), horizon_cfg(), ms)
    assert [a.replicas for a in p4.actions][:1] == [3], p4.actions
    assert p4.details["expand_volume_bytes"] * 0.8 * 3 >= (1600 + 50) * GIB
    # capped by maxVolumeSize: nodes, and the reason says so
    capped = StorageConfig(expand_volumes=True, gib_month_cost=0.01,
                           max_volume_bytes=500 * GIB)
    p3 = plan(obs(view(4, 400, 490, 50, capped)), horizon_cfg(), ms)
    assert not p3.details.get("grow_volumes") and "maxVolumeSize" in p3.reason
    # expandVolumes off: never
    assert "volume_choice" not in plan(obs(view(4, 400, 490, 50)), horizon_cfg(),
                                       ms).details


def test_disk_price_never_shrinks_and_prices_a_month(ms: ModelSet) -> None:
    v = view(4, 400, 500, 0, StorageConfig(node_hour_cost=1.0, gib_month_cost=0.1))
    c = price(v, 1.0, 4, 600 * GIB)
    assert c.grow and c.node_month == pytest.approx(730 + 50) and \
        c.volume_month == pytest.approx(40)
    assert not price(v, 1.0, 4, 400 * GIB).grow  # smaller: never
    # a tenth of a node on average against 400 GiB more on each of 4 volumes: nodes
    dear = price(v, 0.1, 4, 900 * GIB)
    assert not dear.grow and dear.node_month == pytest.approx(78)
    assert dear.volume_month == pytest.approx(160) and "dearer than" in dear.reason


def test_disk_window_planner_keeps_the_bytes_floor(ms: ModelSet) -> None:
    cfg = horizon_cfg(mode="window")
    p = plan(obs(view(4, 420, 500, 0)), cfg, ms)  # 84 % now: 5 nodes hold it
    assert p.details["binding"] == "storage" and p.desired_replicas >= 5


def test_disk_schedule_pays_the_disk_penalty_and_counts_its_hours() -> None:
    """The exact schedule with a disk table: at 3 servers the bytes are over budget from
    step 6; the cheapest schedule adds the fourth node so it is serving by then."""
    n, t = 3, 12  # rows: 3, 4, 5 servers
    zeros = np.zeros((n, t))
    rate = np.full((n, t), 1.0)
    rule = RateRule("r", rate, zeros.astype(bool), rate, zeros.astype(bool))
    disk = np.zeros((n, t))
    disk[0, 6:] = 1.0  # 3 servers over budget from step 6
    h = Horizon(step_s=60.0, n_lo=3, idle_violates=zeros.astype(bool), rules=(rule,),
                boot_steps=0, add_bytes=np.full(n, 60.0 * 2**20 * 2),
                remove_bytes=np.full(n, 60.0 * 2**20 * 2),
                disk_idle=disk, disk_add=disk, disk_remove=np.roll(disk, 1, axis=0),
                disk_penalty=1000.0)
    s = cheapest(h, 3, 100.0)
    assert s.moves and s.moves[0].n_to == 4 and s.moves[0].end <= 6
    assert s.disk_hours == 0.0
    assert s.moves[0].start >= 3  # not earlier than it must (2 steps of streaming)
    without = cheapest(Horizon(60.0, 3, zeros.astype(bool), (rule,), 0, h.add_bytes,
                               h.remove_bytes), 3, 100.0)
    assert not without.moves
    with pytest.raises(ElastoreError, match="disk tables"):
        Horizon(60.0, 3, zeros.astype(bool), (rule,), 0, h.add_bytes, h.remove_bytes,
                disk_idle=disk).validate()


def test_disk_over_budget_is_a_probability_over_scenarios() -> None:
    totals = np.array([[100.0, 200.0], [100.0, 400.0]])  # two scenarios, two steps
    p = over_budget(np.array([2.0, 4.0]), totals, np.array([0.7, 0.3]), 1.0, 90.0)
    assert p.tolist() == [[0.0, 1.0], [0.0, 0.3]]
    path = DataPath(np.array([10.0]), np.array([5.0]), np.array([[5.0]]), np.array([1.0]))
    med, scen = path.at(np.array([0.0, 5.0, 20.0]), 0.0, 1.0)
    assert med.tolist() == [1.0, 3.0, 5.0] and scen.shape == (1, 3)


# -- the simulator --------------------------------------------------------------------------
def test_disk_engine_keeps_streamed_bytes_until_cleanup_and_rejects_writes_when_full(
        ) -> None:
    c = Cluster.balanced(2, 100 * GIB, boot_s=0.0, volume_bytes=80 * GIB)
    c.cleanup_mibps = 64.0
    c.target = 3
    while c.op is None or c.op.kind == "add":
        c.step(0.0, 10.0, 1000.0)
        if c.op is None and c.serving == 3:
            break
    assert c.serving == 3
    # the old nodes still hold their 50 GiB on disk (their data is now 33 GiB)
    assert c.used()[0] == pytest.approx(50 * GIB) and c.data[0] == pytest.approx(100 / 3 * GIB)
    for _ in range(40):  # 400 s at 64 MiB/s: 25 GiB, more than the 16.7 to clean
        c.step(0.0, 10.0, 0.0)
    assert c.used()[0] == pytest.approx(100 / 3 * GIB)
    c.grow(300 * GIB)  # more than fits: each node stops at its volume, the rest refused
    assert c.disk_utilization() == pytest.approx(1.0) and c.full()
    assert c.rejected_bytes == pytest.approx(300 * GIB - 3 * (80 - 100 / 3) * GIB)
    # a decommission into full disks stalls (Cassandra's fails): nothing above 100 %
    c.target = 2
    for _ in range(100):
        c.step(0.0, 10.0, 1000.0)
    assert c.serving == 3 and c.op is not None and c.op.kind == "remove"
    assert c.disk_utilization() <= 1.0 + 1e-9


def test_disk_simulate_growth_fills_hpas_disks_and_not_prorenatas() -> None:
    from elastore.sim.run import SimConfig, locate, simulate
    from elastore.traces import builtin_trace_path, read_series

    series = read_series(builtin_trace_path()).cleaned()
    i0, _ = locate(series, "2009-03-08", "2009-03-08")
    ms = ModelSet.load(builtin_model("lab"))
    # 3 days, the data growing 8 GiB a day on a 50 GiB start at 60 % of its volumes; the
    # reference text's cluster, where a join's senders drop what they streamed at 64 MiB/s
    cfg = SimConfig(peak_rps=3430.0, data_gib=50.0, data_growth_gib_per_day=8.0,
                    warmup_hours=336, cleanup=False)
    res = simulate(series, i0, 72, ["prorenata", "hpa"], ms, cfg, "lab")
    out = res.to_json()
    pro, hpa = out["controllers"]["prorenata"], out["controllers"]["hpa"]
    assert out["replay"]["data_growth_gib_per_day"] == 8.0
    assert pro["max_disk_utilization"] <= 0.8 + 1e-6 and pro["disk_over_target_pct"] == 0
    assert hpa["max_disk_utilization"] > 0.95 and hpa["disk_full_hours"] > 0
    # a full disk is a violation (the worst): HPA's violations include those hours
    assert hpa["violation_hours"] >= hpa["disk_full_hours"]
    # the operator's cleanup (the default): each old node drops those bytes only when its
    # turn comes, at the migration rate, so a join relieves the fullest node late and the
    # budget can be passed; prorenata still never fills a disk, and HPA does
    res = simulate(series, i0, 72, ["prorenata", "hpa"], ms, replace(cfg, cleanup=True),
                   "lab")
    out = res.to_json()
    pro, hpa = out["controllers"]["prorenata"], out["controllers"]["hpa"]
    assert pro["disk_full_hours"] == 0 and pro["max_disk_utilization"] < 0.95
    assert hpa["disk_full_hours"] > 0
    # the default (no growth, no --volume-gib) leaves the bytes out, as before
    plain = simulate(series, i0, 4, ["feedback"], ms, SimConfig(warmup_hours=24), "lab")
    assert "max_disk_utilization" not in plain.to_json()["controllers"]["feedback"]
    assert plain.runs["feedback"].disk_util.size == 0


# -- the operator on the simulated cluster ------------------------------------------------
def disk_rig(ms: ModelSet, used_gib: float, mode: str = "Enforce",
             storage: dict[str, Any] | None = None, expandable: bool = True) -> Rig:
    """The runner's rig (3 nodes of 100 GiB volumes) with the kubelet's volume stats: each
    node at ``used_gib``, no growth; little load."""
    spec = {"storage": storage or {}, "cost": {"nodeHour": 1.0, "gibMonth": 0.01},
            "replicas": {"min": 3, "max": 8}}
    rig = Rig(ms, lambda t: 0.5 * per_server(ms), mode=mode, planner="Horizon",
              spec_patch=spec)
    rig.kube.expandable = expandable

    def reading(at_s: float, steps: int, step_s: float) -> DiskReading:
        n = rig.kube.spec_replicas
        pods = [f"db-{k}" for k in range(n)]
        cap = {p: rig.kube.volume("shop", f"data-{p}").capacity_bytes  # type: ignore[union-attr]
               for p in pods}
        # a spare pod's series (an ordinal beyond the replicas) is not the target's data
        return DiskReading("kubelet", {**{p: used_gib * GIB for p in pods}, "db-7": 99 * GIB},
                           {p: c for p, c in cap.items() if c},
                           np.full(steps, n * used_gib * GIB))

    rig.metrics.disk_reading = reading
    return rig


def test_disk_operator_status_says_the_bytes_bind_and_adds_a_node(ms: ModelSet) -> None:
    rig = disk_rig(ms, 85.0, mode="Recommend")
    rig.run(120)
    st = rig.policies.status
    assert st["binding"] == "storage", st.get("storage")
    s = st["storage"]
    assert s["source"] == "kubelet" and s["utilization"] == pytest.approx(0.85)
    assert s["budget"] == pytest.approx(0.8) and s["nodesForBytes"] == 4
    assert s["nodes"] == 3 and s["usedBytes"] == pytest.approx(85 * GIB)  # not db-7's
    assert st["desiredReplicas"] >= 4 and rig.kube.spec_replicas == 3  # Recommend
    # without the bytes (no series), the same load plans for the load and says why
    rig2 = Rig(ms, lambda t: 0.5 * per_server(ms), mode="Recommend", planner="Horizon")
    rig2.run(120)
    assert rig2.policies.status["binding"] == "load"
    assert rig2.policies.status["storage"]["source"] == "none"
    assert "sized for the load only" in rig2.policies.status["storage"]["message"]


def test_disk_operator_grows_every_pvc_instead_of_a_node(ms: ModelSet) -> None:
    rig = disk_rig(ms, 85.0, storage={"expandVolumes": True})
    rig.run(120, stop=lambda: bool(rig.calls("expand pvc")))
    st = rig.policies.status
    assert st["binding"] == "storage"
    assert "grew 3 PVC(s)" in st["storage"]["message"]
    want = st["storage"]["expandToBytes"]
    assert want and want > 100 * GIB, st["storage"]
    grown = rig.calls("expand pvc")
    assert sorted(c.split()[2] for c in grown) == ["data-db-0", "data-db-1", "data-db-2"]
    for k in range(3):  # read from the (simulated) store, never the status
        v = rig.kube.volume("shop", f"data-db-{k}")
        assert v is not None and v.requested_bytes == want
    assert rig.kube.spec_replicas == 3 and not rig.calls("scale")
    assert any(r == "VolumesGrown" for r, _, _ in rig.policies.events)
    # the next periods see the grown volumes: the bytes no longer bind, nothing grows again
    rig.run(600)
    assert len(rig.calls("expand pvc")) == 3
    assert rig.policies.status["binding"] == "load"


def test_disk_operator_refuses_a_class_without_expansion_and_recommend_only_says(
        ms: ModelSet) -> None:
    rig = disk_rig(ms, 85.0, storage={"expandVolumes": True}, expandable=False)
    rig.run(600)
    assert not rig.calls("expand pvc")
    assert "does not allow expansion" in rig.policies.status["storage"]["message"]
    # a volume that cannot grow holds nothing: the plan adds the node the bytes need
    assert rig.kube.spec_replicas >= 4 and rig.calls("scale")
    rec = disk_rig(ms, 85.0, mode="Recommend", storage={"expandVolumes": True})
    rec.run(120)
    assert not rec.calls("expand pvc")
    assert "would grow" in rec.policies.status["storage"]["message"]


def test_disk_spec_storage_is_read_and_checked() -> None:
    from elastore.operator.spec import SpecError, parse

    base: dict[str, Any] = {"target": {"name": "db", "replicationFactor": 3},
                            "replicas": {"min": 3, "max": 9}, "slo": {"latencyMs": 10}}
    s = parse(base)
    assert s.storage.budget == pytest.approx(0.8) and not s.storage.expand_volumes
    s = parse({**base, "storage": {"targetUtilization": 0.7, "compaction": "SizeTiered",
                                   "expandVolumes": True, "maxVolumeSize": "2Ti"},
               "cost": {"nodeHour": 0.4, "gibMonth": 0.08}})
    assert s.storage.budget == pytest.approx(0.5) and s.storage.expand_volumes
    assert s.storage.max_volume_bytes == 2 * 1024 * GIB
    assert s.storage.node_hour_cost == 0.4 and s.storage.gib_month_cost == 0.08
    for bad, where in (({"targetUtilization": 1.5}, "targetUtilization"),
                       ({"compaction": "Tiered"}, "compaction"),
                       ({"expandVolumes": "yes"}, "expandVolumes"),
                       ({"maxVolumeSize": "big"}, "maxVolumeSize")):
        with pytest.raises(SpecError) as e:
            parse({**base, "storage": bad})
        assert where in str(e.value.where) or where in str(e.value), e.value
    assert math.isclose(parse({**base, "scaleDown": {"minFreeFraction": 0.3}}).min_free_fraction,
                        0.3)
    assert parse({**base, "scaleDown": {"minFreeFraction": 0.3}}).legacy_free_space
