"""``sharedstream db``: the database schema."""

from __future__ import annotations

import click
from sqlalchemy.engine import make_url

from sharedstream.ops.clitools import console, emit_json, open_store, store_command
from sharedstream.statestore.migrate import check_revision, head_revision, is_known_revision


@click.group("db")
def db_group() -> None:
    """Database schema."""


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True,
              help="The schema revision to migrate to (see `sharedstream db current`).")
@store_command()
def db_upgrade(ctx: click.Context, /, config: str | None, database_url: str | None,
               revision: str, as_json: bool) -> None:
    """Migrate the database to the newest schema (or --revision)."""
    check_revision(revision)
    store = open_store(ctx, schema=False)
    before = store.revision()
    store.upgrade(revision)
    after = store.revision()
    target = make_url(str(store.engine.url)).render_as_string(hide_password=True)
    if as_json:
        emit_json({"database": target, "from": before, "to": after})
    else:
        console.print(f"{target}: {before or 'empty'} -> {after}")


@db_group.command("current")
@store_command()
def db_current(ctx: click.Context, /, as_json: bool, **_: object) -> None:
    """Show the database's schema revision next to the one this version needs.

    Exits 0 when they match, 1 when the database needs `sharedstream db upgrade` (or was
    migrated by a newer version), so a deployment script can check before starting.
    """
    store = open_store(ctx, schema=False)
    current, head = store.revision(), head_revision()
    target = make_url(str(store.engine.url)).render_as_string(hide_password=True)
    if current == head:
        state = "up to date"
    elif current is None:
        state = "no schema: run `sharedstream db upgrade`"
    elif is_known_revision(current):
        state = "behind: run `sharedstream db upgrade`"
    else:
        state = "migrated by a newer sharedstream: run that version"
    if as_json:
        emit_json({"database": target, "current": current, "head": head,
                   "up_to_date": current == head})
    else:
        console.print(f"{target}: {current or 'empty'} (this version needs {head}): {state}")
    if current != head:
        ctx.exit(1)
