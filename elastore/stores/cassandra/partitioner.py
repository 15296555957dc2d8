"""Cassandra's Murmur3Partitioner: a partition key's token, as the ring places it. Pure.

The token is the first half of the 128-bit x64 MurmurHash3 of the key's serialized bytes,
seed 0, as Cassandra's ``MurmurHash.hash3_x64_128`` computes it: its tail bytes are read
as *signed* Java bytes (sign-extended), which differs from the reference MurmurHash3 for
keys whose length is not a multiple of 16 and whose tail has a byte >= 0x80. The minimum
token is reserved: it maps to the maximum (``Murmur3Partitioner.normalize``). Checked
against Cassandra 5.0.4's own ``token()`` in ``tests/data/skew-5.0.4/tokens.json``.

``nodetool profileload`` prints a partition key as its CQL type prints it, without the
type: :func:`key_encodings` gives the serialized bytes of the types a printed key could be
(a number could be a ``bigint``, an ``int`` or ``text``), for the caller to choose between
(:mod:`elastore.stores.cassandra.skew` keeps the type whose tokens fall on the nodes that
served the keys).
"""

from __future__ import annotations

import re
import uuid

_MASK = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F
_MIN = -(1 << 63)
_MAX = (1 << 63) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    k ^= k >> 33
    return k


def _signed_byte(b: int) -> int:
    """A Java byte widened to a long: sign-extended, as 64 unsigned bits."""
    return (b - 256 if b >= 128 else b) & _MASK


def murmur3_token(data: bytes) -> int:
    """The Murmur3Partitioner token of a partition key's serialized bytes (signed 64-bit)."""
    length = len(data)
    nblocks = length // 16
    h1 = h2 = 0
    for i in range(nblocks):
        k1 = int.from_bytes(data[i * 16:i * 16 + 8], "little")
        k2 = int.from_bytes(data[i * 16 + 8:i * 16 + 16], "little")
        k1 = (k1 * _C1) & _MASK
        k1 = _rotl(k1, 31)
        k1 = (k1 * _C2) & _MASK
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 = (h1 + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        k2 = (k2 * _C2) & _MASK
        k2 = _rotl(k2, 33)
        k2 = (k2 * _C1) & _MASK
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 = (h2 + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[nblocks * 16:]
    k1 = k2 = 0
    for j in range(len(tail) - 1, 7, -1):  # bytes 9..15 of the tail: k2
        k2 ^= (_signed_byte(tail[j]) << (8 * (j - 8))) & _MASK
    if len(tail) > 8:
        k2 = (k2 * _C2) & _MASK
        k2 = _rotl(k2, 33)
        k2 = (k2 * _C1) & _MASK
        h2 ^= k2
    for j in range(min(len(tail), 8) - 1, -1, -1):  # bytes 1..8: k1
        k1 ^= (_signed_byte(tail[j]) << (8 * j)) & _MASK
    if tail:
        k1 = (k1 * _C1) & _MASK
        k1 = _rotl(k1, 31)
        k1 = (k1 * _C2) & _MASK
        h1 ^= k1
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 = (h1 + h2) & _MASK
    token = h1 - (1 << 64) if h1 >= (1 << 63) else h1
    return _MAX if token == _MIN else token


_INTEGER = re.compile(r"^-?[0-9]+$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}$")
_HEX = re.compile(r"^(0x)?([0-9a-fA-F]{2})+$")

#: the key types :func:`key_encodings` tries, in the order a tie is broken by
KEY_TYPES = ("bigint", "int", "uuid", "blob", "text")


def key_encodings(printed: str) -> dict[str, bytes]:
    """The serialized bytes a printed single-column partition key has under each CQL type
    it could be (``KEY_TYPES`` order): ``bigint`` and ``int`` (big-endian two's complement,
    8 and 4 bytes) for an integer in range, ``uuid`` (16 bytes) for a UUID, ``blob`` for
    hex digits, and always ``text`` (UTF-8). A composite key prints its parts joined by
    ``:`` and is not decoded (its ``text`` reading lands on the wrong replicas, and the
    caller's check leaves it unmapped)."""
    out: dict[str, bytes] = {}
    if _INTEGER.match(printed):
        v = int(printed)
        if -(1 << 63) <= v < (1 << 63):
            out["bigint"] = v.to_bytes(8, "big", signed=True)
        if -(1 << 31) <= v < (1 << 31):
            out["int"] = v.to_bytes(4, "big", signed=True)
    if _UUID.match(printed):
        out["uuid"] = uuid.UUID(printed).bytes
    m = _HEX.match(printed)
    if m and not _INTEGER.match(printed):
        out["blob"] = bytes.fromhex(printed[2:] if printed.startswith("0x") else printed)
    out["text"] = printed.encode("utf-8")
    return out
