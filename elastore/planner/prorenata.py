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

from elastore.models.bundle import ModelSet
from elastore.models.migration import MigrationEstimate, MigrationModel
from elastore.planner.types import Action, Observation, Plan, PlannerConfig


def _clamp(n: int, cfg: PlannerConfig) -> int:
    return min(max(n, cfg.floor), cfg.max_replicas)


def stabilized(target: int, current: int, now_s: float, cfg: PlannerConfig,
               history: tuple[tuple[float, int], ...]) -> int:
    """Scale-down stabilization (as the HPA): never go below the highest target recommended
    within the last ``scale_down_stabilization_s``."""
    if target >= current or cfg.scale_down_stabilization_s <= 0:
        return target
    recent = [d for t, d in history if now_s - t <= cfg.scale_down_stabilization_s]
    return min(current, max([target, *recent]))


def plan(obs: Observation, cfg: PlannerConfig, models: ModelSet) -> Plan:
    """Plan one control window starting at ``obs.now_s``."""
    cfg.validate()
    obs.validate()
    cap = models.capacity
    t_s = obs.now_s
    t_e = t_s + cfg.window_s
    r, i = obs.read_ratio, obs.interference
    capacity = float(cap.capacity(r, 0.0, i))  # Hubbub-scale: at the current interference

    def needed(load: float) -> int:
        return cap.servers_needed(load, r, i, cfg.headroom)

    # An operation in progress is never contradicted: plan from its outcome, after it ends.
    base = obs.replicas
    start = t_s
    queued = False
    if obs.operation is not None:
        base = obs.operation.to_replicas
        start = max(t_s, obs.operation.expected_end_s)
        queued = True

    proactive_raw = needed(obs.forecast_rps)
    proactive = _clamp(stabilized(proactive_raw, base, t_s, cfg, obs.recent_desired), cfg)
    delta_r = 0
    if cfg.reactive and obs.predicted_now_rps is not None:
        delta_r = needed(obs.load_rps) - needed(obs.predicted_now_rps)
    reactive = _clamp(base + delta_r, cfg)
    if reactive < base:
        reactive = _clamp(stabilized(reactive, base, t_s, cfg, obs.recent_desired), cfg)

    mig = MigrationModel(cap, mode=cfg.migration_mode, node_overhead_s=cfg.node_overhead_s,
                         min_mibps=cfg.min_migration_mibps, max_mibps=cfg.max_migration_mibps,
                         slo_margin=cfg.migration_margin)
    l_eff_kw = dict(load_rps=obs.load_rps, load_pred_rps=obs.forecast_rps, read_ratio=r,
                    interference=i)

    def estimate(n_from: int, n_to: int, now_load_only: bool = False) -> MigrationEstimate:
        if now_load_only:
            return mig.estimate(obs.data_bytes, n_from, n_to, load_rps=obs.load_rps,
                                load_pred_rps=obs.load_rps, read_ratio=r, interference=i)
        return mig.estimate(obs.data_bytes, n_from, n_to, **l_eff_kw)  # type: ignore[arg-type]

    est_r = estimate(base, reactive, now_load_only=True)
    est_p = estimate(reactive, proactive)
    t_r, t_p = est_r.seconds, est_p.seconds
    window = t_e - start
    actions: list[Action] = []
    merged = False
    why: list[str] = [
        f"forecast {obs.forecast_rps:,.0f} req/s at the window end needs {proactive_raw} "
        f"server(s) ({capacity:,.0f} req/s/server under p{cap.percentile} <= "
        f"{cap.slo_ms:g} ms at read ratio {r:.2f}, interference {i:.2f}, "
        f"{cfg.headroom:.0%} headroom)"
    ]
    if proactive != proactive_raw:
        why.append(f"bounded/stabilized to {proactive}")
    if obs.predicted_now_rps is not None and cfg.reactive:
        why.append(f"observed {obs.load_rps:,.0f} vs predicted {obs.predicted_now_rps:,.0f} "
                   f"req/s: reactive {delta_r:+d}")
    if queued:
        why.append(f"an operation to {base} is in progress until "
                   f"{obs.operation.expected_end_s:.0f} s: new actions wait"  # type: ignore[union-attr]
                   )

    # what a server carries while still migrating at the policy's floor rate
    usable = float(cap.capacity(r, cfg.min_migration_mibps, i)) * (1 - cfg.headroom)

    def deadlines(n_from: int, n_to: int) -> list[float]:
        """For each added node, when the load ramp (linear from now to the forecast at
        t_e, the paper's assumption) would exceed what the servers before it carry while
        still able to migrate. The paper schedules the whole change to end at t_e; on a
        rising ramp that lets the load cross the current capacity first, so every node
        gets its own deadline."""
        slope = (obs.forecast_rps - obs.load_rps) / cfg.window_s
        out = []
        for n in range(n_from, n_to):
            if slope <= 0:
                out.append(t_e)
            else:
                out.append(min(t_e, max(t_s, t_s + (n * usable - obs.load_rps) / slope)))
        return out

    if proactive < reactive:  # scale-in is never urgent: only the node steps that finish
        est_p, proactive = _fit_scale_in(est_p, reactive, proactive, window)
        t_p = est_p.seconds
    if t_r + t_p <= window:
        if reactive != base:
            actions += _steps(start, base, reactive, est_r, "reactive", cfg,
                              "correct the prediction error now")
        if proactive != reactive:
            if proactive > reactive and cfg.one_at_a_time:
                actions += _scheduled_out(est_p, reactive, deadlines(reactive, proactive),
                                          start + t_r, "proactive")
            else:
                at = max(start + t_r, t_e - t_p)
                actions += _steps(at, reactive, proactive, est_p, "proactive",
                                  cfg, f"latest start that finishes by the window end "
                                       f"({t_p:.0f} s of migration)")
    else:
        merged = True
        if cfg.merge == "pseudocode":
            target = _clamp(base + (proactive - base) + (reactive - base), cfg)
            est = estimate(base, target)
            at = max(start, t_e - est.seconds)
            label = "Fig. 5.16: dVMs(next) + dVMs(now)"
        elif reactive > base:
            target = max(proactive, reactive)
            est = estimate(base, target)
            at = start
            label = "short now: one change to the larger target, at once"
        else:
            target = proactive
            est = estimate(base, target)
            if target < base:
                est, target = _fit_scale_in(est, base, target, window)
            at = max(start, t_e - est.seconds)
            label = "reactive scale-in dropped; proactive at the last moment"
        why.append(f"plans need {t_r:.0f} s + {t_p:.0f} s > {window:.0f} s: merged ({label})")
        if target != base:
            actions += _steps(at, base, target, est, "merged", cfg, label)
    final = actions[-1].replicas if actions else base
    if actions and actions[-1].expected_end_s > t_e + 1e-6:
        why.append(f"the change cannot finish in this window (ends "
                   f"{actions[-1].expected_end_s - t_e:.0f} s late)")
    # the migration rate to enforce now (f() at the current per-server load), and the split
    per_server = obs.load_rps / max(1, obs.replicas)
    rate = mig.rate(per_server, r, i)
    alloc = None
    bw = models.bandwidth
    if cfg.total_bandwidth_mbit is not None and bw.client is not None and bw.migration is not None:
        alloc = bw.split(cfg.total_bandwidth_mbit, per_server, rate, cfg.policy)
        rate = alloc.migration_mibps if rate > 0 else 0.0
    why.append(f"migration at {rate:.2f} MiB/s per server")
    if not actions:
        why.append(f"no change: {base} server(s)")
    return Plan(
        now_s=t_s, window_end_s=t_e, actions=tuple(actions), desired_replicas=final,
        migration_mibps=rate, bandwidth=alloc, queued=queued and bool(actions),
        reason="; ".join(why),
        details={"proactive": proactive, "proactive_unbounded": proactive_raw,
                 "reactive": reactive, "reactive_delta": delta_r, "t_reactive_s": t_r,
                 "t_proactive_s": t_p, "merged": merged, "capacity_rps": capacity,
                 "base": base},
    )


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
