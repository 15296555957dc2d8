"""What a lab-check measurement leaves behind: ``results.json`` beside its experiment.

Every measurement script of ``make lab-check`` ends with :func:`record`: its figures, the
targets it claims (each with the figure's value and whether it was met), and what a reader
needs to judge the numbers: the commit it ran from (and whether tracked files differed
from it), the UTC date and time, the machine's cores, the command line, and whether the
figures come from a fresh run or were re-read from committed files (``--report``). The
script then exits non-zero where a target is missed (:func:`exit_code`).

A target's figure that is missing, null, NaN or infinite is *not met*, with the reason
said: no figure is read as passing. Non-finite numbers are written as ``null`` (the file
stays valid JSON).

The experiments' scripts run as ``python experiments/X/run.py`` from the repository's
root; they import this module as ``results`` with this folder put on ``sys.path``::

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from results import Target, git_state, record
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import numbers
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FILENAME = "results.json"
SOURCES = ("run", "report")
OPS = (">=", "<=")


@dataclasses.dataclass(frozen=True)
class Target:
    """A claim on one figure: ``figures[figure] <op> bound``.

    ``meaning`` says what the figure is and its unit; ``source`` says where the bound is
    stated (a document and its words), so a bound is never one tuned to past numbers
    without saying so."""

    figure: str
    op: str
    bound: float
    meaning: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"Target {self.figure!r}: op must be one of {OPS}, not {self.op!r}")
        if isinstance(self.bound, bool) or not math.isfinite(float(self.bound)):
            raise ValueError(f"Target {self.figure!r}: the bound must be a finite number")

    def check(self, figures: Mapping[str, Any]) -> dict[str, Any]:
        """This target against ``figures``: its value, ``met``, and why not when not."""
        out: dict[str, Any] = dataclasses.asdict(self)
        value: Any = figures.get(self.figure)
        reason = None
        if self.figure not in figures:
            reason = "the figure is missing"
        elif value is None:
            reason = "the figure is null (not measured)"
        elif isinstance(value, bool) or not isinstance(value, numbers.Real):
            reason = f"the figure is not a number ({type(value).__name__})"
        elif math.isnan(float(value)):
            reason = "the figure is NaN"
        elif math.isinf(float(value)):
            reason = "the figure is infinite"
        out["value"] = _clean(value)
        if reason is not None:
            out["met"], out["reason"] = False, reason
            return out
        v = float(value)
        out["met"] = v >= self.bound if self.op == ">=" else v <= self.bound
        if not out["met"]:
            out["reason"] = f"{_num(v)} is not {self.op} {_num(self.bound)}"
        return out


def _num(x: float) -> str:
    return f"{x:g}"


def git_state(where: Path | str | None = None) -> dict[str, Any]:
    """The commit checked out at ``where`` (default: this file's repository) and whether
    tracked files differ from it (``git status --porcelain --untracked-files=no``).

    Take it *before* a run writes its outputs: the experiments rewrite tracked files
    (RESULTS.md, the CSVs, the plot), so a state taken after them is always dirty.
    Never raises: without git or a repository, ``commit`` is null and ``git_error`` says
    why. The scripts run as root, so the repository's own directory is declared safe for
    this one command (git otherwise refuses a repository another user owns)."""
    where = Path(where) if where is not None else Path(__file__).resolve().parent
    top = _toplevel(where)
    base = ["git"]
    if top is not None:
        base += ["-c", f"safe.directory={top}"]
    base += ["-C", str(where)]
    try:
        sha = subprocess.run([*base, "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=60).stdout.strip()
        status = subprocess.run([*base, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True,
                                timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        err = getattr(exc, "stderr", None) or str(exc)
        return {"commit": None, "dirty": None, "dirty_files": [],
                "git_error": str(err).strip()}
    files = [line[3:] for line in status.splitlines() if line.strip()]
    return {"commit": sha, "dirty": bool(files), "dirty_files": files}


def _toplevel(where: Path) -> Path | None:
    """The nearest folder at or above ``where`` holding a ``.git`` (a folder, or a file in
    a worktree), found without asking git (which may refuse the repository)."""
    for d in (where.resolve(), *where.resolve().parents):
        if (d / ".git").exists():
            return d
    return None


def machine() -> dict[str, Any]:
    """The cores this process may use and the machine has: the figures of a 2-core box
    and of a larger one do not compare."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_count": os.cpu_count(), "cpus_usable": affinity,
            "python": platform.python_version()}


def record(folder: Path | str, experiment: str, figures: Mapping[str, Any],
           targets: Sequence[Target] = (), command: Sequence[str] | None = None, *,
           source: str = "run", git: Mapping[str, Any] | None = None,
           notes: str | None = None) -> bool:
    """Write ``folder/results.json`` and return whether every target was met (True when
    there is none: ``targets`` is then an empty list in the file, and ``notes`` should say
    why).

    ``source`` is ``"run"`` for figures a fresh run measured, ``"report"`` for figures
    re-read from committed files. ``git`` is :func:`git_state` taken before the run wrote
    anything; without it the state is taken now. ``command`` defaults to this process's
    command line."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
    names = [t.figure for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"two targets on one figure: {names}")
    checked = [t.check(figures) for t in targets]
    all_met = all(c["met"] for c in checked)
    state = dict(git) if git is not None else git_state(folder)
    doc: dict[str, Any] = {
        "experiment": experiment,
        "source": source,
        "all_met": all_met,
        "targets": checked,
        "figures": _clean(dict(figures)),
        "commit": state.get("commit"),
        "dirty": state.get("dirty"),
        "dirty_files": state.get("dirty_files", []),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": list(command) if command is not None else [sys.executable, *sys.argv],
    }
    if "git_error" in state:
        doc["git_error"] = state["git_error"]
    if notes:
        doc["notes"] = notes
    path = Path(folder) / FILENAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)
    return all_met


def exit_code(all_met: bool) -> int:
    """0 when every target was met, 1 when one was missed."""
    return 0 if all_met else 1


def summary(path: Path | str) -> str:
    """One line per target of a written ``results.json``, for the end of a script's log."""
    doc = json.loads(Path(path).read_text())
    lines = [f"{doc['experiment']} ({doc['source']}): "
             + ("every target met" if doc["all_met"] else "TARGET MISSED")
             + ("" if doc["targets"] else " (no target: figures only)")]
    for t in doc["targets"]:
        lines.append(f"  {t['figure']} = {t['value']} ({t['op']} {_num(t['bound'])}): "
                     + ("met" if t["met"] else f"MISSED, {t['reason']}"))
    return "\n".join(lines)


def _clean(x: Any) -> Any:
    """``x`` as JSON can hold it: NaN and infinities as null, numpy scalars as numbers,
    tuples as lists, keys as strings."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "tolist"):  # numpy arrays
        return _clean(x.tolist())
    raise TypeError(f"a figure of type {type(x).__name__} cannot be written as JSON")
