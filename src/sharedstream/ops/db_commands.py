"""``sharedstream db``: the database schema."""

from __future__ import annotations

import click
from sqlalchemy.engine import make_url

from sharedstream.ops.clitools import console, emit_json, open_store, store_command


@click.group("db")
def db_group() -> None:
    """Database schema."""


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@store_command()
def db_upgrade(ctx: click.Context, /, config: str | None, database_url: str | None,
               revision: str, as_json: bool) -> None:
    """Migrate the database to the newest schema (or --revision)."""
    store = open_store(ctx)
    before = store.revision()
    store.upgrade(revision)
    after = store.revision()
    target = make_url(str(store.engine.url)).render_as_string(hide_password=True)
    if as_json:
        emit_json({"database": target, "from": before, "to": after})
    else:
        console.print(f"{target}: {before or 'empty'} -> {after}")
