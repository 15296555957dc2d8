"""The four-phase experiment's reporting (experiments/hubbub/run.py), on files written
here: the per-phase windows over the SLO and server-hours, the warm-up left out, and the
ratios RESULTS.md states."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

RUN = Path(__file__).resolve().parent.parent / "experiments" / "hubbub" / "run.py"


@pytest.fixture(scope="module")
def run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hubbub_run", RUN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hubbub_run"] = mod
    spec.loader.exec_module(mod)
    return mod


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _run_files(out: Path, name: str, nodes: list[int], p95: list[float],
               warm: int) -> None:
    """4 phases x 2 periods of 10 s; 2 windows of 5 s per period, after ``warm`` warm-up
    windows whose p95 is far over any SLO (they must not count)."""
    _write(out / f"{name}-periods.csv", [
        {"t_s": 10.0 * k, "phase": k // 2 + 1, "load_rps": 100, "observed_rps": 100,
         "level": 0, "index": 0.1, "cpu_cores": 0.5, "nodes": nodes[k], "desired": nodes[k],
         "why": ""} for k in range(8)])
    _write(out / f"{name}.csv", [
        {"window": k, "start_s": 5.0 * k, "scheduled_rps": 100, "achieved_rps": 100,
         "errors": 0, "p50_ms": 1, "p95_ms": 9999.0 if k < warm else p95[k - warm],
         "p99_ms": 1} for k in range(warm + 16)])


def test_the_report_counts_windows_per_phase_after_the_warm_up(run: ModuleType,
                                                                 tmp_path: Path) -> None:
    warm = run.warmup_windows(15.0)
    assert warm == 3
    # blind: 2 nodes throughout, windows over a 50-ms SLO in phases 2 (x2), 3 (x3), 4 (x1)
    blind = [10.0] * 16
    for k in (4, 5, 8, 9, 10, 14):
        blind[k] = 80.0
    _run_files(tmp_path, "blind-workload", [2] * 8, blind, warm)
    # hubbub: 3 nodes in phases 2-4, one window over in phase 3
    hub = [10.0] * 16
    hub[9] = float("nan")  # a window with no answer counts as over the SLO
    _run_files(tmp_path, "hubbub-workload", [2, 2, 3, 3, 3, 3, 3, 3], hub, warm)
    res = [run.summarise(n, tmp_path, 10.0, 50.0, 15.0)
           for n in ("blind-workload", "hubbub-workload")]
    b, h = (r["phases"] for r in res)
    assert [b[p]["violations"] for p in (1, 2, 3, 4)] == [0, 2, 3, 1]
    assert [h[p]["violations"] for p in (1, 2, 3, 4)] == [0, 0, 1, 0]
    assert all(b[p]["windows"] == 4 for p in (1, 2, 3, 4))
    assert b[1]["server_hours"] == pytest.approx(2 * 4 * 5 / 3600)
    assert h[2]["server_hours"] == pytest.approx(3 * 4 * 5 / 3600)
    v, vm = run.ratios(res, "workload")
    assert v == pytest.approx(6 / 1)
    assert vm == pytest.approx((2 * 4 + 3 * 12) / (2 * 16))
    assert all(math.isnan(x) for x in run.ratios(res, "cpu"))
