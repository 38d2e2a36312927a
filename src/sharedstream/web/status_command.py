"""``sharedstream status``: the live triggerers, their groups and watchers, summarised.

It reads what the console reads (the ``triggerer_process`` and ``stream_group`` rows and
each live triggerer's ``/status``), so it lives in the console's room and needs the
``web`` extra. A deployment may run 10,000 watchers: the watchers are counted by state
and the first few named, with where the whole list is (``--all-watchers``, the console's
watchers page, ``GET /api/v1/watchers``), never printed whole unless asked.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import click

from sharedstream.core.names import SHOWN, summarise
from sharedstream.ops.clitools import command_config, console, emit_json, open_store, store_command
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.config import parse_networks
from sharedstream.web.settings import ConsoleSettings
from sharedstream.web.sources import Sources

WHERE_ALL = ("`sharedstream status --all-watchers` lists them all; the console's /watchers page "
             "and GET /api/v1/watchers page and search them")
STATES = ("subscribed", "not_subscribed")


def watcher_state(row: dict[str, Any]) -> str:
    """``subscribed``: a live triggerer runs it in its group now; ``not_subscribed``:
    recorded for the group, but no live triggerer that answers runs it."""
    return "subscribed" if row["present"] else "not_subscribed"


def summary(triggerers: list[dict[str, Any]], watchers: list[dict[str, Any]],
            held: int) -> dict[str, Any]:
    """Counts and the first few names of each kind (``--json`` prints this)."""
    states = Counter(watcher_state(w) for w in watchers)
    names = sorted({w["name"] for w in watchers})
    quiet = sorted({w["name"] for w in watchers if not w["present"]})
    return {
        "triggerers": {"alive": sum(1 for t in triggerers if t["alive"]),
                       "stale": sum(1 for t in triggerers if not t["alive"])},
        "groups": len({w["consumer_group"] for w in watchers}),
        "watchers": {"total": len(watchers), "names": len(names),
                     "by_state": {s: states[s] for s in STATES},
                     "holding": sum(1 for w in watchers if w["held"]),
                     "first": names[:SHOWN], "not_subscribed_first": quiet[:SHOWN],
                     "all": WHERE_ALL},
        "held_messages": held}


def summary_lines(found: dict[str, Any], watchers: list[dict[str, Any]]) -> list[str]:
    t, w = found["triggerers"], found["watchers"]
    states = w["by_state"]
    lines = [f"triggerers: {t['alive']:,} alive, {t['stale']:,} stale",
             f"watchers: {w['total']:,} in {found['groups']:,} group(s): "
             f"{states['subscribed']:,} subscribed, {states['not_subscribed']:,} not "
             f"subscribed, {w['holding']:,} holding messages",
             "  " + summarise({x["name"] for x in watchers}, "names", where=WHERE_ALL)]
    if states["not_subscribed"]:
        lines.append("  not subscribed: " + summarise(
            {x["name"] for x in watchers if not x["present"]}, "names", where=WHERE_ALL))
    lines.append(f"held messages: {found['held_messages']:,}")
    return lines


@click.command("status")
@click.option("--all-watchers", "every_watcher", is_flag=True,
              help="List every watcher (name, group, state, held), not only the summary.")
@store_command()
def status(ctx: click.Context, /, every_watcher: bool, as_json: bool, **_: Any) -> None:
    """The live triggerers, their watchers and held messages, summarised.

    Watchers are counted by state (subscribed in a live triggerer, or not) and the
    first few named, with where to see them all; --all-watchers lists every one."""
    store = open_store(ctx)
    triggerers, watchers, held = asyncio.run(_read(ctx, store))
    found = summary(triggerers, watchers, held)
    if as_json:
        emit_json({**found, "watcher_list": watchers} if every_watcher else found)
        return
    for line in summary_lines(found, watchers):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if every_watcher and watchers:  # tab-separated, for cut and grep
        click.echo("\n".join(f"{w['name']}\t{w['consumer_group']}\t{watcher_state(w)}\t"
                             f"held {w['held']}" for w in watchers))


def command_sources(ctx: click.Context, store: StateStore) -> Sources:
    """The console's reads for a command (``status``, ``held retry``): the connections
    and ``[web] status_networks`` of the command's configuration. Close it after use."""
    config = command_config(ctx)
    return Sources(ConsoleSettings(connections=config.connections,
                               status_networks=parse_networks(config.web.status_networks)),
                   store)


async def _read(ctx: click.Context, store: StateStore
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    sources = command_sources(ctx, store)
    try:
        triggerers = await sources.triggerers()
        rows = await sources.watcher_list()
        watchers = [{k: w[k] for k in ("name", "consumer_group", "present", "held")}
                    for w in rows]
        return triggerers, watchers, len(await sources.held())
    finally:
        sources.close()
