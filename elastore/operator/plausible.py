"""Bounds on what a scrape may say: a finite number is not yet a measurement. Pure.

A broken exporter, a counter that wrapped, or someone who controls a series (issue 35) can
put huge but finite numbers in front of the loop. Unbounded, ``dataBytes = 1e18`` turned
every tick into an InternalError (a deadline in the year 13706), and one history sample of
1e300 made the forecast ask for ``replicas.max``. So, before anything is decided on them:

* **the data** a cluster holds is at most what its volumes can: ``nodes x`` the
  volumeClaimTemplate's size times :data:`VOLUME_SLACK` (or :data:`MAX_NODE_BYTES` a node
  when the size is unknown). More is ``MetricsImplausible``: no decision, as for a missing
  metric. The slack is wide on purpose: a claim's size is what it asked for, and it may be
  bound to a larger volume (a static PV, a provisioner that rounds up), so only what no
  volume of that claim can hold is refused;
* **the load** now is at most :data:`MAX_RPS`; above it, ``MetricsImplausible``;
* **a history sample** above :data:`MAX_RPS` (or below 0) is a gap (NaN), as a sample
  Prometheus does not have, and is counted in the decision's reason;
* **the migration rate** shown is at most :data:`MAX_MIBPS`, else unknown (None).

Deadlines are capped where they are made (:data:`elastore.stores.operation.MAX_DEADLINE_S`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from elastore.errors import MetricsError
from elastore.operator.metrics import Snapshot
from elastore.units import GIB

#: requests/s, a whole cluster: far above any store elastore scales (the largest public
#: Cassandra fleets serve some 10^7 requests/s over thousands of nodes)
MAX_RPS = 1e9
#: bytes a node may hold when its volume size is unknown: 1 PiB
MAX_NODE_BYTES = 1024.0**5
#: a claim may be bound to more than it asked for (a static PV, a provisioner's unit)
VOLUME_SLACK = 10.0
#: MiB/s of streaming per cluster shown in the status (10^5 MiB/s ~ 840 Gbit/s)
MAX_MIBPS = 1e5


def bounded(snap: Snapshot, nodes: int, volume_bytes: float | None) -> tuple[Snapshot, int]:
    """The snapshot with its history's implausible samples made gaps, and how many there
    were; raises :class:`MetricsError` (``MetricsImplausible``) when the load or the data
    now is beyond what ``nodes`` nodes of ``volume_bytes`` can be."""
    if snap.load_rps > MAX_RPS:
        raise MetricsError("MetricsImplausible", f"the load reads {snap.load_rps:.3g} "
                                                 f"requests/s, above {MAX_RPS:.0e}: not a "
                                                 "measurement (a broken exporter or query?)")
    per_node = volume_bytes * VOLUME_SLACK if volume_bytes else MAX_NODE_BYTES
    room = max(1, nodes) * per_node
    if math.isfinite(snap.data_bytes) and snap.data_bytes > room:
        where = (f"{max(1, nodes)} volumes of {volume_bytes / GIB:,.0f} GiB (x{VOLUME_SLACK:g})"
                 if volume_bytes else f"{max(1, nodes)} nodes of at most 1 PiB")
        raise MetricsError("MetricsImplausible", f"dataBytes reads {snap.data_bytes:.3g} B, "
                                                 f"more than {where} can hold")
    hist = np.asarray(snap.history_rps, dtype=float)
    bad = np.isfinite(hist) & ((hist > MAX_RPS) | (hist < 0))
    n = int(bad.sum())
    mig = snap.migration_mibps
    if mig is not None and not (0 <= mig <= MAX_MIBPS):
        mig = None
    if n == 0 and mig == snap.migration_mibps:
        return snap, 0
    clean = hist.copy()
    clean[bad] = np.nan
    return replace(snap, history_rps=clean, migration_mibps=mig), n
