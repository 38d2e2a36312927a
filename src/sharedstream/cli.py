"""The ``sharedstream`` command line: the click root, wiring every room's commands.

Exit codes (every command): 0 ok, 1 runtime failure, 2 usage or configuration error.
"""

from __future__ import annotations

import click

from sharedstream import __version__
from sharedstream.demo.command import demo
from sharedstream.ops.airflow_commands import publish_airflow
from sharedstream.ops.db_commands import db_group
from sharedstream.ops.dlq_commands import dlq_group
from sharedstream.ops.events_commands import events_group
from sharedstream.ops.offsets_commands import offsets_group
from sharedstream.ops.run_command import deliver, run
from sharedstream.ops.state_commands import state_store_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sharedstream")
def cli() -> None:
    """sharedstream: Kafka event triggers through one shared consumer per topic set."""


cli.add_command(run)
cli.add_command(deliver)
cli.add_command(demo)
cli.add_command(db_group)
cli.add_command(state_store_group)
cli.add_command(events_group)
cli.add_command(offsets_group)
cli.add_command(publish_airflow)
cli.add_command(dlq_group)


def main() -> None:
    cli()
