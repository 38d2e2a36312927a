"""What the CLI imports before it does anything: ``--help`` lists the commands from
their static short helps, which must not drift from the commands' own; ``run``'s
schema check knows the packaged revisions without Alembic, which must not drift from
the migrations folder; and it loads only the SQL dialect in use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from sharedstream.cli import COMMANDS, cli
from sharedstream.statestore import StateStore
from sharedstream.statestore.migrate import MIGRATIONS_DIR, REVISIONS, head_revision

# Fresh interpreters: the CLI run with the given arguments; the schema check of ``run``
# (and ``deliver``) on the database of the given config, after importing run's modules.
# Each then prints the modules it loaded.
CLI = """
import json, sys
from sharedstream.cli import main
sys.argv = ["sharedstream", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
"""
SCHEMA_CHECK = """
import sys
from sharedstream.ops.run_command import run
from sharedstream.triggerer.config import load_config
from sharedstream.triggerer.embedded import run_triggerer
from sharedstream.triggerer.startup import connect
connect(load_config(sys.argv[1]), upgrade=False).close()
"""
PRINT_MODULES = "\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"


def loaded_after(code: str, *args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import json\n{code}{PRINT_MODULES}", *args],
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
    loaded = loaded_after(CLI, "--help")
    modules = {target.split(":")[0] for target, _ in COMMANDS.values()}
    assert not loaded & (modules | {"sqlalchemy", "fastapi", "rich", "confluent_kafka"})


def test_the_packaged_revisions_are_the_migrations_folders() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    scripts = ScriptDirectory.from_config(config)
    shipped = tuple(script.revision for script in reversed(list(scripts.walk_revisions())))
    assert shipped == REVISIONS
    assert head_revision() == scripts.get_current_head()


def test_the_schema_check_of_a_database_at_head_imports_only_what_it_uses(
        tmp_path: Path) -> None:
    """No Alembic (nothing to migrate), no rich (no table to print), and of SQLAlchemy's
    dialects only SQLite's."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with StateStore.from_url(url) as store:
        store.upgrade()
    config = tmp_path / "sharedstream.toml"
    config.write_text(f'[database]\nurl = "{url}"\n')
    loaded = loaded_after(SCHEMA_CHECK, str(config))
    assert not {name.split(".")[0] for name in loaded} & {"alembic", "mako", "pygments", "rich"}
    assert not loaded & {"sqlalchemy.dialects.postgresql", "sqlalchemy.dialects.mysql"}
