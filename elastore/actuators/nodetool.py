"""What nodetool takes and prints. Pure.

* the stream throttle, as ``setstreamthroughput`` takes it (:func:`stream_setting`);
* a node's ring mode, from ``netstats`` (:func:`parse_mode`).

nodetool takes whole numbers: with ``-m`` whole MiB/s, without it whole Mbit/s (10^6 bit/s;
measured on Cassandra 5.0.4: 16 reads back as 1.9073 MiB/s), 8.4x finer.
"""

from __future__ import annotations

import re

from elastore.errors import ElastoreError
from elastore.units import mbit_to_mibps, mibps_to_mbit


def stream_setting(mibps: float) -> tuple[list[str], float]:
    """The ``setstreamthroughput`` arguments closest to ``mibps`` and the MiB/s they set.

    Whichever of whole MiB/s and whole Mbit/s is closer wins, so 24 MiB/s (Cassandra's
    default) is set exactly and 0.6 MiB/s becomes 5 Mbit/s (0.596 MiB/s). At least 1 Mbit/s:
    0 would disable the throttle."""
    if not mibps > 0:
        raise ElastoreError(f"stream throughput must be > 0 MiB/s, got {mibps}")
    whole_mbit = max(1, round(mibps_to_mbit(mibps)))
    by_mbit = mbit_to_mibps(whole_mbit)
    whole_mib = round(mibps)
    if whole_mib >= 1 and abs(whole_mib - mibps) <= abs(by_mbit - mibps):
        return ["-m", str(whole_mib)], float(whole_mib)
    return [str(whole_mbit)], by_mbit


_MODE = re.compile(r"^\s*Mode:\s*([A-Z_]+)", re.MULTILINE)


def parse_mode(netstats: str) -> str | None:
    """The ``Mode:`` line of ``nodetool netstats`` (NORMAL, JOINING, LEAVING,
    DECOMMISSIONED, ...), or None."""
    m = _MODE.search(netstats or "")
    return m.group(1) if m else None
