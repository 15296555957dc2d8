"""CPU of one period's forecast, fitted from scratch every period against kept between
periods (:class:`elastore.operator.policyloop.WarmForecast`), for two policies:

* ``scale``: the policy of ``benchmarks/operator_scale.py`` (persistence, 30-s step and
  period, the default 24-h lookahead: a 168-step path, 336 calibration steps);
* ``default``: the CRD's defaults (prorenata, hourly steps, a 600-s period).

The load is synthetic (a daily sine with a weekly swing and noise, requests/s); the
history is what Prometheus's source returns: a fixed number of whole steps ending on the
step grid. Prints the CPU ms per period, and how far the kept forecast's median path and
p90 scenario are from the fresh one's at the last period.

    .venv/bin/python benchmarks/forecast_period.py [--periods 40]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

from elastore.operator import policyloop
from elastore.operator.metrics import Snapshot, history_end
from elastore.operator.spec import PolicySpec, parse

BASE: dict[str, Any] = {
    "target": {"name": "store", "replicationFactor": 3},
    "replicas": {"min": 3, "max": 30},
    "slo": {"latencyMs": 30},
    "metrics": {"prometheus": {"url": "http://127.0.0.1:1"}},
}
CASES: dict[str, dict[str, Any]] = {
    "scale": {"controlPeriod": "30s",
              "prediction": {"method": "persistence", "horizon": "30s", "step": "30s"}},
    "default": {},
}


def load(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    day, week = 86400.0, 7 * 86400.0
    base = 800 + 300 * np.sin(2 * math.pi * t / day) + 100 * np.sin(2 * math.pi * t / week)
    return np.maximum(base * (1 + 0.03 * rng.standard_normal(t.shape)), 0.0)


def run(spec: PolicySpec, periods: int, kept: bool) -> tuple[float, float, Any]:
    """(CPU ms of the first period, mean CPU ms of the others, the last forecast)."""
    step = spec.prediction_step_s
    steps = policyloop.history_steps(spec.prediction_method, policyloop.path_steps(spec),
                                     spec.calibration_steps)
    rng = np.random.default_rng(7)
    t0 = 1_764_000_000.0 + 17.0
    last = history_end(t0 + spec.control_period_s * periods, step)
    grid = last - step * np.arange(steps + math.ceil(spec.control_period_s * periods / step),
                                   -1, -1)
    values = dict(zip(grid.tolist(), load(grid, rng).tolist(), strict=True))
    warm = policyloop.WarmForecast() if kept else None
    cpu: list[float] = []
    f = None
    for k in range(periods):
        at = t0 + spec.control_period_s * k
        end = history_end(at, step)
        hist = np.array([values[end - step * j] for j in range(steps - 1, -1, -1)])
        snap = Snapshot(at_s=at, load_rps=hist[-1], read_ratio=0.95, data_bytes=1e9,
                        migration_mibps=None, history_rps=hist, step_s=step,
                        history_end_s=end)
        c = time.process_time()
        f = policyloop.forecast(spec, snap, warm)
        cpu.append((time.process_time() - c) * 1000)
    return cpu[0], float(np.mean(cpu[1:])), f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--periods", type=int, default=40)
    args = ap.parse_args()
    print(f"CPU ms per period over {args.periods} periods (the first, then the mean of the rest)")
    print(f"{'policy':8} {'from scratch':>16} {'kept':>16}  kept vs fresh at the last period")
    for name, extra in CASES.items():
        spec = parse({**BASE, **extra})
        f0, f1, fresh = run(spec, args.periods, kept=False)
        k0, k1, kept = run(spec, args.periods, kept=True)
        assert fresh is not None and kept is not None
        if fresh.path is not None and kept.path is not None:
            med = np.max(np.abs(kept.path.median_rps / fresh.path.median_rps - 1))
            hi = np.max(np.abs(kept.path.scenarios_rps[-2] / fresh.path.scenarios_rps[-2] - 1))
            diff = f"median path within {med:.2%}, p99 scenario within {hi:.2%}"
        else:
            diff = f"forecast {kept.rps:.1f} vs {fresh.rps:.1f} req/s"
        print(f"{name:8} {f0:7.1f} / {f1:6.1f} {k0:7.1f} / {k1:6.1f}  {diff}", flush=True)


if __name__ == "__main__":
    main()
