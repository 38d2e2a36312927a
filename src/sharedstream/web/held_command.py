"""``sharedstream held retry``: the console's "retry now" action as a command.

It lives in the console's room, not in ``ops/``, because it finds the triggerer that
holds the message the console's way: from the live triggerers' ``/status``
(``web/actions.py``), so it needs the ``web`` extra. The request itself is a
``held_retry`` row the holder takes at its next heartbeat (``ops/actions.py``), and the
command writes its audit row as ``cli:<user>``. If the holder dies after taking the
request, the message goes out after its normal backoff instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from sharedstream.ops import actions
from sharedstream.ops.clitools import command_config, console, emit_json, open_store, store_command
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.config import parse_networks
from sharedstream.web.actions import held_by
from sharedstream.web.settings import ConsoleSettings
from sharedstream.web.sources import Sources


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
    config = command_config(ctx)
    sources = Sources(ConsoleSettings(connections=config.connections,
                                  status_networks=parse_networks(config.web.status_networks)),
                      store)
    try:
        return await held_by(sources, message)
    finally:
        sources.close()
