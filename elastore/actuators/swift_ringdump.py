"""Print a Swift ring's partition assignment as JSON: ``{"replicas": R, "parts": {part:
[device, ...]}}``. Runs under Debian's ``/usr/bin/python3`` (Swift's own Python), so it
imports only the standard library and ``swift``.

    /usr/bin/python3 swift_ringdump.py /path/to/object.ring.gz
"""

import json
import sys


def main() -> None:
    from swift.common.ring import RingData  # type: ignore[import-not-found]

    ring = RingData.load(sys.argv[1])
    devs = ring.devs
    parts: dict[int, list[str]] = {}
    for row in ring._replica2part2dev_id:
        for part, dev_id in enumerate(row):
            dev = devs[dev_id]
            parts.setdefault(part, []).append(f"{dev['ip']}/{dev['device']}")
    json.dump({"replicas": len(ring._replica2part2dev_id), "parts": parts}, sys.stdout)


if __name__ == "__main__":
    main()
