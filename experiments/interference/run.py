"""The interference index against the store's slowdown, on the lab's real Cassandra: the
``make lab-check`` measurement behind ``index_slowdown_spearman`` (issues 17 and 40).

One command: a lab of 3 nodes on one CPU (``elastore lab up --store-cpus``), the store
alone and beside each stress-ng co-runner kind at rising levels, at two loads
(``elastore lab profile-interference``; the load generator and Prometheus on the other
CPU), then the lab is taken down. The sweep's points and summary go beside this file
(``points.csv``, ``points.json``); ``results.json`` holds the rank correlation of index and
slowdown over the co-runner points, with its target, and the script exits 1 when it is
missed. The profile the simulator quotes stays in ``experiments/profiles/`` (its README
has the first two sweeps).

    sudo .venv/bin/python experiments/interference/run.py            # ~31 min
    sudo .venv/bin/python experiments/interference/run.py --point-seconds 40   # ~60 min

A point's p95 is the median of its 5-s windows' p95s; 20-s points put it at four windows,
which is what made the second sweep's figure (0.776 on the p95, 0.810 on the median)
noisy. ``--point-seconds`` trades breadth for that.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # experiments/results.py

from results import Target, exit_code, git_state, record, summary  # noqa: E402

TARGET = Target("index_slowdown_spearman", ">=", 0.8,
                "Spearman rank correlation of the measured index with the slowdown (a "
                "point's p95 over its load's median baseline), over the co-runner points",
                "issue 17 ('index_slowdown_spearman >= 0.8'), restated by issue 40")


def _elastore(args: list[str], lab_dir: Path, timeout_s: float) -> str:
    env = dict(os.environ, ELASTORE_LAB_DIR=str(lab_dir))
    print(f"$ elastore {' '.join(args)}", flush=True)
    res = subprocess.run([sys.executable, "-m", "elastore", *args], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, text=True, timeout=timeout_s, check=False)
    print(res.stdout, end="", flush=True)
    if res.returncode != 0:
        raise SystemExit(f"elastore {' '.join(args[:2])} failed (exit {res.returncode})")
    return res.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loads", default="400,800", help="cluster req/s (default: %(default)s)")
    ap.add_argument("--kinds", default="cpu,stream,cache,matrix,disk")
    ap.add_argument("--levels", default="1,2,3,4")
    ap.add_argument("--point-seconds", type=float, default=20.0)
    ap.add_argument("--warmup-seconds", type=float, default=90.0)
    ap.add_argument("--store-cpus", default="1", help="the CPUs the nodes and co-runners "
                    "share (the load generator takes the others)")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("the lab needs root (network namespaces, cgroups)")
    git = git_state(ROOT)  # before this run rewrites its own files
    args.out.mkdir(parents=True, exist_ok=True)
    points = args.out / "points.csv"
    for f in (points, points.with_suffix(".json")):
        f.unlink(missing_ok=True)  # a fresh sweep, never a resumed one
    lab_dir = Path(tempfile.mkdtemp(prefix="elastore-interference-"))
    try:
        _elastore(["lab", "up", "--nodes", "3", "--store-cpus", args.store_cpus], lab_dir, 900)
        _elastore(["lab", "profile-interference", "--out", str(points), "--loads", args.loads,
                   "--kinds", args.kinds, "--levels", args.levels,
                   "--point-seconds", f"{args.point_seconds:g}",
                   "--warmup-seconds", f"{args.warmup_seconds:g}"], lab_dir, 4 * 3600)
    finally:
        subprocess.run([sys.executable, "-m", "elastore", "lab", "down"], cwd=ROOT,
                       env=dict(os.environ, ELASTORE_LAB_DIR=str(lab_dir)), check=False)
    s = json.loads(points.with_suffix(".json").read_text())
    figures = {k: s.get(k) for k in ("index_slowdown_spearman",
                                     "index_slowdown_spearman_with_baselines",
                                     "index_slowdown_spearman_p50")}
    figures.update(point_seconds=args.point_seconds, loads=args.loads, kinds=args.kinds,
                   levels=args.levels, per_kind=s.get("kinds"))
    ok = record(args.out, "interference", figures, [TARGET], git=git,
                notes="simulated nowhere: the lab's real Cassandra beside real stress-ng "
                      "co-runners; points.csv and points.json hold every point")
    print(summary(args.out / "results.json"))
    return exit_code(ok)


if __name__ == "__main__":
    sys.exit(main())
