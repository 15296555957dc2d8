"""How far the online learner's border lands when the store's latency curve has a shape the
prior lacks (issue 18), printed as a Markdown table, never asserted.

The prior is the built-in lab profile at 0.5 x its capacity (the CRD's default prior). The
store is the same profile with another shape and the same border: latency ``SLO * (lat /
SLO) ** p`` (p > 1: flat below the border, then a steep knee, as the lab's Cassandra on a
fast machine measured; p < 1: a slow rise). Each day: 150 per-node readings at loads
uniform in 0.3-1.05 x the true border, 10 % log-normal noise, five seeds. Columns: the
global fit (every bin alike, ``local_bandwidth=0``) and the default local fit (bins
weighted by how near the border their load is), the error of the median border in %.

Usage: .venv/bin/python benchmarks/learner_shapes.py
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from elastore.models.bundle import ModelSet
from elastore.models.online import CapacityLearner, scaled
from elastore.resources import builtin_model

POWERS = (0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 2.5, 3.0)
SEEDS = range(5)
R = 0.95


def main() -> None:
    base = ModelSet.load(builtin_model("lab")).capacity
    prior = scaled(base, 0.5)
    ls = math.log(base.slo_ms)
    t0 = time.perf_counter()
    print("| shape power | true border (req/s per server) | global fit: error % per seed | "
          "local fit: error % per seed | local fit error (status fitErrorPct), median |")
    print("|---:|---:|---|---|---:|")
    for p in POWERS:
        store = replace(base, log_latency=ls + p * (base.log_latency - ls),
                        capacity_table=np.zeros(0))
        c = float(store.capacity(R, 0.0, 0.0))
        errs: dict[float, list[float]] = {0.0: [], -1.0: []}
        fit_err = []
        for seed in SEEDS:
            rng = np.random.default_rng(seed)
            loads = rng.uniform(0.3, 1.05, 150) * c
            lat = store.latency_ms(loads, R, 0.0, 0.0) * np.exp(rng.normal(0, 0.1, len(loads)))
            x = np.column_stack([loads, np.full(len(loads), R), np.zeros(len(loads)),
                                 np.zeros(len(loads))])
            for key, learner in ((0.0, CapacityLearner(local_bandwidth=0.0)),
                                 (-1.0, CapacityLearner())):
                cal = learner.fit(x, lat, prior=prior).calibrate(prior)
                errs[key].append(100 * (cal.capacity_rps / c - 1))
                if key < 0 and cal.fit_error_pct is not None:
                    fit_err.append(cal.fit_error_pct)
        print(f"| {p:g} | {c:.1f} | {' '.join(f'{e:+.1f}' for e in errs[0.0])} | "
              f"{' '.join(f'{e:+.1f}' for e in errs[-1.0])} | "
              f"{float(np.median(fit_err)):.1f} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
