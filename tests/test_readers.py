"""Every reader and every bad-input case: a clear error naming the file and line."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from elastore.errors import TraceError
from elastore.traces import (
    detect_format,
    read_hourly_csv,
    read_pagecounts,
    read_pages_csv,
    read_series,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


HOURLY = "hour_utc,requests,bytes\n" + "".join(
    f"2009-03-01 {h:02d}:00:00,{1000 + h},{10 * h}\n" for h in range(24)
)


def test_hourly_reads_column_and_default(tmp_path: Path) -> None:
    p = write(tmp_path / "h.csv", HOURLY)
    s = read_hourly_csv(p)
    assert len(s) == 24 and s.values[3] == 1003 and s.unit == "requests/h"
    b = read_hourly_csv(p, column="bytes")
    assert b.values[3] == 30 and b.unit == "bytes/h"
    assert detect_format(p) == "hourly"


def test_hourly_missing_hour_is_a_gap(tmp_path: Path) -> None:
    lines = HOURLY.splitlines()
    del lines[6]  # 05:00
    s = read_hourly_csv(write(tmp_path / "h.csv", "\n".join(lines) + "\n"))
    assert s.missing_hours == 1
    assert s.gaps() == [(pd.Timestamp("2009-03-01 05:00"),) * 2]
    assert s.values[6] == 1006  # not shifted


def test_hourly_unknown_column(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"unknown column 'hits'.*requests, bytes") as e:
        read_hourly_csv(write(tmp_path / "h.csv", HOURLY), column="hits")
    assert e.value.where == f"{tmp_path / 'h.csv'}:1"


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty"):
        read_hourly_csv(write(tmp_path / "e.csv", ""))
    with pytest.raises(TraceError, match="no data rows"):
        read_hourly_csv(write(tmp_path / "h.csv", "hour_utc,requests\n"))


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("2009-03-01 xx:00:00,5,1", "unparsable timestamp '2009-03-01 xx:00:00'"),
        ("2009-03-01 04:30:00,5,1", "not on the hour"),
        ("2009-03-01 04:00:00,-5,1", "negative value in 'requests' '-5'"),
        ("2009-03-01 04:00:00,lots,1", "non-numeric value in 'requests' 'lots'"),
        ("2009-03-01 04:00:00,,1", "empty; leave the row out"),
    ],
)
def test_hourly_bad_values_name_the_line(tmp_path: Path, bad_line: str, message: str) -> None:
    lines = HOURLY.splitlines()
    lines[5] = bad_line  # file line 6
    p = write(tmp_path / "h.csv", "\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=message) as e:
        read_hourly_csv(p)
    assert e.value.where == f"{p}:6"


def test_identical_duplicate_dropped_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = HOURLY.splitlines()
    lines.insert(8, lines[7])
    with caplog.at_level(logging.WARNING, logger="elastore"):
        s = read_hourly_csv(write(tmp_path / "h.csv", "\n".join(lines) + "\n"))
    assert s.duplicates_dropped == 1 and len(s) == 24 and s.present_hours == 24
    assert "identical duplicate" in caplog.text


def test_conflicting_duplicate_names_the_line(tmp_path: Path) -> None:
    lines = HOURLY.splitlines()
    lines.insert(8, "2009-03-01 06:00:00,999,1")  # line 9 conflicts with line 8
    p = write(tmp_path / "h.csv", "\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"conflicting duplicate hour 2009-03-01 06:00:00") as e:
        read_hourly_csv(p)
    assert e.value.where == f"{p}:9" and f"{p}:8" in e.value.message


def test_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        detect_format(write(tmp_path / "x.csv", "a,b\n1,2\n"))
    with pytest.raises(TraceError, match="no such file"):
        read_series(tmp_path / "nope.csv")


PAGES = (
    "hour_utc,page,requests\n"
    "2016-01-01 00:00:00,Main_Page,5000\n"
    "2016-01-01 00:00:00,Foo,300\n"
    '2016-01-01 00:00:00,"Bar,_with_comma",200\n'
    "2016-01-01 01:00:00,Foo,400\n"
    "2016-01-01 03:00:00,Foo,100\n"
)


@pytest.mark.parametrize("gz", [False, True])
def test_pages_csv_plain_and_gzip(tmp_path: Path, gz: bool) -> None:
    p = tmp_path / ("p.csv.gz" if gz else "p.csv")
    if gz:
        with gzip.open(p, "wt") as fh:
            fh.write(PAGES)
    else:
        write(p, PAGES)
    assert detect_format(p) == "pages"
    t = read_pages_csv(p)
    assert sorted(t.pages) == ["Bar,_with_comma", "Foo", "Main_Page"]
    totals = dict(zip(t.pages, t.page_totals(), strict=True))
    assert totals == {"Main_Page": 5000, "Foo": 800, "Bar,_with_comma": 200}
    s = read_series(p)
    assert list(s.values[:2]) == [5500, 400]
    assert np.isnan(s.values[2]) and s.values[3] == 100  # hour 02 is a gap


def test_pages_truncated_gzip(tmp_path: Path) -> None:
    body = PAGES + "".join(f"2016-01-02 {h:02d}:00:00,P{i},{i}\n"
                           for h in range(24) for i in range(400))
    data = gzip.compress(body.encode())
    p = tmp_path / "t.csv.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated or corrupt gzip") as e:
        read_pages_csv(p)
    assert e.value.where == str(p)


def test_pages_missing_column_and_bad_count(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="missing requests"):
        read_pages_csv(write(tmp_path / "p.csv", "hour_utc,page,hits\n2016-01-01 00:00:00,A,1\n"))
    p = write(tmp_path / "q.csv", PAGES.replace("Foo,400", "Foo,x"))
    with pytest.raises(TraceError, match="non-numeric request count 'x'") as e:
        read_pages_csv(p)
    assert e.value.where == f"{p}:5"


def test_pages_duplicate_rows(tmp_path: Path) -> None:
    t = read_pages_csv(write(tmp_path / "p.csv", PAGES + "2016-01-01 01:00:00,Foo,400\n"))
    assert t.duplicates_dropped == 1
    assert dict(zip(t.pages, t.page_totals(), strict=True))["Foo"] == 800
    with pytest.raises(TraceError, match="conflicting duplicate hour/page row"):
        read_pages_csv(write(tmp_path / "q.csv", PAGES + "2016-01-01 01:00:00,Foo,401\n"))


def pagecounts_dir(tmp_path: Path, hours: list[int], gz: bool = True) -> Path:
    d = tmp_path / "dumps"
    d.mkdir()
    for h in hours:
        text = f"en Main_Page {100 + h} 1000\nen Foo {10 + h} 50\nde Foo 7 10\n"
        name = f"pagecounts-20090301-{h:02d}0000" + (".gz" if gz else "")
        if gz:
            with gzip.open(d / name, "wt") as fh:
                fh.write(text)
        else:
            write(d / name, text)
    return d


def test_pagecounts_directory_with_a_missing_hour(tmp_path: Path) -> None:
    d = pagecounts_dir(tmp_path, [0, 1, 2, 4, 5])
    assert detect_format(d) == "pagecounts"
    s = read_series(d)
    assert len(s) == 6 and s.missing_hours == 1
    assert s.gaps() == [(pd.Timestamp("2009-03-01 03:00"),) * 2]
    assert s.values[0] == 100 + 10 + 7
    en = read_series(d, project="en")
    assert en.values[1] == 101 + 11


def test_pagecounts_plain_files_and_stray_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = pagecounts_dir(tmp_path, [0, 1], gz=False)
    write(d / "md5sums.txt", "x\n")
    with caplog.at_level(logging.WARNING, logger="elastore"):
        t = read_pagecounts(d)
    assert "md5sums.txt" in caplog.text
    assert len(t.hours_present) == 2


def test_pagecounts_bad_lines(tmp_path: Path) -> None:
    d = pagecounts_dir(tmp_path, [0, 1], gz=False)
    f = d / "pagecounts-20090301-010000"
    write(f, "en A 1 1\nen B many 2\n")
    with pytest.raises(TraceError, match="non-numeric count 'many'") as e:
        read_pagecounts(d)
    assert e.value.where == f"{f}:2"
    write(f, "en A 1 1\nen B 2 2 extra\n")
    with pytest.raises(TraceError, match="malformed line") as e:
        read_pagecounts(d)
    assert e.value.where == f"{f}:2"


def test_pagecounts_truncated_gzip(tmp_path: Path) -> None:
    d = pagecounts_dir(tmp_path, [0])
    f = d / "pagecounts-20090301-010000.gz"
    data = gzip.compress(("".join(f"en P{i} {i} 1\n" for i in range(5000))).encode())
    f.write_bytes(data[:-40])
    with pytest.raises(TraceError, match="truncated or corrupt gzip") as e:
        read_pagecounts(d)
    assert e.value.where == str(f)


def test_pagecounts_duplicate_hour_files(tmp_path: Path) -> None:
    d = pagecounts_dir(tmp_path, [0, 1], gz=False)
    write(d / "pagecounts-20090301-010001", (d / "pagecounts-20090301-010000").read_text())
    assert read_pagecounts(d).duplicates_dropped == 1
    write(d / "pagecounts-20090301-010001", "en Foo 1 1\n")
    with pytest.raises(TraceError, match="second file for hour 2009-03-01 01:00"):
        read_pagecounts(d)


def test_empty_pagecounts_dir(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(TraceError, match="no pagecounts"):
        read_series(tmp_path / "d")


def test_header_only_pages_csv(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no data rows"):
        read_pages_csv(write(tmp_path / "p.csv", "hour_utc,page,requests\n"))
