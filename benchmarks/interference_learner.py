"""How well the interference learner (elastore.hubbub.effect) recovers a known g(i),
against the issue's suggested method, on synthetic measurements of a known M/M/1 law.

    .venv/bin/python benchmarks/interference_learner.py

The store: elastore.models.synthetic.LatencyLaw without interference, tabulated as a capacity
model (latency clipped at 4 x the 30 ms SLO, as a fit is); under index i it serves L as it
serves L g(i). The p95 carries lognormal noise. Both methods invert the same curve and skip
the same observations; they differ in what they average and how:

* ``suggested``: per hard bin of width 0.1, an exponentially weighted mean of ln(L_eff / L)
  with 3 pseudo-observations at ln g_def(centre), unweighted, at the bin's centre; cumulative
  max; g(0) = 1.
* ``elastore``: the residual against g_def = 1/(1-i) on soft knots 0.1 apart, weighted by the
  curve's elasticity where the observation is expected to land and by its nearness to the
  SLO, moved from where it was measured to its knot along the fitted shape, a shape-moved
  prior for each knot, isotonic regression (see the module's docstring).

Scenarios: ``dense`` (3000 observations, indexes uniform on [0, 0.9], utilisation 0.2-0.95,
10 % noise; error over [0, 0.8]); ``clustered`` (150 observations, 20 % noise, utilisation
0.1-0.7, indexes near 0.18, 0.33, 0.62; error there; mean over 40 seeds); ``steady`` (one
index, 0.5, exactly on a knot, one observation a period at a constant load at 80 % of the
effective capacity, 40 periods, 10 % noise; the operator's common case; mean over 40 seeds).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from elastore.hubbub.effect import (
    InterferenceEffect,
    InterferenceLearner,
    log_definition,
)
from elastore.models.capacity import CLIP_X_SLO, CapacityModel
from elastore.models.synthetic import LatencyLaw

SLO = 30.0
LAW = LatencyLaw()
Law = Callable[[np.ndarray], np.ndarray]
TRUTHS: dict[str, Law] = {
    "1/(1-i)": lambda i: 1 / (1 - i),
    "(1/(1-i))^0.8": lambda i: (1 / (1 - i)) ** 0.8,
    "1/(1-0.7i)": lambda i: 1 / (1 - 0.7 * i),
    "1+2i^2": lambda i: 1 + 2 * i ** 2,
}


def lat0(load: np.ndarray, r: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.asarray(LAW.latency_ms(load, r, m, 0.0))


def base_model() -> CapacityModel:
    top = 2.1 * LAW.capacity_rps(1.0, 0, 0, SLO)
    load = np.linspace(0, top, 48)
    rr = np.array([0.5, 0.7, 0.9, 1.0])
    mig = np.array([0.0, 5, 10, 15, 20])
    lg, rg, mg = np.meshgrid(load, rr, mig, indexing="ij")
    lat = np.minimum(lat0(lg, rg, mg), CLIP_X_SLO * SLO)
    return CapacityModel(SLO, 95, load, rr, mig, np.array([0.0]), np.log(lat)[..., None])


BASE = base_model()


def suggested(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    bins, n0, memory = 10, 3.0, 200.0
    z, _, why = InterferenceLearner()._residuals(x, y, BASE, InterferenceEffect.definition())
    c = (np.arange(bins) + 0.5) / bins
    w, m = np.zeros(bins), np.zeros(bins)
    for k in range(len(y)):
        if why[k] != "used":
            continue
        raw = z[k] + float(log_definition(x[k, 3]))
        b = min(int(x[k, 3] * bins), bins - 1)
        w[b] = (1 - 1 / memory) * w[b] + 1
        m[b] += (raw - m[b]) / w[b]
    post = (w * m + n0 * log_definition(c)) / (w + n0)
    v = np.maximum.accumulate(np.maximum(np.concatenate([[0.0], post]), 0.0))
    knots = np.concatenate([[0.0], c])
    return lambda u: np.exp(np.interp(u, knots, v))


def elastore(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    learner = InterferenceLearner()
    for k in range(len(y)):  # one observation a period, as the operator feeds it
        learner.partial_fit(x[k], y[k], base=BASE)
    return learner.predict


def saturation(r: np.ndarray, m: np.ndarray) -> np.ndarray:
    return (1 - m / LAW.m_full_mibps) / (np.asarray(LAW.service_ms(r, 0.0)) / 1000)


def dense(g: Law, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 3000
    r, m = rng.choice([0.5, 0.7, 0.9, 1.0], n), rng.choice([0.0, 5.0], n)
    i = rng.uniform(0, 0.9, n)
    load = rng.uniform(0.2, 0.95, n) * saturation(r, m) / g(i)
    return np.column_stack([load, r, m, i]), lat0(load * g(i), r, m) * np.exp(
        rng.normal(0, 0.1, n))


def clustered(g: Law, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 150
    r, m = rng.choice([0.9, 1.0], n), np.zeros(n)
    i = np.clip(rng.choice([0.18, 0.33, 0.62], n) + rng.normal(0, 0.02, n), 0, 1)
    load = rng.uniform(0.1, 0.7, n) * saturation(r, m) / g(i)
    return np.column_stack([load, r, m, i]), lat0(load * g(i), r, m) * np.exp(
        rng.normal(0, 0.2, n))


def steady(g: Law, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 40
    r, m, i = np.full(n, 0.95), np.zeros(n), np.full(n, 0.5)
    load = 0.8 * saturation(r, m) / g(i)
    return np.column_stack([load, r, m, i]), lat0(load * g(i), r, m) * np.exp(
        rng.normal(0, 0.1, n))


def main() -> None:
    u = np.linspace(0, 0.8, 81)
    print("dense: max |g error| on [0, 0.8] (mean)")
    for name, g in TRUTHS.items():
        x, y = dense(g, 1)
        out = []
        for method in (suggested, elastore):
            e = np.abs(method(x, y)(u) / g(u) - 1)
            out.append(f"{method.__name__} {e.max():.1%} ({e.mean():.1%})")
        print(f"  {name:14s} " + "   ".join(out))
    for scen, at in ((clustered, np.array([0.18, 0.33, 0.62])), (steady, np.array([0.5]))):
        print(f"{scen.__name__}: mean |g error| at {[float(a) for a in at]} over 40 seeds")
        for name, g in TRUTHS.items():
            out = []
            for method in (suggested, elastore):
                errs = [np.abs(method(*scen(g, s))(at) / g(at) - 1) for s in range(40)]
                out.append(f"{method.__name__} " + ", ".join(
                    f"{v:.1%}" for v in np.mean(errs, axis=0)))
            print(f"  {name:14s} " + "   ".join(out))


if __name__ == "__main__":
    main()
