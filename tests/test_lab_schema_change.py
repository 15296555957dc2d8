"""The lab clients' schema statements survive a lost answer: a CI run's load generator died
when CREATE TABLE timed out ('Connection defunct by heartbeat') on a loaded machine, and the
real-node run then had no load at all. The statements are idempotent, so a retry is safe.
An answer that came before every node agreed on the schema is waited out: a loaded run's
write prepared its INSERT on a node that had not seen CREATE TABLE yet."""

from __future__ import annotations

from typing import Any

import pytest
from cassandra import OperationTimedOut

from elastore.errors import ElastoreError
from elastore.lab.cassandra import cql


class _Future:
    def __init__(self, agreed: bool) -> None:
        self.is_schema_agreed = agreed


class _Result(list[Any]):
    def __init__(self, agreed: bool) -> None:
        super().__init__()
        self.response_future = _Future(agreed)


class _Control:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.waits: list[float] = []

    def wait_for_schema_agreement(self, wait_time: float) -> bool:
        self.waits.append(wait_time)
        return self.answers.pop(0)


class _Cluster:
    def __init__(self, answers: list[bool]) -> None:
        self.control_connection = _Control(answers)


class _Session:
    """Answers each execute with the next outcome: an exception to raise, or whether the
    driver saw the schema agreed before it answered; the control connection's later waits
    answer from ``agreements``."""

    def __init__(self, outcomes: list[BaseException | bool | None],
                 agreements: list[bool] | None = None) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[str, float]] = []
        self.cluster = _Cluster(list(agreements or []))

    def execute(self, stmt: str, timeout: float) -> Any:
        self.calls.append((stmt, timeout))
        out = self.outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return _Result(out is not False)


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


def test_an_answer_before_the_schema_agreed_is_waited_out() -> None:
    s = _Session([False], agreements=[True])
    cql.schema_change(s, "CREATE TABLE IF NOT EXISTS ks.kv (k bigint PRIMARY KEY)")
    assert s.cluster.control_connection.waits == [cql.SCHEMA_TIMEOUT_S]
    agreed = _Session([True])
    cql.schema_change(agreed, "CREATE TABLE IF NOT EXISTS ks.kv (k bigint PRIMARY KEY)")
    assert agreed.cluster.control_connection.waits == []  # nothing to wait for


def test_a_schema_that_never_agrees_says_so() -> None:
    s = _Session([False], agreements=[False])
    with pytest.raises(ElastoreError, match="did not agree on the schema within 60 s"):
        cql.schema_change(s, "CREATE TABLE IF NOT EXISTS ks.kv (k bigint PRIMARY KEY)")
