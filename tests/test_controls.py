"""Pause annotations and the fallback count (issue 22), pure; the operator's use of them is
tested on the real API server in test_controls_k8s.py."""

from __future__ import annotations

import pytest

from elastore.operator.controls import (
    PAUSED_ANNOTATION,
    PAUSED_REPLICAS_ANNOTATION,
    Fallback,
    Pause,
    observed,
    pause_status,
    read_pause,
)


@pytest.mark.parametrize(("ann", "want"), [
    ({}, Pause(False)),
    (None, Pause(False)),
    ({PAUSED_ANNOTATION: "true"}, Pause(True)),
    ({PAUSED_ANNOTATION: " TRUE "}, Pause(True)),
    ({PAUSED_ANNOTATION: "false"}, Pause(False)),
    ({PAUSED_REPLICAS_ANNOTATION: "5"}, Pause(True, 5)),
    # paused-replicas takes precedence over paused, whatever paused says
    ({PAUSED_ANNOTATION: "false", PAUSED_REPLICAS_ANNOTATION: "4"}, Pause(True, 4)),
])
def test_read_pause(ann: dict[str, str] | None, want: Pause) -> None:
    assert read_pause(ann, 3, 8) == want


@pytest.mark.parametrize(("ann", "says"), [
    ({PAUSED_ANNOTATION: "yes"}, "neither true nor false"),
    ({PAUSED_REPLICAS_ANNOTATION: "four"}, "not a whole number"),
    ({PAUSED_REPLICAS_ANNOTATION: "-1"}, "not a whole number"),
    ({PAUSED_REPLICAS_ANNOTATION: "2"}, "outside [3, 8]"),
    ({PAUSED_REPLICAS_ANNOTATION: "9"}, "outside [3, 8]"),
])
def test_an_unusable_annotation_pauses_where_it_is(ann: dict[str, str], says: str) -> None:
    p = read_pause(ann, 3, 8)
    assert p.on and p.replicas is None
    assert p.problem is not None and says in p.problem and says in p.message


def test_pause_status_keeps_its_start() -> None:
    first = pause_status(Pause(True), None, 100.0)
    assert first is not None and first["sinceEpoch"] == 100.0 and first["replicas"] is None
    later = pause_status(Pause(True, 4), first, 160.0)
    assert later is not None and later["sinceEpoch"] == 100.0 and later["replicas"] == 4
    assert pause_status(Pause(False), later, 200.0) is None


def test_fallback_counts_failures_in_a_row_and_keeps_the_first_plan() -> None:
    plan = ({"atEpoch": 50.0, "replicas": 5},)
    s = observed(Fallback(), False, 10.0, plan)
    assert (s.failures, s.since_s, s.actions) == (1, 10.0, plan)
    assert not s.active(2)
    # later failures keep the plan made on evidence (the memory is empty by then)
    s = observed(s, False, 40.0, ())
    assert (s.failures, s.since_s, s.actions) == (2, 10.0, plan)
    assert s.active(2)
    st = s.to_status(2, "currentReplicasIfHigher")
    assert st["active"] and st["actions"] == list(plan)
    assert Fallback.from_status(st) == s
    assert observed(s, True, 70.0) == Fallback()


def test_an_unreadable_fallback_status_is_a_fresh_count() -> None:
    assert Fallback.from_status("x") == Fallback()
    assert Fallback.from_status({"failures": "many"}) == Fallback()
