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

import gzip
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError

KINDS = ("account", "container", "object")
PORTS = {"object": 6200, "container": 6201, "account": 6202}
SWIFT_PYTHON = "/usr/bin/python3"
#: a device's ``meta`` when the operator added it for a pod (swift_ringtool.py writes it)
POD_META = "elastore-pod="
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
    try:
        parts = [p for p in base.iterdir() if p.name.isdigit()]
    except FileNotFoundError:  # the device went while we looked
        return out
    for part in parts:
        size = 0
        # os.walk, not Path.rglob: the replicator deletes a partition's directories while we
        # walk them (a handoff pushed away), and rglob raises on a directory gone between its
        # listing and its scan; os.walk skips it (onerror ignores), which is what it means
        for root, _dirs, files in os.walk(part):
            for name in files:
                if name.endswith((".pkl", ".lock")):
                    continue
                try:
                    size += os.stat(os.path.join(root, name)).st_size
                except OSError:  # replicated away while we looked
                    continue
        if size or part.is_dir():
            out[int(part.name)] = size
    return out


def parse_devices(output: str) -> dict[str, tuple[float, int]]:
    """``swift-ring-builder <file>``'s device table: "ip/device" -> (weight, partitions).
    Pure."""
    out: dict[str, tuple[float, int]] = {}
    for line in output.splitlines():
        cols = line.split()
        # id region zone ip:port replication-ip:port name weight partitions balance flags
        if len(cols) >= 8 and cols[0].isdigit() and ":" in cols[3]:
            try:
                out[f"{cols[3].rsplit(':', 1)[0]}/{cols[5]}"] = (float(cols[6]), int(cols[7]))
            except ValueError as exc:
                raise ElastoreError(f"unreadable swift-ring-builder device line: {line!r}"
                                    ) from exc
    return out


def parse_du(output: str, devices_dir: str) -> dict[str, dict[str, dict[int, int]]]:
    """``du -k -d 3 <devices_dir>`` in a storage pod -> device -> kind -> {partition:
    bytes}. Only ``<devices_dir>/<device>/{objects,containers,accounts}/<partition>`` lines
    count (not tmp/, async_pending/, quarantined/). Pure."""
    kinds = {v: k for k, v in DATA_DIRS.items()}
    root = devices_dir.rstrip("/") + "/"
    out: dict[str, dict[str, dict[int, int]]] = {}
    for line in output.splitlines():
        size, _, path = line.partition("\t")
        if not path.startswith(root):
            continue
        parts = path[len(root):].split("/")
        if len(parts) != 3 or parts[1] not in kinds or not parts[2].isdigit():
            continue
        try:
            kib = int(size)
        except ValueError as exc:
            raise ElastoreError(f"unreadable du line: {line!r}") from exc
        out.setdefault(parts[0], {}).setdefault(kinds[parts[1]], {})[int(parts[2])] = \
            kib * 1024
    return out


@dataclass(frozen=True)
class Moves:
    """What a ring change moves, from the assignments before and after it and the bytes of
    each partition (:func:`moves`): the busiest sender's and receiver's bytes bound how long
    the replicators take at a per-node migration rate."""

    partitions: int  # partition replicas that change device
    total_bytes: int
    max_send_bytes: int
    max_receive_bytes: int

    def seconds(self, mibps: float, pass_s: float) -> float:
        """The migration-time model for a ring change (measured on the lab, docs and
        experiments/profiles/README.md): the replicators' passes (``pass_s``: they find the
        handoffs, sync and delete them, and a pass after that finds nothing) plus the
        busiest node's bytes at the per-node migration rate."""
        if not mibps > 0:
            raise ElastoreError(f"the migration rate must be > 0 MiB/s, got {mibps}")
        busiest = max(self.max_send_bytes, self.max_receive_bytes)
        return pass_s + busiest / (mibps * 1024 * 1024)


def moves(before: Mapping[int, Iterable[str]], after: Mapping[int, Iterable[str]],
          sizes: Mapping[int, int]) -> Moves:
    """The partition replicas a ring change moves: each one a device gains is received by
    it and sent, in equal shares, by the partition's holders before the change (every
    replica holder's replicator pushes to a new primary, the handoff's among them:
    measured on the lab, draining node 4 was mostly pushed by nodes 1-3, see
    experiments/profiles/README.md). ``sizes``: partition -> bytes of one replica. Pure."""
    send: dict[str, float] = {}
    recv: dict[str, int] = {}
    n = total = 0
    for p in set(before) | set(after):
        old, new = set(before.get(p, ())), set(after.get(p, ()))
        gained = new - old
        size = int(sizes.get(p, 0))
        for dev in gained:
            n += 1
            total += size
            recv[dev] = recv.get(dev, 0) + size
            for src in old:
                send[src] = send.get(src, 0.0) + size / len(old)
    return Moves(n, total, round(max(send.values(), default=0.0)),
                 max(recv.values(), default=0))


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
        return {k: w for k, (w, _) in self.table(kind).items()}

    def table(self, kind: str = "object") -> dict[str, tuple[float, int]]:
        """"ip/device" -> (weight, partitions assigned) of every device in the ``kind``
        builder."""
        return parse_devices(self.builder(kind, ok=(0, 1)))

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


# --- the rings as a ConfigMap's files -------------------------------------------------------

#: a ConfigMap holds at most 1 MiB (data and binaryData together; the API server refuses more)
CONFIGMAP_LIMIT_BYTES = 1024 * 1024


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class RingFiles:
    """The ring master as files (a ConfigMap's ``binaryData``): ``<kind>.builder`` (or
    ``<kind>.builder.gz``, gzipped, the same form is written back) and ``<kind>.ring.gz`` for
    every kind. Changes run ``swift-ring-builder`` on a copy in a temporary directory
    (:meth:`change`) and return new files: nothing changes where anyone reads until the
    caller stores them."""

    files: Mapping[str, bytes]

    def __post_init__(self) -> None:
        missing = [k for k in KINDS if self._builder_key(k) is None
                   or f"{k}.ring.gz" not in self.files]
        if missing:
            raise ElastoreError(
                f"the rings need <kind>.builder (or .builder.gz) and <kind>.ring.gz for "
                f"{', '.join(missing)}; found {', '.join(sorted(self.files)) or 'nothing'}")

    def _builder_key(self, kind: str) -> str | None:
        for key in (f"{kind}.builder", f"{kind}.builder.gz"):
            if key in self.files:
                return key
        return None

    def builder_bytes(self, kind: str) -> bytes:
        key = self._builder_key(kind)
        assert key is not None
        data = self.files[key]
        return gzip.decompress(data) if key.endswith(".gz") else data

    def ring_md5s(self) -> dict[str, str]:
        """kind -> the md5 of its ring file (what each server's copy must show)."""
        return {k: _md5(self.files[f"{k}.ring.gz"]) for k in KINDS}

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.files.values())

    def _materialise(self, d: Path) -> RingMaster:
        for kind in KINDS:
            (d / f"{kind}.builder").write_bytes(self.builder_bytes(kind))
            (d / f"{kind}.ring.gz").write_bytes(self.files[f"{kind}.ring.gz"])
        return RingMaster(d)

    def table(self, kind: str = "object") -> dict[str, tuple[float, int]]:
        """"ip/device" -> (weight, partitions) of the ``kind`` builder (cached by content)."""
        key = ("table", kind, _md5(self.builder_bytes(kind)))
        if key not in _READ:
            with tempfile.TemporaryDirectory(prefix="elastore-rings-") as tmp:
                _READ[key] = self._materialise(Path(tmp)).table(kind)
        out: dict[str, tuple[float, int]] = _READ[key]
        return out

    def pod_devices(self, kind: str = "object") -> dict[str, tuple[str, float, int]]:
        """pod -> ("ip/device", weight, partitions) of every device the operator added for a
        pod (its ``meta`` names it: ``elastore-pod=<pod>``), whatever its address now."""
        key = ("pods", kind, _md5(self.builder_bytes(kind)))
        if key not in _READ:
            with tempfile.TemporaryDirectory(prefix="elastore-rings-") as tmp:
                path = Path(tmp) / f"{kind}.builder"
                path.write_bytes(self.builder_bytes(kind))
                tool = Path(__file__).with_name("swift_ringtool.py")
                res = subprocess.run([SWIFT_PYTHON, str(tool), "--devices", str(path)],
                                     capture_output=True, text=True, timeout=120, check=False)
            if res.returncode != 0:
                raise ElastoreError(f"reading the {kind} builder's devices: "
                                    f"{(res.stderr or res.stdout).strip()[-800:]}")
            try:
                devs = json.loads(res.stdout)
                _READ[key] = {
                    str(d["meta"])[len(POD_META):]: (f"{d['ip']}/{d['device']}",
                                                      float(d["weight"]), int(d["parts"]))
                    for d in devs if str(d.get("meta", "")).startswith(POD_META)}
            except (ValueError, KeyError, TypeError) as exc:
                raise ElastoreError(f"unreadable ring tool output: {res.stdout[-400:]!r}"
                                    ) from exc
        out: dict[str, tuple[str, float, int]] = _READ[key]
        return out

    def replicas(self) -> float:
        """The object ring's replica count."""
        key = ("replicas", "object", _md5(self.builder_bytes("object")))
        if key not in _READ:
            with tempfile.TemporaryDirectory(prefix="elastore-rings-") as tmp:
                text = self._materialise(Path(tmp)).builder("object", ok=(0, 1))
            m = re.search(r"partitions, (\d+(?:\.\d+)?) replicas", text)
            if m is None:
                raise ElastoreError(f"no replica count in swift-ring-builder's output: "
                                    f"{text[:300]!r}")
            _READ[key] = float(m.group(1))
        out: float = _READ[key]
        return out

    def assignment(self, kind: str) -> dict[int, list[str]]:
        """partition -> ["ip/device", ...] of the ``kind`` ring file."""
        data = self.files[f"{kind}.ring.gz"]
        key = ("assignment", kind, _md5(data))
        if key not in _READ:
            with tempfile.TemporaryDirectory(prefix="elastore-rings-") as tmp:
                f = Path(tmp) / f"{kind}.ring.gz"
                f.write_bytes(data)
                _READ[key] = ring_assignment(f)
        out: dict[int, list[str]] = _READ[key]
        return out

    def change(self, ops: list[dict[str, Any]], limit_bytes: int = CONFIGMAP_LIMIT_BYTES
               ) -> tuple[RingFiles, list[Rebalance]]:
        """Apply ``ops`` to every builder (``{"op": "add" | "weight" | "remove", "ip",
        "device", "zone", "weight"}``), rebalance each and read the new files back, in one
        process (``swift_ringtool.py``). Refused (nothing returned) when they would not fit
        ``limit_bytes``."""
        with tempfile.TemporaryDirectory(prefix="elastore-rings-") as tmp:
            self._materialise(Path(tmp))
            tool = Path(__file__).with_name("swift_ringtool.py")
            res = subprocess.run([SWIFT_PYTHON, str(tool), tmp], input=json.dumps(ops),
                                 capture_output=True, text=True, timeout=600, check=False)
            if res.returncode != 0:
                raise ElastoreError(f"changing the rings ({ops}): "
                                    f"{(res.stderr or res.stdout).strip()[-800:]}")
            try:
                summary = json.loads(res.stdout)
                done = [Rebalance(k, int(summary[k]["reassigned"]),
                                  float(summary[k]["balance"]), res.stdout) for k in KINDS]
            except (ValueError, KeyError, TypeError) as exc:
                raise ElastoreError(f"unreadable ring tool output: {res.stdout[-400:]!r}"
                                    ) from exc
            out: dict[str, bytes] = dict(self.files)
            for kind in KINDS:
                key = self._builder_key(kind)
                assert key is not None
                raw = (Path(tmp) / f"{kind}.builder").read_bytes()
                out[key] = gzip.compress(raw, mtime=0) if key.endswith(".gz") else raw
                out[f"{kind}.ring.gz"] = (Path(tmp) / f"{kind}.ring.gz").read_bytes()
        new = RingFiles(out)
        if new.size > limit_bytes:
            raise ElastoreError(
                f"the changed rings are {new.size} bytes, over the {limit_bytes} a ConfigMap "
                "holds: store the builders gzipped (<kind>.builder.gz), or lower the part "
                "power of the account and container rings (docs/operator.md, Swift)")
        return new, done


#: what reading a builder or ring costs a swift-ring-builder run: by content, once
_READ: dict[tuple[str, str, str], Any] = {}
