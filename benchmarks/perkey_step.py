"""Per-key update-and-forecast step for 100,000 keys (issue 3 target: < 1 s on 2 cores).

Usage: .venv/bin/python benchmarks/perkey_step.py [--keys 100000] [--steps 200]
Synthetic heavy-tailed keys with daily and weekly cycles; the timing includes the refit
that happens every 24 steps, amortised, and the slowest step is printed too.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from elastore.predictor.perkey import PerKeyProRenaTa


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--horizon", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    k = args.keys
    level = 1e4 * (np.arange(1, k + 1) ** -1.1)  # Zipf-like popularity
    hours = 600 + args.steps
    t = np.arange(hours)[:, None]
    shape = 1 + 0.4 * np.sin(2 * np.pi * t / 24) + 0.1 * np.sin(2 * np.pi * t / 168)
    data = rng.poisson(level[None, :] * shape).astype(np.float64)
    model = PerKeyProRenaTa(args.horizon)
    t0 = time.perf_counter()
    model.fit(data[:600])
    fit_s = time.perf_counter() - t0
    times = []
    for i in range(600, hours):
        s = time.perf_counter()
        model.update(data[i])
        model.forecast()
        times.append(time.perf_counter() - s)
    arr = np.array(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"per-key step, {k:,} keys, H={args.horizon}: mean {arr.mean() * 1e3:.1f} ms, "
          f"p50 {np.median(arr) * 1e3:.1f} ms, max {arr.max() * 1e3:.1f} ms (a refit step); "
          f"initial fit {fit_s:.2f} s; peak RSS {rss:,.0f} MiB  [target < 1 s per step]")


if __name__ == "__main__":
    main()
