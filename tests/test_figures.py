"""The figure book (tests/figures.py): a quantity is recorded, never judged, in make test,
and judged, failing its test and written to results.json, in make lab-check."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import figures
import pytest

HERE = Path(__file__).resolve().parent


def test_a_figure_is_recorded_with_its_target_and_a_missing_one_is_never_met(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sink = tmp_path / "figures.jsonl"
    book = figures.FigureBook("tests/test_tc_lab.py::test_fifo", False, sink)
    book("sum_mbit", 50.1, "<=", 44.0, "Mbit/s through a 40-Mbit/s FIFO")
    book("floor_mbit", 39, ">=", 36.0, "Mbit/s")
    book("lost", float("nan"), "<=", 0.0, "rows")
    book("absent", None, ">=", 1.0, "reads")
    with pytest.raises(ValueError, match="recorded twice"):
        book("sum_mbit", 1.0, "<=", 44.0, "again")
    assert [(r.key.split("::")[-1], r.met) for r in book.seen] == [
        ("sum_mbit", False), ("floor_mbit", True), ("lost", False), ("absent", False)]
    assert book.seen[0].key == "test_tc_lab::test_fifo::sum_mbit"
    out = capsys.readouterr().out
    assert "FIGURE sum_mbit = 50.1 (target <= 44" in out and "judged in make lab-check" in out
    off = figures.off_target(sink)
    assert [r["figure"].split("::")[-1] for r in off] == ["sum_mbit", "lost", "absent"]
    assert off[1]["value"] is None  # NaN is written as null, the file stays JSON


def test_a_two_sided_target_is_two_figures() -> None:
    book = figures.FigureBook("tests/test_x.py::test_y", False, None)
    book.within("rate", 11.5, 10, 0.10, "Mbit/s")
    assert [(r.key.split("::")[-1], r.target.op, r.target.bound, r.met) for r in book.seen] \
        == [("rate_low", ">=", 9.0, True), ("rate_high", "<=", pytest.approx(11.0), False)]
    assert book.seen[0].target.source == "was assert rate == approx(10, rel=0.1)"


def test_the_judged_figures_are_written_with_their_targets(tmp_path: Path) -> None:
    book = figures.FigureBook("tests/test_x.py::test_y", True, None)
    book("rate", 9.6, ">=", 9.0, "Mbit/s")
    book("late_s", 70.0, "<=", 60.0, "s")
    assert figures.write_results(tmp_path, [book], ["pytest"]) is False
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["experiment"] == "lab-figures" and doc["all_met"] is False
    assert [(t["figure"], t["met"]) for t in doc["targets"]] == [
        ("test_x::test_y::rate", True), ("test_x::test_y::late_s", False)]
    assert math.isclose(doc["figures"]["test_x::test_y::rate"], 9.6)


def _run(tmp_path: Path, judge: bool) -> tuple[int, str, Path]:
    (tmp_path / "test_m.py").write_text(
        "def test_q(figure):\n"
        "    figure('x', 5.0, '<=', 1.0, 'a quantity')\n"
        "    assert True  # the mechanism holds\n")
    out_dir = tmp_path / "judged"
    env = {k: v for k, v in os.environ.items()
           if k not in (figures.JUDGE_ENV, figures.SINK_ENV, "ELASTORE_TIMINGS")}
    env["PYTHONPATH"] = str(HERE)
    if judge:
        env[figures.JUDGE_ENV] = str(out_dir)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p",
                           "no:cacheprovider", "-p", "no:xdist", "-s", str(tmp_path / "test_m.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr, out_dir / "results.json"


def test_make_test_records_a_missed_figure_and_passes(tmp_path: Path) -> None:
    rc, out, results = _run(tmp_path, judge=False)
    assert rc == 0, out
    assert "FIGURE x = 5 (target <= 1; a quantity): OFF TARGET" in out, out
    assert not results.exists()


def test_lab_check_fails_a_missed_figure_and_writes_it(tmp_path: Path) -> None:
    rc, out, results = _run(tmp_path, judge=True)
    assert rc == 1, out
    assert "figures off target: test_m::test_q::x = 5.0" in out, out
    doc = json.loads(results.read_text())
    assert doc["all_met"] is False and doc["targets"][0]["value"] == 5.0
