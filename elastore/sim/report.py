"""The simulation report: Markdown plus PNGs, readable, labelled, with units."""

from __future__ import annotations

import colorsys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from elastore.sim.controllers import ABOUT, BOUND, FORESIGHT, KNOWN
from elastore.sim.run import PENALTIES, SimResult

#: the colour each controller is drawn in, in every figure (:func:`controller_colors`): a
#: controller registered without one here gets a colour that no controller has
COLORS = {
    "feedback": "tab:orange", "predict": "tab:purple", "prorenata": "tab:blue",
    "prorenata-window": "tab:cyan", "perfect-forecast-window": "tab:brown",
    "perfect-forecast": "tab:olive", "prorenata-day": "navy", "prorenata-holidays": "tab:pink",
    "perfect-forecast-day": "goldenrod", "optimal": "black", "hpa": "tab:red",
    "holt-winters": "tab:green", "static-peak": "tab:gray", "operator": "magenta",
}
#: differences in U smaller than half the report's precision (0.1 VM-hour) are ties
TIE = 0.05


def _more_colors() -> Iterator[str]:
    """Named colours first, then hues around the circle (golden-ratio steps), for ever."""
    yield from ("teal", "maroon", "darkkhaki", "slateblue", "chocolate", "lime", "crimson",
                "darkcyan")
    k = 0
    while True:
        k += 1
        r, g, b = colorsys.hsv_to_rgb((k * 0.618033988749895) % 1.0, 0.75, 0.7)
        yield f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def controller_colors(names: Iterable[str] | None = None) -> dict[str, str]:
    """A colour for each of ``names`` (default: every registered controller), no two alike:
    each registered controller's own (:data:`COLORS`, else the next free one in the
    registry's order, so it stays the same from one report to the next), then any other
    name's."""
    names = list(KNOWN if names is None else names)
    order = list(dict.fromkeys([*KNOWN, *names]))
    taken = {COLORS[n] for n in order if n in COLORS}
    spare = (c for c in _more_colors() if c not in taken)
    given: dict[str, str] = {}
    for n in order:
        c = COLORS.get(n)
        if c is None or c in given.values():
            c = next(spare)
        given[n] = c
    return {n: given[n] for n in names}


def _style(name: str, colors: Mapping[str, str]) -> dict[str, Any]:
    """A controller's line: its colour, dashed when it is given the true future."""
    return {"color": colors[name], "ls": "--" if name in FORESIGHT else "-"}


def utility(m: Mapping[str, Any], penalty: float) -> float:
    """U(P) = VM-hours + P x violation-hours, from a controller's metrics."""
    return float(m["vm_hours"]) + penalty * float(m["violation_hours"])


def _hours(h: float) -> str:
    return f"{h:.2f}" if h == 0 or abs(h) >= 0.1 else f"{h:.3f}"


def _names(names: Iterable[str]) -> str:
    """`a`, `b` and `c`."""
    q = [f"`{n}`" for n in names]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + " and " + q[-1]


def _spent(m: Mapping[str, Any]) -> str:
    v = float(m["violation_hours"])
    return (f"{float(m['vm_hours']):.1f} VM-hours, "
            + ("no SLO violation" if v == 0 else f"{_hours(v)} violation-hours")
            + f", {int(m['scale_actions'])} scale actions")


def _gap(m: Mapping[str, Any], ref: Mapping[str, Any], penalty: float) -> str:
    """Where ``m`` loses against ``ref``: what it spends more of (the larger first), what it
    saves, and its scale actions against ``ref``'s."""
    dv = float(m["vm_hours"]) - float(ref["vm_hours"])
    dh = float(m["violation_hours"]) - float(ref["violation_hours"])
    dx = penalty * dh
    more: list[tuple[float, str]] = []
    saved: list[str] = []
    if dv > TIE:
        more.append((dv, f"{dv:.1f} more VM-hours"))
    elif dv < -TIE:
        saved.append(f"{-dv:.1f} VM-hours saved")
    if dh > 0:
        more.append((dx, f"{_hours(dh)} more violation-hours (+{dx:.1f} at P = {penalty:g})"))
    elif dh < 0:
        saved.append(f"{-dx:.1f} saved by " + (
            "never violating the SLO" if float(m["violation_hours"]) == 0
            else f"{_hours(-dh)} fewer violation-hours"))
    more.sort(key=lambda x: -x[0])
    parts = [" and ".join(t for _, t in more) or "as many VM-hours and violation-hours",
             *saved]
    return ", ".join([*parts, f"{int(m['scale_actions'])} scale actions against "
                              f"{int(ref['scale_actions'])}"])


def verdict(metrics: Mapping[str, Mapping[str, Any]], penalty: float) -> str:
    """Who wins at ``penalty`` (the lowest U(P) of the controllers not given the true
    future), by how much against the bound (``optimal``), and where each other controller
    loses (violations, VM-hours, scale actions): one paragraph of Markdown, from
    ``metrics`` (per controller: ``vm_hours``, ``violation_hours``, ``scale_actions``)."""
    u = {n: utility(m, penalty) for n, m in metrics.items()}
    p = f"{penalty:g}"
    ranked = [n for n in metrics if n not in FORESIGHT]
    known = sorted((n for n in metrics if n in FORESIGHT), key=lambda n: n != BOUND)
    out: list[str] = []
    if not ranked:
        out.append(f"Every controller of this run is given the true future ({_names(known)}), "
                   "so none is ranked.")
        if BOUND in metrics:
            out.append(f"The bound, `{BOUND}`, reaches U({p}) = {u[BOUND]:.1f} "
                       f"({_spent(metrics[BOUND])}).")
        return " ".join(out)
    best = min(u[n] for n in ranked)
    winners = [n for n in ranked if u[n] - best <= TIE]
    w = winners[0]
    rule = f"U({p}) = VM-hours + {p} x violation-hours"
    if len(winners) == 1:
        out.append(f"At a penalty of {p}, `{w}` wins: the lowest {rule} of the controllers "
                   f"that are not given the true future, {u[w]:.1f} ({_spent(metrics[w])}).")
    else:
        each = "; ".join(f"`{n}` {_spent(metrics[n])}" for n in winners)
        out.append(f"At a penalty of {p}, {_names(winners)} tie for the lowest {rule} of the "
                   f"controllers that are not given the true future, {best:.1f} ({each}).")
    if BOUND in metrics:
        gap, ub = best - u[BOUND], u[BOUND]
        if abs(gap) <= TIE:
            out.append(f"That is what the bound, `{BOUND}`, reaches.")
        else:
            pct = f" ({100 * abs(gap) / ub:.1f} %)" if ub > 0 else ""
            out.append(f"That is {abs(gap):.1f}{pct} {'above' if gap > 0 else 'below'} the "
                       f"bound, `{BOUND}` (U = {ub:.1f}: {_spent(metrics[BOUND])}).")
    else:
        out.append(f"The bound, `{BOUND}`, was not run.")
    if known:
        out.append(f"Not ranked, as they are given the true future: {_names(known)}.")
    for n in (k for k in known if k != BOUND):
        d = u[n] - best
        if d > TIE:
            rel = f"{d:.1f} more than `{w}`: {_gap(metrics[n], metrics[w], penalty)}"
        elif d < -TIE:
            rel = f"{-d:.1f} less than `{w}`"
        else:
            rel = f"as much as `{w}`"
        out.append(f"With the true future, `{n}` reaches U = {u[n]:.1f}, {rel}.")
    losers = sorted((n for n in ranked if n not in winners), key=lambda n: u[n])
    for k, n in enumerate(losers):
        out.append(f"{'Against `' + w + '`, ' if k == 0 else ''}`{n}` loses "
                   f"{u[n] - best:.1f}: {_gap(metrics[n], metrics[w], penalty)}.")
    return " ".join(out)


def _servers_figure(res: SimResult, metrics: Mapping[str, Mapping[str, Any]],
                    colors: Mapping[str, str], hours_axis: Any, out: Path) -> None:
    """Small multiples: one panel per controller, shared axes, each over the same faint
    references (the servers the load needs at full SLO capacity, and optimal's)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names = list(res.runs)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 1.9 * rows + 1.1), sharex=True,
                             sharey=True, squeeze=False)
    first = next(iter(res.runs.values()))
    need = first.serving * first.util  # the load over one server's SLO capacity
    bound = res.runs.get(BOUND)
    billed = [r.billed for r in res.runs.values()]
    low = max(0.0, min(float(need.min()), *(float(b.min()) for b in billed)) - 2)
    high = max(float(need.max()), *(float(b.max()) for b in billed)) + 1
    for ax, name in zip(axes.flat, names, strict=False):
        run, m = res.runs[name], metrics[name]
        ax.fill_between(hours_axis, need, low, color="0.88", lw=0)
        if bound is not None and name != BOUND:
            ax.step(hours_axis, bound.billed, where="post", color="black", lw=0.6, alpha=0.35)
        ax.step(hours_axis, run.billed, where="post", lw=1.0, **_style(name, colors))
        ax.set_title(f"{name}: {m['vm_hours']:.0f} VM-h, {m['slo_violation_pct']:.2f} % "
                     f"violation, {m['scale_actions']} actions", fontsize=8.5,
                     color=colors[name] if colors[name] != "black" else "black")
        ax.grid(alpha=0.3)
    axes.flat[0].set_ylim(low, high)  # shared by every panel
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.set_visible(False)
        elif k + cols >= len(names):  # nothing drawn below it: it shows the hours
            ax.xaxis.set_tick_params(labelbottom=True)
    refs: list[Any] = [Patch(color="0.88", label="servers the load needs at full SLO capacity "
                                                 "(no headroom)")]
    if bound is not None:
        refs.append(Line2D([], [], color="black", lw=0.6, alpha=0.35,
                           label=f"{BOUND}'s servers (the bound)"))
    fig.legend(handles=refs, loc="upper right", fontsize=8, ncol=len(refs), frameon=False)
    fig.suptitle("Servers billed over time, per controller (dashed: given the true future)",
                 x=0.01, ha="left", fontsize=10)
    fig.supxlabel("trace hour", fontsize=9)
    fig.supylabel("servers billed", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(out / "servers.png", dpi=110)
    plt.close(fig)


def write_report(res: SimResult, out: Path, seconds: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    cfg = res.config
    dt = cfg.step_s
    hours_axis = np.arange(len(next(iter(res.runs.values())).serving)) * dt / cfg.hour_seconds
    knots_h = np.arange(res.hours)
    colors = controller_colors(res.runs)
    metrics = {n: r.metrics(dt, res.slo_ms, cfg.penalty) for n, r in res.runs.items()}

    # 1. the workload with its forecasts
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(knots_h, res.knots, color="black", lw=1.8, label="workload (trace, scaled)")
    for name in ("prorenata", "holt-winters"):
        run = res.runs.get(name)
        if run is not None and run.forecasts:
            k = np.array(sorted(run.forecasts))
            k = k[k < res.hours]
            ax.plot(k, [run.forecasts[i] for i in k], lw=0.9, color=colors[name],
                    label=f"{name} forecast (1 h ahead)")
    ax.set_xlabel(f"trace hour since {res.start} (1 h replayed in {cfg.hour_seconds:g} s)")
    ax.set_ylabel("client load (requests/s)")
    ax.set_title("Workload and forecasts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "workload.png", dpi=110)
    plt.close(fig)

    # 2. servers over time: one panel per controller
    _servers_figure(res, metrics, colors, hours_axis, out)

    # 3. CDF of p95 latency with the SLO line; 4. CDF of utilisation
    for fname, attr, xlabel, title in (
        ("latency_cdf.png", "p95_ms", f"cluster p{res.percentile} latency per {dt:g} s step (ms)",
         "CDF of p95 latency"),
        ("utilization_cdf.png", "util", "load per server / SLO capacity per server",
         "CDF of server utilisation"),
    ):
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for name, run in res.runs.items():
            v = np.sort(getattr(run, attr))
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=name, **_style(name, colors))
        if attr == "p95_ms":
            ax.axvline(res.slo_ms, color="red", ls=":", label=f"SLO {res.slo_ms:g} ms")
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction of time")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)

    # 5. utility across penalty factors
    pens = np.unique([1, 2, 5, 10, 20, 50, 100, *([cfg.penalty] if cfg.penalty > 0 else [])])
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, m in metrics.items():
        ax.plot(pens, m["vm_hours"] + pens * m["violation_hours"], marker="o", label=name,
                **_style(name, colors))
    if cfg.penalty > 0:
        ax.axvline(cfg.penalty, color="0.5", ls=":", label=f"this run's penalty ({cfg.penalty:g})")
    ax.set_xscale("log")
    ax.set_xlabel("penalty factor (VM-hours per SLO-violation hour)")
    ax.set_ylabel("U = VM-hours + penalty x violation-hours")
    ax.set_title("Utility (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "utility.png", dpi=110)
    plt.close(fig)

    lines = [
        "# elastore simulation report", "",
        f"Trace: {res.start} .. {res.end} ({res.hours} h), scaled to a peak of "
        f"{cfg.peak_rps:,.0f} requests/s, read ratio {cfg.read_ratio:g}; one trace hour is "
        f"replayed in {cfg.hour_seconds:g} s, which is also the control window. VM-hours and "
        "violation-hours are in replay time.", "",
        f"SLO: p{res.percentile} <= {res.slo_ms:g} ms. Data {cfg.data_gib:g} GiB, boot "
        f"{cfg.boot_s:g} s, store default stream rate {cfg.default_stream_mibps:g} MiB/s "
        f"(BwMan floor {cfg.min_stream_mibps:g} MiB/s), headroom {cfg.headroom:.0%}, "
        f"replicas {cfg.min_replicas}..{cfg.max_replicas}, RF {cfg.replication_factor}. "
        + ("After each join the old nodes run `nodetool cleanup` in turn at the migration "
           "rate (the whole data once) and no scale-in starts until it has ended; a "
           "further scale-out cuts it short (the operator's `spec.scaleUp.cleanup`)."
           if cfg.cleanup else "No cleanup after a join (`--no-cleanup`: the reference "
           "text's cluster; a join ends when its data has arrived)."), "",
        f"Violation penalty {cfg.penalty:g}: U(P) = VM-hours + P x violation-hours; "
        "`optimal` is the least U at this penalty that any schedule of one-node changes "
        "reaches on this replay, with perfect foresight (a lower bound).", "",
        f"**Who wins.** {verdict(metrics, cfg.penalty)}", "",
        f"**Physics:** {res.physics}", "",
    ]
    if res.gaps_filled:
        lines += [f"{res.gaps_filled} missing trace hour(s) were interpolated for the replay.",
                  ""]
    lines += ["| controller | VM-hours | SLO violation % | median p95 ms | utilisation | "
              "scale actions | " + " | ".join(f"U({p})" for p in PENALTIES) + " |",
              "|---|---:|---:|---:|---:|---:|" + "---:|" * len(PENALTIES)]
    for name, m in metrics.items():
        lines.append(
            f"| {name} | {m['vm_hours']:.1f} | {m['slo_violation_pct']:.2f} | "
            f"{m['p95_latency_ms_median']:.1f} | {m['cpu_util_mean']:.2f} | "
            f"{m['scale_actions']} | "
            + " | ".join(f"{m['utility'][f'{p:g}']:.1f}" for p in PENALTIES) + " |")
    lines += ["", "Controllers (dashed in the figures: given the true future, not ranked):", ""]
    lines += [f"- `{n}`{' (true future)' if n in FORESIGHT else ''}: {ABOUT.get(n, n)}"
              for n in res.runs]
    if cfg.models_bytes:
        lines += ["", f"Disks: the data grows {cfg.data_growth_gib_per_day:g} GiB a trace day "
                  f"(net), each node's volume {res.volume_gib or 0:,.1f} GiB, budget "
                  f"{cfg.storage().budget:.0%} (target {cfg.target_utilization:.0%}, "
                  f"{cfg.compaction} compaction); a full volume rejects writes and counts as "
                  "a violation.", "",
                  "| controller | max disk utilization | over target % | full hours |",
                  "|---|---:|---:|---:|"]
        for name, m in metrics.items():
            lines.append(f"| {name} | {m['max_disk_utilization']:.3f} | "
                         f"{m['disk_over_target_pct']:.2f} | {m['disk_full_hours']:.2f} |")
    lines += ["", f"Simulated in {seconds:.1f} s.", "",
              "![workload](workload.png)", "", "![servers](servers.png)", "",
              "![latency](latency_cdf.png) ![utilisation](utilization_cdf.png)", "",
              "![utility](utility.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
