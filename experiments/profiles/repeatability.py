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
takes the lab down. About 9 min. Results are in README.md.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from elastore.lab import lab
from elastore.lab.cassandra import ensure_jars, nodetool
from elastore.lab.profile import constant_workload, key_table, zipf_keys


def main() -> None:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
    keys = key_table(Path(sys.argv[2])) if len(sys.argv) > 2 else zipf_keys()
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
            print(f"{tag}: p95 {' '.join(f'{x:.0f}' for x in p95)} ms, median of the last "
                  f"{len(p95) - 1}: {np.median(p95[1:]):.0f} ms", flush=True)

        point("warm", True)
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


if __name__ == "__main__":
    main()
