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
from typing import Any

import click

from sharedstream import __version__
from sharedstream.triggerer.signals import stop_while_starting

# Command name -> ("module:attribute" of its click command, its short help). The short
# help is the first sentence of the command's own help, kept here so ``sharedstream
# --help`` lists the commands without importing them (that would load FastAPI,
# SQLAlchemy and the rest: over a second); tests/unit/test_cli_startup.py fails when
# one drifts from the command's.
COMMANDS = {
    "run": ("sharedstream.ops.run_command:run",
            "Run the triggerer on WATCHERS: Python files, module paths or folders of "
            "modules."),
    "deliver": ("sharedstream.ops.run_command:deliver",
                "Deliver persisted asset events to the [destinations], without ingesting."),
    "check": ("sharedstream.ops.run_command:check",
              "Check everything `run WATCHERS` checks before it reads a message, then exit."),
    "demo": ("sharedstream.demo.command:demo",
             "Watch the triggerer work on an in-process Kafka and SQLite: nothing to set "
             "up."),
    "config": ("sharedstream.ops.config_commands:config_group",
               "The configuration: what is in effect, and from where."),
    "db": ("sharedstream.ops.db_commands:db_group", "Database schema."),
    "state-store": ("sharedstream.ops.state_commands:state_store_group",
                    "Task and asset state stores."),
    "events": ("sharedstream.ops.events_commands:events_group",
               "Asset events persisted by the watchers."),
    "web": ("sharedstream.web.command:web",
            "Serve the console and REST API (/api/v1) over every triggerer of the "
            "database: processes, groups and lag, held messages, assets and events, "
            "state, rejections and dead letters, destinations; and, with an operate token "
            "([web] operate_tokens), the actions: retry a held message, replay dead "
            "letters, reset offsets, forget a stale triggerer, each audited."),
    "offsets": ("sharedstream.ops.offsets_commands:offsets_group",
                "Committed offsets of shared-stream consumer groups."),
    "publish-airflow": ("sharedstream.ops.airflow_commands:publish_airflow",
                        "Publish INSTANCE's asset events to TOPIC; the cursor lives in the "
                        "asset state store."),
    "dlq": ("sharedstream.ops.dlq.commands:dlq_group",
            "Dead-letter topics: inspect and replay the records the triggerer rejected."),
    "held": ("sharedstream.web.held_command:held_group",
             "Messages the live triggerers hold for redelivery."),
    "status": ("sharedstream.web.status_command:status",
               "The live triggerers, their watchers and held messages, summarised."),
    "triggerers": ("sharedstream.ops.action_commands:triggerers_group",
                   "The `sharedstream run` processes recorded in the database."),
    "audit": ("sharedstream.ops.action_commands:audit_group",
              "The audit of operator actions (console and CLI)."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use, and listed without it.

    A usage error (a bad option value, a missing argument) is one ``error:`` line that
    names the command's help, as every other bad input is, instead of click's usage
    block."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute = target[0].split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The "Commands" section as click writes it, from the static short helps, each
        shortened to the terminal's width by click as the command's own help would be."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit))
                for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _one_line(exc: click.UsageError) -> click.exceptions.Exit:
    """Print a usage error as one ``error:`` line; the exit that follows it (code 2)."""
    where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    click.echo(f"error: {exc.format_message()}{where}", err=True)
    return click.exceptions.Exit(exc.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sharedstream")
def cli() -> None:
    """sharedstream: Kafka event triggers through one shared consumer per topic set."""


def main() -> None:
    signal.signal(signal.SIGTERM, stop_while_starting)
    cli()
