"""``sharedstream triggerers forget`` and ``audit list``: a console action that had no
command yet, and the audit of every action (``ops/actions.py``, loaded when a command
runs: it brings the Kafka tooling of the other actions, which ``audit list`` needs not).

``dlq replay`` and ``offsets reset`` are the commands of two other actions, and
``held retry`` lives with the console (``web/held_command.py``) because it reads who
holds a message the console's way. Each command here writes its audit row as
``cli:<user>``.
"""

from __future__ import annotations

from typing import Any

import click

from sharedstream.ops.clitools import (
    console,
    emit_json,
    open_store,
    option_value,
    stamp,
    store_command,
)
from sharedstream.statestore.durations import parse_instant, utcnow


@click.group("triggerers")
def triggerers_group() -> None:
    """The `sharedstream run` processes recorded in the database."""


@triggerers_group.command("forget")
@click.argument("triggerer_id", metavar="ID")
@store_command()
def triggerers_forget(ctx: click.Context, /, triggerer_id: str, as_json: bool,
                      **_: Any) -> None:
    """Remove the row of a triggerer that is gone (killed: a clean stop removes its own),
    as listed stale by the console. Refused for a live one (seen within 30 s)."""
    from sharedstream.ops import actions

    store = open_store(ctx)
    line = actions.audited(store, actions.cli_actor(), actions.TRIGGERER_FORGET, triggerer_id,
                           lambda: actions.forget_triggerer(store, triggerer_id))
    if as_json:
        emit_json({"triggerer": triggerer_id, "result": line})
    else:
        console.print(line, soft_wrap=True)


@click.group("audit")
def audit_group() -> None:
    """The audit of operator actions (console and CLI)."""


@audit_group.command("list")
@click.option("--since", metavar="TIME",
              help="Only actions at or after TIME (ISO-8601, naive = UTC; or a duration "
                   "ago such as 2h).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many actions.")
@store_command()
def audit_list(ctx: click.Context, /, since: str | None, limit: int, as_json: bool,
               **_: Any) -> None:
    """Every action done or refused, newest first: when, who (console:<token name> or
    cli:<user>), what, on what, and the result."""
    from rich.table import Table

    from sharedstream.ops.audit import audit_list as listed

    after = None if since is None else option_value(
        "--since", lambda text: parse_instant(text, utcnow()), since)
    store = open_store(ctx)
    rows, total = listed(store, limit=limit, since=after)
    if as_json:
        emit_json({"items": rows, "total": total})
        return
    table = Table(title=f"audit: {len(rows)} of {total}")
    for column in ("when", "who", "action", "on", "ok", "result"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(stamp(r["at"]), r["actor"], r["action"], r["target"],
                      "yes" if r["ok"] else "no", r["result"])
    console.print(table)
