"""Hardware counters for the interference probe: ``perf_event_open(2)`` through ctypes,
counting instructions, cycles and last-level-cache misses on every CPU for every process
(``pid = -1``, one event per CPU), read as cumulative totals.

Opening them needs a PMU the kernel exposes (many VMs have none: ``ENOENT``, which
``perf stat -e instructions`` prints as ``<not supported>``) and, for system-wide counting,
``CAP_PERFMON`` (or ``CAP_SYS_ADMIN``) or ``kernel.perf_event_paranoid <= 0``; a container
runtime's default seccomp profile also refuses the call without ``CAP_PERFMON``. When any
event cannot be opened, none is kept: :attr:`HwCounters.error` says why (errno and its text)
and the probe leaves the ``hw`` signal out of the index.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: ``__NR_perf_event_open`` per machine
SYSCALL_NR = {"x86_64": 298, "aarch64": 241}

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_HW_CACHE_MISSES = 3  # last-level cache misses (the PMU's generic LLC event)
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_FORMAT_TOTAL_TIME_ENABLED = 1
PERF_FORMAT_TOTAL_TIME_RUNNING = 2
PERF_FLAG_FD_CLOEXEC = 8
#: ``PERF_ATTR_SIZE_VER0``: the first 64 bytes of ``struct perf_event_attr`` (type, size,
#: config, sample_period, sample_type, read_format, the flag bits, wakeup_events, bp_type,
#: config1); every kernel accepts it and the fields after it stay zero
ATTR_SIZE = 64

#: (name, type, config) of the probe's events
HW_EVENTS: tuple[tuple[str, int, int], ...] = (
    ("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
    ("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
    ("llc_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES),
)

Syscall = Callable[[bytes, int, int], int]  # (attr, pid, cpu) -> fd, or -errno


@dataclass(frozen=True)
class HwTotals:
    """Cumulative counts over all CPUs since the events were opened (each scaled by
    enabled/running time when the PMU multiplexed it)."""

    counts: dict[str, float]


def attr_bytes(type_: int, config: int) -> bytes:
    """A ``perf_event_attr`` (VER0) counting ``config`` from the start, with the enabled
    and running times in every read (to scale a multiplexed count)."""
    attr = bytearray(ATTR_SIZE)
    struct.pack_into("=IIQ", attr, 0, type_, ATTR_SIZE, config)
    struct.pack_into("=Q", attr, 32, PERF_FORMAT_TOTAL_TIME_ENABLED |
                     PERF_FORMAT_TOTAL_TIME_RUNNING)
    # flags (offset 40) all 0: enabled at open, user and kernel and hypervisor counted
    return bytes(attr)


def scaled(raw: bytes) -> float:
    """One read of an event (value, time enabled, time running) -> the value scaled to the
    whole enabled time (the kernel's multiplexing estimate); 0 before it ever ran."""
    value, enabled, running = struct.unpack("=QQQ", raw[:24])
    if running == 0:
        return 0.0
    return float(value) * (enabled / running) if running < enabled else float(value)


def libc_syscall() -> Syscall | None:
    """``perf_event_open`` through libc's ``syscall(2)``, or None on an unknown machine."""
    nr = SYSCALL_NR.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.syscall
    fn.restype = ctypes.c_long

    def call(attr: bytes, pid: int, cpu: int) -> int:
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = int(fn(ctypes.c_long(nr), buf, ctypes.c_int(pid), ctypes.c_int(cpu),
                    ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC)))
        return fd if fd >= 0 else -ctypes.get_errno()

    return call


def online_cpus(sysfs: Path = Path("/sys/devices/system/cpu/online")) -> list[int]:
    """The online CPUs (``0-3,6``), else every CPU ``os.cpu_count`` knows."""
    try:
        out: list[int] = []
        for part in sysfs.read_text().strip().split(","):
            lo, _, hi = part.partition("-")
            out += range(int(lo), int(hi or lo) + 1)
        if out:
            return out
    except (OSError, ValueError):
        pass
    return list(range(os.cpu_count() or 1))


def errno_text(err: int) -> str:
    return f"{errno.errorcode.get(err, str(err))} ({os.strerror(err)})"


class HwCounters:
    """The events of ``events`` on every CPU of ``cpus``, all or none: after a failed open
    :attr:`error` says which event, on which CPU, and the errno, and :meth:`read` returns
    None. ``syscall``, ``read`` and ``close`` replace the kernel's in tests."""

    def __init__(self, events: tuple[tuple[str, int, int], ...] = HW_EVENTS,
                 cpus: list[int] | None = None, syscall: Syscall | None = None,
                 read: Callable[[int], bytes] | None = None,
                 close: Callable[[int], None] | None = None) -> None:
        self.events = events
        self.fds: list[tuple[str, int]] = []
        self.error: str | None = None
        self._read = read or (lambda fd: os.read(fd, 24))
        self._close = close or os.close
        call = syscall if syscall is not None else libc_syscall()
        if call is None:
            self.error = f"perf_event_open: no syscall number for {platform.machine()}"
            return
        for cpu in (cpus if cpus is not None else online_cpus()):
            for name, type_, config in events:
                fd = call(attr_bytes(type_, config), -1, cpu)
                if fd < 0:
                    self.error = f"perf_event_open({name}, cpu {cpu}): {errno_text(-fd)}"
                    self.close()
                    return
                self.fds.append((name, fd))

    @property
    def available(self) -> bool:
        return bool(self.fds)

    def read(self) -> HwTotals | None:
        if not self.fds:
            return None
        out = {name: 0.0 for name, _, _ in self.events}
        for name, fd in self.fds:
            out[name] += scaled(self._read(fd))
        return HwTotals(out)

    def close(self) -> None:
        for _, fd in self.fds:
            with contextlib.suppress(OSError):
                self._close(fd)
        self.fds = []
