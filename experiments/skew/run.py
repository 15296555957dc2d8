"""Balance before buy (issue 38): the per-node skew simulator over the per-page Wikipedia
trace of January 2016, count-only against skew-aware scaling.

What it does, in order:

1. reads the per-page trace (``../shared/traces/wikipedia/en-2016-01-pages-hourly.csv.gz``
   or ``--trace``), removes the noise pages (the ProRenaTa trace construction's list;
   ``--keep-noise`` keeps them) and fits the unlisted tail (a Zipf fit of each hour's head
   extrapolated to English Wikipedia's ~5.1 M articles: ``elastore.sim.skew.fit_tail``);
2. measures the skew: the share of requests on the top 1.6 % and 11 % of pages per hour
   (listed pages only, and over all articles with the fitted tail), and the per-node
   imbalance (busiest / mean) the hashed pages give on even rings of 6, 12 and 24
   single-token nodes at RF 3, at the fitted background and at 0.3 / 0.5 / 0.7;
3. replays every window (``--window-hours``, default 72, back to back over the month) under
   the three arms (``elastore.sim.skew``), at the fitted background (the headline), then at
   the sweep's constant backgrounds, with a uniform control (background 1: no key skew at
   all, only the single-token ring's uneven ownership), with up to 3 moves per decision,
   and on a Zipf popularity (exponent 0.8, the reference's Table 3.1);
4. writes ``results.json``, ``RESULTS.md`` and ``per-node-load.png`` into ``--out``
   (default: this folder). ``skew_move_data_pct_lab`` is read from ``lab.json`` beside
   RESULTS.md when the lab helper has written it (``max_move_data_pct``).

    .venv/bin/python experiments/skew/run.py [--quick] [--out DIR] [--trace FILE]

About 10 minutes on one core; ``--quick`` (one-day windows, 4 of them, one sweep point)
about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from results import Target, git_state, record, summary  # noqa: E402

from elastore.models.bundle import ModelSet  # noqa: E402
from elastore.models.skew import Keys, Ring, imbalance, node_shares  # noqa: E402
from elastore.resources import builtin_model  # noqa: E402
from elastore.sim.skew import (  # noqa: E402
    ARMS,
    EN_ARTICLES_2016_01,
    KeyTrace,
    SkewSimConfig,
    from_page_table,
    run_window,
    top_share,
    zipf_trace,
)
from elastore.traces.readers import read_page_table  # noqa: E402
from elastore.traces.workload import DEFAULT_NOISE_PAGES  # noqa: E402

TRACE_NAME = "en-2016-01-pages-hourly.csv.gz"
SWEEP = (0.3, 0.5, 0.7)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def shared_trace() -> Path:
    """The per-page trace in ../shared (``ELASTORE_SHARED`` overrides), as the tests'
    ``shared_dir`` fixture finds it."""
    env = os.environ.get("ELASTORE_SHARED")
    for base in ([Path(env)] if env else []) + [REPO.parent / "shared"]:
        path = base / "traces" / "wikipedia" / TRACE_NAME
        if path.is_file():
            return path
    raise SystemExit(f"error: {TRACE_NAME} not found in ../shared/traces/wikipedia; set "
                     "ELASTORE_SHARED or pass --trace")


# --------------------------------------------------------------------------------------
# the skew of the trace
# --------------------------------------------------------------------------------------
def measure_skew(trace: KeyTrace, backgrounds: tuple[float, ...], every: int,
                 read_ratio: float) -> dict[str, Any]:
    tail = trace.tail
    fitted = "exponent" in tail
    s16, s11, p16, p11 = [], [], [], []
    for h in range(trace.hours):
        r = trace.hour_requests[h]
        s16.append(top_share(r, 0.016))
        s11.append(top_share(r, 0.11))
        if fitted:
            tail_req = trace.total_requests[h] - float(r.sum())
            p16.append(top_share(r, 0.016, tail["articles"], tail_req, tail["exponent"]))
            p11.append(top_share(r, 0.11, tail["articles"], tail_req, tail["exponent"]))

    def stats(v: list[float]) -> dict[str, float]:
        a = np.asarray(v, dtype=float)
        return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
                "p90": float(np.percentile(a, 90)), "max": float(a.max())}

    out: dict[str, Any] = {
        "listed_pages_per_hour": stats([float(len(k)) for k in trace.hour_keys]),
        "top_1_6pct_of_listed_pages": stats(s16), "top_11pct_of_listed_pages": stats(s11),
        "background_fitted": stats(list(trace.background)),
    }
    if fitted:
        out["top_1_6pct_of_all_articles"] = stats(p16)
        out["top_11pct_of_all_articles"] = stats(p11)
    rings = {n: Ring.evenly([f"n{i}" for i in range(n)]) for n in (6, 12, 24)}
    imb: dict[str, Any] = {}
    hours = range(0, trace.hours, every)
    for label in ("fitted", *backgrounds):
        for n, ring in rings.items():
            vals = []
            for h in hours:
                b = float(trace.background[h]) if label == "fitted" else float(label)
                shares = node_shares(ring, trace.keys(h), 3, read_ratio, "replicas", b)
                vals.append(imbalance(shares))
            imb[f"{label}/{n}"] = {"background": label, "nodes": n, **stats(vals)}
    out["imbalance_even_rings_rf3"] = imb
    out["hours_sampled_for_imbalance"] = len(hours)
    return out


# --------------------------------------------------------------------------------------
# the replays
# --------------------------------------------------------------------------------------
def windows_of(trace: KeyTrace, hours: int, count: int | None) -> list[int]:
    """Window starts, back to back: each window is ``hours`` decision hours plus the hour
    before (its first key rates) and the hour after (its last knot)."""
    starts = list(range(0, trace.hours - (hours + 2) + 1, hours))
    if not starts:
        raise SystemExit(f"error: the trace's {trace.hours} hours hold no window of "
                         f"{hours} + 2 hours")
    return starts[:count] if count else starts


def replay(name: str, trace: KeyTrace, starts: list[int], hours: int, cap: Any,
           cfg: SkewSimConfig, keep_runs: bool = False) -> dict[str, Any]:
    per_window = []
    runs_kept = []
    t0 = time.perf_counter()
    for k, s in enumerate(starts):
        w = trace.window(s, hours + 2)
        res = run_window(w, cap, cfg, ARMS)
        row: dict[str, Any] = {"window": k, "start": w.hours_utc[1],
                               "end": w.hours_utc[hours], "scale": res["scale"],
                               "optimal_server_hours": res["optimal_server_hours"]}
        for arm, run in res["runs"].items():
            row[arm] = run.metrics(cfg.step_s)
        per_window.append(row)
        if keep_runs:
            runs_kept.append((s, w, res))
        co, sa = row["count-only"], row["skew-aware"]
        log(f"{name}: window {k + 1}/{len(starts)} ({row['start']}): violated hours "
            f"count-only {co['violated_hours']}, count-busiest "
            f"{row['count-busiest']['violated_hours']}, skew-aware {sa['violated_hours']}; "
            f"server-hours {co['server_hours']:.0f} / {sa['server_hours']:.0f}; "
            f"{sa['moves']} moves ({time.perf_counter() - t0:.0f} s)")
    pooled: dict[str, Any] = {}
    for arm in ARMS:
        rows = [r[arm] for r in per_window]
        pooled[arm] = {
            "violated_hours": sum(r["violated_hours"] for r in rows),
            "overloaded_hours": sum(r["overloaded_hours"] for r in rows),
            "violated_steps_load": sum(r["violated_steps_load"] for r in rows),
            "violated_steps_streaming": sum(r["violated_steps_streaming"] for r in rows),
            "hours": sum(r["hours"] for r in rows),
            "server_hours": sum(r["server_hours"] for r in rows),
            "imbalance_mean": float(np.mean([r["imbalance_mean"] for r in rows])),
            "imbalance_p95": float(np.mean([r["imbalance_p95"] for r in rows])),
            "moves": sum(r["moves"] for r in rows),
            "move_fraction_max": max(r["move_fraction_max"] for r in rows),
            "reverts": sum(r["reverts"] for r in rows),
            "nodes_added": sum(r["nodes_added"] for r in rows),
            "nodes_removed": sum(r["nodes_removed"] for r in rows),
        }
    pooled["optimal_server_hours"] = sum(r["optimal_server_hours"] for r in per_window)
    co, sa = pooled["count-only"], pooled["skew-aware"]
    out = {"name": name, "windows": per_window, "pooled": pooled,
           "violation_ratio": co["violated_hours"] / max(sa["violated_hours"], 1),
           "violation_ratio_is_lower_bound": sa["violated_hours"] == 0,
           "vm_ratio": sa["server_hours"] / co["server_hours"],
           "seconds": time.perf_counter() - t0}
    if keep_runs:
        out["_runs"] = runs_kept
    return out


# --------------------------------------------------------------------------------------
# the plot
# --------------------------------------------------------------------------------------
def plot(main: dict[str, Any], cap: Any, cfg: SkewSimConfig, path: Path) -> dict[str, Any]:
    """Per-node load (of the capacity at the SLO) at the hour where count-only's busiest
    node was most over, before that hour's actions and after them, on count-only and
    skew-aware, under that hour's load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    capacity = float(cap.capacity(cfg.read_ratio))
    best: tuple[float, int, int] | None = None
    for wi, (_, _, res) in enumerate(main["_runs"]):
        util = np.asarray(res["runs"]["count-only"].busiest_util)
        steps = int(3600 / cfg.step_s)
        hourly = util[: util.size // steps * steps].reshape(-1, steps).max(axis=1)
        i = int(np.argmax(hourly))
        if best is None or hourly[i] > best[0]:
            best = (float(hourly[i]), wi, i)
    assert best is not None
    _, wi, i = best
    _, w, res = main["_runs"][wi]
    h = i + 1  # decision hours start at the window's hour 1
    keys: Keys = w.keys(h)
    total = max(w.total_requests[h], w.total_requests[h + 1]) * res["scale"]
    b = float(w.background[h])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    info: dict[str, Any] = {"hour": w.hours_utc[h], "window": wi}
    for ax, arm in zip(axes, ("count-only", "skew-aware"), strict=True):
        run = res["runs"][arm]
        before, after = run.rings_at_hour[i], run.rings_after_hour[i]
        where = {name: before.tokens[k][0] for k, name in enumerate(before.names)}
        where.update({name: after.tokens[k][0] for k, name in enumerate(after.names)})
        slot = {name: x for x, name in enumerate(sorted(where, key=lambda m: where[m]))}
        for label, ring, color, off in (("before", before, "#bbbbbb", -0.2),
                                        ("after", after, "#d62728", 0.2)):
            shares = node_shares(ring, keys, cfg.rf, cfg.read_ratio, cfg.spread, b)
            util = total * shares / capacity
            xs = np.array([slot[name] for name in ring.names]) + off
            ax.bar(xs, util, width=0.4, color=color,
                   label=f"{label}: {len(ring)} nodes, busiest {util.max():.2f}")
            info[f"{arm}/{label}"] = {"nodes": len(ring), "busiest_util": float(util.max()),
                                      "imbalance": imbalance(shares)}
        ax.axhline(1.0, color="k", lw=1, ls="--")
        ax.axhline(1 - cfg.headroom, color="k", lw=0.8, ls=":")
        ax.set_title(f"{arm}, {w.hours_utc[h]} UTC")
        ax.set_xlabel("node, in ring order (every node that was there before or after)")
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("load / capacity at the p95 SLO")
    fig.suptitle("Per-node load before and after the hour's actions (dashed: the SLO's "
                 "capacity; dotted: the planner's target)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return info


# --------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------
def lab_figure(out: Path) -> tuple[float | None, dict[str, Any] | None]:
    path = out / "lab.json"
    if not path.is_file():
        return None, None
    doc = json.loads(path.read_text())
    value = doc.get("max_move_data_pct")
    return (float(value) if isinstance(value, (int, float)) else None), doc


def fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def write_results(out: Path, args: argparse.Namespace, trace: KeyTrace, skew: dict[str, Any],
                  main: dict[str, Any], rows: list[dict[str, Any]], plot_info: dict[str, Any],
                  cfg: SkewSimConfig, capacity_rps: float, slo: str,
                  lab_pct: float | None, lab_doc: dict[str, Any] | None) -> None:
    p = main["pooled"]
    co, cb, sa = p["count-only"], p["count-busiest"], p["skew-aware"]
    tail = trace.tail
    lines = [
        "# Balance before buy: the skew simulator (issue 38)",
        "",
        "Generated by `.venv/bin/python experiments/skew/run.py"
        + (" --quick" if args.quick else "") + "`; the figures are in `results.json`.",
        "",
        f"skew_violation_ratio_sim: {main['violation_ratio']:.2f}",
        f"skew_vm_ratio_sim: {main['vm_ratio']:.3f}",
        f"skew_move_data_pct_lab: {fmt(lab_pct, 2) if lab_pct is not None else 'n/a'}",
        "",
        "- `skew_violation_ratio_sim`: violated windows (a window = one hour, violated when the "
        "busiest node's p95 exceeds the SLO at any 5-minute step), count-only over "
        "skew-aware, pooled over every window of the headline run (fitted background). "
        "With no violated hour under skew-aware the ratio is count-only / max(skew-aware, 1), "
        "a lower bound" + (" (the case here)" if main["violation_ratio_is_lower_bound"]
                          else "") + ". Target >= 2.",
        "- `skew_vm_ratio_sim`: server-hours, skew-aware over count-only, same runs. "
        "Target <= 1.05.",
        "- `skew_move_data_pct_lab`: the largest share of the data one move streamed on the "
        "lab's real Cassandra (`lab.json`, written by the lab experiment). Target <= 5. "
        + ("Not measured yet: no `lab.json` beside this file." if lab_doc is None else
           "From `lab.json`."),
        "",
        "**Why the violation ratio comes from the simulator.** The lab's Cassandra nodes "
        "share 2 cores, so one node's capacity there is not independent of the others' load: "
        "a hot node slows its neighbours too. The ratio is measured in this simulator, on the "
        "physics the lab measured (the built-in `lab` capacity model: p95 latency against "
        "load, read ratio and streaming rate, fitted to real Cassandra 5.0 in "
        "`experiments/profiles/`); the lab shows the mechanism (a move's streamed bytes "
        "within the bound, the hot node's share falling, no row lost).",
        "",
        "## Verdict",
        "",
    ]
    met_v = main["violation_ratio"] >= 2
    met_m = main["vm_ratio"] <= 1.05
    uni = next((r for r in rows if r["name"] == "uniform control (background 1)"), None)
    lines += [
        f"- Violations: count-only {co['violated_hours']} of {co['hours']} hours, skew-aware "
        f"{sa['violated_hours']}: ratio {main['violation_ratio']:.2f} "
        f"({'met' if met_v else 'MISSED'}).",
        f"- Server-hours: skew-aware {sa['server_hours']:.0f} against count-only "
        f"{co['server_hours']:.0f}: ratio {main['vm_ratio']:.3f} "
        f"({'met' if met_m else 'MISSED'}); count-busiest (plans for the busiest node but "
        f"can only add nodes at the allocator's token) {cb['server_hours']:.0f}, ratio "
        f"{cb['server_hours'] / co['server_hours']:.3f}, with {cb['violated_hours']} violated "
        f"hours; the mean-load bound (`optimal`'s count, no headroom) "
        f"{p['optimal_server_hours']:.0f}.",
    ]
    if uni is not None:
        u = uni["pooled"]
        lines.append(
            f"- **Where count-only's violations come from.** With no key skew at all "
            f"(background 1, the uniform control) count-only still violates "
            f"{u['count-only']['violated_hours']} of {u['count-only']['hours']} hours: on a "
            "single-token ring, adding or removing one node at a time leaves uneven "
            "ownership (12 -> 13 nodes leaves a node with three full ranges: 13/12 of the "
            "mean at RF 3; 8 -> 7, one range doubled), and a planner for the mean has only "
            f"its {cfg.headroom:.0%} headroom against it. So most of the ratio is the ring's "
            "ownership, not the pages' popularity; skew-aware fixes both, since it plans on "
            "every node's share whatever its cause.")
    lines += [
        f"- What broke the SLO: of count-only's {co['violated_hours']} violated hours, "
        f"{co['overloaded_hours']} had a node over the SLO by its load alone (steps: "
        f"{co['violated_steps_load']} by load, {co['violated_steps_streaming']} only while "
        f"streaming); of skew-aware's {sa['violated_hours']}, {sa['overloaded_hours']} "
        f"(steps: {sa['violated_steps_load']} by load, {sa['violated_steps_streaming']} only "
        "while streaming). Skew-aware's load violations are the hour-old key rates (a burst's "
        "first hour; a ring split for a burst that has just ended); its streaming ones are "
        "moves and bootstraps at BwMan's rate under a load that rose during them.",
        f"- Moves: {sa['moves']} by skew-aware, the largest streaming "
        f"{100 * sa['move_fraction_max']:.2f} % of the data (bound "
        f"{100 * cfg.max_move_fraction:g} %); {sa['reverts']} reverted by the hysteresis.",
        "",
        "## The skew of the per-page trace",
        "",
        f"English Wikipedia, January 2016, {trace.hours} hours; noise pages removed "
        f"({tail.get('noise_pages_removed', 'n/a')} titles: the ProRenaTa trace construction's "
        "list, `elastore.traces.workload.DEFAULT_NOISE_PAGES`). The file lists only pages "
        "with about 100 requests or more in an hour (sampled 1:100): "
        f"{skew['listed_pages_per_hour']['median']:.0f} pages an hour (median).",
        "",
        "| share of an hour's requests | median | p10 | p90 | max | reference |",
        "|---|---:|---:|---:|---:|---|",
    ]
    ref = {"1_6": "90 % on 1.6 % (lookup-tables-fine-grained-routing.txt §7.2)",
           "11": "80 % on 11 % (storage-qos-thesis-ch3-chunk-placement.txt Fig 3.2)"}
    for key, label in (("top_1_6pct_of_listed_pages", "top 1.6 % of the listed pages"),
                       ("top_11pct_of_listed_pages", "top 11 % of the listed pages"),
                       ("top_1_6pct_of_all_articles", "top 1.6 % of all articles"),
                       ("top_11pct_of_all_articles", "top 11 % of all articles")):
        if key in skew:
            s = skew[key]
            lines.append(f"| {label} | {s['median']:.3f} | {s['p10']:.3f} | {s['p90']:.3f} | "
                         f"{s['max']:.3f} | {ref['1_6' if '1_6' in key else '11']} |")
    if "exponent" in tail:
        bg = skew["background_fitted"]
        lines += [
            "",
            f"**The tail.** The listed head is a small part of the traffic. A Zipf fit of each "
            f"hour's rank-frequency curve (ranks >= {tail['min_rank']} with >= "
            f"{tail['min_requests']:g} requests, i.e. 10 samples) gives an exponent of "
            f"{tail['exponent']:.3f} (median over {tail['hours_fitted']} hours; p10 "
            f"{tail['exponent_p10']:.3f}, p90 {tail['exponent_p90']:.3f}). Extrapolated to "
            f"English Wikipedia's ~{tail['articles'] / 1e6:.1f} M articles (5 M on 1 November "
            "2015: The Signpost, 2015-10-28, \"English Wikipedia reaches five million "
            "articles\"), the unlisted tail carries a share of "
            f"{bg['median']:.3f} of the requests (median hour; p10 {bg['p10']:.3f}, p90 "
            f"{bg['p90']:.3f}). A rough cross-check: Wikimedia's \"more than half a billion "
            "page views every day\" (its 5-million-article announcement, all languages) puts "
            "English Wikipedia at several million an hour, against the listed head's "
            "0.8 M (noise-free median): a tail near 0.9 again. This is the headline's "
            "`background` (each hour its own fitted share); the tail is spread uniformly over "
            "the ring (hashed keys). On all articles, the top 1.6 % carries "
            f"{skew.get('top_1_6pct_of_all_articles', {}).get('median', float('nan')):.2f} "
            "of the requests, well below the references' 90 %: Wikipedia's popularity is "
            "flatter (a Zipf exponent below 1), and hashing spreads it further.",
        ]
    lines += [
        "",
        "Per-node imbalance (busiest / mean work) of the hashed pages on even single-token "
        f"rings at RF 3, reads spread over the replicas (one hour in "
        f"{args.imbalance_every}):",
        "",
        "| background | nodes | median | p90 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for v in skew["imbalance_even_rings_rf3"].values():
        label = "fitted (per hour)" if v["background"] == "fitted" else f"{v['background']:g}"
        lines.append(f"| {label} | {v['nodes']} | {v['median']:.3f} | {v['p90']:.3f} | "
                     f"{v['max']:.3f} |")
    lines += [
        "",
        "## The replays",
        "",
        f"Windows of {args.window_hours} decision hours, back to back from the month's first "
        f"hour ({len(main['windows'])} windows, every one reported below). Each window's "
        f"hourly total is scaled so its peak hour needs {cfg.peak_nodes} nodes on the mean "
        f"at the planner's target ({1 - cfg.headroom:.0%} of the capacity); the built-in "
        f"`lab` model serves {capacity_rps:.1f} requests/s per node at read ratio "
        f"{cfg.read_ratio:g} within {slo}. A single-token ring, RF {cfg.rf}, reads spread "
        f"over the replicas; steps of {cfg.step_s / 60:g} min interpolated from the hours; "
        "one decision per hour for that hour, on the same information for every arm: the "
        "hour's total (an oracle: the larger of its two knots) and the key rates and tail "
        "share of the hour before (what sampling hot partitions gives). Every arm starts "
        "from the same even ring. A new node boots for "
        f"{cfg.boot_s:g} s, then streams what it gains; a move or a decommission streams "
        "its bytes; each at BwMan's rate (the capacity model's fastest rate within the SLO "
        f"less half the headroom at the busiest node involved, between "
        f"{cfg.min_stream_mibps:g} and {cfg.stream_mibps:g} MiB/s per sender) over "
        f"{cfg.data_gib:g} GiB stored (replicas included); the ring changes when the action "
        "ends, one action at a time, and the nodes that stream see the streaming in their "
        "latency. Moves: at most "
        f"{cfg.max_moves} per decision, each within {100 * cfg.max_move_fraction:g} % of the "
        "data, only when the busiest node would be over the target and the hysteresis "
        "(above 75 % acts, below 55 % stops, below 45 % reverts, EWMA alpha "
        f"{cfg.hysteresis_alpha:g} on the new sample) acts.",
        "",
        "| run | count-only viol. h | count-busiest viol. h | skew-aware viol. h | "
        "violation ratio | server-h count-only | count-busiest | skew-aware | vm ratio | "
        "optimal (mean bound) | moves | max move % | imbalance mean (co / sa) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        q = r["pooled"]
        lines.append(
            f"| {r['name']} | {q['count-only']['violated_hours']} | "
            f"{q['count-busiest']['violated_hours']} | {q['skew-aware']['violated_hours']} | "
            f"{r['violation_ratio']:.2f}{'+' if r['violation_ratio_is_lower_bound'] else ''}"
            f" | {q['count-only']['server_hours']:.0f} | "
            f"{q['count-busiest']['server_hours']:.0f} | {q['skew-aware']['server_hours']:.0f}"
            f" | {r['vm_ratio']:.3f} | {q['optimal_server_hours']:.0f} | "
            f"{q['skew-aware']['moves']} | {100 * q['skew-aware']['move_fraction_max']:.2f} | "
            f"{q['count-only']['imbalance_mean']:.3f} / {q['skew-aware']['imbalance_mean']:.3f}"
            " |")
    lines += [
        "",
        "(`+`: skew-aware had no violated hour; the ratio is then count-only / 1.)",
        "",
        "Every window of the headline run (fitted background):",
        "",
        "| window | from | to | count-only viol. h | skew-aware viol. h | count-busiest viol. h "
        "| server-h co / sa | vm ratio | moves | imbalance p95 co / sa |",
        "|---:|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for w in main["windows"]:
        a, b, c = w["count-only"], w["skew-aware"], w["count-busiest"]
        lines.append(
            f"| {w['window']} | {w['start']} | {w['end']} | {a['violated_hours']} | "
            f"{b['violated_hours']} | {c['violated_hours']} | {a['server_hours']:.0f} / "
            f"{b['server_hours']:.0f} | {b['server_hours'] / a['server_hours']:.3f} | "
            f"{b['moves']} | {a['imbalance_p95']:.3f} / {b['imbalance_p95']:.3f} |")
    lines += [
        "",
        "## The plot",
        "",
        f"`per-node-load.png`: the hour where count-only's busiest node was most over "
        f"({plot_info['hour']} UTC, window {plot_info['window']}), each node's load over its "
        "capacity at the SLO under that hour's load, on the ring before the hour's actions "
        "(grey) and after them (red), count-only left, skew-aware right. Count-only: "
        f"{plot_info['count-only/before']['nodes']} -> "
        f"{plot_info['count-only/after']['nodes']} nodes, busiest "
        f"{plot_info['count-only/before']['busiest_util']:.2f} -> "
        f"{plot_info['count-only/after']['busiest_util']:.2f}; skew-aware: "
        f"{plot_info['skew-aware/before']['nodes']} -> "
        f"{plot_info['skew-aware/after']['nodes']} nodes, busiest "
        f"{plot_info['skew-aware/before']['busiest_util']:.2f} -> "
        f"{plot_info['skew-aware/after']['busiest_util']:.2f}.",
        "",
        "## What is missed, and why",
        "",
        "- The key rates are the hour before's; a page that bursts within the hour (a death, "
        "a news event) reaches the planner an hour late. The total is an oracle: the "
        "comparison is of the two ways to spend nodes, not of forecasts.",
        "- The tail is uniform over the ring and its share fitted, not measured: the file "
        "has no page below ~100 requests an hour. The sweep shows how the figures move with "
        "it; a lower tail share means more key skew.",
        "- The blake2b hash stands in for Murmur3 (both uniform); tokens of real pages "
        "differ, their spread does not.",
        "- No cache in front of the store, one datacenter, SimpleStrategy, no hinted "
        "handoff or repair traffic; reads are spread over the replicas (a token-aware "
        "driver that does not shuffle would put them on the primary and skew more).",
        "- A move's data is from the ring (token-space fractions), not measured bytes; "
        "the lab measures real ones.",
        "- Server-hours count a node from its boot to its removal; a decommissioning node "
        "serves until it has handed over its data.",
        "- Only single-token rings: `nodetool move` does not exist for vnodes. With vnodes "
        "the allocator keeps ownership far evener, which should remove much of what "
        "count-only suffers here (the uniform control); that is not simulated.",
        "",
        "## Parameters",
        "",
        f"`{json.dumps({k: v for k, v in cfg.__dict__.items()})}`",
        "",
        f"Trace: `{trace.source}`; tail fit: `{json.dumps(tail)}`.",
        "",
    ]
    (out / "RESULTS.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None,
                    help=f"a per-page CSV (default: ../shared/traces/wikipedia/{TRACE_NAME})")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--quick", action="store_true",
                    help="one-day windows, 4 of them, one sweep point (a smoke run)")
    ap.add_argument("--window-hours", type=int, default=None)
    ap.add_argument("--windows", type=int, default=None, help="at most this many windows")
    ap.add_argument("--peak-nodes", type=int, default=12)
    ap.add_argument("--max-move-pct", type=float, default=5.0)
    ap.add_argument("--keep-noise", action="store_true",
                    help="keep Main_Page, Special:* ... (the noise pages)")
    ap.add_argument("--articles", type=int, default=EN_ARTICLES_2016_01)
    ap.add_argument("--imbalance-every", type=int, default=None,
                    help="measure the even rings' imbalance every N hours")
    args = ap.parse_args(argv)
    if args.window_hours is None:
        args.window_hours = 24 if args.quick else 72
    if args.quick and args.windows is None:
        args.windows = 4
    if args.imbalance_every is None:
        args.imbalance_every = 24 if args.quick else 3
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    git = git_state(REPO)
    t0 = time.perf_counter()
    path = args.trace or shared_trace()
    log(f"reading {path} ...")
    table = read_page_table(path)
    noise = () if args.keep_noise else DEFAULT_NOISE_PAGES
    trace = from_page_table(table, noise, args.articles)
    del table
    log(f"{trace.hours} hours, {len(trace.names)} pages; tail exponent "
        f"{trace.tail['exponent']:.3f}, background median {np.median(trace.background):.3f}")
    ms = ModelSet.load(builtin_model("lab"))
    cap = ms.capacity
    cfg = SkewSimConfig(peak_nodes=args.peak_nodes, max_move_fraction=args.max_move_pct / 100)
    capacity_rps = float(cap.capacity(cfg.read_ratio))
    slo = f"p{cap.percentile} {cap.slo_ms:g} ms"
    sweep = (0.5,) if args.quick else SWEEP
    log("measuring the skew ...")
    skew = measure_skew(trace, sweep, args.imbalance_every, cfg.read_ratio)
    starts = windows_of(trace, args.window_hours, args.windows)
    log(f"{len(starts)} windows of {args.window_hours} h; arms {', '.join(ARMS)}")
    main_run = replay("fitted background", trace, starts, args.window_hours, cap, cfg,
                      keep_runs=True)
    rows = [main_run]
    for b in sweep:
        rows.append(replay(f"background {b:g}", trace.with_background(b), starts,
                           args.window_hours, cap, cfg))
    if not args.quick:
        rows.append(replay("uniform control (background 1)", trace.with_background(1.0),
                           starts, args.window_hours, cap, cfg))
        rows.append(replay("fitted background, up to 3 moves per decision", trace, starts,
                           args.window_hours, cap,
                           SkewSimConfig(peak_nodes=args.peak_nodes,
                                         max_move_fraction=args.max_move_pct / 100,
                                         max_moves=3)))
        zipf = zipf_trace(trace.total_requests, keys=10_000, exponent=0.8, background=0.0,
                          hot_churn=0.05, seed=1)
        rows.append(replay("Zipf 0.8, 10k keys, 5 % hot churn an hour", zipf, starts,
                           args.window_hours, cap, cfg))
    plot_info = plot(main_run, cap, cfg, out / "per-node-load.png")
    lab_pct, lab_doc = lab_figure(out)
    write_results(out, args, trace, skew, main_run, rows, plot_info, cfg, capacity_rps, slo,
                  lab_pct, lab_doc)
    figures: dict[str, Any] = {
        "skew_violation_ratio_sim": main_run["violation_ratio"],
        "skew_violation_ratio_is_lower_bound": main_run["violation_ratio_is_lower_bound"],
        "skew_vm_ratio_sim": main_run["vm_ratio"],
        "skew_move_data_pct_lab": lab_pct,
        "lab": lab_doc,
        "trace": {"source": str(path), "hours": trace.hours, "tail": trace.tail,
                  "noise_removed": not args.keep_noise},
        "skew": skew,
        "config": cfg.__dict__,
        "capacity_rps": capacity_rps, "slo": slo,
        "window_hours": args.window_hours, "quick": args.quick,
        "runs": [{k: v for k, v in r.items() if k != "_runs"} for r in rows],
        "plot": plot_info,
        "seconds": time.perf_counter() - t0,
    }
    targets = [
        Target("skew_violation_ratio_sim", ">=", 2.0,
               "violated hours, count-only / skew-aware, pooled, fitted background",
               "issue 38, Targets"),
        Target("skew_vm_ratio_sim", "<=", 1.05, "server-hours, skew-aware / count-only",
               "issue 38, Targets"),
        Target("skew_move_data_pct_lab", "<=", 5.0,
               "largest share of the data one lab move streamed, % (lab.json)",
               "issue 38, Targets"),
    ]
    ok = record(out, "skew", figures, targets, git=git,
                notes="the violation and server-hour ratios come from the simulator on the "
                      "lab's capacity model; the move's data share from the lab (lab.json), "
                      "null when the lab has not run")
    log(f"wrote {out / 'RESULTS.md'}, {out / 'results.json'}, {out / 'per-node-load.png'} "
        f"in {time.perf_counter() - t0:.0f} s")
    print(summary(out / "results.json"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
