"""Controllers compared by the simulator. All decide through the same interfaces: they see
a :class:`Context` at every window start (and, for the HPA, every sync period) and return
set-points ``(time_s, target_replicas)``; sizing always goes through the capacity model's
``servers_needed`` and, for ProRenaTa and its perfect-foresight forms, through the planner.

| name | decides | migration |
|---|---|---|
| feedback | at each window start, for the previous window's mean load | store default |
| predict | at the window start for the predicted load; scale-down a window later | store default |
| prorenata | the policy loop with the ``prorenata`` forecast | BwMan: f(), floored |
| prorenata-window | the policy loop: the paper's window scheduler, the forecast | BwMan |
| perfect-forecast-window | the same, fed the true future load | BwMan |
| perfect-forecast | the policy loop: the horizon planner, the true future load | BwMan |
| optimal | offline, the least U(P) any schedule reaches (the bound) | its rule per change |
| hpa | Kubernetes HPA on utilisation, every 15 s | store default |
| holt-winters | PHPA-style: Holt-Winters forecast, applied at once | store default |
| static-peak | the trace's peak, all the time | store default |
| operator | the operator's runner on the simulated cluster | what the runner sets |

``prorenata`` and its forms are thin adapters around the policy loop the operator runs; the
``operator`` controller runs the operator itself (its runner, node-step state machine and
stream throttle) against :class:`elastore.sim.kube.SimulatedKube`.

``perfect-forecast-window`` was called ``ideal`` until issue 41 (:data:`RENAMED`): it is the
paper's window scheduler given the true future, not a bound (``optimal`` is). The
controllers given the true future are :data:`FORESIGHT`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from elastore.models import estimate
from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.models.online import CapacityLearner
from elastore.models.storage import StorageConfig, StorageView, growth_forecast
from elastore.planner import Operation, PlannerConfig, admission
from elastore.planner.loop import (
    Decision,
    Forecast,
    Memory,
    Observed,
    PolicyLoop,
    set_points,
    started,
)
from elastore.planner.stabilization import Recommendations, remember, stabilized
from elastore.planner.types import LoadPath, scale_in_payback_s
from elastore.predictor.base import FloatArray, Predictor
from elastore.predictor.intervals import Intervals, describe, scenario_levels
from elastore.predictor.prorenata import ProRenaTa
from elastore.predictor.registry import make
from elastore.predictor.statistical import HoltWinters

if TYPE_CHECKING:
    from elastore.sim.engine import Cluster

SetPoints = list[tuple[float, int]]


@dataclass
class Context:
    k: int  # window index
    now_s: float
    window_s: float
    knots: FloatArray  # load (req/s) at every window start, the whole trace
    serving: int
    target: int
    op: Operation | None
    models: ModelSet
    cfg: PlannerConfig
    data_bytes: float
    read_ratio: float
    interference: float
    load_now: float  # instantaneous load, req/s
    #: the latency a node measures now at the model's percentile (ms, with the replay's
    #: measurement noise), for a controller that learns its capacity model online; None
    #: while a node leaves (the nodes then differ: no one per-node reading)
    latency_ms: float | None = None
    migration_now: float = 0.0  # MiB/s each serving node streams now
    #: the bytes (``--data-growth-gib-per-day`` / ``--volume-gib``): each node's use and
    #: volume now, and the data's total at every window start so far (warm-up included)
    storage: StorageView | None = None
    data_history: FloatArray | None = None
    #: the window starts whose load the trace did not have (filled by a straight line for
    #: the replay): a forecaster is told so, as the operator's history has no sample there
    gaps: npt.NDArray[np.bool_] | None = None
    #: the window starts that fall on a holiday (:mod:`elastore.traces.calendar`), for a
    #: forecaster that keeps them out of its seasons (``prorenata-holidays``)
    holidays: npt.NDArray[np.bool_] | None = None
    #: a scale-out's cleanup under way (its node serving, ``op`` None, as the operator's
    #: period sees a ``CleaningUp`` step): the bytes the old nodes still have to rewrite
    cleanup_left_bytes: float = 0.0

    @property
    def observed(self) -> FloatArray:
        """Window-start loads seen so far (k + 1 values)."""
        return self.knots[: self.k + 1]

    @property
    def seen_rps(self) -> float:
        """The load at this window start as a forecaster learns from it: NaN where the
        trace had no data (its model imputes it and learns no season from the filled
        line; the planner still serves the replay's load)."""
        if self.gaps is not None and bool(self.gaps[self.k]):
            return math.nan
        return float(self.knots[self.k])

    @property
    def holiday(self) -> bool:
        return self.holidays is not None and bool(self.holidays[self.k])

    def needed(self, load: float, interference: float | None = None) -> int:
        i = self.interference if interference is None else interference
        n = self.models.capacity.servers_needed(max(load, 0.0), self.read_ratio, i,
                                                self.cfg.headroom)
        return min(max(n, self.cfg.floor), self.cfg.max_replicas)


@dataclass(frozen=True)
class Replay:
    """The whole replay, step by step, for a controller with perfect foresight."""

    load_rps: FloatArray  # per step
    interference: FloatArray  # per step, the true index
    step_s: float
    boot_s: float
    data_bytes: float
    default_mibps: float  # the store's own stream throughput (Cassandra: 24 MiB/s)
    penalty: float  # VM-hours one violation-hour costs
    storage: StorageConfig | None = None  # the bytes, when modelled
    volume_bytes: float | None = None
    total_bytes: FloatArray | None = None  # per step: all data, as the workload writes it
    #: the cluster cleans up after each join and holds removals until it has (the
    #: operator's ``spec.scaleUp.cleanup``; False: the reference text's cluster)
    cleanup: bool = True


#: the horizon planner's shortest lookahead (a day of trace hours) and its longest (a week)
DAY_WINDOWS, WEEK_WINDOWS = 24, 168


def lookahead_windows(data_bytes: float, serving: int, mibps: float, boot_s: float,
                      window_s: float) -> int:
    """The horizon lookahead, in windows, that lets a one-node scale-in of this cluster pay
    for itself (:func:`~elastore.planner.types.scale_in_payback_s` at the store's migration
    rate): never less than a day of windows, at most a week."""
    need = math.ceil(scale_in_payback_s(data_bytes, max(1, serving), mibps, boot_s)
                     / window_s)
    return max(DAY_WINDOWS, min(WEEK_WINDOWS, need))


class Controller:
    name = "controller"
    bwman = False  # migration throttled to f() (True) or at the store's default rate
    tick_s: float | None = None  # also called every tick_s seconds (HPA)
    interference_aware = False
    #: each call's set-points replace the pending ones (a plan re-made every period), else
    #: they are added to them
    replaces = False
    #: can learn its capacity model online (``elastore simulate --learn-online``)
    learns = False
    #: is given the true future (a reference, not a contender: :data:`FORESIGHT`)
    foresight = False
    #: runs the cleanup after a scale-out itself (the operator's runner, through the
    #: simulated API): the cluster then runs none (``Cluster.cleanup = "external"``)
    runs_cleanup = False

    def warm(self, history: FloatArray) -> None:
        """Load history (req/s per window) before the replay starts."""

    def attach(self, cluster: Cluster, ctx: Context, replay: Replay) -> None:
        """The simulated cluster and the replay, before it starts (for a controller that
        acts on the cluster directly, or plans offline)."""

    def migration_mibps(self) -> float | None:
        """The migration rate this controller has set on the cluster (None: the replay's
        rule for it, BwMan's f() or the store's default)."""
        return None

    def cleanup_mibps(self) -> float | None:
        """With :attr:`runs_cleanup`: the rate of the cleanup it runs now (None: none)."""
        return None

    def on_window(self, ctx: Context) -> SetPoints:
        return []

    def on_tick(self, ctx: Context) -> SetPoints:
        return []

    def forecasts(self) -> dict[int, float]:
        return {}


class StaticPeak(Controller):
    name = "static-peak"

    def on_window(self, ctx: Context) -> SetPoints:
        return [(ctx.now_s, ctx.needed(float(np.max(ctx.knots)), 0.0))]


class Feedback(Controller):
    """Resize at each window start to the previous window's mean load (the paper's)."""

    name = "feedback"

    def on_window(self, ctx: Context) -> SetPoints:
        if ctx.k == 0:
            return []
        prev = float(np.mean(ctx.knots[ctx.k - 1 : ctx.k + 1]))  # piecewise-linear mean
        return [(ctx.now_s, ctx.needed(prev, 0.0))]


class _Forecasting(Controller):
    def __init__(self, predictor: Predictor) -> None:
        self.p = predictor
        self.fc: dict[int, float] = {}

    def warm(self, history: FloatArray) -> None:
        self.p.fit(history)

    def _forecast_next(self, ctx: Context, windows: int = 1) -> float:
        """Observe the load at this window start, forecast the load ``windows`` window
        starts ahead."""
        self.p.update(ctx.seen_rps)
        f = self.p.forecast(windows)
        self.fc[ctx.k + windows] = f
        return f

    def forecasts(self) -> dict[int, float]:
        return self.fc


class Predict(_Forecasting):
    """Scale up at the window start for the predicted load; scale down one window later
    (the paper's prediction-based baseline). Conflicts are merged by taking the larger."""

    name = "predict"

    def __init__(self) -> None:
        super().__init__(ProRenaTa())
        self.pending_down: int | None = None

    def on_window(self, ctx: Context) -> SetPoints:
        want = ctx.needed(self._forecast_next(ctx), 0.0)
        out: SetPoints = []
        if self.pending_down is not None:
            out.append((ctx.now_s, max(self.pending_down, want)))
            self.pending_down = None
        if want > ctx.target:
            out.append((ctx.now_s, want))
        elif want < ctx.target:
            self.pending_down = want
        return out


class HoltWintersPHPA(_Forecasting):
    """PHPA-style: a Holt-Winters forecast of the load, turned into replicas at once, with
    the HPA's 300 s scale-down stabilization."""

    name = "holt-winters"
    stabilization_s = 300.0

    def __init__(self) -> None:
        super().__init__(HoltWinters())
        self.recent: Recommendations = ()

    def on_window(self, ctx: Context) -> SetPoints:
        want = ctx.needed(self._forecast_next(ctx), 0.0)
        self.recent = remember(self.recent, ctx.now_s, want, self.stabilization_s)
        return [(ctx.now_s, stabilized(want, ctx.target, ctx.now_s, self.stabilization_s,
                                       self.recent))]


class ProRenaTaController(_Forecasting):
    """The policy loop the operator runs (:class:`~elastore.planner.loop.PolicyLoop`), fed
    at every window start (the control period); its plan is the cluster's target over time.

    ``mode="horizon"`` (``prorenata``): the horizon planner, on the forecast path of the
    next :data:`~elastore.sim.run.LOOKAHEAD_HOURS` windows and its quantile scenarios
    (calibrated on the predictor's own errors), for the replay's violation penalty.
    ``mode="window"`` (``prorenata-window``): the paper's window scheduler on the point
    forecast. ``oracle`` (``perfect-forecast-window``, ``ideal`` until issue 41): the window
    scheduler fed the true load. ``perfect`` (``perfect-forecast``): the horizon planner fed
    the true future as its path (every scenario the truth), so its gap to ``prorenata`` is
    the forecast's and its gap to ``optimal`` the planning's (issue 40). ``method`` is any
    predictor of the registry."""

    name = "prorenata"
    bwman = True
    interference_aware = True
    replaces = True
    learns = True
    windows_ahead = DAY_WINDOWS  # the horizon mode's lookahead, in windows (trace hours)

    def __init__(self, oracle: bool = False, method: str = "prorenata",
                 mode: str = "horizon", perfect: bool = False, payback: bool = True,
                 holidays: bool = False) -> None:
        super().__init__(make(method))
        self.oracle, self.perfect = oracle, perfect
        self.foresight = oracle or perfect
        #: holiday hours reach the forecaster as NaN, as missing hours do: imputed, and no
        #: season learned from them (the planner still observes the load)
        self.holidays = holidays
        self.mode = "window" if oracle else "horizon" if perfect else mode
        #: the lookahead follows a scale-in's payback (:func:`lookahead_windows`), else a
        #: day of windows (``*-day``, before issue 40)
        self.payback = payback and self.mode == "horizon"
        if oracle:
            self.name = "perfect-forecast-window"
        elif perfect:
            self.name = "perfect-forecast"
        elif mode == "window":
            self.name = "prorenata-window"
        if self.mode == "horizon" and not payback:
            self.name += "-day"
        if holidays:
            self.name += "-holidays"
        self.memory = Memory()
        self.decisions: list[Decision] = []
        self.iv: Intervals | None = None
        self._warm_history: FloatArray | None = None
        self.tick_s = 1.0  # every step: a change the plan runs at a fixed rate keeps it
        self._op_started: float | None = None
        self._op_rate: float | None = None
        #: online calibration (``--learn-online``): the learner, its prior, and per window
        #: (hour, median capacity, confidence, scale-in allowed)
        self.learner: CapacityLearner | None = None
        self.prior: CapacityModel | None = None
        self.calibrations: list[tuple[int, float, float, bool]] = []

    def learn_online(self, learner: CapacityLearner, prior: CapacityModel) -> None:
        """Plan with a model learned from the replay's measurements, from ``prior``."""
        self.learner, self.prior = learner, prior

    def _models(self, ctx: Context) -> tuple[ModelSet, bool]:
        """The models to plan with, and whether a scale-in may start: the replay's own
        models, or (learning online) the calibration after this window's observation."""
        if self.learner is None or self.prior is None:
            return ctx.models, True
        x: list[list[float]] = []
        y: list[float] = []
        if ctx.latency_ms is not None and ctx.serving > 0:
            x.append([ctx.load_now / ctx.serving, ctx.read_ratio, ctx.migration_now,
                      ctx.interference])
            y.append(ctx.latency_ms)
        est = estimate.calibrated(ctx.models, self.learner, self.prior, x, y,
                                  ctx.cfg.headroom)
        cal = est.calibration
        self.calibrations.append((ctx.k, cal.capacity_rps, cal.confidence,
                                  cal.scale_in_allowed))
        return est.models, est.scale_in_allowed

    def attach(self, cluster: Cluster, ctx: Context, replay: Replay) -> None:
        if not self.payback:
            return
        ahead = lookahead_windows(replay.data_bytes, cluster.serving, replay.default_mibps,
                                  replay.boot_s, ctx.window_s)
        if ahead != self.windows_ahead:
            self.windows_ahead = ahead
            if self.iv is not None and self._warm_history is not None:
                self.warm(self._warm_history)  # its quantiles for the longer path

    def warm(self, history: FloatArray) -> None:
        if self.perfect:
            return  # it forecasts nothing
        if self.mode != "horizon":
            super().warm(history)
            return
        hist = np.asarray(history, dtype=float)
        self._warm_history = hist
        # replay part of the history so the quantiles start calibrated
        replay = max(0, min(672, len(hist) - max(self.p.min_history, 1)))
        self.iv = Intervals(self.p, horizons=self.windows_ahead).fit(hist, replay=replay)

    def _forecast(self, ctx: Context, ahead: int, for_s: float) -> Forecast:
        label = describe(self.p, self.iv)
        if self.iv is None:
            return Forecast(self._forecast_next(ctx, ahead), for_s, label)
        self.iv.update(math.nan if self.holidays and ctx.holiday else ctx.seen_rps)
        path = self.iv.path()
        self.fc[ctx.k + 1] = float(path[0])
        levels, weights = scenario_levels()
        times = np.asarray(ctx.now_s + ctx.window_s * np.arange(1, self.windows_ahead + 1),
                           dtype=np.float64)
        return Forecast(float(path[min(ahead, len(path)) - 1]), for_s, label,
                        LoadPath(times, path, self.iv.quantile_paths(levels), weights))

    def _true_path(self, ctx: Context, ahead: int, for_s: float) -> Forecast:
        """The next ``windows_ahead`` window starts' true loads (the last one held past the
        trace's end), as the median and as the one scenario."""
        idx = np.minimum(ctx.k + np.arange(1, self.windows_ahead + 1), len(ctx.knots) - 1)
        truth = np.asarray(ctx.knots[idx], dtype=np.float64)
        self.fc[ctx.k + 1] = float(truth[0])
        times = np.asarray(ctx.now_s + ctx.window_s * np.arange(1, self.windows_ahead + 1),
                           dtype=np.float64)
        return Forecast(float(truth[min(ahead, len(truth)) - 1]), for_s,
                        "the true future load", LoadPath(times, truth, truth[None, :].copy(),
                                                         np.ones(1)))

    def on_window(self, ctx: Context) -> SetPoints:
        cfg = ctx.cfg
        if self.mode == "horizon":
            cfg = replace(cfg, mode="horizon",
                          lookahead_s=max(cfg.window_s, self.windows_ahead * ctx.window_s))
        ahead = max(1, round(cfg.window_s / ctx.window_s))
        for_s = ctx.now_s + cfg.window_s
        if self.oracle:
            forecast = Forecast(float(ctx.knots[min(ctx.k + ahead, len(ctx.knots) - 1)]),
                                for_s, "the true future load")
        elif self.perfect:
            forecast = self._true_path(ctx, ahead, for_s)
        else:
            forecast = self._forecast(ctx, ahead, for_s)
        view = ctx.storage
        if view is not None and ctx.data_history is not None:
            view = replace(view, path=growth_forecast(
                ctx.data_history, ctx.window_s, ctx.now_s,
                max(1, round(cfg.lookahead_s / ctx.window_s)) if self.mode == "horizon"
                else ahead + 1))
        observed = Observed(now_s=ctx.now_s, replicas=ctx.serving,
                            load_rps=float(ctx.knots[ctx.k]), read_ratio=ctx.read_ratio,
                            data_bytes=view.total_bytes if view is not None else ctx.data_bytes,
                            interference=ctx.interference, operation=ctx.op, storage=view,
                            cleanup_left_bytes=ctx.cleanup_left_bytes)
        models, scale_in = self._models(ctx)
        loop = PolicyLoop(cfg, models, period_s=ctx.window_s)
        d = loop.step(self.memory, observed, forecast)
        self.memory = d.memory
        self.decisions.append(d)
        current = ctx.op.to_replicas if ctx.op is not None else ctx.serving
        # the operator's own gates (planner.admission), with what the simulator knows: the
        # learned model's confidence (the cluster is never paused, contended or blind here).
        # The replay's metrics are never stale: where the operator decides again before a
        # scale-in due on an older plan, it decides on the same fresh load, so the window's
        # decision stands for it (decision age 0)
        facts = admission.Facts(enforce=True, learning=None if scale_in else
                                "the learned capacity model is not yet confident",
                                decision_age_s=0.0)
        points = []
        for t, n in set_points(d, current):
            kind: admission.Kind = "ScaleIn" if n < current else "ScaleOut"
            held = n != current and admission.admit(
                admission.Intent(kind, n, current), facts) is not None
            points.append((t, current if held else n))
        return points

    def on_tick(self, ctx: Context) -> SetPoints:
        """Note the change under way and the rate its plan runs it at (None: BwMan's)."""
        op = ctx.op
        if op is None:
            self._op_started = self._op_rate = None
        elif op.started_s != self._op_started:
            self._op_started = op.started_s
            a = started(self.memory.actions, ctx.now_s, op.to_replicas)
            self._op_rate = None if a is None else a.rate_mibps
        return []

    def migration_mibps(self) -> float | None:
        return self._op_rate


@dataclass
class HPA(Controller):
    """The Kubernetes HPA algorithm on per-server utilisation (load / SLO capacity):
    desired = ceil(current x utilisation / target) outside a 10 % tolerance; scale-up
    limited to max(100 %, 4 pods) per 15 s (the default policies); scale-down to the highest
    recommendation of the last 300 s (the default stabilization window)."""

    name: str = "hpa"
    target_util: float = 0.9  # the same headroom as every other controller
    tolerance: float = 0.1
    tick_s: float | None = 15.0
    stabilization_s: float = 300.0
    recent: Recommendations = ()
    _cap: float = 0.0

    def on_tick(self, ctx: Context) -> SetPoints:
        if not self._cap:
            self._cap = float(ctx.models.capacity.capacity(ctx.read_ratio, 0.0, 0.0))
        cap = self._cap
        util = ctx.load_now / max(ctx.serving, 1) / cap
        ratio = util / self.target_util
        current = ctx.serving
        within = abs(ratio - 1) <= self.tolerance
        desired = ctx.target if within else math.ceil(current * ratio)
        desired = min(max(desired, ctx.cfg.floor), ctx.cfg.max_replicas)
        desired = min(desired, max(2 * current, current + 4))
        self.recent = remember(self.recent, ctx.now_s, desired, self.stabilization_s)
        return [(ctx.now_s, stabilized(desired, current, ctx.now_s, self.stabilization_s,
                                       self.recent))]


class OperatorController(Controller):
    """The operator itself: its runner (:class:`elastore.operator.runner.Runner`), node-step
    state machine and stream throttle, unchanged, on an ElasticPolicy in Enforce mode with
    the replay's planner settings, acting on the simulated cluster through
    :class:`~elastore.sim.kube.SimulatedKube` and observing it through
    :class:`~elastore.sim.kube.TraceMetrics` (the load at each window start, as its
    history). It runs whenever the runner asks to (at least every step while an operation
    runs); the migration rate is the one it sets."""

    name = "operator"
    tick_s: float | None = 5.0  # the runner's poll; the replay calls it once a step
    interference_aware = True
    learns = True  # through spec.capacityModel.learn, from the replay's node readings
    #: its runner issues nodetool cleanup through the simulated API, which times each
    #: node's (its bytes at the compaction throttle the runner sets): the cluster does not
    runs_cleanup = True

    def __init__(self, method: str = "prorenata", namespace: str = "sim",
                 store: str = "store") -> None:
        self.method = method
        self.namespace, self.store = namespace, store
        self.history: FloatArray = np.zeros(0)
        self.next_s = 0.0
        self.fc: dict[int, float] = {}
        self.runner: Any = None
        self.kube: Any = None
        self._windows_ahead = DAY_WINDOWS
        self.policies: Any = None
        #: learning online: the prior's capacity factor (None: the replay's model as is),
        #: and per window (window, learned capacity, confidence, scale-in allowed)
        self.prior_scale: float | None = None
        self.prior: Any = None
        self.calibrations: list[tuple[int, float, float, bool]] = []

    def learn_online(self, learner: Any, prior: Any) -> None:
        """Learn through the operator's own path: ``spec.capacityModel.learn`` from the
        replay's per-node readings, the prior ``prior`` (the replay's model x K)."""
        self.prior = prior

    def warm(self, history: FloatArray) -> None:
        self.history = np.asarray(history, dtype=float)

    def policy_spec(self, ctx: Context) -> dict[str, Any]:
        cfg, cap = ctx.cfg, ctx.models.capacity
        w = f"{ctx.window_s:g}s"
        return {"target": {"name": self.store, "replicationFactor": cfg.replication_factor},
                "replicas": {"min": cfg.min_replicas, "max": cfg.max_replicas},
                "slo": {"latencyMs": cap.slo_ms, "percentile": cap.percentile},
                "mode": "Enforce", "controlPeriod": w,
                "prediction": {"method": self.method, "horizon": f"{cfg.window_s:g}s",
                               "step": w, "headroom": cfg.headroom},
                "migration": {"minMiBps": cfg.min_migration_mibps,
                              "maxMiBps": cfg.max_migration_mibps,
                              "nodeOverheadSeconds": round(cfg.node_overhead_s)},
                "scaleDown": {"stabilizationSeconds": round(cfg.scale_down_stabilization_s)},
                # the replay's cluster: nodetool cleanup after each scale-out, or not
                "scaleUp": {"cleanup": cfg.cleanup},
                "planner": {"mode": "Horizon", "lookahead": f"{self.lookahead_s(ctx):g}s"},
                "cost": {"violationPenalty": cfg.penalty},
                # the replay's model as it is, or (`--learn-online`) learned from it x K
                "capacityModel": {**({"learn": False} if self.prior_scale is None else {
                    "learn": True, "priorScale": self.prior_scale}), **self._model_ref(cap)},
                # the URL is never dialled: the runner's metrics source is the replay
                "metrics": {"prometheus": {"url": "http://simulated.invalid",
                                           "queries": {"interference": "replay"}}},
                "interference": {"enabled": True}}

    @staticmethod
    def _model_ref(cap: CapacityModel) -> dict[str, Any]:
        """The replay's model is the user's own, as a ConfigMap model is in the cluster (the
        runner is handed it; nothing is read). The policy names one where the API would
        insist: an SLO percentile the built-in model does not hold (p99), which the
        operator refuses without a model fitted for it. Learning and its prior scale are
        set above, so naming it changes no default."""
        from elastore.operator.specfields import BUILTIN_PERCENTILES

        if cap.percentile in BUILTIN_PERCENTILES:
            return {}
        return {"configMapRef": {"name": "replay-model"}}

    def lookahead_s(self, ctx: Context) -> float:
        """The same lookahead as the simulator's prorenata (set by :meth:`attach`)."""
        return max(ctx.cfg.window_s, self._windows_ahead * ctx.window_s)

    def attach(self, cluster: Cluster, ctx: Context, replay: Replay) -> None:
        from elastore.errors import ElastoreError
        from elastore.operator.policyloop import planner_config
        from elastore.operator.runner import Runner
        from elastore.operator.spec import parse
        from elastore.sim.kube import MemoryPolicies, SimulatedKube, TraceMetrics

        # learning: the runner loads the prior itself (priorScale 1), so that a prior of
        # any shape can be given; else the replay's model as it is
        models = ctx.models
        self._windows_ahead = lookahead_windows(replay.data_bytes, cluster.serving,
                                                replay.default_mibps, replay.boot_s,
                                                ctx.window_s)
        if self.prior is not None:
            self.prior_scale = 1.0
            models = replace(ctx.models, capacity=self.prior)
        spec = self.policy_spec(ctx)
        want = replace(ctx.cfg, mode="horizon", lookahead_s=self.lookahead_s(ctx))
        if planner_config(parse(spec)) != want:
            raise ElastoreError("the replay's planner settings cannot be written as an "
                                f"ElasticPolicy: {planner_config(parse(spec))} != {want}")
        w = ctx.window_s
        times = np.arange(-len(self.history), len(ctx.knots)) * w
        values = np.concatenate([self.history, ctx.knots])
        ok = np.isfinite(values)
        self._ctx_interference = 0.0
        metrics = TraceMetrics.piecewise_linear(times[ok], values[ok], ctx.read_ratio,
                                                cluster.total_bytes, self._interference)
        if self.prior is not None:
            metrics.node_readings = self._node_readings
        self._node: tuple[float, float | None, float, int] = (0.0, None, 0.0, 1)
        # volumes that never bind the free-space check (the replay models no disk), and
        # the policy's replication factor for the ring's one keyspace
        self.kube = SimulatedKube(cluster, self.namespace, self.store, pvc_template=None,
                                  stream_mibps=ctx.cfg.max_migration_mibps,
                                  volume_bytes=4 * cluster.total_bytes())
        self.kube.keyspaces = {"data": parse(spec).target.replication_factor}
        self.policies = MemoryPolicies.of(self.namespace, "policy", spec)
        self.runner = Runner(self.namespace, "policy", self.policies, self.kube,
                             lambda _spec: models, clock=lambda: self.kube.now_s,
                             source=lambda _spec, _ns: metrics)

    def _interference(self, _t: float) -> float:
        return self._ctx_interference

    def _node_readings(self, _t: float) -> dict[str, Any]:
        """Every serving node's readings now: the load split evenly, the latency the
        replay measured (None while a node leaves), the streaming rate."""
        from elastore.operator.metrics import NodeReading

        load, lat, mig, n = self._node
        r = self._read_ratio
        return {f"{self.store}-{k}": NodeReading(load / n * r, load / n * (1 - r), lat, mig)
                for k in range(n)}

    def on_tick(self, ctx: Context) -> SetPoints:
        self.kube.now_s = ctx.now_s
        self._ctx_interference = ctx.interference
        self._node = (ctx.load_now, ctx.latency_ms, ctx.migration_now, max(1, ctx.serving))
        self._read_ratio = ctx.read_ratio
        if ctx.now_s + 1e-9 >= self.next_s:
            wait = self.runner.tick()
            self.next_s = ctx.now_s + wait
            m = self.policies.status.get("model") or {}
            if m.get("source") == "learned" and m.get("capacityRps") and (
                    not self.calibrations or self.calibrations[-1][0] != ctx.k):
                self.calibrations.append((ctx.k, float(m["capacityRps"]),
                                          float(m["confidence"]), bool(m["scaleInAllowed"])))
            fc = self.policies.status.get("forecast") or {}
            mem = self.policies.status.get("memory") or {}
            if fc and mem.get("forecastForEpoch") is not None:
                self.fc[round(float(mem["forecastForEpoch"]) / ctx.window_s)] = \
                    float(fc["requestsPerSecond"])
        return []

    def migration_mibps(self) -> float | None:
        return float(self.kube.stream_mibps) if self.kube is not None else None

    def cleanup_mibps(self) -> float | None:
        if self.kube is None:
            return None
        pod = self.kube.cleanup_running_now()
        return None if pod is None else float(self.kube.cleanup_mibps(pod))

    def forecasts(self) -> dict[int, float]:
        return self.fc


class OptimalController(Controller):
    """``optimal``: the least U = VM-hours + penalty x violation-hours any schedule of
    one-node changes reaches on this replay, with perfect foresight. It plans offline, by
    exact dynamic programming (:func:`elastore.planner.schedule.cheapest`) over every
    (step, servers) state, on the simulator's own physics: the same load, latency surface,
    data movement, boot, billing and (by default) the cleanup after each join that holds
    removals. Each migration and cleanup runs at BwMan's rule or at the store's default
    rate, whichever the schedule prefers, so it bounds every controller of the comparison
    from below. Servers range from the floor to what the peak needs plus two."""

    name = "optimal"
    interference_aware = True
    foresight = True

    def __init__(self) -> None:
        self.schedule: Any = None
        self.horizon: Any = None
        self.tick_s = 1.0  # called every step: it sets each step's migration rate
        self._step = 0
        self._default = 24.0
        self._dt = 10.0

    def attach(self, cluster: Cluster, ctx: Context, replay: Replay) -> None:
        from elastore.models.migration import MigrationModel
        from elastore.planner.schedule import cheapest, physics_horizon, with_bytes

        cfg, cap = ctx.cfg, ctx.models.capacity
        peak = float(np.max(replay.load_rps))
        n_hi = min(cfg.max_replicas,
                   cap.servers_needed(peak, ctx.read_ratio, float(np.max(replay.interference)),
                                      cfg.headroom) + 2)
        disk = None
        if replay.storage is not None and replay.volume_bytes and replay.total_bytes is not None:
            budget = replay.storage.budget * replay.volume_bytes
            top = float(np.max(replay.total_bytes))
            n_hi = min(cfg.max_replicas, max(n_hi, math.ceil(top / budget - 1e-9) + 1))
            disk = (replay.total_bytes, budget, replay.storage)
        n_hi = max(n_hi, cluster.serving, cfg.floor)
        mig = MigrationModel(cap, min_mibps=cfg.min_migration_mibps,
                             max_mibps=replay.default_mibps, slo_margin=cfg.migration_margin)
        # a growing cluster's changes move the data as it is when they start
        data = replay.data_bytes if replay.total_bytes is None else replay.total_bytes
        self.horizon = physics_horizon(
            ctx.models, mig, replay.load_rps, replay.interference, ctx.read_ratio,
            replay.step_s, replay.boot_s, data, min(cfg.floor, cluster.serving),
            n_hi, default_mibps=replay.default_mibps, cleanup=replay.cleanup)
        if disk is not None:
            self.horizon = with_bytes(self.horizon, *disk, penalty=replay.penalty)
        self.schedule = cheapest(self.horizon, cluster.serving, replay.penalty)
        self._default, self._dt = replay.default_mibps, replay.step_s

    def on_window(self, ctx: Context) -> SetPoints:
        if ctx.k != 0:
            return []
        return [(m.start * self._dt, m.n_to) for m in self.schedule.moves]

    def on_tick(self, ctx: Context) -> SetPoints:
        self._step = round(ctx.now_s / self._dt)
        return []

    def migration_mibps(self) -> float | None:
        step = min(self._step, self.horizon.steps - 1)
        m = self.schedule.move_at(step)
        if m is None:
            c = self.schedule.cleaning_at(step)
            if c is None:
                return self._default
            rule = self.horizon.rules[self.schedule.rule_index[c.clean_rule]]
            assert rule.clean_mibps is not None
            return float(rule.clean_mibps[c.n_to - self.horizon.n_lo, step])
        rule = self.horizon.rules[self.schedule.rule_index[m.rule]]
        table = rule.add_mibps if m.n_to > m.n_from else rule.remove_mibps
        return float(table[m.n_from - self.horizon.n_lo, step])


FACTORIES: dict[str, Callable[[], Controller]] = {
    "feedback": Feedback, "predict": Predict, "prorenata": ProRenaTaController,
    "prorenata-window": lambda: ProRenaTaController(mode="window"),
    "perfect-forecast-window": lambda: ProRenaTaController(oracle=True),
    "perfect-forecast": lambda: ProRenaTaController(perfect=True),
    # the lookahead fixed at a day, as before issue 40 (for comparison)
    "prorenata-day": lambda: ProRenaTaController(payback=False),
    "prorenata-holidays": lambda: ProRenaTaController(holidays=True),
    "perfect-forecast-day": lambda: ProRenaTaController(perfect=True, payback=False),
    "optimal": OptimalController, "hpa": HPA,
    "holt-winters": HoltWintersPHPA, "static-peak": StaticPeak,
    "operator": OperatorController,
}
#: every controller ``elastore simulate`` knows
KNOWN = tuple(FACTORIES)
#: the names controllers had before, which ``elastore simulate --controllers`` still takes
#: (with a warning): ``ideal`` was no ideal, but the window scheduler given the true future
RENAMED = {"ideal": "perfect-forecast-window"}
#: the bound every controller is measured against
BOUND = "optimal"
#: the controllers given the true future (each one's ``foresight``): references that show
#: what knowing it is worth, never ranked with the others
FORESIGHT = ("perfect-forecast-window", "perfect-forecast", "perfect-forecast-day", BOUND)
#: what each controller is, in a line (the report's legend)
ABOUT = {
    "feedback": "resizes at each window start for the last window's mean load",
    "predict": "resizes for the forecast load; scales down a window later",
    "prorenata": "the operator's policy loop: the horizon planner on the forecast's "
                 "scenarios, BwMan",
    "prorenata-window": "the operator's policy loop with the paper's window scheduler on the "
                        "point forecast, BwMan",
    "perfect-forecast-window": "prorenata-window given the true future load (the paper's "
                               "window scheduler with an oracle; `ideal` before issue 41)",
    "perfect-forecast": "prorenata's horizon planner given the true future load",
    "prorenata-day": "prorenata with its lookahead fixed at a day (before issue 40)",
    "prorenata-holidays": "prorenata, holiday hours kept out of its seasons",
    "perfect-forecast-day": "perfect-forecast with its lookahead fixed at a day",
    "optimal": "the bound: the least U any schedule of one-node changes reaches, planned "
               "offline with the true future",
    "hpa": "the Kubernetes HPA on utilisation, every 15 s",
    "holt-winters": "PHPA-style: a Holt-Winters forecast, applied at once",
    "static-peak": "the trace's peak, all the time",
    "operator": "the operator's own runner on the simulated cluster",
}
#: the default comparison (``operator`` runs the same loop as ``prorenata``, more slowly)
CONTROLLERS = tuple(n for n in KNOWN if n not in (
    "operator", "perfect-forecast", "prorenata-day", "perfect-forecast-day",
    "prorenata-holidays"))


def make_controller(name: str) -> Controller:
    if name not in FACTORIES:
        from elastore.errors import ElastoreError

        raise ElastoreError(f"unknown controller {name!r}; choose from {', '.join(KNOWN)}")
    return FACTORIES[name]()
