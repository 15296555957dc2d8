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
there is skipped). Prints ``{kind: {"reassigned": n, "balance": b, "removed": r}}``.
"""

import json
import sys

KINDS = ("account", "container", "object")
PORTS = {"object": 6200, "container": 6201, "account": 6202}


def main() -> None:
    from swift.common.ring import RingBuilder  # type: ignore[import-not-found]

    d = sys.argv[1]
    ops = json.loads(sys.stdin.read())
    out = {}
    for kind in KINDS:
        path = f"{d}/{kind}.builder"
        builder = RingBuilder.load(path)
        port = PORTS[kind]
        for op in ops:
            found = [dev for dev in builder.devs if dev is not None and dev["ip"] == op["ip"]
                     and dev["port"] == port and dev["device"] == op["device"]]
            if op["op"] == "add" and not found:
                builder.add_dev({"region": 1, "zone": int(op["zone"]), "ip": op["ip"],
                                 "port": port, "replication_ip": op["ip"],
                                 "replication_port": port, "device": op["device"],
                                 "weight": float(op["weight"]), "meta": ""})
            elif op["op"] == "weight":
                for dev in found:
                    builder.set_dev_weight(dev["id"], float(op["weight"]))
            elif op["op"] == "remove":
                for dev in found:
                    builder.remove_dev(dev["id"])
            elif op["op"] != "add":
                raise SystemExit(f"unknown ring operation {op['op']!r}")
        builder.pretend_min_part_hours_passed()
        parts, balance, removed = builder.rebalance()
        builder.validate()
        builder.get_ring().save(f"{d}/{kind}.ring.gz")
        builder.save(path)
        out[kind] = {"reassigned": parts, "balance": balance, "removed": removed}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
