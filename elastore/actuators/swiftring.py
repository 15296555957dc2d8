"""Swift's ring as an actuator: add a storage node's device, drain one (weight 0), remove it,
rebalance, and tell when the replicators have finished moving the data.

Swift scales by changing its rings: ``swift-ring-builder`` reassigns partitions, the new
ring files reach every server, and each node's replicators then push the partitions it no
longer owns (handoffs) to their new primaries over rsync, deleting its copy only once every
primary has it. A scale action is done when no partition is out of place on any device:
:func:`misplaced` (pure) compares the ring's assignment with what is on disk.

Every rebalance first declares ``min_part_hours`` passed, and the rings are created with
``min_part_hours = 1``: one rebalance then moves at most one replica of a partition, so the
other replicas keep serving it while it moves (with 0 a rebalance may move them all at
once).

The ring master is a directory of ``<kind>.builder`` files (kinds: account, container,
object); ``swift-ring-builder`` runs under Debian's Python (Swift is a Debian package).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from elastore.errors import ElastoreError

KINDS = ("account", "container", "object")
PORTS = {"object": 6200, "container": 6201, "account": 6202}
SWIFT_PYTHON = "/usr/bin/python3"
RING_BUILDER = "/usr/bin/swift-ring-builder"
DATA_DIRS = {"object": "objects", "container": "containers", "account": "accounts"}


@dataclass(frozen=True)
class Rebalance:
    kind: str
    reassigned: int  # partition replicas reassigned
    balance: float  # swift-ring-builder's balance, % (0: perfect)
    output: str


_NUM = r"(\d+(?:\.\d+)?)"
_REASSIGNED = re.compile(rf"Reassigned (\d+) \({_NUM}%\) partitions\. Balance is now {_NUM}")


def parse_rebalance(kind: str, output: str) -> Rebalance:
    """Read ``swift-ring-builder rebalance``'s summary. Pure."""
    m = _REASSIGNED.search(output)
    if m:
        return Rebalance(kind, int(m.group(1)), float(m.group(3)), output)
    if "No partitions could be reassigned" in output or "Cowardly refusing" in output:
        # nothing to move, or a change under 1 % that the builder did not save
        return Rebalance(kind, 0, float("nan"), output)
    raise ElastoreError(f"unexpected swift-ring-builder rebalance output for {kind}: "
                        f"{output.strip()[-400:]}")


@dataclass(frozen=True)
class Misplaced:
    """Partitions out of place: ``handoffs`` on a device the ring no longer assigns them
    to, ``missing`` absent from a device it does assign them to (while some device has
    them); ``handoff_bytes`` the data still to move off the handoffs."""

    handoffs: int
    missing: int
    handoff_bytes: int

    @property
    def done(self) -> bool:
        return self.handoffs == 0 and self.missing == 0


def misplaced(assignment: Mapping[int, Iterable[str]],
              on_disk: Mapping[str, Mapping[int, int]]) -> Misplaced:
    """``assignment``: partition -> the devices ("ip/device") the ring gives it;
    ``on_disk``: device -> {partition: bytes} found there. Pure."""
    owners = {int(p): set(devs) for p, devs in assignment.items()}
    handoffs = missing = hbytes = 0
    present: set[int] = set()
    for dev, parts in on_disk.items():
        for p, size in parts.items():
            present.add(p)
            if dev not in owners.get(p, set()):
                handoffs += 1
                hbytes += size
    for p in present:
        for dev in owners.get(p, set()):
            if p not in on_disk.get(dev, {}):
                missing += 1
    return Misplaced(handoffs, missing, hbytes)


def scan_device(device_root: Path, kind: str) -> dict[int, int]:
    """{partition: bytes} of one device's ``kind`` data (its ``objects/``, ...)."""
    out: dict[int, int] = {}
    base = device_root / DATA_DIRS[kind]
    if not base.is_dir():
        return out
    for part in base.iterdir():
        if not part.name.isdigit():
            continue
        size = 0
        for f in part.rglob("*"):
            try:
                if f.is_file() and not f.name.endswith((".pkl", ".lock")):
                    size += f.stat().st_size
            except OSError:  # replicated away while we looked
                continue
        out[int(part.name)] = size
    return out


_ASSIGNMENTS: dict[tuple[str, int, int], dict[int, list[str]]] = {}


def ring_assignment(ring_gz: Path) -> dict[int, list[str]]:
    """partition -> ["ip/device", ...] of a ring file (read by Swift's own code, in a
    process of Debian's Python: ~0.4 s of CPU, so a file already read is not read again
    until it changes)."""
    st = ring_gz.stat()
    key = (str(ring_gz), st.st_mtime_ns, st.st_size)
    if key in _ASSIGNMENTS:
        return _ASSIGNMENTS[key]
    script = Path(__file__).with_name("swift_ringdump.py")
    res = subprocess.run([SWIFT_PYTHON, str(script), str(ring_gz)], capture_output=True,
                         text=True, timeout=60, check=False)
    if res.returncode != 0:
        raise ElastoreError(f"reading the ring {ring_gz}: {res.stderr.strip()[-600:]}")
    out = {int(p): list(d) for p, d in json.loads(res.stdout)["parts"].items()}
    _ASSIGNMENTS[key] = out
    return out


@dataclass
class RingMaster:
    """The builder files in ``path``; every change is one ``swift-ring-builder`` call per
    ring kind, and nothing reaches a server until :meth:`write` and a distribution."""

    path: Path

    def builder(self, kind: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        res = subprocess.run([SWIFT_PYTHON, RING_BUILDER, str(self.path / f"{kind}.builder"),
                              *args], capture_output=True, text=True, timeout=300, check=False)
        if res.returncode not in ok:
            raise ElastoreError(f"swift-ring-builder {kind}.builder {' '.join(args)}: exit "
                                f"{res.returncode}: {(res.stdout + res.stderr).strip()[-800:]}")
        return res.stdout

    def create(self, part_power: int, replicas: int) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        for kind in KINDS:
            self.builder(kind, "create", str(part_power), str(replicas), "1")

    @staticmethod
    def search(zone: int, ip: str, kind: str, device: str) -> str:
        return f"z{zone}-{ip}:{PORTS[kind]}/{device}"

    def devices(self, kind: str = "object") -> dict[str, float]:
        """"ip/device" -> weight of every device in the ``kind`` builder."""
        out: dict[str, float] = {}
        for line in self.builder(kind, ok=(0, 1)).splitlines():
            cols = line.split()
            # id region zone ip:port replication ip:port name weight partitions balance flags
            if len(cols) >= 8 and cols[0].isdigit() and ":" in cols[3]:
                out[f"{cols[3].rsplit(':', 1)[0]}/{cols[5]}"] = float(cols[6])
        return out

    def add(self, zone: int, ip: str, device: str, weight: float) -> None:
        self.add_all([(zone, ip, device, weight)])

    def add_all(self, devices: list[tuple[int, str, str, float]]) -> None:
        """Add (zone, ip, device, weight) devices, one builder call per ring kind; a device
        already there is skipped (a retried step)."""
        for kind in KINDS:
            have = self.devices(kind)
            args: list[str] = []
            for zone, ip, device, weight in devices:
                if f"{ip}/{device}" in have:
                    continue
                port = PORTS[kind]
                args += [f"r1z{zone}-{ip}:{port}R{ip}:{port}/{device}", f"{weight:g}"]
            if args:
                self.builder(kind, "add", *args)

    def set_weight(self, zone: int, ip: str, device: str, weight: float) -> None:
        for kind in KINDS:
            self.builder(kind, "set_weight", self.search(zone, ip, kind, device),
                         f"{weight:g}", "--yes")

    def remove(self, zone: int, ip: str, device: str) -> None:
        for kind in KINDS:
            if f"{ip}/{device}" in self.devices(kind):
                self.builder(kind, "remove", self.search(zone, ip, kind, device), "--yes")

    def rebalance(self) -> list[Rebalance]:
        """Rebalance every kind (one replica of a partition at most: see the module) and
        write its ring file; exit status 1 is Swift's warning (balance still not ideal)."""
        out = []
        for kind in KINDS:
            self.builder(kind, "pretend_min_part_hours_passed")
            text = self.builder(kind, "rebalance", ok=(0, 1))
            out.append(parse_rebalance(kind, text))
        return out

    def ring_files(self) -> list[Path]:
        return [self.path / f"{kind}.ring.gz" for kind in KINDS]
