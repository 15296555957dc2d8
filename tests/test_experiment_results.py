"""experiments/results.py, what every lab-check measurement writes (results.json): pure,
written to a temporary folder, no lab."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "experiments" / "results.py"


@pytest.fixture(scope="module")
def res() -> ModuleType:
    spec = importlib.util.spec_from_file_location("experiment_results", MODULE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["experiment_results"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _read(folder: Path) -> dict[str, Any]:
    text = (folder / "results.json").read_text()
    # strict JSON: NaN or Infinity would be invalid for other readers
    doc: dict[str, Any] = json.loads(
        text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    return doc


def test_writes_what_a_reader_needs(res: ModuleType, tmp_path: Path) -> None:
    figures = {"ratio": 3.5, "violations": {"without": 34, "bwman": 1}, "runs": 4}
    targets = [res.Target("ratio", ">=", 2, "violated windows without / with", "docs"),
               res.Target("runs", ">=", 2, "runs")]
    ok = res.record(tmp_path, "bwman", figures, targets, command=["python", "run.py"])
    assert ok is True
    doc = _read(tmp_path)
    assert doc["experiment"] == "bwman"
    assert doc["source"] == "run"
    assert doc["all_met"] is True
    assert doc["figures"] == figures
    assert doc["command"] == ["python", "run.py"]
    assert doc["machine"]["cpu_count"] == os.cpu_count()
    assert doc["machine"]["cpus_usable"] == len(os.sched_getaffinity(0))
    assert doc["date"].endswith("+00:00")  # ISO-8601 in UTC
    assert {"commit", "dirty", "dirty_files"} <= set(doc)  # tmp_path: no repository (null)
    t = doc["targets"][0]
    assert t == {"figure": "ratio", "op": ">=", "bound": 2, "meaning":
                 "violated windows without / with", "source": "docs", "value": 3.5,
                 "met": True}


def test_a_missed_target_is_false(res: ModuleType, tmp_path: Path) -> None:
    targets = [res.Target("ratio", ">=", 2), res.Target("lost", "<=", 0)]
    assert res.record(tmp_path, "x", {"ratio": 1.9, "lost": 0}, targets, command=[]) is False
    doc = _read(tmp_path)
    assert doc["all_met"] is False
    ratio, lost = doc["targets"]
    assert ratio["met"] is False and "1.9 is not >= 2" in ratio["reason"]
    assert lost["met"] is True and "reason" not in lost
    assert res.exit_code(False) == 1 and res.exit_code(True) == 0
    # the bound itself is met on both sides
    assert res.record(tmp_path, "x", {"ratio": 2.0, "lost": 0}, targets, command=[])


@pytest.mark.parametrize("value, reason", [
    (float("nan"), "NaN"), (math.inf, "infinite"), (None, "null"), ("34", "not a number"),
    (True, "not a number")])
def test_a_figure_that_is_not_a_number_is_not_met(res: ModuleType, tmp_path: Path,
                                                  value: Any, reason: str) -> None:
    # <= would pass on NaN if it were read as a comparison that is simply false for ">"
    targets = [res.Target("p95", "<=", 100), res.Target("ratio", ">=", 2)]
    assert res.record(tmp_path, "x", {"p95": value, "ratio": value}, targets,
                      command=[]) is False
    doc = _read(tmp_path)
    for t in doc["targets"]:
        assert t["met"] is False
        assert reason in t["reason"]
    if isinstance(value, float):
        assert doc["figures"]["p95"] is None  # written as null, not NaN


def test_a_missing_figure_is_not_met(res: ModuleType, tmp_path: Path) -> None:
    assert res.record(tmp_path, "x", {}, [res.Target("ratio", ">=", 2)], command=[]) is False
    t = _read(tmp_path)["targets"][0]
    assert t["met"] is False and t["value"] is None and "missing" in t["reason"]


def test_nan_anywhere_is_written_as_null(res: ModuleType, tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    figures = {"medians": {"A0": float("nan"), "A1": np.float64(43.0)},
               "p95s": [1.0, math.inf, np.nan], "n": np.int64(7), "pair": (1, 2)}
    assert res.record(tmp_path, "repeatability", figures, [], command=[]) is True
    doc = _read(tmp_path)
    assert doc["figures"] == {"medians": {"A0": None, "A1": 43.0}, "p95s": [1.0, None, None],
                              "n": 7, "pair": [1, 2]}


def test_no_target_means_all_met_and_an_empty_list(res: ModuleType, tmp_path: Path) -> None:
    assert res.record(tmp_path, "noise", {"spread": 2.1}, [], command=[], source="report",
                      notes="no target stated") is True
    doc = _read(tmp_path)
    assert doc["targets"] == [] and doc["all_met"] is True
    assert doc["source"] == "report" and doc["notes"] == "no target stated"


def test_bad_arguments_are_refused(res: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        res.Target("ratio", ">", 2)
    with pytest.raises(ValueError):
        res.Target("ratio", ">=", float("nan"))
    with pytest.raises(ValueError):
        res.record(tmp_path, "x", {}, [], command=[], source="guess")
    with pytest.raises(ValueError):
        res.record(tmp_path, "x", {"a": 1}, [res.Target("a", ">=", 1), res.Target("a", "<=", 2)],
                   command=[])
    assert not (tmp_path / "results.json").exists()


def test_the_commit_is_the_repository_head(res: ModuleType, tmp_path: Path) -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    porcelain = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout
    state = res.git_state(REPO / "experiments")
    assert state["commit"] == head
    assert state["dirty"] is bool(porcelain.strip())
    # record() takes the state it is given (taken before the run wrote its outputs) ...
    res.record(tmp_path, "x", {}, [], command=[], git=state)
    assert _read(tmp_path)["commit"] == head
    # ... or, without one, the state of the folder it writes to (a repository of its own
    # here: a test does not write into this one)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "f"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    folder = tmp_path / "exp"
    folder.mkdir()
    res.record(folder, "x", {}, [], command=[])
    doc = _read(folder)
    assert doc["commit"] == sha and doc["dirty"] is False and doc["dirty_files"] == []
    (tmp_path / "f").write_text("2")  # a tracked file changed: dirty, and which
    res.record(folder, "x", {}, [], command=[])
    doc = _read(folder)
    assert doc["dirty"] is True and doc["dirty_files"] == ["f"]


def test_without_a_repository_the_commit_is_null(res: ModuleType, tmp_path: Path) -> None:
    state = res.git_state(tmp_path)
    assert state["commit"] is None and state["git_error"]
    res.record(tmp_path, "x", {}, [], command=[])
    doc = _read(tmp_path)
    assert doc["commit"] is None and doc["git_error"]


def test_the_summary_names_a_missed_target(res: ModuleType, tmp_path: Path) -> None:
    res.record(tmp_path, "bwman", {"ratio": 1.0}, [res.Target("ratio", ">=", 2)], command=[])
    text = res.summary(tmp_path / "results.json")
    assert "TARGET MISSED" in text and "ratio = 1.0 (>= 2): MISSED" in text


# --- the scripts' hooks: their figures and targets, on made-up runs -------------------------
def _script(name: str, path: Path, monkeypatch: pytest.MonkeyPatch,
            folder: Path) -> ModuleType:
    """An experiment's script as a module, writing into ``folder`` instead of its own.
    sys.path is put back after the test (a script adds to it when imported)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.syspath_prepend(str(REPO / "experiments"))  # as its __main__ does
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "HERE", folder)
    return mod


def _run(arm: str, rep: int, violations: int, **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "arm": arm, "rep": rep, "windows": 60, "violations": violations,
        "violation_pct": 100 * violations / 60, "windows_during": 20,
        "violations_during": violations, "migration_s": 100.0, "migration_error": None,
        "rows_ok": True, "rows": 3000, "achieved_rps": 101.4, "errors": 0,
        "worst_p95_ms": 150.0, "metric_errors": 0, "moved_mib": 200.0, "intact": True,
        "objects": (4000, 400), "violated_at": [], "mig": (60.0, 160.0),
        "scale_out_s": 90.0, "nodes_after": 4, "new_pod_shaped": arm == "agent"}
    r.update(extra)
    return r


ARGS = argparse.Namespace(reps=1, from_rep=1, nic_mbit=8.0, warmup=60.0, load_rps=45.0)
CAP = SimpleNamespace(slo_ms=100.0)


@pytest.mark.parametrize("without, bwman, ratio, met", [
    (34, 1, 34.0, True), (4, 2, 2.0, True), (3, 2, 1.5, False),
    (5, 0, 5.0, True),  # none under BwMan: the count without, a lower bound
    (0, 0, 0.0, False)])  # nothing broke the SLO without BwMan: nothing shown
def test_bwman_ratio_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, without: int,
                            bwman: int, ratio: float, met: bool) -> None:
    mod = _script("bwman_run", REPO / "experiments" / "bwman" / "run.py", monkeypatch,
                  tmp_path)
    runs = [_run("without", 1, without), _run("bwman", 1, bwman)]
    assert mod.lab_check(runs, ARGS, CAP, 101.4, "run", {"commit": "x"}) is met
    doc = _read(tmp_path)
    assert doc["figures"]["bwman_violation_ratio"] == ratio
    assert doc["figures"]["ratio_is_lower_bound"] is (bwman == 0)
    assert [t["figure"] for t in doc["targets"]] == ["bwman_violation_ratio",
                                                     "runs_rows_lost"]


def test_swift_bwman_ratio_and_lost_objects(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    mod = _script("swift_bwman_run", REPO / "experiments" / "swift-bwman" / "run.py",
                  monkeypatch, tmp_path)
    runs = [_run("without", 1, 28), _run("bwman", 1, 5)]
    assert mod.lab_check(runs, ARGS, CAP, "report", {"commit": "x"}) is True
    doc = _read(tmp_path)
    assert doc["figures"]["swift_bwman_violation_ratio"] == 5.6
    assert doc["source"] == "report"
    runs[1]["intact"] = False
    assert mod.lab_check(runs, ARGS, CAP, "run", {"commit": "x"}) is False
    lost = _read(tmp_path)["targets"][1]
    assert lost["figure"] == "runs_objects_lost" and lost["value"] == 1 and not lost["met"]


def test_bwman_a_lost_row_misses_although_the_ratio_is_met(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    mod = _script("bwman_run", REPO / "experiments" / "bwman" / "run.py", monkeypatch,
                  tmp_path)
    runs = [_run("without", 1, 34), _run("bwman", 1, 1, rows_ok=False)]
    assert mod.lab_check(runs, ARGS, CAP, 101.4, "run", {"commit": "x"}) is False


def test_agent_has_no_target_on_windows(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    mod = _script("agent_run", REPO / "experiments" / "agent" / "run.py", monkeypatch,
                  tmp_path)
    # more windows over the SLO with the agent than without: a figure, not a miss
    runs = [_run("without", 1, 2), _run("agent", 1, 9)]
    assert mod.lab_check(runs, ARGS, 121.7, 100.0, "run", {"commit": "x"}) is True
    doc = _read(tmp_path)
    assert [t["figure"] for t in doc["targets"]] == ["runs_rows_lost"]
    assert doc["figures"]["violated_windows_agent"] == 9
    assert doc["figures"]["agent_runs_new_pod_not_shaped"] == 0
    assert "read the counts" in doc["notes"]
    runs[0]["rows_ok"] = False
    assert mod.lab_check(runs, ARGS, 121.7, 100.0, "run", {"commit": "x"}) is False


def test_repeatability_figures() -> None:
    spec = importlib.util.spec_from_file_location(
        "repeatability", REPO / "experiments" / "profiles" / "repeatability.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    points = {"warm": [5000.0, 900.0, 903.0, 910.0],  # from cold: not in the spread
              "A0 preload": [300.0, 91.0, 90.0, 95.0],  # the first window: the warm-up
              "B0 flushed, no preload": [10.0, 40.0, 43.0, 50.0]}
    f = mod.figures(600.0, points)
    assert f["median_p95_ms"] == {"warm": 903.0, "A0 preload": 91.0,
                                  "B0 flushed, no preload": 43.0}
    assert f["spread_median_p95_ms_min"] == 43.0 and f["spread_median_p95_ms_max"] == 91.0
    assert f["spread_median_p95_max_over_min"] == pytest.approx(91 / 43)
    assert f["spread_window_p95_ms_min"] == 40.0 and f["spread_window_p95_ms_max"] == 95.0
    assert f["points_in_spread"] == 2
