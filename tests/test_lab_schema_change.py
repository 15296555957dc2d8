"""The lab clients' schema statements survive a lost answer: a CI run's load generator died
when CREATE TABLE timed out ('Connection defunct by heartbeat') on a loaded machine, and the
real-node run then had no load at all. The statements are idempotent, so a retry is safe."""

from __future__ import annotations

from typing import Any

import pytest
from cassandra import OperationTimedOut

from elastore.errors import ElastoreError
from elastore.lab.cassandra import cql


class _Session:
    """Answers each execute with the next outcome: an exception to raise, or None."""

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[str, float]] = []

    def execute(self, stmt: str, timeout: float) -> Any:
        self.calls.append((stmt, timeout))
        out = self.outcomes.pop(0)
        if out is not None:
            raise out
        return []


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _s: None)


def test_a_timed_out_schema_change_is_tried_again_with_the_long_timeout() -> None:
    s = _Session([OperationTimedOut({"h": "Connection defunct by heartbeat"}), None])
    cql.schema_change(s, "CREATE TABLE IF NOT EXISTS ks.t (k int PRIMARY KEY)")
    assert [t for _, t in s.calls] == [cql.SCHEMA_TIMEOUT_S] * 2
    assert cql.SCHEMA_TIMEOUT_S > 10  # longer than the driver's 10-s default


def test_a_schema_change_that_keeps_failing_says_so() -> None:
    s = _Session([OperationTimedOut("slow")] * 3)
    with pytest.raises(ElastoreError, match=r"failed 3 times \(60 s each\), last: .*slow"):
        cql.schema_change(s, "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {}")
    assert len(s.calls) == 3


def test_other_errors_are_not_retried() -> None:
    s = _Session([ValueError("syntax"), None])
    with pytest.raises(ValueError, match="syntax"):
        cql.schema_change(s, "CREATE TABLE nonsense")
    assert len(s.calls) == 1
