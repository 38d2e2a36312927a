"""``sharedstream demo``: the live demo, nothing to set up."""

from __future__ import annotations

import sys

import click


@click.command("demo")
@click.option("--seconds", default=20.0, show_default=True, type=click.FloatRange(min=3),
              help="How long to show the live view.")
@click.option("--outage", default=4.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds of simulated database outage mid-run (0: none).")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
@click.option("--keep", is_flag=True,
              help="Keep the temporary directory (SQLite database, log) after exit, to "
                   "look closer; it is removed otherwise.")
def demo(seconds: float, outage: float, as_json: bool, keep: bool) -> None:
    """Watch the triggerer work on an in-process Kafka and SQLite: nothing to set up."""
    from sharedstream.demo.run import DemoOptions, main

    try:
        code = main(DemoOptions(seconds=seconds, outage=outage, keep=keep), as_json=as_json)
    except KeyboardInterrupt:
        click.echo("interrupted: the demo stopped before its summary", err=True)
        code = 130
    sys.exit(code)
