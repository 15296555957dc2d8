"""What every store's profiling sweep is made of: the constant workloads it replays, over
keys Zipf-like with the traces' slope or a workload's own key table (``--keys-from``),
and the CSV it appends its rows to as points finish (so an interrupted sweep keeps them).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from elastore.errors import ElastoreError, TraceError
from elastore.traces.workload import Workload

KEY_COUNT = 4000
ZIPF_SLOPE = 0.61  # popularity slope of the shared Wikipedia pages (elastore trace inspect)

#: a request mix's keys and their popularity (weights summing to 1)
KeyTable = tuple[list[str], np.ndarray]


def zipf_keys(keys: int = KEY_COUNT) -> KeyTable:
    """``keys`` keys, popularity Zipf-like with the traces' slope."""
    weight = 1.0 / np.arange(1, keys + 1) ** ZIPF_SLOPE
    return [f"k{i}" for i in range(keys)], weight / weight.sum()


def key_table(path: Path) -> KeyTable:
    """The key table of a workload file (``elastore trace build``'s output): the keys a
    replay of it requests, with their popularity. An unreadable file or an empty or
    weightless table is an error."""
    try:
        wl = Workload.load(path)
    except TraceError as exc:
        raise ElastoreError(f"--keys-from {path}: {exc}") from exc
    w = np.asarray(wl.key_weight, dtype=np.float64)
    if not wl.keys or len(wl.keys) != len(w) or not np.all(np.isfinite(w)) or \
            np.any(w < 0) or not w.sum() > 0:
        raise ElastoreError(f"--keys-from {path}: its key table is empty or its weights are "
                            "not finite, non-negative and positive in sum")
    return list(wl.keys), w / w.sum()


def constant_workload(rate: float, read_ratio: float, seconds: float, window_s: float = 5.0,
                      keys: KeyTable | None = None) -> Workload:
    """A workload at a constant rate over ``keys`` (default :func:`zipf_keys`)."""
    n = max(1, round(seconds / window_s))
    names, weight = keys if keys is not None else zipf_keys()
    return Workload(
        first_hour="1970-01-01T00:00:00", window_seconds=window_s, hour_seconds=600.0,
        start_s=np.arange(n, dtype=np.float64) * window_s, hour_index=np.zeros(n, dtype=np.int64),
        read_rps=np.full(n, rate * read_ratio), write_rps=np.full(n, rate * (1 - read_ratio)),
        keys=list(names), key_weight=np.asarray(weight, dtype=np.float64),
        meta={"generator": "elastore lab profile"})



class Appender:
    """A CSV opened for appending (header only when new), flushed after every write."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path = path
        self.columns = columns

    def __enter__(self) -> Appender:
        new = not self.path.exists()
        self.fh = self.path.open("a", newline="")
        self.wr = csv.DictWriter(self.fh, fieldnames=self.columns)
        if new:
            self.wr.writeheader()
        return self

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.wr.writerows(rows)
        self.fh.flush()

    def __exit__(self, *exc: object) -> None:
        self.fh.close()
