"""Planning one control period for a 1,000-server cluster (issue 4 target: < 10 ms).

Usage: .venv/bin/python benchmarks/planner.py [--servers 1000] [--repeats 200]
Uses a model fitted to the documented placeholder law; times scale-out, scale-in (node by
node, the costly case) and steady plans, and prints the median and worst.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from elastore.models import ModelSet, fit_capacity
from elastore.models.bandwidth import fit_bandwidth
from elastore.models.synthetic import LatencyLaw, bandwidth_profile, sample_profile
from elastore.planner import Observation, PlannerConfig, plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    ms = ModelSet(fit_capacity(sample_profile(LatencyLaw()), 30.0),
                  fit_bandwidth(bandwidth_profile()))
    n = args.servers
    cfg = PlannerConfig(min_replicas=3, max_replicas=4 * n, window_s=600,
                        total_bandwidth_mbit=1000.0)
    per = float(ms.capacity.capacity(0.95, 0, 0)) * 0.9
    cases = {
        "steady": (n * per, n * per),
        "scale-out 5 %": (n * per, 1.05 * n * per),
        "scale-in 5 %": (n * per, 0.95 * n * per),
    }
    for name, (load, forecast) in cases.items():
        times = []
        for k in range(args.repeats):
            o = Observation(now_s=float(k), replicas=n, load_rps=load, forecast_rps=forecast,
                            predicted_now_rps=load * 0.98, read_ratio=0.95,
                            data_bytes=n * 50 * 2**30, interference=0.1)
            t0 = time.perf_counter()
            p = plan(o, cfg, ms)
            times.append(time.perf_counter() - t0)
        arr = np.array(times) * 1e3
        print(f"plan {name:<14} {n:,} servers: median {np.median(arr):.2f} ms, "
              f"p99 {np.percentile(arr, 99):.2f} ms, {len(p.actions)} actions "
              f"[target < 10 ms]")


if __name__ == "__main__":
    main()
