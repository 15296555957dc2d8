"""The horizon planner: the cheapest schedule of node changes over the whole forecast
horizon, for the cost of a violation the policy gives. Pure.

The window planner (:mod:`elastore.planner.prorenata`, the paper's scheduler) decides one
window at a time. When moving one node's data takes longer than a window, as it does for
nodes of hundreds of GiB, it cannot plan a change that spans windows: it never scales in
(no decommission fits) and keeps adding nodes. This planner instead looks ``lookahead_s``
ahead (24 h by default) on a grid of ``step_s`` and solves, exactly
(:func:`elastore.planner.schedule.cheapest`), for the schedule of one-node changes that
minimises the expected

    U = VM-hours + penalty x violation-hours

under the forecast's scenarios: a step violates with the probability of the scenarios
whose load the servers of that step cannot carry within 95 % of the SLO (the same margin
BwMan keeps while migrating). So:

* a migration of many hours starts early enough, because the whole path is in view;
* a scale cycle happens only when what it saves pays for the data it moves (holding the
  capacity is always one of the schedules compared);
* the cost of a violation decides how much of the forecast's upper tail is provisioned:
  at a high penalty every scenario is covered, at a low one a few violation-hours are
  cheaper than servers;
* it never provisions above what the highest scenario needs plus two (no runaway).

Durations use BwMan's rates at the median forecast (f() for a bootstrap, the
cluster-p95-aware rate for a decommission), the rates the operator and the simulator's
``prorenata`` enforce. The forecast's quantile scenarios (their spread is calibrated on the
predictor's own recent errors, :mod:`elastore.predictor.intervals`) replace the window
planner's fixed ``headroom``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.models.migration import MigrationModel, mixture_exceeds
from elastore.models.storage import (
    DISK_PENALTY_FACTOR,
    DataPath,
    StorageView,
    VolumeChoice,
    disk_tables,
    price,
    volume_for,
)
from elastore.planner.bwman import split_rate
from elastore.planner.schedule import Horizon, IntArray, RateRule, Schedule, cheapest
from elastore.planner.types import (
    PAYBACK,
    Action,
    FloatArray,
    LoadPath,
    Observation,
    Plan,
    PlannerConfig,
    scale_in_payback_s,
)

TAIL = 1.0  # the terminal value: holding each size for this many horizons more
RATE_QUANTILE = 0.98  # migrations are timed at the rate the load at this quantile allows


def _grid_loads(obs: Observation, times: FloatArray) -> tuple[FloatArray, FloatArray,
                                                               FloatArray]:
    """The median and every scenario at the grid's times, each anchored at the load now."""
    path = obs.path if obs.path is not None else LoadPath.flat(
        obs.now_s + 3600.0, obs.forecast_rps)
    path.validate()
    t = np.concatenate([[obs.now_s], path.times_s])
    dt = float(times[1] - times[0]) if len(times) > 1 else 0.0

    def at(values: FloatArray) -> FloatArray:
        """The highest load during each step (its start or its end): on a rising ramp the
        load at a step's start understates the step."""
        v = np.concatenate([[obs.load_rps], values])
        return np.asarray(np.maximum(np.interp(times, t, v), np.interp(times + dt, t, v)))

    scen = np.stack([at(row) for row in path.scenarios_rps])
    return at(path.median_rps), scen, path.weights


def plan_horizon(obs: Observation, cfg: PlannerConfig, models: ModelSet) -> Plan:
    """Plan the schedule over ``cfg.lookahead_s`` from ``obs.now_s``."""
    cap = models.capacity
    dt = cfg.step_s
    steps = max(1, math.ceil(cfg.lookahead_s / dt))
    # an operation in progress is never contradicted: plan from its outcome, after it ends
    # (a scale-out's cleanup, its node serving: from now, in the cleanup)
    n0, s0 = obs.replicas, 0
    cleaning = obs.cleanup_left_bytes if obs.operation is None else 0.0
    if obs.operation is not None:
        n0 = obs.operation.to_replicas
        s0 = min(steps - 1, max(0, math.ceil((obs.operation.expected_end_s - obs.now_s) / dt)))
    times = np.asarray(obs.now_s + (s0 + np.arange(steps - s0)) * dt, dtype=np.float64)
    median, scen, weights = _grid_loads(obs, times)
    r, i = obs.read_ratio, obs.interference
    limit = cap.slo_ms * (1 - cfg.migration_margin)
    top = float(np.max(scen))
    n_lo = min(cfg.floor, n0)
    skew = obs.load_skew
    worst = max((f for _, f in skew.busiest), default=1.0) if skew is not None else 1.0
    n_hi = min(cfg.max_replicas, max(n0, cap.servers_needed(top * worst, r, i) + 2))
    view = obs.storage
    totals: FloatArray | None = None
    moved_bytes = obs.data_bytes
    if view is not None:
        path = view.path if view.path is not None else DataPath.flat(
            obs.now_s + 3600.0, view.total_bytes)
        grown, totals = path.at(times, obs.now_s, view.total_bytes)
        n_hi = min(cfg.max_replicas, max(n_hi, view.nodes_needed(float(np.max(totals))) + 1))
        # a migration moves the data as it will be: the median's largest over the lookahead
        # (a growing cluster's changes take longer; the deadline logic is the same)
        moved_bytes = max(obs.data_bytes, float(np.max(grown)))
    n_hi = max(n_hi, n_lo + 1, n0)
    mig = MigrationModel(cap, mode="node-by-node", min_mibps=cfg.min_migration_mibps,
                         max_mibps=cfg.max_migration_mibps, slo_margin=cfg.migration_margin)
    ns = np.arange(n_lo, n_hi + 1)
    busiest = skew.factors(ns) if skew is not None else np.ones(len(ns))
    h = _tables(cap, mig, median, scen, weights, r, i, dt, cfg.node_overhead_s,
                moved_bytes, n_lo, n_hi, limit, busiest, cfg.cleanup, cfg.max_replicas)
    dt_h = dt / 3600
    floor = _floor(obs, cfg, times)

    def solve(hz: Horizon) -> tuple[Schedule, float]:
        d_idle = hz.disk()[0]
        # beyond the horizon the load repeats the horizon's (a day of a daily cycle): ending
        # at n servers costs holding them for another horizon, with its violations (and,
        # the data still growing, the bytes of the horizon's last step)
        terminal = TAIL * (steps - s0) * dt_h * (ns + cfg.penalty * hz.idle_violates.mean(axis=1)
                                                 + hz.disk_penalty * d_idle[:, -1])
        sched = cheapest(hz, n0, cfg.penalty, terminal=terminal, floor=floor,
                         cleaning_bytes=cleaning if hz.clean_bytes is not None else 0.0,
                         ceiling=cfg.max_replicas)
        k = n0 - n_lo
        hold = float(np.sum(dt_h * (n0 + cfg.penalty * hz.idle_violates[k]
                                    + hz.disk_penalty * d_idle[k])) + terminal[k])
        return sched, hold

    sched, hold = solve(h)
    bytes_plan: dict[str, object] = {"binding": "load"}
    if skew is not None and np.any(busiest > 1.0 + 1e-9):
        # what the mean node alone would want: the skew binds when it buys more
        blind, _ = solve(_tables(cap, mig, median, scen, weights, r, i, dt,
                                 cfg.node_overhead_s, moved_bytes, n_lo, n_hi, limit,
                                 np.ones(len(ns)), cfg.cleanup, cfg.max_replicas))
        if np.any(_servers(sched, len(times)) > _servers(blind, len(times))):
            bytes_plan["binding"] = "skew"
    if skew is not None:
        bytes_plan["busiest_over_mean"] = {int(n): round(float(f), 4)
                                           for n, f in zip(ns, busiest, strict=True)}
    if view is not None and totals is not None:
        h_disk = _with_disk(h, view, cfg, totals, weights, moved_bytes)
        by_load, hold_load = sched, hold
        sched, hold = solve(h_disk)
        bytes_plan = {**bytes_plan,
                      **_bytes(view, obs, cfg, times, totals, weights, by_load, sched, h_disk,
                               str(bytes_plan["binding"]))}
        if bytes_plan.get("grow_volumes"):
            # growing the volumes holds the bytes: the plan is the load's, and the nodes
            # the bytes wanted are not bought
            sched, hold, h = by_load, hold_load, h
        else:
            h = h_disk
    return _plan(obs, cfg, models, h, sched, times, median, scen, hold, mig, s0, bytes_plan)


def _with_disk(h: Horizon, view: StorageView, cfg: PlannerConfig, totals: FloatArray,
               weights: FloatArray, moved_bytes: float) -> Horizon:
    """The horizon with the bytes: a node over its budget costs ``DISK_PENALTY_FACTOR``
    times an hour of SLO violation."""
    n = np.arange(h.n_lo, h.n_hi + 1, dtype=float)
    cleanup = np.asarray([math.ceil(view.config.cleanup_s(moved_bytes * view.skew / k)
                                    / h.step_s - 1e-9) for k in n], dtype=np.int64)
    if h.clean_bytes is not None:  # the cleanup is a state of its own, with its disk table
        cleanup[:] = 0
    idle, add, rem = disk_tables(n, totals, weights, view.skew, view.budget_bytes(), cleanup)
    return replace(h, disk_idle=idle, disk_add=add, disk_remove=rem,
                   disk_penalty=DISK_PENALTY_FACTOR * max(cfg.penalty, 1.0))


def _servers(sched: Schedule, steps: int) -> FloatArray:
    """Nodes holding the data at each step of a schedule: a joining node from the end of
    its bootstrap, a leaving one until it has handed everything over."""
    out = np.full(steps, float(sched.n0))
    for m in sched.moves:
        out[min(m.end, steps):] = m.n_to
    return out


def _bytes(view: StorageView, obs: Observation, cfg: PlannerConfig, times: FloatArray,
           totals: FloatArray, weights: FloatArray, by_load: Schedule, by_bytes: Schedule,
           h: Horizon, without_bytes: str = "load") -> dict[str, object]:
    """Which constraint binds, and whether growing the volumes beats the nodes the bytes
    want (``storage.expandVolumes``, at ``spec.cost``'s prices)."""
    t = len(times)
    s_load, s_bytes = _servers(by_load, t), _servers(by_bytes, t)
    binding = "storage" if np.any(s_bytes > s_load) else without_bytes
    out: dict[str, object] = {
        "binding": binding, "utilization": view.utilization, "budget": view.config.budget,
        "source": view.source, "skew": view.skew,
        "nodes_for_bytes_now": view.nodes_needed(view.total_bytes),
        "disk_hours": by_bytes.disk_hours}
    upper = totals[min(len(weights) - 1, int(np.searchsorted(np.cumsum(weights), 0.98)))]
    full = np.flatnonzero(upper * view.skew / obs.replicas > view.budget_bytes())
    out["budget_crossed_s"] = float(times[full[0]] - obs.now_s) if full.size else None
    if binding != "storage" or not view.config.expand_volumes:
        return out
    new_volume = volume_for(view, upper, s_load)
    lookahead_h = t * h.step_s / 3600
    extra = float(by_bytes.vm_hours - by_load.vm_hours) / max(lookahead_h, 1e-9)
    choice: VolumeChoice = price(view, max(extra, 0.0), int(max(obs.replicas, s_load.max())),
                                 new_volume)
    out["volume_choice"] = choice.reason
    if choice.grow:
        out["grow_volumes"] = True
        # due when the two plans part within this window: a change starting in it that
        # one plan makes and the other does not (the bytes' node, or the load's scale-in)
        end = obs.now_s + cfg.window_s

        def starts(sched: Schedule) -> list[tuple[int, int]]:
            return [(m.n_from, m.n_to) for m in sched.moves if times[m.start] <= end]

        due = starts(by_bytes) != starts(by_load)
        out["expand_volume_bytes"] = new_volume if due else None
    return out


def _tables(cap: CapacityModel, mig: MigrationModel, median: FloatArray, scen: FloatArray,
            weights: FloatArray, r: float, i: float, dt: float, boot_s: float,
            data_bytes: float, n_lo: int, n_hi: int, limit: float,
            busiest: FloatArray | None = None, cleanup: bool = False,
            max_replicas: int | None = None) -> Horizon:
    """Rates at the median load; violation probabilities over the weighted scenarios, for
    the busiest node (``busiest``: its load over the mean at each size; 1: the mean).
    ``cleanup``: each join is followed by the old nodes' cleanup, D at f() (the throttle in
    force once the node has joined, whatever rule moved its data: the operator throttles
    the cleanup to it), one node in n rewriting (never less likely to violate than idle),
    no removal meanwhile.

    Saturation (``max_replicas`` in the table): where a scenario's load violates the SLO
    even on ``max_replicas`` idle servers, every size violates there, and a violation
    counted once whatever the size would make fewer servers the cheaper overload (a plan
    that removed nodes as the load passed what the most allowed carry). There each server
    short of the most allowed adds its share of a violation, ``(max - n) / max``: the
    plan holds, or reaches, ``max_replicas`` while the overload lasts."""
    ns = np.arange(n_lo, n_hi + 1, dtype=float)[:, None]  # (N, 1)
    hot = (np.ones(len(ns)) if busiest is None else np.asarray(busiest, dtype=float))[:, None]
    # migrations are timed at the rate the upper scenarios allow: BwMan slows a migration
    # as the load rises, so a change timed on the median would end late exactly when its
    # node is needed
    upper = scen[int(np.searchsorted(np.cumsum(weights), RATE_QUANTILE))]
    lps_med = np.maximum(median, upper)[None, :] / ns  # (N, T)
    add = np.asarray(mig.rate(lps_med, r, i), dtype=float)
    rem = np.asarray(mig.decommission_rate(lps_med, np.broadcast_to(ns, lps_med.shape), r, i),
                     dtype=float)
    lps = scen[:, None, :] / ns[None] * hot[None]  # (K, N, T): the busiest node's
    w = weights[:, None, None]
    idle = (w * (cap.latency_ms(lps, r, 0.0, i) > limit)).sum(axis=0)
    add_v = (w * (cap.latency_ms(lps, r, add[None], i) > limit)).sum(axis=0)
    over = mixture_exceeds(cap.latency_ms(lps, r, rem[None], i), 1.0 / ns[None],
                           cap.latency_ms(lps, r, rem[None] / np.maximum(ns[None] - 1, 1), i),
                           limit)
    rem_v = (w * over).sum(axis=0)
    # the fast rule: the policy's ceiling, whatever it costs in latency (it is chosen only
    # when a change that ends sooner is worth its violations: a huge node before a peak)
    fast = np.full(add.shape, mig.max_mibps if np.isfinite(mig.max_mibps) else float(
        cap.migration_axis[-1]))
    fast_add_v = (w * (cap.latency_ms(lps, r, fast[None], i) > limit)).sum(axis=0)
    over_f = mixture_exceeds(cap.latency_ms(lps, r, fast[None], i), 1.0 / ns[None],
                             cap.latency_ms(lps, r, fast[None] / np.maximum(ns[None] - 1, 1),
                                            i), limit)
    fast_rem_v = (w * over_f).sum(axis=0)
    n = ns[:, 0]
    short = np.zeros(idle.shape)
    if max_replicas is not None and n_lo <= max_replicas <= n_hi:
        k = max_replicas - n_lo
        sat = (w[:, 0] * (cap.latency_ms(lps[:, k], r, 0.0, i) > limit)).sum(axis=0)  # (T,)
        short = np.clip((max_replicas - n) / max_replicas, 0.0, None)[:, None] * sat[None]
        idle, add_v, rem_v = idle + short, add_v + short, rem_v + short
        fast_add_v, fast_rem_v = fast_add_v + short, fast_rem_v + short
    rules: tuple[RateRule, ...] = (RateRule("bwman", add, add_v, rem, rem_v),
                                   RateRule("fast", fast, fast_add_v, fast, fast_rem_v))
    clean_bytes = None
    if cleanup:
        lat_idle = cap.latency_ms(lps, r, 0.0, i)

        def cleaning(rate: FloatArray) -> FloatArray:
            over_c = mixture_exceeds(cap.latency_ms(lps, r, rate[None], i), 1.0 / ns[None],
                                     lat_idle, limit) | (lat_idle > limit)
            return np.asarray((w * over_c).sum(axis=0))

        at_f = cleaning(add) + short
        rules = tuple(replace(rule, clean_mibps=add, clean_violates=at_f) for rule in rules)
        clean_bytes = np.full(len(n), data_bytes)
    return Horizon(step_s=dt, n_lo=n_lo, idle_violates=idle, rules=rules,
                   boot_steps=max(0, math.ceil(boot_s / dt - 1e-9)),
                   add_bytes=data_bytes / n - data_bytes / (n + 1),
                   remove_bytes=data_bytes / n, clean_bytes=clean_bytes)


def _floor(obs: Observation, cfg: PlannerConfig, times: FloatArray) -> IntArray | None:
    """Scale-down stabilization: no removal below a recommendation of the last window."""
    w = cfg.scale_down_stabilization_s
    if w <= 0 or not obs.recent_desired:
        return None
    floor = np.zeros(len(times), dtype=np.int64)
    for t, n in obs.recent_desired:
        floor[times - t <= w] = np.maximum(floor[times - t <= w], n)
    return floor


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "never"
    if seconds < 120:  # a lab's minutes: seconds, not "0 min"
        return f"{seconds:.0f} s"
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def _plan(obs: Observation, cfg: PlannerConfig, models: ModelSet, h: Horizon,
          sched: Schedule, times: FloatArray, median: FloatArray, scen: FloatArray, hold: float,
          mig: MigrationModel, s0: int, bytes_plan: dict[str, object]) -> Plan:
    dt = h.step_s
    t_e = obs.now_s + cfg.window_s
    actions: list[Action] = []
    for m in sched.moves:
        at = float(times[m.start])
        end = float(times[0] + m.end * dt)
        took = _hms(end - at)
        k = m.n_from - h.n_lo
        if m.n_to > m.n_from:
            d_idle = h.disk()[0]
            short = np.flatnonzero(h.idle_violates[k, m.end:] >= 0.5)
            full = np.flatnonzero(d_idle[k, m.start:] >= 0.5)
            need = (f"needed by {_clock(float(times[m.end + short[0]]), obs.now_s)}"
                    if short.size and m.end < len(times) else
                    "for the forecast's upper scenarios")
            if full.size and obs.storage is not None and (
                    not short.size or m.start + full[0] <= m.end + short[0]):
                need = (f"the data would pass the {obs.storage.config.budget:.0%} budget of "
                        f"{m.n_from} node(s) by "
                        f"{_clock(float(times[m.start + full[0]]), obs.now_s)} (their "
                        "cleanup included)")
            because = f"{m.n_from} -> {m.n_to}: {need}; {took} of migration, started so it " \
                      "ends in time"
        else:
            because = f"{m.n_from} -> {m.n_to}: the capacity is not needed over the " \
                      f"horizon's rest; {took} of migration pays for itself"
        fixed = None
        if m.rule == "fast":
            fixed = float(h.rules[sched.rule_index["fast"]].add_mibps[0, 0])
            because += f", at the {fixed:g} MiB/s ceiling (sooner is worth its latency)"
        actions.append(Action(at, m.n_to, "horizon", because, end, fixed))
    # the size the plan is heading for now: the change starting within this window and the
    # node steps that follow it back to back, in the same direction
    desired = sched.n0
    prev: Action | None = None
    for a in actions:
        same_way = prev is not None and (a.replicas - prev.replicas) * (
            prev.replicas - sched.n0) > 0 and a.at_s <= prev.expected_end_s + dt
        if a.at_s <= t_e or same_way:
            desired, prev = a.replicas, a
        else:
            break
    # the recommendation stabilization remembers: what the median forecast of this window
    # needs, never the plan's own (stabilized) output, which would hold a scale-in for ever
    in_window = median[times <= t_e + 1e-9]
    peak = float(np.max(in_window)) if in_window.size else float(median[0])
    ns = np.arange(h.n_lo, h.n_hi + 1)
    hot = obs.load_skew.factors(ns) if obs.load_skew is not None else 1.0
    lat = np.asarray(mig.capacity.latency_ms(peak / ns * hot, obs.read_ratio, 0.0,
                                             obs.interference))
    fits = np.flatnonzero(lat <= mig.capacity.slo_ms * (1 - mig.slo_margin))
    raw = int(ns[fits[0]]) if fits.size else h.n_hi
    # the migration rate to enforce now: the change starting now, else f() at the load now
    rate = float(mig.rate(obs.load_rps / max(1, obs.replicas), obs.read_ratio,
                          obs.interference))
    first = sched.moves[0] if sched.moves else None
    if first is not None and first.start == 0 and s0 == 0:
        rule = h.rules[sched.rule_index[first.rule]]
        table = rule.add_mibps if first.n_to > first.n_from else rule.remove_mibps
        rate = float(table[first.n_from - h.n_lo, min(first.boot_end, len(times) - 1)])
    # BwMan's split of the server's link, when its total is known (what the policy decides
    # when the clients and the migration do not both fit)
    rate, alloc, split = split_rate(models, cfg.total_bandwidth_mbit,
                                    obs.load_rps / max(1, obs.replicas), rate, cfg.policy,
                                    cfg.min_migration_mibps)
    k90 = int(np.argmax(median))
    why = [f"horizon plan over {_hms(cfg.lookahead_s)}: forecast {median[0]:,.0f} req/s now, "
           f"median peak {median[k90]:,.0f} req/s at {_clock(float(times[k90]), obs.now_s)}, "
           f"upper scenario peak {float(np.max(scen)):,.0f} req/s",
           f"expected U {sched.cost:,.2f} (VM-hours {sched.vm_hours:,.2f}, violation-hours "
           f"{sched.violation_hours:.3f} at penalty {cfg.penalty:g}) against {hold:,.2f} "
           f"holding {sched.n0}"]
    if sched.n0 > cfg.max_replicas:
        why.append(f"{sched.n0} server(s) are above replicas.max {cfg.max_replicas}: removed "
                   f"one after the other down to it, whatever the load wants")
    if obs.operation is not None:
        why.append(f"an operation to {obs.operation.to_replicas} is in progress until "
                   f"{obs.operation.expected_end_s:.0f} s: new actions wait")
    if actions:
        why.append(f"next: {actions[0].reason} at {_clock(actions[0].at_s, obs.now_s)}")
    else:
        why.append(f"no change: {sched.n0} server(s) over the horizon")
    if obs.load_skew is not None:
        why.append(_skew_why(obs, bytes_plan, desired))
    if obs.storage is not None:
        why.append(_bytes_why(obs.storage, bytes_plan, sched))
    if split:
        why.append(split)
    why.append(f"migration at {rate:.2f} MiB/s per server")
    payback = _payback_s(obs, cfg, sched.n0, rate)
    if payback is not None and cfg.lookahead_s < payback:
        why.append(f"the lookahead {_hms(cfg.lookahead_s)} is shorter than a scale-in's "
                   f"payback ({PAYBACK:g} x its migration: {_hms(payback)}): a scale-in "
                   "whose saving comes later is never planned; lengthen "
                   "spec.planner.lookahead")
    return Plan(now_s=obs.now_s, window_end_s=t_e, actions=tuple(actions),
                desired_replicas=desired, migration_mibps=rate, bandwidth=alloc,
                queued=obs.operation is not None and bool(actions), reason="; ".join(why),
                details={"mode": "horizon", "proactive_unbounded": raw,
                         "proactive": desired, "base": sched.n0, "expected_u": sched.cost,
                         "vm_hours": sched.vm_hours,
                         "violation_hours": sched.violation_hours, "hold_u": hold,
                         "moves": len(sched.moves), "reactive_delta": 0, "merged": False,
                         "payback_s": payback, **bytes_plan})


def _payback_s(obs: Observation, cfg: PlannerConfig, n: int, rate_mibps: float
               ) -> float | None:
    """A one-node scale-in's payback lookahead at ``n`` servers (None: none can happen,
    at the floor, or no rate to estimate with): the store's fastest migration rate, else
    the one the plan enforces now."""
    if n <= cfg.floor:
        return None
    mibps = cfg.max_migration_mibps if math.isfinite(cfg.max_migration_mibps) else rate_mibps
    if not mibps > 0:
        return None
    return scale_in_payback_s(obs.data_bytes, n, mibps, cfg.node_overhead_s)


def _skew_why(obs: Observation, b: dict[str, object], desired: int) -> str:
    assert obs.load_skew is not None
    sk = obs.load_skew
    text = (f"sized for the busiest node: {sk.factor(desired):.2f} x the mean at {desired} "
            f"server(s)" + (f" ({sk.rebalancing})" if sk.rebalancing else ""))
    return text + ("; the skew binds (the mean alone wants fewer)"
                   if b.get("binding") == "skew" else "")


def _bytes_why(view: StorageView, b: dict[str, object], sched: Schedule) -> str:
    c = view.config
    grown = b.get("expand_volume_bytes")
    crossed = b.get("budget_crossed_s")
    when = ("not within the lookahead" if not isinstance(crossed, float) else
            f"in {_hms(crossed)} (the 98th-percentile scenario) at this size")
    text = (f"bytes ({view.source}): the fullest node at {view.utilization:.0%} of "
            f"{_size(view.volume_bytes)}, budget {c.binding_rule()}, "
            f"crossed {when}; {b['binding']} binds")
    if sched.disk_hours > 1e-9:
        text += f" (expected {sched.disk_hours:.3f} h over budget)"
    if "volume_choice" in b:
        text += f"; {b['volume_choice']}"
        if b.get("grow_volumes"):
            text += ("; grow the volumes now" if grown else
                     "; the volumes grow when a node would have to be added")
    return text


def _size(n_bytes: float) -> str:
    """Bytes as GiB, or MiB below 10 GiB (a lab's volumes)."""
    gib = n_bytes / 2**30
    return f"{gib:,.0f} GiB" if gib >= 10 else f"{n_bytes / 2**20:,.0f} MiB"


def _clock(t_s: float, now_s: float) -> str:
    """A time as 'now + 1 h 20 min' (the planner has no calendar)."""
    return "now" if t_s - now_s < 1 else f"now + {_hms(t_s - now_s)}"
