"""``sharedstream held retry``, ``triggerers forget`` and ``audit list``: the console's
actions that had no command yet, and the audit of every action (``ops/actions.py``).

``dlq replay`` and ``offsets reset`` are the commands of the other two actions. Each
command here writes its audit row as ``cli:<user>``. ``held retry`` reads who holds the
message from the live triggerers' ``/status``, the console's way, so it needs the
``web`` extra.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click
from rich.table import Table

from sharedstream.ops import actions
from sharedstream.ops.clitools import (
    command_config,
    console,
    emit_json,
    open_store,
    stamp,
    store_command,
)
from sharedstream.statestore.durations import parse_instant
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow


@click.group("held")
def held_group() -> None:
    """Messages the live triggerers hold for redelivery."""


@held_group.command("retry")
@click.option("--group", "consumer_group", required=True, metavar="GROUP",
              help="The consumer group holding the message.")
@click.option("--topic", required=True, metavar="T", help="The message's topic.")
@click.option("--partition", required=True, type=click.IntRange(min=0), metavar="P",
              help="The message's partition.")
@click.option("--offset", required=True, type=click.IntRange(min=0), metavar="O",
              help="The message's offset (the console's held list shows it).")
@store_command()
def held_retry(ctx: click.Context, /, consumer_group: str, topic: str, partition: int,
               offset: int, as_json: bool, **_: Any) -> None:
    """Hand a held message out again now instead of after its backoff: the triggerer
    holding it takes the request at its next heartbeat (within 5 s). Refused when no
    live triggerer holds it."""
    store = open_store(ctx)
    message = actions.HeldMessage(consumer_group, topic, partition, offset)
    holders = asyncio.run(_holders(ctx, store, message))
    line = actions.audited(store, actions.cli_actor(), actions.HELD_RETRY, str(message),
                           lambda: actions.request_retry(store, message, holders))
    if as_json:
        emit_json({"message": str(message), "triggerers": holders, "result": line})
    else:
        console.print(line, soft_wrap=True)


async def _holders(ctx: click.Context, store: StateStore,
                   message: actions.HeldMessage) -> list[str]:
    """Who holds ``message``, from the live triggerers' ``/status`` (as the console reads)."""
    from sharedstream.triggerer.config import parse_networks
    from sharedstream.web.actions import held_by
    from sharedstream.web.settings import WebSettings
    from sharedstream.web.sources import Sources

    config = command_config(ctx)
    sources = Sources(WebSettings(connections=config.connections,
                                  status_networks=parse_networks(config.web.status_networks)),
                      store)
    try:
        return await held_by(sources, message)
    finally:
        sources.close()


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
    try:
        after = None if since is None else parse_instant(since, utcnow())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    store = open_store(ctx)
    rows, total = actions.audit_list(store, limit=limit, since=after)
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
