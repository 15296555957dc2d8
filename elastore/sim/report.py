"""The simulation report: Markdown plus PNGs, readable, labelled, with units."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elastore.sim.run import PENALTIES, SimResult

COLORS = {"feedback": "tab:orange", "predict": "tab:purple", "prorenata": "tab:blue",
          "ideal": "black", "hpa": "tab:red", "holt-winters": "tab:green",
          "static-peak": "tab:gray"}


def write_report(res: SimResult, out: Path, seconds: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    cfg = res.config
    dt = cfg.step_s
    hours_axis = np.arange(len(next(iter(res.runs.values())).serving)) * dt / cfg.hour_seconds
    knots_h = np.arange(res.hours)

    # 1. the workload with its forecasts
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(knots_h, res.knots, color="black", lw=1.8, label="workload (trace, scaled)")
    for name in ("prorenata", "holt-winters"):
        run = res.runs.get(name)
        if run is not None and run.forecasts:
            k = np.array(sorted(run.forecasts))
            k = k[k < res.hours]
            ax.plot(k, [run.forecasts[i] for i in k], lw=0.9, color=COLORS[name],
                    label=f"{name} forecast (1 h ahead)")
    ax.set_xlabel(f"trace hour since {res.start} (1 h replayed in {cfg.hour_seconds:g} s)")
    ax.set_ylabel("client load (requests/s)")
    ax.set_title("Workload and forecasts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "workload.png", dpi=110)
    plt.close(fig)

    # 2. servers over time
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for name, run in res.runs.items():
        ax.step(hours_axis, run.billed, where="post", lw=0.9, color=COLORS.get(name),
                label=name)
    ax.set_xlabel("trace hour")
    ax.set_ylabel("servers billed")
    ax.set_title("Servers over time per controller")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(out / "servers.png", dpi=110)
    plt.close(fig)

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
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), color=COLORS.get(name), label=name)
        if attr == "p95_ms":
            ax.axvline(res.slo_ms, color="red", ls="--", label=f"SLO {res.slo_ms:g} ms")
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
    metrics = {n: r.metrics(dt, res.slo_ms) for n, r in res.runs.items()}
    pens = np.array([1, 2, 5, 10, 20, 50, 100])
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, m in metrics.items():
        viol_h = m["slo_violation_pct"] / 100 * len(hours_axis) * dt / 3600
        ax.plot(pens, m["vm_hours"] + pens * viol_h, marker="o", color=COLORS.get(name),
                label=name)
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
