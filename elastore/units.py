"""Units. Bandwidth is in Mbit/s (network, tc), data rates in MiB/s (storage, nodetool).

Converting between the two happens here and nowhere else: the ecosystem mixes megabits
(10^6 bit) and mebibytes (2^20 byte), and that mix has caused real outages.
"""

from __future__ import annotations

BITS_PER_BYTE = 8
KIB = 1024  # bytes
MIB = 1024 * KIB
GIB = 1024 * MIB
TIB = 1024 * GIB
PIB = 1024 * TIB
MBIT = 1_000_000  # bits
#: 1 MiB/s = 8 * 1,048,576 bit/s = 8.388608 Mbit/s
MBIT_PER_MIBPS = BITS_PER_BYTE * MIB / MBIT


def mibps_to_mbit(mibps: float) -> float:
    """MiB/s -> Mbit/s."""
    return mibps * MBIT_PER_MIBPS


def mbit_to_mibps(mbit: float) -> float:
    """Mbit/s -> MiB/s."""
    return mbit / MBIT_PER_MIBPS


def bytes_to_mib(n_bytes: float) -> float:
    return n_bytes / MIB


def mib_to_bytes(mib: float) -> float:
    return mib * MIB


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / GIB


def gib_to_bytes(gib: float) -> float:
    return gib * GIB
