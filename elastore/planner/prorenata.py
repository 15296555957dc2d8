"""The ProRenaTa planner (reference text, 5.3.2): proactive plan, reactive correction, and
the scheduler that runs the reactive plan now and the proactive one at the last moment that
still finishes by the window end.

Pure: an :class:`Observation`, a :class:`PlannerConfig` and the models in, a :class:`Plan`
out. No clocks, no I/O.

**The merge rule.** When the reactive and proactive plans do not both fit in one window,
the text says only ``|Plan_r - |Plan_p - Plan_r||`` servers are changed, as one proactive
plan finishing at the window end; the pseudocode of Fig. 5.16 changes
``dVMs_{i+1} + dVMs_i`` servers, starting at ``t_e - t``. They disagree, and neither
holds up: with Plan_r = +2 and Plan_p = +5 the text changes 1 server and the pseudocode 7
(it counts the reactive error twice, since Plan_p is already relative to the current size)
and starts late although the cluster is short *now*; with Plan_r = -2 and Plan_p = +3 the
text changes 7 and the pseudocode 1, which leaves the window end 2 servers short.

We decide for ``merge="elastore"`` (the default): one action, SLO first.
* reactive says *more now* (Plan_r > 0): go straight to max(proactive, reactive) target,
  starting now: one topology change covers both, and the shortage now is not prolonged;
* reactive says *fewer now* (Plan_r < 0): drop it (the servers would be needed again by
  the window end) and run the proactive plan from the current size at the last moment.
``merge="pseudocode"`` keeps Fig. 5.16 for comparison. Both are tested on Fig. 5.15's two
cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from elastore.models.bandwidth import Allocation
from elastore.models.bundle import ModelSet
from elastore.models.migration import MigrationEstimate, MigrationModel
from elastore.models.storage import DataPath
from elastore.planner.bwman import split_rate
from elastore.planner.stabilization import stabilized
from elastore.planner.types import Action, Observation, Plan, PlannerConfig


def _clamp(n: int, cfg: PlannerConfig) -> int:
    return min(max(n, cfg.floor), cfg.max_replicas)


@dataclass
class _Window:
    """One planning window: the inputs and what every step below derives from them."""

    obs: Observation
    cfg: PlannerConfig
    models: ModelSet
    mig: MigrationModel
    t_s: float  # the window starts (now)
    t_e: float  # and ends
    base: int  # the size plans start from: now, or an operation's outcome
    start: float  # the earliest a new action may start
    queued: bool  # an operation is under way: new actions wait for it
    why: list[str] = field(default_factory=list)

    @property
    def length(self) -> float:
        return self.t_e - self.start

    def needed(self, load: float) -> int:
        """Servers for ``load``: the mean node within capacity, and with a load skew the
        busiest one (after the rebalancing the skew's factors assume)."""
        o = self.obs
        cap = self.models.capacity
        n = cap.servers_needed(load, o.read_ratio, o.interference, self.cfg.headroom)
        if o.load_skew is None:
            return n
        while n < self.cfg.max_replicas and cap.servers_needed(
                load * o.load_skew.factor(n), o.read_ratio, o.interference,
                self.cfg.headroom) > n:
            n += 1
        return n

    def estimate(self, n_from: int, n_to: int, now_load_only: bool = False
                 ) -> MigrationEstimate:
        """Migration time from ``n_from`` to ``n_to`` servers, under the load ramp from now
        to the forecast (or under the load now only)."""
        o = self.obs
        pred = o.load_rps if now_load_only else o.forecast_rps
        return self.mig.estimate(o.data_bytes, n_from, n_to, load_rps=o.load_rps,
                                 load_pred_rps=pred, read_ratio=o.read_ratio,
                                 interference=o.interference)


def _window(obs: Observation, cfg: PlannerConfig, models: ModelSet) -> _Window:
    """An operation in progress is never contradicted: plans start from its outcome, after
    it ends."""
    mig = MigrationModel(models.capacity, mode=cfg.migration_mode,
                         node_overhead_s=cfg.node_overhead_s,
                         min_mibps=cfg.min_migration_mibps, max_mibps=cfg.max_migration_mibps,
                         slo_margin=cfg.migration_margin)
    base, start, queued = obs.replicas, obs.now_s, False
    if obs.operation is not None:
        base = obs.operation.to_replicas
        start = max(obs.now_s, obs.operation.expected_end_s)
        queued = True
    return _Window(obs, cfg, models, mig, obs.now_s, obs.now_s + cfg.window_s, base, start,
                   queued)


@dataclass(frozen=True)
class _Targets:
    proactive_raw: int  # what the forecast needs, unbounded
    proactive: int  # bounded and stabilized: the size at the window end
    delta_r: int  # the reactive correction (observed vs predicted now)
    reactive_wanted: int  # the size the correction wants now
    reactive: int  # ... never a scale-in that the window's end would undo


def _targets(w: _Window) -> _Targets:
    """The proactive target (for the forecast at the window end) and the reactive one
    (the prediction error now, applied to the base), each bounded and stabilized."""
    obs, cfg = w.obs, w.cfg
    window = cfg.scale_down_stabilization_s
    raw = w.needed(obs.forecast_rps)
    proactive = _clamp(stabilized(raw, w.base, w.t_s, window, obs.recent_desired), cfg)
    delta_r = 0
    if cfg.reactive and obs.predicted_now_rps is not None:
        delta_r = w.needed(obs.load_rps) - w.needed(obs.predicted_now_rps)
    wanted = _clamp(w.base + delta_r, cfg)
    reactive = wanted
    if reactive < w.base:
        reactive = _clamp(stabilized(reactive, w.base, w.t_s, window, obs.recent_desired),
                          cfg)
        # a scale-in now goes no lower than the window's end needs: removing a node only to
        # add it back within the window (10 -> 9 -> 8 now, 8 -> 9 -> 10 later) moves data
        # twice for nothing
        reactive = max(reactive, min(w.base, proactive))
    return _Targets(raw, proactive, delta_r, wanted, reactive)


def _explain_targets(w: _Window, tg: _Targets, capacity: float) -> None:
    obs, cfg, cap = w.obs, w.cfg, w.models.capacity
    w.why.append(
        f"forecast {obs.forecast_rps:,.0f} req/s at the window end needs {tg.proactive_raw} "
        f"server(s) ({capacity:,.0f} req/s/server under p{cap.percentile} <= "
        f"{cap.slo_ms:g} ms at read ratio {obs.read_ratio:.2f}, interference "
        f"{obs.interference:.2f}, {cfg.headroom:.0%} headroom)")
    if obs.load_skew is not None:
        w.why.append(f"sized for the busiest node: {obs.load_skew.factor(tg.proactive_raw):.2f}"
                     f" x the mean at {tg.proactive_raw} server(s)"
                     + (f" ({obs.load_skew.rebalancing})" if obs.load_skew.rebalancing else ""))
    if tg.proactive != tg.proactive_raw:
        w.why.append(f"bounded/stabilized to {tg.proactive}")
    if obs.predicted_now_rps is not None and cfg.reactive:
        w.why.append(f"observed {obs.load_rps:,.0f} vs predicted {obs.predicted_now_rps:,.0f} "
                     f"req/s: reactive {tg.delta_r:+d}")
    if obs.operation is not None:
        w.why.append(f"an operation to {w.base} is in progress until "
                     f"{obs.operation.expected_end_s:.0f} s: new actions wait")


def _deadlines(w: _Window, n_from: int, n_to: int) -> list[float]:
    """For each added node, when the load ramp (linear from now to the forecast at t_e,
    the paper's assumption) would exceed what the servers before it carry while still able
    to migrate. The paper schedules the whole change to end at t_e; on a rising ramp that
    lets the load cross the current capacity first, so every node gets its own deadline."""
    obs, cfg = w.obs, w.cfg
    # what a server carries while still migrating at the policy's floor rate
    usable = float(w.models.capacity.capacity(obs.read_ratio, cfg.min_migration_mibps,
                                              obs.interference)) * (1 - cfg.headroom)
    slope = (obs.forecast_rps - obs.load_rps) / cfg.window_s
    out = []
    for n in range(n_from, n_to):
        if slope <= 0:
            out.append(w.t_e)
        else:
            skew = obs.load_skew.factor(n) if obs.load_skew is not None else 1.0
            out.append(min(w.t_e, max(w.t_s, w.t_s + (n * usable / skew - obs.load_rps)
                                      / slope)))
    return out


@dataclass(frozen=True)
class _Schedule:
    actions: list[Action]
    merged: bool
    t_reactive_s: float
    t_proactive_s: float
    proactive: int  # the proactive target, less the decommissions that do not fit


def _schedule(w: _Window, tg: _Targets) -> _Schedule:
    """The actions of the window: the reactive plan now and the proactive one at the last
    moment when both fit, else one merged change (see the module's merge rule)."""
    cfg = w.cfg
    base, reactive, proactive = w.base, tg.reactive, tg.proactive
    if base > cfg.max_replicas:
        # outside the bounds (scaled up by someone else, or the max lowered): back within
        # them now, as HPA does, whatever the load wants and whether or not it fits the
        # window (the merge rule's "scale-in is never urgent" is about the load's plans)
        est = w.estimate(base, cfg.max_replicas, now_load_only=True)
        w.why.append(f"{base} server(s) are above replicas.max {cfg.max_replicas}: removed "
                     f"one after the other down to it, whatever the load wants")
        return _Schedule(_steps(w.start, base, cfg.max_replicas, est, "reactive", cfg,
                                "back within replicas.max"), False, est.seconds, 0.0,
                         cfg.max_replicas)
    est_r = w.estimate(base, reactive, now_load_only=True)
    est_p = w.estimate(reactive, proactive)
    window = w.length
    if proactive < reactive:  # scale-in is never urgent: only the node steps that finish
        est_p, proactive = _fit_scale_in(est_p, reactive, proactive, window)
    t_r, t_p = est_r.seconds, est_p.seconds
    actions: list[Action] = []
    if t_r + t_p <= window:
        if reactive != base:
            actions += _steps(w.start, base, reactive, est_r, "reactive", cfg,
                              "correct the prediction error now")
        if proactive != reactive:
            if proactive > reactive and cfg.one_at_a_time:
                actions += _scheduled_out(est_p, reactive, _deadlines(w, reactive, proactive),
                                          w.start + t_r, "proactive")
            else:
                at = max(w.start + t_r, w.t_e - t_p)
                actions += _steps(at, reactive, proactive, est_p, "proactive",
                                  cfg, f"latest start that finishes by the window end "
                                       f"({t_p:.0f} s of migration)")
        return _Schedule(actions, False, t_r, t_p, proactive)
    if cfg.merge == "pseudocode":
        target = _clamp(base + (proactive - base) + (reactive - base), cfg)
        est = w.estimate(base, target)
        at = max(w.start, w.t_e - est.seconds)
        label = "Fig. 5.16: dVMs(next) + dVMs(now)"
    elif reactive > base:
        target = max(proactive, reactive)
        est = w.estimate(base, target)
        at = w.start
        label = "short now: one change to the larger target, at once"
    else:
        target = proactive
        est = w.estimate(base, target)
        if target < base:
            est, target = _fit_scale_in(est, base, target, window)
        at = max(w.start, w.t_e - est.seconds)
        label = "reactive scale-in dropped; proactive at the last moment"
    w.why.append(f"plans need {t_r:.0f} s + {t_p:.0f} s > {window:.0f} s: merged ({label})")
    if target != base:
        actions += _steps(at, base, target, est, "merged", cfg, label)
    return _Schedule(actions, True, t_r, t_p, proactive)


def _migration(w: _Window) -> tuple[float, Allocation | None, str]:
    """The migration rate to enforce now (f() at the current per-server load) and, when the
    server's bandwidth is known, BwMan's split of it (and what it did)."""
    obs, cfg = w.obs, w.cfg
    per_server = obs.load_rps / max(1, obs.replicas)
    rate = w.mig.rate(per_server, obs.read_ratio, obs.interference)
    return split_rate(w.models, cfg.total_bandwidth_mbit, per_server, rate, cfg.policy,
                      cfg.min_migration_mibps)


def plan(obs: Observation, cfg: PlannerConfig, models: ModelSet) -> Plan:
    """Plan one control window starting at ``obs.now_s`` (``cfg.mode == "horizon"``: the
    cheapest schedule over the whole horizon, :mod:`elastore.planner.horizon`)."""
    cfg.validate()
    obs.validate()
    if cfg.mode == "horizon":
        from elastore.planner.horizon import plan_horizon

        return plan_horizon(obs, cfg, models)
    w = _window(obs, cfg, models)
    capacity = float(models.capacity.capacity(obs.read_ratio, 0.0, obs.interference))
    tg = _targets(w)
    _explain_targets(w, tg, capacity)
    sch = _schedule(w, tg)
    actions = sch.actions
    if actions and actions[-1].expected_end_s > w.t_e + 1e-6:
        w.why.append(f"the change cannot finish in this window (ends "
                     f"{actions[-1].expected_end_s - w.t_e:.0f} s late)")
    rate, alloc, split = _migration(w)
    if split:
        w.why.append(split)
    w.why.append(f"migration at {rate:.2f} MiB/s per server")
    if not actions:
        w.why.append(f"no change: {w.base} server(s)")
    binding = "load"
    if obs.load_skew is not None and tg.proactive_raw > w.models.capacity.servers_needed(
            obs.forecast_rps, obs.read_ratio, obs.interference, cfg.headroom):
        binding = "skew"  # the mean node alone wants fewer
    if obs.storage is not None:
        actions, binding = _bytes_floor(obs, cfg, actions, w.base, w.t_e, w.why, binding)
    return Plan(
        now_s=w.t_s, window_end_s=w.t_e, actions=tuple(actions),
        desired_replicas=actions[-1].replicas if actions else w.base,
        migration_mibps=rate, bandwidth=alloc, queued=w.queued and bool(actions),
        reason="; ".join(w.why),
        details={"proactive": sch.proactive, "proactive_unbounded": tg.proactive_raw,
                 "reactive": tg.reactive_wanted, "reactive_delta": tg.delta_r,
                 "t_reactive_s": sch.t_reactive_s, "t_proactive_s": sch.t_proactive_s,
                 "merged": sch.merged, "capacity_rps": capacity, "base": w.base,
                 "binding": binding},
    )


def _bytes_floor(obs: Observation, cfg: PlannerConfig, actions: list[Action], base: int,
                 t_e: float, why: list[str], without_bytes: str = "load"
                 ) -> tuple[list[Action], str]:
    """The window planner with the bytes: never fewer servers at the window's end than
    keep every node within its budget at the forecast's 98th percentile then (the Horizon
    planner times a scale-out for bytes; this one only keeps the floor)."""
    view = obs.storage
    assert view is not None
    path = view.path if view.path is not None else DataPath.flat(t_e, view.total_bytes)
    _, scen = path.at(np.array([t_e]), obs.now_s, view.total_bytes)
    k = min(len(path.weights) - 1, int(np.searchsorted(np.cumsum(path.weights), 0.98)))
    need = min(cfg.max_replicas, view.nodes_needed(float(scen[k, 0])))
    have = actions[-1].replicas if actions else base
    why.append(f"bytes ({view.source}): the fullest node at {view.utilization:.0%}, budget "
               f"{view.config.binding_rule()}; {need} node(s) hold the data at the window's "
               "end")
    if need <= have:
        return actions, without_bytes
    at = max([obs.now_s] + [a.expected_end_s for a in actions if math.isfinite(
        a.expected_end_s)])
    return [*actions, Action(at, need, "proactive", f"{have} -> {need}: the bytes need "
                             f"{need} node(s) by the window's end")], "storage"


def _fit_scale_in(est: MigrationEstimate, n_from: int, n_to: int, window: float
                  ) -> tuple[MigrationEstimate, int]:
    """Keep only the decommissions that finish within the window. A scale-in is never
    urgent, and one that outlasts the window would block the next scale-out (changes go
    one at a time and are never aborted)."""
    done, secs = 0, 0.0
    for s in est.steps:
        if secs + s > window:
            break
        secs += s
        done += 1
    if done == len(est.steps):
        return est, n_to
    steps = est.steps[:done]
    return (MigrationEstimate(secs, est.bytes_moved, est.rate_mibps, steps, True,
                              f"{done} of {len(est.steps)} decommissions fit in the window"),
            n_from - done)


def _scheduled_out(est: MigrationEstimate, n_from: int, deadlines: list[float],
                   earliest: float, source: str) -> list[Action]:
    """Node-by-node scale-out, each node done by its deadline, each started as late as
    that allows (planned backwards from the last node)."""
    k = len(est.steps)
    starts = [0.0] * k
    finish = math.inf
    for j in range(k - 1, -1, -1):
        finish = min(finish, deadlines[j])
        starts[j] = finish - est.steps[j]
        finish = starts[j]
    shift = max(0.0, earliest - starts[0])
    out: list[Action] = []
    for j in range(k):
        at = max(starts[j] + (shift if j == 0 else 0.0), earliest)
        if out:
            at = max(at, out[-1].expected_end_s)
        end = at + est.steps[j]
        late = end > deadlines[j] + 1e-6
        out.append(Action(at, n_from + j + 1, source,  # type: ignore[arg-type]
                          f"{n_from + j} -> {n_from + j + 1} (node {j + 1}/{k}): needed by "
                          f"{deadlines[j]:.0f} s, {est.steps[j]:.0f} s of migration"
                          + (" (late)" if late else ""), end))
    return out


def _steps(at: float, n_from: int, n_to: int, est: MigrationEstimate, source: str,
           cfg: PlannerConfig, why: str) -> list[Action]:
    """One action per node when the store changes one node at a time, else one action."""
    if n_from == n_to:
        return []
    if not cfg.one_at_a_time or len(est.steps) <= 1:
        end = at + est.seconds
        return [Action(at, n_to, source, f"{n_from} -> {n_to}: {why}", end)]  # type: ignore[arg-type]
    out = []
    step = 1 if n_to > n_from else -1
    t = at
    for k, secs in enumerate(est.steps):
        n = n_from + step * (k + 1)
        end = t + secs if math.isfinite(secs) else math.inf
        out.append(Action(t, n, source,  # type: ignore[arg-type]
                          f"{n - step} -> {n} (node {k + 1}/{len(est.steps)}): {why}", end))
        t = end
    return out
