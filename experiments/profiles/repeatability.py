"""How repeatable one 60-s load point is on the lab: the same constant load (default 600
requests/s, 200 per server on 3 nodes, read ratio 0.95, a day's key table) replayed again
and again, with and without rewriting every key first (``--no-preload``) and after a
``nodetool flush`` of every node.

Why: the calibration test (tests/test_calibration_lab_k8s.py) compares the border learned
from a day with the border a sweep found 15 minutes before, on the same lab, and the two
disagreed by 40 % in three runs in a row. Two suspects: the store still warming up, and
the day's preload rewriting every key into the memtables (reads served without the
SSTables). Run as root on a machine with the lab's dependencies::

    .venv/bin/python experiments/profiles/repeatability.py [RATE] [KEYS_FROM]

It brings up its own lab (namespace ``elastore-exp``, directory ``./exp-lab``), prints
each point's window p95s and their median (the first window is the point's warm-up), and
takes the lab down. About 9 min. Results are in README.md. It writes results.json beside
this script (experiments/results.py): each point's window p95s and median, and their
spread over the points after the first. It has no target: it measures the lab's noise,
and README.md states none for it.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from elastore.lab.cassandra import lab
from elastore.lab.cassandra.nodes import ensure_jars, nodetool
from elastore.lab.sweep import constant_workload, key_table, zipf_keys

HERE = Path(__file__).resolve().parent
COLD = "warm"  # the first point, from a cold store: not part of the spread


def figures(rate: float, points: dict[str, list[float]]) -> dict[str, Any]:
    """What results.json records: every point's window p95s and the median of all but its
    first window (the point's warm-up), and the spread of those medians (and of the single
    windows) over the points after the first, the store's warm-up."""
    medians = {tag: float(np.median(p95[1:])) if len(p95) > 1 else None
               for tag, p95 in points.items()}
    warm = [m for tag, m in medians.items() if tag != COLD and m is not None]
    windows = [x for tag, p95 in points.items() if tag != COLD for x in p95[1:]]
    return {
        "rate_rps": rate,
        "median_p95_ms": medians,
        "window_p95_ms": points,
        "spread_median_p95_ms_min": min(warm) if warm else None,
        "spread_median_p95_ms_max": max(warm) if warm else None,
        "spread_median_p95_max_over_min": max(warm) / min(warm) if warm and min(warm) > 0
        else None,
        "spread_window_p95_ms_min": min(windows) if windows else None,
        "spread_window_p95_ms_max": max(windows) if windows else None,
        "points_in_spread": len(warm),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rate", nargs="?", type=float, default=600.0,
                    help="constant load, requests/s over the 3 nodes (default 600)")
    ap.add_argument("keys_from", nargs="?", type=Path, default=None,
                    help="a workload JSON whose key table to use (default: the Zipf keys)")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parent))  # experiments/results.py
    from results import exit_code, git_state, record, summary

    git = git_state()
    rate = args.rate
    keys = key_table(args.keys_from) if args.keys_from is not None else zipf_keys()
    points: dict[str, list[float]] = {}
    work = Path("exp-lab").resolve()
    d = work / "lab"
    os.environ["ELASTORE_LAB_DIR"] = str(d)
    wl = work / "const.json"
    work.mkdir(parents=True, exist_ok=True)
    constant_workload(rate, 0.95, 60, 10, keys).save(wl)
    lab.up(3, "256M", d=d, namespace="elastore-exp")
    try:
        state = lab.LabState.load(d)
        assert state is not None
        lib = ensure_jars()

        def point(tag: str, preload: bool) -> None:
            out = work / f"{tag}.csv"
            argv = [sys.executable, "-m", "elastore", "load", "run", str(wl), "--out", str(out)]
            if not preload:
                argv.append("--no-preload")
            subprocess.run(argv, check=True, capture_output=True)
            p95 = [float(r["p95_ms"]) for r in csv.DictReader(out.open())]
            points[tag] = p95
            print(f"{tag}: p95 {' '.join(f'{x:.0f}' for x in p95)} ms, median of the last "
                  f"{len(p95) - 1}: {np.median(p95[1:]):.0f} ms", flush=True)

        point(COLD, True)
        for k in range(2):
            point(f"A{k} preload", True)
            for n in state.nodes:
                nodetool(state.node_ns(n), lib, n.spec.jmx_port, "flush")
            print("flushed every node", flush=True)
            time.sleep(5)
            point(f"B{k} flushed, no preload", False)
            point(f"B{k} no preload again", False)
    finally:
        lab.down(d)
    ok = record(HERE, "profiles/repeatability", figures(rate, points), [], git=git,
                notes="No target: this measures how much one load point's p95 varies on "
                      "the lab, and experiments/profiles/README.md states no bound for it "
                      "(the 15 % sweep-against-day agreement it explains is the calibration "
                      "test's, tests/test_calibration_lab_k8s.py).")
    print(summary(HERE / "results.json"), flush=True)
    sys.exit(exit_code(ok))


if __name__ == "__main__":
    main()
