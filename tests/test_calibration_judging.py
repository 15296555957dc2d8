"""How make lab-check's calibration judges the learned border against two sweeps (issue 40
part 4): the pure part of tests/test_calibration_lab_k8s.py."""

from __future__ import annotations

import pytest
from test_calibration_lab_k8s import two_sweeps


def test_inside_the_two_sweeps_range_is_zero_whichever_sweep_is_higher() -> None:
    assert two_sweeps(100.0, 90.0, 120.0)["apart_two_sweeps_pct"] == 0.0
    assert two_sweeps(100.0, 120.0, 90.0)["apart_two_sweeps_pct"] == 0.0
    assert two_sweeps(100.0, 120.0, 90.0)["two_sweeps"] == [90.0, 120.0]


def test_outside_is_measured_from_the_nearer_end() -> None:
    below = two_sweeps(72.0, 90.0, 120.0)
    assert below["apart_two_sweeps_pct"] == pytest.approx(20.0)  # 18 below 90
    above = two_sweeps(132.0, 120.0, 90.0)
    assert above["apart_two_sweeps_pct"] == pytest.approx(10.0)  # 12 above 120
    assert above["sweep_drift_pct"] == pytest.approx(25.0)  # 90 against 120


def test_a_sweep_without_a_border_is_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        two_sweeps(100.0, 0.0, 120.0)
