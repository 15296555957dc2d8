"""Replay a trace through the simulated cluster under each controller, and score them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError
from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.models.migration import MigrationModel, mixture_p95
from elastore.models.storage import (
    DEFAULT_CLEANUP_MIBPS,
    DEFAULT_COMPACTION,
    DEFAULT_TARGET_UTILIZATION,
    StorageConfig,
    StorageView,
)
from elastore.planner import Operation, PlannerConfig
from elastore.sim.controllers import Context, Controller, Replay, make_controller
from elastore.sim.engine import Cluster
from elastore.traces.calendar import holiday_hours
from elastore.traces.series import HourlySeries
from elastore.units import gib_to_bytes, mib_to_bytes

FloatArray = npt.NDArray[np.float64]
EXPIRED_SHARE = 0.3  # of the bytes written, what TTL and compaction take back
START_FILL = 0.6  # --volume-gib's default: the starting data fills this share of the volumes
KINDS = {"idle": 0, "boot": 1, "bootstrap": 2, "decommission": 3, "cleanup": 4}
PENALTIES = (1, 10, 100)
LOOKAHEAD_HOURS = 24  # the horizon planner looks a day of the trace ahead


@dataclass(frozen=True)
class SimConfig:
    step_s: float = 10.0
    hour_seconds: float = 600.0  # replay seconds per trace hour = the control window
    peak_rps: float = 7000.0  # the trace is scaled so its busiest hour runs at this rate
    read_ratio: float = 0.95
    data_gib: float = 50.0  # all data stored, replicas included
    boot_s: float = 60.0
    default_stream_mibps: float = 24.0  # Cassandra's default stream throughput
    min_stream_mibps: float = 1.0  # BwMan's floor, so a migration always finishes
    min_replicas: int = 3
    max_replicas: int = 64
    replication_factor: int = 3
    headroom: float = 0.1
    warmup_hours: int = 672
    interference: tuple[tuple[float, float, float], ...] = ()  # (from_h, to_h, index)
    penalty: float = 100.0  # VM-hours an hour of SLO violation costs (optimal's objective)
    #: ``--learn-online``: the controllers that can (prorenata, prorenata-window, ideal)
    #: learn their capacity model from the replay's measured latencies, starting from the
    #: replay's model with its capacity times ``prior_scale``
    learn_online: bool = False
    prior_scale: float = 1.0
    #: sd of the multiplicative noise on each measured latency (ln), and its seed
    latency_noise: float = 0.1
    seed: int = 0
    #: the bytes (``--data-growth-gib-per-day``, ``--volume-gib``): net GiB the data grows
    #: a trace day (writes add in step with the write load, TTL and compaction take
    #: :data:`EXPIRED_SHARE` of them back, evenly); each node's volume (None: the starting
    #: cluster's data at :data:`START_FILL` of its volumes). With neither, the bytes are
    #: not modelled and a run is what it was before them
    data_growth_gib_per_day: float = 0.0
    volume_gib: float | None = None
    target_utilization: float = DEFAULT_TARGET_UTILIZATION
    compaction: str = DEFAULT_COMPACTION
    cleanup_mibps: float = DEFAULT_CLEANUP_MIBPS
    #: the operator's nodetool cleanup after every scale-out (spec.scaleUp.cleanup, on by
    #: default): the old nodes rewrite what they hold (D in all) at the migration rate, one
    #: at a time, and no scale-in starts until they have; a further scale-out supersedes it
    #: (``--no-cleanup``: the reference text's cluster, where a join ends when its data has
    #: arrived and the streamed-away bytes drain at ``cleanup_mibps`` beside everything)
    cleanup: bool = True

    @property
    def models_bytes(self) -> bool:
        return self.data_growth_gib_per_day != 0 or self.volume_gib is not None

    def storage(self) -> StorageConfig:
        return StorageConfig(target_utilization=self.target_utilization,
                             compaction=self.compaction, cleanup_mibps=self.cleanup_mibps)

    def validate(self) -> None:
        if not (self.step_s > 0 and self.hour_seconds > 0
                and self.hour_seconds % self.step_s == 0):
            raise ElastoreError(f"--hour-seconds {self.hour_seconds:g} must be a positive "
                                f"multiple of the {self.step_s:g} s simulation step")
        if not self.peak_rps > 0 or not self.data_gib > 0:
            raise ElastoreError("peak rate and data size must be > 0")
        if not self.penalty >= 0:
            raise ElastoreError(f"the violation penalty must be >= 0, got {self.penalty:g}")
        if not (math.isfinite(self.prior_scale) and 0.05 <= self.prior_scale <= 20):
            raise ElastoreError(f"--prior-scale must be in [0.05, 20], got {self.prior_scale:g}")
        if not 0 <= self.latency_noise <= 1:
            raise ElastoreError(f"the latency noise must be in [0, 1], got "
                                f"{self.latency_noise:g}")
        if not math.isfinite(self.data_growth_gib_per_day):
            raise ElastoreError("--data-growth-gib-per-day must be a finite number")
        if self.volume_gib is not None and not self.volume_gib > 0:
            raise ElastoreError(f"--volume-gib must be > 0, got {self.volume_gib:g}")
        if self.models_bytes:
            self.storage().validate()
        for a, b, i in self.interference:
            if not (0 <= i <= 1 and a < b):
                raise ElastoreError(f"bad interference phase ({a}, {b}, {i}): "
                                    "want from < to and index in [0, 1]")


@dataclass
class ControllerRun:
    name: str
    serving: FloatArray
    billed: FloatArray
    p95_ms: FloatArray
    util: FloatArray
    rate_mibps: FloatArray
    kind: npt.NDArray[np.int8]
    actions: int
    seconds: float
    forecasts: dict[int, float] = field(default_factory=dict)
    data_total: FloatArray = field(default_factory=lambda: np.zeros(0))
    #: learning online: per window (window, learned capacity, confidence, scale-in allowed)
    calibrations: list[tuple[int, float, float, bool]] = field(default_factory=list)
    true_capacity_rps: float | None = None  # the replay's model's, at its read ratio
    #: the bytes: the fullest node's share of its volume per step, and its budget
    disk_util: FloatArray = field(default_factory=lambda: np.zeros(0))
    disk_budget: float | None = None

    def disk_metrics(self, dt: float) -> dict[str, Any]:
        if self.disk_budget is None or not self.disk_util.size:
            return {}
        u = self.disk_util
        return {"max_disk_utilization": float(u.max()),
                "disk_over_target_pct": float(100 * np.mean(u > self.disk_budget + 1e-9)),
                "disk_full_hours": float(np.sum(u >= 1.0 - 1e-9) * dt / 3600),
                "disk_budget": self.disk_budget}

    def metrics(self, dt: float, slo_ms: float, penalty: float | None = None
                ) -> dict[str, Any]:
        vm_hours = float(self.billed.sum() * dt / 3600)
        viol = self.p95_ms > slo_ms
        viol_hours = float(viol.sum() * dt / 3600)
        return {
            "vm_hours": vm_hours,
            "slo_violation_pct": float(100 * viol.mean()),
            "p95_latency_ms_median": float(np.median(self.p95_ms)),
            "cpu_util_mean": float(self.util.mean()),
            "scale_actions": int(self.actions),
            "violation_hours": viol_hours,
            "utility": {f"{p:g}": vm_hours + p * viol_hours
                        for p in sorted({*PENALTIES, *(() if penalty is None else (penalty,))})},
            **self.calibration_metrics(),
            **self.disk_metrics(dt),
        }

    def model_error_pct(self) -> list[float]:
        """|learned / true capacity - 1| in %, per window (learning online only)."""
        if not self.calibrations or not self.true_capacity_rps:
            return []
        return [100 * abs(c / self.true_capacity_rps - 1) for _, c, _, _ in self.calibrations]

    def calibration_metrics(self) -> dict[str, Any]:
        err = self.model_error_pct()
        if not err:
            return {}
        daily = [float(err[min(k, len(err)) - 1]) for k in range(24, len(err) + 24, 24)]
        conf = [c for _, _, c, _ in self.calibrations]
        return {"model_error_pct": float(err[-1]),
                "model_error_pct_by_day": daily,
                "model_confidence_by_day": [float(conf[min(k, len(conf)) - 1])
                                            for k in range(24, len(conf) + 24, 24)]}


@dataclass
class SimResult:
    config: SimConfig
    slo_ms: float
    percentile: int
    start: str
    end: str
    hours: int
    knots: FloatArray  # req/s at each window start
    runs: dict[str, ControllerRun]
    physics: str
    gaps_filled: int = 0
    volume_gib: float | None = None  # each node's volume, when the bytes are modelled

    def to_json(self) -> dict[str, Any]:
        dt = self.config.step_s
        return {
            "controllers": {n: r.metrics(dt, self.slo_ms, self.config.penalty)
                            for n, r in self.runs.items()},
            "trace": {"start": self.start, "end": self.end, "hours": self.hours},
            "slo": {"latency_ms": self.slo_ms, "percentile": self.percentile},
            "replay": {"hour_seconds": self.config.hour_seconds, "step_s": dt,
                       "data_gib": self.config.data_gib, "peak_rps": self.config.peak_rps,
                       "penalty": self.config.penalty, "cleanup": self.config.cleanup,
                       **({"data_growth_gib_per_day": self.config.data_growth_gib_per_day,
                           "volume_gib": self.volume_gib,
                           "target_utilization": self.config.target_utilization,
                           "compaction": self.config.compaction}
                          if self.config.models_bytes else {})},
            "physics": self.physics,
        }


def with_slo(cap: CapacityModel, slo_ms: float | None) -> CapacityModel:
    """The same latency model judged against another SLO (within what it resolves)."""
    if slo_ms is None or slo_ms == cap.slo_ms:
        return cap
    lo = float(np.exp(cap.log_latency.min()))
    hi = float(np.exp(cap.log_latency.max()))
    if not lo < slo_ms < hi:
        raise ElastoreError(f"--slo-ms {slo_ms:g} is outside what this model resolves "
                            f"({lo:.1f}..{hi:.0f} ms); refit the model for that SLO")
    return replace(cap, slo_ms=slo_ms, capacity_table=np.zeros(0))


def prepare_load(series: HourlySeries, start_i: int, hours: int, cfg: SimConfig
                 ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Window-start loads (req/s) of the replay and its warm-up history, same scale, and
    which of the replay's hours the trace lacked (filled by a straight line)."""
    vals = series.values
    replay = vals[start_i : start_i + hours].copy()
    missing = np.isnan(replay)
    if bool(missing.all()):
        raise ElastoreError("the replay window holds no data")
    if missing.any():
        idx = np.arange(hours)
        replay[missing] = np.interp(idx[missing], idx[~missing], replay[~missing])
    scale = cfg.peak_rps / float(np.max(replay))
    hist = vals[max(0, start_i - cfg.warmup_hours) : start_i] * scale
    return replay * scale, hist, missing


def simulate(series: HourlySeries, start_i: int, hours: int, controllers: Sequence[str],
             models: ModelSet, cfg: SimConfig, physics: str,
             progress: Callable[[int], None] | None = None,
             prior: CapacityModel | None = None) -> SimResult:
    """``prior`` (with ``cfg.learn_online``): the model the learning controllers start
    from, times ``cfg.prior_scale`` (default: the replay's own model, ``models``)."""
    cfg.validate()
    if hours < 2:
        raise ElastoreError("the replay needs at least 2 hours of trace")
    knots, history, missing = prepare_load(series, start_i, hours, cfg)
    gaps = int(missing.sum())
    holidays = holiday_hours(series.index[start_i:start_i + hours])
    W, dt = cfg.hour_seconds, cfg.step_s
    steps = int(hours * W / dt)
    t = np.arange(steps) * dt
    # piecewise-linear load between window starts; the last window holds its level
    load = np.interp(t, np.arange(hours) * W, knots)
    inter = np.zeros(steps)
    for a, b, i in cfg.interference:
        inter[(t >= a * W) & (t < b * W)] = i
    pcfg = PlannerConfig(
        min_replicas=cfg.min_replicas, max_replicas=cfg.max_replicas,
        replication_factor=cfg.replication_factor, window_s=W, headroom=cfg.headroom,
        node_overhead_s=cfg.boot_s, min_migration_mibps=cfg.min_stream_mibps,
        max_migration_mibps=cfg.default_stream_mibps, migration_margin=cfg.headroom / 2,
        penalty=cfg.penalty, lookahead_s=LOOKAHEAD_HOURS * W, cleanup=cfg.cleanup,
    )
    cap = models.capacity
    data_bytes = gib_to_bytes(cfg.data_gib)
    growth = _growth(cfg, models, knots, history, load, pcfg) if cfg.models_bytes else None
    runs: dict[str, ControllerRun] = {}
    for name in controllers:
        ctrl = make_controller(name)
        if cfg.learn_online and ctrl.learns:
            from elastore.models.online import CapacityLearner, scaled

            learner = CapacityLearner()
            start = cap if prior is None else prior.for_slo(cap.slo_ms, cap.percentile)
            ctrl.learn_online(learner, scaled(  # type: ignore[attr-defined]
                start, cfg.prior_scale, note=f"x{cfg.prior_scale:g} (the prior)"))
        runs[name] = _run_one(ctrl, knots, history, load, inter, steps, models, pcfg, cfg,
                              data_bytes, progress, growth, missing, holidays)
    idx = series.index
    return SimResult(
        config=cfg, slo_ms=cap.slo_ms, percentile=cap.percentile,
        start=str(idx[start_i]), end=str(idx[start_i + hours - 1]), hours=hours,
        knots=knots, runs=runs, physics=physics, gaps_filled=gaps,
        volume_gib=None if growth is None else growth.volume_bytes / gib_to_bytes(1.0),
    )


@dataclass(frozen=True)
class Growth:
    """The replay's bytes: each node's volume, the net bytes written each step, and the
    data's total at each window start of the warm-up history (the same workload before
    the replay, so a forecaster has a past)."""

    storage: StorageConfig
    volume_bytes: float
    net_bytes: FloatArray  # (steps,)
    history_bytes: FloatArray  # (warm-up windows,)


def _start_size(cap: CapacityModel, load_rps: float, cfg: SimConfig, pcfg: PlannerConfig
                ) -> int:
    n = cap.servers_needed(load_rps, cfg.read_ratio, 0.0, cfg.headroom)
    return min(max(n, pcfg.floor), pcfg.max_replicas)


def _growth(cfg: SimConfig, models: ModelSet, knots: FloatArray, history: FloatArray,
            load: FloatArray, pcfg: PlannerConfig) -> Growth:
    """The bytes written step by step: in step with the write load (req/s x (1 - read
    ratio)), scaled so that, after TTL and compaction took :data:`EXPIRED_SHARE` back, the
    data grows ``data_growth_gib_per_day`` a trace day on average."""
    dt, W = cfg.step_s, cfg.hour_seconds
    day_s = 24 * W
    writes = load * (1 - cfg.read_ratio)
    mean_w = float(np.mean(writes)) if float(np.mean(writes)) > 0 else 1.0
    g = gib_to_bytes(cfg.data_growth_gib_per_day)
    gross = g / (1 - EXPIRED_SHARE)

    def net(w: FloatArray, seconds: float) -> FloatArray:
        return np.asarray(gross * (w / mean_w - EXPIRED_SHARE) * seconds / day_s)

    hist_w = np.nan_to_num(np.asarray(history, dtype=float) * (1 - cfg.read_ratio), nan=mean_w)
    per_window = net(hist_w, W)
    d0 = gib_to_bytes(cfg.data_gib)
    hist = np.maximum(0.0, d0 - np.cumsum(per_window[::-1])[::-1])
    n0 = _start_size(models.capacity, float(knots[0]), cfg, pcfg)
    volume = (gib_to_bytes(cfg.volume_gib) if cfg.volume_gib is not None
              else d0 / n0 / START_FILL)
    return Growth(cfg.storage(), volume, net(writes, dt), hist)


def _run_one(ctrl: Controller, knots: FloatArray, history: FloatArray, load: FloatArray,
             inter: FloatArray, steps: int, models: ModelSet, pcfg: PlannerConfig,
             cfg: SimConfig, data_bytes: float,
             progress: Callable[[int], None] | None, growth: Growth | None = None,
             missing: npt.NDArray[np.bool_] | None = None,
             holidays: npt.NDArray[np.bool_] | None = None) -> ControllerRun:
    t0 = time.perf_counter()
    W, dt = cfg.hour_seconds, cfg.step_s
    cap = models.capacity
    r = cfg.read_ratio
    ctrl.warm(history)

    cluster = Cluster.balanced(_start_size(cap, float(knots[0]), cfg, pcfg), data_bytes,
                               cfg.boot_s, None if growth is None else growth.volume_bytes)
    if growth is not None:
        cluster.cleanup_mibps = growth.storage.cleanup_mibps
    # the operator's own runner (the ``operator`` controller) issues its cleanups through
    # the simulated API, which times them and frees the bytes: the cluster runs none itself
    if cfg.cleanup:
        cluster.cleanup = "external" if ctrl.runs_cleanup else "after-join"
    window_totals: list[float] = []

    noise = np.random.default_rng(cfg.seed)

    def measured(s: int) -> tuple[float | None, float]:
        """What a node measures now: its latency (the model's, times the replay's noise;
        None while a node leaves) and the MiB/s it streams."""
        n = cluster.serving
        op = cluster.op
        mig = last_rate if op is not None and op.kind == "add" and op.boot_left_s <= 0 else 0.0
        if op is not None and op.kind == "remove":
            return None, 0.0
        lat = float(cap.latency_ms(float(load[s]) / n, r, mig, float(inter[s])))
        return lat * math.exp(cfg.latency_noise * float(noise.standard_normal())), mig

    def context(s: int, now: float) -> Context:
        lat, mig = measured(s) if ctrl.learns and cfg.learn_online else (None, 0.0)
        op = None
        if cluster.op is not None:
            o = cluster.op
            rate_b = mib_to_bytes(max(last_rate, 0.1))
            left = (o.boot_left_s + o.per_sender_left / rate_b if o.kind == "add"
                    else o.leaving_data / rate_b)
            if o.kind == "add" and cluster.cleanup == "after-join":
                # then its cleanup, D in all (as the operator's expected_seconds(...,
                # cleanup=True)): the operator's period plans from the end of both
                left += cluster.total_bytes() / rate_b
            op = Operation(o.from_replicas, o.to_replicas, o.started_s, now + left)
        view, past = None, None
        if growth is not None:
            view = StorageView(growth.storage, growth.volume_bytes, tuple(cluster.used()),
                               "kubelet")
            past = np.concatenate([growth.history_bytes, window_totals])
        return Context(
            k=s // win_steps, now_s=now, window_s=W, knots=knots, serving=cluster.serving,
            target=cluster.target, op=op, models=models, cfg=pcfg, data_bytes=data_bytes,
            read_ratio=r, interference=float(inter[s]) if ctrl.interference_aware else 0.0,
            load_now=float(load[s]), latency_ms=lat, migration_now=mig,
            storage=view, data_history=past,
            # its cleanup, the new node serving: the operator's period passes no operation
            # then, and the planner starts in the cleanup (stepping holds a scale-in)
            cleanup_left_bytes=cluster.cleanup_bytes() if cluster.op is None else 0.0,
            gaps=missing if missing is not None and missing.any() else None,
            holidays=holidays if holidays is not None and holidays.any() else None,
        )

    serving = np.zeros(steps)
    billed = np.zeros(steps)
    rate_used = np.zeros(steps)
    kind = np.zeros(steps, dtype=np.int8)
    data_total = np.zeros(steps)
    disk = np.zeros(steps if growth is not None else 0)
    setpoints: list[tuple[float, int]] = []
    win_steps = int(W / dt)
    tick_s = ctrl.tick_s or 0.0
    last_rate = cfg.default_stream_mibps
    f_cache: dict[int, FloatArray] = {}
    d_cache: dict[int, FloatArray] = {}
    inter_seen = inter if ctrl.interference_aware else np.zeros(steps)

    bwman = MigrationModel(cap, min_mibps=cfg.min_stream_mibps,
                           max_mibps=cfg.default_stream_mibps, slo_margin=pcfg.migration_margin)

    def f_for(n: int) -> FloatArray:
        """BwMan's rate for every step at ``n`` serving nodes: f() with the planner's
        margin, within the floor and the store's default (the same model the planner
        estimates durations with)."""
        if n not in f_cache:
            f_cache[n] = np.asarray(bwman.rate(load / n, r, inter_seen), dtype=float)
        return f_cache[n]

    def d_for(n: int, s: int) -> float:
        """BwMan's rate for a decommission at ``n`` nodes (cluster-p95 aware), computed
        for the next window's steps at once."""
        block = s // win_steps
        key = n * 100_000 + block
        if key not in d_cache:
            sl = slice(block * win_steps, (block + 1) * win_steps)
            d_cache[key] = np.asarray(bwman.decommission_rate(load[sl] / n, n, r,
                                                              inter_seen[sl]), dtype=float)
        return float(d_cache[key][s - block * win_steps])

    for s in range(steps):
        now = s * dt
        new_window = s % win_steps == 0
        # a tick whenever a multiple of tick_s falls inside this step
        tick = bool(tick_s) and (s == 0 or int(now // tick_s) != int((now - dt) // tick_s))
        if new_window and growth is not None:
            window_totals.append(cluster.total_bytes())
        if new_window or tick:
            ctx = context(s, now)
            if s == 0:
                ctrl.attach(cluster, ctx, Replay(
                    load, inter, dt, cfg.boot_s, data_bytes, cfg.default_stream_mibps,
                    cfg.penalty, None if growth is None else growth.storage,
                    None if growth is None else growth.volume_bytes,
                    None if growth is None else data_bytes + np.cumsum(growth.net_bytes),
                    cfg.cleanup))
            if new_window:
                new = ctrl.on_window(ctx)
                setpoints = new if ctrl.replaces else setpoints + new
            if tick:
                setpoints += ctrl.on_tick(ctx)
            setpoints.sort(key=lambda p: p[0])
        while setpoints and setpoints[0][0] <= now + 1e-9:
            cluster.target = setpoints.pop(0)[1]
        n = cluster.serving
        own = ctrl.migration_mibps()
        if own is not None:
            rate = own
        elif ctrl.bwman:
            if cluster.op is not None and cluster.op.kind == "remove":
                rate = d_for(n, s)
            else:
                rate = float(f_for(n)[s])
        else:
            rate = cfg.default_stream_mibps
        serving[s] = n
        k, used, billed[s] = cluster.step(now, dt, rate)
        if k == "idle" and cluster.cleanup == "external":
            outside = ctrl.cleanup_mibps()  # a cleanup the operator's runner issued
            if outside is not None:
                k, used = "cleanup", outside
        kind[s] = KINDS[k]
        rate_used[s] = used
        if used > 0:
            last_rate = used
        if growth is not None:
            cluster.grow(float(growth.net_bytes[s]))
            disk[s] = cluster.disk_utilization()
        data_total[s] = cluster.total_bytes()
        if progress is not None and s % 2000 == 1999:
            progress(2000)
    if progress is not None:
        progress(steps % 2000)
    p95 = _latency(load, serving, kind, rate_used, inter, models, r)
    if disk.size:
        # a full volume rejects writes: the worst violation there is
        p95 = np.where(disk >= 1.0 - 1e-9, np.inf, p95)
    util = load / serving / np.asarray(cap.capacity(r, 0.0, inter))
    return ControllerRun(ctrl.name, serving, billed, p95, util, rate_used, kind,
                         cluster.actions, time.perf_counter() - t0, ctrl.forecasts(),
                         data_total, list(getattr(ctrl, "calibrations", [])),
                         float(cap.capacity(r, 0.0, 0.0)), disk,
                         None if growth is None else growth.storage.budget)


def _latency(load: FloatArray, serving: FloatArray, kind: npt.NDArray[np.int8],
             rate: FloatArray, inter: FloatArray, models: ModelSet, r: float) -> FloatArray:
    """Cluster p95 per step from the capacity model's latency surface."""
    cap = models.capacity
    lps = load / serving
    own = np.where(kind == KINDS["bootstrap"], rate, 0.0)
    p = np.asarray(cap.latency_ms(lps, r, own, inter))
    clean = kind == KINDS["cleanup"]
    if clean.any():  # one node in n rewrites its data at the rate; the others serve as ever
        n = serving[clean]
        p_clean = np.asarray(cap.latency_ms(lps[clean], r, rate[clean], inter[clean]))
        # never below idle (the planner's tables say the same: schedule.physics_horizon)
        p[clean] = np.maximum(mixture_p95(p_clean, 1.0 / n, p[clean]), p[clean])
    dec = kind == KINDS["decommission"]
    if dec.any():
        n = serving[dec]
        p_leave = np.asarray(cap.latency_ms(lps[dec], r, rate[dec], inter[dec]))
        p_rest = np.asarray(cap.latency_ms(lps[dec], r, rate[dec] / np.maximum(n - 1, 1),
                                           inter[dec]))
        p[dec] = mixture_p95(p_leave, 1.0 / n, p_rest)
    return p


def locate(series: HourlySeries, start: Any, end: Any) -> tuple[int, int]:
    """Index and length of the replay window within ``series``."""
    import pandas as pd

    lo = pd.Timestamp(start) if start is not None else series.start
    hi = pd.Timestamp(end) if end is not None else series.end
    if lo < series.start or hi > series.end or lo > hi:
        raise ElastoreError(f"window {lo} .. {hi} is not inside the trace "
                            f"({series.start} .. {series.end})")
    i0 = int((lo.ceil("h") - series.start) / pd.Timedelta(hours=1))
    i1 = int((hi.floor("h") - series.start) / pd.Timedelta(hours=1))
    return i0, i1 - i0 + 1

