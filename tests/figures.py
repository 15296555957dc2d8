"""Quantities a lab test sees, recorded in ``make test`` and judged in ``make lab-check``.

A lab test asserts what holds at any machine speed: the order of events, safety, eventual
outcomes, exact results (docs/testing.md, "What make test asserts"). The quantities it
meets on the way (a rate through a tc class, a throttle's accuracy, a read count within a
percent, an interference index's rise) are measurements: two busy cores move them. The
test hands each one to the ``figure`` fixture with its target::

    figure("fifo_sum_mbit", total, "<=", 44.0, "both flows through the 40-Mbit/s FIFO, "
           "Mbit/s", source="tc's HTB: 40 Mbit/s +10 %")

* In ``make test`` the figure is printed and appended to ``.test-times/figures.jsonl``
  (``ELASTORE_FIGURES``), met or not; it never fails the test. ``tests/tiers.py`` lists the
  figures that missed their targets at the end of the run, as information.
* In ``make lab-check`` (``ELASTORE_JUDGE_FIGURES`` names a folder) a missed target fails
  the test at its teardown, after every mechanism check has run, and the session writes
  ``<folder>/results.json`` through ``experiments/results.py``: every figure, its target,
  whether it was met, the commit and the machine.

A figure that is missing, None or NaN is never met (``results.Target.check``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))
from results import Target  # noqa: E402  (experiments/ is not a package)

#: ``make test``: where figures are appended (tests/tiers.py sets it)
SINK_ENV = "ELASTORE_FIGURES"
#: ``make lab-check``: the folder whose results.json the session writes; misses fail
JUDGE_ENV = "ELASTORE_JUDGE_FIGURES"


@dataclass
class Recorded:
    key: str
    value: Any
    target: Target
    met: bool
    reason: str | None = None


@dataclass
class FigureBook:
    """One test's figures (the ``figure`` fixture is its ``__call__``)."""

    nodeid: str
    judging: bool
    sink: Path | None
    seen: list[Recorded] = field(default_factory=list)

    def key(self, name: str) -> str:
        path, _, test = self.nodeid.partition("::")
        return f"{Path(path).stem}::{test}::{name}"

    def __call__(self, name: str, value: Any, op: str, bound: float, meaning: str,
                 source: str = "") -> None:
        key = self.key(name)
        if any(r.key == key for r in self.seen):
            raise ValueError(f"figure {name!r} recorded twice in {self.nodeid}")
        target = Target(key, op, float(bound), meaning, source)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        checked = target.check({key: value})
        rec = Recorded(key, checked["value"], target, bool(checked["met"]),
                       checked.get("reason"))
        self.seen.append(rec)
        said = "met" if rec.met else f"OFF TARGET ({rec.reason})"
        print(f"FIGURE {name} = {_show(rec.value)} (target {op} {bound:g}; {meaning}): "
              f"{said}{'' if self.judging else ', judged in make lab-check'}", flush=True)
        if self.sink is not None:
            with self.sink.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"figure": key, "value": rec.value, "op": op,
                                     "bound": float(bound), "meaning": meaning,
                                     "met": rec.met}) + "\n")

    def within(self, name: str, value: Any, want: float, rel: float, meaning: str,
               source: str = "") -> None:
        """A two-sided target, what ``value == approx(want, rel=rel)`` asserted, as two
        figures: ``name_low`` (>= want x (1 - rel)) and ``name_high`` (<= want x (1 + rel))."""
        was = source or f"was assert {name} == approx({want:g}, rel={rel:g})"
        self(f"{name}_low", value, ">=", want * (1 - rel), meaning, source=was)
        self(f"{name}_high", value, "<=", want * (1 + rel), meaning, source=was)

    def misses(self) -> list[Recorded]:
        return [r for r in self.seen if not r.met]


def _show(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) and math.isfinite(v) else str(v)


def judge_folder() -> Path | None:
    folder = os.environ.get(JUDGE_ENV)
    return Path(folder) if folder else None


def sink_path() -> Path | None:
    sink = os.environ.get(SINK_ENV)
    return Path(sink) if sink else None


def write_results(folder: Path, books: list[FigureBook], command: list[str]) -> bool:
    """``folder/results.json`` for every figure of the session; True if all were met."""
    from results import record

    recs = [r for b in books for r in b.seen]
    folder.mkdir(parents=True, exist_ok=True)
    return bool(record(folder, "lab-figures", {r.key: r.value for r in recs},
                  [r.target for r in recs], command,
                  notes="the quantities the lab suites of make test meet, each judged "
                        "against its target (tests/figures.py)"))


def off_target(sink: Path) -> list[dict[str, Any]]:
    """The figures in a ``make test`` sink that missed their targets (a line cut short by
    a killed run is passed over)."""
    out: list[dict[str, Any]] = []
    if not sink.exists():
        return out
    for line in sink.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not rec.get("met"):
            out.append(rec)
    return out
