"""Control groups for the lab's processes: each Cassandra node (and each co-runner set) in a
cgroup of its own, so that the interference probe can read its pressure (PSI) and CPU
throttling as the node agent reads a pod's, and so that a node can be given a CPU limit.

Works on cgroup v2 alone and on the hybrid layout (v1 controllers plus v2 at
``/sys/fs/cgroup/unified``, as on this project's machine): PSI lives in the v2 tree, the CPU
limit goes wherever the ``cpu`` controller is (v2 ``cpu.max`` when enabled there, else the v1
``cpu`` hierarchy's ``cpu.cfs_quota_us``). Only directories under ``elastore-lab/`` (or a
``kubepods/pod<uid>`` stand-in the lab creates for a pod) are created or removed, and a
directory is only removed once empty: never a process we did not start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from elastore.errors import ElastoreError

log = logging.getLogger("elastore.lab.cgroups")

CGROUP_ROOT = Path("/sys/fs/cgroup")
LAB_GROUP = "elastore-lab"
#: the CFS period (µs) of a CPU limit: the kernel's and the kubelet's default. A group
#: that uses its quota early in a period waits for the next one, so a limited store's tail
#: latency has stalls of up to ``period - quota``; the kubelet's ``cpuCFSQuotaPeriod``
#: (feature gate CustomCPUCFSQuotaPeriod) shortens it for that reason, as
#: ``elastore lab up --cfs-period-ms`` does
CFS_PERIOD_US = 100_000
MIN_CFS_PERIOD_US, MAX_CFS_PERIOD_US = 1_000, 1_000_000  # the kernel's bounds


def v2_root(root: Path = CGROUP_ROOT) -> Path | None:
    """The cgroup v2 hierarchy: ``root`` itself (pure v2) or ``root/unified`` (hybrid)."""
    for cand in (root, root / "unified"):
        if (cand / "cgroup.controllers").exists():
            return cand
    return None


def v1_cpu_root(root: Path = CGROUP_ROOT) -> Path | None:
    for name in ("cpu", "cpu,cpuacct"):
        cand = root / name
        if (cand / "cpu.cfs_quota_us").exists():
            return cand
    return None


def _v2_has_cpu(v2: Path) -> bool:
    try:
        return "cpu" in (v2 / "cgroup.controllers").read_text().split()
    except OSError:
        return False


@dataclass(frozen=True)
class Group:
    """One of the lab's cgroups: ``rel`` below the v2 root (and below the v1 ``cpu`` root
    when the CPU limit lives there)."""

    rel: str

    def _check(self) -> None:
        parts = Path(self.rel).parts
        if not parts or not (parts[0].startswith(LAB_GROUP) or parts[0] == "kubepods") \
                or ".." in parts:
            raise ElastoreError(f"not a lab cgroup: {self.rel!r}")

    def v2(self) -> Path | None:
        root = v2_root()
        return root / self.rel if root else None

    def v1_cpu(self) -> Path | None:
        root = v1_cpu_root()
        return root / self.rel if root else None

    def create(self, cpu_cores: float | None = None, cpu_group: bool = True,
               period_us: int = CFS_PERIOD_US) -> Group:
        """Create the group (in v2, and in v1 ``cpu`` when present and ``cpu_group``); with
        ``cpu_cores``, limit it to that many cores' worth of CPU time per ``period_us``."""
        self._check()
        v2 = self.v2()
        if v2 is None:
            raise ElastoreError("no cgroup v2 hierarchy (/sys/fs/cgroup or "
                                "/sys/fs/cgroup/unified): the lab needs it for PSI")
        v2.mkdir(parents=True, exist_ok=True)
        v1 = self.v1_cpu()
        if v1 is not None and cpu_group:
            v1.mkdir(parents=True, exist_ok=True)
        if cpu_cores is not None:
            self.limit_cpu(cpu_cores, period_us)
        return self

    def limit_cpu(self, cores: float, period_us: int = CFS_PERIOD_US) -> None:
        if not 0.01 <= cores <= (os.cpu_count() or 1):
            raise ElastoreError(f"a CPU limit must be 0.01..{os.cpu_count()} cores, got {cores}")
        if not MIN_CFS_PERIOD_US <= period_us <= MAX_CFS_PERIOD_US:
            raise ElastoreError(f"a CFS period must be {MIN_CFS_PERIOD_US // 1000}.."
                                f"{MAX_CFS_PERIOD_US // 1000} ms, got {period_us / 1000:g} ms")
        quota = max(1000, round(cores * period_us))  # the kernel's least quota: 1 ms
        v2, v1 = self.v2(), self.v1_cpu()
        if v2 is not None and _v2_has_cpu(v2.parent):
            _enable_cpu_controller(v2)
            (v2 / "cpu.max").write_text(f"{quota} {period_us}\n")
        elif v1 is not None:
            # v1 checks quota against period on each write: a shorter period under the
            # old quota is refused, so lift the quota first
            (v1 / "cpu.cfs_quota_us").write_text("-1\n")
            (v1 / "cpu.cfs_period_us").write_text(f"{period_us}\n")
            (v1 / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        else:
            raise ElastoreError("no cgroup cpu controller (v2 cpu.max or v1 cpu) to limit CPU")

    def set_weight(self, servers: int) -> None:
        """CPU weight of ``servers`` default entities (v1 ``cpu.shares`` 1024 each, v2
        ``cpu.weight`` 100 each): under contention the group gets the share that many
        separate servers' (or pods') threads would."""
        v2, v1 = self.v2(), self.v1_cpu()
        if v2 is not None and (v2 / "cpu.weight").exists():
            (v2 / "cpu.weight").write_text(f"{min(10000, 100 * max(1, servers))}\n")
        elif v1 is not None and (v1 / "cpu.shares").exists():
            (v1 / "cpu.shares").write_text(f"{1024 * max(1, servers)}\n")

    def add(self, pid: int, cpu: bool = True) -> None:
        """Move a process (all its threads) into the group (and into its v1 ``cpu`` group
        when there is one and ``cpu``)."""
        for d in (self.v2(), self.v1_cpu() if cpu else None):
            if d is not None and d.is_dir():
                (d / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> list[int]:
        v2 = self.v2()
        if v2 is None or not v2.is_dir():
            return []
        try:
            return [int(x) for x in (v2 / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        """Kill every process in the group (``cgroup.kill``): only for groups that hold
        nothing but processes the lab started (co-runners and their forks)."""
        v2 = self.v2()
        if v2 is not None and (v2 / "cgroup.kill").exists() and self.pids():
            (v2 / "cgroup.kill").write_text("1\n")

    def remove(self, wait_s: float = 5.0) -> bool:
        """Remove the (empty) group; False when processes are still in it after ``wait_s``."""
        self._check()
        end = time.monotonic() + wait_s
        while self.pids() and time.monotonic() < end:
            time.sleep(0.1)
        if self.pids():
            log.warning("cgroup %s still has processes %s: left in place", self.rel, self.pids())
            return False
        for d in (self.v2(), self.v1_cpu()):
            if d is not None and d.is_dir():
                try:
                    d.rmdir()
                except OSError as exc:
                    log.warning("could not remove cgroup %s: %s", d, exc)
                    return False
        return True


def _enable_cpu_controller(group: Path) -> None:
    """Enable ``cpu`` in the subtree_control of every ancestor up to the v2 root."""
    root = v2_root()
    if root is None:
        return
    chain = []
    p = group.parent
    while p != root.parent and root in (p, *p.parents):
        chain.append(p)
        if p == root:
            break
        p = p.parent
    for anc in reversed(chain):
        ctl = anc / "cgroup.subtree_control"
        if "cpu" not in ctl.read_text().split():
            ctl.write_text("+cpu\n")


def lab_root(namespace: str) -> str:
    """A lab's own top-level group, named after its network namespace (unique while it
    runs): ``elastore-lab`` for the default lab, ``elastore-lab-<ns>`` for another (a test
    run's). Top-level, so its CPU weight competes with a co-runner's threads directly."""
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", namespace):
        raise ElastoreError(f"not a namespace name: {namespace!r}")
    return namespace if namespace.startswith(LAB_GROUP) else f"{LAB_GROUP}-{namespace}"


def node_group(namespace: str, n: int) -> Group:
    return Group(f"{lab_root(namespace)}/n{n}")


def pod_group(uid: str) -> Group:
    """Where the lab puts a node that stands in for a Kubernetes pod: the kubelet's cgroupfs
    layout (``kubepods/pod<uid>``), so the node agent's probe finds it by the pod's UID."""
    if not uid or "/" in uid or ".." in uid:
        raise ElastoreError(f"not a pod UID: {uid!r}")
    return Group(f"kubepods/pod{uid}")


def remove_tree(rel: str) -> None:
    """Remove the lab's empty groups below ``rel`` (deepest first), then ``rel`` itself."""
    for root in (v2_root(), v1_cpu_root()):
        if root is None or not (root / rel).is_dir():
            continue
        dirs = sorted((p for p in (root / rel).rglob("*") if p.is_dir()),
                      key=lambda p: len(p.parts), reverse=True)
        for d in [*dirs, root / rel]:
            with contextlib.suppress(OSError):
                d.rmdir()
