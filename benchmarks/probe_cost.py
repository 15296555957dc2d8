"""The interference probe's own CPU cost (target: < 1 % of one core), on this machine's real
/proc and /sys/fs/cgroup (root: it creates pod-like cgroups and removes them after).

It creates ``--pods`` kubelet-like pod directories (``.../kubepods/burstable/pod<uid>``) in
the cgroup v2 tree (and the v1 ``cpu`` tree, when there is one, so throttling is read
there too, as on a hybrid node), then:

1. runs the probe as the agent does, one :meth:`Probe.observe` per ``--period`` for
   ``--seconds`` (default 5 s, 60 s), and reports the process's CPU time over that wall
   time (``time.process_time``: user + system of this process);
2. times ``--snapshots`` observations back to back, for the cost of one (the first run has
   too few to resolve it), and one full walk of the cgroup trees (done once per new pod,
   and at most every 30 s while a pod's cgroup is not found).

    sudo .venv/bin/python benchmarks/probe_cost.py [--seconds 60] [--period 5] [--pods 5]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path

from elastore.hubbub.probe import CgroupLayout, PodRef, Probe

CG = Path("/sys/fs/cgroup")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--period", type=float, default=5.0)
    ap.add_argument("--pods", type=int, default=5)
    ap.add_argument("--snapshots", type=int, default=2000)
    args = ap.parse_args()
    layout = CgroupLayout.detect(CG)
    if layout.v2 is None:
        raise SystemExit("no cgroup v2 hierarchy: nothing for the probe to read per pod")
    top = f"elastore-probe-bench-{os.getpid()}"
    pods = [PodRef("bench", f"cass-{k}", str(uuid.uuid4())) for k in range(args.pods)]
    made: list[Path] = []
    try:
        for p in pods:
            for root in (layout.v2, layout.v1_cpu):
                if root is not None:
                    d = root / top / "kubepods" / "burstable" / f"pod{p.uid}"
                    d.mkdir(parents=True)
                    made.append(d)
        probe = Probe(Path("/proc"), CG, window_s=15.0)
        print(f"layout: v2 {layout.v2}, v1 cpu {layout.v1_cpu}; {args.pods} pod cgroups; "
              f"hardware counters: {'on' if probe.hw else probe.hw_error}")
        # 1. as the agent runs it
        wall0, cpu0 = time.monotonic(), time.process_time()
        n, r = 0, None
        while time.monotonic() - wall0 < args.seconds:
            r = probe.observe(pods)
            n += 1
            time.sleep(args.period)
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
        assert r is not None and all(x.scope == "pod" for x in r.pods.values()), r
        print(f"as the agent: {n} snapshots every {args.period:g} s over {wall:.1f} s: "
              f"{cpu * 1e3:.1f} ms CPU = {100 * cpu / wall:.4f} % of one core")
        # 2. one snapshot, and one walk of the trees
        cpu0 = time.process_time()
        for _ in range(args.snapshots):
            probe.observe(pods)
        per = (time.process_time() - cpu0) / args.snapshots
        cpu0 = time.process_time()
        walks = 50
        for _ in range(walks):
            probe.finder.scan()
        walk = (time.process_time() - cpu0) / walks
        found = len(probe.finder.v2) + len(probe.finder.v1)
        print(f"one snapshot (node + {args.pods} pods, window maths): {per * 1e3:.3f} ms CPU "
              f"-> {100 * per / 5.0:.4f} % of a core at a 5-s period, "
              f"{100 * per / 1.0:.4f} % at 1 s")
        print(f"one walk of the cgroup trees ({found} pod dirs found): {walk * 1e3:.2f} ms "
              f"CPU (at most every 30 s while a pod is not found: "
              f"{100 * walk / 30:.4f} % of a core)")
        probe.close()
    finally:
        for d in sorted(made, key=lambda x: len(x.parts), reverse=True):
            for x in (d, d.parent, d.parent.parent, d.parent.parent.parent):
                try:
                    x.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    break


if __name__ == "__main__":
    main()
