"""Swift's part of the ``ElasticPolicy`` spec: ``spec.target.swift`` declared (the CRD's
schema is written from :data:`FIELDS`, in the core's order), read (:func:`parse`) and its
BwMan ports. The core's fields and readers are :mod:`elastore.operator.specfields` and
:mod:`elastore.operator.spec`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from elastore.operator.fielddecl import F

#: the ports BwMan tells Swift's client traffic from its storage traffic by: the object,
#: container and account servers the proxy calls; the replicators' rsync (their data path)
CLIENT_PORTS: tuple[int, ...] = (6200, 6201, 6202)
STORAGE_PORTS: tuple[int, ...] = (873,)

FIELDS: tuple[F, ...] = (
    F("spec.target.swift", "object",
      doc=("a Swift target (store: swift): where its pods read their rings and keep their "
           "devices. Each pod has one device, put in the rings at the pod's IP (zone: its "
           "ordinal + 1)")),
    F("spec.target.swift.ringConfigMap", "string",
      max_length=253,
      pattern="^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
      doc=("the ConfigMap every Swift pod mounts its rings from (<kind>.builder or "
           "<kind>.builder.gz, and <kind>.ring.gz, for account, container and object); "
           'labelled elastore.io/swift-rings: "true"; the operator changes the rings there '
           "(required in Enforce)")),
    F("spec.target.swift.ringDir", "string",
      default="/etc/swift",
      max_length=256,
      pattern="^/[A-Za-z0-9_./-]*$",
      doc="where the pods read the ring files (the ConfigMap's mount)"),
    F("spec.target.swift.devicesDir", "string",
      default="/srv/node",
      max_length=256,
      pattern="^/[A-Za-z0-9_./-]*$",
      doc="the servers' devices directory"),
    F("spec.target.swift.device", "string",
      default="d1",
      max_length=64,
      pattern="^[A-Za-z0-9_.-]+$",
      doc="each pod's device under devicesDir"),
    F("spec.target.swift.weight", "number",
      default=100,
      open_min=True,
      minimum=0,
      maximum=1_000_000,
      doc="a new pod's device weight"),
    F("spec.target.swift.execPrefix", "array",
      max_items=4,
      doc=("a command the operator's commands in the pods go through; one the operator "
           "allows (elastore operator run --exec-prefix; the chart's swift.execPrefixes), "
           "never free text")),
    F("spec.target.swift.execPrefix[]", "string",
      min_length=1,
      max_length=256,
      pattern="^[A-Za-z0-9_./+-]+$"),
)

_PATH = re.compile(r"^/[A-Za-z0-9_./-]{0,255}$")
_DEVICE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class SwiftTarget:
    """``spec.target.swift``: where a Swift StatefulSet keeps its rings and devices. The
    rings are a ConfigMap's files (``<kind>.builder`` or ``.builder.gz`` and
    ``<kind>.ring.gz``) that every pod mounts at ``ring_dir``; the operator changes them.
    Each pod has one device, ``device`` under ``devices_dir``, put in the rings at the
    pod's IP with ``weight`` (zone: the pod's ordinal + 1)."""

    ring_configmap: str | None = None
    ring_dir: str = "/etc/swift"
    devices_dir: str = "/srv/node"
    device: str = "d1"
    weight: float = 100.0
    #: a command the operator's commands in the pods go through (``elastore operator run
    #: --exec-prefix`` must allow it; empty: run as they are)
    exec_prefix: tuple[str, ...] = ()


def parse(w: Any, store: str) -> SwiftTarget:
    """``spec.target.swift`` (only for ``store: swift``). Paths and the device are words,
    never a shell line: the operator passes them as arguments of the commands it runs in
    the pods."""
    from elastore.operator.spec import _ARG, _NAME, SpecError, _read

    if w is None:
        return SwiftTarget()
    if not isinstance(w, dict):
        raise SpecError("must be an object", "spec.target.swift")
    if store != "swift":
        raise SpecError("is for store: swift", "spec.target.swift")
    cm = w.get("ringConfigMap")
    if cm is not None and (not isinstance(cm, str) or not _NAME.match(cm) or len(cm) > 253):
        raise SpecError(f"not a ConfigMap name: {cm!r}", "spec.target.swift.ringConfigMap")
    out: dict[str, Any] = {}
    for key, attr in (("ringDir", "ring_dir"), ("devicesDir", "devices_dir")):
        v = _read(w, f"spec.target.swift.{key}")
        if not isinstance(v, str) or not _PATH.match(v) or ".." in v.split("/"):
            raise SpecError(f"must be an absolute path of letters, digits and _ . / - "
                            f"(no ..), got {v!r}", f"spec.target.swift.{key}")
        out[attr] = v.rstrip("/") or "/"
    device = _read(w, "spec.target.swift.device")
    if not isinstance(device, str) or not _DEVICE.match(device) or device in (".", ".."):
        raise SpecError(f"not a device name: {device!r}", "spec.target.swift.device")
    weight = _read(w, "spec.target.swift.weight")
    prefix = w.get("execPrefix", [])
    if not isinstance(prefix, list) or len(prefix) > 4 or not all(
            isinstance(x, str) and _ARG.match(x) for x in prefix):
        raise SpecError("must be 0 to 4 words of letters, digits and _ . / + - (a command, "
                        "not a shell line)", "spec.target.swift.execPrefix")
    return SwiftTarget(ring_configmap=cm, device=device, weight=weight,
                       exec_prefix=tuple(prefix), **out)


def check_mode(swift: SwiftTarget, store: str, mode: str) -> None:
    """Enforce on a Swift target needs the rings' ConfigMap: the operator changes the rings
    there."""
    from elastore.operator.spec import SpecError

    if mode == "Enforce" and store == "swift" and not swift.ring_configmap:
        raise SpecError("mode Enforce on Swift needs the ConfigMap the pods read their rings "
                        "from (the operator changes the rings there)",
                        "spec.target.swift.ringConfigMap")
