"""Noisy neighbours for the lab: real co-runners of the kinds the reference text used for
Hubbub-scale (section 5.4: memory-bandwidth and cache thrashers, CPU-bound benchmarks), from
Debian's ``stress-ng``, pinned to the CPUs the store runs on.

A co-runner is a ``kind`` and a ``level`` (1..``MAX_LEVEL``): ``level`` stress-ng workers of
that kind. The workers live in a cgroup v2 group of their own (``elastore-lab-corunners/p<pid>``),
so they can be stopped completely (``cgroup.kill``: the group only ever holds what we started)
and so that nothing of theirs is mistaken for the store's. They are *not* put in the lab's
CPU-controller group: there they would share the store's CPU weight (every level would get
the same slice), while a neighbour VM's or pod's threads compete with the store's as
tasks of their own, so more workers take more of the CPU.

kinds (stress-ng stressors):

* ``cpu``: a CPU hog (``--cpu``, integer arithmetic, every worker busy 100 %);
* ``stream``: memory bandwidth (``--stream``, McCalpin's STREAM kernels);
* ``cache``: last-level-cache thrashing (``--cache``);
* ``matrix``: matrix arithmetic over working sets larger than the caches (``--matrix``);
* ``disk``: a disk writer (``--hdd``, sequential writes and fsync in a scratch directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from elastore.errors import ElastoreError
from elastore.lab.cgroups import LAB_GROUP, Group

log = logging.getLogger("elastore.lab.corunners")

MAX_LEVEL = 8
KINDS: dict[str, list[str]] = {
    "cpu": ["--cpu", "{n}", "--cpu-method", "int64", "--cpu-load", "100"],
    "stream": ["--stream", "{n}"],
    "cache": ["--cache", "{n}"],
    "matrix": ["--matrix", "{n}", "--matrix-size", "512"],
    "disk": ["--hdd", "{n}", "--hdd-bytes", "256M", "--hdd-opts", "wr-seq,fsync"],
}


def _group() -> Group:
    """This process's co-runners' group (v2 only): concurrent sweeps keep apart."""
    return Group(f"{LAB_GROUP}-corunners/p{os.getpid()}")


def stress_ng() -> str:
    path = shutil.which("stress-ng")
    if path is None:
        raise ElastoreError("stress-ng is not installed: the lab's co-runners need it "
                            "('make lab-deps' installs it from Debian)")
    return path


def command(kind: str, level: int, cpus: list[int], scratch: Path,
            timeout_s: float) -> list[str]:
    """The stress-ng command line for ``level`` workers of ``kind`` on ``cpus``."""
    if kind not in KINDS:
        raise ElastoreError(f"unknown co-runner kind {kind!r}: one of {', '.join(KINDS)}")
    if not 1 <= level <= MAX_LEVEL:
        raise ElastoreError(f"a co-runner level is 1..{MAX_LEVEL} workers, got {level}")
    if not cpus:
        raise ElastoreError("a co-runner needs the CPUs to pin to")
    args = [a.replace("{n}", str(level)) for a in KINDS[kind]]
    return [stress_ng(), *args, "--taskset", ",".join(str(c) for c in sorted(cpus)),
            "--temp-path", str(scratch), "--timeout", f"{max(1, round(timeout_s))}s",
            "--quiet"]


def store_cpus(pids: list[int]) -> list[int]:
    """The CPUs the store's processes may run on (the union of their affinities)."""
    cpus: set[int] = set()
    for pid in pids:
        try:
            cpus |= os.sched_getaffinity(pid)
        except OSError:
            continue
    return sorted(cpus or os.sched_getaffinity(0))


@dataclass
class CoRunner:
    """``with CoRunner("stream", 2, cpus):`` runs the neighbour for the block. A safety
    timeout (default 2 h) ends it even if this process dies without cleaning up."""

    kind: str
    level: int
    cpus: list[int]
    timeout_s: float = 7200.0

    def __post_init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.group = _group()
        self.scratch: Path | None = None
        command(self.kind, self.level, self.cpus or [0], Path("."), 1)  # validates

    def start(self) -> CoRunner:
        group = self.group = _group()
        group.create(cpu_group=False)
        if group.pids():
            raise ElastoreError(f"co-runners are already running in {group.rel} "
                                f"(pids {group.pids()}): stop them first")
        self.scratch = Path(tempfile.mkdtemp(prefix="elastore-corunner-"))
        argv = command(self.kind, self.level, self.cpus, self.scratch, self.timeout_s)
        # joins the group before exec, so every worker it forks is born in it
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True,
                                     preexec_fn=lambda: group.add(os.getpid(), cpu=False))
        time.sleep(0.5)
        if self.proc.poll() is not None:
            err = (self.proc.stderr.read() if self.proc.stderr else b"").decode()[-400:]
            self.stop()
            raise ElastoreError(f"stress-ng {self.kind} x{self.level} exited at once: {err}")
        log.info("co-runner %s x%d on CPUs %s (pid %d)", self.kind, self.level, self.cpus,
                 self.proc.pid)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # stress-ng stops its workers on SIGINT
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        group = self.group
        group.kill_all()  # any worker its parent did not reap (only ours are in the group)
        if group.remove():
            parent = group.v2()
            if parent is not None:
                with contextlib.suppress(OSError):  # still holding another sweep's group
                    parent.parent.rmdir()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.proc, self.scratch = None, None

    def __enter__(self) -> CoRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
