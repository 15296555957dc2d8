"""What every ``elastore`` command group shares: one-line errors, log format, date options,
JSON output. The groups import from here, never from :mod:`elastore.cli` (which imports
them)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from elastore.errors import ElastoreError

if TYPE_CHECKING:  # pandas costs ~50 MB and 0.25 s: the node agent's CLI never needs it
    import pandas as pd

log = logging.getLogger("elastore")


class UserError(click.ClickException):
    """Prints ``error: <where>: <message>`` and exits 1."""

    def format_message(self) -> str:
        return self.message

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class ElastoreGroup(click.Group):
    """Turns :class:`ElastoreError` into one clear line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ElastoreError as exc:
            raise UserError(str(exc)) from exc


class _Fmt(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"error: {msg}"
        if record.levelno >= logging.WARNING:
            return f"warning: {msg}"
        return msg


def setup_logging(verbosity: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Fmt())
    root = logging.getLogger("elastore")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0
                  else logging.INFO)
    root.propagate = False


class When(click.ParamType):  # type: ignore[type-arg]
    """A UTC date ``YYYY-MM-DD`` or time ``YYYY-MM-DD HH:MM[:SS]``.

    With ``inclusive_end`` a bare date means the last hour of that day, so
    ``--start 2009-03-08 --end 2009-03-22`` covers both days whole.
    """

    name = "DATE"

    def __init__(self, inclusive_end: bool = False) -> None:
        self.inclusive_end = inclusive_end

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> pd.Timestamp:
        import pandas as pd

        if isinstance(value, pd.Timestamp):
            return value
        text = str(value).strip()
        for fmt in ("%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M",
                    "%Y-%m-%dT%H:%M:%S"):
            try:
                ts = pd.Timestamp(datetime.strptime(text, fmt))
                break
            except ValueError:
                continue
        else:
            self.fail(f"{value!r} is not a date (YYYY-MM-DD or 'YYYY-MM-DD HH:MM')", param, ctx)
        if self.inclusive_end and len(str(value).strip()) <= 10:
            ts = ts + pd.Timedelta(hours=23)
        return ts


WHEN = When()
WHEN_END = When(inclusive_end=True)


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, default=str))
