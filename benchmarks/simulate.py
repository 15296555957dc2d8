"""Simulator targets (issue 5), printed, never asserted.

1. the default run (built-in 2009-03-08 .. 22, 7 controllers): wall time (target < 30 s) and
   the target checks;
2. the same checks on every other two-week window of the shared file, no retuning.

Usage: .venv/bin/python benchmarks/simulate.py [--windows N] [--model lab|placeholder|FILE]

The model defaults to the simulator's own default (the lab profile); the trace is scaled as
`elastore simulate` scales it (its busiest hour needs 18 servers of the model) unless the
model is the placeholder, whose tables were measured at SimConfig's 7,000 requests/s.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import pandas as pd

from elastore.models.bundle import ModelSet
from elastore.sim.cli import PEAK_SERVERS, PLACEHOLDER, model_choice
from elastore.sim.controllers import CONTROLLERS
from elastore.sim.run import SimConfig, locate, simulate
from elastore.traces import builtin_trace_path, read_series

NON_IDEAL = [c for c in CONTROLLERS if c not in ("prorenata", "ideal")]


def checks(m: dict[str, dict[str, float]]) -> dict[str, bool]:
    p, ideal, fb, pr = m["prorenata"], m["ideal"], m["feedback"], m["predict"]
    u = {k: {pen: v["utility"][pen] for pen in ("10", "100")} for k, v in m.items()}  # type: ignore[index]
    return {
        "vm<=1.05*ideal": p["vm_hours"] <= 1.05 * ideal["vm_hours"],
        "viol<=1%": p["slo_violation_pct"] <= 1.0,
        "viol<=fb/3": p["slo_violation_pct"] <= fb["slo_violation_pct"] / 3,
        "predict>prorenata vm": pr["vm_hours"] > p["vm_hours"],
        "U10 best": all(u["prorenata"]["10"] < u[c]["10"] for c in NON_IDEAL),
        "U100 best": all(u["prorenata"]["100"] < u[c]["100"] for c in NON_IDEAL),
    }


def run(series, start: str, end: str, ms: ModelSet, cfg: SimConfig, note: str  # type: ignore[no-untyped-def]
        ) -> tuple[dict, float]:
    i0, h = locate(series, pd.Timestamp(start), pd.Timestamp(end) + pd.Timedelta(hours=23))
    t0 = time.perf_counter()
    res = simulate(series, i0, h, CONTROLLERS, ms, cfg, note)
    return res.to_json()["controllers"], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--windows", type=int, default=100, help="at most this many other windows")
    ap.add_argument("--model", default=None, help="lab (default), placeholder, or a file")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    path, note = model_choice(args.model)
    ms = ModelSet.load(path)
    cfg = SimConfig() if path == PLACEHOLDER else SimConfig(
        peak_rps=round(PEAK_SERVERS * float(ms.capacity.capacity(0.95, 0.0, 0.0)), -1))
    print(f"model {path.name}, peak {cfg.peak_rps:,.0f} requests/s\n")
    series = read_series(builtin_trace_path()).cleaned()
    m, secs = run(series, "2009-03-08", "2009-03-22", ms, cfg, note)
    print(f"default run, 2 weeks x {len(CONTROLLERS)} controllers: {secs:.1f} s "
          "[target < 30 s]\n")
    print("| controller | VM-hours | violation % | U(10) | U(100) |")
    print("|---|---:|---:|---:|---:|")
    for n, v in m.items():
        print(f"| {n} | {v['vm_hours']:.1f} | {v['slo_violation_pct']:.2f} | "
              f"{v['utility']['10']:.1f} | {v['utility']['100']:.1f} |")
    c = checks(m)
    print("\n" + ", ".join(f"{k}: {'met' if ok else 'MISSED'}" for k, ok in c.items()))
    print("\n### Other two-week windows (same physics, no retuning)\n")
    keys = list(c)
    print("| window | prorenata VM-h | ideal VM-h | prorenata viol % | feedback viol % | "
          + " | ".join(keys) + " |")
    print("|---|---:|---:|---:|---:|" + "---|" * len(keys))
    totals = dict.fromkeys(keys, 0)
    n = 0
    for s in pd.date_range("2008-11-02", "2009-11-29", freq="14D"):
        if s == pd.Timestamp("2009-03-08") or n >= args.windows:
            continue
        e = s + pd.Timedelta(days=13)
        try:
            m, _ = run(series, str(s.date()), str(e.date()), ms, cfg, note)
        except Exception as exc:
            print(f"| {s.date()} | error: {exc} |")
            continue
        c = checks(m)
        n += 1
        for k, ok in c.items():
            totals[k] += int(ok)
        print(f"| {s.date()}..{e.date()} | {m['prorenata']['vm_hours']:.0f} | "
              f"{m['ideal']['vm_hours']:.0f} | {m['prorenata']['slo_violation_pct']:.2f} | "
              f"{m['feedback']['slo_violation_pct']:.2f} | "
              + " | ".join("met" if c[k] else "MISSED" for k in keys) + " |", flush=True)
    print("\nmet in " + ", ".join(f"{k}: {totals[k]}/{n}" for k in keys))


if __name__ == "__main__":
    main()
