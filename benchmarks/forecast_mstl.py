"""Forecast targets of issue 21, printed, not asserted: prorenata against statsforecast's
MSTL (and Holt-Winters) at every horizon the planner uses.

Protocol: ``predict evaluate``'s (rolling origin, :func:`elastore.predictor.evaluate.
evaluate`), on every calendar month of the shared all-projects file (each with the warm-up
hours before it) and on the per-page file's aggregate (one month: the hours after the
warm-up are scored, 72 with 672 h of warm-up), at H = 1, 3, 6 and 24, with 4 weeks
of warm-up (672 h) and with 2 (336 h). The targets:

* prorenata's sMAPE <= 0.9 x MSTL's at every H, in the median window;
* never worse than 1.0 x MSTL in any window;
* still >= 20 % better than Holt-Winters at H = 1;
* with 2 weeks of history, still <= 1.0 x MSTL.

Usage: .venv-forecast/bin/python benchmarks/forecast_mstl.py [--quick] [--jobs N] [--json F]
(statsforecast needs pandas < 3: ``make test`` builds .venv-forecast with elastore[forecast];
about 8 min with --jobs 2 on 2 cores, --quick a third)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from elastore.predictor.evaluate import evaluate
from elastore.predictor.registry import make
from elastore.traces import builtin_trace_path, read_series

REPO = Path(__file__).resolve().parent.parent
PAGES = REPO.parent / "shared" / "traces" / "wikipedia" / "en-2016-01-pages-hourly.csv.gz"
METHODS = ("prorenata", "prorenata-weighted", "prorenata-filters", "mstl", "mstl-log",
           "holt-winters")
#: the MSTL variants (issue 40): the baseline at each H and history is the one with the
#: lower median sMAPE over the windows (chosen per H, never per window)
MSTLS = ("mstl", "mstl-log")
HORIZONS = (1, 3, 6, 24)
WARMUPS = (672, 336)
#: prorenata; without its reactive correction; the default before issue 21 (filters only)
CANDIDATES = ("prorenata", "prorenata-weighted", "prorenata-filters")


def _task(window: str, warmup: int, horizon: int) -> dict[str, Any]:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    if window == "pages":
        values = read_series(PAGES).cleaned().values  # one month: what follows warm-up
    else:
        full = read_series(builtin_trace_path()).cleaned()
        m = pd.Timestamp(window)
        end = m + pd.offsets.MonthEnd(0) + pd.Timedelta(hours=23)
        values = full.window(m - pd.Timedelta(hours=warmup), end).values
    scores, _ = evaluate([(n, lambda n=n: make(n)) for n in METHODS], values, horizon,
                         warmup)
    return {"window": window, "warmup": warmup, "horizon": horizon,
            "smape": {n: scores[n].smape for n in METHODS},
            "seconds": {n: scores[n].seconds for n in METHODS}}


def report(results: list[dict[str, Any]], windows: list[str]) -> None:
    """The issue's tables: per candidate (:data:`CANDIDATES`, those the results hold), its
    sMAPE over MSTL's per window and H, and the summary against the targets."""
    by = {(r["window"], r["warmup"], r["horizon"]): r["smape"] for r in results}
    have = [m for m in MSTLS if m in results[0]["smape"]]
    best = {(wu, h): min(have, key=lambda m: float(np.median(
        [by[(w, wu, h)][m] for w in windows]))) for wu in WARMUPS for h in HORIZONS}
    print("\n### The MSTL baseline: median sMAPE of each variant (the lower is the baseline)\n")
    print("| warm-up | H | " + " | ".join(have) + " | baseline |")
    print("|---:|---:|" + "---:|" * len(have) + "---|")
    for wu in WARMUPS:
        for h in HORIZONS:
            med = [float(np.median([by[(w, wu, h)][m] for w in windows])) for m in have]
            print(f"| {wu} | {h} | " + " | ".join(f"{v:.3f}" for v in med) +
                  f" | {best[(wu, h)]} |")
    for w, wu, h in list(by):
        by[(w, wu, h)] = {**by[(w, wu, h)], "MSTL": by[(w, wu, h)][best[(wu, h)]]}
    for cand in [c for c in CANDIDATES if c in results[0]["smape"]]:
        for wu in WARMUPS:
            print(f"\n### {cand} / MSTL, sMAPE ratio, warm-up {wu} h (below 1: {cand} "
                  "better)\n")
            print("| window | " + " | ".join(f"H={h}" for h in HORIZONS) + " |")
            print("|---|" + "---:|" * len(HORIZONS))
            for w in windows:
                cells = [f"{by[(w, wu, h)][cand] / by[(w, wu, h)]['MSTL']:.3f}"
                         for h in HORIZONS]
                print(f"| {w[:7]} | " + " | ".join(cells) + " |")
            print()
            print(f"| H | median {cand} | median MSTL | median ratio | worst ratio | windows "
                  "<= 0.9 | windows <= 1.0 | vs Holt-Winters (median) |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for h in HORIZONS:
                pr = np.array([by[(w, wu, h)][cand] for w in windows])
                ms = np.array([by[(w, wu, h)]["MSTL"] for w in windows])
                hw = np.array([by[(w, wu, h)]["holt-winters"] for w in windows])
                ratio = pr / ms
                print(f"| {h} | {np.median(pr):.3f} | {np.median(ms):.3f} | "
                      f"{np.median(ratio):.3f} | {ratio.max():.3f} | "
                      f"{int((ratio <= 0.9).sum())}/{len(ratio)} | "
                      f"{int((ratio <= 1.0).sum())}/{len(ratio)} | "
                      f"{100 * np.median(1 - pr / hw):.1f} % lower |")
    secs = {n: sum(r["seconds"][n] for r in results) for n in results[0]["seconds"]}
    print(f"\ncompute, summed over all {len(results)} runs: "
          + ", ".join(f"{n} {v:.0f} s" for n, v in secs.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="every 4th month only")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--json", type=Path, default=None, help="also write every score here")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="print the tables of an earlier --json run, computing nothing")
    args = ap.parse_args()
    if args.from_json is not None:
        results = json.loads(args.from_json.read_text())
        seen = sorted({str(r["window"]) for r in results}, key=lambda w: (w == "pages", w))
        report(results, seen)
        return
    months = [f"{m:%Y-%m-01}" for m in pd.date_range("2008-11-01", "2009-12-01", freq="MS")]
    if args.quick:
        months = months[::4]
    windows = [*months, *(["pages"] if PAGES.exists() else [])]
    if not PAGES.exists():
        print(f"(per-page file not found at {PAGES}: its aggregate is left out)")
    tasks = [(w, wu, h) for wu in WARMUPS for h in HORIZONS for w in windows]
    t0 = time.perf_counter()
    results = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_task, *t) for t in tasks]
        for k, f in enumerate(as_completed(futures), 1):
            r = f.result()
            results.append(r)
            print(f"[{k}/{len(tasks)}] {r['window']} warm-up {r['warmup']} h, H={r['horizon']}: "
                  + ", ".join(f"{n} {v:.3f}" for n, v in r["smape"].items())
                  + f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    report(results, windows)
    print(f"wall {time.perf_counter() - t0:.0f} s on {args.jobs} workers")


if __name__ == "__main__":
    main()
