"""Shared fixtures. ``shared_dir`` finds ../shared (the traces and lab notes).

A missing ../shared is the one thing a test may skip for, and only on a user's machine:
under CI (``CI`` set) it is a failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import figures
import pytest

REPO = Path(__file__).resolve().parent.parent


def _shared() -> Path | None:
    env = os.environ.get("ELASTORE_SHARED")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared")
    for c in candidates:
        if (c / "traces" / "wikipedia").is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    found = _shared()
    if found is None:
        msg = "../shared (traces) not found beside the repo; set ELASTORE_SHARED"
        if os.environ.get("CI"):
            pytest.fail(msg + " — CI always has it, so this is a failure")
        pytest.skip(msg)
    return found


@pytest.fixture(scope="session")
def all_projects_csv(shared_dir: Path) -> Path:
    return shared_dir / "traces" / "wikipedia" / "all-projects-2008-10_2009-12-hourly.csv"


@pytest.fixture(scope="session")
def pages_csv(shared_dir: Path) -> Path:
    return shared_dir / "traces" / "wikipedia" / "en-2016-01-pages-hourly.csv.gz"


# -- the suite's own clock (issue 33) ------------------------------------------------------
# ``tests/tiers.py`` sets ELASTORE_TIMINGS to a file; every test's setup, call and teardown
# time is appended to it as one JSON line, so that the run can end with its slowest files.
# Under pytest-xdist each report reaches the controller as well as being made on a worker:
# only the controller (no ``workerinput``) writes, so nothing is counted twice.
_TIMINGS = os.environ.get("ELASTORE_TIMINGS")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _TIMINGS:
        return
    import json

    line = json.dumps({"nodeid": report.nodeid, "when": report.when,
                       "seconds": round(float(report.duration), 3),
                       "outcome": report.outcome}) + "\n"
    with open(_TIMINGS, "a", encoding="utf-8") as fh:
        fh.write(line)


def pytest_configure(config: pytest.Config) -> None:
    global _TIMINGS
    if hasattr(config, "workerinput"):
        _TIMINGS = None  # a pytest-xdist worker: the controller records its reports


# -- quantities: recorded in make test, judged in make lab-check (tests/figures.py) -------
_BOOKS: list[figures.FigureBook] = []


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Iterator[figures.FigureBook]:
    """Record a quantity with its target: ``figure(name, value, op, bound, meaning)``.
    It never fails ``make test``; under ``make lab-check`` a miss fails the test once
    its mechanism checks have run."""
    book = figures.FigureBook(request.node.nodeid, figures.judge_folder() is not None,
                              figures.sink_path())
    _BOOKS.append(book)
    yield book
    missed = book.misses()
    if book.judging and missed:
        pytest.fail("figures off target: " + "; ".join(
            f"{r.key} = {r.value} (target {r.target.op} {r.target.bound:g}): {r.reason}"
            for r in missed), pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    folder = figures.judge_folder()
    if folder is None or hasattr(session.config, "workerinput"):
        return
    if not any(b.seen for b in _BOOKS):
        return  # nothing measured: a results.json of no figure would read as all met
    met = figures.write_results(folder, _BOOKS, [sys.executable, "-m", "pytest",
                                                 *session.config.invocation_params.args])
    print(f"\nlab figures: {folder / 'results.json'}: "
          + ("every target met" if met else "TARGET MISSED"))
