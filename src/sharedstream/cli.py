"""The ``sharedstream`` command line: parse, call the rooms, print."""

from __future__ import annotations

import click

from sharedstream import __version__
from sharedstream.producer.offsets_commands import offsets_group
from sharedstream.statestore.commands import db_group, state_store_group
from sharedstream.triggerer.events_commands import events_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sharedstream")
def cli() -> None:
    """sharedstream: Kafka event triggers through one shared consumer per topic set."""


cli.add_command(db_group)
cli.add_command(state_store_group)
cli.add_command(events_group)
cli.add_command(offsets_group)


def main() -> None:
    cli()
