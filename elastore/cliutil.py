"""What every ``elastore`` command group shares: one-line errors (a missing optional extra's
too), log format, date options, JSON output. The groups import from here, never from
:mod:`elastore.cli` (which imports them)."""

from __future__ import annotations

import importlib.util
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


#: The top-level modules of the third-party distributions that the optional extras of
#: pyproject.toml install, each with the extras that install it; where a command's group names
#: none of them (:class:`ElastoreGroup`'s ``extra``), the first is the one to install.
#: tests/test_cli_extras.py keeps it in step with pyproject.toml.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "kopf": ("operator",),
    "kubernetes": ("operator", "agent"),
    "prometheus_api_client": ("operator",),
    "yaml": ("operator",),  # PyYAML
    "prometheus_client": ("operator", "agent", "lab"),
    "pyroute2": ("agent", "lab"),
    "cassandra": ("lab",),  # cassandra-driver
    "statsforecast": ("forecast",),
    # named by no extra, but installed with kubernetes and prometheus-api-client (their
    # requirements); elastore imports them itself
    "requests": ("operator", "agent"),
    "urllib3": ("operator", "agent"),
}


def command_path(ctx: click.Context) -> str:
    """``elastore operator run``, whatever name the program was run by (``python -m
    elastore``, a test's runner)."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["elastore", *reversed(names)])


def missing_extra(command: str, exc: ModuleNotFoundError,
                  prefer: str | None = None) -> UserError | None:
    """The one line for ``command`` failing to import a module that an optional extra
    installs: which extra to install (``prefer`` where the module is in several and it is
    one of them). None for any other module: a broken installation, whose traceback is the
    useful report."""
    name = exc.name or ""
    extras = EXTRA_MODULES.get(name.partition(".")[0])
    if not extras:
        return None
    extra = prefer if prefer in extras else extras[0]
    return UserError(f"{command} needs the {extra!r} extra: pip install 'elastore[{extra}]' "
                     f"(missing module: {name})")


def need_extra(extra: str) -> None:
    """Check now that every module ``extra`` installs is there (found, not imported), for a
    command that would otherwise find one missing only at its first use, minutes into its run
    (the operator's first tick, a forecast method after the others): a missing one raises the
    :class:`ModuleNotFoundError` that :class:`ElastoreGroup` turns into one line."""
    for name, extras in EXTRA_MODULES.items():
        if extra in extras and importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


class ElastoreGroup(click.Group):
    """Turns :class:`ElastoreError` into one clear line instead of a traceback, and a
    missing module of an optional extra into the line that names the extra
    (:func:`missing_extra`). ``extra``: the extra this group's commands need, named where a
    module is in several (``kubernetes``: the operator's and the agent's)."""

    def __init__(self, *args: Any, extra: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.extra = extra

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ElastoreError as exc:
            raise UserError(str(exc)) from exc
        except ModuleNotFoundError as exc:
            command = " ".join(filter(None, (command_path(ctx), ctx.invoked_subcommand)))
            err = missing_extra(command, exc, self.extra)
            if err is None:
                raise
            raise err from None


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
