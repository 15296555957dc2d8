"""How well `models fit` recovers a known latency law (issue 4), printed for the docs.

Usage: .venv/bin/python benchmarks/model_recovery.py [--seeds 5]
Capacity error over read ratio x migration x interference, on and between the profiled
settings, split by how much capacity is left (the low-capacity corner is the hardest).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from elastore.models import fit_capacity
from elastore.models.synthetic import LatencyLaw, sample_profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    law, slo = LatencyLaw(), 30.0
    peak = law.capacity_rps(1.0, 0, 0, slo)
    hi, lo, secs, acc = [], [], [], []
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        m = fit_capacity(sample_profile(law, seed=seed), slo)
        secs.append(time.perf_counter() - t0)
        acc.append(m.fit_error["slo_classification_accuracy_heldout"])
        for r in (1.0, 0.95, 0.8, 0.6, 0.5):
            for mig in (0.0, 2.5, 7.5, 10.0, 20.0):
                for i in (0.0, 0.3, 0.5, 0.7):
                    truth = law.capacity_rps(r, mig, i, slo)
                    if truth <= 0:
                        continue
                    err = abs(float(m.capacity(r, mig, i)) / truth - 1)
                    (hi if truth >= 0.25 * peak else lo).append(err)
    hi_a, lo_a = np.array(hi) * 100, np.array(lo) * 100
    print(f"{args.seeds} fits of {len(sample_profile(law)['p95_ms'])} samples: "
          f"{np.mean(secs):.1f} s per fit, held-out SLO accuracy {np.mean(acc):.1%}")
    print(f"capacity >= 25 % of peak ({len(hi_a)} queries): mean error {hi_a.mean():.1f} %, "
          f"p95 {np.percentile(hi_a, 95):.1f} %, max {hi_a.max():.1f} %")
    print(f"capacity <  25 % of peak ({len(lo_a)} queries): mean error {lo_a.mean():.1f} %, "
          f"max {lo_a.max():.1f} %")


if __name__ == "__main__":
    main()
