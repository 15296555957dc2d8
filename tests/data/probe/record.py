"""Record the ``hybrid`` probe fixture from this machine's real kernel (root; cgroup v2 at
/sys/fs/cgroup/unified, v1 ``cpu`` at /sys/fs/cgroup/cpu, as on the project's machine).

Two pods, each a cgroup this script creates under ``elastore-probe-rec/`` and removes after:

- pod A (``kubepods/burstable/pod<A>``): one busy process, with a competitor outside it
  pinned to the same CPU (its cpu pressure);
- pod B (``kubepods/besteffort/pod<B>``): one busy process limited to 0.2 core by the v1
  ``cpu`` controller (its throttling, and the cpu pressure throttling causes).

Two snapshots ~3 s apart (``t0/``, ``t1/``) of /proc/pressure/*, /proc/stat and the pods'
files are copied under the kubelet's cgroupfs layout; ``times.json`` holds the monotonic
times they were taken at. Only processes started here are killed, by PID.

The other cases are derived from ``hybrid`` (README.md says which file is what):
``v2-systemd`` (pure v2, the systemd driver's names, a v2 ``cpu.stat`` with throttling,
written by hand since this machine's v2 has no cpu controller; no memory.pressure in the
pod; /proc/stat cut to 7 fields: no steal) and ``no-psi`` (v1 only, ``cpu,cpuacct``; no
/proc/pressure, no pod PSI).

    sudo .venv/bin/python tests/data/probe/record.py            # record, then derive
    .venv/bin/python tests/data/probe/record.py --derive-only
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CG = Path("/sys/fs/cgroup")
V2, V1 = CG / "unified", CG / "cpu"
REC = "elastore-probe-rec"
POD_A = "6f1c2a4e-3b5d-4e7f-9a1b-2c3d4e5f6a7b"
POD_B = "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d"
BUSY = [sys.executable, "-c", "while True: pass"]
CPU = 1


def busy(cpu: int) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(BUSY)
    os.sched_setaffinity(p.pid, {cpu})
    return p


def copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(src.read_text())


def main() -> None:
    out = HERE / "hybrid"
    shutil.rmtree(out, ignore_errors=True)
    a_v2 = V2 / REC / "kubepods" / "burstable" / f"pod{POD_A}"
    b_v2 = V2 / REC / "kubepods" / "besteffort" / f"pod{POD_B}"
    b_v1 = V1 / REC / f"pod{POD_B}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for d in (a_v2, b_v2, b_v1):
            d.mkdir(parents=True, exist_ok=True)
        (b_v1 / "cpu.cfs_quota_us").write_text("20000")  # 0.2 core of the 100 ms period
        pa, pb, comp = busy(CPU), busy(0), busy(CPU)
        procs += [pa, pb, comp]
        (a_v2 / "cgroup.procs").write_text(str(pa.pid))
        (b_v2 / "cgroup.procs").write_text(str(pb.pid))
        (b_v1 / "cgroup.procs").write_text(str(pb.pid))
        time.sleep(2.0)
        times = {}
        for snap in ("t0", "t1"):
            times[snap] = time.monotonic()
            root = out / snap
            for f in ("cpu", "memory", "io"):
                copy(Path("/proc/pressure") / f, root / "proc" / "pressure" / f)
            copy(Path("/proc/stat"), root / "proc" / "stat")
            cg = root / "sys" / "fs" / "cgroup"
            copy(V2 / "cgroup.controllers", cg / "unified" / "cgroup.controllers")
            copy(V1 / "cpu.stat", cg / "cpu" / "cpu.stat")
            for d, rel in ((a_v2, f"unified/kubepods/burstable/pod{POD_A}"),
                           (b_v2, f"unified/kubepods/besteffort/pod{POD_B}")):
                for f in ("cpu.pressure", "memory.pressure", "io.pressure", "cpu.stat"):
                    copy(d / f, cg / rel / f)
            copy(b_v1 / "cpu.stat", cg / "cpu" / "kubepods" / "besteffort" / f"pod{POD_B}"
                 / "cpu.stat")
            if snap == "t0":
                time.sleep(3.0)
        (out / "times.json").write_text(json.dumps(times, indent=1) + "\n")
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        for d in (a_v2, b_v2, a_v2.parent, b_v2.parent, V2 / REC / "kubepods", V2 / REC,
                  b_v1, V1 / REC):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
    print(f"recorded {out}")


#: a v2 cpu.stat with the cpu controller on (written by hand: the format of Linux 6.x)
V2_CPU_STAT = """usage_usec {usage}
user_usec {usage}
system_usec 0
nr_periods {periods}
nr_throttled {throttled}
throttled_usec {throttled_us}
nr_bursts 0
burst_usec 0
"""


def derive() -> None:
    src = HERE / "hybrid"
    uid_ = POD_A.replace("-", "_")
    systemd = (f"kubepods.slice/kubepods-burstable.slice/"
               f"kubepods-burstable-pod{uid_}.slice")
    stats = {"t0": dict(usage=685497, periods=120, throttled=30, throttled_us=400000),
             "t1": dict(usage=1551916, periods=150, throttled=41, throttled_us=700000)}
    for case in ("v2-systemd", "no-psi"):
        shutil.rmtree(HERE / case, ignore_errors=True)
        (HERE / case).mkdir()
        shutil.copy(src / "times.json", HERE / case / "times.json")
    for snap in ("t0", "t1"):
        s, cg = src / snap, src / snap / "sys" / "fs" / "cgroup"
        # v2-systemd
        d = HERE / "v2-systemd" / snap
        for f in ("cpu", "memory", "io"):
            copy(s / "proc" / "pressure" / f, d / "proc" / "pressure" / f)
        cpu_line, *rest = (s / "proc" / "stat").read_text().splitlines(keepends=True)
        (d / "proc").mkdir(parents=True, exist_ok=True)
        (d / "proc" / "stat").write_text(" ".join(cpu_line.split()[:8]) + "\n"
                                         + "".join(rest))
        dcg = d / "sys" / "fs" / "cgroup"
        dcg.mkdir(parents=True, exist_ok=True)
        (dcg / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
        pod = cg / "unified" / "kubepods" / "burstable" / f"pod{POD_A}"
        for f in ("cpu.pressure", "io.pressure"):
            copy(pod / f, dcg / systemd / f)
        (dcg / systemd / "cpu.stat").write_text(V2_CPU_STAT.format(**stats[snap]))
        # no-psi
        d = HERE / "no-psi" / snap
        copy(s / "proc" / "stat", d / "proc" / "stat")
        v1 = d / "sys" / "fs" / "cgroup" / "cpu,cpuacct"
        copy(cg / "cpu" / "cpu.stat", v1 / "cpu.stat")
        rel = Path("kubepods") / "besteffort" / f"pod{POD_B}" / "cpu.stat"
        copy(cg / "cpu" / rel, v1 / rel)
    print("derived v2-systemd, no-psi")


if __name__ == "__main__":
    if "--derive-only" not in sys.argv:
        main()
    derive()
