"""Readers for the three Wikipedia trace formats.

* ``hourly``: an aggregate CSV, ``hour_utc`` plus numeric columns (``requests``, ``bytes``).
* ``pages``: a per-page CSV ``hour_utc,page,requests`` (plain or gzip).
* ``pagecounts``: a directory of Wikimedia ``pagecounts-raw`` files, one per hour, named
  ``pagecounts-YYYYMMDD-HHMMSS[.gz]``, each line ``project page count bytes``.

All readers stream: chunks are parsed by pandas and reduced to numpy arrays at once, so
memory grows with the number of *distinct pages*, not with the number of rows as Python
objects. Every bad input raises :class:`~elastore.errors.TraceError` naming the file and,
where there is one, the line.
"""

from __future__ import annotations

import csv
import gzip
import logging
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from elastore.errors import TraceError
from elastore.traces.series import HourlySeries, from_hour_values

log = logging.getLogger("elastore.traces")

TraceFormat = Literal["auto", "hourly", "pages", "pagecounts"]
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
CHUNK_ROWS = 500_000
#: The window that the ProRenaTa evaluation replays; the main job's default.
DEFAULT_WINDOW = ("2009-03-08", "2009-03-22")
PAGECOUNTS_NAME = re.compile(r"^pagecounts-(\d{8})-(\d{6})(\.gz)?$")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def builtin_trace_path() -> Path:
    """The shipped all-projects hourly trace (public domain, Wikimedia pagecounts-raw)."""
    from elastore.resources import builtin_trace

    return builtin_trace()


# --------------------------------------------------------------------------------------
# opening files
# --------------------------------------------------------------------------------------
def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _open_text(path: Path) -> IO[str]:
    if _is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return path.open("r", encoding="utf-8", errors="replace", newline="")


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceError("no such file or directory", str(path))
    if path.is_file() and path.stat().st_size == 0:
        raise TraceError("the file is empty", str(path))


def detect_format(path: Path) -> Literal["hourly", "pages", "pagecounts"]:
    """Tell the format from a directory, a pagecounts file name, or the CSV header."""
    _check_file(path)
    if path.is_dir():
        return "pagecounts"
    if PAGECOUNTS_NAME.match(path.name):
        return "pagecounts"
    header = _header(path)
    if "page" in header and "hour_utc" in header:
        return "pages"
    if "hour_utc" in header:
        return "hourly"
    raise TraceError(
        f"cannot tell the trace format from the header {','.join(header)!r}: expected an "
        "'hour_utc' column (hourly CSV), 'hour_utc,page,requests' (per-page CSV) or a "
        "pagecounts-YYYYMMDD-HHMMSS file",
        f"{path}:1",
    )


def _header(path: Path) -> list[str]:
    try:
        with _open_text(path) as fh:
            line = fh.readline()
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(f"cannot read the file: {exc}", str(path)) from exc
    if not line.strip():
        raise TraceError("the file is empty (no header line)", f"{path}:1")
    return [c.strip() for c in next(csv.reader([line]))]


# --------------------------------------------------------------------------------------
# chunked CSV parsing with line numbers
# --------------------------------------------------------------------------------------
def _csv_chunks(
    path: Path, usecols: list[str], chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[int, pd.DataFrame]]:
    """Yield ``(line_of_first_row, chunk)`` with every column as ``str``."""
    fh = _open_text(path)
    line = 2
    try:
        reader = pd.read_csv(
            fh, usecols=usecols, dtype=str, keep_default_na=False, chunksize=chunk_rows,
            on_bad_lines="error",
        )
        for chunk in reader:
            yield line, chunk
            line += len(chunk)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(
            f"truncated or corrupt gzip stream after about line {line}: {exc}", str(path)
        ) from exc
    except pd.errors.EmptyDataError as exc:
        raise TraceError("the file is empty", str(path)) from exc
    except pd.errors.ParserError as exc:
        raise TraceError(f"malformed CSV: {_parser_message(exc)}", str(path)) from exc
    except ValueError as exc:  # unknown usecols
        raise TraceError(str(exc), str(path)) from exc
    finally:
        fh.close()


def _parser_message(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return text


def parse_hours(raw: pd.Series, first_line: int, where: str) -> IntArray:
    """Timestamps ``YYYY-MM-DD HH:MM:SS`` (ISO 8601 also accepted) -> hours since epoch."""
    ts = pd.to_datetime(raw, format=TIME_FORMAT, errors="coerce")
    bad = ts.isna().to_numpy()
    if bad.any():
        retry = pd.to_datetime(raw[bad], format="ISO8601", errors="coerce", utc=True)
        ts = ts.copy()
        ts[bad] = retry.dt.tz_localize(None)
        bad = ts.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"unparsable timestamp {raw.iloc[i]!r} (expected YYYY-MM-DD HH:MM:SS)",
            f"{where}:{first_line + i}",
        )
    ns = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    hour_ns = 3_600_000_000_000
    off = ns % hour_ns != 0
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise TraceError(
            f"timestamp {raw.iloc[i]!r} is not on the hour", f"{where}:{first_line + i}"
        )
    return ns // hour_ns


def parse_counts(raw: pd.Series, what: str, first_line: int, where: str) -> FloatArray:
    """Non-negative numbers; anything else is an error naming the line."""
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        shown = raw.iloc[i]
        hint = " (empty; leave the row out to mark a gap)" if shown == "" else ""
        raise TraceError(
            f"non-numeric {what} {shown!r}{hint}", f"{where}:{first_line + i}"
        )
    neg = values < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise TraceError(f"negative {what} {raw.iloc[i]!r}", f"{where}:{first_line + i}")
    return values


def hours_to_timestamps(hours: IntArray) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(hours.astype("datetime64[h]").astype("datetime64[ns]"))


# --------------------------------------------------------------------------------------
# the hourly aggregate CSV
# --------------------------------------------------------------------------------------
def read_hourly_csv(path: Path | str, column: str = "requests") -> HourlySeries:
    """Read ``hour_utc`` plus one numeric ``column`` of an aggregate hourly CSV."""
    path = Path(path)
    _check_file(path)
    header = _header(path)
    if "hour_utc" not in header:
        raise TraceError(
            f"no 'hour_utc' column (columns: {', '.join(header)})", f"{path}:1"
        )
    if column not in header:
        others = [c for c in header if c != "hour_utc"]
        raise TraceError(
            f"unknown column {column!r}; this file has: {', '.join(others) or 'none'}",
            f"{path}:1",
        )
    hours_parts: list[IntArray] = []
    value_parts: list[FloatArray] = []
    first = None
    for line, chunk in _csv_chunks(path, ["hour_utc", column]):
        if chunk.empty:
            continue
        first = line if first is None else first
        hours_parts.append(parse_hours(chunk["hour_utc"], line, str(path)))
        value_parts.append(parse_counts(chunk[column], f"value in {column!r}", line, str(path)))
    if first is None:
        raise TraceError("the file has a header but no data rows", str(path))
    hours = np.concatenate(hours_parts)
    values = np.concatenate(value_parts)
    lines = np.arange(len(hours), dtype=np.int64) + first
    keep, dropped = _resolve_duplicates(
        hours, np.zeros(len(hours), dtype=np.int64), values, lines, str(path), what="hour"
    )
    unit = "requests/h" if column == "requests" else f"{column}/h"
    return from_hour_values(
        hours_to_timestamps(hours[keep]), values[keep], name=column, unit=unit,
        source=str(path), duplicates_dropped=dropped,
    )


def _resolve_duplicates(
    hours: IntArray, keys: IntArray, values: FloatArray, lines: IntArray, where: str,
    what: str, files: list[str] | None = None, file_of_row: IntArray | None = None,
) -> tuple[npt.NDArray[np.bool_], int]:
    """Mask of rows to keep: identical repeats of (hour, key) dropped, conflicts an error."""
    order = np.lexsort((lines, keys, hours))
    h, k, v = hours[order], keys[order], values[order]
    same = (h[1:] == h[:-1]) & (k[1:] == k[:-1])
    keep = np.ones(len(hours), dtype=bool)
    if not same.any():
        return keep, 0
    dup_idx = np.flatnonzero(same) + 1  # positions (in sorted order) of repeats
    conflict = v[dup_idx] != v[dup_idx - 1]
    if conflict.any():
        j = int(dup_idx[np.flatnonzero(conflict)[0]])
        row, prev = int(order[j]), int(order[j - 1])

        def at(r: int) -> str:
            if files is not None and file_of_row is not None:
                return f"{files[int(file_of_row[r])]}:{int(lines[r])}"
            return f"{where}:{int(lines[r])}"

        stamp = hours_to_timestamps(np.array([h[j]]))[0].strftime(TIME_FORMAT)
        raise TraceError(
            f"conflicting duplicate {what} {stamp}: {v[j]:g} here, {v[j - 1]:g} at {at(prev)}",
            at(row),
        )
    keep[order[dup_idx]] = False
    dropped = len(dup_idx)
    log.warning("%s: dropped %d identical duplicate %s row(s)", where, dropped, what)
    return keep, dropped


# --------------------------------------------------------------------------------------
# per-page data: the per-page CSV and pagecounts-raw files
# --------------------------------------------------------------------------------------
@dataclass
class PageTable:
    """Every (hour, page, requests) row of a per-page source, as flat numpy arrays.

    ``page`` holds codes into ``pages``; ``hour`` is hours since the epoch (UTC). Duplicate
    rows are resolved on load, so each (hour, page) occurs at most once.
    """

    hour: IntArray
    page: IntArray
    requests: FloatArray
    pages: list[str]
    source: str
    hours_present: IntArray
    duplicates_dropped: int = 0

    def hourly_totals(self, page_mask: npt.NDArray[np.bool_] | None = None) -> HourlySeries:
        """Sum of requests per hour, over all pages or the pages where ``page_mask``."""
        rows = np.ones(len(self.hour), dtype=bool) if page_mask is None else page_mask[self.page]
        h0 = int(self.hours_present.min())
        n = int(self.hours_present.max()) - h0 + 1
        totals = np.bincount(self.hour[rows] - h0, weights=self.requests[rows], minlength=n)
        grid = np.full(n, np.nan)
        grid[self.hours_present - h0] = totals[self.hours_present - h0]
        present = ~np.isnan(grid)
        return from_hour_values(
            hours_to_timestamps(np.arange(h0, h0 + n, dtype=np.int64)[present]),
            grid[present], name="requests", unit="requests/h", source=self.source,
            duplicates_dropped=self.duplicates_dropped,
        )

    def page_totals(self) -> FloatArray:
        totals = np.bincount(self.page, weights=self.requests, minlength=len(self.pages))
        return totals.astype(np.float64)

    def window(self, start: pd.Timestamp | None, end: pd.Timestamp | None) -> PageTable:
        lo = -(2**62) if start is None else int(start.ceil("h").value // 3_600_000_000_000)
        hi = 2**62 if end is None else int(end.floor("h").value // 3_600_000_000_000)
        rows = (self.hour >= lo) & (self.hour <= hi)
        present = self.hours_present[(self.hours_present >= lo) & (self.hours_present <= hi)]
        if present.size == 0:
            raise TraceError("the requested window holds no hours of this trace", self.source)
        return PageTable(
            self.hour[rows], self.page[rows], self.requests[rows], self.pages, self.source,
            present, self.duplicates_dropped,
        )


class _PageCoder:
    """Maps page titles to dense integer codes, chunk by chunk (one dict entry per page)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.names: list[str] = []

    def encode(self, titles: pd.Series) -> IntArray:
        local, uniques = pd.factorize(titles, sort=False)
        mapping = np.empty(len(uniques), dtype=np.int64)
        for i, name in enumerate(uniques):
            code = self.codes.get(name)
            if code is None:
                code = len(self.names)
                self.codes[name] = code
                self.names.append(name)
            mapping[i] = code
        return mapping[local]


def read_pages_csv(path: Path | str, progress: bool = False) -> PageTable:
    """Stream a ``hour_utc,page,requests`` CSV (plain or gzip) into a :class:`PageTable`."""
    path = Path(path)
    _check_file(path)
    header = _header(path)
    missing = [c for c in ("hour_utc", "page", "requests") if c not in header]
    if missing:
        raise TraceError(
            f"a per-page CSV needs the columns hour_utc,page,requests; missing "
            f"{', '.join(missing)} (found: {', '.join(header)})",
            f"{path}:1",
        )
    coder = _PageCoder()
    parts: list[tuple[IntArray, IntArray, FloatArray, IntArray]] = []
    rows = 0
    for line, chunk in _csv_chunks(path, ["hour_utc", "page", "requests"]):
        if chunk.empty:
            continue
        hours = parse_hours(chunk["hour_utc"], line, str(path))
        counts = parse_counts(chunk["requests"], "request count", line, str(path))
        codes = coder.encode(chunk["page"])
        parts.append((hours, codes, counts, np.arange(len(chunk), dtype=np.int64) + line))
        rows += len(chunk)
        if progress:
            log.info("%s: %s rows read", path.name, f"{rows:,}")
    if not parts:
        raise TraceError("the file has a header but no data rows", str(path))
    hour = np.concatenate([p[0] for p in parts])
    page = np.concatenate([p[1] for p in parts])
    req = np.concatenate([p[2] for p in parts])
    lines = np.concatenate([p[3] for p in parts])
    del parts
    keep, dropped = _resolve_duplicates(hour, page, req, lines, str(path), what="hour/page row")
    if dropped:
        hour, page, req = hour[keep], page[keep], req[keep]
    return PageTable(hour, page, req, coder.names, str(path), np.unique(hour), dropped)


def _pagecounts_files(path: Path) -> list[tuple[int, Path]]:
    """(hour since epoch, file) for each pagecounts file; the stamp is rounded to the hour."""
    candidates = sorted(p for p in path.iterdir()) if path.is_dir() else [path]
    found: list[tuple[int, Path]] = []
    ignored = []
    for p in candidates:
        m = PAGECOUNTS_NAME.match(p.name)
        if not m or not p.is_file():
            ignored.append(p.name)
            continue
        stamp = pd.to_datetime(m.group(1) + m.group(2), format="%Y%m%d%H%M%S", errors="coerce")
        if pd.isna(stamp):
            raise TraceError("bad timestamp in the file name", str(p))
        found.append((int(stamp.round("h").value // 3_600_000_000_000), p))
    if ignored:
        log.warning(
            "%s: ignored %d file(s) not named pagecounts-YYYYMMDD-HHMMSS[.gz]: %s",
            path, len(ignored), ", ".join(ignored[:5]) + (" ..." if len(ignored) > 5 else ""),
        )
    if not found:
        raise TraceError("no pagecounts-YYYYMMDD-HHMMSS[.gz] files here", str(path))
    return found


def read_pagecounts(
    path: Path | str, project: str | None = None, progress: bool = False
) -> PageTable:
    """Read pagecounts-raw files (a directory, or one file) into a :class:`PageTable`.

    ``project`` keeps one project's lines (``en`` for English Wikipedia); ``None`` keeps all,
    which is how the shared all-projects aggregate was made. Two files for the same hour
    (stamps a few seconds apart) are duplicates: identical ones are dropped with a warning,
    different ones are an error naming both.
    """
    path = Path(path)
    _check_file(path)
    files = _pagecounts_files(path)
    coder = _PageCoder()
    parts: list[tuple[IntArray, IntArray, FloatArray]] = []
    by_hour: dict[int, tuple[Path, float]] = {}
    dropped = 0
    for n, (hour, f) in enumerate(files, 1):
        codes, counts = _read_one_pagecounts(f, project, coder)
        total = float(counts.sum())
        if hour in by_hour:
            other, other_total = by_hour[hour]
            if other_total != total:
                raise TraceError(
                    f"a second file for hour {hours_to_timestamps(np.array([hour]))[0]} "
                    f"with different content (total {total:g} vs {other_total:g} in {other.name})",
                    str(f),
                )
            log.warning("%s: identical duplicate of %s dropped", f.name, other.name)
            dropped += 1
            continue
        by_hour[hour] = (f, total)
        parts.append((np.full(len(codes), hour, dtype=np.int64), codes, counts))
        if progress:
            log.info("pagecounts: %d/%d files read", n, len(files))
    hour_arr = np.concatenate([p[0] for p in parts])
    page_arr = np.concatenate([p[1] for p in parts])
    req_arr = np.concatenate([p[2] for p in parts])
    return PageTable(
        hour_arr, page_arr, req_arr, coder.names, str(path),
        np.array(sorted(by_hour), dtype=np.int64), dropped,
    )


def _read_one_pagecounts(
    f: Path, project: str | None, coder: _PageCoder
) -> tuple[IntArray, FloatArray]:
    if f.stat().st_size == 0:
        raise TraceError("the file is empty", str(f))
    fh = _open_text(f)
    try:
        frame = pd.read_csv(
            fh, sep=" ", header=None, names=["project", "page", "count", "bytes"], dtype=str,
            keep_default_na=False, quoting=csv.QUOTE_NONE, on_bad_lines="error",
            engine="c",
        )
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(f"truncated or corrupt gzip stream: {exc}", str(f)) from exc
    except pd.errors.EmptyDataError as exc:
        raise TraceError("the file is empty", str(f)) from exc
    except pd.errors.ParserError as exc:
        msg = _parser_message(exc)
        m = re.search(r"line (\d+)", msg)
        where = f"{f}:{m.group(1)}" if m else str(f)
        raise TraceError(
            f"malformed line, expected 'project page count bytes': {msg}", where
        ) from exc
    finally:
        fh.close()
    if frame.empty:
        raise TraceError("the file has no lines", str(f))
    counts = parse_counts(frame["count"], "count", 1, str(f))
    if project is not None:
        mask = (frame["project"] == project).to_numpy()
        frame = frame[mask]
        counts = counts[mask]
    codes = coder.encode(frame["page"]) if len(frame) else np.empty(0, dtype=np.int64)
    return codes, counts


# --------------------------------------------------------------------------------------
# one entry point
# --------------------------------------------------------------------------------------
def read_series(
    path: Path | str, fmt: TraceFormat = "auto", column: str = "requests",
    project: str | None = None,
) -> HourlySeries:
    """Any supported trace as an hourly series (per-page sources are summed over pages)."""
    path = Path(path)
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "hourly":
        return read_hourly_csv(path, column)
    if column != "requests":
        raise TraceError(
            f"--column {column!r} applies only to the hourly CSV; a {kind} trace has requests",
            str(path),
        )
    table = read_pages_csv(path) if kind == "pages" else read_pagecounts(path, project)
    return table.hourly_totals()


def read_page_table(
    path: Path | str, fmt: TraceFormat = "auto", project: str | None = None,
    progress: bool = False,
) -> PageTable:
    path = Path(path)
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "hourly":
        raise TraceError(
            "this is an aggregate hourly trace; building a workload needs per-page data "
            "(a hour_utc,page,requests CSV or a pagecounts directory)",
            str(path),
        )
    if kind == "pages":
        return read_pages_csv(path, progress)
    return read_pagecounts(path, project, progress)
