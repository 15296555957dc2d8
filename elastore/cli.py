"""The ``elastore`` command line. Each group lives with the code it drives."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from typing import Any

import click
import pandas as pd

from elastore import __version__
from elastore.errors import ElastoreError

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


def _setup_logging(verbosity: int) -> None:
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


@click.group(cls=ElastoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="elastore")
@click.option("-v", "--verbose", count=True, help="More log output (debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
def cli(verbose: int, quiet: bool) -> None:
    """elastore: scale storage clusters before demand arrives, without hurting them
    while they move data.

    \b
    Examples:
      elastore simulate                  # the main job on its built-in default
      elastore trace inspect             # summary of the built-in Wikipedia trace
      elastore trace build PAGES.csv.gz -o workload.json.gz
    """
    _setup_logging(-1 if quiet else verbose)


def main() -> None:
    register()
    cli()


def register() -> None:
    """Attach every command group (imported late so ``--help`` stays fast)."""
    from elastore.lab.cli import lab_group
    from elastore.lab.loadcli import load_group
    from elastore.models.cli import models
    from elastore.operator.cli import operator_group
    from elastore.predictor.cli import predict
    from elastore.sim.cli import simulate_cmd
    from elastore.traces.cli import trace

    for cmd in (trace, predict, models, simulate_cmd, lab_group, load_group, operator_group):
        cli.add_command(cmd)


if __name__ == "__main__":  # pragma: no cover
    main()
