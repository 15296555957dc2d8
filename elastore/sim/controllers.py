"""Controllers compared by the simulator. All decide through the same interfaces: they see
a :class:`Context` at every window start (and, for the HPA, every sync period) and return
set-points ``(time_s, target_replicas)``; sizing always goes through the capacity model's
``servers_needed`` and, for ProRenaTa and ideal, through the planner.

| name | decides | migration |
|---|---|---|
| feedback | at each window start, for the previous window's mean load | store default |
| predict | at the window start for the predicted load; scale-down a window later | store default |
| prorenata | the ProRenaTa planner with the ``prorenata`` forecast | BwMan: f(), floored |
| ideal | the ProRenaTa planner with the true future load | BwMan: f(), floored |
| hpa | Kubernetes HPA on utilisation, every 15 s | store default |
| holt-winters | PHPA-style: Holt-Winters forecast, applied at once | store default |
| static-peak | the trace's peak, all the time | store default |
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from elastore.models.bundle import ModelSet
from elastore.planner import Observation, Operation, PlannerConfig, plan
from elastore.predictor.base import FloatArray, Predictor
from elastore.predictor.prorenata import ProRenaTa
from elastore.predictor.statistical import HoltWinters

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

    @property
    def observed(self) -> FloatArray:
        """Window-start loads seen so far (k + 1 values)."""
        return self.knots[: self.k + 1]

    def needed(self, load: float, interference: float | None = None) -> int:
        i = self.interference if interference is None else interference
        n = self.models.capacity.servers_needed(max(load, 0.0), self.read_ratio, i,
                                                self.cfg.headroom)
        return min(max(n, self.cfg.floor), self.cfg.max_replicas)


class Controller:
    name = "controller"
    bwman = False  # migration throttled to f() (True) or at the store's default rate
    tick_s: float | None = None  # also called every tick_s seconds (HPA)
    interference_aware = False

    def warm(self, history: FloatArray) -> None:
        """Load history (req/s per window) before the replay starts."""

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

    def _forecast_next(self, ctx: Context) -> float:
        """Observe the load at this window start, forecast the next window start."""
        self.p.update(float(ctx.knots[ctx.k]))
        f = self.p.forecast(1)
        self.fc[ctx.k + 1] = f
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

    def __init__(self) -> None:
        super().__init__(HoltWinters())
        self.recent: deque[tuple[float, int]] = deque()

    def on_window(self, ctx: Context) -> SetPoints:
        want = ctx.needed(self._forecast_next(ctx), 0.0)
        self.recent.append((ctx.now_s, want))
        while self.recent and ctx.now_s - self.recent[0][0] > 300:
            self.recent.popleft()
        if want < ctx.target:
            want = min(ctx.target, max(d for _, d in self.recent))
        return [(ctx.now_s, want)]


class ProRenaTaController(_Forecasting):
    name = "prorenata"
    bwman = True
    interference_aware = True

    def __init__(self, oracle: bool = False) -> None:
        super().__init__(ProRenaTa())
        self.oracle = oracle
        if oracle:
            self.name = "ideal"
        self.history: list[tuple[float, int]] = []

    def on_window(self, ctx: Context) -> SetPoints:
        if self.oracle:
            nxt = ctx.knots[min(ctx.k + 1, len(ctx.knots) - 1)]
            forecast = float(nxt)
            predicted_now = float(ctx.knots[ctx.k])
        else:
            predicted_now = self.fc.get(ctx.k, float(ctx.knots[ctx.k]))
            forecast = self._forecast_next(ctx)
        obs = Observation(
            now_s=ctx.now_s, replicas=ctx.serving, load_rps=float(ctx.knots[ctx.k]),
            forecast_rps=forecast, read_ratio=ctx.read_ratio, data_bytes=ctx.data_bytes,
            interference=ctx.interference, predicted_now_rps=predicted_now,
            operation=ctx.op, recent_desired=tuple(self.history[-8:]),
        )
        p = plan(obs, ctx.cfg, ctx.models)
        self.history.append((ctx.now_s, p.desired_replicas))
        if not p.actions:
            return [(ctx.now_s, max(p.desired_replicas, ctx.target)
                     if ctx.op is not None else p.desired_replicas)]
        return [(a.at_s, a.replicas) for a in p.actions]


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
    recent: deque[tuple[float, int]] = field(default_factory=deque)
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
        self.recent.append((ctx.now_s, desired))
        while self.recent and ctx.now_s - self.recent[0][0] > self.stabilization_s:
            self.recent.popleft()
        if desired < current:
            desired = min(current, max(d for _, d in self.recent))
        return [(ctx.now_s, desired)]


def make_controller(name: str) -> Controller:
    table = {
        "feedback": Feedback, "predict": Predict, "prorenata": ProRenaTaController,
        "ideal": lambda: ProRenaTaController(oracle=True), "hpa": HPA,
        "holt-winters": HoltWintersPHPA, "static-peak": StaticPeak,
    }
    if name not in table:
        from elastore.errors import ElastoreError

        raise ElastoreError(f"unknown controller {name!r}; choose from {', '.join(table)}")
    return table[name]()


CONTROLLERS = ("feedback", "predict", "prorenata", "ideal", "hpa", "holt-winters",
               "static-peak")
