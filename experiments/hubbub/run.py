"""Hubbub-scale's four-phase experiment (reference text 5.4.1, Fig. 5.25) on the real lab:
Cassandra 5.0.4 nodes, each in a cgroup with a CPU limit, pinned to the store's CPU;
stress-ng co-runners pinned to the same CPU; the load generator on the other CPU.

Four controllers, each on a fresh lab (see :mod:`elastore.lab.hubbub` for the phases and
the sizing rules):

* ``blind-workload`` / ``hubbub-workload``: the operator's planner
  (``elastore.operator.control.decide``, persistence forecast, Window planner) on the
  observed client load (the lab's Prometheus, the operator's default query), with the
  capacity model ``--model``; Hubbub-scale passes the index the probe measures on the
  nodes' cgroups (the agent's arithmetic), blind passes 0;
* ``blind-cpu`` / ``hubbub-cpu``: sized on the store's measured CPU use (cgroup
  ``usage_usec``) against the utilisation it reaches at its SLO capacity, Hubbub-scale
  dividing that by the model's slowdown factor at the measured index.

Scaling is real: ``elastore lab`` adds a node (it bootstraps, streaming its share) or
decommissions one, one node at a time, between ``--min`` and ``--max``.

Reported per phase and controller: the 5-s windows whose p95 breaks the SLO and the
server-hours (nodes x time). Writes ``RESULTS.md`` (with the lines a script reads:
``index_slowdown_spearman``, ``hubbub_violation_ratio``, ``hubbub_vm_ratio``), per-run
CSVs and ``hubbub.png`` (load, index, servers and p95 over time for each pair).

    python experiments/hubbub/run.py --model MODEL.json [--controllers ...]   # root

Status: runs end to end (a smoke run); the experiment itself is blocked on a 2-vCPU machine,
see README.md beside this file.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

READ_RATIO = 0.95
WINDOW_S = 5.0
CONTROLLERS = ("blind-workload", "hubbub-workload", "blind-cpu", "hubbub-cpu")
LOAD_QUERY = ('sum(rate(org_apache_cassandra_metrics_clientrequest_count'
              '{name="Latency",scope=~"Read|Write"}[1m]))')


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the load, run inside the lab's namespace (a subcommand of this script) ---------------
def load(args: argparse.Namespace) -> None:
    from elastore.lab.cassandra.load import run
    from elastore.traces.workload import Workload

    out = Path(args.out)
    run(Workload.load(Path(args.workload)), args.ips.split(","), out, keyspace="wiki",
        preload=False, on_start=lambda t: out.with_suffix(".start").write_text(repr(t)))


def warmup_windows(warmup_s: float) -> int:
    return max(0, round(warmup_s / WINDOW_S))


def workload_of(steps: list[Any], period_s: float, warmup_s: float = 0.0) -> Any:
    """The schedule as a workload of 5-s windows (rates constant within a step), after
    ``warmup_s`` of the first step's load (a fresh JVM is slower than a warm one: the
    windows before the schedule starts are not counted)."""
    import numpy as np

    from elastore.lab.sweep import KEY_COUNT, ZIPF_SLOPE
    from elastore.traces.workload import Workload

    per = max(1, round(period_s / WINDOW_S))
    rates = np.concatenate([np.full(warmup_windows(warmup_s), steps[0].load_rps),
                            np.repeat([s.load_rps for s in steps], per)]).astype(float)
    n = len(rates)
    weight = 1.0 / np.arange(1, KEY_COUNT + 1) ** ZIPF_SLOPE
    return Workload(
        first_hour="1970-01-01T00:00:00", window_seconds=WINDOW_S, hour_seconds=3600.0,
        start_s=np.arange(n, dtype=np.float64) * WINDOW_S,
        hour_index=np.zeros(n, dtype=np.int64), read_rps=rates * READ_RATIO,
        write_rps=rates * (1 - READ_RATIO), keys=[f"k{i}" for i in range(KEY_COUNT)],
        key_weight=weight / weight.sum(), meta={"generator": "experiments/hubbub"})


# --- measurements ---------------------------------------------------------------------------
def prom_scalar(state: Any, query: str) -> float | None:
    """One value from the lab's Prometheus (None: no answer or no series, never 0)."""
    from elastore.lab.cassandra import lab

    body = lab.prometheus_get(state, "/api/v1/query?query=" + urllib.parse.quote(query))
    if body is None:
        return None
    res = json.loads(body).get("data", {}).get("result", [])
    if not res:
        return None
    v = float(res[0]["value"][1])
    return v if math.isfinite(v) else None


def cpu_usage_s(cgroups_rel: list[str]) -> float | None:
    from elastore.hubbub.probe import read_cpu_stat
    from elastore.lab import cgroups

    root = cgroups.v2_root()
    total = 0.0
    for rel in cgroups_rel:
        st = read_cpu_stat(root / rel / "cpu.stat") if root else None
        if st is None or st.usage_us is None:
            return None
        total += st.usage_us / 1e6
    return total


class Scaler:
    """One node step at a time, in a thread: the control loop keeps measuring."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.events: list[dict[str, Any]] = []

    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, up: bool, t0: float) -> None:
        from elastore.lab.cassandra import lab

        def run() -> None:
            t = time.monotonic()
            try:
                if up:
                    lab.add_node(self.d)
                else:
                    state = lab.LabState.load(self.d)
                    assert state is not None
                    lab.decommission(state.nodes[-1].n, self.d)
                self.events.append({"up": up, "from_s": t - t0, "to_s": time.monotonic() - t0})
            except BaseException as exc:  # reported by the loop
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


# --- one controller's run -------------------------------------------------------------------
def run_controller(name: str, args: argparse.Namespace, steps: list[Any], out: Path) -> None:
    from elastore.lab import netns
    from elastore.lab.cassandra import lab
    from elastore.lab.cassandra.interference import NodeProbe
    from elastore.lab.corunners import CoRunner
    from elastore.lab.hubbub import cpu_replicas
    from elastore.models.bundle import ModelSet
    from elastore.operator import control
    from elastore.operator.metrics import Snapshot
    from elastore.operator.spec import DEFAULT_QUERIES, parse
    from elastore.planner.loop import Memory, target_at

    d = Path(f"/tmp/elastore-hubbub-{name}")
    os.environ["ELASTORE_LAB_DIR"] = str(d)
    models = ModelSet.load(args.model).for_slo(args.slo_ms, 95)
    cap = models.capacity
    spec = parse({"target": {"name": "cass", "replicationFactor": 2},
                  "replicas": {"min": args.min, "max": args.max},
                  "slo": {"percentile": 95, "latencyMs": args.slo_ms},
                  "controlPeriod": f"{args.period:g}s",
                  "prediction": {"method": "persistence", "horizon": f"{args.period:g}s",
                                 "step": f"{args.period:g}s", "headroom": args.headroom},
                  "planner": {"mode": "Window", "lookahead": f"{args.period:g}s"}})
    log(f"{name}: lab up ({args.min} nodes, {args.cpu_per_node} core each on CPU "
        f"{args.store_cpus}) ...")
    state = lab.up(args.min, d=d, cpu_per_node=args.cpu_per_node,
                   store_cpus=[int(c) for c in args.store_cpus.split(",")],
                   cfs_period_us=round(args.cfs_period_ms * 1000))
    loadgen: subprocess.Popen[bytes] | None = None
    runner: CoRunner | None = None
    rows: list[dict[str, Any]] = []
    scaler = Scaler(d)
    try:
        ips = [n.spec.ip for n in state.nodes]
        pre = out / f"{name}-preload.json"
        from elastore.lab.sweep import constant_workload
        constant_workload(1.0, 1.0, WINDOW_S, WINDOW_S).save(pre)
        subprocess.run([sys.executable, "-m", "elastore", "load", "run", str(pre), "--out",
                        str(out / f"{name}-preload.csv")], check=True, capture_output=True)
        wl = out / f"{name}-workload.json"
        workload_of(steps, args.period, args.warmup_minutes * 60).save(wl)
        load_csv = out / f"{name}.csv"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        loadgen = subprocess.Popen(netns.command(state.netns, [
            sys.executable, str(Path(__file__).resolve()), "load", "--workload", str(wl),
            "--out", str(load_csv), "--ips", ",".join(ips)]), env=env,
            preexec_fn=lambda: lab.keep_off_store_cpus(state))
        start_file = load_csv.with_suffix(".start")
        while not start_file.exists():
            if loadgen.poll() is not None:
                raise RuntimeError("the load generator exited before it started")
            time.sleep(0.2)
        # the schedule starts after the warm-up windows
        t0 = float(start_file.read_text()) + warmup_windows(args.warmup_minutes * 60) * WINDOW_S
        log(f"{name}: warming up for {args.warmup_minutes:g} min at {steps[0].load_rps:g} "
            "req/s ...")
        memory, history = Memory(), []
        level = 0
        prev = None
        for k, step in enumerate(steps):
            while time.monotonic() - t0 < step.t_s:
                time.sleep(0.2)
            if scaler.error is not None:
                raise RuntimeError(f"scaling failed: {scaler.error}")
            state = lab.LabState.load(d)
            assert state is not None
            groups = [n.cgroup for n in state.nodes]
            if step.level != level:
                if runner is not None:
                    runner.stop()
                    runner = None
                if step.level > 0:
                    runner = CoRunner(args.kind, step.level, state.store_cpus).start()
                level = step.level
            probe = NodeProbe(groups)
            snap = probe.snapshot()
            cpu = cpu_usage_s(groups)
            index = math.nan
            cpu_cores = math.nan
            if prev is not None and prev[0] == groups:
                index, _, _ = NodeProbe.between(prev[1], snap)
                if cpu is not None and prev[2] is not None:
                    cpu_cores = (cpu - prev[2]) / (snap[0] - prev[1][0])
            prev = (groups, snap, cpu)
            seen = prom_scalar(state, LOAD_QUERY)
            data = prom_scalar(state, DEFAULT_QUERIES["dataBytes"].format(selector="", by=""))
            history.append(seen if seen is not None else math.nan)
            replicas = len(state.nodes)
            aware = name.startswith("hubbub")
            idx = 0.0 if not aware or not math.isfinite(index) else index
            desired = replicas
            why = ""
            if name.endswith("workload"):
                if seen is None or data is None:
                    why = "no load or data size observed: hold (never read as 0)"
                else:
                    import numpy as np
                    now = time.time()
                    s = Snapshot(now, seen, READ_RATIO, data, None,
                                 np.asarray(history, dtype=float), args.period)
                    dec = control.decide(spec, s, replicas, models, memory,
                                         interference=min(1.0, idx))
                    memory = dec.memory
                    desired = target_at(dec.actions, now, replicas)
                    why = dec.reason
            elif math.isfinite(cpu_cores):
                factor = 1.0
                if aware:
                    c0 = float(cap.capacity(READ_RATIO, 0.0, 0.0))
                    ci = float(cap.capacity(READ_RATIO, 0.0, min(1.0, idx)))
                    factor = max(1.0, c0 / ci) if ci > 0 else float(args.max)
                desired = cpu_replicas(cpu_cores, args.cpu_per_node, args.cpu_target, factor,
                                       args.min, args.max)
                why = f"cpu {cpu_cores:.2f} cores, factor {factor:.2f}"
            if desired != replicas and not scaler.busy():
                scaler.start(desired > replicas, t0)
            row = {"t_s": round(step.t_s, 1), "phase": step.phase, "load_rps": step.load_rps,
                   "observed_rps": seen, "level": level, "index": index,
                   "cpu_cores": cpu_cores, "nodes": replicas, "desired": desired,
                   "why": why[:160]}
            rows.append(row)
            log(f"{name} [{k + 1}/{len(steps)}] phase {step.phase} load {step.load_rps:g} "
                f"level {level} index {index:.2f} nodes {replicas} -> {desired}")
        while time.monotonic() - t0 < steps[-1].t_s + args.period:
            time.sleep(0.5)
    finally:
        if runner is not None:
            runner.stop()
        if loadgen is not None:
            loadgen.send_signal(signal.SIGINT)
            try:
                loadgen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                loadgen.kill()
        if scaler.thread is not None:
            scaler.thread.join(timeout=900)
        with (out / f"{name}-periods.csv").open("w", newline="") as fh:
            if rows:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        (out / f"{name}-events.json").write_text(json.dumps(scaler.events, indent=1))
        lab.down(d)


# --- results --------------------------------------------------------------------------------
def scheduled_windows(out: Path, name: str, warmup_s: float) -> list[dict[str, Any]]:
    """The load generator's windows of the schedule (the warm-up's left out), each with
    ``t_s`` from the schedule's start."""
    skip = warmup_windows(warmup_s)
    rows = list(csv.DictReader((out / f"{name}.csv").open()))
    return [dict(w, t_s=(int(w["window"]) - skip) * WINDOW_S) for w in rows
            if int(w["window"]) >= skip]


def summarise(name: str, out: Path, period_s: float, slo_ms: float,
              warmup_s: float = 0.0) -> dict[str, Any]:
    periods = list(csv.DictReader((out / f"{name}-periods.csv").open()))
    windows = scheduled_windows(out, name, warmup_s)
    per_phase: dict[int, dict[str, float]] = {}
    for w in windows:
        t = float(w["t_s"])
        k = min(len(periods) - 1, int(t // period_s))
        p = periods[k]
        ph = per_phase.setdefault(int(p["phase"]), {"windows": 0, "violations": 0,
                                                     "server_hours": 0.0})
        ph["windows"] += 1
        p95 = float(w["p95_ms"]) if w["p95_ms"] not in ("", "nan") else math.inf
        ph["violations"] += int(p95 > slo_ms)
        ph["server_hours"] += float(p["nodes"]) * WINDOW_S / 3600
    return {"controller": name, "phases": per_phase}


def ratios(results: list[dict[str, Any]], variant: str) -> tuple[float, float]:
    """(violated windows blind / Hubbub-scale over phases 2-4, Hubbub-scale server-hours /
    blind over the whole run) for ``variant`` ``workload`` or ``cpu``; NaN when missing.
    With no violation under Hubbub-scale the ratio is blind / 1 (stated as a floor)."""
    by = {r["controller"]: r["phases"] for r in results}
    blind, hub = by.get(f"blind-{variant}"), by.get(f"hubbub-{variant}")
    if blind is None or hub is None:
        return math.nan, math.nan

    def viol(ph: dict[Any, Any]) -> float:
        return float(sum(v["violations"] for k, v in ph.items() if int(k) >= 2))

    def hours(ph: dict[Any, Any]) -> float:
        return float(sum(v["server_hours"] for v in ph.values()))

    return viol(blind) / max(1.0, viol(hub)), hours(hub) / hours(blind)


def plot(names: list[str], out: Path, slo_ms: float, warmup_s: float = 0.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    colours = {"blind-workload": "tab:red", "hubbub-workload": "tab:blue",
               "blind-cpu": "tab:orange", "hubbub-cpu": "tab:cyan"}
    for name in names:
        per = list(csv.DictReader((out / f"{name}-periods.csv").open()))
        t = [float(r["t_s"]) / 60 for r in per]
        c = colours.get(name, "black")
        if name == names[0]:
            axes[0].step(t, [float(r["load_rps"]) for r in per], where="post", color="black",
                         label="scheduled load")
        axes[1].plot(t, [float(r["index"]) for r in per], color=c, label=name)
        axes[2].step(t, [int(r["nodes"]) for r in per], where="post", color=c, label=name)
        win = scheduled_windows(out, name, warmup_s)
        axes[3].plot([float(w["t_s"]) / 60 for w in win],
                     [float(w["p95_ms"]) if w["p95_ms"] not in ("", "nan") else math.nan
                      for w in win], color=c, lw=0.8, label=name)
    axes[3].axhline(slo_ms, color="black", ls="--", lw=1, label=f"SLO {slo_ms:g} ms")
    axes[3].set_yscale("log")
    for ax, lab in zip(axes, ("load, req/s", "measured index", "servers", "p95, ms"),
                       strict=True):
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
    axes[3].set_xlabel("minutes (phases of equal length: 1 load, 2 interference, 3 load "
                       "under interference, 4 both)")
    fig.tight_layout()
    fig.savefig(out / "hubbub.png", dpi=110)


def write_results(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    prof = args.profile_summary
    rho = math.nan
    if prof is not None and prof.exists():
        rho = float(json.loads(prof.read_text())["index_slowdown_spearman"])
    lines = ["# Hubbub-scale: the four-phase experiment on the real lab", "",
             "Written by `experiments/hubbub/run.py` (the command and settings below).", "",
             f"index_slowdown_spearman: {rho:.3f}"]
    for variant in ("workload", "cpu"):
        v, h = ratios(results, variant)
        tag = "" if variant == "workload" else "_cpu"
        lines += [f"hubbub_violation_ratio{tag}: {v:.2f}", f"hubbub_vm_ratio{tag}: {h:.2f}"]
    lines += ["", "| controller | phase | windows | over the SLO | server-hours |",
              "|---|---|---|---|---|"]
    for r in results:
        for ph, v in sorted(r["phases"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {r['controller']} | {ph} | {v['windows']} | {v['violations']} | "
                         f"{v['server_hours']:.3f} |")
    lines += ["", "Settings: " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                                          sorted(vars(args).items()) if k != "cmd"), ""]
    (args.out / "RESULTS.md").write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    lp = sub.add_parser("load")
    lp.add_argument("--workload", required=True)
    lp.add_argument("--out", required=True)
    lp.add_argument("--ips", required=True)
    ap.add_argument("--model", type=Path, help="capacity model (elastore models fit) with "
                    "the learned interference effect")
    ap.add_argument("--controllers", default=",".join(CONTROLLERS))
    ap.add_argument("--phase-minutes", type=float, default=8.0)
    ap.add_argument("--period", type=float, default=30.0, help="control period, seconds")
    ap.add_argument("--warmup-minutes", type=float, default=1.5,
                    help="the first load, served before the schedule starts (not counted)")
    ap.add_argument("--low", type=float, default=200.0, help="low load, cluster req/s")
    ap.add_argument("--high", type=float, default=700.0, help="high load, cluster req/s")
    ap.add_argument("--kind", default="stream", help="co-runner kind")
    ap.add_argument("--max-level", type=int, default=4)
    ap.add_argument("--min", type=int, default=2)
    ap.add_argument("--max", type=int, default=4)
    ap.add_argument("--cpu-per-node", type=float, default=0.3)
    ap.add_argument("--store-cpus", default="1")
    ap.add_argument("--cfs-period-ms", type=float, default=10.0,
                    help="the CPU limit's CFS period (the kubelet's cpuCFSQuotaPeriod); "
                    "short, so the store's tail is not its own quota stalls")
    ap.add_argument("--cpu-target", type=float, default=0.7,
                    help="CPU-based: the utilisation at the SLO capacity, no interference")
    ap.add_argument("--headroom", type=float, default=0.1)
    ap.add_argument("--slo-ms", type=float, default=50.0)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--profile-summary", type=Path,
                    default=ROOT / "experiments/profiles/lab-interference-noquota.json",
                    help="the interference profile's summary (its rank correlation)")
    args = ap.parse_args()
    if args.cmd == "load":
        load(args)
        return
    if args.model is None:
        ap.error("--model is required")
    from elastore.lab.hubbub import schedule

    steps = schedule(args.phase_minutes * 60, args.period, args.low, args.high,
                     args.max_level)
    names = [c.strip() for c in args.controllers.split(",") if c.strip()]
    bad = [n for n in names if n not in CONTROLLERS]
    if bad:
        ap.error(f"unknown controllers {bad}: {', '.join(CONTROLLERS)}")
    args.out.mkdir(parents=True, exist_ok=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    results = []
    for name in names:
        run_controller(name, args, steps, args.out)
        results.append(summarise(name, args.out, args.period, args.slo_ms,
                                 args.warmup_minutes * 60))
        (args.out / "summary.json").write_text(json.dumps(results, indent=1))
    write_results(results, args)
    plot(names, args.out, args.slo_ms, args.warmup_minutes * 60)
    log((args.out / "RESULTS.md").read_text())


if __name__ == "__main__":
    main()
