"""Errors that the CLI turns into one clear line and a non-zero exit."""

from __future__ import annotations


class ElastoreError(Exception):
    """A user-facing error: bad input, an unreachable component, a refused operation.

    ``where`` locates the problem (``path`` or ``path:line``) and is printed first.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class TraceError(ElastoreError):
    """A trace file that cannot be read as asked."""


class MetricsError(ElastoreError):
    """The metrics a decision needs are missing, stale, partial or unreachable: never read
    as zero. ``reason`` is a short CamelCase cause (``MetricsMissing``,
    ``PrometheusUnreachable``, ...) that the operator shows as a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class StatusConflict(ElastoreError):
    """A status write whose precondition failed: the ElasticPolicy changed since it was
    read (another writer: a second operator replica that believes it leads, or a person).
    Nothing the write would have recorded was acted on; the caller reads again."""
