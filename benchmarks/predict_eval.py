"""Predictor targets (issue 3), printed, not asserted.

* the headline: all-projects trace 2009-01-01 .. 2009-06-30, 4 weeks warm-up, H = 1 and 3,
  every method, with seconds (target: all methods over 6 months < 60 s);
* the same margins on *other* data with no retuning: every calendar month of the shared
  file (each with the 4 weeks before it as warm-up) and the per-page file's aggregate;
* per-key vs aggregate on the per-page file.

Usage: .venv/bin/python benchmarks/predict_eval.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from elastore.predictor.evaluate import evaluate
from elastore.predictor.perkey import evaluate_per_key
from elastore.predictor.registry import METHODS
from elastore.traces import builtin_trace_path, read_series

REPO = Path(__file__).resolve().parent.parent
PAGES = REPO.parent / "shared" / "traces" / "wikipedia" / "en-2016-01-pages-hourly.csv.gz"
WARMUP = 672


def headline() -> None:
    s = read_series(builtin_trace_path()).window(
        pd.Timestamp("2009-01-01"), pd.Timestamp("2009-06-30 23:00")).cleaned()
    for h in (1, 3):
        t0 = time.perf_counter()
        scores, _ = evaluate(list(METHODS.items()), s.values, h, WARMUP)
        total = time.perf_counter() - t0
        print(f"\n### 2009-01-01 .. 2009-06-30, H={h} ({scores['prorenata'].points} scored h)\n")
        print("| method | sMAPE % | MAPE % | RMSE (req/h) | MASE | seconds |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, sc in sorted(scores.items(), key=lambda kv: kv[1].smape):
            print(f"| {name} | {sc.smape:.3f} | {sc.mape:.3f} | {sc.rmse:,.0f} | {sc.mase:.3f} "
                  f"| {sc.seconds:.2f} |")
        hw = scores["holt-winters"].smape
        hwm = scores["holt-winters-damped-mul"].smape
        pr = scores["prorenata"].smape
        print(f"\nall {len(scores)} methods: {total:.1f} s. prorenata vs holt-winters: "
              f"{100 * (1 - pr / hw):.1f} % lower; vs holt-winters-damped-mul: "
              f"{100 * (1 - pr / hwm):.1f} % lower")


def months(quick: bool) -> None:
    full = read_series(builtin_trace_path()).cleaned()
    names = ["prorenata", "holt-winters", "holt-winters-damped-mul", "sarima",
             "prorenata-paper", "seasonal-naive-168"]
    starts = pd.date_range("2008-11-01", "2009-11-01", freq="MS")
    if quick:
        starts = starts[::4]
    for h in (1, 3):
        print(f"\n### Every month of the shared file, H={h} (4 weeks warm-up before each)\n")
        print("| month | " + " | ".join(names) + " | prorenata vs HW | vs HW-damped-mul |")
        print("|---|" + "---:|" * (len(names) + 2))
        wins = []
        for m in starts:
            end = m + pd.offsets.MonthEnd(0) + pd.Timedelta(hours=23)
            s = full.window(m - pd.Timedelta(hours=WARMUP), end)
            scores, _ = evaluate([(n, METHODS[n]) for n in names], s.values, h, WARMUP)
            sm = {n: scores[n].smape for n in names}
            gain = 100 * (1 - sm["prorenata"] / sm["holt-winters"])
            gain2 = 100 * (1 - sm["prorenata"] / sm["holt-winters-damped-mul"])
            wins.append((gain, gain2))
            print(f"| {m:%Y-%m} | " + " | ".join(f"{sm[n]:.2f}" for n in names)
                  + f" | {gain:.1f} % | {gain2:.1f} % |", flush=True)
        g = np.array(wins)
        print(f"\nH={h}: prorenata beats holt-winters by >= 25 % in "
              f"{int((g[:, 0] >= 25).sum())}/{len(g)} months (median {np.median(g[:, 0]):.1f} %);"
              f" beats holt-winters-damped-mul in {int((g[:, 1] > 0).sum())}/{len(g)} "
              f"(median {np.median(g[:, 1]):.1f} %)")


def per_page() -> None:
    if not PAGES.exists():
        print(f"\n(per-page file not found at {PAGES}; skipped)")
        return
    s = read_series(PAGES).cleaned()
    warm = 552  # 23 days of the 31: the file is one month
    names = ["prorenata", "holt-winters", "holt-winters-damped-mul", "sarima",
             "seasonal-naive-168", "persistence"]
    for h in (1, 3):
        scores, _ = evaluate([(n, METHODS[n]) for n in names], s.values, h, warm)
        pk, _ = evaluate_per_key(PAGES, s, h, warm, None, None)
        scores["prorenata-per-key (sum of 81k pages)"] = pk
        print(f"\n### Per-page file, aggregate of all pages, H={h}, warm-up {warm} h "
              f"({pk.points} scored h)\n")
        print("| method | sMAPE % | MAPE % | seconds |")
        print("|---|---:|---:|---:|")
        for name, sc in sorted(scores.items(), key=lambda kv: kv[1].smape):
            print(f"| {name} | {sc.smape:.3f} | {sc.mape:.3f} | {sc.seconds:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="every 4th month only")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    headline()
    months(args.quick)
    per_page()


if __name__ == "__main__":
    main()
