"""The bandwidth profiler's pure parts: its plan and the reduction to BwMan's curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastore.errors import ElastoreError
from elastore.lab.bwprofile import (
    MIN_BUSY_S,
    nominal_rps,
    plan_bandwidth,
    points_path,
    reduce_bandwidth,
)


def test_nominal_rate_is_bandwidth_over_one_response() -> None:
    # 8 Mbit/s = 1e6 bytes/s; one response 10 KiB x 1.07
    assert nominal_rps(8) == pytest.approx(1e6 / (10240 * 1.07))


def test_plan_clients_by_bandwidth_then_migrations_fastest_first() -> None:
    pts = plan_bandwidth([6, 2], [1.0, 0.5], [2, 16, 4], nodes=3)
    assert [p.index for p in pts] == list(range(7))
    assert [(p.kind, p.mbit) for p in pts] == [
        ("client", 2.0), ("client", 2.0), ("client", 6.0), ("client", 6.0),
        ("migration", 16.0), ("migration", 4.0), ("migration", 2.0)]
    assert pts[0].cluster_rps == pytest.approx(0.5 * 3 * nominal_rps(2), abs=0.05)
    assert pts[3].cluster_rps == pytest.approx(3 * nominal_rps(6), abs=0.05)
    assert all(p.cluster_rps == 0 for p in pts[4:])


@pytest.mark.parametrize("args, msg", [
    (([0], [0.5], [2], 3), "client bandwidths"),
    (([2], [0.5], [-1], 3), "migration bandwidths"),
    (([2], [], [2], 3), "fractions"),
    (([2], [3.0], [2], 3), "fractions"),
    (([], [0.5], [], 3), "nothing to profile"),
    (([2], [0.5], [2], 1), "at least 2 nodes"),
])
def test_plan_rejects_bad_levels(args: tuple[list[float], list[float], list[float], int],
                                 msg: str) -> None:
    with pytest.raises(ElastoreError, match=msg):
        plan_bandwidth(*args)


def _client(b: float, point: int, node: str, rps: float, p95: list[float]) -> list[dict[str, str]]:
    return [{"kind": "client", "point": str(point), "client_mbit": str(b), "node": node,
             "window": str(w + 1), "node_rps": str(rps), "p95_ms": str(v), "p99_ms": str(2 * v)}
            for w, v in enumerate(p95)]


def _mig(m: float, node: str, busy: float, mib: float) -> dict[str, str]:
    return {"kind": "migration", "point": "9", "migration_mbit": str(m), "node": node,
            "busy_s": str(busy), "streamed_mib": str(mib)}


def test_served_rate_is_the_highest_load_within_the_slo_below_the_border() -> None:
    raw = (_client(4, 0, "a", 20, [10, 12, 11]) + _client(4, 0, "b", 25, [15, 14, 900])
           + _client(4, 1, "a", 40, [60, 70, 65]) + _client(4, 1, "b", 46, [300, 400, 250])
           # above the border again (a lucky point): never counted
           + _client(4, 2, "a", 50, [50, 60, 40]))
    rows, notes = reduce_bandwidth(raw, slo_ms=100)
    assert rows == [{"client_mbit": 4.0, "served_rps": 40.0, "migration_mbit": "",
                     "migration_mibps": ""}]
    assert notes == []
    # the p99 version of the same points: 2x the latency, the border moves down
    rows99, _ = reduce_bandwidth(raw, slo_ms=100, percentile=99)
    assert rows99[0]["served_rps"] == 25.0


def test_a_sweep_that_never_broke_the_slo_says_its_rate_is_a_lower_bound() -> None:
    rows, notes = reduce_bandwidth(_client(8, 0, "a", 70, [20, 30, 25]), slo_ms=100)
    assert rows[0]["served_rps"] == 70.0
    assert len(notes) == 1 and "lower bound" in notes[0]


def test_migration_speed_is_streamed_mib_over_busy_seconds() -> None:
    raw = [_mig(8, "a", 20, 18.0), _mig(8, "b", 10, 9.5), _mig(8, "c", MIN_BUSY_S / 2, 5.0),
           _mig(2, "a", 1.0, 0.2)]
    rows, notes = reduce_bandwidth(raw, slo_ms=100)
    assert rows == [{"client_mbit": "", "served_rps": "", "migration_mbit": 8.0,
                     "migration_mibps": pytest.approx(27.5 / 30, abs=1e-4)}]
    assert len(notes) == 1 and "2 Mbit/s" in notes[0]


def test_raw_points_sit_beside_the_curves() -> None:
    assert points_path(Path("x/lab-bandwidth.csv")) == Path("x/lab-bandwidth-points.csv")
