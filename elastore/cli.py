"""The ``elastore`` command line. Each group lives with the code it drives."""

from __future__ import annotations

import click

from elastore import __version__
from elastore.cliutil import ElastoreGroup, setup_logging


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


def register() -> None:
    """Attach every command group (imported late so ``--help`` stays fast)."""
    from elastore.agent.cli import agent_group
    from elastore.lab.cli import lab_group
    from elastore.lab.loadcli import load_group
    from elastore.models.cli import models
    from elastore.operator.cli import operator_group
    from elastore.predictor.cli import predict
    from elastore.sim.cli import simulate_cmd
    from elastore.traces.cli import trace

    for cmd in (trace, predict, models, simulate_cmd, lab_group, load_group, operator_group,
                agent_group):
        cli.add_command(cmd)


if __name__ == "__main__":  # pragma: no cover
    main()
