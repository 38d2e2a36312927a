"""The ``sharedstream`` command line: the click root, wiring every room's commands.

Exit codes (every command): 0 ok, 1 runtime failure, 2 usage or configuration error.

Commands load when they are used (a ``LazyGroup``), so ``main`` installs its SIGTERM
handler before anything heavy is imported: a SIGTERM that reaches a process still
starting (a rolling restart catching a fresh pod) is a clean exit 0, not a kill by the
signal. ``sharedstream run`` replaces the handler with its own graceful stop.
"""

from __future__ import annotations

import importlib
import signal

import click

from sharedstream import __version__
from sharedstream.triggerer.signals import stop_while_starting

# Command name -> "module:attribute" of its click command.
COMMANDS = {
    "run": "sharedstream.ops.run_command:run",
    "deliver": "sharedstream.ops.run_command:deliver",
    "check": "sharedstream.ops.run_command:check",
    "demo": "sharedstream.demo.command:demo",
    "config": "sharedstream.ops.config_commands:config_group",
    "db": "sharedstream.ops.db_commands:db_group",
    "state-store": "sharedstream.ops.state_commands:state_store_group",
    "events": "sharedstream.ops.events_commands:events_group",
    "web": "sharedstream.web.command:web",
    "offsets": "sharedstream.ops.offsets_commands:offsets_group",
    "publish-airflow": "sharedstream.ops.airflow_commands:publish_airflow",
    "dlq": "sharedstream.ops.dlq_commands:dlq_group",
    "held": "sharedstream.web.held_command:held_group",
    "triggerers": "sharedstream.ops.action_commands:triggerers_group",
    "audit": "sharedstream.ops.action_commands:audit_group",
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sharedstream")
def cli() -> None:
    """sharedstream: Kafka event triggers through one shared consumer per topic set."""


def main() -> None:
    signal.signal(signal.SIGTERM, stop_while_starting)
    cli()
