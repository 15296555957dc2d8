"""``elastore trace ...``: inspect traces and build replayable workloads."""

from __future__ import annotations

import time
from pathlib import Path

import click
import pandas as pd

from elastore.cliutil import WHEN, WHEN_END, ElastoreGroup, emit_json, log
from elastore.errors import TraceError
from elastore.traces.inspect import render, summarize
from elastore.traces.readers import builtin_trace_path, read_page_table, read_series
from elastore.traces.workload import DEFAULT_NOISE_PAGES, BuildParams, build_workload, describe

FORMATS = click.Choice(["auto", "hourly", "pages", "pagecounts"])


@click.group(cls=ElastoreGroup)
def trace() -> None:
    """Read, inspect and convert Wikipedia access traces.

    \b
    Formats (detected from the header or the path):
      hourly      hour_utc plus numeric columns (requests, bytes)
      pages       hour_utc,page,requests per-page CSV, plain or gzip
      pagecounts  a directory of Wikimedia pagecounts-YYYYMMDD-HHMMSS[.gz] files

    \b
    Example:
      elastore trace inspect ../shared/traces/wikipedia/all-projects-2008-10_2009-12-hourly.csv
    """


@trace.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--column", default="requests", show_default=True,
              help="Numeric column of an hourly CSV.")
@click.option("--format", "fmt", type=FORMATS, default="auto", show_default=True)
@click.option("--project", default=None,
              help="pagecounts only: keep one project (e.g. 'en'); default all projects.")
@click.option("--start", type=WHEN, default=None, help="First hour to include (UTC).")
@click.option("--end", type=WHEN_END, default=None,
              help="Last hour to include (UTC); a bare date includes that whole day.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def inspect(path: Path | None, column: str, fmt: str, project: str | None,
            start: pd.Timestamp | None, end: pd.Timestamp | None, as_json: bool) -> None:
    """Report a trace's span, gaps, outliers, range and daily/weekly shape.

    PATH defaults to the built-in all-projects hourly trace (2008-10 .. 2009-12).

    \b
    Examples:
      elastore trace inspect
      elastore trace inspect --start 2009-03-08 --end 2009-03-22
      elastore trace inspect ../shared/traces/wikipedia/en-2016-01-pages-hourly.csv.gz --json
      elastore trace inspect dumps/ --project en     # a pagecounts-raw directory
    """
    source = path if path is not None else builtin_trace_path()
    series = read_series(source, fmt, column, project)  # type: ignore[arg-type]
    if start is not None or end is not None:
        try:
            series = series.window(start, end)
        except ValueError as exc:
            raise TraceError(str(exc), str(source)) from exc
    summary = summarize(series)
    if as_json:
        emit_json(summary)
    else:
        click.echo(render(summary))


@trace.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="Workload file to write (.json or .json.gz).")
@click.option("--format", "fmt", type=FORMATS, default="auto", show_default=True)
@click.option("--project", default=None, help="pagecounts only: keep one project (e.g. 'en').")
@click.option("--start", type=WHEN, default=None, help="First trace hour to use (UTC).")
@click.option("--end", type=WHEN_END, default=None,
              help="Last trace hour; a bare date = whole day.")
@click.option("--noise", multiple=True, metavar="GLOB",
              help="Extra noise page (glob); repeatable.")
@click.option("--noise-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="File of noise page globs, one per line ('#' comments).")
@click.option("--no-default-noise", is_flag=True,
              help="Do not use the built-in noise list (Main_Page, Special:*, ...).")
@click.option("--top-fraction", type=float, default=0.05, show_default=True,
              help="Fraction of the remaining pages to keep, most requested first.")
@click.option("--write-fraction", type=float, default=0.05, show_default=True,
              help="Fraction of accesses turned into writes.")
@click.option("--windows-per-hour", type=int, default=60, show_default=True)
@click.option("--hour-seconds", type=float, default=600.0, show_default=True,
              help="Replay seconds per trace hour (600 = 1 h becomes 10 min).")
@click.option("--peak-rps", type=float, default=None,
              help="Scale so the busiest window runs at this many requests/s.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the build summary as JSON.")
def build(path: Path, output: Path, fmt: str, project: str | None,
          start: pd.Timestamp | None, end: pd.Timestamp | None, noise: tuple[str, ...],
          noise_file: Path | None, no_default_noise: bool, top_fraction: float,
          write_fraction: float, windows_per_hour: int, hour_seconds: float,
          peak_rps: float | None, seed: int, as_json: bool) -> None:
    """Build a replayable workload from per-page data (ProRenaTa's construction).

    Removes noise pages, keeps the top 5 % of pages, turns 5 % of accesses into writes,
    spreads each hour over 60 Poisson windows, and compresses 1 h into 10 min. The output
    format is documented in docs/workload-format.md.

    \b
    Example:
      elastore trace build ../shared/traces/wikipedia/en-2016-01-pages-hourly.csv.gz \\
          --start 2016-01-04 --end 2016-01-10 --peak-rps 400 -o week.json.gz
    """
    patterns = () if no_default_noise else DEFAULT_NOISE_PAGES
    patterns += noise
    if noise_file is not None:
        lines = noise_file.read_text(encoding="utf-8").splitlines()
        patterns += tuple(s.strip() for s in lines if s.strip() and not s.startswith("#"))
    params = BuildParams(
        noise_pages=patterns, top_fraction=top_fraction, write_fraction=write_fraction,
        windows_per_hour=windows_per_hour, hour_seconds=hour_seconds, peak_rps=peak_rps,
        seed=seed,
    )
    params.validate()
    t0 = time.monotonic()
    log.info("reading %s ...", path)
    table = read_page_table(path, fmt, project, progress=True)  # type: ignore[arg-type]
    if start is not None or end is not None:
        table = table.window(start, end)
    log.info("building workload from %s rows, %s pages ...", f"{len(table.hour):,}",
             f"{len(table.pages):,}")
    wl = build_workload(table, params)
    wl.save(output)
    log.info("wrote %s in %.1f s", output, time.monotonic() - t0)
    if as_json:
        doc = dict(wl.meta)
        doc.update(output=str(output), windows=len(wl.start_s), keys=len(wl.keys),
                   window_seconds=wl.window_seconds)
        emit_json(doc)
    else:
        click.echo(describe(wl))
