"""Change Swift's rings in one process: every builder of a directory gets the same device
changes, a rebalance (``min_part_hours`` declared passed first, as
``swift-ring-builder ... pretend_min_part_hours_passed``), a validation, and its ring file
written, as ``swift-ring-builder``'s ``add`` / ``set_weight`` / ``remove`` / ``rebalance``
do, with Swift's own ``RingBuilder``. One run costs one Python start and one load of each
builder, where the command line costs four runs per ring. Runs under Debian's
``/usr/bin/python3`` (Swift's own Python): the standard library and ``swift`` only.

    echo '[{"op": "add", "ip": "10.0.0.4", "device": "d1", "zone": 4, "weight": 100}]' |
        /usr/bin/python3 swift_ringtool.py /path/to/builders

``op``: ``add`` (skipped when the device is there), ``weight``, ``remove`` (a device not
there is skipped). Prints ``{kind: {"reassigned": n, "balance": b, "removed": r,
"readdressed": m}}``.

An op may name the ``pod`` whose device it is: ``add`` then records it in the device's
``meta`` (``elastore-pod=<pod>``), and every op finds the device by that name as well as by
its address. A device found by its pod at another address is moved to the op's address
first, as ``swift-ring-builder set_info`` does: a pod that came back with a new IP keeps one
device, its weight and its partitions (issue 35), instead of gaining a second.

    /usr/bin/python3 swift_ringtool.py --devices /path/to/object.builder

prints every device of one builder as JSON (``ip``, ``port``, ``device``, ``zone``,
``weight``, ``parts``, ``meta``).
"""

import json
import sys
from typing import Any

KINDS = ("account", "container", "object")
PORTS = {"object": 6200, "container": 6201, "account": 6202}


def pod_meta(pod: str) -> str:
    return f"elastore-pod={pod}"


def find(builder: Any, op: dict[str, Any], port: int) -> tuple[list[dict[str, Any]], int]:
    """The devices ``op`` means: at its address, or (``op["pod"]``) recorded as that pod's;
    one recorded as the pod's at another address is moved to ``op["ip"]``. Returns the
    devices and how many were moved."""
    meta = pod_meta(op["pod"]) if op.get("pod") else None
    found: list[dict[str, Any]] = []
    moved = 0
    for dev in builder.devs:
        if dev is None or dev["port"] != port or dev["device"] != op["device"]:
            continue
        if dev["ip"] == op["ip"]:
            found.append(dev)
        elif meta is not None and dev.get("meta") == meta:
            clash = [d for d in builder.devs if d is not None and d["ip"] == op["ip"]
                     and d["port"] == port and d["device"] == op["device"]]
            if clash:
                raise SystemExit(f"{op['pod']}'s device is at {dev['ip']} and another "
                                 f"device is at {op['ip']}: not readdressing")
            dev["ip"] = dev["replication_ip"] = op["ip"]
            found.append(dev)
            moved += 1
    return found, moved


def devices(ring_builder: Any, path: str) -> None:
    builder = ring_builder.load(path)
    json.dump([{"ip": d["ip"], "port": d["port"], "device": d["device"], "zone": d["zone"],
                "weight": d["weight"], "parts": d.get("parts", 0), "meta": d.get("meta", "")}
               for d in builder.devs if d is not None], sys.stdout)


def main() -> None:
    from swift.common.ring import RingBuilder  # type: ignore[import-not-found]

    if sys.argv[1] == "--devices":
        devices(RingBuilder, sys.argv[2])
        return
    d = sys.argv[1]
    ops = json.loads(sys.stdin.read())
    out = {}
    for kind in KINDS:
        path = f"{d}/{kind}.builder"
        builder = RingBuilder.load(path)
        port = PORTS[kind]
        readdressed = 0
        for op in ops:
            found, moved = find(builder, op, port)
            readdressed += moved
            if op["op"] == "add" and not found:
                builder.add_dev({"region": 1, "zone": int(op["zone"]), "ip": op["ip"],
                                 "port": port, "replication_ip": op["ip"],
                                 "replication_port": port, "device": op["device"],
                                 "weight": float(op["weight"]),
                                 "meta": pod_meta(op["pod"]) if op.get("pod") else ""})
            elif op["op"] == "weight":
                for dev in found:
                    builder.set_dev_weight(dev["id"], float(op["weight"]))
            elif op["op"] == "remove":
                for dev in found:
                    builder.remove_dev(dev["id"])
            elif op["op"] not in ("add", "readdress"):  # readdress: find() moved it
                raise SystemExit(f"unknown ring operation {op['op']!r}")
        builder.pretend_min_part_hours_passed()
        parts, balance, removed = builder.rebalance()
        builder.validate()
        builder.get_ring().save(f"{d}/{kind}.ring.gz")
        builder.save(path)
        out[kind] = {"reassigned": parts, "balance": balance, "removed": removed,
                     "readdressed": readdressed}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
