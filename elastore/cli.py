"""The ``elastore`` command line. Each group lives with the code it drives."""

from __future__ import annotations

import click

from elastore import __version__
from elastore.cliutil import ElastoreGroup, UserError, setup_logging


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
    setup_logging(-1 if quiet else verbose)


def main() -> None:
    register()
    cli()


#: what ``elastore lab`` and ``elastore load`` say where the package has no lab
NO_LAB = ("the storage lab is not part of this installation (the operator's image leaves it "
          "out): run it from a source checkout with pip install -e '.[lab]'")


def _no_lab(name: str) -> click.Command:
    """A stand-in for the lab's group ``name``: any invocation (``--help`` too) fails with
    :data:`NO_LAB` on one line."""

    def fail(args: tuple[str, ...]) -> None:
        raise UserError(f"elastore {name}: {NO_LAB}")

    return click.Command(
        name, callback=fail, add_help_option=False,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True},
        short_help="Not in this installation: the storage lab (left out of the image).")


def _lab_groups() -> tuple[click.Command, click.Command]:
    """``elastore lab`` and ``elastore load``, or their stand-ins where the package has no
    :mod:`elastore.lab` (the operator's image: .dockerignore leaves it out). A module the
    lab itself imports that is missing (a third-party dependency) is an error, as ever."""
    try:
        from elastore.lab.cli import lab_group
        from elastore.lab.loadcli import load_group
    except ModuleNotFoundError as exc:
        if exc.name != "elastore.lab":
            raise
        return _no_lab("lab"), _no_lab("load")
    return lab_group, load_group


def register() -> None:
    """Attach every command group (imported late so ``--help`` stays fast)."""
    from elastore.agent.cli import agent_group
    from elastore.models.cli import models
    from elastore.operator.cli import operator_group
    from elastore.predictor.cli import predict
    from elastore.sim.cli import simulate_cmd
    from elastore.traces.cli import trace

    lab_group, load_group = _lab_groups()
    for cmd in (trace, predict, models, simulate_cmd, lab_group, load_group, operator_group,
                agent_group):
        cli.add_command(cmd)


if __name__ == "__main__":  # pragma: no cover
    main()
