"""What the CLI imports before it does anything: ``--help`` lists the commands from
their static short helps, which must not drift from the commands' own."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from sharedstream.cli import COMMANDS, cli

# A fresh interpreter runs the CLI with these arguments, then prints the modules loaded.
LOADED_AFTER = """
import json, sys
from sharedstream.cli import main
sys.argv = ["sharedstream", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_after(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", LOADED_AFTER, json.dumps(args)],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stderr.splitlines()[-1]))


def real_command(name: str) -> click.Command:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return command


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_static_short_help_is_the_commands_own_at_every_width(name: str) -> None:
    real = real_command(name)
    static = click.Command(name, help=COMMANDS[name][1])
    assert not real.hidden and not real.deprecated
    for limit in range(10, 400):
        assert static.get_short_help_str(limit) == real.get_short_help_str(limit), limit


@pytest.mark.parametrize("width", [40, 80, 200])
def test_help_lists_the_commands_as_click_does_with_them_imported(width: int) -> None:
    ctx = click.Context(cli, terminal_width=width)
    static = click.HelpFormatter(width=width)
    cli.format_commands(ctx, static)
    imported = click.HelpFormatter(width=width)
    click.Group.format_commands(cli, ctx, imported)
    assert static.getvalue() == imported.getvalue()


def test_help_imports_no_command_module() -> None:
    loaded = loaded_after("--help")
    modules = {target.split(":")[0] for target, _ in COMMANDS.values()}
    assert not loaded & (modules | {"sqlalchemy", "fastapi", "rich", "confluent_kafka"})
