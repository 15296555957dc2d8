"""The real shared Wikipedia traces: the numbers issue 2 promises."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner

from elastore.cli import cli, register
from elastore.traces import builtin_trace_path, read_pages_csv
from elastore.traces.workload import BuildParams, Workload, build_workload

register()


def run(args: list[str]) -> str:
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_builtin_trace_is_the_shared_file(all_projects_csv: Path) -> None:
    assert builtin_trace_path().read_bytes() == all_projects_csv.read_bytes()


def test_inspect_all_projects(all_projects_csv: Path) -> None:
    doc = json.loads(run(["trace", "inspect", str(all_projects_csv), "--json"]))
    assert doc["hours"] == 10_537
    assert doc["missing_hours"] == 84
    assert len(doc["gaps"]) == 5
    assert [o["hour"] for o in doc["outliers"]] == ["2008-10-21 11:00:00", "2008-10-22 12:00:00"]
    assert doc["gaps"][0] == ["2008-10-21 13:00:00", "2008-10-22 11:00:00"]


def test_inspect_default_window_shape() -> None:
    doc = json.loads(run(["trace", "inspect", "--start", "2009-03-08", "--end", "2009-03-22",
                          "--json"]))
    assert doc["hours"] == 360 and doc["missing_hours"] == 0 and doc["outliers"] == []
    assert 9.6e6 < doc["min"] < 9.8e6 and 23.5e6 < doc["max"] < 23.7e6
    assert doc["daily"]["trough_hour_utc"] == 7 and doc["daily"]["peak_hour_utc"] == 17
    assert doc["weekly"]["weekend_ratio"] < 1


def test_build_from_per_page_file(pages_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "wl.json.gz"
    run(["trace", "build", str(pages_csv), "-o", str(out)])
    wl = Workload.load(out)
    # Independent check: sum the kept pages per hour straight from the file with pandas.
    raw = pd.read_csv(pages_csv)
    kept = raw[raw["page"].isin(set(wl.keys))]
    expected = kept.groupby("hour_utc")["requests"].sum().sort_index().to_numpy(float)
    assert len(expected) == 744
    got = wl.hourly_requests()
    assert np.array_equal(got, expected)  # exact: windows partition each hour
    # total rate follows the hourly totals: per-hour mean rate = total / hour_seconds
    per_hour_rate = np.nanmean(wl.total_rps.reshape(744, 60), axis=1)
    assert np.allclose(per_hour_rate, expected / wl.hour_seconds)
    # noise pages are gone, and the kept pages are the top 5 % of the rest
    assert "Main_Page" not in wl.keys and not any(k.startswith("Special:") for k in wl.keys)
    special = raw["page"].str.startswith("Special:", na=False)  # na: pandas 2's object str
    content = raw[~raw["page"].isin(["Main_Page"]) & ~special]
    assert wl.meta["pages_kept"] == len(wl.keys)
    assert len(wl.keys) < 0.06 * content["page"].nunique()
    # key popularity is heavy-tailed
    w = np.sort(wl.key_weight)[::-1]
    n = len(w)
    assert w[: n // 100].sum() > 5 * (n // 100) / n  # top 1 % carry > 5x a uniform share
    assert w[0] / np.median(w) > 10
    ranks = np.arange(1, n + 1)
    slope = np.polyfit(np.log(ranks[9:]), np.log(w[9:]), 1)[0]
    assert slope < -0.3  # power-law-like rank/frequency decay


def test_build_per_page_window(pages_csv: Path) -> None:
    table = read_pages_csv(pages_csv)
    wk = table.window(pd.Timestamp("2016-01-04"), pd.Timestamp("2016-01-10 23:00"))
    wl = build_workload(wk, BuildParams(peak_rps=400))
    assert wl.meta["trace_hours"] == 168
    assert np.nanmax(wl.total_rps) == 400
