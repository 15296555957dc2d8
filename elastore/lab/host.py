"""What every store's lab takes from the machine it runs on: where it keeps its state
(``$ELASTORE_LAB_DIR``: the Cassandra lab's ``lab.json``, the Swift lab's ``swift.json``
and their nodes' directories) and what it downloads or builds once (``$ELASTORE_CACHE``),
and how it waits for what it started."""

from __future__ import annotations

import os
import time
from pathlib import Path

from elastore.errors import ElastoreError


def lab_dir() -> Path:
    return Path(os.environ.get("ELASTORE_LAB_DIR",
                               Path.home() / ".local" / "state" / "elastore" / "lab"))


def cache_dir() -> Path:
    return Path(os.environ.get("ELASTORE_CACHE", Path.home() / ".cache" / "elastore"))


def wait_for(predicate_desc: str, check: object, timeout_s: float, every_s: float = 2.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return
        time.sleep(every_s)
    raise ElastoreError(f"timed out after {timeout_s:.0f} s waiting for {predicate_desc}")
