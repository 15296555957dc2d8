"""The ProRenaTa workload construction on synthetic per-page data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elastore.errors import TraceError
from elastore.traces import read_pages_csv
from elastore.traces.workload import BuildParams, Workload, build_workload, noise_mask


def synthetic_pages(tmp_path: Path, hours: int = 6, skip_hour: int | None = None) -> Path:
    rows = ["hour_utc,page,requests"]
    for h in range(hours):
        if h == skip_hour:
            continue
        stamp = f"2016-01-01 {h:02d}:00:00"
        rows.append(f"{stamp},Main_Page,100000")
        rows.append(f"{stamp},Special:Search,50000")
        for i in range(100):  # page Pi gets ~ (i+1)^-1.2 popularity
            rows.append(f"{stamp},P{i},{int(20000 * (i + 1) ** -1.2) + 1}")
    p = tmp_path / "pages.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_noise_mask_exact_and_globs() -> None:
    pages = ["Main_Page", "Special:Random", "Foo", "Main_Page_2"]
    m = noise_mask(pages, ("Main_Page", "Special:*"))
    assert list(m) == [True, True, False, False]


def test_steps_noise_top_writes_windows_compression(tmp_path: Path) -> None:
    table = read_pages_csv(synthetic_pages(tmp_path))
    wl = build_workload(table, BuildParams(seed=7))
    # 1-2: noise gone, top 5 % of the 100 content pages = 5 pages, the most popular ones
    assert wl.keys == ["P0", "P1", "P2", "P3", "P4"]
    assert wl.meta["noise_pages_removed"] == 2
    assert np.all(np.diff(wl.key_weight) <= 0) and wl.key_weight.sum() == pytest.approx(1)
    # 4-5: 60 windows per hour, 1 h -> 600 s, so 10 s windows back to back
    assert len(wl.start_s) == 6 * 60 and wl.window_seconds == 10
    assert np.allclose(np.diff(wl.start_s), 10) and wl.duration_s == 3600
    # the hour totals are exact: Poisson windows conditioned on the hour's count
    per_page = np.array([int(20000 * (i + 1) ** -1.2) + 1 for i in range(5)])
    assert np.allclose(wl.hourly_requests(), per_page.sum())
    # 3: about 5 % writes, seeded
    share = np.nansum(wl.write_rps) / np.nansum(wl.total_rps)
    assert 0.04 < share < 0.06
    again = build_workload(table, BuildParams(seed=7))
    assert np.array_equal(again.write_rps, wl.write_rps)
    other = build_workload(table, BuildParams(seed=8))
    assert not np.array_equal(other.write_rps, wl.write_rps)
    # windows vary (Poisson), hours do not
    hour0 = wl.total_rps[:60]
    assert hour0.std() > 0


def test_peak_scaling(tmp_path: Path) -> None:
    table = read_pages_csv(synthetic_pages(tmp_path))
    wl = build_workload(table, BuildParams(peak_rps=500.0))
    assert np.nanmax(wl.total_rps) == pytest.approx(500.0)
    assert wl.meta["scale"] == pytest.approx(500.0 / wl.meta["peak_rps_before_scaling"])
    assert wl.meta["params"]["peak_rps"] == 500.0


def test_gap_hour_kept_as_null_windows_and_round_trip(tmp_path: Path) -> None:
    table = read_pages_csv(synthetic_pages(tmp_path, hours=5, skip_hour=2))
    wl = build_workload(table)
    assert np.isnan(wl.read_rps[120:180]).all() and not np.isnan(wl.read_rps[:120]).any()
    assert wl.meta["gaps"] == [["2016-01-01 02:00:00", "2016-01-01 02:00:00"]]
    for name in ("w.json", "w.json.gz"):
        wl.save(tmp_path / name)
        back = Workload.load(tmp_path / name)
        assert back.keys == wl.keys
        assert np.array_equal(np.isnan(back.read_rps), np.isnan(wl.read_rps))
        assert np.allclose(back.read_rps, wl.read_rps, equal_nan=True)
        assert np.isnan(back.hourly_requests()[2])


def test_bad_params_and_bad_documents(tmp_path: Path) -> None:
    table = read_pages_csv(synthetic_pages(tmp_path))
    with pytest.raises(TraceError, match="top fraction"):
        build_workload(table, BuildParams(top_fraction=0))
    with pytest.raises(TraceError, match="no pages left"):
        build_workload(table, BuildParams(noise_pages=("*",)))
    (tmp_path / "bad.json").write_text('{"format": "elastore.workload", "version": 99}')
    with pytest.raises(TraceError, match="version 99 is not supported"):
        Workload.load(tmp_path / "bad.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(TraceError, match="not a readable workload"):
        Workload.load(tmp_path / "junk.json")
