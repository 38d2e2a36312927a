"""The ``sharedstream`` command line: parse, call the rooms, print.

Exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error.
"""

from __future__ import annotations

import logging
import sys

import click

from sharedstream import __version__
from sharedstream.ops.airflow_commands import publish_airflow
from sharedstream.ops.dlq_commands import dlq_group
from sharedstream.ops.events_commands import events_group
from sharedstream.ops.offsets_commands import offsets_group
from sharedstream.ops.state_commands import db_group, state_store_group

EXIT_USAGE = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sharedstream")
def cli() -> None:
    """sharedstream: Kafka event triggers through one shared consumer per topic set."""


@cli.command("run")
@click.argument("watchers", metavar="WATCHERS")
@click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="sharedstream.toml (default: $SHAREDSTREAM_CONFIG or ./sharedstream.toml).")
@click.option("--takeover", is_flag=True,
              help="Record this process's watcher set for its groups even if it differs.")
@click.option("--upgrade", is_flag=True, help="Migrate an older database schema first.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def run(watchers: str, config_path: str | None, takeover: bool, upgrade: bool,
        log_level: str) -> None:
    """Run the triggerer on WATCHERS (a Python file or module path)."""
    from sharedstream.triggerer.config import ConfigError, load_config
    from sharedstream.triggerer.plan import StartupError
    from sharedstream.triggerer.process import RunOptions, run_triggerer

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(config_path)
        code = run_triggerer(config, watchers, RunOptions(takeover=takeover, upgrade=upgrade))
    except (ConfigError, StartupError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(code)


@cli.command("demo")
@click.option("--seconds", default=20.0, show_default=True, type=click.FloatRange(min=3),
              help="How long to show the live view.")
@click.option("--outage", default=4.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds of simulated database outage mid-run (0: none).")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def demo(seconds: float, outage: float, as_json: bool) -> None:
    """Watch the triggerer work on an in-process Kafka and SQLite: nothing to set up."""
    from sharedstream.demo.run import DemoOptions, main

    try:
        code = main(DemoOptions(seconds=seconds, outage=outage), as_json=as_json)
    except KeyboardInterrupt:
        click.echo("interrupted: the demo stopped before its summary", err=True)
        code = 130
    sys.exit(code)


cli.add_command(db_group)
cli.add_command(state_store_group)
cli.add_command(events_group)
cli.add_command(offsets_group)
cli.add_command(publish_airflow)
cli.add_command(dlq_group)


def main() -> None:
    cli()
