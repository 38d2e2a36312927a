"""``sharedstream events``: look at, follow, prune and redeliver persisted asset events.

Exit codes: 0 ok, 1 runtime failure (database), 2 usage or configuration error.

Each command imports what it uses when it runs: the module itself loads click and
``clitools`` only, so ``events list`` does not load the destinations' senders.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from sharedstream.ops.clitools import (
    EXIT_USAGE,
    CommandError,
    RenamedOption,
    command_config,
    console,
    emit_json,
    fail,
    json_line,
    open_store,
    option_value,
    stamp,
    store_command,
)

if TYPE_CHECKING:
    from rich.table import Table

    from sharedstream.delivery.undelivered import Undelivered
    from sharedstream.statestore.events import EventCount, EventRecord
    from sharedstream.statestore.store import StateStore
    from sharedstream.triggerer.config import Config

PREVIEW_CHARS = 60


def payload_preview(payload: Any, width: int = PREVIEW_CHARS) -> str:
    """The payload as compact JSON, cut to ``width`` characters with an ellipsis."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


def events_table(events: list[EventRecord], count: EventCount | None = None) -> Table:
    """The events, newest first; the title says how many match when ``count`` is given
    (not how many are shown: that is ``--limit``'s)."""
    from rich.table import Table

    shown = f"{len(events)} shown" + ("" if count is None else f" of {count}")
    table = Table(title=f"asset events: {shown} (newest first)")
    for column in ("id", "asset", "watcher", "source", "index", "created_at", "payload"):
        table.add_column(column, overflow="fold")
    for event in events:
        table.add_row(str(event.id), event.asset, event.watcher,
                      f"{event.origin.topic}[{event.origin.partition}]@{event.origin.offset}",
                      str(event.event_index), stamp(event.created_at),
                      payload_preview(event.payload))
    return table


@click.group("events")
def events_group() -> None:
    """Asset events persisted by the watchers.

    Events are idempotent per (watcher, topic id, partition, offset, index): re-reading
    offsets (see `sharedstream offsets reset`) creates events only where they were deleted.
    """


SINCE_HELP = ("Only events after ID (an event id: digits only), or created at or after "
              "TIME: ISO-8601 (naive = UTC) or a duration ago (10m, 2h, 7d).")


def parse_since(text: str | None) -> int | datetime | None:
    """``--since`` of ``events list`` and ``tail``: an event id or a time, told apart by
    form. Digits alone are an id (a cursor copied from an earlier line); no time is
    written that way, since a duration needs its unit and an ISO date its dashes."""
    if text is None:
        return None
    if text.strip().isdigit():
        return int(text)
    from sharedstream.statestore.durations import NotAnInstant, parse_instant, utcnow

    try:
        return parse_instant(text, utcnow())
    except NotAnInstant as exc:
        raise fail(f"--since: {exc}, or an event id (digits only)", EXIT_USAGE) from None
    except ValueError as exc:
        raise fail(f"--since: {exc}", EXIT_USAGE) from None


@events_group.command("list")
@click.option("--asset", "asset_name", metavar="NAME", help="Only events of this asset.")
@click.option("--watcher", metavar="W", help="Only events of this watcher.")
@click.option("--since", metavar="TIME|ID", help=SINCE_HELP)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many events.")
@store_command(json_help="Print JSON (full payloads).")
def events_list(ctx: click.Context, /, asset_name: str | None, watcher: str | None,
                since: str | None, limit: int, as_json: bool, **_: Any) -> None:
    """List asset events, newest first (the last committed first), with how many match.

    The count stops at 100,000 ("more than 100,000"), so that it costs the same on any
    table; --json gives it as "total", with "total_exact" false when it stopped.
    """
    from sharedstream.statestore.events import count_events, event_filters, page_events

    start = parse_since(since)
    engine = open_store(ctx).engine
    where = event_filters(asset_name=asset_name, watcher=watcher,
                          since=start if isinstance(start, datetime) else None,
                          after_id=start if isinstance(start, int) else None)
    with engine.connect() as connection:
        count = count_events(connection, where)
        events = page_events(connection, where, limit,
                             few=watcher is not None and asset_name is None and count.exact)
    if as_json:
        emit_json({"items": [event.as_json() for event in events], "total": count.total,
                   "total_exact": count.exact, "limit": limit})
    else:
        console.print(events_table(events, count))


@events_group.command("clean")
@click.option("--older-than", required=True, metavar="DURATION",
              help="Delete events created longer ago than this (e.g. 30d, 12h).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted.")
@click.option("--batch-size", type=click.IntRange(min=0),
              help="Override [state_store] state_cleanup_batch_size (0 = one statement).")
@store_command()
def events_clean(ctx: click.Context, /, older_than: str, dry_run: bool,
                 batch_size: int | None, as_json: bool, **_: Any) -> None:
    """Delete asset events older than --older-than, one transaction per batch.

    Deleted events are created again if their offsets are ever re-read (after
    `sharedstream offsets reset`); that is how to reprocess deliberately.
    """
    from dataclasses import asdict

    from sharedstream.statestore.durations import parse_duration
    from sharedstream.statestore.events import clean_events

    age = option_value("--older-than", parse_duration, older_than)
    store = open_store(ctx)
    size = store.settings.state_cleanup_batch_size if batch_size is None else batch_size
    report = clean_events(store.engine, now=store.clock(), older_than=age, batch_size=size,
                          dry_run=dry_run)
    if as_json:
        emit_json(asdict(report))
    else:
        verb = "would delete" if dry_run else "deleted"
        console.print(f"{verb} {report.rows} asset events older than {older_than} in "
                      f"{report.batches} batches ({report.seconds:.3f}s)")


def event_line(event: EventRecord) -> str:
    """One event per line, for ``events tail``."""
    o = event.origin
    return (f"{event.id}  {stamp(event.created_at)}  {event.asset}  "
            f"{event.watcher}  {o.topic}[{o.partition}]@{o.offset}/{event.event_index}  "
            f"{payload_preview(event.payload)}")


@events_group.command("tail")
@click.option("--asset", "asset_name", metavar="NAME", help="Only events of this asset.")
@click.option("--limit", "-n", "--lines", "limit", cls=RenamedOption,
              type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="How many of the newest events to print first (without --since).")
@click.option("--since", metavar="TIME|ID", help=SINCE_HELP + " Printed in commit order.")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing new events as they commit (Ctrl-C stops).")
@store_command(json_help="Print one JSON object per line.")
def events_tail(ctx: click.Context, /, asset_name: str | None, limit: int, since: str | None,
                follow: bool, as_json: bool, **_: Any) -> None:
    """Print the newest asset events in commit order; --follow for new ones as they commit.

    Each event's id is a cursor: `--since ID` resumes right after it, and misses nothing
    even with several triggerers writing. `--since TIME` starts at the first event
    created then; an older event committed later is not printed.
    """
    from sharedstream.delivery.follow import follow_sync
    from sharedstream.statestore.events import cursor_before, list_events, newest_id

    start = parse_since(since)
    store = open_store(ctx)

    def show(event: EventRecord) -> None:
        if isinstance(start, datetime) and event.created_at < start:
            return
        click.echo(json_line(event.as_json()) if as_json else event_line(event))

    if isinstance(start, datetime):
        with store.engine.connect() as connection:
            cursor = cursor_before(connection, start)
    elif start is not None:
        cursor = start
    else:
        newest = list_events(store.engine, asset_name=asset_name, limit=limit) if limit else []
        newest.sort(key=lambda e: e.id)
        for event in newest:
            show(event)
        if not follow:
            return
        if newest:
            cursor = newest[-1].id
        else:
            with store.engine.connect() as connection:
                cursor = newest_id(connection)
    try:
        for event in follow_sync(asset_name, cursor, engine=store.engine, forever=follow):
            show(event)
    except KeyboardInterrupt:
        pass


@events_group.command("undelivered")
@click.option("--destination", metavar="ID", help="Only those of this destination.")
@click.option("--retry", is_flag=True,
              help="Send them again; each one the destination takes is no longer listed.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="At most this many events.")
@store_command()
def events_undelivered(ctx: click.Context, /, destination: str | None, retry: bool, limit: int,
                       as_json: bool, **_: Any) -> None:
    """List the events a destination refused for good, with the reason (oldest first).

    With --retry, each is sent again (to the destinations of the config file): taken, it
    leaves the list; refused again, its reason and attempt count are updated; a
    destination that is down leaves its events listed (exit 1).
    """
    from rich.table import Table

    from sharedstream.delivery import undelivered

    store = open_store(ctx)
    rows = undelivered.listed(store.engine, destination, limit)
    outcome: dict[tuple[str, int], str] = {}
    if retry and rows:
        config = command_config(ctx)
        import asyncio

        outcome = asyncio.run(redeliver(store, config, rows))
    if as_json:
        emit_json([{"destination": r.destination, "event": r.event.as_json(),
                    "reason": r.reason, "attempts": r.attempts, "since": r.created_at,
                    **({"retry": outcome[(r.destination, r.event.id)]} if retry else {})}
                   for r in rows])
    else:
        table = Table(title=f"undelivered events ({len(rows)})")
        for column in ("destination", "id", "asset", "reason", "attempts", "since",
                       *(("retry",) if retry else ())):
            table.add_column(column, overflow="fold")
        for r in rows:
            table.add_row(r.destination, str(r.event.id), r.event.asset, r.reason,
                          str(r.attempts), stamp(r.created_at),
                          *((outcome[(r.destination, r.event.id)],) if retry else ()))
        console.print(table)
    if any(result.startswith("still down") for result in outcome.values()):
        raise fail("a destination is down: its events stay listed; retry later", 1)


async def redeliver(store: StateStore, config: Config, rows: list[Undelivered]
                    ) -> dict[tuple[str, int], str]:
    """Send ``rows`` again, per destination; what happened to each."""
    from sharedstream.delivery import undelivered
    from sharedstream.delivery.errors import PermanentDeliveryError
    from sharedstream.delivery.service import make_sender
    from sharedstream.serde.registries import configure_schema_registries
    from sharedstream.statestore.types import utcnow

    configure_schema_registries(config.schema_registries)  # the Kafka destination's formats
    outcome: dict[tuple[str, int], str] = {}
    by_destination: dict[str, list[Undelivered]] = {}
    for row in rows:
        by_destination.setdefault(row.destination, []).append(row)
    for dest_id, items in by_destination.items():
        dest = config.destinations.get(dest_id)
        if dest is None:
            raise CommandError(f"destination {dest_id!r} is not in the config "
                               "([destinations.<id>]): cannot send its events")
        sender = make_sender(dest, config.airflow, config.connections)
        try:
            results = await sender.send([r.event for r in items], maybe_sent=True)
        finally:
            await sender.aclose()
        taken = []
        refused = []
        for row, result in zip(items, results, strict=False):
            key = (dest_id, row.event.id)
            if result is None:
                taken.append(row.event.id)
                outcome[key] = "delivered"
            elif isinstance(result, PermanentDeliveryError):
                refused.append((row.event.id, str(result)))
                outcome[key] = f"refused again: {result}"
            else:
                outcome[key] = f"still down: {result}"
        for row in items[len(results):]:
            outcome[(dest_id, row.event.id)] = "still down: not tried"
        undelivered.forget(store.engine, dest_id, taken)
        undelivered.record(store.engine, dest_id, refused, utcnow())
    return outcome
