"""What the operator reads in a Swift target's pods, through ``pods/exec`` (never a
connection to a pod's IP): each pod's ring files (``md5sum``: has the kubelet given it the
ConfigMap's rings yet?) and its devices (``du``: which partitions it holds, and how many
bytes). The commands are fixed here; a policy only names the paths (checked words, passed
as arguments, never a shell line) and, if the operator's installer allows one, a prefix
(``elastore operator run --exec-prefix``).

:func:`observe` gathers one look at every pod and compares it with the rings
(:func:`elastore.actuators.swiftring.misplaced`): what is out of place, and which pods lag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elastore.actuators.ports import SwiftPort
from elastore.actuators.swiftring import (
    KINDS,
    Misplaced,
    RingFiles,
    misplaced,
    parse_du,
)
from elastore.errors import ElastoreError
from elastore.operator.spec import PolicySpec

EXEC_TIMEOUT_S = 300.0  # a du over a large node's devices takes a while


def _run(port: SwiftPort, spec: PolicySpec, ns: str, pod: str, argv: list[str],
         tolerate_vanished: bool = False) -> str:
    sw = spec.target.swift
    res: Any = port.exec(ns, pod, spec.target.container, [*sw.exec_prefix, *argv],
                         EXEC_TIMEOUT_S)
    rc, out, err = res.rc, str(res.stdout), str(res.stderr)
    if rc == 0:
        return out
    # du walks a device the replicators change under it: a partition deleted meanwhile is
    # "No such file or directory", and its absence is the truth by then
    vanished = tolerate_vanished and rc == 1 and out and all(
        "No such file or directory" in line for line in err.splitlines() if line.strip())
    if vanished:
        return out
    raise ElastoreError(f"{' '.join(argv[:2])} in {ns}/{pod} exited {rc}: "
                        f"{(err or out).strip()[-300:]}")


def ring_md5s(port: SwiftPort, spec: PolicySpec, ns: str, pod: str) -> dict[str, str]:
    """kind -> md5 of the ring file the pod reads."""
    d = spec.target.swift.ring_dir.rstrip("/")
    files = {f"{d}/{k}.ring.gz": k for k in KINDS}
    out: dict[str, str] = {}
    for line in _run(port, spec, ns, pod, ["md5sum", *files]).splitlines():
        digest, _, path = line.strip().partition(" ")
        kind = files.get(path.strip().lstrip("*"))
        if kind is not None and len(digest) == 32:
            out[kind] = digest
    if set(out) != set(KINDS):
        raise ElastoreError(f"md5sum in {ns}/{pod} did not report every ring of {d} "
                            f"(got {', '.join(sorted(out)) or 'none'})")
    return out


def scan(port: SwiftPort, spec: PolicySpec, ns: str, pod: str
         ) -> dict[str, dict[str, dict[int, int]]]:
    """device -> kind -> {partition: bytes} of the pod's devices."""
    d = spec.target.swift.devices_dir
    text = _run(port, spec, ns, pod, ["du", "-k", "-d", "3", d], tolerate_vanished=True)
    return parse_du(text, d)


def disk_bytes(port: SwiftPort, spec: PolicySpec, ns: str, pods: list[str]) -> float:
    """All bytes on the pods' devices (every replica): what a ring change moves a share of.
    Any pod that cannot be read fails the whole (never a partial sum read as the total)."""
    total = 0
    for pod in pods:
        for kinds in scan(port, spec, ns, pod).values():
            total += sum(sum(parts.values()) for parts in kinds.values())
    return float(total)


@dataclass(frozen=True)
class View:
    """One look at the pods against the rings."""

    lagging: tuple[str, ...]  # pods whose ring files are not the ConfigMap's
    progress: dict[str, Misplaced] | None  # None: some ring device is on no pod read (why)
    why: str
    #: object partition -> bytes of its largest replica on the pods (the moves' sizes)
    sizes: dict[int, int]
    disk_bytes: int


def observe(port: SwiftPort, spec: PolicySpec, ns: str, pods: list[str], rings: RingFiles
            ) -> View:
    """Every pod's ring files and devices, against ``rings``. A pod without an IP or whose
    commands fail is an :class:`ElastoreError` (nothing is concluded from a partial look)."""
    want = rings.ring_md5s()
    dev = spec.target.swift.device
    lagging: list[str] = []
    on_disk: dict[str, dict[str, dict[int, int]]] = {k: {} for k in KINDS}
    sizes: dict[int, int] = {}
    total = 0
    for pod in pods:
        ip = port.pod_ip(ns, pod)
        if ip is None:
            raise ElastoreError(f"{ns}/{pod} has no IP (not running)")
        if ring_md5s(port, spec, ns, pod) != want:
            lagging.append(pod)
        for name, kinds in scan(port, spec, ns, pod).items():
            for kind in KINDS:
                parts = kinds.get(kind, {})
                # the ring knows the pod's device by the pod's IP; any other directory on it
                # (an old device) is reported under its own name, which no ring device has
                on_disk[kind][f"{ip}/{name}"] = parts
                total += sum(parts.values())
                if kind == "object":
                    for p, b in parts.items():
                        sizes[p] = max(sizes.get(p, 0), b)
        for kind in KINDS:  # the pod's own device, also before it holds anything
            on_disk[kind].setdefault(f"{ip}/{dev}", {})
    progress: dict[str, Misplaced] | None = {}
    why = ""
    for kind in KINDS:
        assignment = rings.assignment(kind)
        devices = {d for ds in assignment.values() for d in ds}
        unseen = sorted(devices - set(on_disk[kind]))
        if unseen:
            progress, why = None, (f"the {kind} ring has device(s) {', '.join(unseen[:4])} "
                                   f"on no pod of {spec.target.name} (a pod's IP changed, or "
                                   "the rings hold servers outside this StatefulSet)")
            break
        assert progress is not None
        progress[kind] = misplaced(assignment, on_disk[kind])
    return View(tuple(lagging), progress, why, sizes, total)
