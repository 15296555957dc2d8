"""The test tiers' own logic (tests/tiers.py): every test lands in exactly one phase of
``make test`` or in ``make lab-check``, and the closing counts and slowest files are read
back from the per-test timing lines as pytest wrote them."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest
import tiers
from _pytest.mark.expression import Expression

MARKERS = ("k8s", "lab", "slow", "concurrent", "measure")


def _selected(expr: str, marks: set[str]) -> bool:
    return bool(Expression.compile(expr).evaluate(lambda name, **_: name in marks))


def _marker_sets() -> list[set[str]]:
    return [set(c) for n in range(len(MARKERS) + 1) for c in combinations(MARKERS, n)]


def test_every_test_is_in_exactly_one_tier_and_measurements_never_in_make_test() -> None:
    phases = {p.name: p for p in tiers.test_phases([])}
    exprs = {name: p.argv[p.argv.index("-m") + 1] for name, p in phases.items()
             if "-m" in p.argv}
    assert set(exprs) == {"parallel", "lab", "control-plane"}
    assert exprs["lab"] == tiers.LAB_MARKERS
    for marks in _marker_sets():
        chosen = [name for name, e in exprs.items() if _selected(e, marks)]
        if "measure" in marks:
            assert chosen == [], (marks, chosen)  # make lab-check's only
            continue
        assert len(chosen) == 1, (marks, chosen)
        if "lab" in marks and ("concurrent" not in marks or "k8s" in marks):
            # a store under load, or a store beside a control plane: alone
            assert chosen == ["lab"], marks
        elif "k8s" in marks:
            # a control plane over kwok's pods and no store: beside the lab phase
            assert chosen == ["control-plane"], marks
        else:
            # nothing timed: the unit suites and the lab tests that say they time nothing
            assert chosen == ["parallel"], marks


def test_only_the_control_plane_phase_runs_beside_another_and_niced() -> None:
    phases = tiers.test_phases([])
    names = [(p.name, p.beside) for p in phases]
    k = names.index(("control-plane", True))
    assert names[k - 1] == ("lab", False)  # beside the lab phase
    assert [n for n, beside in names if beside] == ["control-plane"]
    assert phases[k - 1].argv[0] != "nice"  # the critical path keeps full priority
    assert phases[k].argv[:3] == ("nice", "-n", str(tiers.BESIDE_NICE)) and \
        tiers.BESIDE_NICE > 0


def test_phases_beside_another_run_at_the_same_time_and_their_failures_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The first phase waits for two files, each written only by one of the two phases
    beside it: the run ends only if all three ran at once (no clock involved). A beside
    phase's exit code is the run's, and each one's output, kept to a log, is printed."""
    flags = [tmp_path / "second-started", tmp_path / "third-started"]
    first = ("sh", "-c", f"n=0; while [ ! -e {flags[0]} ] || [ ! -e {flags[1]} ]; do "
             f"n=$((n+1)); [ $n -gt 600 ] && exit 9; sleep 0.1; done; sleep 0.6; "
             "echo first-done")
    second = ("sh", "-c", f"echo second-said-this; touch {flags[0]}; exit 3")
    third = ("sh", "-c", f"echo third-said-this; touch {flags[1]}")
    monkeypatch.setattr(tiers, "OUT", tmp_path / "times")
    monkeypatch.setattr(tiers, "test_phases", lambda extra: [
        tiers.Phase("first", first), tiers.Phase("second", second, beside=True),
        tiers.Phase("third", third, beside=True)])
    assert tiers.run_tests(None, []) == 3
    out = capsys.readouterr().out
    assert "first-done" in out and "second-said-this" in out and "third-said-this" in out, out
    assert "second (beside)" in out and "FAILED (exit 3)" in out, out
    summary = json.loads((tmp_path / "times" / "summary.json").read_text())
    assert [(p["name"], p["exit"]) for p in summary["phases"]] == [
        ("first", 0), ("second (beside)", 3), ("third (beside)", 0)]
    # a beside phase's own time: it ended as soon as it wrote its file, 0.6 s and more
    # before the first phase did (not the time until all had ended)
    first_s, *beside_s = (p["seconds"] for p in summary["phases"])
    assert all(s < first_s - 0.4 for s in beside_s), summary["phases"]


def _lines(path: Path, *recs: tuple[str, str, float, str]) -> Path:
    path.write_text("".join(json.dumps({"nodeid": n, "when": w, "seconds": s,
                                        "outcome": o}) + "\n" for n, w, s, o in recs)
                    + '{"nodeid": "cut sh')  # a line cut short by a killed run
    return path


def test_outcomes_and_files_are_read_back_from_the_timing_lines(tmp_path: Path) -> None:
    f = _lines(tmp_path / "p.jsonl",
               ("tests/a.py::ok", "setup", 1.0, "passed"),
               ("tests/a.py::ok", "call", 2.0, "passed"),
               ("tests/a.py::ok", "teardown", 0.5, "passed"),
               ("tests/a.py::bad", "setup", 0.1, "passed"),
               ("tests/a.py::bad", "call", 0.2, "failed"),
               ("tests/a.py::bad", "teardown", 0.1, "passed"),
               ("tests/b.py::err", "setup", 3.0, "failed"),  # a fixture that failed
               ("tests/b.py::err", "teardown", 0.0, "passed"),
               ("tests/b.py::skip", "setup", 0.0, "skipped"),
               ("tests/b.py::skip", "teardown", 0.0, "passed"),
               ("tests/b.py::down", "call", 1.0, "passed"),
               ("tests/b.py::down", "teardown", 4.0, "failed"))  # teardown failed
    assert tiers._outcomes(f) == {"tests/a.py::ok": "passed", "tests/a.py::bad": "failed",
                                  "tests/b.py::err": "failed", "tests/b.py::skip": "skipped",
                                  "tests/b.py::down": "failed"}
    assert tiers._by_file(f) == pytest.approx({"tests/a.py": 3.9, "tests/b.py": 8.0})
    assert tiers._outcomes(tmp_path / "none.jsonl") == {}


def test_lab_check_refuses_an_unknown_measurement(capsys: pytest.CaptureFixture[str]) -> None:
    assert tiers.main(["lab-check", "--only", "calibration,nonsense"]) == 2
    assert "no measurement named nonsense" in capsys.readouterr().err
    assert tiers.main(["lab-check", "--list"]) == 0
    listed = capsys.readouterr().out
    for m in tiers.measurements():
        assert m.name in listed and m.results.endswith("/results.json")


def test_a_run_is_recorded_with_its_provenance_and_printed_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`record` appends the last run's summary, label and note as one line; `history` prints
    each run with its failures. A missing or foreign summary is refused and nothing is
    written."""
    history = tmp_path / "results" / "runs.jsonl"
    summary = tmp_path / "summary.json"
    assert tiers.record("CI", "", summary, history) == 2  # no run yet
    assert "summary.json is missing" in capsys.readouterr().err and not history.exists()
    summary.write_text('{"something": "else"}')
    assert tiers.record("CI", "", summary, history) == 2
    assert not history.exists()
    run = {**tiers._provenance(), "phases": [{"name": "lab", "seconds": 1500.0, "exit": 1}],
           "total_seconds": 1860.0, "tests": {"passed": 7, "failed": 1, "skipped": 0},
           "failed": ["tests/test_x.py::test_y"], "exit": 1}
    summary.write_text(json.dumps(run))
    assert tiers.record(" ", "", summary, history) == 2  # a label says which run
    assert tiers.record("fresh clone, quiet", "the lab phase failed once", summary,
                        history) == 0
    assert tiers.record("CI", "", summary, history) == 0
    lines = history.read_text().splitlines()
    assert [json.loads(x)["label"] for x in lines] == ["fresh clone, quiet", "CI"]
    assert json.loads(lines[0])["commit"] == run["commit"]
    capsys.readouterr()
    assert tiers.show_history(history, 1) == 0
    out = capsys.readouterr().out
    assert "[CI] 31.0 min: 7 passed, 1 failed (lab 25.0 min FAILED)" in out, out
    assert "tests/test_x.py::test_y" in out and "fresh clone" not in out
    assert tiers.show_history(tmp_path / "none.jsonl", None) == 2


def test_make_test_runs_the_lab_on_c1_alone_and_lab_check_on_the_default_jit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JIT switch reaches every make-test phase (beside ones too) and never a
    measurement, even when the caller's environment has it."""
    from elastore.lab.cassandra.nodes import QUICK_JIT_ENV

    assert tiers.QUICK_JIT == QUICK_JIT_ENV

    def said(name: str) -> tuple[str, ...]:
        return ("sh", "-c", f'echo "${{{QUICK_JIT_ENV}:-unset}}" > {tmp_path / name}')

    monkeypatch.setattr(tiers, "OUT", tmp_path / "times")
    monkeypatch.setattr(tiers, "test_phases", lambda extra: [
        tiers.Phase("lab", said("lab")), tiers.Phase("beside", said("beside"), beside=True)])
    monkeypatch.setattr(tiers, "measurements", lambda: [
        tiers.Measurement("m", said("m"), "x/results.json", 1, "a measurement")])
    monkeypatch.delenv(QUICK_JIT_ENV, raising=False)
    assert tiers.run_tests(None, []) == 0
    monkeypatch.setenv(QUICK_JIT_ENV, "1")
    assert tiers.run_lab_check(None) == 0
    assert [(tmp_path / n).read_text().strip() for n in ("lab", "beside", "m")] == [
        "1", "1", "unset"]
