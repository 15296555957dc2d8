"""The lab profiler's pure parts: the sweep plan, sample rows, parsing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from elastore.errors import ElastoreError
from elastore.lab.cassandra.profile import (
    Hogs,
    Point,
    bandwidth_path,
    done_points,
    pending_compactions,
    plan,
    point_rows,
)
from elastore.lab.sweep import constant_workload, key_table


def test_plan_puts_migration_outermost_and_load_innermost() -> None:
    pts = plan([300, 100], [0.95, 0.8], [4, 0], [0.5, 0])
    assert len(pts) == 16
    assert [p.index for p in pts] == list(range(16))
    assert [p.stream_mibps for p in pts] == [0.0] * 8 + [4.0] * 8  # one streaming run each
    assert [p.cluster_rps for p in pts[:2]] == [100.0, 300.0]
    assert (pts[0].interference, pts[0].read_ratio) == (0.0, 0.8)
    assert pts[4].interference == 0.5


@pytest.mark.parametrize("args, msg", [
    (([], [0.9], [0], [0]), "load"),
    (([-5], [0.9], [0], [0]), "load"),
    (([100], [1.2], [0], [0]), "read ratios"),
    (([100], [0.9], [-1], [0]), "migration"),
    (([100], [0.9], [0], [2]), "interference"),
])
def test_plan_rejects_bad_levels(args: tuple[list[float], ...], msg: str) -> None:
    with pytest.raises(ElastoreError, match=msg):
        plan(*args)


def test_constant_workload_has_the_rates_and_the_trace_popularity_slope() -> None:
    wl = constant_workload(200, 0.9, 20, 5)
    assert len(wl.start_s) == 4 and wl.window_seconds == 5
    np.testing.assert_allclose(wl.read_rps, 180)
    np.testing.assert_allclose(wl.write_rps, 20)
    assert wl.key_weight.sum() == pytest.approx(1)
    slope = np.polyfit(np.log(np.arange(1, 101)), np.log(wl.key_weight[:100]), 1)[0]
    assert slope == pytest.approx(-0.61, abs=0.01)


def test_point_rows_drop_the_warmup_and_are_per_server() -> None:
    p = Point(7, 300.0, 0.9, 4.0, 0.5)
    windows = [
        {"window": 0, "achieved_rps": "290", "p95_ms": "80", "p99_ms": "90", "errors": "0"},
        {"window": 1, "achieved_rps": "300", "p95_ms": "20", "p99_ms": "30", "errors": "0"},
        {"window": 2, "achieved_rps": "0", "p95_ms": "nan", "p99_ms": "nan", "errors": "3"},
        {"window": 3, "achieved_rps": "303", "p95_ms": "25", "p99_ms": "35", "errors": "1"},
    ]
    rows = point_rows(p, windows, nodes=3, migration_mibps=1.25, window_s=5)
    assert [r["window"] for r in rows] == [1, 3]  # warm-up and the empty window dropped
    assert rows[0]["read_rps"] == pytest.approx(90) and rows[0]["write_rps"] == pytest.approx(10)
    assert rows[1]["errors"] == 1
    assert {r["migration_mibps"] for r in rows} == {1.25}
    assert {r["interference"] for r in rows} == {0.5}
    assert {r["stream_throttle_mibps"] for r in rows} == {4.0}


def test_pending_compactions_parses_nodetool() -> None:
    text = ("concurrent compactors            1\npending tasks                    3\n"
            "compactions completed            8\n")
    assert pending_compactions(text) == 3
    assert pending_compactions("error: connection refused") is None


def test_done_points_and_bandwidth_path(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    assert done_points(out) == set()
    out.write_text("read_rps,point\n1,0\n2,0\n3,4\n")
    assert done_points(out) == {0, 4}
    assert bandwidth_path(out) == tmp_path / "s-bandwidth.csv"


def test_hogs_are_started_and_stopped_by_pid() -> None:
    with Hogs(0.5, cores=2) as h:
        assert h.count == 1 and len(h.procs) == 1
        assert h.procs[0].poll() is None
        proc = h.procs[0]
    assert proc.poll() is not None
    assert Hogs(0.0, cores=2).count == 0


def test_a_workloads_key_table_is_the_sweeps_request_mix(tmp_path: Path) -> None:
    """``--keys-from``: the sweep requests the workload's keys with its popularity (the
    border of the request mix a replay of it meets), and a file that has no usable table is
    a clear error, before any lab is touched."""
    hot = constant_workload(10, 1.0, 10, 5, (["a", "b", "c"], np.array([6.0, 3.0, 1.0])))
    path = tmp_path / "wl.json"
    hot.save(path)
    names, weight = key_table(path)
    assert names == ["a", "b", "c"]
    np.testing.assert_allclose(weight, [0.6, 0.3, 0.1])
    wl = constant_workload(100, 0.95, 20, 5, (names, weight))
    assert wl.keys == names and wl.key_weight.tolist() == weight.tolist()
    np.testing.assert_allclose(wl.read_rps + wl.write_rps, 100)
    # the default: 4000 Zipf keys
    assert len(constant_workload(100, 0.95, 20, 5).keys) == 4000

    with pytest.raises(ElastoreError, match="no such workload file"):
        key_table(tmp_path / "missing.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ElastoreError, match="not a readable workload"):
        key_table(tmp_path / "junk.json")
    doc = json.loads(path.read_text())
    doc["keys"]["weight"] = [0, 0, 0]
    (tmp_path / "zero.json").write_text(json.dumps(doc))
    with pytest.raises(ElastoreError, match="key table is empty or its weights"):
        key_table(tmp_path / "zero.json")
    res = subprocess.run([sys.executable, "-m", "elastore", "lab", "profile", "--keys-from",
                          str(tmp_path / "missing.json"), "--out", str(tmp_path / "s.csv")],
                         capture_output=True, text=True, check=False,
                         env=dict(os.environ, ELASTORE_LAB_DIR=str(tmp_path / "nolab")))
    assert res.returncode != 0 and "no such workload file" in res.stderr, res.stderr
    assert not (tmp_path / "s.csv").exists()
