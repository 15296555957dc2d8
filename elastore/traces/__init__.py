"""Wikipedia traces: readers, gap/outlier handling, inspection and workload construction."""

from elastore.traces.readers import (
    DEFAULT_WINDOW,
    PageTable,
    builtin_trace_path,
    detect_format,
    read_hourly_csv,
    read_page_table,
    read_pagecounts,
    read_pages_csv,
    read_series,
)
from elastore.traces.series import HourlySeries, Outlier

__all__ = [
    "DEFAULT_WINDOW",
    "HourlySeries",
    "Outlier",
    "PageTable",
    "builtin_trace_path",
    "detect_format",
    "read_hourly_csv",
    "read_page_table",
    "read_pagecounts",
    "read_pages_csv",
    "read_series",
]
