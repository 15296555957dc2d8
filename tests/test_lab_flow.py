"""The throughput probe's pure part: which interval flows run at once are compared over."""

from __future__ import annotations

import pytest

from elastore.errors import ElastoreError
from elastore.lab.flow import INTERVAL_S, common_window, mean_rate


def _flow(start: float, end: float, mbit: float) -> list[tuple[float, float]]:
    n = round((end - start) / INTERVAL_S)
    return [(start + (k + 1) * INTERVAL_S, mbit) for k in range(n)]


def test_a_flow_started_late_narrows_the_window_to_when_both_ran() -> None:
    # the first flow alone for its first second (at the whole link's 40 Mbit/s), then
    # both at 20: a window of each flow's own would read 40 + 20 for part of the time
    first = _flow(100.0, 101.0, 40.0) + _flow(101.0, 105.0, 20.0)
    second = _flow(101.0, 106.0, 20.0)
    lo, hi = common_window([first, second])
    assert lo == pytest.approx(102.0)  # the later start + 1 s of ramp-up
    assert hi == pytest.approx(105.0)  # the first flow's end
    assert mean_rate(first, lo, hi) + mean_rate(second, lo, hi) == pytest.approx(40.0)
    # its own window ([1 s, end]) overstates the first flow, the fault CI saw
    assert mean_rate(first, 101.0, 105.0) + mean_rate(second, 102.0, 106.0) > 40.0


def test_flows_that_barely_overlap_are_refused_not_averaged() -> None:
    with pytest.raises(ElastoreError, match="too loaded to start them together"):
        common_window([_flow(100.0, 104.0, 20.0), _flow(102.5, 106.5, 20.0)])
    with pytest.raises(ElastoreError, match="no throughput samples"):
        common_window([_flow(100.0, 104.0, 20.0), []])
